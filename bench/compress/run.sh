#!/usr/bin/env bash
# strato compress, all of issue 8's goals in one run, with PyTorch's own INT8 and FP32 paths as the
# peer on the same weights (bench/compress/peer.py). For the Fashion-MNIST CNN and a ResNet-20:
#   train fp32 → quantize (INT8) → prune 50 % of weights (magnitude) → prune 30 % of channels,
#   `strato compress report` over fp32 / bf16 / INT8 / pruned rows, and the peer's numbers;
# for the CNN also distillation: a 4x smaller student with and without a teacher (the same CNN
# trained 30 epochs; KD temperature 2, alpha 0.9), 2 seeds each.
# It ends with one line per goal: the measured value, the goal and met / NOT met.
#
#   bench/compress/run.sh                       # everything (about 45 minutes on 2 cores)
#   OUT=runs/bench_compress bench/compress/run.sh  # where the runs go (kept: a second run reuses
#                                               # every finished package; --fresh starts over)
#   CNN_EPOCHS=12 RESNET_EPOCHS=4 TEACHER_EPOCHS=30 STUDENT_EPOCHS=12 FT_EPOCHS=2 KD_T=2 KD_ALPHA=0.9 \
#     RUNS=300 bench/compress/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ ${1:-} == --fresh ]] && fresh=1 || fresh=0
scripts/setup --bench
scripts/build release --target strato >/dev/null
bin=build/release/apps/strato/strato
py=/usr/bin/python3
threads=$(nproc)
out=${OUT:-runs/bench_compress}
cnn_epochs=${CNN_EPOCHS:-12}
resnet_epochs=${RESNET_EPOCHS:-4}
student_epochs=${STUDENT_EPOCHS:-12}
teacher_epochs=${TEACHER_EPOCHS:-30}
kd_t=${KD_T:-2}
kd_alpha=${KD_ALPHA:-0.9}
kd=student-kd-t$kd_t-a$kd_alpha  # the KD students' run names (plus -s0, -s1)
ft_epochs=${FT_EPOCHS:-2}
runs=${RUNS:-300}
((fresh)) && rm -rf "$out"
mkdir -p "$out"
source bench/compress/common.sh

# compress_model NAME ROUND_TO: INT8, 50 % magnitude, 30 % channels (kept widths rounded down to a
# multiple of ROUND_TO), the report and the peer for $out/NAME/model.
compress_model() {
  local name=$1 round_to=$2 src=$out/$1/model
  have "$src-int8" || { log "quantizing $name"; quantize "$src"; }
  for spec in magnitude:0.5:50 channels:0.3:30; do
    IFS=: read -r method amount pct <<<"$spec"
    local dir=$out/$name-prune-$method-$pct
    if ! have "$dir/model"; then
      log "pruning $name: $method $amount, $ft_epochs fine-tuning epochs"
      "$bin" --quiet compress prune --model "$src" --method "$method" --amount "$amount" --epochs "$ft_epochs" \
        --round-to "$round_to" --output "$dir" --resume --json >"$out/$name-prune-$method-$pct.json"
    fi
  done
  have "$out/$name-prune-channels-30/model-int8" || quantize "$out/$name-prune-channels-30/model"
  log "report $name (strato)"
  local extra=()
  [[ $name == cnn ]] && extra=(--model "student=$out/student-s0/model" --model "student-kd=$out/$kd-s0/model")
  "$bin" --quiet compress report --threads "$threads" --runs "$runs" --markdown "$out/$name-report.md" --json \
    --model "fp32=$src" --model "fp32-eager=$src@eager" --model "bf16=$src@bf16" --model "int8=$src-int8" \
    --model "magnitude-50=$out/$name-prune-magnitude-50/model" \
    --model "channels-30=$out/$name-prune-channels-30/model" \
    --model "channels-30-int8=$out/$name-prune-channels-30/model-int8" "${extra[@]}" >"$out/$name-report.json"
  log "report $name (PyTorch: FX INT8 onednn, TorchScript fp32)"
  $py bench/compress/peer.py "$src" --threads "$threads" --runs "$runs" >"$out/$name-peer.json"
}

train cnn configs/fashion_mnist_cnn.toml "$cnn_epochs"
# ResNet-20 in float32 (the config trains in bf16 autocast; fp32 keeps the bench about the model).
train resnet configs/fashion_mnist_resnet.toml "$resnet_epochs" --set train.precision=fp32
# The teacher: the same CNN trained longer (1.8 pt above the student instead of 0.7).
train teacher configs/fashion_mnist_cnn.toml "$teacher_epochs"
for seed in 0 1; do
  train "student-s$seed" configs/fashion_mnist_student.toml "$student_epochs" --set run.seed="$seed"
  if ! have "$out/$kd-s$seed/model"; then
    log "distilling $kd-s$seed ($student_epochs epochs)"
    "$bin" --quiet compress distill --teacher "$out/teacher/model" --config configs/fashion_mnist_student.toml \
      --temperature "$kd_t" --alpha "$kd_alpha" --set run.dir="$out" --set run.name="$kd-s$seed" --set run.seed="$seed" \
      --set train.epochs="$student_epochs" --set run.threads="$threads" --no-report --resume >/dev/null
  fi
