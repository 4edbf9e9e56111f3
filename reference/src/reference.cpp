// The Eigen CPU reference: float64, one step of the math per line.
//
// For each sequence s and KV head g (one work item, run in parallel):
//   1. gather K [L, dk] and V [L, dv] of the sequence through the block table,
//      dequantised (stored x means x * k_scale / v_scale);
//   2. for each tile of query tokens, stack the group's query heads as rows;
//   3. S = Q K^T * scale, capped, ALiBi's slope * (key position - query
//      position) added, masked (key_visible), softmax with the row
//      maximum subtracted (a sink logit, when the case has sinks, counts in
//      the maximum and the normaliser only), O = P V, LSE = log of the
//      normaliser.
// It never reads a slot past seq_len or a page the table does not name: those
// hold NaN in synthetic cases.
//
// A query row that sees no key (impossible under the case model's rules —
// causal rows see themselves, non-causal windows see the last key — but
// defined anyway) gets output 0 and LSE -inf.
#include "pagecheck/reference.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "pagecheck/paged_kv.hpp"
#include "pagecheck/threads.hpp"

namespace pagecheck {
namespace {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using Vector = Eigen::VectorXd;

// Query tokens per tile: a tile's rows are (token, head of the group) pairs.
constexpr std::int64_t kTokensPerTile = 64;

const std::array<double, 256>& fp8_table(DType dtype) {
  static const auto make = [](bool e4m3) {
    std::array<double, 256> table{};
    for (int bits = 0; bits < 256; ++bits)
      table[bits] = e4m3 ? fp8_e4m3_to_float(static_cast<std::uint8_t>(bits))
                         : fp8_e5m2_to_float(static_cast<std::uint8_t>(bits));
    return table;
  };
  static const std::array<double, 256> e4m3 = make(true);
  static const std::array<double, 256> e5m2 = make(false);
  return dtype == DType::F8_E4M3 ? e4m3 : e5m2;
}

// dst[k] = stored[offset + k] * scale for k < n, widened to double.
void load_row(DType dtype, const std::byte* data, std::int64_t offset, std::int64_t n, double scale,
              double* dst) {
  switch (dtype) {
    case DType::F32:
      for (std::int64_t k = 0; k < n; ++k) {
        float v;
        std::memcpy(&v, data + (offset + k) * 4, 4);
        dst[k] = static_cast<double>(v) * scale;
      }
      return;
    case DType::BF16:
      for (std::int64_t k = 0; k < n; ++k) {
        std::uint16_t bits;
        std::memcpy(&bits, data + (offset + k) * 2, 2);
        const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
        float v;
        std::memcpy(&v, &widened, 4);
        dst[k] = static_cast<double>(v) * scale;
      }
      return;
    case DType::F8_E4M3:
    case DType::F8_E5M2: {
      const auto& table = fp8_table(dtype);
      for (std::int64_t k = 0; k < n; ++k)
        dst[k] = table[static_cast<std::uint8_t>(data[offset + k])] * scale;
      return;
    }
    default:
      for (std::int64_t k = 0; k < n; ++k)
        dst[k] = load_element(dtype, data, static_cast<std::size_t>(offset + k)) * scale;
      return;
  }
}

bool is_cache_dtype(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || is_fp8(d) || d == DType::F64;
}

// The reference checks what it needs in order not to read out of bounds;
// validate_case gives users the full story before anything runs.
Status check_geometry(const Case& c) {
  const auto where = std::string("reference");
  if (c.query.rank() != 3) return invalid_input("query must have rank 3, got " + c.query.describe(), where);
  if (c.key_cache.rank() != 4 || c.value_cache.rank() != 4)
    return invalid_input("key_cache and value_cache must have rank 4", where);
  if (!is_float_dtype(c.query.dtype) || !is_cache_dtype(c.key_cache.dtype) || !is_cache_dtype(c.value_cache.dtype))
    return invalid_input("query, key_cache and value_cache must be float tensors", where);
  for (const Tensor* t : {&c.query, &c.key_cache, &c.value_cache}) {
    for (auto d : t->shape)
      if (d < 0) return invalid_input("negative dimension in " + t->describe(), where);
    if (static_cast<std::size_t>(t->numel()) * dtype_size(t->dtype) > t->nbytes)
      return invalid_input("tensor " + t->describe() + " holds fewer bytes than its shape needs", where);
  }
  const auto kv_heads = c.kv_heads(), q_heads = c.q_heads();
  if (c.block_size() <= 0) return invalid_input(fmt::format("block_size {} must be positive", c.block_size()), where);
  if (kv_heads <= 0 || q_heads % kv_heads != 0)
    return invalid_input(fmt::format("q_heads {} is not a multiple of kv_heads {}", q_heads, kv_heads), where);
  if (c.head_dim() != c.key_head_dim())
    return invalid_input(fmt::format("query head_dim {} != key head_dim {}", c.head_dim(), c.key_head_dim()), where);
  if (c.value_cache.dim(0) != c.num_blocks() || c.value_cache.dim(1) != c.key_cache.dim(1) ||
      c.value_cache.dim(2) != c.key_cache.dim(2))
    return invalid_input("key_cache and value_cache disagree on blocks, slots or heads", where);
  if (c.has_sinks() && static_cast<std::int64_t>(c.sinks.size()) != q_heads)
    return invalid_input(fmt::format("sinks has {} entries, expected q_heads = {}", c.sinks.size(), q_heads), where);
  if (c.has_alibi() && static_cast<std::int64_t>(c.alibi_slopes.size()) != q_heads)
    return invalid_input(fmt::format("alibi_slopes has {} entries, expected q_heads = {}", c.alibi_slopes.size(), q_heads),
                         where);
  const auto num_seqs = c.num_seqs();
  if (static_cast<std::int64_t>(c.query_start_loc.size()) != num_seqs + 1)
    return invalid_input(fmt::format("query_start_loc has {} entries, expected num_seqs + 1 = {}",
                                     c.query_start_loc.size(), num_seqs + 1), where);
  if (static_cast<std::int64_t>(c.table.page_indptr.size()) != num_seqs + 1)
    return invalid_input(fmt::format("block table has {} row offsets, expected {}", c.table.page_indptr.size(),
                                     num_seqs + 1), where);
  if (c.query_start_loc[0] != 0 || c.query_start_loc[num_seqs] != c.num_tokens())
    return invalid_input(fmt::format("query_start_loc must run from 0 to num_tokens {}", c.num_tokens()), where);
  const auto table_size = static_cast<std::int64_t>(c.table.page_indices.size());
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int64_t q_len = c.q_len(s), seq_len = c.seq_lens[s];
    if (q_len < 0 || q_len > seq_len)
      return invalid_input(fmt::format("sequence {}: q_len {} must be in [0, seq_len {}]", s, q_len, seq_len), where);
    const std::int64_t pages = (seq_len + c.block_size() - 1) / c.block_size();
    const std::int64_t first = c.table.page_indptr[s], end = c.table.page_indptr[s + 1];
    if (first < 0 || end > table_size || end - first < pages)
      return invalid_input(fmt::format("sequence {}: table row [{}, {}) cannot hold its {} pages", s, first, end, pages),
                           where);
    for (std::int64_t p = 0; p < pages; ++p) {
      const auto page = c.table.page_indices[first + p];
      if (page < 0 || page >= c.num_blocks())
        return invalid_input(fmt::format("sequence {}: table entry {} = {} but the cache has {} blocks", s, p, page,
                                         c.num_blocks()), where);
    }
  }
  return {};
}

// Buffers one worker thread reuses across its work items: fresh multi-
// megabyte allocations per item cost more in page faults than the gather.
struct Workspace {
  std::vector<double> key, value, query, logits, output;
  static MatrixMap view(std::vector<double>& buffer, std::int64_t rows, std::int64_t cols) {
    const auto size = static_cast<std::size_t>(rows * cols);
    if (buffer.size() < size) buffer.resize(size);
    return MatrixMap(buffer.data(), rows, cols);
  }
};

// One (sequence, KV head) work item: writes the output and LSE rows of the
// group's query heads for every query token of the sequence.
void attend_sequence_head(const Case& c, const PagedKvView& kv, std::int64_t seq, std::int64_t kv_head,
                          Workspace& ws, ReferenceResult& result) {
  const std::int64_t seq_len = kv.seq_len(seq);
  const std::int64_t q_len = c.q_len(seq);
  const std::int64_t first_token = c.query_start_loc[seq];
  const std::int64_t q_heads = c.q_heads(), dk = kv.head_dim, dv = kv.v_head_dim;
  const std::int64_t group = q_heads / kv.kv_heads;  // query heads per KV head
  const double scale = c.scale(), softcap = c.params.softcap;
  const auto key_bytes = static_cast<const std::byte*>(kv.key_data);
  const auto value_bytes = static_cast<const std::byte*>(kv.value_data);
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

  // 1. Gather K and V of the sequence through the table. A latent (MLA)
  // cache's V is the first dv columns of K: gathered once, shared by every
  // query head (one KV head: the group is all of them), never copied.
  const bool latent = c.has_latent();
  MatrixMap K = Workspace::view(ws.key, seq_len, dk);                // [L, dk]
  MatrixMap V = Workspace::view(ws.value, latent ? 0 : seq_len, dv);  // [L, dv]; latent: K's first dv columns
  for (std::int64_t j = 0; j < seq_len; ++j) {
    load_row(c.key_cache.dtype, key_bytes, kv.key_offset(seq, j, kv_head), dk, c.params.k_scale, K.row(j).data());
    if (!latent)
      load_row(c.value_cache.dtype, value_bytes, kv.value_offset(seq, j, kv_head), dv, c.params.v_scale,
               V.row(j).data());
  }

  for (std::int64_t tile_start = 0; tile_start < q_len; tile_start += kTokensPerTile) {
    const std::int64_t tile_tokens = std::min(kTokensPerTile, q_len - tile_start);
    const std::int64_t rows = tile_tokens * group;  // row r: token tile_start + r / group, head kv_head*group + r % group
    auto position = [&](std::int64_t token) { return seq_len - q_len + token; };  // absolute position of a query token

    // 2. Keys that any row of the tile can see: [key_begin, key_end).
    std::int64_t key_begin = 0, key_end = seq_len;
    if (c.params.causal) key_end = std::min(seq_len, position(tile_start + tile_tokens - 1) + 1);
    if (c.params.sliding_window > 0)
      key_begin = std::clamp<std::int64_t>(position(tile_start) - c.params.sliding_window + 1, 0, key_end);
    const std::int64_t keys = key_end - key_begin;

    MatrixMap Q = Workspace::view(ws.query, rows, dk);  // [tile_tokens * group, dk]
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t token = first_token + tile_start + r / group, head = kv_head * group + r % group;
      load_row(c.query.dtype, c.query.data, (token * q_heads + head) * dk, dk, 1.0, Q.row(r).data());
    }

    // 3. Logits, cap, ALiBi bias slope * (key position - query position), mask.
    MatrixMap S = Workspace::view(ws.logits, rows, keys);  // [rows, keys]
    S.noalias() = Q * K.middleRows(key_begin, keys).transpose();
    S *= scale;
    if (softcap > 0) S = (S.array() / softcap).tanh().matrix() * softcap;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t pos = position(tile_start + r / group);
      const double slope = c.has_alibi() ? c.alibi_slopes[static_cast<std::size_t>(kv_head * group + r % group)] : 0.0;
      for (std::int64_t k = 0; k < keys; ++k) {
        if (slope != 0.0) S(r, k) += slope * static_cast<double>(key_begin + k - pos);
        if (!key_visible(key_begin + k, pos, c.params.causal, c.params.sliding_window)) S(r, k) = kMinusInf;
      }
    }

