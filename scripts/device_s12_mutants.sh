#!/usr/bin/env bash
# Session 12: how strong soak is (issue 21, item 3), one device call (~7 min):
# scripts/device_soak_check.sh mutants over build-mutants/carry-soak (the
# control and the 32 mutant binaries of scripts/mutants/build.sh at 473a2eb,
# packed with one 1 GiB xz dictionary so that they fit one carry, as
# scripts/mutants/build.sh now packs build-mutants/carry), 60 s each, six
# at a time. Carry build-mutants/carry-soak. Returns
# $OUT/mutants.txt and $OUT/s12m.tgz (each binary's log and JSON).
# Second call: MUTANTS='^(00|08|17|20|21|22)-' MUTANT_SECONDS=240
# SOAK_SEED=2 (the five that lived through 60 s of seed 1, longer).
set -u
cd "$(dirname "$0")/.."
D=${OUT:-./s12out}
W=/tmp/s12m
mkdir -p "$D" "$W"
OUT=$W PACK=build-mutants/carry-soak/binaries.tar.xz SOAK_SEED=${SOAK_SEED:-1} MUTANT_SECONDS=${MUTANT_SECONDS:-60} JOBS=${JOBS:-6} \
  MUTANT_GRACE=90 scripts/device_soak_check.sh mutants
cp "$W/mutants.txt" "$D/"
(cd "$W" && tar czf "$D/s12m.tgz" --exclude='*/soak-*' .)  # logs and JSON; the saved bundles stay
