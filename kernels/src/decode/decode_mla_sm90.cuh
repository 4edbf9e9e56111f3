// The latent (MLA) decode kernel on Hopper's tensor cores (issue 23, item 2):
// host entry points of decode_mla_sm90.cu, which is compiled for sm_90a
// alone (the pagecheck_kernels_sm90a library). decode_direct.cu and
// decode_split.cu ask here first for a latent cache and fall back to the
// CUDA-core loop of decode_common.cuh everywhere else.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "decode/decode_common.cuh"
#include "pagecheck/status.hpp"

namespace pagecheck::gpu::decode {

// Query heads per CTA: the M of the kernel's wgmma (one 64-row tile of the
// heads that share a latent row).
constexpr int kMlaHeadTile = 64;

// Cases the kernel is built for: a latent cache (K 576, V its first 512
// columns) of BF16 or F16 with a query of the same dtype, no ALiBi, no
// softcap, key strides in whole 16-byte vectors; any block size, table
// form, window, attention sinks. Shapes only: see mla_sm90_available().
bool mla_sm90_supports(const DeviceCaseView& view);

// True when the current device is compute capability 9.0 and loads the
// sm_90a library (attn::sm90a_device()).
bool mla_sm90_available();

enum class MlaLaunch { Direct, Split, Auto };

// Launches the kernel over `ctas` (sequence, kv head, head tile) CTAs of
// kMlaHeadTile heads (p built by make_decode_params with that head tile)
// and `rows` partitions (1 for Direct). Direct writes the output and LSE;
// Split writes the partition states of decode_split.cu's workspace; Auto
// writes the output of sequences up to p.threshold_tokens (their partition
// 0 CTA) and the partition states of the others. The caller launches the
// merge after Split and Auto.
Status launch_mla_sm90(const DecodeParams& p, MlaLaunch kind, std::int64_t ctas, std::int64_t rows,
                       cudaStream_t stream);

}  // namespace pagecheck::gpu::decode
