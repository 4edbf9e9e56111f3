#!/usr/bin/env python3
"""Mutation table from run.sh's step results.

usage: summarize.py WORK_OUT FINAL PATCH_DIR

WORK_OUT holds NAME.KIND.{rc,json,log} for each step (KIND suite, huge,
racecheck); PATCH_DIR the patches, whose header lines give what each mutant
is expected to break ("# mutant", "# paths", "# check", "# extra"). Writes
FINAL/table.txt (also printed) and FINAL/table.json. A mutant is killed when
one of its steps exits non-zero with failures the control does not have
(compared by case and path), or hangs past its timeout.
"""
import json
import pathlib
import re
import sys


def tags_of(row):
    """What failed in one path row of a pagecheck JSON report."""
    tags = []
    if row.get("status") == "error":
        tags.append("error: " + (row.get("reason") or "")[:90])
        return tags
    if (row.get("mismatches") or 0) > 0:
        tags.append("output NaN" if (row.get("nonfinite") or 0) > 0 else "output")
    lse = row.get("lse") or {}
    if (lse.get("mismatches") or 0) > 0:
        tags.append("LSE NaN" if (lse.get("nonfinite") or 0) > 0 else "LSE")
    if (row.get("unwritten") or 0) > 0:
        tags.append("unwritten")
    for f in (row.get("checks") or {}).get("failures") or []:
        if "not bitwise repeatable" in f:
            tags.append("repeatability")
        elif "graph replay differs" in f:
            tags.append("graph replay")
        elif "after changing the table" in f and "unwritten" in f:
            tags.append("graph: unwritten")
        elif "did not reach" in f:
            tags.append("graph: changes unseen")
        elif f.startswith("LSE:") and "unwritten" in f:
            tags.append("LSE unwritten")
        elif "mismatch" in f or "beyond" in f or "left unwritten" in f or "elements, expected" in f:
            pass  # the output/LSE/unwritten reasons, already counted above
        else:
            tags.append(f[:60])
    if not tags and row.get("status") == "fail":
        tags.append((row.get("reason") or "fail")[:60])
    return sorted(set(tags))


def failures(report):
    """{(case, path): (tags, reason)} for every failing or erroring path."""
    out = {}
    for case in report.get("cases", []):
        for row in case.get("paths", []):
            if row.get("status") in ("fail", "error"):
                out[(case.get("name"), row.get("path"))] = (tags_of(row), row.get("reason") or "")
    return out


def load_step(work, name, kind):
    rc_file = work / f"{name}.{kind}.rc"
    if not rc_file.exists():
        return None
    rc, seconds = (rc_file.read_text().split() + ["0"])[:2]
    step = {"kind": kind, "rc": int(rc), "seconds": int(seconds), "failures": {}, "note": ""}
    js = work / f"{name}.{kind}.json"
    if js.exists():
        try:
            report = json.loads(js.read_text())
            step["failures"] = failures(report)
            s = report.get("summary", {})
            step["note"] = f"{s.get('cases')} cases, {s.get('pass')} pass, {s.get('fail')} fail, {s.get('error')} error"
        except (ValueError, OSError) as e:
            step["note"] = f"unreadable JSON: {e}"
    log = work / f"{name}.{kind}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    for key in ("test cases:", "assertions:"):
        found = [ln for ln in text.splitlines() if key in ln]
        if found:
            step["note"] += " " + re.sub(r"\s+", " ", found[-1].replace("[doctest]", "")).strip()
    m = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text)
    if m:
        step["note"] += f"; racecheck: {m.group(2)} errors, {m.group(3)} warnings"
    if step["rc"] == 125:
        step["note"] += "; not run: the device-call budget was spent"
    elif step["rc"] in (124, 137):
        step["note"] += f"; timed out after {seconds} s"
    elif step["rc"] not in (0, 1) and not step["failures"]:
        tail = " ".join(text.strip().splitlines()[-2:])[:160]
        step["note"] += f"; rc {step['rc']}: {tail}"
    return step


def header(patch):
    info = {"mutant": "", "paths": "", "check": "", "extra": ""}
    for line in patch.read_text().splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(":")
        if key in info:
            info[key] = value.strip()
    return info


