// Seeded synthetic cases. docs/synthetic.md describes the settings, presets
// and the default suite.
//
// Reproducibility: every random draw comes from engines whose output the
// code fixes (std::mt19937_64, whose sequence the C++ standard fixes, and
// xoshiro256++ written out below); integers, normals and the shuffle are
// derived here by hand (the standard library's distributions differ between
// implementations), so a spec gives the same bytes on every platform and with
// any number of threads. The structure (lengths, query lengths, page pool,
// table padding, profile directions) comes from one mt19937_64 seeded with
// spec.seed, in that order; the values of each logical page, each query token
// and each stale block come from their own xoshiro256++ engine, seeded from
// (spec.seed, stream, index) through splitmix64, so that they can be filled
// in parallel.
//
// Speed: the values are most of the work (a 64 x 8192 Llama-3-8B batch holds
// 1.1e9 of them in a 6.4 GB pool). mt19937_64 with the polar method took
// about 40 ns per value (engine refills, a log and a division per pair, a
// dtype switch per store); xoshiro256++ with a 128-layer ziggurat takes a few
// (one draw, one compare and one multiply for 98.8% of the values), rows are
// stored with one dtype switch per row, and each byte of the pool is written
// once, block by block, instead of a NaN pass over the whole pool before the
// values. In memory (generate_case) a poisoned pool is a copy-on-write NaN
// mapping, so only the used slots cost memory. pagecheck run and gen never
// hold the caches (generate_case_sourced): the case's CacheSource, a
// CacheFiller, makes the blocks whoever reads them asks for (the reference
// a batch of sequences' pages into one reused buffer, the GPU upload and the
// file writer chunks of the pool), since on the project's VM first-touched
// memory (4 KiB faults, fresh page-cache pages) cost more than the values
// themselves (docs/synthetic.md, "Generation speed").
#include "pagecheck/synthetic.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pagecheck {
namespace {

class Random {
 public:
  explicit Random(std::uint64_t seed) : engine_(seed) {}
  // Uniform in [lo, hi] (inclusive), by rejection so that it is exact.
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
    const std::uint64_t range = static_cast<std::uint64_t>(hi - lo) + 1;
    if (range == 0) return static_cast<std::int64_t>(engine_());  // the whole 64-bit range
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % range;
    std::uint64_t x;
    do x = engine_();
    while (x >= limit);
    return lo + static_cast<std::int64_t>(x % range);
  }
  // Uniform in (-1, 1).
  double symmetric() { return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-52 - 1.0; }
  // Standard normal (Marsaglia's polar method, both values used).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, r2;
    do {
      u = symmetric();
      v = symmetric();
      r2 = u * u + v * v;
    } while (r2 >= 1.0 || r2 == 0.0);
    const double factor = std::sqrt(-2.0 * std::log(r2) / r2);
    spare_ = v * factor;
    has_spare_ = true;
    return u * factor;
  }
  template <class T>
  void shuffle(std::vector<T>& items) {  // Fisher-Yates
    for (std::int64_t i = static_cast<std::int64_t>(items.size()) - 1; i > 0; --i)
      std::swap(items[i], items[uniform_int(0, i)]);
  }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// splitmix64: decorrelates the seeds of the per-page and per-token engines.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
enum class Stream : std::uint64_t { Page = 1, Query = 2, StaleKey = 3, StaleValue = 4, Sinks = 5 };
std::uint64_t stream_seed(std::uint64_t seed, Stream stream, std::int64_t index) {
  return splitmix64(splitmix64(seed ^ (static_cast<std::uint64_t>(stream) << 56)) + static_cast<std::uint64_t>(index));
}

// The 128-layer ziggurat of Marsaglia and Tsang (2000) for the standard
// normal: x_i and f(x_i) of each layer, computed once.
struct ZigguratTables {
  static constexpr int kLayers = 128;
  static constexpr double kR = 3.442619855899;        // start of the tail
  static constexpr double kArea = 9.91256303526217e-3;  // area of each layer
  static constexpr double kScale = 16777216.0;         // 2^24: hz is a signed 25-bit draw
  std::uint32_t k[kLayers];  // |hz| < k[i]: inside the rectangle of layer i
  double w[kLayers];         // x = hz * w[i]
  double f[kLayers];         // exp(-x_i^2 / 2)
  ZigguratTables() {
    double dn = kR, tn = kR;
    const double q = kArea / std::exp(-0.5 * dn * dn);
    k[0] = static_cast<std::uint32_t>((dn / q) * kScale);
    k[1] = 0;
    w[0] = q / kScale;
    w[kLayers - 1] = dn / kScale;
    f[0] = 1.0;
    f[kLayers - 1] = std::exp(-0.5 * dn * dn);
    for (int i = kLayers - 2; i >= 1; --i) {
      dn = std::sqrt(-2.0 * std::log(kArea / dn + std::exp(-0.5 * dn * dn)));
      k[i + 1] = static_cast<std::uint32_t>((dn / tn) * kScale);
      tn = dn;
      f[i] = std::exp(-0.5 * dn * dn);
      w[i] = dn / kScale;
    }
  }
};
const ZigguratTables& ziggurat() {
  static const ZigguratTables tables;
  return tables;
}

// xoshiro256++ (Blackman and Vigna), seeded through splitmix64, with
// standard normals by the ziggurat. The engine of the values.
class ValueRandom {
 public:
  explicit ValueRandom(std::uint64_t seed) : zig_(ziggurat()) {
    for (auto& word : state_) {
      seed += 0x9E3779B97F4A7C15ull;
      word = splitmix64(seed);
    }
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(state_[0] + state_[3], 23) + state_[0];
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  // Uniform in (0, 1].
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }
  // out[k] = a standard normal * factor(k) for k < n, one 64-bit draw each:
  // the layer from the low 7 bits of its low half, a signed 25-bit value
  // from the other 25 (no bit serves twice). The engine state and the tables
  // stay in registers for the row (through the members, each store reloaded
  // them). Two normals per draw, one per half, measured 10% faster but left
  // the default suite's cover-047 unable to see a window off by one (a
  // 257th key inside BF16 tolerance, ratio 0.77): a property of those draws,
  // not of the method, but these are the draws the suite's tests were run on.
  template <class Factor>
  void normals(float* out, std::int64_t n, const Factor& factor) {
    std::uint64_t s0 = state_[0], s1 = state_[1], s2 = state_[2], s3 = state_[3];
    const std::uint32_t* const k = zig_.k;
    const double* const w = zig_.w;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint64_t bits = rotl(s0 + s3, 23) + s0;
      const std::uint64_t t = s1 << 17;
      s2 ^= s0;
      s3 ^= s1;
      s1 ^= s2;
      s0 ^= s3;
      s2 ^= t;
      s3 = rotl(s3, 45);
      const auto word = static_cast<std::uint32_t>(bits);
      const int layer = static_cast<int>(word & (ZigguratTables::kLayers - 1));
      const std::int32_t hz = static_cast<std::int32_t>(word) >> 7;  // arithmetic: [-2^24, 2^24)
      const auto magnitude = static_cast<std::uint32_t>(hz < 0 ? -hz : hz);
      double x;
      if (magnitude < k[layer]) {
        x = hz * w[layer];
      } else {
        state_[0] = s0, state_[1] = s1, state_[2] = s2, state_[3] = s3;
        x = slow_normal(hz, layer);
        s0 = state_[0], s1 = state_[1], s2 = state_[2], s3 = state_[3];
      }
      out[i] = static_cast<float>(x * factor(i));
    }
    state_[0] = s0, state_[1] = s1, state_[2] = s2, state_[3] = s3;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  double slow_normal(std::int32_t hz, int layer) {
    for (;;) {
      const double x = hz * zig_.w[layer];
      if (layer == 0) {  // the tail beyond kR (Marsaglia's method)
        double tail, y;
        do {
          tail = -std::log(uniform()) / ZigguratTables::kR;
          y = -std::log(uniform());
        } while (y + y < tail * tail);
        return hz > 0 ? ZigguratTables::kR + tail : -ZigguratTables::kR - tail;
      }
      if (zig_.f[layer] + uniform() * (zig_.f[layer - 1] - zig_.f[layer]) < std::exp(-0.5 * x * x)) return x;
      const auto word = static_cast<std::uint32_t>(next() >> 32);
      layer = static_cast<int>(word & (ZigguratTables::kLayers - 1));
      hz = static_cast<std::int32_t>(word) >> 7;
      const auto magnitude = static_cast<std::uint32_t>(hz < 0 ? -hz : hz);
      if (magnitude < zig_.k[layer]) return hz * zig_.w[layer];
    }
  }

