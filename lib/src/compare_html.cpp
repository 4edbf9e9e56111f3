// The HTML page of a comparison (compare.hpp, comparison_to_html), in the
// look of the run's page (report_html.cpp: its CSS and its error colours).
//
// The picture: one row per timed path pair, a bar from 0 to the change of the
// median in percent (red slower, green faster, blue same, grey not
// comparable), over two bands: the --max-slowdown threshold, the same for
// every row, and the row's own measured spread (the larger IQR of the two
// runs, as a percentage of BASE's median). A bar counts as a change only where
// it leaves both bands. Changes beyond the axis are drawn to its end with an
// arrow head. Right of each bar, two squares: the max error in BASE and in
// NEW, coloured by error / atol as the error maps colour error / tolerance;
// the tables colour each max error the same way.
#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pagecheck/compare.hpp"
#include "pagecheck/report_html.hpp"

namespace pagecheck {

namespace {

std::string num(const std::optional<double>& v) {
  if (!v) return "-";
  if (std::isnan(*v)) return "nan";
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3g}", *v);
}

bool has(const std::vector<Verdict>& verdicts, Verdict v) {
  return std::find(verdicts.begin(), verdicts.end(), v) != verdicts.end();
}

std::string verdict_list(const std::vector<Verdict>& verdicts) {
  std::string out;
  for (const Verdict v : verdicts) out += (out.empty() ? "" : ", ") + std::string(verdict_name(v));
  return out;
}

// The class a verdict list is drawn with: the run page's status colours.
std::string verdict_class(const std::vector<Verdict>& verdicts, const CompareOptions& options) {
  if (is_regression(verdicts, options)) return "fail";
  if (has(verdicts, Verdict::Faster) || has(verdicts, Verdict::NowPassing) || has(verdicts, Verdict::LessError))
    return "pass";
  if (has(verdicts, Verdict::NotComparable) || has(verdicts, Verdict::New) || has(verdicts, Verdict::Gone) ||
      has(verdicts, Verdict::Changed))
    return "skipped";
  return "same";
}

std::string bar_colour(const PathComparison& p) {
  if (has(p.verdicts, Verdict::NotComparable)) return "#a8a8a8";
  if (has(p.verdicts, Verdict::Slower)) return "#c62828";
  if (has(p.verdicts, Verdict::Faster)) return "#1a7f37";
  return "#6baed6";
}

struct ChartRow {
  std::string label;
  const PathComparison* path;
};

std::string change_chart(const Comparison& cmp) {
  std::vector<ChartRow> rows;
  for (const auto& c : cmp.cases)
    for (const auto& p : c.paths)
      if (p.change) rows.push_back({c.name + " / " + p.path, &p});
  if (rows.empty())
    return "<p class=\"note\">No path was timed in both reports: no change of time to draw.</p>\n";

  // The axis: a round extent that holds every change (up to 100%; beyond,
  // an arrow) and at least twice the threshold.
  double wanted = 2 * cmp.options.max_slowdown;
  for (const auto& r : rows) wanted = std::max(wanted, std::abs(*r.path->change) * 1.05);
  double extent = 1.0;
  for (const double round : {0.1, 0.2, 0.25, 0.5, 1.0})
    if (wanted <= round) {
      extent = round;
      break;
    }
  const double label_w = 330, plot_w = 520, row_h = 16, top = 28, bottom = 26, errors_x = label_w + plot_w + 24;
  const double width = errors_x + 60, height = top + row_h * static_cast<double>(rows.size()) + bottom;
  const auto x_of = [&](double change) {
    return label_w + plot_w * (std::clamp(change, -extent, extent) + extent) / (2 * extent);
  };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"change\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" role=\"img\" aria-label=\"change of the median time per path\">\n",
      width, height);
  // The threshold band, every row.
  const double t0 = x_of(-cmp.options.max_slowdown), t1 = x_of(cmp.options.max_slowdown);
  s += fmt::format("<rect class=\"threshold\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
                   "fill=\"#eeeeee\"><title>--max-slowdown: ±{:g}%</title></rect>\n",
                   t0, top - 4, t1 - t0, row_h * static_cast<double>(rows.size()) + 8, 100 * cmp.options.max_slowdown);
  // Ticks: -extent, -extent/2, 0, extent/2, extent.
  for (int k = -2; k <= 2; ++k) {
    const double v = extent * k / 2.0, x = x_of(v);
    s += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
                     "stroke-width=\"1\"/>\n",
                     x, top - 6, height - bottom + 4, k == 0 ? "#555" : "#ddd");
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\">{:+.0f}%</text>\n", x,
                     height - 8, 100 * v);
  }
  s += fmt::format("<text x=\"{:.1f}\" y=\"12\" font-size=\"11\" text-anchor=\"middle\">change of the median time "
                   "(NEW against BASE); faster to the left, slower to the right</text>\n",
                   label_w + plot_w / 2);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\">error</text>\n",
                   errors_x + 17, top - 8);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const PathComparison& p = *rows[i].path;
    const double y = top + row_h * static_cast<double>(i);
    // The max error then and now, in the error maps' colours of error / atol.
    for (const auto& [side, label, dx] :
         {std::tuple{&p.base, "BASE", 0.0}, std::tuple{&p.now, "NEW", 20.0}}) {
      if (!side->max_abs_err || !(side->atol > 0)) continue;
      const double ratio = *side->max_abs_err / side->atol;
      s += fmt::format("<rect class=\"error\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"{:.1f}\" fill=\"{}\" "
                       "stroke=\"#999\"><title>{} max |error| {} = {} × atol</title></rect>\n",
                       errors_x + dx, y + 2, row_h - 4, error_ratio_colour(ratio), label, num(side->max_abs_err),
                       num(ratio));
    }
    const double change = *p.change;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\">{}</text>\n", label_w - 6,
                     y + row_h - 5, html_text(rows[i].label, 200));
    // The row's measured spread, as a band around 0.
    std::optional<double> noise;
    if (p.base.spread_ms) noise = *p.base.spread_ms;
    if (p.now.spread_ms) noise = std::max(noise.value_or(0.0), *p.now.spread_ms);
    if (noise && p.base.median_ms && *p.base.median_ms > 0) {
      const double n = *noise / *p.base.median_ms;
      const double n0 = x_of(-n), n1 = x_of(n);
      s += fmt::format("<rect class=\"spread\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
                       "fill=\"#c9c9c9\"><title>measured spread ±{:.2g}%</title></rect>\n",
                       n0, y + 2, std::max(n1 - n0, 1.0), row_h - 4, 100 * n);
    }
    const double x0 = x_of(0), x1 = x_of(change);
    s += fmt::format("<rect class=\"bar\" data-change=\"{:.6g}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
                     "height=\"{:.1f}\" fill=\"{}\"><title>{}: {} → {} ms, {:+.2f}%: {}{}</title></rect>\n",
                     100 * change, std::min(x0, x1), y + 4, std::max(std::abs(x1 - x0), 1.0), row_h - 8, bar_colour(p),
                     html_text(rows[i].label, 200), num(p.base.median_ms), num(p.now.median_ms), 100 * change,
                     verdict_list(p.verdicts), p.note.empty() ? "" : " (" + html_text(p.note) + ")");
    if (std::abs(change) > extent) {
      const double tip = change > 0 ? x_of(extent) + 6 : x_of(-extent) - 6, base_x = change > 0 ? tip - 6 : tip + 6;
      s += fmt::format("<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" fill=\"{}\"/>\n", base_x, y + 3,
                       tip, y + row_h / 2, base_x, y + row_h - 3, bar_colour(p));
    }
  }
  s += "</svg>\n";
  return s;
}

