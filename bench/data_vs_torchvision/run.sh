#!/usr/bin/env bash
# Input pipeline: strato vs torchvision ImageFolder + DataLoader (Debian python3-torchvision, PIL)
# on a JPEG image folder made from Fashion-MNIST (gen.py: 10k images of 200-320 px a side).
# Same transforms (RandomResizedCrop 224 + horizontal flip + normalize), 2 workers, batch 64,
# one epoch, the first batch not timed. Alternates the two REPS times (the machine is shared and
# noisy) and prints the medians and the ratio; then the single-thread pipeline against a raw
# single-thread libjpeg-turbo decode of the same files, and the eval transforms (resize 256 +
# center crop 224).
#   bench/data_vs_torchvision/run.sh        (REPS=3 N=10000 WORKERS=2 BATCH=64)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup --bench
scripts/build release --target strato >/dev/null
bin=$PWD/build/release/apps/strato/strato
py=/usr/bin/python3
reps=${REPS:-3} n=${N:-10000} workers=${WORKERS:-2} batch=${BATCH:-64}
data=${STRATO_BENCH_DATA:-$HOME/.cache/strato/bench}/fmnist-jpeg-$n
if [ ! -f "$data/.done" ]; then
  echo "writing $n JPEGs to $data (once)..."
  rm -rf "$data"
  $py bench/data_vs_torchvision/gen.py "$data" --train "$n" --test 1000
  touch "$data/.done"
fi
train=$data/train
strato_rate() {  # extra flags -> images/s
  "$bin" data bench "$train" --workers "$workers" --batch-size "$batch" --json "$@" |
    $py -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])'
}
peer_rate() {
  $py bench/data_vs_torchvision/torchvision_loader.py "$train" --workers "$workers" --batch "$batch" "$@" |
    $py -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { $py -c "print(f'{$1 / $2:.2f}')"; }

train_tf=(--transform "random-resized-crop size=224" --transform hflip)
eval_tf=(--transform "resize size=256" --transform "center-crop size=224")
s=() p=() se=() pe=()
for ((r = 0; r < reps; r++)); do
  s+=("$(strato_rate "${train_tf[@]}")")
  p+=("$(peer_rate)")
  se+=("$(strato_rate "${eval_tf[@]}")")
  pe+=("$(peer_rate --eval)")
  echo "rep $((r + 1)): train strato ${s[-1]} torchvision ${p[-1]} | eval strato ${se[-1]} torchvision ${pe[-1]} images/s"
done
single=$("$bin" data bench "$train" --workers 0 --batch-size "$batch" --raw-decode --json "${train_tf[@]}")
one=$(echo "$single" | $py -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])')
raw=$(echo "$single" | $py -c 'import json,sys; print(json.load(sys.stdin)["raw_decode_images_per_s"])')
ms=$(median "${s[@]}") mp=$(median "${p[@]}") mse=$(median "${se[@]}") mpe=$(median "${pe[@]}")
echo
echo "RandomResizedCrop 224 + flip + normalize, $workers workers, batch $batch, $n images (medians of $reps):"
printf '  strato %.0f images/s, torchvision %.0f images/s: %sx\n' "$ms" "$mp" "$(ratio "$ms" "$mp")"
echo "Resize 256 + CenterCrop 224 + normalize:"
printf '  strato %.0f images/s, torchvision %.0f images/s: %sx\n' "$mse" "$mpe" "$(ratio "$mse" "$mpe")"
echo "One thread (strato --workers 0) against a raw whole-image libjpeg-turbo decode of the same files:"
printf '  pipeline %.0f images/s, raw decode %.0f images/s: %sx\n' "$one" "$raw" "$(ratio "$one" "$raw")"
