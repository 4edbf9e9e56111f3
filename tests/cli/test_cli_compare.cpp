// `pagecheck compare` on the real binary: reports written by the binary
// itself (run on the CPU, shards and merge) and by the library (timings a CPU
// run cannot have), the exit codes, the refusals and the outputs.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.hpp"
#include "pagecheck/report.hpp"

using namespace cli_test;
using pagecheck::PathReport;
using pagecheck::PathStatus;

namespace {

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_file(p)); }

// A report of one case and one GPU path timed at `median_ms` with a spread,
// written by the library as a run writes it.
std::string write_timed_report(const std::string& file, double median_ms, double iqr_ms,
                               PathStatus status = PathStatus::Pass, const std::string& case_name = "decode-4k") {
  pagecheck::RunReport r;
  r.tool_version = PAGECHECK_VERSION;
  r.command_line = "pagecheck bench --json " + file;
  pagecheck::DeviceInfo d;
  d.name = "NVIDIA H200";
  r.device = d;
  pagecheck::CaseReport c;
  c.index = 0;
  c.name = case_name;
  c.content_hash = "0123456789abcdef";
  PathReport p;
  p.path = "split";
  p.status = status;
  p.tolerance = {1e-2, 2e-2};
  if (status == PathStatus::Fail) p.reason = "output: 12 mismatches";
  pagecheck::ErrorStats e;
  e.max_abs_err = status == PathStatus::Fail ? 0.5 : 1e-3;
  e.elements = 4096;
  e.mismatches = status == PathStatus::Fail ? 12 : 0;
  p.error = e;
  pagecheck::StageTiming t;
  t.stage = "total";
  t.median_ms = median_ms;
  t.min_ms = median_ms - iqr_ms;
  t.max_ms = median_ms + iqr_ms;
  t.q1_ms = median_ms - iqr_ms / 2;
  t.q3_ms = median_ms + iqr_ms / 2;
  t.repeats = 20;
  p.timings.push_back(t);
  c.paths.push_back(p);
  r.cases.push_back(c);
  const fs::path path = work_dir() / file;
  REQUIRE(pagecheck::write_json(path.string(), r).ok());
  return file;
}

}  // namespace

TEST_CASE("compare: two CPU runs of one binary are the same; the reference's timing has no spread") {
  const auto a = run_tool("run --seqs 2 --seq-len 20 --no-color -q --json run-a.json");
  const auto b = run_tool("run --seqs 2 --seq-len 20 --no-color -q --json run-b.json");
  REQUIRE(a.rc == 0);
  REQUIRE(b.rc == 0);
  // The reference's time is one wall-clock run: shown, never judged, so
  // two runs are the same whatever the machine's jitter.
  const auto r = run_tool("compare run-a.json run-b.json --no-color --json cmp.json");
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "no regression"));
  CHECK(contains(r.out, "BASE run-a.json"));
  const auto j = read_json(work_dir() / "cmp.json");
  CHECK(j["exit_code"] == 0);
  CHECK(j["summary"]["paths"]["new"] == 0);
  CHECK(j["summary"]["paths"]["gone"] == 0);
  CHECK(j["summary"]["cases"]["changed"] == 0);
  CHECK(j["summary"]["paths"]["same"].get<int>() >= 1);
  // Said once.
  CHECK(contains(r.out, "the change is shown, not judged"));
}

TEST_CASE("compare: the merged shards of a run against the run itself") {
  REQUIRE(run_tool("run --seqs 2 --seq-len 20 --preset llama3-8b --preset mistral-7b-window --no-color -q --json whole.json")
              .rc == 0);
  for (int s = 0; s < 2; ++s)
    REQUIRE(run_tool("run --seqs 2 --seq-len 20 --preset llama3-8b --preset mistral-7b-window --no-color -q --shard " +
                     std::to_string(s) + "/2 --json shard" + std::to_string(s) + ".json")
                .rc == 0);
  REQUIRE(run_tool("merge shard0.json shard1.json -q --json merged.json").rc == 0);
  const auto r = run_tool("compare whole.json merged.json --no-color --json cmp-merged.json");
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  const auto j = read_json(work_dir() / "cmp-merged.json");
  CHECK(j["cases"].size() == 2);
  CHECK(j["summary"]["cases"]["new"] == 0);
  CHECK(j["summary"]["cases"]["gone"] == 0);
  // A lone shard against the whole run: refused, exit 3, with the way out.
  const auto lone = run_tool("compare whole.json shard0.json");
  CHECK(lone.rc == 3);
  CHECK(contains(lone.err, "merge the shards first"));
}

