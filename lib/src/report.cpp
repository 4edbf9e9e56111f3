// Renderings of a RunReport: the terminal table, JSON, CSV and JUnit XML.
//
// Non-finite numbers: an error statistic is NaN or Inf when a path wrote NaN
// or Inf (the `nonfinite` count says how many). JSON has no NaN, so those
// numbers are written as null, deliberately, through json_number(); CSV
// writes "nan" / "inf"; the table prints "nan" / "inf".
#include "pagecheck/report.hpp"
#include "pagecheck/atomic_file.hpp"
#include "pagecheck/text.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pagecheck {

std::string_view status_name(PathStatus status) {
  switch (status) {
    case PathStatus::Pass: return "pass";
    case PathStatus::Fail: return "fail";
    case PathStatus::Skipped: return "skipped";
    case PathStatus::NotApplicable: return "n/a";
    case PathStatus::Error: return "error";
  }
  return "unknown";
}

bool path_fails_run(const PathReport& p, bool fail_on_skip) {
  switch (p.status) {
    case PathStatus::Fail:
    case PathStatus::Error: return true;
    case PathStatus::Skipped:
    case PathStatus::NotApplicable: return fail_on_skip;
    case PathStatus::Pass: return false;
  }
  return false;
}

int report_exit_code(const RunReport& report) {
  // The most severe outcome wins: a runtime error (4) over an invalid case
  // (3) over a failed path (1). Skipped and n/a never fail a run, unless
  // --fail-on-skip makes them failures (1).
  int code = report.errors.empty() ? exit_code::kPass : exit_code::kRuntime;
  for (const auto& c : report.cases) {
    if (!c.errors.empty()) code = std::max(code, exit_code::kInvalidInput);
    for (const auto& p : c.paths) {
      if (p.status == PathStatus::Error) code = std::max(code, exit_code::kRuntime);
      else if (path_fails_run(p, report.fail_on_skip)) code = std::max(code, exit_code::kFail);
    }
  }
  return code;
}

RunSummary summarize(const RunReport& report) {
  RunSummary s;
  s.cases = static_cast<std::int64_t>(report.cases.size());
  for (const auto& c : report.cases) {
    if (!c.errors.empty()) ++s.invalid_cases;
    for (const auto& p : c.paths) {
      ++s.paths;
      switch (p.status) {
        case PathStatus::Pass: ++s.pass; break;
        case PathStatus::Fail: ++s.fail; break;
        case PathStatus::Skipped: ++s.skipped; break;
        case PathStatus::NotApplicable: ++s.not_applicable; break;
        case PathStatus::Error: ++s.error; break;
      }
    }
  }
  return s;
}

const StageTiming* headline_timing(const PathReport& p) {
  for (const auto& t : p.timings)
    if (t.stage == "total") return &t;
  return p.timings.empty() ? nullptr : &p.timings.front();
}

double gb_per_s(const StageTiming& t) {
  if (t.median_ms <= 0 || t.bytes <= 0) return 0;
  return t.bytes / (t.median_ms * 1e-3) / 1e9;
}

double tflop_per_s(const StageTiming& t) {
  if (t.median_ms <= 0 || t.flops <= 0) return 0;
  return t.flops / (t.median_ms * 1e-3) / 1e12;
}

namespace {

// ---------------------------------------------------------------- table ---

const char* status_color(PathStatus s) {
  switch (s) {
    case PathStatus::Pass: return "\x1b[32m";           // green
    case PathStatus::Fail: return "\x1b[31;1m";         // bold red
    case PathStatus::Error: return "\x1b[35;1m";        // bold magenta
    case PathStatus::Skipped: return "\x1b[33m";        // yellow
    case PathStatus::NotApplicable: return "\x1b[2m";   // dim
  }
  return "";
}

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3g}", v);
}

std::string location(const ElementLocation& w) {
  if (w.seq < 0) return "-";
  return fmt::format("({},{},{},{})", w.seq, w.token, w.head, w.dim);
}

std::string padded(std::string_view text, std::size_t width) {
  std::string out(text);
  if (out.size() < width) out.append(width - out.size(), ' ');
  return out;
}

