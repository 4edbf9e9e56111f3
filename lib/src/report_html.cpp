// The HTML page of a RunReport (report_html.hpp).
//
// Colour scale of the heat maps: error / tolerance on a log scale in thirds
// of a decade, blues below 1 (within tolerance), yellow to dark red from 1
// (a mismatch) up; black for a non-finite mismatch (a NaN/Inf output, which is
// what an unwritten element holding the NaN poison reads as), grey where the
// reference is not finite (not judged). Neighbouring cells of a row with the
// same colour are drawn as one rectangle, so that a large, even map stays
// small; every rectangle names the sequences, heads or tokens it covers.
#include "pagecheck/report_html.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "pagecheck/text.hpp"

namespace pagecheck {
namespace {

// ------------------------------------------------------------- text ---

// Text from a case, safe in HTML text and attributes: terminal-steering and
// invalid UTF-8 bytes written as escapes (text.hpp), then the markup escaped.
std::string html(std::string_view text, std::size_t max_bytes = 2000) { return xml_escape(printable(text, max_bytes)); }

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3g}", v);
}

// An attribute value that parsers read back (data-ratio).
std::string attr_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

std::string range(std::int64_t first, std::int64_t last) {
  return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
}

std::string location(std::int64_t seq, std::int64_t token, std::int64_t head, std::int64_t dim) {
  if (seq < 0 && token < 0) return "-";
  return fmt::format("({},{},{},{})", seq, token, head, dim);
}

// ----------------------------------------------------------- colours ---

struct Rgb {
  double r, g, b;
};

std::string hex(Rgb c) {
  const auto byte = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 255.0))); };
  return fmt::format("#{:02x}{:02x}{:02x}", byte(c.r), byte(c.g), byte(c.b));
}

Rgb mix(Rgb a, Rgb b, double t) { return {a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t}; }

// Piecewise-linear through `stops` at t in [0, 1].
template <std::size_t N>
Rgb through(const std::array<Rgb, N>& stops, double t) {
  t = std::clamp(t, 0.0, 1.0) * static_cast<double>(N - 1);
  const auto i = std::min<std::size_t>(static_cast<std::size_t>(t), N - 2);
  return mix(stops[i], stops[i + 1], t - static_cast<double>(i));
}

// Levels: thirds of a decade of error / tolerance. kLowest holds everything
// below 1e-3 (zero included), kHighest everything from 1e3 (infinity included).
constexpr int kLowest = -10, kHighest = 9;

int level_of(double ratio) {
  if (!(ratio > 0)) return kLowest;
  if (std::isinf(ratio)) return kHighest;
  const int level = static_cast<int>(std::floor(3.0 * std::log10(ratio) + 1e-9));
  return std::clamp(level, kLowest, kHighest);
}

std::string level_colour(int level) {
  static const std::array<Rgb, 3> within = {Rgb{247, 251, 255}, Rgb{158, 202, 225}, Rgb{33, 113, 181}};
  static const std::array<Rgb, 4> beyond = {Rgb{254, 227, 145}, Rgb{254, 153, 41}, Rgb{204, 76, 2}, Rgb{103, 0, 13}};
  if (level < 0) return hex(through(within, static_cast<double>(level - kLowest) / static_cast<double>(-1 - kLowest)));
  return hex(through(beyond, static_cast<double>(level) / static_cast<double>(kHighest)));
}

constexpr std::string_view kNonFiniteColour = "#000000";
constexpr std::string_view kUnjudgedColour = "#a8a8a8";
constexpr std::string_view kEmptyColour = "#ffffff";

// What one cell shows: its colour class.
struct CellLook {
  std::string state;  // "judged", "nonfinite", "unjudged", "empty"
  std::string fill;
  bool partly_unjudged = false;
  int level = kLowest;
  bool operator==(const CellLook& o) const {
    return state == o.state && partly_unjudged == o.partly_unjudged && level == o.level;
  }
};

CellLook look(float ratio, std::uint8_t flags) {
  CellLook l;
  if (flags & kCellNonFinite) {
    l.state = "nonfinite";
    l.fill = kNonFiniteColour;
  } else if (flags & kCellJudged) {
    l.state = "judged";
    l.level = level_of(ratio);
    l.fill = level_colour(l.level);
    l.partly_unjudged = (flags & kCellUnjudged) != 0;
  } else if (flags & kCellUnjudged) {
    l.state = "unjudged";
    l.fill = kUnjudgedColour;
  } else {
    l.state = "empty";
    l.fill = kEmptyColour;
  }
  return l;
}

