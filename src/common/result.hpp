// Errors as values below the CLI: every fallible internal call returns Result<T>.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace utramp {

enum class Errc : uint8_t {
  invalid_argument,
  not_found,
  busy,
  out_of_range,
  not_instruction_boundary,
  too_small,
  too_big,
  unsupported,
  bytes_mismatch,
  not_executable,
  no_memory,
  io,
  bad_format,
};

std::string_view errc_name(Errc e) noexcept;

struct Error {
  Errc code;
  std::string message;
};

// Minimal std::expected stand-in (C++20 has none).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Error err) : v_(std::in_place_index<1>, std::move(err)) {}

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error err) : err_(std::move(err)), ok_(false) {}

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const Error& error() const& { return err_; }
  Error&& error() && { return std::move(err_); }

 private:
  Error err_{};
  bool ok_ = true;
};

inline Error make_error(Errc code, std::string message) { return Error{code, std::move(message)}; }

}  // namespace utramp

// Propagate an error from an expression returning Result<...>.
#define UTRAMP_TRY(expr)                                  \
  do {                                                    \
    auto&& utramp_try_r_ = (expr);                        \
    if (!utramp_try_r_.ok()) return std::move(utramp_try_r_).error(); \
  } while (0)