std::string throughput(const StageTiming& t, const std::optional<DeviceInfo>& device) {
  std::string out;
  const double gbs = gb_per_s(t);
  if (gbs > 0) {
    out += fmt::format("{:.0f} GB/s", gbs);
    if (device && device->copy_gb_per_s > 0) out += fmt::format(" ({:.0f}% copy", 100.0 * gbs / device->copy_gb_per_s);
    if (device && device->copy_gb_per_s > 0 && device->read_gb_per_s > 0)
      out += fmt::format(", {:.0f}% read", 100.0 * gbs / device->read_gb_per_s);
    if (device && device->copy_gb_per_s > 0) out += ")";
  }
  const double tf = tflop_per_s(t);
  if (tf > 0) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{:.1f} TFLOP/s", tf);
    if (device && device->matmul_tflop_per_s > 0)
      out += fmt::format(" ({:.0f}% mma)", 100.0 * tf / device->matmul_tflop_per_s);
  }
  return out;
}

void print_path_row(std::FILE* out, const PathReport& p, const std::optional<DeviceInfo>& device, bool color) {
  const std::string status(status_name(p.status));
  const std::string status_cell = color ? fmt::format("{}{}\x1b[0m{}", status_color(p.status), status,
                                                      std::string(status.size() < 8 ? 8 - status.size() : 0, ' '))
                                        : padded(status, 8);
  if ((p.status == PathStatus::Skipped || p.status == PathStatus::NotApplicable ||
       (p.status == PathStatus::Error && !p.error)) && p.timings.empty()) {
    // Nothing ran: the reason is the whole row.
    fmt::print(out, "  {:<10} {} {}\n", p.path, status_cell, p.reason);
    return;
  }
  std::string cells;
  if (p.error) {
    const auto& e = *p.error;
    cells = fmt::format("{:>9} {:>9} {:>7} {:>7} {:>6} {:<18}", num(e.max_abs_err), num(e.rel_l2_err), e.mismatches,
                        e.nonfinite, p.unwritten, location(e.worst));
  } else {
    cells = fmt::format("{:>9} {:>9} {:>7} {:>7} {:>6} {:<18}", "-", "-", "-", "-", "-", "-");
  }
  std::string timing = "-";
  if (const StageTiming* t = headline_timing(p)) timing = fmt::format("{:.3f}", t->median_ms);
  fmt::print(out, "  {:<10} {} {} {:>10}  {}\n", p.path, status_cell, cells, timing, p.plan);

  if (const StageTiming* t = headline_timing(p)) {
    const std::string tp = throughput(*t, device);
    std::string line;
    if (!tp.empty()) line = tp;
    if (t->repeats > 1) line += fmt::format("{}min {:.3f} / max {:.3f} ms over {}", line.empty() ? "" : "; ", t->min_ms,
                                            t->max_ms, t->repeats);
    if (t->q1_ms && t->q3_ms) line += fmt::format(", IQR {:.3f} ms", *t->q3_ms - *t->q1_ms);
    if (t->graph_replay_ms) line += fmt::format("; graph replay {:.3f} ms", *t->graph_replay_ms);
    if (!line.empty()) fmt::print(out, "      {}\n", line);
  }
  if (p.timings.size() > 1) {
    for (const auto& t : p.timings) {
      if (&t == headline_timing(p)) continue;
      const std::string tp = throughput(t, device);
      fmt::print(out, "      stage {}: {:.3f} ms{}{}\n", t.stage, t.median_ms, tp.empty() ? "" : ", ", tp);
    }
  }
  if (p.lse_error) {
    const auto& e = *p.lse_error;
    fmt::print(out, "      lse: max abs {}, rel L2 {}, {} mismatches\n", num(e.max_abs_err), num(e.rel_l2_err),
               e.mismatches);
  }
  if (p.recorded) {
    const auto& e = *p.recorded;
    fmt::print(out, "      vs recorded output: max abs {}, rel L2 {}, {} mismatches, worst {}\n", num(e.max_abs_err),
               num(e.rel_l2_err), e.mismatches, location(e.worst));
  }
  if (p.recorded_lse) {
    const auto& e = *p.recorded_lse;
    fmt::print(out, "      vs recorded lse: max abs {}, rel L2 {}, {} mismatches\n", num(e.max_abs_err),
               num(e.rel_l2_err), e.mismatches);
  }
  if (p.error && p.error->worst.seq >= 0 && p.status == PathStatus::Fail)
    fmt::print(out, "      worst element: {} vs reference {} (atol {:g}, rtol {:g})\n", num(p.error->worst_value),
               num(p.error->worst_reference), p.tolerance.atol, p.tolerance.rtol);
  if (!p.reason.empty()) fmt::print(out, "      {}\n", p.reason);
  for (const auto& f : p.check_failures) {
    if (f == p.reason) continue;
    fmt::print(out, "      check failed: {}\n", f);
  }
}

