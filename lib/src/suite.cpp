// The default suite: pairwise covering arrays over the feature axes, one per
// GPU path family, built greedily (AETG style) from a fixed seed, plus a few
// hand-written cases. suite.hpp says what the axes and targets are;
// docs/validation.md what the suite covers and what it cannot catch.
#include "pagecheck/suite.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace pagecheck {
namespace {

constexpr int kMaxValues = 16;  // values per axis, at most (pair keys are packed in base 16)

// Axis value indices, named where the builder needs them.
namespace value {
constexpr int kF32 = 0, kF16 = 1, kBf16 = 2, kE4m3 = 3, kE5m2 = 4;  // KvDtype (QueryDtype: the first three)
constexpr int kNhd = 0, kHnd = 1;
constexpr int kDense = 0, kCsr = 1;
constexpr int kHead64 = 0, kHead128 = 1, kHead256 = 2, kHead192 = 3;  // then 32, 80, 96, 112, 120
constexpr int kHeadMla = 9;                                          // 576/512: a latent (MLA) cache
constexpr int kGqa1 = 0, kGqa4 = 1, kGqa8 = 2, kMqa = 3;
constexpr int kWindowNone = 0, kWindowSmall = 1, kWindowEdge = 2;
constexpr int kGaussian = 0, kLlm = 1, kLargeLogits = 2;
constexpr int kPageEdge = 0, kPartitionEdge = 1, kRagged = 2;
constexpr int kDecode = 0, kPrefill = 1, kChunked = 2, kMixed = 3;
constexpr int kCausal = 0, kNonCausal = 1;
constexpr int kNoSinks = 0, kSinks = 1;
constexpr int kNoAlibi = 0, kAlibi = 1;
}  // namespace value

constexpr std::array<std::int64_t, 5> kBlockSizes = {1, 7, 16, 32, 256};
// The head sizes FlashAttention builds beyond the built-in kernels' (Phi-3's
// 96; 80, 112 and 120 ship too; 32 in small models): the head_dim axis's
// values after 192/128.
constexpr std::array<std::int64_t, 5> kOtherHeadDims = {32, 80, 96, 112, 120};
// MLA's logit scale: 1/sqrt(192), the query-key head dim before absorption.
const double kMlaScale = 1.0 / std::sqrt(192.0);
constexpr std::array<DType, 5> kKvDtypes = {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2};
constexpr std::int64_t kSmallWindow = 5;
// Query lengths of chunked sequences: around the 32-token (128 rows at GQA 4)
// query tile, capped at the sequence's length.
const std::vector<std::int64_t> kChunkLengths = {31, 32, 33, 65};
// The covering array's seed; changing it changes every case of the suite.
constexpr std::uint64_t kCoveringSeed = 20261203;
constexpr std::uint64_t kFirstCaseSeed = 2000;

int axis_index(SuiteAxis axis) { return static_cast<int>(axis); }

const std::array<std::vector<std::string>, kSuiteAxes>& all_values() {
  static const std::array<std::vector<std::string>, kSuiteAxes> values = {{
      {"F32", "F16", "BF16"},
      {"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"},
      {"NHD", "HND"},
      {"dense", "csr"},
      {"1", "7", "16", "32", "256"},
      {"64", "128", "256", "192/128", "32", "80", "96", "112", "120", "576/512"},
      {"1", "4", "8", "mqa"},
      {"none", "small", "edge"},
      {"none", "on"},
      {"gaussian", "llm", "large-logits"},
      {"page-edge", "partition-edge", "ragged"},
      {"decode", "prefill", "chunked", "mixed"},
      {"causal", "non-causal"},
      {"none", "on"},
      {"none", "on"},
  }};
  return values;
}

// splitmix64: a small, fully specified generator (the covering array must be
// the same on every platform).
class SplitMix {
 public:
  explicit SplitMix(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }

