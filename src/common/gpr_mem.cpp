// See gpr_mem.hpp. Each loop moves its pointer through an empty asm statement, so that
// neither GCC's loop distribution nor clang's loop idiom pass recognises a memcpy or
// memset in it and calls the library's.
#include "common/gpr_mem.hpp"

#if defined(__SSE__)
#error "gpr_mem.cpp must be built with -mgeneral-regs-only"
#endif

namespace utramp::gpr {

namespace {

using detail::load;
template <class T>
void store(uint8_t* p, T v) {
  __builtin_memcpy(p, &v, sizeof v);
}
// The last n < 8 bytes as the low bytes of a word.
[[gnu::always_inline]] inline uint64_t tail(const uint8_t* p, size_t n) {
  uint64_t w = 0;
  if (n & 4) w = load<uint32_t>(p + (n & 3));
  if (n & 2) w = (w << 16) | load<uint16_t>(p + (n & 1));
  if (n & 1) w = (w << 8) | p[0];
  return w;
}
template <class P>
void opaque(P*& p) {
  asm("" : "+r"(p));
}

}  // namespace

void copy(void* dst, const void* src, size_t n) noexcept {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (; n >= 8; n -= 8, d += 8, s += 8) {
    opaque(d);
    store(d, load<uint64_t>(s));
  }
  if (n & 4) {
    store(d, load<uint32_t>(s));
    d += 4, s += 4;
  }
  if (n & 2) {
    store(d, load<uint16_t>(s));
    d += 2, s += 2;
  }
  if (n & 1) *d = *s;
}

const void* find(const void* p, uint8_t c, size_t n) noexcept {
  const auto* b = static_cast<const uint8_t*>(p);
  for (; n; --n, ++b) {
    opaque(b);
    if (*b == c) return b;
  }
  return nullptr;
}

void zero(void* dst, size_t n) noexcept {
  auto* d = static_cast<uint8_t*>(dst);
  for (; n >= 8; n -= 8, d += 8) {
    opaque(d);
    store<uint64_t>(d, 0);
  }
  for (; n; --n, ++d) {
    opaque(d);
    *d = 0;
  }
}

namespace detail {

bool equal_bytes(const void* a, const void* b, size_t n) noexcept {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (; n >= 8; n -= 8, x += 8, y += 8) {
    opaque(x);
    if (load<uint64_t>(x) != load<uint64_t>(y)) return false;
  }
  return tail(x, n) == tail(y, n);
}

uint64_t hash_bytes(const void* p, size_t n) noexcept {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t h = kSeed ^ n;
  for (; n >= 8; n -= 8, b += 8) {
    opaque(b);
    h = (h ^ load<uint64_t>(b)) * kPrime;
    h ^= h >> 29;
  }
  if (n) h = (h ^ tail(b, n)) * kPrime;
  return mix(h);
}

}  // namespace detail

}  // namespace utramp::gpr