// ----------------------------------------------------------------- json ---

nlohmann::json json_number(double v) {
  if (!std::isfinite(v)) return nullptr;  // JSON has no NaN/Inf: null, see the file comment
  return v;
}

nlohmann::json json_stats(const ErrorStats& e) {
  return {
      {"max_abs_err", json_number(e.max_abs_err)},
      {"max_rel_err", json_number(e.max_rel_err)},
      {"rel_l2_err", json_number(e.rel_l2_err)},
      {"mismatches", e.mismatches},
      {"nonfinite", e.nonfinite},
      {"elements", e.elements},
      {"worst",
       {{"seq", e.worst.seq},
        {"token", e.worst.token},
        {"head", e.worst.head},
        {"dim", e.worst.dim},
        {"value", json_number(e.worst_value)},
        {"reference", json_number(e.worst_reference)}}},
  };
}

nlohmann::json json_timing(const StageTiming& t, const std::optional<DeviceInfo>& device) {
  nlohmann::json j = {
      {"stage", t.stage},         {"median_ms", json_number(t.median_ms)}, {"min_ms", json_number(t.min_ms)},
      {"max_ms", json_number(t.max_ms)}, {"repeats", t.repeats},         {"bytes", json_number(t.bytes)},
      {"flops", json_number(t.flops)},
  };
  // The spread of the timed repeats (null for a single run): what `compare`
  // weighs a change against.
  j["q1_ms"] = t.q1_ms ? json_number(*t.q1_ms) : nlohmann::json(nullptr);
  j["q3_ms"] = t.q3_ms ? json_number(*t.q3_ms) : nlohmann::json(nullptr);
  j["iqr_ms"] = t.q1_ms && t.q3_ms ? json_number(*t.q3_ms - *t.q1_ms) : nlohmann::json(nullptr);
  j["graph_replay_ms"] = t.graph_replay_ms ? json_number(*t.graph_replay_ms) : nlohmann::json(nullptr);
  const double gbs = gb_per_s(t), tf = tflop_per_s(t);
  j["gb_per_s"] = gbs > 0 ? json_number(gbs) : nlohmann::json(nullptr);
  j["tflop_per_s"] = tf > 0 ? json_number(tf) : nlohmann::json(nullptr);
  j["copy_ceiling_pct"] = (gbs > 0 && device && device->copy_gb_per_s > 0)
                              ? json_number(100.0 * gbs / device->copy_gb_per_s)
                              : nlohmann::json(nullptr);
  // Against the read-only stream: the bound of decode, which reads its K/V
  // and writes almost nothing.
  j["read_ceiling_pct"] = (gbs > 0 && device && device->read_gb_per_s > 0)
                              ? json_number(100.0 * gbs / device->read_gb_per_s)
                              : nlohmann::json(nullptr);
  j["matmul_ceiling_pct"] = (tf > 0 && device && device->matmul_tflop_per_s > 0)
                                ? json_number(100.0 * tf / device->matmul_tflop_per_s)
                                : nlohmann::json(nullptr);
  return j;
}

