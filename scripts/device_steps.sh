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

# unpack_carry DIR: the gzipped binaries of DIR (a carry folder packed by
# device_check.sh build) into $BIN (default /tmp/pcbin), its external.tgz
# (the external-kernel test and example libraries) into $EXT (/tmp/pcext);
# $BIN first on PATH.
unpack_carry() {
  local dir=$1 f
  BIN=${BIN:-/tmp/pcbin} EXT=${EXT:-/tmp/pcext}
  mkdir -p "$BIN" "$EXT"
  for f in "$dir"/*.gz; do gunzip -c "$f" >"$BIN/$(basename "$f" .gz)"; done
  chmod +x "$BIN"/*
  [ -f "$dir/external.tgz" ] && tar xzf "$dir/external.tgz" -C "$EXT"
  export PATH="$BIN:$PATH" NO_COLOR=1
}