done
# ResNet-20's inner widths are 16-32-64: at batch 1 oneDNN's AVX-512 kernels fill 16 output
# channels per vector, so its pruned widths are rounded to 16 (stage 1 keeps what it has left).
compress_model cnn 8
compress_model resnet 16

$py - "$out" "$kd" <<'PY'
import json, os, sys
out, kd_name = sys.argv[1], sys.argv[2]
def load(p): return json.load(open(os.path.join(out, p)))
def acc(pkg): return json.load(open(os.path.join(out, pkg, "model", "metrics.json")))["test_acc"]
goals = []
def goal(text, value, ok, target): goals.append((text, value, target, ok))
for name, title in (("cnn", "Fashion-MNIST CNN"), ("resnet", "ResNet-20")):
    rows = {r["label"]: r for r in load(f"{name}-report.json")["rows"]}
    peer = load(f"{name}-peer.json")
    fp32, i8, mag, ch = rows["fp32"], rows["int8"], rows["magnitude-50"], rows["channels-30"]
    print(f"\n## {title} ({peer['threads']} threads)\n")
    print(open(os.path.join(out, f"{name}-report.md")).read().strip())
    print(f"\nPyTorch on the same weights: FX INT8 (onednn) accuracy {100 * peer['int8_accuracy']:.2f} %, "
          f"b1 {peer['int8_b1_ms']:.3f} ms, b64 {peer['int8_b64_per_s']:.0f}/s; TorchScript fp32 b1 "
          f"{peer['fp32_ts_b1_ms']:.3f} ms, b64 {peer['fp32_ts_b64_per_s']:.0f}/s; eager channels-last fp32 b1 "
          f"{peer['fp32_eager_b1_ms']:.3f} ms, b64 {peer['fp32_eager_b64_per_s']:.0f}/s")
    print(f"strato INT8 / PyTorch FX INT8: latency b1 {peer['int8_b1_ms'] / i8['latency_ms_p50']:.2f}x, "
          f"throughput b64 {i8['throughput'] / peer['int8_b64_per_s']:.2f}x")
    print(f"strato fp32 / PyTorch TorchScript fp32: latency b1 {peer['fp32_ts_b1_ms'] / fp32['latency_ms_p50']:.2f}x, "
          f"throughput b64 {fp32['throughput'] / peer['fp32_ts_b64_per_s']:.2f}x")
    eager = rows["fp32-eager"]
    print(f"strato fp32 fused / eager: latency b1 {eager['latency_ms_p50'] / fp32['latency_ms_p50']:.2f}x, "
          f"throughput b64 {fp32['throughput'] / eager['throughput']:.2f}x")
    drop = 100 * (fp32["accuracy"] - i8["accuracy"])
    goal(f"{name}: INT8 accuracy drop", f"{drop:+.2f} pt", drop <= 1.0, "<= 1.0 pt")
    goal(f"{name}: INT8 latency b1 vs fp32", f"{i8['latency_speedup']:.2f}x", i8["latency_speedup"] >= 2, ">= 2x")
    goal(f"{name}: INT8 throughput b64 vs fp32", f"{i8['throughput_speedup']:.2f}x", i8["throughput_speedup"] >= 2, ">= 2x")
    sparsity = load(f"{name}-prune-magnitude-50.json")["sparsity"]  # written with the package
    drop = 100 * (fp32["accuracy"] - mag["accuracy"])
    goal(f"{name}: magnitude pruning, {100 * sparsity:.0f} % of weights, accuracy drop",
         f"{drop:+.2f} pt", drop <= 1.0, "<= 1.0 pt")
    drop = 100 * (fp32["accuracy"] - ch["accuracy"])
    lower = 100 * (1 - ch["latency_ms_p50"] / fp32["latency_ms_p50"])
    goal(f"{name}: 30 % channels pruned, latency b1 lower by", f"{lower:.1f} %", lower >= 20, ">= 20 %")
    goal(f"{name}: 30 % channels pruned, accuracy drop", f"{drop:+.2f} pt", drop <= 1.5, "<= 1.5 pt")
plain = [acc(f"student-s{s}") for s in (0, 1)]
kd = [acc(f"{kd_name}-s{s}") for s in (0, 1)]
gain = 100 * (sum(kd) - sum(plain)) / 2
print(f"\n## Distillation (student {', '.join(f'{100 * a:.2f}' for a in plain)} %; with KD "
      f"{', '.join(f'{100 * a:.2f}' for a in kd)} % ({kd_name}); teacher {100 * acc('teacher'):.2f} %)")
goal("KD gain over the same student, mean of 2 seeds", f"{gain:+.2f} pt", gain >= 0.5, ">= +0.5 pt")
print("\n## Goals\n")
for text, value, target, ok in goals:
    print(f"{text:<58} {value:>10}   goal {target:<10} {'met' if ok else 'NOT met'}")
PY
