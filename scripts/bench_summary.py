#!/usr/bin/env python3
"""One line per (report, case, path, stage) of the `pagecheck bench --json`
reports in a folder: median ms, GB/s and TFLOP/s; then the cuDNN and
FlashAttention-2 lines of the bench_torch.py logs beside them.

    scripts/bench_summary.py DIR
"""
import json
import pathlib
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = pathlib.Path(sys.argv[1])
    reports = sorted(folder.glob("*.json"))
    if not reports:
        print(f"no bench reports in {folder}", file=sys.stderr)
        return 1
    for report in reports:
        try:
            data = json.loads(report.read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"{report.name}: unreadable ({e})")
            continue
        for case in data.get("cases", []):
            for path in case.get("paths", []):
                for t in path.get("timings", []):
                    ms = t.get("median_ms")
                    gbs = t.get("gb_per_s")
                    tf = t.get("tflop_per_s")
                    print(f"{report.stem:10} {case.get('name', '?'):22} {path.get('path', '?'):8} "
                          f"{t.get('stage', '?'):7} {ms if ms is None else round(ms, 4)} ms "
                          f"{gbs if gbs is None else round(gbs)} GB/s "
                          f"{tf if tf is None else round(tf, 1)} TFLOP/s")
    for log in sorted(folder.glob("torch*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "cudnn" in line or "flash2 " in line:
                print(f"{log.stem:10} {line.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
