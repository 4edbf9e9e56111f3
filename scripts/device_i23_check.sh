#!/usr/bin/env bash
# Issue 23, items 1 and 3 in the built-in decode paths (attention sinks and
# ALiBi through direct, split and auto): one call on the GPU machine, from
# the repository root, with OUT set (default ./devout).
#
#   scripts/device_i23_check.sh          correctness, < 4 min on an H100/H200
#   scripts/device_i23_check.sh bench    timing A/B of the decode paths on
#                                        cases without sinks/ALiBi: HEAD's
#                                        binary (pagecheck-base) against this
#                                        one, interleaved, alone on the GPU
#                                        (four runs of at most 110 s each)
#
# Carry (packed by the builder, stripped and gzipped): build-i23/carry
# (pagecheck, test_gpu_decode, test_gpu_core) for the check;
# build-i23/carry-bench (pagecheck, pagecheck-base) for `bench`.
# The correctness steps run at once (the GPU and 16 cores have room):
#   - test_gpu_decode (issue 3's sweeps and issue 23's: sinks, ALiBi and both
#     over block sizes 1/7/16/32, windows that empty split partitions,
#     softcap, every KV dtype, GQA 1/4/8/MQA, head dims, graphs) and
#     test_gpu_core (the harness: upload, checks, graphs);
#   - the covering suite through reference,direct,split,auto with the default
#     plan and with split:64:100 (many partitions, empty ones), each checked by
#     scripts/check_suite_report.py (every decode-family case passes on
#     direct/split/auto, every other case is n/a) and by a count of the
#     sink/ALiBi cases that ran and passed on each decode path;
#   - generated sink/ALiBi cases through `run` (BF16: the tensor-core loop
#     for sinks; fp8, F32, block 1 and 7, window, softcap) and one through
#     `gen` + `replay`;
#   - compute-sanitizer memcheck over one sink case and one ALiBi case,
#     every decode path, with the harness's checks (graph, repeat).
# Every step has a 200 s limit and they all run at once, so the call ends
# within about 3.5 min whatever hangs. Prints one PASS/FAIL line per step and
# property, then "i23: N PASS, M FAIL" (exit 1 on any FAIL); everything
# (logs, JSON reports) is in $OUT/i23.tgz.
# bench: pagecheck-base is HEAD's pagecheck before the change (built from
# 5ccbe59, whose decode code is HEAD's), same flags (sm_90, Release).
set -u
cd "$(dirname "$0")/.."
mode=${1:-check}
final=${OUT:-devout}
mkdir -p "$final"
OUT=$(mktemp -d /tmp/i23.XXXX)
: >"$OUT/steps.txt"

BIN=${BIN:-/tmp/i23-bin}
mkdir -p "$BIN"
carry=build-i23/carry
[ "$mode" = bench ] && carry=build-i23/carry-bench
for f in "$carry"/*.gz; do gunzip -c "$f" >"$BIN/$(basename "$f" .gz)"; done
chmod +x "$BIN"/*
export PATH="$BIN:$PATH" NO_COLOR=1
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:/usr/local/cuda/lib"

# step NAME TIMEOUT CMD...: logs to $OUT/NAME.log, "NAME rc=..." in steps.txt.
source scripts/device_steps.sh

verdict() {  # verdict NAME: PASS when the step's rc was 0
  local rc
  rc=$(sed -n "s/^$1 rc=\([0-9]*\).*/\1/p" "$OUT/steps.txt" | tail -1)
  if [ "$rc" = 0 ]; then echo "PASS: $1" >>"$OUT/results.txt"
  else echo "FAIL: $1 (rc=${rc:-none}; $1.log)" >>"$OUT/results.txt"; fi
}

