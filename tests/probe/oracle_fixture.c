/* The probe oracle's fixture: a deterministic program of many kinds of code (a bytecode
 * interpreter with a jump table, sorting with comparators through pointers, hashing,
 * string and number formatting, big numbers, floating point, trees, heaps, hash tables,
 * recursion, an expression parser, and a family of generated mixers), built as a shared
 * library by gcc and clang at -O2. oracle_main() runs all of it and writes a report into
 * the caller's buffer; it calls nothing outside this library but memcpy/memset the
 * compilers may emit, and keeps no state between runs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define NOINLINE __attribute__((noinline))

/* ---- the report -------------------------------------------------------------------- */

typedef struct {
  char* buf;
  size_t cap, len;
} Out;

static void put_char(Out* o, char c) {
  if (o->len + 1 < o->cap) o->buf[o->len] = c;
  o->len++;
}

static void put_str(Out* o, const char* s) {
  while (*s) put_char(o, *s++);
}

static void put_u64(Out* o, uint64_t v, unsigned base) {
  char tmp[72];
  int n = 0;
  do {
    unsigned d = (unsigned)(v % base);
    tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
    v /= base;
  } while (v);
  while (n) put_char(o, tmp[--n]);
}

static void put_i64(Out* o, int64_t v) {
  if (v < 0) {
    put_char(o, '-');
    put_u64(o, (uint64_t)0 - (uint64_t)v, 10);
  } else {
    put_u64(o, (uint64_t)v, 10);
  }
}

static void line(Out* o, const char* name, int64_t v) {
  put_str(o, name);
  put_str(o, " = ");
  put_i64(o, v);
  put_char(o, '\n');
}

static void line_hex(Out* o, const char* name, uint64_t v) {
  put_str(o, name);
  put_str(o, " = 0x");
  put_u64(o, v, 16);
  put_char(o, '\n');
}

/* Prints a double with 6 fractional digits, without libc. */
static void line_f(Out* o, const char* name, double v) {
  put_str(o, name);
  put_str(o, " = ");
  if (v < 0) {
    put_char(o, '-');
    v = -v;
  }
  uint64_t ip = (uint64_t)v;
  put_u64(o, ip, 10);
  put_char(o, '.');
  double frac = v - (double)ip;
  for (int i = 0; i < 6; ++i) {
    frac *= 10;
    int d = (int)frac;
    put_char(o, (char)('0' + d));
    frac -= d;
  }
  put_char(o, '\n');
}

/* ---- a deterministic generator ------------------------------------------------------ */

static uint64_t rng_state;
static uint32_t rng(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

/* ---- a bytecode interpreter ---------------------------------------------------------- */

enum {
  OP_HALT, OP_PUSH, OP_POP, OP_DUP, OP_SWAP, OP_OVER, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD,
  OP_NEG, OP_AND, OP_OR, OP_XOR, OP_SHL, OP_SHR, OP_EQ, OP_LT, OP_GT, OP_JMP, OP_JZ, OP_JNZ,
  OP_LOAD, OP_STORE, OP_INC, OP_DEC, OP_CALL, OP_RET, OP_PRINT, OP_ROT, OP_NOT
};

typedef struct {
  int64_t stack[64];
  int sp;
  int64_t vars[16];
  int calls[16];
  int csp;
  int64_t printed;
  int steps;
} Vm;

static NOINLINE int64_t vm_run(Vm* vm, const int* code, int n) {
  int pc = 0;
  vm->sp = 0;
  vm->csp = 0;
  vm->printed = 0;
  vm->steps = 0;
  while (pc < n && vm->steps < 100000) {
    vm->steps++;
    if (vm->sp < 0 || vm->sp > 60 || vm->csp < 0 || vm->csp > 15) return -2;  /* a bad program */
    int op = code[pc++];
    int64_t a, b;
    switch (op) {
      case OP_HALT: return vm->sp ? vm->stack[vm->sp - 1] : 0;
      case OP_PUSH: vm->stack[vm->sp++] = code[pc++]; break;
      case OP_POP: vm->sp--; break;
      case OP_DUP: vm->stack[vm->sp] = vm->stack[vm->sp - 1]; vm->sp++; break;
      case OP_SWAP: a = vm->stack[vm->sp - 1]; vm->stack[vm->sp - 1] = vm->stack[vm->sp - 2]; vm->stack[vm->sp - 2] = a; break;
      case OP_OVER: vm->stack[vm->sp] = vm->stack[vm->sp - 2]; vm->sp++; break;
      case OP_ADD: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] += b; break;
      case OP_SUB: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] -= b; break;
      case OP_MUL: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] *= b; break;
      case OP_DIV: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] = b ? vm->stack[vm->sp - 1] / b : 0; break;
      case OP_MOD: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] = b ? vm->stack[vm->sp - 1] % b : 0; break;
      case OP_NEG: vm->stack[vm->sp - 1] = -vm->stack[vm->sp - 1]; break;
      case OP_AND: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] &= b; break;
      case OP_OR: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] |= b; break;
      case OP_XOR: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] ^= b; break;
      case OP_SHL: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] <<= (b & 63); break;
      case OP_SHR: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] = (int64_t)((uint64_t)vm->stack[vm->sp - 1] >> (b & 63)); break;
      case OP_EQ: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] = vm->stack[vm->sp - 1] == b; break;
      case OP_LT: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] = vm->stack[vm->sp - 1] < b; break;
      case OP_GT: b = vm->stack[--vm->sp]; vm->stack[vm->sp - 1] = vm->stack[vm->sp - 1] > b; break;
      case OP_JMP: pc = code[pc]; break;
      case OP_JZ: a = vm->stack[--vm->sp]; pc = a == 0 ? code[pc] : pc + 1; break;
      case OP_JNZ: a = vm->stack[--vm->sp]; pc = a != 0 ? code[pc] : pc + 1; break;
      case OP_LOAD: vm->stack[vm->sp++] = vm->vars[code[pc++] & 15]; break;
      case OP_STORE: vm->vars[code[pc++] & 15] = vm->stack[--vm->sp]; break;
      case OP_INC: vm->vars[code[pc++] & 15]++; break;
      case OP_DEC: vm->vars[code[pc++] & 15]--; break;
      case OP_CALL: vm->calls[vm->csp++] = pc + 1; pc = code[pc]; break;
      case OP_RET: pc = vm->calls[--vm->csp]; break;
      case OP_PRINT: vm->printed = vm->printed * 31 + vm->stack[--vm->sp]; break;
      case OP_ROT: a = vm->stack[vm->sp - 3]; vm->stack[vm->sp - 3] = vm->stack[vm->sp - 2]; vm->stack[vm->sp - 2] = vm->stack[vm->sp - 1]; vm->stack[vm->sp - 1] = a; break;
      case OP_NOT: vm->stack[vm->sp - 1] = !vm->stack[vm->sp - 1]; break;
      default: return -1;
    }
  }
  return vm->sp ? vm->stack[vm->sp - 1] : 0;
}

