#!/usr/bin/env bash
# The peers' bench sequence of issues 18 and 24, on the GPU machine, with
# `pagecheck` on PATH (scripts/device_s17_call.sh, device_s19_call.sh):
#   scripts/device_peer_benches.sh DIR SUMMARY
# 1. `pagecheck bench --shapes decode|prefill` and scripts/bench_torch.py
#    interleaved twice (pagecheck, peers, pagecheck, peers): cuDNN's rounds
#    move by up to 30%, so each peer is compared with its better round.
#    DECODE_TMA=1: each round also runs the decode bench with
#    PAGECHECK_DECODE_TMA=1 (the direct and auto kernels' tensor copies),
#    right after the default one (dectma1.json, dectma2.json).
# 2. The prefill bench at head dim 64 and with an E4M3 cache, the decode
#    bench with an E4M3 cache and at block size 1.
# PEER_KERNEL=FILE (libpagecheck_flashinfer.so, scripts/device_flashinfer_check.sh
# build): the decode and prefill rounds also run FlashInfer's entries
# (ext:flashinfer_decode, ext:flashinfer_prefill) through `--kernel`, in
# the same bench, as issues 18 and 24 ask.
# Each step's log and JSON report in DIR, a line per step and
# scripts/bench_summary.py's table appended to SUMMARY.
set -u
cd "$(dirname "$0")/.."
dir=$1
summary=$2
mkdir -p "$dir"
b() {  # b NAME ARGS...: one timed step, its log and a line in the summary
  local name=$1
  shift
  timeout 150 "$@" >"$dir/$name.log" 2>&1
  echo "$name rc=$?" >>"$summary"
}
kargs=()
dec_paths=direct,split,auto
pre_paths=prefill,fmha
if [ -n "${PEER_KERNEL:-}" ]; then
  kargs=(--kernel "$PEER_KERNEL")
  dec_paths=$dec_paths,ext:flashinfer_decode,ext:flashinfer_prefill
  pre_paths=$pre_paths,ext:flashinfer_prefill
fi
for r in 1 2; do
  b dec$r pagecheck bench --shapes decode --paths "$dec_paths" "${kargs[@]}" --no-checks --json "$dir/dec$r.json"
  if [ "${DECODE_TMA:-0}" = 1 ]; then
    b dectma$r env PAGECHECK_DECODE_TMA=1 pagecheck bench --shapes decode --paths direct,split,auto --no-checks \
      --json "$dir/dectma$r.json"
  fi
  b pre$r pagecheck bench --shapes prefill --paths "$pre_paths" "${kargs[@]}" --no-checks --json "$dir/pre$r.json"
  b torch$r python3 scripts/bench_torch.py --shapes all
done
b pre_d64 pagecheck bench --shapes prefill --head-dim 64 --paths prefill --no-checks --json "$dir/pre_d64.json"
b pre_e4m3 pagecheck bench --shapes prefill --kv-dtype F8_E4M3 --paths prefill --no-checks --json "$dir/pre_e4m3.json"
b dec_e4m3 pagecheck bench --shapes decode --kv-dtype F8_E4M3 --paths direct,split,auto --no-checks \
  --json "$dir/dec_e4m3.json"
b dec_bs1 pagecheck bench --shapes decode --block-size 1 --paths direct,split,auto --no-checks \
  --json "$dir/dec_bs1.json"
python3 scripts/bench_summary.py "$dir" >>"$summary" 2>&1
