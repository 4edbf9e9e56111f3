#!/usr/bin/env bash
# Device-side A/B of prefill/FMHA kernel variants built by
# scripts/build_prefill_dev.sh (build-sm90dev/prefill_dev_NAME):
#   scripts/prefill_ab_run.sh NAME...    (logs under $OUT)
# The first NAME is the candidate: the dev driver's checks (float64
# reference, unwritten outputs, repeats, graph replay; block sizes 1-256,
# windows, softcap, GQA, dtypes, layouts) with the default loaders and with
# the row producer forced, and its small suite under memcheck, racecheck and
# synccheck (SAN=0 skips them). Carry build-ab (gzip -9 of each binary) or
# build-sm90dev. Then `prefill_dev quick` of every NAME in
# turn, twice (A B A B): prefill and fmha at the bench shapes, blocks 16/64
# (and 8 / 1 at 8 x 2048), TFLOP/s; QUICK=0 skips that (checks only);
# MODE=dims or MODE=fp8 times the dev driver's head-dim-64 or E4M3 shapes
# instead.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-devout}
mkdir -p "$out"
mkdir -p build-sm90dev
for n in "$@"; do  # carried gzipped in build-ab (64 MiB carry limit), or built here
  [ -f "build-ab/prefill_dev_$n.gz" ] && gunzip -c "build-ab/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n"
  chmod +x "build-sm90dev/prefill_dev_$n"
done
cand=build-sm90dev/prefill_dev_$1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 200 "$cand" check >"$out/check_default.log" 2>&1 &
PAGECHECK_WS_TMA_MIN=1024 timeout 200 "$cand" check >"$out/check_rows.log" 2>&1 &
wait
for v in default rows; do echo "check $v: $(grep -c FAIL "$out/check_$v.log") FAIL lines; $(tail -1 "$out/check_$v.log")"; done
grep -h FAIL "$out"/check_*.log | head -5
if [ "${SAN:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$cand" small >"$out/san_$tool.log" 2>&1 &
  done
  wait
  for tool in memcheck racecheck synccheck; do
    echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/san_$tool.log" | tail -1)"
  done
fi
[ "${QUICK:-1}" = 1 ] || exit 0
for round in 1 2; do
  for n in "$@"; do
    echo "== $n (round $round)"
    timeout 100 "build-sm90dev/prefill_dev_$n" "${MODE:-quick}" 2>&1 | tee "$out/${MODE:-quick}_${n}_$round.log" |
      grep -E "TFLOP|FAIL|rror"
  done
done