// The legend of the heat maps, once per page.
std::string legend_svg() {
  constexpr int kStep = 22, kLeft = 10, kBarTop = 8, kBarHeight = 16;
  const int levels = kHighest - kLowest + 1;
  const int width = kLeft * 2 + levels * kStep + 360;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"legend\" width=\"{0}\" height=\"64\" viewBox=\"0 0 {0} 64\" "
      "role=\"img\" aria-label=\"colour scale: error / tolerance\">\n",
      width);
  for (int level = kLowest; level <= kHighest; ++level) {
    const int x = kLeft + (level - kLowest) * kStep;
    const double low = std::pow(10.0, level / 3.0);
    const std::string what = level == kLowest    ? "below 0.001 (zero included)"
                             : level == kHighest ? "1000 and above"
                                                 : fmt::format("{:.3g} to {:.3g}", low, std::pow(10.0, (level + 1) / 3.0));
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>error / tolerance {}</title></rect>\n",
                     x, kBarTop, kStep, kBarHeight, level_colour(level), what);
  }
  // Ticks at the decades; the tolerance (1) marked.
  for (int decade = -3; decade <= 3; ++decade) {
    const int x = kLeft + (3 * decade - kLowest) * kStep;
    const std::string label = decade == 0 ? "1 = tolerance" : fmt::format("{:g}", std::pow(10.0, decade));
    s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333\" stroke-width=\"{3}\"/>\n", x,
                     kBarTop - 3, kBarTop + kBarHeight + 4, decade == 0 ? 2 : 1);
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>\n", x,
                     kBarTop + kBarHeight + 16, label);
  }
  int x = kLeft + levels * kStep + 16;
  const auto swatch = [&](std::string_view fill, std::string_view label) {
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"{}\" stroke=\"#777\"/>\n", x, kBarTop + 1,
                     fill);
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", x + 18, kBarTop + 12, label);
    x += 18 + static_cast<int>(label.size()) * 6 + 14;
  };
  swatch(kNonFiniteColour, "NaN/Inf output");
  swatch(kUnjudgedColour, "reference not finite");
  // Two lines: one did not fit the 360 units beside the bar (cut off in a
  // chromium screenshot of the page).
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">NaN/Inf includes unwritten elements (the NaN "
                   "poison);</text>\n<text x=\"{}\" y=\"{}\" font-size=\"11\">dashed border: partly not "
                   "judged</text>\n",
                   kLeft + levels * kStep + 16, kBarTop + kBarHeight + 16, kLeft + levels * kStep + 16,
                   kBarTop + kBarHeight + 30);
  s += "</svg>\n";
  return s;
}

// --------------------------------------------------------- heat maps ---

// Tick every `step` bins so that at most `max_labels` labels show.
std::int64_t tick_step(std::int64_t bins, std::int64_t max_labels) {
  return std::max<std::int64_t>(1, (bins + max_labels - 1) / max_labels);
}

struct GridLabels {
  std::string kind;       // "seq-head" or "token": the svg's class
  std::string row_name;   // "sequence"
  std::string col_name;   // "head"
  std::string row_attr;   // data-seq
  std::string col_attr;   // data-head
};

