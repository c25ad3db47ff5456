#!/usr/bin/env bash
# Trains a small real run, then checks its report.html in headless Chromium.
set -euo pipefail
strato=${1:?usage: report_e2e.sh PATH/TO/strato}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$strato" --quiet train configs/fashion_mnist_mlp.toml --set run.dir="$tmp" --set run.name=report \
  --set data.limit_train=2048 --set data.limit_test=512 --set train.epochs=2 --set train.log_every=4 >/dev/null
bash "$here/report_chromium_test.sh" "$tmp/report"
