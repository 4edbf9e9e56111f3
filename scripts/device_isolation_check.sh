#!/usr/bin/env bash
# The device check of issue 19 (docs/cli.md "Isolation", "Interrupts"), in
# halves:
#
#   scripts/device_isolation_check.sh build [ARCHS]   (here, with nvcc)
#       configures build-isolation (CMAKE_CUDA_ARCHITECTURES=ARCHS, default
#       90), builds pagecheck and the example kernel libraries simple_decode
#       and pagecheck_misbehaving, and packs the stripped binaries into
#       build-isolation/carry/ (a few MiB: carry that folder).
#   scripts/device_isolation_check.sh run             (on the GPU machine)
#       1. clean: the default suite with the correct external kernel
#          ext:simple_decode, every path (the reference of each case).
#       2. for each misbehaving entry (oob_write, trap, spin): the same run
#          with ext:<entry> added. The report must be complete (every case
#          of the clean run), the faulty path `error` with its reason on the
#          cases where it ran (an illegal address, a lost context, a timeout)
#          and skipped after its second, said once in the run errors, and
#          every other path of every case with the status it has in the clean
#          run. Then a short run on the same GPU must still pass.
#       2b. the same for stale_lengths and wrong_stream: the path `fail`
#          with its reason (the changed lengths did not reach the kernels;
#          the kernel ran work outside its stream), every other path as in
#          the clean run; and `--seqs 8 --seq-len 300` with stale_lengths
#          (every sequence at capacity) fails on the dropped keys.
#       3. SIGTERM during a device run of the default suite (timed), after
#          its fifth case: exit 143, complete JSON/CSV/JUnit reports of the
#          finished cases marked interrupted, no worker process left.
#       4. SIGTERM while ext:spin hangs with --path-timeout 0 (once the
#          progress line shows it): the same, the case in flight in
#          ext:spin, and the GPU still runs a case afterwards.
#       ENTRIES="stale_lengths wrong_stream" picks the entries of steps 2/2b
#       (default all five) and SIGTERM_STEPS=0 leaves out 3 and 4, so the
#       check fits 10-minute device calls.
#       Logs, reports and steps.txt (one PASS/FAIL line per property) in
#       $OUT (default ./devout-isolation), packed as $OUT/isolation.tgz.
set -u
cd "$(dirname "$0")/.."
mode=${1:-run}
archs=${2:-90}
build=${BUILD:-build-isolation}

do_build() {
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGECHECK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache || exit 4
  ninja -C "$build" -j"${JOBS:-2}" pagecheck simple_decode pagecheck_misbehaving || exit 4
  rm -rf "$build/carry"
  mkdir -p "$build/carry"
  cp "$build/app/pagecheck" "$build/carry/" && strip "$build/carry/pagecheck" && gzip -f -9 "$build/carry/pagecheck"
  cp "$build"/examples/external/libsimple_decode.so "$build"/examples/external/libpagecheck_misbehaving.so \
    "$build/carry/"
  ls -la "$build/carry"
}

if [ "$mode" = build ]; then
  do_build
  exit 0
fi
if [ "$mode" != run ]; then
  echo "usage: $0 build [ARCHS] | run" >&2
  exit 2
fi

