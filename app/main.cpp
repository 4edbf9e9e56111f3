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

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "config.hpp"
#include "bundles.hpp"
#include "interrupts.hpp"
#include "test_faults.hpp"
#include "pagecheck/limits.hpp"
#include "pagecheck/shard.hpp"
#include "pagecheck/status.hpp"
#include "pagecheck/synthetic.hpp"

namespace {

using namespace pagecheck;
using namespace pagecheck::app;

// NonNegativeNumber lets "nan" through (nan < 0 is false); a NaN tolerance
// makes every comparison pass, so tolerances and the softcap refuse it.
const CLI::Validator kNonNegativeNotNan(
    [](std::string& text) -> std::string {
      double value = 0;
      if (!CLI::detail::lexical_cast(text, value) || !(value >= 0)) return "must be a number >= 0, got '" + text + "'";
      return {};
    },
    "NONNEGATIVE");

const CLI::Validator kPositiveFinite(
    [](std::string& text) -> std::string {
      double value = 0;
      if (!CLI::detail::lexical_cast(text, value) || !(value > 0) || !std::isfinite(value))
        return "must be a positive number, got '" + text + "'";
      return {};
    },
    "POSITIVE");

// Integer options say what they want ("--seqs: must be a positive integer,
// got 'abc'"); CLI11's PositiveNumber checks a double and prints its range,
// 0 to 1.79e308 in 300 digits. Applies to each element of a list option.
template <typename Int>
CLI::Validator integer_at_least(Int minimum) {
  const std::string want = minimum == 1 ? "a positive integer" : fmt::format("an integer >= {}", minimum);
  return CLI::Validator(
      [minimum, want](std::string& text) -> std::string {
        Int value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range)
          return fmt::format("must be {} no larger than {}, got '{}'", want, std::numeric_limits<Int>::max(), text);
        if (error != std::errc() || stop != end || value < minimum) return fmt::format("must be {}, got '{}'", want, text);
        return {};
      },
      minimum == 1 ? "POSITIVE" : "NONNEGATIVE");
}
const CLI::Validator kPositiveInt = integer_at_least<std::int64_t>(1);
const CLI::Validator kNonNegativeInt = integer_at_least<std::int64_t>(0);
const CLI::Validator kPositiveInt32 = integer_at_least<int>(1);
const CLI::Validator kNonNegativeInt32 = integer_at_least<int>(0);
const CLI::Validator kSeed = integer_at_least<std::uint64_t>(0);

// --device: an index, or "all".
const CLI::Validator kDevice(
    [](std::string& text) -> std::string {
      if (text == "all") return {};
      int value = 0;
      const char* end = text.data() + text.size();
      const auto [stop, error] = std::from_chars(text.data(), end, value);
      if (error != std::errc() || stop != end || value < 0)
        return fmt::format("must be a device index (an integer >= 0) or all, got '{}'", text);
      return {};
    },
    "INDEX|all");

const CLI::Validator kShard(
    [](std::string& text) -> std::string {
      const auto shard = parse_shard(text);
      return shard.ok() ? std::string() : shard.error().message;
    },
    "I/N");

const std::vector<std::string> kSubcommands = {"run",    "replay", "gen",  "inspect", "tune",
                                               "bench",  "reduce", "soak", "merge",   "compare"};

// Edit distance with transpositions ("replya" is one step from "replay").
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    const std::size_t distance = edit_distance(word, c);
    if (distance < best_distance) best = c, best_distance = distance;
  }
  return best;
}

// The first argument must be a subcommand (or --help/--version): CLI11 says
// only "A subcommand is required" for `pagecheck replya x` and for
// `pagecheck --bogus`. Returns the message when it is not.
std::optional<std::string> check_subcommand_word(int argc, char** argv) {
  std::string list;
  for (const auto& name : kSubcommands) list += (list.empty() ? "" : ", ") + name;
  if (argc < 2) return fmt::format("a subcommand is required: {} (see pagecheck --help)", list);
  const std::string_view word = argv[1];
  if (word == "-h" || word == "--help" || word == "--version") return std::nullopt;
  if (std::find(kSubcommands.begin(), kSubcommands.end(), word) != kSubcommands.end()) return std::nullopt;
  std::string bare(word);
  bare.erase(0, bare.find_first_not_of('-'));
  const std::string close = nearest(bare, kSubcommands);
  if (word.rfind('-', 0) == 0)
    return fmt::format("unknown option '{}': pagecheck itself takes only --help and --version; the subcommand comes "
                       "first (pagecheck SUBCOMMAND [OPTIONS]); nearest subcommand: '{}'; subcommands: {}",
                       word, close, list);
  return fmt::format("'{}' is not a subcommand; did you mean '{}'? Subcommands: {}", word, close, list);
}

