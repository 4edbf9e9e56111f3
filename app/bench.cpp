// tune and bench: GPU only.
#include <cstdio>

#include <fmt/format.h>

#include "commands.hpp"
#include "gpu_setup.hpp"
#include "report_targets.hpp"
#include "runner.hpp"
#include "workers.hpp"
#include "specs.hpp"
#include "pagecheck/plan.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/synthetic.hpp"

#ifdef PAGECHECK_HAVE_CUDA
#include "pagecheck/gpu.hpp"
#endif

namespace pagecheck::app {

int cmd_tune(const TuneConfig& config, const Invocation& invocation) {
  // --json: the same report as run's, without cases; with the reason in
  // "errors" when tune could not run.
  OutputOptions out;
  out.json = config.json;
  if (const Status ready = prepare_output_file(config.output); !ready.ok()) {
    fmt::print(stderr, "pagecheck: -o: {}\n", ready.error().describe());
    return exit_code_for(ready.error().code);
  }
#ifdef PAGECHECK_HAVE_CUDA
  const int devices = gpu::device_count();
  if (devices == 0) return report_not_run(out, invocation, "tune needs a CUDA device and none is present");
  if (config.device < 0 || config.device >= devices)
    return report_not_run(out, invocation,
                          fmt::format("--device {}: {} CUDA device{} present", config.device, devices,
                                      devices == 1 ? "" : "s"));
  if (!config.json.empty() && config.json != "-") {
    if (const Status ready = prepare_output_file(config.json); !ready.ok()) {
      fmt::print(stderr, "pagecheck: --json: {}\n", ready.error().describe());
      return exit_code_for(ready.error().code);
    }
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
  // With the JSON report on stdout, tune's table goes to stderr.
  auto table = gpu::tune(options, config.json == "-" ? stderr : stdout);
  if (!table.ok()) return report_not_run(out, invocation, fmt::format("tune: {}", table.error().describe()));
  const Status written = write_tuning_file(config.output, *table);
  if (!written.ok()) return report_not_run(out, invocation, written.error().describe());
  fmt::print(config.json == "-" ? stderr : stdout, "wrote {} ({} entr{}); use it with run/replay --tuning {}\n",
             config.output, table->entries.size(), table->entries.size() == 1 ? "y" : "ies", config.output);
  if (config.json.empty()) return exit_code::kPass;
  RunReport report;
  report.tool_version = PAGECHECK_VERSION;
  report.command_line = invocation.command_line;
  const Status json = write_json(config.json, report);
  if (!json.ok()) {
    fmt::print(stderr, "pagecheck: --json: {}\n", json.error().describe());
    return exit_code::kRuntime;
  }
  return exit_code::kPass;
#else
  return report_not_run(out, invocation, "this build has no GPU paths (built without CUDA): nothing to tune");
#endif
}

int cmd_bench(const BenchConfig& config, const Invocation& invocation) {
  // The variant first: a bad value is a usage error on any machine.
  for (const auto& spec : bench_specs(config.shapes, config.seed, config.variant))
    if (const Status accepted = check_synthetic_spec(spec); !accepted.ok()) {
      std::fprintf(stderr, "pagecheck bench: shape %s: %s\n", spec.name.c_str(), accepted.error().describe().c_str());
      return exit_code::kUsage;
    }
  if (!built_with_cuda())
    return report_not_run(config.out, invocation,
                          "this build has no GPU paths (built without CUDA): nothing to benchmark");
#ifdef PAGECHECK_HAVE_CUDA
  // Said as bench's own reason, not as the --require-gpu it implies.
  if (gpu::device_count() == 0)
    return report_not_run(config.out, invocation, "bench needs a CUDA device and none is present: nothing to benchmark");
#endif
  if (wants_workers(config.exec)) return run_workers(config.exec, config.out, invocation);
  ExecOptions exec = config.exec;
  exec.require_gpu = true;  // a benchmark without a GPU measures nothing
  exec.compare_reference = config.check;
  std::vector<CaseSource> sources;
  for (const auto& spec : bench_specs(config.shapes, config.seed, config.variant))
    sources.push_back({spec.name, [spec]() { return generate_case(spec); }});
  return run_cases(sources, exec, config.out, invocation);
}

}  // namespace pagecheck::app
