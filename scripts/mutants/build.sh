#!/usr/bin/env bash
# The mutation self-test, build half (issue 8, part 3): one pagecheck binary
# per single-fault patch in scripts/mutants/NN-*.patch, plus the unmutated
# control, packed for scripts/mutants/run.sh on the GPU machine.
#
#   scripts/mutants/build.sh [NN ...]     (here: CUDA toolkit, CMake, Ninja)
#
# - The patches are applied to a mirror of HEAD in build-mutants/src, never
#   to the working tree, which other engineers build from at the same time.
#   The mirror is refreshed from HEAD (only files whose blob changed are
#   rewritten, so Ninja rebuilds only what changed). Each patch must also
#   apply to the working tree (`git apply --check`, which writes nothing).
# - One build folder, build-mutants/build (sm_90 and the sm_90a library).
#   The control also gets the GPU tests (test_gpu_core, _decode, _prefill:
#   the harness checks, run by run.sh as part of the control); mutants get
#   `pagecheck` alone. For each patch: check it applies, apply it to the mirror,
#   check the file(s) it names changed, `ninja pagecheck` (only the patched
#   translation units recompile), keep the stripped binary as
#   build-mutants/bin/NN-name, revert it (git apply -R). A trap reverts an
#   applied patch on any exit, so the mirror is never left mutated.
# - The carry: all binaries in one build-mutants/carry/binaries.tar.xz; xz
#   with a 1 GiB dictionary over one tar of all of them stores the control
#   once and each mutant as its difference from the binaries before it.
#   That works only on device code as ptxas wrote it: nvcc compresses each
#   object's fatbin by default, and one changed line then changes the whole
#   compressed blob of that object (session 18: decode_direct.cu with mutant
#   30 added 2.4 MB of xz beside its control compressed, 0.12 MB
#   uncompressed; session 17 packed 8 binaries in 46 MB). This build has no
#   fatbin compression (--no-compress) and SASS alone (90-real: no PTX; the
#   GPU machine is a Hopper): each stripped binary is larger on disk, its
#   xz smaller (decode_direct.o alone: 0.97 MB against 2.6 MB).
# - ccache (when installed) is the compiler launcher, so the recompile after
#   a revert is a cache hit and a rebuild after a suite change costs one
#   relink per mutant.
# - NN arguments: build and pack only those mutants (and the control).
# Output: build-mutants/carry/binaries.tar.xz (00-control, NN-name) and
# tests.tar.xz (the control's GPU tests), the binaries in build-mutants/bin,
# the log in build-mutants/build.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
top=$root/build-mutants
mirror=$top/src
build=$top/build
carry=$top/carry
bins=$top/bin
mkdir -p "$mirror" "$build" "$carry" "$bins"
log=$top/build.log
: >"$log"
say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$log"; }

# ---- mirror of HEAD ----------------------------------------------------------
sync_mirror() {
  local manifest=$mirror/.pagecheck-manifest
  git ls-tree -r --full-tree HEAD >"$manifest.new"
  touch "$manifest"
  # Lines "mode type sha<TAB>path": write each path whose blob changed.
  awk -F'\t' -v old_file="$manifest" 'FILENAME == old_file { old[$2] = $1; next } old[$2] != $1 { split($1, f, " "); print f[3] "\t" $2 }' \
    "$manifest" "$manifest.new" |
    while IFS=$'\t' read -r sha path; do
      mkdir -p "$mirror/$(dirname "$path")"
      git cat-file blob "$sha" >"$mirror/$path"
    done
  mv "$manifest.new" "$manifest"
  say "mirror at $(git rev-parse --short HEAD)"
}

# ---- patches -------------------------------------------------------------------
# git apply inside the mirror, which lies inside this repository: the
# ceiling keeps git from finding the repository above (where it would take
# the patch's paths as outside the current directory and skip them), so
# the paths are taken relative to the mirror.
mirror_apply() { (cd "$mirror" && GIT_CEILING_DIRECTORIES="$top" git apply "$@"); }
applied=""
revert() {
  if [ -n "$applied" ]; then
    mirror_apply -R "$applied" || echo "build.sh: could not revert $applied in $mirror" >&2
    applied=""
  fi
}
trap revert EXIT
trap 'revert; exit 130' INT TERM

# Files a patch modifies (its +++ lines).
patched_files() { sed -n 's|^+++ b/||p' "$1"; }

pack() {  # pack NAME: the stripped binary
  cp "$build/app/pagecheck" "$bins/$1"
  strip "$bins/$1"
  say "kept bin/$1"
}

