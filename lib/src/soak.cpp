// Random cases for `pagecheck soak`, and failure signatures.
//
// The draw: every axis the generator has, each value with a fixed weight, and
// lengths drawn as explicit lists so that the edges can be weighted: about a
// third of the lengths sit at a page edge (k * block + {-1, 0, 1}), a sixth at
// a split-partition edge (of 256, 512, 1024 or the case's own explicit
// partition), a sixth at a prefill tile edge (64 and 128), the rest anywhere
// in [1, max]. Integers come from mt19937_64 by rejection, as in
// synthetic.cpp, so a draw is the same on every platform.
#include "pagecheck/soak.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

namespace pagecheck {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class Draw {
 public:
  Draw(std::uint64_t seed, std::uint64_t index) : engine_(mix(mix(seed) ^ mix(index + 0x5eed))) {}
  std::uint64_t bits() { return engine_(); }
  // Uniform in [lo, hi].
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    const std::uint64_t range = static_cast<std::uint64_t>(hi - lo) + 1;
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % range;
    std::uint64_t x;
    do x = engine_();
    while (x >= limit);
    return lo + static_cast<std::int64_t>(x % range);
  }
  bool chance(int percent) { return between(0, 99) < percent; }
  template <typename T>
  T pick(const std::vector<T>& values) {
    return values[static_cast<std::size_t>(between(0, static_cast<std::int64_t>(values.size()) - 1))];
  }
  // Uniform in [lo, hi) on a log scale.
  double log_uniform(double lo, double hi) {
    const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    return std::exp(std::log(lo) + u * (std::log(hi) - std::log(lo)));
  }

 private:
  std::mt19937_64 engine_;
};

// A length in [1, max] with extra weight at the page, partition and tile edges.
std::int64_t draw_length(Draw& d, std::int64_t max, std::int64_t block, std::int64_t partition) {
  const auto near = [&](std::int64_t unit) {
    const std::int64_t multiples = std::max<std::int64_t>(1, max / std::max<std::int64_t>(unit, 1));
    return unit * d.between(1, multiples) + d.between(-1, 1);
  };
  std::int64_t len = 0;
  const auto kind = d.between(0, 5);
  if (kind <= 1) len = near(block);
  else if (kind == 2) len = near(d.chance(50) ? partition : d.pick<std::int64_t>({256, 512, 1024}));
  else if (kind == 3) len = near(d.pick<std::int64_t>({64, 128}));
  else len = d.chance(30) ? d.between(1, std::min<std::int64_t>(max, 40)) : d.between(1, max);
  return std::clamp<std::int64_t>(len, 1, max);
}

double keys_seen(std::int64_t seq_len, std::int64_t q_len, std::int64_t window) {
  // Each query token sees at most seq_len keys, at most the window.
  return static_cast<double>(q_len) * static_cast<double>(window > 0 ? std::min(window, seq_len) : seq_len);
}

}  // namespace

double soak_reference_work(const SyntheticSpec& spec) {
  const std::int64_t dv = spec.v_head_dim > 0 ? spec.v_head_dim : spec.head_dim;
  double work = 0;
  for (std::int64_t s = 0; s < spec.num_seqs; ++s) {
    const std::int64_t len = spec.seq_len_list[static_cast<std::size_t>(s) % spec.seq_len_list.size()];
    std::int64_t q = 1;
    const bool chunked = spec.query_mode == QueryMode::Chunked || (spec.query_mode == QueryMode::Mixed && s % 2 == 1);
    if (spec.query_mode == QueryMode::Prefill) q = len;
    else if (chunked) q = std::min(len, spec.q_len_list[static_cast<std::size_t>(s) % spec.q_len_list.size()]);
    work += keys_seen(len, q, spec.sliding_window);
  }
  return work * static_cast<double>(spec.q_heads) * static_cast<double>(spec.head_dim + dv);
}

