// Content hashes of cases (pagecheck/content_hash.hpp).
#include "pagecheck/content_hash.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace pagecheck {

namespace {

constexpr std::uint64_t kMultiplier = 0xff51afd7ed558ccdull;

// The finalizer of MurmurHash3's 64-bit variant: every input bit reaches
// every output bit.
std::uint64_t avalanche(std::uint64_t h) {
  h ^= h >> 33;
  h *= kMultiplier;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

void hash_tensor_header(Hash64& h, const Tensor& t) {
  h.text(dtype_name(t.dtype));
  h.u64(t.shape.size());
  for (const auto d : t.shape) h.u64(static_cast<std::uint64_t>(d));
}

void hash_tensor(Hash64& h, const Tensor& t) {
  hash_tensor_header(h, t);
  h.bytes({t.data, t.empty() ? 0 : t.nbytes});
}

std::uint64_t load_le(const std::byte* p) {
  std::uint64_t w = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&w, p, 8);
  } else {
    for (int k = 0; k < 8; ++k) w |= static_cast<std::uint64_t>(p[k]) << (8 * k);
  }
  return w;
}

}  // namespace

void Hash64::word(std::uint64_t w) {
  state_ = avalanche(state_ ^ (w * kMultiplier)) + 0x632be59bd9b4e019ull;
}

void Hash64::bytes(std::span<const std::byte> data) {
  std::size_t i = 0;
  if (data.size() >= 32) {
    // Four independent lanes over 32-byte stripes (the bulk of a KV block),
    // folded into the state once: a multiply chain per lane, not per word.
    constexpr std::uint64_t kLaneMultiplier = 0x9e3779b185ebca87ull, kLaneAdd = 0xc2b2ae3d27d4eb4full;
    std::uint64_t lanes[4] = {state_ + 1, state_ + 2, state_ + 3, state_ + 4};
    for (; i + 32 <= data.size(); i += 32)
      for (int k = 0; k < 4; ++k)
        lanes[k] = std::rotl(lanes[k] + load_le(data.data() + i + 8 * k) * kLaneAdd, 31) * kLaneMultiplier;
    for (const std::uint64_t lane : lanes) word(lane);
  }
  for (; i + 8 <= data.size(); i += 8) word(load_le(data.data() + i));
  if (i < data.size()) {
    std::uint64_t w = 0;
    for (std::size_t k = 0; i + k < data.size(); ++k) w |= static_cast<std::uint64_t>(data[i + k]) << (8 * k);
    word(w ^ (static_cast<std::uint64_t>(data.size() - i) << 60));
  }
  length_ += data.size();
}

void Hash64::text(std::string_view s) {
  u64(s.size());
  bytes(std::as_bytes(std::span(s.data(), s.size())));
}

void Hash64::u64(std::uint64_t v) {
  word(v);
  length_ += 8;
}

void Hash64::f64(double v) { u64(std::bit_cast<std::uint64_t>(v)); }

std::uint64_t Hash64::digest() const { return avalanche(state_ ^ length_); }

std::string hex64(std::uint64_t v) { return fmt::format("{:016x}", v); }

std::string values_digest(std::span<const float> values) {
  Hash64 h;
  h.text("pagecheck values 1");
  h.u64(values.size());
  h.bytes(std::as_bytes(values));
  return hex64(h.digest());
}

std::string case_content_hash(const Case& c) {
  Hash64 h;
  const CaseParams& p = c.params;
  h.text("pagecheck case 1");
  h.u64(p.layout == KvLayout::NHD ? 0 : 1);
  h.u64(p.causal ? 1 : 0);
  h.u64(p.scale ? 1 : 0);
  h.f64(p.scale.value_or(0.0));
  h.u64(static_cast<std::uint64_t>(p.sliding_window));
  h.f64(p.softcap);
  h.f64(p.k_scale);
  h.f64(p.v_scale);

  // Features that older cases do not have are hashed only when present, so
  // that an older case keeps its hash.
  if (c.has_sinks()) {
    h.text("sinks");
    h.u64(c.sinks.size());
    h.bytes(std::as_bytes(std::span<const float>(c.sinks)));
  }
  if (c.has_latent()) {
    h.text("kv_lora_rank");
    h.u64(static_cast<std::uint64_t>(*c.params.kv_lora_rank));
  }
  if (c.has_alibi()) {
    h.text("alibi_slopes");
    h.u64(c.alibi_slopes.size());
    h.bytes(std::as_bytes(std::span<const float>(c.alibi_slopes)));
  }
  hash_tensor(h, c.query);
  hash_tensor_header(h, c.key_cache);
  hash_tensor_header(h, c.value_cache);
  h.u64(c.table.page_indptr.size());
  for (const auto v : c.table.page_indptr) h.u64(static_cast<std::uint64_t>(v));
  h.u64(c.table.page_indices.size());
  for (const auto v : c.table.page_indices) h.u64(static_cast<std::uint32_t>(v));
  h.u64(c.seq_lens.size());
  for (const auto v : c.seq_lens) h.u64(static_cast<std::uint32_t>(v));
  h.u64(c.query_start_loc.size());
  for (const auto v : c.query_start_loc) h.u64(static_cast<std::uint32_t>(v));

  if (c.caches_held()) {
    // The blocks the table references, each once, in block order: a block
    // no sequence reads does not change the attention.
    std::vector<std::int64_t> blocks;
    for (std::size_t s = 0; s + 1 < c.table.page_indptr.size(); ++s)
      for (auto k = c.table.page_indptr[s]; k < c.table.page_indptr[s + 1]; ++k)
        if (k >= 0 && static_cast<std::size_t>(k) < c.table.page_indices.size()) blocks.push_back(c.table.page_indices[k]);
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    const auto block = [](const Tensor& t, std::int64_t b, std::int64_t size) -> std::span<const std::byte> {
      // A block beyond the tensor: validation refuses the case; its table is hashed.
      if (t.empty() || size <= 0 || static_cast<std::uint64_t>((b + 1) * size) > t.nbytes) return {};
      return {t.data + b * size, static_cast<std::size_t>(size)};
    };
    const std::int64_t key_bytes = c.key_block_bytes(), value_bytes = c.value_block_bytes();
    for (const auto b : blocks) {
      if (b < 0) continue;
      h.u64(static_cast<std::uint64_t>(b));
      h.bytes(block(c.key_cache, b, key_bytes));
      h.bytes(block(c.value_cache, b, value_bytes));
    }
  } else {
    // Made on demand: the generator's settings and seed decide every byte.
    h.text("generated");
    for (const char* key : {"generator", "generator_settings", "seed"}) {
      const auto it = p.extra_metadata.find(key);
      h.text(key);
      h.text(it == p.extra_metadata.end() ? std::string_view() : std::string_view(it->second));
    }
  }

  h.u64(c.recorded_output ? 1 : 0);
  if (c.recorded_output) hash_tensor(h, *c.recorded_output);
  h.u64(c.recorded_lse ? 1 : 0);
  if (c.recorded_lse) hash_tensor(h, *c.recorded_lse);
  return hex64(h.digest());
}

}  // namespace pagecheck
