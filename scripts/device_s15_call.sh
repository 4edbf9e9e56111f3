#!/usr/bin/env bash
# Session 15's call: issue 23's done-when and issue 21's five-minute soak in
# one device call, on the binaries of scripts/mutants/build.sh (the control
# is pagecheck at the commit the mutants were built from).
#   here:  scripts/mutants/build.sh 28 29 30 32 34 35 36   (build-mutants/carry)
#          scripts/build_prefill_dev.sh uN -DPAGECHECK_WS_FP8_UNITS=N (N = 1, 2, 4),
#          gzip -9 into build-ab/prefill_dev_uN.gz
#   there: D=$OUT; OUT=/tmp/s15 PACK=$D scripts/device_s15_call.sh   (carry build-mutants/carry, build-ab)
# Steps. First, alone: the FP8 prefill A/B below; the latent (MLA) decode bench at 64 x 4096 with 128
# query heads (the wgmma kernel; auto's plan, direct since this session).
# Then at once: scripts/mutants/run.sh on the issue-23 mutants (ONLY, the
# control's suite and GPU tests; PATHS without fmha, which no mutant of the
# list touches), `soak --minutes 5` on the built-in paths
# (device_soak_check.sh's builtin step, its device memory capped), the
# issue-23 presets through every path (deepseek-v3 also at decode, where
# the MLA kernel takes it), and record_features_check.py (cases recorded
# by PyTorch, replayed), and the A/B candidates' dev-driver checks under
# the sanitizers. Logs and summary.txt in $OUT, packed into
# $PACK/s15.tgz (s15_partial.tgz at WATCHDOG seconds).
# Knobs: MPATHS (the suite's paths for run.sh; default all but fmha), AB (the dev drivers timed), AB_ROUNDS (2), AB_LIMIT (60 s a run),
# AB_CHECK (those checked), DIMS / DIMS_CHECK (dev drivers timed in `dims`
# mode after the FP8 A/B / checked beside the others; none by default), SOAK=0 (no soak), MUTANTS=0 (no run.sh), ONLY (the mutants), BUDGET (run.sh's seconds, default 380),
# SOAK_MINUTES (default 5), WATCHDOG (default 570), PAGECHECK_GZ (a gzipped
# pagecheck to use instead of the mutants' control, e.g.
# build-fi/carry/pagecheck.gz, for a call that carries no mutants),
# PRESETS=0, RECORD=0, MLA=0 (skip those steps), AB_SAN=0 (the dev
# drivers' checks without the sanitizers).
set -u
cd "$(dirname "$0")/.."
. scripts/device_steps.sh
OUT=${OUT:-s15out}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
BIN=/tmp/s15bin
mkdir -p "$BIN"
if [ -n "${PAGECHECK_GZ:-}" ]; then  # a short call without the mutants (MUTANTS=0): pagecheck alone
  gunzip -c "$PAGECHECK_GZ" >"$BIN/pagecheck" && chmod +x "$BIN/pagecheck" || exit 4
else
  tar -C "$BIN" -xJf build-mutants/carry/binaries.tar.xz || exit 4
  ln -sf "$BIN/00-control" "$BIN/pagecheck"
fi
export PATH="$BIN:$PATH:/usr/local/cuda/bin" NO_COLOR=1
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
(sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "${PACK:-.}/s15_partial.tgz" --exclude='*.tgz' .) &
watchdog=$!

# FP8 prefill staging units (PAGECHECK_WS_FP8_UNITS: 1, the scheme of
# before, against 2 and 4): the dev driver's E4M3 shapes (BF16 beside),
# two rounds A B C A B C, alone on the GPU. build-ab carries the gzipped
# drivers (scripts/build_prefill_dev.sh uN -DPAGECHECK_WS_FP8_UNITS=N).
mkdir -p build-sm90dev "$OUT/ab"
for n in $(printf '%s\n' ${AB-u1 u2 u4} ${DIMS-} | sort -u); do
  gunzip -c "build-ab/prefill_dev_$n.gz" >"build-sm90dev/prefill_dev_$n" && chmod +x "build-sm90dev/prefill_dev_$n"
done
for round in $(seq 1 "${AB_ROUNDS:-2}"); do
  for n in ${AB-u1 u2 u4}; do
    timeout "${AB_LIMIT:-60}" "build-sm90dev/prefill_dev_$n" fp8 >"$OUT/ab/fp8_${n}_$round.log" 2>&1
    echo "fp8 $n r$round: $(grep -E 'TFLOP' "$OUT/ab/fp8_${n}_$round.log" | awk '{printf "%s ", $0}' | tr -s ' ' | cut -c1-400)" |
      tee -a "$OUT/summary.txt"
  done
done

