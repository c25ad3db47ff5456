#!/usr/bin/env python3
"""The PyTorch side of bench/gpu/run.sh: torchvision ResNet-50 training on synthetic 224x224
images, eager mode with AMP (bf16 autocast, or fp16 autocast with torch.amp.GradScaler), optionally
torch.compile'd; batches come from pinned host memory with non-blocking copies, as strato's loader
feeds the GPU. Prints one JSON line: images/s (median over windows after warm-up) and peak GPU
memory. `--device cpu --steps 3 --batch 2` checks the script on a machine without a GPU."""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--window", type=int, default=15)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--channels-last", action="store_true")
    a = p.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    net = torchvision.models.resnet50(num_classes=1000).to(dev)
    if a.channels_last:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
    model = torch.compile(net) if a.compile else net
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.precision]
    use_scaler = a.precision == "fp16" and dev.type == "cuda"
    scaler = (torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()) \
        if use_scaler else None
    # A pool of host batches (uint8 pixels normalised on the host, as strato's loader does).
    pool = []
    for i in range(4):
        x = torch.rand(a.batch, 3, 224, 224)
        y = torch.randint(0, 1000, (a.batch,))
        if dev.type == "cuda":
            x, y = x.pin_memory(), y.pin_memory()
        pool.append((x, y))
    rates, seen = [], 0
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = None
    for step in range(a.steps):
        if step == a.warmup:
            sync()
            t0, seen = time.perf_counter(), 0
        x, y = pool[step % len(pool)]
        x = x.to(dev, non_blocking=True)
        y = y.to(dev, non_blocking=True)
        if a.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=dtype, enabled=a.precision != "fp32"):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        seen += a.batch
        if t0 is not None and (step + 1 - a.warmup) % a.window == 0:
            sync()
            now = time.perf_counter()
            rates.append(seen / (now - t0))
            t0, seen = now, 0
    out = {"peer": "pytorch", "torch": torch.__version__, "precision": a.precision, "compile": a.compile,
           "channels_last": a.channels_last, "batch": a.batch,
           "images_per_s": statistics.median(rates) if rates else None,
           "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None}
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
