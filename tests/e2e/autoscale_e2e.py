#!/usr/bin/python3
"""`strato autoscale` end to end: the local provider scales real `strato serve` replicas up under
load and back down while load continues, with zero failed requests (drain); the simulator on a
trace with a report; capacity from a real load test; Kubernetes manifests that parse as YAML;
bad inputs as one clear line."""
import gzip
import http.client
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request

import yaml

from harness import REPO, STRATO, check, finish, run, train_tiny





def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/strato/replicas", timeout=5) as r:
        return json.loads(r.read())


def local_provider(tmp, model):
    policy = os.path.join(tmp, "local.toml")
    with open(policy, "w") as f:
        f.write('[autoscale]\nmin_nodes = 1\nmax_nodes = 3\ncooldown_up = "1s"\ncooldown_down = "3s"\n'
                'down_after = "3s"\n[[policy]]\nkind = "backlog"\nper_node = 3\n')
    proc = subprocess.Popen([STRATO, "autoscale", "local", "--policy", policy, "--model", f"fm={model}", "--port",
                             "0", "--tick", "500ms", "--log-dir", tmp],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:  # the front end's port, chosen by the kernel
            m = re.search(r"front end at http://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "autoscale local never said where its front end is"
        end = time.time() + 60
        while time.time() < end:
            try:
                if any(r["state"] == "ready" for r in status(port)["replicas"]):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        # Heavy load until it has scaled up, then light load until the extra replicas have drained
        # and stopped while requests flow. Rounds of load rather than one fixed span: a replica
        # start takes seconds more on a loaded machine.
        loads = []

        def load_until(concurrency, seconds, done, rounds=6):
            for _ in range(rounds):
                loads.append((os.path.join(tmp, f"lt{len(loads) + 1}.json"), seconds))
                run("loadtest", f"http://127.0.0.1:{port}", "--model", "fm", "--concurrency", str(concurrency), "-d",
                    f"{seconds}s", "--json", loads[-1][0])
                if done(status(port)):
                    return True
            return False

        scaled = load_until(12, 6, lambda st: sum(r["state"] == "ready" for r in st["replicas"]) >= 2)
        check(scaled, f"scaled up to 2 or more replicas under load: {status(port)}")
        # Statistics through the front end are every replica's summed, as one server's (they came
        # from one replica: a load test's server breakdown covered part of the requests).
        def inferences(p):
            with urllib.request.urlopen(f"http://127.0.0.1:{p}/v2/models/fm/stats", timeout=10) as r:
                return sum(m["inference_count"] for m in json.loads(r.read())["model_stats"])
        ready = [r["port"] for r in status(port)["replicas"] if r["state"] == "ready"]
        each = [inferences(p) for p in ready]
        total = inferences(port)
        check(total == sum(each) and total > max(each) > 0 or (len([e for e in each if e]) < 2 and total == sum(each)),
              f"stats through the front end: {total}, the replicas' {each}")
        lt1 = loads[-1][0]
        shrunk = load_until(1, 5, lambda st: len(st["replicas"]) == 1)
        st = status(port)
        check(shrunk, f"back to one replica: {st}")
        drained = [a for a in st["actions"] if "drained and stopped" in a["what"]]
        check(len(drained) >= 1, f"replicas drained: {st['actions']}")
        for path, seconds in loads:
            with open(path) as f:
                pts = json.load(f)["points"]
            errors = sum(p["errors"]["total"] for p in pts)
            done = sum(p["ok"] for p in pts)
            longest = max((p["latency_us"]["max"] for p in pts if p["ok"]), default=0) / 1e6
            # Requests flow all along (hundreds a second here): a front end that stalls while
            # replicas start or drain falls below 10 a second, with a request held for seconds (a
            # machine only loaded by others is slower, at 6 a second once, but holds none so long).
            check(errors == 0 and (done >= 10 * seconds or (done >= seconds and longest < 2)),
                  f"{os.path.basename(path)}: {errors} errors in {done} requests, the longest {longest:.2f} s")
        # HEAD through the proxy: a Content-Length and no body (it waited out 120 s for the body,
        # then stopped the replica as dead); gzip bodies keep their Content-Encoding.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        t0 = time.time()
        conn.request("HEAD", "/v2/health/ready")
        head = conn.getresponse()
        head.read()
        conn.close()
        check(head.status == 200 and time.time() - t0 < 5, f"HEAD through the proxy: {head.status} in {time.time() - t0:.1f} s")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/fm", timeout=10) as r:
            meta = json.loads(r.read())
        inp = meta["inputs"][0]
        shape = [1 if d < 0 else d for d in inp["shape"]]
        body = json.dumps({"inputs": [{"name": inp["name"], "shape": shape, "datatype": inp["datatype"],
                                       "data": [0] * math.prod(shape)}]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/fm/infer", data=gzip.compress(body),
                                     headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=30) as r:
            check(r.status == 200 and json.loads(r.read())["outputs"], "a gzip request body through the proxy")
        check(all(r["state"] != "gone" for r in status(port)["replicas"]), f"a replica was stopped: {status(port)}")
        # Every replica process is gone after SIGTERM.
        pids = [r["pid"] for r in status(port)["replicas"]]
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        check(rc == 0, f"autoscale local exit {rc}: {proc.stderr.read()[-2000:]}")
        for pid in pids:
            check(not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
                  f"replica {pid} still running")
        return lt1
    finally:
        if proc.poll() is None:
            proc.kill()


def simulate_capacity_manifests(tmp, loadtest_json):
    trace = os.path.join(tmp, "trace.csv")
    with open(trace, "w") as f:
        f.write("time_s,rate,preempt\n0,500,0\n3600,3000,0\n5400,3000,1\n7200,400,0\n")
    sim_json, html = os.path.join(tmp, "sim.json"), os.path.join(tmp, "sim.html")
    p = run("autoscale", "simulate", "--policy", os.path.join(REPO, "configs", "autoscale", "seeds.toml"), "--trace", trace,
            "--per-gpu-capacity", "600", "--horizon", "3h", "--json", sim_json, "--report", html, "--runs", "5")
    check("M events/s" in p.stdout and "cost over 5 runs" in p.stdout, p.stdout)
    with open(sim_json) as f:
        sim = json.load(f)
    check(sim["kind"] == "strato-autoscale-sim" and sim["max_nodes"] >= 4 and sim["preemptions"] >= 1, str(sim)[:400])
    check(len(sim["timeline"]) > 300 and sim["cost"] > 0, "timeline")
    with open(html) as f:
        page = f.read()
    check(page.count("<svg") == 4 and "Scaling actions" in page, "report charts")

    # Capacity from the real load test of one replica. (An objective of 10 s: on a 2-core machine
    # shared with compilers, the p99 of 12 clients on one replica passed 1 s; this checks the
    # pipeline, not the speed.)
    p = run("autoscale", "capacity", "--loadtest", loadtest_json, "--slo-p99", "10s", "--qps", "10000", "--json")
    cap = json.loads(p.stdout) if p.returncode == 0 else {"replica_qps": 0, "rows": []}
    check(cap["replica_qps"] > 0 and cap["rows"] and cap["rows"][0]["cost_per_million"] > 0, str(cap)[:300])
    costs = [r["cost_per_million"] for r in cap["rows"]]
    check(costs == sorted(costs), "capacity rows sorted by cost per million")
    run("autoscale", "capacity", "--loadtest", loadtest_json, "--slo-p99", "1us", "--qps", "100", expect=1)

    # Manifests parse as YAML with the expected kinds.
    p = run("autoscale", "manifests", "--name", "fashion", "--gpus", "1", "--pending-per-pod", "8")
    docs = list(yaml.safe_load_all(p.stdout))
    check([d["kind"] for d in docs] == ["Deployment", "Service", "HorizontalPodAutoscaler"], str([d.get("kind") for d in docs]))
    c = docs[0]["spec"]["template"]["spec"]["containers"][0]
    check(c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready" and c["resources"]["limits"]["nvidia.com/gpu"] == 1, str(c))
    check(docs[2]["spec"]["metrics"][0]["pods"]["metric"]["name"] == "nv_inference_pending_request_count", "HPA metric")
    # Values that YAML would read as other types or as keys of their own stay strings.
    p = run("autoscale", "manifests", "--name", "yes", "--namespace", "null", "--model-repository", '/m: "x" #y')
    docs = list(yaml.safe_load_all(p.stdout))
    c = docs[0]["spec"]["template"]["spec"]["containers"][0]
    check(docs[0]["metadata"] == {"name": "yes", "namespace": "null", "labels": {"app": "yes"}}, str(docs[0]["metadata"]))
    check(c["args"][2] == '/m: "x" #y', str(c["args"]))
    p = run("autoscale", "manifests", "--name", "fashion", "--kserve")
    isvc = yaml.safe_load(p.stdout)
    check(isvc["kind"] == "InferenceService" and isvc["apiVersion"] == "serving.kserve.io/v1beta1", str(isvc)[:300])
    # Knative (KServe's default mode) allows one container port, named http1 or h2c, and probes
    # on it only; the metrics port goes in KServe's annotations.
    c = isvc["spec"]["predictor"]["containers"][0]
    check(c["ports"] == [{"name": "http1", "containerPort": 8000}], str(c["ports"]))
    check("port" not in c["readinessProbe"]["httpGet"] and "port" not in c["livenessProbe"]["httpGet"], str(c))
    check(isvc["metadata"]["annotations"]["prometheus.kserve.io/port"] == "8002", str(isvc["metadata"]))
    # Found by review: --target-cpu with --kserve was ignored (scaleMetric concurrency).
    p = run("autoscale", "manifests", "--name", "fashion", "--kserve", "--target-cpu", "50")
    isvc = yaml.safe_load(p.stdout)
    check(isvc["spec"]["predictor"]["scaleMetric"] == "cpu" and isvc["spec"]["predictor"]["scaleTarget"] == 50,
          str(isvc["spec"]["predictor"])[:300])
    p = run("autoscale", "manifests", "--name", "fashion", "--target-cpu", "50", "--pending-per-pod", "8", expect=2)
    check("excludes" in p.stderr, p.stderr)

    # Without a load test no p99 was measured: null, not 0.
    p = run("autoscale", "capacity", "--replica-qps", "100", "--qps", "1000", "--json")
    cap = json.loads(p.stdout) if p.returncode == 0 else {}
    check(cap.get("p99_ms", 0) is None and cap.get("rows"), f"capacity --replica-qps: {p.stdout[:300]}")

    bad_trace = os.path.join(tmp, "bad.csv")
    with open(bad_trace, "w") as f:
        f.write("time_s,rate\n0,10\n-5,3\n")
    bad_policy = os.path.join(tmp, "bad.toml")
    with open(bad_policy, "w") as f:
        f.write('[[policy]]\nkind = "backlog"\nper_node = 0\n')
    seeds = os.path.join(REPO, "configs", "autoscale", "seeds.toml")
    cases = [
        (["autoscale", "simulate", "--policy", seeds, "--trace", bad_trace, "--per-gpu-capacity", "1"], "bad.csv:3 time_s"),
        (["autoscale", "simulate", "--policy", bad_policy, "--trace", trace, "--per-gpu-capacity", "1"], "per_node"),
        (["autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "1", "--instance", "g9.huge"],
         "unknown instance type 'g9.huge'"),
        (["autoscale", "simulate", "--policy", seeds, "--trace", trace], "--per-gpu-capacity"),
        (["autoscale", "capacity", "--qps", "100"], "--loadtest"),
        # Found by review: outputs on inputs (the trace became JSON), and on each other.
        (["autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "600", "--json", trace],
         "--json and --trace name the same file"),
        (["autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "600", "--json",
          os.path.join(tmp, "x.out"), "--report", os.path.join(tmp, "x.out")], "--json and --report name the same file"),
    ]
    for args, needle in cases:
        p = run(*args, expect=1)
        check(p.stderr.startswith("strato autoscale") and needle in p.stderr, f"{args}: {p.stderr!r}")
    # Flag values out of range are usage errors (they were wrapped or ignored).
    for args in (["autoscale", "local", "--policy", seeds, "--port", "99999"],
                 ["autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "1", "--spot-hazard", "nan"],
                 ["autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "1", "--initial-nodes", "-7"],
                 ["autoscale", "capacity", "--replica-qps", "100", "--qps", "100", "--top", "0"],
                 # Found by review: --loadtest quietly won over --per-gpu-capacity, --slo-p99 without
                 # a load test was ignored, and durations were checked after the run was set up.
                 ["autoscale", "simulate", "--policy", seeds, "--trace", trace, "--loadtest", "lt.json",
                  "--per-gpu-capacity", "1"],
                 ["autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "1",
                  "--slo-p99", "5ms"],
                 ["autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "1", "--tick", "0"],
                 ["autoscale", "local", "--policy", seeds, "--tick", "1ms"],
                 ["autoscale", "capacity", "--loadtest", "lt.json", "--qps", "100", "--replica-qps", "100"]):
        p = run(*args, expect=2)
        check(args[-2] in p.stderr, f"{args}: {p.stderr!r}")
    # Found by review: a --serve-arg the provider sets on every replica itself killed each replica
    # at start (serve refuses a repeated flag); a usage error that names the flags.
    p = run("autoscale", "local", "--policy", seeds, "--model", "unused", "--serve-arg=--metrics-port",
            "--serve-arg=9102", expect=2)
    check("--metrics-port" in p.stderr and "--http-address, --http-port and --metrics-port" in p.stderr, p.stderr)
    # Found by review: a bad --start or manifests flag value exited 1, not as a usage error.
    p = run("autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "1", "--start",
            "mon-fri 08:00", expect=2)
    check("--start: 'mon-fri 08:00': expected one day" in p.stderr, p.stderr)
    p = run("autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "1", "--start",
            "fri 25:00", expect=2)
    check("--start: time of day '25:00'" in p.stderr, p.stderr)
    for args, needle in ((["--name", "Fashion_Model"], "not a valid Kubernetes name"),
                         (["--name", "fashion", "--min-replicas", "5", "--max-replicas", "2"], "min (5) <= max (2)"),
                         (["--name", "fashion", "--cpu", "two"], "--cpu 'two' is not a Kubernetes quantity")):
        p = run("autoscale", "manifests", *args, expect=2)
        check(p.stderr.startswith("strato autoscale manifests: error: ") and needle in p.stderr, f"{args}: {p.stderr!r}")
    # A trace in Unix seconds is simulated from its first row, not billed from 1970.
    epoch = os.path.join(tmp, "epoch.csv")
    with open(epoch, "w") as f:
        f.write("time_s,rate\n1700000000,100\n1700000060,200\n")
    epoch_json = os.path.join(tmp, "epoch.json")
    run("autoscale", "simulate", "--policy", seeds, "--trace", epoch, "--per-gpu-capacity", "600", "--json", epoch_json,
        timeout=60)
    if os.path.exists(epoch_json):
        with open(epoch_json) as f:
            # Found by review: the run went one --tick past the last row (90 s here).
            check(json.load(f)["duration_s"] == 60, "an epoch trace runs 60 s, to its last row")
    # Each subcommand's --help shows its own examples.
    p = run("autoscale", "simulate", "--help")
    check("strato autoscale simulate --policy" in p.stdout and "strato train" not in p.stdout, p.stdout[-400:])


def killed_provider_takes_its_replicas(tmp, model):
    """`autoscale local` killed outright (SIGKILL, a crash) leaves no replica running without it."""
    policy = os.path.join(tmp, "two.toml")
    with open(policy, "w") as f:
        f.write('[autoscale]\nmin_nodes = 2\nmax_nodes = 2\n[[policy]]\nkind = "backlog"\nper_node = 4\n')
    logs = os.path.join(tmp, "kill-logs")
    proc = subprocess.Popen([STRATO, "autoscale", "local", "--policy", policy, "--model", f"fm={model}", "--port", "0",
                             "--log-dir", logs], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:
            m = re.search(r"front end at http://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        check(port is not None, "autoscale local never said where its front end is")
        pids = [r["pid"] for r in status(port)["replicas"]]
        check(len(pids) == 2, f"two replicas: {pids}")
        proc.kill()
        proc.wait(timeout=10)
        end = time.time() + 40
        alive = pids
        while alive and time.time() < end:
            alive = [p for p in pids if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
            time.sleep(0.2)
        check(not alive, f"replicas {alive} outlived their SIGKILLed provider")
    finally:
        if proc.poll() is None:
            proc.kill()


def unix_time_trace_clock(tmp):
    """Found by review: a trace in Unix seconds ran its schedule from Monday 00:00, whatever its
    dates: a Tuesday 09:00-10:00 trace never saw the weekday floor. Its first row's day and hour
    (UTC) are the clock now; --start still sets another."""
    policy, trace = os.path.join(tmp, "floor.toml"), os.path.join(tmp, "unix.csv")
    with open(policy, "w") as f:
        f.write('[autoscale]\nmin_nodes = 1\nmax_nodes = 8\n\n[[policy]]\nkind = "schedule"\ndays = "mon-fri"\n'
                'from = "09:00"\nto = "18:00"\nnodes = 4\notherwise = 1\n')
    t0 = 1796115600  # Tuesday 2026-12-01 09:00 UTC
    with open(trace, "w") as f:
        f.write(f"time_s,rate\n{t0},1\n{t0 + 3600},1\n")
    for extra, nodes, line in [([], 4, "schedule clock from the trace's Unix time: tue 09:00 UTC"),
                               (["--start", "sat 09:00"], 1, None)]:
        out = os.path.join(tmp, "unix.json")
        p = run("autoscale", "simulate", "--policy", policy, "--trace", trace, "--per-gpu-capacity", "10", "--json",
                out, *extra)
        with open(out) as f:
            got = json.load(f)["max_nodes"]
        check(got == nodes and (line is None or line in p.stdout) and (line is not None or "Unix" not in p.stdout),
              f"Unix-time trace {extra}: max {got} nodes, expected {nodes}\n{p.stdout}")


def manifests_ranges_in_help():
    """Found by review: `autoscale manifests` checked --min-replicas, --max-replicas, --gpus and
    --pending-per-pod only after parsing, and --help showed no range; out-of-range values are now
    refused by the flag (exit 2, naming it) and --help shows each range."""
    p = run("autoscale", "manifests", "--help")
    for flag, shown in (("--min-replicas", "[0 - 150000]"), ("--max-replicas", "[1 - 150000]"),
                        ("--gpus", "[0 - 64]"), ("--pending-per-pod", "[0, 1000000]")):
        line = next((l for l in p.stdout.splitlines() if l.strip().startswith(flag + " ")), "")
        check(shown in line, f"--help shows the range of {flag}: {line!r}")
    for args, needle in ((["--min-replicas", "-3"], "--min-replicas"), (["--max-replicas", "0"], "--max-replicas"),
                         (["--gpus", "65"], "--gpus"), (["--pending-per-pod", "nan"], "--pending-per-pod"),
                         # Found by review: Docker's `-m 512m` is 0.512 bytes in Kubernetes.
                         (["--memory", "512m"], "for megabytes write '512Mi'")):
        p = run("autoscale", "manifests", "--name", "fashion", *args, expect=2)
        check(needle in p.stderr and len(p.stderr.strip().splitlines()) <= 2, f"{args}: {p.stderr!r}")


def review_units_and_json(tmp):
    """Found by review (no model needed): a --runs spread on the terminal only; a --json that did
    not say what it assumed; capacity --json that did not say spot from on-demand; the capacity a
    --loadtest gave the simulator printed nowhere, in requests while a trace may be in samples;
    a trace in Unix milliseconds simulated as 1,000 times its length; KServe names that fit
    Kubernetes but not KServe's predictor host; a slow model's 0.4 requests/s printed as 0."""
    seeds = os.path.join(REPO, "configs", "autoscale", "seeds.toml")
    trace = os.path.join(tmp, "r.csv")
    with open(trace, "w") as f:
        f.write("time_s,rate\n0,1000\n3600,3000\n7200,500\n")
    out = os.path.join(tmp, "r.json")
    p = run("autoscale", "simulate", "--policy", seeds, "--trace", trace, "--per-gpu-capacity", "600", "--runs", "4",
            "--seed", "9", "--json", out)
    sim = json.load(open(out)) if p.returncode == 0 else {}
    spread = sim.get("cost_over_runs", {})
    check(spread.get("runs") == 4 and spread.get("seeds") == [9, 12] and spread.get("p10", 0) <= spread.get("p90", -1),
          f"simulate --runs 4 --json: the spread: {spread}")
    check(sim.get("seed") == 9 and sim.get("per_gpu_capacity") == 600 and sim.get("tick_s") == 30,
          f"simulate --json says what its run assumed: { {k: sim.get(k) for k in ('seed', 'per_gpu_capacity', 'tick_s')} }")
    lt = os.path.join(tmp, "lt8.json")
    with open(lt, "w") as f:
        json.dump({"kind": "strato-loadtest", "target": "x", "batch_size": 8, "points": [
            {"concurrency": 2, "throughput": 250, "latency_us": {"p99": 4000}, "errors": {"total": 0}}]}, f)
    p = run("autoscale", "simulate", "--policy", seeds, "--trace", trace, "--loadtest", lt, "--slo-p99", "10ms")
    check("capacity per GPU (one replica each): 250.0 requests/s" in p.stdout
          and "carried 8 samples: for a trace in samples/s, give --per-gpu-capacity 2000.0 instead" in p.stdout,
          f"simulate --loadtest names the capacity and its unit: {p.stdout!r}")
    p = run("autoscale", "capacity", "--replica-qps", "100", "--qps", "1000", "--spot", "--json")
    cap = json.loads(p.stdout) if p.returncode == 0 else {}
    check(cap.get("spot") is True and cap.get("headroom") == 0.2 and cap.get("gpus_per_replica") == 1,
          f"capacity --json says the market and the sizing: {p.stdout[:200]!r}")
    slow = os.path.join(tmp, "slow.json")
    with open(slow, "w") as f:
        json.dump({"kind": "strato-loadtest", "target": "x", "points": [
            {"concurrency": 1, "throughput": 0.4, "latency_us": {"p99": 2500000}, "errors": {"total": 0}}]}, f)
    p = run("autoscale", "capacity", "--loadtest", slow, "--slo-p99", "5s", "--qps", "0.5")
    check("one replica: 0.4 requests/s" in p.stdout and "target 0.5 requests/s" in p.stdout,
          f"a slow model's rates are not printed as 0: {p.stdout[:300]!r}")
    ms = os.path.join(tmp, "ms.csv")
    with open(ms, "w") as f:
        f.write("time_s,rate\n1733500000000,10\n1733500120000,10\n")
    p = run("autoscale", "simulate", "--policy", seeds, "--trace", ms, "--per-gpu-capacity", "10", expect=1)
    check("ms.csv:2 time_s" in p.stderr and "milliseconds" in p.stderr, p.stderr)
    p = run("autoscale", "manifests", "--name", "a" * 46, "--kserve", expect=2)
    check("at most 45 characters" in p.stderr, p.stderr)
    p = run("autoscale", "manifests", "--name", "a" * 45, "--kserve")
    check(p.returncode == 0 and yaml.safe_load(p.stdout)["metadata"]["name"] == "a" * 45, p.stderr)


def main():
    manifests_ranges_in_help()
    with tempfile.TemporaryDirectory() as tmp:
        review_units_and_json(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        model = os.path.join(train_tiny(runs, "tiny"), "model")
        lt = local_provider(tmp, model)
        killed_provider_takes_its_replicas(tmp, model)
        simulate_capacity_manifests(tmp, lt)
        unix_time_trace_clock(tmp)
    finish("autoscale e2e")


if __name__ == "__main__":
    main()