gpu_tests=(test_gpu_core test_gpu_decode test_gpu_prefill)
build_binary() {  # build_binary [EXTRA TARGETS]
  local t0=$SECONDS
  if ! ninja -C "$build" -j"${JOBS:-2}" pagecheck "$@" >>"$log" 2>&1; then
    say "ninja failed (see $log)"
    return 1
  fi
  say "built in $((SECONDS - t0)) s"
}

sync_mirror
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
else
  say "no ccache: every revert recompiles in full"
fi
cmake -S "$mirror" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGECHECK_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_FLAGS=--no-compress -DPAGECHECK_TESTS=ON "${launcher[@]}" \
  >>"$log" 2>&1 || {
  say "cmake failed (see $log)"
  exit 4
}

say "control (unmutated)"
build_binary "${gpu_tests[@]}" || exit 4
pack 00-control
for t in "${gpu_tests[@]}"; do
  cp "$build/tests/gpu/$t" "$bins/$t" && strip "$bins/$t"
done

wanted=("$@")
status=0
for patch in "$root"/scripts/mutants/[0-9][0-9]-*.patch; do
  [ -e "$patch" ] || continue
  name=$(basename "$patch" .patch)
  if [ ${#wanted[@]} -gt 0 ]; then
    keep=0
    for w in "${wanted[@]}"; do [ "${name%%-*}" = "$w" ] && keep=1; done
    [ $keep = 1 ] || continue
  fi
  say "$name"
  if ! git apply --check "$patch" 2>>"$log"; then
    say "  WARNING: $name does not apply to the working tree (it is checked against HEAD below)"
  fi
  if ! mirror_apply --check "$patch" 2>>"$log"; then
    say "  ERROR: $name does not apply to HEAD"
    status=1
    continue
  fi
  declare -A before=()
  for f in $(patched_files "$patch"); do before[$f]=$(sha1sum <"$mirror/$f"); done
  mirror_apply "$patch"
  applied=$patch
  changed=1
  for f in "${!before[@]}"; do
    if [ "$(sha1sum <"$mirror/$f")" = "${before[$f]}" ]; then
      say "  ERROR: $f did not change"
      changed=0
    fi
  done
  unset before
  if [ $changed = 1 ] && build_binary; then
    pack "$name"
  else
    status=1
  fi
  revert
done
# The mirror is back at HEAD: rebuild so the objects match it again (ccache hits).
build_binary || status=1
# Only binaries of patches that exist now (a renamed patch leaves none behind).
for b in "$bins"/*; do
  n=$(basename "$b")
  [ "$n" = 00-control ] || [[ "$n" == test_gpu_* ]] || [ -e "$root/scripts/mutants/$n.patch" ] || rm -f "$b"
done
rm -f "$carry"/*.gz
# Two packs, so that the mutants alone fit one device call (64 MiB) with room:
# binaries.tar.xz, the control and every mutant (one 1 GiB xz dictionary
# holds all of them, so each mutant is stored as its difference from the
# ones before: 33 binaries of 30 MB in 37 MiB, session 12; a 64 MiB
# dictionary, two binaries, gave 76 MiB);
# tests.tar.xz, the control's three
# GPU tests (run.sh unpacks it beside the first when it is there). xz needs
# about 11 GB of memory for the first.
# With NN arguments, the control and those mutants alone: binaries kept from
# builds at other commits share few bytes with this control (session 17:
# 73 MB with them, past the carry limit; 46 MB without).
packed() {
  local n w
  for n in $(ls "$bins" | grep -v '^test_'); do
    if [ ${#wanted[@]} -eq 0 ] || [ "$n" = 00-control ]; then echo "$n"; continue; fi
    for w in "${wanted[@]}"; do [ "${n%%-*}" = "$w" ] && echo "$n"; done
  done
  return 0
}
say "packing $(packed | wc -l) binaries and $(ls "$bins" | grep -c '^test_') GPU tests"
(cd "$bins" && packed | tar -cf - -T - | xz -9 -T1 --lzma2=preset=9,dict=1024MiB) \
  >"$carry/binaries.tar.xz.tmp" && mv "$carry/binaries.tar.xz.tmp" "$carry/binaries.tar.xz"
(cd "$bins" && ls | grep '^test_' | tar -cf - -T - | xz -9 -T1 --lzma2=preset=9,dict=256MiB) >"$carry/tests.tar.xz.tmp" &&
  mv "$carry/tests.tar.xz.tmp" "$carry/tests.tar.xz"
ls -la "$carry" | tee -a "$log"
du -sh "$carry" | tee -a "$log"
exit $status
