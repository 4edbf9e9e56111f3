// The GPU paths as the registry sees them: direct, split, auto (decode),
// prefill, fmha (gather + FMHA). Each is an applicability rule from its
// kernel family plus stages built on the family's launchers (launchers.cuh);
// the harness (harness.cu) runs the checks and timing.
#include <fmt/format.h>

#include <map>
#include <mutex>

#include "harness/harness.cuh"
#include "common/launchers.cuh"
#include "pagecheck/features.hpp"
#include "pagecheck/gpu.hpp"
#include "pagecheck/plan.hpp"

namespace pagecheck::gpu {

namespace {

// The split path's partition when the plan is direct (the grid fills the
// device): the heuristic's largest partition (plan.cpp). H200, explicit
// plans: 64 x 4096 split 3507 / 3696 GB/s at 512 / 1024, 256 x 1024 3389 /
// 3508 (docs/performance.md).
constexpr std::int64_t kDefaultPartitionTokens = 1024;

// Tuning files, read once per path name.
Expected<TuningTable> cached_tuning(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, TuningTable> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(path); it != cache.end()) return it->second;
  auto table = read_tuning_file(path);
  if (!table) return table.error();
  cache[path] = *table;
  return *table;
}

int multiprocessors_of(const DeviceInfo& device, const RunOptions& options) {
  if (device.multiprocessors > 0 && device.device_index == options.device) return device.multiprocessors;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, options.device) != cudaSuccess || sms <= 0) return 132;
  return sms;
}

// The plan for a case: explicit (--plan), else tuned (--tuning FILE), else
// the built-in heuristic, told the direct grid of the kernel that will run.
Expected<Plan> resolve_plan(const Case& c, const DeviceCaseView& view, const RunOptions& options,
                            const DeviceInfo& device) {
  if (options.plan) {
    Plan p = *options.plan;
    p.source = PlanSource::Explicit;
    return p;
  }
  PlanRequest request;
  request.max_context_tokens = c.max_seq_len();
  request.query_heads = c.q_heads();
  request.kv_heads = c.kv_heads();
  request.head_dim = c.key_head_dim();
  request.value_head_dim = c.v_head_dim();
  request.num_seqs = c.num_seqs();
  request.multiprocessors = multiprocessors_of(device, options);
  const DecodeGrid grid = decode_direct_grid(view);
  request.direct_ctas = grid.direct_ctas;
  request.one_cta_per_multiprocessor = grid.one_cta_per_multiprocessor;
  if (!options.tuning_file.empty()) {
    auto table = cached_tuning(options.tuning_file);
    if (!table) return table.error();
    return choose_plan(request, &*table);
  }
  return choose_plan(request, nullptr);
}

std::string describe_plan(const Plan& plan) { return fmt::format("{} ({})", plan.to_string(), plan.source_name()); }

// A case feature the built-in paths do not take (features.hpp) first, then
// the kernel family's own rule.
Applicability builtin_applies(const Case& c, std::string_view path, Applicability (*family)(const Case&)) {
  if (std::string why = builtin_feature_refusal(c, path); !why.empty()) return {false, why};
  return family(c);
}

Stage attention_stage(std::string name, std::function<Status(cudaStream_t)> launch, const AttentionModel& m) {
  return Stage{std::move(name), std::move(launch), m.bytes(), m.flops};
}

Expected<SplitWorkspace> allocate_split(const DeviceCaseView& view, std::int64_t partition_tokens, PreparedPath& p) {
  const std::size_t out_floats = split_partial_out_floats(view, partition_tokens);
  const std::size_t stat_floats = split_stat_floats(view, partition_tokens);
  SplitWorkspace ws;
  for (std::size_t floats : {out_floats, stat_floats, stat_floats}) {
    auto buffer = device_alloc(std::max<std::size_t>(floats, 1) * sizeof(float));
    if (!buffer) return buffer.error();
    p.workspace.push_back(std::move(*buffer));
  }
  const std::size_t n = p.workspace.size();
  ws.partial_out = p.workspace[n - 3].as<float>();
  ws.partial_max = p.workspace[n - 2].as<float>();
  ws.partial_sum = p.workspace[n - 1].as<float>();
  ws.max_partitions = (view.max_seq_len + partition_tokens - 1) / partition_tokens;
  p.notes["workspace_bytes"] = std::to_string((out_floats + 2 * stat_floats) * sizeof(float));
  return ws;
}

