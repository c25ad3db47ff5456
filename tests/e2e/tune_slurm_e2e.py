#!/usr/bin/python3
"""`strato tune slurm` on a real Slurm cluster: munged, slurmctld and one slurmd started here
(all files in a temporary directory, ports on 127.0.0.1), a study submitted as a 2-task array
with real `strato train` trials. Both array tasks run trials of the one shared study; every trial
runs exactly once; the store uses the rollback journal; the leaderboard is complete."""
import os
import re
import sqlite3
import subprocess
import tempfile

from harness import REPO, check, finish, require_slurm, run, start_cluster, stop_cluster, wait_job

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

def main():
    require_slurm()
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
            check(wait_job(job, env), "the array job did not finish in 300 s")
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