// One grid as an SVG heat map. Each rectangle carries the items it covers
// (data-<row>/data-<col>: "first-last"), its largest ratio (data-ratio) and
// its state (data-state), and a tooltip saying the same.
std::string heat_map_svg(const ErrorGrid& grid, const GridLabels& labels, bool strip) {
  const std::int64_t rows = grid.rows.bins(), cols = grid.cols.bins();
  const int cell_w = static_cast<int>(std::clamp<std::int64_t>(720 / std::max<std::int64_t>(cols, 1), strip ? 2 : 3, 28));
  const int cell_h = strip ? 22 : static_cast<int>(std::clamp<std::int64_t>(480 / std::max<std::int64_t>(rows, 1), 3, 20));
  const int left = strip ? 12 : 64, top = 8, bottom = 40, right = 12;
  const int width = left + static_cast<int>(cols) * cell_w + right;
  const int height = top + static_cast<int>(rows) * cell_h + bottom;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heat {0}\" width=\"{1}\" height=\"{2}\" viewBox=\"0 0 {1} {2}\" "
      "role=\"img\" aria-label=\"error / tolerance per {3}{4}\">\n",
      labels.kind, width, height, strip ? "" : labels.row_name + " and ", labels.col_name);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t c = 0;
    while (c < cols) {
      const CellLook first = look(grid.ratio[grid.index(r, c)], grid.flags[grid.index(r, c)]);
      float run_max = grid.ratio[grid.index(r, c)];
      std::int64_t end = c + 1;
      while (end < cols && look(grid.ratio[grid.index(r, end)], grid.flags[grid.index(r, end)]) == first) {
        run_max = std::max(run_max, grid.ratio[grid.index(r, end)]);
        ++end;
      }
      const std::string row_items = range(grid.rows.first(r), grid.rows.last(r));
      const std::string col_items = range(grid.cols.first(c), grid.cols.last(end - 1));
      std::string what;
      if (first.state == "nonfinite") what = "a NaN/Inf mismatch (unwritten, or computed)";
      else if (first.state == "unjudged") what = "not judged: the reference is not finite";
      else if (first.state == "empty") what = "no elements";
      else what = fmt::format("max error / tolerance {}{}", num(run_max), first.partly_unjudged ? "; partly not judged (reference not finite)" : "");
      const std::string where = strip ? fmt::format("{} {}", labels.col_name, col_items)
                                      : fmt::format("{} {}, {} {}", labels.row_name, row_items, labels.col_name, col_items);
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{} data-{}=\"{}\" data-{}=\"{}\" "
          "data-ratio=\"{}\" data-state=\"{}\"><title>{}: {}</title></rect>\n",
          left + c * cell_w, top + r * cell_h, (end - c) * cell_w, cell_h, first.fill,
          first.partly_unjudged ? " class=\"partial\"" : "", labels.row_attr, row_items, labels.col_attr, col_items,
          first.state == "judged" ? attr_number(run_max) : first.state == "nonfinite" ? "inf" : "0", first.state, where,
          what);
      c = end;
    }
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#555\"/>\n", left, top,
                   cols * cell_w, rows * cell_h);
  // Axis ticks: the first item of every few bins.
  const std::int64_t col_step = tick_step(cols, std::max<std::int64_t>(1, cols * cell_w / 48));
  for (std::int64_t c = 0; c < cols; c += col_step)
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>\n",
                     left + c * cell_w + cell_w / 2, top + rows * cell_h + 12, grid.cols.first(c));
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}{}</text>\n",
                   left + cols * cell_w / 2, top + rows * cell_h + 30, labels.col_name,
                   grid.cols.per_bin > 1 ? fmt::format(" ({} per cell)", grid.cols.per_bin) : "");
  if (!strip) {
    const std::int64_t row_step = tick_step(rows, std::max<std::int64_t>(1, rows * cell_h / 14));
    for (std::int64_t r = 0; r < rows; r += row_step)
      s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text>\n", left - 4,
                       top + r * cell_h + cell_h / 2 + 4, grid.rows.first(r));
    s += fmt::format("<text x=\"12\" y=\"{0}\" font-size=\"11\" text-anchor=\"middle\" transform=\"rotate(-90 12 {0})\">{1}{2}</text>\n",
                     top + rows * cell_h / 2, labels.row_name,
                     grid.rows.per_bin > 1 ? fmt::format(" ({} per cell)", grid.rows.per_bin) : "");
  }
  s += "</svg>\n";
  return s;
}

std::string worst_table(const std::vector<WorstElement>& worst) {
  if (worst.empty()) return "<p class=\"note\">No element differs.</p>\n";
  std::string s =
      "<table class=\"worst\">\n<tr><th>#</th><th>seq</th><th>token</th><th>head</th><th>dim</th><th>value</th>"
      "<th>reference</th><th>|error|</th><th>error / tolerance</th></tr>\n";
  for (std::size_t i = 0; i < worst.size(); ++i) {
    const WorstElement& w = worst[i];
    s += fmt::format(
        "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        w.ratio > 1 ? " class=\"beyond\"" : "", i + 1, w.seq, w.token, w.head, w.dim, num(w.value), num(w.reference),
        num(w.abs_err), num(w.ratio));
  }
  s += "</table>\n";
  return s;
}

std::string tolerance_text(const Tolerance& t) {
  std::string s = fmt::format("atol {:g}", t.atol);
  s += row_scaling_text(t);
  return s + fmt::format(" + rtol {:g}·|ref|", t.rtol);
}

