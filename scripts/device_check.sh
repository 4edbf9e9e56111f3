#!/usr/bin/env bash
# The device check (issues 3, 4 and 8), in halves:
#
#   scripts/device_check.sh build [ARCHS]   (where the dependencies are)
#       configures build-devcheck with CMAKE_CUDA_ARCHITECTURES=ARCHS
#       (default "80;90"), builds pagecheck and the GPU tests, and packs the
#       stripped binaries into build-devcheck/carry/*.gz (small enough to
#       carry to a GPU machine).
#   scripts/device_check.sh run             (on the GPU machine)
#       unpacks build-devcheck/carry (or uses BIN=dir of binaries), then the
#       correctness check of issue 8: the GPU tests; the covering default
#       suite through every path, again with PAGECHECK_ATTN_KERNEL=mma (the
#       portable prefill/FMHA kernel) and with a split plan of 64-token
#       partitions; presets; the recorded cases (data/*.safetensors);
#       compute-sanitizer memcheck, racecheck, initcheck and synccheck over
#       the whole covering suite; a cache of more than 2^31 elements with
#       block ids above 65535 (decode and mixed, NHD and HND) and one long
#       context per path family (32k decode, 8k prefill).
#   scripts/device_check.sh extras          (on the GPU machine, ~2 min)
#       the features that had not run on a GPU, one check each of
#       scripts/device_extras_check.py, all at once: `pagecheck reduce` on GPU
#       paths (the faulty example kernel's two entries; split and prefill at
#       zero tolerance), --device all / --workers 2 / --shard + merge against
#       a plain run, the kv_cache, paged_kv_cache NHD/HND and vLLM classic
#       forms through every path, --html of a timed run with a screenshot
#       where a headless browser exists, PAGECHECK_DEVICE_MEMORY_LIMIT. Each
#       property is a PASS/FAIL/SKIP line in steps.txt.
#   scripts/device_check.sh full            (on the GPU machine)
#       run and extras at once, one summary.
#   scripts/device_check.sh bench           (on the GPU machine)
#       timing, alone on the GPU: `pagecheck bench`, scripts/bench_torch.py,
#       `pagecheck tune`, bench with the tuning file, the prefill shapes with
#       the portable kernel.
#       Each mode writes logs and JSON reports to $OUT/devcheck.tgz (OUT default
#       ./devout); the last lines printed are a summary per step and each
#       step's exit code (steps.txt).
#   scripts/device_check.sh prefill         (on the GPU machine, issue 24)
#       the prefill/FMHA kernels' tests, suite and sanitizers, then bench
#       --shapes prefill interleaved twice with scripts/bench_torch.py, and
#       the block-size / head-dim / fp8 variants.
#   scripts/device_check.sh all             both, on a machine with a GPU
#       and the dependencies.
set -u
cd "$(dirname "$0")/.."
mode=${1:-all}
archs=${2:-"80;90"}
build=${BUILD:-build-devcheck}

