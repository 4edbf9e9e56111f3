// Case files: the named tensors and metadata of a safetensors file mapped to a
// Case, and back. This layer checks structure (names, dtypes, ranks, shapes
// that agree with each other, metadata that parses); validate_case checks
// what the values mean. docs/case-format.md is the user-facing contract.
#include "pagecheck/case_file.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <string_view>

#include "pagecheck/safetensors.hpp"
#include "pagecheck/text.hpp"

namespace pagecheck {

namespace {

constexpr std::string_view kKnownTensors[] = {
    "query",     "key_cache",  "value_cache",      "block_table",     "seq_lens", "kv_indptr",
    "kv_indices", "kv_last_page_len", "query_start_loc", "output", "lse",
};
constexpr std::string_view kKnownMetadata[] = {
    "kv_layout", "causal", "scale", "sliding_window", "softcap", "k_scale", "v_scale", "description", "block_size",
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
      else if (value == "HND") p.layout = KvLayout::HND;
      else return metadata_error(key, value, "a KV layout (NHD or HND)");
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
  if (!p.description.empty()) out["description"] = p.description;
  return out;
}

// --- loading ---------------------------------------------------------------

Expected<Case> build_case(SafetensorsFile& file) {
  auto& tensors = file.tensors;
  for (const auto& [name, tensor] : tensors) {
    if (std::find(std::begin(kKnownTensors), std::end(kKnownTensors), name) == std::end(kKnownTensors))
      return invalid_input(unknown_tensor_message(name));
  }
  const auto has = [&](const char* name) { return tensors.count(name) > 0; };
  for (const char* name : {"query", "key_cache", "value_cache"})
    if (!has(name)) return invalid_input(fmt::format("required tensor '{}' is missing", name));

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
  c.query = tensors.at("query");
  c.key_cache = tensors.at("key_cache");
  c.value_cache = tensors.at("value_cache");
  const char* cache_shape = c.params.layout == KvLayout::NHD ? "[num_blocks, block_size, kv_heads, dim] (NHD)"
                                                              : "[num_blocks, kv_heads, block_size, dim] (HND)";
  const std::size_t slot_axis = c.params.layout == KvLayout::NHD ? 1 : 2;
  const std::size_t head_axis = c.params.layout == KvLayout::NHD ? 2 : 1;

  PC_TRY(check_dtype("query", c.query, {DType::F32, DType::F16, DType::BF16}));
  PC_TRY(check_rank("query", c.query, 3, "[num_tokens, q_heads, head_dim]"));
  PC_TRY(check_positive("query", c.query, 1, "q_heads"));
  PC_TRY(check_positive("query", c.query, 2, "head_dim"));
  for (const char* name : {"key_cache", "value_cache"}) {
    const Tensor& t = tensors.at(name);
    PC_TRY(check_dtype(name, t, {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2}));
    PC_TRY(check_rank(name, t, 4, cache_shape));
    PC_TRY(check_positive(name, t, slot_axis, "block_size"));
    PC_TRY(check_positive(name, t, head_axis, "kv_heads"));
    PC_TRY(check_positive(name, t, 3, "head dim"));
  }
  for (auto [axis, what] : {std::pair<std::size_t, const char*>{0, "num_blocks"},
                            {slot_axis, "block_size"},
                            {head_axis, "kv_heads"}}) {
    if (c.key_cache.dim(axis) != c.value_cache.dim(axis))
      return invalid_input(fmt::format("key_cache {} and value_cache {} disagree on {} ({} vs {}, layout {})",
                                       c.key_cache.describe(), c.value_cache.describe(), what, c.key_cache.dim(axis),
                                       c.value_cache.dim(axis), c.params.layout == KvLayout::NHD ? "NHD" : "HND"));
  }
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

Status save_case_file(const Case& c, const std::filesystem::path& path) {
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
  tensors["key_cache"] = c.key_cache;
  tensors["value_cache"] = c.value_cache;
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

  return write_safetensors(path, tensors, format_params(c.params));
}

}  // namespace pagecheck
