#!/usr/bin/env bash
# strato loadtest vs its peers against the same local endpoint (a static file from nginx on
# 127.0.0.1): max requests/s against wrk at the same connections and threads, and requests per
# CPU-second against locust (FastHttpUser, no wait) at the same number of users. Alternates the
# tools ROUNDS times and compares medians; prints the ratios the loadtest issue asks for.
#   bench/loadgen_vs_peers/run.sh      env: DUR=5 (s per run) CONNS=64 THREADS=2 USERS=32 ROUNDS=3
#                                           BUSY_POLL=50us (the second strato row's --busy-poll)
#                                           PIN=1 (nginx on CPU 0, the clients on CPU 1)
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/setup --bench
[ -f build/release/build.ninja ] || cmake --preset release >/dev/null
cmake --build build/release --target strato >/dev/null
bin=$PWD/build/release/apps/strato/strato
dur=${DUR:-5} conns=${CONNS:-64} threads=${THREADS:-2} users=${USERS:-32} rounds=${ROUNDS:-3} busy_poll=${BUSY_POLL:-50us}
tmp=$(mktemp -d)
chmod 755 "$tmp"
nginx_pid=
cleanup() { [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$tmp/www"
head -c 600 /usr/share/common-licenses/GPL-3 >"$tmp/www/index.html"
chmod -R a+rX "$tmp/www"
cat >"$tmp/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $tmp/nginx.pid;
error_log $tmp/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/body; proxy_temp_path $tmp/proxy; fastcgi_temp_path $tmp/fcgi;
  uwsgi_temp_path $tmp/uwsgi; scgi_temp_path $tmp/scgi;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:$port; root $tmp/www; location / { } location = /status { stub_status; } }
}
CONF
# PIN=1: nginx on CPU 0 and every client on CPU 1, as if the client had a machine of its own;
# otherwise all of them share every core (the client's CPU use then takes from the server's).
server_cpu=() client_cpu=()
if [ "${PIN:-0}" = 1 ]; then server_cpu=(taskset -c 0); client_cpu=(taskset -c 1); fi
"${server_cpu[@]}" nginx -c "$tmp/nginx.conf" &
nginx_pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/index.html" >/dev/null && break; sleep 0.1; done
url="http://127.0.0.1:$port/index.html"
echo "== target: nginx static file $url (600 bytes), $conns connections, $threads threads, ${dur}s per run${PIN:+, PIN=$PIN}"

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

: >"$tmp/wrk.txt"; : >"$tmp/strato.txt"; : >"$tmp/strato_bp.txt"
strato_rps() {  # strato loadtest at the same connections and threads, extra flags in "$@"
  "${client_cpu[@]}" "$bin" -q loadtest "$url" --concurrency "$conns" --threads "$threads" -d "${dur}s" --warmup 0.5s \
    --json "$tmp/s.json" "$@" >/dev/null
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["points"][0]["throughput"])' "$tmp/s.json"
}
for r in $(seq "$rounds"); do
  "${client_cpu[@]}" wrk -t"$threads" -c"$conns" -d"${dur}s" "$url" | awk '/Requests\/sec/ {print $2}' >>"$tmp/wrk.txt"
  strato_rps >>"$tmp/strato.txt"
  strato_rps --busy-poll "$busy_poll" >>"$tmp/strato_bp.txt"
  echo "round $r: wrk $(tail -1 "$tmp/wrk.txt") req/s, strato $(tail -1 "$tmp/strato.txt") req/s," \
    "strato --busy-poll $busy_poll $(tail -1 "$tmp/strato_bp.txt") req/s"
done
wrk_med=$(median <"$tmp/wrk.txt"); strato_med=$(median <"$tmp/strato.txt"); strato_bp_med=$(median <"$tmp/strato_bp.txt")

echo "== locust (FastHttpUser, no wait) vs strato at $users users: requests per CPU-second in steady state"
cat >"$tmp/locustfile.py" <<'PY'
from locust import FastHttpUser, task

class Static(FastHttpUser):
    @task
    def index(self):
        self.client.get("/index.html")
PY
# Steady state only: server-side request counts and the tool's CPU time between two readings
# after the ramp-up (bench/loadgen_vs_peers/cpu_efficiency.py), so start-up is not counted.
eff=bench/loadgen_vs_peers/cpu_efficiency.py
run_s=$((dur + 3))
read -r locust_req locust_cpu _ < <(/usr/bin/python3 $eff "http://127.0.0.1:$port/status" "$run_s" 2.5 -- \
  "${client_cpu[@]}" locust -f "$tmp/locustfile.py" --headless -H "http://127.0.0.1:$port" -u "$users" -r "$users" -t "${run_s}s" --only-summary)
read -r strato_req strato_cpu _ < <(/usr/bin/python3 $eff "http://127.0.0.1:$port/status" "$run_s" 2.5 -- \
  "${client_cpu[@]}" "$bin" -q loadtest "$url" -u "$users" -r "$users" --threads 1 -d "${run_s}s" --warmup 0)
# wrk measured the same way, for scale: what a C tool with its own event loop gets here
read -r wrk_req wrk_cpu _ < <(/usr/bin/python3 $eff "http://127.0.0.1:$port/status" "$run_s" 2.5 -- \
  "${client_cpu[@]}" wrk -t1 -c"$users" -d"${run_s}s" "$url")

/usr/bin/python3 - "$wrk_med" "$strato_med" "$strato_bp_med" "$busy_poll" "$locust_req" "$locust_cpu" "$strato_req" "$strato_cpu" "$wrk_req" "$wrk_cpu" <<'PY'
import sys
bp = sys.argv.pop(4)
wrk, st, stbp, lreq, lcpu, sreq, scpu, wreq, wcpu = map(float, sys.argv[1:])
print(f"\nmax req/s (median of runs): strato {st:,.0f} vs wrk {wrk:,.0f} = {st / wrk:.3f}x; "
      f"strato --busy-poll {bp} {stbp:,.0f} = {stbp / wrk:.3f}x (target >= 1.0)")
l, s = lreq / lcpu, sreq / scpu
print(f"requests per CPU-second: strato {s:,.0f} ({sreq:,.0f} req / {scpu:.2f} s) vs locust {l:,.0f} "
      f"({lreq:,.0f} req / {lcpu:.2f} s) = {s / l:.1f}x (target >= 10)")
print(f"  for scale, wrk -t1 measured the same way: {wreq / wcpu:,.0f} requests per CPU-second = {wreq / wcpu / l:.1f}x locust")
PY
