// Case files: the named tensors and metadata of a safetensors file mapped to a
// Case, and back. This layer checks structure (names, dtypes, ranks, shapes
// that agree with each other, metadata that parses); validate_case checks
// what the values mean. docs/case-format.md is the user-facing contract.
#include "pagecheck/case_file.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <new>
#include <string_view>
#include <tuple>
#include <thread>

#include "pagecheck/limits.hpp"
#include "pagecheck/safetensors.hpp"
#include "pagecheck/text.hpp"

namespace pagecheck {

namespace {

constexpr std::string_view kKnownTensors[] = {
    "query",     "key_cache",  "value_cache",      "block_table",     "seq_lens", "kv_indptr",
    "kv_indices", "kv_last_page_len", "query_start_loc", "output", "lse", "kv_cache", "paged_kv_cache",
    "sinks", "alibi_slopes", "kv_c_and_k_pe_cache", "ckv_cache", "kpe_cache", "q_nope", "q_pe",
};
// vLLM's name for the latent (MLA) cache, the form pagecheck writes it in.
constexpr std::string_view kLatentCache = "kv_c_and_k_pe_cache";
// kv_layout's value for vLLM's classic paged-attention cache (read only: the
// case holds it as HND and is written back so).
constexpr std::string_view kClassicLayout = "vllm-classic";
constexpr std::string_view kKnownMetadata[] = {
    "kv_layout", "causal", "scale", "sliding_window", "softcap", "k_scale", "v_scale", "description", "block_size",
    "kv_lora_rank",
};

bool is_known_metadata(std::string_view key) {
  return std::find(std::begin(kKnownMetadata), std::end(kKnownMetadata), key) != std::end(kKnownMetadata);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string unknown_tensor_message(const std::string& name) {
  std::string lowered;
  for (char ch : name) lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string_view best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  // A typo is short: no suggestion for a name of a megabyte (the distance
  // costs its length times each known name's).
  for (auto known : kKnownTensors) {
    if (lowered.size() > 64) break;
    const auto d = edit_distance(lowered, known);
    if (d < best_distance) best_distance = d, best = known;
  }
  std::string known_list;
  for (auto known : kKnownTensors) known_list += (known_list.empty() ? "" : ", ") + std::string(known);
  std::string hint;
  if (best_distance <= std::max<std::size_t>(2, best.size() / 3)) hint = fmt::format(" (did you mean '{}'?)", best);
  return fmt::format("unknown tensor '{}'{}; a case file holds only: {}", printable(name, 200), hint, known_list);
}

std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string out;
  for (DType d : dtypes) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  return out;
}

Status check_dtype(const std::string& name, const Tensor& t, std::initializer_list<DType> allowed) {
  if (std::find(allowed.begin(), allowed.end(), t.dtype) == allowed.end())
    return invalid_input(fmt::format("tensor '{}' is {} but must be one of: {}", name, dtype_name(t.dtype),
                                     dtype_list(allowed)));
  return {};
}

Status check_rank(const std::string& name, const Tensor& t, std::int64_t rank, std::string_view expected_shape) {
  if (t.rank() != rank)
    return invalid_input(fmt::format("tensor '{}' has shape {} but must have rank {}: {}", name, t.describe(), rank,
                                     expected_shape));
  return {};
}

Status check_positive(const std::string& name, const Tensor& t, std::size_t axis, std::string_view what) {
  if (t.dim(axis) < 1)
    return invalid_input(fmt::format("tensor '{}' has shape {}: {} (dimension {}) must be at least 1", name,
                                     t.describe(), what, axis));
  return {};
}

// A per-query-head vector (sinks, alibi_slopes [q_heads]): F32, F16 or BF16, widened to
// float. `what` says what one element is, for the message.
Expected<std::vector<float>> read_per_head(const std::string& name, const Tensor& t, std::int64_t q_heads,
                                           std::string_view what) {
  PC_TRY(check_dtype(name, t, {DType::F32, DType::F16, DType::BF16}));
  if (t.rank() != 1 || t.dim(0) != q_heads)
    return invalid_input(fmt::format("tensor '{}' has shape {} but must be [q_heads] = [{}]: {} per query head", name,
                                     t.describe(), q_heads, what));
  std::vector<float> out(static_cast<std::size_t>(q_heads));
  for (std::size_t h = 0; h < out.size(); ++h) out[h] = static_cast<float>(t.at(h));
  return out;
}

std::vector<std::int32_t> read_i32(const Tensor& t) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), t.data, out.size() * sizeof(std::int32_t));
  return out;
}

// --- metadata --------------------------------------------------------------

