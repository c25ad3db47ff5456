#!/usr/bin/env bash
# strato plan and strato autoscale: how fast and how right.
#   1. The planner over the whole catalog (every preset, 16 and 64 nodes): milliseconds per plan
#      (goal < 50 ms) and how many candidates the bound pruned.
#   2. Calibration: ResNet-50 / ImageNet / 90 epochs on 8 x A100 against NVIDIA's published
#      throughput (goal within 25 %).
#   3. Spot: the planner's analytical expected cost against 1,000 simulated runs per row (goal 5 %).
#   4. The cluster simulator against the same model in Python (heapq; bench/cloud/sim_peer.py) on a
#      week of 1-second load: events per second (goal >= 1 M/s) and agreement on node-hours.
#   bench/cloud/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f build/release/build.ninja ] || cmake --preset release >/dev/null
cmake --build build/release --target strato >/dev/null
bin=$PWD/build/release/apps/strato/strato
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== 1. planner speed (whole catalog) =="
for nodes in 16 64; do
  for w in resnet50-imagenet resnet18-imagenet vgg16-imagenet yolov8m-coco gpt2-124m-openwebtext; do
    "$bin" plan --workload "$w" --max-nodes "$nodes" --deadline 24h --json >"$tmp/p.json" || true
    /usr/bin/python3 - "$tmp/p.json" "$w" "$nodes" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"  {sys.argv[2]:<24} max {sys.argv[3]:>2} nodes: {j['plan_ms']:6.2f} ms, {j['evaluated']:>5} of {j['candidates']:>5} candidates priced")
PY
  done
done

echo "== 2. calibration: ResNet-50 / ImageNet / 90 epochs on 8 x A100 =="
for inst in p4de.24xlarge p4d.24xlarge; do
  "$bin" plan --workload resnet50-imagenet --instance "$inst" --region us-east-1 --market ondemand --max-nodes 1 \
      --startup 0 --json >"$tmp/c.json" 2>/dev/null || "$bin" plan --workload resnet50-imagenet --instance "$inst" \
      --market ondemand --max-nodes 1 --startup 0 --json >"$tmp/c.json"
  /usr/bin/python3 - "$tmp/c.json" "$inst" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
r = j["ranked"][0]
# NVIDIA DeepLearningExamples ResNet-50 v1.5, 8 GPUs AMP: DGX A100 80GB (PyTorch) 16621 img/s; A100 40GB (TF1+XLA) 17400.
published = {"p4de.24xlarge": 16621, "p4d.24xlarge": 17400}[sys.argv[2]]
nvidia_h = 1281167 * 90 / published / 3600
print(f"  {sys.argv[2]:<14} strato {r['samples_per_s']:7.0f} img/s, {r['work_h']:.2f} h; NVIDIA {published} img/s, "
      f"{nvidia_h:.2f} h; ratio {r['work_h'] / nvidia_h:.3f}")
PY
done

echo "== 3. spot: analytical vs 1,000 simulated runs per row =="
"$bin" plan --workload resnet50-imagenet --market spot --spot-hazard 0.05 --max-nodes 8 --top 5 --simulate 1000 \
  | sed -n '/simulated 1000 times/,$p'

echo "== 4. cluster simulator vs Python peer (a week at 1-second resolution) =="
/usr/bin/python3 - "$tmp/week.csv" <<'PY'
import math, random, sys
random.seed(11)
rows = ["time_s,rate,preempt"]
for t in range(0, 7 * 86400):
    day, hour = divmod(t / 3600, 24)
    rate = 300 + 1500 * max(0.0, math.sin(math.pi * (hour - 7) / 12)) * (0.35 if day >= 5 else 1.0) + random.gauss(0, 60)
    rows.append(f"{t},{max(rate, 0):.1f},{1 if t % 86400 == 43200 else 0}")
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
"$bin" autoscale simulate --policy bench/cloud/hpa.toml --trace "$tmp/week.csv" --instance g5.xlarge --region us-east-1 \
    --per-gpu-capacity 600 --boot 3m --tick 30s --spot-hazard 0 --json "$tmp/s.json" >/dev/null
/usr/bin/python3 bench/cloud/sim_peer.py "$tmp/week.csv" 600 180 30 >"$tmp/peer.json"
/usr/bin/python3 - "$tmp/s.json" "$tmp/peer.json" <<'PY'
import json, sys
s, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(f"  strato: {s['events']} events in {s['wall_s']:.3f} s = {s['events_per_s'] / 1e6:.2f} M events/s; node-hours {s['node_hours']:.4f}")
print(f"  python: {p['events']} events in {p['wall_s']:.3f} s = {p['events_per_s'] / 1e6:.2f} M events/s; node-hours {p['node_hours']:.4f}")
print(f"  speed ratio {s['events_per_s'] / p['events_per_s']:.1f}x; node-hours agree to {abs(s['node_hours'] - p['node_hours']):.2g}")
PY
