// `pagecheck tune`: direct against split-KV over context lengths and
// partition sizes on the present device, with the benchmark geometry (32/8
// heads, d128, BF16, block 16, shuffled pages). Per batch size it finds the
// crossover (the longest measured context where direct still wins: longer
// sequences go to split) and the best partition size past it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "harness/cuda_resources.cuh"
#include "common/launchers.cuh"
#include "harness/upload.cuh"
#include "pagecheck/gpu.hpp"

namespace pagecheck::gpu {

namespace {

// Keeps every sweep point's cache at 2 GiB or less (512K tokens of 8 KV heads
// x 256 BF16 values), several times the L2 and quick to fill.
constexpr std::int64_t kMaxTokensPerPoint = std::int64_t{1} << 19;
// Split must beat direct by this much to count as a win (event timing of one
// shape repeats to about 1%).
constexpr double kWinMargin = 0.98;

Expected<double> median_ms(const std::function<Status(cudaStream_t)>& launch, const DeviceBuffer& flush,
                           cudaStream_t stream, int warmup, int repeats) {
  auto start = make_event();
  if (!start) return start.error();
  auto stop = make_event();
  if (!stop) return stop.error();
  for (int i = 0; i < warmup; ++i) PC_TRY(launch(stream));
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    CUDA_TRY(cudaMemsetAsync(flush.get(), i & 0xFF, flush.bytes(), stream));
    CUDA_TRY(cudaEventRecord(start->get(), stream));
    PC_TRY(launch(stream));
    CUDA_TRY(cudaEventRecord(stop->get(), stream));
    CUDA_TRY(cudaEventSynchronize(stop->get()));
    float t = 0;
    CUDA_TRY(cudaEventElapsedTime(&t, start->get(), stop->get()));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Point {
  std::int64_t context = 0;
  double direct_ms = 0;
  std::vector<double> split_ms;  // per partition; NaN when the launcher refused
};

}  // namespace

Expected<TuningTable> tune(const TuneOptions& options, std::FILE* log) {
  CUDA_TRY(cudaSetDevice(options.device));
  cudaDeviceProp prop{};
  CUDA_TRY(cudaGetDeviceProperties(&prop, options.device));
  const std::vector<std::int64_t> contexts =
      options.context_lengths.empty() ? std::vector<std::int64_t>{512, 1024, 2048, 4096, 8192, 16384, 32768}
                                      : options.context_lengths;
  const std::vector<std::int64_t> partitions =
      options.partition_sizes.empty() ? std::vector<std::int64_t>{256, 512, 1024, 2048} : options.partition_sizes;
  const std::vector<std::int64_t> batches =
      options.num_seqs > 0 ? std::vector<std::int64_t>{options.num_seqs} : std::vector<std::int64_t>{1, 4, 16, 64};

  auto stream_or = make_stream();
  if (!stream_or) return stream_or.error();
  const Stream stream = std::move(*stream_or);
  auto flush = device_alloc(2 * static_cast<std::size_t>(prop.l2CacheSize));
  if (!flush) return flush.error();

  TuningTable table;
  table.device_name = prop.name;
  if (log) {
    std::fprintf(log, "tune: %s, %lld/%lld heads, d%lld/%lld, BF16, block 16, L2 flushed; median ms of 10\n", prop.name,
                 static_cast<long long>(options.q_heads), static_cast<long long>(options.kv_heads),
                 static_cast<long long>(options.head_dim), static_cast<long long>(options.v_head_dim));
  }
  for (const std::int64_t batch : batches) {
    std::vector<Point> points;
    for (const std::int64_t context : contexts) {
      if (batch * context > kMaxTokensPerPoint && context != contexts.front()) continue;
      DeviceGeometry g;
      g.num_seqs = batch;
      g.context = context;
      g.q_heads = options.q_heads;
      g.kv_heads = options.kv_heads;
      g.head_dim = options.head_dim;
      g.v_head_dim = options.v_head_dim;
      g.seed = static_cast<std::uint64_t>(batch * 100003 + context);
      auto d = synthesize_device_case(g);
      if (!d) return d.error();
      const DeviceCaseView view = (*d)->view;
      Point point;
      point.context = context;
      auto direct = median_ms([&](cudaStream_t s) { return launch_direct(view, s); }, *flush, stream.get(), 2, 10);
      if (!direct) return direct.error();
      point.direct_ms = *direct;
      for (const std::int64_t partition : partitions) {
        const std::size_t out_floats = split_partial_out_floats(view, partition);
        const std::size_t stat_floats = split_stat_floats(view, partition);
        auto out = device_alloc(std::max<std::size_t>(out_floats, 1) * 4);
        auto mx = device_alloc(std::max<std::size_t>(stat_floats, 1) * 4);
        auto sum = device_alloc(std::max<std::size_t>(stat_floats, 1) * 4);
        if (!out) return out.error();
        if (!mx) return mx.error();
        if (!sum) return sum.error();
        SplitWorkspace ws{out->as<float>(), mx->as<float>(), sum->as<float>(),
                          (view.max_seq_len + partition - 1) / partition};
        auto split = median_ms([&](cudaStream_t s) { return launch_split(view, ws, partition, s); }, *flush,
                               stream.get(), 2, 10);
        point.split_ms.push_back(split ? *split : std::numeric_limits<double>::quiet_NaN());
        if (!split && log) std::fprintf(log, "  split:%lld refused: %s\n", static_cast<long long>(partition),
                                        split.error().describe().c_str());
      }
      points.push_back(std::move(point));
    }

    // Crossover: the first context from which split wins at every longer one.
    auto best_split = [&](const Point& p) {
      double best = std::numeric_limits<double>::infinity();
      for (double t : p.split_ms)
        if (!std::isnan(t)) best = std::min(best, t);
      return best;
    };
    std::size_t first_win = points.size();
    for (std::size_t i = points.size(); i-- > 0;) {
      if (best_split(points[i]) < kWinMargin * points[i].direct_ms) first_win = i;
      else break;
    }
    TuningEntry entry;
    entry.query_heads = options.q_heads;
    entry.kv_heads = options.kv_heads;
    entry.head_dim = options.head_dim;
    entry.value_head_dim = options.v_head_dim;
    entry.num_seqs = batch;
    // Best partition: lowest mean time relative to the best split, over the
    // contexts where split wins (or all, when it never does).
    const std::size_t from = first_win < points.size() ? first_win : 0;
    double best_score = std::numeric_limits<double>::infinity();
    entry.partition_tokens = partitions.front();
    for (std::size_t k = 0; k < partitions.size(); ++k) {
      double score = 0;
      for (std::size_t i = from; i < points.size(); ++i) {
        const double t = points[i].split_ms[k];
        score += std::isnan(t) ? 1e9 : t / best_split(points[i]);
      }
      if (score < best_score) {
        best_score = score;
        entry.partition_tokens = partitions[k];
      }
    }
    for (std::size_t i = from; i < points.size(); ++i) {
      std::size_t best_k = 0;
      for (std::size_t k = 1; k < partitions.size(); ++k)
        if (!std::isnan(points[i].split_ms[k]) &&
            (std::isnan(points[i].split_ms[best_k]) || points[i].split_ms[k] < points[i].split_ms[best_k]))
          best_k = k;
      entry.partition_by_context.emplace_back(points[i].context, partitions[best_k]);
    }
    if (first_win == points.size()) entry.threshold_tokens = 0;  // split never wins
    else if (first_win == 0) entry.threshold_tokens = points[0].context / 2;
    else entry.threshold_tokens = points[first_win - 1].context;
    table.entries.push_back(entry);

    if (log) {
      std::string header = fmt::format("  batch {:>3} {:>8} {:>10}", batch, "context", "direct");
      for (auto p : partitions) header += fmt::format(" {:>10}", fmt::format("split:{}", p));
      std::fprintf(log, "%s\n", header.c_str());
      for (const auto& p : points) {
        std::string line = fmt::format("            {:>8} {:>10.4f}", p.context, p.direct_ms);
        for (double t : p.split_ms) line += fmt::format(" {:>10.4f}", t);
        line += best_split(p) < kWinMargin * p.direct_ms ? "  split" : "  direct";
        std::fprintf(log, "%s\n", line.c_str());
      }
      if (entry.threshold_tokens == 0)
        std::fprintf(log, "  batch %lld: direct wins at every context; best partition %lld\n",
                     static_cast<long long>(batch), static_cast<long long>(entry.partition_tokens));
      else
        std::fprintf(log, "  batch %lld: crossover past %lld tokens; best partition %lld -> split:%lld:%lld\n",
                     static_cast<long long>(batch), static_cast<long long>(entry.threshold_tokens),
                     static_cast<long long>(entry.partition_tokens), static_cast<long long>(entry.partition_tokens),
                     static_cast<long long>(entry.threshold_tokens));
    }
  }
  return table;
}

}  // namespace pagecheck::gpu
