// Comparing two reports (pagecheck/compare.hpp): pairing, verdicts, and the
// table, JSON and JUnit renderings. The HTML page is compare_html.cpp.
#include "pagecheck/compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pagecheck/report_read.hpp"
#include "pagecheck/text.hpp"

namespace pagecheck {

std::string_view verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::Same: return "same";
    case Verdict::Slower: return "slower";
    case Verdict::Faster: return "faster";
    case Verdict::MoreError: return "more error";
    case Verdict::LessError: return "less error";
    case Verdict::BitsChanged: return "bits changed";
    case Verdict::NowFailing: return "now failing";
    case Verdict::NowPassing: return "now passing";
    case Verdict::New: return "new";
    case Verdict::Gone: return "gone";
    case Verdict::Changed: return "changed";
    case Verdict::Renamed: return "renamed";
    case Verdict::NotComparable: return "not comparable";
  }
  return "unknown";
}

const std::vector<Verdict>& all_verdicts() {
  static const std::vector<Verdict> verdicts = {
      Verdict::Same,       Verdict::Slower,     Verdict::Faster, Verdict::MoreError,
      Verdict::LessError,  Verdict::BitsChanged, Verdict::NowFailing, Verdict::NowPassing, Verdict::New,
      Verdict::Gone,       Verdict::Changed,    Verdict::Renamed, Verdict::NotComparable};
  return verdicts;
}

std::optional<Verdict> parse_verdict(std::string_view name) {
  std::string spaced(name);
  std::replace(spaced.begin(), spaced.end(), '-', ' ');
  for (const Verdict v : all_verdicts())
    if (verdict_name(v) == spaced) return v;
  return std::nullopt;
}

bool is_regression(const std::vector<Verdict>& verdicts, const CompareOptions& options) {
  return std::any_of(verdicts.begin(), verdicts.end(), [&](Verdict v) { return options.fail_on.count(v) > 0; });
}

