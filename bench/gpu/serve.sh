#!/usr/bin/env bash
# strato serve on a GPU: the Fashion-MNIST CNN's architecture (weights from a short run on synthetic
# 28x28 images: speed does not depend on them) served with instance_group KIND_GPU, with and without
# dynamic batching, against the same backend's in-process forward pass on that GPU (the limit), at
# concurrency 1..64 with strato loadtest (binary tensors, one image per request). Prints the ratios
# of the serving issue: batched / limit, batched / unbatched at concurrency 32, and the c = 1 p50
# minus the in-process batch-1 forward pass. Appends to ${OUT:-bench/gpu/out}/gpu_results.txt.
#   bench/gpu/serve.sh            env: STRATO_GPU_BIN (default build/gpu/apps/strato/strato),
#                                      FORWARD_BENCH (default build/gpu/bench/serve_forward_bench),
#                                      DUR=4 (s per point), LOADGEN_THREADS=4, BUDGET_S=240,
#                                      PRECISION=fp32 (the strato backend's parameter: bf16, fp16),
#                                      SERVE_DEVICE=gpu (cpu: the same run on the CPU, to try the
#                                      script on a machine without a GPU before spending GPU time)
set -uo pipefail
cd "$(dirname "$0")/../.."
out_dir=${OUT:-bench/gpu/out}
mkdir -p "$out_dir"
out=$out_dir/gpu_results.txt
bin=${STRATO_GPU_BIN:-build/gpu/apps/strato/strato}
fwd=${FORWARD_BENCH:-build/gpu/bench/serve_forward_bench}
dur=${DUR:-4}
lg_threads=${LOADGEN_THREADS:-4}
budget=${BUDGET_S:-240}
if [ "${SERVE_DEVICE:-gpu}" = cpu ]; then
  train_device=cpu kind='KIND_CPU' fwd_gpu=
else
  train_device=cuda kind='KIND_GPU gpus: [ 0 ]' fwd_gpu=0
fi
py=${PYTHON:-python3}
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
say() { echo "$*" | tee -a "$out"; }
tmp=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# get PORT ENDPOINT PYTHON: runs PYTHON with j = the JSON of /v2/models/cnn/ENDPOINT.
get() {
  $py -c "import json, urllib.request; j = json.load(urllib.request.urlopen('http://127.0.0.1:$1/v2/models/cnn/$2')); $3" 2>&1 |
    tee -a "$out"
}

say "== strato serve on the ${SERVE_DEVICE:-gpu} ($(date -u +%FT%TZ))"
[ -x "$bin" ] || { say "no strato binary at $bin"; exit 1; }
"$bin" -q train configs/fashion_mnist_cnn.toml --set run.dir="\"$tmp/run\"" --set run.device="\"$train_device\"" \
  --set data.dataset='"synthetic"' --set data.channels=1 --set data.image_size=28 --set data.classes=10 \
  --set data.augment='[]' --set data.workers=0 --set train.max_steps=20 --no-report >/dev/null 2>"$tmp/train.err" ||
  { say "training the package failed:"; tail -5 "$tmp/train.err" | tee -a "$out"; exit 1; }
pkg=$tmp/run/fashion_mnist_cnn/model

if [ -x "$fwd" ]; then
  say "-- in-process forward on ${fwd_gpu:+cuda:}${fwd_gpu:-cpu} (the limit): batch, median ms, samples/s"
  "$fwd" "$pkg" "${FORWARD_THREADS:-4}" 1 1,2,4,8,16,32,64 "${fwd_gpu:--1}" "${PRECISION:-fp32}" |
    tee "$tmp/forward.jsonl" | tee -a "$out"
else
  say "no $fwd: the limit is not measured"
fi

source bench/serve/common.sh
for mode in batched unbatched; do
  write_cnn_repo "$tmp/$mode" "$([ $mode = batched ] && echo yes || echo no)" "instance_group [ { count: 1 kind: $kind } ]" \
    "parameters { key: \"precision\" value: { string_value: \"${PRECISION:-fp32}\" } }"
done

# A PyTorch user's TorchScript model on the same device (the pytorch backend): a small CNN traced
# here, served with the instance kind above; its answers for a batch against PyTorch's own.
if $py -c 'import torch' 2>/dev/null; then
  mkdir -p "$tmp/ts/tiny/1"
  printf '%s\n' 'platform: "pytorch_libtorch"' 'max_batch_size: 8' \
    'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] } ]' \
    'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]' \
    "instance_group [ { count: 1 kind: $kind } ]" >"$tmp/ts/tiny/config.pbtxt"
  "$bin" -q serve --model-repository "$tmp/ts" --http-port 0 --metrics-port 0 --model-control-mode explicit \
    >"$tmp/ts.out" 2>&1 &
  server=$!
  for _ in $(seq 300); do grep -q 'ready http' "$tmp/ts.out" && break; sleep 0.1; done
  port=$(sed -n 's/.*ready http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/ts.out")
  $py - "$tmp/ts/tiny/1/model.pt" "$port" "${SERVE_DEVICE:-gpu}" <<'PY' 2>&1 | tail -3 | tee -a "$out"
import json, sys, urllib.request
import torch
path, port, device = sys.argv[1], sys.argv[2], ("cuda" if sys.argv[3] != "cpu" else "cpu")
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                          torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(256, 10)).eval()
x = torch.rand(4, 3, 32, 32)
torch.jit.trace(net, x).save(path)
req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/repository/models/tiny/load", data=b"{}", method="POST")
urllib.request.urlopen(req, timeout=120).read()
body = {"inputs": [{"name": "INPUT__0", "shape": list(x.shape), "datatype": "FP32", "data": x.flatten().tolist()}]}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/tiny/infer", data=json.dumps(body).encode())
got = torch.tensor(json.load(urllib.request.urlopen(req, timeout=60))["outputs"][0]["data"]).view(4, 10)
with torch.no_grad():
    want = torch.jit.load(path, map_location=device)(x.to(device)).cpu()
