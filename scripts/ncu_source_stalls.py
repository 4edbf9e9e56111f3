#!/usr/bin/env python3
"""Stall samples by SASS line from an Nsight Compute source page (CSV of
`ncu --import REP --page source --csv --print-source sass`): the total, the
instructions and top stall reasons per warp role where the kernel has
setmaxnreg marks (the warp-specialised prefill kernel: producer and
consumers), then the 60 lines with the most samples.
  scripts/ncu_source_stalls.py SOURCE.csv
Used by scripts/prefill_prof.sh and scripts/decode_stalls.sh."""
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
# The first line names the kernel (whose name may hold "Source"); the
# header is the row with a cell that is exactly "Source".
hdr_i = next((i for i, r in enumerate(rows) if "Source" in r), None)
if hdr_i is None:
    print("no header with a Source column; the first lines:")
    for r in rows[:6]: print(r[:12])
    sys.exit(0)
hdr = rows[hdr_i]
data = rows[hdr_i + 1:]
def col(name):
    for i, c in enumerate(hdr):
        if name in c: return i
    return None
src = col("Source"); allc = col("Warp Stall Sampling (All"); ni = col("Warp Stall Sampling (Not")
ex = col("Instructions Executed")
print("columns:", [c for c in hdr][:40])
def num(x):
    try: return float(x.replace(",", ""))
    except Exception: return 0.0
# ncu may print the SASS table twice (the same lines again): keep one copy.
again = next((k for k in range(1, len(data)) if data[k][:2] == data[0][:2]), None)
if again is not None and all(data[i][:2] == data[again + i][:2] for i in range(min(50, len(data) - again))):
    data = data[:again]
tot = sum(num(r[allc]) for r in data if allc is not None and len(r) > allc)
print("total stall samples", tot)
# By warp role: the producer's code starts at its setmaxnreg.dec
# (SETMAXREG.DEALLOC), the consumers' at their setmaxnreg.inc (TRY_ALLOC).
marks = sorted((i, "producer" if "DEALLOC" in r[1] else "consumers")
               for i, r in enumerate(data) if len(r) > 1 and "SETMAXREG" in r[1])
stall_cols = [i for i, c in enumerate(hdr) if c.startswith("stall_") and "Not Issued" not in c]
if len(marks) >= 2:
    for k, (start, role) in enumerate(marks):
        rows_ = data[start:marks[k + 1][0] if k + 1 < len(marks) else len(data)]
        inst = sum(num(r[ex]) for r in rows_ if ex is not None and len(r) > ex)
        samp = sum(num(r[allc]) for r in rows_ if len(r) > allc)
        reasons = sorted(((sum(num(r[j]) for r in rows_ if len(r) > j), hdr[j][6:]) for j in stall_cols), reverse=True)[:6]
        print(f"{role:9s} instructions {inst:.3e}  stall samples {samp / tot * 100:5.1f}%  " +
              " ".join(f"{n}:{v / tot * 100:.1f}" for v, n in reasons))
top = sorted(range(len(data)), key=lambda i: -num(data[i][allc]) if len(data[i]) > allc else 0)[:60]
for i in top:
    r = data[i]
    print(f"{i:6d} {num(r[allc]) / tot * 100:5.1f}% notissued {num(r[ni]) if ni is not None else 0:8.0f} exec {r[ex] if ex is not None else ''}  {r[src][:110]}")