nlohmann::json json_path(const PathReport& p, const std::optional<DeviceInfo>& device) {
  nlohmann::json j;
  j["path"] = p.path;
  j["status"] = std::string(status_name(p.status));
  j["reason"] = p.reason;
  j["tolerance"] = {{"atol", p.tolerance.atol}, {"rtol", p.tolerance.rtol}};
  // The headline numbers sit at the path's top level (null where the path
  // was not compared: the reference itself, skipped and n/a paths).
  if (p.error) {
    const auto stats = json_stats(*p.error);
    for (const auto& key : {"max_abs_err", "max_rel_err", "rel_l2_err", "mismatches", "nonfinite", "elements", "worst"})
      j[key] = stats[key];
  } else {
    for (const auto& key : {"max_abs_err", "max_rel_err", "rel_l2_err", "mismatches", "nonfinite", "worst"})
      j[key] = nullptr;
  }
  j["unwritten"] = p.unwritten;
  j["lse"] = p.lse_error ? json_stats(*p.lse_error) : nlohmann::json(nullptr);
  // A case may record an LSE without an output: then the output fields are
  // null and only "lse" carries numbers.
  if (p.recorded || p.recorded_lse) {
    if (p.recorded) {
      j["recorded"] = json_stats(*p.recorded);
    } else {
      j["recorded"] = nlohmann::json::object();
      for (const auto& key : {"max_abs_err", "max_rel_err", "rel_l2_err", "mismatches", "nonfinite", "elements", "worst"})
        j["recorded"][key] = nullptr;
    }
    j["recorded"]["lse"] = p.recorded_lse ? json_stats(*p.recorded_lse) : nlohmann::json(nullptr);
  }
  j["output_digest"] = p.output_digest.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.output_digest);
  j["lse_digest"] = p.lse_digest.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.lse_digest);
  j["timings"] = nlohmann::json::array();
  for (const auto& t : p.timings) j["timings"].push_back(json_timing(t, device));
  j["plan"] = p.plan;
  j["checks"] = {{"passed", p.check_failures.empty()}, {"failures", p.check_failures}};
  j["notes"] = p.notes;
  return j;
}

// ------------------------------------------------------------------ csv ---

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"') out += '"';
    out += ch;
  }
  out += '"';
  return out;
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

// ---------------------------------------------------------------- junit ---

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\t':
      case '\n':
      case '\r': out += static_cast<char>(ch); break;
      default:
        // Other control characters are not allowed in XML 1.0, even escaped.
        if (ch < 0x20 || ch == 0x7f) out += '?';
        else out += static_cast<char>(ch);
    }
  }
  return out;
}

void print_device(std::FILE* out, const DeviceInfo& d) {
  const std::string mma = d.matmul_unavailable.empty() ? fmt::format("BF16 mma {:.0f} TFLOP/s", d.matmul_tflop_per_s)
                                                       : "BF16 mma ceiling unavailable: " + d.matmul_unavailable;
  fmt::print(out, "device {}: {} ({} SMs; copy {:.0f} GB/s, read {:.0f} GB/s, {})\n", d.device_index, d.name,
             d.multiprocessors, d.copy_gb_per_s, d.read_gb_per_s, mma);
}

void print_case(std::FILE* out, const CaseReport& c, const std::optional<DeviceInfo>& device, bool color,
                std::string_view said_once) {
  const char* bold = color ? "\x1b[1m" : "";
  const char* reset = color ? "\x1b[0m" : "";
  // Names and descriptions come from case files: escaped for the terminal.
  fmt::print(out, "\n{}{}{}{}{}\n", bold, printable(c.name, 200), reset, c.description.empty() ? "" : "  ",
             printable(c.description, 400));
  if (!c.geometry.empty()) fmt::print(out, "  {}\n", c.geometry);
  for (const auto& w : c.warnings) fmt::print(out, "  warning: {}\n", w);
  for (const auto& e : c.errors) fmt::print(out, "  {}invalid{}: {}\n", color ? "\x1b[31;1m" : "", reset, e);
  if (c.paths.empty()) return;

  // Skipped paths that ran nothing go on one line, grouped by reason: without
  // a GPU every case would otherwise repeat the same reason once per path.
  std::vector<const PathReport*> rows;
  std::vector<std::pair<std::string, std::vector<std::string>>> skipped;  // reason -> paths
  for (const auto& p : c.paths) {
    if (p.status != PathStatus::Skipped || !p.timings.empty()) {
      rows.push_back(&p);
      continue;
    }
    auto group = std::find_if(skipped.begin(), skipped.end(), [&](const auto& g) { return g.first == p.reason; });
    if (group == skipped.end()) group = skipped.insert(skipped.end(), {p.reason, {}});
    group->second.push_back(p.path);
  }
  if (!rows.empty()) {
    fmt::print(out, "  {:<10} {:<8} {:>9} {:>9} {:>7} {:>7} {:>6} {:<18} {:>10}  {}\n", "path", "status", "max abs",
               "rel L2", "mismat", "nonfin", "unwr", "worst (s,t,h,d)", "median ms", "plan");
    for (const auto* p : rows) print_path_row(out, *p, device, color);
  }
  if (!skipped.empty()) {
    std::string line;
    for (const auto& [reason, names] : skipped) {
      if (!line.empty()) line += "; ";
      line += join(names, ", ");
      if (!reason.empty() && reason != said_once) line += fmt::format(" ({})", reason);
    }
    // In the path column, under the rows: "skipped    direct, split, auto".
    const std::string label = color ? fmt::format("{}skipped\x1b[0m   ", status_color(PathStatus::Skipped))
                                    : padded("skipped", 10);
    fmt::print(out, "  {} {}\n", label, line);
  }
}

