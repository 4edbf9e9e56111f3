#!/usr/bin/env bash
# Session 16's second call (on the machine the first left warm):
#   1. pagecheck beside its peers (scripts/device_bench_peers.sh: bench with
#      FlashInfer's entries through --kernel, bench_torch.py's cuDNN and
#      FlashAttention-2, interleaved twice), carrying build-fi/carry
#      (pagecheck.gz and external.tgz of scripts/device_flashinfer_check.sh
#      build 90);
#   2. the fp8 decode's 32-key stages against 16 (issue 18: E4M3 tokens/s
#      against BF16 at 64 x 4096 was 1.797x, target 1.8x): devbin/decode_probe
#      and devbin/decode_probe_k32 (scripts/build_decode_probe.sh
#      [-DPC_DECODE_TC_FP8_KEYS=32]) bench4t twice, interleaved, then the k32
#      probe's checks and memcheck on its small cases. PROBE=0 skips it;
#   3. the product with session 16's two kernel knobs on (build-s17:
#      pagecheck_new.gz, attn_sm90_ws.cu built with -DPAGECHECK_WS_FP8_K=1
#      -DPAGECHECK_WS_D64_WGS=3): the default suite through reference,
#      prefill and fmha (its FP8 prefill cases take FP8-K, its head-dim-64
#      ones three consumer warpgroups), the presets the same way, and the
#      prefill bench at head dim 64 and at 128 (BF16 and E4M3). NEWK=0
#      skips it.
# Each step runs when the carry holds its input (build-fi/carry, devbin,
# build-s17): the 64 MiB carry limit takes two of the three a call.
#   there: D=$OUT; OUT=/tmp/s16b PACK=$D scripts/device_s16_call2.sh   (carry e.g. build-fi/carry and build-s17)
# Logs in $OUT, packed into $PACK/s16b.tgz; summary.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-s16bout}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
(sleep "${WATCHDOG:-560}" && cd "$OUT" && tar czf "${PACK:-.}/s16b_partial.tgz" --exclude='*.tgz' .) &
watchdog=$!
if [ "${PEERS:-1}" = 1 ] && [ -f build-fi/carry/external.tgz ]; then
  OUT=$OUT/peers CARRY=build-fi/carry bash scripts/device_bench_peers.sh 2>&1 | tee "$OUT/peers_summary.txt" |
    tee -a "$OUT/summary.txt" >/dev/null
fi
if [ "${NEWK:-1}" = 1 ] && [ -f build-s17/pagecheck_new.gz ]; then
  gunzip -c build-s17/pagecheck_new.gz >/tmp/pagecheck_new && chmod +x /tmp/pagecheck_new
  export PATH="$PATH:/usr/local/cuda/bin" NO_COLOR=1
  timeout 240 /tmp/pagecheck_new run --paths reference,prefill,fmha --no-timing --require-gpu -q \
    --json "$OUT/newk_suite.json" >"$OUT/newk_suite.log" 2>&1
  echo "newk suite rc=$?: $(tail -3 "$OUT/newk_suite.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$OUT/summary.txt"
  timeout 120 /tmp/pagecheck_new run --preset gpt-oss-20b --preset phi3-mini --preset deepseek-v3 --preset mqa \
    --paths reference,prefill,fmha --no-timing --require-gpu -q --json "$OUT/newk_presets.json" >"$OUT/newk_presets.log" 2>&1
  echo "newk presets rc=$?: $(tail -3 "$OUT/newk_presets.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$OUT/summary.txt"
  for dk in 64:BF16 128:BF16 128:F8_E4M3; do
    d=${dk%%:*} kv=${dk##*:}
    timeout 120 /tmp/pagecheck_new bench --shapes prefill --head-dim "$d" --kv-dtype "$kv" --paths prefill --no-checks \
      >"$OUT/newk_bench_d${d}_$kv.log" 2>&1
    echo "newk bench d$d $kv rc=$?: $(grep -E 'TFLOP' "$OUT/newk_bench_d${d}_$kv.log" | tr -s ' ' | tr '\n' ';' | cut -c1-400)" |
      tee -a "$OUT/summary.txt"
  done
fi
if [ "${PROBE:-1}" = 1 ] && [ -d devbin ]; then
  chmod +x devbin/*
  for round in 1 2; do
    for b in decode_probe decode_probe_k32; do
      timeout 120 "devbin/$b" bench4t >"$OUT/${b}_bench4t_$round.log" 2>&1
      echo "== $b bench4t r$round rc=$?" | tee -a "$OUT/summary.txt"
      grep -E "GB/s|^[0-9]+x[0-9]+" "$OUT/${b}_bench4t_$round.log" | head -40 | tee -a "$OUT/summary.txt" >/dev/null
    done
  done
  timeout 200 devbin/decode_probe_k32 check >"$OUT/k32_check.log" 2>&1
  echo "k32 check rc=$?: $(grep -ciE 'fail' "$OUT/k32_check.log") fail lines; $(tail -1 "$OUT/k32_check.log")" |
    tee -a "$OUT/summary.txt"
  timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 devbin/decode_probe_k32 small \
    >"$OUT/k32_memcheck.log" 2>&1
  echo "k32 memcheck rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/k32_memcheck.log" | tail -1)" | tee -a "$OUT/summary.txt"
fi
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "${PACK:-.}/s16b.tgz" --exclude='*.tgz' .)
