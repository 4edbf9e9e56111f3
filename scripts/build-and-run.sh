#!/usr/bin/env bash
# Installs what is missing, builds, and runs the default suite. Arguments go
# to `pagecheck run` (e.g. --preset llama3-8b, --json out.json).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${PAGECHECK_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
exec "$build_dir/app/pagecheck" run "$@"
