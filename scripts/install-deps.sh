#!/usr/bin/env bash
# Installs what pagecheck needs to build and test on Debian or Ubuntu, and
# only what is missing: CMake, a C++20 compiler, Ninja, Eigen 3.4, CLI11,
# fmt, doctest, nlohmann-json; for the sanitizer and fuzz steps of
# build-and-test.sh, clang and its sanitizer/libFuzzer runtimes
# (libclang-rt-N-dev for clang N; g++'s ASan/UBSan runtimes come with g++).
# Uses sudo when not root. The CUDA toolkit is optional and not installed
# here: with nvcc present the GPU paths are built too.
set -euo pipefail

packages=(libeigen3-dev libcli11-dev libfmt-dev doctest-dev nlohmann-json3-dev)
command -v cmake >/dev/null 2>&1 || packages+=(cmake)
command -v ninja >/dev/null 2>&1 || packages+=(ninja-build)
command -v c++ >/dev/null 2>&1 || packages+=(g++)
command -v make >/dev/null 2>&1 || packages+=(make)
command -v clang++ >/dev/null 2>&1 || packages+=(clang)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: not a Debian/Ubuntu system; install these yourself: ${packages[*]} (and clang's libFuzzer runtime)" >&2
  exit 1
fi

as_root=()
updated=0
install_missing() {
  local missing=()
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ] && ((${#as_root[@]} == 0)); then
    if command -v sudo >/dev/null 2>&1; then
      as_root=("$(command -v sudo)")
    else
      echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
      exit 1
    fi
  fi
  echo "install-deps: installing ${missing[*]}"
  if ((updated == 0)); then
    "${as_root[@]}" apt-get update
    updated=1
  fi
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

install_missing "${packages[@]}"

# libFuzzer and clang's ASan/UBSan runtimes: their own package on Debian 12
# (libclang-rt-14-dev; clang only recommends it). Looked up by the runtime
# file clang would link, so nothing is installed when it is there.
# Older clang names it libclang_rt.fuzzer-<arch>.a in lib/linux (Debian 12's
# clang 14), newer libclang_rt.fuzzer.a in a per-target folder (Ubuntu 24.04's
# clang 18); -print-runtime-dir names the folder either way.
fuzzer_runtime_present() {
  local dir
  dir="$(clang++ -print-runtime-dir 2>/dev/null || true)"
  [ -f "$dir/libclang_rt.fuzzer-$(uname -m).a" ] || [ -f "$dir/libclang_rt.fuzzer.a" ] ||
    [ -f "$(clang++ -print-file-name="libclang_rt.fuzzer-$(uname -m).a")" ]
}
if ! fuzzer_runtime_present; then
  clang_major="$(clang++ -dumpversion | cut -d. -f1)"
  install_missing "libclang-rt-${clang_major}-dev"
  if ! fuzzer_runtime_present; then
    echo "install-deps: clang ${clang_major}'s libFuzzer runtime is still missing (looked in $(clang++ -print-runtime-dir))" >&2
    exit 1
  fi
fi
echo "install-deps: everything is installed"
