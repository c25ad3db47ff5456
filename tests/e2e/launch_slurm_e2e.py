#!/usr/bin/python3
"""`strato launch --emit slurm` run for real: a 2-node Slurm cluster on this machine (munged,
slurmctld, slurmd n1 and n2 on 127.0.0.1), the emitted sbatch script submitted as is, one
`strato launch` per node through srun meeting at the rendezvous on the first node, and
`strato train` data-parallel over the two "nodes": the job ends, rank 0 wrote the run with a
model package, and both nodes' workers were ranks of one world of 2; launcher flags given to
--emit (an exact --stop-timeout, --monitor-interval) reach every node's launcher."""
import os
import re
import subprocess
import tempfile

from harness import REPO, STRATO, check, finish, free_port, require_slurm, start_cluster, stop_cluster, wait_job


def main():
    require_slurm()
    with tempfile.TemporaryDirectory(prefix="strato-slurm-") as tmp:
        b = os.path.join(tmp, "cluster")
        env = dict(os.environ, SLURM_CONF=f"{b}/slurm.conf", STRATO_RDZV_PORT=str(free_port()),
                   STRATO_LAUNCH_LOGS=f"{tmp}/launch")
        procs = start_cluster(b, env, nodes=2)
        try:
            script = os.path.join(tmp, "job.sbatch")
            p = subprocess.run([STRATO, "launch", "--emit", "slurm", "--nnodes", "2", "--nproc-per-node", "1",
                                "--max-restarts", "1", "--stop-timeout", "2.5", "--monitor-interval", "0.2",
                                "--job-name", "ddp-e2e", "-o", script,
                                STRATO, "-q", "train", os.path.join(REPO, "configs", "fashion_mnist_mlp.toml"),
                                "--set", "train.epochs=1", "--set", "data.limit_train=2048", "--set",
                                "data.limit_test=500", "--set", "run.threads=1", "--set", f"run.dir={tmp}/runs",
                                "--set", "run.name=ddp", "--no-report", "--resume"],
                               capture_output=True, text=True, env=env)
            check(p.returncode == 0, f"emit: {p.stderr}")
            text = open(script).read()
            check("#SBATCH --nodes=2" in text and "srun" in text and "--rdzv-backend c10d" in text, text)
            # Found by review: --stop-timeout 2.5 was written as 2 (0.4 as 0: SIGKILL at once) and
            # --monitor-interval was dropped.
            check("--stop-timeout 2.5 --monitor-interval 0.2 --log-dir" in text, text)
            sub = subprocess.run(["sbatch", "--parsable", "-D", tmp, script], capture_output=True, text=True, env=env)
            check(sub.returncode == 0, f"sbatch: {sub.stderr}")
            job = sub.stdout.strip().split(";")[0]
            check(wait_job(job, env, 300), "the job did not finish in 300 s")
            out_path = os.path.join(tmp, f"ddp-e2e-{job}.out")
            out = open(out_path).read() if os.path.exists(out_path) else ""
            check(os.path.exists(f"{tmp}/runs/ddp/model/weights.pt"), f"rank 0 wrote the package:\n{out[-2000:]}")
            ranks = sorted(set(re.findall(r"ranks (\d)\.\.\d of 2 on node (\d) of 2", out)))
            check(ranks == [("0", "0"), ("1", "1")], f"one world of 2 over 2 nodes: {ranks}\n{out[-2000:]}")
            logs = os.path.join(tmp, "launch", job)
            check(os.path.isdir(logs), f"per-node launch logs in {logs}")
        finally:
            subprocess.run(["scancel", "--user=root"], env=env, capture_output=True)
            stop_cluster(procs)
    finish("launch slurm e2e")


if __name__ == "__main__":
    main()