// CLI11's errors, as every other message: "pagecheck: ...", then where to look.
std::string failure_message(const CLI::App* /*app*/, const CLI::Error& e) {
  return fmt::format("pagecheck: {}\nRun with --help for the options.\n", e.what());
}

// "+seqs64+seq-len8192+non-causal": the geometry flags given, in option
// order, for naming a preset's variant (docs/cli.md "run").
std::string variant_suffix(const std::vector<CLI::Option*>& geometry) {
  std::string suffix;
  for (const auto* o : geometry) {
    if (o->count() == 0) continue;
    std::string name = o->get_name();
    name.erase(0, name.find_first_not_of('-'));
    suffix += "+" + name;
    if (o->get_expected_min() == 0) continue;  // a flag
    std::string value;
    for (const auto& r : o->results()) value += (value.empty() ? "" : ",") + r;
    suffix += value;
  }
  return suffix;
}

// Options that describe a synthetic case (run, gen). Returns the options
// that count as geometry flags, so that main can tell "nothing given".
std::vector<CLI::Option*> add_case_options(CLI::App* cmd, CaseOptions& o) {
  std::vector<CLI::Option*> geometry;
  // A geometry flag's default is the preset's, else the generator's.
  const SyntheticSpec base;
  const auto dflt = [](const auto& value) { return fmt::format(" (default: the preset's, else {})", value); };
  const auto geo = [&](CLI::Option* opt) {
    opt->group("Case");
    geometry.push_back(opt);
    return opt;
  };
  cmd->add_option("--preset", o.presets, "Model preset (repeatable); see --list-presets")->group("Case");
  cmd->add_flag("--list-presets", o.list_presets, "List the presets and exit")->group("Case");
  cmd->add_option("--name", o.name, "Case name")->group("Case");
  cmd->add_option("--description", o.description, "Case description")->group("Case");
  cmd->add_option("--seed", o.seed, "Generator seed")->check(kSeed)->capture_default_str()->group("Case");
  geo(cmd->add_option("--seqs", o.seqs, "Number of sequences" + dflt(base.num_seqs))->check(kPositiveInt));
  geo(cmd->add_option("--q-heads", o.q_heads, "Query heads" + dflt(base.q_heads))->check(kPositiveInt));
  geo(cmd->add_option("--kv-heads", o.kv_heads, "KV heads" + dflt(base.kv_heads))->check(kPositiveInt));
  geo(cmd->add_option("--head-dim", o.head_dim, "Query/key head dim" + dflt(base.head_dim))->check(kPositiveInt));
  geo(cmd->add_option("--v-head-dim", o.v_head_dim, "Value head dim (default: head dim)")->check(kPositiveInt));
  geo(cmd->add_option("--block-size", o.block_size, "Tokens per page" + dflt(base.block_size))->check(kPositiveInt));
  geo(cmd->add_option("--pool-factor", o.pool_factor, "Pool size as a multiple of the pages needed" + dflt(base.pool_factor))
          ->check(kPositiveInt));
  auto* seq_len = geo(cmd->add_option("--seq-len", o.seq_len, "Context length of every sequence" + dflt(base.seq_len_max))
                          ->check(kPositiveInt));
  auto* seq_min = geo(cmd->add_option("--seq-len-min", o.seq_len_min, "Uniform context lengths: minimum")
                          ->check(kPositiveInt));
  auto* seq_max = geo(cmd->add_option("--seq-len-max", o.seq_len_max, "Uniform context lengths: maximum")
                          ->check(kPositiveInt));
  auto* seq_list = geo(cmd->add_option("--seq-lens", o.seq_lens, "Context lengths, cycled (comma list)")
                           ->delimiter(',')
                           ->check(kPositiveInt));
  auto* boundary =
      geo(cmd->add_flag("--boundary", o.boundary, "Boundary lengths (1, block±1, partition±1, ...) in [min, max]"));
  seq_len->excludes(seq_min)->excludes(seq_max)->excludes(seq_list);
  seq_list->excludes(seq_min)->excludes(seq_max);
  boundary->excludes(seq_len)->excludes(seq_list);  // one length, or a list: nothing to pick boundaries from
  auto* q_len = geo(cmd->add_option("--q-len", o.q_len, "New query tokens per sequence")->check(kPositiveInt));
  auto* q_min = geo(cmd->add_option("--q-len-min", o.q_len_min, "Uniform query lengths: minimum")
                        ->check(kPositiveInt));
  auto* q_max = geo(cmd->add_option("--q-len-max", o.q_len_max, "Uniform query lengths: maximum")
                        ->check(kPositiveInt));
  q_len->excludes(q_min)->excludes(q_max);
  geo(cmd->add_option("--mode", o.mode,
                      "decode | prefill | chunked | mixed (a --q-len above 1 implies chunked)" +
                          dflt(query_mode_name(base.query_mode))));
  geo(cmd->add_option("--kv-dtype", o.kv_dtype, "F32 | F16 | BF16 | F8_E4M3 | F8_E5M2" + dflt(dtype_name(base.kv_dtype))));
  geo(cmd->add_option("--q-dtype", o.q_dtype, "F32 | F16 | BF16" + dflt(dtype_name(base.query_dtype))));
  geo(cmd->add_option("--layout", o.layout, "NHD | HND" + dflt("NHD")));
  geo(cmd->add_option("--table", o.table, "dense (vLLM) | csr (FlashInfer)" + dflt("dense")));
  geo(cmd->add_option("--window", o.window, "Sliding window in keys, 0: none" + dflt(base.sliding_window))
          ->check(kNonNegativeInt));
  geo(cmd->add_option("--softcap", o.softcap, "Logit softcap, 0: none" + dflt(base.softcap))->check(kNonNegativeNotNan));
  geo(cmd->add_option("--scale", o.scale, "Logit scale (default 1/sqrt(head_dim))")->check(kPositiveFinite));
  geo(cmd->add_option("--k-scale", o.k_scale, "Key dequantisation scale (default: the preset's, else 1)")
          ->check(kPositiveFinite));
  geo(cmd->add_option("--v-scale", o.v_scale, "Value dequantisation scale (default: the preset's, else 1)")
          ->check(kPositiveFinite));
  geo(cmd->add_option("--profile", o.profile, "Values: gaussian | llm | large-logits" + dflt(value_profile_name(base.profile))));
  geo(cmd->add_flag("--non-causal", o.non_causal, "Attend to every key, not only earlier ones"));
  auto* sinks = geo(cmd->add_flag("--sinks", o.sinks, "Attention sinks: a logit per query head, drawn from the seed"));
  geo(cmd->add_flag("--no-sinks", o.no_sinks, "No attention sinks (also on a preset that has them)"))->excludes(sinks);
  auto* alibi = geo(cmd->add_flag("--alibi", o.alibi, "ALiBi: a slope per query head (BLOOM/MPT's slopes)"));
  geo(cmd->add_flag("--no-alibi", o.no_alibi, "No ALiBi (also on a preset that has it)"))->excludes(alibi);
  geo(cmd->add_flag("--mla", o.mla,
                    "A latent (MLA) cache: one KV head, rows of --head-dim (default 576) whose first --v-head-dim "
                    "(default 512) columns are V; scale 1/sqrt(192) unless --scale"));
  geo(cmd->add_flag("--no-share-pages", o.no_share_pages, "Do not share pages between sequences"));
  geo(cmd->add_flag("--no-poison", o.no_poison, "Do not fill unused pages and slots with NaN"));
  return geometry;
}

