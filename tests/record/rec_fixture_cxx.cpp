// The C++ program of the end-to-end tests (g++ and clang++, -O0 and -O2, with
// -fpatchable-function-entry=5): classes and namespaces (demangled names), and an
// exception thrown three traced frames deep and caught two frames up, so that the
// frames it unwinds show exits marked as unwound. See rec_fixture.c for FX.
#include <cstdio>
#include <stdexcept>

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

}  // namespace shop

int main() {
  shop::Cart cart;
  cart.add(3);
  cart.add(4);
  const int caught = shop::try_it(7);
  std::printf("total %d, caught %d\n", cart.total(), caught);
  return 0;
}
