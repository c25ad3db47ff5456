#!/usr/bin/python3
"""`strato tune` end to end with real trial processes: a small ASHA study killed with SIGKILL at
random moments and restarted until it finishes — every trial exactly once, no epoch recorded
twice, no trial process left behind; then status, best, export-best (trained again), report; bad
study files rejected before any trial starts; and Ctrl-C: exit 130, the study resumed."""
import json
import os
import random
import signal
import subprocess
import tempfile
import time

from harness import REPO, STRATO, check, finish, run




STUDY = """[study]
name = "e2e"
base = "{base}"
trials = 9
parallel = 2
threads_per_trial = 1
sampler = "tpe"
scheduler = "asha"
seed = 3
set = ["data.limit_train=3000", "data.limit_test=500", "train.log_every=1000"]
[tpe]
startup_trials = 4
[scheduler]
grace = 1
max_t = 3
reduction = 3
variant = "promotion"
[params]
"optim.lr" = {{ type = "loguniform", low = 1e-4, high = 3e-2 }}
"model.width" = {{ type = "int", low = 32, high = 256, q = 32 }}
"optim.name" = {{ type = "choice", values = ["adamw", "sgd"] }}
"""


def trial_processes(study_dir):
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().split()[2]
        except OSError:
            continue
        if study_dir in cmd and "train" in cmd and state != "Z":
            out.append(int(pid))
    return out