std::string error_cell(const PathSide& s) {
  if (!s.max_abs_err) return "<td>-</td>";
  const double ratio = s.atol > 0 ? *s.max_abs_err / s.atol : std::nan("");
  if (std::isnan(ratio)) return fmt::format("<td>{}</td>", num(s.max_abs_err));
  return fmt::format("<td><span class=\"swatch\" style=\"background:{}\" title=\"max |error| / atol = {}\"></span> "
                     "{}</td>",
                     error_ratio_colour(ratio), num(ratio), num(s.max_abs_err));
}

std::string time_text(const PathSide& s) {
  if (!s.median_ms) return "-";
  return s.spread_ms ? fmt::format("{:.4g} (IQR {:.2g})", *s.median_ms, *s.spread_ms) : fmt::format("{:.4g}", *s.median_ms);
}

std::string status_text(const std::string& status) { return status.empty() ? "-" : status; }

std::string case_table(const CaseComparison& c, const CompareOptions& options) {
  std::string s = "<table class=\"paths\">\n<tr><th>path</th><th>status BASE</th><th>status NEW</th><th>max |error| "
                  "BASE</th><th>max |error| NEW</th><th>median ms BASE</th><th>median ms NEW</th><th>change</th>"
                  "<th>verdict</th><th>how judged</th></tr>\n";
  for (const auto& p : c.paths) {
    const std::string cls = verdict_class(is_regression(c.verdicts, options) ? c.verdicts : p.verdicts, options);
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td>{}{}<td>{}</td><td>{}</td><td>{}</td>"
                     "<td class=\"status {}\">{}</td><td class=\"reason\">{}</td></tr>\n",
                     html_text(p.path, 100), status_text(p.base.status), status_text(p.now.status), error_cell(p.base),
                     error_cell(p.now), time_text(p.base), time_text(p.now),
                     p.change ? fmt::format("{:+.1f}%", 100 * *p.change) : std::string("-"), cls,
                     verdict_list(p.verdicts), html_text(p.note));
  }
  return s + "</table>\n";
}

constexpr std::string_view kCompareStyle = R"(
.status.same { color: #555; }
span.swatch { display: inline-block; width: 0.9em; height: 0.9em; border: 1px solid #999; vertical-align: middle; }
svg.change text { font-family: system-ui, Helvetica, Arial, sans-serif; }
)";

}  // namespace