namespace {

bool side_ran(const PathSide& s) { return s.status == "pass" || s.status == "fail"; }
bool side_fails(const PathSide& s) { return s.status == "fail" || s.status == "error"; }

PathSide side_of(const PathReport& p) {
  PathSide s;
  s.status = std::string(status_name(p.status));
  s.reason = p.reason;
  s.atol = p.tolerance.atol;
  s.output_digest = p.output_digest;
  s.lse_digest = p.lse_digest;
  if (p.error) s.max_abs_err = p.error->max_abs_err;
  else if (p.recorded) s.max_abs_err = p.recorded->max_abs_err;
  if (const StageTiming* t = headline_timing(p); t != nullptr && std::isfinite(t->median_ms) && t->median_ms > 0) {
    s.median_ms = t->median_ms;
    s.repeats = t->repeats;
    if (t->q1_ms && t->q3_ms && std::isfinite(*t->q3_ms - *t->q1_ms)) s.spread_ms = std::max(0.0, *t->q3_ms - *t->q1_ms);
  }
  return s;
}

std::string ms(double v) { return fmt::format("{:.4g} ms", v); }

// The time verdict of two runs of one path: nothing when either was not timed.
void judge_time(PathComparison& row, const CompareOptions& options, bool timings_comparable) {
  if (!row.base.median_ms || !row.now.median_ms) return;
  const double base = *row.base.median_ms, now = *row.now.median_ms;
  row.change = (now - base) / base;
  if (!timings_comparable) {
    row.verdicts.push_back(Verdict::NotComparable);
    row.note = "timings not comparable (see the top)";
    return;
  }
  // One run is no measurement of its noise: the reference's wall clock on a
  // shared CPU moves by tens of percent between runs.
  if (row.base.repeats <= 1 || row.now.repeats <= 1) {
    row.note = fmt::format("{:+.1f}%, a single timed run: not judged", 100 * *row.change);
    return;
  }
  const double delta = std::abs(now - base);
  const bool past_threshold = std::abs(*row.change) > options.max_slowdown;
  // The noise: the larger spread of the runs that measured one.
  std::optional<double> noise;
  if (row.base.spread_ms) noise = *row.base.spread_ms;
  if (row.now.spread_ms) noise = std::max(noise.value_or(0.0), *row.now.spread_ms);
  const bool past_noise = !noise || delta > *noise;
  if (past_threshold && past_noise) {
    row.verdicts.push_back(now > base ? Verdict::Slower : Verdict::Faster);
    row.note = noise ? fmt::format("{:+.1f}%, beyond the spread ({}) and {:.1f}%", 100 * *row.change, ms(*noise),
                                   100 * options.max_slowdown)
                     : fmt::format("{:+.1f}%, beyond {:.1f}% (spread unknown: the threshold alone)", 100 * *row.change,
                                   100 * options.max_slowdown);
  } else if (!past_noise) {
    row.note = fmt::format("{:+.1f}%, within the spread ({})", 100 * *row.change, ms(*noise));
  } else {
    row.note = fmt::format("{:+.1f}%, within {:.1f}%{}", 100 * *row.change, 100 * options.max_slowdown,
                           noise ? "" : " (spread unknown)");
  }
}

void judge_error(PathComparison& row, const CompareOptions& options) {
  if (!row.base.max_abs_err || !row.now.max_abs_err) return;
  const double base = *row.base.max_abs_err, now = *row.now.max_abs_err;
  // inf: a path that wrote NaN or Inf.
  if (std::isinf(now) || std::isinf(base)) {
    if (std::isinf(now) && !std::isinf(base)) row.verdicts.push_back(Verdict::MoreError);
    if (std::isinf(base) && !std::isinf(now)) row.verdicts.push_back(Verdict::LessError);
    return;
  }
  const double floor = kErrorGrowthFloor * std::max(row.now.atol, row.base.atol);
  const double factor = 1.0 + options.max_error_growth;
  if (now > base * factor && now > floor) row.verdicts.push_back(Verdict::MoreError);
  else if (base > now * factor && base > floor) row.verdicts.push_back(Verdict::LessError);
}

PathComparison pair_paths(const PathReport* base, const PathReport* now, const CompareOptions& options,
                          bool timings_comparable) {
  PathComparison row;
  row.path = base ? base->path : now->path;
  if (base) row.base = side_of(*base);
  if (now) row.now = side_of(*now);
  if (!base || !now) {
    row.verdicts.push_back(base ? Verdict::Gone : Verdict::New);
    return row;
  }
  // Status first: a path that fails now, whatever it did before, is the news.
  if (side_fails(row.now) && !side_fails(row.base)) row.verdicts.push_back(Verdict::NowFailing);
  else if (side_fails(row.base) && !side_fails(row.now) && side_ran(row.now)) row.verdicts.push_back(Verdict::NowPassing);
  else if (side_ran(row.base) && !side_ran(row.now) && !side_fails(row.now)) {
    row.verdicts.push_back(Verdict::Gone);
    row.note = fmt::format("{} in NEW: {}", row.now.status, row.now.reason);
  } else if (!side_ran(row.base) && !side_fails(row.base) && side_ran(row.now)) {
    row.verdicts.push_back(Verdict::New);
    row.note = fmt::format("{} in BASE: {}", row.base.status, row.base.reason);
  }
  judge_error(row, options);
  const auto differs = [](const std::string& a, const std::string& b) { return !a.empty() && !b.empty() && a != b; };
  if (differs(row.base.output_digest, row.now.output_digest) || differs(row.base.lse_digest, row.now.lse_digest))
    row.verdicts.push_back(Verdict::BitsChanged);
  judge_time(row, options, timings_comparable);
  if (row.verdicts.empty()) row.verdicts.push_back(Verdict::Same);
  return row;
}

// One side's paths of a case that is not paired (new, gone, changed).
std::vector<PathComparison> unpaired_rows(const CaseReport* base, const CaseReport* now, Verdict verdict) {
  std::vector<PathComparison> rows;
  std::vector<std::string> names;
  for (const CaseReport* c : {base, now})
    if (c)
      for (const auto& p : c->paths)
        if (std::find(names.begin(), names.end(), p.path) == names.end()) names.push_back(p.path);
  for (const auto& name : names) {
    PathComparison row;
    row.path = name;
    const auto find = [&](const CaseReport* c) -> const PathReport* {
      if (!c) return nullptr;
      for (const auto& p : c->paths)
        if (p.path == name) return &p;
      return nullptr;
    };
    if (const PathReport* p = find(base)) row.base = side_of(*p);
    if (const PathReport* p = find(now)) row.now = side_of(*p);
    row.verdicts.push_back(verdict);
    rows.push_back(std::move(row));
  }
  return rows;
}

CaseComparison pair_cases(const CaseReport* base, const CaseReport* now, const CompareOptions& options,
                          bool timings_comparable) {
  CaseComparison cc;
  cc.name = now ? now->name : base->name;
  if (base) {
    cc.base_name = base->name;
    cc.base_hash = base->content_hash;
    cc.base_errors = base->errors;
  }
  if (now) {
    cc.new_hash = now->content_hash;
    cc.new_errors = now->errors;
  }
  cc.geometry = now ? now->geometry : base->geometry;
  if (!base || !now) {
    cc.verdicts.push_back(base ? Verdict::Gone : Verdict::New);
    cc.paths = unpaired_rows(base, now, cc.verdicts.front());
    return cc;
  }
  if (base->name != now->name) cc.verdicts.push_back(Verdict::Renamed);
  const bool base_valid = base->errors.empty(), now_valid = now->errors.empty();
  if (base_valid != now_valid) cc.verdicts.push_back(now_valid ? Verdict::NowPassing : Verdict::NowFailing);
  if (!base_valid || !now_valid) return cc;  // an invalid case has no paths to pair
  std::vector<std::string> names;
  for (const CaseReport* c : {base, now})
    for (const auto& p : c->paths)
      if (std::find(names.begin(), names.end(), p.path) == names.end()) names.push_back(p.path);
  for (const auto& name : names) {
    const auto find = [&](const CaseReport& c) -> const PathReport* {
      for (const auto& p : c.paths)
        if (p.path == name) return &p;
      return nullptr;
    };
    cc.paths.push_back(pair_paths(find(*base), find(*now), options, timings_comparable));
  }
  return cc;
}

std::string device_name(const RunReport& r) { return r.device ? r.device->name : std::string(); }

// The options of a command line that decide how paths are timed.
std::map<std::string, std::string> timing_mode(const std::string& command) {
  std::map<std::string, std::string> mode;
  const auto words = split_command_line(command);
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    const auto eq = w.find('=');
    const std::string name = w.substr(0, eq);
    if (name == "--hot" || name == "--no-timing") mode[name] = "on";
    if (name == "--warmup" || name == "--repeats") {
      if (eq != std::string::npos) mode[name] = w.substr(eq + 1);
      else if (i + 1 < words.size()) mode[name] = words[++i];
    }
  }
  return mode;
}