do_build() {
  cmake -S . -B "$build" -G Ninja -DPAGECHECK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" || exit 4
  ninja -C "$build" -j"${JOBS:-2}" pagecheck test_gpu_core test_gpu_decode test_gpu_prefill test_gpu_external || exit 4
  mkdir -p "$build/carry"
  for f in app/pagecheck tests/gpu/test_gpu_core tests/gpu/test_gpu_decode tests/gpu/test_gpu_prefill; do
    cp "$build/$f" "$build/carry/" && strip "$build/carry/$(basename "$f")"
    gzip -f -9 "$build/carry/$(basename "$f")"
  done
  # The external-kernel test finds the example libraries relative to itself.
  tar czf "$build/carry/external.tgz" -C "$build" tests/gpu/test_gpu_external \
    $(cd "$build" && ls examples/external/*.so)
  ls -la "$build/carry"
}

# step NAME TIMEOUT CMD...: scripts/device_steps.sh.
source scripts/device_steps.sh  # the scripts run from the repository root

# check NAME TIMEOUT CMD...: a step whose log holds PASS:/FAIL:/SKIP:/INFO:
# lines (scripts/device_extras_check.py); finish copies them into steps.txt.
check() {
  echo "$1" >>"$OUT/checks.list"
  step "$@"
}

# The huge and long cases (issue 8): a cache of more than 2^31 elements
# with block ids above 65535 (4 x 2048 tokens, 8 KV heads, d128, 512 pages
# spread over a pool of 153600: 2.5e9 elements per cache, 5 GB in BF16), and
# one long context per path family (32k decode, 8k prefill).
huge=(--seqs 4 --q-heads 8 --kv-heads 8 --head-dim 128 --block-size 16 --seq-len 2048 --pool-factor 300
      --no-share-pages --no-timing)

unpack() {
  BIN=${BIN:-}
  if [ -z "$BIN" ]; then
    BIN=/tmp/pagecheck-bin
    mkdir -p "$BIN"
    for f in "$build"/carry/*.gz; do gunzip -c "$f" >"$BIN/$(basename "$f" .gz)"; done
    chmod +x "$BIN"/*
  fi
  EXT=/tmp/pagecheck-ext
  mkdir -p "$EXT"
  [ -f "$build/carry/external.tgz" ] && tar xzf "$build/carry/external.tgz" -C "$EXT"
  export PATH="$BIN:$PATH" NO_COLOR=1
  # cuBLAS comes from the CUDA toolkit there.
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib"
}

finish() {
  # The checks' property lines, grouped per check, after the exit codes.
  if [ -f "$OUT/checks.list" ]; then
    echo "== checks (PASS/FAIL/SKIP per property; logs: NAME.log)" >>"$OUT/steps.txt"
    while read -r name; do
      grep -E "^(PASS|FAIL|SKIP|INFO):" "$OUT/$name.log" | cut -c1-300 | sed "s/^/$name /" >>"$OUT/steps.txt"
      grep -qE "^(PASS|FAIL|SKIP):" "$OUT/$name.log" || echo "$name FAIL: no result lines (see $name.log)" >>"$OUT/steps.txt"
    done <"$OUT/checks.list"
    local fails
    fails=$(grep -E "^x?[a-z_]+ FAIL: " "$OUT/steps.txt")
    echo "== checks: $(grep -c " PASS: " "$OUT/steps.txt") PASS, $(grep -c " FAIL: " "$OUT/steps.txt") FAIL, $(grep -c " SKIP: " "$OUT/steps.txt") SKIP" >>"$OUT/steps.txt"
    [ -n "$fails" ] && { echo "failed:"; echo "$fails"; } >>"$OUT/steps.txt"
  fi
  tar czf "$final/devcheck.tgz" -C "$OUT" .
  cp "$OUT/steps.txt" "$final/" 2>/dev/null
  for f in "$@"; do [ -f "$OUT/$f.log" ] && cp "$OUT/$f.log" "$final/"; done
  # The HTML page and its screenshot, where the browser found one.
  for f in "$OUT"/x_html/report.html "$OUT"/x_html/report.png; do [ -f "$f" ] && cp "$f" "$final/"; done
  echo "== summaries"
  for f in "$OUT"/*.log; do
    echo "-- $(basename "$f"): $(grep -E "test cases:|assertions:|^summary|ERROR SUMMARY|RACECHECK SUMMARY|SKIPPED|^pagecheck:|^[a-z]+: [0-9]+ passed, [0-9]+ failed" "$f" | tail -3 | tr '\n' ' ' | cut -c1-400)"
  done
  echo "== steps"
  cat "$OUT/steps.txt"
}

# A fresh $OUT in /tmp (copied to the final OUT by finish), the binaries,
# the device.
begin() {
  final=${OUT:-devout}
  mkdir -p "$final"
  OUT=$(mktemp -d /tmp/devcheck.XXXX)
  : >"$OUT/steps.txt"
  unpack
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.free --format=csv >"$OUT/device.txt" 2>&1
  ldd "$BIN/pagecheck" | grep -i "not found" >>"$OUT/device.txt"
}

# The features that had not run on a GPU (scripts/device_extras_check.py
# says what each check asserts), all at once, in the background: reduce on
# GPU paths, the worker/shard/merge flow, the combined cache forms, the HTML
# page, the device-memory cap. ~2 min on an H200 alone.
extras_steps() {
  # EXTRAS_CPU=1 (with BIN= a CPU build): a dry run of the wiring on a machine
  # without a GPU, the checks with --cpu (reference only).
  local x="python3 scripts/device_extras_check.py --pagecheck pagecheck ${EXTRAS_CPU:+--cpu}"
  local faulty="$EXT/examples/external/libsimple_decode_faulty.so"
  check x_reduce 240 env PYTHONUNBUFFERED=1 $x reduce "$OUT/x_reduce" --kernel "$faulty" &
  check x_shards 240 env PYTHONUNBUFFERED=1 $x shards "$OUT/x_shards" &
  check x_forms 180 env PYTHONUNBUFFERED=1 $x forms "$OUT/x_forms" &
  check x_html 180 env PYTHONUNBUFFERED=1 $x html "$OUT/x_html" &
  check x_memlimit 120 env PYTHONUNBUFFERED=1 $x memlimit "$OUT/x_memlimit" &
}

# Correctness: the GPU tests, the covering suite through every path (also
# with the portable prefill/FMHA kernel forced and with a many-partition
# split plan), presets, recorded cases, the huge and long cases, and the
# four compute-sanitizer tools over the whole covering suite. Everything runs
# at once (the GPU and 16 cores have room); the sanitizers are the long poles.
run_steps() {
  local all="reference,direct,split,auto,prefill,fmha" gpu="direct,split,auto,prefill,fmha"
  local limit=${STEP_LIMIT:-420}
  local presets=()
  # Single presets only: a group's line ends "(a + b)" and its members are listed too.
  for p in $(pagecheck run --list-presets 2>/dev/null | awk '!/\(.* \+ .*\)$/ {print $1}'); do presets+=(--preset "$p"); done
  pagecheck run --list-suite >"$OUT/suite-list.txt" 2>&1

  # The sanitizers: plain cudaMalloc allocations (the harness has no pool
  # allocator), every kernel of every path on every covering case.
  # memcheck keeps the harness checks (graph capture and replay, repeats);
  # the others run each path once per case.
  for tool in memcheck racecheck initcheck synccheck; do
    local extra=(--no-checks)
    [ "$tool" = memcheck ] && extra=()
    step "san_$tool" "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
      pagecheck run --paths "$gpu" --no-timing "${extra[@]}" -q --json "$OUT/san_$tool.json" &
  done
  step gpu_test_core 200 test_gpu_core &
  step gpu_test_decode 200 test_gpu_decode &
  step gpu_test_prefill 200 test_gpu_prefill &
  step gpu_test_prefill_mma 200 env PAGECHECK_ATTN_KERNEL=mma test_gpu_prefill &
  step gpu_test_prefill_wgmma 200 env PAGECHECK_ATTN_KERNEL=wgmma test_gpu_prefill &
  [ -x "$EXT/tests/gpu/test_gpu_external" ] && step gpu_test_external 200 "$EXT/tests/gpu/test_gpu_external" &
  step suite 300 pagecheck run --paths "$all" --no-timing --json "$OUT/suite.json" &
  step suite_mma 300 env PAGECHECK_ATTN_KERNEL=mma pagecheck run --paths reference,prefill,fmha --no-timing \
    --json "$OUT/suite_mma.json" &
  step suite_split64 300 pagecheck run --paths reference,split,auto --plan split:64:100 --no-timing \
    --json "$OUT/suite_split64.json" &
  step presets 300 pagecheck run "${presets[@]}" --paths "$all" --no-timing --json "$OUT/presets.json" &
  step recorded 120 pagecheck replay data/*.safetensors --paths "$all" --no-timing --json "$OUT/recorded.json" &
  # scripts/pagecheck_record.py against PyTorch's flex_attention paged attention.
  step record_flex 240 env PYTHONUNBUFFERED=1 python3 scripts/test_record_flex.py "$OUT/record-flex" pagecheck &
  # Issue 23's case kinds (sinks, ALiBi, head dim 96, MLA) recorded from PyTorch and replayed.
  step record_features 240 env PYTHONUNBUFFERED=1 python3 scripts/record_features_check.py "$OUT/record-features" \
    pagecheck &
  # Each huge case holds ~10 GB of cache on the host and on the GPU.
  step huge_decode 400 pagecheck run --name huge-decode "${huge[@]}" --paths "$all" --json "$OUT/huge_decode.json" &
  step huge_mixed 400 pagecheck run --name huge-mixed-hnd "${huge[@]}" --layout HND --mode mixed \
    --q-len-min 2 --q-len-max 64 --paths reference,prefill,fmha --json "$OUT/huge_mixed.json" &
  step long_decode 400 pagecheck run --name long-32k-decode --seqs 2 --seq-len 32768 --q-heads 32 --kv-heads 8 \
    --head-dim 128 --mode decode --paths reference,direct,split,auto --no-timing --json "$OUT/long_decode.json" &
  step long_prefill 400 pagecheck run --name long-8k-prefill --seqs 1 --seq-len 8192 --q-heads 8 --kv-heads 4 \
    --head-dim 128 --mode prefill --paths reference,prefill,fmha --no-timing --json "$OUT/long_prefill.json" &
}

# After run_steps' wait: the suite's model of which path takes which case,
# against what ran.
run_model_steps() {
  step suite_model 30 python3 scripts/check_suite_report.py "$OUT/suite-list.txt" "$OUT/suite.json"
  step suite_model_mma 30 python3 scripts/check_suite_report.py "$OUT/suite-list.txt" "$OUT/suite_mma.json" --mma
}

do_run() {
  begin
  run_steps
  wait
  run_model_steps
  finish steps
}

do_extras() {
  begin
  extras_steps
  wait
  finish steps
}

do_full() {
  begin
  run_steps
  extras_steps
  wait
  run_model_steps
  finish steps
}

# Timing, one at a time: `pagecheck bench` (issue 3 and 4 shapes),
# scripts/bench_torch.py (PyTorch SDPA on the same shapes), `pagecheck tune`,
# then `bench --shapes decode --paths auto` with the tuning file, and the
# prefill shapes again with the portable prefill/FMHA kernel.
do_bench() {
  begin
  step bench 100 pagecheck bench --shapes all --json "$OUT/bench.json"
  step torch 80 env PYTHONUNBUFFERED=1 python3 scripts/bench_torch.py
  step bench_mma 40 env PAGECHECK_ATTN_KERNEL=mma pagecheck bench --shapes prefill --paths prefill,fmha \
    --json "$OUT/bench_mma.json"
  step tune 45 pagecheck tune -o "$OUT/tuning.json"
  step bench_tuned 40 pagecheck bench --shapes decode --paths direct,split,auto --tuning "$OUT/tuning.json" \
    --json "$OUT/bench_tuned.json"
  for f in bench bench_mma torch tune bench_tuned; do echo "== $f"; tail -c 2000 "$OUT/$f.log"; done
  finish bench torch tune bench_tuned
}

# Issue 24 in one call: the prefill/FMHA kernels' correctness (the GPU
# prefill tests with each kernel, the covering suite through prefill and
# fmha, memcheck and racecheck over it), then the issue's numbers:
# pagecheck bench --shapes prefill and scripts/bench_torch.py interleaved
# twice (pagecheck, peers, pagecheck, peers), then the page-size, head-dim
# and fp8 variants at pagecheck's side.
do_prefill() {
  begin
  step gpu_test_prefill 200 test_gpu_prefill &
  step gpu_test_prefill_mma 200 env PAGECHECK_ATTN_KERNEL=mma test_gpu_prefill &
  step gpu_test_prefill_wgmma 200 env PAGECHECK_ATTN_KERNEL=wgmma test_gpu_prefill &
  step suite 200 pagecheck run --paths reference,prefill,fmha --no-timing --json "$OUT/suite.json" &
  step san_memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    pagecheck run --paths prefill,fmha --no-timing -q --json "$OUT/san_memcheck.json" &
  wait
  local p="--shapes prefill --paths prefill,fmha"
  step bench1 100 pagecheck bench $p --json "$OUT/bench1.json"
  step torch1 80 env PYTHONUNBUFFERED=1 python3 scripts/bench_torch.py --shapes prefill
  step bench2 100 pagecheck bench $p --json "$OUT/bench2.json"
  step torch2 80 env PYTHONUNBUFFERED=1 python3 scripts/bench_torch.py --shapes prefill
  step bench_b64 60 pagecheck bench $p --block-size 64 --json "$OUT/bench_b64.json"
  step bench_b1 60 pagecheck bench $p --block-size 1 --json "$OUT/bench_b1.json"
  step bench_d64 60 pagecheck bench $p --head-dim 64 --json "$OUT/bench_d64.json"
  step bench_d256 60 pagecheck bench $p --head-dim 256 --json "$OUT/bench_d256.json"
  step bench_fp8 60 pagecheck bench $p --kv-dtype F8_E4M3 --json "$OUT/bench_fp8.json"
  for f in bench1 torch1 bench2 torch2 bench_b64 bench_b1 bench_d64 bench_d256 bench_fp8; do
    echo "== $f"; grep -vE "^\s*$" "$OUT/$f.log" | cut -c1-200 | tail -12
  done
  finish bench1 torch1 bench2 torch2
}

case "$mode" in
  build) do_build ;;
  prefill) do_prefill ;;
  run) do_run ;;
  extras) do_extras ;;
  full) do_full ;;
  bench) do_bench ;;
  all) do_build && do_run ;;
  *) echo "usage: $0 build [ARCHS] | run | extras | full | bench | prefill | all" >&2; exit 2 ;;
esac