SoakDraw draw_soak_case(std::uint64_t seed, std::uint64_t index, const SoakLimits& limits) {
  Draw d(seed, index);
  SoakDraw out;
  SyntheticSpec& s = out.spec;
  s.name = fmt::format("soak-{}-{}", seed, index);
  s.seed = mix(seed * 0x100000001b3ULL ^ index) & 0x7fffffffffffffffULL;
  s.description = fmt::format("pagecheck soak --seed {} --case {}", seed, index);

  s.query_dtype = d.pick<DType>({DType::F32, DType::F16, DType::BF16});
  s.kv_dtype = d.pick<DType>({DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2});
  // Non-unit scales for every dtype, so that a dropped scale shows.
  s.k_scale = d.chance(50) ? d.log_uniform(0.25, 0.9) : d.log_uniform(1.1, 4.0);
  s.v_scale = d.chance(50) ? d.log_uniform(0.25, 0.9) : d.log_uniform(1.1, 4.0);
  s.layout = d.chance(50) ? KvLayout::NHD : KvLayout::HND;
  s.table_form = d.chance(50) ? TableForm::Dense : TableForm::Csr;
  // Block sizes: the usual powers of two half the time, else anything 1..512.
  s.block_size = d.chance(50) ? d.pick<std::int64_t>({1, 8, 16, 32, 64, 128, 256, 512}) : d.between(1, 512);

  // Head dims: the built ones mostly (64, 128, 256, 192/128), now and then
  // one no GPU path builds (n/a there, the reference still runs).
  const auto dims = d.between(0, 9);
  if (dims <= 2) s.head_dim = 64;
  else if (dims <= 5) s.head_dim = 128;
  else if (dims <= 7) s.head_dim = 256;
  else if (dims == 8) s.head_dim = 192, s.v_head_dim = 128;
  else s.head_dim = d.pick<std::int64_t>({16, 32, 80, 96, 112, 120});
  // GQA: MHA, groups of 2..8 (odd ones too), MQA.
  const std::int64_t group = d.pick<std::int64_t>({1, 1, 2, 3, 4, 4, 5, 7, 8, 8});
  s.kv_heads = d.chance(20) ? 1 : d.between(1, 4);
  s.q_heads = s.kv_heads * group;

  s.query_mode = d.pick<QueryMode>({QueryMode::Decode, QueryMode::Decode, QueryMode::Prefill, QueryMode::Chunked,
                                    QueryMode::Mixed});
  s.causal = !d.chance(20);
  s.profile = d.pick<ValueProfile>({ValueProfile::Gaussian, ValueProfile::LlmLike, ValueProfile::LargeLogits});
  s.softcap = d.chance(30) ? d.log_uniform(2.0, 50.0) : 0.0;
  if (d.chance(25)) s.scale = d.log_uniform(0.02, 0.3);
  s.share_pages = d.chance(50);
  s.poison_unused = true;

  // A random explicit split plan for a third of the cases: any partition
  // (at most 512 partitions of the longest context), any threshold.
  const bool explicit_plan = d.chance(33);
  std::int64_t partition = d.chance(50) ? d.pick<std::int64_t>({16, 32, 64, 128, 256, 512, 1024}) : d.between(1, 1100);

  // Lengths: drawn, then drawn again with half the maximum while the
  // reference's work is over the budget.
  s.num_seqs = d.chance(30) ? 1 : d.between(1, limits.max_seqs);
  const bool long_contexts = d.chance(10);
  std::int64_t max_len = long_contexts ? limits.max_seq_len : std::min<std::int64_t>(limits.max_seq_len, 1100);
  const std::int64_t window_draw = d.between(0, 9);  // 0-5 none, 6-7 small, 8 edge, 9 anywhere
  for (;;) {
    s.seq_len_dist = LengthDist::List;
    s.seq_len_list.clear();
    s.q_len_list.clear();
    for (std::int64_t i = 0; i < s.num_seqs; ++i) s.seq_len_list.push_back(draw_length(d, max_len, s.block_size, partition));
    if (s.query_mode == QueryMode::Chunked || s.query_mode == QueryMode::Mixed) {
      s.q_len_dist = LengthDist::List;
      for (std::int64_t i = 0; i < s.num_seqs; ++i) {
        const std::int64_t len = s.seq_len_list[static_cast<std::size_t>(i)];
        s.q_len_list.push_back(d.chance(30) ? d.between(1, std::min<std::int64_t>(len, 4))
                                            : draw_length(d, len, s.block_size, 128));
      }
      s.q_len_min = 1;
      s.q_len_max = *std::max_element(s.q_len_list.begin(), s.q_len_list.end());
    }
    s.seq_len_min = *std::min_element(s.seq_len_list.begin(), s.seq_len_list.end());
    s.seq_len_max = *std::max_element(s.seq_len_list.begin(), s.seq_len_list.end());
    if (window_draw <= 5) s.sliding_window = 0;
    else if (window_draw <= 7) s.sliding_window = d.between(1, 8);
    else if (window_draw == 8) s.sliding_window = s.seq_len_list.front();  // a sequence's length: the next drops key 0
    else s.sliding_window = d.between(1, s.seq_len_max);
    if (soak_reference_work(s) <= limits.max_reference_work || (max_len == 1 && s.num_seqs == 1)) break;
    if (max_len > 1) max_len = std::max<std::int64_t>(1, max_len / 2);
    else s.num_seqs = std::max<std::int64_t>(1, s.num_seqs / 2);
  }

  if (explicit_plan) {
    partition = std::max(partition, (s.seq_len_max + 511) / 512);
    const auto threshold_draw = d.between(0, 2);
    const std::int64_t threshold = threshold_draw == 0 ? 0 : threshold_draw == 1 ? partition : d.between(0, s.seq_len_max);
    out.plan = Plan{PlanKind::SplitKv, partition, threshold, PlanSource::Explicit};
  }

  // The pool: the pages needed three times over mostly, larger now and
  // then, within max_pool_elements; past 2^31 elements 1 case in
  // kHugePoolEvery where the limits allow.
  std::int64_t pages = 0;
  for (auto len : s.seq_len_list) pages += (len + s.block_size - 1) / s.block_size;
  const double page_elements = static_cast<double>(s.block_size * s.kv_heads * std::max(s.head_dim, s.v_head_dim));
  // Huge only with pages of 2048 elements or more, so that the pool stays
  // within about a million page ids (the generator shuffles them all).
  const bool huge = limits.huge_pools && d.between(0, static_cast<std::int64_t>(kHugePoolEvery) - 1) == 0 &&
                    page_elements >= 2048;
  s.pool_factor = d.chance(60) ? 3 : d.between(4, 40);
  if (huge) {
    // Every page its own (no prefix sharing), so that pages is exact.
    s.share_pages = false;
    s.pool_factor = std::max<std::int64_t>(
        3, static_cast<std::int64_t>(std::ceil(static_cast<double>(kHugePoolElements) / (page_elements * static_cast<double>(pages)))));
    out.huge_pool = true;
  } else {
    while (s.pool_factor > 3 && page_elements * static_cast<double>(pages * s.pool_factor) > static_cast<double>(limits.max_pool_elements))
      s.pool_factor = std::max<std::int64_t>(3, s.pool_factor / 2);
  }
  // Features drawn last, so that the draws above (and the cases of a seed
  // drawn before them) stay as they were.
  s.sinks = d.chance(25);
  s.alibi = d.chance(20);
  // A latent (MLA) cache in one case of ten: DeepSeek's 576/512 (or a
  // smaller latent now and then), one KV head, 16-128 query heads, NHD, none
  // of the other logit features; lengths halved while over the budget.
  if (d.chance(10)) {
    s.latent = true;
    s.head_dim = d.chance(75) ? 576 : d.pick<std::int64_t>({96, 160, 320});
    s.v_head_dim = s.head_dim == 576 ? 512 : s.head_dim - d.pick<std::int64_t>({16, 32, 64});
    s.kv_heads = 1;
    s.q_heads = d.pick<std::int64_t>({16, 16, 32, 64, 128});
    s.layout = KvLayout::NHD;
    s.sliding_window = 0;
    s.softcap = 0;
    s.sinks = s.alibi = false;
    s.causal = true;
    if (s.query_mode == QueryMode::Prefill) s.query_mode = QueryMode::Mixed;
    if (s.query_mode != QueryMode::Decode && s.q_len_list.empty()) {
      s.q_len_dist = LengthDist::List;
      for (auto len : s.seq_len_list) s.q_len_list.push_back(std::max<std::int64_t>(1, len / 4));
      s.q_len_min = 1;
      s.q_len_max = *std::max_element(s.q_len_list.begin(), s.q_len_list.end());
    }
    s.scale = 1.0 / std::sqrt(192.0);
    while (soak_reference_work(s) > limits.max_reference_work && s.seq_len_max > 1) {
      for (auto& len : s.seq_len_list) len = std::max<std::int64_t>(1, len / 2);
      for (auto& q : s.q_len_list) q = std::max<std::int64_t>(1, q / 2);
      s.seq_len_min = *std::min_element(s.seq_len_list.begin(), s.seq_len_list.end());
      s.seq_len_max = *std::max_element(s.seq_len_list.begin(), s.seq_len_list.end());
      if (!s.q_len_list.empty()) s.q_len_max = *std::max_element(s.q_len_list.begin(), s.q_len_list.end());
    }
    out.huge_pool = false;
    std::int64_t latent_pages = 0;
    for (auto len : s.seq_len_list) latent_pages += (len + s.block_size - 1) / s.block_size;
    const double row_elements = static_cast<double>(s.block_size * s.head_dim);
    s.pool_factor = std::min<std::int64_t>(s.pool_factor, 8);
    while (s.pool_factor > 3 &&
           row_elements * static_cast<double>(latent_pages * s.pool_factor) > static_cast<double>(limits.max_pool_elements))
      s.pool_factor = std::max<std::int64_t>(3, s.pool_factor / 2);
  }
  return out;
}

