#!/usr/bin/env python3
"""Checks a device run of the covering suite against the suite's own model.

usage: check_suite_report.py SUITE_LIST REPORT_JSON [--mma]

SUITE_LIST is `pagecheck run --list-suite` output, REPORT_JSON the `--json`
report of `pagecheck run --paths reference,direct,split,auto,prefill,fmha`
over the default suite. Checks, per case:
  - every path of each family (target) that takes the case ran and passed,
    and every other GPU path was n/a (a path that silently does not apply
    would leave its family's pairs uncovered);
  - on a compute capability 9.0 device (some plan names the wgmma kernel),
    the prefill path ran the wgmma kernel exactly on the cases with the
    prefill-wgmma family's values (head dim 128, 16-bit or fp8 K/V, or head
    dim 64, 16-bit K/V; no
    ALiBi), and fmha on all of its cases (unless --mma: then no case ran
    it).
Exit 0 when all hold, 1 otherwise, printing each violation.
"""
import json
import re
import sys

# "kernel" takes every axis value (the reference and --kernel libraries): no
# built-in path; a case of that family alone must be n/a on every GPU path.
FAMILY_PATHS = {"decode": {"direct", "split", "auto"}, "decode-sinks-alibi": {"direct", "split", "auto"},
                "prefill": {"prefill"}, "prefill-wgmma": {"prefill"}, "fmha": {"fmha"}, "kernel": set(),
                "prefill-sinks": {"prefill"}, "fmha-sinks": {"prefill", "fmha"}, "prefill-alibi": {"prefill"},
                "decode-head-sizes": {"direct", "split", "auto"}, "prefill-head-sizes": {"prefill"},
                # Latent (MLA) caches: the decode paths take them at decode
                # (the mla-decode family; lists written before that family
                # existed: read off an mla case's mode axis).
                "mla": set(), "mla-decode": {"direct", "split", "auto"}}
# The prefill path takes a wgmma kernel for head dim 128 with 16-bit or fp8
# K/V, for head dim 64 with 16-bit K/V, and for head dim 256 with 16-bit K/V
# and a query of the same dtype (the warp-specialised kernel), and no ALiBi
# (ALiBi runs on its CUDA-core kernel): the prefill-wgmma family's cases,
# and those of the families made after it with its values.
WGMMA_KV = {"F16", "BF16", "F8_E4M3", "F8_E5M2"}
WGMMA_KV_16 = {"F16", "BF16"}
GPU_PATHS = {"direct", "split", "auto", "prefill", "fmha"}


def takes_wgmma(kv, dim, alibi, q):
    if alibi:
        return False
    return ((kv in WGMMA_KV and dim == "128") or (kv in WGMMA_KV_16 and dim == "64") or
            (kv in WGMMA_KV_16 and dim == "256" and q == kv))


def geometry_takes_wgmma(geometry):
    """A fixed case's geometry line ("... d64, bs16, q BF16, kv BF16, ..."):
    whether its values are the wgmma kernels'."""
    dim = re.search(r"\bd(\d+)(?:/(\d+))?\b", geometry)
    kv = re.search(r"\bkv (\w+)", geometry)
    q = re.search(r"\bq (\w+)", geometry)
    if not dim or not kv or (dim.group(2) and dim.group(2) != dim.group(1)):
        return False
    return takes_wgmma(kv.group(1), dim.group(1), "alibi" in geometry.lower(), q.group(1) if q else None)


def read_list(path):
    families = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and all(t in FAMILY_PATHS for t in parts[1].split(",")):
                families[parts[0]] = set(parts[1].split(","))
                axes = dict(t.split("=", 1) for t in parts[2:] if "=" in t)
                if "mla" in families[parts[0]] and axes.get("mode") == "decode":
                    families[parts[0]].add("mla-decode")
                if not axes:
                    families[parts[0]].add("fixed")  # no axis values listed: read the report's geometry
                elif takes_wgmma(axes.get("kv_dtype"), axes.get("head_dim"), axes.get("alibi") == "on",
                                 axes.get("q_dtype")):
                    families[parts[0]].add("wgmma-values")
    return families


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    mma = "--mma" in argv[3:]
    families = read_list(argv[1])
    with open(argv[2]) as f:
        report = json.load(f)
    problems = []
    cases = {c["name"]: c for c in report["cases"]}
    missing = sorted(set(families) - set(cases))
    if missing:
        problems.append(f"cases of the suite missing from the report: {', '.join(missing)}")
    hopper = any("wgmma" in (p.get("plan") or "") for c in report["cases"] for p in c["paths"])
    for name, fam in families.items():
        case = cases.get(name)
        if case is None:
            continue
        expected = set().union(*(FAMILY_PATHS.get(t, set()) for t in fam))
        for p in case["paths"]:
            path, status = p["path"], p["status"]
            if path not in GPU_PATHS:
                continue
            if path in expected and status != "pass":
                problems.append(f"{name}: {path} is {status} ({p.get('reason', '')}), its family takes the case")
            if path not in expected and status != "n/a":
                problems.append(f"{name}: {path} is {status}, no family of it takes the case")
            if hopper and path == "prefill" and status == "pass":
                wgmma = "wgmma" in (p.get("plan") or "")
                want = ("prefill-wgmma" in fam or "wgmma-values" in fam or
                        ("fixed" in fam and geometry_takes_wgmma(case.get("geometry", "")))) and not mma
                if wgmma != want:
                    problems.append(f"{name}: prefill ran {'wgmma' if wgmma else 'mma.sync'}, expected "
                                    f"{'wgmma' if want else 'mma.sync'}")
            if hopper and path == "fmha" and status == "pass" and ("wgmma" in (p.get("plan") or "")) == mma:
                problems.append(f"{name}: fmha plan '{p.get('plan')}' with --mma={mma}")
    for line in problems:
        print("check_suite_report:", line)
    print(f"check_suite_report: {len(families)} suite cases, {len(problems)} problems"
          f"{' (compute capability 9.0: kernel choice checked)' if hopper else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