std::optional<double> parse_double(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

std::optional<std::int64_t> parse_int(const std::string& text) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

Error metadata_error(const std::string& key, const std::string& value, std::string_view expected) {
  return invalid_input(fmt::format("metadata '{}' = '{}' is not {}", key, printable(value, 200), expected));
}

Expected<CaseParams> parse_params(const std::map<std::string, std::string>& metadata) {
  CaseParams p;
  for (const auto& [key, value] : metadata) {
    if (key == "kv_layout") {
      if (value == "NHD") p.layout = KvLayout::NHD;
      else if (value == "HND" || value == kClassicLayout) p.layout = KvLayout::HND;  // classic: converted to HND
      else return metadata_error(key, value, "a KV layout (NHD, HND or vllm-classic)");
    } else if (key == "causal") {
      // Python's str(True) is "True": accept both spellings.
      if (value == "true" || value == "True" || value == "1") p.causal = true;
      else if (value == "false" || value == "False" || value == "0") p.causal = false;
      else return metadata_error(key, value, "a boolean (true or false)");
    } else if (key == "scale") {
      const auto v = parse_double(value);
      if (!v || !std::isfinite(*v) || *v < 0) return metadata_error(key, value, "a finite number >= 0");
      p.scale = *v;
    } else if (key == "sliding_window") {
      const auto v = parse_int(value);
      if (!v || *v < 0) return metadata_error(key, value, "an integer >= 0 (0: no window)");
      p.sliding_window = *v;
    } else if (key == "softcap") {
      const auto v = parse_double(value);
      if (!v || !std::isfinite(*v) || *v < 0) return metadata_error(key, value, "a finite number >= 0 (0: none)");
      p.softcap = *v;
    } else if (key == "k_scale" || key == "v_scale") {
      const auto v = parse_double(value);
      if (!v || !std::isfinite(*v) || *v <= 0) return metadata_error(key, value, "a finite number > 0");
      (key == "k_scale" ? p.k_scale : p.v_scale) = *v;
    } else if (key == "block_size") {
      const auto v = parse_int(value);
      if (!v || *v < 1) return metadata_error(key, value, "an integer >= 1");
      p.table_block_size = *v;
    } else if (key == "kv_lora_rank") {
      const auto v = parse_int(value);
      if (!v || *v < 1) return metadata_error(key, value, "an integer >= 1 (the latent's width: V's head dim)");
      p.kv_lora_rank = *v;
    } else if (key == "description") {
      p.description = value;
    } else {
      p.extra_metadata.emplace(key, value);
    }
  }
  return p;
}

std::map<std::string, std::string> format_params(const CaseParams& p) {
  std::map<std::string, std::string> out;
  // Known keys win over an extra_metadata entry of the same name.
  for (const auto& [key, value] : p.extra_metadata)
    if (!is_known_metadata(key)) out[key] = value;
  out["kv_layout"] = p.layout == KvLayout::NHD ? "NHD" : "HND";
  out["causal"] = p.causal ? "true" : "false";
  // fmt's "{}" for double is the shortest text that parses back exactly.
  if (p.scale) out["scale"] = fmt::format("{}", *p.scale);
  out["sliding_window"] = fmt::format("{}", p.sliding_window);
  out["softcap"] = fmt::format("{}", p.softcap);
  out["k_scale"] = fmt::format("{}", p.k_scale);
  out["v_scale"] = fmt::format("{}", p.v_scale);
  if (p.table_block_size) out["block_size"] = fmt::format("{}", *p.table_block_size);
  if (p.kv_lora_rank) out["kv_lora_rank"] = fmt::format("{}", *p.kv_lora_rank);
  if (!p.description.empty()) out["description"] = p.description;
  return out;
}

// --- the KV cache, in any of its four forms ---------------------------------

constexpr std::initializer_list<DType> kKvDtypes = {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3,
                                                    DType::F8_E5M2};
constexpr const char* kCacheForms =
    "key_cache + value_cache, kv_cache (vLLM) or paged_kv_cache (FlashInfer); for MLA kv_c_and_k_pe_cache (vLLM) or "
    "ckv_cache + kpe_cache (FlashInfer)";

// Exactly one cache form is given, and the separate one whole.
Status check_cache_presence(const std::map<std::string, Tensor>& tensors) {
  std::vector<std::string> given;
  const bool separate = tensors.count("key_cache") > 0 || tensors.count("value_cache") > 0;
  if (separate) given.push_back("key_cache + value_cache");
  if (tensors.count("kv_cache") > 0) given.push_back("kv_cache");
  if (tensors.count("paged_kv_cache") > 0) given.push_back("paged_kv_cache");
  if (tensors.count("kv_c_and_k_pe_cache") > 0) given.push_back("kv_c_and_k_pe_cache");
  const bool flashinfer_latent = tensors.count("ckv_cache") > 0 || tensors.count("kpe_cache") > 0;
  if (flashinfer_latent) given.push_back("ckv_cache + kpe_cache");
  if (given.size() > 1) {
    std::string list;
    for (std::size_t i = 0; i < given.size(); ++i)
      list += (i == 0 ? "" : i + 1 == given.size() ? " and " : ", ") + given[i];
    return invalid_input(fmt::format("the file holds {} KV cache forms ({}); give exactly one of {}", given.size(),
                                     list, kCacheForms));
  }
  if (given.empty())
    return invalid_input(fmt::format("required tensor 'key_cache' is missing; the KV cache is {}", kCacheForms));
  if (separate)
    for (const char* name : {"key_cache", "value_cache"})
      if (tensors.count(name) == 0) return invalid_input(fmt::format("required tensor '{}' is missing", name));
  if (flashinfer_latent)
    for (const char* name : {"ckv_cache", "kpe_cache"})
      if (tensors.count(name) == 0)
        return invalid_input(fmt::format("required tensor '{}' is missing (FlashInfer's MLA cache is ckv_cache "
                                         "[num_pages, page_size, kv_lora_rank] + kpe_cache [num_pages, page_size, "
                                         "rope_dim])",
                                         name));
  return {};
}

std::string dim_mismatch(const char* what, const Tensor& key, const Tensor& value, std::int64_t k, std::int64_t v,
                         std::string_view layout) {
  return fmt::format("key_cache {} and value_cache {} disagree on {} ({} vs {}, layout {})", key.describe(),
                     value.describe(), what, k, v, layout);
}

// The conversions that copy hold the cache a second time, as long as the
// case lives; refuse one that cannot fit before allocating it (validation
// then counts it with the rest, estimate_memory's case_bytes).
// `what`: the tensors, as the message names them.
Status check_copy_fits(std::uint64_t bytes, const std::string& what) {
  const auto limit = host_memory_limit();
  if (!limit) return limit.error();
  if (bytes <= *limit) return {};
  return invalid_input(fmt::format(
      "converting {} to separate key and value tensors at read time needs {} of host memory, but the limit is {} "
      "({}); set PAGECHECK_MEMORY_LIMIT to allow more",
      what, format_bytes(bytes), format_bytes(*limit),
      std::getenv("PAGECHECK_MEMORY_LIMIT") != nullptr ? "PAGECHECK_MEMORY_LIMIT" : "the machine's memory"));
}

// A view of `bytes` bytes of `t` from byte `offset`, shaped `shape` (the
// owner keeps the file mapped).
Tensor sub_view(const Tensor& t, std::size_t offset, std::size_t bytes, std::vector<std::int64_t> shape) {
  Tensor out;
  out.dtype = t.dtype;
  out.shape = std::move(shape);
  out.owner = t.owner;
  out.data = t.data + offset;
  out.nbytes = bytes;
  return out;
}

Expected<Tensor> allocate(DType dtype, std::vector<std::int64_t> shape) {
  try {
    return Tensor::zeros(dtype, std::move(shape));
  } catch (const std::bad_alloc&) {
    return runtime_error("out of memory converting the KV cache to separate key and value tensors");
  }
}

// value [blocks, heads, dim, slots] -> [blocks, heads, slots, dim], elements
// of `kBytes` bytes (the source may be misaligned: byte copies).
template <std::size_t kBytes>
void transpose_blocks(const std::byte* src, std::byte* dst, std::int64_t blocks, std::int64_t dim,
                      std::int64_t slots) {
  const std::int64_t block = dim * slots;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::byte* in = src + b * block * kBytes;
    std::byte* out = dst + b * block * kBytes;
    for (std::int64_t e = 0; e < dim; ++e)
      for (std::int64_t s = 0; s < slots; ++s) std::memcpy(out + (s * dim + e) * kBytes, in + (e * slots + s) * kBytes, kBytes);
  }
}

