#!/usr/bin/env bash
# The H200 part of issue 21 (pagecheck soak and the batch-invariance check),
# in two halves:
#
#   scripts/device_soak_check.sh build [ARCHS]   (here, where nvcc is)
#       configures build-soak with CUDA (CMAKE_CUDA_ARCHITECTURES=ARCHS,
#       default "90"), builds pagecheck and the example kernel libraries,
#       and packs the stripped binary and libsimple_decode{,_faulty}.so into
#       build-soak/carry (a few MB): carry that folder.
#   scripts/device_soak_check.sh run             (on the GPU machine)
#       unpacks build-soak/carry (or uses BIN=dir with pagecheck and the .so
#       files) and runs, logging to $OUT (default ./devout):
#         1. soak_builtin: pagecheck soak --minutes ${SOAK_MINUTES:-5} on the
#            built-in paths; expected exit 0 (no failure, no invalid case);
#         2. soak_faulty: soak --minutes ${FAULTY_MINUTES:-2} on the faulty
#            example kernel's entries (ext:simple_decode_stale_key,
#            ext:simple_decode_no_lse) and the correct ext:simple_decode;
#            expected exit 1, a bundle per distinct failure, each reduced,
#            each one's command.txt replaying with exit 1, and
#            ext:simple_decode never failing;
#         3. invariance_default / invariance_fixed: the default suite through
#            direct, split, auto, prefill, fmha with --check-batch-invariance,
#            under the default plan and under --plan invariant; the per-path
#            tally of the notes (invariant / not invariant / not run);
#         4. bench_default / bench_invariant: pagecheck bench --shapes decode
#            --paths auto with the default plan and with --plan invariant
#            (the cost of the batch-invariant plan).
#       The summary (steps.txt, and PASS:/FAIL: lines) is printed last.
#       STEPS="builtin" / STEPS="faulty invariance bench" run a part (one
#       device call is at most 10 minutes: the two parts take about 6 and 5).
#   scripts/device_soak_check.sh mutants         (on the GPU machine)
#       soak against the mutation self-test's binaries (see do_mutants).
set -u
cd "$(dirname "$0")/.."
mode=${1:-run}
archs=${2:-"90"}
build=${BUILD:-build-soak}

do_build() {
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGECHECK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache || exit 4
  nice -n 10 ninja -C "$build" -j"${JOBS:-2}" pagecheck simple_decode simple_decode_faulty || exit 4
  rm -rf "$build/carry" && mkdir -p "$build/carry"
  cp "$build/app/pagecheck" "$build/carry/" && strip "$build/carry/pagecheck" && gzip -f -9 "$build/carry/pagecheck"
  cp "$build"/examples/external/libsimple_decode.so "$build"/examples/external/libsimple_decode_faulty.so "$build/carry/"
  ls -la "$build/carry"
}

# step NAME TIMEOUT CMD...: scripts/device_steps.sh.
source scripts/device_steps.sh  # the scripts run from the repository root

verdict() { echo "$1: $2" | tee -a "$OUT/steps.txt"; }

# STEPS (default "builtin faulty invariance bench"): which steps run. One
# device call is at most 10 minutes: run builtin in one call and the rest in
# the next.
wants() { case " ${STEPS:-builtin faulty invariance bench} " in *" $1 "*) return 0 ;; esac; return 1; }

