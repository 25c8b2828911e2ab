/* utramp: user-space dynamic tracing. The stable C API. */
#ifndef UTRAMP_UTRAMP_H
#define UTRAMP_UTRAMP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, "MAJOR.MINOR.PATCH". */
const char *utramp_version(void);

/* The message of the last failure on this thread ("" if none). */
const char *utramp_last_error(void);

/* Site kinds, as utramp_site_info reports them. */
enum utramp_site_kind {
  UTRAMP_SITE_NOP5 = 0,        /* one 5-byte NOP */
  UTRAMP_SITE_NOP1X5 = 1,      /* five 1-byte NOPs (gcc -fpatchable-function-entry=5) */
  UTRAMP_SITE_FENTRY = 2,      /* call __fentry__ (-pg -mfentry) */
  UTRAMP_SITE_FENTRY_GOT = 3,  /* call *__fentry__@GOTPCREL(%rip) */
  UTRAMP_SITE_XRAY = 4,        /* XRay entry sled */
  UTRAMP_SITE_PROLOGUE = 5,    /* no compiler site: the prologue is relocated */
  UTRAMP_SITE_NONE = 6         /* cannot be attached; see `reason` */
};

struct utramp_site_info {
  const char *name;     /* symbol */
  const char *object;   /* path of the ELF object */
  uint64_t func;        /* function address */
  uint64_t site;        /* address of the 5-byte site (after endbr64 if any) */
  int kind;             /* enum utramp_site_kind */
  int attachable;       /* 1 if the site can be patched now */
  const char *reason;   /* why not, when attachable == 0 */
};

/* Discovers the functions of every object loaded so far (call again after dlopen) and
 * canonicalises their compiler sites where that is safe. Returns the number of sites
 * known, or -errno. */
int utramp_sites_discover(void);

/* Calls `fn` for every known site whose symbol matches the glob (NULL: all). Stops
 * early when `fn` returns non-zero. Returns the number of sites visited. */
int utramp_sites_foreach(const char *glob,
                         int (*fn)(const struct utramp_site_info *info, void *arg), void *arg);

/* ---- BPF trampolines: fentry, fexit, fmod_ret, freplace ------------------------ */

struct utramp_link;
enum utramp_attach_type { UTRAMP_FENTRY, UTRAMP_FEXIT, UTRAMP_FMOD_RET, UTRAMP_FREPLACE };

/* The shape of a BPF tracing program. ctx[] is the kernel's layout:
 *   ctx[0..n-1] the arguments widened to u64 (zero-extended), an argument of 9..16 bytes
 *               passed in registers taking two slots, one passed in memory (a struct over
 *               16 bytes, long double) one slot holding its address;
 *   ctx[n]      the return value, for fexit (and ctx[n+1] for 16-byte returns); for
 *               fmod_ret the previous fmod_ret program's result (0 for the first);
 *   ctx[-1]     n in its low 32 bits (read it with utramp_get_func_arg_cnt: the high bits
 *               are flags), ctx[-2] the function's address; the link's cookie via
 *               utramp_get_attach_cookie(ctx).
 * Programs must treat ctx as read-only and must not throw. */
typedef uint64_t (*utramp_prog_t)(uint64_t *ctx);

struct utramp_attach_opts {
  size_t sz;             /* sizeof(struct utramp_attach_opts), for growth */
  uint64_t cookie;
  /* The target's signature when it has no DWARF, e.g. "i32,ptr,f64 -> i64":
   * i8..i64 u8..u64 ptr f32 f64 f80 i128, s<size>:<classes> for a struct of at most 16
   * bytes passed in registers (one letter per eightbyte: i integer, s SSE), m<size> for
   * one passed in memory, "..." last for variadic, "void", and "noreturn" after the
   * return type. Without DWARF and without this: six integer argument registers, all
   * argument registers preserved, a 64-byte window of stack arguments. */
  const char *signature;
};

struct utramp_link *utramp_attach(void *func, enum utramp_attach_type type, void *prog,
                                  const struct utramp_attach_opts *opts);
struct utramp_link *utramp_attach_name(const char *symbol, enum utramp_attach_type type,
                                       void *prog, const struct utramp_attach_opts *opts);
int utramp_link_detach(struct utramp_link *link); /* 0, or -errno */

