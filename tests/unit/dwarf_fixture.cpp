// C++ signatures for dwarf_test.cpp: classes passed by value or by invisible reference,
// member functions (the artificial `this`), references, member pointers, templates,
// overloads. Built by g++ and clang++ at -O0 and -O2 (see dwarf.cmake).
#include <cstdint>
#include <cstdlib>

#define API __attribute__((noinline, visibility("default")))

volatile long sink;

struct Trivial { int a; double b; };
struct WithDtor {  // user-provided destructor: by reference
  int a;
  ~WithDtor() { sink = a; }
};
struct WithCopy {  // user-provided copy constructor: by reference
  int a;
  explicit WithCopy(int x);
  WithCopy(const WithCopy& o) : a(o.a + 1) {}
};
struct Defaulted {  // defaulted copy constructor: trivial, in registers
  int a;
  explicit Defaulted(int x);
  Defaulted(const Defaulted&) = default;
};
struct NoCopy {  // every copy/move constructor deleted: by reference
  int a;
  explicit NoCopy(int x);
  NoCopy(const NoCopy&) = delete;
};
struct MoveOnly {  // defaulted move, implicitly deleted copy: trivial, in registers
  int a;
  explicit MoveOnly(int x);
  MoveOnly(MoveOnly&&) = default;
};
// clang describes a class with a user-declared constructor only where one of them is
// emitted ("constructor homing"): define them here, out of line.
WithCopy::WithCopy(int x) : a(x) {}
Defaulted::Defaulted(int x) : a(x) {}
NoCopy::NoCopy(int x) : a(x) {}
MoveOnly::MoveOnly(int x) : a(x) {}

struct Virt {  // dynamic class (key function below): by reference
  virtual int f();
  int a;
};
int Virt::f() { return a; }
struct Remote {  // key function elsewhere: only declared in this file's debug info
  virtual int k();
  int a;
};
struct HasMember { WithDtor w; };  // a member not trivial for calls: by reference
struct Base { int a; };
struct Derived : Base { float f; };
struct Empty {};
enum class Small : std::uint8_t { a, b };

struct Obj {
  int v;
  int get(int x) const;
  static int st(int x);
  WithDtor make() const;
  Trivial pair(double d);
};
API int Obj::get(int x) const { return v + x; }
API int Obj::st(int x) { return x; }
API WithDtor Obj::make() const { return WithDtor{v}; }
API Trivial Obj::pair(double d) { return Trivial{v, d}; }

API Trivial t_trivial(Trivial t, Base b, Derived d) {
  t.a += b.a + static_cast<int>(d.f);
  return t;
}
API WithDtor t_dtor(WithDtor w, int x) {
  w.a += x;
  return w;
}
API int t_copy(WithCopy c, Defaulted d, MoveOnly m) { return c.a + d.a + m.a; }
API int t_nocopy(NoCopy n) { return n.a; }
API int t_virt(Virt v) { return v.a; }
API int t_member(HasMember h) { return h.w.a; }
API int t_remote(Remote r) { return r.a; }
API int t_empty(Empty e, int x) {
  (void)e;
  return x;
}
API int t_refs(int& a, const Trivial& t, Trivial&& r) { return a + t.a + r.a; }
API long t_memptr(int Obj::*pm, int (Obj::*pmf)(int) const) {
  Obj o{1};
  return o.*pm + (o.*pmf)(1);
}
API void t_null(decltype(nullptr) p, Small s) { sink = static_cast<long>(s) + (p == nullptr); }
[[noreturn]] API void t_noreturn(int code) { std::exit(code); }

namespace ns {
API double scaled(double x, float k) { return x * k; }
}  // namespace ns

API int over(int x) { return x; }
API double over(double x) { return x; }

template <class T>
API T twice(T x) {
  return x + x;
}
template double twice<double>(double);

template <class... A>
API int count(A... a) {
  return static_cast<int>(sizeof...(a));
}
template int count<int, double, char>(int, double, char);
