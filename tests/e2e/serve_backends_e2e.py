#!/usr/bin/python3
"""A torchvision ResNet-18 traced in Python (Debian's python3-torch) and served by `strato serve`
through the TorchScript backend returns the same outputs as PyTorch in Python, within 1e-5; the
same network exported to ONNX (opset 13, dynamic batch axis) and served through the ONNX backend
(OpenCV DNN) returns them within 1e-4. Then both are loaded, run and unloaded again and again
(explicit model control): the server's resident memory, threads and descriptors stay flat, where
Triton users report TorchScript models growing it by ~20 MB a cycle (server #5841). Damaged
TorchScript and ONNX files (cut in half, or junk) fail their load with a 400 naming the file.

Before that, small scripted models as Triton users write them: inputs matched by forward()'s
argument names or `<name>__<index>` (not the config order), optional inputs as None, dict and
tuple results, INT64 inputs, a forward that raises (500, and the server serves on), outputs of
another datatype, shape or batch size than the config's (500, never converted or cut), and configs
that do not fit forward() or the ONNX graph (the load fails, saying why). Then a strato package
with max_batch_size 0 (one image in, [classes] out).

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

from harness import train_tiny, wait_thread_gone

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


# TorchScript models as Triton users write them. Inputs and outputs are matched as Triton's PyTorch
# backend matches them: by forward()'s argument names, by `<name>__<index>`, else in config order.
TS_MODELS = {
    # forward(x, mask) with the config listing mask first: matched by argument name.
    "by_arg_name": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x - 2 * mask
""", 'input [ { name: "mask" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
     'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
    # INPUT__1 / OUTPUT__1 listed first: matched by index.
    "by_index": ("""
class M(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return a - b, a * 10
""", 'input [ { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
     'output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
    # An optional input left out is passed as None.
    "optional_bias": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        return x + 1 if bias is None else x + bias
""", 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "bias" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]\n'
     'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
    # A dict of outputs, by the config's output names.
    "dict_out": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"twice": x * 2, "plus": x + 1}
""", 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
     'output [ { name: "plus" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "twice" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
    # INT64 ids into an embedding; outputs must equal Python's.
    "embedding": ("""
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.e = torch.nn.Embedding(10, 3)
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.e(ids)
""", 'input [ { name: "ids" data_type: TYPE_INT64 dims: [ 2 ] } ]\n'
     'output [ { name: "vectors" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]'),
    # Failing at run time: 500 with the error, then the next request is served.
    "raises": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 100):
            raise ValueError("input sum too large")
        return x * 2
""", 'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
     'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
    # Outputs that do not fit the config: errors, never converted or misplaced values.
    "float64_out": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 1000.7).to(torch.float64)
""", 'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
     'output [ { name: "OUTPUT__0" data_type: TYPE_INT8 dims: [ 4 ] } ]'),
    "int_in_tuple": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Tuple[int, torch.Tensor]:
        return 3, x + 1
""", 'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
     'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
    "drops_rows": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:1]
""", 'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
     'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
    # Configs that do not fit forward(): the load fails, saying why.
    "too_many_inputs": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
