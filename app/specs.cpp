#include "specs.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

namespace pagecheck::app {
namespace {

std::string upper(std::string text) {
  for (char& ch : text) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return text;
}

Expected<DType> parse_float_dtype(const std::string& option, const std::string& text, bool allow_fp8) {
  std::string name = upper(text);
  if (name == "FP8" || name == "E4M3" || name == "FP8_E4M3") name = "F8_E4M3";
  if (name == "E5M2" || name == "FP8_E5M2") name = "F8_E5M2";
  if (name == "FP32" || name == "FLOAT") name = "F32";
  if (name == "FP16" || name == "HALF") name = "F16";
  const auto dtype = parse_dtype(name);
  const bool ok = dtype && (*dtype == DType::F32 || *dtype == DType::F16 || *dtype == DType::BF16 ||
                            (allow_fp8 && is_fp8(*dtype)));
  if (!ok)
    return usage_error(fmt::format("'{}' is not a supported dtype; use {}", text,
                                   allow_fp8 ? "F32, F16, BF16, F8_E4M3 or F8_E5M2" : "F32, F16 or BF16"),
                       option);
  return *dtype;
}

// Applies every geometry flag that was given to `spec`.
Status apply_flags(const CaseOptions& o, SyntheticSpec& spec) {
  if (o.seed_given) spec.seed = o.seed;
  if (o.seqs > 0) spec.num_seqs = o.seqs;
  if (o.q_heads > 0) spec.q_heads = o.q_heads;
  if (o.kv_heads > 0) spec.kv_heads = o.kv_heads;
  if (o.head_dim > 0) spec.head_dim = o.head_dim;
  if (o.v_head_dim > 0) spec.v_head_dim = o.v_head_dim;
  if (o.block_size > 0) spec.block_size = o.block_size;
  if (o.pool_factor > 0) spec.pool_factor = o.pool_factor;

  if (o.seq_len > 0) {
    spec.seq_len_dist = LengthDist::Fixed;
    spec.seq_len_min = spec.seq_len_max = o.seq_len;
  }
  if (o.seq_len_min > 0 || o.seq_len_max > 0) {
    spec.seq_len_dist = o.boundary ? LengthDist::Boundary : LengthDist::Uniform;
    if (o.seq_len_min > 0) spec.seq_len_min = o.seq_len_min;
    if (o.seq_len_max > 0) spec.seq_len_max = o.seq_len_max;
    if (o.seq_len_min <= 0) spec.seq_len_min = 1;
    if (spec.seq_len_min > spec.seq_len_max)
      return usage_error(fmt::format("--seq-len-min {} is above --seq-len-max {}", spec.seq_len_min, spec.seq_len_max));
  } else if (o.boundary) {
    spec.seq_len_dist = LengthDist::Boundary;
  }
  if (!o.seq_lens.empty()) {
    for (auto len : o.seq_lens)
      if (len < 1) return usage_error(fmt::format("every length must be at least 1, got {}", len), "--seq-lens");
    spec.seq_len_dist = LengthDist::List;
    spec.seq_len_list = o.seq_lens;
    spec.seq_len_min = *std::min_element(o.seq_lens.begin(), o.seq_lens.end());
    spec.seq_len_max = *std::max_element(o.seq_lens.begin(), o.seq_lens.end());
  }

  if (!o.mode.empty()) {
    const auto mode = parse_query_mode(o.mode);
    if (!mode) return usage_error(fmt::format("'{}' is not a mode; use decode, prefill, chunked or mixed", o.mode), "--mode");
    spec.query_mode = *mode;
    // Query lengths the mode would ignore are refused, not dropped.
    const std::string q_option = o.q_len > 0       ? fmt::format("--q-len {}", o.q_len)
                                 : o.q_len_min > 0 ? fmt::format("--q-len-min {}", o.q_len_min)
                                 : o.q_len_max > 0 ? fmt::format("--q-len-max {}", o.q_len_max)
                                                   : std::string();
    const bool one_token = o.q_len == 1 && o.q_len_min == 0 && o.q_len_max == 0;
    if (*mode == QueryMode::Decode && !q_option.empty() && !one_token)
      return usage_error(fmt::format("--mode decode has one query token per sequence, which contradicts {}; use "
                                     "--mode chunked (or mixed) for longer queries",
                                     q_option));
    if (*mode == QueryMode::Prefill && !q_option.empty())
      return usage_error(fmt::format("--mode prefill queries every token of the context (q_len = seq_len), which "
                                     "contradicts {}; use --mode chunked for new tokens over a cached context",
                                     q_option));
  }
  if (o.q_len > 0) {
    spec.q_len_dist = LengthDist::Fixed;
    spec.q_len_min = spec.q_len_max = o.q_len;
    if (o.mode.empty()) spec.query_mode = o.q_len > 1 ? QueryMode::Chunked : QueryMode::Decode;
  }
  if (o.q_len_min > 0 || o.q_len_max > 0) {
    spec.q_len_dist = LengthDist::Uniform;
    spec.q_len_min = o.q_len_min > 0 ? o.q_len_min : 1;
    if (o.q_len_max > 0) spec.q_len_max = o.q_len_max;
    if (spec.q_len_min > spec.q_len_max)
      return usage_error(fmt::format("--q-len-min {} is above --q-len-max {}", spec.q_len_min, spec.q_len_max));
    if (o.mode.empty()) spec.query_mode = QueryMode::Chunked;
  }

  if (!o.kv_dtype.empty()) {
    auto d = parse_float_dtype("--kv-dtype", o.kv_dtype, true);
    PC_TRY(d);
    spec.kv_dtype = *d;
  }
  if (!o.q_dtype.empty()) {
    auto d = parse_float_dtype("--q-dtype", o.q_dtype, false);
    PC_TRY(d);
    spec.query_dtype = *d;
  }
  if (!o.layout.empty()) {
    const std::string layout = upper(o.layout);
    if (layout == "NHD") spec.layout = KvLayout::NHD;
    else if (layout == "HND") spec.layout = KvLayout::HND;
    else return usage_error(fmt::format("'{}' is not a layout; use NHD or HND", o.layout), "--layout");
  }
  if (!o.table.empty()) {
    const std::string table = upper(o.table);
    if (table == "DENSE") spec.table_form = TableForm::Dense;
    else if (table == "CSR") spec.table_form = TableForm::Csr;
    else return usage_error(fmt::format("'{}' is not a table form; use dense or csr", o.table), "--table");
  }
  if (o.window >= 0) spec.sliding_window = o.window;
  if (o.softcap >= 0) spec.softcap = o.softcap;
  if (o.scale) spec.scale = *o.scale;
  if (o.k_scale) spec.k_scale = *o.k_scale;
  if (o.v_scale) spec.v_scale = *o.v_scale;
  if (!o.profile.empty()) {
    const auto profile = parse_value_profile(o.profile);
    if (!profile)
      return usage_error(fmt::format("'{}' is not a value profile; use gaussian, llm or large-logits", o.profile),
                         "--profile");
    spec.profile = *profile;
  }
  if (o.non_causal) spec.causal = false;
  if (o.sinks) spec.sinks = true;
  if (o.no_sinks) spec.sinks = false;
  if (o.alibi) spec.alibi = true;
  if (o.no_alibi) spec.alibi = false;
  if (o.mla) {
    if (spec.layout == KvLayout::HND)
      return usage_error("--mla is a latent cache of one KV head, stored NHD; leave --layout out or set NHD", "--mla");
    if (o.kv_heads > 1)
      return usage_error(fmt::format("--mla has one KV head (the latent), which contradicts --kv-heads {}", o.kv_heads),
                         "--mla");
    spec.latent = true;
    spec.kv_heads = 1;
    if (o.head_dim <= 0) spec.head_dim = 576;
    if (o.v_head_dim <= 0) spec.v_head_dim = 512;
    if (!o.scale) spec.scale = 1.0 / std::sqrt(192.0);
  }
  if (o.no_share_pages) spec.share_pages = false;
  if (o.no_poison) spec.poison_unused = false;
  if (!o.description.empty()) spec.description = o.description;
  return {};
}

}  // namespace

Expected<std::vector<SyntheticSpec>> build_specs(const CaseOptions& options) {
  std::vector<SyntheticSpec> specs;
  if (options.presets.empty() && !options.any_geometry_flag) {
    specs = default_suite();
    if (options.seed_given)
      for (auto& s : specs) s.seed = options.seed;
    return specs;
  }
  if (options.presets.empty()) {
    SyntheticSpec spec;
    spec.name = "custom";
    PC_TRY(apply_flags(options, spec));
    specs.push_back(std::move(spec));
  }
  for (const auto& name : options.presets) {
    auto group = preset_cases(name);
    if (!group.ok()) {
      std::string known;
      for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
      for (const auto& g : preset_groups()) known += ", " + g.name;
      return usage_error(fmt::format("unknown preset '{}'; presets: {}", name, known), "--preset");
    }
    for (auto& spec : *group) {
      PC_TRY(apply_flags(options, spec));
      // Flags on top of a preset make a variant: named so that its report
      // rows and bundle folder do not collide with the preset's own.
      spec.name += options.variant_suffix;
      specs.push_back(std::move(spec));
    }
  }
  if (!options.name.empty()) {
    if (specs.size() == 1) specs.front().name = options.name;
    else
      for (auto& s : specs) s.name = options.name + "-" + s.name;
  }
  return specs;
}

std::string describe_geometry(const Case& c) {
  std::string mode;
  std::int64_t min_q = -1, max_q = 0, min_ctx = -1, max_ctx = 0;
  bool all_prefill = true, any_decode = false;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    // In 64 bits: the case may not have validated yet, and INT32_MAX - INT32_MIN
    // overflows the int that Case::q_len subtracts in.
    const std::int64_t q = (static_cast<std::size_t>(s) + 1 < c.query_start_loc.size())
                               ? static_cast<std::int64_t>(c.query_start_loc[s + 1]) - c.query_start_loc[s]
                               : 0;
    const std::int64_t ctx = c.seq_lens[s];
    min_q = min_q < 0 ? q : std::min(min_q, q);
    max_q = std::max(max_q, q);
    min_ctx = min_ctx < 0 ? ctx : std::min(min_ctx, ctx);
    max_ctx = std::max(max_ctx, ctx);
    if (q != ctx) all_prefill = false;
    if (q == 1 && ctx > 1) any_decode = true;
  }
  // The words of --mode, from the query lengths: decode (one token per
  // sequence), prefill (every token of the context), mixed (decode sequences
  // next to longer queries), chunked (new tokens over a cached context).
  if (max_q <= 1) mode = "decode";
  else if (all_prefill) mode = "prefill";
  else if (any_decode) mode = "mixed";
  else mode = "chunked";
  if (max_q > 1) mode += min_q == max_q ? fmt::format(" (q_len {})", max_q) : fmt::format(" (q_len {}..{})", min_q, max_q);

