// Interrupts and isolation on the real binary, without a GPU (docs/cli.md
// "Interrupts", "Isolation"): SIGTERM and SIGINT during a run leave complete
// reports of the finished cases, marked interrupted; an isolated run goes on
// after a worker that crashes, hangs or loses its context, through the test
// hook PAGECHECK_TEST_FAULT on the reference path.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagecheck/report_read.hpp"

#include "cli_run.hpp"

namespace fs = std::filesystem;

namespace {

using namespace cli_test;

const std::string kData = PAGECHECK_DATA_DIR;
// Three recorded cases, in this order; the hook names them by case name.
const std::vector<std::string> kCases = {"csr_hnd_bf16_window1_prefill", "csr_hnd_f16_prefill",
                                         "csr_hnd_f32_large_logits"};

std::vector<std::string> case_files() {
  std::vector<std::string> files;
  for (const auto& name : kCases) files.push_back(kData + "/" + name + ".safetensors");
  return files;
}

// The binary started in the background in the scratch folder, stdout and
// stderr into files, `env` (NAME=value) added to the environment.
struct Background {
  pid_t pid = -1;
  fs::path out, err;

  Background(const std::string& tag, const std::vector<std::string>& args, const std::vector<std::string>& env) {
    out = work_dir() / (tag + ".out");
    err = work_dir() / (tag + ".err");
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (::chdir(work_dir().c_str()) != 0) ::_exit(126);
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(o, STDOUT_FILENO);
      ::dup2(e, STDERR_FILENO);
      for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> argv = {const_cast<char*>(PAGECHECK_BIN)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(PAGECHECK_BIN, argv.data());
      ::_exit(127);
    }
  }

