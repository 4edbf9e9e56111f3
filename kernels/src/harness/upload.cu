// Upload of a Case to the device, device-made benchmark cases, widening.
#include "harness/upload.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pagecheck/threads.hpp"

namespace pagecheck::gpu {

namespace {

template <class T>
Expected<DeviceBuffer> upload_vector(const std::vector<T>& values) {
  auto buffer = device_alloc(values.size() * sizeof(T));
  if (!buffer) return buffer.error();
  if (!values.empty()) CUDA_TRY(cudaMemcpy(buffer->get(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buffer;
}

// splitmix64: a hash of (seed, index), so any element is computed alone.
__device__ __forceinline__ std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float uniform_pm1(std::uint64_t seed, std::int64_t i) {
  const std::uint64_t h = mix(seed ^ mix(static_cast<std::uint64_t>(i)));
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

template <class T>
__global__ void fill_random_kernel(T* data, std::int64_t count, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = uniform_pm1(seed, i);
    if constexpr (std::is_same_v<T, float>) data[i] = v;
    else if constexpr (std::is_same_v<T, __half>) data[i] = __float2half_rn(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) data[i] = __float2bfloat16_rn(v);
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) data[i] = __nv_fp8_e4m3(v);
    else data[i] = __nv_fp8_e5m2(v);
  }
}

template <class T>
Status launch_fill(void* data, std::int64_t count, std::uint64_t seed, cudaStream_t stream) {
  const std::int64_t blocks = std::min<std::int64_t>((count + 255) / 256, 65536);
  fill_random_kernel<T><<<static_cast<unsigned>(std::max<std::int64_t>(blocks, 1)), 256, 0, stream>>>(
      static_cast<T*>(data), count, seed);
  CUDA_TRY_LAUNCH();
  return {};
}

template <class T>
__global__ void fill_pattern_kernel(T* data, std::int64_t count, T pattern) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    data[i] = pattern;
}

template <class T>
Status fill_pattern(void* data, std::int64_t count, T pattern, cudaStream_t stream) {
  if (count <= 0) return {};
  const std::int64_t blocks = std::clamp<std::int64_t>((count + 255) / 256, 1, 4096);
  fill_pattern_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(static_cast<T*>(data), count, pattern);
  CUDA_TRY_LAUNCH();
  return {};
}

}  // namespace

Status fill_pattern_u32(void* data, std::int64_t count, std::uint32_t pattern, cudaStream_t stream) {
  return fill_pattern<std::uint32_t>(data, count, pattern, stream);
}
Status fill_pattern_u16(void* data, std::int64_t count, std::uint16_t pattern, cudaStream_t stream) {
  return fill_pattern<std::uint16_t>(data, count, pattern, stream);
}

Status fill_random(void* data, DType dtype, std::int64_t count, std::uint64_t seed, cudaStream_t stream) {
  if (count <= 0) return {};
  switch (dtype) {
    case DType::F32: return launch_fill<float>(data, count, seed, stream);
    case DType::F16: return launch_fill<__half>(data, count, seed, stream);
    case DType::BF16: return launch_fill<__nv_bfloat16>(data, count, seed, stream);
    case DType::F8_E4M3: return launch_fill<__nv_fp8_e4m3>(data, count, seed, stream);
    case DType::F8_E5M2: return launch_fill<__nv_fp8_e5m2>(data, count, seed, stream);
    default: return runtime_error(std::string("fill_random: dtype ") + std::string(dtype_name(dtype)) + " is not a float type");
  }
}

std::size_t DeviceCase::key_page_bytes() const {
  return static_cast<std::size_t>(view.kv.key_strides.block) * dtype_size(view.kv_dtype);
}
std::size_t DeviceCase::value_page_bytes() const {
  return static_cast<std::size_t>(view.kv.value_strides.block) * dtype_size(view.kv_dtype);
}

Status DeviceCase::upload_table(cudaStream_t stream) const {
  CUDA_TRY(cudaMemcpyAsync(page_indices.get(), host_page_indices.data(), host_page_indices.size() * sizeof(std::int32_t),
                           cudaMemcpyHostToDevice, stream));
  CUDA_TRY(cudaMemcpyAsync(page_indptr.get(), host_page_indptr.data(), host_page_indptr.size() * sizeof(std::int64_t),
                           cudaMemcpyHostToDevice, stream));
  CUDA_TRY(cudaMemcpyAsync(seq_lens.get(), host_seq_lens.data(), host_seq_lens.size() * sizeof(std::int32_t),
                           cudaMemcpyHostToDevice, stream));
  // Pageable host memory: the copies are staged; wait so that the host
  // vectors may change right after.
  CUDA_TRY(cudaStreamSynchronize(stream));
  return {};
}

namespace {

// Allocates caches of `num_blocks` pages (+1 spare when no page is free),
// table, lengths, output and LSE, and fills the view. Does not copy values.
// `value_row_dim`: the elements of one value row in its cache (v_head_dim,
// or a latent cache's head_dim: its value cache is a copy of the key cache,
// V the first v_head_dim columns of each row).
Status allocate(DeviceCase& d, std::int64_t num_blocks, std::int64_t block_size, KvLayout layout, DType kv_dtype,
                DType query_dtype, std::int64_t num_tokens, std::int64_t q_heads, std::int64_t kv_heads,
                std::int64_t head_dim, std::int64_t v_head_dim, std::int64_t value_row_dim) {
  // A page that no table entry references (a padding entry of a dense table
  // counts as referenced), else append one.
  std::vector<bool> referenced(static_cast<std::size_t>(num_blocks), false);
  for (auto page : d.host_page_indices)
    if (page >= 0 && page < num_blocks) referenced[static_cast<std::size_t>(page)] = true;
  const auto free_page = std::find(referenced.begin(), referenced.end(), false);
  std::int64_t pool_blocks = num_blocks;
  if (free_page != referenced.end()) {
    d.spare_page = free_page - referenced.begin();
  } else {
    d.spare_page = num_blocks;
    pool_blocks = num_blocks + 1;
  }

  const auto key_strides = cache_strides(layout, block_size, kv_heads, head_dim);
  const auto value_strides = cache_strides(layout, block_size, kv_heads, value_row_dim);
  const std::size_t kv_elem = dtype_size(kv_dtype);
  auto key = device_alloc(static_cast<std::size_t>(pool_blocks * key_strides.block) * kv_elem);
  if (!key) return key.error();
  auto value = device_alloc(static_cast<std::size_t>(pool_blocks * value_strides.block) * kv_elem);
  if (!value) return value.error();
  auto query = device_alloc(static_cast<std::size_t>(num_tokens * q_heads * head_dim) * dtype_size(query_dtype));
  if (!query) return query.error();
  auto output = device_alloc(static_cast<std::size_t>(num_tokens * q_heads * v_head_dim) * dtype_size(query_dtype));
  if (!output) return output.error();
  auto lse = device_alloc(static_cast<std::size_t>(num_tokens * q_heads) * sizeof(float));
  if (!lse) return lse.error();
  auto indices = upload_vector(d.host_page_indices);
  if (!indices) return indices.error();
  auto indptr = upload_vector(d.host_page_indptr);
  if (!indptr) return indptr.error();
  auto lens = upload_vector(d.host_seq_lens);
  if (!lens) return lens.error();
  auto qsl = upload_vector(d.host_query_start_loc);
  if (!qsl) return qsl.error();
  d.key_cache = std::move(*key);
  d.value_cache = std::move(*value);
  d.query = std::move(*query);
  d.output = std::move(*output);
  d.lse = std::move(*lse);
  d.page_indices = std::move(*indices);
  d.page_indptr = std::move(*indptr);
  d.seq_lens = std::move(*lens);
  d.query_start_loc = std::move(*qsl);

  DeviceCaseView& v = d.view;
  v.kv.key_data = d.key_cache.get();
  v.kv.value_data = d.value_cache.get();
  v.kv.page_indices = d.page_indices.as<std::int32_t>();
  v.kv.page_indptr = d.page_indptr.as<std::int64_t>();
  v.kv.seq_lens = d.seq_lens.as<std::int32_t>();
  v.kv.num_seqs = static_cast<std::int64_t>(d.host_seq_lens.size());
  v.kv.num_blocks = pool_blocks;
  v.kv.block_size = static_cast<std::int32_t>(block_size);
  v.kv.kv_heads = static_cast<std::int32_t>(kv_heads);
  v.kv.head_dim = static_cast<std::int32_t>(head_dim);
  v.kv.v_head_dim = static_cast<std::int32_t>(v_head_dim);
  v.kv.key_strides = key_strides;
  v.kv.value_strides = value_strides;
  v.kv_dtype = kv_dtype;
  v.query = d.query.get();
  v.query_dtype = query_dtype;
  v.query_start_loc = d.query_start_loc.as<std::int32_t>();
  v.output = d.output.get();
  v.output_dtype = query_dtype;
  v.lse = d.lse.as<float>();
  v.num_tokens = num_tokens;
  v.q_heads = static_cast<std::int32_t>(q_heads);
  std::int32_t max_q = 0, max_len = 0;
  for (std::size_t s = 0; s + 1 < d.host_query_start_loc.size(); ++s)
    max_q = std::max(max_q, d.host_query_start_loc[s + 1] - d.host_query_start_loc[s]);
  for (auto len : d.host_seq_lens) max_len = std::max(max_len, len);
  v.max_q_len = max_q;
  v.max_seq_len = max_len;
  return {};
}

// Caches that c.cache_source makes: chunk after chunk of blocks made into
// one host buffer by the host's cores, each copied to its place in the
// device pool. A copy from pageable memory returns once the buffer has been
// read, so the next chunk may overwrite it.
Status upload_sourced_caches(const Case& c, DeviceCase& d) {
  constexpr std::int64_t kChunkBytes = std::int64_t{64} << 20;
  const std::int64_t key_block = c.key_block_bytes(), value_block = c.value_block_bytes();
  const std::int64_t num_blocks = c.num_blocks();
  const std::int64_t per_chunk = std::clamp<std::int64_t>(kChunkBytes / std::max<std::int64_t>(1, key_block + value_block),
                                                          1, std::max<std::int64_t>(num_blocks, 1));
  std::vector<std::uint64_t> key_host(static_cast<std::size_t>((per_chunk * key_block + 7) / 8));
  std::vector<std::uint64_t> value_host(static_cast<std::size_t>((per_chunk * value_block + 7) / 8));
  auto* const key = reinterpret_cast<std::byte*>(key_host.data());
  auto* const value = reinterpret_cast<std::byte*>(value_host.data());
  const auto workers = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  for (std::int64_t begin = 0; begin < num_blocks; begin += per_chunk) {
    const std::int64_t end = std::min(num_blocks, begin + per_chunk);
    // The chunk in pieces of up to 16 blocks, taken by the workers in turn.
    constexpr std::int64_t kPiece = 16;
    std::atomic<std::int64_t> next{begin};
    std::atomic<bool> failed{false};
    run_on_threads(std::min(workers, (end - begin + kPiece - 1) / kPiece), [&] {
      try {
        for (std::int64_t b = next.fetch_add(kPiece); b < end; b = next.fetch_add(kPiece)) {
          const std::int64_t e = std::min(end, b + kPiece);
          fill_cache_blocks(c, b, e, key + (b - begin) * key_block, value + (b - begin) * value_block);
        }
      } catch (const std::exception&) {
        failed = true;
        next = end;
      }
    });
    if (failed) return runtime_error("making the KV cache's blocks for the upload failed (out of host memory?)", "upload");
    CUDA_TRY(cudaMemcpy(d.key_cache.as<std::byte>() + begin * key_block, key, static_cast<std::size_t>((end - begin) * key_block),
                        cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(d.value_cache.as<std::byte>() + begin * value_block, value,
                        static_cast<std::size_t>((end - begin) * value_block), cudaMemcpyHostToDevice));
  }
  return {};
}

}  // namespace

Expected<std::unique_ptr<DeviceCase>> upload_case(const Case& c) {
  auto d = std::make_unique<DeviceCase>();
  d->host_page_indices = c.table.page_indices;
  d->host_page_indptr = c.table.page_indptr;
  d->host_seq_lens = c.seq_lens;
  d->host_query_start_loc = c.query_start_loc;
  PC_TRY(allocate(*d, c.num_blocks(), c.block_size(), c.params.layout, c.key_cache.dtype, c.query.dtype, c.num_tokens(),
                  c.q_heads(), c.kv_heads(), c.key_head_dim(), c.v_head_dim(),
                  c.has_latent() ? c.key_head_dim() : c.v_head_dim()));
  if (c.caches_held()) {
    CUDA_TRY(cudaMemcpy(d->key_cache.get(), c.key_cache.data, c.key_cache.nbytes, cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemcpy(d->value_cache.get(), c.value_cache.data, c.value_cache.nbytes, cudaMemcpyHostToDevice));
  } else {
    PC_TRY(upload_sourced_caches(c, *d));
  }
  // An appended spare page starts as NaN bytes, like the generator's unused pages.
  if (d->key_cache.bytes() > c.key_cache.nbytes)
    CUDA_TRY(cudaMemset(d->key_cache.as<std::byte>() + c.key_cache.nbytes, 0xFF, d->key_cache.bytes() - c.key_cache.nbytes));
  if (d->value_cache.bytes() > c.value_cache.nbytes)
    CUDA_TRY(cudaMemset(d->value_cache.as<std::byte>() + c.value_cache.nbytes, 0xFF,
                        d->value_cache.bytes() - c.value_cache.nbytes));
  CUDA_TRY(cudaMemcpy(d->query.get(), c.query.data, c.query.nbytes, cudaMemcpyHostToDevice));
  if (c.has_sinks()) {
    auto sinks = upload_vector(c.sinks);
    if (!sinks) return sinks.error();
    d->sinks = std::move(*sinks);
  }
  if (c.has_alibi()) {
    auto slopes = upload_vector(c.alibi_slopes);
    if (!slopes) return slopes.error();
    d->alibi_slopes = std::move(*slopes);
  }
  // A cudaMemcpy from pageable memory may return before its DMA lands, and
  // the memsets run on the legacy stream: the harness's non-blocking stream
  // is not ordered after either, so wait here.
  CUDA_TRY(cudaDeviceSynchronize());
  auto& v = d->view;
  v.scale = static_cast<float>(c.scale());
  v.softcap = static_cast<float>(c.params.softcap);
  v.k_scale = static_cast<float>(c.params.k_scale);
  v.v_scale = static_cast<float>(c.params.v_scale);
  v.window = c.params.sliding_window;
  v.causal = c.params.causal;
  v.sinks = c.has_sinks() ? d->sinks.as<float>() : nullptr;
  v.alibi_slopes = c.has_alibi() ? d->alibi_slopes.as<float>() : nullptr;
  return std::move(d);
}

Expected<std::unique_ptr<DeviceCase>> synthesize_device_case(const DeviceGeometry& g) {
  if (g.num_seqs <= 0 || g.context <= 0 || g.block_size <= 0 || g.q_len <= 0 || g.q_len > g.context)
    return runtime_error("synthesize_device_case: bad geometry");
  auto d = std::make_unique<DeviceCase>();
  const std::int64_t pages_per_seq = (g.context + g.block_size - 1) / g.block_size;
  const std::int64_t num_blocks = g.num_seqs * pages_per_seq + 1;  // one free page for the swap
  // Shuffled pages: sequence s takes pages perm[s * pages_per_seq ...].
  std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks - 1));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(g.seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  d->host_page_indices = std::move(perm);
  d->host_page_indptr.resize(static_cast<std::size_t>(g.num_seqs + 1));
  d->host_query_start_loc.resize(static_cast<std::size_t>(g.num_seqs + 1));
  for (std::int64_t s = 0; s <= g.num_seqs; ++s) {
    d->host_page_indptr[static_cast<std::size_t>(s)] = s * pages_per_seq;
    d->host_query_start_loc[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(s * g.q_len);
  }
  d->host_seq_lens.assign(static_cast<std::size_t>(g.num_seqs), static_cast<std::int32_t>(g.context));
  const std::int64_t num_tokens = g.num_seqs * g.q_len;
  PC_TRY(allocate(*d, num_blocks, g.block_size, KvLayout::NHD, DType::BF16, DType::BF16, num_tokens, g.q_heads,
                  g.kv_heads, g.head_dim, g.v_head_dim, g.v_head_dim));
  PC_TRY(fill_random(d->key_cache.get(), DType::BF16, static_cast<std::int64_t>(d->key_cache.bytes() / 2), g.seed * 3 + 1, 0));
  PC_TRY(fill_random(d->value_cache.get(), DType::BF16, static_cast<std::int64_t>(d->value_cache.bytes() / 2), g.seed * 3 + 2, 0));
  PC_TRY(fill_random(d->query.get(), DType::BF16, static_cast<std::int64_t>(d->query.bytes() / 2), g.seed * 3 + 3, 0));
  CUDA_TRY(cudaDeviceSynchronize());
  auto& v = d->view;
  v.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.head_dim)));
  v.causal = true;
  return std::move(d);
}

std::vector<float> widen(DType dtype, const std::vector<std::byte>& raw, std::int64_t count) {
  std::vector<float> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<float>(load_element(dtype, raw.data(), static_cast<std::size_t>(i)));
  return out;
}

}  // namespace pagecheck::gpu