// `tolerance`: the one the comparison used, where the report holds it.
std::string comparison_section(std::string_view title, const ErrorStats& e, const std::optional<Tolerance>& tolerance) {
  std::string s = fmt::format("<h4>{}</h4>\n", title);
  s += fmt::format("<p>{} of {} elements beyond {}; max |error| {}, relative L2 {}, {} NaN/Inf{}.</p>\n", e.mismatches,
                   e.elements, tolerance ? tolerance_text(*tolerance) : std::string("the tolerance of the recorded output"), num(e.max_abs_err), num(e.rel_l2_err), e.nonfinite,
                   e.unjudged > 0 ? fmt::format(", {} not judged (reference not finite)", e.unjudged) : "");
  if (!e.map) {
    s += "<p class=\"note\">No error map was kept for this comparison.</p>\n";
    return s;
  }
  const ErrorMap& m = *e.map;
  s += "<div class=\"maps\">\n";
  if (!m.by_seq_head.empty()) {
    s += "<figure>\n";
    s += heat_map_svg(m.by_seq_head, {"seq-head", "sequence", "query head", "seq", "head"}, false);
    s += "<figcaption>max error / tolerance per (sequence, query head)</figcaption>\n</figure>\n";
  }
  if (!m.by_token.empty()) {
    s += "<figure>\n";
    s += heat_map_svg(m.by_token, {"token", "row", "query token", "row", "token"}, true);
    s += "<figcaption>max error / tolerance per query token (all heads; tokens in the case's order, sequence after "
         "sequence)</figcaption>\n</figure>\n";
  }
  s += "</div>\n";
  s += worst_table(m.worst);
  return s;
}

// ---------------------------------------------------------- roofline ---

struct RooflinePoint {
  std::string label;  // "case / path / stage", escaped
  std::string path;
  double intensity;   // FLOP / byte
  double flop_per_s;
  double gb_per_s;
};

std::vector<RooflinePoint> roofline_points(const RunReport& report) {
  std::vector<RooflinePoint> points;
  for (const auto& c : report.cases)
    for (const auto& p : c.paths)
      for (const auto& t : p.timings) {
        if (!(t.median_ms > 0) || !(t.bytes > 0) || !(t.flops > 0)) continue;  // the reference: no byte/FLOP model
        const double seconds = t.median_ms * 1e-3;
        points.push_back({html(c.name, 200) + " / " + html(p.path, 100) + " / " + html(t.stage, 100), p.path,
                          t.flops / t.bytes, t.flops / seconds, t.bytes / seconds / 1e9});
      }
  return points;
}

const std::array<std::string_view, 8> kPathColours = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                                      "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

