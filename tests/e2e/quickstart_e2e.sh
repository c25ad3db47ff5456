#!/usr/bin/env bash
# The README's first command, scripts/quickstart, run as a user runs it: in a tree of its own (so
# that runs/ is fresh), with the binary under test (STRATO_BIN: the build is CI's own step), one
# short epoch. It must train, evaluate, serve real requests, load-test, plan and size replicas,
# exit 0 and leave the files it names (whether the load test met the capacity step's p99 depends on
# the machine's load: the quick start goes on either way); run again, it resumes the finished run instead of training
# anew. Nothing in it was tested before: a broken front door went unnoticed.
set -euo pipefail
strato=${1:?usage: quickstart_e2e.sh PATH/TO/strato}
repo=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

mkdir -p "$tmp/scripts" "$tmp/configs"
cp "$repo/scripts/quickstart" "$repo/scripts/serve_demo.py" "$repo/scripts/setup" "$tmp/scripts/"
cp "$repo/configs/fashion_mnist_cnn.toml" "$tmp/configs/"
cd "$tmp"
# (1 epoch on 12,000 images: the job's steps, not the model's accuracy, are under test)
args=(--set train.epochs=1 --set data.limit_train=12000)

STRATO_BIN=$strato timeout 600 scripts/quickstart "${args[@]}" >first.log 2>&1 || {
    tail -60 first.log
    fail "scripts/quickstart exited $?"
}
run=runs/fashion_mnist_cnn
for f in model/strato-model.json model/weights.pt model/metrics.json report.html metrics.jsonl loadtest.csv loadtest.json; do
    [ -s "$run/$f" ] || { tail -40 first.log; fail "scripts/quickstart left no $run/$f"; }
done
for want in "== strato doctor" "== strato eval" "ready http://127.0.0.1:" "strato serve: drained and stopped (exit 0)" \
            "== strato plan" "== strato autoscale capacity" "model package: $tmp/$run/model" "report:        $tmp/$run/report.html"; do
    grep -qF -- "$want" first.log || { tail -60 first.log; fail "scripts/quickstart did not print '$want'"; }
done
# The demo's requests were answered by the model it trained (top-1 labels of real test images).
grep -qE "^  image 0: predicted [A-Za-z -]+ +\( *[0-9.]+%\) +true: " first.log || { tail -60 first.log; fail "serve_demo.py printed no classification"; }
grep -qE "argmax agrees with the JSON answer on 8/8" first.log || { tail -60 first.log; fail "binary and JSON answers differ"; }
# The load test's charts went into the report.
grep -qi "load test" "$run/report.html" || fail "$run/report.html has no load-test section"
python3 - "$run/loadtest.json" <<'EOF' || fail "loadtest.json: expected 4 levels, each with answers and no errors"
import json, sys
points = json.load(open(sys.argv[1]))["points"]
ok = len(points) == 4 and all(p["errors"]["total"] == 0 and p["ok"] > 0 for p in points)
if not ok:
    print([{k: p.get(k) for k in ("concurrency", "ok", "errors", "throughput")} for p in points], file=sys.stderr)
sys.exit(0 if ok else 1)
EOF

# Again: the finished run is resumed (not retrained from scratch), and the job runs through.
steps_before=$(python3 -c "import json; print(json.load(open('$run/model/metrics.json'))['steps'])")
STRATO_BIN=$strato timeout 600 scripts/quickstart "${args[@]}" >second.log 2>&1 || {
    tail -60 second.log
    fail "scripts/quickstart run again exited $?"
}
grep -qF "strato serve: drained and stopped (exit 0)" second.log || { tail -40 second.log; fail "second run did not serve"; }
steps_after=$(python3 -c "import json; print(json.load(open('$run/model/metrics.json'))['steps'])")
[ "$steps_before" = "$steps_after" ] || fail "run again, the quick start trained more: steps $steps_before -> $steps_after"

# A run name of its own is refused (its later steps use runs/fashion_mnist_cnn).
rc=0
STRATO_BIN=$strato scripts/quickstart --set run.name=other >third.log 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "quickstart --set run.name=other: exit $rc, expected 2"
STRATO_BIN=/nonexistent scripts/quickstart >fourth.log 2>&1 && fail "STRATO_BIN=/nonexistent was accepted"
grep -qF "STRATO_BIN=/nonexistent is not an executable file" fourth.log || fail "STRATO_BIN=/nonexistent: $(cat fourth.log)"
echo "quickstart: ok ($(grep -c '' first.log) lines of output; resumed on the second run)"
