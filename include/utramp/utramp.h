/* utramp: user-space dynamic tracing. The stable C API.
 *
 * Calling rules
 * -------------
 * Threads: every function may be called from any thread; calls that change what is
 * attached are serialised inside the library. Failures return NULL or a negative errno
 * value, set errno (except where noted) and leave a message, with the evidence, for
 * utramp_last_error() on the calling thread.
 *
 * Where a call may be made from is marked on each declaration:
 *   [any]     anywhere, a signal handler included: async-signal-safe, takes no lock,
 *             allocates nothing, and leaves errno alone (a program runs in the middle of
 *             the traced function, whose errno it must not change).
 *   [thread]  from a thread's ordinary code: not from inside a program or a probe
 *             handler (refused with EBUSY: the call may wait for the very thread it runs
 *             on, or for a lock that thread holds), nor from a signal handler (not
 *             async-signal-safe; not detected).
 *
 * Option structs
 * --------------
 * Structs that may grow begin with `size_t sz`, the size the caller knows. The library
 * uses the fields that lie within sz (a caller built against an older header gets the
 * defaults of the fields it does not know) and refuses, with E2BIG, a larger struct
 * whose bytes beyond the fields it knows are not all zero. Every field is 8 bytes wide,
 * so no struct has padding. Declare them with UTRAMP_OPTS, which sets sz and zeroes
 * every field not named:
 *
 *   UTRAMP_OPTS(utramp_attach_opts, opts, .cookie = 42, .signature = "i32 -> i32");
 *   struct utramp_link *l = utramp_attach(f, UTRAMP_FENTRY, prog, &opts);
 */
#ifndef UTRAMP_UTRAMP_H
#define UTRAMP_UTRAMP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Declares `struct type name` with sz set and the named fields (designated
 * initialisers) set; every other field is zero. */
#define UTRAMP_OPTS(type, name, ...) struct type name = {.sz = sizeof(struct type), __VA_ARGS__}

/* [any] The library's version, "MAJOR.MINOR.PATCH". */
const char *utramp_version(void);

/* [any] The message of the last failure on this thread ("" if none). Valid until the
 * thread's next failing call. */
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

/* [thread] Discovers the functions of every object loaded so far (call again after
 * dlopen) and canonicalises their compiler sites where that is safe. Returns the number
 * of sites known, or -errno. */
int utramp_sites_discover(void);

/* [thread] Calls `fn` for every known site whose symbol matches the glob (NULL: all).
 * Stops early when `fn` returns non-zero. Returns the number of sites visited, or
 * -EINVAL when `fn` is NULL. `info` and its strings are valid during the call. */
int utramp_sites_foreach(const char *glob,
                         int (*fn)(const struct utramp_site_info *info, void *arg), void *arg);

/* ---- BPF trampolines: fentry, fexit, fmod_ret, freplace ------------------------ */

struct utramp_link;
enum utramp_attach_type {
  UTRAMP_FENTRY = 0,
  UTRAMP_FEXIT = 1,
  UTRAMP_FMOD_RET = 2,
  UTRAMP_FREPLACE = 3,  /* attached with utramp_attach_replace */
  UTRAMP_TRACER = 4     /* reported only: a function_graph tracer's link (utramp record);
                           not attached or detached through this API */
};

/* The shape of a BPF tracing program. ctx[] is the kernel's layout:
 *   ctx[0..n-1] the arguments widened to u64 (zero-extended), an argument of 9..16 bytes
 *               passed in registers taking two slots, one passed in memory (a struct over
 *               16 bytes, long double) one slot holding its address;
 *   ctx[n]      the return value, for fexit (and ctx[n+1] for 16-byte returns); for
 *               fmod_ret the previous fmod_ret program's result (0 for the first);
 *   ctx[-1]     n in its low 32 bits (read it with utramp_get_func_arg_cnt: the high bits
 *               are flags), ctx[-2] the function's address; the link's cookie via
 *               utramp_get_attach_cookie(ctx).
 * Programs must treat ctx as read-only and must not throw. A program is skipped (and
 * counted as a miss) when it is already running on the same thread. */
typedef uint64_t (*utramp_prog_t)(uint64_t *ctx);