std::string roofline_section(const RunReport& report) {
  std::string s = "<section id=\"roofline\">\n<h2>Throughput against the device's ceilings</h2>\n";
  const auto points = roofline_points(report);
  if (report.device) {
    const DeviceInfo& d = *report.device;
    s += fmt::format("<p>Device {}: {} ({} SMs). Measured at start-up: read {} GB/s, copy {} GB/s, BF16 matrix {} TFLOP/s"
                     "{}.</p>\n",
                     d.device_index, html(d.name, 200), d.multiprocessors, num(d.read_gb_per_s), num(d.copy_gb_per_s),
                     num(d.matmul_tflop_per_s),
                     d.read_gb_per_s > 0 || d.copy_gb_per_s > 0 || d.matmul_tflop_per_s > 0
                         ? ""
                         : " (not measured: the ceilings are measured only when the run times its paths)");
    if (!d.matmul_unavailable.empty())
      s += "<p class=\"note\">BF16 matrix ceiling unavailable: " + html(d.matmul_unavailable, 400) + "</p>\n";
  }
  if (points.empty()) {
    s += "<p class=\"note\" id=\"no-roofline\">No GPU timings in this run, so there is no roofline: ";
    s += report.device ? "no GPU path was timed (--no-timing, or every GPU path was skipped, n/a or failed to run)."
                       : "no CUDA device was used (a build without CUDA, no GPU present, or only the reference "
                         "selected). The reference's time is CPU wall time, without a byte or FLOP model.";
    s += "</p>\n</section>\n";
    return s;
  }
  const double read_bw = report.device ? report.device->read_gb_per_s * 1e9 : 0;
  const double copy_bw = report.device ? report.device->copy_gb_per_s * 1e9 : 0;
  const double peak = report.device ? report.device->matmul_tflop_per_s * 1e12 : 0;

  // Log-log axes over the points and the ridge points, whole decades.
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = 0, y_lo = x_lo, y_hi = 0;
  for (const auto& p : points) {
    x_lo = std::min(x_lo, p.intensity), x_hi = std::max(x_hi, p.intensity);
    y_lo = std::min(y_lo, p.flop_per_s), y_hi = std::max(y_hi, p.flop_per_s);
  }
  for (double bw : {read_bw, copy_bw})
    if (bw > 0 && peak > 0) x_hi = std::max(x_hi, peak / bw), x_lo = std::min(x_lo, peak / bw);
  if (peak > 0) y_hi = std::max(y_hi, peak);
  const double dx_lo = std::floor(std::log10(x_lo)) - (std::log10(x_lo) - std::floor(std::log10(x_lo)) < 0.3 ? 1 : 0);
  const double dx_hi = std::ceil(std::log10(x_hi) + 0.3);
  const double dy_lo = std::floor(std::log10(y_lo)) - (std::log10(y_lo) - std::floor(std::log10(y_lo)) < 0.3 ? 1 : 0);
  const double dy_hi = std::ceil(std::log10(y_hi) + 0.3);
  constexpr int kLeft = 70, kTop = 16, kPlotW = 640, kPlotH = 380, kBottom = 48, kLegendW = 230;
  const auto px = [&](double x) { return kLeft + (std::log10(x) - dx_lo) / (dx_hi - dx_lo) * kPlotW; };
  const auto py = [&](double y) { return kTop + kPlotH - (std::log10(y) - dy_lo) / (dy_hi - dy_lo) * kPlotH; };
  const int width = kLeft + kPlotW + 16 + kLegendW, height = kTop + kPlotH + kBottom;

  s += fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"roofline\" width=\"{0}\" height=\"{1}\" "
                   "viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"roofline\">\n",
                   width, height);
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fcfcfc\" stroke=\"#555\"/>\n", kLeft, kTop,
                   kPlotW, kPlotH);
  for (double d = dx_lo; d <= dx_hi + 1e-9; d += 1) {
    const double x = px(std::pow(10.0, d));
    s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e3e3e3\"/>\n", x, kTop,
                     kTop + kPlotH);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{:g}</text>\n", x,
                     kTop + kPlotH + 14, std::pow(10.0, d));
  }
  for (double d = dy_lo; d <= dy_hi + 1e-9; d += 1) {
    const double y = py(std::pow(10.0, d));
    s += fmt::format("<line x1=\"{1}\" y1=\"{0:.1f}\" x2=\"{2}\" y2=\"{0:.1f}\" stroke=\"#e3e3e3\"/>\n", y, kLeft,
                     kLeft + kPlotW);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\">{:g}</text>\n", kLeft - 4, y + 3,
                     std::pow(10.0, d - 12));
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte)</text>\n",
                   kLeft + kPlotW / 2, kTop + kPlotH + 34);
  s += fmt::format("<text x=\"14\" y=\"{0}\" font-size=\"11\" text-anchor=\"middle\" transform=\"rotate(-90 14 {0})\">"
                   "TFLOP/s</text>\n",
                   kTop + kPlotH / 2);
  s += fmt::format("<clipPath id=\"roofline-plot\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath>\n",
                   kLeft, kTop, kPlotW, kPlotH);
  s += "<g clip-path=\"url(#roofline-plot)\">\n";
  // A bandwidth ceiling: FLOP/s = intensity x bytes/s, up to the matrix peak.
  const double x_min = std::pow(10.0, dx_lo), x_max = std::pow(10.0, dx_hi);
  // The read and copy ceilings lie a few percent apart: one label above its
  // line, the other below, or they print over each other.
  const auto ceiling = [&](double bw, std::string_view dash, std::string_view label, bool label_below) {
    if (!(bw > 0)) return;
    const double ridge = peak > 0 ? peak / bw : x_max;
    const double x_end = std::min(ridge, x_max);
    s += fmt::format("<polyline points=\"{:.1f},{:.1f} {:.1f},{:.1f}\" fill=\"none\" stroke=\"#444\" stroke-width=\"1.5\"{}>"
                     "<title>{}</title></polyline>\n",
                     px(x_min), py(x_min * bw), px(x_end), py(x_end * bw),
                     dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", dash), label);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#444\">{}</text>\n", px(x_min) + 4,
                     py(x_min * bw) + (label_below ? 12 : -4), label);
  };
  ceiling(read_bw, "", fmt::format("read {} GB/s", num(read_bw / 1e9)), false);
  ceiling(copy_bw, "5 3", fmt::format("copy {} GB/s", num(copy_bw / 1e9)), true);
  if (peak > 0) {
    const double ridge = read_bw > 0 ? peak / read_bw : x_min;
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#444\" stroke-width=\"1.5\">"
                     "<title>BF16 matrix {} TFLOP/s</title></line>\n",
                     px(std::max(ridge, x_min)), py(peak), px(x_max), py(peak), num(peak / 1e12));
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#444\" text-anchor=\"end\">BF16 matrix {} "
                     "TFLOP/s</text>\n",
                     px(x_max) - 4, py(peak) - 4, num(peak / 1e12));
  }
  std::vector<std::string> path_order;
  for (const auto& p : points)
    if (std::find(path_order.begin(), path_order.end(), p.path) == path_order.end()) path_order.push_back(p.path);
  const auto colour = [&](const std::string& path) {
    const auto i = static_cast<std::size_t>(std::find(path_order.begin(), path_order.end(), path) - path_order.begin());
    return kPathColours[i % kPathColours.size()];
  };
  for (const auto& p : points) {
    std::string share;
    if (read_bw > 0) share += fmt::format(", {:.0f}% of read", 100.0 * p.gb_per_s * 1e9 / read_bw);
    if (copy_bw > 0) share += fmt::format(", {:.0f}% of copy", 100.0 * p.gb_per_s * 1e9 / copy_bw);
    if (peak > 0) share += fmt::format(", {:.0f}% of BF16 matrix", 100.0 * p.flop_per_s / peak);
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" fill-opacity=\"0.8\" stroke=\"#222\" "
                     "stroke-width=\"0.5\"><title>{}: {} FLOP/byte, {} TFLOP/s, {} GB/s{}</title></circle>\n",
                     px(p.intensity), py(p.flop_per_s), colour(p.path), p.label, num(p.intensity),
                     num(p.flop_per_s / 1e12), num(p.gb_per_s), share);
  }
  s += "</g>\n";
  int y = kTop + 12;
  for (const auto& path : path_order) {
    s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"/>\n", kLeft + kPlotW + 24, y - 4, colour(path));
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", kLeft + kPlotW + 34, y, html(path, 60));
    y += 16;
  }
  if (!(read_bw > 0) && !(copy_bw > 0) && !(peak > 0))
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">no ceilings measured</text>\n", kLeft + kPlotW + 24, y + 8);
  s += "</svg>\n";
  s += fmt::format("<p class=\"note\">{} timed stage{}: each point is one path's stage on one case (its byte and FLOP "
                   "model over its median time); hover for the numbers. Lines: the read-only stream (decode's bound), "
                   "the device-to-device copy (dashed) and the BF16 cuBLAS product, as measured at start-up.</p>\n",
                   points.size(), points.size() == 1 ? "" : "s");
  s += "</section>\n";
  return s;
}

