#!/usr/bin/env bash
# Session 10, fourth device call, carrying build-s10c4 (build-isolation/carry:
# pagecheck of b0b6657, libsimple_decode.so, libpagecheck_misbehaving.so; and
# fi_external.tgz with libpagecheck_flashinfer.so, and the reduced bundle
# case of the FlashInfer check's one failure, c72.reduced.safetensors):
#   1. (~30 s) the failure's reduced case replayed with --html (the per-token
#      heat map says which query rows FlashInfer gets wrong) and one-feature
#      variants of cover-072's geometry through ext:flashinfer_prefill;
#   2. the whole isolation check (scripts/device_isolation_check.sh run,
#      issue 19), stopped at 535 s of the call.
# $OUT: fi.tgz, iso.tgz, summary.txt.
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-./devout-s10c4}
mkdir -p "$dest" /tmp/s10c4/fi /tmp/s10c4ext
summary="$dest/summary.txt"
tar xzf build-s10c4/fi_external.tgz -C /tmp/s10c4ext
lib=/tmp/s10c4ext/examples/external/flashinfer/libpagecheck_flashinfer.so
pc=/tmp/s10c4bin/pagecheck
mkdir -p /tmp/s10c4bin && gunzip -c build-s10c4/pagecheck.gz >"$pc" && chmod +x "$pc"
export NO_COLOR=1
w=/tmp/s10c4/fi
timeout 60 "$pc" replay build-s10c4/c72.reduced.safetensors --kernel "$lib" --paths reference,prefill,ext:flashinfer_prefill \
  --no-timing --html "$w/reduced.html" --json "$w/reduced.json" >"$w/reduced.log" 2>&1
echo "reduced replay rc=$?" | tee -a "$summary"
python3 - "$w/reduced.html" <<'PY' | tee -a "$summary"
import re, sys
html = open(sys.argv[1]).read()
for n, svg in enumerate(re.findall(r'<svg[^>]*class="heat token".*?</svg>', html, re.S)):
    bad = [(t, float(r)) for t, r in re.findall(r'data-token="([0-9-]+)" data-ratio="([0-9.e+-]+)"', svg) if float(r) > 1]
    print(f"token strip {n}: {len(bad)} token ranges over tolerance: {bad[:60]}")
PY
common=(--mode prefill --q-heads 8 --kv-heads 2 --block-size 256 --k-scale 0.6 --v-scale 1.7)
variant() {
  local tag=$1
  shift
  timeout 60 "$pc" run --kernel "$lib" --paths reference,prefill,ext:flashinfer_prefill --no-timing -q "$@" \
    --json "$w/v_$tag.json" >"$w/v_$tag.log" 2>&1
  echo "variant $tag rc=$? :: $(grep -E "path runs|ext:flashinfer_prefill: " "$w/v_$tag.log" | head -2 | tr '\n' ' ' | cut -c1-200)" |
    tee -a "$summary"
}
L=(--seqs 3 --seq-lens 255 256 257)
variant base "${L[@]}" "${common[@]}" --head-dim 256 --non-causal --window 5 --softcap 4
variant nosoftcap "${L[@]}" "${common[@]}" --head-dim 256 --non-causal --window 5
variant nowindow "${L[@]}" "${common[@]}" --head-dim 256 --non-causal --softcap 4
variant window64 "${L[@]}" "${common[@]}" --head-dim 256 --non-causal --window 64 --softcap 4
variant d128 "${L[@]}" "${common[@]}" --head-dim 128 --non-causal --window 5 --softcap 4
variant d64 "${L[@]}" "${common[@]}" --head-dim 64 --non-causal --window 5 --softcap 4
variant b16 "${L[@]}" --mode prefill --q-heads 8 --kv-heads 2 --block-size 16 --k-scale 0.6 --v-scale 1.7 --head-dim 256 --non-causal --window 5 --softcap 4
variant len100 --seqs 1 --seq-lens 100 "${common[@]}" --head-dim 256 --non-causal --window 5 --softcap 4
variant len1000 --seqs 1 --seq-lens 1000 "${common[@]}" --head-dim 128 --non-causal --window 5
(cd /tmp/s10c4 && tar czf "$dest/fi.tgz" fi)
echo "fi part done at ${SECONDS}s" | tee -a "$summary"
mkdir -p build-isolation/carry && cp build-s10c4/pagecheck.gz build-s10c4/*.so build-isolation/carry/
OUT=/tmp/s10c4/iso timeout $((535 - SECONDS)) scripts/device_isolation_check.sh run >/tmp/s10c4/iso_console.log 2>&1
echo "isolation rc=$? at ${SECONDS}s" | tee -a "$summary"
cp /tmp/s10c4/iso_console.log /tmp/s10c4/iso/ 2>/dev/null
cat /tmp/s10c4/iso/steps.txt 2>/dev/null | tee -a "$summary"
(cd /tmp/s10c4 && tar czf "$dest/iso.tgz" iso)
