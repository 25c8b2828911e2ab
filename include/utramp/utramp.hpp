// utramp: the typed C++ layer over utramp.h.
//
// The target's signature comes from its function pointer type, and a program whose
// parameters do not match is refused at compile time:
//
//   int parse(const char* s, size_t n);
//   auto l1 = utramp::fentry(&parse, [](const char* s, size_t n) { ... });
//   auto l2 = utramp::fexit(&parse, [](const char* s, size_t n, int ret) { ... });
//   auto l3 = utramp::fmod_ret(&parse, [](const char* s, size_t n) -> int { return -EINVAL; });
//   auto l4 = utramp::freplace(&parse, &parse_v2);
//
// Links detach when destroyed (or with .detach()); the program object (the lambda and
// what it captures) is destroyed as soon as the detach returns, when no thread runs it
// any more. Errors throw utramp::error. The same rules as utramp.h: attach, detach and
// destroy links from ordinary thread code, never from inside a program or a signal
// handler. One Link is one object: don't use the same Link from two threads at once.
// Argument types: integers, enums, pointers, references, float, double, long double,
// __int128, and trivially copyable structs for which utramp::abi_classes<T> is
// specialised (the SysV classes of each eightbyte, e.g. "is" for {long; double;}).
#ifndef UTRAMP_UTRAMP_HPP
#define UTRAMP_UTRAMP_HPP

#include <utramp/utramp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace utramp {

class error : public std::system_error {
 public:
  error(int err, const std::string& what) : std::system_error(err, std::generic_category(), what) {}
};

// Specialise for a struct passed by value: a string of one class letter per eightbyte
// ("i" INTEGER, "s" SSE) for structs of at most 16 bytes passed in registers, or "m"
// for one passed in memory.
template <class T>
struct abi_classes;