// ------------------------------------------------------------- cases ---

std::string status_cell(PathStatus status) {
  const std::string_view name = status_name(status);
  const std::string_view cls = status == PathStatus::NotApplicable ? std::string_view("na") : name;
  return fmt::format("<td class=\"status {}\">{}</td>", cls, name);
}

std::string case_status(const CaseReport& c, bool fail_on_skip) {
  if (!c.errors.empty()) return "invalid";
  for (const auto& p : c.paths)
    if (p.status == PathStatus::Error) return "error";
  for (const auto& p : c.paths)
    if (path_fails_run(p, fail_on_skip)) return "fail";
  return "pass";
}

std::string path_table(const CaseReport& c, const std::optional<DeviceInfo>& device) {
  std::string s =
      "<table class=\"paths\">\n<tr><th>path</th><th>status</th><th>max |error|</th><th>rel L2</th><th>mismatches</th>"
      "<th>NaN/Inf</th><th>unwritten</th><th>worst (s,t,h,d)</th><th>vs recorded</th><th>median ms</th>"
      "<th>GB/s</th><th>TFLOP/s</th><th>plan</th><th>reason</th></tr>\n";
  for (const auto& p : c.paths) {
    s += "<tr><td>" + html(p.path, 100) + "</td>" + status_cell(p.status);
    if (p.error) {
      const auto& e = *p.error;
      s += fmt::format("<td>{}</td><td>{}</td><td>{}</td><td>{}</td>", num(e.max_abs_err), num(e.rel_l2_err),
                       e.mismatches, e.nonfinite);
    } else {
      s += "<td>-</td><td>-</td><td>-</td><td>-</td>";
    }
    s += fmt::format("<td>{}</td>", p.unwritten);
    s += fmt::format("<td>{}</td>",
                     p.error ? location(p.error->worst.seq, p.error->worst.token, p.error->worst.head, p.error->worst.dim)
                             : std::string("-"));
    s += p.recorded ? fmt::format("<td>{} ({} mismatches)</td>", num(p.recorded->max_abs_err), p.recorded->mismatches)
                    : std::string("<td>-</td>");
    if (const StageTiming* t = headline_timing(p)) {
      const double gbs = gb_per_s(*t), tf = tflop_per_s(*t);
      std::string gb = gbs > 0 ? num(gbs) : "-";
      if (gbs > 0 && device && device->read_gb_per_s > 0)
        gb += fmt::format(" ({:.0f}% read)", 100.0 * gbs / device->read_gb_per_s);
      std::string tflop = tf > 0 ? num(tf) : "-";
      if (tf > 0 && device && device->matmul_tflop_per_s > 0)
        tflop += fmt::format(" ({:.0f}% mma)", 100.0 * tf / device->matmul_tflop_per_s);
      s += fmt::format("<td>{:.3f}</td><td>{}</td><td>{}</td>", t->median_ms, gb, tflop);
    } else {
      s += "<td>-</td><td>-</td><td>-</td>";
    }
    std::string reason = html(p.reason);
    for (const auto& f : p.check_failures)
      if (f != p.reason) reason += (reason.empty() ? "" : "<br/>") + std::string("check failed: ") + html(f);
    s += "<td>" + html(p.plan, 200) + "</td><td class=\"reason\">" + reason + "</td></tr>\n";
  }
  s += "</table>\n";
  return s;
}

