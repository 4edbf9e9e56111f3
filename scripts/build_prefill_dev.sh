#!/usr/bin/env bash
# Builds the prefill/FMHA dev driver (kernels/src/dev/prefill_dev.cu) for
# kernel work, here (no GPU needed): build-sm90dev/prefill_dev[_NAME].
#   scripts/build_prefill_dev.sh [NAME [NVCC FLAGS...]]
# NAME names a variant of attn_sm90_ws.cu built with the extra flags (e.g.
# -DSOME_KNOB=1), so that several variants run in one device call
# (scripts/prefill_ab_run.sh); WS_SRC=file builds that file instead (e.g.
# the committed kernel, as a baseline). The other objects are built once
# (ccache).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-}
[ $# -gt 0 ] && shift
out=build-sm90dev
mkdir -p "$out"
nvcc=(ccache /usr/local/cuda/bin/nvcc)
command -v ccache >/dev/null || nvcc=(/usr/local/cuda/bin/nvcc)
f=(-std=c++20 -O3 --expt-relaxed-constexpr -lineinfo -Ilib/include -Ikernels/src -Ikernels/include)
a90a=(-gencode=arch=compute_90a,code=sm_90a)
a90=(-gencode=arch=compute_90,code=sm_90 -DPAGECHECK_HAVE_SM90A=1 -diag-suppress 2810)
suffix=${name:+_$name}
"${nvcc[@]}" "${f[@]}" "${a90a[@]}" -c kernels/src/prefill/attn_sm90.cu -o "$out/attn_sm90.o" &
"${nvcc[@]}" "${f[@]}" "${a90a[@]}" -Xptxas -v "$@" -c "${WS_SRC:-kernels/src/prefill/attn_sm90_ws.cu}" -o "$out/attn_sm90_ws$suffix.o" \
  >"$out/ptxas_ws$suffix.txt" 2>&1 &
wait
for src in kernels/src/dev/prefill_dev.cu kernels/src/prefill/prefill.cu kernels/src/prefill/fmha.cu; do
  "${nvcc[@]}" "${f[@]}" "${a90[@]}" -I/usr/include/eigen3 -c "$src" -o "$out/$(basename "$src" .cu).o"
done
g++ -std=c++20 -O2 -Ilib/include -I/usr/include/eigen3 -c lib/src/dtype.cpp -o "$out/dtype.o"
/usr/local/cuda/bin/nvcc "${a90[@]}" "$out/prefill_dev.o" "$out/prefill.o" "$out/fmha.o" "$out/dtype.o" \
  "$out/attn_sm90.o" "$out/attn_sm90_ws$suffix.o" -o "$out/prefill_dev$suffix"
grep -E "registers|spill" "$out/ptxas_ws$suffix.txt" | grep -B1 -A0 "spill" | head -20 || true
# ptxas serialises every wgmma (a wait after each) when the accumulators do
# not fit beside what else is live: 30% slower (docs/performance.md, ws13).
if grep -q C7511 "$out/ptxas_ws$suffix.txt"; then
  echo "WARNING: wgmma serialized (ptxas C7511) in $(grep -c C7511 "$out/ptxas_ws$suffix.txt") kernels of $name" >&2
fi
ls -la "$out/prefill_dev$suffix"
