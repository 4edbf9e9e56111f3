#!/usr/bin/env bash
# Builds, here (nvcc, no GPU), everything the pending device calls of issues
# 18 and 24 carry, in the order the calls need it, so that a fresh checkout
# (build folders are not kept between sessions) can start one command and
# call the device as soon as the first carry is ready:
#   scripts/prepare_device_calls.sh [ab] [product]      (both by default)
# ab       build-ab/: the dev drivers of scripts/device_s22.sh (prefill_dev_NAME.gz,
#          one variant of attn_sm90_ws.cu per knob, about 1.2 min each with
#          ccache), decode_probe.gz, COMMIT. Carry build-ab to
#          `D=$OUT; OUT=/tmp/s22 PACK=$D scripts/device_s22.sh`.
# product  build-fi/ (scripts/device_flashinfer_check.sh build 90: pagecheck
#          and libpagecheck_flashinfer.so; about 15 min from an empty ccache),
#          then build-s18/carry/ as scripts/device_s21_product.sh takes it
#          (pagecheck.gz, external.tgz with the adapter, COMMIT). Carry
#          build-s18/carry to `D=$OUT; OUT=/tmp/s21p PACK=$D scripts/device_s21_product.sh`.
# Progress lines (one per artefact, with the time) on stdout; each build's
# log in /tmp/prepare_*.log. Installs nothing: run scripts/install-deps.sh
# (and apt-get install ccache) first on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ab product)
command -v ccache >/dev/null && ccache -M 20G >/dev/null
say() { echo "$(date +%T) $*"; }

build_ab() {
  mkdir -p build-ab
  # name and defines, as device_s22.sh's header lists them; the call's
  # first round runs them in this order, so the likely winners come first.
  # s22tanh and s22ls are left out: `quick` has no softcap, so s22tanh
  # times only a shorter cold copy (s22cand has it, checked), and s22ls
  # times what s22sk does in product form.
  local variants=(
    "s22base"
    "s22flat -DPAGECHECK_WS_FLAT_STATS=1"
    "s22sk -DPAGECHECK_WS_SOFTCAP_KERNEL=1"
    "s22desc -DPAGECHECK_WGMMA_DESC_ADD=1"
    "s22lean -DPAGECHECK_WS_LEAN_SOFTCAP=1 -DPAGECHECK_WS_LEAN_EPI=1"
    "s22cand -DPAGECHECK_WS_FAST_TANH=1 -DPAGECHECK_WS_FLAT_STATS=1"
    "s22le -DPAGECHECK_WS_LEAN_EPI=1"
    "s22wb2 -DPAGECHECK_WS_FP8_WIDEN_BATCH=2"
    "s22wb4 -DPAGECHECK_WS_FP8_WIDEN_BATCH=4"
  )
  local v name
  for v in "${variants[@]}"; do
    read -r -a a <<<"$v"
    name=${a[0]}
    scripts/build_prefill_dev.sh "${a[@]}" >"/tmp/prepare_$name.log" 2>&1
    gzip -9 -c "build-sm90dev/prefill_dev_$name" >"build-ab/prefill_dev_$name.gz"
    if grep -q "WARNING" "/tmp/prepare_$name.log"; then say "$name: $(grep WARNING "/tmp/prepare_$name.log")"; fi
    say "build-ab/prefill_dev_$name.gz"
  done
  scripts/build_decode_probe.sh >/tmp/prepare_probe.log 2>&1
  gzip -9 -c devbin/decode_probe >build-ab/decode_probe.gz
  say "build-ab/decode_probe.gz"
  { git rev-parse HEAD; echo "dev drivers as scripts/prepare_device_calls.sh builds them"; } >build-ab/COMMIT
  say "build-ab: $(du -sh build-ab | cut -f1) (the carry limit is 64 MiB)"
}

build_product() {
  JOBS=${JOBS:-2} scripts/device_flashinfer_check.sh build 90 >/tmp/prepare_product.log 2>&1
  mkdir -p build-s18/carry /tmp/prepare_fi
  cp build-fi/carry/pagecheck.gz build-s18/carry/pagecheck.gz
  rm -rf /tmp/prepare_fi/examples
  tar xzf build-fi/carry/external.tgz -C /tmp/prepare_fi examples/external/flashinfer/libpagecheck_flashinfer.so
  tar czf build-s18/carry/external.tgz -C /tmp/prepare_fi examples
  { git rev-parse HEAD; echo "pagecheck and libpagecheck_flashinfer.so of scripts/device_flashinfer_check.sh build 90"; } \
    >build-s18/carry/COMMIT
  say "build-s18/carry: $(du -sh build-s18/carry | cut -f1)"
}

for s in "${steps[@]}"; do
  case $s in
    ab) build_ab ;;
    product) build_product ;;
    *) echo "prepare_device_calls: unknown step '$s' (ab, product)" >&2; exit 2 ;;
  esac
done