std::string case_section(const CaseReport& c, std::size_t index, const RunReport& report) {
  const std::string status = case_status(c, report.fail_on_skip);
  std::string s = fmt::format("<section class=\"case {}\" id=\"case-{}\">\n", status, index);
  s += fmt::format("<h2>{} <span class=\"badge {}\">{}</span></h2>\n", html(c.name, 400), status, status);
  if (!c.description.empty()) s += "<p class=\"description\">" + html(c.description) + "</p>\n";
  if (!c.geometry.empty()) s += "<p class=\"geometry\">" + html(c.geometry) + "</p>\n";
  if (!c.warnings.empty() || !c.errors.empty()) {
    s += "<ul class=\"messages\">\n";
    for (const auto& w : c.warnings) s += "<li class=\"warning\">warning: " + html(w) + "</li>\n";
    for (const auto& e : c.errors) s += "<li class=\"invalid\">invalid: " + html(e) + "</li>\n";
    s += "</ul>\n";
  }
  if (c.paths.empty()) return s + "</section>\n";
  s += path_table(c, report.device);
  for (const auto& p : c.paths) {
    const bool any = p.error || p.recorded || p.lse_error || p.recorded_lse;
    if (!any) continue;
    s += fmt::format("<div class=\"path\">\n<h3>{} <span class=\"badge {}\">{}</span></h3>\n", html(p.path, 100),
                     p.status == PathStatus::NotApplicable ? std::string_view("na") : status_name(p.status),
                     status_name(p.status));
    if (p.error) s += comparison_section("output against the reference", *p.error, p.tolerance);
    // The reference row's tolerance is the recorded comparison's; a GPU
    // path's is its own against the reference.
    if (p.recorded)
      s += comparison_section(p.path == "reference" ? "the case's recorded output against the reference"
                                                    : "the case's recorded output against this path's output",
                              *p.recorded, p.path == "reference" ? std::optional<Tolerance>(p.tolerance) : std::nullopt);
    const std::array<std::pair<const char*, const std::optional<ErrorStats>*>, 2> lse = {
        {{"LSE against the reference", &p.lse_error}, {"recorded LSE against this path's LSE", &p.recorded_lse}}};
    for (const auto& [label, stats] : lse) {
      if (!*stats) continue;
      const ErrorStats& e = **stats;
      s += fmt::format("<p>{}: max |error| {}, relative L2 {}, {} of {} mismatches; worst at {}.</p>\n", label,
                       num(e.max_abs_err), num(e.rel_l2_err), e.mismatches, e.elements,
                       location(e.worst.seq, e.worst.token, e.worst.head, e.worst.dim));
    }
    s += "</div>\n";
  }
  s += "</section>\n";
  return s;
}

