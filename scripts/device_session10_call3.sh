#!/usr/bin/env bash
# Session 10, third device call (about 3 minutes), carrying build-s10c3:
# pagecheck and test_gpu_decode of the tree with the lean decode copy the
# default (build-pending), decode_roof (the decode probe with its `roof`
# mode) and external.tgz (libpagecheck_flashinfer.so of build-fi).
#   1. decode_roof roof: the bench protocol's floor (an empty kernel) and a
#      read-only stream of each decode shape's bytes (issue 18's bound);
#   2. pagecheck bench --shapes decode (the lean copy in the product);
#   3. in parallel: test_gpu_decode; the FlashInfer check's one failure
#      (cover-072, ext:flashinfer_prefill) again with its bundle, reduced by
#      `pagecheck reduce`, and one-feature variants of its geometry.
# $OUT: summary.txt, call.tgz (everything).
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s10c3}
work=/tmp/s10c3
mkdir -p "$dest" "$work"
. scripts/device_steps.sh
BIN=/tmp/s10c3bin EXT=/tmp/s10c3ext unpack_carry build-s10c3
lib=/tmp/s10c3ext/examples/external/flashinfer/libpagecheck_flashinfer.so
summary="$dest/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$summary"
timeout 60 decode_roof roof 2>&1 | tee -a "$summary"
timeout 90 pagecheck bench --shapes decode --paths direct,split,auto --no-checks >"$work/bench_decode.log" 2>&1
echo "bench rc=$?" | tee -a "$summary"
grep -E "^decode|^  (direct|split|auto) |GB/s \(" "$work/bench_decode.log" | cut -c1-120 | tee -a "$summary"
(timeout 240 test_gpu_decode >"$work/test_gpu_decode.log" 2>&1; echo "test_gpu_decode rc=$? :: $(tail -2 "$work/test_gpu_decode.log" | tr '\n' ' ')" >"$work/tgd.txt") &
firun() { pagecheck run --kernel "$lib" --paths reference,prefill,ext:flashinfer_prefill --no-timing "$@"; }
firun --shard 71/154 --save-failing "$work/bundles" --json "$work/c72.json" >"$work/c72.log" 2>&1
echo "cover-072 rc=$?" | tee -a "$summary"
grep -E "prefill|fail" "$work/c72.log" | head -6 | cut -c1-260 | tee -a "$summary"
base=(--seqs 3 --seq-lens 255 256 257 --mode prefill --q-heads 8 --kv-heads 2 --head-dim 256 --block-size 256
  --non-causal --window 5 --softcap 4 --k-scale 0.6 --v-scale 1.7)
variant() {
  local tag=$1
  shift
  firun "$@" -q --json "$work/v_$tag.json" >"$work/v_$tag.log" 2>&1
  echo "variant $tag rc=$? :: $(grep -E "path runs|ext:flashinfer_prefill: |  prefill: " "$work/v_$tag.log" | head -3 | tr '\n' ' ' | cut -c1-230)" | tee -a "$summary"
}
variant base "${base[@]}"
variant nosoftcap "${base[@]}" --softcap 0
variant nowindow "${base[@]}" --window 0
variant window64 "${base[@]}" --window 64
variant d128 "${base[@]}" --head-dim 128
variant b16 "${base[@]}" --block-size 16
variant scales1 "${base[@]}" --k-scale 1 --v-scale 1
variant one257 "${base[@]}" --seqs 1 --seq-lens 257
variant len100 "${base[@]}" --seqs 1 --seq-lens 100
variant causal --seqs 3 --seq-lens 255 256 257 --mode prefill --q-heads 8 --kv-heads 2 --head-dim 256 --block-size 256 --window 5 --softcap 4 --k-scale 0.6 --v-scale 1.7
variant chunked "${base[@]}" --mode chunked --q-len 64
case_file=$(find "$work/bundles" -name "*.safetensors" | head -1)
echo "bundle: ${case_file:-none}" | tee -a "$summary"
if [ -n "$case_file" ]; then
  timeout 150 pagecheck reduce "$case_file" --kernel "$lib" --paths ext:flashinfer_prefill --max-tests 150 \
    -o "$work/c72.reduced.safetensors" >"$work/reduce.log" 2>&1
  echo "reduce rc=$?" | tee -a "$summary"
  tail -4 "$work/reduce.log" | cut -c1-260 | tee -a "$summary"
  pagecheck inspect "$work/c72.reduced.safetensors" 2>&1 | head -20 | tee -a "$summary"

fi
wait
cat "$work/tgd.txt" | tee -a "$summary"
(cd "$work" && tar czf "$dest/call.tgz" .)
