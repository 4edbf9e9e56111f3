// The CLI's configuration structs: main.cpp binds the options to these, the
// commands read them. Nothing here parses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagecheck::app {

// Synthetic case options shared by `run` and `gen`. Strings stay strings
// until build_specs() turns them into SyntheticSpecs, so that every
// conversion error is reported in one place.
struct CaseOptions {
  std::vector<std::string> presets;
  bool list_presets = false;
  bool list_suite = false;  // run --list-suite
  std::string name;
  std::string description;
  std::uint64_t seed = 1;
  bool seed_given = false;  // set by main.cpp
  std::int64_t seqs = 0;
  std::int64_t q_heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t v_head_dim = 0;
  std::int64_t block_size = 0;
  std::int64_t pool_factor = 0;
  std::int64_t seq_len = 0;
  std::int64_t seq_len_min = 0;
  std::int64_t seq_len_max = 0;
  std::vector<std::int64_t> seq_lens;
  bool boundary = false;  // boundary lengths in [seq_len_min, seq_len_max]
  std::int64_t q_len = 0;
  std::int64_t q_len_min = 0;
  std::int64_t q_len_max = 0;
  std::string mode;     // decode | prefill | chunked | mixed
  std::string kv_dtype;
  std::string q_dtype;
  std::string layout;   // NHD | HND
  std::string table;    // dense | csr
  std::int64_t window = -1;
  double softcap = -1;
  std::optional<double> scale;
  std::optional<double> k_scale;
  std::optional<double> v_scale;
  std::string profile;  // gaussian | llm | large-logits
  bool non_causal = false;
  bool sinks = false;     // a sink logit per query head (drawn from the seed)
  bool no_sinks = false;  // none, also on a preset that has them
  bool alibi = false;     // ALiBi slopes per query head (the BLOOM/MPT formula)
  bool mla = false;       // a latent (MLA) cache: 576/512, one KV head, scale 1/sqrt(192) unless given
  bool no_alibi = false;
  bool no_share_pages = false;
  bool no_poison = false;
  bool any_geometry_flag = false;  // set by main.cpp from the options' counts
  // The geometry flags as given, "+seqs64+seq-len8192", in the order of
  // --help; set by main.cpp. A preset with flags on top is named
  // "<preset><variant_suffix>" so that its reports and bundles do not
  // collide with the preset's own.
  std::string variant_suffix;
};

// How paths are run and judged (run, replay, bench).
struct ExecOptions {
  std::vector<std::string> paths;  // empty: every path
  std::vector<std::string> kernels;  // --kernel [PREFIX=]FILE (repeatable): external kernel libraries, paths ext:NAME or PREFIX:NAME
  std::optional<double> atol;
  std::optional<double> rtol;
  int device = 0;
  bool require_gpu = false;
  bool fail_on_skip = false;  // a skipped or n/a selected path fails the run (exit 1)
  bool hot = false;
  int repeats = 20;
  int warmup = 3;
  bool no_timing = false;
  bool no_checks = false;
  // --check-batch-invariance (on in soak): each path's result compared bit
  // for bit with its results for re-batched sequences (app/batch_check.hpp).
  bool check_batch_invariance = false;
  std::string plan;         // --plan direct | split:P:T
  std::string tuning_file;  // --tuning FILE
  int threads = 0;          // reference threads, 0: all cores
  bool compare_reference = true;  // bench: only with --check
  // Sweeps over several jobs or GPUs (docs/cli.md "Sharding").
  std::string shard;         // --shard I/N: run only case k with k mod N == I (0-based)
  bool all_devices = false;  // --device all: one worker process per GPU, merged
  int workers = 0;           // --workers N: N worker processes on this host (0: none, run here)
  // Isolation (docs/cli.md "Isolation"): the paths run in a worker process
  // that is restarted when one crashes, hangs or loses the CUDA context.
  std::string isolation = "auto";  // --isolation auto | on | off
  double path_timeout = 900;       // --path-timeout SECONDS: a path (the reference too) ends after it; 0: never
  std::string isolation_worker;    // hidden --isolation-worker DIR: this process is that worker
};

