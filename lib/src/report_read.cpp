// JSON reports read back, and merged (pagecheck/report_read.hpp).
#include "pagecheck/report_read.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pagecheck {

namespace {

using json = nlohmann::json;

// A field of the wrong shape: thrown inside the reader, turned into one
// invalid-input error naming the file and the field's place.
struct FieldError {
  std::string where;
  std::string what;
};

std::string type_name(const json& j) { return j.type_name(); }

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object()) throw FieldError{where, fmt::format("expected an object, found {}", type_name(j))};
  const auto it = j.find(key);
  if (it == j.end()) throw FieldError{where, fmt::format("missing field '{}'", key)};
  return *it;
}

std::string sub(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }
std::string sub(const std::string& where, std::size_t i) { return fmt::format("{}[{}]", where, i); }

std::string get_string(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string()) throw FieldError{sub(where, key), fmt::format("expected a string, found {}", type_name(v))};
  return v.get<std::string>();
}

bool get_bool(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_boolean()) throw FieldError{sub(where, key), fmt::format("expected true or false, found {}", type_name(v))};
  return v.get<bool>();
}

std::int64_t get_int(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_number_integer())
    throw FieldError{sub(where, key), fmt::format("expected an integer, found {}", v.dump())};
  return v.get<std::int64_t>();
}

// A number that JSON may hold as null (non-finite): `if_null` then.
double get_number(const json& j, const char* key, const std::string& where, double if_null) {
  const json& v = field(j, key, where);
  if (v.is_null()) return if_null;
  if (!v.is_number()) throw FieldError{sub(where, key), fmt::format("expected a number, found {}", type_name(v))};
  return v.get<double>();
}

std::vector<std::string> get_strings(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_array()) throw FieldError{sub(where, key), fmt::format("expected a list, found {}", type_name(v))};
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) throw FieldError{sub(sub(where, key), i), "expected a string"};
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

const json& get_array(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_array()) throw FieldError{sub(where, key), fmt::format("expected a list, found {}", type_name(v))};
  return v;
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ErrorStats read_stats(const json& j, const std::string& where) {
  ErrorStats e;
  // The error measures are +inf while a non-finite element is present (null in JSON).
  e.max_abs_err = get_number(j, "max_abs_err", where, kInf);
  e.max_rel_err = get_number(j, "max_rel_err", where, kInf);
  e.rel_l2_err = get_number(j, "rel_l2_err", where, kInf);
  e.mismatches = get_int(j, "mismatches", where);
  e.nonfinite = get_int(j, "nonfinite", where);
  e.elements = get_int(j, "elements", where);
  const json& w = field(j, "worst", where);
  const std::string ww = sub(where, "worst");
  e.worst.seq = get_int(w, "seq", ww);
  e.worst.token = get_int(w, "token", ww);
  e.worst.head = get_int(w, "head", ww);
  e.worst.dim = get_int(w, "dim", ww);
  e.worst_value = get_number(w, "value", ww, kNaN);
  e.worst_reference = get_number(w, "reference", ww, kNaN);
  return e;
}

PathStatus read_status(const json& j, const std::string& where) {
  const std::string text = get_string(j, "status", where);
  for (PathStatus s : {PathStatus::Pass, PathStatus::Fail, PathStatus::Skipped, PathStatus::NotApplicable,
                       PathStatus::Error})
    if (status_name(s) == text) return s;
  throw FieldError{sub(where, "status"), fmt::format("'{}' is not a status (pass, fail, skipped, n/a, error)", text)};
}

StageTiming read_timing(const json& j, const std::string& where) {
  StageTiming t;
  t.stage = get_string(j, "stage", where);
  t.median_ms = get_number(j, "median_ms", where, kNaN);
  t.min_ms = get_number(j, "min_ms", where, kNaN);
  t.max_ms = get_number(j, "max_ms", where, kNaN);
  t.repeats = static_cast<int>(get_int(j, "repeats", where));
  t.bytes = get_number(j, "bytes", where, 0);
  t.flops = get_number(j, "flops", where, 0);
  // The quartiles came later: a report without them (or with null, a single
  // run) has no measured spread.
  if (j.contains("q1_ms") && !j["q1_ms"].is_null()) t.q1_ms = get_number(j, "q1_ms", where, kNaN);
  if (j.contains("q3_ms") && !j["q3_ms"].is_null()) t.q3_ms = get_number(j, "q3_ms", where, kNaN);
  const json& graph = field(j, "graph_replay_ms", where);
  if (!graph.is_null()) t.graph_replay_ms = get_number(j, "graph_replay_ms", where, kNaN);
  // gb_per_s, tflop_per_s and the ceiling percentages follow from these and
  // the device: the writer computes them again.
  return t;
}