void add_shard_options(CLI::App* cmd, ExecOptions& e);

void add_exec_options(CLI::App* cmd, ExecOptions& e, bool bench) {
  const char* g = "Execution";
  cmd->add_option("--paths", e.paths,
                  bench ? "GPU paths (comma list: direct,split,auto,prefill,fmha; default all)"
                        : "Paths (comma list: reference,direct,split,auto,prefill,fmha; default all)")
      ->delimiter(',')
      ->group(g);
  // One file per --kernel (repeat it for several): a list would swallow
  // replay's case files.
  cmd->add_option("--kernel", e.kernels,
                  "External kernel library (repeatable), [PREFIX=]FILE; each of its kernels is a path ext:NAME, "
                  "or PREFIX:NAME when given (two builds of one library: --kernel old=a.so --kernel new=b.so; "
                  "docs/external-kernels.md)")
      ->allow_extra_args(false)
      ->group(g);
  cmd->add_option("--atol", e.atol, "Absolute tolerance (overrides the per-dtype default)")
      ->check(kNonNegativeNotNan)
      ->group(g);
  cmd->add_option("--rtol", e.rtol, "Relative tolerance (overrides the per-dtype default)")
      ->check(kNonNegativeNotNan)
      ->group(g);
  // --device N, or all: one worker process per GPU (docs/cli.md "Sharding").
  cmd->add_option_function<std::string>(
         "--device",
         [&e](const std::string& text) {
           e.all_devices = text == "all";
           if (!e.all_devices) e.device = std::stoi(text);
         },
         "CUDA device index, or all: one worker process per GPU, their reports merged")
      ->check(kDevice)
      ->default_str("0")
      ->group(g);
  add_shard_options(cmd, e);
  if (!bench) cmd->add_flag("--require-gpu", e.require_gpu, "A missing GPU is a failure (exit 4)")->group(g);
  cmd->add_flag("--fail-on-skip", e.fail_on_skip, "A skipped or n/a selected path fails the run (exit 1)")->group(g);
  auto* hot = cmd->add_flag("--hot", e.hot, "Do not flush L2 between timed repeats")->group(g);
  auto* repeats = cmd->add_option("--repeats", e.repeats, "Timed repeats (median reported)")
                      ->check(kPositiveInt32)
                      ->capture_default_str()
                      ->group(g);
  auto* warmup = cmd->add_option("--warmup", e.warmup, "Warm-up runs before timing")
                     ->check(kNonNegativeInt32)
                     ->capture_default_str()
                     ->group(g);
  cmd->add_flag("--no-timing", e.no_timing, "Correctness only: no timed repeats")
      ->excludes(hot)
      ->excludes(repeats)
      ->excludes(warmup)
      ->group(g);
  cmd->add_flag("--no-checks", e.no_checks, "Skip the repeatability and graph-replay checks")->group(g);
  if (!bench)
    cmd->add_flag("--check-batch-invariance", e.check_batch_invariance,
                  "Compare each path's output bit for bit with its output for each sequence alone and for the batch "
                  "permuted and padded")
        ->group(g);
  cmd->add_option("--plan", e.plan,
                  "Decode plan: direct | invariant | split:PARTITION:THRESHOLD (default: the heuristic, or --tuning)")
      ->group(g);
  cmd->add_option("--tuning", e.tuning_file, "Tuning file written by `pagecheck tune`")->group(g);
  cmd->add_option("--threads", e.threads, "Reference threads (0: all cores)")
      ->check(kNonNegativeInt32)
      ->capture_default_str()
      ->group(g);
}

