#!/usr/bin/env bash
# Renders RUN_DIR/report.html in headless Chromium and checks that it is a working,
# self-contained page: the DOM has the run title and at least 4 <svg> charts, a screenshot comes
# out as a non-empty PNG, and the HTML names no http(s) resource (only the SVG xmlns).
#
#   tests/e2e/report_chromium_test.sh runs/fmnist-cnn      # exit 0 ok, 1 failed, 77 skipped
#
# Set KEEP_SCREENSHOT=path to keep the screenshot.
set -euo pipefail

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

[[ $# -eq 1 ]] || { echo "usage: $0 RUN_DIR (a run directory that has report.html)" >&2; exit 2; }
run_dir=$1
[[ $run_dir == / ]] || run_dir=${run_dir%/}
chromium=/usr/bin/chromium
if [[ ! -x $chromium ]]; then
    echo "SKIP: chromium not installed"
    exit 77
fi
[[ -d $run_dir ]] || fail "$run_dir is not a directory"
report=$run_dir/report.html
[[ -s $report ]] || fail "$report is missing or empty (run: strato report $run_dir)"

# The run title is the run directory's name, as strato report writes it.
name=$(basename -- "${run_dir%/}")
if [[ $name == "." || $name == ".." || -z $name ]]; then
    name=$(basename -- "$(cd -- "$run_dir" && pwd)")
fi
report_abs=$(cd -- "$(dirname -- "$report")" && pwd)/report.html

work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT

# 1. No external requests: every http(s) URL in the file must be the SVG namespace, and no
#    src=/href= attribute may point at a remote resource.
others=$(grep -o 'https\?://[^"'"'"' )<>]*' -- "$report" | grep -v -x 'http://www.w3.org/2000/svg' || true)
[[ -z $others ]] || fail "$report references external URLs: $(echo "$others" | sort -u | head -5 | tr '\n' ' ')"
remote=$(grep -o -i -E '(src|href)[[:space:]]*=[[:space:]]*["'"'"']?[[:space:]]*(https?:)?//[^"'"'"' >]*' -- "$report" || true)
[[ -z $remote ]] || fail "$report loads remote resources: $(echo "$remote" | head -5 | tr '\n' ' ')"
if grep -q -i -E '@import|url\([[:space:]]*["'"'"']?(https?:)?//' -- "$report"; then
    fail "$report imports remote CSS"
fi

chrome_flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
              --disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars)

# 2. The DOM, as the browser built it.
dom=$work/dom.html
if ! timeout 60 "$chromium" "${chrome_flags[@]}" --user-data-dir="$(mktemp -d -p "$work")" --dump-dom \
        "file://$report_abs" >"$dom" 2>"$work/dom.log"; then
    tail -5 "$work/dom.log" >&2
    fail "chromium --dump-dom failed or timed out on $report"
fi
[[ -s $dom ]] || fail "chromium produced an empty DOM for $report"
svgs=$(grep -o '<svg' "$dom" | wc -l || true)
((svgs >= 4)) || fail "rendered DOM has $svgs <svg> elements, expected at least 4"
grep -q -F -- "$name" "$dom" || fail "rendered DOM does not contain the run title \"$name\""
grep -q -F '<h1>' "$dom" || fail "rendered DOM has no <h1> heading"

# 3. A screenshot: the page paints.
png=$work/report.png
if ! (cd "$work" && timeout 60 "$chromium" "${chrome_flags[@]}" --user-data-dir="$(mktemp -d -p "$work")" \
        --screenshot="$png" --window-size=1200,2000 "file://$report_abs" >"$work/shot.log" 2>&1); then
    tail -5 "$work/shot.log" >&2
    fail "chromium --screenshot failed or timed out on $report"
fi
[[ -s $png ]] || fail "chromium wrote no screenshot for $report"
[[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "$png is not a PNG file"
size=$(stat -c %s "$png")
((size > 10000)) || fail "screenshot is only $size bytes: the page looks blank"
if [[ -n ${KEEP_SCREENSHOT:-} ]]; then
    cp -- "$png" "$KEEP_SCREENSHOT"
fi

echo "OK: $report renders ($svgs charts, title \"$name\", screenshot $size bytes, no external requests)"