// Where results go. A report path of "-" is stdout; the terminal table then
// goes to stderr.
struct OutputOptions {
  std::string json;
  std::string csv;
  std::string junit;
  std::string html;  // --html: one self-contained page (report_html.hpp)
  std::string save_failing;
  bool quiet = false;
  bool no_color = false;
};

struct RunConfig {
  CaseOptions cases;
  ExecOptions exec;
  OutputOptions out;
};

struct ReplayConfig {
  std::vector<std::string> files;
  ExecOptions exec;
  OutputOptions out;
};

struct GenConfig {
  CaseOptions cases;
  std::string output;
  bool with_output = false;
  std::string output_dtype = "F32";  // of the recorded output (F32, F16, BF16)
  int threads = 0;
};

struct InspectConfig {
  std::vector<std::string> files;
  int device = 0;
};

struct TuneConfig {
  std::string output;  // tuning file to write
  std::string json;    // --json: a report of the run, with the reason when it could not run
  int device = 0;
  std::vector<std::int64_t> context_lengths;
  std::vector<std::int64_t> partition_sizes;
  std::int64_t q_heads = 32, kv_heads = 8, head_dim = 128, v_head_dim = 128;
  std::int64_t seqs = 0;
};

// What `bench` may change in its served shapes (the defaults are those shapes').
struct BenchVariant {
  std::int64_t block_size = 16;
  std::int64_t head_dim = 128;
  std::string kv_dtype = "BF16";
};

struct BenchConfig {
  std::string shapes = "all";  // decode | prefill | all
  std::uint64_t seed = 1;
  BenchVariant variant;        // --block-size, --head-dim, --kv-dtype
  bool check = false;
  ExecOptions exec;
  OutputOptions out;
};

// pagecheck reduce FILE --paths P (docs/cli.md "reduce").
struct ReduceConfig {
  std::string file;
  std::string output;   // -o; empty: <stem>.reduced.safetensors next to FILE
  int max_tests = 300;  // runs of the path, the first (the input) included
  bool quiet = false;
  ExecOptions exec;
};

// pagecheck soak (docs/cli.md "soak"): random cases until the time or the
// count is spent, each failure reduced and saved once.
struct SoakConfig {
  double minutes = 0;           // --minutes M (0: not given)
  std::int64_t cases = 0;       // --cases N (0: not given)
  std::uint64_t seed = 1;       // --seed S
  std::int64_t only_case = -1;  // --case K: case K of seed S alone (-1: not given)
  std::uint64_t first_case = 0; // --first-case K: start at case K
  int max_tests = 200;          // reduce's budget per failure
  bool no_reduce = false;       // save failures as they are
  bool stop_on_failure = false; // stop after the first failing case (how long a fault takes to show)
  ExecOptions exec;
  OutputOptions out;  // --save-failing: where each distinct failure goes (default soak-failures)
};

// What main() knows about itself, for reports and replay commands.
struct Invocation {
  std::string command_line;  // argv joined, shell-quoted
  std::string executable;    // absolute path of this binary where known
  std::vector<std::string> args;  // argv[1..] as given (the subcommand first), for --device all's workers
};

// pagecheck merge: JSON reports in, one report out.
struct MergeConfig {
  std::vector<std::string> files;
  OutputOptions out;
  bool allow_missing_shards = false;
};

// pagecheck compare: two JSON reports in, verdicts out (docs/cli.md "compare").
struct CompareConfig {
  std::string base_file, new_file;
  // Percentages as given ("5" or "5%"), parsed by cmd_compare.
  std::string max_slowdown = "5";        // a time change must be past this ...
  std::string max_error_growth = "100";  // ... a max error grow past this
  std::vector<std::string> fail_on;      // verdicts added to slower, more error, now failing
  std::vector<std::string> pairs;        // --pair A=B: two paths of the one report base_file
  std::string json, html, junit;      // "-": stdout
  bool quiet = false;
  bool no_color = false;
};

}  // namespace pagecheck::app