void add_output_options(CLI::App* cmd, OutputOptions& o) {
  const char* g = "Output";
  cmd->add_option("--json", o.json, "Write the report as JSON (-: stdout, the table then goes to stderr)")->group(g);
  cmd->add_option("--csv", o.csv, "Write one CSV row per case and path (-: stdout)")->group(g);
  cmd->add_option("--junit", o.junit, "Write JUnit XML, for CI (-: stdout)")->group(g);
  cmd->add_option("--html", o.html, "Write one self-contained HTML page: error heat maps, roofline (-: stdout)")
      ->group(g);
  cmd->add_option("--save-failing", o.save_failing, "Write a replay bundle for each failing case into DIR")->group(g);
  cmd->add_flag("-q,--quiet", o.quiet, "Only the summary line and the list of failures")->group(g);
  cmd->add_flag("--no-color", o.no_color, "No ANSI colors (also: NO_COLOR set, or not a terminal)")->group(g);
}

// --isolation, --path-timeout (run, replay, bench; docs/cli.md "Isolation").
void add_isolation_options(CLI::App* cmd, ExecOptions& e) {
  const char* g = "Execution";
  cmd->add_option("--isolation", e.isolation,
                  "Run the paths in a worker process restarted after a crash, hang or lost CUDA context: auto (when "
                  "a GPU path runs), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--path-timeout", e.path_timeout,
                  "Seconds a path (the reference too) may take in an isolated run before it is ended as an error; 0: "
                  "no limit")
      ->check(kNonNegativeNotNan)
      ->capture_default_str()
      ->group(g);
  // The worker side of isolation: started by the supervisor only.
  cmd->add_option("--isolation-worker", e.isolation_worker)->group("");
}

