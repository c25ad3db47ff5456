#!/usr/bin/python3
"""`strato plan` end to end: the JSON plan of a preset, a plan from a real (tiny) training run with
FLOPs counted from its model, price overrides, and every bad input giving one clear line."""
import json
import os
import shutil
import subprocess
import tempfile

from harness import REPO, check, finish, run, train_tiny




def main():
    # A preset with a deadline: ranked by cost, every row meets the deadline, spot rows carry details.
    p = run("plan", "--workload", "resnet50-imagenet", "--deadline", "4h", "--json")
    plan = json.loads(p.stdout)
    check(plan["kind"] == "strato-plan" and plan["currency"] == "USD", "plan header")
    rows = plan["ranked"]
    check(len(rows) == 10, f"10 rows, got {len(rows)}")
    check(all(r["p90_h"] <= 4 for r in rows), "all rows meet the deadline (at their 90th percentile)")
    check([r["cost"] for r in rows] == sorted(r["cost"] for r in rows), "sorted by cost")
    check(rows[0]["reason"].startswith("cheapest that meets the deadline"), rows[0]["reason"])
    check(all("SkyPilot" in r["source"] for r in rows if r["provider"] in ("aws", "gcp", "azure")), "provenance")
    check(len({(r["provider"], r["region"], r["instance"], r["market"]) for r in rows}) == len(rows), "one row per instance")
    # Found by review: the JSON did not say what was searched (filters, market, nodes, start-up) nor
    # the decode rate or input limit behind an "input pipeline" row.
    req = plan["request"]
    check(req["market"] == "both" and req["max_nodes"] == 16 and req["startup_s"] == 300 and req["regions"] == []
          and req["spot_hazard_per_h"] is None and plan["workload"]["decode_per_vcpu"] == 400
          and all(r["input_limit_samples_per_s"] > 0 for r in rows), str(req))

    # Objective time with a budget: the fastest row comes first.
    p = run("plan", "--workload", "resnet50-imagenet", "--objective", "time", "--budget", "60", "--json")
    rows = json.loads(p.stdout)["ranked"]
    check(rows[0]["reason"].startswith("fastest within the budget"), rows[0]["reason"])
    check(all(r["cost"] <= 60 for r in rows), "budget respected")

    # Found by review: a spot row met the deadline on its mean while its 90th percentile missed it.
    p = run("plan", "--deadline", "2.1h", "--spot-hazard", "0.5", "--json")
    rows = json.loads(p.stdout)["ranked"]
    check(rows and all(r["p90_h"] <= 2.1 for r in rows), f"p90 within the deadline: {[r['p90_h'] for r in rows]}")
    # (Standard_NC24ads_A100_v4 on spot: 5.63 USD at p90; p4d.24xlarge's one-AZ spot outlier of
    # 2.47 USD/h, the cheapest row of most plans, is no longer in the catalog)
    p = run("plan", "--budget", "5.5", "--spot-hazard", "0.5", expect=1)
    check("Standard_NC24ads_A100_v4 x1 (spot), costs 5.63 USD at the 90th percentile" in p.stderr, p.stderr)

    # --simulate states its sampling error; the simulated mean is within a few of them of the analytical one.
    p = run("plan", "--market", "spot", "--spot-hazard", "0.5", "--simulate", "300", "--top", "1", "--json")
    row = json.loads(p.stdout)["ranked"][0]
    sim = row["simulated"]
    check(sim["mean_h_stderr"] > 0 and abs(sim["mean_h"] - row["expected_h"]) < 4 * sim["mean_h_stderr"], str(sim))

    # Found by review: --list --json printed the text listing.
    p = run("plan", "--list", "--json")
    listing = json.loads(p.stdout)
    check(listing["kind"] == "strato-plan-list" and any(w["name"] == "resnet50-imagenet" for w in listing["presets"])
          and any(g["name"] == "H100" for g in listing["gpus"]) and isinstance(listing["warnings"], list), "list json")

    # Nothing meets an impossible deadline: exit 1 and the binding constraint named.
    p = run("plan", "--workload", "resnet50-imagenet", "--deadline", "30s", expect=1)
    check("no plan meets the constraints: deadline 30 s: the fastest candidate" in p.stderr, p.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        # Price overrides: a 50 % discount on p4d halves its on-demand price; CNY output.
        prices = os.path.join(tmp, "prices.toml")
        with open(prices, "w") as f:
            f.write('currency = "CNY"\nusd_to_cny = 7.0\n[discounts]\n"p4d.24xlarge" = 0.5\n')
        p = run("plan", "--instance", "p4d.24xlarge", "--region", "us-east-1", "--market", "ondemand",
                "--max-nodes", "1", "--prices", prices, "--json")
        plan = json.loads(p.stdout)
        check(plan["currency"] == "CNY", "currency")
        row = plan["ranked"][0]
        check(abs(row["price_per_h"] - 21.957642 * 0.5 * 7.0) < 1e-6, f"discounted price {row['price_per_h']}")
        # Found by review: [prices] under currency = "CNY" were read as USD (x 7 again).
        with open(prices, "w") as f:
            f.write('currency = "CNY"\nusd_to_cny = 7.0\n[prices."p4d.24xlarge"]\nondemand = 100.0\n')
        p = run("plan", "--instance", "p4d.24xlarge", "--region", "us-east-1", "--market", "ondemand",
                "--max-nodes", "1", "--prices", prices, "--json")
        row = json.loads(p.stdout)["ranked"][0]
        check(abs(row["price_per_h"] - 100.0) < 1e-9, f"a CNY price stays CNY: {row['price_per_h']}")

        # The catalog refreshed from SkyPilot-format snapshots (fixtures in that format) plans as before.
        refreshed = os.path.join(tmp, "instances.csv")
        fx = os.path.join(REPO, "tests", "cloud", "fixtures")
        r = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "cloud", "refresh_catalog.py"),
                            "--catalog", os.path.join(REPO, "data", "cloud", "instances.csv"), "--out", refreshed,
                            "--aws", os.path.join(fx, "skypilot_aws_vms.csv"), "--gcp", os.path.join(fx, "skypilot_gcp_vms.csv"),
                            "--azure", os.path.join(fx, "skypilot_azure_vms.csv"), "--add-gpu-types"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and "6 rows repriced" in r.stderr and "1 added" in r.stderr, r.stderr)
        # A zone under half the median of the others is left out (p4d.24xlarge's 2.4655 against 7.88-8.19).
        with open(refreshed) as f:
            p4d = [l.split(",") for l in f if l.startswith("aws,us-east-1,p4d.24xlarge,")]
        check(len(p4d) == 1 and p4d[0][9] == "7.8799", f"p4d spot: {p4d}")
        p = run("plan", "--catalog", refreshed, "--instance", "g4dn.xlarge", "--region", "us-east-1", "--max-nodes", "1",
                "--json")
        rows = {r["market"]: r for r in json.loads(p.stdout)["ranked"]}
        # On-demand from any zone; spot the lowest regular zone (the 0.05 Local Zone price is skipped).
        check(abs(rows["ondemand"]["price_per_h"] - 0.5) < 1e-9 and abs(rows["spot"]["price_per_h"] - 0.18) < 1e-9, str(rows))
        p = run("plan", "--catalog", refreshed, "--instance", "Standard_NC40ads_H100_v5", "--json")
        check(all(r["market"] == "ondemand" for r in json.loads(p.stdout)["ranked"]), "Azure SpotPrice == Price: no spot")
        p = run("plan", "--catalog", refreshed, "--instance", "n1-standard-4+1xT4", "--region", "us-central1",
                "--market", "ondemand", "--max-nodes", "1", "--json")
        check(abs(json.loads(p.stdout)["ranked"][0]["price_per_h"] - 0.53) < 1e-9, "GCP host + GPU rows summed")

        # A real run: train a tiny model, then plan from it (FLOPs counted from its package).
        run_dir = os.path.join(tmp, "runs")
        train_tiny(run_dir, "tiny", "train.monitor_every=4")
        # The run recorded host samples every 4 steps; `strato monitor --replay` reads them from metrics.jsonl.
        metrics = os.path.join(run_dir, "tiny", "metrics.jsonl")
        with open(metrics) as f:
            samples = [json.loads(line) for line in f if '"monitor"' in line]
        check(len(samples) == 4 and all(s["kind"] == "monitor" and "cpu_util" in s for s in samples), f"{len(samples)} monitor lines")
        rules = os.path.join(tmp, "rules.toml")
        with open(rules, "w") as f:
            f.write('[[rule]]\nname = "any"\nwhen = "mem_total_bytes > 0"\naction = "exit"\n')
        p = run("monitor", "--replay", metrics, "--rules", rules, "--no-exporter", expect=3)
        check("any firing: mem_total_bytes" in p.stderr, p.stderr)
        p = run("plan", "--run", os.path.join(run_dir, "tiny"), "--epochs", "50", "--json")
        w = json.loads(p.stdout)["workload"]
        # The cnn (width 32, depth 2, hidden 256) on 1x28x28: two 3x3 convs per stage; ~38 MFLOPs forward.
        check(3.0e7 < w["fwd_flops"] < 5.0e7, f"counted FLOPs {w['fwd_flops']}")
        check(w["params"] == 870826, f"params {w['params']}")
        check(w["measured_samples_per_s"] > 0 and w["epochs"] == 50 and w["batch_per_gpu"] == 128, str(w))
        check(w["dataset_samples"] == 2000, f"dataset size {w['dataset_samples']}")
        # Found by review: the dataset was steps x batch, but a step is grad_accum batches (on each
        # rank): with grad_accum = 4 the plan saw 512 of 2,000 samples. The checkpoint records the
        # size; without one, steps x batch x grad_accum.
        accum = train_tiny(run_dir, "accum", "train.grad_accum=4")
        w = json.loads(run("plan", "--run", accum, "--json").stdout)["workload"]
        check(w["dataset_samples"] == 2000 and "from its checkpoint" in w["source"], str(w))
        shutil.copytree(accum, accum + "-bare")
        shutil.rmtree(os.path.join(accum + "-bare", "checkpoints"))
        w = json.loads(run("plan", "--run", accum + "-bare", "--json").stdout)["workload"]
        check(1900 <= w["dataset_samples"] <= 2100 and "grad_accum 4" in w["source"], str(w))
        # Found by review: a run whose size nothing records was told to "pass --dataset-size", and
        # with it failed the same way (the flag was applied after the check).
        sizeless = accum + "-sizeless"
        shutil.copytree(accum + "-bare", sizeless)
        with open(os.path.join(sizeless, "metrics.jsonl")) as f:
            lines = f.read().replace('"epoch":1,', '"epoch":0,')
        with open(os.path.join(sizeless, "metrics.jsonl"), "w") as f:
            f.write(lines)
        p = run("plan", "--run", sizeless, expect=1)
        check("pass --dataset-size" in p.stderr, p.stderr)
        w = json.loads(run("plan", "--run", sizeless, "--dataset-size", "5000", "--json").stdout)["workload"]
        check(w["dataset_samples"] == 5000 and "dataset size from --dataset-size" in w["source"], str(w))
        # Found by review: --workload was silently ignored next to --run; they exclude each other.
        p = run("plan", "--workload", "no-such-preset", "--run", accum, expect=2)
        check("--workload excludes --run" in p.stderr, p.stderr)

        # Bad inputs: one line naming what and where.
        empty = os.path.join(tmp, "empty.csv")
        with open(empty, "w") as f:
            f.write("provider,region,instance_type,accelerator,accelerator_count,vcpus,memory_gib,network_gbps,"
                    "ondemand_usd_per_hour,spot_usd_per_hour,source\n")
        bad_prices = os.path.join(tmp, "bad.toml")
        with open(bad_prices, "w") as f:
            f.write("[prices.\"p9.huge\"]\nondemand = 1\n")
        # Found by review: a name from a flag that the presets or the catalog lack exited 1, as a plan
        # nothing meets; it is a usage error (2), as CLI11's own.
        for args, needle in ((["plan", "--instance", "p4d.24xlarg"], "did you mean 'p4d.24xlarge'"),
                             (["plan", "--workload", "resnet5"], "--workload: unknown workload 'resnet5'"),
                             (["plan", "--region", "mars-1"], "--region 'mars-1' is not in the catalog"),
                             (["plan", "--region", ""], "--region '' is not in the catalog"),
                             (["plan", "--provider", "awz"], "--provider 'awz' is not in the catalog"),
                             (["plan", "--gpu", "H999"], "--gpu 'H999' is not in the catalog"),
                             (["plan", "--gpu", "tpu-v6e"], "the GPU table has no entry for it"),
                             (["plan", "--gpu", "A100:8"], "give the accelerator's name alone ('A100')")):
            p = run(*args, expect=2)
            check(p.stderr.startswith("strato plan: error: ") and needle in p.stderr, f"{args}: {p.stderr!r}")
        cases = [
            (["plan", "--catalog", empty], "the catalog has no instances"),
            (["plan", "--catalog", os.path.join(tmp, "missing.csv")], "missing.csv"),
            (["plan", "--prices", bad_prices], "unknown instance type 'p9.huge'"),
            (["plan", "--run", os.path.join(tmp, "nope")], "nope"),
            (["plan", "--instance", "p5.4xlarge", "--region", "us-west-2"],
             "at once; keeping the other filters, --region could be us-east-1"),
            # Found by review: these ran for hours, or blamed a budget nobody gave.
            (["plan", "--spot-hazard", "100", "--market", "spot", "--simulate", "100000"], "simulate fewer runs"),
            (["plan", "--spot-hazard", "100", "--restart", "60m", "--market", "spot"],
             "spot: on every candidate preemptions arrive faster"),
            (["plan", "--market", "spot", "--instance", "p5.4xlarge"],
             "no instance that matches the filters has a spot price"),
        ]
        for args, needle in cases:
            p = run(*args, expect=1)
            check(p.stderr.startswith("strato plan: error: ") and needle in p.stderr, f"{args}: {p.stderr!r}")
        # Values that were ignored (the preset planned instead) or gave "inf" plans are usage errors.
        for flag, value in (("--epochs", "-1"), ("--epochs", "0"), ("--dataset-size", "nan"), ("--gflops", "inf"),
                            ("--spot-hazard", "nan"), ("--budget", "0"), ("--top", "0"), ("--simulate", "-1"),
                            ("--max-nodes", "0"), ("--deadline", "0"), ("--deadline", "-2h"), ("--deadline", "5x"), ("--restart", "abc"),
                            ("--startup", "-1m"), ("--gpu-table", "g.csv")):
            p = run("plan", flag, value, expect=2)
            check(flag in p.stderr, f"{flag} {value}: {p.stderr!r}")
        # Found by review: an empty value (an unset variable in a script) planned the default preset,
        # the built-in catalog or the catalog's prices without a word.
        for flag in ("--workload", "--run", "--catalog", "--prices"):
            p = run("plan", flag, "", expect=2)
            check(p.stderr.startswith(f"{flag}: expected a ") and "got an empty one" in p.stderr, f"{flag} '': {p.stderr!r}")
        for text, needle in (("discount = nan\n", "discount must be a fraction"),
                             ('currency = "CNY"\nusd_to_cny = inf\n', "usd_to_cny"),
                             ('[prices."p4d.24xlarge"]\nondemand = 0\n', "price per hour in (0, 1e7]")):
            with open(bad_prices, "w") as f:
                f.write(text)
            p = run("plan", "--prices", bad_prices, expect=1)
            check(needle in p.stderr, f"prices {text!r}: {p.stderr!r}")

    # The text table names its columns and the catalog listing works.
    p = run("plan", "--gpu", "A10G", "--workload", "yolov8m-coco", "--top", "3")
    check("samples/s" in p.stdout and "g5." in p.stdout, p.stdout)
    p = run("plan", "--list")
    check("resnet50-imagenet" in p.stdout and "H100" in p.stdout, "list")
    # Found by review: cells wider than their column (a spot row's "1 h 56 min - 1 h 56 min",
    # "Standard_ND96amsr_A100_v4 x16") pushed the rest of their row out of line with the header.
    p = run("plan", "--provider", "azure", "--objective", "time", "--top", "3", "--gpu", "A100-80GB",
            "--instance", "Standard_ND96amsr_A100_v4", "--market", "ondemand")
    p2 = run("plan", "--top", "2", "--market", "spot")
    for out in (p.stdout, p2.stdout):
        lines = out.splitlines()
        head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#  cloud"))
        at = lines[head].index("why")
        check(all(line[at - 2:at] == "  " and line[at] != " " for line in lines[head + 1:] if line.strip()),
              "\n".join(lines[head:]))

    # Found by review: a large model's rate (0.0025 samples/s on a T4) showed as "0" samples/s, and a
    # cost under half a cent as "0.00".
    p = run("plan", "--gflops", "1e6", "--params-m", "1", "--activations-m", "1", "--batch-per-gpu", "1",
            "--instance", "g4dn.xlarge", "--region", "us-east-1", "--max-nodes", "1", "--market", "ondemand")
    row = p.stdout.splitlines()[-1].split()
    check(row[6] == "0.00247", f"samples/s of a slow job: {row}")
    p = run("plan", "--dataset-size", "256", "--epochs", "1", "--startup", "1s", "--instance", "g4dn.xlarge",
            "--region", "us-east-1", "--max-nodes", "1", "--market", "ondemand")  # (one step of 256)
    check(" <0.01  cheapest" in p.stdout.splitlines()[-1], p.stdout)
    # Found by review: a global batch larger than the dataset (under one step an epoch) was planned.
    p = run("plan", "--dataset-size", "255", "--instance", "g4dn.xlarge", "--region", "us-east-1", "--max-nodes", "1",
            "--market", "ondemand", expect=1)
    check("dataset size: 255 samples are fewer than one global batch on any candidate that fits (the smallest, "
          "aws g4dn.xlarge x1 (on-demand), takes 256 x 1 = 256 a step)" in p.stderr, p.stderr)

    # Found by review: --simulate without a spot row printed its heading over nothing.
    p = run("plan", "--market", "ondemand", "--simulate", "10", "--top", "2")
    check(p.stdout.rstrip().endswith("--simulate: no spot row in the plan, nothing to simulate"), p.stdout[-300:])

    # Found by review: SkyPilot's spellings (`--cloud AWS --gpus a100`) were "not in the catalog".
    p = run("plan", "--provider", "AWS", "--gpu", "a100", "--region", "US-EAST-1", "--top", "1", "--json")
    rows = json.loads(p.stdout)["ranked"] if p.returncode == 0 else []
    check(len(rows) == 1 and rows[0]["accelerator"] == "A100" and rows[0]["provider"] == "aws", p.stdout[-500:])
    # Comma-separated lists, as SkyPilot's (--gpu A100,H100 was one unknown name, exit 2).
    p = run("plan", "--gpu", "A100,H100", "--provider", "aws,gcp", "--top", "50", "--json")
    rows = json.loads(p.stdout)["ranked"] if p.returncode == 0 else []
    check(rows and {r["accelerator"] for r in rows} <= {"A100", "H100"} and {r["provider"] for r in rows} <= {"aws", "gcp"}
          and len({r["accelerator"] for r in rows}) == 2, p.stdout[-500:] + p.stderr)
    # Found by review: with --json a plan nothing meets exited 1 without a word on stderr.
    p = run("plan", "--deadline", "30s", "--json", expect=1)
    check(json.loads(p.stdout)["ranked"] == [] and
          p.stderr.startswith("strato plan: error: no plan meets the constraints: deadline 30 s"), p.stderr)
    # Found by review: a SkyPilot vms.csv as --catalog said only "missing column 'provider'".
    p = run("plan", "--catalog", os.path.join(REPO, "tests", "cloud", "fixtures", "skypilot_aws_vms.csv"), expect=1)
    check("this is a SkyPilot vms.csv: convert it with scripts/cloud/refresh_catalog.py" in p.stderr, p.stderr)

    finish("plan e2e")


if __name__ == "__main__":
    main()
