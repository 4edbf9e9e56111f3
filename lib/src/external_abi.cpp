// The host side of the external-kernel ABI: the description of a case and
// the refusals from declared capabilities and ABI minor
// (pagecheck/external_abi.hpp; include/pagecheck/external.h).
#include "pagecheck/external_abi.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace pagecheck {

namespace {

constexpr std::array<DType, 5> kAbiDtypes = {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2};

std::string dtype_list(std::uint32_t mask) {
  std::string out;
  for (DType d : kAbiDtypes)
    if (mask & PAGECHECK_DTYPE_BIT(external_dtype_code(d)))
      out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  return out;
}

// The refusals of features that ABI 1.2 added: opt-in through the features
// mask, and only for a library that knows them (minor >= 2).
std::string refusal_1_2(const pagecheck_kernel_entry& e, std::uint32_t library_minor, const Case& c) {
  struct Feature {
    bool used;
    std::uint32_t bit;
    const char* name;  // as a reason names it
    const char* macro;
  };
  const Feature features[] = {
      {c.has_sinks(), PAGECHECK_FEATURE_SINKS, "attention sinks", "PAGECHECK_FEATURE_SINKS"},
      {c.has_alibi(), PAGECHECK_FEATURE_ALIBI, "ALiBi slopes", "PAGECHECK_FEATURE_ALIBI"},
      {c.has_latent(), PAGECHECK_FEATURE_LATENT, "latent (MLA) caches", "PAGECHECK_FEATURE_LATENT"},
  };
  for (const Feature& f : features) {
    if (!f.used) continue;
    if (library_minor < 2)
      return fmt::format("{}: the library was built against ABI {}.{}, which cannot express them (ABI {}.2 and "
                         "its {} can)",
                         f.name, PAGECHECK_ABI_MAJOR, library_minor, PAGECHECK_ABI_MAJOR, f.macro);
    if (!(e.features & f.bit)) return fmt::format("{} are not taken (the entry does not declare {})", f.name, f.macro);
  }
  if (library_minor < 2 && (e.head_dim_count == 0 || e.head_dims == nullptr) &&
      head_dim_added_in_1_2(c.key_head_dim(), c.v_head_dim()))
    return fmt::format("head_dim {}/{}: the library was built against ABI {}.{} and declares no head_dims list; the "
                       "sizes added with ABI {}.2 reach it only when its list names them",
                       c.key_head_dim(), c.v_head_dim(), PAGECHECK_ABI_MAJOR, library_minor, PAGECHECK_ABI_MAJOR);
  return {};
}

}  // namespace

bool head_dim_added_in_1_2(std::int64_t head_dim, std::int64_t v_head_dim) {
  if (head_dim != v_head_dim) return false;
  for (std::int64_t d : {32, 80, 96, 112, 120})
    if (head_dim == d) return true;
  return false;
}

int external_dtype_code(DType d) {
  switch (d) {
    case DType::F32: return PAGECHECK_DTYPE_F32;
    case DType::F16: return PAGECHECK_DTYPE_F16;
    case DType::BF16: return PAGECHECK_DTYPE_BF16;
    case DType::F8_E4M3: return PAGECHECK_DTYPE_F8_E4M3;
    case DType::F8_E5M2: return PAGECHECK_DTYPE_F8_E5M2;
    default: return 0;
  }
}

pagecheck_case_desc describe_external_case(const Case& c) {
  pagecheck_case_desc d{};
  d.abi_major = PAGECHECK_ABI_MAJOR;
  d.abi_minor = PAGECHECK_ABI_MINOR;
  d.struct_size = sizeof(pagecheck_case_desc);
  d.query_dtype = external_dtype_code(c.query.dtype);
  d.kv_dtype = external_dtype_code(c.key_cache.dtype);
  d.output_dtype = d.query_dtype;
  d.kv_layout = c.params.layout == KvLayout::NHD ? PAGECHECK_LAYOUT_NHD : PAGECHECK_LAYOUT_HND;
  d.table_form = c.table.form == TableForm::Dense ? PAGECHECK_TABLE_DENSE : PAGECHECK_TABLE_CSR;
  d.causal = c.params.causal ? 1 : 0;
  d.is_decode = c.is_decode() ? 1 : 0;
  d.num_seqs = c.num_seqs();
  d.num_tokens = c.num_tokens();
  d.num_blocks = c.num_blocks();
  d.table_entries = static_cast<std::int64_t>(c.table.page_indices.size());
  if (c.table.form == TableForm::Dense) {
    d.max_blocks_per_seq = c.table.max_blocks_per_seq;
  } else {
    for (std::size_t s = 0; s + 1 < c.table.page_indptr.size(); ++s)
      d.max_blocks_per_seq = std::max(d.max_blocks_per_seq, c.table.page_indptr[s + 1] - c.table.page_indptr[s]);
  }
  d.block_size = static_cast<std::int32_t>(c.block_size());
  d.q_heads = static_cast<std::int32_t>(c.q_heads());
  d.kv_heads = static_cast<std::int32_t>(c.kv_heads());
  d.head_dim = static_cast<std::int32_t>(c.key_head_dim());
  d.v_head_dim = static_cast<std::int32_t>(c.v_head_dim());
  d.max_q_len = static_cast<std::int32_t>(c.max_q_len());
  d.max_seq_len = static_cast<std::int32_t>(c.max_seq_len());
  d.window = c.params.sliding_window;
  d.scale = static_cast<float>(c.scale());
  d.softcap = static_cast<float>(c.params.softcap);
  d.k_scale = static_cast<float>(c.params.k_scale);
  d.v_scale = static_cast<float>(c.params.v_scale);
  d.query_stride_token = c.q_heads() * c.head_dim();
  d.query_stride_head = c.head_dim();
  const CacheStrides ks = cache_strides(c.params.layout, c.block_size(), c.kv_heads(), c.key_head_dim());
  // A latent cache's V is the column prefix of each key row: the key's strides.
  const CacheStrides vs =
      c.has_latent() ? ks : cache_strides(c.params.layout, c.block_size(), c.kv_heads(), c.v_head_dim());
  d.key_stride_block = ks.block;
  d.key_stride_slot = ks.slot;
  d.key_stride_head = ks.head;
  d.value_stride_block = vs.block;
  d.value_stride_slot = vs.slot;
  d.value_stride_head = vs.head;
  d.output_stride_token = c.q_heads() * c.v_head_dim();
  d.output_stride_head = c.v_head_dim();
  d.lse_stride_token = c.q_heads();
  d.has_sinks = c.has_sinks() ? 1 : 0;
  d.has_alibi = c.has_alibi() ? 1 : 0;
  d.value_in_key = c.has_latent() ? 1 : 0;
  return d;
}

