#include "test_faults.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

namespace pagecheck::app {

Expected<std::optional<TestFault>> test_fault_from_environment() {
  const char* text = std::getenv("PAGECHECK_TEST_FAULT");
  if (text == nullptr || *text == '\0') return std::optional<TestFault>{};
  const std::string value = text;
  const auto kind_at = value.rfind(':');
  const auto path_at = kind_at == std::string::npos || kind_at == 0 ? std::string::npos : value.rfind(':', kind_at - 1);
  if (path_at == std::string::npos || path_at == 0)
    return usage_error(fmt::format("PAGECHECK_TEST_FAULT='{}' is not CASE:PATH:KIND (a test hook, docs/cli.md)", value));
  TestFault f;
  f.case_name = value.substr(0, path_at);
  f.path = value.substr(path_at + 1, kind_at - path_at - 1);
  const std::string kind = value.substr(kind_at + 1);
  if (kind == "abort") f.kind = FaultKind::Abort;
  else if (kind == "segv") f.kind = FaultKind::Segv;
  else if (kind == "hang") f.kind = FaultKind::Hang;
  else if (kind == "context") f.kind = FaultKind::Context;
  else
    return usage_error(
        fmt::format("PAGECHECK_TEST_FAULT='{}': '{}' is not a fault; use abort, segv, hang or context", value, kind));
  return std::optional<TestFault>(f);
}

bool inject_test_fault(const std::string& case_name, const std::string& path) {
  static const std::optional<TestFault> fault = [] {
    auto f = test_fault_from_environment();
    return f.ok() ? *f : std::nullopt;  // main refused a malformed one
  }();
  if (!fault || fault->case_name != case_name || fault->path != path) return false;
  switch (fault->kind) {
    case FaultKind::Abort: std::abort();
    case FaultKind::Segv:
      ::signal(SIGSEGV, SIG_DFL);
      ::raise(SIGSEGV);
      std::_Exit(139);
    case FaultKind::Hang:
      for (;;) ::pause();
    case FaultKind::Context: return true;
  }
  return false;
}

}  // namespace pagecheck::app
