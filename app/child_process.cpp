#include "child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

extern char** environ;

namespace pagecheck::app {

std::vector<std::string> args_without(const std::vector<std::string>& args, const std::set<std::string>& with_value,
                                      const std::set<std::string>& flags) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    const std::string name = word.substr(0, word.find('='));
    if (with_value.count(name)) {
      if (word.find('=') == std::string::npos) ++i;  // its value is the next word
      continue;
    }
    if (flags.count(word)) continue;
    out.push_back(word);
  }
  return out;
}

std::vector<std::string> child_environment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                      [&](const std::string& o) { return o.compare(0, name.size() + 1, name + "=") == 0; });
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

namespace {

std::vector<char*> c_strings(std::vector<std::string>& words) {
  std::vector<char*> out;
  for (auto& w : words) out.push_back(w.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

Expected<pid_t> spawn_self(std::vector<std::string> argv, std::vector<std::string> env,
                           const std::filesystem::path& stdout_file, const std::filesystem::path& stderr_file) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (!stdout_file.empty())
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!stderr_file.empty())
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // The parent blocks SIGINT and SIGTERM (interrupts.hpp); a child must not
  // inherit that, nor a handler.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  auto args = c_strings(argv);
  auto envp = c_strings(env);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return runtime_error(fmt::format("cannot start a worker: {}", std::strerror(rc)), "/proc/self/exe");
  return pid;
}

Expected<std::filesystem::path> make_child_folder(const std::string& prefix, const std::string& what_for) {
  std::error_code ec;
  std::string pattern = (std::filesystem::temp_directory_path(ec) / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    return runtime_error(fmt::format("cannot make a folder for {}: {}", what_for, std::strerror(errno)), pattern);
  return std::filesystem::path(pattern);
}

ChildExit wait_child(pid_t pid, bool block) {
  ChildExit e;
  int status = 0;
  pid_t got = 0;
  while ((got = ::waitpid(pid, &status, block ? 0 : WNOHANG)) < 0) {
    if (errno != EINTR) {
      e.code = exit_code::kRuntime;
      e.failure = fmt::format("waiting for it failed: {}", std::strerror(errno));
      return e;
    }
  }
  if (got == 0) {
    e.running = true;
    return e;
  }
  if (WIFEXITED(status)) {
    e.code = WEXITSTATUS(status);
  } else {
    e.code = exit_code::kRuntime;
    e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    e.failure = e.signal != 0 ? fmt::format("killed by signal {} ({})", e.signal, strsignal(e.signal))
                              : "ended abnormally";
  }
  return e;
}

}  // namespace pagecheck::app