finish() {
  tar czf "$final/i23.tgz" -C "$OUT" .
  cp "$OUT"/steps.txt "$OUT"/results.txt "$final/" 2>/dev/null
  echo "== device"
  cat "$OUT/device.txt"
  echo "== steps"
  cat "$OUT/steps.txt"
  echo "== results"
  cat "$OUT/results.txt"
  echo "i23: $(grep -c '^PASS' "$OUT/results.txt") PASS, $(grep -c '^FAIL' "$OUT/results.txt") FAIL"
  grep -q '^FAIL' "$OUT/results.txt" && exit 1
  exit 0
}

nvidia-smi --query-gpu=name,driver_version,memory.used,memory.free --format=csv >"$OUT/device.txt" 2>&1
ldd "$BIN/pagecheck" | grep -i "not found" >>"$OUT/device.txt"
: >"$OUT/results.txt"

if [ "$mode" = bench ]; then
  # The decode shapes (32/8 heads, d128, BF16, block 16) through direct,
  # split and auto: base, new, base, new, alone on the GPU. Cases without
  # sinks or ALiBi: the new binary should time as the base one does.
  [ -x "$BIN/pagecheck-base" ] || { echo "FAIL: bench needs pagecheck-base in build-i23/carry-bench" >>"$OUT/results.txt"; finish; }
  for round in 1 2; do
    for which in base new; do
      exe=pagecheck; [ $which = base ] && exe=pagecheck-base
      step "bench_${which}_$round" 110 "$exe" bench --shapes decode --paths direct,split,auto --no-checks \
        --json "$OUT/bench_${which}_$round.json"
      verdict "bench_${which}_$round"
    done
  done
  python3 - "$OUT" >>"$OUT/results.txt" <<'EOF'
import json, sys, statistics
out = sys.argv[1]
times = {}
for which in ("base", "new"):
    for r in (1, 2):
        try:
            rep = json.load(open(f"{out}/bench_{which}_{r}.json"))
        except Exception as e:
            print(f"FAIL: bench {which} {r}: {e}")
            continue
        for c in rep["cases"]:
            for p in c["paths"]:
                stages = p.get("timings") or []
                head = next((s for s in stages if s.get("stage") == "total"), stages[0] if stages else {})
                med = head.get("median_ms")
                if med is not None:
                    times.setdefault((c["name"], p["path"]), {}).setdefault(which, []).append(med)
for (case, path), t in sorted(times.items()):
    if "base" in t and "new" in t:
        b, n = min(t["base"]), min(t["new"])
        print(f"INFO: {case} {path}: base {b:.4f} ms, new {n:.4f} ms ({100 * (n - b) / b:+.1f}%; best of 2 each)")
EOF
  finish
fi

paths=reference,direct,split,auto
pagecheck run --list-suite >"$OUT/suite-list.txt" 2>&1

step gpu_test_decode 200 test_gpu_decode &
step gpu_test_core 200 test_gpu_core &
step suite 200 pagecheck run --paths "$paths" --no-timing --require-gpu --json "$OUT/suite.json" &
step suite_split64 200 pagecheck run --paths "$paths" --plan split:64:100 --no-timing --require-gpu --json "$OUT/suite_split64.json" &

# Generated cases: sinks on BF16 (tensor-core loop), ALiBi on fp8 with block 7,
# window and softcap, both on F32 at block 1 with many partitions.
common=(--mode decode --no-timing --require-gpu --paths "$paths")
step gen_sinks_bf16 200 pagecheck run --name i23-sinks-bf16 --seqs 8 --seq-len-min 1 --seq-len-max 3000 \
  --q-heads 32 --kv-heads 4 --head-dim 128 --block-size 16 --sinks "${common[@]}" --json "$OUT/gen_sinks_bf16.json" &
step gen_alibi_fp8 200 pagecheck run --name i23-alibi-fp8 --seqs 8 --seq-len-min 1 --seq-len-max 3000 \
  --q-heads 16 --kv-heads 2 --head-dim 128 --block-size 7 --kv-dtype F8_E4M3 --window 300 --softcap 20 --alibi \
  "${common[@]}" --json "$OUT/gen_alibi_fp8.json" &
