#!/usr/bin/env bash
# strato train vs Python PyTorch (Debian python3-torch) on Fashion-MNIST: same model, data order,
# batch, optimizer and thread count, in one run. Prints samples/s for both and the ratio.
#   bench/train_vs_pytorch/run.sh            # throughput cases (a few minutes)
#   bench/train_vs_pytorch/run.sh --accuracy # also bf16 vs fp32 accuracy after 3 CNN epochs each
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup --bench
scripts/build release --target strato >/dev/null
bin=build/release/apps/strato/strato
py=/usr/bin/python3
threads=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# strato's samples/s: the median of the metrics.jsonl windows after the first (warm-up).
strato_rate() {  # name, then --set args
  local name=$1; shift
  "$bin" --quiet train configs/fashion_mnist_cnn.toml --set run.dir="$tmp" --set run.name="$name" \
    --set data.augment=[] --set data.workers=2 --set run.threads="$threads" --set checkpoint.every_steps=0 \
    --set train.log_every=50 --set train.epochs=1 --no-report --overwrite "$@" >/dev/null || { echo "strato train failed" >&2; exit 1; }
  $py - "$tmp/$name/metrics.jsonl" <<'PY'
import json, statistics, sys
rates = [json.loads(l)["samples_per_s"] for l in open(sys.argv[1]) if '"train"' in l]
print(statistics.median(rates[1:] or rates))
PY
}

peer_rate() { $py bench/train_vs_pytorch/train.py --threads "$threads" "$@" | $py -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])'; }

row() {  # label, strato rate, peer rate
  $py -c "import sys; s,p=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]:<40} strato {s:8.0f}/s   pytorch {p:8.0f}/s   ratio {s/p:5.2f}x')" "$@"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# compare LABEL REPS "strato --set args" "peer args": alternates the two REPS times (the machine is
# shared and noisy) and prints the medians.
compare() {
  local label=$1 reps=$2 sets=$3 peer=$4 s=() p=()
  for ((r = 0; r < reps; r++)); do
    # shellcheck disable=SC2086
    s+=("$(strato_rate "run$r" $sets)")
    # shellcheck disable=SC2086
    p+=("$(peer_rate $peer)")
  done
  row "$label" "$(median "${s[@]}")" "$(median "${p[@]}")"
  last_strato=$(median "${s[@]}")
}

reps=${REPS:-3}
echo "train_vs_pytorch: $(date -u +%F), $threads threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), median of $reps alternating runs"
compare "MLP 784-128-64-10 b32 AdamW fp32" "$reps" \
  "--set model.arch=mlp --set model.width=128 --set model.depth=2 --set model.dropout=0 --set data.batch_size=32
   --set optim.name=adamw --set optim.lr=0.001 --set optim.weight_decay=0.0001 --set train.max_steps=2000
   --set train.precision=fp32 --set schedule.name=constant" \
  "--model mlp --width 128 --depth 2 --optim adamw --lr 0.001 --batch 32 --steps 2000 --window 50"
cnn="--set data.batch_size=128 --set train.max_steps=300 --set schedule.name=constant"
peer_cnn="--model cnn --width 32 --hidden 256 --dropout 0.25 --batch 128 --steps 300"
compare "CNN b128 SGD fp32" "$reps" "$cnn --set train.precision=fp32" "$peer_cnn"
s32=$last_strato
compare "CNN b128 SGD fp32, peer channels-last" "$reps" "$cnn --set train.precision=fp32" "$peer_cnn --channels-last"
malloc_env="MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=268435456"
py="env $malloc_env /usr/bin/python3"
compare "CNN b128 SGD fp32, peer CL + strato's malloc" "$reps" "$cnn --set train.precision=fp32" "$peer_cnn --channels-last"
py=/usr/bin/python3
compare "CNN b128 SGD bf16 autocast" "$reps" "$cnn --set train.precision=bf16" "$peer_cnn --bf16"
s16=$last_strato
compare "CNN b128 SGD bf16, peer channels-last" "$reps" "$cnn --set train.precision=bf16" "$peer_cnn --bf16 --channels-last"
py="env $malloc_env /usr/bin/python3"
compare "CNN b128 SGD bf16, peer CL + strato's malloc" "$reps" "$cnn --set train.precision=bf16" "$peer_cnn --bf16 --channels-last"
py=/usr/bin/python3
row "strato bf16 vs strato fp32 (CNN)" "$s16" "$s32"

if [ "${1:-}" = "--accuracy" ]; then
  for prec in fp32 bf16; do
    "$bin" --quiet train configs/fashion_mnist_cnn.toml --set run.dir="$tmp" --set run.name="acc_$prec" \
      --set train.epochs=3 --set train.precision="$prec" --no-report --json >"$tmp/acc_$prec.json"
  done
  $py - "$tmp/acc_fp32.json" "$tmp/acc_bf16.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print(f"CNN 3 epochs test accuracy: fp32 {100*a['test_acc']:.2f}% in {a['wall_time_s']:.0f} s, "
      f"bf16 {100*b['test_acc']:.2f}% in {b['wall_time_s']:.0f} s "
      f"(diff {100*(b['test_acc']-a['test_acc']):+.2f} pt, time ratio {a['wall_time_s']/b['wall_time_s']:.2f}x)")
PY
fi
