#!/usr/bin/env python3
"""Each `pagecheck run --json` report's summary and exit code, then its
failing and erroring path runs (case, path, status, the reason's start).
  scripts/suite_failures.py REPORT.json ...
Used by the device scripts after their suite steps."""
import json
import sys

for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except Exception as e:
        print(path, "unreadable:", e)
        continue
    print(path, d["summary"], "exit", d["exit_code"])
    for c in d["cases"]:
        for p in c["paths"]:
            if p["status"] in ("fail", "error"):
                print("  ", c["name"], p["path"], p["status"], (p.get("reason") or "")[:150])