  std::string dims = c.v_head_dim() == c.head_dim() ? fmt::format("d{}", c.head_dim())
                                                     : fmt::format("d{}/{}", c.head_dim(), c.v_head_dim());
  std::string out = fmt::format("{} seq{}, {} tokens, {}/{} heads, {}, bs{}, q {}, kv {}, {}, {}, {}, ctx {}",
                                c.num_seqs(), c.num_seqs() == 1 ? "" : "s", c.num_tokens(), c.q_heads(), c.kv_heads(),
                                dims, c.block_size(), dtype_name(c.query.dtype), dtype_name(c.key_cache.dtype),
                                c.params.layout == KvLayout::NHD ? "NHD" : "HND",
                                c.table.form == TableForm::Dense ? "dense" : "csr", mode,
                                min_ctx == max_ctx ? fmt::format("{}", max_ctx) : fmt::format("{}..{}", min_ctx, max_ctx));
  if (!c.params.causal) out += ", non-causal";
  if (c.params.sliding_window > 0) out += fmt::format(", window {}", c.params.sliding_window);
  if (c.params.softcap > 0) out += fmt::format(", softcap {:g}", c.params.softcap);
  if (c.has_sinks()) out += ", sinks";
  if (c.has_alibi()) out += ", alibi";
  if (c.has_latent()) out += fmt::format(", latent (MLA: V = the first {} columns of K)", c.v_head_dim());
  if (c.params.scale) out += fmt::format(", scale {:g}", *c.params.scale);
  if (c.params.k_scale != 1.0 || c.params.v_scale != 1.0)
    out += fmt::format(", k/v scale {:g}/{:g}", c.params.k_scale, c.params.v_scale);
  if (c.recorded_output) out += ", recorded output";
  return out;
}

