// The HTML page: well-formed, self-contained, escaped, and its heat map
// points at a planted error.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "pagecheck/metrics.hpp"
#include "pagecheck/report_html.hpp"

using namespace pagecheck;

namespace {

// Tags open and close in order (void tags self-closed), DOCTYPE skipped.
bool balanced(const std::string& page) {
  std::vector<std::string> open;
  std::size_t i = page.find('<');
  while (i != std::string::npos) {
    const std::size_t end = page.find('>', i);
    if (end == std::string::npos) return false;
    const std::string tag = page.substr(i + 1, end - i - 1);
    if (tag.rfind("!DOCTYPE", 0) != 0) {
      const std::string name = tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" /", 1) - (tag[0] == '/' ? 1 : 0));
      if (tag[0] == '/') {
        if (open.empty() || open.back() != name) return false;
        open.pop_back();
      } else if (tag.back() != '/') {
        open.push_back(name);
      }
    }
    i = page.find('<', end);
  }
  return open.empty();
}

double attr(const std::string& rect, const std::string& name) {
  const auto at = rect.find(name + "=\"");
  return std::stod(rect.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("the HTML page is well-formed, offline, escaped, and its hottest cell is the planted error") {
  Case c;
  c.query = Tensor::zeros(DType::F32, {4, 2, 4});  // sequences of 1 and 3 tokens, 2 heads, width 4
  c.query_start_loc = {0, 1, 4};
  c.seq_lens = {5, 3};
  std::vector<double> ref(32);
  for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = 0.25 + 0.01 * static_cast<double>(i);
  std::vector<float> out(ref.begin(), ref.end());
  out[27] += 0.1f;  // token 3 (sequence 1), head 0
  RunReport report;
  CaseReport cr;
  cr.name = "bad <&\"> name";
  PathReport p;
  p.path = "direct";
  p.status = PathStatus::Fail;
  p.tolerance = {1e-3, 1e-3};
  p.error = compare(c, out, ref, 4, p.tolerance, true);
  REQUIRE(p.error->map);
  cr.paths.push_back(p);
  report.cases.push_back(cr);
  const std::string page = to_html(report);
  CHECK(balanced(page));
  CHECK(page.find("bad &lt;&amp;&quot;&gt; name") != std::string::npos);
  CHECK(page.find("<&\">") == std::string::npos);
  std::size_t at = 0;
  while ((at = page.find("http", at)) != std::string::npos) {
    CHECK(page.compare(at, 26, "http://www.w3.org/2000/svg") == 0);
    ++at;
  }
  CHECK(page.find("no-roofline") != std::string::npos);
  const std::size_t svg = page.find("class=\"heat seq-head\"");
  REQUIRE(svg != std::string::npos);
  const std::string grid = page.substr(svg, page.find("</svg>", svg) - svg);
  double hottest = -1;
  std::string hottest_rect;
  for (std::size_t r = grid.find("<rect"); r != std::string::npos; r = grid.find("<rect", r + 1)) {
    const std::string rect = grid.substr(r, grid.find('>', r) - r);
    if (rect.find("data-ratio") == std::string::npos) continue;
    if (attr(rect, "data-ratio") > hottest) hottest = attr(rect, "data-ratio"), hottest_rect = rect;
  }
  CHECK(hottest > 1);
  CHECK(hottest_rect.find("data-seq=\"1\"") != std::string::npos);
  CHECK(hottest_rect.find("data-head=\"0\"") != std::string::npos);
}