// vLLM: kv_cache [2, num_blocks, block_size, kv_heads, head_dim]; both
// halves are NHD caches as they are, viewed in place.
Status read_vllm_combined(const Tensor& t, const std::string* layout_text, Case& c) {
  if (layout_text && *layout_text != "NHD")
    return invalid_input(fmt::format(
        "kv_layout is '{}' but kv_cache is vLLM's NHD cache [2, num_blocks, block_size, kv_heads, head_dim]; leave "
        "kv_layout out or set it to NHD (FlashInfer's HND cache is paged_kv_cache [num_pages, 2, kv_heads, page_size, "
        "head_dim])",
        printable(*layout_text, 200)));
  PC_TRY(check_dtype("kv_cache", t, kKvDtypes));
  PC_TRY(check_rank("kv_cache", t, 5, "[2, num_blocks, block_size, kv_heads, head_dim] (vLLM, NHD)"));
  if (t.dim(0) != 2)
    return invalid_input(fmt::format("tensor 'kv_cache' has shape {}: dimension 0 must be 2 (keys, values)",
                                     t.describe()));
  PC_TRY(check_positive("kv_cache", t, 2, "block_size"));
  PC_TRY(check_positive("kv_cache", t, 3, "kv_heads"));
  PC_TRY(check_positive("kv_cache", t, 4, "head_dim"));
  const std::vector<std::int64_t> half_shape(t.shape.begin() + 1, t.shape.end());
  const std::size_t half = t.nbytes / 2;
  c.key_cache = sub_view(t, 0, half, half_shape);
  c.value_cache = sub_view(t, half, half, half_shape);
  c.params.layout = KvLayout::NHD;
  c.cache_form = CacheForm::VllmCombined;
  return {};
}

// FlashInfer: paged_kv_cache [num_pages, 2, page_size, kv_heads, head_dim]
// (NHD) or [num_pages, 2, kv_heads, page_size, head_dim] (HND): K and V of a
// page sit side by side, so each page's two halves are copied apart.
Status read_flashinfer(const Tensor& t, const std::string* layout_text, Case& c) {
  if (layout_text && *layout_text == kClassicLayout)
    return invalid_input(
        "kv_layout 'vllm-classic' describes a rank-5 key_cache with a rank-4 value_cache, but the file gives "
        "paged_kv_cache; set kv_layout to NHD or HND (or leave it out: NHD)");
  const bool nhd = c.params.layout == KvLayout::NHD;
  PC_TRY(check_dtype("paged_kv_cache", t, kKvDtypes));
  PC_TRY(check_rank("paged_kv_cache", t, 5,
                    nhd ? "[num_pages, 2, page_size, kv_heads, head_dim] (FlashInfer, NHD)"
                        : "[num_pages, 2, kv_heads, page_size, head_dim] (FlashInfer, HND)"));
  if (t.dim(1) != 2)
    return invalid_input(fmt::format("tensor 'paged_kv_cache' has shape {}: dimension 1 must be 2 (keys, values)",
                                     t.describe()));
  PC_TRY(check_positive("paged_kv_cache", t, nhd ? 2 : 3, "page_size"));
  PC_TRY(check_positive("paged_kv_cache", t, nhd ? 3 : 2, "kv_heads"));
  PC_TRY(check_positive("paged_kv_cache", t, 4, "head_dim"));
  PC_TRY(check_copy_fits(t.nbytes, fmt::format("paged_kv_cache {}", t.describe())));
  const std::vector<std::int64_t> shape = {t.dim(0), t.dim(2), t.dim(3), t.dim(4)};
  auto key = allocate(t.dtype, shape);
  if (!key) return key.error();
  auto value = allocate(t.dtype, shape);
  if (!value) return value.error();
  const auto pages = static_cast<std::size_t>(t.dim(0));
  const std::size_t page_bytes = pages == 0 ? 0 : t.nbytes / (2 * pages);
  for (std::size_t p = 0; p < pages; ++p) {
    std::memcpy(key->mutable_data() + p * page_bytes, t.data + 2 * p * page_bytes, page_bytes);
    std::memcpy(value->mutable_data() + p * page_bytes, t.data + (2 * p + 1) * page_bytes, page_bytes);
  }
  c.key_cache = std::move(key.value());
  c.value_cache = std::move(value.value());
  c.cache_form = CacheForm::FlashInferPaged;
  return {};
}

