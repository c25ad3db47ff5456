#!/usr/bin/python3
"""`strato monitor` end to end with a stand-in NVML driver library (argv[2]): the Prometheus
endpoint passes promtool, GPU alert rules fire and resolve through a webhook on loopback, an exit
rule ends the process with status 3, bad rule files are one clear line. With --prometheus, a real
Prometheus server scrapes the endpoint instead (the slow test)."""
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from harness import STRATO, check, finish, free_port

FAKE_NVML = sys.argv[2]




def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def wait_for(pred, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    check(False, f"timed out after {timeout} s waiting for {what}")
    return False


class Hooks(http.server.BaseHTTPRequestHandler):
    received = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hooks.received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def start_monitor(tmp, state, rules, port, extra=()):
    env = dict(os.environ, STRATO_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_STATE=state)
    args = [STRATO, "monitor", "--port", str(port), "--interval", "200ms", "--jsonl", os.path.join(tmp, "m.jsonl"), *extra]
    if rules:
        args += ["--rules", rules]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: metrics_ok(port), 60, "the exporter")
    return proc


def metrics_ok(port):
    try:
        return "DCGM_FI_DEV_GPU_UTIL" in get(f"http://127.0.0.1:{port}/metrics", 1)[2]
    except OSError:
        return False


def alerts_and_exporter(tmp):
    state = os.path.join(tmp, "nvml")
    with open(state, "w") as f:
        f.write("2 50 10\n")
    hooks = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
    threading.Thread(target=hooks.serve_forever, daemon=True).start()
    rules = os.path.join(tmp, "alerts.toml")
    with open(rules, "w") as f:
        f.write(f'[[rule]]\nname = "gpu-idle"\nwhen = "gpu_util < 20 for 1s"\naction = "webhook"\n'
                f'webhook = "http://127.0.0.1:{hooks.server_address[1]}/alerts"\n\n'
                '[[rule]]\nname = "gpu-hot"\nwhen = "avg(gpu_util) > 95 for 600ms"\naction = "exit"\n')
    port = free_port()
    proc = start_monitor(tmp, state, rules, port)
    try:
        status, ctype, text = get(f"http://127.0.0.1:{port}/metrics")
        check(status == 200 and ctype.startswith("text/plain; version=0.0.4"), f"content type {ctype}")
        check('DCGM_FI_DEV_GPU_UTIL{gpu="1",uuid="GPU-fake-2",device="nvidia1",model_name="Fake H200"} 50' in text, text[:2000])
        check("DCGM_FI_DEV_POWER_USAGE" in text and "strato_cpu_utilization_percent" in text, "families")
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        check(lint.returncode == 0, f"promtool: {lint.returncode} {lint.stdout}{lint.stderr}")

        with open(state, "w") as f:
            f.write("2 5 10\n")
        wait_for(lambda: len([h for h in Hooks.received if h["status"] == "firing"]) >= 2, 60, "two firing webhooks")
        firing = [h for h in Hooks.received if h["status"] == "firing"]
        # Found by review: the series went out as one label series="gpu=0"; Alertmanager routes
        # and group_by match gpu="0".
        check(sorted(h["alerts"][0]["labels"].get("gpu", "") for h in firing) == ["0", "1"], str(firing))
        check(all("series" not in h["alerts"][0]["labels"] for h in firing), str(firing))
        check(all(h["alerts"][0]["labels"]["alertname"] == "gpu-idle" for h in firing), "alertname")
        with open(state, "w") as f:
            f.write("2 60 10\n")
        wait_for(lambda: len([h for h in Hooks.received if h["status"] == "resolved"]) >= 2, 60, "two resolved webhooks")

        with open(state, "w") as f:
            f.write("2 99 10\n")
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rc = None
        err = proc.stderr.read()
        check(rc == 3, f"exit rule: status {rc}, expected 3; {err}")
        check("strato monitor: alert: gpu-hot firing: avg(gpu_util) = 99 > 95" in err, err)
        with open(os.path.join(tmp, "m.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        check(len(lines) >= 10 and lines[-1]["gpu_util"] == {"0": 99, "1": 99}, f"jsonl {lines[-1] if lines else None}")

        # The same log replayed: the idle rule fires again, deterministically, without sampling.
        # A replay serves no metrics unless --port is given (9400 is the live monitor's).
        replay = subprocess.run([STRATO, "monitor", "--replay", os.path.join(tmp, "m.jsonl"), "--rules", rules],
                                capture_output=True, text=True, timeout=60)
        check(replay.returncode == 3 and "metrics at" not in replay.stderr, f"replay: {replay.returncode} {replay.stderr}")
        # Found by review: the replay's alerts said gpu_util{series=0}, the live ones gpu_util{gpu=0}.
        check("gpu-hot firing: avg(gpu_util) = 99 > 95" in replay.stderr, replay.stderr[-800:])
        idle = os.path.join(tmp, "idle.toml")
        with open(idle, "w") as f:
            f.write('[[rule]]\nname = "gpu-idle"\nwhen = "gpu_util < 20 for 1s"\n')
        replay = subprocess.run([STRATO, "monitor", "--replay", os.path.join(tmp, "m.jsonl"), "--rules", idle],
                                capture_output=True, text=True, timeout=60)
        check(replay.returncode == 0 and "gpu-idle firing: gpu_util{gpu=0}" in replay.stderr, replay.stderr[-800:])
        # Found by review: with --port the replay exited before anyone could scrape it; it serves
        # the last sample until SIGTERM (or --duration).
        rport = free_port()
        rproc = subprocess.Popen([STRATO, "monitor", "--replay", os.path.join(tmp, "m.jsonl"), "--port", str(rport)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            scraped = ""
            def replay_scraped():
                nonlocal scraped
                try:
                    scraped = get(f"http://127.0.0.1:{rport}/metrics", 1)[2]
                except OSError:
                    return False
                return 'DCGM_FI_DEV_GPU_UTIL{gpu="1"} 99' in scraped
            # Found by review: the replay served the log's keys (gpu_util, counters as gauges), not
            # the live page's names, and a stray key such as "bad name" spoiled the whole page.
            wait_for(replay_scraped, 30, "the replay's last sample on /metrics under the live names")
            check("# TYPE strato_network_receive_bytes_total counter" in scraped, scraped[:1500])
            lint = subprocess.run(["promtool", "check", "metrics"], input=scraped, capture_output=True, text=True)
            check(lint.returncode == 0, f"promtool on the replay: {lint.returncode} {lint.stdout}{lint.stderr}")
            rproc.send_signal(signal.SIGTERM)
            rc = rproc.wait(timeout=10)
            check(rc == 0, f"replay --port after SIGTERM: exit {rc} {rproc.stderr.read()[-500:]}")
        finally:
            if rproc.poll() is None:
                rproc.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
        hooks.shutdown()


def bad_inputs(tmp):
    rules = os.path.join(tmp, "bad.toml")
    with open(rules, "w") as f:
        f.write('[[rule]]\nwhen = "gpu_util < twenty"\n')
    os.link(os.path.join(tmp, "m.jsonl"), os.path.join(tmp, "hard.jsonl"))
    cases = [
        (["monitor", "--rules", rules, "--no-exporter"], "'twenty' is not a finite number"),
        (["monitor", "--rules", os.path.join(tmp, "missing.toml")], "missing.toml"),
        # Found by review: a hard link to the replayed log got past the same-file check (the log
        # grew without end); a failed write (a full disk) was ignored; a directory failed late.
        (["monitor", "--replay", os.path.join(tmp, "m.jsonl"), "--jsonl", os.path.join(tmp, "hard.jsonl")],
         "name the same file"),
        (["monitor", "--no-exporter", "--duration", "1s", "--jsonl", "/dev/full"], "cannot write to /dev/full"),
        (["monitor", "--no-exporter", "--duration", "1s", "--jsonl", tmp], "is a directory"),
        (["monitor", "--replay", os.path.join(tmp, "nope.jsonl"), "--no-exporter"], "nope.jsonl"),
        # Found by review: appending to the replayed log grew it without end; --jsonl wrote into a
        # file that is not text.
        (["monitor", "--replay", os.path.join(tmp, "m.jsonl"), "--jsonl", os.path.join(tmp, "m.jsonl"), "--no-exporter"],
         "name the same file"),
        (["monitor", "--no-exporter", "--duration", "1s", "--jsonl", STRATO], "--jsonl"),
    ]
    for args, needle in cases:
        p = subprocess.run([STRATO, *args], capture_output=True, text=True, timeout=30)
        check(p.returncode == 1 and "\nstrato monitor: error: " in "\n" + p.stderr and needle in p.stderr,
              f"{args}: {p.returncode} {p.stderr!r}")
    # Usage errors exit 2: malformed or too short durations, and --once with what only a run does
    # (it ignored --rules, --jsonl, --replay and --port).
    usage = [
        (["monitor", "--interval", "fast"], "duration 'fast'"),
        (["monitor", "--interval", "1ns"], "expected at least 0.01s"),
        (["monitor", "--duration", "0"], "expected more than 0"),
        (["monitor", "--once", "--rules", rules], "excludes"),
        (["monitor", "--once", "--replay", os.path.join(tmp, "m.jsonl")], "excludes"),
        (["monitor", "--json"], "requires --once"),
        # Found by review: a replay samples nothing, and silently ignored what only sampling uses.
        (["monitor", "--replay", os.path.join(tmp, "m.jsonl"), "--pid", str(os.getpid())], "excludes"),
        (["monitor", "--replay", os.path.join(tmp, "m.jsonl"), "--interval", "5s"], "excludes"),
        (["monitor", "--replay", os.path.join(tmp, "m.jsonl"), "--dcgm-labels"], "excludes"),
        (["monitor", "--no-exporter", "--port", "9500"], "excludes"),
        (["monitor", "--no-exporter", "--address", "0.0.0.0"], "excludes"),
        # Found by review: an empty path (an unset variable in a script) was no flag: --replay ""
        # sampled live until Ctrl-C, --rules "" ran without rules, --jsonl "" logged nothing.
        (["monitor", "--replay", "", "--no-exporter"], "expected a file path, got an empty one"),
        (["monitor", "--rules", "", "--no-exporter", "--duration", "1s"], "expected a file path, got an empty one"),
        (["monitor", "--jsonl", "", "--no-exporter", "--duration", "1s"], "expected a file path, got an empty one"),
    ]
    for args, needle in usage:
        p = subprocess.run([STRATO, *args], capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and needle in p.stderr, f"{args}: {p.returncode} {p.stderr!r}")
    # Found by review: appending to a log whose last line was cut off glued the next record onto
    # it, and the replay stopped there. The new run starts a line; the replay skips the torn one.
    torn = os.path.join(tmp, "torn.jsonl")
    with open(torn, "w") as f:
        f.write('{"t": 1, "cpu_util": 5}\n{"t": 2, "cpu_u')
    p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "100ms", "--duration", "600ms", "--jsonl",
                        torn], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and "cut-off line" in p.stderr, f"append to a torn log: {p.returncode} {p.stderr!r}")
    p = subprocess.run([STRATO, "monitor", "--replay", torn], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and "torn.jsonl:2: not JSON" in p.stderr, f"replay of a torn log: {p.returncode} {p.stderr!r}")
    def is_json(line):
        try:
            return isinstance(json.loads(line), dict)
        except ValueError:
            return False
    with open(torn) as f:
        lines = f.read().splitlines()
    check(len(lines) >= 4 and not is_json(lines[1]) and all(is_json(x) for x in lines[2:]),
          f"records after the torn line: {lines!r}")
    # A FIFO with a reader takes the lines (found by review: the torn-line check opened it to
    # read and waited for ever for a writer).
    fifo = os.path.join(tmp, "ship.fifo")
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", fifo], stdout=subprocess.PIPE, text=True)
    p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "100ms", "--duration", "350ms", "--jsonl",
                        fifo], capture_output=True, text=True, timeout=30)
    shipped = reader.communicate(timeout=30)[0]
    check(p.returncode == 0 and shipped.count("\n") >= 2, f"--jsonl FIFO: {p.returncode} {p.stderr!r} {shipped!r}")
    # Found by review: a FIFO with no reader blocked for ever in open(), --duration and SIGTERM
    # ignored. It waits for a reader at each sample, saying so once.
    lonely = os.path.join(tmp, "lonely.fifo")
    os.mkfifo(lonely)
    t0 = time.time()
    p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "100ms", "--duration", "1s", "--jsonl", lonely],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and time.time() - t0 < 10 and "no process has the FIFO open to read" in p.stderr
          and "not written" in p.stderr, f"--jsonl FIFO without a reader: {p.returncode} {p.stderr!r}")
    proc = subprocess.Popen([STRATO, "monitor", "--no-exporter", "--interval", "100ms", "--jsonl", lonely],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # (SIGTERM once it samples: its stop handlers are installed by then)
        for line in proc.stderr:
            if "no process has the FIFO open to read" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        check(rc == 0, f"SIGTERM with no reader on the FIFO: exit {rc}")
    except subprocess.TimeoutExpired:
        check(False, "SIGTERM did not end a monitor whose FIFO has no reader")
    finally:
        if proc.poll() is None:
            proc.kill()
    # Found by review: --address localhost was refused.
    port = free_port()
    p = subprocess.run([STRATO, "monitor", "--address", "localhost", "--port", str(port), "--duration", "300ms"],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, f"--address localhost: {p.returncode} {p.stderr!r}")
    # A pipe takes the lines (/dev/stdout, a log shipper's FIFO).
    p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "100ms", "--duration", "350ms", "--jsonl",
                        "/dev/stdout"], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and p.stdout.count('"cpu_util"') >= 2, f"--jsonl /dev/stdout: {p.returncode} {p.stderr!r}")
    # Found by review: `--jsonl -` where standard output is a socket (a systemd service's journal)
    # failed with "is a socket"; the lines go to that socket.
    ours, theirs = socket.socketpair()
    with ours, theirs:
        p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "100ms", "--duration", "350ms", "--jsonl",
                            "-"], stdout=theirs, stderr=subprocess.PIPE, text=True, timeout=30)
        theirs.close()
        shipped = b""
        ours.settimeout(10)
        while chunk := ours.recv(65536):
            shipped += chunk
    check(p.returncode == 0 and shipped.count(b'"cpu_util"') >= 2, f"--jsonl - on a socket: {p.returncode} {p.stderr!r}")
    # Found by review: a GPU that stops answering (off the bus: NVML_ERROR_GPU_IS_LOST) lost its
    # series without a word. It is named once, with NVML's error.
    lost = os.path.join(tmp, "lost_state")
    with open(lost, "w") as f:
        f.write("2 50 10 15\n")
    p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "100ms", "--duration", "500ms"],
                       capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, STRATO_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_STATE=lost))
    check(p.returncode == 0 and p.stderr.count("GPU 0 (GPU-fake-1): NVML answers no query: GPU is lost") == 1,
          f"a lost GPU: {p.returncode} {p.stderr!r}")
    with open(lost, "w") as f:
        f.write("2 50 10 0 115\n")  # no GPU gets a handle (lost before the start): said, not "0 GPUs: "
    p = subprocess.run([STRATO, "monitor", "--once"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, STRATO_NVML_LIBRARY=FAKE_NVML, FAKE_NVML_STATE=lost))
    check(p.returncode == 0 and "no GPU: NVML counts 2 devices but gives a handle to none: GPU is lost" in p.stderr,
          f"no GPU handle: {p.returncode} {p.stderr!r}")
    # Without a driver: a clean "no GPU" and CPU metrics only.
    env = dict(os.environ, STRATO_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    p = subprocess.run([STRATO, "monitor", "--once", "--json"], capture_output=True, text=True, env=env, timeout=30)
    j = json.loads(p.stdout)
    check(p.returncode == 0 and "gpu_util" not in j and "cpu_util" in j, p.stdout[:500])
    check(any(n.startswith("no GPU") for n in j.get("notes", [])), str(j.get("notes")))
    # Found by review: --once in Prometheus text said nothing of the missing driver (the notes went
    # only into --json): a machine whose NVML failed to load looked like one without GPUs.
    p = subprocess.run([STRATO, "monitor", "--once"], capture_output=True, text=True, env=env, timeout=30)
    check(p.returncode == 0 and "strato_cpu_utilization_percent" in p.stdout and "no GPU" not in p.stdout
          and "no GPU: cannot load NVML (/nonexistent/libnvidia-ml.so.1)" in p.stderr,
          f"--once without a driver: {p.returncode} {p.stderr!r}")
    # Found by review: a --pid process that exited only left /metrics and the log's "notes",
    # without a word on stderr. It is said once. (A thread reaps it: a zombie still has its /proc.)
    short = subprocess.Popen(["sleep", "2"])
    threading.Thread(target=short.wait, daemon=True).start()
    p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "200ms", "--duration", "5s", "--pid",
                        str(short.pid)], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and p.stderr.count(f"monitor: process {short.pid} is gone") == 1,
          f"--pid of a process that exits: {p.returncode} {p.stderr[-800:]!r}")
    # The port is taken: a clear error.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        p = subprocess.run([STRATO, "monitor", "--port", str(s.getsockname()[1]), "--duration", "1s"],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode == 1 and "exporter on 127.0.0.1" in p.stderr, p.stderr)


