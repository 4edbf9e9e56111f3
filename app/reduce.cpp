// pagecheck reduce: delta debugging of a failing case (docs/cli.md
// "reduce"). Each candidate is a smaller case cut by lib's reduce.hpp and run
// through the one path exactly as `replay` runs it (runner's
// evaluate_one_case); it is kept when that path still fails the same way:
// the same status and the same kind of first failure. Steps, in rounds until
// one changes nothing or the --max-tests budget is spent: drop sequences
// (ddmin), drop KV heads, drop query heads of each group, shorten each
// sequence's query and context, keep only the referenced pages.
//
// On the reference path (a recorded output judged against the reference)
// only cuts that keep the recorded output the right answer are tried (see
// cut_keeps_answers); on a GPU path the reference is recomputed for each
// candidate, so every cut is allowed.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "reducer.hpp"
#include "bundles.hpp"
#include "case_sources.hpp"
#include "evaluate.hpp"
#include "exec_setup.hpp"
#include "report_targets.hpp"
#include "specs.hpp"
#include "pagecheck/case_file.hpp"
#include "pagecheck/reduce.hpp"
#include "pagecheck/validate.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

std::string failure_kind(const PathReport& row) {
  if (row.status == PathStatus::Error) return "error";
  const std::string& r = row.reason;
  const auto starts = [&](std::string_view prefix) { return r.rfind(prefix, 0) == 0; };
  const auto with_nan = [](std::string kind, const std::optional<ErrorStats>& e) {
    return e && e->nonfinite > 0 ? kind + " NaN/Inf" : kind + " beyond tolerance";
  };
  if (starts("output:")) return with_nan("output", row.error);
  if (starts("LSE:")) return with_nan("LSE", row.lse_error);
  if (starts("differs from the recorded output")) return with_nan("recorded output", row.recorded);
  if (starts("differs from the recorded LSE")) return with_nan("recorded LSE", row.recorded_lse);
  if (starts("returned ")) return "output size";
  if (r.find("unwritten") != std::string::npos) return "unwritten";
  if (r.find("repeatable") != std::string::npos) return "repeatability";
  if (r.find("graph") != std::string::npos || r.find("changing the table") != std::string::npos ||
      r.find("changed lengths") != std::string::npos)
    return "graph replay";
  if (r.find("batch-invariant") != std::string::npos) return "batch invariance";
  return "check: " + r.substr(0, r.find(':'));
}

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

class Reducer {
 public:
  Reducer(bool sound_only, int max_tests, bool quiet, std::function<std::optional<PathReport>(const Case&)> run)
      : sound_only_(sound_only), max_tests_(max_tests), quiet_(quiet), run_(std::move(run)) {}

  int tests() const { return tests_; }
  bool out_of_budget() const { return tests_ >= max_tests_; }

  // The first test: how the original fails (nullopt row: it does not).
  std::optional<PathReport> start(const Case& c) {
    ++tests_;
    auto row = run_(c);
    if (row && (row->status == PathStatus::Fail || row->status == PathStatus::Error)) {
      status_ = row->status;
      kind_ = failure_kind(*row);
    }
    return row;
  }
  const std::string& kind() const { return kind_; }

  Case reduce(Case c) {
    for (bool changed = true; changed && !out_of_budget();) {
      changed = false;
      changed |= drop_sequences(c);
      changed |= drop_heads(c);
      for (std::int64_t s = 0; s < c.num_seqs() && !out_of_budget(); ++s) changed |= shorten_sequence(c, s);
      changed |= compact(c);
    }
    return c;
  }

 private:
  // Whether `candidate` fails on the path the same way; counts one test.
  bool fails_same_way(const Case& candidate) {
    if (out_of_budget()) return false;
    ++tests_;
    const auto row = run_(candidate);
    return row && row->status == status_ && failure_kind(*row) == kind_;
  }