// vLLM's classic paged-attention cache: key_cache [num_blocks, kv_heads,
// head_dim/x, block_size, x], value_cache [num_blocks, kv_heads, head_dim,
// block_size]; copied to HND ([num_blocks, kv_heads, block_size, dim]).
Status read_vllm_classic(const Tensor& k, const Tensor& v, std::int64_t query_head_dim, Case& c) {
  constexpr const char* kKeyShape = "[num_blocks, kv_heads, head_dim/x, block_size, x] (vLLM classic)";
  constexpr const char* kValueShape = "[num_blocks, kv_heads, head_dim, block_size] (vLLM classic)";
  PC_TRY(check_dtype("key_cache", k, kKvDtypes));
  PC_TRY(check_dtype("value_cache", v, kKvDtypes));
  PC_TRY(check_rank("key_cache", k, 5, kKeyShape));
  PC_TRY(check_rank("value_cache", v, 4, kValueShape));
  PC_TRY(check_positive("key_cache", k, 1, "kv_heads"));
  PC_TRY(check_positive("key_cache", k, 2, "head_dim/x"));
  PC_TRY(check_positive("key_cache", k, 3, "block_size"));
  PC_TRY(check_positive("key_cache", k, 4, "x"));
  PC_TRY(check_positive("value_cache", v, 1, "kv_heads"));
  PC_TRY(check_positive("value_cache", v, 2, "head_dim"));
  PC_TRY(check_positive("value_cache", v, 3, "block_size"));
  for (auto [k_axis, v_axis, what] : {std::tuple<std::size_t, std::size_t, const char*>{0, 0, "num_blocks"},
                                      {1, 1, "kv_heads"},
                                      {3, 3, "block_size"}})
    if (k.dim(k_axis) != v.dim(v_axis))
      return invalid_input(dim_mismatch(what, k, v, k.dim(k_axis), v.dim(v_axis), "vllm-classic"));
  std::int64_t head_dim = 0;
  const bool overflow = __builtin_mul_overflow(k.dim(2), k.dim(4), &head_dim);
  if (overflow || head_dim != query_head_dim)
    return invalid_input(fmt::format(
        "key_cache {} is vLLM's classic layout {}: head_dim/x = {} groups of x = {} elements make a key head_dim "
        "of {}, but query has head_dim {}; dimensions 2 and 4 must multiply to the head dim",
        k.describe(), kKeyShape, k.dim(2), k.dim(4), overflow ? std::string("more than 2^63") : std::to_string(head_dim),
        query_head_dim));
  PC_TRY(check_copy_fits(k.nbytes + v.nbytes, fmt::format("key_cache {} and value_cache {}", k.describe(), v.describe())));

  const std::int64_t blocks = k.dim(0), heads = k.dim(1), groups = k.dim(2), slots = k.dim(3), x = k.dim(4);
  const std::int64_t v_dim = v.dim(2);
  auto key = allocate(k.dtype, {blocks, heads, slots, head_dim});
  if (!key) return key.error();
  auto value = allocate(v.dtype, {blocks, heads, slots, v_dim});
  if (!value) return value.error();
  // Key: the x elements of group i of slot s are dims [i*x, (i+1)*x) of it.
  const auto kb = static_cast<std::int64_t>(dtype_size(k.dtype));
  std::byte* key_out = key->mutable_data();
  for (std::int64_t bh = 0; bh < blocks * heads; ++bh) {
    const std::byte* in = k.data + bh * groups * slots * x * kb;
    std::byte* out = key_out + bh * slots * head_dim * kb;
    for (std::int64_t i = 0; i < groups; ++i)
      for (std::int64_t s = 0; s < slots; ++s)
        std::memcpy(out + (s * head_dim + i * x) * kb, in + (i * slots + s) * x * kb, static_cast<std::size_t>(x * kb));
  }
  switch (dtype_size(v.dtype)) {
    case 1: transpose_blocks<1>(v.data, value->mutable_data(), blocks * heads, v_dim, slots); break;
    case 2: transpose_blocks<2>(v.data, value->mutable_data(), blocks * heads, v_dim, slots); break;
    default: transpose_blocks<4>(v.data, value->mutable_data(), blocks * heads, v_dim, slots); break;
  }
  c.key_cache = std::move(key.value());
  c.value_cache = std::move(value.value());
  c.params.layout = KvLayout::HND;
  c.cache_form = CacheForm::VllmClassic;
  return {};
}

// --- latent (MLA) caches -----------------------------------------------------

// Row r of the result (`shape`, the last dim a's plus b's) is row r of `a`
// then row r of `b` (same dtype, same number of rows; either may be
// misaligned: byte copies).
Expected<Tensor> concat_rows(const Tensor& a, const Tensor& b, std::vector<std::int64_t> shape) {
  const std::int64_t wa = a.shape.back(), wb = b.shape.back(), rows = a.numel() / std::max<std::int64_t>(wa, 1);
  auto out = allocate(a.dtype, std::move(shape));
  if (!out) return out.error();
  const auto es = static_cast<std::int64_t>(dtype_size(a.dtype));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::byte* row = out->mutable_data() + r * (wa + wb) * es;
    std::memcpy(row, a.data + r * wa * es, static_cast<std::size_t>(wa * es));
    std::memcpy(row + wa * es, b.data + r * wb * es, static_cast<std::size_t>(wb * es));
  }
  return out;
}

// The checks both MLA forms share: one KV head, NHD, V a proper column
// prefix of K.
Status finish_latent(const std::string* layout_text, std::int64_t kv_lora_rank, std::int64_t head_dim, Case& c) {
  if (layout_text && *layout_text != "NHD")
    return invalid_input(fmt::format("kv_layout is '{}' but a latent (MLA) cache has one KV head, stored [num_blocks, "
                                     "block_size, head_dim]; leave kv_layout out or set it to NHD",
                                     printable(*layout_text, 200)));
  if (kv_lora_rank > head_dim)
    return invalid_input(fmt::format("kv_lora_rank {} is wider than the latent cache's rows ({} columns): V is the "
                                     "first kv_lora_rank columns of each row",
                                     kv_lora_rank, head_dim));
  c.params.layout = KvLayout::NHD;
  c.params.kv_lora_rank = kv_lora_rank;
  c.value_cache = c.key_cache;  // V is a column prefix of K: one tensor
  return {};
}

// vLLM: kv_c_and_k_pe_cache [num_blocks, block_size, head_dim] (FlashMLA's
// k_cache [num_blocks, block_size, 1, head_dim] too), each row the latent
// (its first kv_lora_rank columns, also V) and the rope part; viewed in place.
Status read_vllm_latent(const Tensor& t, const std::string* layout_text, const CaseParams& params, Case& c) {
  constexpr const char* kShape = "[num_blocks, block_size, head_dim] (vLLM MLA) or [num_blocks, block_size, 1, head_dim]";
  PC_TRY(check_dtype("kv_c_and_k_pe_cache", t, kKvDtypes));
  if (t.rank() != 3 && t.rank() != 4)
    return invalid_input(fmt::format("tensor 'kv_c_and_k_pe_cache' has shape {} but must be {}", t.describe(), kShape));
  if (t.rank() == 4 && t.dim(2) != 1)
    return invalid_input(fmt::format("tensor 'kv_c_and_k_pe_cache' has shape {}: a latent cache has one KV head, so "
                                     "dimension 2 must be 1 ({})",
                                     t.describe(), kShape));
  PC_TRY(check_positive("kv_c_and_k_pe_cache", t, 1, "block_size"));
  PC_TRY(check_positive("kv_c_and_k_pe_cache", t, t.rank() - 1, "head_dim"));
  if (!params.kv_lora_rank)
    return invalid_input(
        "metadata 'kv_lora_rank' is missing: with kv_c_and_k_pe_cache it says how many leading columns of each row are "
        "the latent, which is also V (DeepSeek-V3: 512 of 576)");
  const std::int64_t head_dim = t.dim(t.rank() - 1);
  c.key_cache = sub_view(t, 0, t.nbytes, {t.dim(0), t.dim(1), 1, head_dim});
  c.cache_form = CacheForm::VllmLatent;
  return finish_latent(layout_text, *params.kv_lora_rank, head_dim, c);
}