namespace detail {

template <class T>
inline constexpr bool always_false = false;

template <class T>
struct arg_code {
  using U = std::remove_cv_t<std::remove_reference_t<T>>;
  static std::string get() {
    if constexpr (std::is_reference_v<T> || std::is_pointer_v<U> || std::is_member_pointer_v<U> ||
                  std::is_null_pointer_v<U>) {
      return "ptr";
    } else if constexpr (std::is_same_v<U, long double>) {
      return "f80";
    } else if constexpr (std::is_same_v<U, float>) {
      return "f32";
    } else if constexpr (std::is_same_v<U, double>) {
      return "f64";
    } else if constexpr (std::is_same_v<U, __int128> || std::is_same_v<U, unsigned __int128>) {
      return "i128";
    } else if constexpr (std::is_integral_v<U> || std::is_enum_v<U>) {
      return (std::is_signed_v<U> ? "i" : "u") + std::to_string(sizeof(U) * 8);
    } else if constexpr (std::is_class_v<U> && std::is_trivially_copyable_v<U>) {
      static_assert(sizeof(abi_classes<U>) > 0,
                    "utramp: specialise utramp::abi_classes<T> for a struct passed by value");
      const std::string c = abi_classes<U>::value;
      if (c == "m") return "m" + std::to_string(sizeof(U));
      return "s" + std::to_string(sizeof(U)) + ":" + c;
    } else {
      static_assert(always_false<T>, "utramp: argument type not supported by the typed API");
      return "";
    }
  }
  // ctx slots the argument takes.
  static constexpr int slots() {
    if constexpr (std::is_reference_v<T> || std::is_scalar_v<U>) {
      return (std::is_same_v<U, __int128> || std::is_same_v<U, unsigned __int128>) ? 2 : 1;
    } else if constexpr (std::is_class_v<U>) {
      return sizeof(U) > 16 ? 1 : (sizeof(U) > 8 ? 2 : 1);
    } else {
      return 1;
    }
  }
};

template <class T>
std::string ret_code() {
  if constexpr (std::is_void_v<T>) return "void";
  else return arg_code<T>::get();
}

template <class R, class... A>
std::string signature() {
  std::string s;
  ((s += (s.empty() ? "" : ",") + arg_code<A>::get()), ...);
  return s + " -> " + ret_code<R>();
}

// Reads argument T from ctx slot(s) starting at `i`.
template <class T>
T read_arg(const uint64_t* ctx, int i) {
  using U = std::remove_cv_t<std::remove_reference_t<T>>;
  if constexpr (std::is_reference_v<T>) {
    return *reinterpret_cast<U*>(ctx[i]);
  } else if constexpr (std::is_same_v<U, long double> || (std::is_class_v<U> && sizeof(U) > 16)) {
    U v;
    std::memcpy(&v, reinterpret_cast<const void*>(ctx[i]), sizeof v);  // passed in memory
    return v;
  } else {
    U v;
    std::memcpy(&v, &ctx[i], sizeof v);  // zero-extended slot(s), eightbytes in order
    return v;
  }
}

template <class R>
R read_ret(const uint64_t* ctx) {
  R v;
  const uint64_t* slot = &ctx[utramp_get_func_arg_cnt(ctx)];
  if constexpr (std::is_class_v<R> && sizeof(R) > 16)
    std::memcpy(&v, reinterpret_cast<const void*>(*slot), sizeof v);  // the hidden pointer
  else
    std::memcpy(&v, slot, sizeof v);
  return v;
}

template <class... A, class F, size_t... I>
decltype(auto) apply_ctx(F& f, const uint64_t* ctx, std::index_sequence<I...>) {
  constexpr int slots[] = {arg_code<A>::slots()..., 0};
  int offs[sizeof...(A) + 1] = {};
  for (size_t k = 1; k <= sizeof...(A); ++k) offs[k] = offs[k - 1] + slots[k - 1];
  return f(read_arg<A>(ctx, offs[I])...);
}

template <class P>
P& self(const uint64_t* ctx) {
  return *reinterpret_cast<P*>(utramp_get_attach_cookie(ctx));
}

template <class P, class R, class... A>
uint64_t fentry_thunk(uint64_t* ctx) noexcept {
  apply_ctx<A...>(self<P>(ctx), ctx, std::index_sequence_for<A...>{});
  return 0;
}

template <class P, class R, class... A>
uint64_t fexit_thunk(uint64_t* ctx) noexcept {
  P& p = self<P>(ctx);
  if constexpr (std::is_void_v<R>) {
    apply_ctx<A...>(p, ctx, std::index_sequence_for<A...>{});
  } else {
    const R r = read_ret<R>(ctx);
    auto with_ret = [&](auto&&... args) { p(std::forward<decltype(args)>(args)..., r); };
    apply_ctx<A...>(with_ret, ctx, std::index_sequence_for<A...>{});
  }
  return 0;
}

template <class P, class R, class... A>
uint64_t fmod_ret_thunk(uint64_t* ctx) noexcept {
  const auto r = apply_ctx<A...>(self<P>(ctx), ctx, std::index_sequence_for<A...>{});
  uint64_t out = 0;
  std::memcpy(&out, &r, sizeof r < sizeof out ? sizeof r : sizeof out);
  return out;
}

}  // namespace detail

// An attachment. Move-only; detaches when destroyed.
class Link {
 public:
  Link() = default;
  Link(utramp_link* l, std::shared_ptr<void> prog) : link_(l), prog_(std::move(prog)) {}
  Link(Link&& o) noexcept : link_(std::exchange(o.link_, nullptr)), prog_(std::move(o.prog_)) {}
  Link& operator=(Link&& o) noexcept {
    if (this != &o) {
      reset();
      link_ = std::exchange(o.link_, nullptr);
      prog_ = std::move(o.prog_);
    }
    return *this;
  }
  ~Link() { reset(); }
  explicit operator bool() const { return link_ != nullptr; }

  // Detaches now, then destroys the program object (utramp_link_detach returns only once
  // no thread runs the program). On failure throws, and the link stays attached.
  void detach() {
    if (!link_) return;
    if (int r = utramp_link_detach(link_); r != 0) throw error(-r, utramp_last_error());
    link_ = nullptr;
    prog_.reset();
  }

