# Sourced by the device scripts (device_check.sh, device_flashinfer_check.sh,
# device_soak_check.sh, device_isolation_check.sh where it fits).
# step NAME TIMEOUT CMD...: runs CMD with a time limit, logs to $OUT/NAME.log,
# and appends "NAME rc=... (... s)" to $OUT/steps.txt.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ($((SECONDS - t0)) s)" | tee -a "$OUT/steps.txt"
  return $rc
}

# unpack_carry DIR: the gzipped (or xz-compressed: .xz) binaries of DIR (a
# carry folder packed by device_check.sh build) into $BIN (default /tmp/pcbin), its external.tgz
# (the external-kernel test and example libraries) into $EXT (/tmp/pcext);
# $BIN first on PATH. Set BIN before the call (`BIN=dir; unpack_carry D`)
# where the script uses $BIN afterwards: a prefix assignment
# (`BIN=dir unpack_carry D`) lasts for the call only, and leaves only PATH.
unpack_carry() {
  local dir=$1 f
  BIN=${BIN:-/tmp/pcbin} EXT=${EXT:-/tmp/pcext}
  mkdir -p "$BIN" "$EXT"
  for f in "$dir"/*.gz; do [ -e "$f" ] && gunzip -c "$f" >"$BIN/$(basename "$f" .gz)"; done
  for f in "$dir"/*.xz; do [ -e "$f" ] && xz -dc "$f" >"$BIN/$(basename "$f" .xz)"; done
  chmod +x "$BIN"/*
  [ -f "$dir/external.tgz" ] && tar xzf "$dir/external.tgz" -C "$EXT"
  export PATH="$BIN:$PATH" NO_COLOR=1
}

# pack_carry BUILD FILE...: the build folder's binaries FILE... (paths under
# BUILD) stripped and xz-compressed into BUILD/carry (unpack_carry reads
# them), with the faulty-soak example kernels and BUILT_FROM, the commit
# they were built from (a later session checks it before it carries a
# folder it did not pack).
pack_carry() {
  local build=$1 f
  shift
  rm -rf "$build/carry" && mkdir -p "$build/carry"
  for f in "$@"; do
    strip -o "$build/carry/$(basename "$f")" "$build/$f" && xz -9 -T2 "$build/carry/$(basename "$f")" || return 4
  done
  echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- . || echo ' (with uncommitted changes)')" >"$build/carry/BUILT_FROM"
  cp "$build"/examples/external/libsimple_decode.so "$build"/examples/external/libsimple_decode_faulty.so \
    "$build/carry/" || return 4
  ls -la "$build/carry"
}

# call_start NAME CARRY: the start of a session's device call script: $OUT
# (default NAMEout) with an empty summary.txt, the carry's binaries
# unpacked into /tmp/NAMEbin and on PATH, the GPU's name in the summary,
# and a watchdog that packs what $OUT holds into $PACK/NAME_partial.tgz at
# WATCHDOG seconds (default 570: the call ends at 600, or sooner where less
# device time is left); its pid in $watchdog.
call_start() {
  local name=$1 carry=$2
  OUT=${OUT:-${name}out}
  mkdir -p "$OUT"
  : >"$OUT/summary.txt"
  BIN=/tmp/${name}bin
  unpack_carry "$carry"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
  # Output to /dev/null: a watchdog holding the caller's stdout keeps the
  # device call open until its sleep ends (session 22).
  (sleep "${WATCHDOG:-570}" && cd "$OUT" && tar czf "${PACK:-.}/${name}_partial.tgz" --exclude='*.tgz' .) >/dev/null 2>&1 &
  watchdog=$!
}

# s NAME CMD...: CMD under LIMIT seconds (default 300), logged to
# $OUT/NAME.log, with one line in $OUT/summary.txt (exit code, seconds, the
# log's last two lines).
s() {
  local name=$1 t0=$SECONDS
  shift
  timeout "${LIMIT:-300}" "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? ($((SECONDS - t0)) s) :: $(tail -2 "$OUT/$name.log" | tr '\n' ' ' | cut -c1-200)" | tee -a "$OUT/summary.txt"
}

# bench_gbs LOG: "shape path GB/s; ..." of a `pagecheck bench --shapes
# decode` log; bench_tflops LOG: "shape TFLOP/s; ..." of a prefill one.
bench_gbs() {
  awk '/^decode-/ {s=$1} /^  [a-z]+ +pass/ {p=$1} /GB\/s/ && !/stage/ && p != "" {printf "%s %s %s; ", s, p, $1; p = ""}' "$1"
}
bench_tflops() {
  awk '/^(prefill|chunked)-/ {s=$1} / TFLOP\/s/ && s != "" {for (i = 1; i <= NF; i++) if ($i ~ /TFLOP/) t = $(i - 1); printf "%s %s; ", s, t; s = ""}' "$1"
}

# ncu_ws_profile TAG LIMIT BENCH_ARGS...: Nsight Compute on the ws prefill
# kernel's first launch of `pagecheck bench --shapes prefill BENCH_ARGS`
# (8 x 2048): warp states, source counters and speed of light into
# $OUT/details_TAG.txt, the per-line stalls (scripts/ncu_source_stalls.py)
# into $OUT/stalls_TAG.txt and the SASS source page into
# $OUT/src_TAG.csv.gz; one line in $OUT/summary.txt.
ncu_ws_profile() {
  local tag=$1 limit=$2
  shift 2
  timeout "$limit" ncu --clock-control none -k regex:attn_ws_kernel --launch-count 1 --section WarpStateStats \
    --section SourceCounters --section SpeedOfLight -f -o "/tmp/prof_$tag" \
    pagecheck bench --shapes prefill --paths prefill --no-checks --no-timing "$@" >"$OUT/ncu_$tag.log" 2>&1
  echo "ncu $tag rc=$? ($SECONDS s)" | tee -a "$OUT/summary.txt"
  ncu --import "/tmp/prof_$tag.ncu-rep" --page details --print-units base >"$OUT/details_$tag.txt" 2>&1
  ncu --import "/tmp/prof_$tag.ncu-rep" --page source --csv --print-source sass >"/tmp/src_$tag.csv" 2>/dev/null
  python3 scripts/ncu_source_stalls.py "/tmp/src_$tag.csv" >"$OUT/stalls_$tag.txt" 2>&1
  gzip -9 -c "/tmp/src_$tag.csv" >"$OUT/src_$tag.csv.gz"
}

# probe_checks EXE WORK SUMMARY: a decode probe's `check` (the kernels
# against the float64 CPU loop) and compute-sanitizer memcheck over its
# `small` cases, logs in WORK, one line each appended to SUMMARY.
probe_checks() {
  local exe=$1 work=$2 summary=$3
  timeout 150 "$exe" check >"$work/check.log" 2>&1
  echo "check rc=$? :: $(tail -2 "$work/check.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$summary"
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$exe" small >"$work/memcheck.log" 2>&1
  echo "memcheck rc=$? :: $(grep 'ERROR SUMMARY' "$work/memcheck.log" | tail -1)" | tee -a "$summary"
}