// FlashInfer: ckv_cache [num_pages, page_size, kv_lora_rank] + kpe_cache
// [num_pages, page_size, rope_dim], copied side by side into one cache.
Status read_flashinfer_latent(const Tensor& ckv, const Tensor& kpe, const std::string* layout_text,
                              const CaseParams& params, Case& c) {
  PC_TRY(check_dtype("ckv_cache", ckv, kKvDtypes));
  PC_TRY(check_dtype("kpe_cache", kpe, kKvDtypes));
  PC_TRY(check_rank("ckv_cache", ckv, 3, "[num_pages, page_size, kv_lora_rank] (FlashInfer MLA)"));
  PC_TRY(check_rank("kpe_cache", kpe, 3, "[num_pages, page_size, rope_dim] (FlashInfer MLA)"));
  PC_TRY(check_positive("ckv_cache", ckv, 1, "page_size"));
  PC_TRY(check_positive("ckv_cache", ckv, 2, "kv_lora_rank"));
  PC_TRY(check_positive("kpe_cache", kpe, 2, "rope_dim"));
  if (ckv.dtype != kpe.dtype)
    return invalid_input(fmt::format("ckv_cache is {} but kpe_cache is {}; the latent cache has one dtype",
                                     dtype_name(ckv.dtype), dtype_name(kpe.dtype)));
  if (ckv.dim(0) != kpe.dim(0) || ckv.dim(1) != kpe.dim(1))
    return invalid_input(fmt::format("ckv_cache {} and kpe_cache {} disagree on num_pages or page_size", ckv.describe(),
                                     kpe.describe()));
  if (params.kv_lora_rank && *params.kv_lora_rank != ckv.dim(2))
    return invalid_input(fmt::format("metadata kv_lora_rank = {} but ckv_cache {} holds {} latent columns",
                                     *params.kv_lora_rank, ckv.describe(), ckv.dim(2)));
  PC_TRY(check_copy_fits(ckv.nbytes + kpe.nbytes, fmt::format("ckv_cache {} and kpe_cache {}", ckv.describe(), kpe.describe())));
  const std::int64_t latent = ckv.dim(2), rope = kpe.dim(2);
  auto key = concat_rows(ckv, kpe, {ckv.dim(0), ckv.dim(1), 1, latent + rope});
  if (!key) return key.error();
  c.key_cache = std::move(key.value());
  c.cache_form = CacheForm::FlashInferLatent;
  return finish_latent(layout_text, latent, latent + rope, c);
}

// FlashInfer's MLA query: q_nope [num_tokens, q_heads, kv_lora_rank] and
// q_pe [num_tokens, q_heads, rope_dim], concatenated into one query.
Expected<Tensor> read_split_query(const Tensor& nope, const Tensor& pe) {
  PC_TRY(check_dtype("q_nope", nope, {DType::F32, DType::F16, DType::BF16}));
  PC_TRY(check_dtype("q_pe", pe, {DType::F32, DType::F16, DType::BF16}));
  PC_TRY(check_rank("q_nope", nope, 3, "[num_tokens, q_heads, kv_lora_rank] (FlashInfer MLA)"));
  PC_TRY(check_rank("q_pe", pe, 3, "[num_tokens, q_heads, rope_dim] (FlashInfer MLA)"));
  if (nope.dtype != pe.dtype || nope.dim(0) != pe.dim(0) || nope.dim(1) != pe.dim(1))
    return invalid_input(fmt::format("q_nope {} and q_pe {} must agree on dtype, num_tokens and q_heads",
                                     nope.describe(), pe.describe()));
  return concat_rows(nope, pe, {nope.dim(0), nope.dim(1), nope.dim(2) + pe.dim(2)});
}