std::string mode_text(const std::map<std::string, std::string>& mode) {
  if (mode.empty()) return "defaults";
  std::string out;
  for (const auto& [name, value] : mode) out += (out.empty() ? "" : " ") + (value == "on" ? name : name + " " + value);
  return out;
}

std::vector<std::string> timing_differences(const RunReport& base, const RunReport& now) {
  std::vector<std::string> out;
  const std::string bd = device_name(base), nd = device_name(now);
  if (bd != nd) out.push_back(fmt::format("device: {} vs {}", bd.empty() ? "none" : bd, nd.empty() ? "none" : nd));
  if (base.device && now.device && bd == nd) {
    const auto far = [](double a, double b) { return a > 0 && b > 0 && std::abs(a - b) > kCeilingTolerance * std::max(a, b); };
    const DeviceInfo &b = *base.device, &n = *now.device;
    std::vector<std::string> ceilings;
    if (far(b.copy_gb_per_s, n.copy_gb_per_s))
      ceilings.push_back(fmt::format("copy {:.0f} vs {:.0f} GB/s", b.copy_gb_per_s, n.copy_gb_per_s));
    if (far(b.read_gb_per_s, n.read_gb_per_s))
      ceilings.push_back(fmt::format("read {:.0f} vs {:.0f} GB/s", b.read_gb_per_s, n.read_gb_per_s));
    if (far(b.matmul_tflop_per_s, n.matmul_tflop_per_s))
      ceilings.push_back(fmt::format("BF16 mma {:.0f} vs {:.0f} TFLOP/s", b.matmul_tflop_per_s, n.matmul_tflop_per_s));
    if (!ceilings.empty())
      out.push_back(fmt::format("measured device ceilings more than {:.0f}% apart ({}): other clocks, power limit or "
                                "load",
                                100 * kCeilingTolerance, fmt::join(ceilings, ", ")));
  }
  if (base.tool_version != now.tool_version)
    out.push_back(fmt::format("pagecheck version: {} vs {}", base.tool_version, now.tool_version));
  const auto bm = timing_mode(base.command_line), nm = timing_mode(now.command_line);
  if (bm != nm) out.push_back(fmt::format("timing mode: {} vs {}", mode_text(bm), mode_text(nm)));
  return out;
}

ReportIdentity identity_of(const RunReport& r, const std::string& source) {
  return {source, r.tool_version, r.command_line, device_name(r)};
}

}  // namespace

