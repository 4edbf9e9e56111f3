#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest. Without a
# GPU the GPU tests skip (and say so); everything else must pass.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${PAGECHECK_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
