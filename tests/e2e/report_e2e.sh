#!/usr/bin/env bash
# strato report on hostile and unusual inputs (run names and values made to inject markup, a
# dense run with gaps, an autoscaling simulation's JSON, outputs that would replace an input),
# then a small real run's report.html in headless Chromium.
set -euo pipefail
strato=${1:?usage: report_e2e.sh PATH/TO/strato}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Parses an HTML report: balanced tags, nothing that runs a script or loads a resource.
check_html() {
    python3 - "$1" <<'EOF'
import re, sys
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
BAD_TAGS = {"script", "iframe", "object", "embed", "img", "link", "base", "form", "foreignobject", "a", "use", "image",
            "animate", "set", "meta-refresh"}

class Check(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.problems = [], []

    def attrs_ok(self, tag, attrs):
        for k, v in attrs:
            if k.startswith("on") or k in ("href", "xlink:href", "src", "srcdoc"):
                self.problems.append(f"<{tag}> has {k}={v!r}")
            if v and re.search(r"javascript:|url\(", v, re.I):
                self.problems.append(f"<{tag}> {k}={v!r}")

    def handle_starttag(self, tag, attrs):
        if tag in BAD_TAGS:
            self.problems.append(f"<{tag}> element")
        self.attrs_ok(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        if tag in BAD_TAGS:
            self.problems.append(f"<{tag}/> element")
        self.attrs_ok(tag, attrs)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> at line {self.getpos()[0]} closes <{self.stack[-1] if self.stack else '-'}>")
            if tag in self.stack:
                del self.stack[len(self.stack) - 1 - self.stack[::-1].index(tag):]
        else:
            self.stack.pop()

    def handle_comment(self, data):
        self.problems.append("a comment: " + data[:40])

text = open(sys.argv[1], encoding="utf-8").read()
c = Check()
c.feed(text)
c.close()
if c.stack:
    c.problems.append("unclosed: " + " ".join(c.stack[-5:]))
if c.problems:
    print(f"{sys.argv[1]}: " + "; ".join(c.problems[:5]), file=sys.stderr)
    sys.exit(1)
EOF
}

# 1. Markup in every name and value a run holds is text, never markup.
evil='"'"'"'><script>document.title="PWNED"</script><img src=x onerror=alert(1)><!--'
run="$tmp/run<b>&amp;"
mkdir -p "$run/model"
python3 - "$run" "$evil" <<'EOF'
import json, sys
run, evil = sys.argv[1], sys.argv[2]
with open(run + "/metrics.jsonl", "w") as f:
    f.write(json.dumps({"kind": "train", "step": 1, "epoch": 0.5, "loss": 1.5, "acc": 0.5, "lr": 0.1,
                        "samples_per_s": 100, evil: evil}) + "\n")
    f.write(json.dumps({"kind": "eval", "step": 2, "epoch": 1, "test_acc": 0.5, "test_loss": 1.2, "train_acc": 0.5,
                        "train_loss": 1.3, "epoch_time_s": 1, "eval_time_s": 0.1}) + "\n")
    f.write('{"kind":"train","step":3,"ep')  # the torn last line of a killed run
json.dump({"test_acc": 0.5, "precision": evil, evil: [evil]}, open(run + "/model/metrics.json", "w"))
json.dump({"model": {"arch": evil, evil: evil}, "parameters": evil, "inputs": [{"shape": [evil]}]},
          open(run + "/model/strato-model.json", "w"))
open(run + "/config.toml", "w").write('[run]\nname = "' + evil + '"\n</pre><script>alert(3)</script>\n')
open(run + "/config.toml", "ab").write(b"# caf\xe9, saved in Latin-1: no UTF-8\n")
json.dump({"kind": "strato-loadtest", "target": evil, "points": [{"concurrency": 1, "throughput": 5,
           "latency_us": {"p50": 1, "p99": 3}, "timeline": [{"t_s": 0, "asked": evil}]}],
           "slo": {"found": True, "failed": evil}}, open(run + "/loadtest.json", "w"))
EOF
"$strato" report "$run" >/dev/null || fail "strato report of a run with markup in its names failed"
check_html "$run/report.html" || fail "the report of a run with markup in its names is not plain text in HTML"
grep -q 'incomplete' "$run/report.html" || fail "the torn last line of metrics.jsonl is not noted"
if [[ -x /usr/bin/chromium ]]; then  # and in a browser: no script ran, no element came from the data
    timeout 60 /usr/bin/chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
        --user-data-dir="$tmp/chromium" --dump-dom "$(python3 -c 'import pathlib, sys; print(pathlib.Path(sys.argv[1]).as_uri())' \
        "$run/report.html")" >"$tmp/dom.html" 2>/dev/null || fail "chromium --dump-dom failed on the report of a run with markup in its names"
    grep -q 'strato training run' "$tmp/dom.html" || fail "chromium did not render the report of a run with markup in its names"
    ! grep -q -i -E '<script|<img|PWNED</title>' "$tmp/dom.html" || fail "markup from the data became elements"
fi

# 2. A dense run whose loss is null every other line (200k lines): a page of kilobytes.
mkdir -p "$tmp/gaps"
python3 - "$tmp/gaps/metrics.jsonl" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(1, 200001):
        loss = "null" if i % 2 else "%.4f" % (1 + (i % 7) * 0.01)
        f.write('{"kind":"train","step":%d,"epoch":%.5f,"loss":%s,"acc":0.5,"lr":0.1,"samples_per_s":1000}\n'
                % (i, i / 1000, loss))
EOF
"$strato" report "$tmp/gaps" >/dev/null || fail "strato report of a dense run with gaps failed"
size=$(stat -c %s "$tmp/gaps/report.html")
((size < 1000000)) || fail "the report of 200k lines with gaps is $size bytes"
check_html "$tmp/gaps/report.html" || fail "the report of a dense run with gaps is not valid"

# 2b. Found by review: Python's json writes a diverged loss as NaN or Infinity (not JSON), and the
# whole report failed with "not a JSON object". Such values are gaps, with a note.
mkdir -p "$tmp/pynan"
python3 - "$tmp/pynan/metrics.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, loss in enumerate([2.0, 1.5, float("nan"), float("inf"), 1.0], 1):
        f.write(json.dumps({"kind": "train", "step": i, "epoch": i / 5, "loss": loss, "acc": 0.5, "lr": 0.1,
                            "samples_per_s": 100}) + "\n")
EOF
"$strato" report "$tmp/pynan" >/dev/null || fail "strato report of a log with NaN and Infinity failed"
check_html "$tmp/pynan/report.html" || fail "the report of a log with NaN and Infinity is not valid"
grep -q 'hold NaN or Infinity' "$tmp/pynan/report.html" || fail "the NaN and Infinity values are not noted"

# 3. An autoscaling simulation's JSON is a report of its own, as a load test's is.
"$strato" autoscale simulate --policy configs/autoscale/seeds.toml --trace bench/cloud/week_trace.csv \
    --per-gpu-capacity 600 --json "$tmp/sim.json" >/dev/null
out=$("$strato" report "$tmp/sim.json") || fail "strato report sim.json failed"
[[ $out == "report: $tmp/sim.html" ]] || fail "strato report sim.json printed '$out'"
grep -q 'Autoscaling simulation' "$tmp/sim.html" || fail "sim.html is not the simulation's report"
check_html "$tmp/sim.html" || fail "sim.html is not valid"
# A hand-edited one: what cannot be read shows as "–", never a crash.
echo '{"kind": "strato-autoscale-sim", "instance": 5, "wall_s": "x", "cost": 1e300, "actions": [1, {"t_s": "x"}],
       "actions_dropped": 1e300, "timeline": 7}' >"$tmp/bad.json"
"$strato" report "$tmp/bad.json" --out "$tmp/bad.html" >/dev/null || fail "a hand-edited simulation JSON failed"
check_html "$tmp/bad.html" || fail "the report of a hand-edited simulation JSON is not valid"
! grep -q -i -E '[0-9]{16}|[^a-z](nan|inf)[^a-z]' "$tmp/bad.html" || fail "the report of a hand-edited simulation JSON shows nan or 300 digits"
echo '{"kind": "something-else"}' >"$tmp/other.json"
set +e
err=$("$strato" report "$tmp/other.json" 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc == 1 && $err == *strato-loadtest*strato-autoscale-sim* ]] || fail "another JSON: exit $rc, '$err'"