Expected<Comparison> compare_reports(const RunReport& base, const std::string& base_source, const RunReport& now,
                                     const std::string& now_source, const CompareOptions& options) {
  for (const auto& [report, source, label] : {std::tuple{&base, &base_source, "BASE"}, {&now, &now_source, "NEW"}})
    if (!report->errors.empty())
      return invalid_input(fmt::format("{} did not run ({}): nothing to compare", label, report->errors.front()),
                           *source);
  if (base.shard || now.shard) {
    const bool same = base.shard && now.shard && base.shard->index == now.shard->index &&
                      base.shard->count == now.shard->count;
    if (!same)
      return invalid_input(fmt::format("not comparable: BASE is {} and NEW is {}; merge the shards first (pagecheck "
                                       "merge) and compare the merged reports",
                                       base.shard ? "shard " + shard_label(*base.shard) : std::string("not sharded"),
                                       now.shard ? "shard " + shard_label(*now.shard) : std::string("not sharded")));
  }

  Comparison cmp;
  cmp.base = identity_of(base, base_source);
  cmp.now = identity_of(now, now_source);
  cmp.options = options;
  cmp.timing_differences = timing_differences(base, now);
  const bool timings_comparable = cmp.timing_differences.empty();

  // Pairing: by name (in order of occurrence, for a name a run repeats),
  // unless both hashes are known and differ (changed); then the rest of NEW by
  // content hash among BASE's unpaired cases (renamed).
  const std::size_t nb = base.cases.size(), nn = now.cases.size();
  std::vector<std::optional<std::size_t>> partner(nn);  // NEW case -> BASE case
  std::vector<bool> base_taken(nb, false), changed(nn, false);
  for (std::size_t i = 0; i < nn; ++i) {
    const CaseReport& c = now.cases[i];
    for (std::size_t k = 0; k < nb; ++k) {
      if (base_taken[k] || base.cases[k].name != c.name) continue;
      base_taken[k] = true;
      const std::string &bh = base.cases[k].content_hash, &nh = c.content_hash;
      if (!bh.empty() && !nh.empty() && bh != nh) changed[i] = true;
      partner[i] = k;
      break;
    }
  }
  for (std::size_t i = 0; i < nn; ++i) {
    if (partner[i] || now.cases[i].content_hash.empty()) continue;
    for (std::size_t k = 0; k < nb; ++k) {
      if (base_taken[k] || base.cases[k].content_hash != now.cases[i].content_hash) continue;
      base_taken[k] = true;
      partner[i] = k;
      break;
    }
  }
  const bool any_paired = std::any_of(partner.begin(), partner.end(), [](const auto& p) { return p.has_value(); });
  if (nb > 0 && nn > 0 && !any_paired)
    return invalid_input(fmt::format("not comparable: no case of {} ({} case{}) is in {} ({} case{}) by name or "
                                     "content; compare two runs of one suite",
                                     base_source, nb, nb == 1 ? "" : "s", now_source, nn, nn == 1 ? "" : "s"));

  // NEW's order; a gone case where it stood in BASE, after the paired case
  // that preceded it.
  std::vector<std::vector<std::size_t>> gone_after(nn + 1);  // NEW position -> BASE cases gone there
  {
    std::size_t position = 0;  // before NEW case `position`
    std::vector<std::optional<std::size_t>> base_partner(nb);
    for (std::size_t i = 0; i < nn; ++i)
      if (partner[i]) base_partner[*partner[i]] = i;
    for (std::size_t k = 0; k < nb; ++k) {
      if (base_partner[k]) position = *base_partner[k] + 1;
      else gone_after[position].push_back(k);
    }
  }
  for (std::size_t i = 0; i <= nn; ++i) {
    for (const std::size_t k : gone_after[i])
      cmp.cases.push_back(pair_cases(&base.cases[k], nullptr, options, timings_comparable));
    if (i == nn) break;
    const CaseReport& c = now.cases[i];
    if (!partner[i]) {
      cmp.cases.push_back(pair_cases(nullptr, &c, options, timings_comparable));
    } else if (changed[i]) {
      const CaseReport& b = base.cases[*partner[i]];
      CaseComparison cc;
      cc.name = c.name;
      cc.base_name = b.name;
      cc.base_hash = b.content_hash;
      cc.new_hash = c.content_hash;
      cc.geometry = c.geometry;
      cc.base_errors = b.errors;
      cc.new_errors = c.errors;
      cc.verdicts.push_back(Verdict::Changed);
      cc.paths = unpaired_rows(&b, &c, Verdict::Changed);
      cmp.cases.push_back(std::move(cc));
    } else {
      cmp.cases.push_back(pair_cases(&base.cases[*partner[i]], &c, options, timings_comparable));
    }
  }

  // Said once.
  const auto no_hash = [](const RunReport& r) {
    return std::any_of(r.cases.begin(), r.cases.end(), [](const CaseReport& c) { return c.content_hash.empty(); });
  };
  if (no_hash(base) || no_hash(now))
    cmp.notes.push_back("cases without a content hash (reports written before it was recorded, or cases that did not "
                        "load) are paired by name alone: a changed case of the same name cannot be told");
  std::int64_t unmeasured = 0, single = 0;
  for (const auto& c : cmp.cases)
    for (const auto& p : c.paths) {
      if (!p.base.median_ms || !p.now.median_ms) continue;
      if (p.base.repeats <= 1 || p.now.repeats <= 1) ++single;
      else if (!p.base.spread_ms && !p.now.spread_ms) ++unmeasured;
    }
  if (single > 0 && timings_comparable)
    cmp.notes.push_back(fmt::format("{} timed path{} of a single run (the reference's wall-clock time, or --repeats 1): "
                                    "the change is shown, not judged",
                                    single, single == 1 ? "" : "s"));
  if (unmeasured > 0 && timings_comparable)
    cmp.notes.push_back(fmt::format("{} timed path{} without a measured spread in either report (reports written "
                                    "before the spread was recorded): judged by --max-slowdown alone",
                                    unmeasured, unmeasured == 1 ? "" : "s"));
  return cmp;
}