    // 4. Softmax with the row maximum subtracted; O = P V; LSE. A sink logit
    // joins the row's maximum and its normaliser (exp(sink - max)), never P V.
    Vector row_max = keys > 0 ? Vector(S.rowwise().maxCoeff()) : Vector::Constant(rows, kMinusInf);  // [rows]
    Vector sink = Vector::Constant(rows, kMinusInf);                   // [rows]: the row's head's sink logit
    if (c.has_sinks())
      for (std::int64_t r = 0; r < rows; ++r) sink(r) = c.sinks[static_cast<std::size_t>(kv_head * group + r % group)];
    row_max = row_max.cwiseMax(sink);
    for (std::int64_t r = 0; r < rows; ++r)
      if (row_max(r) == kMinusInf) row_max(r) = 0;  // a row with no visible key and no sink: P = 0 below
    MatrixMap& P = S;                                                  // [rows, keys], overwrites S
    P = (S.colwise() - row_max).array().exp().matrix();                // exp(-inf) = 0 for masked keys
    const Vector normaliser = P.rowwise().sum() + (sink - row_max).array().exp().matrix();  // [rows]
    MatrixMap O = Workspace::view(ws.output, rows, dv);                // [rows, dv], unnormalised
    if (latent) {
      // The stored latent x is x * k_scale in K and x * v_scale in V.
      O.noalias() = P * K.block(key_begin, 0, keys, dv);
      O *= c.params.v_scale / c.params.k_scale;
    } else {
      O.noalias() = P * V.middleRows(key_begin, keys);
    }

    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t token = first_token + tile_start + r / group, head = kv_head * group + r % group;
      const bool sees_a_key = normaliser(r) > 0;
      double* out = result.output.data() + (token * q_heads + head) * dv;
      for (std::int64_t d = 0; d < dv; ++d) out[d] = sees_a_key ? O(r, d) / normaliser(r) : 0.0;
      result.lse[token * q_heads + head] = sees_a_key ? row_max(r) + std::log(normaliser(r)) : kMinusInf;
    }
  }
}