TEST_CASE("merge and compare refuse a truncated report by name, exit 3; a rewrite leaves no temporary") {
  REQUIRE(run_tool("run --seqs 2 --seq-len 20 --preset llama3-8b --no-color -q --json whole-t.json").rc == 0);
  const std::string whole = read_file(work_dir() / "whole-t.json");
  {
    std::ofstream f(work_dir() / "cut-t.json", std::ios::binary);
    f << whole.substr(0, whole.size() * 2 / 3);
  }
  const auto merged = run_tool("merge whole-t.json cut-t.json -q --json m-t.json");
  CHECK(merged.rc == 3);
  CHECK(contains(merged.err, "cut-t.json: a truncated report"));
  CHECK_FALSE(fs::exists(work_dir() / "m-t.json"));
  const auto compared = run_tool("compare whole-t.json cut-t.json");
  CHECK(compared.rc == 3);
  CHECK(contains(compared.err, "cut-t.json: a truncated report"));
  // The same run again over its own report: the new report in place, nothing beside it.
  REQUIRE(run_tool("run --seqs 2 --seq-len 20 --preset llama3-8b --no-color -q --json whole-t.json").rc == 0);
  for (const auto& e : fs::directory_iterator(work_dir()))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp") == std::string::npos, e.path().string());
}

TEST_CASE("compare: slower past the spread and the threshold exits 1; within the spread 0") {
  write_timed_report("t-base.json", 1.00, 0.02);
  write_timed_report("t-noise.json", 1.015, 0.02);
  write_timed_report("t-slow.json", 1.25, 0.02);
  write_timed_report("t-fast.json", 0.75, 0.02);

  const auto same = run_tool("compare t-base.json t-noise.json --no-color");
  INFO(same.out << same.err);
  CHECK(same.rc == 0);
  CHECK(contains(same.out, "same"));

  const auto slow = run_tool("compare t-base.json t-slow.json --no-color --junit cmp.xml --html cmp.html");
  INFO(slow.out << slow.err);
  CHECK(slow.rc == 1);
  CHECK(contains(slow.out, "slower"));
  CHECK(contains(slow.out, "+25.0%"));
  CHECK(contains(slow.out, "regressions (1)"));
  const std::string junit = read_file(work_dir() / "cmp.xml");
  CHECK(contains(junit, "failures=\"1\""));
  CHECK(contains(junit, "<failure message=\"slower\""));
  const std::string html = read_file(work_dir() / "cmp.html");
  CHECK(contains(html, "<svg"));
  CHECK(contains(html, "data-change=\"25\""));

  // --max-slowdown above the change: same.
  CHECK(run_tool("compare t-base.json t-slow.json --max-slowdown 30%").rc == 0);
  // Faster passes unless --fail-on says otherwise.
  CHECK(run_tool("compare t-base.json t-fast.json").rc == 0);
  CHECK(run_tool("compare t-base.json t-fast.json --fail-on faster").rc == 1);
  // The JSON on stdout; the table then on stderr.
  const auto piped = run_tool("compare t-base.json t-slow.json --json -");
  CHECK(piped.rc == 1);
  CHECK(nlohmann::json::parse(piped.out)["summary"]["regressions"] == 1);
  CHECK(contains(piped.err, "slower"));
  // -q: the summary and the regressions only.
  const auto quiet = run_tool("compare t-base.json t-slow.json -q --no-color");
  CHECK(quiet.rc == 1);
  CHECK_FALSE(contains(quiet.out, "BASE t-base.json"));
  CHECK(contains(quiet.out, "decode-4k: split: slower"));
}

