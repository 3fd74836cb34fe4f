// The one check at the libbpf boundary. libbpf 1.x returns a negative errno (or NULL with errno
// set) and prints its own explanation through a callback; check() turns both into a Status whose
// message names the call, errno's text and libbpf's last warning:
//   "cannot attach tracepoint/sched/x: No such file or directory (libbpf: prog 'on_x': ...)".
// A Status is a value (NCCLCHECK's file/line travel in it as a SourceLocation for the log), so
// a failed probe becomes probe_up=0 with that message, never an exception.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace bpftrain::collector::loader {

// std::source_location's shape from the builtins GCC and Clang share: Clang 14 with libstdc++ 12
// has no <source_location> (it needs __builtin_source_location, which Clang 15 added).
struct SourceLocation {
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          unsigned line = __builtin_LINE()) {
    return {file, line};
  }
  const char* file_name() const { return file_; }
  unsigned line() const { return line_; }
  const char* file_ = "";
  unsigned line_ = 0;
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status error(std::string message, SourceLocation where = SourceLocation::current()) {
    Status s;
    s.message_ = std::move(message);
    s.where_ = where;
    s.ok_ = false;
    return s;
  }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  // In words a user can act on; empty when ok.
  const std::string& message() const { return message_; }
  // "file:line" of the check that failed, for log lines.
  std::string where() const;
  int err() const { return err_; }  // the errno of a failed call, 0 when unknown
  Status& withErrno(int err) {
    err_ = err;
    return *this;
  }

 private:
  bool ok_ = true;
  int err_ = 0;
  std::string message_;
  SourceLocation where_;
};

// A value or the Status that says why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit, like std::expected
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  // From anything that converts to T (a unique_ptr of a derived class).
  template <typename U>
  requires(std::is_convertible_v<U&&, T> && !std::is_same_v<std::remove_cvref_t<U>, T> &&
           !std::is_same_v<std::remove_cvref_t<U>, Status>) Result(U&& value)
      : value_(T(std::forward<U>(value))) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  T&& take() { return std::move(*value_); }

 private:
  std::optional<T> value_;
  Status status_;
};

// Propagates a failed Status to the caller (the NCCLCHECK shape, as a value).
#define BPFTRAIN_TRY(expr)                                                      \
  do {                                                                          \
    if (::bpftrain::collector::loader::Status s_ = (expr); !s_.ok()) return s_; \
  } while (0)

// Routes libbpf's messages into the check (call once before any libbpf use; idempotent).
// BPFTRAIN_LIBBPF_DEBUG=1 prints every libbpf message to stderr as well.
void captureLibbpfMessages();
// libbpf's last warning since the previous call, consumed ("" if none).
std::string takeLibbpfMessage();
std::string errnoText(int err);

// "<what>: <errno text> (<libbpf's last message>)" for a failed call with this errno.
Status failedCall(std::string_view what, int err, SourceLocation where = SourceLocation::current());

// Runs one libbpf call that returns int (0 or more on success, -errno on failure).
template <typename F>
requires std::is_integral_v<std::invoke_result_t<F>> Status
check(std::string_view what, F&& call, SourceLocation where = SourceLocation::current()) {
  takeLibbpfMessage();  // a stale warning must not explain this call
  const auto rc = call();
  if (rc >= 0) return {};
  return failedCall(what, static_cast<int>(-rc), where);
}

// Runs one libbpf call that returns a pointer (NULL with errno on failure) and stores it in out.
template <typename T, typename F>
requires std::is_convertible_v<std::invoke_result_t<F>, T*> Status
check(std::string_view what, T*& out, F&& call, SourceLocation where = SourceLocation::current()) {
  takeLibbpfMessage();
  errno = 0;
  out = call();
  if (out) return {};
  return failedCall(what, errno ? errno : EINVAL, where);
}

}  // namespace bpftrain::collector::loader