class ReferencePath final : public Path {
 public:
  std::string name() const override { return "reference"; }
  bool needs_gpu() const override { return false; }
  Applicability applies(const Case&) const override { return {}; }
  Expected<PathRun> run(const Case& c, const RunOptions& options) override {
    const auto start = std::chrono::steady_clock::now();
    auto result = reference_attention(c);
    if (!result.ok()) return result.error();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    PathRun run;
    run.output.assign(result->output.begin(), result->output.end());
    run.lse.assign(result->lse.begin(), result->lse.end());
    if (options.measure) {
      StageTiming total;
      total.stage = "total";
      total.median_ms = total.min_ms = total.max_ms = ms;
      total.repeats = 1;
      run.timings.push_back(total);
    }
    run.notes["arithmetic"] = "float64 (Eigen), CPU";
    return run;
  }
};

}  // namespace

namespace {

// Caches made on demand (c.cache_source): the pages of a few sequences at a
// time, at most this many bytes unless one sequence needs more.
constexpr std::int64_t kSourcedBatchBytes = std::int64_t{64} << 20;

// Runs item(i, workspace) for every i in [0, items) on up to
// workspaces.size() threads, each with its own workspace (kept across calls:
// fresh multi-megabyte buffers cost page faults).
template <class Item>
Status attend_items(std::int64_t items, std::vector<Workspace>& workspaces, const Item& item) {
  const auto workers = std::clamp<std::int64_t>(static_cast<std::int64_t>(workspaces.size()), 1, std::max<std::int64_t>(items, 1));
  std::atomic<std::int64_t> next_item{0}, next_worker{0};
  std::mutex failure_mutex;
  std::string failure;
  run_on_threads(workers, [&] {
    Workspace& ws = workspaces[static_cast<std::size_t>(next_worker++)];
    try {
      for (std::int64_t i = next_item++; i < items; i = next_item++) item(i, ws);
    } catch (const std::exception& e) {
      std::lock_guard lock(failure_mutex);
      failure = e.what();
      next_item = items;
    }
  });
  if (!failure.empty()) return runtime_error("reference failed: " + failure, "reference");
  return {};
}

// The reference over caches that a cache_source makes: consecutive
// sequences whose pages fit kSourcedBatchBytes are one batch; the batch's
// distinct pages are made into one compact buffer (on the workers), the
// view's table points the batch's entries at it, and the batch's (sequence,
// KV head) items run on that view. Same values, same arithmetic, so the same
// result as over held caches; the buffer is reused batch after batch, so
// only its first batch touches fresh memory.
Status attend_sourced(const Case& c, const PagedKvView& kv, std::vector<Workspace>& workspaces,
                      ReferenceResult& result) {
  const std::int64_t key_block = c.key_block_bytes(), value_block = c.value_block_bytes();
  const std::int64_t page_bytes = std::max<std::int64_t>(1, key_block + value_block);
  std::vector<std::int32_t> compact_of(static_cast<std::size_t>(c.num_blocks()), -1);  // physical -> compact, this batch
  std::vector<std::int32_t> indices = c.table.page_indices;                           // the batch's view of the table
  std::vector<std::int64_t> physical;                                                 // compact -> physical
  std::vector<std::uint64_t> key_store, value_store;  // 8-byte words: aligned for every dtype
  for (std::int64_t first = 0; first < c.num_seqs();) {
    // 1. The batch [first, last) and its distinct pages.
    physical.clear();
    std::int64_t last = first;
    while (last < c.num_seqs()) {
      const std::int64_t before = static_cast<std::int64_t>(physical.size());
      for (std::int64_t p = 0; p < kv.num_pages(last); ++p) {
        const std::int64_t entry = kv.page_indptr[last] + p;
        const std::int32_t page = c.table.page_indices[static_cast<std::size_t>(entry)];
        std::int32_t& compact = compact_of[static_cast<std::size_t>(page)];
        if (compact < 0) {
          compact = static_cast<std::int32_t>(physical.size());
          physical.push_back(page);
        }
        indices[static_cast<std::size_t>(entry)] = compact;
      }
      if (last > first && static_cast<std::int64_t>(physical.size()) * page_bytes > kSourcedBatchBytes) {
        // Over the budget: this sequence starts the next batch (its pages
        // were appended last; drop them again).
        for (std::int64_t k = before; k < static_cast<std::int64_t>(physical.size()); ++k)
          compact_of[static_cast<std::size_t>(physical[static_cast<std::size_t>(k)])] = -1;
        physical.resize(static_cast<std::size_t>(before));
        break;
      }
      ++last;
    }
    // 2. Its pages, made into the compact buffer on the workers.
    const auto pages = static_cast<std::int64_t>(physical.size());
    const auto words = [](std::int64_t bytes) { return static_cast<std::size_t>((bytes + 7) / 8); };
    if (key_store.size() < words(pages * key_block)) key_store.resize(words(pages * key_block));
    if (value_store.size() < words(pages * value_block)) value_store.resize(words(pages * value_block));
    auto* const key = reinterpret_cast<std::byte*>(key_store.data());
    auto* const value = reinterpret_cast<std::byte*>(value_store.data());
    const auto fill_start = std::chrono::steady_clock::now();
    PC_TRY(attend_items(pages, workspaces, [&](std::int64_t i, Workspace&) {
      const std::int64_t page = physical[static_cast<std::size_t>(i)];
      // A latent cache's values are its keys (the reference reads only those).
      fill_cache_blocks(c, page, page + 1, key + i * key_block, c.has_latent() ? nullptr : value + i * value_block);
    }));
    result.cache_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - fill_start).count();
    // 3. The batch's items over the compact pages.
    PagedKvView batch = kv;
    batch.key_data = key;
    batch.value_data = value;
    batch.page_indices = indices.data();
    batch.num_blocks = pages;
    const std::int64_t kv_heads = c.kv_heads();
    PC_TRY(attend_items((last - first) * kv_heads, workspaces, [&](std::int64_t i, Workspace& ws) {
      attend_sequence_head(c, batch, first + i / kv_heads, i % kv_heads, ws, result);
    }));
    for (std::int64_t page : physical) compact_of[static_cast<std::size_t>(page)] = -1;
    first = last;
  }
  return {};
}

}  // namespace

