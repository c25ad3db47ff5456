"""Shared by the e2e scripts of plan, monitor, autoscale, tune and serve: the binary under test
(argv[1]), the repository, failures collected as checks run, and a tiny trained run."""
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

# Every server in these tests is on loopback: never through an http_proxy from the environment
# (urllib sends even 127.0.0.1 through it, and the tests failed with the proxy's errors). The
# opener serves this script's requests; no_proxy the strato processes it starts (libcurl).
urllib.request.install_opener(urllib.request.build_opener(urllib.request.ProxyHandler({})))
for _name in ("no_proxy", "NO_PROXY"):
    os.environ[_name] = ",".join(filter(None, [os.environ.get(_name), "127.0.0.0/8", "localhost", "::1"]))

STRATO = os.path.abspath(sys.argv[1])
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(cond, what):
    if not cond:
        failures.append(str(what))


def run(*args, expect=0, timeout=300):
    """Runs `strato ARGS`; an unexpected exit status is a failure showing the output's tail."""
    p = subprocess.run([STRATO, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != expect:
        failures.append(f"strato {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                        f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


def wait_thread_gone(pid, name, timeout):
    """Waits until process `pid` has no thread named `name`; False after `timeout` seconds.
    (strato serve frees an unloaded version on a 'repo-unload' thread after its index already
    says UNAVAILABLE, as Triton's unload is asynchronous: memory is counted after it.)"""
    deadline = time.time() + timeout
    while True:
        names = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    names.append(f.read().strip())
            except OSError:  # the thread ended while listed
                pass
        if name not in names:
            return True
        if time.time() > deadline:
            return False
        time.sleep(0.01)


_HANDED_OUT = set()


def free_port():
    """A port nothing listens on, for a process that binds it later. Taken below the kernel's
    ephemeral range (32768-60999), from which the kernel hands ports to every port-0 bind and
    outgoing connection of the tests running beside this one, so none of those can take it in
    between; never the same one twice in a process."""
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(20000, 32768)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port in 20000-32767")


def train_tiny(runs_dir, name, *sets):
    """One epoch of the default CNN on 2,000 images (about 2 s): RUNS_DIR/NAME with a package."""
    extra = [a for s in sets for a in ("--set", s)]
    run("-q", "train", os.path.join(REPO, "configs", "fashion_mnist_cnn.toml"), "--set", "train.epochs=1",
        "--set", "data.limit_train=2000", "--set", "data.limit_test=500", "--set", f"run.dir={runs_dir}",
        "--set", f"run.name={name}", *extra, "--no-report")
    return os.path.join(runs_dir, name)


def finish(what):
    """Prints the failures and exits 1, or prints WHAT: ok."""
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"{what}: ok")


# ---- a real Slurm cluster on this machine (recipe: ../shared/reference/cluster-test-recipes.md) ----

SLURM_CONF = """ClusterName=stratotest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={b}/munge/munge.socket.2
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool/%n
SlurmctldPidFile={b}/slurmctld.pid
SlurmdPidFile={b}/slurmd-%n.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdTimeout=30
"""


def start_cluster(b, env, nodes=1):
    """A real Slurm cluster on this machine, all files under B: munged, slurmctld and NODES slurmd
    (n1, n2, ... on 127.0.0.1, each with its own port, the 2 CPUs split between them), each in the
    foreground of its own process. Returns the processes for stop_cluster(). ENV must carry
    SLURM_CONF=B/slurm.conf."""
    for d in ["munge", "state", "log"] + [f"spool/n{i}" for i in range(1, nodes + 1)]:
        os.makedirs(os.path.join(b, d), exist_ok=True)
    os.chmod(os.path.dirname(b), 0o755)  # munged wants o+x on every directory above its socket
    os.chmod(b, 0o755)
    os.chmod(os.path.join(b, "munge"), 0o755)  # munged wants o+x on its socket directory
    subprocess.run(["mungekey", "-c", "-k", f"{b}/munge/munge.key"], check=True, capture_output=True)
    cpus = max(1, 2 // nodes)
    with open(f"{b}/slurm.conf", "w") as f:
        f.write(SLURM_CONF.format(b=b, ctld_port=free_port(), d_port=free_port()))
        for i in range(1, nodes + 1):
            f.write(f"NodeName=n{i} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} CPUs={cpus} "
                    "RealMemory=1000 State=UNKNOWN\n")
        f.write("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
    procs = []

    def spawn(name, *cmd):
        out = open(f"{b}/log/{name}.stdout", "w")
        procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True))

    spawn("munged", "munged", "-F", f"--key-file={b}/munge/munge.key", f"--socket={b}/munge/munge.socket.2",
          f"--pid-file={b}/munge/munged.pid", f"--log-file={b}/munge/munged.log", f"--seed-file={b}/munge/munged.seed")
    for _ in range(100):
        if os.path.exists(f"{b}/munge/munge.socket.2") or procs[0].poll() is not None:
            break
        time.sleep(0.05)
    if not os.path.exists(f"{b}/munge/munge.socket.2"):
        stop_cluster(procs)
        raise SystemExit("munged did not start:\n" + open(f"{b}/log/munged.stdout").read()[-1500:])
    spawn("slurmctld", "slurmctld", "-D", "-i")
    for i in range(1, nodes + 1):
        spawn(f"slurmd-n{i}", "slurmd", "-D", "-N", f"n{i}")
    deadline = time.time() + 60
    while time.time() < deadline:
        p = subprocess.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], capture_output=True, text=True, env=env,
                           timeout=30)
        if len(set(p.stdout.split())) >= nodes:
            return procs
        time.sleep(0.1)
    stop_cluster(procs)
    raise SystemExit("the test Slurm cluster did not become idle; logs in " + b)


def wait_job(job, env, timeout=300):
    """Waits until squeue no longer lists JOB; False on timeout (the job is then cancelled)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=env)
        if q.returncode == 0 and not q.stdout.strip():
            return True
        time.sleep(1)
    subprocess.run(["scancel", job], env=env)
    return False


def require_slurm():
    missing = [t for t in ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo") if not shutil.which(t)]
    if missing:
        raise SystemExit("needs Slurm and munge (scripts/setup --test installs them): missing " + ", ".join(missing))


def stop_cluster(procs):
    for p in reversed(procs):
        p.send_signal(signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
