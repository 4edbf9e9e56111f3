// pagecheck: a command-line harness for paged-attention kernels.
//
// main() parses the command line into the config structs of config.hpp,
// dispatches to one subcommand, and maps every failure to the documented
// exit codes (docs/cli.md):
//   0 every path that ran passed      1 a path failed its tolerance
//   2 usage error                     3 invalid input (file or case)
//   4 runtime failure (CUDA included)
// CLI11's own parse errors (its codes 100-127) become 2; --help and
// --version exit 0. No exception leaves main.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "config.hpp"
#include "runner.hpp"
#include "pagecheck/status.hpp"

namespace {

using namespace pagecheck;
using namespace pagecheck::app;

// NonNegativeNumber lets "nan" through (nan < 0 is false); a NaN tolerance
// makes every comparison pass, so tolerances and the softcap refuse it.
const CLI::Validator kNonNegativeNotNan(
    [](std::string& text) -> std::string {
      double value = 0;
      if (!CLI::detail::lexical_cast(text, value) || !(value >= 0)) return "must be a number >= 0, got " + text;
      return {};
    },
    "NONNEGATIVE");

// Options that describe a synthetic case (run, gen). Returns the options
// that count as geometry flags, so that main can tell "nothing given".
std::vector<CLI::Option*> add_case_options(CLI::App* cmd, CaseOptions& o) {
  std::vector<CLI::Option*> geometry;
  const auto geo = [&](CLI::Option* opt) {
    opt->group("Case");
    geometry.push_back(opt);
    return opt;
  };
  cmd->add_option("--preset", o.presets, "Model preset (repeatable); see --list-presets")->group("Case");
  cmd->add_flag("--list-presets", o.list_presets, "List the presets and exit")->group("Case");
  cmd->add_option("--name", o.name, "Case name")->group("Case");
  cmd->add_option("--description", o.description, "Case description")->group("Case");
  cmd->add_option("--seed", o.seed, "Generator seed (default 1)")->group("Case");
  geo(cmd->add_option("--seqs", o.seqs, "Number of sequences")->check(CLI::PositiveNumber));
  geo(cmd->add_option("--q-heads", o.q_heads, "Query heads")->check(CLI::PositiveNumber));
  geo(cmd->add_option("--kv-heads", o.kv_heads, "KV heads")->check(CLI::PositiveNumber));
  geo(cmd->add_option("--head-dim", o.head_dim, "Query/key head dim")->check(CLI::PositiveNumber));
  geo(cmd->add_option("--v-head-dim", o.v_head_dim, "Value head dim (default: head dim)")->check(CLI::PositiveNumber));
  geo(cmd->add_option("--block-size", o.block_size, "Tokens per page")->check(CLI::PositiveNumber));
  geo(cmd->add_option("--pool-factor", o.pool_factor, "Pool size as a multiple of the pages needed")
          ->check(CLI::PositiveNumber));
  auto* seq_len = geo(cmd->add_option("--seq-len", o.seq_len, "Context length of every sequence")
                          ->check(CLI::PositiveNumber));
  auto* seq_min = geo(cmd->add_option("--seq-len-min", o.seq_len_min, "Uniform context lengths: minimum")
                          ->check(CLI::PositiveNumber));
  auto* seq_max = geo(cmd->add_option("--seq-len-max", o.seq_len_max, "Uniform context lengths: maximum")
                          ->check(CLI::PositiveNumber));
  auto* seq_list = geo(cmd->add_option("--seq-lens", o.seq_lens, "Context lengths, cycled (comma list)")
                           ->delimiter(','));
  geo(cmd->add_flag("--boundary", o.boundary, "Boundary lengths (1, block±1, partition±1, ...) in [min, max]"));
  seq_len->excludes(seq_min)->excludes(seq_max)->excludes(seq_list);
  seq_list->excludes(seq_min)->excludes(seq_max);
  auto* q_len = geo(cmd->add_option("--q-len", o.q_len, "New query tokens per sequence")->check(CLI::PositiveNumber));
  auto* q_min = geo(cmd->add_option("--q-len-min", o.q_len_min, "Uniform query lengths: minimum")
                        ->check(CLI::PositiveNumber));
  auto* q_max = geo(cmd->add_option("--q-len-max", o.q_len_max, "Uniform query lengths: maximum")
                        ->check(CLI::PositiveNumber));
  q_len->excludes(q_min)->excludes(q_max);
  geo(cmd->add_option("--mode", o.mode, "decode | prefill | chunked | mixed"));
  geo(cmd->add_option("--kv-dtype", o.kv_dtype, "F32 | F16 | BF16 | F8_E4M3 | F8_E5M2"));
  geo(cmd->add_option("--q-dtype", o.q_dtype, "F32 | F16 | BF16"));
  geo(cmd->add_option("--layout", o.layout, "NHD | HND"));
  geo(cmd->add_option("--table", o.table, "dense (vLLM) | csr (FlashInfer)"));
  geo(cmd->add_option("--window", o.window, "Sliding window in keys (0: none)")->check(CLI::NonNegativeNumber));
  geo(cmd->add_option("--softcap", o.softcap, "Logit softcap (0: none)")->check(kNonNegativeNotNan));
  geo(cmd->add_option("--scale", o.scale, "Logit scale (default 1/sqrt(head_dim))"));
  geo(cmd->add_option("--k-scale", o.k_scale, "Key dequantisation scale"));
  geo(cmd->add_option("--v-scale", o.v_scale, "Value dequantisation scale"));
  geo(cmd->add_option("--profile", o.profile, "Values: gaussian | llm | large-logits"));
  geo(cmd->add_flag("--non-causal", o.non_causal, "Attend to every key, not only earlier ones"));
  geo(cmd->add_flag("--no-share-pages", o.no_share_pages, "Do not share pages between sequences"));
  geo(cmd->add_flag("--no-poison", o.no_poison, "Do not fill unused pages and slots with NaN"));
  return geometry;
}

void add_exec_options(CLI::App* cmd, ExecOptions& e, bool bench) {
  const char* g = "Execution";
  cmd->add_option("--paths", e.paths,
                  bench ? "GPU paths (comma list: direct,split,auto,prefill,fmha; default all)"
                        : "Paths (comma list: reference,direct,split,auto,prefill,fmha; default all)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--atol", e.atol, "Absolute tolerance (overrides the per-dtype default)")
      ->check(kNonNegativeNotNan)
      ->group(g);
  cmd->add_option("--rtol", e.rtol, "Relative tolerance (overrides the per-dtype default)")
      ->check(kNonNegativeNotNan)
      ->group(g);
  cmd->add_option("--device", e.device, "CUDA device index")->check(CLI::NonNegativeNumber)->group(g);
  if (!bench) cmd->add_flag("--require-gpu", e.require_gpu, "A missing GPU is a failure (exit 4)")->group(g);
  cmd->add_flag("--hot", e.hot, "Do not flush L2 between timed repeats")->group(g);
  cmd->add_option("--repeats", e.repeats, "Timed repeats (median reported)")->check(CLI::PositiveNumber)->group(g);
  cmd->add_option("--warmup", e.warmup, "Warm-up runs before timing")->check(CLI::NonNegativeNumber)->group(g);
  cmd->add_flag("--no-timing", e.no_timing, "Correctness only: no timed repeats")->group(g);
  cmd->add_flag("--no-checks", e.no_checks, "Skip the repeatability and graph-replay checks")->group(g);
  cmd->add_option("--plan", e.plan, "Decode plan: direct | split:PARTITION:THRESHOLD")->group(g);
  cmd->add_option("--tuning", e.tuning_file, "Tuning file written by `pagecheck tune`")->group(g);
  cmd->add_option("--threads", e.threads, "Reference threads (0: all cores)")->check(CLI::NonNegativeNumber)->group(g);
}

void add_output_options(CLI::App* cmd, OutputOptions& o) {
  const char* g = "Output";
  cmd->add_option("--json", o.json, "Write the report as JSON")->group(g);
  cmd->add_option("--csv", o.csv, "Write one CSV row per case and path")->group(g);
  cmd->add_option("--junit", o.junit, "Write JUnit XML (for CI)")->group(g);
  cmd->add_option("--save-failing", o.save_failing, "Write a replay bundle for each failing case into DIR")->group(g);
  cmd->add_flag("-q,--quiet", o.quiet, "Only the summary line")->group(g);
  cmd->add_flag("--no-color", o.no_color, "No ANSI colors (also: NO_COLOR set, or not a terminal)")->group(g);
}

std::string executable_path(const char* argv0) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) return self.string();
  return argv0 != nullptr ? argv0 : "pagecheck";
}