  std::uint64_t state_[4];
  const ZigguratTables& zig_;
};

// Runs body(begin, end) over [0, count) split into contiguous ranges, one per
// thread (all cores, at most 32), with at least `min_per_thread` items each.
// The ranges do not change what is computed, only who computes it.
template <class Body>
void parallel_for(std::int64_t count, std::int64_t min_per_thread, const Body& body) {
  const std::int64_t cores = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  const std::int64_t workers = std::clamp<std::int64_t>(count / std::max<std::int64_t>(min_per_thread, 1), 1, std::min<std::int64_t>(cores, 32));
  const std::int64_t chunk = (count + workers - 1) / workers;
  std::vector<std::thread> threads;
  for (std::int64_t w = 1; w < workers; ++w) {
    const std::int64_t begin = std::min(count, w * chunk), end = std::min(count, (w + 1) * chunk);
    try {
      threads.emplace_back([&body, begin, end] { body(begin, end); });
    } catch (const std::system_error&) {
      body(begin, end);  // no thread to be had: do it here
    }
  }
  body(0, std::min(count, chunk));
  for (auto& t : threads) t.join();
}

// Query and key magnitude of the large-logits profile: with the default
// scale the logits have a standard deviation of about kLargeLogitMagnitude^2
// = 100 and reach several hundred; every dtype still holds the inputs.
constexpr double kLargeLogitMagnitude = 10.0;
// LLM-like profile: these key channels carry kOutlierMagnitude times the
// usual magnitude; the first token of every sequence is an attention sink
// whose key points along the group's query direction with logit about
// kSinkLogit above the others.
constexpr int kOutlierChannels = 4;
constexpr double kOutlierMagnitude = 15.0;
constexpr double kSinkLogit = 10.0;
constexpr double kQueryAlignment = 0.5;  // share of the sink direction in each query
// Attention-sink logits (SyntheticSpec::sinks), uniform in [kSinkLow,
// kSinkHigh] for the Gaussian profile (the other profiles shift and scale
// it): next to rows of N(0, 1) logits, exp(6) outweighs a row of a few
// hundred keys and exp(-2) is a small share of a single key.
constexpr double kSinkLow = -2.0, kSinkHigh = 6.0;

// Largest cache or query tensor the generator makes (16 GiB).
constexpr std::int64_t kMaxTensorBytes = std::int64_t{16} << 30;

bool is_query_dtype(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }
bool is_kv_dtype(DType d) { return is_query_dtype(d) || is_fp8(d); }

Status check_spec(const SyntheticSpec& spec) {
  const std::string where = "synthetic spec '" + spec.name + "'";
  auto bad = [&](std::string message) { return usage_error(std::move(message), where); };
  if (spec.num_seqs < 1) return bad(fmt::format("num_seqs {} must be at least 1", spec.num_seqs));
  if (spec.q_heads < 1 || spec.kv_heads < 1 || spec.q_heads % spec.kv_heads != 0)
    return bad(fmt::format("q_heads {} must be a positive multiple of kv_heads {}", spec.q_heads, spec.kv_heads));
  if (spec.head_dim < 1 || spec.v_head_dim < 0)
    return bad(fmt::format("head_dim {} / v_head_dim {} must be positive", spec.head_dim, spec.v_head_dim));
  if (spec.block_size < 1) return bad(fmt::format("block_size {} must be at least 1", spec.block_size));
  if (spec.pool_factor < 3)
    return bad(fmt::format("pool_factor {} must be at least 3 (the pool holds 3x the pages needed)", spec.pool_factor));
  if (!is_query_dtype(spec.query_dtype))
    return bad(fmt::format("query dtype {} must be F32, F16 or BF16", dtype_name(spec.query_dtype)));
  if (!is_kv_dtype(spec.kv_dtype))
    return bad(fmt::format("KV dtype {} must be F32, F16, BF16, F8_E4M3 or F8_E5M2", dtype_name(spec.kv_dtype)));
  auto check_dist = [&](const char* what, LengthDist dist, std::int64_t lo, std::int64_t hi,
                        const std::vector<std::int64_t>& list) -> Status {
    if (dist == LengthDist::List) {
      if (list.empty()) return bad(fmt::format("{} distribution 'list' needs at least one length", what));
      for (auto len : list)
        if (len < 1) return bad(fmt::format("{} list holds {}, lengths must be at least 1", what, len));
      return {};
    }
    if (lo < 1 || hi < lo) return bad(fmt::format("{} range [{}, {}] must satisfy 1 <= min <= max", what, lo, hi));
    return {};
  };
  PC_TRY(check_dist("seq_len", spec.seq_len_dist, spec.seq_len_min, spec.seq_len_max, spec.seq_len_list));
  if (spec.query_mode == QueryMode::Chunked || spec.query_mode == QueryMode::Mixed)
    PC_TRY(check_dist("q_len", spec.q_len_dist, spec.q_len_min, spec.q_len_max, spec.q_len_list));
  if (spec.sliding_window < 0) return bad(fmt::format("sliding_window {} must be >= 0", spec.sliding_window));
  if (!(spec.softcap >= 0) || !std::isfinite(spec.softcap))
    return bad(fmt::format("softcap {} must be finite and >= 0", spec.softcap));
  if (spec.scale && !(std::isfinite(*spec.scale) && *spec.scale > 0))
    return bad(fmt::format("scale {} must be finite and positive", *spec.scale));
  if (!(spec.k_scale > 0) || !(spec.v_scale > 0) || !std::isfinite(spec.k_scale) || !std::isfinite(spec.v_scale))
    return bad(fmt::format("k_scale {} and v_scale {} must be finite and positive", spec.k_scale, spec.v_scale));
  if (spec.latent) {
    if (spec.kv_heads != 1) return bad(fmt::format("a latent (MLA) cache has one KV head, not {}", spec.kv_heads));
    if (spec.v_head_dim < 1 || spec.v_head_dim > spec.head_dim)
      return bad(fmt::format("a latent (MLA) cache needs v_head_dim (the latent's width, kv_lora_rank) in 1..head_dim "
                             "{}, got {}",
                             spec.head_dim, spec.v_head_dim));
    if (spec.layout != KvLayout::NHD) return bad("a latent (MLA) cache is NHD (one KV head)");
    if (!spec.scale)
      return bad("a latent (MLA) case needs an explicit scale (1/sqrt of the query-key head dim before absorption)");
  }
  return {};
}