struct utramp_attach_opts {
  size_t sz;             /* sizeof(struct utramp_attach_opts): see "Option structs" */
  uint64_t cookie;       /* utramp_get_attach_cookie() in the program */
  /* The target's signature when it has no DWARF, e.g. "i32,ptr,f64 -> i64":
   * i8..i64 u8..u64 ptr f32 f64 f80 i128, s<size>:<classes> for a struct of at most 16
   * bytes passed in registers (one letter per eightbyte: i integer, s SSE), m<size> for
   * one passed in memory, "..." last for variadic, "void", and "noreturn" after the
   * return type. Without DWARF and without this: six integer argument registers, all
   * argument registers preserved, a 64-byte window of stack arguments. */
  const char *signature;
};

/* [thread] Attaches `prog` as an fentry, fexit or fmod_ret program of the function that
 * starts at `func` (or is named `symbol`); `opts` may be NULL. Takes effect for every
 * call that starts after the return. NULL with errno on failure (EINVAL: a NULL
 * argument, an unknown or UTRAMP_FREPLACE type, not a function start; ENOENT: no such
 * symbol; EBUSY: replaced by freplace; ERANGE: 38 links already; EOPNOTSUPP: the site
 * cannot be patched), and nothing changes. */
struct utramp_link *utramp_attach(void *func, enum utramp_attach_type type, utramp_prog_t prog,
                                  const struct utramp_attach_opts *opts);
struct utramp_link *utramp_attach_name(const char *symbol, enum utramp_attach_type type,
                                       utramp_prog_t prog, const struct utramp_attach_opts *opts);

/* [thread] freplace: every call of `func` (or of `symbol`) runs `replacement`, a function
 * of the same signature, instead. Excludes every other link on the function (EBUSY).
 * opts->cookie is only reported (utramp_link_get_info); the signature is not needed. */
struct utramp_link *utramp_attach_replace(void *func, void *replacement,
                                          const struct utramp_attach_opts *opts);
struct utramp_link *utramp_attach_replace_name(const char *symbol, void *replacement,
                                               const struct utramp_attach_opts *opts);

/* One request of utramp_attach_batch. Per-request options go in `opts`, which grows. */
struct utramp_attach_req {
  void *func;                             /* the function's start */
  enum utramp_attach_type type;           /* UTRAMP_FENTRY, UTRAMP_FEXIT or UTRAMP_FMOD_RET */
  utramp_prog_t prog;
  const struct utramp_attach_opts *opts;  /* NULL: defaults */
  struct utramp_link *link;               /* out: the link, NULL on failure */
  int err;                                /* out: 0, or -errno */
};

/* [thread] Attaches many programs at once: every image is built first, then all go live
 * together (one patch batch per step however many functions), as a tracer attaching to
 * every function needs. Each request succeeds or fails on its own; utramp_last_error()
 * holds the first failure's message. Returns how many links were made, or -EINVAL when
 * `reqs` is NULL and n > 0. */
int utramp_attach_batch(struct utramp_attach_req *reqs, size_t n);

/* [thread] Detaches: no call that starts after the return runs the link's program, and
 * on return no program of the link runs any more on any thread, so the cookie's target
 * may be freed and the program's code unloaded at once. A thread inside the traced
 * function (asleep in it, say) when detach is called skips the program when it comes
 * back through the image it entered; detach never waits for it (it takes about 10 ms
 * more then: docs/trampolines.md). It waits for runs of the program that had begun,
 * for as long as they take (runs through other links of the same program included:
 * they share its per-thread guard), and for a program left by a signal handler's
 * siglongjmp on another thread, until that thread runs the program again or exits.
 * EBUSY from inside a program (or probe handler).
 * freplace: no call that starts after the return enters the replacement; a call already
 * inside it finishes there, and is not waited for: unload a replacement only once its
 * calls are known to have returned.
 * At exit: libutramp's own atexit handler (registered when it loads) stops reclamation.
 * A detach that runs after it on the exiting thread (when libutramp was dlopen'ed: from
 * an atexit handler registered before that, or an ELF destructor) keeps the same
 * guarantee; retired code is no longer freed then (it stays mapped until the process
 * ends). A detach on any other thread after it may not return before the process ends;
 * its caller frees nothing early either way.
 * 0, or -errno (the link stays attached, its handle valid). On success the handle is
 * invalid. */
int utramp_link_detach(struct utramp_link *link);