std::string external_refusal(const pagecheck_kernel_entry& e, std::uint32_t library_minor, const Case& c,
                             const pagecheck_case_desc& d) {
  if (c.key_cache.dtype != c.value_cache.dtype)
    return fmt::format("key cache {} and value cache {} differ; the external ABI takes one KV dtype",
                       dtype_name(c.key_cache.dtype), dtype_name(c.value_cache.dtype));
  if (d.query_dtype == 0 || d.kv_dtype == 0)
    return fmt::format("dtypes Q {} KV {} have no code in the external ABI", dtype_name(c.query.dtype),
                       dtype_name(c.key_cache.dtype));
  if (std::string why = refusal_1_2(e, library_minor, c); !why.empty()) return why;
  if (e.query_dtypes != 0 && !(e.query_dtypes & PAGECHECK_DTYPE_BIT(d.query_dtype)))
    return fmt::format("query dtype {} is not taken; takes: {}", dtype_name(c.query.dtype), dtype_list(e.query_dtypes));
  if (e.kv_dtypes != 0 && !(e.kv_dtypes & PAGECHECK_DTYPE_BIT(d.kv_dtype)))
    return fmt::format("kv dtype {} is not taken; takes: {}", dtype_name(c.key_cache.dtype), dtype_list(e.kv_dtypes));
  if (e.layouts != 0 && !(e.layouts & PAGECHECK_LAYOUT_BIT(d.kv_layout)))
    return fmt::format("layout {} is not taken; takes: {}", d.kv_layout == PAGECHECK_LAYOUT_NHD ? "NHD" : "HND",
                       (e.layouts & PAGECHECK_LAYOUT_BIT(PAGECHECK_LAYOUT_NHD)) ? "NHD" : "HND");
  if (e.table_forms != 0 && !(e.table_forms & PAGECHECK_TABLE_BIT(d.table_form)))
    return fmt::format("{} tables are not taken", d.table_form == PAGECHECK_TABLE_DENSE ? "dense" : "CSR");
  if (e.features != 0) {
    if (d.is_decode && !(e.features & PAGECHECK_FEATURE_DECODE))
      return "decode cases (every q_len 1) are not taken";
    if (!d.is_decode && !(e.features & PAGECHECK_FEATURE_PREFILL)) {
      for (std::int64_t s = 0; s < c.num_seqs(); ++s)
        if (c.q_len(s) != 1)
          return fmt::format("takes decode cases only (one query token per sequence); sequence {} has q_len {}", s,
                             c.q_len(s));
    }
    if (d.window > 0 && !(e.features & PAGECHECK_FEATURE_WINDOW))
      return fmt::format("no sliding window (the case has {})", d.window);
    if (d.softcap > 0 && !(e.features & PAGECHECK_FEATURE_SOFTCAP))
      return fmt::format("no softcap (the case has {:g})", c.params.softcap);
    if ((c.params.k_scale != 1.0 || c.params.v_scale != 1.0) && !(e.features & PAGECHECK_FEATURE_KV_SCALES))
      return fmt::format("no k_scale/v_scale (the case has {:g}/{:g})", c.params.k_scale, c.params.v_scale);
    if (!d.causal && !(e.features & PAGECHECK_FEATURE_NON_CAUSAL)) return "causal cases only";
  }
  if (e.min_block_size > 0 && d.block_size < e.min_block_size)
    return fmt::format("block_size {} is below its minimum {}", d.block_size, e.min_block_size);
  if (e.max_block_size > 0 && d.block_size > e.max_block_size)
    return fmt::format("block_size {} is above its maximum {}", d.block_size, e.max_block_size);
  if (e.head_dim_count > 0 && e.head_dims != nullptr) {
    std::string built;
    for (std::uint32_t i = 0; i < e.head_dim_count; ++i) {
      const std::int32_t k = e.head_dims[2 * i], v = e.head_dims[2 * i + 1];
      if (k == d.head_dim && v == d.v_head_dim) return {};
      built += (built.empty() ? "" : ", ") + (k == v ? std::to_string(k) : fmt::format("{}/{}", k, v));
    }
    return fmt::format("head_dim {}/{} is not taken; takes: {}", d.head_dim, d.v_head_dim, built);
  }
  return {};
}

}  // namespace pagecheck