def doctor_blas(tmp):
    """Found by review: `strato doctor` called every BLAS but OpenBLAS and MKL the reference one:
    Debian's BLIS (the libblas.so.3 alternative under blis-openmp/) was a FAIL and exit 1. The check
    goes by the library's path, so a copy of this machine's libblas.so.3 under a blis-openmp/
    directory stands in for it."""
    system = "/usr/lib/x86_64-linux-gnu/libblas.so.3"
    if not os.path.exists(system):
        return
    blis = os.path.join(tmp, "blis-openmp")
    os.makedirs(blis)
    shutil.copy(os.path.realpath(system), os.path.join(blis, "libblas.so.3"))
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "BLIS_NUM_THREADS")}
    env["LD_LIBRARY_PATH"] = blis
    p = subprocess.run([STRATO, "doctor", "--json", "--dir", tmp], capture_output=True, text=True, env=env, timeout=120)
    checks = {c["name"]: c for c in json.loads(p.stdout or "[]")}
    b = checks.get("blas", {})
    check(b.get("level") == "warn" and b.get("value", "").endswith("(BLIS)") and "BLIS_NUM_THREADS" in b.get("hint", ""),
          f"doctor on BLIS: {b}")
    failed = [c for c in checks.values() if c["level"] == "fail"]
    check(p.returncode == (1 if failed else 0), f"doctor exit {p.returncode} with failing checks {failed}")
    # Found by review: --samples without --peers was silently ignored; a usage error now.
    p = subprocess.run([STRATO, "doctor", "--samples", "5"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--samples requires --peers" in p.stderr, f"doctor --samples alone: {p.returncode} {p.stderr!r}")


def hung_webhook_and_duration(tmp):
    """A webhook receiver that accepts and never answers must not stall sampling (each post blocked
    the loop for 5 s), and --duration ends the run on time, not at the next sample after it."""
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(64)
    rules = os.path.join(tmp, "hang.toml")
    with open(rules, "w") as f:
        for i in range(4):
            f.write(f'[[rule]]\nname = "always-{i}"\nwhen = "cpu_util >= 0"\naction = "webhook"\n'
                    f'webhook = "http://127.0.0.1:{hang.getsockname()[1]}/hook"\n\n')
    jsonl = os.path.join(tmp, "hang.jsonl")
    try:
        t0 = time.time()
        p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "200ms", "--duration", "3s", "--rules", rules,
                            "--jsonl", jsonl], capture_output=True, text=True, timeout=60)
        took = time.time() - t0
        with open(jsonl) as f:
            samples = sum(1 for _ in f)
        check(p.returncode == 0, f"hung webhook: exit {p.returncode} {p.stderr[-500:]}")
        check(samples >= 10, f"{samples} samples in 3 s at 200 ms with a hung webhook receiver: {p.stderr[-500:]}")
        check(took < 3 + 5 + 5 + 5, f"the run took {took:.1f} s (3 s, then at most a few seconds for the webhooks)")
    finally:
        hang.close()
    t0 = time.time()
    typo = os.path.join(tmp, "typo.toml")
    with open(typo, "w") as f:
        f.write('[[rule]]\nname = "busy"\nwhen = "cpu_utl > 90"\n')
    p = subprocess.run([STRATO, "monitor", "--no-exporter", "--interval", "10s", "--duration", "1s", "--rules", typo],
                       capture_output=True, text=True, timeout=60)
    check(time.time() - t0 < 5, f"--interval 10s --duration 1s ran {time.time() - t0:.1f} s")
    check("rule busy: no metric 'cpu_utl' in this machine's samples" in p.stderr and "cpu_util" in p.stderr,
          f"a rule on a metric that does not exist: {p.stderr[-600:]}")


