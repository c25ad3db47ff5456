#!/usr/bin/python3
"""A torchvision ResNet-18 traced in Python (Debian's python3-torch) and served by `strato serve`
through the TorchScript backend returns the same outputs as PyTorch in Python, within 1e-5; the
same network exported to ONNX (opset 13, dynamic batch axis) and served through the ONNX backend
(OpenCV DNN) returns them within 1e-4.

usage: serve_backends_e2e.py STRATO_BINARY
Exit 77 (skipped) when torch/torchvision are not installed.
"""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import torch
    import torchvision
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}")
    sys.exit(77)

CONFIG = """name: "resnet18"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""


ONNX_CONFIG = """platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] } ]
"""


def infer(port, x, model="resnet18", inp="INPUT__0", out="OUTPUT__0"):
    body = x.numpy().astype("<f4").tobytes()
    header = json.dumps({
        "inputs": [{"name": inp, "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": len(body)}}],
        "outputs": [{"name": out, "parameters": {"binary_data": True}}],
    }).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/models/{model}/infer", data=header + body,
        headers={"Inference-Header-Content-Length": str(len(header)),
                 "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=60) as r:
        data = r.read()
        hl = int(r.headers["Inference-Header-Content-Length"])
    meta = json.loads(data[:hl])
    out = meta["outputs"][0]
    assert out["datatype"] == "FP32" and out["shape"] == [x.shape[0], 1000], out
    raw = data[hl:]
    assert len(raw) == out["parameters"]["binary_data_size"] == x.shape[0] * 1000 * 4
    return torch.tensor(struct.unpack(f"<{x.shape[0] * 1000}f", raw)).view(x.shape[0], 1000)


def main():
    strato = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="strato-ts-")
    proc = None
    try:
        torch.manual_seed(0)
        model = torchvision.models.resnet18(weights=None).eval()
        # Like a trained network: batch-norm statistics that are not all 1 and 0. (Fresh ones are
        # identical tensors, which the ONNX exporter shares through Identity nodes OpenCV 4.6
        # cannot read.)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0, 0.1)
                    m.running_mean.normal_(0, 0.1)
                    m.running_var.uniform_(0.5, 2.0)
        example = torch.randn(1, 3, 224, 224)
        with torch.no_grad():
            traced = torch.jit.trace(model, example)
        os.makedirs(f"{tmp}/repo/resnet18/1")
        traced.save(f"{tmp}/repo/resnet18/1/model.pt")
        with open(f"{tmp}/repo/resnet18/config.pbtxt", "w") as f:
            f.write(CONFIG)
        os.makedirs(f"{tmp}/repo/resnet18_onnx/1")
        torch.onnx.export(model, example, f"{tmp}/repo/resnet18_onnx/1/model.onnx", opset_version=13,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
        with open(f"{tmp}/repo/resnet18_onnx/config.pbtxt", "w") as f:
            f.write(ONNX_CONFIG)

        x = torch.randn(3, 3, 224, 224)
        with torch.no_grad():
            want = model(x)

        proc = subprocess.Popen([strato, "serve", "--model-repository", f"{tmp}/repo", "--http-port", "0",
                                 "--metrics-port", "0"], stdout=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        line = ""
        while time.time() < deadline:
            line = proc.stdout.readline()
            if "ready" in line or not line:
                break
        m = re.search(r"ready http://127\.0\.0\.1:(\d+)", line)
        assert m, f"server did not start: {line!r}"
        port = int(m.group(1))

        got = infer(port, x)
        diff = (got - want).abs().max().item()
        print(f"resnet18 batch of 3: max |strato - pytorch| = {diff:.3g} (outputs up to {want.abs().max().item():.3g})")
        assert diff <= 1e-5, f"outputs differ by {diff}"
        # One row at a time gives the same rows.
        for i in range(3):
            d = (infer(port, x[i:i + 1]) - want[i:i + 1]).abs().max().item()
            assert d <= 1e-5, f"row {i} differs by {d}"
        print("ok: TorchScript ResNet-18 outputs equal PyTorch's within 1e-5")
        got = infer(port, x, "resnet18_onnx", "input", "logits")
        diff = (got - want).abs().max().item()
        print(f"resnet18 ONNX (OpenCV DNN) batch of 3: max |strato - pytorch| = {diff:.3g}")
        assert diff <= 1e-4, f"ONNX outputs differ by {diff}"
        print("ok: ONNX ResNet-18 outputs equal PyTorch's within 1e-4")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, "serve did not exit 0 on SIGTERM"
        proc = None
    finally:
        if proc:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
