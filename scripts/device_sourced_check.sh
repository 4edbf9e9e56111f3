#!/usr/bin/env bash
# On the GPU machine, after scripts/device_check.sh has unpacked the binaries
# (BIN, default /tmp/pagecheck-bin): checks that `pagecheck run`'s generated
# cases, whose caches are made on demand (Case::cache_source) and uploaded
# chunk by chunk, give every GPU path the results the same cases give when
# they are read whole from a file, and times the large decode batch of
# docs/synthetic.md. Writes $OUT/sourced/ (logs, JSON) and prints PASS/FAIL
# lines; exit 1 on any FAIL.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-/tmp/pagecheck-bin}
export PATH="$BIN:$PATH" NO_COLOR=1
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib"
out=${OUT:-devout}/sourced
work=$(mktemp -d /tmp/sourced.XXXX)
mkdir -p "$out"
fails=0

# 1. Every preset, and a decode batch large enough for several upload chunks
#    and reference batches: run (made on demand) against gen + replay (held,
#    mapped from the file), path by path.
cases=()
for p in $(pagecheck run --list-presets | awk '{print $1}'); do cases+=("--preset $p"); done
cases+=("--preset llama3-8b --seqs 16 --seq-len 4000")
i=0
for args in "${cases[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  timeout 300 pagecheck run $args --no-timing --json "$work/run$i.json" >"$out/run$i.log" 2>&1
  rc_run=$?
  # shellcheck disable=SC2086
  timeout 300 pagecheck gen $args -o "$work/case$i.safetensors" >"$out/gen$i.log" 2>&1 &&
    timeout 300 pagecheck replay "$work/case$i.safetensors" --no-timing --json "$work/replay$i.json" >"$out/replay$i.log" 2>&1
  rc_replay=$?
  cp "$work/run$i.json" "$work/replay$i.json" "$out/" 2>/dev/null
  if python3 - "$work/run$i.json" "$work/replay$i.json" "$args" "$rc_run" "$rc_replay" <<'EOF'
import json, sys
run_path, replay_path, args, rc_run, rc_replay = sys.argv[1:]
keys = ["status", "max_abs_err", "max_rel_err", "rel_l2_err", "mismatches", "nonfinite", "unwritten", "lse", "checks"]
try:
    a = json.load(open(run_path))["cases"]
    b = json.load(open(replay_path))["cases"]
except Exception as e:
    print(f"FAIL: {args}: no reports ({e}); run rc {rc_run}, replay rc {rc_replay}")
    sys.exit(1)
bad = []
if rc_run != rc_replay:
    bad.append(f"exit codes differ: run {rc_run}, replay {rc_replay}")
if len(a) != len(b):
    bad.append(f"{len(a)} cases against {len(b)}")
paths = 0
for ca, cb in zip(a, b):
    pa = {p["path"]: p for p in ca["paths"]}
    pb = {p["path"]: p for p in cb["paths"]}
    if sorted(pa) != sorted(pb):
        bad.append(f"paths differ: {sorted(pa)} against {sorted(pb)}")
    for name in pa:
        if name not in pb:
            continue
        paths += 1
        for k in keys:
            if pa[name].get(k) != pb[name].get(k):
                bad.append(f"{name}.{k}: run {pa[name].get(k)} replay {pb[name].get(k)}")
statuses = sorted({p["status"] for c in a for p in c["paths"]})
if bad:
    print(f"FAIL: {args}: " + "; ".join(bad[:6]))
    sys.exit(1)
print(f"PASS: {args}: {paths} path rows equal between run (made on demand) and replay (held), statuses {statuses}, exit {rc_run}")
EOF
  then :; else fails=$((fails + 1)); fi
  rm -f "$work/case$i.safetensors"
done

# 2. The large batch of docs/synthetic.md through every path, timed.
/usr/bin/time -v timeout 400 pagecheck run --preset llama3-8b --seqs 64 --seq-len 8192 --json "$out/big.json" \
  >"$out/big.log" 2>&1
rc=$?
if [ "$rc" = 0 ]; then echo "PASS: llama3-8b 64 x 8192, every path: exit 0"; else echo "FAIL: llama3-8b 64 x 8192: exit $rc"; fails=$((fails + 1)); fi
grep -E "Elapsed|Maximum resident|User time|System time" "$out/big.log" | sed 's/^\s*/INFO: big: /'
python3 - "$out/big.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"INFO: big: no JSON ({e})")
    sys.exit(0)
for c in d["cases"]:
    for p in c["paths"]:
        t = {s["stage"]: round(s["median_ms"], 1) for s in p.get("timings", [])}
        caches = p.get("notes", {}).get("caches_ms")
        print(f"INFO: big: {p['path']} {p['status']} {t}" + (f" caches_ms {caches}" if caches else ""))
EOF
rm -rf "$work"
echo "sourced check: $fails FAIL"
[ "$fails" = 0 ]