def killed_and_resumed(tmp):
    study = os.path.join(tmp, "study.toml")
    with open(study, "w") as f:
        f.write(STUDY.format(base=os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")))
    sdir = os.path.join(tmp, "study")
    rng = random.Random(20261203)
    kills = 0
    for attempt in range(12):
        p = subprocess.Popen([STRATO, "-q", "tune", "run", study, "--dir", sdir], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=rng.uniform(1.0, 3.0) if kills < 3 else 600)
            break
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
            # PR_SET_PDEATHSIG delivers SIGKILL to the trials; a loaded machine may take a while
            # to tear them down.
            end = time.time() + 30
            while trial_processes(sdir) and time.time() < end:
                time.sleep(0.1)
            left = trial_processes(sdir)
            check(not left, f"trial processes outlived the killed executor: {left}")
    check(kills == 3, f"killed {kills} times")
    check(p.returncode == 0, f"final run exit {p.returncode}: {err[-1500:]}")
    st = json.loads(run("tune", "best", study, "--dir", sdir).stdout or "{}")
    check(st.get("best") is not None, "best trial")
    values = st.get("values", {})
    check(isinstance(values.get("optim.lr"), float) and isinstance(values.get("model.width"), int)
          and values.get("optim.name") in ("adamw", "sgd"), f"best trial's values as JSON: {st}")
    # The whole study: every trial exactly once, finished, epochs unique and consecutive.
    out = run("tune", "status", study, "--dir", sdir, "--top", "20").stdout
    check("9 of 9 trials" in out, out)
    names = [line.split()[1] for line in out.splitlines() if line.strip().startswith(tuple("123456789")) and "trial-" in line]
    check(sorted(names) == [f"trial-{i:04d}" for i in range(1, 10)], f"leaderboard trials: {names}")
    for i in range(1, 10):
        path = os.path.join(sdir, "trials", f"trial-{i:04d}", "metrics.jsonl")
        with open(path) as f:
            epochs = [json.loads(l)["epoch"] for l in f if '"kind":"eval"' in l.replace(" ", "")]
        check(epochs == list(range(1, len(epochs) + 1)) and epochs, f"trial {i}: eval epochs {epochs}")
    check("completed" in out and "running" not in out, out)
    return study, sdir


def reports_and_export(tmp, study, sdir):
    best = os.path.join(tmp, "best.toml")
    run("tune", "export-best", study, "--dir", sdir, "-o", best)
    with open(best) as f:
        text = f.read()
    check(text.startswith("# The best trial of study e2e") and "[optim]" in text, text[:300])
    run("-q", "train", best, "--set", "train.epochs=1", "--set", f"run.dir={tmp}/again", "--no-report")
    # Follow-up of the review: -o into the study's own files (a trial's metrics.jsonl is text, which
    # the output check let a TOML replace) is refused, and the file is left as it was.
    metrics = os.path.join(sdir, "trials", "trial-0001", "metrics.jsonl")
    with open(metrics, "rb") as f:
        before = f.read()
    for cmd in ("export-best", "report", "slurm"):
        p = run("tune", cmd, study, "--dir", sdir, "-o", metrics, expect=1)
        check(p.stderr.startswith(f"strato tune: error: --out {metrics}: inside {sdir}/trials, which the study owns")
              and "\nhint: " in p.stderr, f"tune {cmd} -o a trial's metrics.jsonl: {p.stderr!r}")
    with open(metrics, "rb") as f:
        check(f.read() == before, "a trial's metrics.jsonl was changed")
    p = run("tune", "export-best", study, "--dir", sdir, "-o", os.path.join(sdir, "logs", "x.toml"), expect=1)
    check("which the study owns" in p.stderr, p.stderr)
    html = os.path.join(tmp, "tune.html")
    run("tune", "report", study, "--dir", sdir, "-o", html)
    with open(html) as f:
        page = f.read()
    check("ASHA rungs" in page and page.count("<svg") >= 3 and "trial-0001" in page, "report")


def bad_studies(tmp):
    base = os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")
    cases = [
        ('"optim.lr" = { type = "uniform", low = 1, high = 0.1 }', "low 1 must be below high 0.1"),
        ('"optim.lr" = { type = "normal", low = 0, high = 1 }', "unknown distribution 'normal'"),
        ('"optim.name" = { type = "choice", values = [] }', "non-empty values"),
        ('"optim.learning_rate" = { type = "uniform", low = 0.1, high = 1 }', "optim.learning_rate"),
        # Found by review: each passed the check, then failed every trial (or crashed one).
        ('"model.width" = { type = "uniform", low = 8, high = 32 }', 'use type = "int"'),
        ('optim.lr = { type = "uniform", low = 0.1, high = 1 }', 'quote a dotted key, "optim.lr"'),
        ('"model.width" = { type = "grid", values = [64, 64] }', "values holds 64 twice"),
        ('"optim.lr" = { type = "uniform", low = 0.1, high = 1 }\n[scheduler]\nmax_t = 200000',
         "[scheduler] max_t = 200000 (the tuner passes it to every trial)"),
        # Found by review: the trainer then evaluated at fractional epochs ("partial": true), which
        # the tuner skips, and trials ended "completed" with no result.
        ('"train.max_steps" = { type = "int", low = 10, high = 100 }', "train.max_steps = 10"),
        # Found by review: a set entry on a tuned key was silently overridden by the parameter.
        ('"optim.lr" = { type = "uniform", low = 0.1, high = 1 }\n[study]\nset = ["optim.lr=0.5"]',
         '[params] "optim.lr": [study] set also gives it ("optim.lr=0.5")'),
    ]
    for i, (param, needle) in enumerate(cases):
        path = os.path.join(tmp, f"bad{i}.toml")
        param, _, study_lines = param.partition("\n[study]\n")  # (more [study] settings)
        with open(path, "w") as f:
            f.write(f'[study]\nname = "bad{i}"\nbase = "{base}"\n{study_lines}\n[params]\n{param}\n')
        sdir = os.path.join(tmp, f"bad{i}")
        p = run("tune", "run", path, "--dir", sdir, expect=1)
        check(p.stderr.startswith("strato tune: error: ") and needle in p.stderr, f"{param}: {p.stderr!r}")
        check(not os.path.exists(os.path.join(sdir, "trials")), f"{param}: a trial started")


def slurm_usage(tmp):
    """`tune slurm` values that an #SBATCH line cannot carry are usage errors (exit 2) and nothing
    is written; an output that is the study file is refused before the study directory exists."""
    base = os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")
    study = os.path.join(tmp, "slurm_usage.toml")
    with open(study, "w") as f:
        f.write(f'[study]\nname = "usage"\nbase = "{base}"\n[params]\n'
                '"optim.lr" = { type = "uniform", low = 0.1, high = 1 }\n')
    sdir = os.path.join(tmp, "slurm_usage")
    for flags, needle in [(["--partition", "debug\ntouch /tmp/x"], "the control character 0x0a"),
                          (["--time", "bogus"], "expected a Slurm time limit"),
                          (["--mem", "lots"], "expected a Slurm memory size"),
                          (["--sbatch", "not-an-option"], "starting with '-'"),
                          (["--sbatch=--gres=gpu:1\n#x"], "the control character 0x0a")]:
        p = run("tune", "slurm", study, "--dir", sdir, *flags, expect=2)
        check(needle in p.stderr, f"{flags}: {p.stderr!r}")
        check(not os.path.exists(sdir), f"{flags}: the study directory was created")
    p = run("tune", "slurm", study, "--dir", sdir, "-o", study, expect=1)
    check("the study file" in p.stderr, p.stderr)
    check(not os.path.exists(sdir), "-o STUDY.toml: the study directory was created before the refusal")
    p = run("tune", "slurm", study, "--dir", sdir, "--partition", "debug", "--time", "1-00:00", "--mem", "8G",
            "--sbatch=--gres=gpu:1")
    with open(os.path.join(sdir, "slurm.sbatch")) as f:
        script = f.read()
    for line in ("#SBATCH --partition=debug\n", "#SBATCH --time=1-00:00\n", "#SBATCH --mem=8G\n",
                 "#SBATCH --gres=gpu:1\n"):
        check(line in script, f"{line!r} not in {script}")
    # Odd study file names. Blanks and quotes are quoted (bash reads the script as written); found
    # by review: a newline ended the script's "# Follow it:" comment and ran the rest as a command.
    odd = os.path.join(tmp, "it's my study.toml")
    with open(study) as f, open(odd, "w") as g:
        g.write(f.read())
    odd_dir = os.path.join(tmp, "slurm_odd")
    run("tune", "slurm", odd, "--dir", odd_dir)
    p = subprocess.run(["bash", "-n", os.path.join(odd_dir, "slurm.sbatch")], capture_output=True, text=True)
    check(p.returncode == 0, f"bash -n: {p.stderr}")
    with open(os.path.join(odd_dir, "slurm.sbatch")) as f:
        check("tune run '" + odd.replace("'", "'\\''") + "' --dir" in f.read(), "the study path is not quoted")
    newline = os.path.join(tmp, "x\ntouch PWNED\n.toml")
    with open(study) as f, open(newline, "w") as g:
        g.write(f.read())
    nl_dir = os.path.join(tmp, "slurm_newline")
    p = run("tune", "slurm", newline, "--dir", nl_dir, expect=1)
    check("holds a control character" in p.stderr and "\\x0atouch PWNED" in p.stderr, p.stderr)
    check(not os.path.exists(os.path.join(nl_dir, "slurm.sbatch")), "a script was written for a path with a newline")


def edited_base_refused(tmp):
    """Found by review: a study resumed after its base train config was edited mixed trials of two
    setups. The study directory records the base config's contents (here through `tune slurm`,
    which sets the study up without running a trial); status, run and export-best then refuse an
    edited base, naming the line, until it is restored."""
    base = os.path.join(tmp, "identity_base.toml")
    with open(os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")) as f:
        original = f.read()
    with open(base, "w") as f:
        f.write(original)
    study = os.path.join(tmp, "identity.toml")
    with open(study, "w") as f:
        f.write(f'[study]\nname = "identity"\nbase = "{base}"\n[params]\n'
                '"optim.lr" = { type = "uniform", low = 0.1, high = 1 }\n')
    sdir = os.path.join(tmp, "identity")
    run("tune", "slurm", study, "--dir", sdir)
    run("tune", "status", study, "--dir", sdir)
    with open(base, "w") as f:
        f.write(original.replace("width = 256", "width = 512"))
    for cmd in (["status"], ["run"], ["export-best", "-o", os.path.join(tmp, "identity_best.toml")]):
        p = run("tune", *cmd, study, "--dir", sdir, expect=1)
        check(p.stderr.startswith("strato tune: error: ") and "other contents of the base train config" in p.stderr
              and "was 'width = 256', now 'width = 512'" in p.stderr and "\nhint: " in p.stderr,
              f"tune {cmd[0]} after the base changed: {p.stderr!r}")
    check(not os.path.exists(os.path.join(sdir, "trials")), "a trial started on the edited base config")
    with open(base, "w") as f:
        f.write(original)
    run("tune", "status", study, "--dir", sdir)


def every_trial_failed(tmp):
    """Found by review: a study whose every trial failed exited 1 with no error line at all."""
    base = os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")
    study = os.path.join(tmp, "diverge.toml")
    with open(study, "w") as f:  # SGD at these rates diverges in its first epoch
        f.write(f'[study]\nname = "diverge"\nbase = "{base}"\ntrials = 2\nparallel = 2\nscheduler = "fifo"\n'
                'set = ["data.limit_train=500", "data.limit_test=100", "optim.name=\\"sgd\\""]\n'
                '[scheduler]\nmax_t = 1\n[params]\n"optim.lr" = { type = "loguniform", low = 500, high = 1000 }\n')
    sdir = os.path.join(tmp, "diverge")
    p = run("-q", "tune", "run", study, "--dir", sdir, expect=1)
    check("strato tune: error: every trial of study diverge failed (2 of 2)" in p.stderr and sdir + "/logs/" in p.stderr,
          f"every trial failed: {p.stderr!r}")


def ctrl_c_keeps_the_study(tmp):
    """Ctrl-C (SIGINT) on `tune run` once its trials train: exit 130 with one error line, the
    trials stopped at a checkpoint and left for the next run ("interrupted", no process left),
    and the next run finishes the study, each epoch of each trial trained once."""
    base = os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")
    study = os.path.join(tmp, "ctrl_c.toml")
    with open(study, "w") as f:
        f.write(f'[study]\nname = "ctrl_c"\nbase = "{base}"\ntrials = 2\nparallel = 2\nsampler = "random"\n'
                'scheduler = "fifo"\nset = ["data.limit_train=2000", "data.limit_test=300", "train.log_every=1000"]\n'
                '[scheduler]\nmax_t = 4\n[params]\n"optim.lr" = { type = "loguniform", low = 1e-4, high = 3e-2 }\n')
    sdir = os.path.join(tmp, "ctrl_c")
    p = subprocess.Popen([STRATO, "-q", "tune", "run", study, "--dir", sdir], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)

    def evaluated():
        for i in (1, 2):
            try:
                with open(os.path.join(sdir, "trials", f"trial-{i:04d}", "metrics.jsonl")) as f:
                    if '"eval"' in f.read():
                        return True
            except OSError:
                pass
        return False

    end = time.time() + 120  # (an epoch done: the trainers' handlers are in place)
    while not evaluated() and p.poll() is None and time.time() < end:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 130, f"tune run after Ctrl-C: exit {p.returncode}: {err[-1500:]}")
    check(err.startswith("strato tune: error: interrupted"), f"tune run after Ctrl-C: {err!r}")
    end = time.time() + 30
    while trial_processes(sdir) and time.time() < end:
        time.sleep(0.1)
    check(not trial_processes(sdir), "trial processes outlived the interrupted study")
    st = run("tune", "status", study, "--dir", sdir).stdout
    check("interrupted" in st and " running" not in st and "failed" not in st, st)
    p = run("-q", "tune", "run", study, "--dir", sdir)
    st = run("tune", "status", study, "--dir", sdir).stdout
    check("2 of 2 trials" in st and "2 completed" in st, st)
    for i in (1, 2):
        with open(os.path.join(sdir, "trials", f"trial-{i:04d}", "metrics.jsonl")) as f:
            epochs = [json.loads(l)["epoch"] for l in f if '"kind":"eval"' in l.replace(" ", "")]
        check(epochs == [1, 2, 3, 4], f"trial {i} after Ctrl-C and a resume: eval epochs {epochs}")


def missing_study(tmp):
    """Found by review: report and export-best on a study that has not run blamed the default
    output ("--out DIR/report.html: the directory DIR does not exist", an --out never given);
    status said "states:" and nothing."""
    base = os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")
    study = os.path.join(tmp, "missing.toml")
    with open(study, "w") as f:
        f.write(f'[study]\nname = "missing"\nbase = "{base}"\n[params]\n'
                '"optim.lr" = { type = "uniform", low = 0.1, high = 1 }\n')
    sdir = os.path.join(tmp, "missing")
    for cmd in ("status", "best", "report", "export-best"):
        p = run("tune", cmd, study, "--dir", sdir, expect=1)
        check(p.stderr == f"strato tune: error: {sdir} has no study.db (has the study run?)\n",
              f"tune {cmd} on a study that has not run: {p.stderr!r}")
    run("tune", "slurm", study, "--dir", sdir)  # sets the study up, runs no trial
    p = run("tune", "status", study, "--dir", sdir)
    check("states: none yet\n" in p.stdout, p.stdout)


def foreign_database(tmp):
    """Found by review: `tune run --dir` on a directory holding another program's study.db (an
    Optuna study's, which has a `trials` table too) added strato's tables and columns to it, then
    failed on "no such column: id". Every command refuses it now, naming it, and leaves it as it
    was; no trial starts."""
    import sqlite3
    base = os.path.join(REPO, "configs", "fashion_mnist_mlp.toml")
    study = os.path.join(tmp, "foreign.toml")
    with open(study, "w") as f:
        f.write(f'[study]\nname = "foreign"\nbase = "{base}"\n[params]\n'
                '"optim.lr" = { type = "loguniform", low = 1e-4, high = 1e-1 }\n')
    sdir = os.path.join(tmp, "foreign")
    os.makedirs(sdir)
    db = os.path.join(sdir, "study.db")
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE studies(study_id INTEGER PRIMARY KEY, study_name TEXT);"
                      "CREATE TABLE trials(trial_id INTEGER PRIMARY KEY, number INTEGER, study_id INTEGER, state TEXT);"
                      "INSERT INTO studies VALUES(1, 'mine'); INSERT INTO trials VALUES(1, 0, 1, 'COMPLETE');")
    con.close()
    with open(db, "rb") as f:
        before = f.read()
    for cmd in (["run"], ["status"], ["best"], ["export-best", "-o", os.path.join(tmp, "foreign_best.toml")]):
        p = run("tune", *cmd, study, "--dir", sdir, expect=1)
        check(p.stderr.startswith(f"strato tune: error: {db} is not a strato study store: it holds table(s) studies")
              and "\nhint: " in p.stderr, f"tune {cmd[0]} on an Optuna database: {p.stderr!r}")
    with open(db, "rb") as f:
        check(f.read() == before, "the other program's study.db was changed")
    check(not os.path.exists(os.path.join(sdir, "trials")), "a trial directory was made beside a foreign study.db")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        study, sdir = killed_and_resumed(tmp)
        reports_and_export(tmp, study, sdir)
        bad_studies(tmp)
        slurm_usage(tmp)
        edited_base_refused(tmp)
        every_trial_failed(tmp)
        ctrl_c_keeps_the_study(tmp)
        missing_study(tmp)
        foreign_database(tmp)
    finish("tune e2e")


if __name__ == "__main__":
    main()