PathReport read_path(const json& j, const std::string& where) {
  PathReport p;
  p.path = get_string(j, "path", where);
  p.status = read_status(j, where);
  p.reason = get_string(j, "reason", where);
  const json& tol = field(j, "tolerance", where);
  p.tolerance.atol = get_number(tol, "atol", sub(where, "tolerance"), kNaN);
  p.tolerance.rtol = get_number(tol, "rtol", sub(where, "tolerance"), kNaN);
  // The output error sits at the path's top level; "elements" is written
  // only when there is one (the reference and skipped paths have none).
  if (j.contains("elements")) p.error = read_stats(j, where);
  p.unwritten = get_int(j, "unwritten", where);
  const json& lse = field(j, "lse", where);
  if (!lse.is_null()) p.lse_error = read_stats(lse, sub(where, "lse"));
  if (j.contains("recorded") && !j["recorded"].is_null()) {
    const json& rec = j["recorded"];
    const std::string rw = sub(where, "recorded");
    // A recorded LSE without a recorded output: the output fields are null.
    if (!field(rec, "elements", rw).is_null()) p.recorded = read_stats(rec, rw);
    const json& rec_lse = field(rec, "lse", rw);
    if (!rec_lse.is_null()) p.recorded_lse = read_stats(rec_lse, sub(rw, "lse"));
  }
  // Optional: reports written before the digests have none.
  for (const auto& [key, digest] : {std::pair{"output_digest", &p.output_digest}, std::pair{"lse_digest", &p.lse_digest}})
    if (j.contains(key) && !j[key].is_null()) *digest = get_string(j, key, where);
  const json& timings = get_array(j, "timings", where);
  for (std::size_t i = 0; i < timings.size(); ++i) p.timings.push_back(read_timing(timings[i], sub(sub(where, "timings"), i)));
  p.plan = get_string(j, "plan", where);
  p.check_failures = get_strings(field(j, "checks", where), "failures", sub(where, "checks"));
  if (j.contains("notes")) {
    const json& notes = j["notes"];
    if (!notes.is_object()) throw FieldError{sub(where, "notes"), "expected an object"};
    for (const auto& [key, value] : notes.items()) {
      if (!value.is_string()) throw FieldError{sub(sub(where, "notes"), key.c_str()), "expected a string"};
      p.notes[key] = value.get<std::string>();
    }
  }
  return p;
}

