#!/usr/bin/python3
"""`strato launch` end to end with real processes: the torchrun environment (both flag spellings
and PET_* variables), a failing worker restarting the whole group with an error file, a worker
killed by SIGKILL, restarts used up, SIGTERM to the launcher, two launchers as two nodes through
the rendezvous on 127.0.0.1 (a failure on one restarts both), and a node that never joins giving
a clear error within the join timeout; worker output read as fast as it comes, a launcher whose
stdout nobody reads still stopping on SIGTERM, SIGTERM acted on at once with a long
--monitor-interval; a rendezvous endpoint that never answers, one named by a host name mapped to
loopback, --nproc-per-node gpu|auto with a stand-in NVML (argv[2], optional), a .py command with the
virtualenv's python3, a worker's error file after it changed directory; --emit kubernetes as a PyTorchJob, --emit's usage errors and the flags it passes
on; doctor --peers against doctor --listen and a dead port, and its usage errors."""
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from harness import STRATO, check, finish, free_port

ENV_DUMP = ("import json, os; print('ENV ' + json.dumps({k: os.environ.get(k) for k in ['RANK', 'LOCAL_RANK', "
            "'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'MASTER_ADDR', 'MASTER_PORT', "
            "'TORCHELASTIC_RESTART_COUNT', 'TORCHELASTIC_MAX_RESTARTS', 'TORCHELASTIC_RUN_ID', 'OMP_NUM_THREADS', "
            "'NCCL_ASYNC_ERROR_HANDLING', 'TORCH_NCCL_ASYNC_ERROR_HANDLING', 'ROLE_RANK', 'ROLE_WORLD_SIZE', "
            "'GROUP_WORLD_SIZE', 'TORCHELASTIC_USE_AGENT_STORE', "
            "'TORCHELASTIC_ERROR_FILE']}))")