std::string describe_interruption(const Interruption& i) {
  const std::string during =
      i.case_name.empty() ? std::string("between cases")
                          : fmt::format("during case {} ({})", i.case_name, i.step.empty() ? "starting" : i.step);
  return fmt::format("interrupted by {} {}: {} of {} cases finished, {} not run", i.signal, during, i.cases_finished,
                     i.cases_selected, i.cases_selected - i.cases_finished);
}

void print_failures(std::FILE* out, const RunReport& report) {
  std::vector<std::string> lines;
  for (const auto& e : report.errors) lines.push_back(fmt::format("not run: {}", e));
  std::int64_t failing_cases = 0;
  for (const auto& c : report.cases) {
    bool failing = !c.errors.empty();
    for (const auto& e : c.errors) lines.push_back(fmt::format("{}: invalid: {}", c.name, e));
    // Rows failing for the same status and reason share a line.
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // "status: reason" -> paths
    for (const auto& p : c.paths) {
      if (!path_fails_run(p, report.fail_on_skip)) continue;
      failing = true;
      std::string what(status_name(p.status));
      if (p.status == PathStatus::Skipped || p.status == PathStatus::NotApplicable) what += " (--fail-on-skip)";
      if (!p.reason.empty()) what += ": " + p.reason;
      auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == what; });
      if (group == groups.end()) group = groups.insert(groups.end(), {what, {}});
      group->second.push_back(p.path);
    }
    for (const auto& [what, names] : groups) lines.push_back(fmt::format("{}: {}: {}", c.name, join(names, ", "), what));
    if (failing) ++failing_cases;
  }
  if (lines.empty()) return;
  fmt::print(out, "\nfailed ({} of {} case{}):\n", failing_cases, report.cases.size(),
             report.cases.size() == 1 ? "" : "s");
  for (const auto& line : lines) fmt::print(out, "  {}\n", line);
}

void print_summary(std::FILE* out, const RunReport& report) {
  const RunSummary s = summarize(report);
  fmt::print(out, "\n{} case{}", s.cases, s.cases == 1 ? "" : "s");
  if (s.invalid_cases) fmt::print(out, " ({} invalid)", s.invalid_cases);
  fmt::print(out, ", {} path runs: {} pass, {} fail, {} error, {} skipped, {} n/a\n", s.paths, s.pass, s.fail, s.error,
             s.skipped, s.not_applicable);
}

void print_table(std::FILE* out, const RunReport& report, bool color) {
  if (report.device) print_device(out, *report.device);
  for (const auto& c : report.cases) print_case(out, c, report.device, color);
  print_summary(out, report);
  print_failures(out, report);
}

