// The Hopper (sm_90a) attention kernel that prefill.cu and fmha.cu prefer on
// a compute capability 9.0 device: wgmma tensor-core instructions, which only
// an sm_90a build carries. attn_sm90.cu is compiled for sm_90a alone; every
// other build and device takes the portable mma.sync kernel of
// prefill_common.cuh, so the launchers ask here first and fall back.
#pragma once

#include <cuda_runtime.h>

#include "common/device_case.cuh"
#include "prefill/prefill_common.cuh"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu::attn {

// True when the current device is compute capability 9.0 and loads this
// library's sm_90a code (the decode paths' latent kernel asks too).
bool sm90a_device();
// sm90a_device(), and PAGECHECK_ATTN_KERNEL is not "mma" (the override
// that forces the portable kernel, for comparisons).
bool sm90_available();

// Cases the sm_90a kernels are built for: head dim 128 for K and V, K/V BF16,
// F16, F8_E4M3 or F8_E5M2 (paged) or BF16 (contiguous, fmha); head dim 64
// where the warp-specialised kernel takes it (paged BF16 / F16).
bool sm90_supports(const DeviceCaseView& view, bool contiguous);

// Name of the tensor-core kernel that a prefill/fmha launch with this view
// runs now: "wgmma-ws tma (sm_90a)" / "wgmma-ws rows (sm_90a)" (the
// warp-specialised kernel and its K/V loader), "wgmma (sm_90a)" or
// "mma.sync" (F32 K/V is prefill.cu's own).
const char* attn_kernel_name(const DeviceCaseView& view, bool contiguous);

// Cases the warp-specialised sm_90a kernel (attn_sm90_ws.cu: tensor-copy
// or row loads, intra-warpgroup overlap, ping-pong) takes: head dim 128,
// K/V BF16 or F16 (contiguous: BF16), FP8 (paged; not under
// PAGECHECK_WS_FP8=0), head dim 64 for paged BF16 / F16, every block size, cache strides in multiples of 16 bytes and
// caches under 64 GiB for the row producer; not when PAGECHECK_ATTN_KERNEL
// is "wgmma" (forces attn_sm90.cu's kernel, for comparisons).
bool sm90_ws_supports(const DeviceCaseView& view, bool contiguous);
// Whether that kernel copies pages of `block_size` slots by tensor copies
// (whole boxes) rather than its row producer (cp.async per key; FP8 caches
// always by rows, widened on the way).
bool sm90_ws_uses_tma(int block_size, DType kv_dtype);
// Whether an FP8 cache takes the FP8-K kernel (K as stored on FP8 wgmma)
// rather than the staged one: its longest sequence (attn_sm90_ws.cu).
bool sm90_ws_fp8_k(const DeviceCaseView& view);
Status launch_attn_sm90_ws(AttnParams p, bool contiguous, cudaStream_t stream);

// Launches the sm_90a kernel (the warp-specialised one where it takes the
// case); the caller has checked sm90_supports and
// sm90_available. `p` as for launch_attn; p.contig_key set means contiguous.
Status launch_attn_sm90(AttnParams p, bool contiguous, cudaStream_t stream);

}  // namespace pagecheck::gpu::attn
