#!/usr/bin/env python3
"""Writes a JPEG image folder from Debian's Fashion-MNIST for the input-pipeline benchmark.

Each 28x28 garment is upscaled (bicubic) to a random size between 200 and 320 pixels a side,
coloured with a class-dependent tint and mild noise, and saved as JPEG quality 90 (4:2:0), so
the files look like small photos: OUT/train/<class>/<index>.jpg and OUT/test/<class>/... .

  gen.py OUT [--train 10000] [--test 1000]
"""
import argparse
import gzip
import os
import random
import struct

from PIL import Image

SRC = "/usr/share/datasets/fashion-mnist"
CLASSES = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return [data[16 + i * rows * cols:16 + (i + 1) * rows * cols] for i in range(n)]
    return list(data[8:8 + n])


def write_split(out, images, labels, count, seed):
    rng = random.Random(seed)
    for c in CLASSES:
        os.makedirs(os.path.join(out, c), exist_ok=True)
    for i in range(min(count, len(images))):
        label = labels[i]
        g = Image.frombytes("L", (28, 28), images[i])
        w, h = rng.randint(200, 320), rng.randint(200, 320)
        g = g.resize((w, h), Image.BICUBIC)
        tint = ((label * 53) % 200 + 55, (label * 97) % 200 + 55, (label * 31) % 200 + 55)
        noise = Image.effect_noise((w, h), 12).convert("L")
        rgb = Image.merge("RGB", [Image.blend(g.point(lambda v, t=t: v * t // 255), noise, 0.08) for t in tint])
        rgb.save(os.path.join(out, CLASSES[label], f"{i:06d}.jpg"), quality=90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=10000)
    ap.add_argument("--test", type=int, default=1000)
    a = ap.parse_args()
    write_split(os.path.join(a.out, "train"), idx(f"{SRC}/train-images-idx3-ubyte.gz"),
                idx(f"{SRC}/train-labels-idx1-ubyte.gz"), a.train, 1)
    write_split(os.path.join(a.out, "test"), idx(f"{SRC}/t10k-images-idx3-ubyte.gz"),
                idx(f"{SRC}/t10k-labels-idx1-ubyte.gz"), a.test, 2)


if __name__ == "__main__":
    main()
