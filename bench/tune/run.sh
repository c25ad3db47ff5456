#!/usr/bin/env bash
# strato tune on Fashion-MNIST (the MLP on 10,000 training images, 2,000 test images):
#   1. ASHA (promotion, rungs 1/3/9 epochs, eta 3) against the full budget (every trial 9 epochs)
#      over the same 27 randomly sampled configurations (same seed): epochs used, best accuracy.
#   2. TPE against random search at an equal number of trials (20, FIFO, 3 epochs each), over
#      3 seeds: best accuracy found.
#   bench/tune/run.sh      env: SEEDS="1 2 3" PARALLEL=2
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f build/release/build.ninja ] || cmake --preset release >/dev/null
cmake --build build/release --target strato >/dev/null
bin=$PWD/build/release/apps/strato/strato
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
parallel=${PARALLEL:-2}
base=$PWD/configs/fashion_mnist_mlp.toml

study() {  # name sampler scheduler trials max_t seed
  cat >"$tmp/$1.toml" <<TOML
[study]
name = "$1"
base = "$base"
trials = $4
parallel = $parallel
threads_per_trial = 1
sampler = "$2"
scheduler = "$3"
seed = $6
set = ["data.limit_train=10000", "data.limit_test=2000", "train.log_every=1000"]
[scheduler]
grace = 1
max_t = $5
reduction = 3
variant = "promotion"
[params]
"optim.lr" = { type = "loguniform", low = 1e-4, high = 3e-2 }
"model.width" = { type = "int", low = 32, high = 512, q = 32 }
"model.dropout" = { type = "uniform", low = 0.0, high = 0.5 }
"optim.name" = { type = "choice", values = ["adamw", "sgd"] }
TOML
  local t0=$(date +%s.%N)
  "$bin" -q tune run "$tmp/$1.toml" --dir "$tmp/$1" >/dev/null
  local t1=$(date +%s.%N)
  "$bin" tune best "$tmp/$1.toml" --dir "$tmp/$1" >"$tmp/$1.best.json"
  /usr/bin/python3 - "$tmp/$1" "$1" "$t0" "$t1" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1] + "/study.db")
epochs = db.execute("select sum(epochs) from trials").fetchone()[0]
best = db.execute("select max(best) from trials").fetchone()[0]
print(f"{sys.argv[2]}\t{epochs}\t{best:.4f}\t{float(sys.argv[4]) - float(sys.argv[3]):.0f}")
PY
}

echo "== 1. ASHA vs full budget, the same 27 random configurations (seed 1)"
printf 'study\tepochs\tbest test_acc\tseconds\n'
asha=$(study asha27 random asha 27 9 1); echo "$asha"
full=$(study full27 random fifo 27 9 1); echo "$full"
/usr/bin/python3 - "$asha" "$full" <<'PY'
import sys
a, f = (l.split("\t") for l in sys.argv[1:3])
print(f"ASHA used {int(a[1]) / int(f[1]):.2f} of the full budget's epochs; best accuracy {float(a[2]) - float(f[2]):+.4f} "
      f"({100 * (float(a[2]) - float(f[2])):+.2f} pt) against the full budget; {float(a[3]) / float(f[3]):.2f} of its time")
PY

echo "== 2. TPE vs random, 20 trials x 3 epochs, seeds ${SEEDS:-1 2 3}"
printf 'study\tepochs\tbest test_acc\tseconds\n'
for seed in ${SEEDS:-1 2 3}; do
  study "tpe_s$seed" tpe fifo 20 3 "$seed"
  study "random_s$seed" random fifo 20 3 "$seed"
done | tee "$tmp/tpe.tsv"
/usr/bin/python3 - "$tmp/tpe.tsv" <<'PY'
import sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
tpe = [float(r[2]) for r in rows if r[0].startswith("tpe")]
rnd = [float(r[2]) for r in rows if r[0].startswith("random")]
print(f"mean best test_acc: TPE {sum(tpe) / len(tpe):.4f}, random {sum(rnd) / len(rnd):.4f} "
      f"({100 * (sum(tpe) / len(tpe) - sum(rnd) / len(rnd)):+.2f} pt)")
PY