nlohmann::json to_json(const RunReport& report) {
  nlohmann::json j;
  j["tool"] = "pagecheck";
  j["schema"] = kReportSchema;
  j["version"] = report.tool_version;
  j["command"] = report.command_line;
  if (report.device) {
    const auto& d = *report.device;
    j["device"] = {{"name", d.name},
                   {"index", d.device_index},
                   {"multiprocessors", d.multiprocessors},
                   {"copy_gb_per_s", json_number(d.copy_gb_per_s)},
                   {"read_gb_per_s", json_number(d.read_gb_per_s)},
                   {"matmul_tflop_per_s", json_number(d.matmul_tflop_per_s)}};
    if (!d.matmul_unavailable.empty()) j["device"]["matmul_unavailable"] = d.matmul_unavailable;
  } else {
    j["device"] = nullptr;
  }
  const RunSummary s = summarize(report);
  j["summary"] = {{"cases", s.cases},   {"invalid_cases", s.invalid_cases}, {"paths", s.paths},
                  {"pass", s.pass},     {"fail", s.fail},                   {"error", s.error},
                  {"skipped", s.skipped}, {"n/a", s.not_applicable}};
  j["exit_code"] = report_exit_code(report);
  j["errors"] = report.errors;
  j["fail_on_skip"] = report.fail_on_skip;
  // --shard I/N: which share this is, so that `merge` can tell a missing one.
  j["shard"] = report.shard ? nlohmann::json{{"index", report.shard->index},
                                             {"count", report.shard->count},
                                             {"cases_total", report.shard->cases_total}}
                            : nlohmann::json(nullptr);
  j["interrupted"] = report.interrupted ? nlohmann::json{{"signal", report.interrupted->signal},
                                                         {"case_index", report.interrupted->case_index},
                                                         {"case", report.interrupted->case_name},
                                                         {"step", report.interrupted->step},
                                                         {"cases_finished", report.interrupted->cases_finished},
                                                         {"cases_selected", report.interrupted->cases_selected}}
                                         : nlohmann::json(nullptr);
  j["cases"] = nlohmann::json::array();
  for (std::size_t i = 0; i < report.cases.size(); ++i) {
    const CaseReport& c = report.cases[i];
    nlohmann::json jc;
    jc["index"] = c.index >= 0 ? c.index : static_cast<std::int64_t>(i);
    jc["name"] = c.name;
    jc["description"] = c.description;
    jc["geometry"] = c.geometry;
    jc["content_hash"] = c.content_hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.content_hash);
    jc["warnings"] = c.warnings;
    jc["errors"] = c.errors;
    jc["paths"] = nlohmann::json::array();
    for (const auto& p : c.paths) jc["paths"].push_back(json_path(p, report.device));
    j["cases"].push_back(std::move(jc));
  }
  return j;
}

namespace {

Status write_text(const std::string& path, const std::string& text, std::string_view what) {
  if (path == "-") {
    const bool written = std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
    if (std::fflush(stdout) != 0 || !written)
      return runtime_error(fmt::format("writing the {} report to stdout failed", what), "-");
    return {};
  }
  return replace_file_with_text(path, text, what);
}

}  // namespace

Status write_report_text(const std::string& path, const std::string& text, std::string_view what) {
  return write_text(path, text, what);
}