// Sets c.key_cache, c.value_cache, c.cache_form and (for the forms that fix
// it) c.params.layout from whichever form the file holds (one: checked by
// check_cache_presence). `layout_text`: kv_layout's value, null when absent.
Status read_cache(const std::map<std::string, Tensor>& tensors, const std::string* layout_text, Case& c) {
  if (tensors.count("kv_c_and_k_pe_cache"))
    return read_vllm_latent(tensors.at("kv_c_and_k_pe_cache"), layout_text, c.params, c);
  if (tensors.count("ckv_cache"))
    return read_flashinfer_latent(tensors.at("ckv_cache"), tensors.at("kpe_cache"), layout_text, c.params, c);
  if (c.params.kv_lora_rank)
    return invalid_input("metadata 'kv_lora_rank' is set but the cache is not a latent (MLA) cache "
                         "(kv_c_and_k_pe_cache, or ckv_cache + kpe_cache)");
  if (tensors.count("kv_cache")) return read_vllm_combined(tensors.at("kv_cache"), layout_text, c);
  if (tensors.count("paged_kv_cache")) return read_flashinfer(tensors.at("paged_kv_cache"), layout_text, c);

  const Tensor& key = tensors.at("key_cache");
  const Tensor& value = tensors.at("value_cache");
  const bool declared_classic = layout_text && *layout_text == kClassicLayout;
  if (declared_classic) return read_vllm_classic(key, value, c.query.dim(2), c);
  if (key.rank() == 5 && value.rank() == 4) {
    // The classic shapes are unambiguous; an explicit NHD/HND contradicts them.
    if (layout_text)
      return invalid_input(fmt::format(
          "key_cache {} and value_cache {} have the shapes of vLLM's classic layout ([num_blocks, kv_heads, "
          "head_dim/x, block_size, x] and [num_blocks, kv_heads, head_dim, block_size]) but kv_layout is '{}'; for "
          "the classic layout leave kv_layout out or set it to 'vllm-classic'",
          key.describe(), value.describe(), printable(*layout_text, 200)));
    return read_vllm_classic(key, value, c.query.dim(2), c);
  }

  const bool nhd = c.params.layout == KvLayout::NHD;
  const char* cache_shape =
      nhd ? "[num_blocks, block_size, kv_heads, dim] (NHD)" : "[num_blocks, kv_heads, block_size, dim] (HND)";
  const std::size_t slot_axis = nhd ? 1 : 2;
  const std::size_t head_axis = nhd ? 2 : 1;
  for (const char* name : {"key_cache", "value_cache"}) {
    const Tensor& t = tensors.at(name);
    PC_TRY(check_dtype(name, t, kKvDtypes));
    if (t.rank() == 5 && std::string_view(name) == "key_cache")
      return invalid_input(fmt::format(
          "tensor 'key_cache' has shape {} but must have rank 4: {}; a rank-5 key_cache is vLLM's classic layout "
          "[num_blocks, kv_heads, head_dim/x, block_size, x], which needs a rank-4 value_cache [num_blocks, kv_heads, "
          "head_dim, block_size] (value_cache is {})",
          t.describe(), cache_shape, value.describe()));
    PC_TRY(check_rank(name, t, 4, cache_shape));
    PC_TRY(check_positive(name, t, slot_axis, "block_size"));
    PC_TRY(check_positive(name, t, head_axis, "kv_heads"));
    PC_TRY(check_positive(name, t, 3, "head dim"));
  }
  for (auto [axis, what] : {std::pair<std::size_t, const char*>{0, "num_blocks"},
                            {slot_axis, "block_size"},
                            {head_axis, "kv_heads"}}) {
    if (key.dim(axis) != value.dim(axis))
      return invalid_input(dim_mismatch(what, key, value, key.dim(axis), value.dim(axis), nhd ? "NHD" : "HND"));
  }
  c.key_cache = key;
  c.value_cache = value;
  c.cache_form = CacheForm::Separate;
  return {};
}

// --- loading ---------------------------------------------------------------