Expected<PathPair> parse_path_pair(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size() || text.find('=', eq + 1) != std::string::npos)
    return usage_error(fmt::format("--pair: '{}' is not A=B (two path names, e.g. ext:old=ext:new or split=auto)", text));
  PathPair pair{text.substr(0, eq), text.substr(eq + 1)};
  if (pair.base_path == pair.new_path)
    return usage_error(fmt::format("--pair: '{}' pairs a path with itself", text));
  return pair;
}

Expected<Comparison> compare_path_pairs(const RunReport& report, const std::string& source,
                                        const std::vector<PathPair>& pairs, const CompareOptions& options) {
  if (pairs.empty()) return usage_error("--pair: no pair of paths given");
  std::set<std::string> known;
  for (const auto& c : report.cases)
    for (const auto& p : c.paths) known.insert(p.path);
  for (const auto& pair : pairs)
    for (const std::string* name : {&pair.base_path, &pair.new_path})
      if (!known.count(*name))
        return usage_error(fmt::format("--pair: no case of {} has a path '{}' (paths there: {})", source, *name,
                                       fmt::join(known, ", ")));
  // Two views of the report: the A paths as BASE, the B paths as NEW, both
  // under the pair's name; the cases and everything else as they are.
  RunReport base = report, now = report;
  for (auto [view, take_base] : {std::pair{&base, true}, std::pair{&now, false}}) {
    for (auto& c : view->cases) {
      std::vector<PathReport> kept;
      for (const auto& pair : pairs)
        for (const auto& p : c.paths)
          if (p.path == (take_base ? pair.base_path : pair.new_path)) {
            kept.push_back(p);
            kept.back().path = pair.base_path + "=" + pair.new_path;
          }
      c.paths = std::move(kept);
    }
  }
  auto cmp = compare_reports(base, source, now, source, options);
  if (!cmp.ok()) return cmp;
  // One report: its cases pair with themselves, hash or not.
  std::erase_if(cmp->notes, [](const std::string& n) { return n.rfind("cases without a content hash", 0) == 0; });
  std::string base_paths, new_paths;
  for (const auto& pair : pairs) {
    base_paths += (base_paths.empty() ? "" : ", ") + pair.base_path;
    new_paths += (new_paths.empty() ? "" : ", ") + pair.new_path;
  }
  cmp->base.source = fmt::format("{} [{}]", source, base_paths);
  cmp->now.source = fmt::format("{} [{}]", source, new_paths);
  return cmp;
}

ComparisonSummary summarize(const Comparison& cmp) {
  ComparisonSummary s;
  s.path_verdicts.assign(all_verdicts().size(), 0);
  s.case_verdicts.assign(all_verdicts().size(), 0);
  for (const auto& c : cmp.cases) {
    for (const Verdict v : c.verdicts) ++s.case_verdicts[static_cast<std::size_t>(v)];
    if (is_regression(c.verdicts, cmp.options)) ++s.regressions;
    for (const auto& p : c.paths) {
      ++s.paths;
      for (const Verdict v : p.verdicts) ++s.path_verdicts[static_cast<std::size_t>(v)];
      // A new, gone or changed case counts once, as a case.
      if (!is_regression(c.verdicts, cmp.options) && is_regression(p.verdicts, cmp.options)) ++s.regressions;
    }
  }
  return s;
}

int comparison_exit_code(const Comparison& cmp) {
  return summarize(cmp).regressions > 0 ? exit_code::kFail : exit_code::kPass;
}

// ---------------------------------------------------------------- table ---

