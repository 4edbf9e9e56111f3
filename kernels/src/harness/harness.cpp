// The path harness: poison, run, repeat, graph capture and replay with
// changed tables, timing. See harness.cuh.
#include "harness/harness.cuh"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "harness/stream_gate.cuh"
#include "pagecheck/timing_stats.hpp"

namespace pagecheck::gpu {

// ---- byte and FLOP model ----------------------------------------------------

AttentionModel attention_model(const Case& c) {
  AttentionModel m;
  const double kv_elem = static_cast<double>(dtype_size(c.key_cache.dtype));
  const double dims = static_cast<double>(c.key_head_dim() + c.v_head_dim());
  const std::int64_t window = c.params.sliding_window;
  double keys_read = 0, visible_pairs = 0, pages_read = 0;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    const std::int64_t len = c.seq_lens[static_cast<std::size_t>(s)];
    const std::int64_t q_len = c.q_len(s);
    // Query token i of the sequence sits at position len - q_len + i.
    const std::int64_t first_pos = len - q_len;
    std::int64_t lo = 0;
    if (window > 0) lo = std::max<std::int64_t>(0, first_pos - window + 1);
    keys_read += static_cast<double>(std::max<std::int64_t>(0, len - lo));
    if (len > 0) pages_read += static_cast<double>((len - 1) / c.block_size() - lo / c.block_size() + 1);
    for (std::int64_t i = 0; i < q_len; ++i) {
      const std::int64_t pos = first_pos + i;
      std::int64_t hi = c.params.causal ? std::min(pos + 1, len) : len;  // exclusive
      std::int64_t start = window > 0 ? std::max<std::int64_t>(0, pos - window + 1) : 0;
      visible_pairs += static_cast<double>(std::max<std::int64_t>(0, hi - start));
    }
  }
  m.kv_bytes = keys_read * static_cast<double>(c.kv_heads()) * dims * kv_elem;
  m.q_bytes = static_cast<double>(c.query.nbytes);
  m.o_bytes = static_cast<double>(c.num_tokens() * c.q_heads() * c.v_head_dim()) *
              static_cast<double>(dtype_size(c.query.dtype));
  m.table_bytes = pages_read * 4.0 + static_cast<double>(c.num_seqs()) * (4.0 + 8.0 + 4.0);
  m.flops = 2.0 * visible_pairs * dims * static_cast<double>(c.q_heads());
  return m;
}

