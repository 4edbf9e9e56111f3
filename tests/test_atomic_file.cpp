// Files replaced whole (pagecheck/atomic_file.hpp), through the writers that
// use it (reports, case files, the tuning file), and the reading side: a
// report cut short is refused by name.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pagecheck/atomic_file.hpp"
#include "pagecheck/plan.hpp"
#include "pagecheck/report.hpp"
#include "pagecheck/report_html.hpp"
#include "pagecheck/report_read.hpp"
#include "pagecheck/safetensors.hpp"
#include "scratch_dir.hpp"

using namespace pagecheck;
namespace fs = std::filesystem;

namespace {

const test::ScratchDir& scratch() {
  static const test::ScratchDir dir("atomic_file");
  return dir;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_all(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

// Every name in `dir` (hidden ones too).
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

RunReport small_report() {
  RunReport r;
  r.tool_version = PAGECHECK_VERSION;
  r.command_line = "pagecheck run --seqs 2";
  for (int i = 0; i < 2; ++i) {
    CaseReport c;
    c.name = "case-" + std::to_string(i);
    c.index = i;
    c.geometry = "2 seqs";
    PathReport p;
    p.path = "reference";
    p.status = PathStatus::Pass;
    c.paths.push_back(p);
    r.cases.push_back(c);
  }
  return r;
}

}  // namespace

TEST_CASE("replace_file: the new content under the name, no temporary left") {
  const fs::path dir = scratch().path / "ok";
  fs::create_directories(dir);
  const fs::path target = dir / "r.json";
  write_all(target, "old");
  fs::path seen;
  const Status st = replace_file(target, [&](const fs::path& file) -> Status {
    seen = file;
    // The target still holds the old content while the new one is written.
    CHECK(read_all(target) == "old");
    write_all(file, "new");
    return {};
  });
  REQUIRE(st.ok());
  CHECK(seen == temporary_beside(target));
  CHECK(seen.parent_path() == dir);
  CHECK(seen.filename().string().front() == '.');
  CHECK(read_all(target) == "new");
  CHECK(names_in(dir) == std::vector<std::string>{"r.json"});
}

TEST_CASE("replace_file: a failed write keeps the old file and removes the temporary") {
  const fs::path dir = scratch().path / "fail";
  fs::create_directories(dir);
  const fs::path target = dir / "r.json";
  write_all(target, "old and complete");
  const Status st = replace_file(target, [&](const fs::path& file) -> Status {
    write_all(file, "half of the n");
    return runtime_error("disk full", file.string());
  });
  REQUIRE_FALSE(st.ok());
  CHECK(contains(st.error().describe(), "disk full"));
  CHECK(read_all(target) == "old and complete");
  CHECK(names_in(dir) == std::vector<std::string>{"r.json"});

  // A target that did not exist stays absent.
  const Status fresh = replace_file(dir / "new.json", [&](const fs::path& file) -> Status {
    write_all(file, "x");
    return runtime_error("no");
  });
  CHECK_FALSE(fresh.ok());
  CHECK(names_in(dir) == std::vector<std::string>{"r.json"});
}

TEST_CASE("replace_file: a folder in the way is an error naming it, the temporary removed") {
  const fs::path dir = scratch().path / "folder";
  fs::create_directories(dir / "r.json");
  const Status st = replace_file_with_text(dir / "r.json", "{}", "JSON");
  REQUIRE_FALSE(st.ok());
  CHECK(contains(st.error().describe(), (dir / "r.json").string()));
  CHECK(names_in(dir) == std::vector<std::string>{"r.json"});
  CHECK(fs::is_directory(dir / "r.json"));
  // No folder to write in: an error naming the file.
  const Status missing = replace_file_with_text(dir / "no-such" / "r.json", "{}", "JSON");
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.error().describe(), "cannot open the JSON file for writing"));
  CHECK(contains(missing.error().describe(), (dir / "no-such" / "r.json").string()));
}

TEST_CASE("replace_file: a link is followed and kept; a device is written in place") {
  const fs::path dir = scratch().path / "link";
  fs::create_directories(dir);
  write_all(dir / "real.json", "old");
  fs::create_symlink("real.json", dir / "link.json");
  REQUIRE(replace_file_with_text(dir / "link.json", "new", "JSON").ok());
  CHECK(fs::is_symlink(fs::symlink_status(dir / "link.json")));
  CHECK(read_all(dir / "real.json") == "new");
  CHECK(names_in(dir) == std::vector<std::string>{"link.json", "real.json"});
  // /dev/null is not renamed over (it would be replaced by a file).
  REQUIRE(replace_file_with_text("/dev/null", "into the void", "JSON").ok());
  struct stat st {};
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
}

TEST_CASE("the report writers go through a temporary file") {
  const fs::path dir = scratch().path / "reports";
  fs::create_directories(dir);
  const RunReport r = small_report();
  // Each over an old file that a failed write must not touch, then a good write.
  for (const auto& [name, write] : std::vector<std::pair<std::string, Status (*)(const std::string&, const RunReport&)>>{
           {"r.json", write_json}, {"r.csv", write_csv}, {"r.xml", write_junit}, {"r.html", write_html}}) {
    CAPTURE(name);
    write_all(dir / name, "old");
    REQUIRE(write((dir / name).string(), r).ok());
    CHECK(read_all(dir / name) != "old");
    CHECK(contains(read_all(dir / name), "case-1"));
  }
  CHECK(names_in(dir) == std::vector<std::string>{"r.csv", "r.html", "r.json", "r.xml"});
  auto back = read_json_report((dir / "r.json").string());
  REQUIRE_MESSAGE(back.ok(), back.error().describe());
  CHECK(back->cases.size() == 2);

  // The tuning file too.
  TuningTable table;
  table.entries.push_back(TuningEntry{32, 8, 128, 128, 4, 512, 1024, {}});
  REQUIRE(write_tuning_file((dir / "tuning.json").string(), table).ok());
  auto tuning = read_tuning_file((dir / "tuning.json").string());
  REQUIRE_MESSAGE(tuning.ok(), tuning.error().describe());
  CHECK(tuning->entries.size() == 1);
  CHECK(names_in(dir).size() == 5);
}

TEST_CASE("a report cut short, or empty, is refused by name as truncated") {
  const fs::path dir = scratch().path / "truncated";
  fs::create_directories(dir);
  const std::string whole = to_json(small_report()).dump(2) + "\n";
  // Every cut of the report (the trailing newline aside) is refused.
  int refused = 0;
  const fs::path file = dir / "cut.json";
  for (std::size_t n = 0; n + 1 < whole.size(); ++n) {
    write_all(file, whole.substr(0, n));
    auto r = read_json_report(file.string());
    CAPTURE(n);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::InvalidInput);
    const std::string said = r.error().describe();
    CHECK(contains(said, file.string()));
    const bool blank = whole.substr(0, n).find_first_not_of(" \t\r\n") == std::string::npos;
    CHECK(contains(said, blank ? "an empty file" : "a truncated report"));
    ++refused;
  }
  CHECK(refused > 100);
  // Garbage after a whole report, or in its middle, is "not JSON", not truncation.
  write_all(file, whole + "x");
  CHECK(contains(read_json_report(file.string()).error().describe(), "not JSON"));
  std::string broken = whole;
  broken[broken.size() / 2] = '#';
  write_all(file, broken);
  CHECK(contains(read_json_report(file.string()).error().describe(), "not JSON"));
  write_all(file, whole);
  CHECK(read_json_report(file.string()).ok());
}
