#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest. Without a
# GPU the GPU tests skip (and say so); everything else must pass. Then, unless
# PAGECHECK_SKIP_SANITIZERS=1:
#   - the tests again in an ASan + UBSan CPU-only build (its own folder), any
#     report failing the run;
#   - a one-minute libFuzzer smoke run of the case-file path over the seed
#     corpus with a fixed seed (clang; tests/fuzz/), any crash, sanitizer
#     report, leak or input above the RSS limit failing the run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${PAGECHECK_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"

if [ "${PAGECHECK_SKIP_SANITIZERS:-0}" = 1 ]; then
  echo "build-and-test: PAGECHECK_SKIP_SANITIZERS=1: no sanitizer build, no fuzz run"
  exit 0
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1 -g1 (build type None: no other flags): what the sanitizers recommend,
# and about half the compile time of -O2 -g on two cores; line tables are
# enough for the reports' stacks.
san_opt="-O1 -g1"
# halt_on_error and abort: any report fails the test that hit it, so ctest
# fails; detect_leaks: a leak is a report too.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"

# 1. ASan + UBSan tests: the library, the reference and the tests, CPU-only.
# The CLI tests run the real binary, sanitized too.
asan_dir="${PAGECHECK_ASAN_BUILD_DIR:-$root/build-asan}"
start=$SECONDS
cmake -S "$root" -B "$asan_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=None -DPAGECHECK_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS=$sanitize $san_opt" "-DCMAKE_EXE_LINKER_FLAGS=$sanitize"
cmake --build "$asan_dir" -j "$(nproc)"
ctest --test-dir "$asan_dir" --output-on-failure -j "$(nproc)"
echo "build-and-test: ASan + UBSan tests passed ($((SECONDS - start)) s)"

# 2. Fuzz smoke run (clang): a minute over a copy of the seed corpus, fixed
# seed; -rss_limit_mb bounds what any one input may make the process hold.
fuzz_dir="${PAGECHECK_FUZZ_BUILD_DIR:-$root/build-fuzz}"
start=$SECONDS
CC=clang CXX=clang++ cmake -S "$root" -B "$fuzz_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=None \
  -DPAGECHECK_CUDA=OFF -DPAGECHECK_FUZZ=ON \
  "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined $san_opt"
cmake --build "$fuzz_dir" -j "$(nproc)" --target fuzz_case_file
corpus="$fuzz_dir/corpus"
rm -rf "$corpus" && mkdir -p "$corpus"
cp "$root"/tests/fuzz/corpus/* "$corpus/"
fuzz_seconds="${PAGECHECK_FUZZ_SECONDS:-60}"
if ! "$fuzz_dir/tests/fuzz/fuzz_case_file" -seed=1 -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 \
  -max_len=4096 -timeout=30 -print_final_stats=1 -artifact_prefix="$fuzz_dir/" \
  -dict="$root/tests/fuzz/case_file.dict" "$corpus" >"$fuzz_dir/fuzz.log" 2>&1; then
  tail -n 80 "$fuzz_dir/fuzz.log" >&2
  echo "build-and-test: the fuzz smoke run found a problem (artifacts in $fuzz_dir, log $fuzz_dir/fuzz.log)" >&2
  exit 1
fi
grep -E "^stat::(number_of_executed_units|peak_rss_mb)" "$fuzz_dir/fuzz.log" || true
echo "build-and-test: fuzz smoke run clean ($((SECONDS - start)) s with the build)"
