#!/usr/bin/env bash
# Session 12, call 1 (one device call, ~5 min): scripts/device_pending_check.sh
# run over the product binaries of 473a2eb (the mutation self-test's control,
# scripts/mutants/build.sh: pagecheck and the GPU tests) with the prefill dev
# driver of the head-dim-64 warp-specialised kernel (scripts/build_prefill_dev.sh
# d64), then `prefill_dev dims` (head dims 64 and 128 at the bench shapes).
# Carry build-s12c1 (its carry/ holds the gzipped binaries). Everything
# comes back as $OUT/s12c1.tgz and $OUT/summary.txt.
set -u
cd "$(dirname "$0")/.."
D=${OUT:-./s12out}
mkdir -p "$D"
W=/tmp/s12c1
BIN=/tmp/pendingbin OUT=$W BUILD=build-s12c1 scripts/device_pending_check.sh run
timeout 150 /tmp/pendingbin/prefill_dev dims >"$W/dims.log" 2>&1
echo "dims rc=$?" | tee -a "$W/summary.txt"
grep -E "TFLOP|FAIL|failures" "$W/dims.log" | tee -a "$W/summary.txt"
grep -E "prefill kernel|FAIL" "$W/dev_check_default.log" | sort | uniq -c | tee -a "$W/summary.txt"
cp "$W/summary.txt" "$D/"
(cd "$W" && tar czf "$D/s12c1.tgz" --exclude=pending.tgz .)
