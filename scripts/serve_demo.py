#!/usr/bin/python3
"""Sends real Fashion-MNIST test images to a running `strato serve` and prints what it answers.

usage: serve_demo.py PORT MODEL [N]
Uses the Open Inference Protocol as any Triton client would: one JSON request with N images and
the classification extension (top-1 label), then one binary-tensor request, then /stats.
"""
import gzip
import json
import struct
import sys
import urllib.request

# The server is on loopback: never through an http_proxy from the environment (urllib sends even
# 127.0.0.1 through it unless no_proxy lists it, and the demo failed with "Connection refused").
urlopen = urllib.request.build_opener(urllib.request.ProxyHandler({})).open

DATA = "/usr/share/datasets/fashion-mnist"


def main():
    port, model = int(sys.argv[1]), sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    images = gzip.open(f"{DATA}/t10k-images-idx3-ubyte.gz").read()[16:16 + n * 784]
    labels = gzip.open(f"{DATA}/t10k-labels-idx1-ubyte.gz").read()[8:8 + n]
    url = f"http://127.0.0.1:{port}/v2/models/{model}"
    meta = json.load(urlopen(url, timeout=10))

    pixels = [b / 255.0 for b in images]
    request = {"id": "demo", "inputs": [{"name": "input", "shape": [n, 1, 28, 28], "datatype": "FP32", "data": pixels}],
               "outputs": [{"name": "probabilities", "parameters": {"classification": 10}}]}
    req = urllib.request.Request(f"{url}/infer", data=json.dumps(request).encode(),
                                 headers={"Content-Type": "application/json"})
    answer = json.load(urlopen(req, timeout=30))
    ranked = answer["outputs"][0]["data"]  # n rows of 10 "probability:index:label", best first
    top1 = ranked[::10]
    names = {int(e.split(":")[1]): e.split(":", 2)[2] for e in ranked[:10]}
    right = 0
    print(f"POST {url}/infer  ({n} test images, JSON, classification extension)")
    for i, entry in enumerate(top1):
        p, idx, name = entry.split(":", 2)
        right += int(idx) == labels[i]
        print(f"  image {i}: predicted {name:<12} ({float(p):6.1%})   true: {names[labels[i]]:<12}{'' if int(idx) == labels[i] else '  <- wrong'}")
    print(f"  {right}/{n} right")

    body = struct.pack(f"<{n * 784}f", *pixels)
    header = json.dumps({"inputs": [{"name": "input", "shape": [n, 1, 28, 28], "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(body)}}],
                         "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    req = urllib.request.Request(f"{url}/infer", data=header + body,
                                 headers={"Inference-Header-Content-Length": str(len(header)),
                                          "Content-Type": "application/octet-stream"})
    with urlopen(req, timeout=30) as r:
        raw = r.read()
        hl = int(r.headers["Inference-Header-Content-Length"])
    logits = struct.unpack(f"<{n * 10}f", raw[hl:])
    argmax = [max(range(10), key=lambda k: logits[i * 10 + k]) for i in range(n)]
    agree = sum(int(e.split(":")[1]) == a for e, a in zip(top1, argmax))
    print(f"POST {url}/infer  (binary tensor extension): logits {len(raw) - hl} bytes; argmax agrees with the JSON answer on {agree}/{n}")

    stats = json.load(urlopen(f"{url}/stats", timeout=10))["model_stats"][0]
    s = stats["inference_stats"]
    print(f"GET  {url}/stats: {s['success']['count']} requests, {stats['inference_count']} images, "
          f"{stats['execution_count']} executions, mean compute {s['compute_infer']['ns'] / max(s['compute_infer']['count'], 1) / 1e3:.0f} us")
    sys.exit(0 if agree == n and meta["inputs"][0]["shape"] == [-1, 1, 28, 28] else 1)


if __name__ == "__main__":
    main()