TEST_CASE("compare: now failing, gone and new through the binary") {
  write_timed_report("f-base.json", 1.0, 0.02);
  write_timed_report("f-fail.json", 1.0, 0.02, PathStatus::Fail);
  const auto failing = run_tool("compare f-base.json f-fail.json --no-color");
  INFO(failing.out << failing.err);
  CHECK(failing.rc == 1);
  CHECK(contains(failing.out, "now failing"));
  CHECK(contains(failing.out, "output: 12 mismatches"));
  CHECK(run_tool("compare f-fail.json f-base.json").rc == 0);  // now passing

  // The case is renamed but its content hash is the same: paired.
  write_timed_report("f-renamed.json", 1.0, 0.02, PathStatus::Pass, "decode-4k-renamed");
  const auto renamed = run_tool("compare f-base.json f-renamed.json --no-color");
  CHECK(renamed.rc == 0);
  CHECK(contains(renamed.out, "renamed from decode-4k"));
  CHECK(run_tool("compare f-base.json f-renamed.json --fail-on renamed").rc == 1);
}

TEST_CASE("compare: refusals and usage errors") {
  write_timed_report("u-base.json", 1.0, 0.02);
  const auto missing = run_tool("compare u-base.json no-such.json");
  CHECK(missing.rc == 3);
  CHECK(contains(missing.err, "no-such.json"));

  std::ofstream(work_dir() / "other.json") << R"({"benchmarks": []})";
  const auto other = run_tool("compare u-base.json other.json");
  CHECK(other.rc == 3);
  CHECK(contains(other.err, "not a pagecheck report"));

  REQUIRE(run_tool("compare u-base.json u-base.json --json comparison.json").rc == 0);
  const auto comparison = run_tool("compare u-base.json comparison.json");
  CHECK(comparison.rc == 3);
  CHECK(contains(comparison.err, "a comparison written by compare --json, not a report"));

  const auto bad_percent = run_tool("compare u-base.json u-base.json --max-slowdown fast");
  CHECK(bad_percent.rc == 2);
  CHECK(contains(bad_percent.err, "--max-slowdown: must be a percentage"));
  const auto bad_verdict = run_tool("compare u-base.json u-base.json --fail-on slowish");
  CHECK(bad_verdict.rc == 2);
  CHECK(contains(bad_verdict.err, "'slowish' is not a verdict"));
  CHECK(run_tool("compare u-base.json").rc == 2);
  CHECK(run_tool("compare u-base.json u-base.json --json - --junit -").rc == 2);
}

TEST_CASE("compare --pair: two builds of a kernel in one report") {
  pagecheck::RunReport r;
  r.tool_version = PAGECHECK_VERSION;
  r.command_line = "pagecheck run --kernel old/libk.so --kernel new/libk.so --json pair.json";
  pagecheck::CaseReport c;
  c.name = "decode-1k";
  for (const auto& [name, ms] : {std::pair{"split", 1.0}, std::pair{"auto", 1.5}}) {
    PathReport p;
    p.path = name;
    p.tolerance = {1e-2, 2e-2};
    pagecheck::StageTiming t;
    t.stage = "total";
    t.median_ms = ms;
    t.q1_ms = ms - 0.01;
    t.q3_ms = ms + 0.01;
    t.repeats = 20;
    p.timings.push_back(t);
    c.paths.push_back(p);
  }
  r.cases.push_back(c);
  REQUIRE(pagecheck::write_json((work_dir() / "pair.json").string(), r).ok());
  const auto slower = run_tool("compare pair.json --pair split=auto --no-color");
  INFO(slower.out << slower.err);
  CHECK(slower.rc == 1);
  CHECK(contains(slower.out, "split=auto"));
  CHECK(contains(slower.out, "+50.0%"));
  CHECK(run_tool("compare pair.json --pair auto=split").rc == 0);  // faster
  const auto unknown = run_tool("compare pair.json --pair split=fmha");
  CHECK(unknown.rc == 2);
  CHECK(contains(unknown.err, "no case of pair.json has a path 'fmha'"));
  CHECK(run_tool("compare pair.json pair.json --pair split=auto").rc == 2);
  CHECK(run_tool("compare pair.json --pair split").rc == 2);
}