std::int64_t draw_length(Random& rng, LengthDist dist, std::int64_t lo, std::int64_t hi,
                         const std::vector<std::int64_t>& list, const std::vector<std::int64_t>& boundary,
                         std::int64_t index) {
  switch (dist) {
    case LengthDist::Fixed: return hi;
    case LengthDist::Uniform: return rng.uniform_int(lo, hi);
    case LengthDist::List: return list[static_cast<std::size_t>(index) % list.size()];
    case LengthDist::Boundary: return boundary[static_cast<std::size_t>(index) % boundary.size()];
  }
  return hi;
}

// A tensor of `shape` whose bytes are not initialised: the generator writes
// every byte of the caches exactly once, block by block.
// A tensor of `shape` whose bytes are not initialised: the generator writes
// every byte of the caches exactly once, block by block. (Transparent huge
// pages were tried for the pool: with the kernel's defrag on madvise they
// tripled the system time, compaction included, for fewer faults.)
Tensor uninitialised_tensor(DType dtype, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  const auto bytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  // new[] of std::uint64_t: aligned for every dtype; no value-initialisation.
  std::shared_ptr<std::uint64_t[]> storage(new std::uint64_t[(bytes + 7) / 8]);
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = reinterpret_cast<const std::byte*>(storage.get());
  t.nbytes = bytes;
  t.owner = std::move(storage);
  return t;
}

// A tensor of `shape` with no bytes yet (a lazily filled cache).
Tensor unfilled_tensor(DType dtype, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.nbytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  return t;
}

// The NaN pattern of `dtype` (fp8: the code 0x7F, NaN in both E4M3 "fn" and
// E5M2) over `bytes` bytes, `bytes` a multiple of 4.
void fill_nan_bytes(DType dtype, std::byte* data, std::size_t bytes) {
  if (dtype == DType::F32) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (std::size_t i = 0; i < bytes; i += 4) std::memcpy(data + i, &nan, 4);
  } else if (dtype == DType::F16 || dtype == DType::BF16) {
    const std::uint16_t nan = dtype == DType::F16 ? 0x7E00 : 0x7FC0;
    for (std::size_t i = 0; i < bytes; i += 2) std::memcpy(data + i, &nan, 2);
  } else {
    std::memset(data, 0x7F, bytes);
  }
}

// A tensor of `shape` that reads NaN everywhere, for a poisoned pool: one
// chunk of NaN in a memfd, mapped copy-on-write over and over. Blocks no
// sequence uses (two thirds of a pool of factor 3) then cost neither memory
// nor a page fault with zeroing until they are read; only the pages the
// generator writes become private. nullopt when a call fails (not Linux, or
// too many mappings): the caller then allocates and fills.
std::optional<Tensor> nan_pool_tensor(DType dtype, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  const auto bytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::size_t kChunk = std::size_t{2} << 20;
  if (bytes < 16 * page || page % 4 != 0) return std::nullopt;
  const std::size_t total = (bytes + page - 1) / page * page;
  const std::size_t chunk = std::min(kChunk, total);
  const int fd = ::memfd_create("pagecheck-nan-pool", MFD_CLOEXEC);
  if (fd < 0) return std::nullopt;
  bool ok = ::ftruncate(fd, static_cast<off_t>(chunk)) == 0;
  if (ok) {
    void* pattern = ::mmap(nullptr, chunk, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ok = pattern != MAP_FAILED;
    if (ok) {
      fill_nan_bytes(dtype, static_cast<std::byte*>(pattern), chunk);
      ::munmap(pattern, chunk);
    }
  }
  void* base = ok ? ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) : MAP_FAILED;
  ok = base != MAP_FAILED;
  for (std::size_t offset = 0; ok && offset < total; offset += chunk) {
    void* at = static_cast<std::byte*>(base) + offset;
    ok = ::mmap(at, std::min(chunk, total - offset), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0) == at;
  }
  ::close(fd);  // the mappings keep the memfd alive
  if (!ok) {
    if (base != MAP_FAILED) ::munmap(base, total);
    return std::nullopt;
  }
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = static_cast<const std::byte*>(base);
  t.nbytes = bytes;
  t.owner = std::shared_ptr<void>(base, [total](void* p) { ::munmap(p, total); });
  return t;
}