  // Waits until `file` holds `text` (the process still running); false when
  // the process ended first or after a generous deadline.
  bool wait_for(const fs::path& file, const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (contains(read_file(file), text)) return true;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Sends `signo` and waits: the exit code, or 128 + the signal that killed it.
  int stop(int signo) {
    REQUIRE(pid > 0);
    ::kill(pid, signo);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  ~Background() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

pagecheck::RunReport read_report(const fs::path& file) {
  auto report = pagecheck::read_json_report(file.string());
  REQUIRE_MESSAGE(report.ok(), report.error().describe());
  return *report;
}

const pagecheck::PathReport& reference_row(const pagecheck::CaseReport& c) {
  REQUIRE(c.paths.size() == 1);
  REQUIRE(c.paths[0].path == "reference");
  return c.paths[0];
}

}  // namespace

TEST_CASE("SIGTERM during a long reference: every report is written, marked interrupted, exit 143") {
  // One prefill case whose reference takes tens of seconds on one thread;
  // the signal comes as soon as the reference has started.
  Background run("sigterm-long",
                 {"run", "--seqs", "4", "--seq-len", "16384", "--q-len", "1024", "--paths", "reference", "--threads",
                  "1", "--no-timing", "--json", "long.json", "--csv", "long.csv", "--junit", "long.xml"},
                 {"PAGECHECK_PROGRESS_SECONDS=0"});
  REQUIRE(run.wait_for(run.err, ") reference"));
  CHECK(run.stop(SIGTERM) == 143);
  const auto report = read_report(work_dir() / "long.json");
  REQUIRE(report.interrupted.has_value());
  CHECK(report.interrupted->signal == "SIGTERM");
  CHECK(report.interrupted->step == "reference");
  CHECK(report.interrupted->case_index == 0);
  CHECK(report.interrupted->cases_finished == 0);
  CHECK(report.interrupted->cases_selected == 1);
  CHECK(report.cases.empty());
  REQUIRE(report.errors.size() == 1);
  CHECK(contains(report.errors[0], "interrupted by SIGTERM during case"));
  CHECK(contains(read_file(work_dir() / "long.csv"), "interrupted by SIGTERM"));
  CHECK(contains(read_file(work_dir() / "long.xml"), "interrupted by SIGTERM"));
  CHECK(contains(read_file(run.err), "writing the reports of the finished cases"));
}

TEST_CASE("SIGINT after two cases: the finished cases are in the report, the third is named in flight") {
  // The third case's reference never returns (the test hook), so the signal
  // finds exactly two cases finished.
  std::vector<std::string> args = {"replay"};
  for (const auto& f : case_files()) args.push_back(f);
  for (const char* a : {"--paths", "reference", "--no-color", "--json", "two.json", "--junit", "two.xml"})
    args.emplace_back(a);
  // The progress line of the third case's reference step is printed once
  // the run has recorded that step as in flight.
  Background run("sigint-two", args,
                 {"PAGECHECK_TEST_FAULT=" + kCases[2] + ":reference:hang", "PAGECHECK_PROGRESS_SECONDS=0"});
  REQUIRE(run.wait_for(run.err, "case 3/3 (" + kCases[2] + ") reference"));
  CHECK(run.stop(SIGINT) == 130);
  const auto report = read_report(work_dir() / "two.json");
  REQUIRE(report.cases.size() == 2);
  CHECK(report.cases[0].name == kCases[0]);
  CHECK(report.cases[1].name == kCases[1]);
  for (const auto& c : report.cases) CHECK(reference_row(c).status == pagecheck::PathStatus::Pass);
  REQUIRE(report.interrupted.has_value());
  CHECK(report.interrupted->signal == "SIGINT");
  CHECK(report.interrupted->case_name == kCases[2]);
  CHECK(report.interrupted->case_index == 2);
  CHECK(report.interrupted->cases_finished == 2);
  CHECK(report.interrupted->cases_selected == 3);
  const std::string junit = read_file(work_dir() / "two.xml");
  CHECK(contains(junit, "interrupted by SIGINT during case " + kCases[2]));
  CHECK(contains(junit, "pagecheck." + kCases[1]));
}

TEST_CASE("an isolated run goes on after a worker that crashes, hangs or loses its context") {
  struct Fault {
    const char* kind;
    const char* reason;  // in the faulty row's reason
  };
  // (Under ASan a SIGSEGV ends as its report's abort or exit: how the worker
  // ended is not checked for segv.)
  for (const Fault fault : {Fault{"segv", "the worker process "}, Fault{"abort", "was killed by signal"},
                            Fault{"hang", "timed out after 1 s (--path-timeout)"},
                            Fault{"context", "the context is lost"}}) {
    CAPTURE(fault.kind);
    const std::string json = std::string("isolated-") + fault.kind + ".json";
    std::string args = "replay";
    for (const auto& f : case_files()) args += " '" + f + "'";
    args += " --paths reference --isolation on --path-timeout 1 --no-color --json " + json;
    const Result r = run_tool(args, "PAGECHECK_TEST_FAULT=" + kCases[1] + ":reference:" + fault.kind);
    CHECK(r.rc == 4);  // the faulty path is an error
    const auto report = read_report(work_dir() / json);
    REQUIRE(report.cases.size() == 3);
    CHECK(!report.interrupted.has_value());
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(report.cases[i].name == kCases[i]);
      const auto& row = reference_row(report.cases[i]);
      if (i == 1) {
        CHECK(row.status == pagecheck::PathStatus::Error);
        CHECK(contains(row.reason, fault.reason));
      } else {
        CHECK(row.status == pagecheck::PathStatus::Pass);
      }
    }
  }
}

TEST_CASE("an isolated run without faults reports as a run in one process") {
  std::string args = "replay";
  for (const auto& f : case_files()) args += " '" + f + "'";
  const Result here =
      run_tool(args + " --paths reference --isolation off --no-timing --json here.json --html here.html");
  const Result isolated =
      run_tool(args + " --paths reference --isolation on --no-timing --json isolated.json --html isolated.html");
  CHECK(here.rc == 0);
  CHECK(isolated.rc == 0);
  const auto a = read_report(work_dir() / "here.json");
  const auto b = read_report(work_dir() / "isolated.json");
  REQUIRE(a.cases.size() == b.cases.size());
  for (std::size_t i = 0; i < a.cases.size(); ++i) {
    CHECK(a.cases[i].name == b.cases[i].name);
    CHECK(a.cases[i].index == b.cases[i].index);
    CHECK(reference_row(a.cases[i]).status == reference_row(b.cases[i]).status);
    CHECK(reference_row(a.cases[i]).recorded->max_abs_err == reference_row(b.cases[i]).recorded->max_abs_err);
  }
  // The table is the supervisor's, once per case.
  for (const auto& name : kCases) CHECK(contains(isolated.out, name));
  // The heat maps of --html come from the worker's comparisons.
  const auto heat_maps = [](const std::string& page) {
    std::size_t n = 0;
    for (auto at = page.find("class=\"heat "); at != std::string::npos; at = page.find("class=\"heat ", at + 1)) ++n;
    return n;
  };
  const std::size_t maps_here = heat_maps(read_file(work_dir() / "here.html"));
  CHECK(maps_here > 0);
  CHECK(heat_maps(read_file(work_dir() / "isolated.html")) == maps_here);
}

TEST_CASE("SIGTERM to an isolated run whose worker hangs: the worker is ended, the reports written") {
  std::vector<std::string> args = {"replay"};
  for (const auto& f : case_files()) args.push_back(f);
  for (const char* a : {"--paths", "reference", "--isolation", "on", "--path-timeout", "0", "--no-color", "--json",
                        "isolated-term.json"})
    args.emplace_back(a);
  // The worker prints the progress line after its journal has the step; the
  // supervisor reads the journal every 20 ms.
  Background run("isolated-term", args,
                 {"PAGECHECK_TEST_FAULT=" + kCases[2] + ":reference:hang", "PAGECHECK_PROGRESS_SECONDS=0"});
  REQUIRE(run.wait_for(run.err, "case 3/3 (" + kCases[2] + ") reference"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(run.stop(SIGTERM) == 143);
  const auto report = read_report(work_dir() / "isolated-term.json");
  CHECK(report.cases.size() == 2);
  REQUIRE(report.interrupted.has_value());
  CHECK(report.interrupted->case_name == kCases[2]);
  CHECK(report.interrupted->step == "reference");
}

TEST_CASE("a malformed PAGECHECK_TEST_FAULT is a usage error") {
  const Result r = run_tool("replay '" + case_files()[0] + "' --paths reference", "PAGECHECK_TEST_FAULT=nonsense");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "PAGECHECK_TEST_FAULT='nonsense' is not CASE:PATH:KIND"));
  const Result kind = run_tool("replay '" + case_files()[0] + "' --paths reference",
                               "PAGECHECK_TEST_FAULT=a:reference:explode");
  CHECK(kind.rc == 2);
  CHECK(contains(kind.err, "'explode' is not a fault"));
}

TEST_CASE("SIGTERM to --workers 2: each worker writes its finished cases, the merged report is interrupted") {
  std::vector<std::string> args = {"replay"};
  for (const auto& f : case_files()) args.push_back(f);
  for (const char* a : {"--paths", "reference", "--workers", "2", "--no-color", "--json", "workers-term.json"})
    args.emplace_back(a);
  // Shard 1 holds the second case alone, and hangs on it; shard 0 finishes.
  Background run("workers-term", args, {"PAGECHECK_TEST_FAULT=" + kCases[1] + ":reference:hang"});
  REQUIRE(run.wait_for(run.err, "reports in "));
  const std::string said = read_file(run.err);
  const auto at = said.find("reports in ") + std::string("reports in ").size();
  const fs::path folder = said.substr(at, said.find('\n', at) - at);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (!fs::exists(folder / "shard-0.json") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(fs::exists(folder / "shard-0.json"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // shard 1 reaches its reference
  CHECK(run.stop(SIGTERM) == 143);
  const auto report = read_report(work_dir() / "workers-term.json");
  REQUIRE(report.cases.size() == 2);
  CHECK(report.cases[0].name == kCases[0]);
  CHECK(report.cases[1].name == kCases[2]);
  for (const auto& c : report.cases) CHECK(reference_row(c).status == pagecheck::PathStatus::Pass);
  REQUIRE(report.interrupted.has_value());
  CHECK(report.interrupted->case_name == kCases[1]);
  CHECK(report.interrupted->cases_finished == 0);
  CHECK(report.interrupted->cases_selected == 1);
}

TEST_CASE("an isolated run's bundles are the user's: its command, after the case's rows") {
  REQUIRE(run_tool("gen -o iso-failing.safetensors --seqs 2 --seq-len 24 --head-dim 64 --with-output --output-dtype BF16")
              .rc == 0);
  const Result r = run_tool(
      "replay iso-failing.safetensors --paths reference --atol 0 --rtol 0 --isolation on --save-failing iso-bundles");
  CHECK(r.rc == 1);
  const fs::path bundle = work_dir() / "iso-bundles" / "iso-failing";
  REQUIRE(fs::exists(bundle / "report.json"));
  const std::string command = read_file(bundle / "command.txt");
  CHECK(contains(command, "--atol 0"));
  CHECK(!contains(command, "--isolation-worker"));
  const auto report = read_report(bundle / "report.json");
  CHECK(contains(report.command_line, "--save-failing iso-bundles"));
  CHECK(!contains(report.command_line, "--isolation-worker"));
  CHECK(r.out.find("saved failing case to") > r.out.find("differs from the recorded output"));
}
