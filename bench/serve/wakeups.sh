#!/usr/bin/env bash
# Where the concurrency-1 latency of `strato serve` goes on a VM: the CNN served with dynamic
# batching, timed at concurrency 1 by wrk and by strato loadtest (with and without --busy-poll),
# each with and without two nice-19 busy loops that keep both vCPUs from halting, against the
# in-process batch-1 forward pass. Rounds alternate; prints p50 minus the forward pass.
#   bench/serve/wakeups.sh [PACKAGE_DIR]      env: ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/serve/common.sh
build_bench_tools
bench_scratch
ensure_package "${1:-}"
write_cnn_repo "$tmp/repo" yes
write_infer_body "$LOGITS_BINARY"
"$bin" -q serve --model-repository "$tmp/repo" --http-port 0 --metrics-port 0 --intra-op-threads 1 \
  --http-thread-count 2 >"$tmp/serve.out" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q 'ready http' "$tmp/serve.out" && break; sleep 0.1; done
port=$(sed -n 's/.*ready http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/serve.out")
[ -n "$port" ] || { cat "$tmp/serve.out"; exit 1; }
us() { sed -n 's/^ *50% *\([0-9.]*\)\(us\|ms\).*/\1 \2/p' | awk '{print ($2 == "ms") ? $1 * 1000 : $1}'; }
fwd() { build/release/bench/serve_forward_bench "$pkg" 1 1 1 | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["median_ms"] * 1e3)'; }
wrk_c1() { STRATO_BODY=$tmp/body.bin STRATO_HL=$(cat "$tmp/hl") wrk -t1 -c1 -d2s --latency -s bench/serve/post.lua \
  "http://127.0.0.1:$port/v2/models/cnn/infer" | us; }
health() { wrk -t1 -c1 -d1s --latency "http://127.0.0.1:$port/v2/health/live" | us; }
lt_c1() { "$bin" -q loadtest "http://127.0.0.1:$port" --model cnn --concurrency 1 --threads 1 -d 2s --warmup 0.5s \
  --input-data /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz "$@" --json "$tmp/lt.json" >/dev/null &&
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["points"][0]["latency_us"]["p50"])' "$tmp/lt.json"; }
wrk_c1 >/dev/null
printf '%-9s %8s %8s %10s %18s %8s\n' '' forward wrk loadtest 'loadtest busy-poll' health
for r in $(seq "${ROUNDS:-3}"); do
  for mode in plain spinners; do
    if [ $mode = spinners ]; then
      nice -n 19 sh -c 'while :; do :; done' & spin=$!
      nice -n 19 sh -c 'while :; do :; done' & spin="$spin $!"
      sleep 0.2
    fi
    f=$(fwd) w=$(wrk_c1) l=$(lt_c1) b=$(lt_c1 --busy-poll 1ms) h=$(health)
    /usr/bin/python3 -c 'import sys; f, w, l, b, h = map(float, sys.argv[2:]); print(f"{sys.argv[1]:<9} {f:>6.0f}us {w-f:>+6.0f}us {l-f:>+8.0f}us {b-f:>+16.0f}us {h:>6.0f}us")' \
      "$mode" "$f" "$w" "$l" "$b" "$h"
    if [ -n "$spin" ]; then kill $spin; wait $spin 2>/dev/null || true; spin=; fi
  done
done
echo "(columns after forward: c = 1 p50 minus the forward pass; health: GET /v2/health/live p50 by wrk)"