// Fills elements [begin, end) of `data` with NaN in `dtype` (fp8: the code
// 0x7F, NaN in both E4M3 "fn" and E5M2).
void fill_nan(DType dtype, std::byte* data, std::int64_t begin, std::int64_t end) {
  switch (dtype) {
    case DType::F32: {
      auto* p = reinterpret_cast<float*>(data);
      std::fill(p + begin, p + end, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    case DType::F16:
    case DType::BF16: {
      auto* p = reinterpret_cast<std::uint16_t*>(data);
      std::fill(p + begin, p + end, static_cast<std::uint16_t>(dtype == DType::F16 ? 0x7E00 : 0x7FC0));
      return;
    }
    default: std::memset(data + begin, 0x7F, static_cast<std::size_t>(end - begin)); return;
  }
}

// A stored x means x * scale (the store rounds it to the dtype; fp8
// saturates at its largest finite value, as satfinite conversions do).
double stored_value(double true_value, double scale) { return true_value / scale; }

// fp8 rounding as float_to_fp8_* does it (round to nearest even over the
// non-negative codes, saturating), with the code values looked up in a table
// instead of decoded at every step of the search: the generator stores
// millions of elements. Same comparisons on the same values, same codes.
class Fp8Encoder {
 public:
  explicit Fp8Encoder(DType dtype) : e4m3_(dtype == DType::F8_E4M3) {
    max_code_ = e4m3_ ? 0x7E : 0x7B;
    for (int code = 0; code <= max_code_; ++code)
      value_[code] = e4m3_ ? fp8_e4m3_to_float(static_cast<std::uint8_t>(code))
                           : fp8_e5m2_to_float(static_cast<std::uint8_t>(code));
  }
  std::uint8_t operator()(float x) const {
    if (std::isnan(x)) return 0x7F;
    const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    const float magnitude = std::fabs(x);
    if (magnitude >= value_[max_code_]) return sign | static_cast<std::uint8_t>(max_code_);
    int lo = 0, hi = max_code_;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (value_[mid] <= magnitude) lo = mid;
      else hi = mid;
    }
    const float below = magnitude - value_[lo], above = value_[hi] - magnitude;
    const int code = below < above ? lo : below > above ? hi : ((lo & 1) ? hi : lo);
    return sign | static_cast<std::uint8_t>(code);
  }

 private:
  bool e4m3_;
  int max_code_;
  float value_[128] = {};
};

// Stores rows of values as elements of one dtype, rounding as store_element
// does, with one dtype switch per row.
class RowStore {
 public:
  explicit RowStore(DType dtype = DType::F32) : dtype_(dtype), fp8_(is_fp8(dtype) ? dtype : DType::F8_E4M3) {}
  // Elements [offset, offset + n) of `data` from values[0, n).
  void operator()(std::byte* data, std::int64_t offset, const float* values, std::int64_t n) const {
    switch (dtype_) {
      case DType::F32: std::memcpy(data + offset * 4, values, static_cast<std::size_t>(n) * 4); return;
      case DType::BF16: {
        // In chunks through a local buffer: a loop the compiler vectorises,
        // one memcpy out.
        std::uint16_t bits[256];
        for (std::int64_t done = 0; done < n; done += 256) {
          const std::int64_t count = std::min<std::int64_t>(256, n - done);
          for (std::int64_t k = 0; k < count; ++k) bits[k] = bf16_bits(values[done + k]);
          std::memcpy(data + (offset + done) * 2, bits, static_cast<std::size_t>(count) * 2);
        }
        return;
      }
      case DType::F16:
        for (std::int64_t k = 0; k < n; ++k) {
          const std::uint16_t bits = float_to_f16(values[k]);
          std::memcpy(data + (offset + k) * 2, &bits, 2);
        }
        return;
      case DType::F8_E4M3:
      case DType::F8_E5M2:
        for (std::int64_t k = 0; k < n; ++k) data[offset + k] = static_cast<std::byte>(fp8_(values[k]));
        return;
      default:
        for (std::int64_t k = 0; k < n; ++k)
          store_element(dtype_, data, static_cast<std::size_t>(offset + k), values[k]);
        return;
    }
  }

 private:
  // float_to_bf16 (Eigen's round to nearest even, NaN to the quiet NaN of its
  // sign), inline: it is most of a BF16 store.
  static std::uint16_t bf16_bits(float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (bits & 0x80000000u) ? 0xFFC0 : 0x7FC0;
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>(bits >> 16);
  }

  DType dtype_;
  Fp8Encoder fp8_;
};

// The bytes of the KV caches, block by block: NaN (or stale values without
// poison) in every slot, and for a block that backs a logical page the real
// K/V of its used slots, from that page's own engine (so any block range can
// be made on its own, on any thread, with the same bytes).
struct CacheFiller {
  std::uint64_t seed = 0;
  DType kv_dtype = DType::BF16;
  bool poison_unused = true;
  bool sink_profile = false;
  bool latent = false;  // MLA: only keys; the values are their first dv columns (a copy when asked for)
  double k_scale = 1.0;
  std::int64_t kv_heads = 0, dk = 0, dv = 0;
  CacheStrides key_strides{}, value_strides{};
  std::vector<std::int64_t> page_used_slots;
  std::vector<std::int64_t> logical_of_block;  // physical block -> logical page, -1 when unreferenced
  std::vector<bool> holds_first_token;
  std::vector<double> key_factor;
  double value_factor = 1.0;
  std::vector<std::vector<double>> sink_direction;
  double sink_amplitude = 0;
  RowStore store;

  std::int64_t key_block_bytes() const { return key_strides.block * static_cast<std::int64_t>(dtype_size(kv_dtype)); }
  std::int64_t value_block_bytes() const { return value_strides.block * static_cast<std::int64_t>(dtype_size(kv_dtype)); }

  // Blocks [begin, end) into key (key_block_bytes() each) and value. With
  // `already_nan` the destination reads NaN already (the copy-on-write pool)
  // and only the used slots are written. A latent filler writes the keys and
  // copies them to `value` unless it is null.
  void fill_blocks(std::int64_t begin, std::int64_t end, std::byte* key, std::byte* value, bool already_nan) const {
    std::vector<float> row;
    for (std::int64_t b = begin; b < end; ++b) {
      std::byte* const key_block = key + (b - begin) * key_block_bytes();
      std::byte* const value_block = value == nullptr ? nullptr : value + (b - begin) * value_block_bytes();
      if (latent) {
        if (!already_nan) poison_block(b, key_block, nullptr, row);
        if (logical_of_block[b] >= 0) fill_page(logical_of_block[b], key_block, nullptr, row);
        if (value_block != nullptr) std::memcpy(value_block, key_block, static_cast<std::size_t>(key_block_bytes()));
        continue;
      }
      if (!already_nan) poison_block(b, key_block, value_block, row);
      if (logical_of_block[b] >= 0) fill_page(logical_of_block[b], key_block, value_block, row);
    }
  }

 private:
  void poison_block(std::int64_t block, std::byte* key, std::byte* value, std::vector<float>& row) const {
    for (const bool is_key : {true, false}) {
      const std::int64_t per_block = is_key ? key_strides.block : value_strides.block;
      std::byte* const data = is_key ? key : value;
      if (data == nullptr) continue;  // a latent cache's values are its keys
      if (poison_unused) {
        fill_nan(kv_dtype, data, 0, per_block);
        continue;
      }
      ValueRandom stale(stream_seed(seed, is_key ? Stream::StaleKey : Stream::StaleValue, block));
      row.resize(static_cast<std::size_t>(per_block));
      stale.normals(row.data(), per_block, [](std::int64_t) { return 1.0; });
      store(data, 0, row.data(), per_block);
    }
  }
  // Logical page p into its block, with its own engine.
  void fill_page(std::int64_t p, std::byte* key, std::byte* value, std::vector<float>& row) const {
    ValueRandom page_rng(stream_seed(seed, Stream::Page, p));
    row.resize(static_cast<std::size_t>(std::max(dk, dv)));
    const double* const factors = key_factor.data();
    const double v_factor = value_factor;
    for (std::int64_t slot = 0; slot < page_used_slots[p]; ++slot) {
      const bool sink = sink_profile && slot == 0 && holds_first_token[p];
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        page_rng.normals(row.data(), dk, [factors](std::int64_t d) { return factors[d]; });
        if (sink)  // the draws are made all the same: the engine's position does not depend on the profile
          for (std::int64_t d = 0; d < dk; ++d)
            row[d] = static_cast<float>(stored_value(sink_amplitude * sink_direction[h][d], k_scale));
        store(key, slot * key_strides.slot + h * key_strides.head, row.data(), dk);
        if (latent) continue;  // V is the key row's first dv columns
        page_rng.normals(row.data(), dv, [v_factor](std::int64_t) { return v_factor; });
        store(value, slot * value_strides.slot + h * value_strides.head, row.data(), dv);
      }
    }
  }
};

Expected<std::int64_t> checked_bytes(std::initializer_list<std::int64_t> dims, DType dtype, const std::string& what) {
  std::int64_t bytes = static_cast<std::int64_t>(dtype_size(dtype));
  for (auto d : dims) {
    if (d != 0 && bytes > kMaxTensorBytes / d)
      return usage_error(fmt::format("{} would exceed {} GiB", what, kMaxTensorBytes >> 30), "synthetic");
    bytes *= d;
  }
  return bytes;
}

}  // namespace

Status check_synthetic_spec(const SyntheticSpec& spec) { return check_spec(spec); }

std::vector<float> alibi_slopes(std::int64_t heads) {
  std::int64_t n = 1;
  while (n * 2 <= heads) n *= 2;
  std::vector<float> slopes;
  for (std::int64_t i = 1; i <= n; ++i) slopes.push_back(static_cast<float>(std::exp2(-8.0 * i / n)));
  for (std::int64_t i = 1; static_cast<std::int64_t>(slopes.size()) < heads; ++i)
    slopes.push_back(static_cast<float>(std::exp2(-4.0 * (2 * i - 1) / n)));
  return slopes;
}

std::vector<std::int64_t> boundary_lengths(std::int64_t block_size, std::int64_t min, std::int64_t max) {
  const std::int64_t p = kDefaultPartitionTokens, b = block_size;
  std::set<std::int64_t> lengths = {1, 2, b - 1, b, b + 1, 2 * b - 1, 2 * b, 2 * b + 1, p - 1, p, p + 1,
                                    2 * p - 1, 2 * p, 2 * p + 1, 4 * p - 1, 4 * p + 1};
  std::vector<std::int64_t> out;
  for (auto len : lengths)
    if (len >= std::max<std::int64_t>(min, 1) && len <= max) out.push_back(len);
  if (out.empty()) out.push_back(std::max<std::int64_t>(min, 1));
  return out;
}