""", 'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
     'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
    "optional_not_optional": ("""
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y
""", 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "y" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]\n'
     'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]'),
}

# ONNX configs that name what the graph does not have fail their load (not every request).
ONNX_BAD = {
    "onnx_wrong_input": ('input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "b" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                         'output [ { name: "s" data_type: TYPE_FP32 dims: [ 4 ] } ]', "input 'x' is not an input of the ONNX graph"),
    "onnx_wrong_output": ('input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "b" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                          'output [ { name: "zz" data_type: TYPE_FP32 dims: [ 4 ] } ]', "output 'zz' is not a tensor of the ONNX graph"),
    # (a cv::dnn::Net keeps the last blob of each input: a left-out input would run on another request's data)
    "onnx_optional": ('input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "b" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]\n'
                      'output [ { name: "s" data_type: TYPE_FP32 dims: [ 4 ] } ]', "optional inputs are not supported"),
    # Configs the graph contradicts in shape: an output of dims [5] for a graph of 4 (served with the
    # graph's shape, then a 500 on every request while READY), a graph input the config leaves
    # out (a 500 on every request): one run on zeros at load refuses them, as Triton's ONNX
    # Runtime backend checks a config against its model (found by review).
    "onnx_wrong_dims": ('input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "b" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                        'output [ { name: "s" data_type: TYPE_FP32 dims: [ 5 ] } ]',
                        "unexpected shape for output 's': the model returned [1,4], the config says [-1,5] for a batch of 1"),
    "onnx_missing_input": ('input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                           'output [ { name: "s" data_type: TYPE_FP32 dims: [ 4 ] } ]',
                           "the graph has an input the config does not name: list every input given at export"),
}


def infer_json(port, model, inputs, outputs=None):
    """(status, body as JSON) of a JSON inference request; inputs: [(name, datatype, shape, data)]."""
    body = {"inputs": [{"name": n, "datatype": t, "shape": s, "data": d} for n, t, s, d in inputs]}
    if outputs:
        body["outputs"] = [{"name": o} for o in outputs]
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def torchscript_models(strato, tmp):
    import importlib.util
    repo = f"{tmp}/ts_repo"
    # torch.jit.script reads the source of forward(): each model is a module file of its own.
    modules = {}
    for name, (source, io) in TS_MODELS.items():
        path = f"{tmp}/ts_{name}.py"
        with open(path, "w") as f:
            f.write(f"import torch\nfrom typing import Dict, Optional, Tuple\n{source}")
        spec = importlib.util.spec_from_file_location(f"ts_{name}", path)
        modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[name])
        os.makedirs(f"{repo}/{name}/1")
        torch.jit.script(modules[name].M()).save(f"{repo}/{name}/1/model.pt")
        with open(f"{repo}/{name}/config.pbtxt", "w") as f:
            f.write(f'platform: "pytorch_libtorch"\nmax_batch_size: 8\n{io}\n')

    class Two(torch.nn.Module):
        def forward(self, a, b):
            return a + b, a * b
    for name, (io, _) in ONNX_BAD.items():
        os.makedirs(f"{repo}/{name}/1")
        torch.onnx.export(Two(), (torch.randn(1, 4), torch.randn(1, 4)), f"{repo}/{name}/1/model.onnx", opset_version=13,
                          input_names=["a", "b"], output_names=["s", "p"],
                          dynamic_axes={n: {0: "n"} for n in ("a", "b", "s", "p")})
        with open(f"{repo}/{name}/config.pbtxt", "w") as f:
            f.write(f'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n{io}\n')

    proc, port = start_server(strato, repo, "--exit-on-error=false")
    try:
        x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
        m = [0.5, 0.25, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]

        st, r = infer_json(port, "by_arg_name", [("x", "FP32", [2, 4], x), ("mask", "FP32", [2, 4], m)])
        want = [a - 2 * b for a, b in zip(x, m)]
        assert st == 200 and r["outputs"][0]["data"] == want, f"by_arg_name: {st} {r}"
        print("ok: inputs named after forward()'s arguments reach those arguments, in any config order")

        st, r = infer_json(port, "by_index", [("INPUT__0", "FP32", [2, 4], x), ("INPUT__1", "FP32", [2, 4], m)])
        got = {o["name"]: o["data"] for o in r.get("outputs", [])}
        assert st == 200 and got == {"OUTPUT__0": [a - b for a, b in zip(x, m)], "OUTPUT__1": [a * 10 for a in x]}, \
            f"by_index: {st} {r}"
        print("ok: INPUT__<i> / OUTPUT__<i> follow their index, not the config order")

        st, r = infer_json(port, "optional_bias", [("x", "FP32", [2, 4], x)])
        assert st == 200 and r["outputs"][0]["data"] == [a + 1 for a in x], f"optional_bias without bias: {st} {r}"
        st, r = infer_json(port, "optional_bias", [("x", "FP32", [2, 4], x), ("bias", "FP32", [2, 4], m)])
        assert st == 200 and r["outputs"][0]["data"] == [a + b for a, b in zip(x, m)], f"optional_bias with bias: {st} {r}"
        print("ok: an optional input left out reaches forward() as None")

        st, r = infer_json(port, "dict_out", [("x", "FP32", [2, 4], x)])
        got = {o["name"]: o["data"] for o in r.get("outputs", [])}
        assert st == 200 and got == {"plus": [a + 1 for a in x], "twice": [a * 2 for a in x]}, f"dict_out: {st} {r}"
        print("ok: a Dict[str, Tensor] result is read by the config's output names")

        ids = torch.tensor([[1, 9], [0, 3], [7, 7]])
        with torch.no_grad():
            want = modules["embedding"].M()(ids)
        st, r = infer_json(port, "embedding", [("ids", "INT64", [3, 2], ids.flatten().tolist())])
        assert st == 200, f"embedding: {st} {r}"
        got = torch.tensor(r["outputs"][0]["data"]).view(3, 2, 3)
        diff = (got - want).abs().max().item()
        assert r["outputs"][0]["shape"] == [3, 2, 3] and diff <= 1e-5, f"embedding differs by {diff}: {r}"
        print(f"ok: INT64 ids into an embedding: max |strato - pytorch| = {diff:.3g}")

        st, r = infer_json(port, "raises", [("INPUT__0", "FP32", [1, 4], [100, 2, 3, 4])])
        assert st == 500 and "ValueError: input sum too large" in r.get("error", ""), f"raises: {st} {r}"
        assert "Traceback" not in r["error"] and "\n" not in r["error"], f"raises: one line wanted: {r}"
        st, r2 = infer_json(port, "raises", [("INPUT__0", "FP32", [1, 4], [1, 2, 3, 4])])
        assert st == 200 and r2["outputs"][0]["data"] == [2, 4, 6, 8], f"raises, then a good request: {st} {r2}"
        print(f"ok: a model that raises answers 500 {r['error']!r} and the next request is served")

        for model, want in (("float64_out", "configuration expects datatype TYPE_INT8 for output 'OUTPUT__0', "
                                            "model provides TYPE_FP64"),
                            ("int_in_tuple", "output 'OUTPUT__0': the TorchScript model returned a value of type Int there, not a tensor"),
                            ("drops_rows", "unexpected shape for output 'OUTPUT__0': the model returned [1,4], "
                                           "the config says [-1,4] for a batch of 2")):
            st, r = infer_json(port, model, [("INPUT__0", "FP32", [2, 4], x)])
            assert st == 500 and want in r.get("error", ""), f"{model}: {st} {r}"
            print(f"ok: {model}: 500 {r['error']}")

        index = {e["name"]: e for e in json.loads(post(port, "/v2/repository/index")[1])}
        for model, want in (("too_many_inputs", "configuration expects 2 inputs, model provides 1 (forward(x: Tensor))"),
                            ("optional_not_optional", "input 'y' is optional in the config, but forward() argument 'y' is "
                                                      "Tensor, not Optional[Tensor]"),
                            *((name, why) for name, (_, why) in ONNX_BAD.items())):
            e = index[model]
            assert e["state"] == "UNAVAILABLE" and want in e["reason"] and model in e["reason"], f"{model}: {e}"
            print(f"ok: {model} does not load: {e['reason']}")
        assert proc.poll() is None, "the server died"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, "serve did not exit 0 on SIGTERM"


def package_models(strato, tmp):
    """A strato package served as Triton serves a model that does not batch (max_batch_size 0): a
    request is one image and the outputs are [classes], equal to the batching model's row."""
    pkg = os.path.join(train_tiny(f"{tmp}/runs", "cnn"), "model")
    repo = f"{tmp}/pkg_repo"
    shutil.copytree(pkg, f"{repo}/batched/1")
    shutil.copytree(pkg, f"{repo}/unbatched/1")
    with open(f"{repo}/unbatched/config.pbtxt", "w") as f:
        f.write('max_batch_size: 0\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]\n'
                'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] }, '
                '{ name: "probabilities" data_type: TYPE_FP32 dims: [ 10 ] } ]\n')
    shutil.copytree(pkg, f"{repo}/optional/1")
    with open(f"{repo}/optional/config.pbtxt", "w") as f:
        f.write('max_batch_size: 0\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] optional: true } ]\n'
                'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]\n')
    proc, port = start_server(strato, repo, "--exit-on-error=false")
    try:
        torch.manual_seed(3)
        image = torch.rand(28 * 28).tolist()
        st, r = infer_json(port, "batched", [("input", "FP32", [1, 1, 28, 28], image)])
        assert st == 200, f"batched: {st} {r}"
        want = {o["name"]: o for o in r["outputs"]}
        st, r = infer_json(port, "unbatched", [("input", "FP32", [1, 28, 28], image)])
        assert st == 200, f"unbatched: {st} {r}"
        for o in r["outputs"]:
            assert o["shape"] == [10], f"unbatched: output {o['name']} has shape {o['shape']}, the config says [10]"
            diff = max(abs(a - b) for a, b in zip(o["data"], want[o["name"]]["data"]))
            assert diff <= 1e-5, f"unbatched {o['name']} differs from the batching model's by {diff}"
        print("ok: a package with max_batch_size 0 takes [1,28,28] and answers [10], as its config says")
        # A config may call the input optional; a request without it is refused, not run on nothing.
        st, r = infer_json(port, "optional", [])
        assert st == 400 and "a strato package needs its input in every request" in r.get("error", ""), f"optional: {st} {r}"
        error = r["error"]
        st, r = infer_json(port, "optional", [("input", "FP32", [1, 28, 28], image)])
        assert st == 200 and r["outputs"][0]["shape"] == [10], f"optional, then with the input: {st} {r}"
        print(f"ok: a package request without its (optional) input: 400 {error}")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, "serve did not exit 0 on SIGTERM"


def main():
    strato = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="strato-ts-")
    proc = None
    try:
        torchscript_models(strato, tmp)
        package_models(strato, tmp)
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
            if rss1 - rss0 >= size:
                # A one-off step (a new malloc arena for a thread, under a loaded machine it flaked
                # once) does not come back in 12 more cycles; a leak of the weights does.
                print(f"{model}: resident {rss0:.0f} -> {rss1:.0f} MiB over 12 cycles; 12 more to tell a step from a leak")
                (rss0, thr0, fd0), (rss1, thr1, fd1) = load_unload_cycles(port, proc.pid, model, inp, out, x[:1],
                                                                          warmup=0)
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