RunReport read_report(const json& j) {
  RunReport r;
  r.tool_version = get_string(j, "version", "");
  r.command_line = get_string(j, "command", "");
  const json& device = field(j, "device", "");
  if (!device.is_null()) {
    DeviceInfo d;
    d.name = get_string(device, "name", "device");
    d.device_index = static_cast<int>(get_int(device, "index", "device"));
    d.multiprocessors = static_cast<int>(get_int(device, "multiprocessors", "device"));
    d.copy_gb_per_s = get_number(device, "copy_gb_per_s", "device", 0);
    d.read_gb_per_s = get_number(device, "read_gb_per_s", "device", 0);
    d.matmul_tflop_per_s = get_number(device, "matmul_tflop_per_s", "device", 0);
    if (device.contains("matmul_unavailable")) d.matmul_unavailable = get_string(device, "matmul_unavailable", "device");
    r.device = d;
  }
  r.errors = get_strings(j, "errors", "");
  r.fail_on_skip = get_bool(j, "fail_on_skip", "");
  const json& shard = field(j, "shard", "");
  if (!shard.is_null()) {
    ShardInfo s;
    s.index = static_cast<int>(get_int(shard, "index", "shard"));
    s.count = static_cast<int>(get_int(shard, "count", "shard"));
    s.cases_total = get_int(shard, "cases_total", "shard");
    if (s.count < 1 || s.index < 0 || s.index >= s.count || s.cases_total < 0)
      throw FieldError{"shard", fmt::format("{} of {} cases is not a shard", shard_label(s), s.cases_total)};
    r.shard = s;
  }
  // Reports older than the field have none: not interrupted.
  if (j.contains("interrupted") && !j["interrupted"].is_null()) {
    const json& in = j["interrupted"];
    Interruption i;
    i.signal = get_string(in, "signal", "interrupted");
    i.case_index = get_int(in, "case_index", "interrupted");
    i.case_name = get_string(in, "case", "interrupted");
    i.step = get_string(in, "step", "interrupted");
    i.cases_finished = get_int(in, "cases_finished", "interrupted");
    i.cases_selected = get_int(in, "cases_selected", "interrupted");
    r.interrupted = i;
  }
  const json& cases = get_array(j, "cases", "");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string where = sub(std::string("cases"), i);
    CaseReport c;
    c.index = get_int(cases[i], "index", where);
    c.name = get_string(cases[i], "name", where);
    c.description = get_string(cases[i], "description", where);
    c.geometry = get_string(cases[i], "geometry", where);
    // Optional: reports written before it was recorded have none.
    if (cases[i].contains("content_hash") && !cases[i]["content_hash"].is_null())
      c.content_hash = get_string(cases[i], "content_hash", where);
    c.warnings = get_strings(cases[i], "warnings", where);
    c.errors = get_strings(cases[i], "errors", where);
    const json& paths = get_array(cases[i], "paths", where);
    for (std::size_t k = 0; k < paths.size(); ++k) c.paths.push_back(read_path(paths[k], sub(sub(where, "paths"), k)));
    r.cases.push_back(std::move(c));
  }
  return r;
}

std::string join_ints(const std::vector<std::int64_t>& values, std::size_t limit = 20) {
  std::string out;
  for (std::size_t i = 0; i < values.size() && i < limit; ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  if (values.size() > limit) out += fmt::format(", ... ({} in all)", values.size());
  return out;
}

// The words of a command that differ between the shards of one sweep by
// design: the shard, where its reports go, its GPU, quiet and colors.
std::string comparable_command(const std::string& command, bool drop_outputs) {
  static const std::set<std::string> with_value = {"--shard", "--json", "--csv", "--junit", "--save-failing",
                                                   "--device", "--workers"};
  static const std::set<std::string> flags = {"-q", "--quiet", "--no-color"};
  const auto words = split_command_line(command);
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const std::string name = w.substr(0, w.find('='));
    const bool dropped = drop_outputs ? (with_value.count(name) > 0) : name == "--shard";
    if (dropped) {
      if (w.find('=') == std::string::npos) ++i;  // and its value
      continue;
    }
    if (drop_outputs && flags.count(w)) continue;
    kept.push_back(w);
  }
  std::string out;
  for (const auto& w : kept) {
    // Quoted as pagecheck quotes (the reverse of split_command_line).
    std::string q = w;
    if (w.empty() || w.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,+-@%") !=
                         std::string::npos) {
      q = "'";
      for (char ch : w) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      q += "'";
    }
    out += (out.empty() ? "" : " ") + q;
  }
  return out;
}

}  // namespace

