#!/usr/bin/env bash
# FlashInfer's paged kernels under pagecheck (issue 20), in halves:
#
#   scripts/device_flashinfer_check.sh build [ARCHS]   (here, with nvcc)
#       configures $BUILD (default build-fi) with CMAKE_CUDA_ARCHITECTURES=ARCHS
#       (default 90) and PAGECHECK_FLASHINFER_INCLUDE_DIR (default: the shared
#       copy ../shared/third_party/flashinfer-0.6.8/include, or
#       $FLASHINFER_INCLUDE), builds pagecheck, test_gpu_external, the example
#       libraries and libpagecheck_flashinfer.so, and packs them into
#       $BUILD/carry (pagecheck.gz, external.tgz).
#   scripts/device_flashinfer_check.sh run             (on the GPU machine)
#       unpacks $BUILD/carry, then, in one go (at most ~8.5 min: the parallel
#       steps stop at 330 s, bench at 180 s):
#         gpu_test_external   the example libraries, the plan contract of ABI
#                             1.1 (planned, baked, 1.0 entries)
#         suite               the default suite, built-in paths and both
#                             FlashInfer entries, every check and timing,
#                             failing cases saved (--save-failing)
#         presets             every preset, the same way
#         sweep_*             what the suite leaves out for FlashInfer: BF16
#                             and F16 (FP8 caches for the decode), head dims
#                             64/128/256, HND, CSR tables,
#                             block sizes 1/7/16/32, GQA 1/4/8 and MQA,
#                             window, softcap, k/v scales, causal and not,
#                             decode, chunked prefill and mixed
#         memcheck            compute-sanitizer memcheck over the FlashInfer
#                             entries on the default suite
#         bench               pagecheck bench --kernel (alone on the GPU):
#                             FlashInfer's entries beside the built-in paths
#       and writes logs, JSON reports and bundles to $OUT (default ./fiout),
#       a per-path tally of statuses (tally.txt) and the exit code of each step
#       (steps.txt); at the end everything but those two and bench.log is
#       packed into $OUT/fi_all.tgz (the device tool returns 8 files).
set -u
cd "$(dirname "$0")/.."
mode=${1:-run}
archs=${2:-90}
build=${BUILD:-build-fi}
shared_fi=$(realpath -m "$(pwd)/../shared/third_party/flashinfer-0.6.8/include")
fi_include=${FLASHINFER_INCLUDE:-$shared_fi}
fi_paths="ext:flashinfer_decode,ext:flashinfer_prefill"

