// Running the real binary from a CLI test: the scratch folder, one run with
// its exit code, stdout and stderr. Needs PAGECHECK_BIN and CLI_WORK_DIR
// (compile definitions of the test target, tests/cli/CMakeLists.txt).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cli_test {

namespace fs = std::filesystem;

struct Result {
  int rc = -1;
  std::string out;
  std::string err;
};

inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The test's scratch folder, emptied on first use.
inline fs::path work_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::path(CLI_WORK_DIR);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// Runs `pagecheck ARGS` (ARGS already shell-quoted) in the scratch folder;
// `env` (e.g. "NAME=value") is set for that run only.
inline Result run_tool(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const fs::path out = work_dir() / ("stdout." + std::to_string(counter));
  const fs::path err = work_dir() / ("stderr." + std::to_string(counter));
  ++counter;
  const std::string cmd = "cd '" + work_dir().string() + "' && " + (env.empty() ? "" : "env " + env + " ") + "'" +
                          std::string(PAGECHECK_BIN) + "' " + args + " > '" + out.string() + "' 2> '" + err.string() +
                          "'";
  const int status = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace cli_test
