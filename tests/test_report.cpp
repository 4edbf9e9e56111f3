// Report: exit codes, JSON fields, CSV rows, JUnit XML.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

#include "pagecheck/report.hpp"
#include "pagecheck/report_read.hpp"

using namespace pagecheck;

namespace {

PathReport path(std::string name, PathStatus status, std::string reason = {}) {
  PathReport p;
  p.path = std::move(name);
  p.status = status;
  p.reason = std::move(reason);
  p.tolerance = {1e-2, 1e-2};
  return p;
}

ErrorStats stats(double max_abs, double rel_l2, std::int64_t mismatches) {
  ErrorStats e;
  e.max_abs_err = max_abs;
  e.max_rel_err = max_abs * 2;
  e.rel_l2_err = rel_l2;
  e.mismatches = mismatches;
  e.elements = 1024;
  e.worst = {1, 2, 3, 4};
  e.worst_value = 0.5;
  e.worst_reference = 0.25;
  return e;
}

RunReport one_case(std::vector<PathReport> paths) {
  RunReport r;
  r.tool_version = "0.1.0";
  r.command_line = "pagecheck run";
  CaseReport c;
  c.name = "case-a";
  c.geometry = "4 seqs";
  c.paths = std::move(paths);
  r.cases.push_back(std::move(c));
  return r;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Splits one CSV line, honouring quotes.
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        cells.back() += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      cells.emplace_back();
    } else {
      cells.back() += ch;
    }
  }
  return cells;
}

// A minimal well-formedness check: tags nest, attribute values are quoted,
// no raw '<' or '&' outside markup and entities.
bool xml_well_formed(const std::string& xml, std::string& why) {
  std::vector<std::string> stack;
  std::size_t i = 0;
  if (xml.rfind("<?xml", 0) == 0) i = xml.find("?>") + 2;
  while (i < xml.size()) {
    if (xml[i] == '<') {
      const std::size_t end = xml.find('>', i);
      if (end == std::string::npos) return why = "unterminated tag", false;
      std::string tag = xml.substr(i + 1, end - i - 1);
      // Quotes in the tag must pair, and '<' must not appear inside.
      if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return why = "odd quotes in <" + tag + ">", false;
      if (tag.find('<') != std::string::npos) return why = "'<' inside a tag", false;
      if (tag.front() == '/') {
        const std::string name = tag.substr(1);
        if (stack.empty() || stack.back() != name) return why = "mismatched </" + name + ">", false;
        stack.pop_back();
      } else if (tag.back() != '/') {
        stack.push_back(tag.substr(0, tag.find_first_of(" \t\n")));
      }
      i = end + 1;
    } else if (xml[i] == '&') {
      const std::size_t semi = xml.find(';', i);
      const std::string entity = xml.substr(i, semi - i + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" && entity != "&apos;")
        return why = "bad entity " + entity, false;
      i = semi + 1;
    } else if (xml[i] == '>') {
      return why = "raw '>' in text", false;
    } else {
      ++i;
    }
  }
  if (!stack.empty()) return why = "unclosed <" + stack.back() + ">", false;
  return true;
}

}  // namespace

TEST_CASE("status names") {
  CHECK(status_name(PathStatus::Pass) == "pass");
  CHECK(status_name(PathStatus::Fail) == "fail");
  CHECK(status_name(PathStatus::Skipped) == "skipped");
  CHECK(status_name(PathStatus::NotApplicable) == "n/a");
  CHECK(status_name(PathStatus::Error) == "error");
}

TEST_CASE("exit code: the most severe outcome wins; skipped and n/a never fail") {
  CHECK(report_exit_code(RunReport{}) == 0);
  CHECK(report_exit_code(one_case({path("reference", PathStatus::Pass)})) == 0);
  CHECK(report_exit_code(one_case({path("reference", PathStatus::Pass), path("direct", PathStatus::Skipped, "no CUDA device"),
                                   path("fmha", PathStatus::NotApplicable, "head_dim 64")})) == 0);
  CHECK(report_exit_code(one_case({path("reference", PathStatus::Pass), path("direct", PathStatus::Fail)})) == 1);
  CHECK(report_exit_code(one_case({path("direct", PathStatus::Fail), path("split", PathStatus::Error)})) == 4);
  CHECK(report_exit_code(one_case({path("split", PathStatus::Error), path("direct", PathStatus::Fail)})) == 4);

  RunReport invalid = one_case({path("direct", PathStatus::Fail)});
  CaseReport bad;
  bad.name = "bad";
  bad.errors = {"block_table[0][1] = 99 but the cache has 8 blocks"};
  invalid.cases.push_back(bad);
  CHECK(report_exit_code(invalid) == 3);
  invalid.cases.front().paths.push_back(path("split", PathStatus::Error));
  CHECK(report_exit_code(invalid) == 4);
}