def summarize_step(step, control_step):
    """Failures of a mutant step that the control's same step does not have."""
    base = control_step["failures"] if control_step else {}
    # Where the control fails the same case and path, only what it does not
    # show counts (e.g. an extra failed check on top of the same mismatch).
    new = {}
    for k, (tags, reason) in step["failures"].items():
        extra = [t for t in tags if t not in base[k][0]] if k in base else tags
        if extra:
            new[k] = (extra, reason)
    by_path = {}
    for (case, path), (tags, _) in sorted(new.items()):
        entry = by_path.setdefault(path, {"cases": [], "tags": set()})
        entry["cases"].append(case)
        entry["tags"].update(tags)
    control_rc = control_step["rc"] if control_step else 0
    # A hang, a crash, an error exit or sanitizer hazards (rc 9) without
    # failing paths count when the control's same step did not end that way.
    abnormal = step["rc"] in (124, 137) or (step["rc"] not in (0, 1, 125) and not step["failures"])
    killed = bool(new) or (abnormal and step["rc"] != control_rc)
    return killed, new, by_path


def main():
    work, final, patch_dir = (pathlib.Path(a) for a in sys.argv[1:4])
    final.mkdir(parents=True, exist_ok=True)
    names = sorted({p.name.split(".")[0] for p in work.glob("*.rc")})
    control = {k: load_step(work, "00-control", k) for k in ("suite", "huge", "racecheck")}
    for t in [n for n in names if n.startswith("test_gpu_")]:
        control[t] = load_step(work, t, "test")
    rows, lines = [], []
    ok_control = all(s is None or (s["rc"] == 0 and not s["failures"]) for s in control.values())
    lines.append("control:")
    lines.extend(f"  {k} rc={s['rc']} ({s['note'].strip('; ')}, {s['seconds']} s)" for k, s in control.items() if s)
    if not ok_control:
        lines.append("CONTROL FAILED: a mutant counts as killed only by failures the control does not have")
        for k, s in control.items():
            for (case, path), (tags, reason) in sorted((s or {}).get("failures", {}).items()):
                lines.append(f"  control {k}: {case} / {path}: {', '.join(tags)}: {reason[:150]}")
    killed_count = 0
    for name in names:
        if name == "00-control" or name.startswith("test_gpu_"):
            continue
        patch = patch_dir / f"{name}.patch"
        info = header(patch) if patch.exists() else {"mutant": "", "paths": "", "check": "", "extra": ""}
        steps = {k: load_step(work, name, k) for k in ("suite", "huge", "racecheck")}
        row = {"mutant": name, "expected_paths": info["paths"], "expected_check": info["check"],
               "steps": {}, "killed": False}
        descr = []
        for kind, step in steps.items():
            if step is None:
                continue
            killed, new, by_path = summarize_step(step, control.get(kind))
            row["killed"] |= killed
            row["steps"][kind] = {
                "rc": step["rc"], "seconds": step["seconds"], "note": step["note"], "killed": killed,
                "failing": {p: {"cases": e["cases"], "tags": sorted(e["tags"])} for p, e in by_path.items()},
                "reasons": {f"{c} / {p}": v[1][:300] for (c, p), v in list(new.items())[:12]},
            }
            what = "; ".join(f"{p}: {', '.join(sorted(e['tags']))} ({len(e['cases'])} cases: "
                             f"{', '.join(e['cases'][:3])}{'...' if len(e['cases']) > 3 else ''})"
                             for p, e in by_path.items())
            if not what:
                what = step["note"].strip("; ") if killed or step["rc"] not in (0, 1) else "nothing failed"
            descr.append(f"{kind} rc={step['rc']}: {what}")
        killed_count += row["killed"]
        rows.append(row)
        lines.append(f"{'KILLED  ' if row['killed'] else 'SURVIVED'} {name}")
        lines.append(f"         expected: {info['paths']} / {info['check']}")
        for d in descr:
            lines.append(f"         {d}")
    total = len(rows)
    lines.append(f"mutation score: {killed_count} / {total} killed" + ("" if ok_control else " (control failed)"))
    text = "\n".join(lines) + "\n"
    (final / "table.txt").write_text(text)
    (final / "table.json").write_text(json.dumps({"control_ok": ok_control, "control": {
        k: {"rc": s["rc"], "note": s["note"], "seconds": s["seconds"],
            "failures": [f"{c} / {p}: {', '.join(t)}" for (c, p), (t, _) in s["failures"].items()]}
        for k, s in control.items() if s}, "killed": killed_count, "total": total, "mutants": rows}, indent=1))
    print(text, end="")


if __name__ == "__main__":
    main()