std::string_view length_dist_name(LengthDist dist) {
  switch (dist) {
    case LengthDist::Fixed: return "fixed";
    case LengthDist::Uniform: return "uniform";
    case LengthDist::List: return "list";
    case LengthDist::Boundary: return "boundary";
  }
  return "?";
}
std::string_view query_mode_name(QueryMode mode) {
  switch (mode) {
    case QueryMode::Decode: return "decode";
    case QueryMode::Prefill: return "prefill";
    case QueryMode::Chunked: return "chunked";
    case QueryMode::Mixed: return "mixed";
  }
  return "?";
}
std::string_view value_profile_name(ValueProfile profile) {
  switch (profile) {
    case ValueProfile::Gaussian: return "gaussian";
    case ValueProfile::LlmLike: return "llm";
    case ValueProfile::LargeLogits: return "large-logits";
  }
  return "?";
}
std::optional<LengthDist> parse_length_dist(std::string_view name) {
  for (auto d : {LengthDist::Fixed, LengthDist::Uniform, LengthDist::List, LengthDist::Boundary})
    if (length_dist_name(d) == name) return d;
  return std::nullopt;
}
std::optional<QueryMode> parse_query_mode(std::string_view name) {
  for (auto m : {QueryMode::Decode, QueryMode::Prefill, QueryMode::Chunked, QueryMode::Mixed})
    if (query_mode_name(m) == name) return m;
  return std::nullopt;
}
std::optional<ValueProfile> parse_value_profile(std::string_view name) {
  for (auto p : {ValueProfile::Gaussian, ValueProfile::LlmLike, ValueProfile::LargeLogits})
    if (value_profile_name(p) == name) return p;
  return std::nullopt;
}

std::map<std::string, std::string> spec_metadata(const SyntheticSpec& spec) {
  nlohmann::ordered_json settings;
  settings["name"] = spec.name;
  settings["seed"] = spec.seed;
  settings["num_seqs"] = spec.num_seqs;
  settings["q_heads"] = spec.q_heads;
  settings["kv_heads"] = spec.kv_heads;
  settings["head_dim"] = spec.head_dim;
  settings["v_head_dim"] = spec.v_head_dim > 0 ? spec.v_head_dim : spec.head_dim;
  settings["block_size"] = spec.block_size;
  settings["pool_factor"] = spec.pool_factor;
  settings["query_dtype"] = dtype_name(spec.query_dtype);
  settings["kv_dtype"] = dtype_name(spec.kv_dtype);
  settings["layout"] = spec.layout == KvLayout::NHD ? "NHD" : "HND";
  settings["table"] = spec.table_form == TableForm::Dense ? "dense" : "csr";
  settings["seq_len"] = {{"dist", length_dist_name(spec.seq_len_dist)},
                         {"min", spec.seq_len_min},
                         {"max", spec.seq_len_max},
                         {"list", spec.seq_len_list}};
  settings["query_mode"] = query_mode_name(spec.query_mode);
  settings["q_len"] = {{"dist", length_dist_name(spec.q_len_dist)},
                       {"min", spec.q_len_min},
                       {"max", spec.q_len_max},
                       {"list", spec.q_len_list}};
  settings["causal"] = spec.causal;
  settings["sliding_window"] = spec.sliding_window;
  settings["softcap"] = spec.softcap;
  if (spec.scale) settings["scale"] = *spec.scale;
  settings["k_scale"] = spec.k_scale;
  settings["v_scale"] = spec.v_scale;
  if (spec.sinks) settings["sinks"] = true;
  if (spec.alibi) settings["alibi"] = true;
  if (spec.latent) settings["latent"] = true;
  settings["profile"] = value_profile_name(spec.profile);
  settings["share_pages"] = spec.share_pages;
  settings["poison_unused"] = spec.poison_unused;
  return {
      {"seed", std::to_string(spec.seed)},
      {"tool_version", PAGECHECK_VERSION},
      {"generator", "pagecheck synthetic"},
      {"generator_settings", settings.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)},
  };
}