std::string comparison_to_html(const Comparison& cmp) {
  const ComparisonSummary summary = summarize(cmp);
  const int code = comparison_exit_code(cmp);
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  s += "<meta name=\"generator\" content=\"pagecheck " + html_text(PAGECHECK_VERSION, 100) + "\"/>\n";
  s += "<title>pagecheck compare</title>\n<style>" + std::string(html_page_style()) + std::string(kCompareStyle) +
       "</style>\n</head>\n<body>\n";
  s += "<h1>pagecheck compare</h1>\n";
  for (const auto& [label, side] : {std::pair{"BASE", &cmp.base}, std::pair{"NEW", &cmp.now}})
    s += fmt::format("<p class=\"command\">{}: {} (pagecheck {}, {}): {}</p>\n", label, html_text(side->source, 400),
                     html_text(side->version, 100), side->device.empty() ? "no device" : html_text(side->device, 200),
                     html_text(side->command, 4000));
  std::vector<std::string> parts;
  for (const Verdict v : all_verdicts())
    if (const auto n = summary.path_verdicts[static_cast<std::size_t>(v)]; n > 0)
      parts.push_back(fmt::format("{} {}", n, verdict_name(v)));
  s += fmt::format("<p>{} case{}, {} path pair{}: {}; <span class=\"badge {}\">{} regression{}</span>, exit code {}.</p>\n",
                   cmp.cases.size(), cmp.cases.size() == 1 ? "" : "s", summary.paths, summary.paths == 1 ? "" : "s",
                   parts.empty() ? "nothing to compare" : fmt::format("{}", fmt::join(parts, ", ")),
                   summary.regressions ? "fail" : "pass", summary.regressions, summary.regressions == 1 ? "" : "s",
                   code);
  std::vector<std::string> fail_on;
  for (const Verdict v : all_verdicts())
    if (cmp.options.fail_on.count(v)) fail_on.emplace_back(verdict_name(v));
  s += fmt::format("<p class=\"note\">A time changed when the change of the median is larger than both runs' measured "
                   "spread (the interquartile range of the timed repeats) and than {:g}% (--max-slowdown); the max "
                   "error grew when past {:g}% more (--max-error-growth). Fail on: {}.</p>\n",
                   100 * cmp.options.max_slowdown, 100 * cmp.options.max_error_growth, fmt::join(fail_on, ", "));
  if (!cmp.timing_differences.empty() || !cmp.notes.empty()) {
    s += "<ul class=\"messages\">\n";
    if (!cmp.timing_differences.empty())
      s += "<li class=\"warning\">timings not comparable: " + html_text(fmt::format("{}", fmt::join(cmp.timing_differences, "; ")), 4000) +
           "</li>\n";
    for (const auto& n : cmp.notes) s += "<li class=\"note\">note: " + html_text(n) + "</li>\n";
    s += "</ul>\n";
  }
  s += "<h2>Change per path</h2>\n";
  s += "<p class=\"note\">Light band: the --max-slowdown threshold; darker band: the row's measured spread (the "
       "larger IQR of the two runs, against BASE's median). Right: the max error in BASE and in NEW, in the colours of "
       "the run page's error maps (error / atol: blues within, yellow to red beyond). Hover for the numbers.</p>\n";
  s += change_chart(cmp);
  for (std::size_t i = 0; i < cmp.cases.size(); ++i) {
    const CaseComparison& c = cmp.cases[i];
    const std::string cls = verdict_class(c.verdicts, cmp.options);
    s += fmt::format("<section class=\"case\" id=\"case-{}\">\n<h2>{}", i, html_text(c.name, 400));
    for (const Verdict v : c.verdicts) s += fmt::format(" <span class=\"badge {}\">{}</span>", cls, verdict_name(v));
    s += "</h2>\n";
    if (has(c.verdicts, Verdict::Renamed)) s += "<p class=\"note\">renamed from " + html_text(c.base_name, 400) + "</p>\n";
    if (has(c.verdicts, Verdict::Changed))
      s += fmt::format("<p class=\"note\">content hash {} in BASE, {} in NEW: another case under the same name, not "
                       "compared.</p>\n",
                       html_text(c.base_hash, 40), html_text(c.new_hash, 40));
    if (!c.geometry.empty()) s += "<p class=\"geometry\">" + html_text(c.geometry) + "</p>\n";
    if (!c.base_errors.empty() || !c.new_errors.empty()) {
      s += "<ul class=\"messages\">\n";
      for (const auto& e : c.base_errors) s += "<li class=\"invalid\">invalid in BASE: " + html_text(e) + "</li>\n";
      for (const auto& e : c.new_errors) s += "<li class=\"invalid\">invalid in NEW: " + html_text(e) + "</li>\n";
      s += "</ul>\n";
    }
    if (!c.paths.empty()) s += case_table(c, cmp.options);
    s += "</section>\n";
  }
  s += "</body>\n</html>\n";
  return s;
}

}  // namespace pagecheck