// --shard I/N and --workers N (run, replay, bench; docs/cli.md "Sharding").
void add_shard_options(CLI::App* cmd, ExecOptions& e) {
  auto* shard = cmd->add_option("--shard", e.shard, "Run only shard I of N (0-based): case k when k mod N == I")
                    ->check(kShard)
                    ->group("Execution");
  cmd->add_option("--workers", e.workers, "Run N worker processes here, one shard each, and merge their reports")
      ->check(kPositiveInt32)
      ->excludes(shard)
      ->group("Execution");
}

std::string executable_path(const char* argv0) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) return self.string();
  return argv0 != nullptr ? argv0 : "pagecheck";
}

// An environment override (docs/cli.md "Environment") set to none of its
// choices, where a typo would otherwise silently run the default: the usage
// error to print ("NAME='value' is not PROBLEM; use HINT"), else nothing.
std::optional<std::string> bad_env_choice(const char* name, std::initializer_list<std::string_view> choices,
                                          std::string_view problem, std::string_view hint) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  if (std::find(choices.begin(), choices.end(), std::string_view(value)) != choices.end()) return std::nullopt;
  return fmt::format("pagecheck: {}='{}' is not {}; use {}\n", name, value, problem, hint);
}

int real_main(int argc, char** argv) {
  Invocation invocation;
  invocation.executable = executable_path(argc > 0 ? argv[0] : nullptr);
  for (int i = 0; i < argc; ++i)
    invocation.command_line += (i ? " " : "") + shell_quote(i == 0 ? std::string("pagecheck") : std::string(argv[i]));
  for (int i = 1; i < argc; ++i) invocation.args.emplace_back(argv[i]);

  CLI::App app{"pagecheck: a harness for paged-attention kernels. Runs synthetic or recorded cases through the GPU\n"
               "paths and an Eigen CPU reference, and reports the error and throughput of each path."};
  app.set_version_flag("--version", std::string("pagecheck ") + PAGECHECK_VERSION);
  app.require_subcommand(1);
  app.failure_message(failure_message);
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
  add_isolation_options(run_cmd, run.exec);
  add_output_options(run_cmd, run.out);

  ReplayConfig replay;
  auto* replay_cmd = app.add_subcommand("replay", "Run recorded case files (safetensors)");
  replay_cmd->add_option("files", replay.files, "Case files")->required();
  add_exec_options(replay_cmd, replay.exec, false);
  add_isolation_options(replay_cmd, replay.exec);
  add_output_options(replay_cmd, replay.out);

  GenConfig gen;
  auto* gen_cmd = app.add_subcommand("gen", "Write one synthetic case file");
  add_case_options(gen_cmd, gen.cases);
  gen_cmd->add_option("-o,--output", gen.output, "Case file to write")->required();
  auto* with_output =
      gen_cmd->add_flag("--with-output", gen.with_output, "Store the reference output and LSE as the recorded result");
  gen_cmd->add_option("--output-dtype", gen.output_dtype, "dtype of the recorded output: F32, F16 or BF16")
      ->check(CLI::IsMember({"F32", "F16", "BF16"}, CLI::ignore_case))
      ->capture_default_str()
      ->needs(with_output);  // without a recorded output there is nothing to round
  gen_cmd->add_option("--threads", gen.threads, "Reference threads (0: all cores)")
      ->check(kNonNegativeInt32)
      ->capture_default_str();

  InspectConfig inspect;
  auto* inspect_cmd = app.add_subcommand("inspect", "Show case files' geometry, table statistics, validity, paths");
  inspect_cmd->add_option("files", inspect.files, "Case files")->required();
  inspect_cmd->add_option("--device", inspect.device, "CUDA device index")
      ->check(kNonNegativeInt32)
      ->capture_default_str();

  TuneConfig tune;
  auto* tune_cmd = app.add_subcommand("tune", "Measure direct against split-KV decode; write a tuning file (GPU)");
  tune_cmd->add_option("-o,--output", tune.output, "Tuning file to write")->required();
  tune_cmd->add_option("--json", tune.json, "Write a JSON report: the outcome, or why it could not run (-: stdout)");
  tune_cmd->add_option("--device", tune.device, "CUDA device index")->check(kNonNegativeInt32)->capture_default_str();
  tune_cmd->add_option("--contexts", tune.context_lengths, "Context lengths to sweep (comma list; default: built in)")
      ->delimiter(',')
      ->check(kPositiveInt);
  tune_cmd->add_option("--partitions", tune.partition_sizes, "Partition sizes to sweep (comma list; default: built in)")
      ->delimiter(',')
      ->check(kPositiveInt);
  tune_cmd->add_option("--q-heads", tune.q_heads, "Query heads")->check(kPositiveInt)->capture_default_str();
  tune_cmd->add_option("--kv-heads", tune.kv_heads, "KV heads")->check(kPositiveInt)->capture_default_str();
  tune_cmd->add_option("--head-dim", tune.head_dim, "Head dim")->check(kPositiveInt)->capture_default_str();
  tune_cmd->add_option("--v-head-dim", tune.v_head_dim, "Value head dim")->check(kPositiveInt)->capture_default_str();
  tune_cmd->add_option("--seqs", tune.seqs, "Batch size (0: several)")->check(kNonNegativeInt)->capture_default_str();

  BenchConfig bench;
  auto* bench_cmd = app.add_subcommand("bench", "Benchmark the GPU paths on the served shapes (GPU)");
  bench_cmd->add_option("--shapes", bench.shapes, "decode | prefill | all")
      ->check(CLI::IsMember({"decode", "prefill", "all"}))
      ->capture_default_str();
  bench_cmd->add_option("--seed", bench.seed, "Generator seed")->check(kSeed)->capture_default_str();
  bench_cmd->add_flag("--check", bench.check, "Also compare with the CPU reference (slow on the long shapes)");
  bench_cmd->add_option("--block-size", bench.variant.block_size, "Tokens per page of every shape")
      ->check(kPositiveInt)
      ->capture_default_str();
  bench_cmd->add_option("--head-dim", bench.variant.head_dim, "Head dim of every shape")
      ->check(kPositiveInt)
      ->capture_default_str();
  bench_cmd->add_option("--kv-dtype", bench.variant.kv_dtype, "KV dtype of every shape: F32 | F16 | BF16 | F8_E4M3 | F8_E5M2")
      ->check(CLI::IsMember({"F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}))
      ->capture_default_str();
  add_exec_options(bench_cmd, bench.exec, true);
  add_isolation_options(bench_cmd, bench.exec);
  add_output_options(bench_cmd, bench.out);

  ReduceConfig reduce;
  auto* reduce_cmd =
      app.add_subcommand("reduce", "Cut a failing case down to the smallest that fails the same way on one path");
  reduce_cmd->add_option("file", reduce.file, "Failing case file")->required();
  reduce_cmd->add_option("-o,--output", reduce.output, "Reduced case to write (default: FILE's stem + .reduced.safetensors)");
  reduce_cmd->add_option("--max-tests", reduce.max_tests, "Budget: runs of the path, the input's included")
      ->check(kPositiveInt32)
      ->capture_default_str();
  reduce_cmd->add_flag("-q,--quiet", reduce.quiet, "No progress lines");
  add_exec_options(reduce_cmd, reduce.exec, false);
  SoakConfig soak;
  auto* soak_cmd = app.add_subcommand(
      "soak", "Random valid cases over the whole generator space; each failure reduced and saved once");
  auto* soak_minutes = soak_cmd->add_option("--minutes", soak.minutes, "Run for M minutes (default 1 without --cases)")
                           ->check(kPositiveFinite)
                           ->group("Soak");
  auto* soak_cases = soak_cmd->add_option("--cases", soak.cases, "Run N cases")->check(kPositiveInt)->group("Soak");
  soak_cmd->add_option("--seed", soak.seed, "Seed of the case stream")->check(kSeed)->capture_default_str()->group("Soak");
  soak_cmd->add_option("--case", soak.only_case, "Run case K of the seed alone (as a failure's line names it)")
      ->check(kNonNegativeInt)
      ->excludes(soak_minutes)
      ->excludes(soak_cases)
      ->group("Soak");
  soak_cmd->add_option("--first-case", soak.first_case, "Start at case K of the seed")
      ->check(kSeed)
      ->capture_default_str()
      ->group("Soak");
  soak_cmd->add_option("--max-tests", soak.max_tests, "Reduce's budget per failure: runs of the path")
      ->check(kPositiveInt32)
      ->capture_default_str()
      ->group("Soak");
  soak_cmd->add_flag("--no-reduce", soak.no_reduce, "Save each failing case as it is, not reduced")->group("Soak");
  soak_cmd->add_flag("--stop-on-failure", soak.stop_on_failure,
                     "Stop after the first failing case (the end line says when it came)")
      ->group("Soak");
  add_exec_options(soak_cmd, soak.exec, false);
  add_output_options(soak_cmd, soak.out);

  MergeConfig merge;
  auto* merge_cmd = app.add_subcommand("merge", "Join JSON reports (shards of one run, or separate runs) into one");
  merge_cmd->add_option("reports", merge.files, "JSON reports written by run, replay or bench --json")->required();
  merge_cmd->add_flag("--allow-missing-shards", merge.allow_missing_shards,
                      "Merge an incomplete set of shards (a warning, not an error)");
  merge_cmd->add_option("--json", merge.out.json, "Write the merged report as JSON (-: stdout)")->group("Output");
  merge_cmd->add_option("--csv", merge.out.csv, "Write one CSV row per case and path (-: stdout)")->group("Output");
  merge_cmd->add_option("--junit", merge.out.junit, "Write JUnit XML (-: stdout)")->group("Output");
  merge_cmd->add_flag("-q,--quiet", merge.out.quiet, "Only the summary line and the list of failures")->group("Output");
  merge_cmd->add_flag("--no-color", merge.out.no_color, "No ANSI colors")->group("Output");

  CompareConfig compare;
  auto* compare_cmd = app.add_subcommand("compare", "Judge NEW against BASE: slower, faster, more error, now failing, ...");
  compare_cmd->add_option("base", compare.base_file, "The baseline JSON report (run, replay, bench, merge)")->required();
  compare_cmd->add_option("new", compare.new_file, "The JSON report judged against it (none with --pair)");
  compare_cmd->add_option("--pair", compare.pairs, "A=B: path B of the one report judged against its path A");
  compare_cmd->add_option("--max-slowdown", compare.max_slowdown, "Percent of BASE's median a time must change by")
      ->capture_default_str();
  compare_cmd->add_option("--max-error-growth", compare.max_error_growth, "Percent a max error must grow by")
      ->capture_default_str();
  compare_cmd->add_option("--fail-on", compare.fail_on, "Also fail on these verdicts (faster,gone,new,changed,...)")
      ->delimiter(',');
  compare_cmd->add_option("--json", compare.json, "Write the comparison as JSON (-: stdout)")->group("Output");
  compare_cmd->add_option("--html", compare.html, "Write one HTML page, the change per path drawn (-: stdout)")
      ->group("Output");
  compare_cmd->add_option("--junit", compare.junit, "Write JUnit XML, a failure per regression (-: stdout)")
      ->group("Output");
  compare_cmd->add_flag("-q,--quiet", compare.quiet, "Only the summary line and the regressions")->group("Output");
  compare_cmd->add_flag("--no-color", compare.no_color, "No ANSI colors")->group("Output");

  if (const auto wrong = check_subcommand_word(argc, argv)) {
    fmt::print(stderr, "pagecheck: {}\n", *wrong);
    return exit_code::kUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    // An option the subcommand does not have: named, with the nearest one
    // it has ("run --seqz 4": "did you mean '--seqs'?").
    for (const CLI::App* sub : app.get_subcommands()) {
      std::vector<std::string> known;
      for (const CLI::Option* o : sub->get_options())
        for (const auto& name : o->get_lnames()) known.push_back("--" + name);
      for (const auto& word : sub->remaining()) {
        if (word.rfind("--", 0) != 0) continue;
        const std::string bare = word.substr(0, word.find('='));
        fmt::print(stderr, "pagecheck: {} has no option '{}'; did you mean '{}'? (pagecheck {} --help lists them)\n",
                   sub->get_name(), bare, nearest(bare, known), sub->get_name());
        return exit_code::kUsage;
      }
    }
    app.exit(e);
    return exit_code::kUsage;
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; every other parse
    // error is a usage error.
    const int cli_code = app.exit(e);
    return cli_code == 0 ? exit_code::kPass : exit_code::kUsage;
  }

  // The kernel overrides and the test hook of isolation (docs/cli.md
  // "Environment"), checked before anything runs.
  if (const auto bad = bad_env_choice(
          "PAGECHECK_ATTN_KERNEL", {"mma", "wgmma", "auto"}, "a kernel choice",
          "mma (the portable mma.sync kernel), wgmma (the first sm_90a kernel, without warp specialisation) or "
          "auto (the default: the warp-specialised wgmma kernel on compute capability 9.0)")) {
    fmt::print(stderr, "{}", *bad);
    return exit_code::kUsage;
  }
  if (const auto fault = test_fault_from_environment(); !fault.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", fault.error().message);
    return exit_code::kUsage;
  }
  for (const auto& bad :
       {bad_env_choice("PAGECHECK_DECODE_KERNEL", {"mma", "simt"}, "a decode loop",
                       "mma (the tensor-core loop where it applies, the default) or simt (the CUDA-core loop "
                       "everywhere)"),
        bad_env_choice("PAGECHECK_DECODE_TMA", {"0", "1"}, "0 or 1",
                       "0 (the direct and auto decode kernels copy K/V with cp.async, the default) or 1 (tensor "
                       "copies where they apply)")}) {
    if (bad) {
      fmt::print(stderr, "{}", *bad);
      return exit_code::kUsage;
    }
  }

  // The device-memory cap of the GPU paths' memory check (docs/cli.md
  // "Environment"): a typo would otherwise silently check against the real
  // free memory.
  if (const auto device_limit = device_memory_limit(); !device_limit.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", device_limit.error().message);
    return exit_code::kUsage;
  }

  const auto any_counted = [](const std::vector<CLI::Option*>& options) {
    for (const auto* o : options)
      if (o->count() > 0) return true;
    return false;
  };
  if (run_cmd->parsed()) {
    run.cases.any_geometry_flag = any_counted(run_geometry);
    run.cases.variant_suffix = variant_suffix(run_geometry);
    run.cases.seed_given = run_cmd->get_option("--seed")->count() > 0;
    return cmd_run(run, invocation);
  }
  if (replay_cmd->parsed()) return cmd_replay(replay, invocation);
  if (gen_cmd->parsed()) {
    gen.cases.seed_given = gen_cmd->get_option("--seed")->count() > 0;
    return cmd_gen(gen);
  }
  if (inspect_cmd->parsed()) return cmd_inspect(inspect);
  if (tune_cmd->parsed()) return cmd_tune(tune, invocation);
  if (bench_cmd->parsed()) return cmd_bench(bench, invocation);
  if (reduce_cmd->parsed()) {
    // Correctness only unless timing was asked for: a failure does not
    // depend on it, and reduce runs the path many times.
    if (reduce_cmd->get_option("--hot")->count() + reduce_cmd->get_option("--warmup")->count() +
            reduce_cmd->get_option("--repeats")->count() ==
        0)
      reduce.exec.no_timing = true;
    return cmd_reduce(reduce, invocation);
  }
  if (soak_cmd->parsed()) {
    // Correctness only unless timing was asked for, as reduce.
    if (soak_cmd->get_option("--hot")->count() + soak_cmd->get_option("--warmup")->count() +
            soak_cmd->get_option("--repeats")->count() ==
        0)
      soak.exec.no_timing = true;
    soak.exec.check_batch_invariance = true;
    return cmd_soak(soak, invocation);
  }
  if (merge_cmd->parsed()) return cmd_merge(merge, invocation);
  if (compare_cmd->parsed()) return cmd_compare(compare);
  fmt::print(stderr, "pagecheck: no subcommand (see --help)\n");
  return exit_code::kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // A reader that goes away (`pagecheck run | head`) must not kill the run
  // before its reports are written: writes to it fail instead (EPIPE), and
  // the runner stops printing the table.
  std::signal(SIGPIPE, SIG_IGN);
  // SIGINT and SIGTERM: the reports of the finished cases are written, the
  // run marked interrupted (docs/cli.md "Interrupts"). Before any thread.
  pagecheck::app::watch_interrupts();
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
