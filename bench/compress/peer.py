"""The peer of `strato compress quantize`: PyTorch's own static INT8 post-training quantization (FX
graph mode, qconfig "onednn" — HistogramObserver u8 activations, per-channel symmetric s8 weights)
of the same trained weights, plus PyTorch's best FP32 inference path (TorchScript frozen +
optimize_for_inference) and its two bf16 paths (the channels-last eager network under
torch.autocast, and the whole network cast to bfloat16). Prints one JSON object: accuracy, latency
at batch 1 and throughput at batch 64 for each.

    /usr/bin/python3 bench/compress/peer.py PACKAGE_DIR [--threads 2] [--calibration 2048] [--runs 300]

The network is rebuilt in Python from the package's strato-model.json and the tensor names and
shapes in its weights.pt (the zoo's cnn and resnet layouts), and checked to reproduce strato's
float accuracy on the Fashion-MNIST test set before anything is timed.
"""
import argparse
import copy
import gzip
import json
import os
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

FMNIST = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(FMNIST, name), "rb") as f:
        data = f.read()
    if data[2] == 8 and data[3] == 3:
        n, h, w = (int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(3))
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, h, w)
    return np.frombuffer(data, np.uint8, offset=8).astype(np.int64)


class Cnn(nn.Module):
    """The zoo's cnn: [conv3x3 [bn] relu] x2 + maxpool per block; flatten [dropout] linear relu [dropout] linear."""

    def __init__(self, sd):
        super().__init__()
        feats, i, convs = [], 0, 0
        while f"features.{i}.weight" in sd:
            w = sd[f"features.{i}.weight"]
            feats.append(nn.Conv2d(w.shape[1], w.shape[0], 3, padding=1, bias=f"features.{i}.bias" in sd))
            i += 1
            if f"features.{i}.running_mean" in sd:
                feats.append(nn.BatchNorm2d(w.shape[0]))
                i += 1
            feats.append(nn.ReLU())
            i += 1
            convs += 1
            if convs % 2 == 0:
                feats.append(nn.MaxPool2d(2))
                i += 1
        self.features = nn.Sequential(*feats)
        lin = sorted(int(k.split(".")[1]) for k in sd if k.startswith("classifier.") and k.endswith(".weight"))
        dropout = lin[0] == 2
        w0, w1 = sd[f"classifier.{lin[0]}.weight"], sd[f"classifier.{lin[1]}.weight"]
        cls = [nn.Flatten()] + [nn.Dropout()] * dropout + [nn.Linear(w0.shape[1], w0.shape[0]), nn.ReLU()]
        cls += [nn.Dropout()] * dropout + [nn.Linear(w1.shape[1], w1.shape[0])]
        self.classifier = nn.Sequential(*cls)

    def forward(self, x):
        return self.classifier(self.features(x))


