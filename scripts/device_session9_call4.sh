#!/usr/bin/env bash
# Session 9's fourth device call (at most about 9 minutes on an H100),
# carrying build-call4/carry: pagecheck, test_gpu_prefill, test_gpu_core of
# the tree with the lazy rescale as the default (gzip -9, stripped), and
# libsimple_decode.so / libpagecheck_misbehaving.so of
# `scripts/device_isolation_check.sh build 90` (the external-kernel side is
# unchanged since). Steps:
#   1. test_gpu_prefill (the default kernels, and PAGECHECK_WS_FP8=1),
#      test_gpu_core, the default suite through every built-in path, in
#      parallel; scripts/check_suite_report.py over the suite;
#   2. pagecheck bench --shapes prefill (the product's figures);
#   3. the first part of scripts/device_isolation_check.sh run (issue 19):
#      the clean run, then ENTRIES (default "oob_write trap spin") with
#      SIGTERM_STEPS=0, as far as 300 s allow.
# $OUT: summary.txt, call4.tgz.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s9c4}
mkdir -p "$dest"
work=/tmp/s9c4
mkdir -p "$work" /tmp/c4bin
for f in build-call4/carry/*.gz; do gunzip -c "$f" >"/tmp/c4bin/$(basename "$f" .gz)"; done
chmod +x /tmp/c4bin/*
export PATH="/tmp/c4bin:$PATH" NO_COLOR=1
summary="$dest/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$summary"
s() {  # s NAME CMD...
  local name=$1 t0=$SECONDS
  shift
  timeout 170 "$@" >"$work/$name.log" 2>&1
  echo "$name rc=$? ($((SECONDS - t0)) s) :: $(tail -2 "$work/$name.log" | tr '\n' ' ' | cut -c1-200)" | tee -a "$summary"
}
s tgp_default test_gpu_prefill &
PAGECHECK_WS_FP8=1 s tgp_ws_fp8 test_gpu_prefill &
s test_gpu_core test_gpu_core &
s suite pagecheck run --no-timing --require-gpu --json "$work/suite.json" &
wait
pagecheck run --list-suite >"$work/suite_list.txt" 2>&1
python3 scripts/check_suite_report.py "$work/suite_list.txt" "$work/suite.json" 2>&1 | tail -5 | tee -a "$summary"
timeout 60 pagecheck bench --shapes prefill --paths prefill,fmha --no-checks >"$work/bench_prefill.log" 2>&1
grep -E "^(prefill|chunked)-|TFLOP" "$work/bench_prefill.log" | grep -v "stage gather" | tee -a "$summary"
BUILD=build-call4 BIN=/tmp/c4bin OUT="$work/iso" ENTRIES="${ENTRIES:-oob_write trap spin}" SIGTERM_STEPS=0 \
  timeout -k 5 300 scripts/device_isolation_check.sh run >"$work/iso.log" 2>&1
echo "isolation rc=$?" | tee -a "$summary"
grep -E "^(PASS|FAIL|INFO)" "$work/iso/steps.txt" | tee -a "$summary"
(cd "$work" && tar czf "$dest/call4.tgz" .)
