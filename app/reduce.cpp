// pagecheck reduce (docs/cli.md "reduce"): the delta debugging of
// pagecheck/reducer.hpp over one path, each candidate run exactly as
// `replay` runs it (runner's evaluate_one_case). On the reference path (a
// recorded output judged against the reference) only cuts that keep the
// recorded output the right answer are tried (cut_keeps_answers); on a GPU
// path the reference is recomputed for each candidate, so every cut and
// feature simplification is allowed.
#include <algorithm>
#include <filesystem>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "bundles.hpp"
#include "case_sources.hpp"
#include "evaluate.hpp"
#include "exec_setup.hpp"
#include "report_targets.hpp"
#include "specs.hpp"
#include "pagecheck/case_file.hpp"
#include "pagecheck/reduce.hpp"
#include "pagecheck/reducer.hpp"
#include "pagecheck/validate.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

namespace {

// "[4, 17, 1]": a list of lengths, abbreviated past 8.
std::string short_list(const std::vector<std::int64_t>& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  if (values.size() > 8) out += fmt::format(", ... ({} in all)", values.size());
  return "[" + out + "]";
}

std::string geometry_of(const Case& c) {
  std::vector<std::int64_t> seq_lens, q_lens;
  for (std::int64_t s = 0; s < c.num_seqs(); ++s) {
    seq_lens.push_back(c.seq_lens[s]);
    q_lens.push_back(c.q_len(s));
  }
  return fmt::format("{}\n    seq_lens {}, q_lens {}, pool {} page{} ({} referenced)", describe_geometry(c),
                     short_list(seq_lens), short_list(q_lens), c.num_blocks(), c.num_blocks() == 1 ? "" : "s",
                     referenced_pages(c));
}

std::string default_output(const std::string& file) {
  const fs::path in(file);
  return (in.parent_path() / (in.stem().string() + ".reduced.safetensors")).string();
}

}  // namespace