constexpr std::string_view kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05em; margin-bottom: 0.3em; }
h4 { font-size: 0.95em; margin: 0.8em 0 0.2em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.4em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.reason { max-width: 40em; }
.status.pass, .badge.pass { color: #1a7f37; }
.status.fail, .badge.fail, .badge.invalid, li.invalid { color: #c62828; font-weight: bold; }
.status.error, .badge.error { color: #8e24aa; font-weight: bold; }
.status.skipped { color: #a66f00; }
.status.na { color: #777; }
.badge { font-size: 0.75em; border: 1px solid currentColor; border-radius: 3px; padding: 0 4px; vertical-align: middle; }
tr.beyond td { background: #fff1e6; }
.note { color: #555; font-size: 0.9em; }
.geometry, .description, .command { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.85em; }
.maps { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
figure { margin: 0; }
figcaption { font-size: 0.8em; color: #555; }
rect.partial { stroke: #555; stroke-width: 1; stroke-dasharray: 2 1; }
svg text { font-family: system-ui, Helvetica, Arial, sans-serif; }
)";

}  // namespace

std::string to_html(const RunReport& report) {
  const RunSummary summary = summarize(report);
  const int code = report_exit_code(report);
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  s += "<meta name=\"generator\" content=\"pagecheck " + html(report.tool_version, 100) + "\"/>\n";
  s += "<title>pagecheck report</title>\n<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n";
  s += fmt::format("<h1>pagecheck report</h1>\n<p class=\"command\">{}</p>\n", html(report.command_line, 4000));
  s += fmt::format("<p>pagecheck {}; {} case{}{}, {} path runs: {} pass, {} fail, {} error, {} skipped, {} n/a; "
                   "exit code {}{}.</p>\n",
                   html(report.tool_version, 100), summary.cases, summary.cases == 1 ? "" : "s",
                   summary.invalid_cases ? fmt::format(" ({} invalid)", summary.invalid_cases) : "", summary.paths,
                   summary.pass, summary.fail, summary.error, summary.skipped, summary.not_applicable, code,
                   report.fail_on_skip ? " (--fail-on-skip: skipped and n/a paths fail the run)" : "");
  if (!report.errors.empty()) {
    s += "<ul class=\"messages\">\n";
    for (const auto& e : report.errors) s += "<li class=\"invalid\">not run: " + html(e) + "</li>\n";
    s += "</ul>\n";
  }
  if (!report.cases.empty()) {
    s += "<nav>\n<table class=\"index\">\n<tr><th>case</th><th>status</th><th>geometry</th></tr>\n";
    for (std::size_t i = 0; i < report.cases.size(); ++i) {
      const CaseReport& c = report.cases[i];
      const std::string status = case_status(c, report.fail_on_skip);
      s += fmt::format("<tr><td><a href=\"#case-{}\">{}</a></td><td class=\"status {}\">{}</td><td>{}</td></tr>\n", i,
                       html(c.name, 200), status, status, html(c.geometry, 400));
    }
    s += "</table>\n</nav>\n";
  }
  s += "<h2>Colour scale of the error maps</h2>\n<p class=\"note\">Each cell is the largest |output - reference| / "
       "(atol + rtol·|reference|) of the elements it covers, the row-scaled tolerance the path is judged with: above 1 "
       "is a mismatch.</p>\n";
  s += legend_svg();
  s += roofline_section(report);
  for (std::size_t i = 0; i < report.cases.size(); ++i) s += case_section(report.cases[i], i, report);
  s += "</body>\n</html>\n";
  return s;
}

std::string_view html_page_style() { return kStyle; }

std::string html_text(std::string_view text, std::size_t max_bytes) { return html(text, max_bytes); }

std::string error_ratio_colour(double ratio) {
  if (std::isnan(ratio) || (std::isinf(ratio) && ratio > 0)) return std::string(kNonFiniteColour);
  return level_colour(level_of(ratio));
}

Status write_html(const std::string& path, const RunReport& report) {
  return write_report_text(path, to_html(report), "HTML");
}

}  // namespace pagecheck