namespace {

std::string verdict_list(const std::vector<Verdict>& verdicts) {
  std::string out;
  for (const Verdict v : verdicts) out += (out.empty() ? "" : ", ") + std::string(verdict_name(v));
  return out;
}

std::string num(const std::optional<double>& v) {
  if (!v) return "-";
  if (std::isnan(*v)) return "nan";
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3g}", *v);
}

std::string time_cell(const PathSide& s) {
  if (!s.median_ms) return "-";
  return s.spread_ms ? fmt::format("{:.4g}±{:.2g}", *s.median_ms, *s.spread_ms / 2) : fmt::format("{:.4g}", *s.median_ms);
}

std::string then_now(const std::string& a, const std::string& b) {
  if (a == b) return a;
  return fmt::format("{} → {}", a.empty() ? "-" : a, b.empty() ? "-" : b);
}

std::string options_line(const CompareOptions& o) {
  std::vector<std::string> fail_on;
  for (const Verdict v : all_verdicts())
    if (o.fail_on.count(v)) fail_on.emplace_back(verdict_name(v));
  return fmt::format("a time changes when past both runs' spread and {:g}% (--max-slowdown); more error past {:g}% "
                     "growth (--max-error-growth); fail on: {}",
                     100 * o.max_slowdown, 100 * o.max_error_growth, fmt::join(fail_on, ", "));
}

std::string side_label(const ReportIdentity& r) {
  return fmt::format("{} (pagecheck {}, {})", r.source, r.version, r.device.empty() ? "no device" : r.device);
}

std::string case_heading(const CaseComparison& c) {
  std::string out = printable(c.name, 200);
  for (const Verdict v : c.verdicts) {
    if (v == Verdict::Renamed) out += fmt::format("  [renamed from {}]", printable(c.base_name, 200));
    else if (v == Verdict::Changed)
      out += fmt::format("  [changed: content {} → {}; not compared]", c.base_hash.substr(0, 8), c.new_hash.substr(0, 8));
    else out += fmt::format("  [{}]", verdict_name(v));
  }
  return out;
}

}  // namespace

void print_comparison(std::FILE* out, const Comparison& cmp, bool color) {
  const char* bold = color ? "\x1b[1m" : "";
  const char* red = color ? "\x1b[31;1m" : "";
  const char* green = color ? "\x1b[32m" : "";
  const char* reset = color ? "\x1b[0m" : "";
  fmt::print(out, "BASE {}\nNEW  {}\n", side_label(cmp.base), side_label(cmp.now));
  fmt::print(out, "{}\n", options_line(cmp.options));
  if (!cmp.timing_differences.empty())
    fmt::print(out, "timings not comparable: {}\n", fmt::join(cmp.timing_differences, "; "));
  for (const auto& n : cmp.notes) fmt::print(out, "note: {}\n", n);
  for (const auto& c : cmp.cases) {
    fmt::print(out, "\n{}{}{}\n", bold, case_heading(c), reset);
    for (const auto& e : c.base_errors) fmt::print(out, "  invalid in BASE: {}\n", e);
    for (const auto& e : c.new_errors) fmt::print(out, "  invalid in NEW: {}\n", e);
    if (c.paths.empty()) continue;
    fmt::print(out, "  {:<10} {:<16} {:<22} {:<24} {:>8}  {}\n", "path", "status", "max abs err", "median ms", "change",
               "verdict");
    for (const auto& p : c.paths) {
      const bool bad = is_regression(p.verdicts, cmp.options) || is_regression(c.verdicts, cmp.options);
      const bool good = !bad && std::any_of(p.verdicts.begin(), p.verdicts.end(), [](Verdict v) {
        return v == Verdict::Faster || v == Verdict::NowPassing || v == Verdict::LessError;
      });
      const std::string verdicts = verdict_list(p.verdicts);
      fmt::print(out, "  {:<10} {:<16} {:<22} {:<24} {:>8}  {}{}{}\n", printable(p.path, 100),
                 then_now(p.base.status, p.now.status), then_now(num(p.base.max_abs_err), num(p.now.max_abs_err)),
                 then_now(time_cell(p.base), time_cell(p.now)),
                 p.change ? fmt::format("{:+.1f}%", 100 * *p.change) : std::string("-"), bad ? red : good ? green : "",
                 verdicts, bad || good ? reset : "");
      // Why a row is what it is where that is not plain: a verdict, or a
      // change past the threshold that the spread absorbed.
      const bool absorbed = p.change && std::abs(*p.change) > cmp.options.max_slowdown;
      if (!p.note.empty() &&
          (bad || good || absorbed || p.verdicts.front() == Verdict::New || p.verdicts.front() == Verdict::Gone))
        fmt::print(out, "      {}\n", p.note);
    }
  }
  print_comparison_summary(out, cmp, color);
}

