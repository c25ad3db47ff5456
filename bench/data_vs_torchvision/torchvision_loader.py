#!/usr/bin/env python3
"""The peer: torchvision ImageFolder + DataLoader with the benchmark's transforms.

  torchvision_loader.py DIR [--workers 2] [--batch 64] [--epochs 1] [--eval]
Prints JSON: images/s over everything after the first batch (as strato data bench does).
"""
import argparse
import json
import time

import torch
import torchvision.datasets as datasets
import torchvision.transforms as T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=float, default=1)
    ap.add_argument("--eval", action="store_true", help="Resize 256 + CenterCrop 224 instead of RandomResizedCrop + flip")
    a = ap.parse_args()
    torch.set_num_threads(1)
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    if a.eval:
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), norm])
    else:
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    ds = datasets.ImageFolder(a.dir, transform=tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=not a.eval, num_workers=a.workers,
                                         persistent_workers=a.workers > 0)
    total = int(a.epochs * len(ds))
    seen = timed = batches = 0
    t0 = None
    while seen < total:
        for x, y in loader:
            if seen >= total:
                break
            if batches == 0:
                t0 = time.perf_counter()
            else:
                timed += x.shape[0]
            batches += 1
            seen += x.shape[0]
    secs = time.perf_counter() - t0
    print(json.dumps({"images_per_s": timed / secs, "samples": seen, "seconds": secs, "workers": a.workers}))


if __name__ == "__main__":
    main()
