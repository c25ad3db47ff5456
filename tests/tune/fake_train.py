#!/usr/bin/python3
"""A stand-in for `strato train` with the same command line, files and signal behaviour, so the
tune executor's scheduling, shutdown and sharing can be tested in seconds.

It writes RUN_DIR/RUN_NAME/metrics.jsonl eval lines ({"kind": "eval", "epoch": e, "test_acc": v}),
honours train.epochs and train.stop_after_epochs, locks its run directory as the trainer does
(exit 1 when another process holds it), and on --resume rewrites the lines it already
had (as the real trainer does after restoring a checkpoint) before going on. The first SIGTERM
or SIGINT finishes the epoch, writes an "interrupted" line and exits 130; a second one kills
it at once (as the real trainer exits without its checkpoint).
Environment: FAKE_TRAIN_EPOCH_S (seconds per epoch, default 0.05), FAKE_TRAIN_ALLOC_MB (touch
this much memory at start), FAKE_TRAIN_ODD_LINES (write lines of other shapes before each eval line), FAKE_TRAIN_FAIL_LR (a
trial with this optim.lr exits 1 after its first epoch, or after FAKE_TRAIN_FAIL_EPOCH; or kills itself
with signal FAKE_TRAIN_FAIL_SIGNAL), FAKE_TRAIN_SLOW_RUN (a run of this
run.name takes 5 times as long per epoch), FAKE_TRAIN_PARTIAL (write one eval line at a fractional
epoch with "partial": true and exit 0, as the trainer does when train.max_steps ends an epoch),
FAKE_TRAIN_HANG_RUN (a run of this run.name hangs for ever after its first epoch, as a trainer stuck
in a dead NFS read or a deadlocked data loader: SIGTERM sets the flag nobody reads any more; only a
second signal or SIGKILL ends it)."""
import fcntl
import json
import math
import os
import signal
import sys
import time

sets = {}
args = sys.argv[1:]
for i, a in enumerate(args):
    if a == "--set":
        k, _, v = args[i + 1].partition("=")
        sets[k] = v.strip('"')
run_dir = os.path.join(sets["run.dir"], sets["run.name"])
epochs = int(sets.get("train.epochs", "9"))
stop_after = int(sets.get("train.stop_after_epochs", "0")) or epochs
lr = float(sets.get("optim.lr", "0.01"))
os.makedirs(run_dir, exist_ok=True)
path = os.path.join(run_dir, "metrics.jsonl")

# The trainer's lock on its run directory (fs::lock_dir: an flock on "<parent>/.<name>.lock"):
# a second process on the same directory fails at once, as `strato train` does.
real_dir = os.path.realpath(run_dir)
lock = open(os.path.join(os.path.dirname(real_dir), "." + os.path.basename(real_dir) + ".lock"), "a+")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    print(f"run directory {run_dir} is in use by another strato process", file=sys.stderr)
    sys.exit(1)

stopping = [False]


def on_signal(sig, _frame):
    if stopping[0]:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    stopping[0] = True


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)

hog = bytearray(int(os.environ.get("FAKE_TRAIN_ALLOC_MB", "0")) << 20)
for i in range(0, len(hog), 4096):
    hog[i] = 1

done = []
if os.path.exists(path):
    with open(path) as f:
        done = []
        for l in f:
            try:
                d = json.loads(l)
            except ValueError:
                continue
            if isinstance(d, dict) and d.get("kind") == "eval" and isinstance(d.get("epoch"), int) \
                    and isinstance(d.get("test_acc"), float):
                done.append(d)
with open(path, "w") as f:  # the checkpoint's epochs, written again
    for d in done:
        f.write(json.dumps(d) + "\n")
epoch = len(done)
per_epoch = float(os.environ.get("FAKE_TRAIN_EPOCH_S", "0.05"))
if os.environ.get("FAKE_TRAIN_SLOW_RUN") == sets["run.name"]:
    per_epoch *= 5  # this one trial runs on while the others finish
while epoch < stop_after:
    if stopping[0]:
        time.sleep(0.3)  # saving the checkpoint takes a while
        with open(path, "a") as f:  # what the real trainer's checkpoint-and-exit stands for
            f.write(json.dumps({"kind": "interrupted", "epoch": epoch}) + "\n")
        sys.exit(130)
    time.sleep(per_epoch)
    epoch += 1
    # Best near lr = 1e-2, improving with epochs.
    acc = 0.9 - 0.1 * abs(math.log10(lr) + 2) - 0.3 / epoch
    with open(path, "a") as f:
        if os.environ.get("FAKE_TRAIN_ODD_LINES"):  # what a user's own script might also write
            f.write('not json\n[1, 2]\n{"kind": 3}\n{"kind": "eval", "epoch": "two", "test_acc": 0.5}\n'
                    '{"kind": "eval", "epoch": 1, "test_acc": "high"}\n{"kind": "eval", "test_acc": 0.9}\n'
                    # what Python's json writes for a diverged run, and a number no double holds
                    f'{{"kind": "eval", "epoch": {epoch}, "test_acc": NaN}}\n'
                    f'{{"kind": "eval", "epoch": {epoch}, "test_acc": Infinity}}\n'
                    f'{{"kind": "eval", "epoch": {epoch}, "test_acc": 1e999}}\n')
        if os.environ.get("FAKE_TRAIN_PARTIAL"):  # the trainer's lines under train.max_steps
            f.write(json.dumps({"kind": "eval", "epoch": epoch - 0.5, "test_acc": acc, "partial": True}) + "\n")
            sys.exit(0)
        f.write(json.dumps({"kind": "eval", "epoch": epoch, "test_acc": acc}) + "\n")
    if os.environ.get("FAKE_TRAIN_HANG_RUN") == sets["run.name"]:
        while True:
            time.sleep(3600)
    if os.environ.get("FAKE_TRAIN_FAIL_LR") and float(os.environ["FAKE_TRAIN_FAIL_LR"]) == lr \
            and epoch >= int(os.environ.get("FAKE_TRAIN_FAIL_EPOCH", "1")):
        if os.environ.get("FAKE_TRAIN_FAIL_SIGNAL"):  # killed (the kernel's OOM killer, kill -9)
            os.kill(os.getpid(), int(os.environ["FAKE_TRAIN_FAIL_SIGNAL"]))
        sys.exit(1)  # a crash after a good epoch (out of memory, a node lost)
sys.exit(0)