  void accepted(const Case& c, const std::string& what) {
    if (quiet_) return;
    const auto plural = [](std::int64_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); };
    fmt::print(stderr, "pagecheck: reduce: test {}: {}: still fails ({}, {}/{} heads, {}, {})\n", tests_, what,
               plural(c.num_seqs(), "seq"), c.q_heads(), c.kv_heads(), plural(c.num_tokens(), "token"),
               plural(c.num_blocks(), "page"));
    std::fflush(stderr);
  }

  // Zeller's ddmin over `items`: a subset that still fails, from which no
  // chunk at the finest granularity tried can be removed.
  std::vector<std::int64_t> ddmin(std::vector<std::int64_t> items,
                                  const std::function<bool(const std::vector<std::int64_t>&)>& fails) {
    std::size_t n = 2;
    while (items.size() >= 2 && !out_of_budget()) {
      const std::size_t chunk = (items.size() + n - 1) / n;
      std::vector<std::vector<std::int64_t>> parts;
      for (std::size_t i = 0; i < items.size(); i += chunk)
        parts.emplace_back(items.begin() + static_cast<std::ptrdiff_t>(i),
                           items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + chunk)));
      bool reduced = false;
      for (const auto& part : parts) {
        if (fails(part)) {
          items = part;
          n = 2;
          reduced = true;
          break;
        }
      }
      if (!reduced && parts.size() > 2) {
        for (std::size_t p = 0; p < parts.size() && !reduced; ++p) {
          std::vector<std::int64_t> rest;
          for (std::size_t q = 0; q < parts.size(); ++q)
            if (q != p) rest.insert(rest.end(), parts[q].begin(), parts[q].end());
          if (fails(rest)) {
            items = rest;
            n = std::max<std::size_t>(parts.size() - 1, 2);
            reduced = true;
          }
        }
      }
      if (reduced) continue;
      if (n >= items.size()) break;
      n = std::min(items.size(), n * 2);
    }
    return items;
  }

  static std::vector<std::int64_t> all(std::int64_t count) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(count));
    std::iota(v.begin(), v.end(), std::int64_t{0});
    return v;
  }

  bool drop_sequences(Case& c) {
    if (c.num_seqs() < 2) return false;
    // ddmin's subsets index the case as it was when it started.
    const Case base = c;
    ddmin(all(base.num_seqs()), [&](const std::vector<std::int64_t>& seqs) {
      Case candidate = keep_sequences(base, seqs);
      if (!fails_same_way(candidate)) return false;
      const std::int64_t was = c.num_seqs();
      c = std::move(candidate);
      accepted(c, fmt::format("sequences {} -> {}", was, c.num_seqs()));
      return true;
    });
    return c.num_seqs() < base.num_seqs();
  }

  // KV heads with all their query heads, then the query heads of each group.
  bool drop_heads(Case& c) {
    bool changed = false;
    if (c.kv_heads() >= 2) {
      const std::int64_t group = c.q_heads() / c.kv_heads();
      const Case base = c;
      ddmin(all(base.kv_heads()), [&](const std::vector<std::int64_t>& kv) {
        Case candidate = keep_heads(base, kv, all(group));
        if (!fails_same_way(candidate)) return false;
        const std::int64_t was = c.kv_heads();
        c = std::move(candidate);
        accepted(c, fmt::format("KV heads {} -> {}", was, c.kv_heads()));
        changed = true;
        return true;
      });
    }
    if (c.q_heads() / c.kv_heads() >= 2) {
      const std::int64_t group = c.q_heads() / c.kv_heads();
      const Case base = c;
      ddmin(all(group), [&](const std::vector<std::int64_t>& members) {
        Case candidate = keep_heads(base, all(base.kv_heads()), members);
        if (!fails_same_way(candidate)) return false;
        const std::int64_t was = c.q_heads();
        c = std::move(candidate);
        accepted(c, fmt::format("query heads {} -> {} (GQA group {} -> {})", was, c.q_heads(), was / c.kv_heads(),
                                c.q_heads() / c.kv_heads()));
        changed = true;
        return true;
      });
    }
    return changed;
  }

  // Lowers `value` towards `minimum` while `fails(candidate)` holds: try
  // the largest step, halve it on a miss.
  bool shrink(std::int64_t value, std::int64_t minimum, const std::function<bool(std::int64_t)>& fails) {
    bool changed = false;
    for (std::int64_t step = value - minimum; step > 0 && !out_of_budget();) {
      if (fails(value - step)) {
        value -= step;
        changed = true;
        step = std::min(step, value - minimum);
      } else {
        step /= 2;
      }
    }
    return changed;
  }

  bool try_cut(Case& c, std::int64_t s, const SequenceCut& cut, const std::string& what) {
    if (sound_only_ && !cut_keeps_answers(c, s, cut)) return false;
    Case candidate = cut_sequence(c, s, cut);
    if (!fails_same_way(candidate)) return false;
    c = std::move(candidate);
    accepted(c, fmt::format("sequence {}: {}", s, what));
    return true;
  }

  // Drops query tokens from the end (the context ends after the last kept
  // token when the mask is causal, so the kept tokens keep their
  // positions), then from the front; then, on a GPU path, shortens the
  // context under the kept tokens.
  bool shorten_sequence(Case& c, std::int64_t s) {
    bool changed = false;
    changed |= shrink(c.q_len(s), 1, [&](std::int64_t q) {
      const std::int64_t len = c.params.causal ? c.seq_lens[s] - c.q_len(s) + q : c.seq_lens[s];
      return try_cut(c, s, {len, 0, q}, fmt::format("last query tokens dropped: q_len {}, seq_len {}", q, len));
    });
    changed |= shrink(c.q_len(s), 1, [&](std::int64_t q) {
      return try_cut(c, s, {c.seq_lens[s], c.q_len(s) - q, q}, fmt::format("first query tokens dropped: q_len {}", q));
    });
    if (!sound_only_)
      changed |= shrink(c.seq_lens[s], c.q_len(s), [&](std::int64_t len) {
        return try_cut(c, s, {len, 0, c.q_len(s)}, fmt::format("context shortened: seq_len {}", len));
      });
    return changed;
  }

  bool compact(Case& c) {
    Case candidate = compact_pages(c);
    const bool same = candidate.num_blocks() == c.num_blocks() &&
                      candidate.table.page_indices == c.table.page_indices &&
                      candidate.table.max_blocks_per_seq == c.table.max_blocks_per_seq;
    if (same || !fails_same_way(candidate)) return false;
    const std::int64_t was = c.num_blocks();
    c = std::move(candidate);
    accepted(c, fmt::format("pool {} -> {} pages (only the referenced ones, renumbered)", was, c.num_blocks()));
    return true;
  }

  bool sound_only_ = false;
  int max_tests_ = 0;
  bool quiet_ = false;
  std::function<std::optional<PathReport>(const Case&)> run_;
  int tests_ = 0;
  PathStatus status_ = PathStatus::Fail;
  std::string kind_;
};

}  // namespace

std::optional<ReducedFailure> reduce_failure(const Case& c, int max_tests,
                                             const std::function<std::optional<PathReport>(const Case&)>& run) {
  Reducer reducer(false, max_tests, true, run);
  const auto first = reducer.start(c);
  if (!first || (first->status != PathStatus::Fail && first->status != PathStatus::Error)) return std::nullopt;
  ReducedFailure out{reducer.reduce(c), reducer.kind(), *first, 0};
  out.tests = reducer.tests();
  return out;
}

namespace {

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
  Reducer reducer(path == "reference", config.max_tests, config.quiet, run);
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
  if (reducer.out_of_budget())
    fmt::print("  the budget of {} tests ran out: it may reduce further (--max-tests)\n", config.max_tests);
  if (path == "reference")
    fmt::print("  (reference: only cuts that keep the recorded output the right answer; docs/cli.md \"reduce\")\n");
  fmt::print("replay: {}\n", replay_command(output, {path}, config.exec, invocation));
  return exit_code::kPass;
}

}  // namespace pagecheck::app
