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
