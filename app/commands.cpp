// run, replay and gen.
#include "commands.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "report_targets.hpp"
#include "runner.hpp"
#include "workers.hpp"
#include "specs.hpp"
#include "pagecheck/case_file.hpp"
#include "pagecheck/reference.hpp"
#include "pagecheck/suite.hpp"
#include "pagecheck/synthetic.hpp"
#include "pagecheck/validate.hpp"

namespace pagecheck::app {
namespace fs = std::filesystem;

int cmd_list_presets() {
  for (const auto& name : preset_names()) {
    auto spec = preset(name);
    fmt::print("{:<22} {}\n", name, spec.ok() ? spec->description : spec.error().describe());
  }
  for (const auto& group : preset_groups()) {
    std::string members;
    for (const auto& m : group.members) members += (members.empty() ? "" : " + ") + m;
    fmt::print("{:<22} {} ({})\n", group.name, group.description, members);
  }
  return exit_code::kPass;
}

// The default suite as suite.hpp builds it: one line per case, then what
// each path family is covered by.
int cmd_list_suite() {
  const auto cases = default_suite_cases();
  std::vector<SuiteRow> rows;
  std::size_t fixed = 0;
  for (const auto& c : cases) {
    std::string targets;
    for (const auto& t : c.targets) targets += (targets.empty() ? "" : ",") + t;
    if (c.fixed) {
      ++fixed;
      fmt::print("{:<22} {:<34} fixed: {}\n", c.spec.name, targets, c.spec.description);
    } else {
      rows.push_back(c.row);
      fmt::print("{:<22} {:<34} {}\n", c.spec.name, targets, describe_suite_row(c.row));
    }
  }
  fmt::print("\n{} cases: {} covering rows (pairwise per path family), {} fixed\n", cases.size(), rows.size(), fixed);
  for (const auto& t : suite_targets()) {
    const auto accepted = std::count_if(rows.begin(), rows.end(), [&](const SuiteRow& r) { return t.accepts(r); });
    const auto open = uncovered_pairs(t, rows);
    std::string paths;
    for (const auto& p : t.paths) paths += (paths.empty() ? "" : ",") + p;
    fmt::print("  {:<14} paths {:<18} {:>3} covering cases, {} ({})\n", t.name, paths, accepted,
               open.empty() ? "every pair covered" : fmt::format("{} pairs uncovered", open.size()), t.note);
  }
  return exit_code::kPass;
}

int cmd_run(const RunConfig& config, const Invocation& invocation) {
  if (config.cases.list_presets) return cmd_list_presets();
  if (config.cases.list_suite) return cmd_list_suite();
  auto specs = build_specs(config.cases);
  if (!specs.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", specs.error().describe());
    return exit_code_for(specs.error().code);
  }
  // --device all / --workers: the cases are checked above, then the workers run them.
  if (wants_workers(config.exec)) return run_workers(config.exec, config.out, invocation);
  std::vector<CaseSource> sources;
  for (const auto& spec : *specs)
    sources.push_back({spec.name, [spec]() { return generate_case_sourced(spec); }});
  return run_cases(sources, config.exec, config.out, invocation);
}

int cmd_replay(const ReplayConfig& config, const Invocation& invocation) {
  if (wants_workers(config.exec)) return run_workers(config.exec, config.out, invocation);
  // Sharded, the files go in byte order, so that shells that expand a glob in
  // different orders (locales) still cut the same shards.
  std::vector<std::string> files = config.files;
  if (!config.exec.shard.empty()) std::sort(files.begin(), files.end());
  std::vector<CaseSource> sources;
  for (const auto& file : files) {
    sources.push_back({file, [file]() -> Expected<Case> {
                         PC_TRY(check_case_path(file));
                         auto c = load_case_file(file);
                         // Whatever made the file unreadable, the input is at
                         // fault: exit 3, naming the file.
                         if (!c.ok()) {
                           Error e = c.error();
                           e.code = ErrorCode::InvalidInput;
                           if (e.where.empty()) e.where = file;
                           else if (e.where.find(file) == std::string::npos) e.where = file + ": " + e.where;
                           return e;
                         }
                         return c;
                       }});
  }
  return run_cases(sources, config.exec, config.out, invocation);
}

int cmd_gen(const GenConfig& config) {
  if (config.cases.list_presets) return cmd_list_presets();
  if (config.cases.presets.size() > 1) {
    fmt::print(stderr, "pagecheck: gen writes one case; give at most one --preset\n");
    return exit_code::kUsage;
  }
  CaseOptions options = config.cases;
  if (options.presets.empty()) options.any_geometry_flag = true;  // gen without options: the default spec
  auto specs = build_specs(options);
  if (!specs.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", specs.error().describe());
    return exit_code_for(specs.error().code);
  }
  // The output path is checked (and its folder made) before the work.
  if (const Status ready = prepare_output_file(config.output); !ready.ok()) {
    fmt::print(stderr, "pagecheck: -o: {}\n", ready.error().describe());
    return exit_code_for(ready.error().code);
  }
  SyntheticSpec spec = specs->front();
  if (options.name.empty()) spec.name = fs::path(config.output).stem().string();
  const auto validated = [](const ValidationReport& validation) {
    for (const auto& w : validation.warnings) fmt::print(stderr, "pagecheck: warning: {}\n", w);
    for (const auto& e : validation.errors) fmt::print(stderr, "pagecheck: generated case is invalid: {}\n", e);
    return validation.ok();
  };
  // The caches are never held whole in memory: the reference
  // (--with-output) has them made a few sequences at a time, the writer
  // chunk by chunk as it writes (docs/synthetic.md, "Generation speed").
  // Their values are finite by construction; validation leaves them alone.
  auto c = generate_case_sourced(spec);
  if (!c.ok()) {
    fmt::print(stderr, "pagecheck: {}\n", c.error().describe());
    return exit_code_for(c.error().code);
  }
  if (!validated(validate_case(*c))) return exit_code::kInvalidInput;
  if (config.with_output) {
    // The reference's output and LSE go into the file.
    auto ref = reference_attention(*c, config.threads);
    if (!ref.ok()) {
      fmt::print(stderr, "pagecheck: {}\n", ref.error().describe());
      return exit_code_for(ref.error().code);
    }
    // As a runtime would record it: rounded to the output dtype.
    std::string dtype_text = config.output_dtype;
    for (char& ch : dtype_text) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const DType out_dtype = parse_dtype(dtype_text).value_or(DType::F32);
    c->recorded_output =
        Tensor::from_doubles(out_dtype, {c->num_tokens(), c->q_heads(), c->v_head_dim()}, ref->output);
    c->recorded_lse = Tensor::from_vector<float>(DType::F32, {c->num_tokens(), c->q_heads()},
                                                 std::vector<float>(ref->lse.begin(), ref->lse.end()));
  }
  const Status saved = save_case_file(*c, config.output);
  if (!saved.ok()) {
    // The writer goes through a temporary file; the message names the file asked for.
    fmt::print(stderr, "pagecheck: cannot write {}: {}\n", config.output, saved.error().message);
    return exit_code_for(saved.error().code);
  }
  fmt::print("wrote {}: {}\n", config.output, describe_geometry(*c));
  return exit_code::kPass;
}

}  // namespace pagecheck::app