static void test_vm(Out* o) {
  Vm vm;
  /* fib(20) iteratively: v0 = a, v1 = b, v2 = n */
  static const int fib[] = {OP_PUSH, 0, OP_STORE, 0, OP_PUSH, 1, OP_STORE, 1, OP_PUSH, 12,
                            OP_STORE, 2,
                            /* 12: */ OP_LOAD, 2, OP_JZ, 32, OP_LOAD, 0, OP_LOAD, 1, OP_DUP,
                            OP_STORE, 0, OP_ADD, OP_STORE, 1, OP_DEC, 2, OP_JMP, 12, OP_HALT,
                            OP_HALT,
                            /* 32: */ OP_LOAD, 0, OP_HALT};
  line(o, "vm.fib12", vm_run(&vm, fib, (int)(sizeof fib / sizeof fib[0])));
  /* gcd(1071, 462) by subtraction through a subroutine */
  static const int gcd[] = {OP_PUSH, 1071, OP_STORE, 0, OP_PUSH, 462, OP_STORE, 1,
                            /* 8: */ OP_LOAD, 0, OP_LOAD, 1, OP_EQ, OP_JNZ, 42, OP_CALL, 19,
                            OP_JMP, 8,
                            /* 19: */ OP_LOAD, 0, OP_LOAD, 1, OP_GT, OP_JZ, 34, OP_LOAD, 0,
                            OP_LOAD, 1, OP_SUB, OP_STORE, 0, OP_RET,
                            /* 34: */ OP_LOAD, 1, OP_LOAD, 0, OP_SUB, OP_STORE, 1, OP_RET,
                            /* 42: */ OP_LOAD, 0, OP_HALT};
  line(o, "vm.gcd", vm_run(&vm, gcd, (int)(sizeof gcd / sizeof gcd[0])));
  /* A mix of every arithmetic and stack opcode. */
  static const int mix[] = {OP_PUSH, 7, OP_PUSH, 3, OP_OVER, OP_MUL, OP_PUSH, 5, OP_SWAP,
                            OP_SUB, OP_PUSH, 100, OP_ROT, OP_DIV, OP_PUSH, 9, OP_MOD, OP_NEG,
                            OP_PUSH, 255, OP_AND, OP_PUSH, 4, OP_SHL, OP_PUSH, 1, OP_SHR,
                            OP_PUSH, 0x55, OP_XOR, OP_PUSH, 0x100, OP_OR, OP_DUP, OP_PRINT,
                            OP_PUSH, 3, OP_LT, OP_NOT, OP_PRINT, OP_POP, OP_HALT};
  line(o, "vm.mix", vm_run(&vm, mix, (int)(sizeof mix / sizeof mix[0])));
  line(o, "vm.mix.printed", vm.printed);
  line(o, "vm.mix.steps", vm.steps);
}

/* ---- sorting ------------------------------------------------------------------------- */

typedef int (*cmp_fn)(const void*, const void*);

static int cmp_int(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}
static int cmp_int_desc(const void* a, const void* b) { return cmp_int(b, a); }
static int cmp_abs(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  x = x < 0 ? -x : x;
  y = y < 0 ? -y : y;
  return x != y ? (x > y) - (x < y) : cmp_int(a, b);
}

static void swap_bytes(char* a, char* b, size_t n) {
  while (n--) {
    char t = *a;
    *a++ = *b;
    *b++ = t;
  }
}

