#!/usr/bin/python3
"""The peer of strato's cluster simulator: the same model written the way one would in Python
(heapq event queue, fluid work queue, HPA-style utilisation policy with cooldowns, boot delays,
trace preemptions; booting nodes idle when scaling up, kept when scaling down), to compare events per second and check that both agree on node-hours.

    sim_peer.py TRACE.csv PER_NODE_CAPACITY BOOT_S TICK_S   -> prints JSON
"""
import csv
import heapq
import json
import math
import sys
import time


def main():
    trace_path, cap, boot, tick = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    with open(trace_path) as f:
        trace = [(float(r["time_s"]), float(r["rate"]), int(r.get("preempt") or 0)) for r in csv.DictReader(f)]
    t0 = time.perf_counter()
    min_n, max_n, target, up_cd, down_cd, down_after = 1, 12, 70.0, 120.0, 600.0, 600.0
    horizon = trace[-1][0]  # as strato: the run ends at the last row
    q, seq = [], 0

    def push(t, kind, arg=0):
        nonlocal seq
        heapq.heappush(q, (t, seq, kind, arg))
        seq += 1

    for i, p in enumerate(trace):
        push(p[0], 0, i)
    push(0.0, 1)
    push(horizon, 9)
    nodes = {0: {"ready": True, "launched": 0.0, "gen": 0}}  # id -> node
    next_id = 1
    now = rate = backlog = 0.0
    node_seconds = 0.0
    tick_served = tick_cap = 0.0
    last_up = last_change = -1e300
    down_since = -1.0
    down_window = []  # (time, nodes wanted) while a scale-down is wanted
    events = 0

    def capacity():
        return sum(cap for n in nodes.values() if n["ready"])

    def launch():
        nonlocal next_id
        nodes[next_id] = {"ready": False, "launched": now}
        push(now + boot, 2, next_id)
        next_id += 1

    def stop(i):
        nonlocal node_seconds
        node_seconds += now - nodes[i]["launched"]
        del nodes[i]

    while q:
        t, _, kind, arg = heapq.heappop(q)
        events += 1
        dt = t - now
        if dt > 0:
            c = capacity()
            b1 = max(0.0, backlog + (rate - c) * dt)
            served = backlog + rate * dt - b1
            tick_served += served
            tick_cap += c * dt
            backlog, now = b1, t
        if kind == 9:
            break
        if kind == 0:
            rate = trace[arg][1]
            for _ in range(trace[arg][2]):
                if nodes:
                    oldest = min(nodes, key=lambda i: nodes[i]["launched"])
                    stop(oldest)
                    launch()
        elif kind == 2:
            if arg in nodes:
                nodes[arg]["ready"] = True
        elif kind == 1:
            n = len(nodes)
            # no capacity-time yet (the first tick): the load on the capacity there is now
            c = capacity()
            util = (100 * tick_served / tick_cap if tick_cap > 0 else
                    min(100.0, 100 * rate / c) if c > 0 else (100.0 if rate > 0 else 0.0))
            ratio = util / target
            ready = sum(1 for v in nodes.values() if v["ready"])
            # booting nodes: idle when scaling up (the HPA's rule for pods not ready), kept when scaling down
            if abs(ratio - 1) <= 0.1:
                want = n
            elif ratio > 1:
                want = max(n, math.ceil(ready * ratio - 1e-9))
            else:
                want = min(n, max(0, math.ceil(ready * ratio - 1e-9)) + (n - ready))
            want = min(max(want, min_n), max_n)
            if want > n:
                down_since = -1.0
                down_window.clear()
                if now - last_up >= up_cd:
                    for _ in range(want - n):
                        launch()
                    last_up = last_change = now
            elif want < n:
                if down_since < 0:
                    down_since = now
                # the HPA's stabilisation window: down to the most wanted within down_after
                down_window.append((now, want))
                down_window[:] = [(t, w) for t, w in down_window if t >= now - down_after]
                peak = max(w for _, w in down_window)
                if now - down_since >= down_after and now - last_change >= down_cd and peak < n:
                    for _ in range(n - peak):
                        victim = max(nodes, key=lambda i: (not nodes[i]["ready"], nodes[i]["launched"]))
                        stop(victim)
                    last_change = now
                    down_since = -1.0
                    down_window.clear()
            else:
                down_since = -1.0
                down_window.clear()
            tick_served = tick_cap = 0.0
            push(now + tick, 1)
    for i in list(nodes):
        stop(i)
    wall = time.perf_counter() - t0
    print(json.dumps({"events": events, "wall_s": wall, "events_per_s": events / wall, "node_hours": node_seconds / 3600}))


if __name__ == "__main__":
    main()