 private:
  std::uint64_t state_;
};

int pair_key(int a, int va, int b, int vb) { return ((a * kMaxValues + va) * kSuiteAxes + b) * kMaxValues + vb; }
constexpr int kPairKeys = kSuiteAxes * kMaxValues * kSuiteAxes * kMaxValues;

// The pairs of `target` still uncovered by `rows`, as a key-indexed bitmap.
std::vector<bool> uncovered_map(const SuiteTarget& target, const std::vector<SuiteRow>& rows, int& count) {
  std::vector<bool> open(kPairKeys, false);
  count = 0;
  for (int a = 0; a < kSuiteAxes; ++a)
    for (int b = a + 1; b < kSuiteAxes; ++b)
      for (int va : target.allowed[a])
        for (int vb : target.allowed[b]) {
          open[pair_key(a, va, b, vb)] = true;
          ++count;
        }
  for (const auto& row : rows) {
    if (!target.accepts(row)) continue;
    for (int a = 0; a < kSuiteAxes; ++a)
      for (int b = a + 1; b < kSuiteAxes; ++b) {
        const int key = pair_key(a, row[a], b, row[b]);
        if (open[key]) {
          open[key] = false;
          --count;
        }
      }
  }
  return open;
}

// Greedy rows for `target` until every pair it accepts is covered by some
// row in `rows` it accepts (rows made for other targets count too).
void cover_target(const SuiteTarget& target, std::vector<SuiteRow>& rows, SplitMix& rng) {
  int open_count = 0;
  std::vector<bool> open = uncovered_map(target, rows, open_count);
  constexpr int kCandidates = 24;
  while (open_count > 0) {
    // The first open pair, in a fixed order, seeds every candidate.
    int fa = -1, fva = -1, fb = -1, fvb = -1;
    for (int a = 0; a < kSuiteAxes && fa < 0; ++a)
      for (int b = a + 1; b < kSuiteAxes && fa < 0; ++b)
        for (int va : target.allowed[a])
          for (int vb : target.allowed[b])
            if (fa < 0 && open[pair_key(a, va, b, vb)]) fa = a, fva = va, fb = b, fvb = vb;
    SuiteRow best{};
    int best_gain = -1;
    for (int candidate = 0; candidate < kCandidates; ++candidate) {
      SuiteRow row{};
      std::array<bool, kSuiteAxes> set{};
      row[fa] = fva, row[fb] = fvb;
      set[fa] = set[fb] = true;
      std::array<int, kSuiteAxes> order{};
      std::iota(order.begin(), order.end(), 0);
      for (int i = kSuiteAxes - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
      for (int x : order) {
        if (set[x]) continue;
        int chosen = -1, chosen_gain = -1, ties = 0;
        for (int v : target.allowed[x]) {
          int gain = 0;
          for (int y = 0; y < kSuiteAxes; ++y)
            if (set[y]) gain += open[x < y ? pair_key(x, v, y, row[y]) : pair_key(y, row[y], x, v)];
          if (gain > chosen_gain) {
            chosen = v, chosen_gain = gain, ties = 1;
          } else if (gain == chosen_gain && rng.below(++ties) == 0) {
            chosen = v;
          }
        }
        row[x] = chosen;
        set[x] = true;
      }
      int gain = 0;
      for (int a = 0; a < kSuiteAxes; ++a)
        for (int b = a + 1; b < kSuiteAxes; ++b) gain += open[pair_key(a, row[a], b, row[b])];
      if (gain > best_gain) best = row, best_gain = gain;
    }
    rows.push_back(best);
    for (int a = 0; a < kSuiteAxes; ++a)
      for (int b = a + 1; b < kSuiteAxes; ++b) {
        const int key = pair_key(a, best[a], b, best[b]);
        if (open[key]) {
          open[key] = false;
          --open_count;
        }
      }
  }
}

std::vector<int> all_of_axis(int axis) {
  std::vector<int> v(all_values()[axis].size());
  std::iota(v.begin(), v.end(), 0);
  return v;
}

SuiteTarget make_target(std::string name, std::vector<std::string> paths, std::string note) {
  SuiteTarget t;
  t.name = std::move(name);
  t.paths = std::move(paths);
  t.note = std::move(note);
  for (int a = 0; a < kSuiteAxes; ++a) t.allowed[a] = all_of_axis(a);
  return t;
}

bool is_prefill_mode(const SuiteRow& row) { return row[axis_index(SuiteAxis::Mode)] == value::kPrefill; }

// The window that sits at an edge of the row's lengths: one of them equals
// it, and the next one drops exactly its first key (block size 1: every
// token sees itself only).
std::int64_t edge_window(const SuiteRow& row) {
  const std::int64_t block = kBlockSizes[row[axis_index(SuiteAxis::BlockSize)]];
  switch (row[axis_index(SuiteAxis::Lengths)]) {
    case value::kPageEdge: return block;
    case value::kPartitionEdge: return is_prefill_mode(row) ? 128 : 256;
    default: return is_prefill_mode(row) ? 17 : 37;
  }
}

// k_scale / v_scale that are never 1 and, for fp8, keep the profile's
// largest stored values inside the format (E4M3 saturates at 448).
std::pair<double, double> kv_scales(int kv, int profile) {
  if (kv != value::kE4m3 && kv != value::kE5m2) return {0.6, 1.7};
  switch (profile) {
    case value::kLlm: return {0.2, 0.02};           // outlier channels ~15 x 4.5 sigma
    case value::kLargeLogits: return {0.25, 0.02};  // keys ~10 x 4.5 sigma
    default: return {0.05, 0.02};
  }
}

double softcap_for(int profile) {
  switch (profile) {
    case value::kLlm: return 8.0;
    case value::kLargeLogits: return 30.0;
    default: return 4.0;  // logits ~N(0, 1): tanh bends them visibly
  }
}

SyntheticSpec spec_of(const SuiteRow& row, std::string name, std::uint64_t seed) {
  const auto at = [&](SuiteAxis axis) { return row[axis_index(axis)]; };
  SyntheticSpec s;
  s.name = std::move(name);
  s.seed = seed;
  s.query_dtype = kKvDtypes[at(SuiteAxis::QueryDtype)];  // the first three are the query dtypes
  s.kv_dtype = kKvDtypes[at(SuiteAxis::KvDtype)];
  s.layout = at(SuiteAxis::Layout) == value::kNhd ? KvLayout::NHD : KvLayout::HND;
  s.table_form = at(SuiteAxis::Table) == value::kDense ? TableForm::Dense : TableForm::Csr;
  s.block_size = kBlockSizes[at(SuiteAxis::BlockSize)];
  switch (at(SuiteAxis::HeadDim)) {
    case value::kHead64: s.head_dim = 64; break;
    case value::kHead128: s.head_dim = 128; break;
    case value::kHead256: s.head_dim = 256; break;
    case value::kHead192: s.head_dim = 192, s.v_head_dim = 128; break;
    case value::kHeadMla: break;  // below, after the heads
    default: s.head_dim = kOtherHeadDims[at(SuiteAxis::HeadDim) - value::kHead192 - 1]; break;
  }
  switch (at(SuiteAxis::Gqa)) {
    case value::kGqa1: s.q_heads = 2, s.kv_heads = 2; break;
    case value::kGqa4: s.q_heads = 8, s.kv_heads = 2; break;
    case value::kGqa8: s.q_heads = 16, s.kv_heads = 2; break;
    default: s.q_heads = 7, s.kv_heads = 1; break;  // MQA with an odd group (Qwen-like 7)
  }
  if (at(SuiteAxis::HeadDim) == value::kHeadMla) {
    // DeepSeek-V3's latent cache: 512 latent + 64 rope columns, one KV head,
    // 16 query heads (the fewest MLA models use; the mla family fixes gqa to
    // mqa), the scale of its 192-wide query-key head before absorption.
    s.head_dim = 576, s.v_head_dim = 512;
    s.q_heads = 16, s.kv_heads = 1;
    s.latent = true;
    s.scale = kMlaScale;
  }
  const int profile = at(SuiteAxis::Profile);
  s.profile = profile == value::kLlm ? ValueProfile::LlmLike
                                     : (profile == value::kLargeLogits ? ValueProfile::LargeLogits : ValueProfile::Gaussian);
  std::tie(s.k_scale, s.v_scale) = kv_scales(at(SuiteAxis::KvDtype), profile);
  if (at(SuiteAxis::Softcap) == 1) s.softcap = softcap_for(profile);
  if (at(SuiteAxis::Window) == value::kWindowSmall) s.sliding_window = kSmallWindow;
  if (at(SuiteAxis::Window) == value::kWindowEdge) s.sliding_window = edge_window(row);
  s.causal = at(SuiteAxis::Causal) == value::kCausal;
  s.sinks = at(SuiteAxis::Sinks) == value::kSinks;
  s.alibi = at(SuiteAxis::Alibi) == value::kAlibi;

  const SuiteLengths lengths = suite_lengths(row);
  s.num_seqs = static_cast<std::int64_t>(lengths.seq_lens.size());
  s.seq_len_dist = LengthDist::List;
  s.seq_len_list = lengths.seq_lens;
  switch (at(SuiteAxis::Mode)) {
    case value::kDecode: s.query_mode = QueryMode::Decode; break;
    case value::kPrefill: s.query_mode = QueryMode::Prefill; break;
    case value::kChunked: s.query_mode = QueryMode::Chunked; break;
    default: s.query_mode = QueryMode::Mixed; break;
  }
  if (s.query_mode == QueryMode::Chunked || s.query_mode == QueryMode::Mixed) {
    s.q_len_dist = LengthDist::List;
    s.q_len_list = kChunkLengths;
  }
  s.description = "covering: " + describe_suite_row(row);
  return s;
}

// The row a hand-written case is labelled with before its axes are read off.
SuiteRow base_row() {
  SuiteRow row{};
  row[axis_index(SuiteAxis::QueryDtype)] = value::kBf16;
  row[axis_index(SuiteAxis::KvDtype)] = value::kBf16;
  row[axis_index(SuiteAxis::BlockSize)] = 2;  // 16
  row[axis_index(SuiteAxis::Gqa)] = value::kGqa4;
  row[axis_index(SuiteAxis::Lengths)] = value::kRagged;
  return row;
}

// Hand-written cases the covering rows do not make: long contexts over many
// split partitions, sequences of one token, boundary prompts, prefix-shared
// pages, a wide pool, an explicit scale.
std::vector<SyntheticSpec> fixed_specs(std::uint64_t& next_seed) {
  std::vector<SyntheticSpec> out;
  const auto base = [&](std::string name, std::string description) {
    SyntheticSpec s;
    s.name = std::move(name);
    s.seed = next_seed++;
    s.num_seqs = 4;
    s.q_heads = 8;
    s.kv_heads = 2;
    s.head_dim = 64;
    s.seq_len_dist = LengthDist::Uniform;
    s.seq_len_min = 1;
    s.seq_len_max = 100;
    s.description = std::move(description);
    return s;
  };
  const auto lengths = [](SyntheticSpec& s, std::vector<std::int64_t> list) {
    s.seq_len_dist = LengthDist::List;
    s.num_seqs = static_cast<std::int64_t>(list.size());
    s.seq_len_list = std::move(list);
  };
  { auto s = base("len-1", "every sequence holds one token"); s.seq_len_dist = LengthDist::Fixed; s.seq_len_max = 1; out.push_back(s); }
  { auto s = base("long-8k", "long contexts: 8k and 8k-1 tokens, decode over many split partitions"); s.head_dim = 128;
    lengths(s, {8192, 8191}); out.push_back(s); }
  { auto s = base("len-partition-1024", "lengths around 1024-token partitions (the split path's partition under a direct plan)");
    s.head_dim = 128; lengths(s, {1023, 1024, 1025, 2049}); out.push_back(s); }
  { auto s = base("len-boundary-prefill", "boundary lengths, whole prompts"); s.seq_len_dist = LengthDist::Boundary;
    s.seq_len_min = 1; s.seq_len_max = 600; s.num_seqs = 11; s.query_mode = QueryMode::Prefill; out.push_back(s); }
  { auto s = base("mixed-prefill-decode", "decode and chunked-prefill sequences of random lengths in one batch");
    s.num_seqs = 6; s.seq_len_min = 20; s.seq_len_max = 300; s.head_dim = 128; s.query_mode = QueryMode::Mixed;
    s.q_len_dist = LengthDist::Uniform; s.q_len_min = 2; s.q_len_max = 64; out.push_back(s); }
  { auto s = base("shared-prefix-pages", "odd sequences share their first pages with the one before"); s.num_seqs = 6;
    s.seq_len_min = 33; s.seq_len_max = 120; s.share_pages = true; s.query_mode = QueryMode::Mixed;
    s.q_len_dist = LengthDist::Uniform; s.q_len_min = 1; s.q_len_max = 8; out.push_back(s); }
  { auto s = base("pool-8x", "a pool 8 times the pages needed"); s.pool_factor = 8; out.push_back(s); }
  { auto s = base("explicit-scale", "scale 0.3 instead of 1/sqrt(d)"); s.scale = 0.3; out.push_back(s); }
  return out;
}

int index_of(const std::vector<std::string>& values, const std::string& v) {
  const auto it = std::find(values.begin(), values.end(), v);
  return it == values.end() ? -1 : static_cast<int>(it - values.begin());
}

}  // namespace

std::string_view suite_axis_name(SuiteAxis axis) {
  static constexpr std::array<std::string_view, kSuiteAxes> names = {
      "q_dtype", "kv_dtype", "layout", "table", "block_size", "head_dim", "gqa",
      "window",  "softcap",  "profile", "lengths", "mode", "causal", "sinks", "alibi"};
  return names[axis_index(axis)];
}

const std::vector<std::string>& suite_axis_values(SuiteAxis axis) { return all_values()[axis_index(axis)]; }

bool SuiteTarget::accepts(const SuiteRow& row) const {
  for (int a = 0; a < kSuiteAxes; ++a)
    if (std::find(allowed[a].begin(), allowed[a].end(), row[a]) == allowed[a].end()) return false;
  return true;
}

const std::vector<SuiteTarget>& suite_targets() {
  static const std::vector<SuiteTarget> targets = [] {
    std::vector<SuiteTarget> t;
    // In generation order: the most constrained first, so that their rows
    // also cover pairs of the wider targets (but for decode-sinks-alibi,
    // prefill-sinks, fmha-sinks and prefill-alibi, made last: see there).
    // The built-in families take the features that issue 23 added (sinks,
    // ALiBi, head dims 32/80/96/112/120) only once their kernels do
    // (features.hpp: decode and prefill take sinks, ALiBi and those head
    // dims, fmha sinks: the six families made last); the "kernel" family
    // takes every value.
    const auto builtin = [](SuiteTarget target) {
      // The head dims the built-in kernels are built for (the others are n/a
      // there: "head_dim 96/96 is not built").
      auto& dims = target.allowed[axis_index(SuiteAxis::HeadDim)];
      dims.erase(std::remove_if(dims.begin(), dims.end(), [](int v) { return v > value::kHead192; }), dims.end());
      target.allowed[axis_index(SuiteAxis::Sinks)] = {value::kNoSinks};
      target.allowed[axis_index(SuiteAxis::Alibi)] = {value::kNoAlibi};
      return target;
    };
    // A built-in family with the sinks axis (and ALiBi's) open again.
    const auto with_logit_features = [](SuiteTarget target, bool alibi) {
      target.allowed[axis_index(SuiteAxis::Sinks)] = {value::kNoSinks, value::kSinks};
      if (alibi) target.allowed[axis_index(SuiteAxis::Alibi)] = {value::kNoAlibi, value::kAlibi};
      return target;
    };
    {
      auto fmha = make_target("fmha", {"fmha"},
                              "gather + FMHA: BF16 K/V, head dim 128 (the wgmma kernel on compute capability 9.0)");
      fmha.allowed[axis_index(SuiteAxis::KvDtype)] = {value::kBf16};
      fmha.allowed[axis_index(SuiteAxis::HeadDim)] = {value::kHead128};
      t.push_back(builtin(std::move(fmha)));
    }
    {
      auto wgmma = make_target("prefill-wgmma", {"prefill"},
                               "the prefill path's wgmma kernel (compute capability 9.0): head dim 128, 16-bit or fp8 K/V");
      wgmma.allowed[axis_index(SuiteAxis::KvDtype)] = {value::kF16, value::kBf16, value::kE4m3, value::kE5m2};
      wgmma.allowed[axis_index(SuiteAxis::HeadDim)] = {value::kHead128};
      t.push_back(builtin(std::move(wgmma)));
    }
    {
      auto decode = make_target("decode", {"direct", "split", "auto"}, "one query token per sequence");
      decode.allowed[axis_index(SuiteAxis::Mode)] = {value::kDecode};
      t.push_back(builtin(std::move(decode)));
    }
    t.push_back(builtin(make_target("prefill", {"prefill"},
                                    "every case of the built-in features (the portable mma.sync kernel; on compute "
                                    "capability 9.0 it runs F32 K/V and head dims other than 128)")));
    {
      auto kernel = make_target("kernel", {},
                                "every value of every axis but MLA's (the mla family's): the reference, and a --kernel "
                                "library that declares every feature (the built-in paths report attention sinks, ALiBi "
                                "and head dims they do not build n/a)");
      auto& dims = kernel.allowed[axis_index(SuiteAxis::HeadDim)];
      dims.erase(std::remove(dims.begin(), dims.end(), value::kHeadMla), dims.end());
      t.push_back(std::move(kernel));
    }
    {
      // Latent (MLA) caches as DeepSeek's models serve them: one KV head, NHD,
      // decode and chunked/mixed batches, causal, none of the other logit
      // features.
      auto mla = make_target("mla", {},
                             "latent (MLA) caches, 576/512, 16 query heads over one latent head: the reference and a "
                             "--kernel library that declares PAGECHECK_FEATURE_LATENT (the decode paths take its "
                             "decode-mode rows: the mla-decode family)");
      mla.allowed[axis_index(SuiteAxis::HeadDim)] = {value::kHeadMla};
      mla.allowed[axis_index(SuiteAxis::Gqa)] = {value::kMqa};
      mla.allowed[axis_index(SuiteAxis::Layout)] = {value::kNhd};
      mla.allowed[axis_index(SuiteAxis::Window)] = {value::kWindowNone};
      mla.allowed[axis_index(SuiteAxis::Softcap)] = {0};
      mla.allowed[axis_index(SuiteAxis::Sinks)] = {value::kNoSinks};
      mla.allowed[axis_index(SuiteAxis::Alibi)] = {value::kNoAlibi};
      mla.allowed[axis_index(SuiteAxis::Mode)] = {value::kDecode, value::kChunked, value::kMixed};
      mla.allowed[axis_index(SuiteAxis::Causal)] = {value::kCausal};
      t.push_back(std::move(mla));
    }
    const SuiteTarget mla = t.back();  // a copy: t grows below
    {
      // The decode kernels take attention sinks and ALiBi (issue 23): the
      // decode family again with both axes open. A family of its own, made
      // last, so that every row of the families before it is the one it was
      // (the suite only grows: earlier device runs and mutation results hold
      // for its first rows); its own rows are those the others left it.
      auto decode = make_target("decode-sinks-alibi", {"direct", "split", "auto"},
                                "one query token per sequence, with and without attention sinks and ALiBi");
      decode.allowed[axis_index(SuiteAxis::Mode)] = {value::kDecode};
      t.push_back(with_logit_features(builtin(std::move(decode)), true));
    }
    // Prefill and fmha take attention sinks (issue 23: in their kernels'
    // epilogues): the prefill family again with the sinks axis open, made
    // after decode-sinks-alibi for the same reason.
    t.push_back(with_logit_features(builtin(make_target("prefill-sinks", {"prefill"},
                                                        "every built-in prefill feature with and without attention "
                                                        "sinks")),
                                    false));
    {
      // The same for the cases the warp-specialised kernel and fmha take
      // (BF16 K/V, head dim 128), which the pairs above need not reach.
      auto fmha = make_target("fmha-sinks", {"prefill", "fmha"},
                              "BF16 K/V at head dim 128 (fmha, and the prefill path's warp-specialised kernel on "
                              "compute capability 9.0) with and without attention sinks");
      fmha.allowed[axis_index(SuiteAxis::KvDtype)] = {value::kBf16};
      fmha.allowed[axis_index(SuiteAxis::HeadDim)] = {value::kHead128};
      t.push_back(with_logit_features(builtin(std::move(fmha)), false));
    }
    // Prefill takes ALiBi too (on its CUDA-core kernel): the prefill family
    // with both logit axes open, made last.
    t.push_back(with_logit_features(builtin(make_target("prefill-alibi", {"prefill"},
                                                        "every built-in prefill feature with and without ALiBi and "
                                                        "attention sinks")),
                                    true));
    // Issue 23's head sizes (32, 80, 96, 112, 120) in the decode paths and
    // prefill (their CUDA-core kernels), with the logit features: made after
    // every other family, for the same reason as decode-sinks-alibi.
    const auto head_sizes = [](SuiteTarget target) {
      target.allowed[axis_index(SuiteAxis::HeadDim)] = {value::kHead192 + 1, value::kHead192 + 2, value::kHead192 + 3,
                                                        value::kHead192 + 4, value::kHead192 + 5};
      return target;
    };
    {
      auto decode = make_target("decode-head-sizes", {"direct", "split", "auto"},
                                "one query token per sequence at head dims 32, 80, 96, 112 and 120 (the CUDA-core "
                                "loop), with and without attention sinks and ALiBi");
      decode.allowed[axis_index(SuiteAxis::Mode)] = {value::kDecode};
      t.push_back(head_sizes(with_logit_features(builtin(std::move(decode)), true)));
    }
    t.push_back(head_sizes(with_logit_features(
        builtin(make_target("prefill-head-sizes", {"prefill"},
                            "every built-in prefill feature at head dims 32, 80, 96, 112 and 120 (the CUDA-core "
                            "kernel), with and without attention sinks and ALiBi")),
        true)));
    {
      // The decode paths take latent caches (decode_mla_sm90.cu's wgmma
      // kernel or their CUDA-core loop): the mla family's axes at decode,
      // made last for the same reason.
      SuiteTarget decode = mla;
      decode.name = "mla-decode";
      decode.paths = {"direct", "split", "auto"};
      decode.note = "latent (MLA) caches at one query token per sequence: direct, split and auto";
      decode.allowed[axis_index(SuiteAxis::Mode)] = {value::kDecode};
      t.push_back(std::move(decode));
    }
    return t;
  }();
  return targets;
}

SuiteLengths suite_lengths(const SuiteRow& row) {
  const std::int64_t b = kBlockSizes[row[axis_index(SuiteAxis::BlockSize)]];
  const bool prefill = is_prefill_mode(row);
  SuiteLengths out;
  switch (row[axis_index(SuiteAxis::Lengths)]) {
    case value::kPageEdge:
      if (b == 1) out.seq_lens = {1, 2, 3, 9};  // 9: past the small window
      // Whole prompts stay short (the reference's cost grows with the square).
      else if (prefill && 2 * b + 1 > 300) out.seq_lens = {b - 1, b, b + 1};
      else out.seq_lens = {b - 1, b, b + 1, 2 * b + 1};
      break;
    case value::kPartitionEdge:
      out.seq_lens = prefill ? std::vector<std::int64_t>{127, 128, 129, 257} : std::vector<std::int64_t>{255, 256, 257, 513};
      break;
    default:
      out.seq_lens = prefill ? std::vector<std::int64_t>{1, 17, 64, 200} : std::vector<std::int64_t>{1, 37, 300, 1100};
      break;
  }
  const int mode = row[axis_index(SuiteAxis::Mode)];
  for (std::size_t s = 0; s < out.seq_lens.size(); ++s) {
    const std::int64_t len = out.seq_lens[s];
    const std::int64_t chunk = std::min(len, kChunkLengths[s % kChunkLengths.size()]);
    switch (mode) {
      case value::kDecode: out.q_lens.push_back(1); break;
      case value::kPrefill: out.q_lens.push_back(len); break;
      case value::kChunked: out.q_lens.push_back(chunk); break;
      default: out.q_lens.push_back(s % 2 == 1 ? chunk : 1); break;
    }
  }
  return out;
}

std::vector<SuiteCase> default_suite_cases() {
  std::vector<SuiteRow> rows;
  SplitMix rng(kCoveringSeed);
  for (const auto& target : suite_targets()) cover_target(target, rows, rng);

  std::vector<SuiteCase> out;
  std::uint64_t next_seed = kFirstCaseSeed;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    SuiteCase c;
    c.row = rows[i];
    c.spec = spec_of(rows[i], fmt::format("cover-{:03}", i + 1), next_seed++);
    out.push_back(std::move(c));
  }
  for (auto& spec : fixed_specs(next_seed)) {
    SuiteCase c;
    c.spec = std::move(spec);
    c.row = base_row();
    c.fixed = true;
    out.push_back(std::move(c));
  }
  for (auto& c : out) {
    if (c.fixed) {
      // Read the hand-written case's axes off its spec's case.
      if (auto generated = generate_case(c.spec); generated.ok()) c.row = suite_row_of(*generated, c.row);
      c.row[axis_index(SuiteAxis::Mode)] = static_cast<int>(c.spec.query_mode);
    }
    for (const auto& t : suite_targets())
      if (t.accepts(c.row)) c.targets.push_back(t.name);
  }
  return out;
}

