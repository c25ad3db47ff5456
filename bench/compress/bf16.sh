#!/usr/bin/env bash
# bf16 inference: strato's bf16 graph (the fused graph on oneDNN's bf16 kernels: what `strato serve`
# runs with precision "bf16", `strato eval --bf16` and `@bf16` report rows) against strato's FP32
# graph, the eager network under bf16 autocast (`@bf16-eager`, strato's bf16 path before the
# graph), and PyTorch's two bf16 paths on the same weights (bench/compress/peer.py: the
# channels-last eager network under torch.autocast, and the network cast to bfloat16), for the
# Fashion-MNIST CNN and ResNet-20; with the INT8 package (`strato compress quantize`) as a fourth row,
# the whole precision ladder on one machine. Prints the report tables and the ratios.
#
#   bench/compress/bf16.sh      env: OUT=runs/bench_compress (packages of run.sh are reused)
#                                    CNN_EPOCHS=2 RESNET_EPOCHS=1 RUNS=300 THREADS=$(nproc)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup --bench
scripts/build release --target strato >/dev/null
bin=build/release/apps/strato/strato
py=/usr/bin/python3
threads=${THREADS:-$(nproc)}
out=${OUT:-runs/bench_compress}
runs=${RUNS:-300}
mkdir -p "$out"
source bench/compress/common.sh

train cnn configs/fashion_mnist_cnn.toml "${CNN_EPOCHS:-2}"
train resnet configs/fashion_mnist_resnet.toml "${RESNET_EPOCHS:-1}" --set train.precision=fp32
for name in cnn resnet; do
  src=$out/$name/model
  have "$src-int8" || { log "quantizing $name"; quantize "$src"; }
  log "report $name (strato: fp32, bf16 graph, bf16 autocast, int8)"
  "$bin" --quiet compress report --threads "$threads" --runs "$runs" --markdown "$out/$name-bf16.md" --json \
    --model "fp32=$src" --model "bf16=$src@bf16" --model "bf16-eager=$src@bf16-eager" --model "int8=$src-int8" \
    >"$out/$name-bf16.json"
  log "report $name (PyTorch)"
  $py bench/compress/peer.py "$src" --threads "$threads" --runs "$runs" >"$out/$name-bf16-peer.json"
done

$py - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
load = lambda p: json.load(open(os.path.join(out, p)))
for name, title in (("cnn", "Fashion-MNIST CNN"), ("resnet", "ResNet-20")):
    rows = {r["label"]: r for r in load(f"{name}-bf16.json")["rows"]}
    peer = load(f"{name}-bf16-peer.json")
    fp32, bf16, eager, int8 = rows["fp32"], rows["bf16"], rows["bf16-eager"], rows["int8"]
    print(f"\n## {title} ({peer['threads']} threads)\n")
    print(open(os.path.join(out, f"{name}-bf16.md")).read().strip())
    print(f"\nPyTorch on the same weights: bf16 autocast (eager, channels-last) accuracy "
          f"{100 * peer['bf16_autocast_accuracy']:.2f} %, b1 {peer['bf16_autocast_b1_ms']:.3f} ms, b64 "
          f"{peer['bf16_autocast_b64_per_s']:.0f}/s; network cast to bf16 accuracy {100 * peer['bf16_cast_accuracy']:.2f} %, "
          f"b1 {peer['bf16_cast_b1_ms']:.3f} ms, b64 {peer['bf16_cast_b64_per_s']:.0f}/s; TorchScript fp32 b1 "
          f"{peer['fp32_ts_b1_ms']:.3f} ms, b64 {peer['fp32_ts_b64_per_s']:.0f}/s\n")
    best_b1 = min(peer["bf16_autocast_b1_ms"], peer["bf16_cast_b1_ms"])
    best_b64 = max(peer["bf16_autocast_b64_per_s"], peer["bf16_cast_b64_per_s"])
    ratio = lambda a, b: f"{a / b:.2f}x"
    print(f"strato bf16 graph vs strato fp32 graph:      b1 {ratio(fp32['latency_ms_p50'], bf16['latency_ms_p50'])}, "
          f"b64 {ratio(bf16['throughput'], fp32['throughput'])}")
    print(f"strato bf16 graph vs bf16 autocast (strato): b1 {ratio(eager['latency_ms_p50'], bf16['latency_ms_p50'])}, "
          f"b64 {ratio(bf16['throughput'], eager['throughput'])}")
    print(f"strato bf16 graph vs PyTorch's faster bf16:  b1 {ratio(best_b1, bf16['latency_ms_p50'])}, "
          f"b64 {ratio(bf16['throughput'], best_b64)}")
    print(f"strato int8 graph vs strato bf16 graph:      b1 {ratio(bf16['latency_ms_p50'], int8['latency_ms_p50'])}, "
          f"b64 {ratio(int8['throughput'], bf16['throughput'])}")
    print(f"accuracy: strato fp32 {100 * fp32['accuracy']:.2f} %, bf16 graph {100 * bf16['accuracy']:.2f} %, "
          f"bf16 autocast {100 * eager['accuracy']:.2f} %, int8 {100 * int8['accuracy']:.2f} %")
PY
