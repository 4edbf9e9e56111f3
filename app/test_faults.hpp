// A test hook, not a feature: PAGECHECK_TEST_FAULT=CASE:PATH:KIND makes path
// PATH misbehave on case CASE as a broken kernel would, so that the isolation
// of a run (isolation.hpp) can be tested without a GPU (docs/cli.md
// "Environment"). KIND: abort (the process aborts), segv (it dies of
// SIGSEGV), hang (the path never returns), context (the path fails and
// leaves the CUDA context unusable, as an out-of-bounds write does).
#pragma once

#include <optional>
#include <string>

#include "pagecheck/status.hpp"

namespace pagecheck::app {

enum class FaultKind { Abort, Segv, Hang, Context };

struct TestFault {
  std::string case_name;  // may hold ':'; PATH and KIND are the last two fields
  std::string path;
  FaultKind kind = FaultKind::Abort;
};

// PAGECHECK_TEST_FAULT parsed; nullopt when unset; a usage error naming the
// variable when malformed.
Expected<std::optional<TestFault>> test_fault_from_environment();

// Called just before `path` runs on case `case_name`: abort, segv and hang
// happen here (hang never returns); returns true for a context fault, which
// the caller reports as the path's error and a lost context.
bool inject_test_fault(const std::string& case_name, const std::string& path);

}  // namespace pagecheck::app