Expected<Case> build_case(SafetensorsFile& file) {
  auto& tensors = file.tensors;
  for (const auto& [name, tensor] : tensors) {
    if (std::find(std::begin(kKnownTensors), std::end(kKnownTensors), name) == std::end(kKnownTensors))
      return invalid_input(unknown_tensor_message(name));
  }
  const auto has = [&](const char* name) { return tensors.count(name) > 0; };
  const bool split_query = has("q_nope") || has("q_pe");
  if (split_query && has("query"))
    return invalid_input("the file holds both query and q_nope/q_pe; give one: query, or FlashInfer's MLA q_nope + q_pe");
  if (split_query && !(has("q_nope") && has("q_pe")))
    return invalid_input(fmt::format("required tensor '{}' is missing (FlashInfer's MLA query is q_nope + q_pe)",
                                     has("q_nope") ? "q_pe" : "q_nope"));
  if (!has("query") && !split_query) return invalid_input("required tensor 'query' is missing");
  PC_TRY(check_cache_presence(tensors));

  const bool dense = has("block_table") || has("seq_lens");
  const bool csr = has("kv_indptr") || has("kv_indices") || has("kv_last_page_len");
  if (dense && csr)
    return invalid_input(
        "the file holds both table forms: give either block_table + seq_lens (dense) or kv_indptr + kv_indices + "
        "kv_last_page_len (CSR), not both");
  if (!dense && !csr)
    return invalid_input(
        "no block table: give block_table + seq_lens (dense) or kv_indptr + kv_indices + kv_last_page_len (CSR)");
  const std::vector<const char*> form_tensors =
      dense ? std::vector<const char*>{"block_table", "seq_lens"}
            : std::vector<const char*>{"kv_indptr", "kv_indices", "kv_last_page_len"};
  for (const char* name : form_tensors)
    if (!has(name))
      return invalid_input(fmt::format("required tensor '{}' is missing (the {} table form needs it)", name,
                                       dense ? "dense" : "CSR"));

  auto params = parse_params(file.metadata);
  if (!params) return params.error();

  Case c;
  c.params = std::move(params.value());
  if (split_query) {
    auto query = read_split_query(tensors.at("q_nope"), tensors.at("q_pe"));
    if (!query) return query.error();
    c.query = std::move(*query);
  } else {
    c.query = tensors.at("query");
  }

  PC_TRY(check_dtype("query", c.query, {DType::F32, DType::F16, DType::BF16}));
  PC_TRY(check_rank("query", c.query, 3, "[num_tokens, q_heads, head_dim]"));
  PC_TRY(check_positive("query", c.query, 1, "q_heads"));
  PC_TRY(check_positive("query", c.query, 2, "head_dim"));
  if (has("sinks")) {
    auto sinks = read_per_head("sinks", tensors.at("sinks"), c.query.dim(1), "one sink logit");
    if (!sinks) return sinks.error();
    c.sinks = std::move(*sinks);
  }
  if (has("alibi_slopes")) {
    auto slopes = read_per_head("alibi_slopes", tensors.at("alibi_slopes"), c.query.dim(1), "one ALiBi slope");
    if (!slopes) return slopes.error();
    c.alibi_slopes = std::move(*slopes);
  }
  const auto layout_text = file.metadata.find("kv_layout");
  PC_TRY(read_cache(tensors, layout_text == file.metadata.end() ? nullptr : &layout_text->second, c));
  const std::int64_t block_size = c.block_size();

  std::int64_t num_seqs = 0;
  if (dense) {
    const Tensor& table = tensors.at("block_table");
    const Tensor& lens = tensors.at("seq_lens");
    PC_TRY(check_dtype("block_table", table, {DType::I32}));
    PC_TRY(check_rank("block_table", table, 2, "[num_seqs, max_blocks_per_seq]"));
    PC_TRY(check_dtype("seq_lens", lens, {DType::I32}));
    PC_TRY(check_rank("seq_lens", lens, 1, "[num_seqs]"));
    if (table.dim(0) != lens.dim(0))
      return invalid_input(fmt::format("block_table has {} rows but seq_lens has {} entries", table.dim(0), lens.dim(0)));
    num_seqs = lens.dim(0);
    c.table.form = TableForm::Dense;
    c.table.max_blocks_per_seq = table.dim(1);
    c.table.page_indices = read_i32(table);
    c.table.page_indptr.resize(static_cast<std::size_t>(num_seqs) + 1);
    for (std::int64_t s = 0; s <= num_seqs; ++s) c.table.page_indptr[s] = s * c.table.max_blocks_per_seq;
    c.seq_lens = read_i32(lens);
  } else {
    const Tensor& indptr = tensors.at("kv_indptr");
    const Tensor& indices = tensors.at("kv_indices");
    const Tensor& last = tensors.at("kv_last_page_len");
    for (const char* name : {"kv_indptr", "kv_indices", "kv_last_page_len"}) {
      PC_TRY(check_dtype(name, tensors.at(name), {DType::I32}));
    }
    PC_TRY(check_rank("kv_indptr", indptr, 1, "[num_seqs + 1]"));
    PC_TRY(check_rank("kv_indices", indices, 1, "[total pages]"));
    PC_TRY(check_rank("kv_last_page_len", last, 1, "[num_seqs]"));
    if (indptr.dim(0) < 1) return invalid_input("kv_indptr is empty; it must have num_seqs + 1 entries");
    num_seqs = indptr.dim(0) - 1;
    if (last.dim(0) != num_seqs)
      return invalid_input(fmt::format("kv_indptr has {} entries (num_seqs = {}) but kv_last_page_len has {}; it must "
                                       "have num_seqs entries",
                                       indptr.dim(0), num_seqs, last.dim(0)));
    c.table.form = TableForm::Csr;
    const auto indptr_values = read_i32(indptr);
    const auto last_values = read_i32(last);
    c.table.page_indptr.assign(indptr_values.begin(), indptr_values.end());
    c.table.page_indices = read_i32(indices);
    c.seq_lens.resize(static_cast<std::size_t>(num_seqs));
    for (std::int64_t s = 0; s < num_seqs; ++s) {
      const std::int64_t pages = c.table.page_indptr[s + 1] - c.table.page_indptr[s];
      // A sequence with no pages (or a decreasing indptr) has no length;
      // validate_case reports the table, so leave seq_len 0 here.
      if (pages < 1) continue;
      std::int64_t length = 0;
      const bool overflow = __builtin_mul_overflow(pages - 1, block_size, &length) ||
                            __builtin_add_overflow(length, static_cast<std::int64_t>(last_values[s]), &length);
      if (overflow || length > std::numeric_limits<std::int32_t>::max() ||
          length < std::numeric_limits<std::int32_t>::min())
        return invalid_input(fmt::format("sequence {}: {} pages of {} tokens with kv_last_page_len[{}] = {} give a "
                                         "length beyond the 32-bit range of seq_lens",
                                         s, pages, block_size, s, last_values[s]));
      c.seq_lens[s] = static_cast<std::int32_t>(length);
    }
  }

  const std::int64_t num_tokens = c.query.dim(0);
  if (has("query_start_loc")) {
    const Tensor& qsl = tensors.at("query_start_loc");
    PC_TRY(check_dtype("query_start_loc", qsl, {DType::I32}));
    PC_TRY(check_rank("query_start_loc", qsl, 1, "[num_seqs + 1]"));
    if (qsl.dim(0) != num_seqs + 1)
      return invalid_input(fmt::format("query_start_loc has {} entries but the table has {} sequences; it must have "
                                       "num_seqs + 1 = {}",
                                       qsl.dim(0), num_seqs, num_seqs + 1));
    c.query_start_loc = read_i32(qsl);
    c.query_start_loc_given = true;
  } else {
    if (num_tokens != num_seqs)
      return invalid_input(fmt::format("query_start_loc is absent but query has {} tokens for {} sequences; it may be "
                                       "left out only for decode (one query token per sequence)",
                                       num_tokens, num_seqs));
    c.query_start_loc.resize(static_cast<std::size_t>(num_seqs) + 1);
    for (std::int64_t s = 0; s <= num_seqs; ++s) c.query_start_loc[s] = static_cast<std::int32_t>(s);
    c.query_start_loc_given = false;
  }

  if (has("output")) {
    const Tensor& out = tensors.at("output");
    PC_TRY(check_dtype("output", out, {DType::F32, DType::F16, DType::BF16}));
    PC_TRY(check_rank("output", out, 3, "[num_tokens, q_heads, v_head_dim]"));
    if (out.dim(0) != num_tokens || out.dim(1) != c.q_heads() || out.dim(2) != c.v_head_dim())
      return invalid_input(fmt::format("output has shape {} but must be [num_tokens, q_heads, v_head_dim] = [{}, {}, {}]",
                                       out.describe(), num_tokens, c.q_heads(), c.v_head_dim()));
    c.recorded_output = out;
  }
  if (has("lse")) {
    const Tensor& lse = tensors.at("lse");
    PC_TRY(check_dtype("lse", lse, {DType::F32}));
    PC_TRY(check_rank("lse", lse, 2, "[num_tokens, q_heads]"));
    if (lse.dim(0) != num_tokens || lse.dim(1) != c.q_heads())
      return invalid_input(fmt::format("lse has shape {} but must be [num_tokens, q_heads] = [{}, {}]", lse.describe(),
                                       num_tokens, c.q_heads()));
    c.recorded_lse = lse;
  }
  return c;
}

Tensor i32_tensor(std::vector<std::int64_t> shape, std::vector<std::int32_t> values) {
  return Tensor::from_vector(DType::I32, std::move(shape), std::move(values));
}

}  // namespace

Expected<Case> load_case_file(const std::filesystem::path& path) {
  auto file = read_safetensors(path);
  if (!file) return file.error();
  auto c = build_case(file.value());
  if (!c) {
    Error error = c.error();
    if (error.where.empty()) error.where = path.string();
    return error;
  }
  c->name = path.stem().string();
  return c;
}

Expected<Case> parse_case_file(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, std::string name) {
  auto file = parse_safetensors(bytes, std::move(owner));
  if (!file) return file.error();
  auto c = build_case(file.value());
  if (!c) return c.error();
  c->name = std::move(name);
  return c;
}