namespace {

// Everything but the caches' bytes: the Case with data-less key_cache and
// value_cache tensors, and the filler that makes those bytes.
Expected<std::pair<Case, std::shared_ptr<const CacheFiller>>> generate_unfilled(const SyntheticSpec& spec) {
  PC_TRY(check_spec(spec));
  {
    // Before anything is allocated: the largest the batch can be, from the
    // longest length the distribution allows.
    std::int64_t longest = spec.seq_len_max;
    if (spec.seq_len_dist == LengthDist::List)
      longest = *std::max_element(spec.seq_len_list.begin(), spec.seq_len_list.end());
    if (longest > std::numeric_limits<std::int32_t>::max())
      return usage_error(fmt::format("sequence length {} does not fit in I32", longest), "synthetic");
    // The pages the pool backs: each listed length's own (exact but for
    // shared prefixes, which only lower it), else every sequence as long as
    // the longest. (Soak seed 1, case 1664: a pool past 2^31 F32 elements,
    // 8.9 GB, was refused as 18.9 GB by the bound of 14 sequences of 1089.)
    std::int64_t pages = 0;
    if (spec.seq_len_dist == LengthDist::List) {
      // Sequence i has the list's length i % size: whole rounds of the list
      // and a partial one.
      const auto listed = static_cast<std::int64_t>(spec.seq_len_list.size());
      std::int64_t round = 0, partial = 0;
      for (std::int64_t i = 0; i < listed; ++i) {
        const std::int64_t list_pages = (spec.seq_len_list[static_cast<std::size_t>(i)] + spec.block_size - 1) / spec.block_size;
        round += list_pages;  // each below 2^31: no overflow
        if (i < spec.num_seqs % listed) partial += list_pages;
      }
      const std::int64_t rounds = spec.num_seqs / listed;
      if (round > 0 && rounds > (std::numeric_limits<std::int64_t>::max() - partial) / round)
        return usage_error("the KV cache's page count overflows", "synthetic");
      pages = rounds * round + partial;
    } else {
      const std::int64_t per_seq = (longest + spec.block_size - 1) / spec.block_size;
      if (per_seq > 0 && spec.num_seqs > std::numeric_limits<std::int64_t>::max() / per_seq)
        return usage_error("the KV cache's page count overflows", "synthetic");
      pages = spec.num_seqs * per_seq;
    }
    const std::int64_t widest = std::max(spec.head_dim, spec.v_head_dim);
    auto cache = checked_bytes({pages, spec.pool_factor, spec.block_size, spec.kv_heads, widest}, spec.kv_dtype,
                               "the KV cache");
    if (!cache.ok()) return cache.error();
    // Query tokens a sequence: one at decode, at most its length otherwise.
    const std::int64_t query_rows = spec.query_mode == QueryMode::Decode ? 1 : longest;
    auto query = checked_bytes({spec.num_seqs, query_rows, spec.q_heads, spec.head_dim}, spec.query_dtype, "the query");
    if (!query.ok()) return query.error();
  }
  Random rng(spec.seed);
  const std::int64_t num_seqs = spec.num_seqs, block_size = spec.block_size;
  const std::int64_t q_heads = spec.q_heads, kv_heads = spec.kv_heads;
  const std::int64_t dk = spec.head_dim, dv = spec.v_head_dim > 0 ? spec.v_head_dim : spec.head_dim;
  const std::int64_t group = q_heads / kv_heads;

  // 1. Lengths: seq_len per the distribution, q_len per the query mode.
  const auto seq_boundary = boundary_lengths(block_size, spec.seq_len_min, spec.seq_len_max);
  const auto q_boundary = boundary_lengths(block_size, spec.q_len_min, spec.q_len_max);
  std::vector<std::int32_t> seq_lens(num_seqs), q_lens(num_seqs);
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const auto len = draw_length(rng, spec.seq_len_dist, spec.seq_len_min, spec.seq_len_max, spec.seq_len_list,
                                 seq_boundary, s);
    if (len > std::numeric_limits<std::int32_t>::max())
      return usage_error(fmt::format("sequence {}: length {} does not fit in I32", s, len), "synthetic");
    seq_lens[s] = static_cast<std::int32_t>(len);
  }
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const bool chunked = spec.query_mode == QueryMode::Chunked || (spec.query_mode == QueryMode::Mixed && s % 2 == 1);
    std::int64_t q = 1;
    if (spec.query_mode == QueryMode::Prefill) q = seq_lens[s];
    else if (chunked) q = draw_length(rng, spec.q_len_dist, spec.q_len_min, spec.q_len_max, spec.q_len_list, q_boundary, s);
    q_lens[s] = static_cast<std::int32_t>(std::clamp<std::int64_t>(q, 1, seq_lens[s]));
  }

  // 2. Logical pages. With share_pages, every odd sequence reuses the leading
  // full pages (at most two) of the sequence before it, as prefix caching
  // does: the shared slots hold the same K/V by construction.
  std::vector<std::vector<std::int64_t>> logical(num_seqs);
  std::vector<std::int64_t> page_used_slots;  // per logical page: slots that hold real tokens
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int64_t pages = (seq_lens[s] + block_size - 1) / block_size;
    std::int64_t shared = 0;
    if (spec.share_pages && s % 2 == 1) {
      const std::int64_t full_here = seq_lens[s] / block_size, full_before = seq_lens[s - 1] / block_size;
      shared = std::min<std::int64_t>({2, full_here, full_before});
    }
    for (std::int64_t p = 0; p < pages; ++p) {
      if (p < shared) {
        logical[s].push_back(logical[s - 1][p]);
        continue;
      }
      logical[s].push_back(static_cast<std::int64_t>(page_used_slots.size()));
      page_used_slots.push_back(std::min<std::int64_t>(block_size, seq_lens[s] - p * block_size));
    }
  }
  const std::int64_t pages_needed = static_cast<std::int64_t>(page_used_slots.size());

  // 3. The pool: pool_factor times the pages needed, shuffled; the first
  // pages_needed of the shuffled ids back the logical pages.
  const std::int64_t num_blocks = pages_needed * spec.pool_factor;
  if (num_blocks > std::numeric_limits<std::int32_t>::max())
    return usage_error(fmt::format("pool of {} blocks does not fit I32 table entries", num_blocks), "synthetic");
  std::vector<std::int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  rng.shuffle(pool);
  std::vector<std::vector<std::int32_t>> rows(num_seqs);  // physical pages per sequence
  for (std::int64_t s = 0; s < num_seqs; ++s)
    for (auto p : logical[s]) rows[s].push_back(pool[p]);

  // 4. The table, in the requested form. Dense rows carry two entries of
  // padding past the longest sequence, holding junk: -1, 0, an existing page
  // (poisoned or someone else's) and an id past the pool.
  Case c;
  c.name = spec.name;
  c.table.form = spec.table_form;
  std::int64_t max_pages = 0;
  for (const auto& row : rows) max_pages = std::max<std::int64_t>(max_pages, row.size());
  if (spec.table_form == TableForm::Dense) {
    const std::int64_t width = max_pages + 2;
    c.table.max_blocks_per_seq = width;
    for (std::int64_t s = 0; s < num_seqs; ++s) {
      c.table.page_indptr.push_back(s * width);
      for (std::int64_t j = 0; j < width; ++j) {
        if (j < static_cast<std::int64_t>(rows[s].size())) {
          c.table.page_indices.push_back(rows[s][j]);
          continue;
        }
        switch ((s + j) % 4) {
          case 0: c.table.page_indices.push_back(-1); break;
          case 1: c.table.page_indices.push_back(0); break;
          case 2: c.table.page_indices.push_back(static_cast<std::int32_t>(rng.uniform_int(0, num_blocks - 1))); break;
          default:
            c.table.page_indices.push_back(static_cast<std::int32_t>(std::min<std::int64_t>(
                num_blocks + rng.uniform_int(0, 999999), std::numeric_limits<std::int32_t>::max())));
        }
      }
    }
    c.table.page_indptr.push_back(num_seqs * width);
  } else {
    c.table.page_indptr.push_back(0);
    for (const auto& row : rows) {
      c.table.page_indices.insert(c.table.page_indices.end(), row.begin(), row.end());
      c.table.page_indptr.push_back(static_cast<std::int64_t>(c.table.page_indices.size()));
    }
  }
  c.seq_lens = seq_lens;
  c.query_start_loc.assign(1, 0);
  for (auto q : q_lens) c.query_start_loc.push_back(c.query_start_loc.back() + q);
  c.query_start_loc_given = std::any_of(q_lens.begin(), q_lens.end(), [](auto q) { return q != 1; });
  const std::int64_t num_tokens = c.query_start_loc.back();

  // 5. Parameters and metadata.
  c.params.layout = spec.layout;
  c.params.causal = spec.causal;
  c.params.scale = spec.scale;
  c.params.sliding_window = spec.sliding_window;
  c.params.softcap = spec.softcap;
  c.params.k_scale = spec.k_scale;
  c.params.v_scale = spec.v_scale;
  c.params.description = spec.description;
  c.params.extra_metadata = spec_metadata(spec);
  if (spec.sinks) {
    // Their own engine: the draws above and below do not move. Sized to the
    // profile's logits, so that a dropped sink shows in every profile: the
    // LLM-like rows hold a sink token kSinkLogit above the rest, the
    // large-logits rows logits of about kLargeLogitMagnitude^2.
    // A softcap c bounds every logit by c: sinks sized to the uncapped
    // large logits (up to 600) would take all of every row's weight, and
    // outputs of 1e-250 show no other error; so the size is at most c / 3.
    Random sink_rng(stream_seed(spec.seed, Stream::Sinks, 0));
    const double offset = spec.profile == ValueProfile::LlmLike ? kSinkLogit : 0.0;
    double size = spec.profile == ValueProfile::LargeLogits ? kLargeLogitMagnitude * kLargeLogitMagnitude : 1.0;
    if (spec.softcap > 0) size = std::min(size, spec.softcap / 3.0);
    for (std::int64_t h = 0; h < q_heads; ++h) {
      const double unit = kSinkLow + (kSinkHigh - kSinkLow) * (sink_rng.symmetric() + 1.0) / 2.0;
      c.sinks.push_back(static_cast<float>(offset + size * unit));
    }
  }
  if (spec.alibi) c.alibi_slopes = alibi_slopes(q_heads);
  const double scale = spec.scale.value_or(1.0 / std::sqrt(static_cast<double>(dk)));

  // 6. Profile directions: per KV head, the LLM-like sink direction
  // (standard normal entries) and the outlier key channels.
  std::vector<std::vector<double>> sink_direction(kv_heads, std::vector<double>(dk, 0.0));
  std::vector<bool> outlier_channel(dk, false);
  if (spec.profile == ValueProfile::LlmLike) {
    for (auto& dir : sink_direction)
      for (auto& x : dir) x = rng.normal();
    // A latent (MLA) cache's first dv columns are the values too: the
    // latent leaves an RMS norm (DeepSeek's kv_a_layernorm), so its columns
    // share one scale, and the outlier channels go to the rope columns
    // after it. In the latent columns they would scale single value
    // channels by kOutlierMagnitude, where a kernel's BF16 probabilities
    // (2^-9 relative) alone move the output past a tolerance sized by the
    // row's RMS.
    const std::int64_t first = spec.latent ? dv : 0;
    const std::int64_t span = dk - first;
    for (int k = 0; k < std::min<std::int64_t>(kOutlierChannels, span); ++k)
      outlier_channel[first + ((k * span) / kOutlierChannels + 3) % span] = true;
  }
  const double magnitude = spec.profile == ValueProfile::LargeLogits ? kLargeLogitMagnitude : 1.0;
  // Sink key = a * direction, a chosen so that q . k * scale ~ kSinkLogit for
  // a query holding kQueryAlignment * direction (|direction|^2 ~ dk).
  const double sink_amplitude = kSinkLogit / (kQueryAlignment * static_cast<double>(dk) * scale);

  // 7. The caches' shapes; their bytes come from a CacheFiller, block by
  // block (generate_case below fills them in memory, pagecheck gen while
  // writing the file).
  const auto cache_shape = [&](std::int64_t dim) {
    return spec.layout == KvLayout::NHD ? std::vector<std::int64_t>{num_blocks, block_size, kv_heads, dim}
                                        : std::vector<std::int64_t>{num_blocks, kv_heads, block_size, dim};
  };
  auto filler = std::make_shared<CacheFiller>();
  CacheFiller& f = *filler;
  f.seed = spec.seed;
  f.kv_dtype = spec.kv_dtype;
  f.poison_unused = spec.poison_unused;
  f.sink_profile = spec.profile == ValueProfile::LlmLike;
  f.latent = spec.latent;
  f.k_scale = spec.k_scale;
  f.kv_heads = kv_heads;
  f.dk = dk;
  f.dv = dv;
  f.key_strides = cache_strides(spec.layout, block_size, kv_heads, dk);
  f.value_strides = spec.latent ? f.key_strides : cache_strides(spec.layout, block_size, kv_heads, dv);
  f.page_used_slots = page_used_slots;
  f.logical_of_block.assign(static_cast<std::size_t>(num_blocks), -1);
  for (std::int64_t p = 0; p < pages_needed; ++p) f.logical_of_block[pool[p]] = p;
  // A logical page's first sequence position, to find each sequence's token 0.
  f.holds_first_token.assign(pages_needed, false);
  for (std::int64_t s = 0; s < num_seqs; ++s) f.holds_first_token[logical[s][0]] = true;
  // Stored key d = normal * key_factor[d] (magnitude, outlier channel,
  // 1 / k_scale); stored value = normal / v_scale.
  f.key_factor.resize(static_cast<std::size_t>(dk));
  for (std::int64_t d = 0; d < dk; ++d)
    f.key_factor[d] = stored_value(magnitude * (outlier_channel[d] ? kOutlierMagnitude : 1.0), spec.k_scale);
  f.value_factor = stored_value(1.0, spec.v_scale);
  f.sink_direction = sink_direction;
  f.sink_amplitude = sink_amplitude;
  f.store = RowStore(spec.kv_dtype);
  c.key_cache = unfilled_tensor(spec.kv_dtype, cache_shape(dk));
  c.value_cache = spec.latent ? c.key_cache : unfilled_tensor(spec.kv_dtype, cache_shape(dv));
  if (spec.latent) c.params.kv_lora_rank = dv;

  // 8. Queries [num_tokens, q_heads, dk], each token with its own engine.
  c.query = uninitialised_tensor(spec.query_dtype, {num_tokens, q_heads, dk});
  const RowStore store_query(c.query.dtype);
  parallel_for(num_tokens, std::max<std::int64_t>(1, (std::int64_t{1} << 18) / (q_heads * dk)),
               [&](std::int64_t begin, std::int64_t end) {
                 std::vector<float> row(static_cast<std::size_t>(dk));
                 for (std::int64_t t = begin; t < end; ++t) {
                   ValueRandom token_rng(stream_seed(spec.seed, Stream::Query, t));
                   for (std::int64_t h = 0; h < q_heads; ++h) {
                     token_rng.normals(row.data(), dk, [magnitude](std::int64_t) { return magnitude; });
                     if (spec.profile == ValueProfile::LlmLike)
                       for (std::int64_t d = 0; d < dk; ++d)
                         row[d] = static_cast<float>(row[d] + kQueryAlignment * sink_direction[h / group][d]);
                     store_query(c.query.mutable_data(), (t * q_heads + h) * dk, row.data(), dk);
                   }
                 }
               });
  return std::pair<Case, std::shared_ptr<const CacheFiller>>(std::move(c), std::move(filler));
}

}  // namespace

