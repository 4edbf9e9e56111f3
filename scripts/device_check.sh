#!/usr/bin/env bash
# The device check of issues 3 and 4, in two halves:
#
#   scripts/device_check.sh build [ARCHS]   (where the dependencies are)
#       configures build-devcheck with CMAKE_CUDA_ARCHITECTURES=ARCHS
#       (default "80;90"), builds pagecheck and the GPU tests, and packs the
#       stripped binaries into build-devcheck/carry/*.gz (small enough to
#       carry to a GPU machine).
#   scripts/device_check.sh run             (on the GPU machine)
#       unpacks build-devcheck/carry (or uses BIN=dir of binaries), then:
#       A. correctness, in parallel: the GPU tests (sweeps of issues 3/4, the
#          prefill sweeps once more with PAGECHECK_ATTN_KERNEL=mma, the
#          harness checks, default suite and presets through every path), the
#          default suite and presets through every path via the CLI, the
#          recorded cases (data/*.safetensors), compute-sanitizer memcheck and
#          racecheck on a small decode and a small mixed suite;
#       B. timing, alone on the GPU: `pagecheck bench` (issue 3 and 4 shapes),
#          scripts/bench_torch.py (PyTorch SDPA on the same shapes), and
#          `pagecheck tune`, then `bench --shapes decode --paths auto` with
#          the tuning file, and the prefill shapes again with the portable
#          prefill/FMHA kernel (PAGECHECK_ATTN_KERNEL=mma).
#       Logs and JSON reports go to $OUT/devcheck.tgz (OUT default ./devout;
#       the bench, torch and tune logs also lie beside it); the last lines
#       printed are those logs, a summary per step and each step's exit code.
#   scripts/device_check.sh all             both, on a machine with a GPU
#       and the dependencies.
set -u
cd "$(dirname "$0")/.."
mode=${1:-all}
archs=${2:-"80;90"}
build=${BUILD:-build-devcheck}

do_build() {
  cmake -S . -B "$build" -G Ninja -DPAGECHECK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" || exit 4
  ninja -C "$build" -j"${JOBS:-2}" pagecheck test_gpu_core test_gpu_decode test_gpu_prefill || exit 4
  mkdir -p "$build/carry"
  for f in app/pagecheck tests/gpu/test_gpu_core tests/gpu/test_gpu_decode tests/gpu/test_gpu_prefill; do
    cp "$build/$f" "$build/carry/" && strip "$build/carry/$(basename "$f")"
    gzip -f -9 "$build/carry/$(basename "$f")"
  done
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

do_run() {
  local final=${OUT:-devout}
  mkdir -p "$final"
  OUT=$(mktemp -d /tmp/devcheck.XXXX)
  : >"$OUT/steps.txt"
  BIN=${BIN:-}
  if [ -z "$BIN" ]; then
    BIN=/tmp/pagecheck-bin
    mkdir -p "$BIN"
    for f in "$build"/carry/*.gz; do gunzip -c "$f" >"$BIN/$(basename "$f" .gz)"; done
    chmod +x "$BIN"/*
  fi
  export PATH="$BIN:$PATH" NO_COLOR=1
  # cuBLAS comes from the CUDA toolkit there.
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$OUT/device.txt" 2>&1
  ldd "$BIN/pagecheck" | grep -i "not found" >>"$OUT/device.txt"
  local all="reference,direct,split,auto,prefill,fmha"
  local presets=()
  for p in $(pagecheck run --list-presets 2>/dev/null | awk '{print $1}'); do presets+=(--preset "$p"); done
  local sanitize_decode=(run --name san-decode --seqs 3 --q-heads 8 --kv-heads 2 --head-dim 128 --block-size 16
                         --seq-lens 17,300,1100 --mode decode --paths direct,split,auto,prefill --no-timing
                         --plan split:256:256)
  local sanitize_mixed=(run --name san-mixed --seqs 3 --q-heads 8 --kv-heads 2 --head-dim 128 --block-size 7
                        --seq-lens 54,97,300 --mode mixed --q-len-min 2 --q-len-max 40 --paths prefill,fmha --no-timing)

  # A. correctness, in parallel.
  step gpu_test_core 120 test_gpu_core &
  step gpu_test_decode 120 test_gpu_decode &
  step gpu_test_prefill 120 test_gpu_prefill &
  step gpu_test_prefill_mma 120 env PAGECHECK_ATTN_KERNEL=mma test_gpu_prefill &
  step suite 120 pagecheck run --paths "$all" --no-timing --json "$OUT/suite.json" &
  step presets 120 pagecheck run "${presets[@]}" --paths "$all" --no-timing --json "$OUT/presets.json" &
  step recorded 120 pagecheck replay data/*.safetensors --paths "$all" --no-timing --json "$OUT/recorded.json" &
  step memcheck_decode 120 compute-sanitizer --tool memcheck --error-exitcode 9 pagecheck "${sanitize_decode[@]}" &
  step memcheck_mixed 120 compute-sanitizer --tool memcheck --error-exitcode 9 pagecheck "${sanitize_mixed[@]}" &
  step racecheck_decode 120 compute-sanitizer --tool racecheck --error-exitcode 9 pagecheck "${sanitize_decode[@]}" &
  step racecheck_mixed 120 compute-sanitizer --tool racecheck --error-exitcode 9 pagecheck "${sanitize_mixed[@]}" &
  wait

  # B. timing, one at a time.
  step bench 100 pagecheck bench --shapes all --json "$OUT/bench.json"
  step torch 80 env PYTHONUNBUFFERED=1 python3 scripts/bench_torch.py
  step bench_mma 40 env PAGECHECK_ATTN_KERNEL=mma pagecheck bench --shapes prefill --paths prefill,fmha \
    --json "$OUT/bench_mma.json"
  step tune 45 pagecheck tune -o "$OUT/tuning.json"
  step bench_tuned 40 pagecheck bench --shapes decode --paths direct,split,auto --tuning "$OUT/tuning.json" \
    --json "$OUT/bench_tuned.json"

  tar czf "$final/devcheck.tgz" -C "$OUT" .
  cp "$OUT/steps.txt" "$OUT/bench.log" "$OUT/torch.log" "$OUT/tune.log" "$OUT/bench_tuned.log" "$final/" 2>/dev/null
  for f in bench bench_mma torch tune bench_tuned; do echo "== $f"; tail -c 2000 "$OUT/$f.log"; done
  echo "== summaries"
  for f in "$OUT"/*.log; do
    echo "-- $(basename "$f"): $(grep -E "test cases:|assertions:|summary|ERROR SUMMARY|RACECHECK SUMMARY|SKIPPED" "$f" | tail -2 | tr '\n' ' ')"
  done
  echo "== steps"
  cat "$OUT/steps.txt"
}

case "$mode" in
  build) do_build ;;
  run) do_run ;;
  all) do_build && do_run ;;
  *) echo "usage: $0 build [ARCHS] | run | all" >&2; exit 2 ;;
esac