TEST_CASE("summary counts every status") {
  auto r = one_case({path("reference", PathStatus::Pass), path("direct", PathStatus::Fail),
                     path("split", PathStatus::Skipped), path("fmha", PathStatus::NotApplicable),
                     path("prefill", PathStatus::Error)});
  const RunSummary s = summarize(r);
  CHECK(s.cases == 1);
  CHECK(s.paths == 5);
  CHECK(s.pass == 1);
  CHECK(s.fail == 1);
  CHECK(s.skipped == 1);
  CHECK(s.not_applicable == 1);
  CHECK(s.error == 1);
}

TEST_CASE("JSON carries the required fields") {
  PathReport ref = path("reference", PathStatus::Pass);
  ref.recorded = stats(1e-7, 2e-8, 0);
  PathReport direct = path("direct", PathStatus::Fail, "3 elements beyond tolerance");
  direct.error = stats(0.5, 0.1, 3);
  direct.lse_error = stats(1e-3, 1e-4, 0);
  direct.unwritten = 7;
  direct.plan = "split:512:2048 (explicit)";
  direct.check_failures = {"not bitwise repeatable: 12 elements differ"};
  StageTiming t;
  t.stage = "total";
  t.median_ms = 2.0;
  t.min_ms = 1.5;
  t.max_ms = 3.0;
  t.repeats = 20;
  t.bytes = 4e9;
  t.flops = 2e9;
  direct.timings.push_back(t);
  RunReport r = one_case({ref, direct, path("fmha", PathStatus::NotApplicable, "head_dim 64 is not built")});
  r.device = DeviceInfo{"Test GPU", 0, 132, 4000, 800, 5000};

  const nlohmann::json j = to_json(r);
  CHECK(j["tool"] == "pagecheck");
  CHECK(j["version"] == "0.1.0");
  CHECK(j["command"] == "pagecheck run");
  CHECK(j["exit_code"] == 1);
  CHECK(j["summary"]["fail"] == 1);
  CHECK(j["device"]["name"] == "Test GPU");
  REQUIRE(j["cases"].size() == 1);
  const auto& c = j["cases"][0];
  CHECK(c["name"] == "case-a");
  CHECK(c["geometry"] == "4 seqs");
  REQUIRE(c["paths"].size() == 3);

  const auto& jr = c["paths"][0];
  CHECK(jr["path"] == "reference");
  CHECK(jr["status"] == "pass");
  CHECK(jr["max_abs_err"].is_null());  // the reference is not compared with itself
  CHECK(jr["recorded"]["rel_l2_err"].get<double>() == doctest::Approx(2e-8));
  CHECK(jr["recorded"]["max_abs_err"].get<double>() == doctest::Approx(1e-7));

  const auto& jd = c["paths"][1];
  CHECK(jd["status"] == "fail");
  CHECK(jd["reason"] == "3 elements beyond tolerance");
  CHECK(jd["max_abs_err"].get<double>() == doctest::Approx(0.5));
  CHECK(jd["max_rel_err"].get<double>() == doctest::Approx(1.0));
  CHECK(jd["rel_l2_err"].get<double>() == doctest::Approx(0.1));
  CHECK(jd["mismatches"] == 3);
  CHECK(jd["unwritten"] == 7);
  CHECK(jd["worst"]["seq"] == 1);
  CHECK(jd["worst"]["token"] == 2);
  CHECK(jd["worst"]["head"] == 3);
  CHECK(jd["worst"]["dim"] == 4);
  CHECK(jd["worst"]["value"].get<double>() == doctest::Approx(0.5));
  CHECK(jd["lse"]["max_abs_err"].get<double>() == doctest::Approx(1e-3));
  CHECK_FALSE(jd.contains("recorded"));
  CHECK(jd["plan"] == "split:512:2048 (explicit)");
  CHECK(jd["checks"]["passed"] == false);
  CHECK(jd["checks"]["failures"][0] == "not bitwise repeatable: 12 elements differ");
  REQUIRE(jd["timings"].size() == 1);
  CHECK(jd["timings"][0]["median_ms"].get<double>() == doctest::Approx(2.0));
  CHECK(jd["timings"][0]["gb_per_s"].get<double>() == doctest::Approx(2000.0));
  CHECK(jd["timings"][0]["copy_ceiling_pct"].get<double>() == doctest::Approx(50.0));
  CHECK(jd["timings"][0]["read_ceiling_pct"].get<double>() == doctest::Approx(40.0));
  CHECK(jd["timings"][0]["tflop_per_s"].get<double>() == doctest::Approx(1.0));

  CHECK(c["paths"][2]["status"] == "n/a");
  CHECK(c["paths"][2]["reason"] == "head_dim 64 is not built");
}

