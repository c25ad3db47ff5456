#!/usr/bin/python3
"""`strato data pack|stats|verify` end to end: a generated image folder with train/test splits packed
into shards that Python's tarfile reads as WebDataset does, stats with a manifest whose dataset hash
follows the documented recipe, verify passing and then failing with a clear message after one file
and one shard are corrupted, a killed pack resumed, and bad input giving one clear line."""
import hashlib
import json
import os
import struct
import subprocess
import shutil
import tarfile
import tempfile
import zlib

from harness import check, finish, run


def png(width, height, seed):
    """A grayscale PNG with a pattern from SEED (every image differs)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    rows = b"".join(b"\0" + bytes((x * 7 + y * 3 + seed * 11) % 256 for x in range(width)) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def make_folder(root):
    """root/{train,test}/{cat,dog}/NNN.png; returns {relative path: bytes}."""
    files = {}
    for s, (split, n) in enumerate((("train", 12), ("test", 3))):
        for c, cls in enumerate(("cat", "dog")):
            os.makedirs(os.path.join(root, split, cls))
            for i in range(n):
                rel = f"{split}/{cls}/{i:03d}.png"
                data = png(20 + i, 10 + c, s * 500 + c * 50 + i)
                with open(os.path.join(root, rel), "wb") as f:
                    f.write(data)
                files[rel] = data
    return files


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "photos"), os.path.join(tmp, "shards")
        files = make_folder(src)

        # Found by review: an s3:// or ftp:// path was "an image folder that does not exist"; bench
        # names the schemes that work, stats/verify/pack say they read a local directory; bench's
        # hint for a root of splits doubled the slash of "photos/".
        p = run("data", "bench", "s3://bucket/x/train", "--image-size", "32", expect=1)
        check("the s3:// scheme is not supported" in p.stderr, p.stderr)
        for args in (["stats", "ftp://host/x"], ["verify", "s3://bucket/x"], ["pack", "s3://bucket/x", dst]):
            p = run("data", *args, expect=1)
            check("is a URL" in p.stderr and "local" in p.stderr, f"data {args}: {p.stderr}")
        p = run("data", "bench", src + "/", "--image-size", "32", expect=1)
        check(f"e.g. {src}/t" in p.stderr and "//" not in p.stderr, p.stderr)
        check(not os.path.exists(dst), "a refused pack left its destination")

        # Pack: two splits, several shards each.
        p = run("data", "pack", src, dst, "--shard-size", "8KB", "--workers", "2", "--seed", "3", "--json")
        packed = {s["split"]: s for s in json.loads(p.stdout)["splits"]}
        check(set(packed) == {"train", "test"}, f"splits {packed.keys()}")
        check(packed["train"]["samples"] == 24 and packed["train"]["shards"] > 2, packed["train"])
        check(packed["test"]["samples"] == 6, packed["test"])

        # The shards are WebDataset's: <key>.png and <key>.cls, keys without dots, labels as text;
        # index.json's checksums are the files' SHA-256.
        index = json.load(open(os.path.join(dst, "train", "index.json")))
        check(index["format"] == "strato-shards" and index["classes"] == ["cat", "dog"], index["classes"])
        by_bytes = {data: rel for rel, data in files.items() if rel.startswith("train/")}
        seen = set()
        for shard in index["shards"]:
            path = os.path.join(dst, "train", shard["name"])
            raw = open(path, "rb").read()
            check(len(raw) == shard["bytes"] and len(raw) <= 8000, f"{shard['name']} size {len(raw)}")
            check(hashlib.sha256(raw).hexdigest() == shard["sha256"], f"{shard['name']} sha256")
            with tarfile.open(path) as t:
                members = t.getmembers()
                check(len(members) == 2 * len(shard["keys"]), f"{shard['name']}: {len(members)} members")
                for k in range(0, len(members), 2):
                    img, cls = members[k], members[k + 1]
                    key, ext = img.name.split(".", 1)
                    check(ext == "png" and cls.name == key + ".cls", f"{img.name}, {cls.name}")
                    data = t.extractfile(img).read()
                    rel = by_bytes.get(data)
                    check(rel is not None, f"{img.name} is not a source file")
                    label = int(t.extractfile(cls).read())
                    check(rel and rel.split("/")[1] == index["classes"][label], f"{img.name}: label {label} for {rel}")
                    seen.add(rel)
                    # The index's offset and size point at the same bytes.
                    i = shard["keys"].index(key)
                    check(raw[shard["offsets"][i]:shard["offsets"][i] + shard["sizes"][i]] == data, f"{key} offset")
        check(len(seen) == 24, f"{len(seen)} distinct training images in the shards")

        # Stats with a manifest; the dataset hash follows the documented sha256sum recipe.
        manifest = os.path.join(tmp, "photos.manifest.json")
        p = run("data", "stats", src, "--json", "--manifest", manifest)
        st = json.loads(p.stdout)
        train = st["splits"][0]
        check(st["kind"] == "image-folder" and train["name"] == "train" and train["samples"] == 24, st)
        check([c["count"] for c in train["classes"]] == [12, 12] and train["balance"] == 1.0, train["classes"])
        check(train["width"] == {"min": 20, "median": 26, "max": 31}, train["width"])
        check(train["formats"] == {"png": 24} and train["unreadable"]["count"] == 0, train)
        lines = "".join(f"{hashlib.sha256(files[r]).hexdigest()}  {r}\n" for r in sorted(files))
        check(st["dataset_hash"] == hashlib.sha256(lines.encode()).hexdigest(), "dataset hash recipe")
        check(json.load(open(manifest))["dataset_hash"] == st["dataset_hash"], "manifest hash")
        p = run("data", "stats", dst)
        check("train: 24 samples, 2 classes, balance 1.00" in p.stdout and "shards" in p.stdout, p.stdout)

        # The input pipeline benchmark: images/s over the shards; a run with nothing to time and
        # out-of-range flags are errors (it printed the machine's uptime as the time before).
        p = run("data", "bench", os.path.join(dst, "train"), "--image-size", "16", "--batch-size", "4", "--epochs", "2",
                "--json")
        b = json.loads(p.stdout) if p.returncode == 0 else {}
        check(b.get("images_per_s", 0) > 0, f"data bench: {p.stdout} {p.stderr}")
        p = run("data", "bench", os.path.join(dst, "train"), "--image-size", "16", "--batch-size", "64", expect=1)
        check("nothing was timed: 1 batch(es) of 64 came" in p.stderr, p.stderr)
        p = run("data", "bench", os.path.join(dst, "train"), expect=2)  # it blamed --transform; a usage error
        check("give --image-size N" in p.stderr, p.stderr)
        # Transforms that fix no size, or another than --image-size, are the flags' fault too (exit 1
        # after the dataset opened, naming the config key data.image_size).
        p = run("data", "bench", os.path.join(dst, "train"), "--transform", "hflip", expect=2)
        check("--transform: the image size is not set (--image-size) and no transform fixes it" in p.stderr, p.stderr)
        p = run("data", "bench", os.path.join(dst, "train"), "--transform", "center-crop size=8", "--image-size", "16",
                expect=2)
        check("the transforms end at 8x8 but --image-size is 16x16" in p.stderr, p.stderr)
        for flag, value in (("--epochs", "0"), ("--workers", "100000"), ("--channels", "2"), ("--limit", "-1")):
            p = run("data", "bench", os.path.join(dst, "train"), flag, value, expect=2)
            check(flag in p.stderr, f"data bench {flag} {value}: {p.stderr}")

        # Verify passes, then fails on one corrupted file, naming it.
        p = run("data", "verify", src, "--manifest", manifest)
        check(p.stdout.startswith("ok: 30 files, 30 samples, compared with"), p.stdout)
        changed = os.path.join(src, "train", "dog", "004.png")
        before = os.stat(changed)
        flip_byte(changed, 60)
        p = run("data", "verify", src, "--manifest", manifest, "--decode", expect=1)
        check("changed  train/dog/004.png: SHA-256" in p.stdout, p.stdout)
        check("failed verification: 1 changed, 0 missing, 0 extra" in p.stderr, p.stderr)
        check(p.stderr.startswith("strato data verify: error: "), p.stderr)
        p = run("data", "verify", src, "--manifest", manifest, "--json", expect=1)
        v = json.loads(p.stdout)
        check(not v["ok"] and v["changed"] == 1 and v["problems"][0]["path"] == "train/dog/004.png", v)

        # Shards: verified against index.json without a manifest; a flipped byte is caught.
        run("data", "verify", dst, "--decode")
        flip_byte(os.path.join(dst, "test", "shard-000000.tar"), 700)
        p = run("data", "verify", dst, expect=1)
        check("corrupt  test/shard-000000.tar: SHA-256" in p.stdout and "differs from index.json" in p.stdout, p.stdout)

        # A killed pack (no index yet, one shard missing) resumes and keeps the finished shards.
        os.remove(os.path.join(dst, "train", "index.json"))
        os.remove(os.path.join(dst, "train", "shard-000001.tar"))
        flip_byte(changed, 60)  # back as it was, modification time included
        os.utime(changed, ns=(before.st_atime_ns, before.st_mtime_ns))
        p = run("data", "pack", src, dst, "--shard-size", "8KB", "--seed", "3", "--json")
        again = {s["split"]: s for s in json.loads(p.stdout)["splits"]}
        check(again["train"]["shards_kept"] == packed["train"]["shards"] - 1, again["train"])
        check(again["test"]["shards_kept"] == packed["test"]["shards"] - 1, again["test"])  # the corrupted one rewritten
        check(json.load(open(os.path.join(dst, "train", "index.json"))) == index, "same index after resume")
        run("data", "verify", dst)

        # Bad input: one clear line each.
        p = run("data", "pack", os.path.join(tmp, "nope"), dst, expect=1)
        check("nope does not exist" in p.stderr, p.stderr)
        p = run("data", "pack", src, dst, "--shard-size", "12XB", expect=2)  # a usage error, as other flags'
        check("--shard-size: size '12XB' is not a size" in p.stderr, p.stderr)
        p = run("data", "pack", src, dst, "--shard-size", "0x100000", expect=2)  # (std::stod read hex)
        check("size '0x100000' is not a size" in p.stderr, p.stderr)
        p = run("data", "pack", src, dst, "--workers", "-3", expect=2)
        p = run("data", "pack", src, dst, "--seed", "-1", expect=2)
        # Found by review: an empty or cut-off image was packed without a word (only verify found it).
        bad = os.path.join(tmp, "badsrc")
        os.makedirs(os.path.join(bad, "cat"))
        os.makedirs(os.path.join(bad, "dog"))
        with open(os.path.join(bad, "cat", "ok.png"), "wb") as f:
            f.write(png(8, 8, 1))
        with open(os.path.join(bad, "dog", "empty.png"), "wb") as f:
            pass
        p = run("data", "pack", bad, os.path.join(tmp, "badshards"), expect=1)
        check(p.stderr.startswith("strato data pack: error: ") and "dog/empty.png: empty file (0 bytes; expected a "
              "JPEG or PNG image)" in p.stderr, p.stderr)
        with open(os.path.join(bad, "dog", "empty.png"), "wb") as f:
            f.write(png(9, 9, 2)[:-30])
        p = run("data", "pack", bad, os.path.join(tmp, "badshards"), expect=1)
        check("dog/empty.png: truncated PNG" in p.stderr and "remove or replace it" in p.stderr, p.stderr)
        check(not os.path.exists(os.path.join(tmp, "badshards", "index.json")), "an index for a refused pack")
        with open(os.path.join(bad, "dog", "empty.png"), "wb") as f:
            f.write(png(9, 9, 2))
        p = run("data", "pack", bad, os.path.join(tmp, "badshards"), "--json")
        check(p.returncode == 0 and json.loads(p.stdout)["splits"][0]["samples"] == 2, p.stdout)
        # Found by review: a class folder without images became a class without a word, shifting
        # every label after it (torchvision's ImageFolder refuses it): a pack warns. A hidden folder
        # (Jupyter's .ipynb_checkpoints, torchvision's best-known trap) is no class at all.
        os.makedirs(os.path.join(bad, ".ipynb_checkpoints"))
        with open(os.path.join(bad, ".ipynb_checkpoints", "x.png"), "wb") as f:
            f.write(png(9, 9, 3))
        os.makedirs(os.path.join(bad, "aaa_empty"))
        p = run("data", "pack", bad, os.path.join(tmp, "badshards2"), "--json")
        check("class 'aaa_empty' (label 0) has no images" in p.stderr and ".ipynb_checkpoints" not in p.stderr, p.stderr)
        with open(os.path.join(tmp, "badshards2", "index.json")) as f:
            classes = json.load(f)["classes"]
        check(".ipynb_checkpoints" not in classes and classes[0] == "aaa_empty", f"classes {classes}")
        shutil.rmtree(os.path.join(bad, ".ipynb_checkpoints"))
        os.rmdir(os.path.join(bad, "aaa_empty"))
        # Found by review: shard-NNNNNN.tar files that no pack wrote were overwritten and deleted.
        foreign = os.path.join(tmp, "foreign")
        os.makedirs(foreign)
        for n in ("shard-000000.tar", "shard-000009.tar"):
            with open(os.path.join(foreign, n), "wb") as f:
                f.write(b"another tool's shard")
        p = run("data", "pack", bad, foreign, expect=1)
        check("holds shard-000000.tar and 1 more shard file(s) but no index.json" in p.stderr, p.stderr)
        check(sorted(os.listdir(foreign)) == [".pack.lock", "shard-000000.tar", "shard-000009.tar"],
              os.listdir(foreign))
        # --manifest may not replace what is not a manifest, nor lie inside the dataset.
        p = run("data", "stats", src, "--manifest", os.path.join(src, "m.json"), expect=1)
        check("lies inside the dataset" in p.stderr, p.stderr)
        p = run("data", "stats", src, "--manifest", tmp, expect=1)
        check("is a directory; expected a file name" in p.stderr, p.stderr)
        # A stream is written as one: /dev/stdout into a pipe (found by review: a temporary file
        # beside /proc/self/fd/pipe:[...] could not be made, the results lost after the work).
        p = run("data", "stats", src, "--manifest", "/dev/stdout")
        check('"dataset_hash"' in p.stdout and '"format"' in p.stdout, p.stdout[-300:])
        p = run("data", "verify", src, "--manifest", os.path.join(tmp, "missing.json"), expect=1)
        check("missing.json does not exist" in p.stderr, p.stderr)
        # ... nor any file that is not an earlier manifest (it overwrote a CSV table, an index.json).
        table = os.path.join(tmp, "table.csv")
        with open(table, "w") as f:
            f.write("a,b\n1,2\n")
        for target, what in ((table, "is a text file that is not JSON"),
                             (os.path.join(dst, "train", "index.json"), "is a shard index")):
            before = open(target, "rb").read()
            p = run("data", "stats", src, "--manifest", target, expect=1)
            check(what in p.stderr and target in p.stderr, p.stderr)
            check(open(target, "rb").read() == before, f"{target} was overwritten")
        for sub in ("stats", "verify"):  # an empty name wrote (compared with) nothing and said ok
            p = run("data", sub, src, "--manifest", "", expect=2)
            check("--manifest: expected a file path, got an empty one" in p.stderr, p.stderr)
        # Usage errors (exit 2) naming the flag, not library errors (exit 1) or silent clamping.
        for size in ("1", "1k", "1.5"):
            p = run("data", "pack", src, os.path.join(tmp, "small"), "--shard-size", size, expect=2)
            check("--shard-size: size '" + size + "'" in p.stderr, p.stderr)
        for seed in ("18446744073709551616", "abc"):
            p = run("data", "pack", src, os.path.join(tmp, "small"), "--seed", seed, expect=2)
            check("--seed: expected an integer in [0, 18446744073709551615]" in p.stderr, p.stderr)
        p = run("data", "bench", os.path.join(dst, "train"), "--image-size", "16", "--cache", "bogus", expect=2)
        check("--cache" in p.stderr and "data.cache" not in p.stderr, p.stderr)
        p = run("data", "bench", os.path.join(dst, "train"), "--transform", "center-crop size=0", expect=2)
        check("--transform: 'center-crop size=0' size: expected an integer in [1, 16384], got 0" in p.stderr, p.stderr)
        # A repack after test/ became val/ leaves no stale test/ (training evaluates on test/ when it exists).
        os.rename(os.path.join(src, "test"), os.path.join(src, "val"))
        run("data", "pack", src, dst, "--shard-size", "8KB", "--seed", "3")
        check(not os.path.exists(os.path.join(dst, "test")), "stale test/ after a repack")
        p = run("data", "stats", dst)
        check("val: 6 samples" in p.stdout and "test:" not in p.stdout, p.stdout)
        os.rename(os.path.join(src, "val"), os.path.join(src, "test"))
        # A name with a newline: the dataset hash is sha256sum's, escapes included.
        weird = os.path.join(tmp, "weird")
        os.makedirs(os.path.join(weird, "a\nb"))
        os.makedirs(os.path.join(weird, "c"))
        with open(os.path.join(weird, "a\nb", "x\\y.png"), "wb") as f:
            f.write(png(4, 4, 1))
        with open(os.path.join(weird, "c", "z.png"), "wb") as f:
            f.write(png(4, 4, 2))
        p = run("data", "stats", weird, "--json", "--manifest", os.path.join(tmp, "weird.json"))
        recipe = subprocess.run(["sh", "-c", "cd \"$0\" && find . -type f -iname '*.png' -printf '%P\\0' | "
                                 "LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum", weird],
                                capture_output=True, text=True)
        got = json.loads(p.stdout).get("dataset_hash") if p.returncode == 0 else None
        check(got is not None and recipe.stdout.split()[0] == got, f"recipe {recipe.stdout} {recipe.stderr} vs {got}")
        p = run("data", "stats", os.path.join(tmp, "nope"), expect=1)
        check("does not exist" in p.stderr, p.stderr)
        p = run("data", "--help")
        check("strato data pack photos/" in p.stdout, p.stdout)
    finish("data pack/stats/verify")


if __name__ == "__main__":
    main()