# Head dim 64 (DIMS: `prefill_dev dims` of each, d128 beside; e.g. u1, the
# two-warpgroup baseline, and d64w3, three consumer warpgroups), two rounds.
for round in $(seq 1 "${AB_ROUNDS:-2}"); do
  for n in ${DIMS-}; do
    timeout "${AB_LIMIT:-60}" "build-sm90dev/prefill_dev_$n" dims >"$OUT/ab/dims_${n}_$round.log" 2>&1
    echo "dims $n r$round rc=$?: $(grep -E 'TFLOP' "$OUT/ab/dims_${n}_$round.log" | awk '{printf "%s ", $0}' | tr -s ' ' | cut -c1-500)" |
      tee -a "$OUT/summary.txt"
  done
done

if [ "${MLA:-1}" = 1 ]; then
  timeout 90 pagecheck run --mla --q-heads 128 --seqs 64 --seq-len 4096 --block-size 64 --mode decode \
    --paths direct,split,auto --no-checks --json "$OUT/mla.json" >"$OUT/mla.log" 2>&1
  echo "mla 64 x 4096 x 128 heads rc=$? :: $(grep -E '^ +(direct|split|auto) ' "$OUT/mla.log" | tr -s ' ' | tr '\n' ';' | cut -c1-300)" |
    tee -a "$OUT/summary.txt"
fi

pids=()
if [ "${MUTANTS:-1}" = 1 ]; then
  # PACK names this script's output folder; run.sh's PACK is the binaries.
  OUT=$OUT/mutants PACK=build-mutants/carry/binaries.tar.xz ONLY="${ONLY:-28 29 30 32 34 35 36}" \
    PATHS=${MPATHS:-reference,direct,split,auto,prefill} EXTRAS=tests \
    BUDGET=${BUDGET:-380} JOBS=8 bash scripts/mutants/run.sh >"$OUT/mutants.log" 2>&1 &
  pids+=($!)
fi
if [ "${SOAK:-1}" = 1 ]; then
  (PAGECHECK_DEVICE_MEMORY_LIMIT=20G BIN=$BIN OUT=$OUT/soak STEPS=builtin SOAK_MINUTES=${SOAK_MINUTES:-5} \
    scripts/device_soak_check.sh run >"$OUT/soak.log" 2>&1) &
  pids+=($!)
fi
if [ "${PRESETS:-1}" = 1 ]; then
  LIMIT=300 s presets pagecheck run --preset deepseek-v3 --preset phi3-mini --preset gpt-oss-20b --preset mqa \
    --no-timing --require-gpu --json "$OUT/presets.json" &
  pids+=($!)
  LIMIT=300 s preset_mla_decode pagecheck run --preset deepseek-v3 --mode decode --no-timing --require-gpu \
    --json "$OUT/preset_mla_decode.json" &
  pids+=($!)
fi
if [ "${RECORD:-1}" = 1 ]; then
  LIMIT=300 s record_features env PYTHONUNBUFFERED=1 python3 scripts/record_features_check.py "$OUT/record-features" \
    "$BIN/pagecheck" &
  pids+=($!)
fi
for n in ${AB_CHECK-u1 u4} ${DIMS_CHECK-}; do  # the dev driver's checks and sanitizers of each candidate
  (SAN=${AB_SAN:-1} QUICK=0 OUT=$OUT/ab_$n scripts/prefill_ab_run.sh "$n" >"$OUT/ab_check_$n.log" 2>&1) &
  pids+=($!)
done
for n in ${DIMS-}; do  # local memory (spills) in the head-dim-64 ws kernels' SASS, by function
  (/usr/local/cuda/bin/cuobjdump -sass "build-sm90dev/prefill_dev_$n" 2>/dev/null |
    awk '/Function :/ {f = $3} /STL|LDL/ && f ~ /Li64E/ {c[f]++} END {for (k in c) print c[k], k}' \
    >"$OUT/ab/sass_local_$n.txt"; /usr/local/cuda/bin/cuobjdump -sass "build-sm90dev/prefill_dev_$n" 2>&1 |
    awk '/Function :/ {keep = ($3 ~ /attn_ws_kernel/ && $3 ~ /Li64E/)} keep' | xz -T4 >"$OUT/ab/sass_ws64_$n.txt.xz") &
  pids+=($!)
done
wait "${pids[@]}"
for n in ${DIMS-}; do echo "sass local $n: $(tr '\n' ';' <"$OUT/ab/sass_local_$n.txt" | cut -c1-600)" | tee -a "$OUT/summary.txt"; done
for n in ${AB_CHECK-u1 u4} ${DIMS_CHECK-}; do echo "ab check $n: $(tr '\n' ' ' <"$OUT/ab_check_$n.log" | cut -c1-400)" | tee -a "$OUT/summary.txt"; done
grep -E "^(PASS|FAIL|INFO)" "$OUT/soak/steps.txt" 2>/dev/null | tee -a "$OUT/summary.txt"
[ -f "$OUT/mutants/table.txt" ] && tee -a "$OUT/summary.txt" <"$OUT/mutants/table.txt"
kill "$watchdog" 2>/dev/null
(cd "$OUT" && tar czf "${PACK:-.}/s15.tgz" --exclude='*.tgz' .)
