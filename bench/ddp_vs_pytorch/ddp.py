#!/usr/bin/python3
"""The Python peer of `strato launch ... strato train` for bench/ddp_vs_pytorch/run.sh: PyTorch's
DistributedDataParallel on Gloo, processes started with torch.multiprocessing, the same model,
data order (strato's seeded permutation, strided per rank as DistributedSampler does), per-rank
batch, optimizer and threads per rank. Prints one JSON line from rank 0: global samples/s (median
over windows of --window steps, the first skipped as warm-up)."""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_vs_pytorch"))
from train import cnn, epoch_order, mlp, read_idx  # noqa: E402


def worker(rank, a, port, out):
    torch.set_num_threads(a.threads)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.procs)
    torch.manual_seed(0)
    x = read_idx(f"{a.data}/train-images-idx3-ubyte.gz").float().div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1)
    y = read_idx(f"{a.data}/train-labels-idx1-ubyte.gz").long()
    net = mlp(a.width, a.depth) if a.model == "mlp" else cnn(a.width, a.depth, a.hidden, a.dropout)
    net.train()
    if a.channels_last:
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    order = torch.tensor(epoch_order(x.shape[0], 0, 0))[rank::a.procs]
    batches = order.shape[0] // a.batch
    rates, t0, seen = [], time.perf_counter(), 0
    for step in range(a.steps):
        idx = order[(step % batches) * a.batch:(step % batches + 1) * a.batch]
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        logits = ddp(xb)
        loss = F.cross_entropy(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        logits.argmax(1).eq(yb).sum().item()
        seen += xb.shape[0] * a.procs
        if (step + 1) % a.window == 0:
            now = time.perf_counter()
            rates.append(seen / (now - t0))
            t0, seen = now, 0
    if rank == 0:
        out.put(statistics.median(rates[1:] or rates))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.25)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--window", type=int, default=25)
    p.add_argument("--threads", type=int, default=1, help="per rank")
    p.add_argument("--channels-last", action="store_true", help="NHWC model and inputs (not what most scripts do)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, port, out)) for r in range(a.procs)]
    for pr in procs:
        pr.start()
    rate = out.get(timeout=600)
    for pr in procs:
        pr.join()
    print(json.dumps({"peer": "pytorch-ddp-gloo", "torch": torch.__version__, "procs": a.procs,
                      "samples_per_s": rate}))


if __name__ == "__main__":
    main()