kinds = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/tiny/config"))["instance_group"]
print(f"pytorch backend on {device}: max |strato - PyTorch| = {(got - want).abs().max().item():.2e} over a batch of 4; "
      f"instance_group {[(g['kind'], g['gpus']) for g in kinds]}")
PY
  kill "$server"; wait "$server"; server=
fi

for mode in batched unbatched; do
  [ "$(left)" -gt 40 ] || { say "$mode: skipped (time)"; continue; }
  "$bin" -q serve --model-repository "$tmp/$mode" --http-port 0 --metrics-port 0 --http-thread-count 4 \
    --intra-op-threads "${FORWARD_THREADS:-4}" \
    >"$tmp/serve.out" 2>&1 &
  server=$!
  for _ in $(seq 300); do grep -q 'ready http' "$tmp/serve.out" && break; sleep 0.1; done
  port=$(sed -n 's/.*ready http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/serve.out")
  if [ -z "$port" ]; then say "$mode: the server did not start:"; tail -5 "$tmp/serve.out" | tee -a "$out"; kill $server; server=; continue; fi
  get "$port" config 'print("config instance_group:", json.dumps(j["instance_group"]))'
  timeout $(($(left) - 5)) "$bin" -q loadtest "http://127.0.0.1:$port" --model cnn --concurrency-range 1:64:x2 \
    --threads "$lg_threads" -d "${dur}s" --warmup 1s --json "$tmp/$mode.json" >"$tmp/$mode.txt" 2>&1
  say "-- $mode (exit $?)"
  tail -12 "$tmp/$mode.txt" | tee -a "$out"
  get "$port" stats 'print("stats memory_usage:", json.dumps(j["model_stats"][0]["memory_usage"]))'
  kill "$server"; wait "$server"; server=
done

$py - "$tmp" <<'PY' 2>&1 | tee -a "$out"
import json, os, sys
tmp = sys.argv[1]
def points(mode):
    try:
        return {int(p["concurrency"]): p for p in json.load(open(f"{tmp}/{mode}.json"))["points"]}
    except Exception as e:
        print(f"{mode}: no results ({e})"); return {}
b, u = points("batched"), points("unbatched")
fwd = [json.loads(l) for l in open(f"{tmp}/forward.jsonl")] if os.path.exists(f"{tmp}/forward.jsonl") else []
for c in sorted(set(b) | set(u)):
    pb, pu = b.get(c, {}), u.get(c, {})
    f = lambda p, k: p.get(k, 0) if k == "throughput" else p.get("latency_us", {}).get(k, 0) / 1e3
    print(f"c={c:>2}  batched {f(pb,'throughput'):>8.0f}/s p50 {f(pb,'p50'):.2f} ms p99 {f(pb,'p99'):.2f} ms   "
          f"unbatched {f(pu,'throughput'):>8.0f}/s p50 {f(pu,'p50'):.2f} ms   errors {pb.get('errors',{}).get('total',0)}+{pu.get('errors',{}).get('total',0)}")
if b and fwd:
    best = max(fwd, key=lambda r: r["samples_per_s"])
    one = next(r for r in fwd if r["batch"] == 1)
    top = max(b.values(), key=lambda p: p["throughput"])
    print(f"limit (in-process, same device): {best['samples_per_s']:.0f} samples/s at batch {best['batch']}; batch 1 {one['median_ms']*1e3:.0f} us")
    print(f"dynamic batching: {top['throughput']:.0f} req/s at c={top['concurrency']} = {top['throughput']/best['samples_per_s']:.2f}x the limit (goal >= 0.8)")
    if 1 in b:
        print(f"c=1 p50 - in-process batch-1 forward: {b[1]['latency_us']['p50'] - one['median_ms']*1e3:.0f} us (goal <= 100)")
if 32 in b and 32 in u and u[32]["throughput"] > 0:
    print(f"batched / unbatched at c=32: {b[32]['throughput']/u[32]['throughput']:.2f}x (goal >= 3)")
PY
say "# serve on the ${SERVE_DEVICE:-gpu} done in $(($(date +%s) - t0)) s"