Status save_case_file(const Case& c, const std::filesystem::path& path, const LazyTensors* lazy) {
  const std::string where = path.string();
  const auto num_seqs = static_cast<std::int64_t>(c.seq_lens.size());
  if (static_cast<std::int64_t>(c.table.page_indptr.size()) != num_seqs + 1)
    return invalid_input(fmt::format("the table's page_indptr has {} entries for {} sequences",
                                     c.table.page_indptr.size(), num_seqs),
                         where);
  if (c.key_cache.rank() != 4) return invalid_input("key_cache must have rank 4", where);
  const std::int64_t block_size = c.block_size();

  std::map<std::string, Tensor> tensors;
  tensors["query"] = c.query;
  if (c.has_latent()) {
    // vLLM's form, [num_blocks, block_size, head_dim]: the one KV head's axis dropped.
    Tensor latent = c.key_cache;
    latent.shape = {c.key_cache.dim(0), c.key_cache.dim(1), c.key_cache.dim(3)};
    tensors[std::string(kLatentCache)] = latent;
  } else {
    tensors["key_cache"] = c.key_cache;
    tensors["value_cache"] = c.value_cache;
  }
  if (c.table.form == TableForm::Dense) {
    std::int64_t entries = 0;
    if (c.table.max_blocks_per_seq < 0 || __builtin_mul_overflow(num_seqs, c.table.max_blocks_per_seq, &entries) ||
        entries != static_cast<std::int64_t>(c.table.page_indices.size()))
      return invalid_input(fmt::format("the dense table holds {} entries but {} sequences x {} blocks need {}",
                                       c.table.page_indices.size(), num_seqs, c.table.max_blocks_per_seq, entries),
                           where);
    tensors["block_table"] = i32_tensor({num_seqs, c.table.max_blocks_per_seq}, c.table.page_indices);
    tensors["seq_lens"] = i32_tensor({num_seqs}, c.seq_lens);
  } else {
    std::vector<std::int32_t> indptr;
    std::vector<std::int32_t> last_page_len;
    for (auto v : c.table.page_indptr) {
      if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max())
        return invalid_input(fmt::format("page_indptr value {} does not fit kv_indptr's I32", v), where);
      indptr.push_back(static_cast<std::int32_t>(v));
    }
    for (std::int64_t s = 0; s < num_seqs; ++s) {
      const std::int64_t pages = c.table.page_indptr[s + 1] - c.table.page_indptr[s];
      last_page_len.push_back(static_cast<std::int32_t>(c.seq_lens[s] - (pages - 1) * block_size));
    }
    tensors["kv_indptr"] = i32_tensor({num_seqs + 1}, std::move(indptr));
    tensors["kv_indices"] = i32_tensor({static_cast<std::int64_t>(c.table.page_indices.size())}, c.table.page_indices);
    tensors["kv_last_page_len"] = i32_tensor({num_seqs}, std::move(last_page_len));
  }
  // Written when given, and also when it is not the decode default, so that
  // a case whose lengths differ from one token each is never lost.
  bool identity = static_cast<std::int64_t>(c.query_start_loc.size()) == num_seqs + 1;
  for (std::size_t s = 0; identity && s < c.query_start_loc.size(); ++s)
    identity = c.query_start_loc[s] == static_cast<std::int32_t>(s);
  if (c.query_start_loc_given || !identity)
    tensors["query_start_loc"] =
        i32_tensor({static_cast<std::int64_t>(c.query_start_loc.size())}, c.query_start_loc);
  if (c.recorded_output) tensors["output"] = *c.recorded_output;
  if (c.recorded_lse) tensors["lse"] = *c.recorded_lse;
  if (c.has_sinks()) tensors["sinks"] = Tensor::from_vector(DType::F32, {static_cast<std::int64_t>(c.sinks.size())}, c.sinks);
  if (c.has_alibi())
    tensors["alibi_slopes"] =
        Tensor::from_vector(DType::F32, {static_cast<std::int64_t>(c.alibi_slopes.size())}, c.alibi_slopes);

  if (lazy == nullptr && !c.caches_held()) {
    const LazyTensors caches = cache_chunks(c);
    return write_safetensors(path, tensors, format_params(c.params), &caches);
  }
  return write_safetensors(path, tensors, format_params(c.params), lazy);
}

LazyTensors cache_chunks(const Case& c, int threads, std::int64_t chunk_bytes) {
  // Threads: on the project's 2-core VM with other work on it, llama3-8b
  // 64 x 8192 took 7.1-7.7 s on 6 threads, 8.3-11.7 s on 2-4. The default
  // chunk, 32 MiB of keys and values (16 MiB writes), took 8.0-9.4 s where
  // 8 MiB chunks took 9.7-11.0 (docs/synthetic.md).
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::clamp(cores + 1, 6, 33);
  }
  chunk_bytes = std::min<std::int64_t>(chunk_bytes, (std::int64_t{256} << 20) / threads);
  const std::int64_t key_block = c.key_block_bytes(), value_block = c.value_block_bytes();
  const std::int64_t num_blocks = c.num_blocks();
  const std::int64_t blocks_per_chunk = std::clamp<std::int64_t>(
      chunk_bytes / std::max<std::int64_t>(1, key_block + value_block), 1, std::max<std::int64_t>(num_blocks, 1));
  LazyTensors out;
  const bool latent = c.has_latent();  // one tensor: V is a column prefix of K
  if (latent) {
    out.names = {std::string(kLatentCache)};
    out.chunk_bytes = {static_cast<std::size_t>(blocks_per_chunk * key_block)};
  } else {
    out.names = {"key_cache", "value_cache"};
    out.chunk_bytes = {static_cast<std::size_t>(blocks_per_chunk * key_block),
                       static_cast<std::size_t>(blocks_per_chunk * value_block)};
  }
  out.chunks = (num_blocks + blocks_per_chunk - 1) / blocks_per_chunk;
  out.threads = threads;
  // The case is copied (its caches are a source or shared memory, the rest
  // is small) so that the chunks outlive the caller's case.
  out.fill = [c, blocks_per_chunk, num_blocks, latent](std::int64_t chunk, std::byte* const* bytes) {
    const std::int64_t begin = chunk * blocks_per_chunk, end = std::min(num_blocks, begin + blocks_per_chunk);
    fill_cache_blocks(c, begin, end, bytes[0], latent ? nullptr : bytes[1]);
  };
  return out;
}

}  // namespace pagecheck
