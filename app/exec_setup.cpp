#include "exec_setup.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "case_sources.hpp"
#include "gpu_setup.hpp"
#include "pagecheck/external_names.hpp"
#include "pagecheck/plan.hpp"

namespace pagecheck::app {

std::vector<std::string> known_path_names() {
  std::vector<std::string> names = {"reference"};
  for (const auto& n : gpu_path_names()) names.push_back(n);
  return names;
}

Expected<std::vector<std::string>> resolve_paths(const std::vector<std::string>& requested,
                                                 const std::vector<std::string>& defaults) {
  const auto known = known_path_names();
  if (requested.empty()) return defaults;
  std::set<std::string> wanted;
  for (const auto& name : requested) {
    if (name == "all") {
      wanted.insert(known.begin(), known.end());
      continue;
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return usage_error(fmt::format("unknown path '{}'; paths: {}", name, list), "--paths");
    }
    wanted.insert(name);
  }
  std::vector<std::string> out;
  for (const auto& k : known)
    if (wanted.count(k)) out.push_back(k);
  return out;
}

Expected<ExecSetup> prepare_exec(const ExecOptions& exec) {
  ExecSetup setup;
  std::vector<std::string> default_paths = known_path_names();
  if (!exec.compare_reference) default_paths.erase(default_paths.begin());  // bench: GPU paths only
  // External kernel libraries (--kernel): each entry is a path ext:<name>
  // (or <prefix>:<name>), selected by --paths like a built-in one (and by
  // default and by "all").
  auto external = load_external_paths(exec.kernels);
  if (!external.ok()) return external.error();
  std::vector<std::string> external_names, builtin_requested, external_requested;
  for (const auto& p : *external) external_names.push_back(p->name());
  bool all_external = exec.paths.empty();
  for (const auto& name : exec.paths) {
    if (name == "all") all_external = true;
    if (!is_external_path_name(name)) {
      builtin_requested.push_back(name);
      continue;
    }
    if (std::find(external_names.begin(), external_names.end(), name) == external_names.end())
      return usage_error(fmt::format("unknown path '{}'; the --kernel libraries export: {}", name,
                                     external_names.empty() ? std::string("nothing (no --kernel given)")
                                                            : fmt::format("{}", fmt::join(external_names, ", "))),
                         "--paths");
    external_requested.push_back(name);
  }
  auto paths = !exec.paths.empty() && builtin_requested.empty()
                   ? Expected<std::vector<std::string>>(std::vector<std::string>{})
                   : resolve_paths(builtin_requested, default_paths);
  if (!paths.ok()) return paths.error();
  for (const auto& name : external_names)
    if (all_external ||
        std::find(external_requested.begin(), external_requested.end(), name) != external_requested.end())
      paths->push_back(name);
  setup.paths = std::move(*paths);
  setup.external = std::move(*external);
  RunOptions& run_options = setup.run_options;
  run_options.device = exec.device;
  run_options.hot = exec.hot;
  run_options.measure = !exec.no_timing;
  run_options.warmup = exec.warmup;
  run_options.repeats = exec.repeats;
  run_options.checks = !exec.no_checks;
  run_options.tuning_file = exec.tuning_file;
  if (!exec.plan.empty()) {
    auto plan = parse_plan(exec.plan);
    if (!plan.ok()) return usage_error(plan.error().describe());
    run_options.plan = *plan;
  }
  if (!exec.tuning_file.empty()) {
    auto tuning = read_tuning_file(exec.tuning_file);
    if (!tuning.ok())
      return Error{tuning.error().code, with_label(exec.tuning_file, tuning.error().describe()), "--tuning"};
  }
  return setup;
}

}  // namespace pagecheck::app