uint64_t utramp_get_func_ip(const uint64_t *ctx);
uint64_t utramp_get_func_arg_cnt(const uint64_t *ctx);
int utramp_get_func_arg(const uint64_t *ctx, uint32_t n, uint64_t *value); /* 0 or -EINVAL */
/* 0, or -EOPNOTSUPP in an fentry program (the return value does not exist yet: the
 * kernel's bpf_get_func_ret refuses the same), and *value is left unchanged then. */
int utramp_get_func_ret(const uint64_t *ctx, uint64_t *value);
uint64_t utramp_get_attach_cookie(const uint64_t *ctx);

/* Run count and run time per program (off by default, like kernel.bpf_stats_enabled). */
void utramp_set_stats(int on);

/* Marks `func` as error-injectable: the only functions fmod_ret may attach to. Write it
 * at file scope after the function, like the kernel's ALLOW_ERROR_INJECTION. Give the
 * function UTRAMP_OVERRIDABLE too (below), or the compiler may make its callers ignore
 * what an fmod_ret program returns. */
#define UTRAMP_ALLOW_ERROR_INJECTION(func)                                              \
  static const void *const utramp_error_inject_##func                                  \
      __attribute__((section("utramp_error_inject"), used, aligned(8))) = (const void *)&func

/* Marks a function as a point whose behaviour fmod_ret or freplace may change, so that
 * the compiler cannot see through it: it is not inlined, and its callers assume nothing
 * about what it does or returns. Without it an optimising compiler may, for example,
 * use `x` at the call site of `int f(int x) { ...; return x; }` instead of f's result
 * (clang -O2 does), and an fmod_ret or freplace of f then changes nothing there. Put it
 * before the definition: `UTRAMP_OVERRIDABLE int f(int x) { ... }`.
 *   gcc:   noipa (no inter-procedural analysis or optimisation across the function);
 *   clang: noinline and optnone (clang has no noipa; optnone is what keeps its
 *          inter-procedural passes out, at the price of compiling this one function
 *          without optimisation). */
#if defined(__clang__)
#define UTRAMP_OVERRIDABLE __attribute__((noinline, optnone))
#elif defined(__GNUC__)
#define UTRAMP_OVERRIDABLE __attribute__((noipa))
#else
#define UTRAMP_OVERRIDABLE
#endif

/* ---- Probes at any instruction: kprobes, kretprobes, optprobes ------------------- */

/* The registers a probe handler sees and may change, in the kernel's pt_regs order.
 * rip is the probed address in a pre-handler, where execution continues in a
 * post-handler, and the original return address in a return handler (rax/rdx hold the
 * return value there). */
struct utramp_regs {
  uint64_t r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi, rip,
      eflags, rsp;
};

/* A pre-handler that changes regs->rip and returns non-zero skips the probed
 * instruction and continues at regs->rip (the kernel's contract); otherwise return 0.
 * A return probe's entry handler returning non-zero does not record that call.
 * Handlers must not throw and run with the probed thread's signal mask. */
typedef int (*utramp_probe_handler_t)(struct utramp_regs *regs, uint64_t cookie);

struct utramp_probe;

/* A probe at any instruction boundary of a known function: an int3 whose displaced
 * instruction runs out of line, or, where the 5 bytes at `addr` allow it and no probe
 * there has a post-handler, a jump to a detour (no trap). Several probes may share an
 * address. Refused with errno and utramp_last_error() when the address is inside an
 * instruction, blacklisted, not executable, changed by someone else, or its instruction
 * cannot run out of line; nothing changes then. */
struct utramp_probe *utramp_probe_attach(void *addr, utramp_probe_handler_t pre,
                                         utramp_probe_handler_t post, uint64_t cookie);
struct utramp_probe *utramp_probe_attach_name(const char *symbol, uint64_t offset,
                                              utramp_probe_handler_t pre,
                                              utramp_probe_handler_t post, uint64_t cookie);
/* A return probe on the function starting at `func`: `entry` runs at its entry, `ret`
 * at each return. At most `maxactive` calls per thread are tracked at once (<= 0: 32;
 * at most 128); calls beyond are counted as misses. Correct across C++ exceptions,
 * longjmp (stale calls are dropped, and counted as misses), threads and fork. */
struct utramp_probe *utramp_retprobe_attach(void *func, utramp_probe_handler_t entry,
                                            utramp_probe_handler_t ret, uint64_t cookie,
                                            int maxactive);
/* 0, or -errno. On return no handler of the probe runs any more. */
int utramp_probe_detach(struct utramp_probe *probe);

#ifdef __cplusplus
}
#endif

#endif /* UTRAMP_UTRAMP_H */