static NOINLINE void my_qsort(void* base, size_t n, size_t size, cmp_fn cmp) {
  char* b = (char*)base;
  while (n > 1) {
    if (n < 8) {
      for (size_t i = 1; i < n; ++i)
        for (size_t j = i; j > 0 && cmp(b + (j - 1) * size, b + j * size) > 0; --j)
          swap_bytes(b + (j - 1) * size, b + j * size, size);
      return;
    }
    size_t mid = n / 2;
    if (cmp(b, b + mid * size) > 0) swap_bytes(b, b + mid * size, size);
    if (cmp(b + mid * size, b + (n - 1) * size) > 0) swap_bytes(b + mid * size, b + (n - 1) * size, size);
    if (cmp(b, b + mid * size) > 0) swap_bytes(b, b + mid * size, size);
    swap_bytes(b + mid * size, b + (n - 2) * size, size);
    char* pivot = b + (n - 2) * size;
    size_t i = 0, j = n - 2;
    for (;;) {
      while (cmp(b + (++i) * size, pivot) < 0) {}
      while (j > 0 && cmp(b + (--j) * size, pivot) > 0) {}
      if (i >= j) break;
      swap_bytes(b + i * size, b + j * size, size);
    }
    swap_bytes(b + i * size, pivot, size);
    if (i < n - i - 1) {
      my_qsort(b, i, size, cmp);
      b += (i + 1) * size;
      n -= i + 1;
    } else {
      my_qsort(b + (i + 1) * size, n - i - 1, size, cmp);
      n = i;
    }
  }
}

static NOINLINE void merge_sort(int* a, int* tmp, int n) {
  if (n < 2) return;
  int h = n / 2;
  merge_sort(a, tmp, h);
  merge_sort(a + h, tmp, n - h);
  int i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = a[i] <= a[j] ? a[i++] : a[j++];
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  for (i = 0; i < n; ++i) a[i] = tmp[i];
}

static void sift_down(int* a, int start, int end) {
  int root = start;
  while (2 * root + 1 <= end) {
    int child = 2 * root + 1, sw = root;
    if (a[sw] < a[child]) sw = child;
    if (child + 1 <= end && a[sw] < a[child + 1]) sw = child + 1;
    if (sw == root) return;
    int t = a[root];
    a[root] = a[sw];
    a[sw] = t;
    root = sw;
  }
}

static NOINLINE void heap_sort(int* a, int n) {
  for (int s = (n - 2) / 2; s >= 0; --s) sift_down(a, s, n - 1);
  for (int e = n - 1; e > 0; --e) {
    int t = a[e];
    a[e] = a[0];
    a[0] = t;
    sift_down(a, 0, e - 1);
  }
}

static NOINLINE void shell_sort(int* a, int n) {
  static const int gaps[] = {57, 23, 10, 4, 1};
  for (int g = 0; g < 5; ++g) {
    int gap = gaps[g];
    for (int i = gap; i < n; ++i) {
      int t = a[i], j = i;
      for (; j >= gap && a[j - gap] > t; j -= gap) a[j] = a[j - gap];
      a[j] = t;
    }
  }
}

static uint64_t sum_hash(const int* a, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) h = (h ^ (uint32_t)a[i]) * 1099511628211ull;
  return h;
}

static int is_sorted(const int* a, int n, cmp_fn cmp) {
  for (int i = 1; i < n; ++i)
    if (cmp(&a[i - 1], &a[i]) > 0) return 0;
  return 1;
}

static void test_sort(Out* o) {
  enum { N = 32 };
  int a[N], b[N], tmp[N];
  for (int i = 0; i < N; ++i) a[i] = (int)(rng() % 2001) - 1000;
  for (int i = 0; i < N; ++i) b[i] = a[i];
  my_qsort(b, N, sizeof(int), cmp_int);
  line(o, "sort.q.ok", is_sorted(b, N, cmp_int));
  line_hex(o, "sort.q.hash", sum_hash(b, N));
  for (int i = 0; i < N; ++i) b[i] = a[i];
  my_qsort(b, N, sizeof(int), cmp_int_desc);
  line(o, "sort.qdesc.first", b[0]);
  for (int i = 0; i < N; ++i) b[i] = a[i];
  my_qsort(b, N, sizeof(int), cmp_abs);
  line(o, "sort.qabs.ok", is_sorted(b, N, cmp_abs));
  for (int i = 0; i < N; ++i) b[i] = a[i];
  merge_sort(b, tmp, N);
  line_hex(o, "sort.merge.hash", sum_hash(b, N));
  for (int i = 0; i < N; ++i) b[i] = a[i];
  heap_sort(b, N);
  line_hex(o, "sort.heap.hash", sum_hash(b, N));
  for (int i = 0; i < N; ++i) b[i] = a[i];
  shell_sort(b, N);
  line_hex(o, "sort.shell.hash", sum_hash(b, N));
}

/* ---- hashing --------------------------------------------------------------------------- */

static NOINLINE uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  return ~c;
}

/* Table-driven, four bits at a time (a 16-entry table built on each call). */
static NOINLINE uint32_t crc32_table(const uint8_t* p, size_t n) {
  uint32_t table[16];
  for (uint32_t i = 0; i < 16; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 4; ++k) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c = table[(c ^ p[i]) & 15] ^ (c >> 4);
    c = table[(c ^ (p[i] >> 4)) & 15] ^ (c >> 4);
  }
  return ~c;
}