/* [any] Readers of the program's ctx. They do not set errno (they run inside the traced
 * function); a NULL argument gives -EINVAL (or 0 for those returning a value) and a
 * message. */
uint64_t utramp_get_func_ip(const uint64_t *ctx);
uint64_t utramp_get_func_arg_cnt(const uint64_t *ctx);
/* 0, or -EINVAL when n is not an argument slot. */
int utramp_get_func_arg(const uint64_t *ctx, uint32_t n, uint64_t *value);
/* 0, or -EOPNOTSUPP in an fentry program (the return value does not exist yet: the
 * kernel's bpf_get_func_ret refuses the same), and *value is left unchanged then. */
int utramp_get_func_ret(const uint64_t *ctx, uint64_t *value);
uint64_t utramp_get_attach_cookie(const uint64_t *ctx);

/* [thread] Run count and run time per program (off by default, like
 * kernel.bpf_stats_enabled). */
void utramp_set_stats(int on);

/* What a link is and what its program did. The counters are its program's: links of one
 * program share them, as kernel links of one bpf_prog share its stats. */
struct utramp_link_info {
  size_t sz;                  /* see "Option structs": the caller sets it, the library
                                 fills the fields within it and zeroes those it does not
                                 know */
  uint64_t id;                /* unique for the process's lifetime */
  uint64_t type;              /* enum utramp_attach_type */
  void *func;                 /* the function's start */
  const char *func_name;      /* its symbol; valid for the process's lifetime */
  utramp_prog_t prog;         /* NULL for freplace and tracer links */
  void *replacement;          /* freplace: the replacement; NULL otherwise */
  uint64_t cookie;
  uint64_t run_cnt;           /* runs, counted while stats are on (utramp_set_stats) */
  uint64_t run_time_ns;       /* their total time, likewise */
  uint64_t misses;            /* runs skipped: the program was running on that thread */
  struct utramp_link *link;   /* the handle */
};

/* [thread] 0, or -errno (EINVAL: a NULL argument, or sz not covering `id`; ENOENT:
 * not a live link). */
int utramp_link_get_info(const struct utramp_link *link, struct utramp_link_info *info);

/* [thread] Calls `fn` for every live link, in attach order (those of the tracer too),
 * with a snapshot taken before the first call: `fn` may attach and detach. Stops early
 * when `fn` returns non-zero. Returns the number of links visited, or -EINVAL when `fn`
 * is NULL. */
int utramp_links_foreach(int (*fn)(const struct utramp_link_info *info, void *arg), void *arg);

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
 * Handlers must not throw and run with the probed thread's signal mask; they may call
 * the [any] functions only. */
typedef int (*utramp_probe_handler_t)(struct utramp_regs *regs, uint64_t cookie);

struct utramp_probe;

/* [thread] A probe at any instruction boundary of a known function: an int3 whose
 * displaced instruction runs out of line, or, where the 5 bytes at `addr` allow it and no
 * probe there has a post-handler, a jump to a detour (no trap). Several probes may share
 * an address. Refused with errno and utramp_last_error() when the address is NULL,
 * inside an instruction, blacklisted, not executable, changed by someone else, or its
 * instruction cannot run out of line, or when both handlers are NULL; nothing changes
 * then. */
struct utramp_probe *utramp_probe_attach(void *addr, utramp_probe_handler_t pre,
                                         utramp_probe_handler_t post, uint64_t cookie);
struct utramp_probe *utramp_probe_attach_name(const char *symbol, uint64_t offset,
                                              utramp_probe_handler_t pre,
                                              utramp_probe_handler_t post, uint64_t cookie);
/* [thread] A return probe on the function starting at `func`: `entry` runs at its entry,
 * `ret` at each return. At most `maxactive` calls per thread are tracked at once (<= 0:
 * 32; at most 128); calls beyond are counted as misses. Correct across C++ exceptions,
 * longjmp (stale calls are dropped, and counted as misses), threads and fork. */
struct utramp_probe *utramp_retprobe_attach(void *func, utramp_probe_handler_t entry,
                                            utramp_probe_handler_t ret, uint64_t cookie,
                                            int maxactive);
/* [thread] 0, or -errno. On return no handler of the probe runs any more. */
int utramp_probe_detach(struct utramp_probe *probe);

#ifdef __cplusplus
}
#endif

#endif /* UTRAMP_UTRAMP_H */
