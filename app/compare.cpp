// pagecheck compare BASE.json NEW.json: two reports in, verdicts out, exit 1
// on a regression (docs/cli.md "compare"; the logic is lib's compare.hpp).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "report_targets.hpp"
#include "table.hpp"
#include "pagecheck/compare.hpp"
#include "pagecheck/report_read.hpp"

namespace pagecheck::app {

namespace {

// "5" or "5%": a fraction (0.05); a usage error naming the option otherwise.
Expected<double> parse_percent(const std::string& text, const char* option) {
  std::string number = text;
  if (!number.empty() && number.back() == '%') number.pop_back();
  double value = 0;
  const char* end = number.data() + number.size();
  const auto [stop, error] = std::from_chars(number.data(), end, value);
  if (number.empty() || error != std::errc() || stop != end || !(value >= 0) || !std::isfinite(value))
    return usage_error(fmt::format("{}: must be a percentage >= 0 (5 or 5%), got '{}'", option, text));
  return value / 100.0;
}

std::string verdict_names() {
  std::string names;
  for (const Verdict v : all_verdicts()) {
    std::string name(verdict_name(v));
    std::replace(name.begin(), name.end(), ' ', '-');
    names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

Expected<CompareOptions> compare_options(const CompareConfig& config) {
  CompareOptions options;
  auto slowdown = parse_percent(config.max_slowdown, "--max-slowdown");
  if (!slowdown.ok()) return slowdown.error();
  auto growth = parse_percent(config.max_error_growth, "--max-error-growth");
  if (!growth.ok()) return growth.error();
  options.max_slowdown = *slowdown;
  options.max_error_growth = *growth;
  for (const auto& name : config.fail_on) {
    const auto verdict = parse_verdict(name);
    if (!verdict) return usage_error(fmt::format("--fail-on: '{}' is not a verdict; verdicts: {}", name, verdict_names()));
    options.fail_on.insert(*verdict);
  }
  return options;
}

// A report file, or the reason it is not one. A comparison's JSON given back
// to compare is named as such.
Expected<RunReport> read_report(const std::string& file) {
  auto report = read_json_report(file);
  if (report.ok()) return report;
  std::ifstream in(file, std::ios::binary);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_object() && j.contains("tool") && j["tool"] == "pagecheck compare")
    return invalid_input("a comparison written by compare --json, not a report: compare the reports that run, "
                         "replay, bench or merge write with --json",
                         file);
  return report;
}

}  // namespace

int cmd_compare(const CompareConfig& config) {
  auto options = compare_options(config);
  if (!options.ok()) {
    fmt::print(stderr, "pagecheck: compare: {}\n", options.error().describe());
    return exit_code::kUsage;
  }
  const std::vector<std::pair<const char*, const std::string*>> outputs = {
      {"--json", &config.json}, {"--html", &config.html}, {"--junit", &config.junit}};
  // The outputs are checked before the inputs are read: at most one on
  // stdout, folders made, writable.
  const auto on_stdout = std::count_if(outputs.begin(), outputs.end(), [](const auto& o) { return *o.second == "-"; });
  if (on_stdout > 1) {
    fmt::print(stderr, "pagecheck: compare: only one of --json, --html and --junit can go to stdout (-)\n");
    return exit_code::kUsage;
  }
  for (const auto& [option, path] : outputs) {
    if (path->empty()) continue;
    if (const Status st = prepare_output_file(*path); !st.ok()) {
      fmt::print(stderr, "pagecheck: compare: {}: {}\n", option, st.error().describe());
      return exit_code::kRuntime;
    }
  }

  std::vector<PathPair> pairs;
  for (const auto& text : config.pairs) {
    auto pair = parse_path_pair(text);
    if (!pair.ok()) {
      fmt::print(stderr, "pagecheck: compare: {}\n", pair.error().describe());
      return exit_code::kUsage;
    }
    pairs.push_back(*pair);
  }
  if (pairs.empty() && config.new_file.empty()) {
    fmt::print(stderr, "pagecheck: compare: give two reports, BASE and NEW (or one report and --pair A=B)\n");
    return exit_code::kUsage;
  }
  if (!pairs.empty() && !config.new_file.empty()) {
    fmt::print(stderr, "pagecheck: compare: --pair compares two paths of one report; give one report, not two\n");
    return exit_code::kUsage;
  }

  auto base = read_report(config.base_file);
  if (!base.ok()) {
    fmt::print(stderr, "pagecheck: compare: BASE: {}\n", base.error().describe());
    return exit_code_for(base.error().code);
  }
  Expected<Comparison> comparison = usage_error("not compared");
  if (!pairs.empty()) {
    comparison = compare_path_pairs(*base, config.base_file, pairs, *options);
  } else {
    auto now = read_report(config.new_file);
    if (!now.ok()) {
      fmt::print(stderr, "pagecheck: compare: NEW: {}\n", now.error().describe());
      return exit_code_for(now.error().code);
    }
    comparison = compare_reports(*base, config.base_file, *now, config.new_file, *options);
  }
  if (!comparison.ok()) {
    fmt::print(stderr, "pagecheck: compare: {}\n", comparison.error().describe());
    return exit_code_for(comparison.error().code);
  }

  std::FILE* const table = on_stdout > 0 ? stderr : stdout;
  // A reader of the table that goes away (`| head`) does not stop the
  // reports from being written.
  try {
    const bool color = stream_wants_color(table, config.no_color);
    if (config.quiet) print_comparison_summary(table, *comparison, color);
    else print_comparison(table, *comparison, color);
    std::fflush(table);
  } catch (const std::exception&) {
  }

  int code = comparison_exit_code(*comparison);
  const auto write = [&](const char* option, const std::string& path, const std::string& text, const char* what) {
    if (path.empty()) return;
    if (const Status st = write_report_text(path, text, what); !st.ok()) {
      fmt::print(stderr, "pagecheck: compare: {}: {}\n", option, st.error().describe());
      code = exit_code::kRuntime;
    }
  };
  write("--json", config.json,
        comparison_to_json(*comparison).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", "JSON");
  write("--html", config.html, comparison_to_html(*comparison), "HTML");
  write("--junit", config.junit, comparison_to_junit(*comparison), "JUnit");
  return code;
}

}  // namespace pagecheck::app
