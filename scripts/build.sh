#!/usr/bin/env bash
# Configures and builds pagecheck in build/ (or $PAGECHECK_BUILD_DIR).
# CUDA is detected (PAGECHECK_CUDA=AUTO): with nvcc the GPU paths are built.
# Extra arguments go to the CMake configure step, e.g. -DPAGECHECK_CUDA=OFF.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${PAGECHECK_BUILD_DIR:-$root/build}"

generator=()
# Ninja when present, else CMake's default (make); never switch the
# generator of an existing build folder.
if [ ! -f "$build_dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j "$(nproc)"
