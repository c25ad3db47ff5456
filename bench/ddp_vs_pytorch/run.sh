#!/usr/bin/env bash
# Data-parallel training, strato vs PyTorch DDP (Debian python3-torch, Gloo, torch.multiprocessing)
# on Fashion-MNIST: 2 processes on this machine, the default CNN, batch 64 per rank, SGD, one
# intra-op thread per rank, same data order. Alternates the two REPS times (the machine is shared
# and noisy) and prints the medians and the ratio, plus where strato's step time goes: how long
# ranks waited for all-reduces after backward, and how much of the all-reduce time backward hid.
#   bench/ddp_vs_pytorch/run.sh          (REPS=3 STEPS=300 PROCS=2 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup --bench
scripts/build release --target strato >/dev/null
bin=$PWD/build/release/apps/strato/strato
py=/usr/bin/python3
reps=${REPS:-3} steps=${STEPS:-300} procs=${PROCS:-2} batch=${BATCH:-64}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

strato_rate() {  # run name -> global samples/s (median of windows after the first); also keeps the log
  local name=$1
  "$bin" launch --standalone --nproc-per-node "$procs" --quiet-workers --log-dir "$tmp/launch-$name" \
    "$bin" train configs/fashion_mnist_cnn.toml --set run.dir="$tmp" --set run.name="$name" \
    --set data.augment=[] --set data.workers=1 --set run.threads=1 --set checkpoint.every_steps=0 \
    --set data.batch_size="$batch" --set train.max_steps="$steps" --set train.log_every=25 --set train.epochs=1 \
    --set schedule.name=constant --set train.precision=fp32 --no-report >/dev/null 2>"$tmp/$name.err" \
    || { echo "strato failed:"; tail -20 "$tmp/$name.err"; exit 1; } >&2
  $py - "$tmp/$name/metrics.jsonl" <<'PY'
import json, statistics, sys
rates = [json.loads(l)["samples_per_s"] for l in open(sys.argv[1]) if '"train"' in l]
print(statistics.median(rates[1:] or rates))
PY
}
peer_rate() {  # extra ddp.py flags
  $py bench/ddp_vs_pytorch/ddp.py --procs "$procs" --batch "$batch" --steps "$steps" --window 25 "$@" \
    | $py -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

s=() p=() pcl=() pmal=()
malloc_env="MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=268435456"
for ((r = 0; r < reps; r++)); do
  s+=("$(strato_rate "run$r")")
  p+=("$(peer_rate)")
  pcl+=("$(peer_rate --channels-last)")
  pmal+=("$(env $malloc_env bash -c "$(declare -f peer_rate); py=$py procs=$procs batch=$batch steps=$steps; peer_rate --channels-last")")
done
sm=$(median "${s[@]}") pm=$(median "${p[@]}") pclm=$(median "${pcl[@]}") pmalm=$(median "${pmal[@]}")
echo "ddp_vs_pytorch: $(date -u +%F), $procs processes x 1 thread, CNN, batch $batch per rank, $steps steps, median of $reps"
echo "  strato launch + train                      : $(printf '%.0f' "$sm") samples/s   (runs: ${s[*]})"
echo "  PyTorch DDP (gloo)                         : $(printf '%.0f' "$pm") samples/s   (runs: ${p[*]})"
echo "  PyTorch DDP, channels-last                 : $(printf '%.0f' "$pclm") samples/s   (runs: ${pcl[*]})"
echo "  PyTorch DDP, channels-last + strato malloc : $(printf '%.0f' "$pmalm") samples/s   (runs: ${pmal[*]})"
$py -c "import sys; s=float(sys.argv[1]); print('  ratios strato / pytorch: ' + ', '.join(f'{s/float(x):.2f}x' for x in sys.argv[2:]))" "$sm" "$pm" "$pclm" "$pmalm"
# Where strato's time went (rank 0 of the last run).
grep -h "data parallel:" "$tmp/launch-run$((reps - 1))/attempt_0/rank_0.log" | sed 's/^/  /'
