#!/usr/bin/env bash
# Soak: strato serve at saturation (wrk, 64 connections) for SECONDS (default 300). Passes when
# there are 0 errors and resident memory grows < 10 % from the end of the warm-up (the first 60 s:
# oneDNN builds and caches kernels for each batch size the batcher forms, 1..64, and every thread
# gets its malloc arena) to the end.
#   bench/serve/soak.sh [PACKAGE_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup --bench
scripts/build release --target strato >/dev/null
source bench/serve/common.sh
bench_scratch
secs=${2:-300}
ensure_package "${1:-}"
write_infer_body  # every output, as JSON
"$bin" -q serve --model "cnn=$pkg" --http-port 0 --metrics-port 0 --intra-op-threads 1 >"$tmp/serve.out" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q 'ready http' "$tmp/serve.out" && break; sleep 0.1; done
port=$(sed -n 's/.*ready http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/serve.out")
mport=$(sed -n 's/.*metrics=http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/serve.out")
rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
STRATO_BODY=$tmp/body.bin STRATO_HL=$(cat "$tmp/hl") wrk -t2 -c64 -d"${secs}s" --latency -s bench/serve/post.lua \
  "http://127.0.0.1:$port/v2/models/cnn/infer" >"$tmp/wrk.out" &
wrk=$!
echo "t_s rss_kib" >"$tmp/rss"
for ((t = 10; t <= secs; t += 10)); do sleep 10; echo "$t $(rss)" | tee -a "$tmp/rss"; done
wait $wrk
cat "$tmp/wrk.out"
curl -s "http://127.0.0.1:$mport/metrics" | grep -E '^nv_inference_request_(success|failure)' | tee "$tmp/metrics"
/usr/bin/python3 - "$tmp" <<'PY'
import re, sys
tmp = sys.argv[1]
rows = [l.split() for l in open(f"{tmp}/rss").read().splitlines()[1:]]
# From the end of the warm-up (60 s); a run shorter than that compares with its first sample.
base_t, base = next(((int(t), int(r)) for t, r in rows if int(t) >= 60), (int(rows[0][0]), int(rows[0][1])))
end = int(rows[-1][1])
wrk = open(f"{tmp}/wrk.out").read()
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", wrk)
sock = re.search(r"Socket errors: (.*)", wrk)
fails = sum(int(l.split()[-1]) for l in open(f"{tmp}/metrics") if "failure" in l)
ok = sum(int(l.split()[-1]) for l in open(f"{tmp}/metrics") if "success" in l)
growth = (end - base) / base
print(f"soak: {ok} requests ok, {fails} failed in the server, non-2xx {bad.group(1) if bad else 0}, "
      f"socket errors: {sock.group(1) if sock else 'none'}; RSS {base/1024:.0f} MiB at {base_t} s -> {end/1024:.0f} MiB "
      f"at the end ({100*growth:+.1f} %, limit +10 %)")
sys.exit(0 if (not bad and not sock and fails == 0 and growth < 0.10) else 1)
PY