def launch(*args, env=None, timeout=60):
    return subprocess.run([STRATO, "launch", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def wait_for(what, ready, proc=None, timeout=60):
    """Polls READY() until it is true (no fixed sleeps: a loaded CI machine can take seconds to
    start a process); False, with a failure recorded, on timeout or when PROC exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ready():
            return True
        if proc is not None and proc.poll() is not None:
            check(False, f"exited ({proc.returncode}) while waiting for {what}")
            return False
        time.sleep(0.02)
    check(False, f"timed out after {timeout} s waiting for {what}")
    return False


def envs(out):
    return sorted((json.loads(l.split("ENV ", 1)[1]) for l in out.splitlines() if "ENV " in l),
                  key=lambda e: int(e["RANK"]))


def environment(tmp):
    p = launch("--standalone", "--nproc_per_node=3", "--log-dir", f"{tmp}/env", "--max-restarts", "2",
               "/usr/bin/python3", "-c", ENV_DUMP)
    check(p.returncode == 0, f"standalone: exit {p.returncode}: {p.stderr[-800:]}")
    e = envs(p.stdout)
    check([x["RANK"] for x in e] == ["0", "1", "2"], f"ranks {e}")
    check(all(x["WORLD_SIZE"] == "3" and x["LOCAL_WORLD_SIZE"] == "3" and x["GROUP_RANK"] == "0" for x in e), e)
    check(len({x["MASTER_PORT"] for x in e}) == 1 and e[0]["MASTER_ADDR"] == "127.0.0.1", e)
    # Found by a parallel test run: the store's port came from bind(0), the kernel's ephemeral range,
    # where any outgoing connection could take it before rank 0 bound it ("address in use").
    lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    check(e and not lo <= int(e[0]["MASTER_PORT"]) <= hi, f"MASTER_PORT {e[0]['MASTER_PORT'] if e else '?'} is in the "
          f"ephemeral range {lo}-{hi}")
    check(all(x["TORCHELASTIC_RESTART_COUNT"] == "0" and x["TORCHELASTIC_MAX_RESTARTS"] == "2" for x in e), e)
    check(all(x["OMP_NUM_THREADS"] == "1" for x in e), "OMP_NUM_THREADS=1 by default with several workers")
    # The rest of torchrun's worker environment (found by review: NCCL_ASYNC_ERROR_HANDLING was not set).
    # (and its name since PyTorch 2.2, which torchrun sets there: found by review)
    check(all(x["NCCL_ASYNC_ERROR_HANDLING"] == "1" and x["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
              and x["ROLE_RANK"] == x["RANK"] and x["ROLE_WORLD_SIZE"] == "3"
              and x["GROUP_WORLD_SIZE"] == "1" and x["TORCHELASTIC_USE_AGENT_STORE"] == "False"
              and x["TORCHELASTIC_ERROR_FILE"].endswith(f"rank_{x['RANK']}.error.json")
              and os.path.isabs(x["TORCHELASTIC_ERROR_FILE"]) for x in e), e)
    check(os.path.exists(f"{tmp}/env/attempt_0/rank_2.log"), "per-rank logs")
    # PET_* variables, as Kubeflow sets them.
    p = launch("/usr/bin/python3", "-c", ENV_DUMP, env={"PET_NPROC_PER_NODE": "2", "PET_LOG_DIR": f"{tmp}/pet"})
    check(p.returncode == 0 and len(envs(p.stdout)) == 2, f"PET_NPROC_PER_NODE: {p.stdout} {p.stderr[-500:]}")
    # The workers' own flags are theirs.
    p = launch("--nproc-per-node", "1", "--log-dir", f"{tmp}/flags", "/bin/echo", "--nproc-per-node", "-q")
    check(p.returncode == 0 and "--nproc-per-node -q" in p.stdout, f"worker flags: {p.stdout} {p.stderr[-300:]}")


def restarts(tmp):
    script = ("import os, sys, time; r = int(os.environ['RANK']); n = int(os.environ['TORCHELASTIC_RESTART_COUNT']);"
              "print('start', r, n, flush=True);"
              "sys.exit(7) if r == 1 and n == 0 else time.sleep(0.5); print('done', r, n)")
    p = launch("--nproc-per-node", "2", "--max-restarts", "1", "--stop-timeout", "5", "--log-dir", f"{tmp}/r",
               "/usr/bin/python3", "-c", script)
    check(p.returncode == 0, f"restart: exit {p.returncode}: {p.stderr[-800:]}")
    check("[0]: done 0 1" in p.stdout and "[1]: done 1 1" in p.stdout, f"second attempt finished: {p.stdout}")
    err = json.load(open(f"{tmp}/r/error.json"))
    check(err["rank"] == 1 and err["exit_code"] == 7 and err["attempt"] == 0, err)
    check("start 1 0" in err["last_lines"], f"last lines: {err['last_lines']}")
    # Restarts used up: the launcher exits with the worker's code.
    p = launch("--nproc-per-node", "2", "--max-restarts", "1", "--stop-timeout", "5", "--log-dir", f"{tmp}/used",
               "/usr/bin/python3", "-c", "import os, sys; sys.exit(9 if os.environ['RANK'] == '0' else 0)")
    check(p.returncode == 9, f"restarts used up: exit {p.returncode}")
    check("no restarts left" in p.stderr, p.stderr[-500:])
    check(os.path.exists(f"{tmp}/used/attempt_1/error.json"), "an error file per attempt")
    # Found by review: a reused log directory kept the earlier run's error.json files, and a stale
    # rank_N.error.json was read as the error of a worker that wrote none this time.
    with open(f"{tmp}/used/attempt_0/rank_1.error.json", "w") as f:
        f.write('{"message": "STALE from an earlier run"}')
    p = launch("--nproc-per-node", "2", "--max-restarts", "0", "--stop-timeout", "5", "--log-dir", f"{tmp}/used",
               "/usr/bin/python3", "-c", "import os, sys; sys.exit(3 if os.environ['RANK'] == '1' else 0)")
    check(p.returncode == 3, f"reused log dir: exit {p.returncode}")
    err = json.load(open(f"{tmp}/used/error.json"))
    check(err["rank"] == 1 and err["exit_code"] == 3 and "worker_error" not in err, f"stale worker error read: {err}")
    check(not os.path.exists(f"{tmp}/used/attempt_1/error.json"), "the earlier run's attempt_1/error.json is still there")
    p = launch("--nproc-per-node", "1", "--log-dir", f"{tmp}/used", "/usr/bin/python3", "-c", "pass")
    check(p.returncode == 0 and not os.path.exists(f"{tmp}/used/error.json"),
          f"a successful run in a reused log dir left an error.json: exit {p.returncode}")


def hostile_output(tmp):
    """Bytes that are not UTF-8 and a line of 300 KB without a newline: the group still restarts,
    error.json is written and readable, and the launcher exits with the worker's code."""
    script = ("import os, sys; n = os.environ['TORCHELASTIC_RESTART_COUNT']; sys.stdout.buffer.write(b'caf\\xe9 \\xff\\n');"
              "sys.stdout.write('x' * 300000); sys.stdout.flush();"
              "open(os.environ['TORCHELASTIC_ERROR_FILE'], 'wb').write(b'{\"message\": \"\\xff\"'); sys.exit(3)")
    p = launch("--standalone", "--max-restarts", "1", "--quiet-workers", "--log-dir", f"{tmp}/u8", "/usr/bin/python3",
               "-c", script)
    check(p.returncode == 3, f"non-UTF-8 output: exit {p.returncode}, expected the worker's 3: {p.stderr[-500:]}")
    check(os.path.exists(f"{tmp}/u8/attempt_1/rank_0.log"), "the group restarted after non-UTF-8 output")
    with open(f"{tmp}/u8/error.json", encoding="utf-8") as f:
        e = json.load(f)
    check("caf\ufffd \ufffd" in e["last_lines"], f"last lines: {e['last_lines'][:3]}")
    check(max(len(l) for l in e["last_lines"]) == 65536, "a line without a newline is cut at 64 KiB")
    check(e["worker_error"] == '{"message": "\ufffd"', f"worker error: {e.get('worker_error')!r}")


def huge_worker_error(tmp):
    """Found by review: the worker's TORCHELASTIC_ERROR_FILE was read whole, with no limit: a 1 MB
    file went into error.json as it was, and one linked to /dev/zero was read up to 1 GiB into the
    launcher's memory. At most 64 KiB are kept now, and error.json says it was cut."""
    script = ("import os, sys; open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w').write('{\"message\": \"' + 'x' * 1000000);"
              "sys.exit(3)")
    p = launch("--standalone", "--quiet-workers", "--log-dir", f"{tmp}/bigerr", "/usr/bin/python3", "-c", script)
    check(p.returncode == 3, f"huge error file: exit {p.returncode}: {p.stderr[-500:]}")
    e = json.load(open(f"{tmp}/bigerr/error.json"))
    w = e.get("worker_error", "")
    check(isinstance(w, str) and 60000 <= len(w) <= 65536 and w.startswith('{"message": "xxx'),
          f"worker error of {len(w)} characters kept, expected the first 64 KiB")
    check(e.get("worker_error_truncated") is True and e.get("worker_error_bytes") == 1000013,
          f"error.json does not say the worker's error was cut: {dict((k, v) for k, v in e.items() if k != 'worker_error' and k != 'last_lines')}")
    # An error "file" that never ends: the launcher's memory stays small, and it is said.
    script = "import os, sys; os.symlink('/dev/zero', os.environ['TORCHELASTIC_ERROR_FILE']); sys.exit(3)"
    proc = subprocess.Popen([STRATO, "launch", "--standalone", "--quiet-workers", "--log-dir", f"{tmp}/zeroerr",
                             "/usr/bin/python3", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    check(proc.returncode == 3, f"/dev/zero error file: exit {proc.returncode}")
    check(usage.ru_maxrss < 200 * 1024, f"the launcher grew to {usage.ru_maxrss // 1024} MB reading a /dev/zero error file")
    e = json.load(open(f"{tmp}/zeroerr/error.json"))
    check(e.get("worker_error_truncated") is True and len(e.get("worker_error", "")) <= 65536,
          f"/dev/zero error file: truncated {e.get('worker_error_truncated')}, {len(e.get('worker_error', ''))} characters")


def long_message_full_stderr(tmp):
    """Found by review: a launcher message longer than the room stderr had (a log directory of 4 KB
    in "removed the earlier error.json file(s) ... in DIR") was written with a blocking write that
    waited for a reader: a stderr pipe nobody reads held the launcher forever. A message is cut to
    fit one atomic pipe write (4 KiB) now, and says so."""
    deep = os.path.join(tmp, "./" * ((4040 - len(tmp)) // 2) + "d")
    os.makedirs(f"{deep}/attempt_0", exist_ok=True)
    for f in (f"{deep}/error.json", f"{deep}/attempt_0/error.json"):
        with open(f, "w") as fh:
            fh.write('{"message": "an earlier run"}')
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)  # room for 4 KiB, and nobody reads
    proc = subprocess.Popen([STRATO, "launch", "--standalone", "--quiet-workers", "--stop-timeout", "5",
                             "--log-dir", deep, "/usr/bin/python3", "-c", "import sys; sys.exit(3)"],
                            stdout=subprocess.DEVNULL, stderr=w)
    os.close(w)
    try:
        proc.wait(timeout=30)
        check(proc.returncode == 3, f"a long message on a full stderr: exit {proc.returncode}, expected the worker's 3")
        os.set_blocking(r, False)
        said = os.read(r, 65536).decode(errors="replace")
        check(said.startswith("info: launch: removed 2 error.json") and "bytes cut)" in said and len(said) <= 4096,
              f"the long message: {len(said)} bytes: {said[:100]!r} ... {said[-100:]!r}")
    except subprocess.TimeoutExpired:
        check(False, "the launcher hung writing a message longer than 4 KiB to a stderr pipe with less room")
        proc.kill()
        proc.wait()
    finally:
        os.close(r)


def bad_flags(tmp):
    for flag, value in (("--monitor-interval", "0"), ("--monitor-interval", "nan"), ("--stop-timeout", "-5"),
                        ("--stop-timeout", "nan"), ("--join-timeout", "-1"), ("--master-port", "70000"),
                        ("--master-addr", "")):
        p = launch(flag, value, "--log-dir", f"{tmp}/bad", "true", timeout=30)
        check(p.returncode == 2 and flag in p.stderr, f"{flag} {value!r}: exit {p.returncode}: {p.stderr[-300:]}")
    # Found by review: bad values the launcher checks itself (not the flag parser) exited 1, not as
    # the usage errors they are (2); and a negative --node-rank reached the rendezvous.
    for args, said in ((["--nnodes", "4:1"], "--nnodes"), (["--nnodes", "1:4"], "--rdzv-backend c10d"),
                       (["--max-restarts", "-1"], "--max-restarts"), (["--node-rank", "-3"], "--node-rank"),
                       (["--rdzv-backend", "etcd"], "--rdzv-backend"),
                       (["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:99999"], "--rdzv-endpoint"),
                       (["--rdzv-backend", "c10d", "--node-rank", "-2", "--rdzv-endpoint", "127.0.0.1:1"], "--node-rank"),
                       (["--nnodes", "2", "--master-addr", "127.0.0.1"], "--node-rank"), (["--rdzv-id", ".."], "--rdzv-id"),
                       (["--standalone", "--nnodes", "2"], "--standalone")):
        p = launch(*args, "--log-dir", f"{tmp}/bad", "true", timeout=30)
        check(p.returncode == 2 and said in p.stderr and "launch: launch:" not in p.stderr,
              f"{args}: exit {p.returncode}, expected 2: {p.stderr[-300:]}")
    # Global flags after `launch` are the launcher's, not the start of the workers' command.
    p = launch("-v", "--nproc-per-node", "2", "--log-dir", f"{tmp}/v", "/bin/echo", "hi")
    check(p.returncode == 0 and p.stdout.count("hi") == 2, f"launch -v: exit {p.returncode}: {p.stderr[-300:]}")


def nproc_cpu(tmp):
    """Found by review: --nproc-per-node cpu counted every online CPU (torchrun's os.cpu_count()), so
    a launcher under taskset (or a container's cpuset) started more workers than it had CPUs; it
    counts the CPUs it may use now."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("nproc_cpu: skipped (one CPU)")
        return
    for word in ("cpu", "auto"):
        p = subprocess.run([STRATO, "launch", "--nproc-per-node", word, "--log-dir", f"{tmp}/cpu-{word}",
                            "/usr/bin/python3", "-c", ENV_DUMP], capture_output=True, text=True, timeout=60,
                           preexec_fn=lambda: os.sched_setaffinity(0, {cpus[0]}),
                           # (auto counts GPUs where there are: none here)
                           env=dict(os.environ, STRATO_NVML_LIBRARY=f"{tmp}/no-such-libnvidia-ml.so.1"))
        e = envs(p.stdout)
        check(p.returncode == 0 and len(e) == 1 and e[0]["WORLD_SIZE"] == "1",
              f"--nproc-per-node {word} on 1 CPU of {len(cpus)}: exit {p.returncode}, {len(e)} workers: "
              f"{p.stderr[-300:]}")


def stale_error_on_other_node(tmp):
    """Found by review: on a node-local log directory, a node that does not host the job (static
    --node-rank 1) kept the error.json an earlier run had left, and a run that succeeded still
    showed the earlier failure; one written by another host (a shared directory) is that host's."""
    d = f"{tmp}/node1-logs"
    os.makedirs(f"{d}/attempt_0")
    host = os.uname().nodename
    for path, h in ((f"{d}/error.json", host), (f"{d}/attempt_0/error.json", host)):
        with open(path, "w") as f:
            json.dump({"message": "STALE from an earlier run", "host": h}, f)
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    os.makedirs(f"{tmp}/shared/attempt_0")
    with open(f"{tmp}/shared/attempt_0/error.json", "w") as f:
        json.dump({"message": "another node's", "host": "elsewhere"}, f)
    os.utime(f"{tmp}/shared/attempt_0/error.json", (time.time() - 3600, time.time() - 3600))
    for logs in (d, f"{tmp}/shared"):
        p = launch("--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                   "--nproc-per-node", "1", "--log-dir", logs, "true")
        check(p.returncode == 0, f"node 1 alone: exit {p.returncode}: {p.stderr[-300:]}")
    check(not os.path.exists(f"{d}/error.json") and not os.path.exists(f"{d}/attempt_0/error.json"),
          "node 1 kept its earlier run's error.json")
    check(os.path.exists(f"{tmp}/shared/attempt_0/error.json"), "node 1 removed another host's error.json")
    # Found by review: without --rdzv-id the nodes of one static job each made up their own run id
    # (host and pid): different TORCHELASTIC_RUN_IDs on the nodes of one job.
    port = free_port()
    ids = []
    for n in (0, 1):
        p = launch("--nnodes", "2", "--node-rank", str(n), "--master-addr", "127.0.0.1", "--master-port", str(port),
                   "--log-dir", f"{tmp}/static-id{n}", "/usr/bin/python3", "-c", ENV_DUMP)
        ids += [e["TORCHELASTIC_RUN_ID"] for e in envs(p.stdout)]
    check(len(ids) == 2 and ids[0] == ids[1], f"static nodes' run ids: {ids}")


def shared_log_dir_root_cause(tmp):
    """Found by review: the nodes of a job on a shared log directory each wrote error.json, the last
    one winning. A rank's death makes its peers on the other nodes fail a moment later (a broken
    all-reduce), so error.json named a peer's failure, not the root cause. Here rank 1 (node 1)
    exits 3, and rank 0 (node 0) exits 1 half a second after it: error.json keeps rank 1, and each
    node's own failure is in attempt_0/node_N.error.json."""
    logs, port = f"{tmp}/shared-fail", str(free_port())
    # (rank 1 fails once rank 0 runs, as after the ranks connect: a node that starts after another
    # has finished takes the other's files for an earlier run's)
    script = ("import os, sys, time\n"
              f"up, failed = {tmp + '/rank0-up'!r}, {tmp + '/rank1-failed'!r}\n"
              "if os.environ['RANK'] == '1':\n"
              "    while not os.path.exists(up): time.sleep(0.01)\n"
              "    open(failed, 'w').close(); sys.exit(3)\n"
              "open(up, 'w').close()\n"
              "while not os.path.exists(failed): time.sleep(0.01)\n"
              "time.sleep(0.5); sys.exit(1)\n")
    nodes = [subprocess.Popen([STRATO, "launch", "--nnodes", "2", "--node-rank", str(n), "--master-addr", "127.0.0.1",
                               "--master-port", port, "--log-dir", logs, "--quiet-workers", "/usr/bin/python3", "-c",
                               script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    outs = [p.communicate(timeout=60) for p in nodes]
    check([p.returncode for p in nodes] == [1, 3], f"node exits {[p.returncode for p in nodes]}: {outs}")
    err = json.load(open(f"{logs}/error.json"))
    check(err.get("rank") == 1 and err.get("exit_code") == 3, f"error.json names a later failure: {err}")
    check(json.load(open(f"{logs}/attempt_0/error.json")).get("rank") == 1, "attempt_0/error.json is not the root cause")
    mine = [json.load(open(f"{logs}/attempt_0/node_{n}.error.json")) for n in (0, 1)]
    check([m.get("rank") for m in mine] == [0, 1] and mine[0].get("exit_code") == 1,
          f"each node's own failure: {[(m.get('rank'), m.get('exit_code')) for m in mine]}")
    check("node_0.error.json" in outs[0][1] and "names another node's failure" in outs[0][1],
          f"node 0 does not say where its failure went: {outs[0][1][-400:]}")


def blocked_stderr(tmp):
    """Found by review: the launcher's own messages were blocking writes to stderr, so with a stderr
    pipe nobody reads (`2>&1 | less` paused, a FIFO) it hung in write() at its first line, deaf to
    its workers and to SIGTERM. Its messages now wait for room (or are dropped) instead."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)  # a blocking pipe, as a shell gives it, and full
    proc = subprocess.Popen([STRATO, "launch", "--nproc-per-node", "2", "--max-restarts", "1", "--stop-timeout", "5",
                             "--quiet-workers", "--log-dir", f"{tmp}/stuck", "/usr/bin/python3", "-c",
                             "import sys; sys.exit(3)"], stdout=subprocess.DEVNULL, stderr=w)
    os.close(w)
    try:
        proc.wait(timeout=40)
        check(proc.returncode == 3, f"full stderr: exit {proc.returncode}, expected the worker's 3")
        check(os.path.exists(f"{tmp}/stuck/attempt_1/error.json"), "full stderr: the group did not restart")
    except subprocess.TimeoutExpired:
        check(False, "the launcher hung writing its messages to a full stderr pipe")
        proc.kill()
        proc.wait()
    finally:
        os.close(r)


def second_signal(tmp):
    """A second SIGINT exits at once and takes the workers' own children along."""
    pids = f"{tmp}/children"
    os.makedirs(pids)
    script = (f"trap '' INT TERM; sleep 300 & echo $! > {pids}/$RANK; wait; wait")
    proc = subprocess.Popen([STRATO, "launch", "--nproc-per-node", "2", "--stop-timeout", "60", "--log-dir",
                             f"{tmp}/twice", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    if not wait_for("the workers' children", lambda: all(os.path.exists(f"{pids}/{r}") and open(f"{pids}/{r}").read().strip()
                                                         for r in (0, 1)), proc):
        proc.kill()
        return
    children = [int(open(f"{pids}/{r}").read()) for r in (0, 1)]
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    check(proc.returncode == 130, f"second SIGINT: exit {proc.returncode}")

    def gone(pid):
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split()[2] == "Z"
        except OSError:
            return True
    wait_for("the workers' children to die", lambda: all(gone(c) for c in children), timeout=10)
    for c in children:
        if not gone(c):
            os.kill(c, signal.SIGKILL)


def sigkill_worker(tmp):
    # Rank 1 of the first attempt is killed from outside; the group restarts and finishes.
    # Each worker publishes its pid atomically (written, then renamed): the file appearing is the
    # signal that the worker runs, and it is never read half-written.
    script = ("import os, time; n = os.environ['TORCHELASTIC_RESTART_COUNT'];"
              "p = os.environ['PIDDIR'] + '/' + os.environ['RANK'] + '.' + n;"
              "open(p + '.tmp', 'w').write(str(os.getpid())); os.replace(p + '.tmp', p);"
              "time.sleep(30 if n == '0' else 0.2); print('finished', os.environ['RANK'], n)")
    piddir = f"{tmp}/pids"
    os.makedirs(piddir)
    proc = subprocess.Popen([STRATO, "launch", "--nproc-per-node", "2", "--max-restarts", "1", "--stop-timeout", "5",
                             "--log-dir", f"{tmp}/k", "/usr/bin/python3", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PIDDIR=piddir))
    if wait_for("rank 1 of the first attempt to start", lambda: os.path.exists(f"{piddir}/1.0"), proc):
        try:
            os.kill(int(open(f"{piddir}/1.0").read()), signal.SIGKILL)
        except (OSError, ValueError) as e:
            check(False, f"could not kill the worker: {e}")
    out, err = proc.communicate(timeout=60)
    check(proc.returncode == 0, f"after SIGKILL: exit {proc.returncode}: {err[-800:]}")
    check("finished 0 1" in out and "finished 1 1" in out, out)
    e = json.load(open(f"{tmp}/k/error.json"))
    check(e["rank"] == 1 and e.get("signal") == "SIGKILL", e)


def sigterm_launcher(tmp):
    proc = subprocess.Popen([STRATO, "launch", "--nproc-per-node", "2", "--log-dir", f"{tmp}/t", "sleep", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Not a fixed sleep: a SIGTERM that arrives while the process is still loading its libraries
    # (1-2 s on a loaded machine) meets the default action (exit -15). The launcher installs its
    # handler before it starts any worker, so both ranks' log files existing means the signal is
    # handled. The workers may not have exec'd yet: they must stop as promptly (the agent holds
    # stop signals across fork, or the inherited handler would swallow the worker's SIGTERM).
    wait_for("the launcher to start its workers",
             lambda: all(os.path.exists(f"{tmp}/t/attempt_0/rank_{r}.log") for r in (0, 1)), proc)
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    check(proc.returncode == 128 + signal.SIGTERM, f"SIGTERM: exit {proc.returncode}")
    check(time.time() - t0 < 10, "workers stopped promptly")


def two_nodes(tmp):
    port = free_port()
    script = ("import os, sys, time; r = int(os.environ['RANK']); n = os.environ['TORCHELASTIC_RESTART_COUNT'];"
              + ENV_DUMP.replace("import json, os; ", "import json;") +
              "; time.sleep(0.3); sys.exit(4 if r == 3 and n == '0' else 0)")
    procs = [subprocess.Popen([STRATO, "launch", "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "e2e", "--max-restarts", "1",
                               "--stop-timeout", "5", "--join-timeout", "30", "--node-rank", str(n),
                               "--log-dir", f"{tmp}/node{n}", "/usr/bin/python3", "-c", script],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    outs = [p.communicate(timeout=90) for p in procs]
    for n, (p, (out, err)) in enumerate(zip(procs, outs)):
        check(p.returncode == 0, f"node {n}: exit {p.returncode}: {err[-800:]}")
    final = [e for out, _ in outs for e in envs(out) if e["TORCHELASTIC_RESTART_COUNT"] == "1"]
    check(sorted(int(e["RANK"]) for e in final) == [0, 1, 2, 3], f"ranks of the restarted round: {final}")
    check(all(e["WORLD_SIZE"] == "4" for e in final), final)
    check(len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in final}) == 1, "one master for both nodes")
    check(sorted(e["GROUP_RANK"] for e in final) == ["0", "0", "1", "1"], final)
    check("restarting the group" in outs[0][1], f"node 0 restarted because of node 1: {outs[0][1][-800:]}")


def missing_peer(tmp):
    port = free_port()
    t0 = time.time()
    p = launch("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
               f"127.0.0.1:{port}", "--join-timeout", "2", "--log-dir", f"{tmp}/alone", "true", timeout=60)
    check(p.returncode != 0, "a job with a node missing must fail")
    check("only 1 of at least 2 nodes joined" in p.stderr, p.stderr[-500:])
    check(time.time() - t0 < 20, f"failed within the timeout ({time.time() - t0:.1f} s)")


def python_of_the_environment(tmp):
    """Found by review: a .py command always ran with /usr/bin/python3, so in an activated virtualenv
    (or conda environment) the workers ran without its packages; torchrun runs its own Python. The
    first python3 on PATH runs it now."""
    venv = f"{tmp}/venv/bin"
    os.makedirs(venv)
    with open(f"{venv}/python3", "w") as f:
        f.write("#!/bin/sh\necho \"venv python $*\"\n")
    os.chmod(f"{venv}/python3", 0o755)
    with open(f"{tmp}/train.py", "w") as f:
        f.write("print('hi')\n")
    p = launch("--log-dir", f"{tmp}/venv-logs", f"{tmp}/train.py", "--lr", "1",
               env={"PATH": f"relative/bin:{venv}:" + os.environ.get("PATH", "/usr/bin:/bin")})
    check(p.returncode == 0 and f"venv python -u {tmp}/train.py --lr 1" in p.stdout,
          f"a .py command in a virtualenv: exit {p.returncode}: {p.stdout[-300:]} {p.stderr[-300:]}")


def error_file_after_chdir(tmp):
    """Found by review: TORCHELASTIC_ERROR_FILE was relative with a relative --log-dir (the default,
    runs/launch/<id>), so a worker that changed its directory (Hydra's run directory, os.chdir)
    wrote its error elsewhere and error.json lost it; torchrun's is absolute."""
    os.makedirs(f"{tmp}/job/elsewhere")
    script = ("import os, sys; e = os.environ['TORCHELASTIC_ERROR_FILE']; os.chdir('elsewhere'); "
              "open(e, 'w').write('{\"message\": \"from the worker\"}'); sys.exit(3)")
    p = subprocess.run([STRATO, "launch", "--log-dir", "rel-logs", "/usr/bin/python3", "-c", script],
                       capture_output=True, text=True, timeout=60, cwd=f"{tmp}/job")
    err = json.load(open(f"{tmp}/job/rel-logs/error.json")) if os.path.exists(f"{tmp}/job/rel-logs/error.json") else {}
    check(p.returncode == 3 and err.get("worker_error") == {"message": "from the worker"},
          f"worker error after chdir: exit {p.returncode}, error.json {err}: {p.stderr[-300:]}")


def unanswered_endpoint(tmp):
    """Found by review: the rendezvous client connected blocking, so an endpoint that drops the
    connection request (a firewall, a hung host whose listen queue is full) held the launcher in
    connect() for the kernel's SYN retries, about 2 minutes: past --join-timeout, deaf to Ctrl-C."""
    import socket
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)  # room for one connection, which nobody accepts: later SYNs are dropped
    filler = socket.create_connection(full.getsockname())
    endpoint = "127.0.0.1:%d" % full.getsockname()[1]
    args = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--nproc-per-node", "1"]
    try:
        p = launch(*args, "--join-timeout", "1", "--log-dir", f"{tmp}/unanswered", "true", timeout=60)
        check(p.returncode == 1 and f"cannot reach the rendezvous at {endpoint} within 1 s: no answer" in p.stderr,
              f"unanswered endpoint: exit {p.returncode}: {p.stderr[-300:]}")
    except subprocess.TimeoutExpired:
        check(False, "the launcher hung in connect() past --join-timeout 1")
    proc = subprocess.Popen([STRATO, "launch", *args, "--log-dir", f"{tmp}/unanswered-int", "true"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # (the log directory is made once the stop handlers are in place)
    if wait_for("the launcher to start", lambda: os.path.isdir(f"{tmp}/unanswered-int"), proc):
        time.sleep(0.3)  # (into connect(); the check holds whenever the signal comes)
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
            check(proc.returncode == 130, f"SIGINT while connecting: exit {proc.returncode}, expected 130")
        except subprocess.TimeoutExpired:
            check(False, "SIGINT did not stop a launcher connecting to an endpoint that never answers")
    proc.kill()
    proc.wait()
    filler.close()
    full.close()


def host_name_endpoint(tmp):
    """Found by review: with the endpoint named by this machine's host name, which its /etc/hosts maps
    to loopback (Debian's 127.0.1.1), the rendezvous listened on loopback only and MASTER_ADDR was
    127.0.0.1 on every node: no other node could reach either."""
    import socket
    host = socket.gethostname()
    try:
        if not socket.gethostbyname(host).startswith("127."):
            print("host_name_endpoint: skipped (the host name is not mapped to loopback here)")
            return
    except OSError:
        print("host_name_endpoint: skipped (the host name does not resolve)")
        return
    p = launch("--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{host}:{free_port()}",
               "--nproc-per-node", "2", "--log-dir", f"{tmp}/byname", "/usr/bin/python3", "-c", ENV_DUMP)
    e = envs(p.stdout)
    check(p.returncode == 0 and len(e) == 2 and all(x["MASTER_ADDR"] == host for x in e),
          f"endpoint {host}: exit {p.returncode}, masters {[x['MASTER_ADDR'] for x in e]}: {p.stderr[-300:]}")


def nproc_gpu(tmp):
    """Found by review: --nproc-per-node auto counted CPUs on a GPU node (torchrun's auto is one
    worker per GPU there: 96 workers for 8 GPUs) and torchrun's gpu was refused. With the stand-in
    NVML (argv[2], optional) as 3 GPUs; without any NVML, gpu is a usage error and auto counts CPUs."""
    none = {"STRATO_NVML_LIBRARY": f"{tmp}/no-such-libnvidia-ml.so.1"}
    p = launch("--nproc-per-node", "gpu", "--log-dir", f"{tmp}/gpu0", "true", env=none)
    check(p.returncode == 2 and "--nproc-per-node gpu: no GPU visible here" in p.stderr,
          f"gpu without GPUs: exit {p.returncode}: {p.stderr[-300:]}")
    if len(sys.argv) < 3:
        print("nproc_gpu: the stand-in NVML part skipped (no library given)")
        return
    with open(f"{tmp}/nvml-state", "w") as f:
        f.write("3 0 0")
    fake = {"STRATO_NVML_LIBRARY": os.path.abspath(sys.argv[2]), "FAKE_NVML_STATE": f"{tmp}/nvml-state"}
    for word, visible, want in (("gpu", None, 3), ("auto", None, 3), ("gpu", "2,0", 2), ("auto", "1,5", 1)):
        env = dict(fake, **({"CUDA_VISIBLE_DEVICES": visible} if visible is not None else {}))
        p = launch("--nproc-per-node", word, "--log-dir", f"{tmp}/gpu-{word}", "/usr/bin/python3", "-c", ENV_DUMP,
                   env=env)
        e = envs(p.stdout)
        check(p.returncode == 0 and len(e) == want and all(x["LOCAL_WORLD_SIZE"] == str(want) for x in e),
              f"--nproc-per-node {word} with 3 GPUs, CUDA_VISIBLE_DEVICES={visible}: exit {p.returncode}, "
              f"{len(e)} workers, expected {want}: {p.stderr[-300:]}")
    p = launch("--nproc-per-node", "gpu", "--log-dir", f"{tmp}/gpu-hidden", "true",
               env=dict(fake, CUDA_VISIBLE_DEVICES="-1"))
    check(p.returncode == 2 and "CUDA_VISIBLE_DEVICES='-1' hides the 3 GPU(s)" in p.stderr,
          f"gpu with every GPU hidden: exit {p.returncode}: {p.stderr[-300:]}")


def emit_kubernetes(tmp):
    import yaml
    p = launch("--emit", "kubernetes", "--nnodes", "2:4", "--nproc-per-node", "2", "--max-restarts", "3",
               "--gpus-per-node", "2", "--image", "registry/strato:1", "--job-name", "fmnist",
               "strato", "train", "cfg.toml", "--resume")
    check(p.returncode == 0, p.stderr)
    job = yaml.safe_load(p.stdout)
    check(job["kind"] == "PyTorchJob" and job["metadata"]["name"] == "fmnist", job)
    el = job["spec"]["elasticPolicy"]
    check(el["minReplicas"] == 2 and el["maxReplicas"] == 4 and el["maxRestarts"] == 3 and el["rdzvBackend"] == "c10d", el)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    c = worker["template"]["spec"]["containers"][0]
    check(worker["replicas"] == 4 and c["name"] == "pytorch" and c["image"] == "registry/strato:1", worker)
    check(c["command"][:4] == ["strato", "launch", "--nproc-per-node", "2"] and c["command"][-3:] == ["train", "cfg.toml", "--resume"],
          c["command"])
    check(c["resources"]["limits"]["nvidia.com/gpu"] == 2, c)
    p = launch("--emit", "slurm", "--nnodes", "2", "--job-name", "bad name", "true")
    check(p.returncode != 0 and "one word" in p.stderr, p.stderr)


def emit_usage_errors(tmp):
    """Found by review: a newline in --partition ended the #SBATCH block and ran a command; --rdzv-port
    went unchecked; --stop-timeout 0.4 became 0; --nproc-per-node cpu became this machine's count."""
    for engine, args in (("slurm", ["--partition", "gpu\necho INJECTED"]), ("slurm", ["--time", "1 day"]),
                         ("slurm", ["--job-name", "a\tb"]), ("slurm", ["--rdzv-port", "70000"]),
                         ("slurm", ["--rdzv-port", "0"]), ("kubernetes", ["--image", "me/strato:1\nkind: Pod"]),
                         ("kubernetes", ["--job-name", "x\ny"]), ("slurm", ["--nproc-per-node", "x"]),
                         ("slurm", ["--nproc-per-node", "0"]), ("slurm", ["--gpus-per-node", "-1"]),
                         ("kubernetes", ["--cpus-per-node", "-4"])):
        p = launch("--emit", engine, "--nnodes", "2", *args, "true", timeout=30)
        check(p.returncode == 2 and f"{args[0]}: " in p.stderr and "INJECTED" not in p.stdout,
              f"--emit {engine} {args}: exit {p.returncode}, {p.stderr}")
    p = launch("--emit", "slurm", "--nnodes", "2", "--nproc-per-node", "cpu", "--stop-timeout", "0.4", "--join-timeout",
               "90", "--quiet-workers", "--rdzv-id", "j1", "true", timeout=30)
    check(p.returncode == 0, p.stderr)
    check("--nproc-per-node cpu " in p.stdout and "--rdzv-id 'j1' " in p.stdout, p.stdout)
    check("--stop-timeout 0.4 --join-timeout 90 --quiet-workers --log-dir" in p.stdout, p.stdout)


def fast_output(tmp):
    """Found by review: worker output was read 64 KiB per --monitor-interval (640 KB/s), so a worker
    writing 20 MB was held back for 30 s; read as it comes, it takes a second or two."""
    gen = "head -c 20000000 /dev/zero | tr '\\0' a | fold -w 100; echo"
    for quiet in (True, False):
        t0 = time.time()
        p = launch(*(["--quiet-workers"] if quiet else []), "--log-dir", f"{tmp}/fast{quiet}", "--no-python",
                   "sh", "-c", gen, timeout=120)
        took = time.time() - t0
        check(p.returncode == 0, f"fast output: exit {p.returncode}: {p.stderr[-500:]}")
        size = os.path.getsize(f"{tmp}/fast{quiet}/attempt_0/rank_0.log")
        check(size == 200000 * 101, f"the log has every line: {size} bytes")
        check(quiet or p.stdout.count("\n") == 200000, f"every line echoed: {p.stdout.count(chr(10))}")
        check(took < 10, f"20 MB of worker output (quiet={quiet}) took {took:.1f} s")


def blocked_stdout(tmp):
    """Found by review: a launcher whose stdout nobody reads (a FIFO, a paused `| less`) blocked in
    write(): its workers stalled, SIGTERM went unheard. Now the workers write on (the logs get every
    line), the echo drops what does not fit, says so, and SIGTERM stops the job at once."""
    r, w = os.pipe()  # nobody reads r
    gen = "head -c 10000000 /dev/zero | tr '\\0' a | fold -w 100; echo; sleep 60"
    with open(f"{tmp}/blocked.err", "w") as err:
        proc = subprocess.Popen([STRATO, "launch", "--log-dir", f"{tmp}/blocked", "--stop-timeout", "5", "--no-python",
                                 "sh", "-c", gen], stdout=w, stderr=err)
    os.close(w)
    log = f"{tmp}/blocked/attempt_0/rank_0.log"
    try:
        wait_for("the worker's 10 MB to reach its log",
                 lambda: os.path.exists(log) and os.path.getsize(log) == 100000 * 101, proc, timeout=60)
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        check(proc.returncode == 128 + signal.SIGTERM, f"SIGTERM with a blocked stdout: exit {proc.returncode}")
        check(time.time() - t0 < 5, f"stopped within {time.time() - t0:.1f} s")
        said = open(f"{tmp}/blocked.err").read()
        check("standard output is not keeping up" in said and "were not echoed" in said, said[-800:])
    except subprocess.TimeoutExpired:
        check(False, "the launcher with a blocked stdout ignored SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(r)


def prompt_stop(tmp):
    """Found by review: SIGTERM was acted on only at the next check, up to --monitor-interval late."""
    proc = subprocess.Popen([STRATO, "launch", "--monitor-interval", "20", "--log-dir", f"{tmp}/prompt", "sleep", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for("the launcher to start its worker", lambda: os.path.exists(f"{tmp}/prompt/attempt_0/rank_0.log"), proc)
    time.sleep(0.5)  # into the wait between checks
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    check(proc.returncode == 128 + signal.SIGTERM, f"SIGTERM: exit {proc.returncode}")
    check(time.time() - t0 < 3, f"SIGTERM with --monitor-interval 20 took {time.time() - t0:.1f} s")


def doctor_peers(tmp):
    server = subprocess.Popen([STRATO, "doctor", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        port = int(line.split(":")[1].split()[0])
        dead = free_port()
        p = subprocess.run([STRATO, "doctor", "--json", "--peers", f"127.0.0.1:{port},127.0.0.1:{dead}", "--samples", "5"],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ, MASTER_PORT="29511"))
        checks = {c["name"]: c for c in json.loads(p.stdout)}
        live, gone = checks.get(f"peer 127.0.0.1:{port}"), checks.get(f"peer 127.0.0.1:{dead}")
        check(live and live["level"].lower() == "ok" and "echo" in live["value"] and "5 samples" in live["value"], live)
        check(gone and gone["level"].lower() == "fail" and "unreachable" in gone["value"], gone)
        check(p.returncode == 1, "an unreachable peer fails the doctor")
        check(checks.get("env MASTER_PORT", {}).get("value") == "29511", "the distributed environment is printed")
        check(any(n.startswith("interface lo") for n in checks), "interfaces are listed")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)
    check(server.returncode == 0, f"doctor --listen exit {server.returncode}")
    # Bad addresses are usage errors (exit 2) the parser refuses, and so are flags the listener
    # would silently ignore.
    for args in (["--peers", "127.0.0.1"], ["--peers", "127.0.0.1:0"], ["--peers", "127.0.0.1:65536"],
                 ["--peers", "[::1]:21001"], ["--peers", ""], ["--listen", "abc"], ["--listen", "65536"],
                 ["--listen", ":21005"], ["--listen", "0", "--peers", "127.0.0.1:1"], ["--listen", "0", "--json"]):
        p = subprocess.run([STRATO, "doctor", *args], capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and (f"{args[0]}: " in p.stderr or "excludes --listen" in p.stderr),
              f"doctor {args}: exit {p.returncode}, {p.stderr}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        emit_kubernetes(tmp)
        emit_usage_errors(tmp)
        fast_output(tmp)
        blocked_stdout(tmp)
        prompt_stop(tmp)
        doctor_peers(tmp)
        environment(tmp)
        restarts(tmp)
        hostile_output(tmp)
        huge_worker_error(tmp)
        long_message_full_stderr(tmp)
        bad_flags(tmp)
        nproc_cpu(tmp)
        stale_error_on_other_node(tmp)
        shared_log_dir_root_cause(tmp)
        blocked_stderr(tmp)
        second_signal(tmp)
        sigkill_worker(tmp)
        sigterm_launcher(tmp)
        two_nodes(tmp)
        missing_peer(tmp)
        unanswered_endpoint(tmp)
        error_file_after_chdir(tmp)
        python_of_the_environment(tmp)
        host_name_endpoint(tmp)
        nproc_gpu(tmp)
    finish("launch e2e")


if __name__ == "__main__":
    main()
