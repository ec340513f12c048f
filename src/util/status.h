// Status and Expected<T>: how untrusted input (file bytes, flags, JSON) reports failure.
// Messages say what was wrong, where, and what was expected; callers add context with
// Status::with_context so the user sees "loading model.gguf: tensor 'x': offset ... past end".
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace salvo {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok_status() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Prefixes the message with where it happened; a no-op on success.
  Status with_context(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : state_(std::move(status)) {
    if (std::get<Status>(state_).ok()) std::abort();  // an Expected error must carry a message
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }
  // A reference, so `const std::string& m = e.status().message();` never dangles.
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace salvo

// Propagates a failed Status/Expected out of a function returning Status or Expected<U>.
#define SALVO_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::salvo::Status salvo_status_ = (expr);        \
    if (!salvo_status_.ok()) return salvo_status_; \
  } while (0)

#define SALVO_CONCAT_INNER(a, b) a##b
#define SALVO_CONCAT(a, b) SALVO_CONCAT_INNER(a, b)
#define SALVO_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
#define SALVO_ASSIGN_OR_RETURN(lhs, expr) \
  SALVO_ASSIGN_OR_RETURN_IMPL(SALVO_CONCAT(salvo_expected_, __LINE__), lhs, expr)