TEST_CASE("a recorded LSE without a recorded output is reported in JSON and JUnit") {
  PathReport ref = path("reference", PathStatus::Fail, "recorded lse disagrees");
  ref.recorded_lse = stats(0.25, 0.01, 5);
  const RunReport r = one_case({ref});
  const nlohmann::json j = to_json(r);
  const auto& jr = j["cases"][0]["paths"][0];
  REQUIRE(jr.contains("recorded"));
  CHECK(jr["recorded"]["max_abs_err"].is_null());  // no recorded output
  CHECK(jr["recorded"]["mismatches"].is_null());
  CHECK(jr["recorded"]["lse"]["max_abs_err"].get<double>() == doctest::Approx(0.25));
  CHECK(jr["recorded"]["lse"]["mismatches"] == 5);
  const std::string xml = to_junit(r);
  CHECK(xml.find("recorded lse: max_abs_err") != std::string::npos);
}

TEST_CASE("JSON writes non-finite errors as null, and the count says why") {
  PathReport p = path("direct", PathStatus::Fail, "NaN in output");
  p.error = stats(std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 5);
  p.error->nonfinite = 5;
  const nlohmann::json j = to_json(one_case({p}));
  const auto& jp = j["cases"][0]["paths"][0];
  CHECK(jp["max_abs_err"].is_null());
  CHECK(jp["rel_l2_err"].is_null());
  CHECK(jp["nonfinite"] == 5);
  // And the dump parses back (no bare NaN tokens).
  CHECK(nlohmann::json::parse(j.dump())["cases"][0]["paths"][0]["nonfinite"] == 5);
}

TEST_CASE("CSV: header plus one row per case and path, quoted where needed") {
  PathReport d = path("direct", PathStatus::Fail, "bad, \"very\" bad");
  d.error = stats(0.5, 0.1, 3);
  auto r = one_case({path("reference", PathStatus::Pass), d});
  r.cases.front().name = "name,with,commas";
  const auto rows = lines(to_csv(r));
  REQUIRE(rows.size() == 3);
  const auto header = csv_cells(rows[0]);
  CHECK(header[0] == "case");
  CHECK(header[1] == "path");
  CHECK(header[2] == "status");
  for (std::size_t i = 1; i < rows.size(); ++i) CHECK(csv_cells(rows[i]).size() == header.size());
  const auto row = csv_cells(rows[2]);
  CHECK(row[0] == "name,with,commas");
  CHECK(row[1] == "direct");
  CHECK(row[2] == "fail");
  CHECK(row[3] == "bad, \"very\" bad");
  const auto col = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  REQUIRE(col("mismatches") < header.size());
  CHECK(row[col("mismatches")] == "3");
  CHECK(std::stod(row[col("max_abs_err")]) == doctest::Approx(0.5));
  CHECK(row[col("worst_head")] == "3");
}