  // What the link is and what its program did (utramp_link_get_info).
  utramp_link_info info() const {
    UTRAMP_OPTS(utramp_link_info, i);
    if (!link_) throw error(EINVAL, "utramp::Link::info: the link is empty");
    if (int r = utramp_link_get_info(link_, &i); r != 0) throw error(-r, utramp_last_error());
    return i;
  }

 private:
  // A destructor cannot throw: a link that fails to detach (from inside a program, say)
  // stays attached, so its program may still run and its object is kept alive for good;
  // the failure is written to stderr rather than lost.
  void reset() noexcept {
    if (!link_) return;
    if (utramp_link_detach(link_) != 0) {
      std::fprintf(stderr, "utramp: a Link was destroyed but could not be detached: %s; it stays "
                   "attached and its program is kept\n", utramp_last_error());
      new std::shared_ptr<void>(std::move(prog_));  // deliberately never freed
    }
    link_ = nullptr;
    prog_.reset();
  }
  utramp_link* link_ = nullptr;
  std::shared_ptr<void> prog_;
};

namespace detail {

template <class R, class... A, class P>
Link attach(R (*func)(A...), utramp_attach_type type, utramp_prog_t thunk, P&& prog) {
  using D = std::decay_t<P>;
  auto holder = std::make_shared<D>(std::forward<P>(prog));
  const std::string sig = signature<R, A...>();
  UTRAMP_OPTS(utramp_attach_opts, o, .cookie = reinterpret_cast<uint64_t>(holder.get()),
              .signature = sig.c_str());
  utramp_link* l = utramp_attach(reinterpret_cast<void*>(func), type, thunk, &o);
  if (!l) throw error(errno, utramp_last_error());
  return Link(l, std::move(holder));
}

}  // namespace detail

// prog(args...)
template <class R, class... A, class P>
Link fentry(R (*func)(A...), P&& prog) {
  static_assert(std::is_invocable_v<std::decay_t<P>&, A...>,
                "utramp::fentry: the program must take exactly the function's parameters");
  using D = std::decay_t<P>;
  return detail::attach(func, UTRAMP_FENTRY, &detail::fentry_thunk<D, R, A...>, std::forward<P>(prog));
}

// prog(args..., ret) (prog(args...) for a void function)
template <class R, class... A, class P>
Link fexit(R (*func)(A...), P&& prog) {
  using D = std::decay_t<P>;
  if constexpr (std::is_void_v<R>)
    static_assert(std::is_invocable_v<D&, A...>,
                  "utramp::fexit: the program must take the function's parameters");
  else
    static_assert(std::is_invocable_v<D&, A..., R>,
                  "utramp::fexit: the program must take the function's parameters, then its "
                  "return value");
  return detail::attach(func, UTRAMP_FEXIT, &detail::fexit_thunk<D, R, A...>, std::forward<P>(prog));
}

// prog(args...) -> R: non-zero skips the body and becomes the return value.
template <class R, class... A, class P>
Link fmod_ret(R (*func)(A...), P&& prog) {
  using D = std::decay_t<P>;
  static_assert(std::is_integral_v<R> || std::is_pointer_v<R> || std::is_enum_v<R>,
                "utramp::fmod_ret: the function must return an integer or a pointer");
  static_assert(std::is_invocable_r_v<R, D&, A...>,
                "utramp::fmod_ret: the program must take the function's parameters and return "
                "its return type");
  return detail::attach(func, UTRAMP_FMOD_RET, &detail::fmod_ret_thunk<D, R, A...>,
                        std::forward<P>(prog));
}

// Replaces the function with another of exactly its type.
template <class R, class... A>
Link freplace(R (*func)(A...), std::type_identity_t<R (*)(A...)> replacement) {
  utramp_link* l = utramp_attach_replace(reinterpret_cast<void*>(func),
                                         reinterpret_cast<void*>(replacement), nullptr);
  if (!l) throw error(errno, utramp_last_error());
  return Link(l, nullptr);
}

}  // namespace utramp

#endif  // UTRAMP_UTRAMP_HPP