# 4. An output that would replace an input is refused, and the input stays as it was.
cp "$tmp/sim.json" "$tmp/sim.json.orig"
set +e
"$strato" report "$tmp/sim.json" --out "$tmp/sim.json" 2>/dev/null
rc=$?
set -e
[[ $rc == 1 ]] || fail "--out onto the input JSON exited $rc"
cmp -s "$tmp/sim.json" "$tmp/sim.json.orig" || fail "--out onto the input JSON changed it"

# 4b. Found by review: --out '' (an unset variable) wrote the default file: a usage error now.
rm -f "$tmp/pynan/report.html"
set +e
err=$("$strato" report "$tmp/pynan" --out '' 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc == 2 && $err == *"expected a file name"* ]] || fail "--out '': exit $rc, '$err'"
[[ ! -e "$tmp/pynan/report.html" ]] || fail "--out '' wrote the default report"

# 4c. Found by review: a directory that is no run said only "is it a run directory?", and a log
# whose last line lacks its newline (written by "\n".join) lost that line, its only evaluation.
mkdir -p "$tmp/runs/a" "$tmp/runs/b"
printf '{"kind":"eval","step":5,"epoch":1,"test_acc":0.4242,"test_loss":0.5}' >"$tmp/runs/a/metrics.jsonl"
: >"$tmp/runs/b/metrics.jsonl"
"$strato" report "$tmp/runs/a" >/dev/null || fail "a log without its last newline failed"
grep -q '42.42%' "$tmp/runs/a/report.html" || fail "the last line without a newline was left out"
! grep -q 'incomplete' "$tmp/runs/a/report.html" || fail "a whole last line without a newline was called incomplete"
set +e
err=$("$strato" report "$tmp/runs" 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc == 1 && $err == *"it holds runs, give one of them: $tmp/runs/a, $tmp/runs/b"* ]] ||
    fail "a directory of runs: exit $rc, '$err'"
set +e
err=$("$strato" report "$tmp/runs/a/metrics.jsonl" 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc == 1 && $err == *"give the run's directory, $tmp/runs/a"* ]] || fail "a run's metrics.jsonl: exit $rc, '$err'"

# 5. A small real run, in a browser.
"$strato" --quiet train configs/fashion_mnist_mlp.toml --set run.dir="$tmp" --set run.name=report \
  --set data.limit_train=2048 --set data.limit_test=512 --set train.epochs=2 --set train.log_every=4 >/dev/null
check_html "$tmp/report/report.html" || fail "the real run's report is not valid"
bash "$here/report_chromium_test.sh" "$tmp/report"
