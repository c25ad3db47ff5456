#!/usr/bin/env bash
# The GPU check of the GPU training path, for a machine with an NVIDIA GPU and a CUDA PyTorch 2.x
# in its python3 (the `device` tool's H200). Writes its results to ${OUT:-bench/gpu/out}/gpu_results.txt
# (and the build log beside it), and keeps to BUDGET_S seconds (default 450: under 8 minutes):
#
#   1. the machine: GPU, driver, torch/CUDA, compiler;
#   2. strato built against that torch (bench/gpu/build.sh: the minimal subset — training and
#      serving — with CUDA, Debian libraries carried as .deb files in .debs/ from
#      bench/gpu/fetch-debs.sh), unless STRATO_GPU_BIN names a built strato;
#   3. the unit tests labelled gpu (tests/gpu), and the train, dist and serve unit tests on this
#      libtorch; strato doctor / monitor; a short training across epoch ends with checkpoints;
#   4. strato serve on the GPU (bench/gpu/serve.sh: batched vs unbatched vs the in-process limit);
#   5. ResNet-50 training on synthetic 224x224 images, batch 256, images/s and peak GPU memory
#      (nvidia-smi, the same way for both): strato (bench/gpu/resnet50_synthetic.toml) and PyTorch
#      eager (bench/gpu/resnet50_peer.py) alternating, bf16 then fp16 AMP; then strato with its
#      CUDA graph and PyTorch with channels-last and torch.compile as time allows.
set -uo pipefail
cd "$(dirname "$0")/../.."
out_dir=${OUT:-bench/gpu/out}
mkdir -p "$out_dir"
out=$out_dir/gpu_results.txt
py=${PYTHON:-python3}
budget=${BUDGET_S:-450}
steps=${STEPS:-60}
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }
say() { echo "$*" | tee -a "$out"; }
export PYTHONUNBUFFERED=1

: >"$out"
say "# gpu check $(date -u +%FT%TZ), budget ${budget} s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$out"
$py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available(), "cxx11abi", torch._C._GLIBCXX_USE_CXX11_ABI)' 2>&1 | tee -a "$out"
{ g++ --version | head -1; cmake --version | head -1; nvcc --version | tail -1; grep PRETTY /etc/os-release; nproc; } 2>&1 | tee -a "$out"
torch_dir=$($py -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null)
say "torch include: $(ls "$torch_dir/include" 2>/dev/null | tr '\n' ' ')"
say "nccl.h: $(find "$torch_dir/.." /usr/local/cuda/include -maxdepth 5 -name nccl.h 2>/dev/null | head -2 | tr '\n' ' ')"

# 2. build
bin=${STRATO_GPU_BIN:-build/gpu/apps/strato/strato}
if [ -z "${STRATO_GPU_BIN:-}" ]; then
  s=$(date +%s)
  timeout $(($(left) - 120)) bench/gpu/build.sh build/gpu >"$out_dir/build.log" 2>&1
  say "build: exit $? in $(($(date +%s) - s)) s (log: build.log)"
  grep -E "error|FAILED|CMake Error" "$out_dir/build.log" | head -60 | tee -a "$out"
  grep -E "^-- (NCCL|fmt)|nccl.h" "$out_dir/build.log" | tee -a "$out"
fi

# 3. tests
for t in gpu/gpu_test train/train_test dist/dist_test serve/serve_test; do
  exe=build/gpu/tests/$t
  if [ -x "$exe" ]; then
    say "== $t"
    timeout 150 "$exe" --gtest_brief=1 >"$out_dir/test.log" 2>&1
    rc=$?
    tail -25 "$out_dir/test.log" | tee -a "$out"
    if [ $rc -ge 128 ] && command -v cuda-gdb >/dev/null; then  # a crash: where
      say "-- $t crashed (exit $rc); backtrace:"
      timeout 120 cuda-gdb -q -batch -ex run -ex "bt 25" --args "$exe" --gtest_brief=1 2>&1 | grep -E "^#|signal|Running|RUN" | head -40 | tee -a "$out"
    fi
  else
    say "== $t: not built"
  fi
done

# strato's own view of the machine: the GPU through NVML (doctor, monitor)
if [ -x "$bin" ]; then
  say "== strato doctor / monitor"
  timeout 60 "$bin" doctor 2>&1 | grep -iE "gpu|cuda|nvml|driver" | head -8 | tee -a "$out"
  timeout 30 "$bin" monitor --once --json 2>&1 | $py -c 'import json,sys; d=json.load(sys.stdin); print("monitor gpus:", json.dumps(d.get("gpus", d))[:600])' 2>&1 | tee -a "$out"
fi

