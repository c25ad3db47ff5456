#!/usr/bin/python3
"""Counts forward FLOPs, activation elements and parameters of torchvision models at 224x224:
the D (derived) rows of data/cloud/workloads.csv. Convolutions and linear layers count 2 FLOPs
per multiply-add; activations are the outputs of every leaf module (what autograd keeps for
backward, before in-place sharing). Run with Debian's python3-torch and python3-torchvision."""
import sys
import torch
import torchvision


def count(model, shape):
    flops, acts = 0, 0

    def hook(module, _inputs, out):
        nonlocal flops, acts
        if isinstance(out, torch.Tensor):
            acts += out.numel()
        if isinstance(module, torch.nn.Conv2d):
            per_out = module.kernel_size[0] * module.kernel_size[1] * module.in_channels // module.groups
            flops += 2 * per_out * out.numel()
        elif isinstance(module, torch.nn.Linear):
            flops += 2 * module.in_features * out.numel()

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, *shape))
    for h in handles:
        h.remove()
    return flops, acts, sum(p.numel() for p in model.parameters())


def main():
    names = sys.argv[1:] or ["resnet50", "resnet18", "resnet101", "efficientnet_b0", "mobilenet_v2", "vgg16"]
    print("name,fwd_gflops,activations_m,params_m")
    for name in names:
        f, a, p = count(getattr(torchvision.models, name)(), (3, 224, 224))
        print(f"{name},{f / 1e9:.3f},{a / 1e6:.3f},{p / 1e6:.3f}")


if __name__ == "__main__":
    main()