namespace {

// ---- poison -----------------------------------------------------------------
// Signalling-NaN patterns that no arithmetic produces (hardware NaNs are
// quiet), so an element still holding one was never written.
constexpr std::uint32_t kPoisonF32 = 0x7FBADBADu;
constexpr std::uint16_t kPoisonF16 = 0x7DADu;
constexpr std::uint16_t kPoisonBF16 = 0x7FADu;

Status poison_output(const DeviceCase& d, cudaStream_t stream) {
  const std::int64_t n = d.output_elements();
  switch (d.view.output_dtype) {
    case DType::F32: PC_TRY(fill_pattern_u32(d.output.get(), n, kPoisonF32, stream)); break;
    case DType::F16: PC_TRY(fill_pattern_u16(d.output.get(), n, kPoisonF16, stream)); break;
    case DType::BF16: PC_TRY(fill_pattern_u16(d.output.get(), n, kPoisonBF16, stream)); break;
    default:
      return runtime_error(fmt::format("output dtype {} is not supported", dtype_name(d.view.output_dtype)));
  }
  return fill_pattern_u32(d.lse.get(), d.lse_elements(), kPoisonF32, stream);
}

// The path's workspace (split partials, fmha's contiguous K/V) is filled
// with 0xFF bytes, a NaN in F32, F16 and BF16, before every run: a kernel
// that reads a slot no stage of this run wrote (a skipped store, a stale
// partial of an earlier run) then makes NaN instead of a plausible stale
// value. Every path's kernels write what they later read within one run
// (launchers.cuh), so a correct path never sees these bytes.
Status poison_workspace(const PreparedPath& p, cudaStream_t stream) {
  for (const auto& buffer : p.workspace)
    if (!buffer.empty()) CUDA_TRY(cudaMemsetAsync(buffer.get(), 0xFF, buffer.bytes(), stream));
  return {};
}

std::int64_t count_poison(DType dtype, const std::vector<std::byte>& raw, std::int64_t count) {
  std::int64_t poisoned = 0;
  if (dtype == DType::F32) {
    for (std::int64_t i = 0; i < count; ++i) {
      std::uint32_t v;
      std::memcpy(&v, raw.data() + i * 4, 4);
      poisoned += v == kPoisonF32;
    }
  } else {
    const std::uint16_t pattern = dtype == DType::F16 ? kPoisonF16 : kPoisonBF16;
    for (std::int64_t i = 0; i < count; ++i) {
      std::uint16_t v;
      std::memcpy(&v, raw.data() + i * 2, 2);
      poisoned += v == pattern;
    }
  }
  return poisoned;
}

std::int64_t count_differences(const std::vector<std::byte>& a, const std::vector<std::byte>& b, std::size_t elem) {
  std::int64_t differ = 0;
  for (std::size_t i = 0; i + elem <= a.size(); i += elem) differ += std::memcmp(a.data() + i, b.data() + i, elem) != 0;
  return differ;
}

// ---- runs -------------------------------------------------------------------

struct Snapshot {
  std::vector<std::byte> output;
  std::vector<std::byte> lse;
  // eager_run: output and LSE elements that changed between the read after
  // synchronising the path's stream and the read after a device-wide
  // synchronise (the snapshot holds the latter): work outside the stream.
  std::int64_t changed_after_device_sync = 0;
};

Expected<Snapshot> read_back(const DeviceCase& d, cudaStream_t stream) {
  Snapshot snap;
  snap.output.resize(d.output.bytes());
  snap.lse.resize(d.lse.bytes());
  CUDA_TRY(cudaMemcpyAsync(snap.output.data(), d.output.get(), d.output.bytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_TRY(cudaMemcpyAsync(snap.lse.data(), d.lse.get(), d.lse.bytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_TRY(cudaStreamSynchronize(stream));
  return snap;
}

Status launch_stages(const PreparedPath& p, cudaStream_t stream) {
  for (const auto& stage : p.stages) {
    auto st = stage.launch(stream);
    if (!st) return Error{st.error().code, st.error().message, stage.name};
  }
  return {};
}

// The plan step of a planned path, after the workspace is poisoned: what
// launch finds in the plan-owned part is what this plan wrote.
Status plan_path(const DeviceCase& d, const PreparedPath& p, cudaStream_t stream) {
  return p.plan_step ? p.plan_step(d, stream) : Status{};
}

// Poison, plan, run and read back. The legacy default stream is held shut
// from before the launch until the output has been read after synchronising
// the path's stream (stream_gate.cuh); then the device is synchronised and
// the output read again. A path that keeps to its stream reads the same
// twice; one that ran work elsewhere (the legacy default stream, a stream of
// its own it never joined) shows it as changed elements.
Expected<Snapshot> eager_run(const DeviceCase& d, const PreparedPath& p, LegacyStreamGate& gate, cudaStream_t stream) {
  PC_TRY(poison_output(d, stream));
  PC_TRY(poison_workspace(p, stream));
  PC_TRY(plan_path(d, p, stream));
  PC_TRY(gate.close(stream));
  const Status launched = launch_stages(p, stream);
  const cudaError_t synced = launched ? cudaStreamSynchronize(stream) : cudaSuccess;
  auto on_stream = launched && synced == cudaSuccess ? read_back(d, stream) : Expected<Snapshot>(Snapshot{});
  const Status opened = gate.open(stream);
  if (!launched) return launched.error();
  CUDA_TRY(synced);
  if (!on_stream) return on_stream.error();
  PC_TRY(opened);
  CUDA_TRY(cudaDeviceSynchronize());
  auto after = read_back(d, stream);
  if (!after) return after.error();
  after->changed_after_device_sync = count_differences(on_stream->output, after->output, dtype_size(d.view.output_dtype)) +
                                     count_differences(on_stream->lse, after->lse, 4);
  return after;
}

// Captures the stages once into a graph (at the case's capacity: the view's
// capacity fields are what the launchers size their grids from).
Expected<GraphExec> capture(const PreparedPath& p, cudaStream_t stream) {
  CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status launched = launch_stages(p, stream);
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &raw);
  Graph graph(raw);
  if (!launched) return launched.error();
  CUDA_TRY(ended);
  return instantiate(graph);
}

// ---- graph check ------------------------------------------------------------

// Lengths for one round of the graph check: round 0 lengthens odd sequences
// and shortens even ones, round 1 the reverse; a sequence that cannot move
// one way moves the other. Never above the capacity or what the sequence's
// table entries cover, never below its q_len (or 1).
std::vector<std::int32_t> changed_lengths(const DeviceCase& d, int round) {
  const std::int64_t bs = d.view.kv.block_size;
  const std::int64_t capacity = d.view.max_seq_len;
  std::vector<std::int32_t> lens = d.host_seq_lens;
  for (std::size_t s = 0; s < lens.size(); ++s) {
    const std::int64_t len = lens[s];
    const std::int64_t entries = d.host_page_indptr[s + 1] - d.host_page_indptr[s];
    const std::int64_t max_len = std::min(capacity, entries * bs);
    const std::int64_t min_len = std::max<std::int64_t>(1, d.q_len(static_cast<std::int64_t>(s)));
    const std::int64_t longer = std::min(max_len, len + std::max<std::int64_t>(1, len / 2) + bs / 2 + 1);
    const std::int64_t shorter = std::max(min_len, len - std::max<std::int64_t>(1, len / 3) - 1);
    const bool grow = (static_cast<int>(s) + round) % 2 == 1;
    std::int64_t next = grow ? longer : shorter;
    if (next == len) next = grow ? shorter : longer;
    lens[s] = static_cast<std::int32_t>(std::max(next, std::min(len, min_len)));
  }
  return lens;
}

// ---- keys a shortened sequence no longer has --------------------------------
// A kernel that keeps the lengths of an earlier call (a copy of seq_lens
// made once, that the table update never reaches) reads past a shortened
// sequence's new length, where the old keys still hold valid numbers: its
// replay and its eager run agree on the stale result. So each round changes
// the first keys past every shortened sequence's new length that no sequence
// sees any more (a page may be shared) to other finite numbers, runs eagerly
// again and asks for the same bits. A kernel that masks what lies past the
// length (select, -inf, a zero weight) gives the same bits whatever the
// masked keys hold; finite numbers, not NaN, so that a mask by arithmetic
// (0 * v, s + -inf) stays clean. Two ranges a sequence: the first keys past
// the new length (a kernel that reads a little too far) and the last keys
// before the old one (a kernel that kept the old length reads them, its
// query's own key and, with a sliding window, only the keys next to it:
// the device's isolation check of session 10 met a decode case with a
// window of 5 shortened by more than kChangedKeysPerSeq, where the first
// range alone did not reach the stale kernel's window).
constexpr std::int64_t kChangedKeysPerSeq = 16;
constexpr std::size_t kChangedSeqs = 16;
// 0x3C in every byte: 1.06 in F16, 0.0115 in BF16 and F32, 1.5 in E4M3, 1.0
// in E5M2: finite in every KV dtype.
constexpr int kChangedKeyByte = 0x3C;

// Slots [first, end) of one page.
struct SlotRange {
  std::int64_t page = 0, first = 0, end = 0;
};

// The slots that sequences lost in this round (from `old_lens` down to the
// current lengths: the first and the last kChangedKeysPerSeq of each, for
// at most kChangedSeqs sequences) and that no sequence sees at its current
// length.
std::vector<SlotRange> dropped_slots(const DeviceCase& d, const std::vector<std::int32_t>& old_lens) {
  const std::int64_t bs = d.view.kv.block_size;
  const auto entry = [&](std::size_t s, std::int64_t token) {
    return static_cast<std::int64_t>(d.host_page_indices[static_cast<std::size_t>(d.host_page_indptr[s] + token / bs)]);
  };
  // Per page, how many leading slots some sequence still sees (each sees a
  // prefix of each of its pages, so together they see a prefix too).
  std::map<std::int64_t, std::int64_t> seen;
  for (std::size_t s = 0; s < d.host_seq_lens.size(); ++s)
    for (std::int64_t token = 0; token < d.host_seq_lens[s]; token += bs) {
      std::int64_t& slots = seen[entry(s, token)];
      slots = std::max(slots, std::min(bs, d.host_seq_lens[s] - token));
    }
  std::vector<SlotRange> out;
  std::size_t seqs = 0;
  for (std::size_t s = 0; s < d.host_seq_lens.size() && seqs < kChangedSeqs; ++s) {
    const std::int64_t now = d.host_seq_lens[s];
    if (now >= old_lens[s]) continue;
    ++seqs;
    const std::int64_t old = old_lens[s];
    const std::int64_t head_end = std::min<std::int64_t>(old, now + kChangedKeysPerSeq);
    const std::int64_t tail_begin = std::max<std::int64_t>(head_end, old - kChangedKeysPerSeq);
    const std::pair<std::int64_t, std::int64_t> spans[2] = {{now, head_end}, {tail_begin, old}};
    for (const auto& [begin, end] : spans)
      for (std::int64_t token = begin; token < end; token = (token / bs + 1) * bs) {
        const std::int64_t page = entry(s, token);
        const auto found = seen.find(page);
        const std::int64_t first = std::max(token % bs, found == seen.end() ? 0 : found->second);
        const std::int64_t last = std::min(bs, end - token / bs * bs);
        if (first < last) out.push_back({page, first, last});
      }
  }
  return out;
}

// The rows of `ranges` in one cache (keys or values): each range as blocks
// of `height` rows of `width` bytes, `pitch` bytes apart.
struct RowBlock {
  std::byte* first = nullptr;
  std::size_t pitch = 0, width = 0, height = 0;
};

std::vector<RowBlock> row_blocks(std::byte* cache, const CacheStrides& st, std::int64_t kv_heads, std::int64_t dim,
                                 std::size_t elem, const std::vector<SlotRange>& ranges) {
  std::vector<RowBlock> out;
  // NHD: a slot's heads lie side by side, one row per slot.
  const bool heads_side_by_side = st.head == dim && st.slot == kv_heads * dim;
  for (const auto& r : ranges) {
    const std::int64_t heads = heads_side_by_side ? 1 : kv_heads;
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t offset = r.page * st.block + r.first * st.slot + h * st.head;
      out.push_back({cache + offset * static_cast<std::int64_t>(elem), static_cast<std::size_t>(st.slot) * elem,
                     static_cast<std::size_t>(heads_side_by_side ? kv_heads * dim : dim) * elem,
                     static_cast<std::size_t>(r.end - r.first)});
    }
  }
  return out;
}

// Runs `p` again with the keys and values of `ranges` changed (and put back
// after): the output and LSE elements that differ from `eager`.
Expected<std::int64_t> changed_by_dropped_keys(DeviceCase& d, const PreparedPath& p, LegacyStreamGate& gate,
                                               const std::vector<SlotRange>& ranges, const Snapshot& eager,
                                               cudaStream_t stream) {
  const std::size_t elem = dtype_size(d.view.kv_dtype);
  std::vector<RowBlock> blocks = row_blocks(d.key_cache.as<std::byte>(), d.view.kv.key_strides, d.view.kv.kv_heads,
                                            d.view.kv.head_dim, elem, ranges);
  const std::vector<RowBlock> values = row_blocks(d.value_cache.as<std::byte>(), d.view.kv.value_strides,
                                                  d.view.kv.kv_heads, d.view.kv.v_head_dim, elem, ranges);
  blocks.insert(blocks.end(), values.begin(), values.end());
  std::size_t bytes = 0;
  for (const auto& b : blocks) bytes += b.width * b.height;
  auto saved = device_alloc(bytes);
  if (!saved) return saved.error();
  std::size_t at = 0;
  for (const auto& b : blocks) {
    CUDA_TRY(cudaMemcpy2DAsync(saved->as<std::byte>() + at, b.width, b.first, b.pitch, b.width, b.height,
                               cudaMemcpyDeviceToDevice, stream));
    CUDA_TRY(cudaMemset2DAsync(b.first, b.pitch, kChangedKeyByte, b.width, b.height, stream));
    at += b.width * b.height;
  }
  auto changed = eager_run(d, p, gate, stream);
  at = 0;
  for (const auto& b : blocks) {
    CUDA_TRY(cudaMemcpy2DAsync(b.first, b.pitch, saved->as<std::byte>() + at, b.width, b.width, b.height,
                               cudaMemcpyDeviceToDevice, stream));
    at += b.width * b.height;
  }
  CUDA_TRY(cudaStreamSynchronize(stream));
  if (!changed) return changed.error();
  return count_differences(eager.output, changed->output, dtype_size(d.view.output_dtype)) +
         count_differences(eager.lse, changed->lse, 4);
}

struct GraphCheckResult {
  std::vector<std::string> failures;
  std::vector<std::string> done;  // what each round changed, for the notes
  std::int64_t changed_after_device_sync = 0;  // the most of any eager run (Snapshot)
};

// Whether sequence `s`'s output rows and LSE differ between two snapshots.
bool sequence_differs(const DeviceCase& d, const Snapshot& a, const Snapshot& b, std::size_t s) {
  const std::int64_t first = d.host_query_start_loc[s], last = d.host_query_start_loc[s + 1];
  const std::size_t out_row = static_cast<std::size_t>(d.view.q_heads * d.view.kv.v_head_dim) *
                              dtype_size(d.view.output_dtype);
  const std::size_t lse_row = static_cast<std::size_t>(d.view.q_heads) * 4;
  const auto differ = [](const std::vector<std::byte>& x, const std::vector<std::byte>& y, std::size_t from,
                         std::size_t to) {
    return to > from && to <= x.size() && to <= y.size() && std::memcmp(x.data() + from, y.data() + from, to - from) != 0;
  };
  return differ(a.output, b.output, first * out_row, last * out_row) ||
         differ(a.lse, b.lse, first * lse_row, last * lse_row);
}

// `before`: the first eager run, on the case as uploaded. Besides replay ==
// eager, round 1 asks that the new lengths reach the kernels at all: the
// last key of the first sequence that grew (a key only the new length
// makes visible, and the query at the last position always sees it) is set
// to NaN for that round, so a path that reads the new length must give that
// sequence a NaN, i.e. another output than before. A path that keeps reading
// the lengths of upload time (a copy the table update never reaches)
// replays and runs eagerly alike, and would pass replay == eager.
Expected<GraphCheckResult> graph_check(DeviceCase& d, const PreparedPath& p, const GraphExec& exec,
                                       const Snapshot& before, LegacyStreamGate& gate, cudaStream_t stream) {
  GraphCheckResult result;
  const auto original_indices = d.host_page_indices;
  const auto original_lens = d.host_seq_lens;
  const std::int64_t bs = d.view.kv.block_size;
  const std::size_t out_elem = dtype_size(d.view.output_dtype);

  // The free page's own bytes (key, then value), saved while round 0's move
  // uses it, and the page the move emptied (-1: none).
  DeviceBuffer saved_spare;
  std::int64_t moved_from = -1;
  const std::size_t kb = d.key_page_bytes(), vb = d.value_page_bytes();
  std::byte* const key = d.key_cache.as<std::byte>();
  std::byte* const value = d.value_cache.as<std::byte>();

  for (int round = 0; round < 2; ++round) {
    d.host_page_indices = original_indices;
    d.host_seq_lens = changed_lengths(d, round);
    std::int64_t longer = 0, shorter = 0;
    for (std::size_t s = 0; s < original_lens.size(); ++s) {
      longer += d.host_seq_lens[s] > original_lens[s];
      shorter += d.host_seq_lens[s] < original_lens[s];
      // Entries that a longer context now reads must name real pages: a
      // dense table's padding may hold anything; point it at the sequence's
      // first page.
      const std::int64_t used = (d.host_seq_lens[s] + bs - 1) / bs;
      const std::int64_t base = d.host_page_indptr[s];
      for (std::int64_t e = 0; e < used; ++e) {
        auto& page = d.host_page_indices[static_cast<std::size_t>(base + e)];
        if (page < 0 || page >= d.view.kv.num_blocks || page == d.spare_page) page = d.host_page_indices[static_cast<std::size_t>(base)];
      }
    }
    std::string change = fmt::format("round {}: {} longer, {} shorter", round + 1, longer, shorter);
    if (round == 0 && d.spare_page >= 0 && !d.host_seq_lens.empty()) {
      // Move the middle page of the longest sequence to the free page, and
      // fill the page it left with NaN bytes: a replay that still reads the
      // table of capture time then reads NaN where the eager run reads the
      // moved page (with the old page intact the two would agree anyway).
      const auto longest = static_cast<std::size_t>(
          std::max_element(d.host_seq_lens.begin(), d.host_seq_lens.end()) - d.host_seq_lens.begin());
      const std::int64_t used = (d.host_seq_lens[longest] + bs - 1) / bs;
      const auto entry = static_cast<std::size_t>(d.host_page_indptr[longest] + used / 2);
      const std::int64_t from = d.host_page_indices[entry];
      auto scratch = device_alloc(kb + vb);
      if (!scratch) return scratch.error();
      saved_spare = std::move(*scratch);
      CUDA_TRY(cudaMemcpyAsync(saved_spare.as<std::byte>(), key + d.spare_page * kb, kb, cudaMemcpyDeviceToDevice, stream));
      CUDA_TRY(cudaMemcpyAsync(saved_spare.as<std::byte>() + kb, value + d.spare_page * vb, vb, cudaMemcpyDeviceToDevice,
                               stream));
      CUDA_TRY(cudaMemcpyAsync(key + d.spare_page * kb, key + from * kb, kb, cudaMemcpyDeviceToDevice, stream));
      CUDA_TRY(cudaMemcpyAsync(value + d.spare_page * vb, value + from * vb, vb, cudaMemcpyDeviceToDevice, stream));
      CUDA_TRY(cudaMemsetAsync(key + from * kb, 0xFF, kb, stream));
      CUDA_TRY(cudaMemsetAsync(value + from * vb, 0xFF, vb, stream));
      moved_from = from;
      d.host_page_indices[entry] = static_cast<std::int32_t>(d.spare_page);
      change += fmt::format(", page {} of seq {} moved to free page {}", from, longest, d.spare_page);
    }
    // Round 1's NaN key: key (new length - 1) of the first sequence that grew,
    // every KV head; its bytes are saved and put back after the round.
    std::int64_t nan_seq = -1;
    DeviceBuffer saved_key;
    std::vector<std::int64_t> nan_offsets;  // element offsets of the key's head rows
    const std::size_t head_bytes = static_cast<std::size_t>(d.view.kv.head_dim) * dtype_size(d.view.kv_dtype);
    if (round == 0) {
      for (std::size_t s = 0; s < original_lens.size() && nan_seq < 0; ++s)
        if (d.host_seq_lens[s] > original_lens[s]) nan_seq = static_cast<std::int64_t>(s);
    }
    if (nan_seq >= 0) {
      const std::int64_t token = d.host_seq_lens[static_cast<std::size_t>(nan_seq)] - 1;
      const std::int64_t page =
          d.host_page_indices[static_cast<std::size_t>(d.host_page_indptr[static_cast<std::size_t>(nan_seq)] + token / bs)];
      const CacheStrides& st = d.view.kv.key_strides;
      auto scratch = device_alloc(head_bytes * static_cast<std::size_t>(d.view.kv.kv_heads));
      if (!scratch) return scratch.error();
      saved_key = std::move(*scratch);
      for (std::int64_t h = 0; h < d.view.kv.kv_heads; ++h) {
        const std::int64_t offset = page * st.block + (token % bs) * st.slot + h * st.head;
        std::byte* const row = key + offset * static_cast<std::int64_t>(dtype_size(d.view.kv_dtype));
        CUDA_TRY(cudaMemcpyAsync(saved_key.as<std::byte>() + h * head_bytes, row, head_bytes, cudaMemcpyDeviceToDevice,
                                 stream));
        CUDA_TRY(cudaMemsetAsync(row, 0xFF, head_bytes, stream));
        nan_offsets.push_back(offset);
      }
      change += fmt::format(", key {} of seq {} set to NaN", token, nan_seq);
    }
    PC_TRY(d.upload_table(stream));

    PC_TRY(poison_output(d, stream));
    PC_TRY(poison_workspace(p, stream));
    PC_TRY(plan_path(d, p, stream));  // with the changed lengths: the graph replays what was captured
    CUDA_TRY(cudaGraphLaunch(exec.get(), stream));
    CUDA_TRY(cudaStreamSynchronize(stream));
    auto replay = read_back(d, stream);
    if (!replay) return replay.error();
    auto eager = eager_run(d, p, gate, stream);
    if (!eager) return eager.error();
    result.changed_after_device_sync = std::max(result.changed_after_device_sync, eager->changed_after_device_sync);
    const std::int64_t out_diff = count_differences(replay->output, eager->output, out_elem);
    const std::int64_t lse_diff = count_differences(replay->lse, eager->lse, 4);
    if (out_diff > 0 || lse_diff > 0)
      result.failures.push_back(fmt::format("graph replay differs from an eager run after changing the table ({}): {} "
                                            "output and {} LSE elements differ",
                                            change, out_diff, lse_diff));
    const std::int64_t unwritten = count_poison(d.view.output_dtype, eager->output, d.output_elements());
    if (unwritten > 0)
      result.failures.push_back(
          fmt::format("after changing the table ({}): {} output elements unwritten", change, unwritten));
    if (nan_seq >= 0) {
      if (!sequence_differs(d, before, *eager, static_cast<std::size_t>(nan_seq)))
        result.failures.push_back(fmt::format(
            "the changed lengths did not reach the kernels ({}): seq {} gave the same output and LSE as before, "
            "though its new last key is NaN",
            change, nan_seq));
    }
    if (const std::vector<SlotRange> dropped = dropped_slots(d, original_lens); !dropped.empty()) {
      std::int64_t keys = 0;
      for (const auto& r : dropped) keys += r.end - r.first;
      auto changed = changed_by_dropped_keys(d, p, gate, dropped, *eager, stream);
      if (!changed) return changed.error();
      if (*changed > 0)
        result.failures.push_back(fmt::format(
            "the changed lengths did not reach the kernels ({}): {} keys past the new lengths of shortened "
            "sequences, which no sequence has any more, were changed and {} output and LSE elements changed with "
            "them: the kernel reads keys past a sequence's length (lengths kept from an earlier call?)",
            change, keys, *changed));
    }
    if (nan_seq >= 0) {
      for (std::size_t h = 0; h < nan_offsets.size(); ++h)
        CUDA_TRY(cudaMemcpyAsync(key + nan_offsets[h] * static_cast<std::int64_t>(dtype_size(d.view.kv_dtype)),
                                 saved_key.as<std::byte>() + h * head_bytes, head_bytes, cudaMemcpyDeviceToDevice,
                                 stream));
      CUDA_TRY(cudaStreamSynchronize(stream));
    }
    result.done.push_back(change);
    if (moved_from >= 0) {
      // Put the moved page back where it was and the free page's bytes back.
      CUDA_TRY(cudaMemcpyAsync(key + moved_from * kb, key + d.spare_page * kb, kb, cudaMemcpyDeviceToDevice, stream));
      CUDA_TRY(cudaMemcpyAsync(value + moved_from * vb, value + d.spare_page * vb, vb, cudaMemcpyDeviceToDevice, stream));
      CUDA_TRY(cudaMemcpyAsync(key + d.spare_page * kb, saved_spare.as<std::byte>(), kb, cudaMemcpyDeviceToDevice, stream));
      CUDA_TRY(cudaMemcpyAsync(value + d.spare_page * vb, saved_spare.as<std::byte>() + kb, vb, cudaMemcpyDeviceToDevice,
                               stream));
      CUDA_TRY(cudaStreamSynchronize(stream));
      moved_from = -1;
    }
  }
  d.host_page_indices = original_indices;
  d.host_seq_lens = original_lens;
  PC_TRY(d.upload_table(stream));
  return result;
}

// ---- timing -----------------------------------------------------------------

std::size_t l2_cache_bytes(int device) {
  static std::mutex mutex;
  static std::map<int, std::size_t> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess) bytes = 64 << 20;
  cache[device] = static_cast<std::size_t>(bytes);
  return cache[device];
}

Status time_path(const DeviceCase& d, const PreparedPath& p, const GraphExec* exec, const RunOptions& options,
                 cudaStream_t stream, PathRun& run) {
  int device = 0;
  CUDA_TRY(cudaGetDevice(&device));
  DeviceBuffer flush;
  if (!options.hot) {
    // Twice the L2, written before each timed repeat, evicts the inputs.
    auto buffer = device_alloc(2 * l2_cache_bytes(device));
    if (!buffer) return buffer.error();
    flush = std::move(*buffer);
  }
  const std::size_t n = p.stages.size();
  std::vector<Event> events;
  for (std::size_t i = 0; i <= n; ++i) {
    auto e = make_event();
    if (!e) return e.error();
    events.push_back(std::move(*e));
  }
  // One plan on the case as uploaded, after poisoning as before every plan
  // (the graph check left the last round's plan behind); every repeat and
  // replay below reuses it, as a serving step replays one plan's graph.
  CUDA_TRY(cudaStreamSynchronize(stream));
  PC_TRY(poison_workspace(p, stream));
  PC_TRY(plan_path(d, p, stream));
  for (int w = 0; w < options.warmup; ++w) PC_TRY(launch_stages(p, stream));
  const int repeats = std::max(1, options.repeats);
  std::vector<std::vector<double>> stage_ms(n);
  std::vector<double> total_ms;
  for (int r = 0; r < repeats; ++r) {
    if (!flush.empty()) CUDA_TRY(cudaMemsetAsync(flush.get(), r & 0xFF, flush.bytes(), stream));
    CUDA_TRY(cudaEventRecord(events[0].get(), stream));
    for (std::size_t k = 0; k < n; ++k) {
      auto st = p.stages[k].launch(stream);
      if (!st) return Error{st.error().code, st.error().message, p.stages[k].name};
      CUDA_TRY(cudaEventRecord(events[k + 1].get(), stream));
    }
    CUDA_TRY(cudaEventSynchronize(events[n].get()));
    for (std::size_t k = 0; k < n; ++k) {
      float ms = 0;
      CUDA_TRY(cudaEventElapsedTime(&ms, events[k].get(), events[k + 1].get()));
      stage_ms[k].push_back(ms);
    }
    float total = 0;
    CUDA_TRY(cudaEventElapsedTime(&total, events[0].get(), events[n].get()));
    total_ms.push_back(total);
  }

  std::optional<double> replay_ms;
  if (exec != nullptr) {
    std::vector<double> replays;
    CUDA_TRY(cudaGraphLaunch(exec->get(), stream));  // warm-up
    for (int r = 0; r < repeats; ++r) {
      if (!flush.empty()) CUDA_TRY(cudaMemsetAsync(flush.get(), r & 0xFF, flush.bytes(), stream));
      CUDA_TRY(cudaEventRecord(events[0].get(), stream));
      CUDA_TRY(cudaGraphLaunch(exec->get(), stream));
      CUDA_TRY(cudaEventRecord(events[1].get(), stream));
      CUDA_TRY(cudaEventSynchronize(events[1].get()));
      float ms = 0;
      CUDA_TRY(cudaEventElapsedTime(&ms, events[0].get(), events[1].get()));
      replays.push_back(ms);
    }
    replay_ms = summarize_times(replays).median;
  }

  double bytes = 0, flops = 0;
  for (const auto& s : p.stages) {
    bytes += s.bytes;
    flops += s.flops;
  }
  StageTiming total;
  total.stage = "total";
  const TimingSummary t = summarize_times(total_ms);
  total.median_ms = t.median;
  total.min_ms = t.min;
  total.max_ms = t.max;
  total.q1_ms = t.q1;
  total.q3_ms = t.q3;
  total.repeats = repeats;
  total.bytes = p.total_bytes.value_or(bytes);
  total.flops = p.total_flops.value_or(flops);
  total.graph_replay_ms = replay_ms;
  run.timings.push_back(total);
  if (n > 1) {
    for (std::size_t k = 0; k < n; ++k) {
      StageTiming st;
      st.stage = p.stages[k].name;
      const TimingSummary s = summarize_times(stage_ms[k]);
      st.median_ms = s.median;
      st.min_ms = s.min;
      st.max_ms = s.max;
      st.q1_ms = s.q1;
      st.q3_ms = s.q3;
      st.repeats = repeats;
      st.bytes = p.stages[k].bytes;
      st.flops = p.stages[k].flops;
      run.timings.push_back(st);
      if (st.bytes > 0 && st.median_ms > 0)
        run.notes[st.stage + "_gb_per_s"] = fmt::format("{:.1f}", st.bytes / (st.median_ms * 1e6));
    }
  }
  run.notes["l2_flush"] = options.hot ? "off (--hot)" : fmt::format("{} MiB before each repeat", flush.bytes() >> 20);
  return {};
}

}  // namespace

Expected<PathRun> GpuPath::run(const Case& c, const RunOptions& options) { return run_gpu_path(*this, c, options); }

Expected<PathRun> run_gpu_path(GpuPath& path, const Case& c, const RunOptions& options) {
  const Applicability applicability = path.applies(c);
  if (!applicability.applies)
    return invalid_input(fmt::format("path {} does not apply: {}", path.name(), applicability.reason), path.name());
  CUDA_TRY(cudaSetDevice(options.device));
  auto uploaded = upload_case(c);
  if (!uploaded) return uploaded.error();
  DeviceCase& d = **uploaded;
  auto prepared = path.prepare(c, d, options);
  if (!prepared) return prepared.error();
  PreparedPath& p = *prepared;
  auto stream_or = make_stream();
  if (!stream_or) return stream_or.error();
  const Stream stream = std::move(*stream_or);

  auto gate = LegacyStreamGate::make();
  if (!gate) return gate.error();

  PathRun run;
  run.plan = p.plan;
  run.notes = p.notes;

  auto first = eager_run(d, p, *gate, stream.get());
  if (!first) return first.error();
  // Work outside the path's stream: what follows (repeat, graph, timing)
  // would only say the same thing in other words, or time the wrong work.
  const auto outside_stream = [&](std::int64_t changed) {
    run.check_failures.insert(
        run.check_failures.begin(),
        fmt::format("the kernel ran work outside its stream: {} of {} output and LSE elements read after "
                    "synchronising the path's stream changed after a device-wide synchronise (a launch on the "
                    "legacy default stream, or on a stream of its own never joined back to the one given)",
                    changed, d.output_elements() + d.lse_elements()));
  };
  if (first->changed_after_device_sync > 0) {
    outside_stream(first->changed_after_device_sync);
    run.notes["checks"] = "repeat, graph check and timing skipped: the kernel ran work outside its stream";
  }
  const bool in_stream = first->changed_after_device_sync == 0;
  run.unwritten = count_poison(d.view.output_dtype, first->output, d.output_elements());
  run.output = widen(d.view.output_dtype, first->output, d.output_elements());
  const std::int64_t lse_unwritten = count_poison(DType::F32, first->lse, d.lse_elements());
  if (lse_unwritten > 0)
    run.check_failures.push_back(fmt::format("LSE: {} of {} elements unwritten", lse_unwritten, d.lse_elements()));
  run.lse = widen(DType::F32, first->lse, d.lse_elements());

  GraphExec exec;
  if (options.checks && in_stream) {
    auto second = eager_run(d, p, *gate, stream.get());
    if (!second) return second.error();
    const std::int64_t out_diff = count_differences(first->output, second->output, dtype_size(d.view.output_dtype));
    const std::int64_t lse_diff = count_differences(first->lse, second->lse, 4);
    if (out_diff > 0 || lse_diff > 0)
      run.check_failures.push_back(fmt::format("not bitwise repeatable: {} elements differ", out_diff + lse_diff));

    auto captured = capture(p, stream.get());
    if (!captured) return captured.error();
    exec = std::move(*captured);
    auto checked = graph_check(d, p, exec, *first, *gate, stream.get());
    if (!checked) return checked.error();
    const std::int64_t later = std::max(second->changed_after_device_sync, checked->changed_after_device_sync);
    if (later > 0) outside_stream(later);
    for (auto& f : checked->failures) run.check_failures.push_back(std::move(f));
    std::string done;
    for (const auto& s : checked->done) done += (done.empty() ? "" : "; ") + s;
    run.notes["graph_check"] = done;
  }

  if (options.measure && in_stream) {
    if (!exec) {
      auto captured = capture(p, stream.get());
      if (!captured) return captured.error();
      exec = std::move(*captured);
    }
    PC_TRY(time_path(d, p, &exec, options, stream.get(), run));
  }
  CUDA_TRY(cudaStreamSynchronize(stream.get()));
  return run;
}

}  // namespace pagecheck::gpu