do_run() {
  OUT=${OUT:-./devout}
  mkdir -p "$OUT"
  : >"$OUT/steps.txt"
  local bin=${BIN:-}
  if [ -z "$bin" ]; then
    bin=$(mktemp -d)
    cp "$build/carry/"* "$bin/" && gunzip -f "$bin/pagecheck.gz" && chmod +x "$bin/pagecheck" || exit 4
  fi
  local pc="$bin/pagecheck"
  "$pc" --version | tee -a "$OUT/steps.txt"
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv | tee -a "$OUT/steps.txt"
  local minutes=${SOAK_MINUTES:-5} faulty_minutes=${FAULTY_MINUTES:-2}

  if wants builtin; then
  # 1. The built-in paths.
  step soak_builtin $((minutes * 60 + 300)) "$pc" soak --minutes "$minutes" --seed "${SOAK_SEED:-1}" --require-gpu \
    --paths reference,direct,split,auto,prefill,fmha --json "$OUT/soak_builtin.json" \
    --save-failing "$OUT/soak_builtin_failures"
  local rc=$?
  if [ $rc -eq 0 ]; then verdict PASS "soak_builtin: exit 0 ($(grep -o 'soak: seed.*' "$OUT/soak_builtin.log" | tail -1))"
  else verdict FAIL "soak_builtin: exit $rc (bundles in soak_builtin_failures)"; fi
  fi

  if wants faulty; then
  # 2. The faulty example kernel: failures, each saved once, reduced, replayable.
  step soak_faulty $((faulty_minutes * 60 + 600)) "$pc" soak --minutes "$faulty_minutes" --seed "${SOAK_SEED:-1}" --require-gpu \
    --kernel "$bin/libsimple_decode_faulty.so" --kernel "$bin/libsimple_decode.so" \
    --paths ext:simple_decode_stale_key,ext:simple_decode_no_lse,ext:simple_decode \
    --json "$OUT/soak_faulty.json" --save-failing "$OUT/soak_faulty_failures"
  rc=$?
  if [ $rc -eq 1 ]; then verdict PASS "soak_faulty: exit 1"; else verdict FAIL "soak_faulty: exit $rc, expected 1"; fi
  python3 - "$OUT" <<'EOF' | tee -a "$OUT/steps.txt"
import json, os, subprocess, sys, collections
out = sys.argv[1]
root = os.path.join(out, "soak_faulty_failures")
bundles = sorted(os.listdir(root)) if os.path.isdir(root) else []
per_path = collections.Counter()
signatures = []
for b in bundles:
    d = os.path.join(root, b)
    soak = open(os.path.join(d, "soak.txt")).read().splitlines()
    sig = soak[0].split(": ", 1)[1]
    signatures.append(sig)
    path = sig.split(" | ")[0]
    per_path[path] += 1
    cmd = open(os.path.join(d, "command.txt")).read().strip()
    rc = subprocess.run(cmd, shell=True, capture_output=True).returncode
    reduced = [l for l in soak if l.startswith("reduced in")]
    print(("PASS" if rc == 1 else "FAIL") + f": soak_faulty bundle {b}: replay exit {rc}; {reduced[0] if reduced else ''}; {sig}")
print(("PASS" if len(set(signatures)) == len(signatures) else "FAIL") + f": soak_faulty: {len(bundles)} bundles, {len(set(signatures))} distinct signatures")
for p in ("ext:simple_decode_stale_key", "ext:simple_decode_no_lse"):
    print(("PASS" if per_path[p] > 0 else "FAIL") + f": soak_faulty: {p} saved {per_path[p]} time(s)")
print(("PASS" if per_path["ext:simple_decode"] == 0 else "FAIL") + f": soak_faulty: ext:simple_decode saved {per_path['ext:simple_decode']} time(s)")
EOF
  fi

  if wants invariance; then
  # 3. Batch invariance over the default suite, default plan and --plan
  # invariant: both at once, each in INV_SHARDS shards at once (default 4;
  # the reference runs on the host's cores), merged into one report.
  invariance_run() {  # NAME [RUN OPTIONS...]
    local name=$1 i shards=${INV_SHARDS:-4} jsons=() shard_pids=()
    shift
    for ((i = 0; i < shards; ++i)); do
      step "${name}_$i" 900 "$pc" run --paths direct,split,auto,prefill,fmha --no-timing --check-batch-invariance \
        --require-gpu --shard "$i/$shards" --json "$OUT/${name}_$i.json" "$@" &
      shard_pids+=($!)
      jsons+=("$OUT/${name}_$i.json")
    done
    wait "${shard_pids[@]}"
    step "$name" 120 "$pc" merge "${jsons[@]}" --json "$OUT/$name.json"
  }
  invariance_run invariance_default &
  local pid_default=$!
  invariance_run invariance_fixed --plan invariant
  rc=$?
  wait "$pid_default"
  verdict INFO "invariance_default: exit $? (split/auto under the default plan are notes, not failures)"
  if [ $rc -eq 0 ]; then verdict PASS "invariance_fixed: exit 0"; else verdict FAIL "invariance_fixed: exit $rc"; fi
  python3 - "$OUT" <<'EOF' | tee -a "$OUT/steps.txt"
import json, sys, collections
out = sys.argv[1]
for name in ("invariance_default", "invariance_fixed"):
    try:
        report = json.load(open(f"{out}/{name}.json"))
    except Exception as e:
        print(f"FAIL: {name}: no report ({e})"); continue
    tally = collections.defaultdict(collections.Counter)
    first = {}
    for case in report["cases"]:
        for p in case["paths"]:
            note = p.get("notes", {}).get("batch_invariance")
            kind = "not run" if note is None else ("invariant" if note.startswith("invariant") else "not invariant")
            tally[p["path"]][kind] += 1
            if kind == "not invariant" and p["path"] not in first:
                first[p["path"]] = f"{case['name']}: {note}"
    for path, counts in tally.items():
        print(f"INFO: {name}: {path}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for path, line in first.items():
        print(f"INFO: {name}: {path} first: {line}")
    if name == "invariance_fixed":
        bad = [p for p, c in tally.items() if c["not invariant"] > 0]
        checked = sum(c["invariant"] for c in tally.values())
        print(("PASS" if not bad and checked > 0 else "FAIL") +
              f": invariance_fixed: {checked} path runs invariant; not invariant on {bad or 'no path'}")
    else:
        seen = [p for p in ("split", "auto") if tally[p]["not invariant"] > 0]
        print(f"INFO: invariance_default: the default plan not batch-invariant on {seen or 'no path (no case crossed a plan change)'}")
EOF
  fi

  if wants bench; then
  # 4. The cost of the batch-invariant plan on the decode bench shapes.
  step bench_default 600 "$pc" bench --shapes decode --paths auto --json "$OUT/bench_default.json"
  step bench_invariant 600 "$pc" bench --shapes decode --paths auto --plan invariant --json "$OUT/bench_invariant.json"
  python3 - "$OUT" <<'EOF' | tee -a "$OUT/steps.txt"
import json, sys
out = sys.argv[1]
def medians(name):
    r = json.load(open(f"{out}/{name}.json"))
    m = {}
    for case in r["cases"]:
        for p in case["paths"]:
            t = [s for s in p.get("timings", []) if s["stage"] in ("total", "auto")] or p.get("timings", [])
            if t: m[case["name"]] = (t[0]["median_ms"], p.get("plan", ""))
    return m
try:
    a, b = medians("bench_default"), medians("bench_invariant")
    for shape in a:
        if shape in b:
            print(f"INFO: bench {shape}: default {a[shape][0]:.4f} ms ({a[shape][1]}), invariant {b[shape][0]:.4f} ms "
                  f"({b[shape][1]}): {100 * (b[shape][0] / a[shape][0] - 1):+.1f}%")
except Exception as e:
    print(f"FAIL: bench summary: {e}")
EOF
  fi

  tar czf "$OUT/soakcheck.tgz" -C "$OUT" --exclude soakcheck.tgz . 2>/dev/null
  echo "== summary"
  cat "$OUT/steps.txt"
}

# How strong soak is (issue 21, part 3): the control and each mutant binary
# of scripts/mutants/build.sh (built from a tree that has soak) soak for
# MUTANT_SECONDS (default 90; MUTANT_GRACE, default 300, more before a
# hung one is stopped; MUTANTS, an extended regular expression, picks
# binaries by name) with --stop-on-failure, JOBS (default 4) at a
# time on the one GPU, each capped at 1/JOBS of the device memory
# (PAGECHECK_DEVICE_MEMORY_LIMIT) so that their huge pools fit side by side.
# A mutant is killed when its soak fails where the control's does not; the
# end line gives the case and the seconds of the first failure (seconds
# under JOBS-way sharing of the GPU). Writes $OUT/mutants.txt.
do_mutants() {
  OUT=${OUT:-./devout}
  mkdir -p "$OUT/mutants"
  local pack=${PACK:-build-mutants/carry/binaries.tar.xz} bin
  bin=$(mktemp -d)
  tar -C "$bin" -xJf "$pack" 2>/dev/null ||
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" "$pack" "$bin" || exit 4
  chmod +x "$bin"/*
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" NO_COLOR=1
  local seconds=${MUTANT_SECONDS:-90} jobs=${JOBS:-4} minutes total_gib
  minutes=$(awk "BEGIN { print $seconds / 60 }")
  total_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{ print int($1 / 1024) }')
  local cap="$((total_gib * 9 / 10 / jobs))G"
  ls "$bin" | grep -v '^test_' | grep -E "${MUTANTS:-.}" | xargs -P "$jobs" -I{} sh -c \
    "PAGECHECK_DEVICE_MEMORY_LIMIT=$cap timeout $((seconds + ${MUTANT_GRACE:-300})) '$bin/{}' soak --minutes $minutes \
       --seed ${SOAK_SEED:-1} --stop-on-failure --no-reduce -q --json '$OUT/mutants/{}.json' \
       --save-failing '$OUT/mutants/{}' >'$OUT/mutants/{}.log' 2>&1; echo \$? >'$OUT/mutants/{}.rc'"
  {
    echo "seed ${SOAK_SEED:-1}, $seconds s each, $jobs at a time, device memory cap $cap each"
    for f in "$OUT"/mutants/*.rc; do
      local name
      name=$(basename "$f" .rc)
      echo "$name rc=$(cat "$f"): $(grep -o 'soak: seed.*' "$OUT/mutants/$name.log" | tail -1)"
      grep -m3 '^  soak-' "$OUT/mutants/$name.log" | sed 's/^/    /'
    done
  } | tee "$OUT/mutants.txt"
}

case "$mode" in
  build) do_build ;;
  run) do_run ;;
  mutants) do_mutants ;;
  *) echo "usage: $0 build [ARCHS] | run | mutants" >&2; exit 2 ;;
esac
