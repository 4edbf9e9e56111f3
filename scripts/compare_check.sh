#!/usr/bin/env bash
# The GPU check of `pagecheck compare` (issue 22), in halves:
#
#   scripts/compare_check.sh build [ARCHS]   (where the dependencies and nvcc are)
#       configures build-compare with CMAKE_CUDA_ARCHITECTURES=ARCHS (default
#       "90": the H200), builds pagecheck, packs it stripped into
#       build-compare/carry/pagecheck.gz; then applies the timing mutant
#       scripts/mutants-timing/split-twice.patch (split launches its kernels
#       twice: the same output, about twice the time), builds again into
#       carry/pagecheck-slow.gz, and reverts the patch (the rebuild after the
#       revert is a ccache hit). Carry build-compare/carry (~10 MB).
#   scripts/compare_check.sh run             (on the GPU machine, ~3 min)
#       unpacks build-compare/carry (or BIN=dir of binaries) and checks, each
#       a PASS/FAIL line in $OUT/steps.txt:
#         two `bench --shapes decode --repeats 50` runs of one binary compare
#         as `same` on every path (exit 0);
#         the slowed binary's bench compares `slower` on every split row and
#         `same` on every other row (exit 1);
#         two `run --preset llama3-8b --preset mistral-7b-window` runs of one
#         binary (the reference included) compare as same (exit 0).
#       The reports, the comparisons (table, --json, --html, --junit) and the
#       logs go to $OUT (default ./compareout).
set -u
cd "$(dirname "$0")/.."
mode=${1:-run}
archs=${2:-90}
build=${BUILD:-build-compare}
OUT=${OUT:-compareout}

do_build() {
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGECHECK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache || exit 4
  mkdir -p "$build/carry"
  pack() {
    cp "$build/app/pagecheck" "$build/carry/$1" && strip "$build/carry/$1" && gzip -f -9 "$build/carry/$1"
  }
  nice -n 10 ninja -C "$build" -j"${JOBS:-2}" pagecheck || exit 4
  pack pagecheck
  git apply scripts/mutants-timing/split-twice.patch || exit 4
  nice -n 10 ninja -C "$build" -j"${JOBS:-2}" pagecheck
  local rc=$?
  [ $rc -eq 0 ] && pack pagecheck-slow
  git apply -R scripts/mutants-timing/split-twice.patch || exit 4
  [ $rc -eq 0 ] || exit 4
  nice -n 10 ninja -C "$build" -j"${JOBS:-2}" pagecheck || exit 4
  ls -la "$build/carry"
}

result() {  # result NAME PASS|FAIL DETAIL
  echo "$2: $1 $3" | tee -a "$OUT/steps.txt"
}

do_run() {
  mkdir -p "$OUT"
  : >"$OUT/steps.txt"
  local bin=${BIN:-}
  if [ -z "$bin" ]; then
    bin="$OUT/bin"
    mkdir -p "$bin"
    for f in pagecheck pagecheck-slow; do
      gunzip -c "$build/carry/$f.gz" >"$bin/$f" && chmod +x "$bin/$f" || exit 4
    done
  fi
  nvidia-smi -q -d CLOCK,POWER,PERFORMANCE >"$OUT/nvidia-smi.txt" 2>&1
  local bench=(bench --shapes decode --repeats 50 --no-color)
  "$bin/pagecheck" "${bench[@]}" --json "$OUT/bench-a.json" >"$OUT/bench-a.log" 2>&1
  echo "bench-a rc=$?" | tee -a "$OUT/steps.txt"
  "$bin/pagecheck" "${bench[@]}" --json "$OUT/bench-b.json" >"$OUT/bench-b.log" 2>&1
  echo "bench-b rc=$?" | tee -a "$OUT/steps.txt"
  "$bin/pagecheck-slow" "${bench[@]}" --json "$OUT/bench-slow.json" >"$OUT/bench-slow.log" 2>&1
  echo "bench-slow rc=$?" | tee -a "$OUT/steps.txt"

  # compare_step NAME WANT_EXIT RULE BASE NEW: a comparison and the rule its
  # JSON must meet (all-same; split-slower: every split row slower, every
  # other row same).
  compare_step() {
    local name=$1 want=$2 rule=$3 base=$4 new=$5
    "$bin/pagecheck" compare "$base" "$new" --no-color --json "$OUT/$name.json" --html "$OUT/$name.html" \
      --junit "$OUT/$name.xml" >"$OUT/$name.txt" 2>&1
    local rc=$? verdicts vrc
    verdicts=$(python3 - "$OUT/$name.json" "$rule" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
rows = [(c["name"], p["path"], p["verdicts"], p["change_pct"]) for c in j["cases"] for p in c["paths"]]
slowed = [r for r in rows if sys.argv[2] == "split-slower" and r[1] == "split"]
wrong_slowed = [r for r in slowed if r[2] != ["slower"]]
wrong_other = [r for r in rows if r not in slowed and r[2] != ["same"]]
changes = ", ".join(f"{r[3]:+.0f}%" for r in slowed if r[3] is not None)
print(f"{len(rows)} rows; {len(slowed)} slowed (changes {changes}), {len(wrong_slowed)} not slower: {wrong_slowed[:4]}; "
      f"{len(wrong_other)} other rows not same: {wrong_other[:6]}")
sys.exit(0 if rows and (slowed or sys.argv[2] == "all-same") and not wrong_slowed and not wrong_other else 1)
EOF
    )
    vrc=$?
    if [ $rc -eq "$want" ] && [ $vrc -eq 0 ]; then result "$name" PASS "exit $rc; $verdicts"
    else result "$name" FAIL "exit $rc (want $want); $verdicts"; fi
  }

  compare_step same-binary 0 all-same "$OUT/bench-a.json" "$OUT/bench-b.json"
  compare_step slowed-split 1 split-slower "$OUT/bench-a.json" "$OUT/bench-slow.json"

  local run=(run --preset llama3-8b --preset mistral-7b-window --no-color -q)
  "$bin/pagecheck" "${run[@]}" --json "$OUT/run-a.json" >"$OUT/run-a.log" 2>&1
  echo "run-a rc=$?" | tee -a "$OUT/steps.txt"
  "$bin/pagecheck" "${run[@]}" --json "$OUT/run-b.json" >"$OUT/run-b.log" 2>&1
  echo "run-b rc=$?" | tee -a "$OUT/steps.txt"
  compare_step same-binary-run 0 all-same "$OUT/run-a.json" "$OUT/run-b.json"
  echo "--- steps"
  cat "$OUT/steps.txt"
  ! grep -q '^FAIL' "$OUT/steps.txt"
}

case "$mode" in
  build) do_build ;;
  run) do_run ;;
  *) echo "usage: $0 build [ARCHS] | run" >&2; exit 2 ;;
esac