class Block(nn.Module):
    """The zoo's BasicBlock / Bottleneck; stride 2 on the 3x3 conv and the projection when `down`."""

    def __init__(self, sd, p, down):
        super().__init__()
        self.bottleneck = f"{p}.conv3.weight" in sd
        names = ["conv1", "conv2", "conv3"] if self.bottleneck else ["conv1", "conv2"]
        strided = "conv2" if self.bottleneck else "conv1"
        for n in names:
            w = sd[f"{p}.{n}.weight"]
            k = w.shape[-1]
            s = 2 if (down and n == strided) else 1
            setattr(self, n, nn.Conv2d(w.shape[1], w.shape[0], k, stride=s, padding=k // 2, bias=False))
            setattr(self, "bn" + n[-1], nn.BatchNorm2d(w.shape[0]))
        if not self.bottleneck:  # TorchScript compiles both branches of forward
            self.conv3, self.bn3 = nn.Identity(), nn.Identity()
        self.shortcut = nn.Sequential()
        self.project = f"{p}.shortcut.0.weight" in sd
        if self.project:
            w = sd[f"{p}.shortcut.0.weight"]
            self.shortcut = nn.Sequential(nn.Conv2d(w.shape[1], w.shape[0], 1, stride=2 if down else 1, bias=False),
                                          nn.BatchNorm2d(w.shape[0]))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        if self.bottleneck:
            y = F.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
        else:
            y = self.bn2(self.conv2(y))
        return F.relu(y + (self.shortcut(x) if self.project else x))


class ResNet(nn.Module):
    """The zoo's resnet. Every block with a projection except the very first starts a stage (stride 2)."""

    def __init__(self, sd, image):
        super().__init__()
        w = sd["stem.0.weight"]
        small, k = image <= 64, w.shape[-1]
        stem = [nn.Conv2d(w.shape[1], w.shape[0], k, stride=1 if small else 2, padding=k // 2, bias=False),
                nn.BatchNorm2d(w.shape[0]), nn.ReLU()]
        self.stem = nn.Sequential(*(stem + ([] if small else [nn.MaxPool2d(3, 2, 1)])))
        n = max(int(k.split(".")[1]) for k in sd if k.startswith("stages.")) + 1
        self.stages = nn.Sequential(*[Block(sd, f"stages.{b}", b > 0 and f"stages.{b}.shortcut.0.weight" in sd)
                                      for b in range(n)])
        hw = [k for k in sd if k.startswith("head.") and k.endswith("weight")][0]
        self.head = nn.Sequential(*([nn.Dropout()] * int(hw.split(".")[1])), nn.Linear(sd[hw].shape[1], sd[hw].shape[0]))

    def forward(self, x):
        y = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def median_ms(fn, x, runs):
    for _ in range(10):
        fn(x)
    t = []
    for _ in range(runs):
        s = time.perf_counter()
        fn(x)
        t.append((time.perf_counter() - s) * 1e3)
    return statistics.median(t)


def accuracy(fn, x, y, batch=1000):
    correct = 0
    with torch.inference_mode():
        for i in range(0, len(x), batch):
            correct += (fn(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    return correct / len(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("package")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--calibration", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--limit-test", type=int, default=10000)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = "onednn"
    man = json.load(open(os.path.join(a.package, "strato-model.json")))
    sd = torch.jit.load(os.path.join(a.package, "weights.pt")).state_dict()
    arch = man["model"]["arch"]
    c, h, w = man["inputs"][0]["shape"][1:]
    net = Cnn(sd) if arch == "cnn" else ResNet(sd, max(h, w))
    missing, unexpected = net.load_state_dict(sd, strict=False)
    if missing or [k for k in unexpected if not k.endswith("num_batches_tracked")]:
        raise SystemExit(f"the rebuilt {arch} does not match the package: missing {missing}, unexpected {unexpected}")
    net.eval()
    mean = torch.tensor(man["preprocessing"]["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(man["preprocessing"]["std"]).view(1, -1, 1, 1)
    norm = lambda u8: (torch.from_numpy(u8.copy()).float() / 255 - mean) / std
    xt = norm(idx("t10k-images-idx3-ubyte.gz")[:a.limit_test])
    yt = torch.from_numpy(idx("t10k-labels-idx1-ubyte.gz")[:a.limit_test].copy())
    rng = np.random.default_rng(0)
    train = idx("train-images-idx3-ubyte.gz")
    calib = norm(train[rng.choice(len(train), a.calibration, replace=False)])

    out = {"arch": arch, "threads": a.threads, "engine": "onednn"}
    x1, x64 = xt[:1], xt[:64]
    with torch.inference_mode():
        cl = copy.deepcopy(net).to(memory_format=torch.channels_last)
        out["fp32_eager_accuracy"] = accuracy(cl, xt.contiguous(memory_format=torch.channels_last), yt)
        ts = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(copy.deepcopy(net))))
        out["fp32_ts_accuracy"] = accuracy(ts, xt, yt)
        def autocast(x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return cl(x).float()
        cast = copy.deepcopy(net).to(torch.bfloat16).to(memory_format=torch.channels_last)
        bf16 = lambda x: cast(x.to(torch.bfloat16)).float()
        cl_in = lambda x: x.contiguous(memory_format=torch.channels_last)
        out["bf16_autocast_accuracy"] = accuracy(autocast, cl_in(xt), yt)
        out["bf16_cast_accuracy"] = accuracy(bf16, cl_in(xt), yt)
        for name, fn, xx1, xx64 in (("fp32_eager", cl, cl_in(x1), cl_in(x64)), ("fp32_ts", ts, x1, x64),
                                    ("bf16_autocast", autocast, cl_in(x1), cl_in(x64)),
                                    ("bf16_cast", bf16, cl_in(x1), cl_in(x64))):
            out[f"{name}_b1_ms"] = median_ms(fn, xx1, a.runs)
            out[f"{name}_b64_per_s"] = 64e3 / median_ms(fn, xx64, max(20, a.runs // 10))
        start = time.perf_counter()
        prepared = prepare_fx(copy.deepcopy(net), get_default_qconfig_mapping("onednn"), example_inputs=(x1,))
        for i in range(0, len(calib), 64):
            prepared(calib[i:i + 64])
        q = convert_fx(prepared)
        qts = torch.jit.freeze(torch.jit.trace(q, x1))
        out["int8_calibration_s"] = time.perf_counter() - start
        out["int8_accuracy"] = accuracy(qts, xt, yt)
        out["int8_b1_ms"] = median_ms(qts, x1, a.runs)
        out["int8_b64_per_s"] = 64e3 / median_ms(qts, x64, max(20, a.runs // 10))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