void print_comparison_summary(std::FILE* out, const Comparison& cmp, bool color) {
  const char* red = color ? "\x1b[31;1m" : "";
  const char* reset = color ? "\x1b[0m" : "";
  const ComparisonSummary s = summarize(cmp);
  std::vector<std::string> parts;
  for (const Verdict v : all_verdicts())
    if (s.path_verdicts[static_cast<std::size_t>(v)] > 0)
      parts.push_back(fmt::format("{} {}", s.path_verdicts[static_cast<std::size_t>(v)], verdict_name(v)));
  std::vector<std::string> case_parts;
  for (const Verdict v : all_verdicts())
    if (s.case_verdicts[static_cast<std::size_t>(v)] > 0)
      case_parts.push_back(fmt::format("{} {}", s.case_verdicts[static_cast<std::size_t>(v)], verdict_name(v)));
  fmt::print(out, "\n{} case{}, {} path pair{}: {}{}{}\n", cmp.cases.size(), cmp.cases.size() == 1 ? "" : "s", s.paths,
             s.paths == 1 ? "" : "s", parts.empty() ? "nothing to compare" : fmt::format("{}", fmt::join(parts, ", ")),
             case_parts.empty() ? "" : "; cases: ", fmt::join(case_parts, ", "));
  if (s.regressions == 0) {
    fmt::print(out, "no regression\n");
    return;
  }
  fmt::print(out, "\n{}regressions ({}){}:\n", red, s.regressions, reset);
  for (const auto& c : cmp.cases) {
    if (is_regression(c.verdicts, cmp.options)) {
      fmt::print(out, "  {}: {}\n", printable(c.name, 200), verdict_list(c.verdicts));
      continue;
    }
    for (const auto& p : c.paths) {
      if (!is_regression(p.verdicts, cmp.options)) continue;
      std::string detail = p.note;
      if (std::find(p.verdicts.begin(), p.verdicts.end(), Verdict::NowFailing) != p.verdicts.end() && !p.now.reason.empty())
        detail = p.now.reason + (detail.empty() ? "" : "; " + detail);
      if (std::find(p.verdicts.begin(), p.verdicts.end(), Verdict::MoreError) != p.verdicts.end())
        detail = fmt::format("max abs err {} → {}{}", num(p.base.max_abs_err), num(p.now.max_abs_err),
                             detail.empty() ? "" : "; " + detail);
      fmt::print(out, "  {}: {}: {}{}{}\n", printable(c.name, 200), printable(p.path, 100), verdict_list(p.verdicts),
                 detail.empty() ? "" : ": ", detail);
    }
  }
}

// ----------------------------------------------------------------- json ---

namespace {

nlohmann::json json_opt(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;  // JSON has no NaN/Inf, as in the run's report
  return *v;
}

nlohmann::json json_side(const PathSide& s) {
  if (s.status.empty()) return nullptr;
  return {{"status", s.status},           {"reason", s.reason},
          {"max_abs_err", json_opt(s.max_abs_err)}, {"atol", s.atol},
          {"median_ms", json_opt(s.median_ms)},    {"iqr_ms", json_opt(s.spread_ms)},
          {"repeats", s.repeats},
          {"output_digest", s.output_digest.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.output_digest)},
          {"lse_digest", s.lse_digest.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.lse_digest)}};
}

nlohmann::json json_verdicts(const std::vector<Verdict>& verdicts) {
  nlohmann::json out = nlohmann::json::array();
  for (const Verdict v : verdicts) out.push_back(std::string(verdict_name(v)));
  return out;
}

nlohmann::json json_identity(const ReportIdentity& r) {
  return {{"file", r.source},
          {"version", r.version},
          {"command", r.command},
          {"device", r.device.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.device)}};
}

}  // namespace