TEST_CASE("xml_escape escapes markup and drops control characters") {
  CHECK(xml_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&apos;");
  CHECK(xml_escape(std::string("x\x01y")) == "x?y");
  CHECK(xml_escape("line\nbreak") == "line\nbreak");
}

TEST_CASE("JUnit: one testcase per case and path, well-formed with hostile names") {
  PathReport d = path("direct", PathStatus::Fail, "max <err> & \"more\"");
  d.error = stats(0.5, 0.1, 3);
  auto r = one_case({path("reference", PathStatus::Pass), d, path("split", PathStatus::Skipped, "no CUDA device"),
                     path("fmha", PathStatus::NotApplicable, "head_dim 64 <not built>"),
                     path("prefill", PathStatus::Error, "cudaErrorIllegalAddress")});
  r.cases.front().name = "case<&>\"'";
  CaseReport bad;
  bad.name = "broken & invalid";
  bad.errors = {"seq_lens[2] = 0 < q_len 1"};
  r.cases.push_back(bad);

  const std::string xml = to_junit(r);
  std::string why;
  CHECK_MESSAGE(xml_well_formed(xml, why), why << "\n" << xml);
  CHECK(xml.find("<failure") != std::string::npos);
  CHECK(xml.find("<error") != std::string::npos);
  CHECK(xml.find("<skipped message=\"skipped: no CUDA device\"") != std::string::npos);
  CHECK(xml.find("<skipped message=\"n/a: head_dim 64 &lt;not built&gt;\"") != std::string::npos);
  CHECK(xml.find("tests=\"6\"") != std::string::npos);  // 5 paths + 1 invalid case
  CHECK(xml.find("failures=\"1\"") != std::string::npos);
  CHECK(xml.find("errors=\"2\"") != std::string::npos);
  CHECK(xml.find("skipped=\"2\"") != std::string::npos);
  CHECK(xml.find("case<") == std::string::npos);
}

TEST_CASE("the table names every path, its status and reason") {
  PathReport d = path("direct", PathStatus::Fail, "3 elements beyond tolerance");
  d.error = stats(0.5, 0.1, 3);
  auto r = one_case({path("reference", PathStatus::Pass), d, path("split", PathStatus::Skipped, "no CUDA device")});
  r.cases.front().warnings = {"page 3 used twice in sequence 0"};
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  print_table(f, r, /*color=*/false);
  std::rewind(f);
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  std::fclose(f);
  CHECK(text.find("case-a") != std::string::npos);
  CHECK(text.find("direct") != std::string::npos);
  CHECK(text.find("fail") != std::string::npos);
  CHECK(text.find("no CUDA device") != std::string::npos);
  CHECK(text.find("(1,2,3,4)") != std::string::npos);
  CHECK(text.find("warning: page 3 used twice") != std::string::npos);
  CHECK(text.find("\x1b[") == std::string::npos);  // no color when asked for none
}

namespace {

// What a print function writes, as text.
template <typename Print>
std::string printed(Print&& print) {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  print(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  std::fclose(f);
  return text;
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("the table puts a case's skipped paths on one line, without the reason said once") {
  auto r = one_case({path("reference", PathStatus::Pass), path("direct", PathStatus::Skipped, "built without CUDA"),
                     path("split", PathStatus::Skipped, "built without CUDA"),
                     path("fmha", PathStatus::NotApplicable, "head_dim 96 is not built")});
  const std::string said = printed([&](std::FILE* f) { print_case(f, r.cases.front(), {}, false, "built without CUDA"); });
  CHECK(count_of(said, "skipped") == 1);
  CHECK(said.find("direct, split") != std::string::npos);
  CHECK(said.find("built without CUDA") == std::string::npos);
  CHECK(said.find("head_dim 96 is not built") != std::string::npos);  // n/a keeps its row and reason

  const std::string unsaid = printed([&](std::FILE* f) { print_case(f, r.cases.front(), {}, false); });
  CHECK(count_of(unsaid, "built without CUDA") == 1);
  CHECK(unsaid.find("direct, split (built without CUDA)") != std::string::npos);

  // Only skipped paths: no column header for rows that are not there.
  auto only = one_case({path("split", PathStatus::Skipped, "no CUDA device")});
  const std::string lone = printed([&](std::FILE* f) { print_case(f, only.cases.front(), {}, false, "no CUDA device"); });
  CHECK(lone.find("median ms") == std::string::npos);
  CHECK(lone.find("split") != std::string::npos);
}

TEST_CASE("the failure list names every failing case and path with its reason") {
  PathReport d = path("direct", PathStatus::Fail, "output: 3 of 1024 elements beyond atol");
  d.error = stats(0.5, 0.1, 3);
  auto r = one_case({path("reference", PathStatus::Pass), d, path("split", PathStatus::Error, "cudaErrorIllegalAddress"),
                     path("auto", PathStatus::Skipped, "no CUDA device")});
  CaseReport bad;
  bad.name = "case-b";
  bad.errors = {"seq_lens[2] = 0 < q_len 1"};
  r.cases.push_back(bad);
  CaseReport fine;
  fine.name = "case-c";
  fine.paths = {path("reference", PathStatus::Pass)};
  r.cases.push_back(fine);

  std::string text = printed([&](std::FILE* f) { print_failures(f, r); });
  CHECK(text.find("failed (2 of 3 cases)") != std::string::npos);
  CHECK(text.find("case-a: direct: fail: output: 3 of 1024 elements beyond atol") != std::string::npos);
  CHECK(text.find("case-a: split: error: cudaErrorIllegalAddress") != std::string::npos);
  CHECK(text.find("case-b: invalid: seq_lens[2] = 0 < q_len 1") != std::string::npos);
  CHECK(text.find("case-c") == std::string::npos);
  CHECK(text.find("auto") == std::string::npos);  // skipped does not fail a run

  // Under fail_on_skip the skipped path is listed, and paths with the same
  // reason share a line.
  r.cases.front().paths.push_back(path("fmha", PathStatus::Skipped, "no CUDA device"));
  r.fail_on_skip = true;
  text = printed([&](std::FILE* f) { print_failures(f, r); });
  CHECK(text.find("case-a: auto, fmha: skipped (--fail-on-skip): no CUDA device") != std::string::npos);

  // Nothing failed: nothing printed.
  CHECK(printed([&](std::FILE* f) { print_failures(f, one_case({path("reference", PathStatus::Pass)})); }).empty());
  // print_table ends with the list.
  CHECK(printed([&](std::FILE* f) { print_table(f, r, false); }).find("failed (") != std::string::npos);
}

TEST_CASE("fail_on_skip: skipped and n/a paths fail the run (exit 1) in every report") {
  auto r = one_case({path("reference", PathStatus::Pass), path("direct", PathStatus::Skipped, "no CUDA device"),
                     path("fmha", PathStatus::NotApplicable, "head_dim 96")});
  CHECK(report_exit_code(r) == 0);
  r.fail_on_skip = true;
  CHECK(report_exit_code(r) == 1);
  CHECK(path_fails_run(r.cases.front().paths[1], true));
  CHECK(!path_fails_run(r.cases.front().paths[1], false));
  CHECK(!path_fails_run(r.cases.front().paths[0], true));
  const auto j = to_json(r);
  CHECK(j["exit_code"] == 1);
  CHECK(j["fail_on_skip"] == true);
  const std::string xml = to_junit(r);
  CHECK(xml.find("failures=\"2\"") != std::string::npos);
  CHECK(xml.find("skipped=\"0\"") != std::string::npos);
  CHECK(xml.find("<failure message=\"skipped (--fail-on-skip): no CUDA device\"") != std::string::npos);
  std::string why;
  CHECK_MESSAGE(xml_well_formed(xml, why), why);
  // A pass-only run is unaffected.
  auto clean = one_case({path("reference", PathStatus::Pass)});
  clean.fail_on_skip = true;
  CHECK(report_exit_code(clean) == 0);
}

TEST_CASE("a run that could not run carries its reason in every report, exit 4") {
  RunReport r;
  r.tool_version = "0.1.0";
  r.command_line = "pagecheck bench";
  r.errors = {"this build has no GPU paths (built without CUDA): nothing to benchmark"};
  CHECK(report_exit_code(r) == 4);
  const auto j = to_json(r);
  CHECK(j["exit_code"] == 4);
  REQUIRE(j["errors"].size() == 1);
  CHECK(j["errors"][0] == r.errors.front());
  CHECK(j["cases"].empty());
  CHECK(to_json(one_case({}))["errors"].empty());  // present, and empty, in a normal run

  const auto rows = lines(to_csv(r));
  REQUIRE(rows.size() == 2);
  const auto cells = csv_cells(rows[1]);
  CHECK(cells[2] == "error");
  CHECK(cells[3] == r.errors.front());

  const std::string xml = to_junit(r);
  std::string why;
  CHECK_MESSAGE(xml_well_formed(xml, why), why);
  CHECK(xml.find("errors=\"1\"") != std::string::npos);
  CHECK(xml.find("built without CUDA") != std::string::npos);
  CHECK(printed([&](std::FILE* f) { print_failures(f, r); }).find("not run: this build has no GPU paths") !=
        std::string::npos);
}

TEST_CASE("a device without the matrix ceiling says why, in the table and through the JSON") {
  RunReport r = one_case({path("reference", PathStatus::Pass)});
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.multiprocessors = 132;
  d.copy_gb_per_s = 3900;
  d.read_gb_per_s = 4300;
  d.matmul_unavailable = "cuBLAS cannot be loaded (libcublas.so.13: cannot open shared object file)";
  r.device = d;
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  REQUIRE(out != nullptr);
  print_device(out, d);
  std::fclose(out);
  const std::string line(buffer, size);
  std::free(buffer);
  CHECK(line.find("BF16 mma ceiling unavailable: cuBLAS cannot be loaded") != std::string::npos);
  CHECK(line.find("TFLOP/s") == std::string::npos);
  const nlohmann::json j = to_json(r);
  CHECK(j["device"]["matmul_unavailable"] == d.matmul_unavailable);
  auto back = report_from_json(j, "r.json");
  REQUIRE_MESSAGE(back.ok(), back.error().describe());
  REQUIRE(back->device.has_value());
  CHECK(back->device->matmul_unavailable == d.matmul_unavailable);
  // Measured: no such field.
  r.device->matmul_unavailable.clear();
  r.device->matmul_tflop_per_s = 700;
  CHECK_FALSE(to_json(r)["device"].contains("matmul_unavailable"));
}
