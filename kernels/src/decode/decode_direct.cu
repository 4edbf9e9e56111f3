// Decode, direct path: one pass over each sequence's pages, one CTA per
// (sequence, kv head, head tile of kHeadTile query heads), no workspace.
// The heads of a GQA group share every K/V load (a group larger than the
// tile takes several adjacent CTAs, whose K/V reads then mostly hit L2).
// The CTA's work split, the pipeline and the softmax are in decode_common.cuh.
//
// Performance notes. H200 (132 SMs), kernels/src/dev/decode_probe.cu bench:
// 32 q / 8 kv heads, d128, BF16 K/V and query, block 16, shuffled pages, LSE
// on, L2 flushed (256 MB memset) before each of 30 timed repeats, CUDA events,
// median. K/V bytes = 2 * seqs * ctx * 8 * 128 * 2. Device copy on the same
// machine (cudaMemcpy D2D 2 GiB, read + write): 4249 GB/s.
//   shape       direct median   K/V GB/s   % of copy   graph replay
//   64 x 4096       279.0 us      3849        91%         278.8 us
//   256 x 1024      287.5 us      3735        88%         287.5 us
//   8 x 8192        232.9 us      1152        27%  (64 CTAs: use split)
//   1 x 32768       880.3 us       153         4%  (8 CTAs: use split)
// Same kernel, 64 x 4096 with sequential pages 3872 GB/s and HND 3867 GB/s:
// page order and layout do not matter at block 16.
// Tuning decisions:
// - 4 warps per CTA, <= 128 registers (launch bounds 4 CTAs/SM): the 512
//   CTAs of 64 x 4096 are all resident at once (4 x 132 = 528 slots); no
//   spills in any of the 20 instantiations (ptxas -v).
// - K/V through cp.async, 3 stages of ~8 16-byte vectors per thread, and
//   each thread reads back only its own slots (no barriers in the loop).
// - Page term as a 32 x 32 -> 64-bit multiply in vector units instead of
//   64-bit element math: with q loaded after the first stages are issued,
//   64 x 4096 went from 3350 GB/s to 3863 GB/s (same run also saw the copy
//   at 4230 vs 3817 GB/s on an earlier machine, so part of that is the
//   machine). ncu (64 x 4096): DRAM 81% of peak, 3.92 TB/s, issue slots
//   71% busy, 13.6 of 16 warps active.
// - Profile, 2026-12-03 (ncu, 64 x 4096): DRAM 79.6%, issue slots 68% busy,
//   stalls led by "not selected" (1.53 cycles per instruction) and math pipe
//   throttle (0.51): bound by instructions per byte on the CUDA cores, so
//   deeper pipelines (stages 4-6, 16 loads per stage) lost 1-13% there.
// - The reduce-scatter (instead of a butterfly all-reduce of all 16 partial
//   dot products) halves the shuffles; it is a compile-time recursion: the
//   first loop form put the partials in local memory (64-byte stack frame).
// Order: applicability, parameter set-up (shared with decode_split.cu),
// kernel, launcher.
#include <algorithm>
#include <string>

#include "decode/decode_mma.cuh"
#include "common/launchers.cuh"

namespace pagecheck::gpu {

Applicability decode_applies(const Case& c) {
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    if (c.q_len(s) != 1)
      return {false, "decode paths take one query token per sequence; sequence " + std::to_string(s) +
                         " has q_len " + std::to_string(c.q_len(s))};
  }
  if (!decode::query_dtype_built(c.query.dtype))
    return {false, "query dtype " + std::string(dtype_name(c.query.dtype)) + " is not built; built: F32, F16, BF16"};
  if (c.key_cache.dtype != c.value_cache.dtype)
    return {false, "key cache " + std::string(dtype_name(c.key_cache.dtype)) + " and value cache " +
                       std::string(dtype_name(c.value_cache.dtype)) + " differ; decode paths take one KV dtype"};
  if (!decode::kv_dtype_built(c.key_cache.dtype))
    return {false, "kv dtype " + std::string(dtype_name(c.key_cache.dtype)) +
                       " is not built; built: F32, F16, BF16, F8_E4M3, F8_E5M2"};
  if (!decode::head_dims_built(c.key_head_dim(), c.v_head_dim()))
    return {false, "head_dim " + std::to_string(c.key_head_dim()) + "/" + std::to_string(c.v_head_dim()) +
                       " is not built; built: " + decode::built_head_dims()};
  if (c.block_size() < 1 || c.block_size() > 256)
    return {false, "block_size " + std::to_string(c.block_size()) + " is not supported; supported: 1..256"};
  if (c.kv_heads() < 1 || c.q_heads() % c.kv_heads() != 0)
    return {false, "q_heads " + std::to_string(c.q_heads()) + " is not a multiple of kv_heads " +
                       std::to_string(c.kv_heads())};
  return {true, {}};
}

