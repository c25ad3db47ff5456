#!/usr/bin/python3
"""The Python PyTorch peer of `strato train` for bench/train_vs_pytorch/run.sh.

Same data (Debian's Fashion-MNIST), same normalisation, same sample order (strato's seeded
permutation, reimplemented below), same model, optimizer, batch and thread count. Prints one
JSON line: samples/s (median over windows of --window steps, first window skipped as warm-up).
Run it with /usr/bin/python3 (Debian's python3-torch).
"""
import argparse, gzip, json, statistics, struct, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def epoch_order(n, seed, epoch):
    """strato::data::Loader::epoch_order: Fisher-Yates driven by a splitmix64 counter."""
    state = mix64(seed ^ mix64(epoch + 0x5EED))
    order = list(range(n))
    for i in range(n, 1, -1):
        state = mix64(state)
        j = (state * i) >> 64
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(dims)


def mlp(width, depth):
    layers, d = [], 784
    for i in range(depth):
        h = max(8, width >> i)
        layers += [nn.Linear(d, h), nn.ReLU()]
        d = h
    return nn.Sequential(nn.Flatten(), *layers, nn.Linear(d, 10))


def cnn(width, depth, hidden, dropout):
    layers, c, side = [], 1, 28
    for b in range(depth):
        out = width << b
        for rep in range(2):
            layers += [nn.Conv2d(out if rep else c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
        layers.append(nn.MaxPool2d(2))
        c, side = out, side // 2
    head = [nn.Flatten()]
    if dropout > 0:
        head.append(nn.Dropout(dropout))
    head += [nn.Linear(c * side * side, hidden), nn.ReLU()]
    if dropout > 0:
        head.append(nn.Dropout(dropout))
    head.append(nn.Linear(hidden, 10))
    return nn.Sequential(*layers, *head)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], required=True)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--optim", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--window", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--channels-last", action="store_true", help="NHWC model and inputs (not what most scripts do)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = read_idx(f"{a.data}/train-images-idx3-ubyte.gz").float().div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1)
    y = read_idx(f"{a.data}/train-labels-idx1-ubyte.gz").long()
    net = mlp(a.width, a.depth) if a.model == "mlp" else cnn(a.width, a.depth, a.hidden, a.dropout)
    net.train()
    if a.channels_last:
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    if a.optim == "adamw":
        opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=1e-4)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)

    order = torch.tensor(epoch_order(x.shape[0], 0, 0))
    batches = x.shape[0] // a.batch
    rates, t0, seen = [], time.perf_counter(), 0
    for step in range(a.steps):
        idx = order[(step % batches) * a.batch : (step % batches + 1) * a.batch]
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = net(xb)
        logits = logits.float()
        loss = F.cross_entropy(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()  # strato reads the loss and accuracy every step, so does the peer
        logits.argmax(1).eq(yb).sum().item()
        seen += xb.shape[0]
        if (step + 1) % a.window == 0:
            now = time.perf_counter()
            rates.append(seen / (now - t0))
            t0, seen = now, 0
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "samples_per_s": statistics.median(rates[1:] or rates),
                      "windows": len(rates)}))


if __name__ == "__main__":
    sys.exit(main())
