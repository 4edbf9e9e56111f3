#!/usr/bin/env bash
# The device check of what the last session built but could not run on a
# GPU. Run in session 13 (call 1, docs/performance.md: everything passed;
# what session 13 left pending is scripts/device_s13_call3.sh's). Pending
# after session 12 (2026-12-06): FP8 caches in the ws kernel
# with K widened to BF16 and V to F16 (the dev driver's checks passed; the
# product's GPU tests ran each half, not the mix); the shared query-tile
# helpers (QueryTile::first_key_tile / end_key_tile / needs_mask) in all
# three tensor-core kernels; and the A/B of PAGECHECK_WS_EXP_POLY (head
# dim 64's exponentials partly on the FMA pipe: dev driver variants p3 and
# p4, and s2: head dim 64 with two K/V stages, against the default,
# `prefill_dev dims` interleaved). Steps: every GPU
# test with the defaults and with PAGECHECK_WS_FP8=0, the dev driver's
# checks, its small cases under memcheck, racecheck, synccheck and
# initcheck, the prefill bench at head dims 64 and 256 and with an E4M3
# cache under both kernels (H100, session 12: d64 320.1, d256 179.3, E4M3
# 367.7 (dev driver) and 305.9 (PAGECHECK_WS_FP8=0) TFLOP/s at 8 x 2048).
# In halves:
#   scripts/device_pending_check.sh build [ARCHS]   (here: ~25 min cold on 2 cores)
#       configures build-pending (CMAKE_CUDA_ARCHITECTURES=ARCHS, default 90),
#       builds pagecheck and the GPU tests, packs them stripped and gzipped
#       into build-pending/carry (~62 MiB with external.tgz, test_gpu_external
#       and the example libraries it loads: carry that folder alone), with the
#       prefill dev driver of this tree (scripts/build_prefill_dev.sh).
#   scripts/device_pending_check.sh run             (there: ~4 min)
#       at once: test_gpu_prefill with the default, wgmma and mma kernels;
#       test_gpu_decode; test_gpu_core; the dev driver's checks (default
#       loaders, rows forced); the covering suite through every built-in path
#       (default plan, and split:64:100 through the decode paths); then,
#       alone on the GPU: pagecheck bench --shapes prefill at head dims 64
#       and 256 and with an F8_E4M3 cache, by attn_sm90.cu's kernel and by
#       the warp-specialised one (the kernels whose code moved or is new;
#       H200 figures before the change, 2026-12-04: 213.2, 180.0 and 313.3
#       TFLOP/s at 8 x 2048), --shapes decode (H100 before: 2870 / 2852 /
#       2395 / 1998 GB/s; H200: 4066 / 3973 / 3200 / 2537), and the dev
#       driver's quick A/B shapes (ws11's H100 figures: docs/performance.md,
#       session 5). Logs and $OUT/summary.txt (one line per step) under
#       $OUT (default ./pendingout).
set -u
cd "$(dirname "$0")/.."
mode=${1:-run}
archs=${2:-90}
build=${BUILD:-build-pending}
OUT=${OUT:-pendingout}