namespace decode {

Expected<DecodeParams> make_decode_params(const DeviceCaseView& view, int head_tile, SeqFilter filter,
                                          std::int64_t threshold_tokens) {
  const PagedKvView& kv = view.kv;
  if (!query_dtype_built(view.query_dtype))
    return invalid_input("query dtype " + std::string(dtype_name(view.query_dtype)) +
                             " is not built; built: F32, F16, BF16",
                         "decode");
  if (!query_dtype_built(view.output_dtype))
    return invalid_input("output dtype " + std::string(dtype_name(view.output_dtype)) +
                             " is not built; built: F32, F16, BF16",
                         "decode");
  if (view.max_q_len > 1)
    return invalid_input("decode paths take one query token per sequence; max_q_len is " +
                             std::to_string(view.max_q_len),
                         "decode");
  if (kv.block_size < 1 || kv.block_size > 256)
    return invalid_input("block_size " + std::to_string(kv.block_size) + " is not supported; supported: 1..256",
                         "decode");
  if (kv.kv_heads < 1 || view.q_heads < 1 || view.q_heads % kv.kv_heads != 0)
    return invalid_input("q_heads " + std::to_string(view.q_heads) + " is not a multiple of kv_heads " +
                             std::to_string(kv.kv_heads),
                         "decode");
  if (kv.num_seqs > 0 && (view.query == nullptr || view.output == nullptr || kv.key_data == nullptr ||
                          kv.value_data == nullptr || kv.seq_lens == nullptr || kv.page_indptr == nullptr ||
                          kv.page_indices == nullptr || view.query_start_loc == nullptr))
    return invalid_input("a device pointer of the case view is null", "decode");
  const int vec_elems = view.kv_dtype == DType::F32 ? 4 : 8;
  const std::int64_t vec_bytes = view.kv_dtype == DType::F32 ? 16 : (is_fp8(view.kv_dtype) ? 8 : 16);
  for (const CacheStrides* st : {&kv.key_strides, &kv.value_strides}) {
    if (st->block % vec_elems || st->slot % vec_elems || st->head % vec_elems)
      return invalid_input("cache strides (" + std::to_string(st->block) + ", " + std::to_string(st->slot) + ", " +
                               std::to_string(st->head) + ") are not multiples of " + std::to_string(vec_elems) +
                               " elements",
                           "decode");
  }
  if (reinterpret_cast<std::uintptr_t>(kv.key_data) % vec_bytes ||
      reinterpret_cast<std::uintptr_t>(kv.value_data) % vec_bytes)
    return invalid_input("key/value cache pointers are not " + std::to_string(vec_bytes) + "-byte aligned",
                         "decode");
  if (!(view.softcap >= 0.0f))
    return invalid_input("softcap " + std::to_string(view.softcap) + " is negative", "decode");

  DecodeParams p;
  // One page's worth of strides in 32 bits (a page is at most 256 tokens);
  // page * block stride is formed in 64 bits in the kernel.
  for (const CacheStrides* st : {&kv.key_strides, &kv.value_strides}) {
    if (st->block / vec_elems > 0x7fffffff || st->slot * 256 / vec_elems > 0x7fffffff ||
        st->head * kv.kv_heads / vec_elems > 0x7fffffff)
      return invalid_input("one cache page exceeds 2^31 vectors (block stride " + std::to_string(st->block) + ")",
                           "decode");
  }
  p.k_block_vecs = static_cast<std::int32_t>(kv.key_strides.block / vec_elems);
  p.k_slot_vecs = static_cast<std::int32_t>(kv.key_strides.slot / vec_elems);
  p.k_head_vecs = static_cast<std::int32_t>(kv.key_strides.head / vec_elems);
  p.v_block_vecs = static_cast<std::int32_t>(kv.value_strides.block / vec_elems);
  p.v_slot_vecs = static_cast<std::int32_t>(kv.value_strides.slot / vec_elems);
  p.v_head_vecs = static_cast<std::int32_t>(kv.value_strides.head / vec_elems);
  p.kv = kv;
  p.query = view.query;
  p.query_start_loc = view.query_start_loc;
  p.output = view.output;
  p.lse = view.lse;
  p.sinks = view.sinks;
  p.alibi_slopes = view.alibi_slopes;
  p.window = view.window;
  p.threshold_tokens = threshold_tokens;
  p.q_heads = view.q_heads;
  p.gqa = view.q_heads / kv.kv_heads;
  p.head_tiles = decode_head_tiles(p.gqa, head_tile);
  make_fast_divisor(static_cast<std::uint32_t>(kv.block_size), p.block_magic, p.block_shift);
  const bool capped = view.softcap > 0.0f;
  p.q_multiplier = view.scale * view.k_scale * (capped ? 1.0f : kLog2e);
  p.softcap = capped ? view.softcap : 0.0f;
  p.inv_softcap = capped ? 1.0f / view.softcap : 0.0f;
  p.v_scale = view.v_scale;
  p.query_dtype = view.query_dtype;
  p.output_dtype = view.output_dtype;
  p.filter = filter;
  return p;
}

// One CTA per (sequence, kv head, head tile), flattened into blockIdx.x with
// the head tiles of one kv head adjacent (their K/V reads share L2).
// The epilogue is written out here rather than through store_final() (which
// auto's whole sequences use): with store_final() and without the (here
// always true) seq_selected() test this kernel ran 2% slower at 64 x 4096
// (H200 A/B in one call, 2026-12-03: 283.1 against 277.3 us; same source
// otherwise), so it keeps the exact text it was tuned with, plus (issue 23)
// the sink, a uniform branch per output element outside the loop.
// kTma: the instantiation launched where DecodeParams::tma is set (K/V by
// tensor copies where the range allows); the other holds one copy of the
// loop, as before (two copies in one kernel cost auto 1-3%, session 10).
template <class T, bool kTma>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocksPerSm)
    decode_direct_kernel(const __grid_constant__ DecodeParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int per_seq = p.kv.kv_heads * p.head_tiles;
  const std::int64_t seq = blockIdx.x / per_seq;
  const int kv_head = (blockIdx.x % per_seq) / p.head_tiles;
  const int tile = blockIdx.x % p.head_tiles;
  const std::int32_t seq_len = p.kv.seq_lens[seq];
  if (!seq_selected(p, seq_len)) return;

  const float* merged =
      attend<T, kTma>(p, seq, kv_head, tile, window_begin(seq_len, p.window), seq_len, smem);

  const std::int64_t row = p.query_start_loc[seq];
  const int heads_here = min(T::kHeadTile, p.gqa - tile * T::kHeadTile);
  for (int e = threadIdx.x; e < heads_here * T::kVHeadDim; e += T::kThreads) {
    const int h = e / T::kVHeadDim;
    const int d = e % T::kVHeadDim;
    float m, l;
    float o = combine_warps<T>(merged, h, d, m, l);
    const std::int64_t q_head = static_cast<std::int64_t>(kv_head) * p.gqa + tile * T::kHeadTile + h;
    if (p.sinks != nullptr) o = add_sink(o, m, l, sink_logit2(p, q_head));
    store_from_float(p.output_dtype, p.output, (row * p.q_heads + q_head) * T::kVHeadDim + d, o * p.v_scale);
    if (d == 0 && p.lse != nullptr) p.lse[row * p.q_heads + q_head] = state_lse(m, l);
  }
}

