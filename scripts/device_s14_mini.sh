#!/usr/bin/env bash
# Session 14's last device call, for when little device time is left: the
# MLA wgmma kernel's GPU tests (test_gpu_decode's latent cases), memcheck
# over a small 128-head latent case at block 7, and its time at 64 x 4096,
# 128 heads, block 64 (BF16). Carries build-pending/carry
# (scripts/device_s14_call2.sh pack); logs under $OUT/m.
set -u
cd "$(dirname "$0")/.."
. scripts/device_steps.sh
BIN=/tmp/minibin
unpack_carry build-pending/carry
mkdir -p "$OUT/m"
(timeout "${TEST_LIMIT:-90}" test_gpu_decode -tc='*latent*' >"$OUT/m/test_gpu_decode_latent.log" 2>&1
 echo "test_gpu_decode latent rc=$? :: $(tail -2 "$OUT/m/test_gpu_decode_latent.log" | tr '\n' ' ')" >"$OUT/m/tgd.txt") &
timeout 60 pagecheck run --mla --q-heads 128 --seqs 64 --seq-len 4096 --block-size 64 --mode decode \
  --paths direct,split,auto --no-checks >"$OUT/m/mla.log" 2>&1
echo "mla 64 x 4096 x 128 heads rc=$?"
grep -E '^ +(direct|split|auto) ' "$OUT/m/mla.log"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 pagecheck run --no-timing --require-gpu --mla \
  --q-heads 128 --kv-dtype BF16 --seqs 3 --seq-lens 1 65 300 --block-size 7 --paths reference,direct,split,auto \
  >"$OUT/m/memcheck_mla.log" 2>&1
echo "memcheck mla rc=$? :: $(grep -E 'ERROR SUMMARY|path runs' "$OUT/m/memcheck_mla.log" | tr '\n' ' ')"
wait
cat "$OUT/m/tgd.txt"
grep -E "ERROR|CHECK" "$OUT/m/test_gpu_decode_latent.log" | head -20
