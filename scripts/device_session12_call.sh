#!/usr/bin/env bash
# Session 12's one call (about 8 minutes), carrying build-soak/carry
# (pagecheck, libsimple_decode{,_faulty}.so) and build-s12 (test_gpu_decode
# gzipped; bundles.tgz: the six bundles session 11's built-in soak saved).
# Checks the fixes of what that soak found (docs/performance.md, session 11):
#   1. test_gpu_decode (the merge CTA's groups now follow the sequence's own
#      partitions; the new batch-invariance test under fixed plans);
#   2. the six bundles replayed through their paths: expected exit 0 now
#      (216/465 split batch invariance; 280 prefill F32 with logits ~312,
#      the logit-scaled atol; 528 direct/split/auto, the 2^-102 row floor);
#   3. pagecheck bench --shapes decode (the merge change must not move it);
#   4. issue 21's soak on the built-in paths, 5 minutes, seed 1: expected
#      exit 0;
#   5. the soak on the faulty example kernel, 1 minute: expected exit 1
#      (session 11 exited 3 on case 1664, refused by the generator).
# $OUT: summary.txt, logs.tgz.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s12}
OUT=/tmp/s12out
mkdir -p "$dest" "$OUT"
: >"$OUT/steps.txt"
. scripts/device_steps.sh
BIN=/tmp/s12bin
unpack_carry build-s12
cp build-soak/carry/*.so "$BIN/" && gunzip -c build-soak/carry/pagecheck.gz >"$BIN/pagecheck" && chmod +x "$BIN/pagecheck"
summary="$dest/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$summary"
line() { echo "$1" | tee -a "$summary"; }

# The new batch-invariance test and the merge's many-partition cases (the
# soak below runs split and auto against the reference on ~1000 cases).
step test_gpu_decode 120 test_gpu_decode -tc='*batch-invariant*,*long context*,*small partitions*'
line "test_gpu_decode rc=$? :: $(grep -E 'assertions|Status' "$OUT/test_gpu_decode.log" | tr '\n' ' ')"

mkdir -p "$OUT/bundles" && tar xzf build-s12/bundles.tgz -C "$OUT/bundles"
for b in "$OUT"/bundles/*/; do
  n=$(basename "$b")
  path=${n##*-}
  plan=$(grep -o -- '--plan [^ ]*' "$b/command.txt" || true)
  # shellcheck disable=SC2086
  timeout 60 pagecheck replay "$b/case.safetensors" --paths "$path" $plan --require-gpu --check-batch-invariance \
    --no-timing >"$OUT/replay_$n.log" 2>&1
  line "replay $n ($path $plan) rc=$? :: $(grep -E '^ +'"$path"' ' "$OUT/replay_$n.log" | head -1 | cut -c1-160)"
done

step soak_faulty 200 pagecheck soak --minutes 1 --seed 1 --first-case 1600 --require-gpu \
  --kernel "$BIN/libsimple_decode_faulty.so" --kernel "$BIN/libsimple_decode.so" \
  --paths ext:simple_decode_stale_key,ext:simple_decode_no_lse,ext:simple_decode \
  --json "$OUT/soak_faulty.json" --save-failing "$OUT/soak_faulty_failures"
line "soak_faulty rc=$? (expected 1) :: $(grep -o 'soak: seed.*' "$OUT/soak_faulty.log" | tail -1)"
grep -h '^signature' "$OUT"/soak_faulty_failures/*/soak.txt | sort | uniq -c | tee -a "$summary" >/dev/null
grep -h '^simplified' "$OUT"/soak_faulty_failures/*/soak.txt | sort | uniq -c | head -5 | tee -a "$summary" >/dev/null

step bench_decode 90 pagecheck bench --shapes decode --paths direct,split,auto --no-checks
line "bench decode: $(awk '/^decode-/ {s=$1} /^  [a-z]+ +pass/ {p=$1} /GB\/s/ && !/stage/ && p != "" {printf "%s %s %s; ", s, p, $1; p = ""}' "$OUT/bench_decode.log")"

step soak_builtin 420 pagecheck soak --minutes 5 --seed 1 --require-gpu \
  --paths reference,direct,split,auto,prefill,fmha --json "$OUT/soak_builtin.json" \
  --save-failing "$OUT/soak_builtin_failures"
line "soak_builtin rc=$? (expected 0) :: $(grep -o 'soak: seed.*' "$OUT/soak_builtin.log" | tail -1)"
grep -A20 '^failed' "$OUT/soak_builtin.log" | head -20 | tee -a "$summary" >/dev/null

(cd "$OUT" && tar czf "$dest/logs.tgz" --exclude='*.safetensors' .)