# 4. training throughput
mem_watch() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null & echo $!; }
peer() {  # label, then resnet50_peer.py flags
  local label=$1; shift
  [ "$(left)" -gt 60 ] || { say "pytorch $label: skipped (time)"; return; }
  local mem; mem=$(mktemp); local w; w=$(mem_watch "$mem")
  local line; line=$(timeout $(($(left) - 10)) $py bench/gpu/resnet50_peer.py --batch 256 --steps "$steps" "$@" 2>&1 | tail -1)
  kill "$w" 2>/dev/null
  say "pytorch $label: $line peak_smi_mib $(sort -n "$mem" | tail -1)"
}
strato() {  # label, precision, cuda_graph
  local label=$1 prec=$2 graph=$3
  [ -x "$bin" ] || { say "strato $label: no binary"; return; }
  [ "$(left)" -gt 60 ] || { say "strato $label: skipped (time)"; return; }
  local dir; dir=$(mktemp -d)
  local mem; mem=$(mktemp); local w; w=$(mem_watch "$mem")
  timeout $(($(left) - 10)) "$bin" -q train bench/gpu/resnet50_synthetic.toml --set run.dir="\"$dir\"" \
    --set train.precision="\"$prec\"" --set train.cuda_graph="$graph" --set train.max_steps="$steps" --set data.limit_train=$((256 * (steps + 4))) --no-report \
    >/dev/null 2>"$dir/err"
  local rc=$?
  kill "$w" 2>/dev/null
  local rate
  rate=$($py -c "import json,statistics,sys; r=[json.loads(l)['samples_per_s'] for l in open(sys.argv[1]) if '\"train\"' in l]; print(round(statistics.median(r[1:] or r), 1), [round(x) for x in r])" "$dir/resnet50/metrics.jsonl" 2>/dev/null)
  say "strato $label: exit $rc images_per_s ${rate:-none} peak_smi_mib $(sort -n "$mem" | tail -1)"
  [ $rc -eq 0 ] || tail -5 "$dir/err" | tee -a "$out"
  grep -i "graph\|nccl" "$dir/err" | head -3 | tee -a "$out"
}
# A short run across epoch ends with checkpoints pruned (keep_last 1), the path that crashed in
# libtorch.so's own std::filesystem::remove_all before fs::remove_tree; under cuda-gdb if it fails.
epochs_and_checkpoints() {
  [ -x "$bin" ] && [ "$(left)" -gt 40 ] || return
  local dir; dir=$(mktemp -d)
  local args=(-q train bench/gpu/resnet50_synthetic.toml --set run.dir="\"$dir\"" --set model.depth=18
    --set data.image_size=64 --set data.batch_size=32 --set data.limit_train=256 --set train.max_steps=20
    --set checkpoint.every_steps=5 --set checkpoint.keep_last=1 --set train.eval_every=1 --no-report)
  timeout 60 "$bin" "${args[@]}" >/dev/null 2>"$dir/err"
  local rc=$?
  say "strato epochs+checkpoints (resnet-18, 64 px, 20 steps over 3 epochs): exit $rc, checkpoints left: $(ls "$dir/resnet50/checkpoints" 2>/dev/null | tr '\n' ' ')"
  if [ $rc -ne 0 ] && command -v cuda-gdb >/dev/null; then
    tail -3 "$dir/err" | tee -a "$out"
    timeout 60 cuda-gdb -q -batch -ex run -ex "bt 25" --args "$bin" "${args[@]}" 2>&1 |
      grep -E "^#|signal|exited|error" | head -40 | tee -a "$out"
  fi
}
if [ ! -x "$bin" ] && [ "${PEER_WITHOUT_STRATO:-0}" != 1 ]; then
  say "no strato binary: measurements skipped (PEER_WITHOUT_STRATO=1 measures PyTorch alone)"
else
  # strato trains channels-last by default: its peer is PyTorch eager channels-last, the faster
  # of PyTorch's two eager layouts; the NCHW default and torch.compile follow as time allows.
  epochs_and_checkpoints
  [ "$(left)" -gt 200 ] && BUDGET_S=$(($(left) > 330 ? 150 : $(left) - 180)) STRATO_GPU_BIN=$bin bench/gpu/serve.sh
  [ "$(left)" -gt 330 ] && PRECISION=fp16 BUDGET_S=130 STRATO_GPU_BIN=$bin bench/gpu/serve.sh
  strato "bf16" bf16 false
  peer "eager bf16 channels-last" --precision bf16 --channels-last
  strato "fp16" fp16 false
  peer "eager fp16 channels-last" --precision fp16 --channels-last
  strato "bf16 cuda-graph" bf16 true
  strato "fp16 cuda-graph" fp16 true
  peer "eager bf16" --precision bf16
  peer "eager fp16" --precision fp16
  peer "compile bf16" --precision bf16 --compile
fi
say "# done in $(($(date +%s) - t0)) s"
