// tune and bench: GPU only.
#include <cstdio>

#include <fmt/format.h>

#include "commands.hpp"
#include "gpu_setup.hpp"
#include "runner.hpp"
#include "specs.hpp"
#include "pagecheck/plan.hpp"
#include "pagecheck/synthetic.hpp"

#ifdef PAGECHECK_HAVE_CUDA
#include "pagecheck/gpu.hpp"
#endif

namespace pagecheck::app {

int cmd_tune(const TuneConfig& config) {
#ifdef PAGECHECK_HAVE_CUDA
  const int devices = gpu::device_count();
  if (devices == 0) {
    fmt::print(stderr, "pagecheck: tune needs a CUDA device and none is present\n");
    return exit_code::kRuntime;
  }
  if (config.device < 0 || config.device >= devices) {
    fmt::print(stderr, "pagecheck: --device {}: {} CUDA device{} present\n", config.device, devices,
               devices == 1 ? "" : "s");
    return exit_code::kRuntime;
  }
  gpu::TuneOptions options;
  options.device = config.device;
  options.context_lengths = config.context_lengths;
  options.partition_sizes = config.partition_sizes;
  options.q_heads = config.q_heads;
  options.kv_heads = config.kv_heads;
  options.head_dim = config.head_dim;
  options.v_head_dim = config.v_head_dim;
  options.num_seqs = config.seqs;
  auto table = gpu::tune(options, stdout);
  if (!table.ok()) {
    fmt::print(stderr, "pagecheck: tune: {}\n", table.error().describe());
    return exit_code_for(table.error().code);
  }
  const Status written = write_tuning_file(config.output, *table);
  if (!written.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", written.error().describe());
    return exit_code_for(written.error().code);
  }
  fmt::print("wrote {} ({} entr{}); use it with run/replay --tuning {}\n", config.output, table->entries.size(),
             table->entries.size() == 1 ? "y" : "ies", config.output);
  return exit_code::kPass;
#else
  (void)config;
  fmt::print(stderr, "pagecheck: this build has no GPU paths (built without CUDA): nothing to tune\n");
  return exit_code::kRuntime;
#endif
}

int cmd_bench(const BenchConfig& config, const Invocation& invocation) {
  if (!built_with_cuda()) {
    fmt::print(stderr, "pagecheck: this build has no GPU paths (built without CUDA): nothing to benchmark\n");
    return exit_code::kRuntime;
  }
  ExecOptions exec = config.exec;
  exec.require_gpu = true;  // a benchmark without a GPU measures nothing
  exec.compare_reference = config.check;
  std::vector<CaseSource> sources;
  for (const auto& spec : bench_specs(config.shapes, config.seed))
    sources.push_back({spec.name, [spec]() { return generate_case(spec); }});
  return run_cases(sources, exec, config.out, invocation);
}

}  // namespace pagecheck::app
