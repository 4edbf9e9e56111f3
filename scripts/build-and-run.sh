#!/usr/bin/env bash
# Installs what is missing, builds the pagecheck binary (not the tests: it
# runs none; scripts/build-and-test.sh builds and runs them), and runs the
# default suite. Arguments go to `pagecheck run` (e.g. --preset llama3-8b,
# --json out.json).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${PAGECHECK_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"

# Configured as scripts/build.sh configures (Ninja when present, never
# switching the generator of an existing build folder; the same cache, so
# build-and-test.sh later reuses it), but only the pagecheck target is built.
generator=()
if [ ! -f "$build_dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" --target pagecheck -j "$(nproc)"
exec "$build_dir/app/pagecheck" run "$@"
