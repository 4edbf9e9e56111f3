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