class DirectPath final : public GpuPath {
 public:
  std::string name() const override { return "direct"; }
  Applicability applies(const Case& c) const override { return builtin_applies(c, "direct", decode_applies); }
  Expected<PreparedPath> prepare(const Case& c, DeviceCase& d, const RunOptions&) override {
    PreparedPath p;
    const DeviceCaseView view = d.view;
    p.stages.push_back(attention_stage("direct", [view](cudaStream_t s) { return launch_direct(view, s); },
                                       attention_model(c)));
    return p;
  }
};

class SplitPath final : public GpuPath {
 public:
  explicit SplitPath(DeviceInfo device) : device_(std::move(device)) {}
  std::string name() const override { return "split"; }
  Applicability applies(const Case& c) const override { return builtin_applies(c, "split", decode_applies); }
  Expected<PreparedPath> prepare(const Case& c, DeviceCase& d, const RunOptions& options) override {
    PreparedPath p;
    auto plan = resolve_plan(c, d.view, options, device_);
    if (!plan) return plan.error();
    std::int64_t partition = kDefaultPartitionTokens;
    std::string from = "default";
    if (plan->kind == PlanKind::SplitKv) {
      partition = plan->partition_tokens;
      from = std::string(plan->source_name());
    }
    p.notes["partition_tokens"] = fmt::format("{} ({})", partition, from);
    auto ws = allocate_split(d.view, partition, p);
    if (!ws) return ws.error();
    const DeviceCaseView view = d.view;
    const SplitWorkspace workspace = *ws;
    p.stages.push_back(attention_stage(
        "split", [view, workspace, partition](cudaStream_t s) { return launch_split(view, workspace, partition, s); },
        attention_model(c)));
    return p;
  }

 private:
  DeviceInfo device_;
};

class AutoPath final : public GpuPath {
 public:
  explicit AutoPath(DeviceInfo device) : device_(std::move(device)) {}
  std::string name() const override { return "auto"; }
  Applicability applies(const Case& c) const override { return builtin_applies(c, "auto", decode_applies); }
  Expected<PreparedPath> prepare(const Case& c, DeviceCase& d, const RunOptions& options) override {
    PreparedPath p;
    auto plan = resolve_plan(c, d.view, options, device_);
    if (!plan) return plan.error();
    p.plan = describe_plan(*plan);
    const DeviceCaseView view = d.view;
    if (plan->kind == PlanKind::Direct) {
      p.stages.push_back(attention_stage("direct", [view](cudaStream_t s) { return launch_direct(view, s); },
                                         attention_model(c)));
      return p;
    }
    const std::int64_t partition = plan->partition_tokens, threshold = plan->threshold_tokens;
    auto ws = allocate_split(d.view, partition, p);
    if (!ws) return ws.error();
    const SplitWorkspace workspace = *ws;
    std::int64_t split_seqs = 0;
    for (auto len : c.seq_lens) split_seqs += len > threshold;
    p.notes["auto_split_seqs"] = fmt::format("{} of {}", split_seqs, c.num_seqs());
    if (split_seqs == c.num_seqs()) {
      // Every sequence is split: the split path's own kernel. The auto
      // instantiation's whole-sequence branch, which no sequence here takes,
      // cost it 0.3-1.6% against split with the same plan (H100, session
      // 17: 1 x 32768 and 8 x 8192). Split is right for any lengths, so a
      // graph replayed over shorter sequences stays right (merely splits
      // them too).
      p.stages.push_back(attention_stage(
          "auto", [view, workspace, partition](cudaStream_t s) { return launch_split(view, workspace, partition, s); },
          attention_model(c)));
      return p;
    }
    p.stages.push_back(attention_stage(
        "auto",
        [view, workspace, partition, threshold](cudaStream_t s) {
          return launch_auto(view, workspace, partition, threshold, s);
        },
        attention_model(c)));
    return p;
  }