std::string failure_signature(const std::string& path, const std::string& kind, const Case& reduced) {
  const std::int64_t group = reduced.q_heads() / std::max<std::int64_t>(1, reduced.kv_heads());
  const std::int64_t block = reduced.block_size();
  const bool power_of_two = (block & (block - 1)) == 0;
  std::string mode = "decode";
  if (!reduced.is_decode()) {
    bool prefill = true, any_decode = false;
    for (std::int64_t q = 0; q < reduced.num_seqs(); ++q) {
      prefill = prefill && reduced.q_len(q) == reduced.seq_lens[q];
      any_decode = any_decode || reduced.q_len(q) == 1;
    }
    mode = prefill ? "prefill" : any_decode ? "mixed" : "chunked";
  }
  return fmt::format("{} | {} | q={} kv={} {} {} block={} d={}/{} gqa={} window={} softcap={} sinks={} alibi={} {} {}", path, kind,
                     dtype_name(reduced.query.dtype), dtype_name(reduced.key_cache.dtype),
                     reduced.params.layout == KvLayout::NHD ? "NHD" : "HND",
                     reduced.table.form == TableForm::Dense ? "dense" : "csr",
                     block == 1 ? std::string("1") : power_of_two ? std::string("pow2") : std::string("other"),
                     reduced.key_head_dim(), reduced.v_head_dim(),
                     group == 1 ? std::string("1") : reduced.kv_heads() == 1 ? std::string("mqa") : std::to_string(group),
                     reduced.params.sliding_window > 0 ? "on" : "off", reduced.params.softcap > 0 ? "on" : "off",
                     reduced.has_sinks() ? "on" : "off", reduced.has_alibi() ? "on" : "off", mode,
                     reduced.params.causal ? "causal" : "non-causal");
}

}  // namespace pagecheck
