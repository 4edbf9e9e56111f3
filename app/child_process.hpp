// Starting this binary again as a child process and waiting for it: the
// shard workers of --workers / --device all (workers.cpp) and the isolated
// worker that runs a case's paths (isolation.cpp).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "pagecheck/status.hpp"

namespace pagecheck::app {

// `args` without the options the parent handles itself: each name in
// `with_value` and its value ("--json F" or "--json=F"), each flag in `flags`.
std::vector<std::string> args_without(const std::vector<std::string>& args, const std::set<std::string>& with_value,
                                      const std::set<std::string>& flags);

// The environment of a child: ours, with `overrides` (NAME=value) replacing.
std::vector<std::string> child_environment(const std::vector<std::string>& overrides);

// Starts /proc/self/exe with `argv` and `env`, stdin from /dev/null, stdout
// and stderr into the files given (empty: the parent's own). The child starts
// with no signal blocked and the default handling of SIGINT and SIGTERM,
// whatever the parent does with them.
Expected<pid_t> spawn_self(std::vector<std::string> argv, std::vector<std::string> env,
                           const std::filesystem::path& stdout_file, const std::filesystem::path& stderr_file);

// A new folder for what the children write, in the temporary folder:
// `prefix`-XXXXXX. The error names what it is `for` ("the workers' reports").
Expected<std::filesystem::path> make_child_folder(const std::string& prefix, const std::string& what_for);

// How a child ended.
struct ChildExit {
  bool running = false;  // wait_child(pid, false): not ended yet
  int code = 0;          // its exit code; 4 when it did not exit normally
  int signal = 0;        // the signal that ended it, 0 when none
  std::string failure;   // why it did not finish normally ("killed by signal 11 (Segmentation fault)")
};
// Waits for `pid` (block: until it ends; else only looks).
ChildExit wait_child(pid_t pid, bool block = true);

}  // namespace pagecheck::app
