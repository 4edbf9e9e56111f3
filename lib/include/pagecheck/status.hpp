// One error model for the library boundary: an Error carries a code (which
// maps to the CLI's exit code), a message that names the thing at fault, and
// where it came from. Expected<T> holds either a value or an Error.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace pagecheck {

enum class ErrorCode {
  Usage,         // exit 2: the command line is wrong
  InvalidInput,  // exit 3: a file that does not parse, a case that does not validate
  Runtime,       // exit 4: I/O, CUDA, anything that failed while running
};

// The CLI's documented exit codes (docs/cli.md).
namespace exit_code {
inline constexpr int kPass = 0;
inline constexpr int kFail = 1;
inline constexpr int kUsage = 2;
inline constexpr int kInvalidInput = 3;
inline constexpr int kRuntime = 4;
}  // namespace exit_code

int exit_code_for(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::Runtime;
  std::string message;
  std::string where;  // file, tensor or component at fault; may be empty

  // "where: message", or just the message.
  std::string describe() const { return where.empty() ? message : where + ": " + message; }
};

inline Error invalid_input(std::string message, std::string where = {}) {
  return Error{ErrorCode::InvalidInput, std::move(message), std::move(where)};
}
inline Error runtime_error(std::string message, std::string where = {}) {
  return Error{ErrorCode::Runtime, std::move(message), std::move(where)};
}
inline Error usage_error(std::string message, std::string where = {}) {
  return Error{ErrorCode::Usage, std::move(message), std::move(where)};
}

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Expected(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Expected<void>;

}  // namespace pagecheck

// Propagate an error from an expression returning Status or Expected<T>.
#define PC_TRY(expr)                                \
  do {                                              \
    auto&& pc_try_result_ = (expr);                 \
    if (!pc_try_result_.ok()) return pc_try_result_.error(); \
  } while (0)