OUT=${OUT:-./devout-isolation}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BIN=${BIN:-/tmp/pagecheck-isolation-bin}
mkdir -p "$BIN"
[ -f "$build/carry/pagecheck.gz" ] && gunzip -c "$build/carry/pagecheck.gz" >"$BIN/pagecheck"
cp "$build"/carry/*.so "$BIN/" 2>/dev/null
chmod +x "$BIN/pagecheck"
export NO_COLOR=1 PAGECHECK_PROGRESS_SECONDS=30
pc="$BIN/pagecheck"
simple="$BIN/libsimple_decode.so"
bad="$BIN/libpagecheck_misbehaving.so"
: >"$OUT/steps.txt"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
"$pc" --version >>"$OUT/nvidia-smi.txt" 2>&1

say() { echo "$1" | tee -a "$OUT/steps.txt"; }
# step NAME TIMEOUT CMD...: CMD with a time limit, its output in NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  say "INFO: $name rc=$rc ($((SECONDS - t0)) s)"
  return $rc
}
no_workers_left() {
  sleep 2
  if pgrep -f -- "--isolation-worker" >"$OUT/$1.leftover" 2>&1; then
    say "FAIL: $1: a worker process is left: $(cat "$OUT/$1.leftover" | tr '\n' ' ')"
  else
    say "PASS: $1: no worker process left"
  fi
}
gpu_still_runs() {
  step "$1-after" 300 "$pc" run --preset llama3-8b --paths reference,direct,split --no-timing
  if [ $? -eq 0 ]; then say "PASS: $1: the GPU runs a case afterwards"; else say "FAIL: $1: the GPU fails a case afterwards"; fi
}

# 1. The clean run.
step clean 1800 "$pc" run --kernel "$simple" --no-timing --json "$OUT/clean.json"
clean_rc=$?
[ $clean_rc -eq 0 ] && say "PASS: clean run exit 0" || say "FAIL: clean run exit $clean_rc"

# 2. Each misbehaving path in the default suite. oob_write, trap and spin
# end the worker: `error` with the reason on the first two cases it ran
# (exit 4). stale_lengths and wrong_stream compute the right numbers the
# wrong way (issue 19 item 5): `fail` with the reason on every case it ran
# (exit 1), except, for stale_lengths, a case where the graph check could
# change no length. Every other path as in the clean run, in both kinds.
for entry in ${ENTRIES:-oob_write trap spin stale_lengths wrong_stream}; do
  limit=20
  case $entry in stale_lengths | wrong_stream) limit=60 ;; esac
  step "bad-$entry" 2400 "$pc" run --kernel "$simple" --kernel "$bad" \
    --paths "reference,direct,split,auto,prefill,fmha,ext:simple_decode,ext:$entry" --path-timeout $limit --no-timing \
    --json "$OUT/bad-$entry.json" --junit "$OUT/bad-$entry.xml"
  echo "rc=$?" >"$OUT/bad-$entry.rc"
  python3 - "$OUT/clean.json" "$OUT/bad-$entry.json" "ext:$entry" "$(cat "$OUT/bad-$entry.rc")" <<'PY' | tee -a "$OUT/steps.txt"
import json, sys
clean_file, bad_file, faulty, rc = sys.argv[1:5]
tag = f"bad {faulty}"
try:
    clean = json.load(open(clean_file))
    bad = json.load(open(bad_file))
except Exception as e:
    print(f"FAIL: {tag}: a report does not load: {e}")
    sys.exit(0)
# entry: (status of the faulty path, reason it must give, exit code)
kind, expect, code = {
    "ext:oob_write": ("error", "cudaErrorIllegalAddress", 4),
    "ext:trap": ("error", "the CUDA context is lost", 4),
    "ext:spin": ("error", "timed out after 20 s", 4),
    "ext:stale_lengths": ("fail", "the changed lengths did not reach the kernels", 1),
    "ext:wrong_stream": ("fail", "the kernel ran work outside its stream", 1)}[faulty]
print(f"{'PASS' if rc == f'rc={code}' else 'FAIL'}: {tag}: exit code {rc} ({code} expected)")
names_clean = [c["name"] for c in clean["cases"]]
names_bad = [c["name"] for c in bad["cases"]]
print(f"{'PASS' if names_clean == names_bad else 'FAIL'}: {tag}: the report holds every case of the clean run "
      f"({len(names_bad)} of {len(names_clean)})")
clean_status = {(c["name"], p["path"]): p["status"] for c in clean["cases"] for p in c["paths"]}
differs, matched, skipped, unchanged, other = [], 0, 0, 0, []
for c in bad["cases"]:
    for p in c["paths"]:
        if p["path"] == faulty:
            if p["status"] == kind and expect in p["reason"]:
                matched += 1
            elif kind == "error" and p["status"] == "skipped" and "ended the worker process twice" in p["reason"]:
                skipped += 1
            elif faulty == "ext:stale_lengths" and p["status"] == "pass" and \
                    p.get("notes", {}).get("graph_check", "").count("0 longer, 0 shorter") == 2:
                unchanged += 1
            elif p["status"] != "n/a":
                other.append(f'{c["name"]}: {p["status"]} {p.get("reason", "")}')
        elif clean_status.get((c["name"], p["path"])) != p["status"]:
            differs.append(f'{c["name"]} {p["path"]}: {p["status"]} (clean: {clean_status.get((c["name"], p["path"]))}) {p.get("reason", "")}')
print(f"{'PASS' if not differs else 'FAIL'}: {tag}: every other path as in the clean run"
      + ("" if not differs else f" ({len(differs)} differ: {differs[:5]})"))
if kind == "error":
    print(f"{'PASS' if matched == 2 and not other else 'FAIL'}: {tag}: error with '{expect}' on the first two cases "
          f"it ran ({matched} errors, {skipped} skipped after; unexpected: {other[:5]})")
    said = [e for e in bad["errors"] if faulty in e and "twice" in e]
    print(f"{'PASS' if len(said) == 1 else 'FAIL'}: {tag}: said once in the run errors: {said}")
else:
    print(f"{'PASS' if matched > 0 and not other else 'FAIL'}: {tag}: fail with '{expect}' on every case it ran "
          f"({matched} failed, {unchanged} with no length to change; unexpected: {other[:5]})")
PY
  gpu_still_runs "bad-$entry"
done
# The case of issue 19 item 5(a): every sequence at the capacity, so the
# graph check can only shorten them.
step stale-capacity 600 "$pc" run --kernel "$bad" --seqs 8 --seq-len 300 --paths reference,direct,ext:stale_lengths \
  --no-timing --json "$OUT/stale-capacity.json"
python3 - "$OUT/stale-capacity.json" <<'PY' | tee -a "$OUT/steps.txt"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL: stale-capacity: the report does not load: {e}")
    sys.exit(0)
rows = {p["path"]: p for c in r["cases"] for p in c["paths"]}
s = rows.get("ext:stale_lengths", {})
ok = s.get("status") == "fail" and "keys past the new lengths" in " ".join(s.get("checks", {}).get("failures", []))
print(f"{'PASS' if ok else 'FAIL'}: stale-capacity: --seqs 8 --seq-len 300 fails ext:stale_lengths on the dropped "
      f"keys: {s.get('status')} {s.get('reason', '')[:200]}")
print(f"{'PASS' if rows.get('direct', {}).get('status') == 'pass' else 'FAIL'}: stale-capacity: direct passes")
PY

# Steps 3 and 4 (the interrupts) unless SIGTERM_STEPS=0.
if [ "${SIGTERM_STEPS:-1}" != 0 ]; then
# 3. SIGTERM during a timed device run of the default suite.
# sigterm_check NAME TEXT ARGS...: runs pagecheck ARGS in the background,
# sends SIGTERM once its output shows TEXT (at most 10 minutes), then checks
# the exit code, the reports and that no worker is left.
sigterm_check() {
  local name=$1 text=$2
  shift 2
  "$pc" "$@" --json "$OUT/$name.json" --csv "$OUT/$name.csv" --junit "$OUT/$name.xml" >"$OUT/$name.log" 2>&1 &
  local pid=$! waited=0
  while ! grep -q -- "$text" "$OUT/$name.log" && kill -0 $pid 2>/dev/null && [ $waited -lt 600 ]; do
    sleep 1
    waited=$((waited + 1))
  done
  kill -0 $pid 2>/dev/null || say "FAIL: $name: the run ended before the signal (after $waited s)"
  kill -TERM $pid
  wait $pid
  local rc=$?
  say "$([ $rc -eq 143 ] && echo PASS || echo FAIL): $name: exit $rc after SIGTERM (143 expected)"
  python3 - "$OUT/$name.json" "$OUT/$name.csv" "$OUT/$name.xml" "$name" <<'PY' | tee -a "$OUT/steps.txt"
import json, sys
j, csv, xml, name = sys.argv[1:5]
try:
    r = json.load(open(j))
except Exception as e:
    print(f"FAIL: {name}: the JSON report does not load: {e}")
    sys.exit(0)
i = r.get("interrupted")
ok = i is not None and i["signal"] == "SIGTERM" and i["cases_finished"] == len(r["cases"])
print(f"{'PASS' if ok else 'FAIL'}: {name}: JSON marked interrupted with the finished cases: {i}")
if name == "sigterm-spin":
    print(f"{'PASS' if i and i['step'] == 'ext:spin' else 'FAIL'}: {name}: the case in flight was in ext:spin")
complete = all(c["paths"] or c["errors"] for c in r["cases"])
print(f"{'PASS' if complete else 'FAIL'}: {name}: every case in the report is complete ({len(r['cases'])} cases)")
for f in (csv, xml):
    text = open(f).read()
    print(f"{'PASS' if 'interrupted by SIGTERM' in text else 'FAIL'}: {name}: {f.rsplit('/', 1)[-1]} says interrupted")
PY
  no_workers_left "$name"
}
# After the fifth case of the default suite, timed (the table prints a case
# when it is done).
sigterm_check sigterm-suite "cover-005" run
# 4. SIGTERM while a kernel never returns: once the progress line says the
# worker has been in ext:spin for a while.
sigterm_check sigterm-spin "ext:spin (" run --kernel "$bad" --paths reference,direct,ext:spin --path-timeout 0 \
  --no-timing
gpu_still_runs sigterm-spin
fi

grep -c '^PASS' "$OUT/steps.txt" | sed 's/^/passed: /'
grep '^FAIL' "$OUT/steps.txt" | sed 's/^/failed: /'
tar czf "$OUT/isolation.tgz" -C "$OUT" --exclude isolation.tgz .