std::vector<std::string> split_command_line(const std::string& command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false, quoted = false;
  for (std::size_t i = 0; i < command.size(); ++i) {
    const char ch = command[i];
    if (quoted) {
      if (ch == '\'') quoted = false;
      else word += ch;
    } else if (ch == '\'') {
      quoted = in_word = true;
    } else if (ch == '\\' && i + 1 < command.size()) {
      word += command[++i];
      in_word = true;
    } else if (ch == ' ') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += ch;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

Expected<RunReport> report_from_json(const json& j, const std::string& source) {
  if (!j.is_object() || !j.contains("tool") || j["tool"] != "pagecheck")
    return invalid_input("not a pagecheck report (no \"tool\": \"pagecheck\"); merge and compare read the reports "
                         "that run, replay, bench and merge write with --json",
                         source);
  if (!j.contains("schema"))
    return invalid_input(fmt::format("report without a \"schema\" field (pagecheck {} or older, before merge); "
                                     "this pagecheck reads schema {}: write it again with this version",
                                     j.contains("version") ? j["version"].dump() : "\"?\"", kReportSchema),
                         source);
  if (!j["schema"].is_number_integer() || j["schema"].get<std::int64_t>() != kReportSchema)
    return invalid_input(fmt::format("report schema {}; this pagecheck ({}) reads schema {} only", j["schema"].dump(),
                                     PAGECHECK_VERSION, kReportSchema),
                         source);
  try {
    return read_report(j);
  } catch (const FieldError& e) {
    return invalid_input(fmt::format("{}: {}", e.where.empty() ? "report" : e.where, e.what), source);
  } catch (const json::exception& e) {
    return invalid_input(e.what(), source);
  }
}

Expected<RunReport> read_json_report(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_input("cannot open the report (no such file, or not readable)", path);
  std::stringstream text;
  text << f.rdbuf();
  const std::string bytes = text.str();
  if (bytes.find_first_not_of(" \t\r\n") == std::string::npos)
    return invalid_input("an empty file, not a report (a run that ended before it wrote its report?)", path);
  json j;
  try {
    j = json::parse(bytes);
  } catch (const json::parse_error& e) {
    // A report cut short: the parser ran past the last byte (e.byte is one
    // beyond it) still inside the document. Trailing garbage stops at a byte
    // of the file instead.
    if (e.byte > bytes.size())
      return invalid_input(fmt::format("a truncated report: the JSON ends after {} bytes, before the report does (a "
                                       "run killed while writing it, or a copy cut short); write it again",
                                       bytes.size()),
                           path);
    return invalid_input(fmt::format("not JSON: {}", e.what()), path);
  }
  return report_from_json(j, path);
}

Expected<MergeOutcome> merge_reports(const std::vector<MergeInput>& inputs, const MergeOptions& options) {
  if (inputs.empty()) return usage_error("no reports to merge");
  MergeOutcome outcome;
  RunReport& merged = outcome.report;
  auto& warnings = outcome.warnings;

  // Sharded or not: all alike.
  const auto sharded = std::count_if(inputs.begin(), inputs.end(), [](const MergeInput& in) { return in.report.shard; });
  if (sharded > 0 && sharded < static_cast<std::ptrdiff_t>(inputs.size())) {
    const auto with = std::find_if(inputs.begin(), inputs.end(), [](const MergeInput& in) { return in.report.shard; });
    const auto without = std::find_if(inputs.begin(), inputs.end(), [](const MergeInput& in) { return !in.report.shard; });
    return invalid_input(fmt::format("{} is shard {} but {} is not sharded: merge the shards of one run, or reports "
                                     "without --shard, not both",
                                     with->source, shard_label(*with->report.shard), without->source));
  }

  // The order of the cases: shards by case index, others as given.
  std::vector<const MergeInput*> order;
  for (const auto& in : inputs) order.push_back(&in);
  if (sharded > 0) {
    const ShardInfo& first = *inputs.front().report.shard;
    std::map<int, const MergeInput*> by_shard;
    for (const auto& in : inputs) {
      const ShardInfo& s = *in.report.shard;
      if (s.count != first.count || s.cases_total != first.cases_total)
        return invalid_input(fmt::format("{} is shard {} of {} cases but {} is shard {} of {} cases: not one sharded "
                                         "run (the same command with --shard 0/N .. N-1/N)",
                                         inputs.front().source, shard_label(first), first.cases_total, in.source,
                                         shard_label(s), s.cases_total));
      const auto [it, fresh] = by_shard.emplace(s.index, &in);
      if (!fresh)
        return invalid_input(fmt::format("shard {} given twice: {} and {}", shard_label(s), it->second->source, in.source));
    }
    std::vector<std::int64_t> given, missing;
    for (int i = 0; i < first.count; ++i) (by_shard.count(i) ? given : missing).push_back(i);
    if (!missing.empty()) {
      const std::string message = fmt::format("shard{} {} of {} given; missing {}", given.size() == 1 ? "" : "s",
                                              join_ints(given), first.count, join_ints(missing));
      if (!options.allow_missing_shards)
        return invalid_input(message + " (--allow-missing-shards merges them anyway)");
      warnings.push_back(message + ": the merged report lacks their cases");
    }
    // Every case where its shard says, once.
    std::set<std::int64_t> seen;
    for (const auto& [index, in] : by_shard) {
      const ShardInfo& s = *in->report.shard;
      for (const auto& c : in->report.cases) {
        if (c.index < 0 || c.index >= s.cases_total || !in_shard(c.index, s))
          return invalid_input(fmt::format("case '{}' has index {}, which is not in shard {} of {} cases", c.name,
                                           c.index, shard_label(s), s.cases_total),
                               in->source);
        if (!seen.insert(c.index).second)
          return invalid_input(fmt::format("case index {} ('{}') appears twice", c.index, c.name), in->source);
      }
      std::vector<std::int64_t> lacking;
      for (const std::int64_t k : shard_indices(s.cases_total, s))
        if (!seen.count(k)) lacking.push_back(k);
      // A shard that could not run at all says why in its errors; one that
      // ran must hold its whole share.
      if (!lacking.empty() && in->report.errors.empty())
        return invalid_input(fmt::format("shard {} lacks case{} {} of its share (an interrupted run?)", shard_label(s),
                                         lacking.size() == 1 ? "" : "s", join_ints(lacking)),
                             in->source);
    }
    order.clear();
    for (const auto& [index, in] : by_shard) order.push_back(in);
  } else {
    std::map<std::string, const std::string*> owner;  // case name -> the report that has it
    for (const auto& in : inputs) {
      std::set<std::string> own;
      for (const auto& c : in.report.cases) {
        if (!own.insert(c.name).second) continue;  // repeated within one run: as that run had it
        const auto [it, fresh] = owner.emplace(c.name, &in.source);
        if (!fresh)
          return invalid_input(fmt::format("case '{}' is in both {} and {} (the same report twice, or runs that "
                                           "overlap?)",
                                           c.name, *it->second, in.source));
      }
    }
  }

  // Settings that should agree.
  const MergeInput& lead = *order.front();
  merged.tool_version = lead.report.tool_version;
  std::set<std::string> versions, commands, devices;
  bool fail_on_skip_differs = false;
  for (const MergeInput* in : order) {
    versions.insert(in->report.tool_version);
    commands.insert(comparable_command(in->report.command_line, true));
    devices.insert(in->report.device ? in->report.device->name : std::string("no device"));
    if (in->report.fail_on_skip != lead.report.fail_on_skip) fail_on_skip_differs = true;
    merged.fail_on_skip = merged.fail_on_skip || in->report.fail_on_skip;
    if (!merged.device && in->report.device) merged.device = in->report.device;
    if (!merged.interrupted && in->report.interrupted) merged.interrupted = in->report.interrupted;
    for (const auto& e : in->report.errors)
      if (std::find(merged.errors.begin(), merged.errors.end(), e) == merged.errors.end()) merged.errors.push_back(e);
  }
  if (versions.size() > 1)
    warnings.push_back(fmt::format("the reports come from different pagecheck versions: {}",
                                   fmt::join(versions, ", ")));
  if (commands.size() > 1) {
    std::string list;
    for (const MergeInput* in : order)
      list += fmt::format("\n    {}: {}", in->source, in->report.command_line);
    warnings.push_back(fmt::format("the reports come from different commands (other options than --shard, --device, "
                                   "the report files and -q: tolerances, paths or timing may differ):{}",
                                   list));
  }
  if (devices.size() > 1)
    warnings.push_back(fmt::format("the reports ran on different devices ({}); the merged report names {}, and its "
                                   "ceiling percentages are against that device's ceilings",
                                   fmt::join(devices, ", "), merged.device ? merged.device->name : "none"));
  if (fail_on_skip_differs)
    warnings.push_back("some reports ran with --fail-on-skip and some without; the merged report counts skipped and "
                       "n/a paths as failures");

  if (!options.command.empty()) merged.command_line = options.command;
  else if (commands.size() == 1) merged.command_line = comparable_command(lead.report.command_line, false);
  else merged.command_line = options.fallback_command;

  for (const MergeInput* in : order)
    for (const auto& c : in->report.cases) merged.cases.push_back(c);
  if (sharded > 0) {
    std::stable_sort(merged.cases.begin(), merged.cases.end(),
                     [](const CaseReport& a, const CaseReport& b) { return a.index < b.index; });
  } else {
    for (std::size_t i = 0; i < merged.cases.size(); ++i) merged.cases[i].index = static_cast<std::int64_t>(i);
  }
  return outcome;
}

}  // namespace pagecheck