int cmd_reduce(const ReduceConfig& config, const Invocation& invocation) {
  if (config.exec.paths.size() != 1 || config.exec.paths.front() == "all") {
    fmt::print(stderr, "pagecheck: reduce works on one path: give --paths P (e.g. --paths split, or --paths "
                       "reference for a case whose recorded output is wrong){}\n",
               config.exec.paths.empty() ? "" : fmt::format("; got '{}'", fmt::join(config.exec.paths, ",")));
    return exit_code::kUsage;
  }
  if (config.exec.paths.front() == "recorded") {
    fmt::print(stderr, "pagecheck: --paths: there is no path 'recorded': a case's recorded output is judged on the "
                       "reference's row; reduce it with --paths reference\n");
    return exit_code::kUsage;
  }
  auto setup = prepare_exec(config.exec);
  if (!setup.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", setup.error().describe());
    return exit_code_for(setup.error().code);
  }
  const std::string path = setup->paths.front();
  const std::string output = config.output.empty() ? default_output(config.file) : config.output;
  std::error_code ec;
  if (fs::exists(output, ec) && fs::exists(config.file, ec) && fs::equivalent(output, config.file, ec)) {
    fmt::print(stderr, "pagecheck: -o {} is the input file; reduce does not overwrite it\n", output);
    return exit_code::kUsage;
  }

  if (const Status there = check_case_path(config.file); !there.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", there.error().describe());
    return exit_code::kInvalidInput;
  }
  auto loaded = load_case_file(config.file);
  if (!loaded.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", with_label(config.file, loaded.error().describe()));
    return exit_code::kInvalidInput;
  }
  if (const ValidationReport v = validate_case(*loaded); !v.ok()) {
    fmt::print(stderr, "pagecheck: {}: invalid case: {}\n", config.file, fmt::join(v.errors, "; "));
    return exit_code::kInvalidInput;
  }
  if (const Status ready = prepare_output_file(output); !ready.ok()) {
    fmt::print(stderr, "pagecheck: -o: {}\n", ready.error().describe());
    return exit_code_for(ready.error().code);
  }

  PathRegistry registry;
  GpuSetup gpu;
  if (path != "reference" || config.exec.require_gpu) {
    auto found = setup_gpu(registry, config.exec.device, false, config.exec.require_gpu);
    if (!found.ok()) {
      fmt::print(stderr, "pagecheck: {}\n", found.error().describe());
      return exit_code_for(found.error().code);
    }
    gpu = std::move(*found);
  }
  for (auto& p : setup->external) registry.add(std::move(p));
  setup->external.clear();

  const auto run = [&](const Case& c) -> std::optional<PathReport> {
    const CaseReport report = evaluate_one_case(c, *setup, registry, gpu, config.exec);
    for (const auto& row : report.paths)
      if (row.path == path) return row;
    return std::nullopt;  // did not validate: no rows
  };
  const auto progress = [&](const Case& c, int test, const std::string& what) {
    if (config.quiet) return;
    const auto plural = [](std::int64_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); };
    fmt::print(stderr, "pagecheck: reduce: test {}: {}: still fails ({}, {}/{} heads, {}, {})\n", test, what,
               plural(c.num_seqs(), "seq"), c.q_heads(), c.kv_heads(), plural(c.num_tokens(), "token"),
               plural(c.num_blocks(), "page"));
    std::fflush(stderr);
  };
  Reducer reducer(path == "reference", config.max_tests, run, progress);
  const auto first = reducer.start(*loaded);
  if (!first) {
    fmt::print(stderr, "pagecheck: {}: path {} did not run on this case\n", config.file, path);
    return exit_code::kRuntime;
  }
  if (first->status == PathStatus::Skipped) {
    fmt::print(stderr, "pagecheck: path {} cannot run here ({}): nothing to reduce\n", path, first->reason);
    return exit_code::kRuntime;
  }
  if (first->status == PathStatus::NotApplicable) {
    fmt::print(stderr, "pagecheck: {}: path {} does not apply to this case ({}): nothing to reduce\n", config.file,
               path, first->reason);
    return exit_code::kInvalidInput;
  }
  if (first->status == PathStatus::Pass) {
    fmt::print(stderr, "pagecheck: {} does not fail on path {}: nothing to reduce{}\n", config.file, path,
               path == "reference" && !loaded->recorded_output && !loaded->recorded_lse
                   ? " (the reference fails only against a recorded output, and this case has none)"
                   : "");
    return exit_code::kInvalidInput;
  }
  if (!config.quiet)
    fmt::print(stderr, "pagecheck: reduce: {} fails on {} ({}): {}; up to {} tests\n", config.file, path,
               reducer.kind(), first->reason, config.max_tests);

  Case reduced = reducer.reduce(*loaded);
  reduced.params.extra_metadata["reduced_from"] = fs::path(config.file).filename().string();
  reduced.params.extra_metadata["reduced_failure"] = path + ": " + reducer.kind();
  const Status saved = save_case_file(reduced, output);
  if (!saved.ok()) {
    fmt::print(stderr, "pagecheck: cannot write {}: {}\n", output, saved.error().message);
    return exit_code_for(saved.error().code);
  }
  // The file as written must fail as the input did.
  auto reread = load_case_file(output);
  std::optional<PathReport> last;
  if (reread.ok()) last = run(*reread);
  if (!last || last->status != first->status || failure_kind(*last) != reducer.kind()) {
    fmt::print(stderr, "pagecheck: internal error: the written {} does not fail on {} as {} did\n", output, path,
               config.file);
    return exit_code::kRuntime;
  }

  fmt::print("reduced {} to {} in {} tests: still fails on {} ({})\n", config.file, output, reducer.tests() + 1, path,
             reducer.kind());
  fmt::print("  reason: {}\n", last->reason);
  fmt::print("  before: {}\n", geometry_of(*loaded));
  fmt::print("  after:  {}\n", geometry_of(reduced));
  if (!reducer.simplified().empty())
    fmt::print("  simplified: {} (the failure needs none of those features)\n", fmt::join(reducer.simplified(), ", "));
  if (reducer.out_of_budget())
    fmt::print("  the budget of {} tests ran out: it may reduce further (--max-tests)\n", config.max_tests);
  if (path == "reference")
    fmt::print("  (reference: only cuts that keep the recorded output the right answer; docs/cli.md \"reduce\")\n");
  fmt::print("replay: {}\n", replay_command(output, {path}, config.exec, invocation));
  return exit_code::kPass;
}

}  // namespace pagecheck::app
