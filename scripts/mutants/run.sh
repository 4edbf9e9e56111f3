#!/usr/bin/env bash
# The mutation self-test, run half (on the GPU machine, from the repository
# root, in one device call): the control and every mutant binary packed by
# scripts/mutants/build.sh (build-mutants/carry/binaries.tar.xz) run the default suite
# through every path with every check; mutants whose fault needs more than
# the suite get their extra step (the patch's "# extra:" line, MUTANTS.md):
#   huge      the 32-bit-offset mutant: a cache of more than 2^31 elements
#             with block ids above 65535 (4 x 2048 tokens, block 16, 8/8
#             heads, d128, pool factor 300: 153600 pages x 16 x 8 x 128 =
#             2.52e9 elements per cache), reference/direct/split/prefill;
#   racecheck the missing-barrier mutant: compute-sanitizer racecheck on a
#             small decode case (direct, split).
# The control runs every extra step too and must pass all of them, and the
# GPU tests (test_gpu_core, test_gpu_decode, test_gpu_prefill of the same
# build: the harness checks this self-test added among them).
# A mutant is killed when a step exits non-zero: 1 (a path failed: wrong
# output or LSE, unwritten elements, a failed check), 4 (a path errored),
# 9 (the sanitizer reported hazards), 124/137 (it hung past its timeout).
# Output under $OUT (default ./mutout): table.txt (also printed), table.json,
# mutants.tgz (every JSON report and log).
#   JOBS=N      parallel steps (default 8)
#   BUDGET=S    seconds for all steps (default 470): a step gets at most what
#               is left of it, one that would start with less than 20 s left
#               is not run (rc 125), so the table is always written
#   ONLY="NN.." run only these mutants (and the control)
#   PATHS=LIST  the suite's paths (default all six; fewer for a short call
#               whose mutants break only some of them)
#   EXTRAS="huge racecheck tests"  the extra steps to run (default all three)
#   PACK=FILE   the binaries (default build-mutants/carry/binaries.tar.xz)
set -u
cd "$(dirname "$0")/../.."
final=${OUT:-mutout}
mkdir -p "$final"
work=$(mktemp -d /tmp/mutants.XXXX)
bin=$work/bin
mkdir -p "$bin" "$work/out"
pack=${PACK:-build-mutants/carry/binaries.tar.xz}
extras=" ${EXTRAS:-huge racecheck tests} "
# tar -J needs xz; python3's lzma does not.
tar -C "$bin" -xJf "$pack" 2>/dev/null ||
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" "$pack" "$bin" || {
  echo "cannot unpack $pack" >&2
  exit 4
}
# The control's GPU tests travel in their own pack beside it (build.sh).
tests_pack=$(dirname "$pack")/tests.tar.xz
if [ -f "$tests_pack" ]; then
  tar -C "$bin" -xJf "$tests_pack" 2>/dev/null ||
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" "$tests_pack" "$bin" ||
    echo "cannot unpack $tests_pack: the GPU tests step will not run" >&2
fi
chmod +x "$bin"/*
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib"
export PATH="$PATH:/usr/local/cuda/bin" NO_COLOR=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$work/out/device.txt" 2>&1
ldd "$bin/00-control" | grep -i "not found" >>"$work/out/device.txt"
"$bin/00-control" run --list-suite >"$work/out/suite.txt" 2>&1 || true

all_paths=${PATHS:-reference,direct,split,auto,prefill,fmha}
huge_args="run --name huge --seqs 4 --q-heads 8 --kv-heads 8 --head-dim 128 --block-size 16 --seq-len 2048
  --pool-factor 300 --no-share-pages --no-timing"
race_args="run --name race-decode --seqs 3 --q-heads 8 --kv-heads 2 --head-dim 128 --block-size 16
  --seq-lens 17,300,1100 --mode decode --paths direct,split --plan split:256:256 --no-timing --no-checks"

# One step: NAME KIND, KIND suite | huge | racecheck | test (NAME: a GPU test binary).
# limit LIMIT: LIMIT, or what is left of the budget if less.
limit() {
  local left=$((deadline - $(date +%s)))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
step() {
  local name=$1 kind=$2 exe=$bin/$1 t0=$SECONDS rc
  local out=$work/out/$name.$kind
  if [ $((deadline - $(date +%s))) -lt 20 ]; then
    echo "125 0" >"$out.rc"
    echo "[$(date +%H:%M:%S)] $name $kind not run: the budget is spent"
    return
  fi
  case "$kind" in
    suite) timeout -k 10 "$(limit "${SUITE_TIMEOUT:-240}")" "$exe" run --paths "$all_paths" --no-timing --json "$out.json" -q \
             >"$out.log" 2>&1 ;;
    huge) local paths=reference,direct,split,prefill
          [ "$name" = 00-control ] || paths=reference,prefill
          # shellcheck disable=SC2086
          timeout -k 10 "$(limit "${HUGE_TIMEOUT:-300}")" "$exe" $huge_args --paths "$paths" --json "$out.json" >"$out.log" 2>&1 ;;
    test) timeout -k 10 "$(limit "${TEST_TIMEOUT:-240}")" "$exe" >"$out.log" 2>&1 ;;
    racecheck) # shellcheck disable=SC2086
          timeout -k 10 "$(limit "${RACE_TIMEOUT:-240}")" compute-sanitizer --tool racecheck --error-exitcode 9 "$exe" $race_args \
            --json "$out.json" >"$out.log" 2>&1 ;;
  esac
  rc=$?
  echo "$rc $((SECONDS - t0))" >"$out.rc"
  echo "[$(date +%H:%M:%S)] $name $kind rc=$rc ($((SECONDS - t0)) s)"
}
deadline=$(($(date +%s) + ${BUDGET:-470}))
export -f step limit
export work bin all_paths huge_args race_args deadline

# The job list: extras first (the longest), then the control, then the mutants.
jobs=$work/jobs.txt
: >"$jobs"
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" ${1%%-*} "* ]]; }
for kind in huge racecheck; do
  [[ "$extras" == *" $kind "* ]] || continue
  grep -l "^# extra: $kind" scripts/mutants/*.patch 2>/dev/null | while read -r p; do
    n=$(basename "$p" .patch); [ -x "$bin/$n" ] && wanted "$n" && echo "$n $kind"; done >>"$jobs"
  echo "00-control $kind" >>"$jobs"
done
echo "00-control suite" >>"$jobs"
for e in "$bin"/[0-9][0-9]-*; do
  n=$(basename "$e"); [ "$n" = 00-control ] && continue
  wanted "$n" && echo "$n suite" >>"$jobs"
done
# The GPU tests last: they check the harness, not the mutants.
if [[ "$extras" == *" tests "* ]]; then
  for t in test_gpu_core test_gpu_decode test_gpu_prefill; do [ -x "$bin/$t" ] && echo "$t test" >>"$jobs"; done
fi
echo "$(wc -l <"$jobs") steps, ${JOBS:-8} at a time"
xargs -P "${JOBS:-8}" -L 1 bash -c 'step "$0" "$1"' <"$jobs"

cp scripts/mutants/*.patch "$work/out/" 2>/dev/null
python3 scripts/mutants/summarize.py "$work/out" "$final" scripts/mutants
tar czf "$final/mutants.tgz" -C "$work/out" .
echo "== $final: $(ls "$final" | tr '\n' ' ')"
