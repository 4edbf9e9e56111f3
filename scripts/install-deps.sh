#!/usr/bin/env bash
# Installs what pagecheck needs to build on Debian or Ubuntu, and only what is
# missing: CMake, a C++20 compiler, Ninja, Eigen 3.4, CLI11, fmt, doctest,
# nlohmann-json. Uses sudo when not root. The CUDA toolkit is optional and not
# installed here: with nvcc present the GPU paths are built too.
set -euo pipefail

packages=(libeigen3-dev libcli11-dev libfmt-dev doctest-dev nlohmann-json3-dev)
command -v cmake >/dev/null 2>&1 || packages+=(cmake)
command -v ninja >/dev/null 2>&1 || packages+=(ninja-build)
command -v c++ >/dev/null 2>&1 || packages+=(g++)
command -v make >/dev/null 2>&1 || packages+=(make)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: not a Debian/Ubuntu system; install these yourself: ${packages[*]}" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: everything is installed"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=("$(command -v sudo)")
else
  echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