Expected<ReferenceResult> reference_attention(const Case& c, int threads) {
  PC_TRY(check_geometry(c));
  const PagedKvView kv = c.host_view();
  ReferenceResult result;
  result.output.assign(static_cast<std::size_t>(c.num_tokens() * c.q_heads() * c.v_head_dim()), 0.0);
  result.lse.assign(static_cast<std::size_t>(c.num_tokens() * c.q_heads()), 0.0);

  const std::int64_t items = c.num_seqs() * c.kv_heads();  // item i: sequence i / kv_heads, KV head i % kv_heads
  std::int64_t workers = threads > 0 ? threads : static_cast<std::int64_t>(std::thread::hardware_concurrency());
  workers = std::clamp<std::int64_t>(workers, 1, std::max<std::int64_t>(items, 1));
  std::vector<Workspace> workspaces(static_cast<std::size_t>(workers));
  if (!c.caches_held()) {
    PC_TRY(attend_sourced(c, kv, workspaces, result));
    return result;
  }
  PC_TRY(attend_items(items, workspaces, [&](std::int64_t i, Workspace& ws) {
    attend_sequence_head(c, kv, i / c.kv_heads(), i % c.kv_heads(), ws, result);
  }));
  return result;
}

std::unique_ptr<Path> make_reference_path() { return std::make_unique<ReferencePath>(); }

}  // namespace pagecheck
