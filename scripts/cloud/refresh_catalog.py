#!/usr/bin/python3
"""Refreshes data/cloud/instances.csv from SkyPilot-format catalogs (skypilot-org/skypilot-catalog,
catalogs/v*/{aws,gcp,azure}/vms.csv) that you have downloaded yourself. strato never downloads.

    scripts/cloud/refresh_catalog.py --aws aws/vms.csv --gcp gcp/vms.csv --azure azure/vms.csv \
        [--catalog data/cloud/instances.csv] [--out data/cloud/instances.csv] [--add-gpu-types]

For each row of the current catalog whose provider file is given, the on-demand and spot prices
are replaced by the SkyPilot ones:
  * AWS: one row per availability zone; on-demand from any zone, spot the lowest over regular
    zones (Local Zones such as use1-atl2-az1 are skipped: their spot prices are unusual), leaving
    out a zone under half the median of three or more (p4d.24xlarge had one zone at 2.47 against
    7.88-8.19 in the others: the cheapest row of almost every plan, at a price few could get).
  * GCP: VM rows carry the host price only; the GPU rows (empty InstanceType) are added, as GCP
    bills them. Our instance names "n1-standard-4+1xT4" name both parts.
  * Azure: SpotPrice equal to Price means "no spot data" and is left blank.
Rows that the snapshot lacks keep their prices; the provenance column records what changed.
With --add-gpu-types, GPU instance types of the snapshot that the catalog lacks are appended.
Prints a summary of the changes to stderr.
"""
import argparse
import csv
import datetime
import sys

COLUMNS = ["provider", "region", "instance_type", "accelerator", "accelerator_count", "vcpus", "memory_gib",
           "network_gbps", "ondemand_usd_per_hour", "spot_usd_per_hour", "source"]


def num(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def local_zone(az):
    return az.count("-") >= 2  # use1-atl2-az1 (Local Zone) vs use1-az1 (regular)


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def aws_prices(rows):
    out = {}
    for r in rows:
        key = (r["Region"], r["InstanceType"])
        od, spot = num(r.get("Price")), num(r.get("SpotPrice"))
        e = out.setdefault(key, {"od": None, "spot": None, "acc": r.get("AcceleratorName", ""),
                                 "count": r.get("AcceleratorCount", ""), "vcpus": r.get("vCPUs", ""),
                                 "mem": r.get("MemoryGiB", "")})
        if od:
            e["od"] = od
        if spot and not local_zone(r.get("AvailabilityZone", "")) and spot != od:
            e.setdefault("zones", []).append(spot)
    for e in out.values():
        zones = sorted(e.pop("zones", []))
        if len(zones) >= 3:
            median = zones[len(zones) // 2] if len(zones) % 2 else (zones[len(zones) // 2 - 1] + zones[len(zones) // 2]) / 2
            zones = [z for z in zones if z >= median / 2]
        e["spot"] = zones[0] if zones else None
    return out


def gcp_prices(rows):
    hosts, gpus = {}, {}
    for r in rows:
        od, spot = num(r.get("Price")), num(r.get("SpotPrice"))
        if r.get("InstanceType"):
            e = hosts.setdefault((r["Region"], r["InstanceType"]), {"od": od, "spot": spot})
            e["od"] = min(filter(None, [e["od"], od]), default=None)
            e["spot"] = min(filter(None, [e["spot"], spot]), default=None)
        elif r.get("AcceleratorName"):
            key = (r["Region"], r["AcceleratorName"], r.get("AcceleratorCount", "").split(".")[0])
            e = gpus.setdefault(key, {"od": od, "spot": spot})
            e["od"] = min(filter(None, [e["od"], od]), default=None)
            e["spot"] = min(filter(None, [e["spot"], spot]), default=None)
    return hosts, gpus


def azure_prices(rows):
    out = {}
    for r in rows:
        od, spot = num(r.get("Price")), num(r.get("SpotPrice"))
        if spot == od:
            spot = None
        out[(r["Region"], r["InstanceType"])] = {"od": od, "spot": spot}
    return out


def fmt(v):
    return "" if v is None else f"{v:g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--catalog", default="data/cloud/instances.csv")
    ap.add_argument("--out", default=None, help="default: overwrite --catalog")
    ap.add_argument("--aws")
    ap.add_argument("--gcp")
    ap.add_argument("--azure")
    ap.add_argument("--add-gpu-types", action="store_true")
    args = ap.parse_args()
    if not (args.aws or args.gcp or args.azure):
        ap.error("give at least one of --aws, --gcp, --azure")
    catalog = read(args.catalog)
    missing = [c for c in COLUMNS if catalog and c not in catalog[0]]
    if missing:
        sys.exit(f"{args.catalog}: missing columns {missing}")
    today = datetime.date.today().isoformat()
    aws = aws_prices(read(args.aws)) if args.aws else None
    gcp = gcp_prices(read(args.gcp)) if args.gcp else None
    azure = azure_prices(read(args.azure)) if args.azure else None
    changed = kept = 0
    for row in catalog:
        p, region, itype = row["provider"], row["region"], row["instance_type"]
        new = None
        if p == "aws" and aws is not None:
            new = aws.get((region, itype))
        elif p == "azure" and azure is not None:
            new = azure.get((region, itype))
        elif p == "gcp" and gcp is not None:
            hosts, gpus = gcp
            host_name, _, gpu_part = itype.partition("+")
            host = hosts.get((region, host_name))
            gpu = None
            if gpu_part:  # "1xT4"
                count, _, acc = gpu_part.partition("x")
                gpu = gpus.get((region, acc, count))
            elif row["accelerator"]:
                gpu = gpus.get((region, row["accelerator"], row["accelerator_count"])) if host is None else None
            if host or gpu:
                parts = [x for x in (host, gpu) if x]
                od = sum(x["od"] for x in parts) if all(x["od"] for x in parts) else None
                spot = sum(x["spot"] for x in parts) if all(x["spot"] for x in parts) else None
                new = {"od": od, "spot": spot}
        if not new:
            kept += 1
            continue
        before = (row["ondemand_usd_per_hour"], row["spot_usd_per_hour"])
        if new["od"]:
            row["ondemand_usd_per_hour"] = fmt(new["od"])
        row["spot_usd_per_hour"] = fmt(new["spot"])
        if before != (row["ondemand_usd_per_hour"], row["spot_usd_per_hour"]):
            changed += 1
            row["source"] = f"SkyPilot-format catalog refreshed {today} (was {before[0]}/{before[1]}); " + row["source"]
    added = 0
    if args.add_gpu_types and aws is not None:
        have = {(r["provider"], r["region"], r["instance_type"]) for r in catalog}
        for (region, itype), e in sorted(aws.items()):
            if e["acc"] and num(e["count"]) and ("aws", region, itype) not in have and e["od"]:
                catalog.append({"provider": "aws", "region": region, "instance_type": itype, "accelerator": e["acc"],
                                "accelerator_count": str(int(float(e["count"]))), "vcpus": str(int(float(e["vcpus"] or 0))),
                                "memory_gib": e["mem"], "network_gbps": "", "ondemand_usd_per_hour": fmt(e["od"]),
                                "spot_usd_per_hour": fmt(e["spot"]), "source": f"SkyPilot-format catalog added {today}"})
                added += 1
    out = args.out or args.catalog
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in catalog:
            w.writerow({c: r.get(c, "") for c in COLUMNS})
    print(f"{out}: {changed} rows repriced, {kept} kept (not in the given snapshots), {added} added", file=sys.stderr)


if __name__ == "__main__":
    main()