Expected<Case> generate_case(const SyntheticSpec& spec) {
  auto made = generate_unfilled(spec);
  if (!made.ok()) return made.error();
  Case c = std::move(made->first);
  const CacheFiller& filler = *made->second;
  // A poisoned pool in memory is the copy-on-write NaN pool, so only the
  // used slots are written (and cost memory); else every byte is written
  // once, block by block.
  bool poisoned = false;  // the caches already read NaN everywhere
  const bool latent = spec.latent;  // one tensor: value_cache is key_cache
  if (spec.poison_unused) {
    auto key = nan_pool_tensor(c.key_cache.dtype, c.key_cache.shape);
    auto value = key && !latent ? nan_pool_tensor(c.value_cache.dtype, c.value_cache.shape) : std::nullopt;
    if (key && (value || latent)) {
      c.key_cache = std::move(*key);
      c.value_cache = latent ? c.key_cache : std::move(*value);
      poisoned = true;
    }
  }
  if (!poisoned) {
    c.key_cache = uninitialised_tensor(c.key_cache.dtype, c.key_cache.shape);
    c.value_cache = latent ? c.key_cache : uninitialised_tensor(c.value_cache.dtype, c.value_cache.shape);
  }
  std::byte* const key = c.key_cache.mutable_data();
  std::byte* const value = latent ? nullptr : c.value_cache.mutable_data();
  const std::int64_t key_block = filler.key_block_bytes(), value_block = filler.value_block_bytes();
  const std::int64_t block_bytes = std::max<std::int64_t>(1, key_block + value_block);
  parallel_for(c.num_blocks(), std::max<std::int64_t>(1, (std::int64_t{1} << 19) / block_bytes),
               [&](std::int64_t begin, std::int64_t end) {
                 filler.fill_blocks(begin, end, key + begin * key_block,
                                    value == nullptr ? nullptr : value + begin * value_block, poisoned);
               });
  return c;
}

namespace {
// The generator's caches as a CacheSource: the same CacheFiller that fills
// generate_case's caches, block range by block range.
class SyntheticCacheSource final : public CacheSource {
 public:
  explicit SyntheticCacheSource(std::shared_ptr<const CacheFiller> filler) : filler_(std::move(filler)) {}
  void fill_blocks(std::int64_t begin, std::int64_t end, std::byte* key, std::byte* value) const override {
    filler_->fill_blocks(begin, end, key, value, false);
  }

 private:
  std::shared_ptr<const CacheFiller> filler_;
};
}  // namespace

Expected<Case> generate_case_sourced(const SyntheticSpec& spec) {
  auto made = generate_unfilled(spec);
  if (!made.ok()) return made.error();
  Case c = std::move(made->first);
  c.cache_source = std::make_shared<SyntheticCacheSource>(std::move(made->second));
  return c;
}

