#!/bin/sh
# Builds the decode probe and the tensor-core loop's round-2 variants into
# devbin/ (docs/performance.md, "Tensor-core decode, round 2"), for
# scripts/decode_dev_run.sh on the device (carry devbin). nvcc only, no GPU;
# about 20 minutes on 2 shared cores (the probe 6, each variant 2). Each build's
# ptxas report goes to devbin/ptxas_NAME.log, a line per build to devbin/builds.txt.
set -u
cd "$(dirname "$0")/.."
mkdir -p devbin
: >devbin/builds.txt
build() {  # NAME -D...
  name=$1
  shift
  nice -n 10 scripts/build_decode_probe.sh -Xptxas -v "$@" -o "devbin/$name" >"devbin/ptxas_$name.log" 2>&1
  echo "$name rc=$? $(date +%T)" | tee -a devbin/builds.txt
}
variant() {  # NAME -D...: BF16 d128 alone
  name=$1
  shift
  build "$name" -DPC_DECODE_SWEEP_ONLY "$@"
}
build decode_probe
variant probe_tc_r1 -DPC_DECODE_TC_ROWS=0 -DPC_DECODE_TC_AHEAD=0 -DPC_DECODE_TC_SPLIT_S=0 -DPC_DECODE_TC_WHOLE_PAGES=0
variant probe_tc_rows -DPC_DECODE_TC_AHEAD=0 -DPC_DECODE_TC_SPLIT_S=0 -DPC_DECODE_TC_WHOLE_PAGES=0
variant probe_tc_whole -DPC_DECODE_TC_AHEAD=0 -DPC_DECODE_TC_SPLIT_S=0
variant probe_tc_ahead -DPC_DECODE_TC_SPLIT_S=0
variant probe_tc_k32 -DPC_DECODE_TC_KEYS=32 -DPC_DECODE_TC_SMEM_KB=64
variant probe_tc_k32w1 -DPC_DECODE_TC_KEYS=32 -DPC_DECODE_TC_WARPS=1
variant probe_tc_w4 -DPC_DECODE_TC_WARPS=4 -DPC_DECODE_TC_SMEM_KB=96
variant probe_tc_s2 -DPC_DECODE_TC_SMEM_KB=32