step gen_both_f32 200 pagecheck run --name i23-both-f32 --seqs 6 --seq-len-min 1 --seq-len-max 1500 \
  --q-heads 12 --kv-heads 3 --head-dim 64 --block-size 1 --kv-dtype F32 --sinks --alibi --window 200 \
  --plan split:64:100 "${common[@]}" --json "$OUT/gen_both_f32.json" &
step gen_replay 200 bash -c "pagecheck gen -o '$OUT/i23-case.safetensors' --name i23-file --seqs 4 --seq-len-min 1 \
  --seq-len-max 2000 --q-heads 8 --kv-heads 2 --head-dim 128 --block-size 32 --mode decode --sinks --alibi \
  --with-output && pagecheck replay '$OUT/i23-case.safetensors' --paths $paths --no-timing --json '$OUT/gen_replay.json'" &

# memcheck with the harness's checks: one sink case, one ALiBi case.
step memcheck_sinks 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  pagecheck run --name i23-mc-sinks --seqs 4 --seq-len-min 1 --seq-len-max 1200 --q-heads 8 --kv-heads 2 \
  --head-dim 128 --block-size 16 --sinks --window 100 --plan split:64:100 "${common[@]}" &
step memcheck_alibi 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  pagecheck run --name i23-mc-alibi --seqs 4 --seq-len-min 1 --seq-len-max 1200 --q-heads 8 --kv-heads 2 \
  --head-dim 64 --block-size 7 --alibi --softcap 20 "${common[@]}" &
wait

for s in gpu_test_decode gpu_test_core suite suite_split64 gen_sinks_bf16 gen_alibi_fp8 gen_both_f32 gen_replay \
  memcheck_sinks memcheck_alibi; do
  verdict "$s"
done
for s in suite suite_split64; do
  if python3 scripts/check_suite_report.py "$OUT/suite-list.txt" "$OUT/$s.json" >"$OUT/${s}_report.log" 2>&1; then
    echo "PASS: $s check_suite_report ($(tail -1 "$OUT/${s}_report.log"))" >>"$OUT/results.txt"
  else
    echo "FAIL: $s check_suite_report (${s}_report.log)" >>"$OUT/results.txt"
  fi
done
# Each decode path passed on sink and ALiBi cases (none n/a for them), and
# each generated case ran every decode path.
python3 - "$OUT" >>"$OUT/results.txt" <<'EOF'
import json, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(f"{out}/{name}.json"))
    except Exception as e:
        print(f"FAIL: {name}.json unreadable: {e}")
        return None
for name in ("suite", "suite_split64"):
    rep = load(name)
    if rep is None:
        continue
    for feature in ("sinks", "alibi"):
        for path in ("direct", "split", "auto"):
            passed = refused = 0
            for c in rep["cases"]:
                if feature not in (c.get("geometry") or "").split(", "):
                    continue
                for p in c["paths"]:
                    if p["path"] != path:
                        continue
                    passed += p["status"] == "pass"
                    refused += p["status"] == "n/a" and ("sinks" in (p.get("reason") or "") or "ALiBi" in (p.get("reason") or ""))
            ok = passed > 0 and refused == 0
            print(f"{'PASS' if ok else 'FAIL'}: {name}: {path} passed {passed} {feature} cases, {refused} n/a for the feature")
for name in ("gen_sinks_bf16", "gen_alibi_fp8", "gen_both_f32", "gen_replay"):
    rep = load(name)
    if rep is None:
        continue
    for c in rep["cases"]:
        status = {p["path"]: p["status"] for p in c["paths"]}
        ok = all(status.get(p) == "pass" for p in ("reference", "direct", "split", "auto"))
        print(f"{'PASS' if ok else 'FAIL'}: {name} {c['name']}: {status}")
EOF
finish
