#!/usr/bin/python3
"""`strato tune slurm` on a real Slurm cluster: munged, slurmctld and one slurmd started here
(all files in a temporary directory, ports on 127.0.0.1), a study submitted as a 2-task array
with real `strato train` trials. Both array tasks run trials of the one shared study; every trial
runs exactly once; the store uses the rollback journal; the leaderboard is complete."""
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time

from harness import REPO, STRATO, check, finish, free_port, run

STUDY = """[study]
name = "slurm-e2e"
base = "{base}"
trials = 4
threads_per_trial = 1
sampler = "random"
scheduler = "asha"
seed = 5
set = ["data.limit_train=2000", "data.limit_test=500", "train.log_every=1000"]
[scheduler]
grace = 1
max_t = 3
reduction = 3
[params]
"optim.lr" = {{ type = "loguniform", low = 1e-3, high = 3e-2 }}
"""

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
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port={node_port} CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def start_cluster(b, env):
    """munged + slurmctld + slurmd in the foreground of their own processes; returns them."""
    for d in ("munge", "state", "log", "spool/n1"):
        os.makedirs(os.path.join(b, d), exist_ok=True)
    os.chmod(os.path.dirname(b), 0o755)  # munged wants o+x on every directory above its socket
    os.chmod(b, 0o755)
    os.chmod(os.path.join(b, "munge"), 0o755)  # munged wants o+x on its socket directory
    subprocess.run(["mungekey", "-c", "-k", f"{b}/munge/munge.key"], check=True, capture_output=True)
    with open(f"{b}/slurm.conf", "w") as f:
        f.write(SLURM_CONF.format(b=b, ctld_port=free_port(), d_port=free_port(), node_port=free_port()))
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
    spawn("slurmd", "slurmd", "-D", "-N", "n1")
    deadline = time.time() + 60
    while time.time() < deadline:
        p = subprocess.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], capture_output=True, text=True, env=env,
                           timeout=30)
        if "n1" in p.stdout:
            return procs
        time.sleep(0.1)
    stop_cluster(procs)
    raise SystemExit("the test Slurm cluster did not become idle; logs in " + b)


def stop_cluster(procs):
    for p in reversed(procs):
        p.send_signal(signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main():
    missing = [t for t in ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo") if not shutil.which(t)]
    if missing:
        raise SystemExit("needs Slurm and munge (scripts/setup --test installs them): missing " + ", ".join(missing))
    with tempfile.TemporaryDirectory(prefix="strato-slurm-") as tmp:
        b = os.path.join(tmp, "cluster")
        env = dict(os.environ, SLURM_CONF=f"{b}/slurm.conf")
        os.environ["SLURM_CONF"] = env["SLURM_CONF"]  # for `strato tune slurm --submit` (sbatch)
        procs = start_cluster(b, env)
        try:
            study = os.path.join(tmp, "study.toml")
            with open(study, "w") as f:
                f.write(STUDY.format(base=os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")))
            sdir = os.path.join(tmp, "study")
            p = run("tune", "slurm", study, "--dir", sdir, "--tasks", "2", "--time", "00:10:00", "--submit")
            m = re.search(r"submitted: job (\d+)", p.stdout)
            check(m is not None, f"no job id in: {p.stdout}")
            script = open(os.path.join(sdir, "slurm.sbatch")).read()
            check("#SBATCH --array=0-1" in script and "--parallel 1" in script, script)
            job = m.group(1) if m else "0"
            deadline = time.time() + 300
            while time.time() < deadline:
                q = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, env=env)
                if q.returncode == 0 and not q.stdout.strip():
                    break
                time.sleep(1)
            else:
                subprocess.run(["scancel", job], env=env)
                check(False, "the array job did not finish in 300 s")
            logs = {}
            for task in (0, 1):
                path = os.path.join(sdir, "logs", f"slurm-{job}_{task}.out")
                logs[task] = open(path).read() if os.path.exists(path) else ""
            started = {t: re.findall(r"tune: (trial-\d{4}) -> 1 epochs", logs[t]) for t in logs}
            everything = started[0] + started[1]
            check(sorted(everything) == [f"trial-{i:04d}" for i in range(1, 5)],
                  f"each trial started once across the tasks: {started}\n{logs[0][-1500:]}\n{logs[1][-1500:]}")
            check(started[0] and started[1], f"both array tasks ran trials: {started}")
            check("failed" not in logs[0] + logs[1], logs[0][-1500:] + logs[1][-1500:])
            with sqlite3.connect(os.path.join(sdir, "study.db")) as db:
                mode = db.execute("PRAGMA journal_mode").fetchone()[0]
                states = db.execute("SELECT state, count(*) FROM trials GROUP BY state").fetchall()
            check(mode == "delete", f"journal {mode}")
            check(dict(states).get("running", 0) == 0 and dict(states).get("failed", 0) == 0, f"states {states}")
            st = run("tune", "status", study, "--dir", sdir)
            check("4 of 4 trials" in st.stdout, st.stdout)
            check("1 completed" in st.stdout, f"one trial promoted to the end: {st.stdout}")
        finally:
            subprocess.run(["scancel", "--user=root"], env=env, capture_output=True)
            stop_cluster(procs)
    finish("tune slurm e2e")


if __name__ == "__main__":
    main()
