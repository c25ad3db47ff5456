#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan + UBSan) and runs it for SECONDS over its seed
# corpus (bounded: CI runs each for 30 s). Exit 0 = no crash, leak or sanitizer report.
#   tests/fuzz/run.sh [SECONDS] [request|image|inputs]
#     request: the inference request decoder and the model config parsers
#     image:   the JPEG/PNG decode wrapper and the transform pipeline
#     inputs:  training/study configs with --set overrides, alert rules, autoscaling policies,
#              serve's config.toml, cloud catalog and traces,
#              CSV datasets, tar shards, shard indexes, manifests, IDX files, HTTP responses
set -euo pipefail
seconds=${1:-30}
target=${2:-request}
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v clang++-14 >/dev/null || command -v clang++ >/dev/null || { echo "skip: clang not installed"; exit 77; }
cxx=$(command -v clang++-14 || command -v clang++)
# FUZZ_OUT=DIR keeps the build, corpus and crash artifacts there (rerun one: DIR/fuzz DIR/crash-...).
if [[ -n ${FUZZ_OUT:-} ]]; then
  out=$FUZZ_OUT; rm -rf "$out/obj" "$out/corpus"; mkdir -p "$out"
else
  out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fi
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root/src")
mkdir -p "$out/corpus" "$out/obj"

# build SOURCES... -- LIBS...: compiles the sources in parallel (one per core), links $out/fuzz.
build() {
  local srcs=() pids=() src
  while (($#)) && [[ $1 != -- ]]; do srcs+=("$1"); shift; done
  (($#)) && shift
  for src in "${srcs[@]}"; do
    while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || exit 1; done
    "$cxx" "${flags[@]}" -c "$src" -o "$out/obj/$(echo "${src#"$root"/}" | tr / _).o" &
    pids+=($!)
  done
  for src in "${pids[@]}"; do wait "$src" || exit 1; done
  "$cxx" "${flags[@]}" "$out"/obj/*.o "$@" -o "$out/fuzz"
}

case "$target" in
request)
  flags+=(-DFMT_HEADER_ONLY=0)
  build "$root/tests/fuzz/fuzz_request.cpp" "$root/src/strato/serve/protocol/codec.cpp" \
    "$root/src/strato/serve/protocol/types.cpp" "$root/src/strato/serve/repository/model_config.cpp" \
    "$root/src/strato/core/status.cpp" -- -lfmt
  printf '\x00{"id":"1","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]}],"outputs":[{"name":"y","parameters":{"classification":2}}]}' >"$out/corpus/json"
  printf '\x00{"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","data":["ab","c"]},{"name":"b","shape":[1],"datatype":"BOOL","data":[true]}]}' >"$out/corpus/bytes"
  printf '\x00{"inputs":[{"name":"s","shape":[888888888880],"datatype":"BYTES","data":["ab","c"]}]}' >"$out/corpus/huge-shape"
  hdr='{"inputs":[{"name":"x","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}],"parameters":{"binary_data_output":true}}'
  { printf '\x01'; printf "\\x$(printf %02x $(( ${#hdr} >> 8 )))\\x$(printf %02x $(( ${#hdr} & 255 )))"; printf '%s' "$hdr"; printf '\x01\x00\x00\x00\x02\x00\x00\x00'; } >"$out/corpus/binary"
  printf '\x02name: "m"\nmax_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 3, -1 ] } ]\ndynamic_batching { preferred_batch_size: [ 4 ] }\n' >"$out/corpus/pbtxt"
  printf '\x03{"name":"m","max_batch_size":4,"input":[{"name":"x","data_type":"TYPE_INT8","dims":[2]}],"version_policy":{"latest":{"num_versions":1}}}' >"$out/corpus/config"
  max_len=65536
  ;;
image)
  build "$root/tests/fuzz/fuzz_image.cpp" "$root/src/strato/data/codec.cpp" \
    "$root/src/strato/data/transforms.cpp" "$root/src/strato/data/loader.cpp" "$root/src/strato/data/dataset.cpp" \
    "$root/src/strato/core/status.cpp" "$root/src/strato/core/check.cpp" -- -ljpeg -lpng -lfmt
  cp "$root"/tests/fuzz/corpus/image/* "$out/corpus/"
  max_len=16384
  ;;
inputs)
  # toml++ from Debian's compiled library, as strato links it (its header-only build reaches a
  # __builtin_unreachable on some invalid input; see Config.NonAsciiCharactersWhere... in tests/core).
  flags+=(-DTOML_HEADER_ONLY=0 -DTOML_SHARED_LIB=1)
  s="$root/src/strato"
  build "$root/tests/fuzz/fuzz_inputs.cpp" \
    "$s"/core/{status,check,config,fs,duration,log,csv_table,parse,signals,cgroup}.cpp "$s"/train/train_config.cpp "$s"/data/data_config.cpp \
    "$s"/tune/{space,sampler}.cpp "$s"/monitor/{alerts,snapshot}.cpp "$s"/cloud/{autoscale,catalog,simulator,spot}.cpp \
    "$s"/data/{csv,dataset,idx,manifest,codec,mapped_file,shards,tar,image_folder,remote,remote_fetch,loader,transforms}.cpp \
    "$s"/loadgen/{http_parse,schedule}.cpp "$s"/serve/repository/model_config.cpp "$s"/serve/protocol/types.cpp -- -lturbojpeg -ljpeg -lpng -ltomlplusplus -lfmt -lcrypto -lz
  cp "$root"/tests/fuzz/corpus/inputs/* "$out/corpus/"
  max_len=16384
  ;;
*) echo "tests/fuzz/run.sh: unknown target '$target' (expected request, image or inputs)" >&2; exit 2 ;;
esac
"$out/fuzz" -artifact_prefix="$out/" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len="$max_len" -print_final_stats=1 "$out/corpus" 2>&1 | tail -15
