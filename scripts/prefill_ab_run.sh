#!/usr/bin/env bash
# Device-side A/B of the warp-specialised prefill kernel's dev knobs
# (kernels/src/attn_sm90_ws.cu): checks with the default choices and with
# the row producer for every page size, then `prefill_dev quick` (the
# bench shapes at block 16 and 64, prefill and fmha) per variant.
# Build as scripts/prefill_dev_run.sh says; run from the folder holding
# build-sm90dev: scripts/prefill_ab_run.sh   (logs under $OUT)
set -u
cd "$(dirname "$0")/.."
out=${OUT:-devout}
mkdir -p "$out"
bin=build-sm90dev/prefill_dev
chmod +x "$bin"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 200 "$bin" check >"$out/check_default.log" 2>&1; echo "check default rc=$? $(tail -1 "$out/check_default.log")"
PAGECHECK_WS_TMA_MIN=1024 timeout 200 "$bin" check >"$out/check_rows.log" 2>&1; echo "check rows rc=$? $(tail -1 "$out/check_rows.log")"
grep -h FAIL "$out"/check_*.log | head -5
run() {
  local name=$1; shift
  echo "== $name"
  env "$@" timeout 100 "$bin" quick 2>&1 | tee "$out/quick_$name.log" | grep -E "TFLOP|FAIL|error"
}
run default
run rows16 PAGECHECK_WS_TMA_MIN=32
run v3 PAGECHECK_ATTN_KERNEL=wgmma
run default2