do_build() {
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGECHECK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache || exit 4
  nice -n 10 ninja -C "$build" -j"${JOBS:-2}" pagecheck test_gpu_prefill test_gpu_decode test_gpu_core test_gpu_external ||
    exit 4
  scripts/build_prefill_dev.sh pending >/dev/null || exit 4
  # A/B variants of the dev driver (VARIANTS="NAME:FLAGS ...", default the
  # head-dim-64 exponential split at every 3rd and 4th n8 block, and head
  # dim 64 with two K/V stages instead of three).
  for v in ${VARIANTS:-p3:-DPAGECHECK_WS_EXP_POLY=3 p4:-DPAGECHECK_WS_EXP_POLY=4 s2:-DPAGECHECK_WS_D64_STAGES=2}; do
    scripts/build_prefill_dev.sh "${v%%:*}" ${v#*:} >/dev/null || exit 4
  done
  mkdir -p "$build/carry"
  for f in app/pagecheck tests/gpu/test_gpu_prefill tests/gpu/test_gpu_decode tests/gpu/test_gpu_core; do
    cp "$build/$f" "$build/carry/" && strip "$build/carry/$(basename "$f")" && gzip -f -9 "$build/carry/$(basename "$f")"
  done
  gzip -9 -c build-sm90dev/prefill_dev_pending >"$build/carry/prefill_dev.gz"
  for v in ${VARIANTS:-p3:-DPAGECHECK_WS_EXP_POLY=3 p4:-DPAGECHECK_WS_EXP_POLY=4 s2:-DPAGECHECK_WS_D64_STAGES=2}; do
    gzip -9 -c "build-sm90dev/prefill_dev_${v%%:*}" >"$build/carry/prefill_dev_${v%%:*}.gz"
  done
  # test_gpu_external finds the example libraries relative to itself.
  tar czf "$build/carry/external.tgz" -C "$build" tests/gpu/test_gpu_external \
    $(cd "$build" && ls examples/external/*.so) || exit 4
  ls -la "$build/carry"
}

. scripts/device_steps.sh  # unpack_carry (run from the repository root)

do_run() {
  mkdir -p "$OUT"
  : >"$OUT/summary.txt"
  # The binaries onto PATH; external.tgz (test_gpu_external and the example
  # libraries it loads) into $EXT.
  BIN=${BIN:-/tmp/pendingbin}
  EXT=/tmp/pendingext
  unpack_carry "$build/carry"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
  s() {  # s NAME CMD...: one line per step in summary.txt
    local name=$1
    shift
    timeout "${LIMIT:-200}" "$@" >"$OUT/$name.log" 2>&1
    echo "$name rc=$? :: $(tail -2 "$OUT/$name.log" | tr '\n' ' ' | cut -c1-200)" | tee -a "$OUT/summary.txt"
  }
  s tgp_default test_gpu_prefill &
  PAGECHECK_ATTN_KERNEL=wgmma s tgp_wgmma test_gpu_prefill &
  PAGECHECK_ATTN_KERNEL=mma s tgp_mma test_gpu_prefill &
  s test_gpu_decode test_gpu_decode &
  s test_gpu_core test_gpu_core &
  [ -x "$EXT/tests/gpu/test_gpu_external" ] && s test_gpu_external "$EXT/tests/gpu/test_gpu_external" &
  s dev_check_default prefill_dev check &
  PAGECHECK_WS_TMA_MIN=1024 s dev_check_rows prefill_dev check &
  PAGECHECK_WS_FP8=0 s dev_check_fp8_wgmma prefill_dev check &
  PAGECHECK_WS_FP8=0 s tgp_fp8_wgmma test_gpu_prefill &
  s suite pagecheck run --no-timing --require-gpu --json "$OUT/suite.json" &
  s suite_split64 pagecheck run --paths reference,direct,split,auto --plan split:64:100 --no-timing --require-gpu \
    --json "$OUT/suite_split64.json" &
  wait
  # The ws kernel's FP8 staging (cp.async into staging slots, read back by
  # the lane that copied) and head dim 64 under the sanitizers, on the dev
  # driver's small cases.
  for tool in memcheck racecheck synccheck initcheck; do
    s "san_ws_$tool" compute-sanitizer --tool "$tool" --error-exitcode 9 prefill_dev small
  done
  for extra in "--head-dim 64" "--head-dim 256" "--kv-dtype F8_E4M3" "--kv-dtype F8_E4M3 --fp8-wgmma"; do
    local tag=${extra// /_} ws=1
    [ "${extra% --fp8-wgmma}" != "$extra" ] && ws=0 && extra=${extra% --fp8-wgmma}
    PAGECHECK_WS_FP8=$ws timeout 60 pagecheck bench --shapes prefill --paths prefill --no-checks $extra \
      >"$OUT/bench$tag.log" 2>&1
    echo "bench prefill $extra (PAGECHECK_WS_FP8=$ws): $(awk '/^(prefill|chunked)-/ {s=$1} / TFLOP\/s/ && s != "" {for (i = 1; i <= NF; i++) if ($i ~ /TFLOP/) t = $(i - 1); printf "%s %s; ", s, t; s = ""}' "$OUT/bench$tag.log")" |
      tee -a "$OUT/summary.txt"
  done
  timeout 60 pagecheck bench --shapes decode --paths direct,split,auto --no-checks >"$OUT/bench_decode.log" 2>&1
  echo "bench decode: $(awk '/^decode-/ {s=$1} /^  [a-z]+ +pass/ {p=$1} /GB\/s/ && !/stage/ && p != "" {printf "%s %s %s; ", s, p, $1; p = ""}' "$OUT/bench_decode.log")" |
    tee -a "$OUT/summary.txt"
  timeout 100 prefill_dev quick >"$OUT/dev_quick.log" 2>&1
  grep TFLOP "$OUT/dev_quick.log" | tee -a "$OUT/summary.txt"
  # The variants against the default at head dims 64 and 128, interleaved.
  local variants
  variants=$(cd "$BIN" && ls prefill_dev_* 2>/dev/null)
  if [ -n "$variants" ]; then
    for round in 1 2; do
      for v in prefill_dev $variants; do
        timeout 100 "$v" dims >"$OUT/dims_${v}_$round.log" 2>&1
        grep -E "TFLOP|FAIL" "$OUT/dims_${v}_$round.log" | sed "s/^/$v r$round/" | tee -a "$OUT/summary.txt"
      done
    done
    for v in $variants; do timeout 150 "$v" check >"$OUT/check_$v.log" 2>&1 & done
    wait
    for v in $variants; do
      echo "check $v: $(grep -c FAIL "$OUT/check_$v.log") FAIL lines; $(tail -1 "$OUT/check_$v.log")" | tee -a "$OUT/summary.txt"
    done
  fi
  python3 scripts/suite_failures.py "$OUT/suite.json" "$OUT/suite_split64.json" 2>&1 | tee -a "$OUT/summary.txt"
  pagecheck run --list-suite >"$OUT/suite_list.txt" 2>&1
  python3 scripts/check_suite_report.py "$OUT/suite_list.txt" "$OUT/suite.json" 2>&1 | tail -5 | tee -a "$OUT/summary.txt"
  # The device tool returns at most eight files of its $OUT: PACK=dir puts
  # the one archive there. Name the tool's folder before OUT changes:
  # `D=$OUT; OUT=/tmp/p PACK=$D scripts/device_pending_check.sh run` (in
  # `OUT=/tmp/p PACK=$OUT ...` the shell expands $OUT to /tmp/p).
  (cd "$OUT" && tar czf "${PACK:-.}/pending.tgz" --exclude=pending.tgz .)
}

case "$mode" in
  build) do_build ;;
  run) do_run ;;
  *) echo "usage: $0 build [ARCHS] | run" >&2; exit 2 ;;
esac
