#!/usr/bin/env bash
# Session 13, call 3: issue 23's head sizes (32, 80, 96, 112, 120) on the
# CUDA-core kernels of direct, split, auto and prefill, and head dim 64 with
# two K/V stages (the new default), on the binaries of this tree.
#   here:  ninja -C build-pending pagecheck test_gpu_prefill test_gpu_decode test_gpu_core
#          scripts/device_s13_call3.sh pack      (xz into build-pending/carry)
#   there: D=$OUT; OUT=/tmp/c3 PACK=$D scripts/device_s13_call3.sh run
# Steps: test_gpu_decode, test_gpu_prefill, test_gpu_core; the covering
# suite through every built-in path (default plan, and split:64:100 through
# the decode paths) and check_suite_report; memcheck and racecheck over the
# head-size test cases; pagecheck bench at head dims 64 (prefill), 96 and
# 80 (decode), and the decode shapes at 128. Logs and summary.txt in $OUT.
set -u
cd "$(dirname "$0")/.."
build=${BUILD:-build-pending}
case "${1:-run}" in
  pack)
    rm -rf "$build/carry" && mkdir -p "$build/carry"
    for f in app/pagecheck tests/gpu/test_gpu_prefill tests/gpu/test_gpu_decode tests/gpu/test_gpu_core; do
      strip -o "$build/carry/$(basename "$f")" "$build/$f" && xz -9 -T2 "$build/carry/$(basename "$f")" || exit 4
    done
    ls -la "$build/carry"
    exit 0
    ;;
  run) ;;
  *) echo "usage: $0 pack | run" >&2; exit 2 ;;
esac
. scripts/device_steps.sh
OUT=${OUT:-c3out}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
BIN=/tmp/c3bin
unpack_carry "$build/carry"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
s() {  # s NAME CMD...: one line per step in summary.txt
  local name=$1
  shift
  timeout "${LIMIT:-240}" "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? :: $(tail -2 "$OUT/$name.log" | tr '\n' ' ' | cut -c1-200)" | tee -a "$OUT/summary.txt"
}
s test_gpu_decode test_gpu_decode &
s test_gpu_prefill test_gpu_prefill &
s test_gpu_core test_gpu_core &
s suite pagecheck run --no-timing --require-gpu --json "$OUT/suite.json" &
s suite_split64 pagecheck run --paths reference,direct,split,auto --plan split:64:100 --no-timing --require-gpu \
  --json "$OUT/suite_split64.json" &
s memcheck_decode compute-sanitizer --tool memcheck --error-exitcode 9 test_gpu_decode -tc="decode: head sizes*" &
s memcheck_prefill compute-sanitizer --tool memcheck --error-exitcode 9 test_gpu_prefill -tc="prefill: head sizes*" &
wait
s racecheck_decode compute-sanitizer --tool racecheck --error-exitcode 9 test_gpu_decode -tc="decode: head sizes*"
pagecheck run --list-suite >"$OUT/suite_list.txt" 2>&1
python3 scripts/check_suite_report.py "$OUT/suite_list.txt" "$OUT/suite.json" 2>&1 | tail -5 | tee -a "$OUT/summary.txt"
python3 - "$OUT/suite.json" "$OUT/suite_split64.json" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys
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
PY
# Alone on the GPU: the benches.
timeout 60 pagecheck bench --shapes prefill --paths prefill --no-checks --head-dim 64 >"$OUT/bench_d64.log" 2>&1
echo "bench prefill d64: $(awk '/^(prefill|chunked)-/ {s=$1} / TFLOP\/s/ && s != "" {for (i = 1; i <= NF; i++) if ($i ~ /TFLOP/) t = $(i - 1); printf "%s %s; ", s, t; s = ""}' "$OUT/bench_d64.log")" |
  tee -a "$OUT/summary.txt"
for d in 128 96 80; do
  timeout 90 pagecheck bench --shapes decode --paths direct,split,auto --no-checks --head-dim $d >"$OUT/bench_decode_d$d.log" 2>&1
  echo "bench decode d$d: $(awk '/^decode-/ {s=$1} /^  [a-z]+ +pass/ {p=$1} /GB\/s/ && !/stage/ && p != "" {printf "%s %s %s; ", s, p, $1; p = ""}' "$OUT/bench_decode_d$d.log")" |
    tee -a "$OUT/summary.txt"
done
(cd "$OUT" && tar czf "${PACK:-.}/c3.tgz" --exclude=c3.tgz .)