static NOINLINE uint32_t adler32(const uint8_t* p, size_t n) {
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < n; ++i) {
    a = (a + p[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

static NOINLINE uint64_t murmur_mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

static NOINLINE uint32_t fnv1a(const char* s) {
  uint32_t h = 2166136261u;
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h;
}

static void test_hash(Out* o) {
  uint8_t data[96];
  for (int i = 0; i < 96; ++i) data[i] = (uint8_t)(rng() >> 5);
  line_hex(o, "hash.crc.bit", crc32_bitwise(data, 24));
  line_hex(o, "hash.crc.table", crc32_table(data, 96));
  line(o, "hash.crc.same", crc32_bitwise(data, 24) == crc32_table(data, 24));
  line_hex(o, "hash.adler", adler32(data, 96));
  uint64_t m = 0;
  for (int i = 0; i < 16; ++i) m ^= murmur_mix((uint64_t)i * 0x9e3779b97f4a7c15ull);
  line_hex(o, "hash.murmur", m);
  line_hex(o, "hash.fnv", fnv1a("the quick brown fox jumps over the lazy dog"));
}

/* ---- strings ----------------------------------------------------------------------------- */

static NOINLINE size_t my_strlen(const char* s) {
  const char* p = s;
  while (*p) ++p;
  return (size_t)(p - s);
}

static NOINLINE void my_reverse(char* s) {
  size_t n = my_strlen(s);
  for (size_t i = 0; i < n / 2; ++i) {
    char t = s[i];
    s[i] = s[n - 1 - i];
    s[n - 1 - i] = t;
  }
}

static NOINLINE int my_itoa(int64_t v, char* out, int base) {
  char tmp[72];
  int n = 0, neg = v < 0;
  uint64_t u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    int d = (int)(u % (unsigned)base);
    tmp[n++] = (char)(d < 10 ? '0' + d : 'A' + d - 10);
    u /= (unsigned)base;
  } while (u);
  int k = 0;
  if (neg) out[k++] = '-';
  while (n) out[k++] = tmp[--n];
  out[k] = 0;
  return k;
}

static NOINLINE int64_t my_atoi(const char* s) {
  int64_t v = 0;
  int neg = 0;
  while (*s == ' ' || *s == '\t') ++s;
  if (*s == '-' || *s == '+') neg = *s++ == '-';
  while (*s >= '0' && *s <= '9') v = v * 10 + (*s++ - '0');
  return neg ? -v : v;
}

static NOINLINE int is_palindrome(const char* s) {
  size_t i = 0, j = my_strlen(s);
  while (i < j) {
    while (i < j && !((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z'))) ++i;
    while (i < j && !((s[j - 1] >= 'a' && s[j - 1] <= 'z') || (s[j - 1] >= 'A' && s[j - 1] <= 'Z'))) --j;
    if (i >= j) break;
    char a = s[i] | 0x20, b = s[j - 1] | 0x20;
    if (a != b) return 0;
    ++i;
    --j;
  }
  return 1;
}

static NOINLINE void caesar(char* s, int k) {
  for (; *s; ++s) {
    if (*s >= 'a' && *s <= 'z') *s = (char)('a' + (*s - 'a' + k) % 26);
    else if (*s >= 'A' && *s <= 'Z') *s = (char)('A' + (*s - 'A' + k) % 26);
  }
}

static NOINLINE int rle_encode(const char* in, char* out) {
  int k = 0;
  while (*in) {
    char c = *in;
    int run = 0;
    while (*in == c && run < 9) {
      ++in;
      ++run;
    }
    out[k++] = (char)('0' + run);
    out[k++] = c;
  }
  out[k] = 0;
  return k;
}

static NOINLINE int rle_decode(const char* in, char* out) {
  int k = 0;
  for (; in[0] && in[1]; in += 2)
    for (int r = in[0] - '0'; r > 0; --r) out[k++] = in[1];
  out[k] = 0;
  return k;
}

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static NOINLINE int b64_encode(const uint8_t* in, int n, char* out) {
  int k = 0;
  for (int i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16;
    if (i + 1 < n) v |= (uint32_t)in[i + 1] << 8;
    if (i + 2 < n) v |= in[i + 2];
    out[k++] = kB64[(v >> 18) & 63];
    out[k++] = kB64[(v >> 12) & 63];
    out[k++] = i + 1 < n ? kB64[(v >> 6) & 63] : '=';
    out[k++] = i + 2 < n ? kB64[v & 63] : '=';
  }
  out[k] = 0;
  return k;
}

static int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

static NOINLINE int b64_decode(const char* in, uint8_t* out) {
  int k = 0;
  for (; in[0] && in[1] && in[2] && in[3]; in += 4) {
    uint32_t v = ((uint32_t)b64_value(in[0]) << 18) | ((uint32_t)b64_value(in[1]) << 12);
    out[k++] = (uint8_t)(v >> 16);
    if (in[2] != '=') {
      v |= (uint32_t)b64_value(in[2]) << 6;
      out[k++] = (uint8_t)(v >> 8);
    }
    if (in[3] != '=') {
      v |= (uint32_t)b64_value(in[3]);
      out[k++] = (uint8_t)v;
    }
  }
  return k;
}

static void test_strings(Out* o) {
  char s[128] = "Hello, probing world";
  my_reverse(s);
  put_str(o, "str.reverse = ");
  put_str(o, s);
  put_char(o, '\n');
  char num[80];
  my_itoa(-123456789, num, 10);
  line(o, "str.atoi", my_atoi(num));
  my_itoa(0xdeadbeef, num, 16);
  put_str(o, "str.hex = ");
  put_str(o, num);
  put_char(o, '\n');
  my_itoa(1000, num, 2);
  line(o, "str.binlen", (int64_t)my_strlen(num));
  line(o, "str.pal1", is_palindrome("A man, a plan, a canal: Panama"));
  line(o, "str.pal2", is_palindrome("not a palindrome"));
  char c[] = "Veni, Vidi, Vici";
  caesar(c, 3);
  put_str(o, "str.caesar = ");
  put_str(o, c);
  put_char(o, '\n');
  char rle[64], back[64];
  int n = rle_encode("aaabccddddddddddde", rle);
  line(o, "str.rle.len", n);
  rle_decode(rle, back);
  put_str(o, "str.rle.back = ");
  put_str(o, back);
  put_char(o, '\n');
  uint8_t raw[20];
  for (int i = 0; i < 20; ++i) raw[i] = (uint8_t)(i * 37 + 11);
  char enc[40];
  b64_encode(raw, 20, enc);
  put_str(o, "str.b64 = ");
  put_str(o, enc);
  put_char(o, '\n');
  uint8_t dec[32];
  int dn = b64_decode(enc, dec);
  int same = dn == 20;
  for (int i = 0; i < 20 && same; ++i) same = dec[i] == raw[i];
  line(o, "str.b64.roundtrip", same);
}

/* ---- numbers ------------------------------------------------------------------------------ */

static NOINLINE uint64_t isqrt(uint64_t n) {
  uint64_t x = n, y = (x + 1) / 2;
  while (y < x) {
    x = y;
    y = (x + n / x) / 2;
  }
  return x;
}

static NOINLINE uint64_t gcd_u(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static NOINLINE uint64_t modpow(uint64_t b, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  b %= m;
  while (e) {
    if (e & 1) r = (unsigned __int128)r * b % m;
    b = (unsigned __int128)b * b % m;
    e >>= 1;
  }
  return r;
}

static NOINLINE int sieve(int n, uint8_t* composite) {
  int count = 0;
  for (int i = 0; i <= n; ++i) composite[i] = 0;
  for (int i = 2; i <= n; ++i) {
    if (composite[i]) continue;
    ++count;
    for (int j = i * i; j <= n; j += i) composite[j] = 1;
  }
  return count;
}

static NOINLINE int popcount_loop(uint64_t v) {
  int c = 0;
  while (v) {
    v &= v - 1;
    ++c;
  }
  return c;
}

static NOINLINE uint32_t bit_reverse(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) {
    r = (r << 1) | (v & 1);
    v >>= 1;
  }
  return r;
}

static NOINLINE int clz_loop(uint64_t v) {
  if (!v) return 64;
  int n = 0;
  while (!(v & (1ull << 63))) {
    v <<= 1;
    ++n;
  }
  return n;
}

/* Big decimal numbers, least significant digit first. */
typedef struct {
  int n;
  uint8_t d[64];
} Big;

static NOINLINE void big_mul_small(Big* b, int m) {
  int carry = 0;
  for (int i = 0; i < b->n; ++i) {
    int v = b->d[i] * m + carry;
    b->d[i] = (uint8_t)(v % 10);
    carry = v / 10;
  }
  while (carry) {
    b->d[b->n++] = (uint8_t)(carry % 10);
    carry /= 10;
  }
}

static NOINLINE void big_add(Big* r, const Big* a, const Big* b) {
  int carry = 0, n = a->n > b->n ? a->n : b->n;
  for (int i = 0; i < n; ++i) {
    int v = (i < a->n ? a->d[i] : 0) + (i < b->n ? b->d[i] : 0) + carry;
    r->d[i] = (uint8_t)(v % 10);
    carry = v / 10;
  }
  r->n = n;
  if (carry) r->d[r->n++] = (uint8_t)carry;
}

static void put_big(Out* o, const char* name, const Big* b) {
  put_str(o, name);
  put_str(o, " = ");
  for (int i = b->n - 1; i >= 0; --i) put_char(o, (char)('0' + b->d[i]));
  put_char(o, '\n');
}

static void test_numbers(Out* o) {
  line(o, "num.isqrt", (int64_t)isqrt(1000000007ull));
  line(o, "num.gcd", (int64_t)gcd_u(1071u * 97u, 462u * 97u));
  line(o, "num.modpow", (int64_t)modpow(3, 1000003, 1000000007ull));
  uint8_t comp[501];
  line(o, "num.primes", sieve(500, comp));
  line(o, "num.popcount", popcount_loop(0xf0f0f0f0f0f0f0f0ull ^ 0x123456789ull));
  line_hex(o, "num.bitrev", bit_reverse(0x12345678u));
  line(o, "num.clz", clz_loop(0x0000f00000000000ull));
  Big f = {1, {1}};
  for (int i = 2; i <= 30; ++i) big_mul_small(&f, i);
  put_big(o, "num.fact30", &f);
  Big a = {1, {0}}, b = {1, {1}}, c;
  for (int i = 0; i < 48; ++i) {
    big_add(&c, &a, &b);
    a = b;
    b = c;
  }
  put_big(o, "num.fib49", &b);
}

/* ---- floating point ------------------------------------------------------------------------ */

static NOINLINE double newton_sqrt(double x) {
  double g = x > 1 ? x / 2 : 1;
  for (int i = 0; i < 30; ++i) g = 0.5 * (g + x / g);
  return g;
}

static NOINLINE double horner(const double* c, int n, double x) {
  double r = 0;
  for (int i = n - 1; i >= 0; --i) r = r * x + c[i];
  return r;
}

static NOINLINE void matmul(const double* a, const double* b, double* c, int n) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += a[i * n + k] * b[k * n + j];
      c[i * n + j] = s;
    }
}

static NOINLINE float dot_f(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

static NOINLINE long double ld_series(int n) {
  long double s = 0;
  for (int i = 1; i <= n; ++i) s += 1.0L / ((long double)i * i);
  return s;
}

static void test_float(Out* o) {
  line_f(o, "fp.sqrt2", newton_sqrt(2.0));
  static const double coef[] = {1, -3, 0.5, 2.25, -1};
  line_f(o, "fp.horner", horner(coef, 5, 1.5));
  double a[16], b[16], c[16];
  for (int i = 0; i < 16; ++i) {
    a[i] = i * 0.5;
    b[i] = 16 - i;
  }
  matmul(a, b, c, 4);
  double tr = 0;
  for (int i = 0; i < 4; ++i) tr += c[i * 4 + i];
  line_f(o, "fp.trace", tr);
  float x[32], y[32];
  for (int i = 0; i < 32; ++i) {
    x[i] = (float)i * 0.25f;
    y[i] = (float)(32 - i);
  }
  line_f(o, "fp.dot", dot_f(x, y, 32));
  line_f(o, "fp.zeta2", (double)ld_series(200));
}

/* ---- data structures ------------------------------------------------------------------------ */

typedef struct Node {
  int key;
  struct Node *left, *right;
} Node;

typedef struct {
  Node pool[128];
  int used;
} Pool;

static NOINLINE Node* bst_insert(Pool* p, Node* root, int key) {
  if (!root) {
    Node* n = &p->pool[p->used++];
    n->key = key;
    n->left = n->right = 0;
    return n;
  }
  if (key < root->key) root->left = bst_insert(p, root->left, key);
  else if (key > root->key) root->right = bst_insert(p, root->right, key);
  return root;
}

static NOINLINE int bst_height(const Node* n) {
  if (!n) return 0;
  int l = bst_height(n->left), r = bst_height(n->right);
  return 1 + (l > r ? l : r);
}

static NOINLINE int64_t bst_inorder(const Node* n, int64_t acc) {
  if (!n) return acc;
  acc = bst_inorder(n->left, acc);
  acc = acc * 3 + n->key;
  return bst_inorder(n->right, acc);
}

static NOINLINE int bst_find(const Node* n, int key) {
  int depth = 0;
  while (n) {
    if (key == n->key) return depth;
    n = key < n->key ? n->left : n->right;
    ++depth;
  }
  return -1;
}

typedef struct LNode {
  int v;
  struct LNode* next;
} LNode;

static NOINLINE LNode* list_reverse(LNode* h) {
  LNode* prev = 0;
  while (h) {
    LNode* n = h->next;
    h->next = prev;
    prev = h;
    h = n;
  }
  return prev;
}

/* A binary min-heap. */
static NOINLINE void heap_push(int* h, int* n, int v) {
  int i = (*n)++;
  h[i] = v;
  while (i > 0 && h[(i - 1) / 2] > h[i]) {
    int p = (i - 1) / 2, t = h[p];
    h[p] = h[i];
    h[i] = t;
    i = p;
  }
}

static NOINLINE int heap_pop(int* h, int* n) {
  int top = h[0];
  h[0] = h[--*n];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && h[l] < h[m]) m = l;
    if (r < *n && h[r] < h[m]) m = r;
    if (m == i) break;
    int t = h[m];
    h[m] = h[i];
    h[i] = t;
    i = m;
  }
  return top;
}

/* Open addressing. */
typedef struct {
  uint32_t keys[128];
  int32_t vals[128];
  uint8_t used[128];
} Table;

static NOINLINE void table_put(Table* t, uint32_t k, int32_t v) {
  uint32_t i = (k * 2654435761u) & 127;
  while (t->used[i] && t->keys[i] != k) i = (i + 1) & 127;
  t->used[i] = 1;
  t->keys[i] = k;
  t->vals[i] = v;
}

static NOINLINE int32_t table_get(const Table* t, uint32_t k, int32_t dflt) {
  uint32_t i = (k * 2654435761u) & 127;
  while (t->used[i]) {
    if (t->keys[i] == k) return t->vals[i];
    i = (i + 1) & 127;
  }
  return dflt;
}

static int uf_find(int* p, int x) {
  while (p[x] != x) {
    p[x] = p[p[x]];
    x = p[x];
  }
  return x;
}

static NOINLINE int union_find_components(int n, const int (*edges)[2], int m) {
  int p[64];
  for (int i = 0; i < n; ++i) p[i] = i;
  int comps = n;
  for (int i = 0; i < m; ++i) {
    int a = uf_find(p, edges[i][0]), b = uf_find(p, edges[i][1]);
    if (a != b) {
      p[a] = b;
      --comps;
    }
  }
  return comps;
}

static void test_structures(Out* o) {
  Pool p;
  p.used = 0;
  Node* root = 0;
  for (int i = 0; i < 40; ++i) root = bst_insert(&p, root, (int)(rng() % 500));
  line(o, "ds.bst.height", bst_height(root));
  line(o, "ds.bst.inorder", bst_inorder(root, 0));
  line(o, "ds.bst.find", bst_find(root, root->left ? root->left->key : root->key));
  LNode nodes[20];
  for (int i = 0; i < 20; ++i) {
    nodes[i].v = i * i;
    nodes[i].next = i + 1 < 20 ? &nodes[i + 1] : 0;
  }
  LNode* r = list_reverse(&nodes[0]);
  int64_t acc = 0;
  for (; r; r = r->next) acc = acc * 7 + r->v;
  line(o, "ds.list", acc);
  int h[64], hn = 0;
  for (int i = 0; i < 30; ++i) heap_push(h, &hn, (int)(rng() % 1000));
  int64_t popped = 0;
  while (hn) popped = popped * 5 + heap_pop(h, &hn);
  line(o, "ds.heap", popped);
  Table t;
  for (int i = 0; i < 128; ++i) t.used[i] = 0;
  for (uint32_t i = 0; i < 60; ++i) table_put(&t, i * 7919u, (int32_t)i);
  int64_t got = 0;
  for (uint32_t i = 0; i < 70; ++i) got += table_get(&t, i * 7919u, -1);
  line(o, "ds.table", got);
  static const int edges[][2] = {{0, 1}, {2, 3}, {1, 2}, {5, 6}, {7, 8}, {8, 9}, {4, 4}, {10, 11}};
  line(o, "ds.components", union_find_components(12, edges, 8));
}

/* ---- recursion -------------------------------------------------------------------------------- */

static NOINLINE int ackermann(int m, int n) {
  if (m == 0) return n + 1;
  if (n == 0) return ackermann(m - 1, 1);
  return ackermann(m - 1, ackermann(m, n - 1));
}

static NOINLINE int64_t hanoi(int n, int from, int to, int via, int64_t acc) {
  if (n == 0) return acc;
  acc = hanoi(n - 1, from, via, to, acc);
  acc = acc * 3 + from * 2 + to;
  acc &= 0xffffffffffffll;
  return hanoi(n - 1, via, to, from, acc);
}

static int queens_ok(const int* q, int row, int col) {
  for (int r = 0; r < row; ++r) {
    int d = q[r] - col;
    if (d == 0 || d == row - r || d == r - row) return 0;
  }
  return 1;
}

static NOINLINE int queens(int* q, int row, int n) {
  if (row == n) return 1;
  int count = 0;
  for (int c = 0; c < n; ++c)
    if (queens_ok(q, row, c)) {
      q[row] = c;
      count += queens(q, row + 1, n);
    }
  return count;
}

static NOINLINE int64_t permutations(int* a, int k, int n) {
  if (k == n) {
    int64_t v = 0;
    for (int i = 0; i < n; ++i) v = v * 10 + a[i];
    return v % 1000;
  }
  int64_t s = 0;
  for (int i = k; i < n; ++i) {
    int t = a[k];
    a[k] = a[i];
    a[i] = t;
    s += permutations(a, k + 1, n);
    t = a[k];
    a[k] = a[i];
    a[i] = t;
  }
  return s;
}

static void test_recursion(Out* o) {
  line(o, "rec.ackermann", ackermann(2, 3));
  line(o, "rec.hanoi", hanoi(6, 1, 3, 2, 0));
  int q[8];
  line(o, "rec.queens5", queens(q, 0, 5));
  int a[5] = {1, 2, 3, 4, 5};
  line(o, "rec.perm", permutations(a, 0, 4));
}

/* ---- an expression parser ----------------------------------------------------------------------- */

typedef struct {
  const char* s;
  int err;
} Parser;

static int64_t parse_expr(Parser* p);

static void skip_ws(Parser* p) {
  while (*p->s == ' ') p->s++;
}

static NOINLINE int64_t parse_atom(Parser* p) {
  skip_ws(p);
  if (*p->s == '(') {
    p->s++;
    int64_t v = parse_expr(p);
    skip_ws(p);
    if (*p->s == ')') p->s++;
    else p->err = 1;
    return v;
  }
  if (*p->s == '-') {
    p->s++;
    return -parse_atom(p);
  }
  int64_t v = 0;
  if (*p->s < '0' || *p->s > '9') p->err = 1;
  while (*p->s >= '0' && *p->s <= '9') v = v * 10 + (*p->s++ - '0');
  return v;
}

static NOINLINE int64_t parse_term(Parser* p) {
  int64_t v = parse_atom(p);
  for (;;) {
    skip_ws(p);
    char c = *p->s;
    if (c != '*' && c != '/' && c != '%') return v;
    p->s++;
    int64_t r = parse_atom(p);
    switch (c) {
      case '*': v *= r; break;
      case '/': v = r ? v / r : 0; break;
      default: v = r ? v % r : 0; break;
    }
  }
}

static NOINLINE int64_t parse_expr(Parser* p) {
  int64_t v = parse_term(p);
  for (;;) {
    skip_ws(p);
    char c = *p->s;
    if (c != '+' && c != '-') return v;
    p->s++;
    int64_t r = parse_term(p);
    v = c == '+' ? v + r : v - r;
  }
}

static void test_parser(Out* o) {
  static const char* const exprs[] = {"1 + 2 * 3", "(1 + 2) * 3", "100 / 7 % 5 - -3",
                                      "((2))*((3+4)*(5-6))", "12 + (", "7 * 6 - 2 * (1 + 1)"};
  for (int i = 0; i < 6; ++i) {
    Parser p = {exprs[i], 0};
    int64_t v = parse_expr(&p);
    put_str(o, "parse.");
    put_u64(o, (uint64_t)i, 10);
    put_str(o, " = ");
    put_i64(o, v);
    put_str(o, p.err ? " (error)\n" : "\n");
  }
}

/* ---- varargs and structs by value ---------------------------------------------------------------- */

typedef struct {
  int64_t a, b;
  double c;
} Triple;

static NOINLINE Triple make_triple(int64_t x) {
  Triple t = {x, x * x, (double)x / 4};
  return t;
}

static NOINLINE int64_t triple_sum(Triple t) { return t.a + t.b + (int64_t)(t.c * 100); }

static NOINLINE int64_t sum_va(int n, ...) {
  va_list ap;
  va_start(ap, n);
  int64_t s = 0;
  for (int i = 0; i < n; ++i) s += va_arg(ap, int);
  va_end(ap);
  return s;
}

static void test_misc(Out* o) {
  int64_t s = 0;
  for (int i = 0; i < 10; ++i) s += triple_sum(make_triple(i));
  line(o, "misc.triples", s);
  line(o, "misc.varargs", sum_va(7, 1, 2, 3, 4, 5, 6, 7) + sum_va(2, -10, 10));
}

/* ---- generated mixers ------------------------------------------------------------------------------ */

/* A family of distinct functions: shifts, multiplies, branches and a small switch, with
 * constants that differ per instance so no two fold together. */
#define MIXER(n)                                                                         \
  static NOINLINE uint32_t mixer_##n(uint32_t x, uint32_t y) {                           \
    x ^= x >> ((n) % 13 + 1);                                                            \
    x *= 0x9e3779b1u + (n) * 2u;                                                         \
    if (x & (1u << ((n) % 31))) x += (n) * 7u + y;                                       \
    else x -= (n) * 3u ^ y;                                                              \
    switch ((x >> ((n) % 8)) & 3) {                                                      \
      case 0: x = (x << 3) | (x >> 29); break;                                           \
      case 1: x ^= 0x5bd1e995u + (n); break;                                             \
      case 2: x += y * ((n) | 1); break;                                                 \
      default: x = ~x + (n); break;                                                      \
    }                                                                                    \
    for (uint32_t i = 0; i < ((n) % 3) + 1; ++i) x = x * 31 + (y >> i);                  \
    return x ^ (x >> 16);                                                                \
  }

#define MIXERS10(d)                                                                        \
  MIXER(d##0) MIXER(d##1) MIXER(d##2) MIXER(d##3) MIXER(d##4) MIXER(d##5) MIXER(d##6)     \
  MIXER(d##7) MIXER(d##8) MIXER(d##9)

MIXERS10(1) MIXERS10(2) MIXERS10(3) MIXERS10(4) MIXERS10(5) MIXERS10(6) MIXERS10(7)
MIXERS10(8) MIXERS10(9) MIXERS10(10) MIXERS10(11) MIXERS10(12) MIXERS10(13) MIXERS10(14)
MIXERS10(15) MIXERS10(16) MIXERS10(17) MIXERS10(18) MIXERS10(19) MIXERS10(20)
MIXERS10(21) MIXERS10(22) MIXERS10(23) MIXERS10(24) MIXERS10(25)

typedef uint32_t (*mixer_fn)(uint32_t, uint32_t);

#define REF10(d)                                                                           \
  mixer_##d##0, mixer_##d##1, mixer_##d##2, mixer_##d##3, mixer_##d##4, mixer_##d##5,     \
      mixer_##d##6, mixer_##d##7, mixer_##d##8, mixer_##d##9,

static const mixer_fn kMixers[] = {REF10(1) REF10(2) REF10(3) REF10(4) REF10(5) REF10(6)
                                       REF10(7) REF10(8) REF10(9) REF10(10) REF10(11)
                                           REF10(12) REF10(13) REF10(14) REF10(15) REF10(16)
                                               REF10(17) REF10(18) REF10(19) REF10(20)
                                                   REF10(21) REF10(22) REF10(23) REF10(24)
                                                       REF10(25)};

static void test_mixers(Out* o) {
  uint32_t acc = 1;
  const int n = (int)(sizeof kMixers / sizeof kMixers[0]);
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < n; ++i) acc = kMixers[i](acc + (uint32_t)i, (uint32_t)round * 977u + 13);
  line(o, "mixers.count", n);
  line_hex(o, "mixers.acc", acc);
}

/* ---- entry -------------------------------------------------------------------------------------- */

__attribute__((visibility("default"))) size_t oracle_main(char* buf, size_t cap) {
  Out o = {buf, cap, 0};
  rng_state = 0x853c49e6748fea9bull;
  test_vm(&o);
  test_sort(&o);
  test_hash(&o);
  test_strings(&o);
  test_numbers(&o);
  test_float(&o);
  test_structures(&o);
  test_recursion(&o);
  test_parser(&o);
  test_misc(&o);
  test_mixers(&o);
  if (o.len < cap) buf[o.len] = 0;
  return o.len;
}