Status write_json(const std::string& path, const RunReport& report) {
  // error_handler replace: a name with invalid UTF-8 (from a file name) is
  // written with U+FFFD rather than throwing.
  return write_text(path, to_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", "JSON");
}

std::string to_csv(const RunReport& report) {
  static const std::vector<std::string> header = {
      "case",          "path",          "status",          "reason",          "max_abs_err",
      "max_rel_err",   "rel_l2_err",    "mismatches",      "nonfinite",       "unwritten",
      "elements",      "worst_seq",     "worst_token",     "worst_head",      "worst_dim",
      "worst_value",   "worst_reference", "lse_max_abs_err", "lse_rel_l2_err", "lse_mismatches",
      "recorded_max_abs_err", "recorded_rel_l2_err", "recorded_mismatches", "recorded_lse_max_abs_err",
      "median_ms",     "min_ms",        "max_ms",          "graph_replay_ms", "gb_per_s",
      "copy_ceiling_pct", "tflop_per_s", "matmul_ceiling_pct", "plan",         "checks",
      "atol",          "rtol"};
  std::string out = join(header, ",") + "\n";
  for (const auto& e : report.errors) {
    // The run did not run: one row that says why.
    std::vector<std::string> row(header.size());
    row[2] = "error";
    row[3] = csv_field(e);
    out += join(row, ",") + "\n";
  }
  for (const auto& c : report.cases) {
    if (c.paths.empty() && !c.errors.empty()) {
      // An invalid case: one row that says so, so that it is not lost.
      std::vector<std::string> row(header.size());
      row[0] = csv_field(c.name);
      row[1] = "";
      row[2] = "invalid";
      row[3] = csv_field(join(c.errors, "; "));
      out += join(row, ",") + "\n";
      continue;
    }
    for (const auto& p : c.paths) {
      std::vector<std::string> row;
      row.push_back(csv_field(c.name));
      row.push_back(csv_field(p.path));
      row.emplace_back(status_name(p.status));
      row.push_back(csv_field(p.reason));
      if (p.error) {
        const auto& e = *p.error;
        for (double v : {e.max_abs_err, e.max_rel_err, e.rel_l2_err}) row.push_back(csv_number(v));
        row.push_back(std::to_string(e.mismatches));
        row.push_back(std::to_string(e.nonfinite));
      } else {
        row.insert(row.end(), 5, "");
      }
      row.push_back(std::to_string(p.unwritten));
      if (p.error) {
        const auto& e = *p.error;
        row.push_back(std::to_string(e.elements));
        for (auto v : {e.worst.seq, e.worst.token, e.worst.head, e.worst.dim}) row.push_back(std::to_string(v));
        row.push_back(csv_number(e.worst_value));
        row.push_back(csv_number(e.worst_reference));
      } else {
        row.insert(row.end(), 7, "");
      }
      if (p.lse_error) {
        row.push_back(csv_number(p.lse_error->max_abs_err));
        row.push_back(csv_number(p.lse_error->rel_l2_err));
        row.push_back(std::to_string(p.lse_error->mismatches));
      } else {
        row.insert(row.end(), 3, "");
      }
      if (p.recorded) {
        row.push_back(csv_number(p.recorded->max_abs_err));
        row.push_back(csv_number(p.recorded->rel_l2_err));
        row.push_back(std::to_string(p.recorded->mismatches));
      } else {
        row.insert(row.end(), 3, "");
      }
      row.push_back(p.recorded_lse ? csv_number(p.recorded_lse->max_abs_err) : "");
      if (const StageTiming* t = headline_timing(p)) {
        row.push_back(csv_number(t->median_ms));
        row.push_back(csv_number(t->min_ms));
        row.push_back(csv_number(t->max_ms));
        row.push_back(t->graph_replay_ms ? csv_number(*t->graph_replay_ms) : "");
        const double gbs = gb_per_s(*t), tf = tflop_per_s(*t);
        row.push_back(gbs > 0 ? csv_number(gbs) : "");
        row.push_back(gbs > 0 && report.device && report.device->copy_gb_per_s > 0
                          ? csv_number(100.0 * gbs / report.device->copy_gb_per_s)
                          : "");
        row.push_back(tf > 0 ? csv_number(tf) : "");
        row.push_back(tf > 0 && report.device && report.device->matmul_tflop_per_s > 0
                          ? csv_number(100.0 * tf / report.device->matmul_tflop_per_s)
                          : "");
      } else {
        row.insert(row.end(), 8, "");
      }
      row.push_back(csv_field(p.plan));
      row.push_back(csv_field(join(p.check_failures, "; ")));
      row.push_back(csv_number(p.tolerance.atol));
      row.push_back(csv_number(p.tolerance.rtol));
      out += join(row, ",") + "\n";
    }
  }
  return out;
}

Status write_csv(const std::string& path, const RunReport& report) { return write_text(path, to_csv(report), "CSV"); }

std::string to_junit(const RunReport& report) {
  const RunSummary s = summarize(report);
  double total_s = 0;
  for (const auto& c : report.cases)
    for (const auto& p : c.paths)
      if (const StageTiming* t = headline_timing(p)) total_s += t->median_ms * 1e-3;
  const std::int64_t run_errors = static_cast<std::int64_t>(report.errors.size());
  const std::int64_t tests = s.paths + s.invalid_cases + run_errors;
  // Under --fail-on-skip, skipped and n/a paths are failures.
  const std::int64_t skipped = report.fail_on_skip ? 0 : s.skipped + s.not_applicable;
  const std::int64_t failures = s.fail + (report.fail_on_skip ? s.skipped + s.not_applicable : 0);
  const std::int64_t errors = s.error + s.invalid_cases + run_errors;

  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"pagecheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">\n", tests,
                     failures, errors, skipped);
  out += fmt::format(
      "  <testsuite name=\"pagecheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.6f}\">\n",
      tests, failures, errors, skipped, total_s);
  out += "    <properties>\n";
  out += fmt::format("      <property name=\"version\" value=\"{}\"/>\n", xml_escape(report.tool_version));
  out += fmt::format("      <property name=\"command\" value=\"{}\"/>\n", xml_escape(report.command_line));
  if (report.device) out += fmt::format("      <property name=\"device\" value=\"{}\"/>\n", xml_escape(report.device->name));
  if (report.shard)
    out += fmt::format("      <property name=\"shard\" value=\"{}\"/>\n      <property name=\"shard_cases_total\" "
                       "value=\"{}\"/>\n",
                       shard_label(*report.shard), report.shard->cases_total);
  out += "    </properties>\n";
  for (const auto& e : report.errors) {
    out += "    <testcase classname=\"pagecheck\" name=\"run\" time=\"0\">\n";
    out += fmt::format("      <error message=\"{}\" type=\"runtime\">{}</error>\n", xml_escape(e), xml_escape(e));
    out += "    </testcase>\n";
  }
  for (const auto& c : report.cases) {
    const std::string classname = xml_escape("pagecheck." + c.name);
    if (!c.errors.empty()) {
      out += fmt::format("    <testcase classname=\"{}\" name=\"validate\" time=\"0\">\n", classname);
      out += fmt::format("      <error message=\"{}\" type=\"invalid\">{}</error>\n", xml_escape(c.errors.front()),
                         xml_escape(join(c.errors, "\n")));
      out += "    </testcase>\n";
    }
    for (const auto& p : c.paths) {
      const StageTiming* t = headline_timing(p);
      out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.6f}\"", classname, xml_escape(p.path),
                         t ? t->median_ms * 1e-3 : 0.0);
      std::string details;
      if (p.error)
        details = fmt::format("max_abs_err {} rel_l2_err {} mismatches {} nonfinite {} unwritten {} worst {} ({} vs {})",
                              num(p.error->max_abs_err), num(p.error->rel_l2_err), p.error->mismatches,
                              p.error->nonfinite, p.unwritten, location(p.error->worst), num(p.error->worst_value),
                              num(p.error->worst_reference));
      if (p.recorded)
        details += fmt::format("{}recorded: max_abs_err {} rel_l2_err {} mismatches {}", details.empty() ? "" : "\n",
                               num(p.recorded->max_abs_err), num(p.recorded->rel_l2_err), p.recorded->mismatches);
      if (p.recorded_lse)
        details += fmt::format("{}recorded lse: max_abs_err {} mismatches {}", details.empty() ? "" : "\n",
                               num(p.recorded_lse->max_abs_err), p.recorded_lse->mismatches);
      for (const auto& f : p.check_failures) details += (details.empty() ? "" : "\n") + f;
      switch (p.status) {
        case PathStatus::Pass:
          out += "/>\n";
          continue;
        case PathStatus::Fail:
          out += fmt::format(">\n      <failure message=\"{}\" type=\"tolerance\">{}</failure>\n",
                             xml_escape(p.reason), xml_escape(details));
          break;
        case PathStatus::Error:
          out += fmt::format(">\n      <error message=\"{}\" type=\"runtime\">{}</error>\n", xml_escape(p.reason),
                             xml_escape(details));
          break;
        case PathStatus::Skipped:
        case PathStatus::NotApplicable:
          if (report.fail_on_skip)
            out += fmt::format(">\n      <failure message=\"{} (--fail-on-skip): {}\" type=\"skipped\"/>\n",
                               status_name(p.status), xml_escape(p.reason));
          else
            out += fmt::format(">\n      <skipped message=\"{}: {}\"/>\n", status_name(p.status), xml_escape(p.reason));
          break;
      }
      out += "    </testcase>\n";
    }
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

Status write_junit(const std::string& path, const RunReport& report) {
  return write_text(path, to_junit(report), "JUnit");
}

}  // namespace pagecheck
