#!/usr/bin/python3
"""A torchvision ResNet-18 traced in Python (Debian's python3-torch) and served by `strato serve`
through the TorchScript backend returns the same outputs as PyTorch in Python, within 1e-5; the
same network exported to ONNX (opset 13, dynamic batch axis) and served through the ONNX backend
(OpenCV DNN) returns them within 1e-4. Then both are loaded, run and unloaded again and again
(explicit model control): the server's resident memory, threads and descriptors stay flat, where
Triton users report TorchScript models growing it by ~20 MB a cycle (server #5841). Damaged
TorchScript and ONNX files (cut in half, or junk) fail their load with a 400 naming the file.

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
import urllib.error
import urllib.request

from harness import wait_thread_gone

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


def start_server(strato, repo, *flags):
    """`strato serve` on an ephemeral port; returns (process, port)."""
    proc = subprocess.Popen([strato, "serve", "--model-repository", repo, "--http-port", "0", "--metrics-port", "0", *flags],
                            stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    line = ""
    while time.time() < deadline:
        line = proc.stdout.readline()
        if "ready" in line or not line:
            break
    m = re.search(r"ready http://127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        raise AssertionError(f"server did not start: {line!r}")
    return proc, int(m.group(1))


def post(port, path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, r.read()


def usage(pid):
    """(resident MiB, threads, open descriptors) of a process, from /proc."""
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(status["VmRSS"].split()[0]) / 1024, int(status["Threads"]), len(os.listdir(f"/proc/{pid}/fd"))


def wait_retired(pid, model, timeout=30):
    assert wait_thread_gone(pid, "repo-unload", timeout), f"{model}: the unloaded version is still being freed {timeout} s later"


def load_unload_cycles(port, pid, model, inp, out, x, warmup=4, n=12):
    """Load, infer, unload `model` warmup + n times; returns the usage before and after the last n."""
    def cycle():
        assert post(port, f"/v2/repository/models/{model}/load")[0] == 200
        infer(port, x, model, inp, out)
        assert post(port, f"/v2/repository/models/{model}/unload")[0] == 200
        deadline = time.time() + 30  # the index tells when the unload is done
        while time.time() < deadline:
            index = json.loads(post(port, "/v2/repository/index")[1])
            if all(e.get("state") != "READY" for e in index if e["name"] == model):
                wait_retired(pid, model)  # usage is counted after the old version is freed
                return
            time.sleep(0.01)
        raise AssertionError(f"{model} still READY 30 s after its unload")

    for _ in range(warmup):  # allocator pools, caches, thread pools
        cycle()
    before = usage(pid)
    for _ in range(n):
        cycle()
    return before, usage(pid)


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

        proc, port = start_server(strato, f"{tmp}/repo")

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

        # Damaged model files (an upload cut short, a file that is not a model at all) beside
        # the good ones: loading one fails with a 400 naming the file, and the server lives on.
        damaged = []
        for model, file in (("resnet18", "model.pt"), ("resnet18_onnx", "model.onnx")):
            for how, cut in (("cut", lambda b: b[: len(b) // 2]), ("junk", lambda b: b"\x08\x07 not a model " * 64)):
                bad = f"{model}_{how}"
                shutil.copytree(f"{tmp}/repo/{model}", f"{tmp}/repo/{bad}")
                path = f"{tmp}/repo/{bad}/1/{file}"
                with open(path, "rb") as f:
                    data = f.read()
                with open(path, "wb") as f:
                    f.write(cut(data))
                with open(f"{tmp}/repo/{bad}/config.pbtxt") as f:
                    text = f.read().replace('name: "resnet18"', f'name: "{bad}"')
                with open(f"{tmp}/repo/{bad}/config.pbtxt", "w") as f:
                    f.write(text)
                damaged.append((bad, file))

        proc, port = start_server(strato, f"{tmp}/repo", "--model-control-mode", "explicit")
        for bad, file in damaged:
            try:
                status, body = post(port, f"/v2/repository/models/{bad}/load")
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read()
            error = json.loads(body).get("error", "")
            assert status == 400 and file in error, f"loading {bad}: {status} {body[:500]!r}"
            assert proc.poll() is None, f"the server died loading {bad}"
            print(f"ok: {bad}: 400 {error[:160]}")
        # (the good models load and run next, again and again)
        for model, inp, out, file in (("resnet18", "INPUT__0", "OUTPUT__0", "model.pt"),
                                      ("resnet18_onnx", "input", "logits", "model.onnx")):
            size = os.path.getsize(f"{tmp}/repo/{model}/1/{file}") / 2**20
            (rss0, thr0, fd0), (rss1, thr1, fd1) = load_unload_cycles(port, proc.pid, model, inp, out, x[:1])
            print(f"{model}: 12 load/infer/unload cycles: resident {rss0:.0f} -> {rss1:.0f} MiB "
                  f"({(rss1 - rss0) / 12:+.1f} MiB a cycle; the model file is {size:.0f} MiB), threads {thr0} -> {thr1}, "
                  f"descriptors {fd0} -> {fd1}")
            # Less than a twelfth of the model kept per cycle: a leak of its weights shows at once.
            assert rss1 - rss0 < size, f"{model}: resident memory grew by {rss1 - rss0:.0f} MiB over 12 cycles"
            # (a loader thread or a closing connection may come and go; a leak per cycle would add 12)
            assert thr1 <= thr0 + 2 and fd1 <= fd0 + 2, f"{model}: threads {thr0} -> {thr1}, descriptors {fd0} -> {fd1}"
        print("ok: load/unload cycles keep memory, threads and descriptors flat")
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
