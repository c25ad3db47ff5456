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
    --set train.log_every=50 --set train.epochs=1 --no-report "$@" >/dev/null
  $py - "$tmp/$name/metrics.jsonl" <<'PY'
import json, statistics, sys
rates = [json.loads(l)["samples_per_s"] for l in open(sys.argv[1]) if '"train"' in l]
print(statistics.median(rates[1:] or rates))
PY
}

peer_rate() { $py bench/train_vs_pytorch/train.py --threads "$threads" "$@" | $py -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])'; }

row() {  # label, strato rate, peer rate
  $py -c "import sys; s,p=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]:<34} strato {s:9.0f}/s   pytorch {p:9.0f}/s   ratio {s/p:5.2f}x')" "$@"
}

echo "train_vs_pytorch: $(date -u +%F), $threads threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
mlp_sets=(--set model.arch=mlp --set model.width=128 --set model.depth=2 --set model.dropout=0 --set data.batch_size=32
          --set optim.name=adamw --set optim.lr=0.001 --set optim.weight_decay=0.0001 --set train.max_steps=2000
          --set train.precision=fp32 --set schedule.name=constant)
s=$(strato_rate mlp "${mlp_sets[@]}")
p=$(peer_rate --model mlp --width 128 --depth 2 --optim adamw --lr 0.001 --batch 32 --steps 2000 --window 50)
row "MLP 784-128-64-10 b32 AdamW fp32" "$s" "$p"

cnn_sets=(--set data.batch_size=128 --set train.max_steps=300 --set schedule.name=constant)
s32=$(strato_rate cnn32 "${cnn_sets[@]}" --set train.precision=fp32)
p32=$(peer_rate --model cnn --width 32 --hidden 256 --dropout 0.25 --batch 128 --steps 300)
row "CNN b128 SGD fp32" "$s32" "$p32"
s16=$(strato_rate cnn16 "${cnn_sets[@]}" --set train.precision=bf16)
p16=$(peer_rate --model cnn --width 32 --hidden 256 --dropout 0.25 --batch 128 --steps 300 --bf16)
row "CNN b128 SGD bf16 autocast" "$s16" "$p16"
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
