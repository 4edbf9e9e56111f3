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
#   scripts/device_check.sh bench           (on the GPU machine)
#       timing, alone on the GPU: `pagecheck bench`, scripts/bench_torch.py,
#       `pagecheck tune`, bench with the tuning file, the prefill shapes with
#       the portable kernel.
#       Both write logs and JSON reports to $OUT/devcheck.tgz (OUT default
#       ./devout); the last lines printed are a summary per step and each
#       step's exit code (steps.txt).
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

# step NAME TIMEOUT CMD...: runs CMD with a time limit, logs to $OUT/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ($((SECONDS - t0)) s)" | tee -a "$OUT/steps.txt"
  return $rc
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
  tar czf "$final/devcheck.tgz" -C "$OUT" .
  cp "$OUT/steps.txt" "$final/" 2>/dev/null
  for f in "$@"; do [ -f "$OUT/$f.log" ] && cp "$OUT/$f.log" "$final/"; done
  echo "== summaries"
  for f in "$OUT"/*.log; do
    echo "-- $(basename "$f"): $(grep -E "test cases:|assertions:|^summary|ERROR SUMMARY|RACECHECK SUMMARY|SKIPPED|^pagecheck:" "$f" | tail -3 | tr '\n' ' ' | cut -c1-400)"
  done
  echo "== steps"
  cat "$OUT/steps.txt"
}

# Correctness: the GPU tests, the covering suite through every path (also
# with the portable prefill/FMHA kernel forced and with a many-partition
# split plan), presets, recorded cases, the huge and long cases, and the
# four compute-sanitizer tools over the whole covering suite. Everything runs
# at once (the GPU and 16 cores have room); the sanitizers are the long poles.
do_run() {
  final=${OUT:-devout}
  mkdir -p "$final"
  OUT=$(mktemp -d /tmp/devcheck.XXXX)
  : >"$OUT/steps.txt"
  unpack
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv >"$OUT/device.txt" 2>&1
  ldd "$BIN/pagecheck" | grep -i "not found" >>"$OUT/device.txt"
  local all="reference,direct,split,auto,prefill,fmha" gpu="direct,split,auto,prefill,fmha"
  local limit=${STEP_LIMIT:-420}
  local presets=()
  for p in $(pagecheck run --list-presets 2>/dev/null | awk '{print $1}'); do presets+=(--preset "$p"); done
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
  # Each huge case holds ~10 GB of cache on the host and on the GPU.
  step huge_decode 400 pagecheck run --name huge-decode "${huge[@]}" --paths "$all" --json "$OUT/huge_decode.json" &
  step huge_mixed 400 pagecheck run --name huge-mixed-hnd "${huge[@]}" --layout HND --mode mixed \
    --q-len-min 2 --q-len-max 64 --paths reference,prefill,fmha --json "$OUT/huge_mixed.json" &
  step long_decode 400 pagecheck run --name long-32k-decode --seqs 2 --seq-len 32768 --q-heads 32 --kv-heads 8 \
    --head-dim 128 --mode decode --paths reference,direct,split,auto --no-timing --json "$OUT/long_decode.json" &
  step long_prefill 400 pagecheck run --name long-8k-prefill --seqs 1 --seq-len 8192 --q-heads 8 --kv-heads 4 \
    --head-dim 128 --mode prefill --paths reference,prefill,fmha --no-timing --json "$OUT/long_prefill.json" &
  wait
  # The suite's model of which path takes which case, against what ran.
  step suite_model 30 python3 scripts/check_suite_report.py "$OUT/suite-list.txt" "$OUT/suite.json"
  step suite_model_mma 30 python3 scripts/check_suite_report.py "$OUT/suite-list.txt" "$OUT/suite_mma.json" --mma
  finish steps
}

# Timing, one at a time: `pagecheck bench` (issue 3 and 4 shapes),
# scripts/bench_torch.py (PyTorch SDPA on the same shapes), `pagecheck tune`,
# then `bench --shapes decode --paths auto` with the tuning file, and the
# prefill shapes again with the portable prefill/FMHA kernel.
do_bench() {
  final=${OUT:-devout}
  mkdir -p "$final"
  OUT=$(mktemp -d /tmp/devcheck.XXXX)
  : >"$OUT/steps.txt"
  unpack
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

case "$mode" in
  build) do_build ;;
  run) do_run ;;
  bench) do_bench ;;
  all) do_build && do_run ;;
  *) echo "usage: $0 build [ARCHS] | run | bench | all" >&2; exit 2 ;;
esac
