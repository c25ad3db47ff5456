#!/usr/bin/env bash
# What model_warmup buys: the first request of each batch size against a freshly loaded model,
# without warm-up and with a model_warmup sample for every batch size 1..64 (the CNN package,
# binary tensor requests from Python's stdlib, one at a time). Without warm-up a strato package's
# graph builds (and, for small work, times) a plan on a batch size's first request; the second
# request of the same size is the steady state. Prints the first and second request's latency per
# batch size for both servers, and the load times.
#   bench/serve/warmup.sh [PACKAGE_DIR]      env: THREADS=2 (intra-op)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/serve/common.sh
build_bench_tools
bench_scratch
threads=${THREADS:-2}
ensure_package "${1:-}"

sizes="1 2 3 4 6 8 12 16 24 32 48 64"
warm_lines=()
for b in $(seq 64); do
  warm_lines+=("model_warmup [ { name: \"b$b\" batch_size: $b inputs { key: \"input\" value: { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] random_data: true } } } ]")
done
write_cnn_repo "$tmp/cold" no
write_cnn_repo "$tmp/warm" no "${warm_lines[@]}"

for mode in cold warm; do
  "$bin" serve --model-repository "$tmp/$mode" --http-port 0 --metrics-port 0 --intra-op-threads "$threads" \
    >"$tmp/serve.out" 2>"$tmp/serve.err" &
  server=$!
  for _ in $(seq 300); do grep -q 'ready http' "$tmp/serve.out" && break; sleep 0.1; done
  port=$(sed -n 's/.*ready http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/serve.out")
  [ -n "$port" ] || { cat "$tmp/serve.err"; exit 1; }
  load_ms=$(sed -n "s/.*loaded model 'cnn'.* in \([0-9]*\) ms.*/\1/p" "$tmp/serve.err")
  /usr/bin/python3 - "$port" "$mode" "$load_ms" $sizes <<'PY' | tee -a "$tmp/rows.jsonl"
import gzip, http.client, json, struct, sys, time
port, mode, load_ms, sizes = int(sys.argv[1]), sys.argv[2], sys.argv[3], [int(s) for s in sys.argv[4:]]
img = gzip.open('/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz').read()[16:16 + 784 * 64]
conn = http.client.HTTPConnection("127.0.0.1", port)
def infer(b):
    body = struct.pack(f'<{784 * b}f', *[v / 255.0 for v in img[:784 * b]])
    hdr = json.dumps({"inputs": [{"name": "input", "shape": [b, 1, 28, 28], "datatype": "FP32",
                                  "parameters": {"binary_data_size": len(body)}}],
                      "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    t0 = time.perf_counter()
    conn.request("POST", "/v2/models/cnn/infer", hdr + body, {"Inference-Header-Content-Length": str(len(hdr))})
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status
    return (time.perf_counter() - t0) * 1e3
for b in sizes:
    first, second = infer(b), infer(b)
    print(json.dumps({"mode": mode, "load_ms": int(load_ms or 0), "batch": b, "first_ms": first, "second_ms": second}))
PY
  kill "$server"; wait "$server" || true; server=
done

/usr/bin/python3 - "$tmp/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
get = lambda m, b: next(r for r in rows if r["mode"] == m and r["batch"] == b)
sizes = sorted({r["batch"] for r in rows})
print(f"\n{'batch':>5} {'cold first ms':>14} {'cold second':>12} {'warm first ms':>14} {'warm second':>12}")
for b in sizes:
    c, w = get("cold", b), get("warm", b)
    print(f"{b:>5} {c['first_ms']:>14.2f} {c['second_ms']:>12.2f} {w['first_ms']:>14.2f} {w['second_ms']:>12.2f}")
extra = lambda m: [get(m, b)["first_ms"] - get(m, b)["second_ms"] for b in sizes]
print(f"\nfirst request minus second, summed over the {len(sizes)} sizes: cold {sum(extra('cold')):.1f} ms, "
      f"warm {sum(extra('warm')):.1f} ms; worst: cold {max(extra('cold')):.1f} ms, warm {max(extra('warm')):.1f} ms")
print(f"load time: cold {get('cold', 1)['load_ms']} ms, warm (64 samples) {get('warm', 1)['load_ms']} ms")
PY