std::vector<SyntheticSpec> bench_specs(const std::string& which, std::uint64_t seed, const BenchVariant& variant) {
  const DType kv_dtype = parse_dtype(variant.kv_dtype).value_or(DType::BF16);
  std::string suffix;
  if (variant.block_size != 16) suffix += fmt::format("-b{}", variant.block_size);
  if (variant.head_dim != 128) suffix += fmt::format("-d{}", variant.head_dim);
  if (kv_dtype != DType::BF16) suffix += fmt::format("-{}", dtype_name(kv_dtype));
  const auto base = [&](std::string name, std::int64_t seqs, std::int64_t ctx) {
    SyntheticSpec s;
    s.name = std::move(name) + suffix;
    s.seed = seed;
    s.num_seqs = seqs;
    s.q_heads = 32;
    s.kv_heads = 8;
    s.head_dim = variant.head_dim;
    s.block_size = variant.block_size;
    s.query_dtype = DType::BF16;
    s.kv_dtype = kv_dtype;
    s.seq_len_dist = LengthDist::Fixed;
    s.seq_len_min = s.seq_len_max = ctx;
    // Shuffled pages, no sharing (the byte model then counts what each
    // sequence really reads); the smallest pool the generator accepts (3x).
    s.pool_factor = 3;
    s.share_pages = false;
    s.profile = ValueProfile::Gaussian;
    return s;
  };
  std::vector<SyntheticSpec> specs;
  if (which == "decode" || which == "all") {
    for (auto [seqs, ctx] : {std::pair<std::int64_t, std::int64_t>{64, 4096}, {256, 1024}, {8, 8192}, {1, 32768}}) {
      auto s = base(fmt::format("decode-{}x{}", seqs, ctx), seqs, ctx);
      s.query_mode = QueryMode::Decode;
      s.description = "benchmark: paged decode";
      specs.push_back(std::move(s));
    }
  }
  if (which == "prefill" || which == "all") {
    for (auto [seqs, ctx] : {std::pair<std::int64_t, std::int64_t>{8, 2048}, {1, 8192}, {16, 512}}) {
      auto s = base(fmt::format("prefill-{}x{}", seqs, ctx), seqs, ctx);
      s.query_mode = QueryMode::Prefill;
      s.description = "benchmark: causal prompt prefill";
      specs.push_back(std::move(s));
    }
    auto s = base("chunked-4x512+4096", 4, 4096 + 512);
    s.query_mode = QueryMode::Chunked;
    s.q_len_dist = LengthDist::Fixed;
    s.q_len_min = s.q_len_max = 512;
    s.description = "benchmark: chunked prefill, 512 new tokens over 4096 cached";
    specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace pagecheck::app