def prometheus_scrape(tmp):
    if not shutil.which("prometheus"):
        print("prometheus not installed; skipping")
        sys.exit(77)
    state = os.path.join(tmp, "nvml")
    with open(state, "w") as f:
        f.write("2 42 10\n")
    port, prom_port = free_port(), free_port()
    proc = start_monitor(tmp, state, None, port)
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                f"  - job_name: strato\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp}/tsdb",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def query(q):
            try:
                body = get(f"http://127.0.0.1:{prom_port}/api/v1/query?query={q}", 2)[2]
                return json.loads(body)["data"]["result"]
            except (OSError, KeyError, ValueError):
                return []
        wait_for(lambda: len(query("DCGM_FI_DEV_GPU_UTIL")) == 2, 30, "Prometheus to scrape two GPU series")
        series = query("DCGM_FI_DEV_GPU_UTIL")
        check(all(s["value"][1] == "42" and s["metric"]["job"] == "strato" for s in series), str(series))
        up = query("up")
        check(up and up[0]["value"][1] == "1", f"up {up}")
        check(len(query("strato_memory_total_bytes")) == 1, "host metrics scraped")
    finally:
        prom.terminate()
        proc.terminate()
        prom.wait(timeout=10)
        proc.wait(timeout=10)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        if "--prometheus" in sys.argv:
            prometheus_scrape(tmp)
        else:
            alerts_and_exporter(tmp)
            bad_inputs(tmp)
            doctor_blas(tmp)
            hung_webhook_and_duration(tmp)
    finish("monitor e2e")


if __name__ == "__main__":
    main()