do_build() {
  if [ ! -f "$fi_include/flashinfer/attention/decode.cuh" ]; then
    echo "no FlashInfer headers at $fi_include (set FLASHINFER_INCLUDE)" >&2
    exit 4
  fi
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGECHECK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    -DPAGECHECK_FLASHINFER_INCLUDE_DIR="$fi_include" "${launcher[@]}" || exit 4
  nice -n 10 ninja -C "$build" -j"${JOBS:-2}" pagecheck test_gpu_external pagecheck_flashinfer || exit 4
  mkdir -p "$build/carry"
  cp "$build/app/pagecheck" "$build/carry/" && strip "$build/carry/pagecheck" && gzip -f -9 "$build/carry/pagecheck"
  # test_gpu_external finds the example libraries relative to itself.
  tar czf "$build/carry/external.tgz" -C "$build" tests/gpu/test_gpu_external \
    $(cd "$build" && ls examples/external/*.so examples/external/flashinfer/*.so)
  ls -la "$build/carry"
}

# step NAME TIMEOUT CMD...: scripts/device_steps.sh.
source scripts/device_steps.sh  # the scripts run from the repository root

do_run() {
  OUT=${OUT:-fiout}
  mkdir -p "$OUT"
  : >"$OUT/steps.txt"
  local bin=/tmp/pagecheck-fi ext=/tmp/pagecheck-fi-ext
  mkdir -p "$bin" "$ext"
  gunzip -c "$build/carry/pagecheck.gz" >"$bin/pagecheck" && chmod +x "$bin/pagecheck"
  tar xzf "$build/carry/external.tgz" -C "$ext"
  export PATH="$bin:$PATH" NO_COLOR=1
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib"
  local lib="$ext/examples/external/flashinfer/libpagecheck_flashinfer.so"
  local paths="reference,direct,split,auto,prefill,fmha,$fi_paths"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$OUT/device.txt" 2>&1
  local presets=()
  for p in $(pagecheck run --list-presets 2>/dev/null | awk '{print $1}'); do presets+=(--preset "$p"); done

  # Correctness and the checks, all at once (timing in these runs shares the
  # GPU: read speed from the bench step only).
  step gpu_test_external 300 "$ext/tests/gpu/test_gpu_external" &
  step suite 330 pagecheck run --kernel "$lib" --paths "$paths" --json "$OUT/suite.json" \
    --save-failing "$OUT/bundles/suite" &
  step presets 330 pagecheck run --kernel "$lib" "${presets[@]}" --paths "$paths" --json "$OUT/presets.json" \
    --save-failing "$OUT/bundles/presets" &
  step memcheck 330 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    pagecheck run --kernel "$lib" --paths "reference,$fi_paths" --no-timing -q --json "$OUT/memcheck.json" &
  local common=(--kernel "$lib" --paths "reference,split,prefill,$fi_paths" --no-timing --seqs 6 --q-heads 16)
  local i=0
  for dtype in BF16 F16; do
    for dim in 64 128 256; do
      for kv in 16 4 2 1; do
        for mode in decode chunked mixed; do
          i=$((i + 1))
          local extra=()
          case $((i % 6)) in
            0) extra=(--layout HND --block-size 7) ;;
            1) extra=(--table csr --block-size 1 --window 100) ;;
            2) extra=(--block-size 32 --softcap 30) ;;
            3) extra=(--layout HND --k-scale 0.5 --v-scale 2 --block-size 16) ;;
            4) extra=(--non-causal --block-size 16) ;;
            5) extra=(--table csr --layout HND --block-size 5 --window 33 --softcap 20) ;;
          esac
          echo pagecheck run "${common[@]}" --name "fi-$dtype-d$dim-kv$kv-$mode-$i" --q-dtype "$dtype" \
            --kv-dtype "$dtype" --head-dim "$dim" --kv-heads "$kv" --mode "$mode" --seq-len-min 1 \
            --seq-len-max 900 "${extra[@]}" --json "$OUT/sweep_$i.json" --save-failing "$OUT/bundles/sweep_$i"
        done
      done
    done
    # FP8 caches (the decode entry; the prefill entry declines them).
    for fp8 in F8_E4M3 F8_E5M2; do
      echo pagecheck run "${common[@]}" --name "fi-$dtype-$fp8-decode" --q-dtype "$dtype" --kv-dtype "$fp8" \
        --k-scale 0.5 --v-scale 1.5 --kv-heads 4 --mode decode --seq-len-min 1 --seq-len-max 3000 --layout HND \
        --json "$OUT/sweep_$dtype$fp8.json" --save-failing "$OUT/bundles/sweep_$dtype$fp8"
    done
  done >"$OUT/sweep_commands.txt"
  step sweep 330 bash -c "set -o pipefail; rc=0; while read -r line; do echo \"== \$line\"; eval \"\$line\" || rc=\$?; done <'$OUT/sweep_commands.txt'; exit \$rc" &
  wait

  # Throughput, alone on the GPU.
  # (the checks ran above; --no-checks keeps this inside one device call)
  step bench 180 pagecheck bench --kernel "$lib" --paths "direct,split,auto,prefill,fmha,$fi_paths" --no-checks \
    --json "$OUT/bench.json" --csv "$OUT/bench.csv"

  # Per path: how many cases passed, failed, errored, were n/a; then each
  # FlashInfer failure with its reason.
  python3 - "$OUT" >"$OUT/tally.txt" 2>&1 <<'EOF'
import collections, glob, json, os, sys
out = sys.argv[1]
tally = collections.defaultdict(collections.Counter)
failures = []
known = []


def known_behaviour(case, path):
    """FlashInfer's own disagreements (examples/external/flashinfer/known/):
    its FA2 prefill drops keys under a sliding window without the causal mask."""
    geometry = case.get("geometry", "")
    if path == "ext:flashinfer_prefill" and "non-causal" in geometry and ", window " in geometry:
        return "known FlashInfer behaviour: non-causal window drops keys (known/noncausal_window_keys_dropped)"
    return None
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    try:
        report = json.load(open(f))
    except Exception as e:
        print(f"{os.path.basename(f)}: unreadable ({e})")
        continue
    for case in report.get("cases", []):
        for p in case.get("paths", []):
            tally[p.get("path")][p.get("status")] += 1
            if p.get("path", "").startswith("ext:") and p.get("status") in ("fail", "error"):
                line = f"{os.path.basename(f)} {case.get('name')} {p['path']} {p['status']}: {p.get('reason')}"
                why = known_behaviour(case, p["path"]) if p.get("status") == "fail" else None
                (known if why else failures).append(line if not why else f"{line[:200]} [{why}]")
for path in sorted(tally):
    print(f"{path}: " + ", ".join(f"{k} {v}" for k, v in sorted(tally[path].items())))
print(f"FlashInfer failures: {len(failures)} (and {len(known)} of FlashInfer's known behaviours)")
for line in failures:
    print("  " + line[:400])
for line in known:
    print("  known: " + line[:400])
EOF
  echo "== tally"
  cat "$OUT/tally.txt"
  echo "== steps"
  cat "$OUT/steps.txt"
  # The device tool brings back at most 8 files of $OUT: everything else in
  # one archive (session 10's run came back without its suite report).
  (cd "$OUT" && tar czf fi_all.tgz --exclude=fi_all.tgz . && find . -mindepth 1 -maxdepth 1 ! -name fi_all.tgz \
    ! -name steps.txt ! -name tally.txt ! -name bench.log -exec rm -rf {} +)
}

case $mode in
  build) do_build ;;
  run) do_run ;;
  *) echo "usage: $0 build [ARCHS] | run" >&2; exit 2 ;;
esac