// --- presets ----------------------------------------------------------------
namespace {

SyntheticSpec model(std::string name, std::uint64_t seed, std::int64_t q_heads, std::int64_t kv_heads,
                    std::int64_t head_dim, std::string description) {
  SyntheticSpec spec;
  spec.name = std::move(name);
  spec.seed = seed;
  spec.q_heads = q_heads;
  spec.kv_heads = kv_heads;
  spec.head_dim = head_dim;
  spec.block_size = 16;
  spec.query_dtype = DType::BF16;
  spec.kv_dtype = DType::BF16;
  spec.profile = ValueProfile::LlmLike;
  spec.description = std::move(description);
  return spec;
}

// Decode sequences next to chunks of q_min..q_max new tokens.
void mixed_queries(SyntheticSpec& spec, std::int64_t q_min, std::int64_t q_max) {
  spec.query_mode = QueryMode::Mixed;
  spec.q_len_dist = LengthDist::Uniform;
  spec.q_len_min = q_min;
  spec.q_len_max = q_max;
}

void uniform_lengths(SyntheticSpec& spec, std::int64_t seqs, std::int64_t min, std::int64_t max) {
  spec.num_seqs = seqs;
  spec.seq_len_dist = LengthDist::Uniform;
  spec.seq_len_min = min;
  spec.seq_len_max = max;
}

std::vector<SyntheticSpec> all_presets() {
  std::vector<SyntheticSpec> out;
  {
    auto s = model("llama3-8b", 8001, 32, 8, 128, "Llama-3-8B decode: 32/8 heads, d128, BF16");
    uniform_lengths(s, 8, 128, 1024);
    out.push_back(s);
  }
  {
    auto s = model("llama3-8b-prefill", 8002, 32, 8, 128, "Llama-3-8B prefill of two prompts");
    uniform_lengths(s, 2, 200, 600);
    s.query_mode = QueryMode::Prefill;
    out.push_back(s);
  }
  {
    auto s = model("llama3-8b-fp8", 8003, 32, 8, 128, "Llama-3-8B decode over an fp8 E4M3 KV cache with scales");
    uniform_lengths(s, 8, 128, 1024);
    s.kv_dtype = DType::F8_E4M3;
    // Scales as a runtime picks them, amax / 448: keys reach ~15 x 4.5 sigma
    // in their outlier channels (0.05 clipped ~13% of those at 448), values
    // ~4.5 sigma.
    s.k_scale = 0.15;
    s.v_scale = 0.02;
    out.push_back(s);
  }
  {
    auto s = model("llama3-70b", 7001, 64, 8, 128, "Llama-3-70B decode: 64/8 heads, d128");
    uniform_lengths(s, 4, 256, 1536);
    out.push_back(s);
  }
  {
    auto s = model("mistral-7b-window", 7002, 32, 8, 128,
                   "Mistral-7B: sliding window 4096 over contexts longer than the window, mixed batch");
    uniform_lengths(s, 3, 4097, 4500);
    s.sliding_window = 4096;
    mixed_queries(s, 16, 64);
    out.push_back(s);
  }
  {
    auto s = model("gemma2-9b-softcap", 9001, 16, 8, 256, "Gemma-2-9B: 16/8 heads, d256, logit softcap 50");
    uniform_lengths(s, 4, 128, 768);
    s.softcap = 50.0;
    s.query_mode = QueryMode::Chunked;
    s.q_len_dist = LengthDist::Uniform;
    s.q_len_min = 1;
    s.q_len_max = 16;
    out.push_back(s);
  }
  {
    auto s = model("deepseek-192-128", 1920, 16, 16, 192, "DeepSeek-like head: K 192, V 128, 16/16 heads, mixed");
    s.v_head_dim = 128;
    uniform_lengths(s, 4, 64, 768);
    mixed_queries(s, 2, 32);
    out.push_back(s);
  }
  {
    // DeepSeek-V3/R1 decode over its latent cache as FlashMLA and vLLM hold
    // it: 128 query heads over one latent head, rows of 512 latent + 64 rope
    // columns (V: the latent), block 64. The scale is vLLM's for the model:
    // 1/sqrt(192) (the 128 + 64 query-key head before absorption) times
    // YaRN's mscale^2, mscale = 0.1 * ln(40) + 1 (rope factor 40).
    auto s = model("deepseek-v3", 3001, 128, 1, 576,
                   "DeepSeek-V3 MLA: 128 query heads over a 576/512 latent cache, block 64, mixed batch");
    s.v_head_dim = 512;
    s.latent = true;
    s.block_size = 64;
    const double mscale = 0.1 * std::log(40.0) + 1.0;
    s.scale = mscale * mscale / std::sqrt(192.0);
    uniform_lengths(s, 4, 200, 2048);
    mixed_queries(s, 2, 16);
    out.push_back(s);
  }
  {
    // Head dim 96: FlashAttention builds it, the built-in paths do not (n/a).
    auto s = model("phi3-mini", 9601, 32, 32, 96, "Phi-3-mini: 32/32 heads, d96, mixed batch");
    uniform_lengths(s, 4, 64, 1024);
    mixed_queries(s, 2, 32);
    out.push_back(s);
  }
  {
    auto s = model("mqa", 1601, 16, 1, 128, "Multi-query attention: 16 query heads over one KV head");
    uniform_lengths(s, 8, 1, 2048);
    out.push_back(s);
  }
  // gpt-oss-20b alternates sliding-window (128 keys) and full-attention
  // layers, every one with a learned sink per head: one case of each layer
  // kind (the group "gpt-oss-20b" is both).
  for (const bool window : {true, false}) {
    auto s = model(window ? "gpt-oss-20b-window" : "gpt-oss-20b-full", window ? 2001 : 2002, 64, 8, 64,
                   window ? "gpt-oss-20b sliding-window layer: 64/8 heads, d64, sinks, window 128, mixed batch"
                          : "gpt-oss-20b full-attention layer: 64/8 heads, d64, sinks, mixed batch");
    uniform_lengths(s, 4, window ? 100 : 64, window ? 1200 : 2048);
    if (window) s.sliding_window = 128;
    s.sinks = true;
    mixed_queries(s, 2, 64);
    out.push_back(s);
  }
  {
    auto s = model("large-logits", 4001, 32, 8, 128, "Logits in the hundreds: a softmax without max subtraction overflows");
    uniform_lengths(s, 4, 64, 1024);
    s.profile = ValueProfile::LargeLogits;
    out.push_back(s);
  }
  return out;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& s : all_presets()) names.push_back(s.name);
  return names;
}

Expected<SyntheticSpec> preset(const std::string& name) {
  for (auto& s : all_presets())
    if (s.name == name) return s;
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  return usage_error(fmt::format("unknown preset '{}'; known: {}", name, known), "preset");
}

const std::vector<PresetGroup>& preset_groups() {
  static const std::vector<PresetGroup> groups = {
      {"gpt-oss-20b", {"gpt-oss-20b-window", "gpt-oss-20b-full"}, "gpt-oss-20b: its window layer and its full layer"},
  };
  return groups;
}

Expected<std::vector<SyntheticSpec>> preset_cases(const std::string& name) {
  for (const auto& group : preset_groups()) {
    if (group.name != name) continue;
    std::vector<SyntheticSpec> specs;
    for (const auto& member : group.members) {
      auto spec = preset(member);
      if (!spec) return spec.error();
      specs.push_back(std::move(*spec));
    }
    return specs;
  }
  auto spec = preset(name);
  if (!spec) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    for (const auto& group : preset_groups()) known += ", " + group.name;
    return usage_error(fmt::format("unknown preset '{}'; known: {}", name, known), "preset");
  }
  return std::vector<SyntheticSpec>{std::move(*spec)};
}

// The default suite lives in suite.cpp.

}  // namespace pagecheck
