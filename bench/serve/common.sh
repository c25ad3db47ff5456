# Shared by the serve benchmarks (sourced from the project root): the scratch directory and its
# cleanup, the tools, the CNN package, its repository config and the request body. The helpers
# after build_bench_tools expect $bin (a strato binary) and $tmp (a scratch directory), which
# bench_scratch sets.

# bench_scratch: $bin (the release strato), $tmp (a scratch directory) and an EXIT trap that stops
# the processes a script started ($server, $server2, $spin; empty when none runs) and removes $tmp.
bench_scratch() {
  bin=build/release/apps/strato/strato
  tmp=$(mktemp -d)
  server= server2= spin=
  trap bench_cleanup EXIT
}
bench_cleanup() {
  for p in ${server:-} ${server2:-} ${spin:-}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}

# Installs what the benchmarks need and builds strato and serve_forward_bench (release).
build_bench_tools() {
  scripts/setup --bench
  [ -f build/release/build.ninja ] || cmake --preset release >/dev/null
  cmake -S . -B build/release -DSTRATO_BUILD_BENCHMARKS=ON >/dev/null
  cmake --build build/release --target strato serve_forward_bench >/dev/null
}

# Sets $pkg to $1, or to a package of the default CNN's architecture trained briefly into $tmp
# (accuracy does not matter for speed). Extra arguments are passed to strato train.
ensure_package() {
  pkg=${1:-}
  [ -n "$pkg" ] && return 0
  shift || true
  "$bin" -q train configs/fashion_mnist_cnn.toml --set run.dir="\"$tmp/run\"" --set train.epochs=1 \
    --set data.limit_train=2000 --set data.limit_test=500 --no-report "$@" >/dev/null
  pkg=$tmp/run/fashion_mnist_cnn/model
}

# write_cnn_repo DIR BATCHED(yes|no) [CONFIG LINE...]: a repository DIR/cnn/{config.pbtxt,1/} holding
# $pkg, one image per request in and logits/probabilities out, max_batch_size 64.
write_cnn_repo() {
  local dir=$1 batched=$2
  shift 2
  mkdir -p "$dir/cnn/1" && cp "$pkg"/* "$dir/cnn/1/"
  {
    echo 'max_batch_size: 64'
    echo 'input [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]'
    echo 'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] }, { name: "probabilities" data_type: TYPE_FP32 dims: [ 10 ] } ]'
    for line in "$@"; do echo "$line"; done
    if [ "$batched" = yes ]; then echo 'dynamic_batching { }'; fi
  } >"$dir/cnn/config.pbtxt"
}

# write_infer_body [OUTPUTS_JSON]: $tmp/body.bin (the first Fashion-MNIST test image as a binary
# tensor, behind its JSON header) and $tmp/hl (the header's length) for bench/serve/post.lua.
# OUTPUTS_JSON, if given, is the request's "outputs" list (e.g. logits only, as binary).
write_infer_body() {
  /usr/bin/python3 - "$tmp" "${1:-}" <<'PY'
import gzip, json, struct, sys
tmp, outputs = sys.argv[1], sys.argv[2]
img = gzip.open('/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz').read()[16:16 + 784]
body = struct.pack('<784f', *[b / 255.0 for b in img])
req = {"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32",
                   "parameters": {"binary_data_size": len(body)}}]}
if outputs:
    req["outputs"] = json.loads(outputs)
hdr = json.dumps(req).encode()
open(f"{tmp}/body.bin", "wb").write(hdr + body)
open(f"{tmp}/hl", "w").write(str(len(hdr)))
PY
}

# The binary logits only: what run.sh and wakeups.sh ask for.
LOGITS_BINARY='[{"name": "logits", "parameters": {"binary_data": true}}]'