std::vector<SyntheticSpec> default_suite() {
  std::vector<SyntheticSpec> specs;
  for (auto& c : default_suite_cases()) specs.push_back(std::move(c.spec));
  return specs;
}

SuiteRow suite_row_of(const Case& c, const SuiteRow& labelled) {
  SuiteRow row = labelled;
  const auto& values = all_values();
  const auto set = [&](SuiteAxis axis, const std::string& v) { row[axis_index(axis)] = index_of(values[axis_index(axis)], v); };
  set(SuiteAxis::QueryDtype, std::string(dtype_name(c.query.dtype)));
  set(SuiteAxis::KvDtype, c.key_cache.dtype == c.value_cache.dtype ? std::string(dtype_name(c.key_cache.dtype)) : "");
  set(SuiteAxis::Layout, c.params.layout == KvLayout::NHD ? "NHD" : "HND");
  set(SuiteAxis::Table, c.table.form == TableForm::Dense ? "dense" : "csr");
  set(SuiteAxis::BlockSize, std::to_string(c.block_size()));
  const std::int64_t dk = c.key_head_dim(), dv = c.v_head_dim();
  set(SuiteAxis::HeadDim, dk == dv ? std::to_string(dk) : fmt::format("{}/{}", dk, dv));
  if (c.kv_heads() == 1) set(SuiteAxis::Gqa, "mqa");
  else if (c.q_heads() % c.kv_heads() == 0) set(SuiteAxis::Gqa, std::to_string(c.q_heads() / c.kv_heads()));
  else set(SuiteAxis::Gqa, "");
  const std::int64_t window = c.params.sliding_window;
  set(SuiteAxis::Window, window == 0 ? "none" : (window == edge_window(labelled) ? "edge" : "small"));
  set(SuiteAxis::Softcap, c.params.softcap > 0 ? "on" : "none");
  set(SuiteAxis::Causal, c.params.causal ? "causal" : "non-causal");
  set(SuiteAxis::Sinks, c.has_sinks() ? "on" : "none");
  set(SuiteAxis::Alibi, c.has_alibi() ? "on" : "none");
  return row;
}

std::vector<std::string> uncovered_pairs(const SuiteTarget& target, const std::vector<SuiteRow>& rows) {
  int count = 0;
  const std::vector<bool> open = uncovered_map(target, rows, count);
  std::vector<std::string> out;
  const auto& values = all_values();
  for (int a = 0; a < kSuiteAxes; ++a)
    for (int b = a + 1; b < kSuiteAxes; ++b)
      for (int va : target.allowed[a])
        for (int vb : target.allowed[b])
          if (open[pair_key(a, va, b, vb)])
            out.push_back(fmt::format("{}={} x {}={}", suite_axis_name(static_cast<SuiteAxis>(a)), values[a][va],
                                      suite_axis_name(static_cast<SuiteAxis>(b)), values[b][vb]));
  return out;
}

std::string describe_suite_row(const SuiteRow& row) {
  std::string out;
  const auto& values = all_values();
  for (int a = 0; a < kSuiteAxes; ++a) {
    const int v = row[a];
    out += fmt::format("{}{}={}", a ? " " : "", suite_axis_name(static_cast<SuiteAxis>(a)),
                       v >= 0 && v < static_cast<int>(values[a].size()) ? values[a][v] : "-");
  }
  return out;
}

}  // namespace pagecheck