int real_main(int argc, char** argv) {
  Invocation invocation;
  invocation.executable = executable_path(argc > 0 ? argv[0] : nullptr);
  for (int i = 0; i < argc; ++i)
    invocation.command_line += (i ? " " : "") + shell_quote(i == 0 ? std::string("pagecheck") : std::string(argv[i]));

  CLI::App app{"pagecheck: a harness for paged-attention kernels. Runs synthetic or recorded cases through the GPU\n"
               "paths and an Eigen CPU reference, and reports the error and throughput of each path."};
  app.set_version_flag("--version", std::string("pagecheck ") + PAGECHECK_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 every path that ran passed, 1 a path failed, 2 usage error, 3 invalid input, 4 runtime failure.\n"
      "See docs/cli.md.");

  RunConfig run;
  auto* run_cmd = app.add_subcommand("run", "Run synthetic cases: the default suite, presets, or geometry flags");
  const auto run_geometry = add_case_options(run_cmd, run.cases);
  run_cmd->add_flag("--list-suite", run.cases.list_suite,
                    "List the default suite's cases, the axis values each covers and the path families that take it")
      ->group("Case");
  add_exec_options(run_cmd, run.exec, false);
  add_output_options(run_cmd, run.out);

  ReplayConfig replay;
  auto* replay_cmd = app.add_subcommand("replay", "Run recorded case files (safetensors)");
  replay_cmd->add_option("files", replay.files, "Case files")->required();
  add_exec_options(replay_cmd, replay.exec, false);
  add_output_options(replay_cmd, replay.out);

  GenConfig gen;
  auto* gen_cmd = app.add_subcommand("gen", "Write one synthetic case file");
  add_case_options(gen_cmd, gen.cases);
  gen_cmd->add_option("-o,--output", gen.output, "Case file to write")->required();
  gen_cmd->add_flag("--with-output", gen.with_output, "Store the reference output and LSE as the recorded result");
  gen_cmd->add_option("--output-dtype", gen.output_dtype, "dtype of the recorded output: F32, F16 or BF16")
      ->check(CLI::IsMember({"F32", "F16", "BF16"}, CLI::ignore_case));
  gen_cmd->add_option("--threads", gen.threads, "Reference threads (0: all cores)")->check(CLI::NonNegativeNumber);

  InspectConfig inspect;
  auto* inspect_cmd = app.add_subcommand("inspect", "Show a case file's geometry, table statistics, validity, paths");
  inspect_cmd->add_option("file", inspect.file, "Case file")->required();
  inspect_cmd->add_option("--device", inspect.device, "CUDA device index")->check(CLI::NonNegativeNumber);

  TuneConfig tune;
  auto* tune_cmd = app.add_subcommand("tune", "Measure direct against split-KV decode; write a tuning file (GPU)");
  tune_cmd->add_option("-o,--output", tune.output, "Tuning file to write")->required();
  tune_cmd->add_option("--device", tune.device, "CUDA device index")->check(CLI::NonNegativeNumber);
  tune_cmd->add_option("--contexts", tune.context_lengths, "Context lengths to sweep (comma list)")->delimiter(',');
  tune_cmd->add_option("--partitions", tune.partition_sizes, "Partition sizes to sweep (comma list)")->delimiter(',');
  tune_cmd->add_option("--q-heads", tune.q_heads, "Query heads")->check(CLI::PositiveNumber);
  tune_cmd->add_option("--kv-heads", tune.kv_heads, "KV heads")->check(CLI::PositiveNumber);
  tune_cmd->add_option("--head-dim", tune.head_dim, "Head dim")->check(CLI::PositiveNumber);
  tune_cmd->add_option("--v-head-dim", tune.v_head_dim, "Value head dim")->check(CLI::PositiveNumber);
  tune_cmd->add_option("--seqs", tune.seqs, "Batch size (0: several)")->check(CLI::NonNegativeNumber);

  BenchConfig bench;
  auto* bench_cmd = app.add_subcommand("bench", "Benchmark the GPU paths on the served shapes (GPU)");
  bench_cmd->add_option("--shapes", bench.shapes, "decode | prefill | all")
      ->check(CLI::IsMember({"decode", "prefill", "all"}));
  bench_cmd->add_option("--seed", bench.seed, "Generator seed");
  bench_cmd->add_flag("--check", bench.check, "Also compare with the CPU reference (slow on the long shapes)");
  add_exec_options(bench_cmd, bench.exec, true);
  add_output_options(bench_cmd, bench.out);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; every other parse
    // error is a usage error.
    const int cli_code = app.exit(e);
    return cli_code == 0 ? exit_code::kPass : exit_code::kUsage;
  }

  // The prefill/FMHA kernel override (docs/cli.md "Environment"): a typo
  // would otherwise silently run the default kernel.
  if (const char* kernel = std::getenv("PAGECHECK_ATTN_KERNEL"); kernel != nullptr && *kernel != '\0') {
    const std::string_view k = kernel;
    if (k != "mma" && k != "auto") {
      fmt::print(stderr, "pagecheck: PAGECHECK_ATTN_KERNEL='{}' is not a kernel choice; use mma (the portable "
                         "mma.sync kernel) or auto (the default: wgmma on compute capability 9.0)\n", k);
      return exit_code::kUsage;
    }
  }

  const auto any_counted = [](const std::vector<CLI::Option*>& options) {
    for (const auto* o : options)
      if (o->count() > 0) return true;
    return false;
  };
  if (run_cmd->parsed()) {
    run.cases.any_geometry_flag = any_counted(run_geometry);
    run.cases.seed_given = run_cmd->get_option("--seed")->count() > 0;
    return cmd_run(run, invocation);
  }
  if (replay_cmd->parsed()) return cmd_replay(replay, invocation);
  if (gen_cmd->parsed()) {
    gen.cases.seed_given = gen_cmd->get_option("--seed")->count() > 0;
    return cmd_gen(gen);
  }
  if (inspect_cmd->parsed()) return cmd_inspect(inspect);
  if (tune_cmd->parsed()) return cmd_tune(tune);
  if (bench_cmd->parsed()) return cmd_bench(bench, invocation);
  fmt::print(stderr, "pagecheck: no subcommand (see --help)\n");
  return exit_code::kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // The one place that turns anything unexpected into an exit code.
  try {
    return real_main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fputs("pagecheck: out of memory\n", stderr);
    return pagecheck::exit_code::kRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagecheck: internal error: %s\n", e.what());
    return pagecheck::exit_code::kRuntime;
  } catch (...) {
    std::fputs("pagecheck: internal error (unknown exception)\n", stderr);
    return pagecheck::exit_code::kRuntime;
  }
}
