// The C++ program of the end-to-end tests (g++ and clang++, -O0 and -O2, with
// -fpatchable-function-entry=5): classes and namespaces (demangled names), and an
// exception thrown three traced frames deep and caught two frames up, so that the
// frames it unwinds show exits marked as unwound. With argument `names`: names that
// simple demanglers get wrong (a class template's members and operators, an anonymous
// namespace, an ABI tag), the same in both compilers' builds. See rec_fixture.c for FX.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__clang__)
#define FX __attribute__((noinline, used))
#else
#define FX __attribute__((noipa, used))
#endif

volatile long sink;

namespace shop {

class Cart {
 public:
  FX Cart();  // out of line in every build (clang -O0 would emit an implicit one)
  FX void add(int price);
  FX int total() const;

 private:
  int sum_ = 0;
};

Cart::Cart() { sink = 0; }

void Cart::add(int price) {
  sink = price;
  sum_ += price;
}

int Cart::total() const {
  sink = sum_;
  return sum_;
}

FX void raise_it(int code) {
  sink = code;
  throw std::runtime_error("out of stock");
}

FX void inner(int code) {
  sink = code;
  raise_it(code);
  sink = code;
}

FX void thrower(int code) {
  sink = code;
  inner(code);
  sink = code;
}

FX int try_it(int code) {
  sink = code;
  try {
    thrower(code);
  } catch (const std::exception& e) {
    sink = e.what()[0];
    return 1;
  }
  return 0;
}

template <class T>
struct Box {
  T v;
  FX T get() const;
  FX bool operator<(const Box& o) const;
  FX T operator()(T x) const;
};

template <class T>
T Box<T>::get() const {
  sink = v;
  return v;
}

template <class T>
bool Box<T>::operator<(const Box& o) const {
  sink = v;
  return v < o.v;
}

template <class T>
T Box<T>::operator()(T x) const {
  sink = x;
  return v + x;
}

template struct Box<int>;

namespace {

FX int hidden(int x) {
  sink = x;
  return x + 1;
}

}  // namespace

FX std::string label(int n) {  // std::string: mangled with the [abi:cxx11] tag
  sink = n;
  return std::string(static_cast<size_t>(n), 'x');
}

FX int run_names() {
  sink = 0;
  const Box<int> one{1}, two{2};
  const int r = one.get() + (one < two) + one(3) + hidden(4) + static_cast<int>(label(2).size());
  sink = 0;
  return r == 13 ? 0 : 1;
}

}  // namespace shop

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "names") == 0) return shop::run_names();
  shop::Cart cart;
  cart.add(3);
  cart.add(4);
  const int caught = shop::try_it(7);
  std::printf("total %d, caught %d\n", cart.total(), caught);
  return 0;
}