nlohmann::json comparison_to_json(const Comparison& cmp) {
  nlohmann::json j;
  j["tool"] = "pagecheck compare";
  j["schema"] = 1;
  j["version"] = PAGECHECK_VERSION;
  j["base"] = json_identity(cmp.base);
  j["new"] = json_identity(cmp.now);
  nlohmann::json fail_on = nlohmann::json::array();
  for (const Verdict v : all_verdicts())
    if (cmp.options.fail_on.count(v)) fail_on.push_back(std::string(verdict_name(v)));
  j["options"] = {{"max_slowdown_pct", 100 * cmp.options.max_slowdown},
                  {"max_error_growth_pct", 100 * cmp.options.max_error_growth},
                  {"fail_on", fail_on}};
  j["timings_comparable"] = cmp.timing_differences.empty();
  j["timing_differences"] = cmp.timing_differences;
  j["notes"] = cmp.notes;
  const ComparisonSummary s = summarize(cmp);
  nlohmann::json paths = {{"pairs", s.paths}}, cases = {{"cases", cmp.cases.size()}};
  for (const Verdict v : all_verdicts()) {
    paths[std::string(verdict_name(v))] = s.path_verdicts[static_cast<std::size_t>(v)];
    cases[std::string(verdict_name(v))] = s.case_verdicts[static_cast<std::size_t>(v)];
  }
  j["summary"] = {{"paths", paths}, {"cases", cases}, {"regressions", s.regressions}};
  j["exit_code"] = comparison_exit_code(cmp);
  j["cases"] = nlohmann::json::array();
  for (const auto& c : cmp.cases) {
    nlohmann::json jc;
    jc["name"] = c.name;
    jc["base_name"] = c.base_name.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.base_name);
    jc["base_hash"] = c.base_hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.base_hash);
    jc["new_hash"] = c.new_hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.new_hash);
    jc["geometry"] = c.geometry;
    jc["base_errors"] = c.base_errors;
    jc["new_errors"] = c.new_errors;
    jc["verdicts"] = json_verdicts(c.verdicts);
    jc["regression"] = is_regression(c.verdicts, cmp.options);
    jc["paths"] = nlohmann::json::array();
    for (const auto& p : c.paths) {
      jc["paths"].push_back({{"path", p.path},
                             {"base", json_side(p.base)},
                             {"new", json_side(p.now)},
                             {"change_pct", p.change ? json_opt(100 * *p.change) : nlohmann::json(nullptr)},
                             {"verdicts", json_verdicts(p.verdicts)},
                             {"regression", is_regression(p.verdicts, cmp.options)},
                             {"note", p.note}});
    }
    j["cases"].push_back(std::move(jc));
  }
  return j;
}

// ---------------------------------------------------------------- junit ---

std::string comparison_to_junit(const Comparison& cmp) {
  std::int64_t tests = 0, failures = 0;
  std::string cases;
  const auto testcase = [&](const std::string& classname, const std::string& name, double seconds,
                            const std::vector<Verdict>* failed, const std::string& details) {
    ++tests;
    cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.6f}\"", classname, xml_escape(name), seconds);
    if (!failed) {
      cases += "/>\n";
      return;
    }
    ++failures;
    cases += fmt::format(">\n      <failure message=\"{}\" type=\"regression\">{}</failure>\n    </testcase>\n",
                         xml_escape(verdict_list(*failed)), xml_escape(details));
  };
  for (const auto& c : cmp.cases) {
    const std::string classname = xml_escape("pagecheck.compare." + c.name);
    const bool case_regression = is_regression(c.verdicts, cmp.options);
    if (c.paths.empty()) {
      testcase(classname, "case", 0, case_regression ? &c.verdicts : nullptr,
               fmt::format("{}", fmt::join(c.new_errors.empty() ? c.base_errors : c.new_errors, "\n")));
      continue;
    }
    for (const auto& p : c.paths) {
      const std::vector<Verdict>* failed = case_regression                          ? &c.verdicts
                                           : is_regression(p.verdicts, cmp.options) ? &p.verdicts
                                                                                    : nullptr;
      testcase(classname, p.path, p.now.median_ms ? *p.now.median_ms * 1e-3 : 0.0, failed,
               fmt::format("status {}; max abs err {}; median ms {}; {}", then_now(p.base.status, p.now.status),
                           then_now(num(p.base.max_abs_err), num(p.now.max_abs_err)),
                           then_now(time_cell(p.base), time_cell(p.now)), p.note));
    }
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"pagecheck compare\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\">\n",
                     tests, failures);
  out += fmt::format("  <testsuite name=\"pagecheck compare\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\">\n",
                     tests, failures);
  out += "    <properties>\n";
  out += fmt::format("      <property name=\"base\" value=\"{}\"/>\n", xml_escape(side_label(cmp.base)));
  out += fmt::format("      <property name=\"new\" value=\"{}\"/>\n", xml_escape(side_label(cmp.now)));
  out += fmt::format("      <property name=\"gate\" value=\"{}\"/>\n", xml_escape(options_line(cmp.options)));
  if (!cmp.timing_differences.empty())
    out += fmt::format("      <property name=\"timings_not_comparable\" value=\"{}\"/>\n",
                       xml_escape(fmt::format("{}", fmt::join(cmp.timing_differences, "; "))));
  out += "    </properties>\n";
  out += cases;
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

}  // namespace pagecheck