 private:
  DeviceInfo device_;
};

class PrefillPath final : public GpuPath {
 public:
  std::string name() const override { return "prefill"; }
  Applicability applies(const Case& c) const override { return builtin_applies(c, "prefill", prefill_applies); }
  Expected<PreparedPath> prepare(const Case& c, DeviceCase& d, const RunOptions&) override {
    PreparedPath p;
    const DeviceCaseView view = d.view;
    p.notes["kernel"] = prefill_kernel_name(view);
    p.plan = "kernel " + p.notes["kernel"];
    p.stages.push_back(attention_stage("prefill", [view](cudaStream_t s) { return launch_prefill(view, s); },
                                       attention_model(c)));
    return p;
  }
};

// Gather (pages -> contiguous K/V), then FMHA over the contiguous sequences.
// Stage models: the gather reads and writes the K/V of the real lengths (and
// the table); the FMHA reads the contiguous K/V, Q and writes O. The total
// row keeps the paged-attention model of the other paths, so its GB/s is
// comparable with theirs.
class FmhaPath final : public GpuPath {
 public:
  std::string name() const override { return "fmha"; }
  Applicability applies(const Case& c) const override { return builtin_applies(c, "fmha", fmha_applies); }
  Expected<PreparedPath> prepare(const Case& c, DeviceCase& d, const RunOptions&) override {
    PreparedPath p;
    const std::size_t each = fmha_workspace_bytes_each(d.view);
    for (int i = 0; i < 2; ++i) {
      auto buffer = device_alloc(std::max<std::size_t>(each, 1));
      if (!buffer) return buffer.error();
      p.workspace.push_back(std::move(*buffer));
    }
    FmhaWorkspace ws;
    ws.key = p.workspace[0].get();
    ws.value = p.workspace[1].get();
    ws.capacity_tokens = d.view.max_seq_len;
    p.notes["workspace_bytes"] = std::to_string(2 * each);
    const DeviceCaseView view = d.view;
    p.notes["kernel"] = fmha_kernel_name(view);
    p.plan = "gather + kernel " + p.notes["kernel"];
    const AttentionModel m = attention_model(c);
    // Gathered tokens: every key of every sequence (the gather does not know
    // the window), each read once from its page and written once.
    double tokens = 0;
    for (auto len : c.seq_lens) tokens += len;
    const double gathered = tokens * static_cast<double>(c.kv_heads() * (c.key_head_dim() + c.v_head_dim())) *
                            static_cast<double>(dtype_size(c.key_cache.dtype));
    p.stages.push_back(Stage{"gather", [view, ws](cudaStream_t s) { return launch_gather(view, ws, s); },
                             2.0 * gathered + m.table_bytes, 0.0});
    p.stages.push_back(Stage{"fmha", [view, ws](cudaStream_t s) { return launch_fmha(view, ws, s); },
                             m.kv_bytes + m.q_bytes + m.o_bytes, m.flops});
    p.total_bytes = m.bytes();
    p.total_flops = m.flops;
    return p;
  }
};

}  // namespace

void register_paths(PathRegistry& registry, const DeviceInfo& device) {
  registry.add(std::make_unique<DirectPath>());
  registry.add(std::make_unique<SplitPath>(device));
  registry.add(std::make_unique<AutoPath>(device));
  registry.add(std::make_unique<PrefillPath>());
  registry.add(std::make_unique<FmhaPath>());
}

}  // namespace pagecheck::gpu
