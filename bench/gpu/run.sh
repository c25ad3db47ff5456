#!/usr/bin/env bash
# The GPU check of the GPU training path, for a machine with an NVIDIA GPU and PyTorch 2.x with
# CUDA in its python3 (the `device` tool's H200). Writes everything to one file,
# ${OUT:-bench/gpu}/gpu_results.txt, and is sized to finish in under 8 minutes.
#
#   1. the machine: GPU, driver, torch/CUDA versions;
#   2. PyTorch eager ResNet-50 training on synthetic 224x224 images, batch 256, from pinned host
#      batches: bf16 autocast, fp16 autocast + GradScaler, and bf16 under torch.compile; images/s
#      and peak GPU memory (bench/gpu/resnet50_peer.py);
#   3. strato: when a CUDA build exists (STRATO_GPU_BIN, default build/gpu/apps/strato/strato),
#      the unit tests labelled gpu and the same training through
#        strato train ... --set run.device=cuda --set data.dataset=synthetic --set model.depth=50
#      in bf16 and fp16, with the ratio to PyTorch eager.
#
# Step 3 needs strato built against the machine's CUDA libtorch:
#   cmake -S . -B build/gpu -G Ninja -DSTRATO_WITH_CUDA=ON \
#         -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
# The device image has CMake, ninja and g++ but not the Debian libraries strato builds on (fmt,
# spdlog, toml++, nlohmann-json, CLI11, Boost headers, libpng, libturbojpeg, OpenSSL, OpenCV for
# the ONNX backend), and nothing can be fetched there: they have to travel as .deb files unpacked
# into a prefix before configuring. That step is not written yet (see docs/gpu.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
out_dir=${OUT:-bench/gpu}
mkdir -p "$out_dir"
out=$out_dir/gpu_results.txt
py=${PYTHON:-python3}
steps=${STEPS:-60}
batch=${BATCH:-256}
bin=${STRATO_GPU_BIN:-build/gpu/apps/strato/strato}
export PYTHONUNBUFFERED=1

{
  echo "# gpu check $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "no nvidia-smi"
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())'
} | tee "$out"

peer() {  # label, then resnet50_peer.py flags
  local label=$1; shift
  echo "pytorch $label: $(timeout 240 $py bench/gpu/resnet50_peer.py --batch "$batch" --steps "$steps" "$@" 2>&1 | tail -1)" \
    | tee -a "$out"
}
peer "eager bf16" --precision bf16
peer "eager fp16" --precision fp16
peer "eager bf16 channels-last" --precision bf16 --channels-last
peer "compile bf16" --precision bf16 --compile

if [ -x "$bin" ]; then
  ctest --test-dir "$(dirname "$(dirname "$(dirname "$bin")")")" -L gpu --output-on-failure 2>&1 | tail -5 | tee -a "$out"
  for prec in bf16 fp16; do
    tmp=$(mktemp -d)
    timeout 240 "$bin" -q train configs/fashion_mnist_cnn.toml --set run.device='"cuda"' --set data.dataset='"synthetic"' \
      --set data.image_size=224 --set data.limit_train=$((batch * 8)) --set data.limit_test="$batch" \
      --set model.arch='"resnet"' --set model.depth=50 --set model.width=64 --set data.batch_size="$batch" \
      --set data.augment=[] --set data.workers=8 --set train.precision="\"$prec\"" --set train.max_steps="$steps" \
      --set train.log_every=15 --set train.epochs=100 --set checkpoint.every_steps=0 --set run.dir="$tmp" \
      --set run.name=r50 --no-report >/dev/null 2>"$tmp/err" || tail -5 "$tmp/err" | tee -a "$out"
    rate=$($py -c "import json,statistics,sys; r=[json.loads(l)['samples_per_s'] for l in open(sys.argv[1]) if '\"train\"' in l]; print(statistics.median(r[1:] or r))" "$tmp/r50/metrics.jsonl" 2>/dev/null)
    echo "strato $prec: images_per_s ${rate:-none}" | tee -a "$out"
  done
else
  echo "strato: no CUDA build at $bin (step 3 skipped; see the header of this script)" | tee -a "$out"
fi
