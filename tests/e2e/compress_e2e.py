"""`strato compress` end to end on real Fashion-MNIST data: a tiny CNN is trained, quantized to
INT8 (then evaluated, served over HTTP and compared with the float model), pruned (global
magnitude and structured channels, each fine-tuned through the trainer), a smaller student is
distilled from it, and `strato compress report` compares them all. Bad inputs are refused with
clear messages.

    compress_e2e.py STRATO
"""
import json
import os
import time
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import urllib.request

from harness import STRATO, check, finish, run, train_tiny

LIMITS = ["--set", "data.limit_train=2000", "--set", "data.limit_test=500"]


def served_logits(pkg, images):
    """The logits `strato serve --model m=PKG` returns for IMAGES (lists of 784 pixels in [0, 1])."""
    p = subprocess.Popen([STRATO, "serve", "--http-port", "0", "--metrics-port", "0", "--model", f"m={pkg}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        m = re.search(r"ready http://127\.0\.0\.1:(\d+)", line)
        if not m:
            check(False, f"strato serve {pkg} did not start: {line!r}")
            return None
        def infer(batch):
            body = {"inputs": [{"name": "input", "shape": [len(batch), 1, 28, 28], "datatype": "FP32",
                                "data": [v for img in batch for v in img]}]}
            req = urllib.request.Request(f"http://127.0.0.1:{m.group(1)}/v2/models/m/infer",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            try:
                out = json.load(urllib.request.urlopen(req, timeout=60))["outputs"][0]
            except urllib.error.HTTPError as e:
                check(False, f"{pkg}: a batch of {len(batch)} answered {e.code} {e.read()[:200]!r}")
                return None
            check(out["name"] == "logits" and out["shape"] == [len(batch), 10], out.get("shape"))
            return [out["data"][i * 10:(i + 1) * 10] for i in range(len(batch))]
        # Found by review: an INT8 package's first request of one image answered 500 ("could not
        # execute a primitive") until another batch size had run on the serving thread.
        first = infer(images[:1])
        rows = infer(images)
        if first and rows:
            span = max(abs(x) for x in rows[0])
            check(max(abs(x - y) for x, y in zip(first[0], rows[0])) <= 0.05 * span,
                  f"{pkg}: one image alone {first[0]} vs in a batch {rows[0]}")
        return rows
    finally:
        p.terminate()
        p.wait(timeout=30)


def interrupted(args, ready, what):
    """Runs `strato ARGS`, sends SIGINT as soon as a stderr line contains READY (the command is
    then mid-work: its stop handlers are installed); returns its exit status, the stderr lines
    after READY and the seconds from the signal to the exit. Killed after 300 s in any case."""
    p = subprocess.Popen([STRATO, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(300, p.kill)
    killer.start()
    try:
        for line in p.stderr:
            if ready in line:
                break
        else:
            p.wait()
            check(False, f"{what}: exit {p.returncode} before any '{ready}' line")
            return p.returncode, [], 0
        t0 = time.time()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate()
        return p.returncode, err.splitlines(), time.time() - t0
    finally:
        killer.cancel()
        if p.poll() is None:
            p.kill()
            p.wait()


def snapshot(*dirs):
    """Every file under DIRS (links left out) with its bytes: temp and probe files show up too."""
    out = {}
    for d in dirs:
        for root, _, files in os.walk(d):
            for f in files:
                if os.path.islink(os.path.join(root, f)):
                    continue
                with open(os.path.join(root, f), "rb") as fh:
                    out[os.path.join(root, f)] = fh.read()
    return out


def test_images(n):
    import gzip
    with gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "rb") as f:
        data = f.read()
    return [[b / 255.0 for b in data[16 + i * 784:16 + (i + 1) * 784]] for i in range(n)]


def png_gray(pixels, width, height):
    """A grayscale 8-bit PNG of `pixels` (bytes, row by row)."""
    import struct
    import zlib

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = b"".join(b"\0" + pixels[y * width:(y + 1) * width] for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def fashion_image_folder(root, per_class):
    """Fashion-MNIST test images as an image folder: train/ and test/, a folder per class named as
    Fashion-MNIST names it ("T-shirt/top" as T-shirt_top), so its classes are sorted otherwise."""
    import gzip
    names = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
    with gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "rb") as f:
        images = f.read()[16:]
    with gzip.open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", "rb") as f:
        labels = f.read()[8:]
    count = {}
    for i, y in enumerate(labels):
        k = count.get(y, 0)
        if k >= 2 * per_class:
            continue
        count[y] = k + 1
        d = os.path.join(root, "train" if k < per_class else "test", names[y])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i}.png"), "wb") as out:
            out.write(png_gray(images[i * 784:(i + 1) * 784], 28, 28))
        if len(count) == 10 and all(v >= 2 * per_class for v in count.values()):
            break


def main():
    with tempfile.TemporaryDirectory() as tmp:
        base = train_tiny(tmp, "cnn")
        fp32 = os.path.join(base, "model")
        int8 = os.path.join(tmp, "cnn-int8")

        # ---- quantize ----
        p = run("compress", "quantize", "--model", fp32, "--output", int8, "--calibration-batches", "8", "--json",
                *LIMITS)
        q = json.loads(p.stdout) if p.returncode == 0 else {}
        check(q.get("engine") in ("onednn", "fbgemm", "x86", "qnnpack"), q)
        check(q.get("calibration_samples") == 512, q)
        check(abs(q.get("int8_accuracy", 0) - q.get("float_accuracy", 1)) <= 0.02,
              f"int8 accuracy {q.get('int8_accuracy')} vs float {q.get('float_accuracy')}")
        check(q.get("float_weights_bytes", 0) > 3 * q.get("int8_weights_bytes", 1 << 40), q)
        man = json.load(open(os.path.join(int8, "strato-model.json")))
        check(man.get("precision") == "int8" and man["quantization"]["observer"] == "histogram", man.get("quantization"))

        # strato eval loads the INT8 package like any other and agrees with the quantizer.
        p = run("eval", "--model", int8, "--json", *LIMITS)
        if p.returncode == 0:
            e = json.loads(p.stdout)
            check(abs(e["accuracy"] - q.get("int8_accuracy", -1)) < 1e-9, f"eval {e['accuracy']} vs {q}")

        # strato serve answers with INT8 logits close to the float model's.
        imgs = test_images(8)
        lf, lq = served_logits(fp32, imgs), served_logits(int8, imgs)
        if lf and lq:
            agree = sum(max(range(10), key=a.__getitem__) == max(range(10), key=b.__getitem__) for a, b in zip(lf, lq))
            check(agree >= 7, f"float and INT8 agree on {agree}/8 served predictions")
            worst = max(abs(x - y) for a, b in zip(lf, lq) for x, y in zip(a, b))
            span = max(abs(x) for a in lf for x in a)
            check(worst < 0.25 * span, f"INT8 logits differ by {worst} (float logits up to {span})")

        # Bad inputs: clear messages, nothing written.
        p = run("compress", "quantize", "--model", int8, "--output", f"{tmp}/twice", expect=1)
        check("already quantized" in p.stderr, p.stderr)
        check(not os.path.exists(f"{tmp}/twice"), "nothing written for a refused quantization")
        # Both wrong (an INT8 source, an existing package at --output): the source is named first.
        shutil.copytree(fp32, f"{tmp}/float-copy")
        p = run("compress", "quantize", "--model", int8, "--output", f"{tmp}/float-copy", expect=1)
        check("already quantized" in p.stderr, p.stderr)
        p = run("compress", "quantize", "--model", fp32, "--output", f"{tmp}/nodata", "--dataset", "image-folder",
                "--data", f"{tmp}/no-such-folder", expect=1)
        check("calibration data" in p.stderr and "no-such-folder" in p.stderr, p.stderr)
        # Found by review: an image folder of Fashion-MNIST's classes (sorted otherwise than the
        # model orders them) was refused by quantize, "the classes must be the model's, in its order",
        # which no folder can be; eval scores it by name, and so does the calibration now.
        fashion_image_folder(f"{tmp}/photos", 8)
        p = run("compress", "quantize", "--model", fp32, "--output", f"{tmp}/from-photos", "--dataset", "image-folder",
                "--data", f"{tmp}/photos", "--calibration-batches", "1", "--json")
        q = json.loads(p.stdout) if p.returncode == 0 else {}
        e = run("eval", "--model", fp32, "--dataset", "image-folder", "--data", f"{tmp}/photos", "--json")
        ev = json.loads(e.stdout) if e.returncode == 0 else {}
        check(q.get("float_accuracy") is not None and abs(q["float_accuracy"] - ev.get("accuracy", -1)) <= 1 / 80
              and ev.get("samples") == 80, f"quantize on an image folder: {q} {ev} {p.stderr[-600:]}")
        p = run("compress", "quantize", "--model", f"{tmp}/missing", expect=1)
        check("missing" in p.stderr, p.stderr)
        p = run("export", "--model", int8, expect=1)
        check("INT8" in p.stderr, p.stderr)
        p = run("eval", "--model", int8, "--bf16", expect=1)
        check("INT8 package" in p.stderr and "drop --bf16" in p.stderr, p.stderr)
        # Outputs that would destroy data (found by review): the run holding the source, a folder
        # that is not a package, a place inside the source package. Refused before any work.
        for out, needle in ((base, "is inside it"), (fp32, "that directory itself"),
                            (os.path.join(fp32, "int8"), "is inside the source package")):
            p = run("compress", "quantize", "--model", fp32, "--output", out, expect=1)
            check(needle in p.stderr, f"--output {out}: {p.stderr}")
        check(os.path.exists(os.path.join(base, "metrics.jsonl")) and os.path.exists(os.path.join(fp32, "weights.pt")),
              "the source run survived the refused outputs")
        mine = os.path.join(tmp, "mine")
        os.makedirs(mine)
        open(os.path.join(mine, "notes.txt"), "w").write("keep me")
        p = run("compress", "quantize", "--model", fp32, "--output", mine, expect=1)
        check("is not a model package" in p.stderr and os.path.exists(os.path.join(mine, "notes.txt")), p.stderr)
        p = run("compress", "quantize", "--model", fp32, "--output", int8, expect=1)
        check("pass --overwrite" in p.stderr, p.stderr)
        # Found by review: an INT8 model that lost most of its accuracy (--percentile 51 clips nearly
        # every activation) was reported in a line of numbers only.
        p = run("compress", "quantize", "--model", fp32, "--output", os.path.join(tmp, "clipped"), "--observer", "percentile",
                "--percentile", "51", *LIMITS)
        check("points less accurate than the float one" in p.stderr and "--percentile closer to 100" in p.stderr, p.stderr)
        p = run("compress", "quantize", "--model", fp32, "--output", os.path.join(tmp, "fine"), *LIMITS)
        check("less accurate" not in p.stderr, f"a warning on a good INT8 model: {p.stderr}")
        # Found by review: a file above --output, or a dangling link at it, failed only after
        # calibration and evaluation; now before any work (no "calibrat" progress in the output).
        os.symlink(os.path.join(tmp, "nowhere"), os.path.join(tmp, "dangling"))
        for out, needle in ((os.path.join(mine, "notes.txt", "int8"), "notes.txt is a file, not a directory"),
                            (os.path.join(tmp, "dangling"), "which does not exist")):
            t0 = time.time()
            p = run("compress", "quantize", "--model", fp32, "--output", out, expect=1)
            check(needle in p.stderr, f"--output {out}: {p.stderr}")
            check(time.time() - t0 < 20, f"--output {out} was refused only after {time.time() - t0:.0f}s")
        # Found by review: Ctrl-C killed quantize on the spot (SIGINT's default action: no message,
        # exit -2). It stops at the next calibration batch, or evaluation batch, exits 130 with one
        # line, and the package already at --output (replaced only on success) stays as it was.
        # 900 batches of 64 images, twice (histogram): the calibration lasts far longer than the signal.
        before = snapshot(tmp)
        code, lines, secs = interrupted(["compress", "quantize", "--model", fp32, "--output", int8, "--overwrite",
                                         "--calibration-batches", "900", "--batch-size", "64"],
                                        "calibrating on", "quantize (calibration)")
        check(code == 130, f"quantize interrupted during the calibration: exit {code}: {lines}")
        check(len(lines) == 1 and lines[0].startswith(
            "strato compress quantize: error: interrupted by signal 2 during the calibration (pass 1 of 2"),
              f"quantize interrupted during the calibration: {lines}")
        check(secs < 60, f"quantize took {secs:.0f}s to stop after SIGINT")
        check(snapshot(tmp) == before, "an interrupted quantize changed files: "
              f"{sorted(set(snapshot(tmp)) ^ set(before))}")
        # ... and during the evaluation (the whole test split, float then INT8).
        code, lines, secs = interrupted(["compress", "quantize", "--model", fp32, "--output", int8, "--overwrite",
                                         "--calibration-batches", "1"], "calibrated on", "quantize (evaluation)")
        check(code == 130 and len(lines) == 1 and "interrupted by signal 2 while evaluating the" in lines[0]
              and "no package written" in lines[0], f"quantize interrupted during the evaluation: exit {code}: {lines}")
        check(secs < 60, f"quantize took {secs:.0f}s to stop after SIGINT")
        check(snapshot(tmp) == before, "an interrupted quantize changed files: "
              f"{sorted(set(snapshot(tmp)) ^ set(before))}")
        # The same for strato export: a 37M-parameter mlp (150 MB of weights) takes seconds to build,
        # check and write; the signal comes once the package is loaded. The file at --output (an
        # earlier export) and the package stay as they were, and no temp file is left.
        big = os.path.join(train_tiny(tmp, "big", "model.arch=mlp", "model.depth=3", "model.channels=[4096,4096,4096]",
                                      "data.limit_train=256", "data.limit_test=100"), "model")
        onnx_out = os.path.join(tmp, "exported", "big.onnx")
        os.makedirs(os.path.dirname(onnx_out))
        run("export", "--model", fp32, "--output", onnx_out)
        before = snapshot(big, os.path.dirname(onnx_out))
        code, lines, secs = interrupted(["-v", "export", "--model", big, "--output", onnx_out], "export: loaded",
                                        "export")
        errors = [l for l in lines if not l.startswith("debug:")]
        check(code == 130 and len(errors) == 1 and errors[0].startswith("strato export: error: interrupted by signal 2")
              and "nothing written" in errors[0], f"export interrupted: exit {code}: {lines}")
        check(secs < 60, f"export took {secs:.0f}s to stop after SIGINT")
        check(snapshot(big, os.path.dirname(onnx_out)) == before, "an interrupted export changed files")
        shutil.rmtree(os.path.dirname(big))

        # Found by review: a trailing slash (a shell's completion) was "not a directory of its
        # own"; values out of range were found after the data was opened (exit 1).
        p = run("compress", "quantize", "--model", fp32, "--output", int8 + "/", expect=1)
        check("pass --overwrite" in p.stderr, f"--output with a slash: {p.stderr}")
        for args in (["compress", "quantize", "--model", fp32, "--percentile", "150"],
                     ["compress", "distill", "--teacher", fp32, "--config", "c.toml", "--alpha", "1.5"],
                     ["compress", "distill", "--teacher", fp32, "--config", "c.toml", "--temperature", "0"]):
            p = run(*args, expect=2)
            check(args[-2] in p.stderr, f"{args}: {p.stderr}")
        # Reports do not write over their inputs.
        p = run("report", base, "--out", os.path.join(fp32, "weights.pt"), expect=1)
        check("belongs to the model package" in p.stderr, p.stderr)
        p = run("compress", "report", "--model", f"fp32={fp32}", "--markdown", os.path.join(fp32, "weights.pt"), expect=1)
        check("belongs to the model package" in p.stderr, p.stderr)

        # ---- prune: 50 % of the weights (magnitude), 30 % of the channels (structured) ----
        mag, ch = os.path.join(tmp, "mag"), os.path.join(tmp, "ch")
        p = run("compress", "prune", "--model", fp32, "--output", mag, "--amount", "0.5", "--epochs", "1", "--json",
                *LIMITS)
        if p.returncode == 0:
            j = json.loads(p.stdout)
            check(abs(j.get("sparsity", 0) - 0.5) < 0.01, {k: v for k, v in j.items() if k != "layers"})
        p = run("compress", "prune", "--model", fp32, "--output", ch, "--method", "channels", "--amount", "0.3",
                "--epochs", "1", *LIMITS)
        chm = json.load(open(os.path.join(ch, "model", "strato-model.json"))) if p.returncode == 0 else {}
        # 30 % of 32 and 64 channels, kept widths rounded down to whole blocks of 8 (--round-to 8)
        check(chm.get("model", {}).get("channels") == [16, 16, 40, 40], chm.get("model"))
        run("eval", "--model", os.path.join(ch, "model"), *LIMITS)
        p = run("compress", "prune", "--model", int8, "--output", f"{tmp}/bad", expect=1)
        check("INT8" in p.stderr or "quantized" in p.stderr, p.stderr)
        # Found by review: out-of-range prune values were refused by the library (exit 1), an unknown
        # --dataset by the data config (exit 1, while eval's is a usage error), and an empty --model
        # became "--output -int8 is inside the source package". All usage errors now (exit 2).
        for args, needle in ((["--amount", "1.5"], "--amount"), (["--amount", "nan"], "--amount"),
                             (["--method", "foo"], "--method"), (["--schedule", "foo"], "--schedule"),
                             (["--ramp", "nan"], "--ramp"), (["--ramp-points", "-3"], "--ramp-points")):
            p = run("compress", "prune", "--model", fp32, "--output", f"{tmp}/bad", *args, expect=2)
            check(needle in p.stderr, f"{args}: {p.stderr}")
        for args in (["compress", "quantize", "--model", fp32, "--dataset", "foo"],
                     ["compress", "report", "--model", f"a={fp32}", "--dataset", "foo"],
                     ["compress", "quantize", "--model", "", "--no-eval"],
                     ["export", "--model", ""],  # (found by review: exit 1, "model package  does not exist")
                     ["export", "--model", fp32, "--output", ""],  # (found by review: the default path, silently)
                     ["compress", "prune", "--model", ""],
                     ["compress", "distill", "--teacher", "", "--config", "c.toml"],
                     # (found by review: an empty --config was "config file  cannot be read", exit 1)
                     ["compress", "distill", "--teacher", fp32, "--config", ""]):
            p = run(*args, expect=2)
            check(("--dataset" in args and "foo" in p.stderr) or "empty" in p.stderr, f"{args}: {p.stderr}")
        check(not os.path.exists(f"{tmp}/bad") and not os.path.exists("-int8"), "nothing written for usage errors")
        # Found by review: --resume with another --amount continued silently (exit 0).
        p = run("compress", "prune", "--model", fp32, "--output", mag, "--amount", "0.9", "--epochs", "1", "--resume",
                *LIMITS, expect=1)
        check("amount 0.5 then, 0.9 now" in p.stderr, p.stderr)
        # Found by review: an existing run was refused after the source evaluation, hinting run.name.
        p = run("compress", "prune", "--model", fp32, "--output", mag, "--epochs", "1", *LIMITS, expect=1)
        check("already holds a run" in p.stderr and "--output DIR" in p.stderr and "run.name" not in p.stderr,
              p.stderr)
        # Found by review: Ctrl-C before the fine-tuning was swallowed (--epochs 0 exited 0).
        for delay in (1.0, 2.0, 3.0):  # (a signal before the handlers are installed kills it: -SIGINT, again)
            sig = subprocess.Popen([STRATO, "compress", "prune", "--model", fp32, "--output", f"{tmp}/sig", "--epochs",
                                    "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(delay)
            sig.send_signal(signal.SIGINT)
            out, err = sig.communicate(timeout=300)
            if sig.returncode != -signal.SIGINT:
                break
        check(sig.returncode == 130 and "interrupted" in err, f"exit {sig.returncode}: {err}")
        check(not os.path.exists(f"{tmp}/sig/model"), "no package from an interrupted prune")

        # ---- distill a smaller student from the tiny CNN ----
        p = run("compress", "distill", "--teacher", fp32, "--config", "configs/fashion_mnist_student.toml",
                "--set", "train.epochs=1", "--set", f"run.dir={tmp}", "--set", "run.name=student", "--no-report",
                "--json", *LIMITS)
        student = os.path.join(tmp, "student", "model")
        metrics = json.load(open(os.path.join(student, "metrics.json"))) if p.returncode == 0 else {}
        check(metrics.get("compression", {}).get("method") == "distill", metrics)
        # --overwrite of the run directory that holds the teacher would delete the teacher.
        teacher_manifest = open(os.path.join(fp32, "strato-model.json")).read()
        p = run("compress", "distill", "--teacher", fp32, "--config", "configs/fashion_mnist_student.toml",
                "--set", "train.epochs=1", "--set", f"run.dir={tmp}", "--set", "run.name=cnn", "--overwrite",
                "--no-report", *LIMITS, expect=1)
        check("which this run reads" in p.stderr, p.stderr)
        check(open(os.path.join(fp32, "strato-model.json")).read() == teacher_manifest, "the teacher is still the teacher")
        # Found by review: a run directory inside the teacher's package filled it with a run.
        before = sorted(os.listdir(fp32))
        p = run("compress", "distill", "--teacher", fp32, "--config", "configs/fashion_mnist_student.toml",
                "--set", "train.epochs=1", "--set", f"run.dir={fp32}", "--set", "run.name=kd", "--no-report", *LIMITS,
                expect=1)
        check("is inside" in p.stderr and sorted(os.listdir(fp32)) == before, f"run inside the teacher: {p.stderr}")

        # ---- the comparison table over all of them ----
        p = run("compress", "report", "--model", f"fp32={fp32}", "--model", f"bf16={fp32}@bf16",
                "--model", f"int8={int8}", "--model", f"magnitude={mag}/model", "--model", f"channels={ch}/model",
                "--model", f"student={student}", "--runs", "20", "--json", *LIMITS)
        if p.returncode == 0:
            rows = json.loads(p.stdout)["rows"]
            check(len(rows) == 6, rows)
            sizes = {r["label"]: r["size_bytes"] for r in rows}
            check(sizes.get("int8", 1 << 40) * 3 < sizes.get("fp32", 0), sizes)
        # Found by review: Ctrl-C killed `compress report` on the spot (SIGINT's default action: no
        # message, exit -2). It stops within a timed pass, exits 130 naming the accuracies measured,
        # prints no partial table and writes no --markdown.
        md = os.path.join(tmp, "interrupted.md")
        code, lines, secs = interrupted(["compress", "report", "--model", f"fp32={fp32}", "--model", f"int8={int8}",
                                         "--runs", "10000000", "--markdown", md, *LIMITS], "timing ", "report (timing)")
        check(code == 130 and len(lines) == 1 and lines[0].startswith(
            "strato compress report: error: interrupted by signal 2 while") and "fp32 " in lines[0]
              and "int8 " in lines[0], f"report interrupted while timing: exit {code}: {lines}")
        check(secs < 60 and not os.path.exists(md), f"report: {secs:.0f}s to stop; {md} written: {os.path.exists(md)}")
        # A label with '|' stays one cell of the Markdown table (found by review: 12 cells under 11 headers).
        p = run("compress", "report", "--model", f"a|b={int8}", "--runs", "5", "--markdown", md, *LIMITS)
        if p.returncode == 0:
            row = [l for l in open(md).read().splitlines() if l.startswith("| a")]
            check(len(row) == 1 and row[0].startswith("| a\\|b |") and
                  len(re.findall(r"(?<!\\)\|", row[0])) == 12, f"markdown row: {row}")

    finish("compress e2e")


if __name__ == "__main__":
    main()
