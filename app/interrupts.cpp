#include "interrupts.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>

#include <fmt/format.h>

namespace pagecheck::app {
namespace {

std::atomic<int> g_signal{0};
std::mutex g_mutex;  // guards g_on_signal; held while it runs
std::function<std::optional<int>(int)> g_on_signal;

void watch(sigset_t watched) {
  int signo = 0;
  while (sigwait(&watched, &signo) != 0) {
  }
  g_signal = signo;
  // From here a second signal ends the process: the default action, taken by
  // this thread, the only one that does not block it.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : {SIGINT, SIGTERM})
    if (sigismember(&watched, s)) sigaction(s, &dfl, nullptr);
  pthread_sigmask(SIG_UNBLOCK, &watched, nullptr);

  std::optional<int> code = interrupted_exit_code(signo);
  {
    std::lock_guard lock(g_mutex);
    if (g_on_signal) code = g_on_signal(signo);
  }
  if (!code) {
    for (;;) ::pause();  // the program finishes by itself, or a second signal ends it
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(*code);
}

}  // namespace

int interrupted_exit_code(int signo) { return 128 + signo; }

std::string signal_label(int signo) {
  switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return fmt::format("signal {}", signo);
  }
}

void watch_interrupts() {
  sigset_t watched;
  sigemptyset(&watched);
  for (int s : {SIGINT, SIGTERM}) {
    struct sigaction current {};
    if (sigaction(s, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaddset(&watched, s);
  }
  if (sigisemptyset(&watched)) return;
  pthread_sigmask(SIG_BLOCK, &watched, nullptr);
  try {
    std::thread(watch, watched).detach();
  } catch (const std::system_error&) {
    // No thread to be had: the signals end the process as before.
    pthread_sigmask(SIG_UNBLOCK, &watched, nullptr);
  }
}

InterruptScope::InterruptScope(std::function<std::optional<int>(int)> on_signal) {
  std::lock_guard lock(g_mutex);
  g_on_signal = std::move(on_signal);
}

InterruptScope::~InterruptScope() {
  std::lock_guard lock(g_mutex);
  g_on_signal = nullptr;
}

int interrupt_signal() { return g_signal.load(); }

}  // namespace pagecheck::app