DecodeGrid decode_direct_grid_impl(const DeviceCaseView& view) {
  DecodeGrid grid;
#ifdef PAGECHECK_HAVE_SM90A
  if (decode_uses_mla_sm90(view)) {
    const std::int64_t gqa = view.q_heads / std::max<std::int64_t>(1, view.kv.kv_heads);
    grid.direct_ctas = decode_direct_ctas(view.kv.num_seqs, view.kv.kv_heads, decode_head_tiles(gqa, kMlaHeadTile));
    grid.one_cta_per_multiprocessor = true;
  }
#else
  (void)view;
#endif
  return grid;
}

Status launch_direct_impl(const DeviceCaseView& view, cudaStream_t stream) {
#ifdef PAGECHECK_HAVE_SM90A
  if (decode_uses_mla_sm90(view)) {  // latent caches on Hopper: decode_mla_sm90.cu
    auto params = make_decode_params(view, kMlaHeadTile, SeqFilter::All, 0);
    if (!params.ok()) return params.error();
    return launch_mla_sm90(*params, MlaLaunch::Direct,
                           decode_direct_ctas(view.kv.num_seqs, view.kv.kv_heads, params->head_tiles), 1, stream);
  }
#endif
  return dispatch_decode_loop(view, [&](auto traits) -> Status {
    using T = decltype(traits);  // DecodeAlibiTraits exactly when view.alibi_slopes is set
    auto params = make_decode_params(view, T::kHeadTile, SeqFilter::All, 0);
    if (!params.ok()) return params.error();
    const std::int64_t ctas = decode_direct_ctas(view.kv.num_seqs, view.kv.kv_heads, params->head_tiles);
    if (ctas == 0) return {};
    set_decode_tma<T>(view, *params);
    if (ctas > 0x7fffffff) return invalid_input("too many (sequence, head) pairs for one launch", "direct");
    auto kernel = decode_direct_kernel<T, false>;
    if constexpr (tma_capable<T>())
      if (params->tma != 0) kernel = decode_direct_kernel<T, true>;
    PC_TRY(allow_shared_memory(kernel, T::kSmemBytes));
    kernel<<<static_cast<unsigned>(ctas), T::kThreads, T::kSmemBytes, stream>>>(*params);
    CUDA_TRY_LAUNCH();
    return {};
  });
}

}  // namespace decode

Status launch_direct(const DeviceCaseView& view, cudaStream_t stream) {
  return decode::launch_direct_impl(view, stream);
}

DecodeGrid decode_direct_grid(const DeviceCaseView& view) { return decode::decode_direct_grid_impl(view); }

}  // namespace pagecheck::gpu
