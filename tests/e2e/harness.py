"""Shared by the e2e scripts of plan, monitor, autoscale and tune: the binary under test
(argv[1]), the repository, failures collected as checks run, and a tiny trained run."""
import os
import socket
import subprocess
import sys

STRATO = sys.argv[1]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def run(*args, expect=0, timeout=300):
    """Runs `strato ARGS`; an unexpected exit status is a failure showing the output's tail."""
    p = subprocess.run([STRATO, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != expect:
        failures.append(f"strato {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                        f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
