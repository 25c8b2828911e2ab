#include "ebpf/helpers.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/bpf.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "abi/ctx.hpp"
#include "arch/call_slot.hpp"
#include "arch/cpu.hpp"
#include "arch/unwind.hpp"
#include "ebpf/loader.hpp"
#include "ebpf/maps.hpp"
#include "ebpf/memory.hpp"
#include "common/gpr_mem.hpp"
#include "os/cpu_id.hpp"
#include "os/safe_copy.hpp"

namespace utramp::ebpf {

Result<void> HelperTable::add(uint32_t id, std::string name, HelperFn fn, bool needs_run, HelperProto proto,
                              HelperFn trusted) {
  if (needs_run && !trusted)
    return make_error(Errc::invalid_argument,
                      fmt::format("helper {} ({}) needs the run but has no trusted form: a verified program's code "
                                  "publishes no run",
                                  id, name));
  auto it = std::lower_bound(helpers_.begin(), helpers_.end(), id,
                             [](const HelperInfo& h, uint32_t v) { return h.id < v; });
  HelperInfo info{id, std::move(name), fn, needs_run, proto, trusted};
  if (it != helpers_.end() && it->id == id) *it = std::move(info);
  else helpers_.insert(it, std::move(info));
  return {};
}

const HelperInfo* HelperTable::find(uint32_t id) const {
  auto it = std::lower_bound(helpers_.begin(), helpers_.end(), id,
                             [](const HelperInfo& h, uint32_t v) { return h.id < v; });
  return it != helpers_.end() && it->id == id ? &*it : nullptr;
}

uint32_t HelperTable::id_limit() const { return helpers_.empty() ? 0 : helpers_.back().id + 1; }

const char* arg_name(Arg a) {
  switch (a) {
    case Arg::none: return "none";
    case Arg::anything: return "anything";
    case Arg::scalar: return "scalar";
    case Arg::map: return "map";
    case Arg::map_key: return "map_key";
    case Arg::map_value: return "map_value";
    case Arg::map_value_out: return "map_value_out";
    case Arg::mem: return "mem";
    case Arg::mem_uninit: return "mem_uninit";
    case Arg::size: return "size";
    case Arg::size_or_zero: return "size_or_zero";
    case Arg::alloc_size: return "alloc_size";
    case Arg::ctx: return "ctx";
    case Arg::ringbuf_record: return "ringbuf_record";
    case Arg::u64_out: return "u64_out";
  }
  return "?";
}

const char* ret_name(Ret r) {
  switch (r) {
    case Ret::scalar: return "scalar";
    case Ret::none: return "void";
    case Ret::map_value_or_null: return "map_value_or_null";
    case Ret::ringbuf_record_or_null: return "ringbuf_record_or_null";
  }
  return "?";
}

std::string describe_proto(const HelperInfo& h) {
  std::string out = h.name + "(";
  bool first = true;
  for (Arg a : h.proto.args) {
    if (a == Arg::none) break;
    out += first ? "" : ", ";
    first = false;
    out += arg_name(a);
    if (a == Arg::map && h.proto.map_types) {
      std::string types;
      for (uint32_t t = 0; t < 32; ++t)
        if (h.proto.map_types & (1u << t)) types += fmt::format("{}{}", types.empty() ? "" : " ", map_type_name(t));
      out += " [" + types + "]";
    }
  }
  return out + ") -> " + ret_name(h.proto.ret);
}

// Every helper id the system's linux/bpf.h knows, by position (its mapper lists them in
// id order from unspec, 0): names for the ids the switch below leaves out.
#define UTRAMP_HELPER_NAME(x) "bpf_" #x
constexpr std::string_view kUapiHelperNames[] = {__BPF_FUNC_MAPPER(UTRAMP_HELPER_NAME)};
#undef UTRAMP_HELPER_NAME

std::string_view kernel_helper_name(uint32_t id) {
  // The ids of include/uapi/linux/bpf.h (___BPF_FUNC_MAPPER) that tracing programs use.
  switch (id) {
    case 1: return "bpf_map_lookup_elem";
    case 2: return "bpf_map_update_elem";
    case 3: return "bpf_map_delete_elem";
    case 4: return "bpf_probe_read";
    case 5: return "bpf_ktime_get_ns";
    case 6: return "bpf_trace_printk";
    case 7: return "bpf_get_prandom_u32";
    case 8: return "bpf_get_smp_processor_id";
    case 12: return "bpf_tail_call";
    case 14: return "bpf_get_current_pid_tgid";
    case 15: return "bpf_get_current_uid_gid";
    case 16: return "bpf_get_current_comm";
    case 25: return "bpf_perf_event_output";
    case 27: return "bpf_get_stackid";
    case 35: return "bpf_get_current_task";
    case 45: return "bpf_probe_read_str";
    case 58: return "bpf_override_return";
    case 67: return "bpf_get_stack";
    case 87: return "bpf_map_push_elem";
    case 88: return "bpf_map_pop_elem";
    case 89: return "bpf_map_peek_elem";
    case 112: return "bpf_probe_read_user";
    case 113: return "bpf_probe_read_kernel";
    case 114: return "bpf_probe_read_user_str";
    case 115: return "bpf_probe_read_kernel_str";
    case 125: return "bpf_ktime_get_boot_ns";
    case 130: return "bpf_ringbuf_output";
    case 131: return "bpf_ringbuf_reserve";
    case 132: return "bpf_ringbuf_submit";
    case 133: return "bpf_ringbuf_discard";
    case 134: return "bpf_ringbuf_query";
    case 164: return "bpf_for_each_map_elem";
    case 165: return "bpf_snprintf";
    case 173: return "bpf_get_func_ip";
    case 174: return "bpf_get_attach_cookie";
    case 177: return "bpf_trace_vprintk";
    case 181: return "bpf_loop";
    case 183: return "bpf_get_func_arg";
    case 184: return "bpf_get_func_ret";
    case 185: return "bpf_get_func_arg_cnt";
    default: return id > 0 && id < std::size(kUapiHelperNames) ? kUapiHelperNames[id] : std::string_view();
  }
}

// ---- runtime helpers -------------------------------------------------------------------
//
// Each helper that takes pointers or a map from the program is a template on kTrusted:
// the checked form (false) serves programs that run unverified and checks what it is
// given against the running program (current_run()) and the registered map files; the
// trusted form (true) serves verified programs, whose calls the verifier proved match
// the prototype (the map is one of the program's maps of an accepted type, every
// pointer has the bytes the prototype asks for), and goes straight to memory.

namespace {

using u64 = uint64_t;

std::atomic<MapHeader*> g_printk{nullptr};

constexpr u64 kMaxCopy = 4096;  // keys and values a helper copies from the program

// `dst` of n bytes is memory the running program may write.
template <bool kTrusted>
bool writable(u64 dst, u64 n) {
  if constexpr (kTrusted) return n != 0;
  RunState* r = current_run();
  return r && n && run_allows(r, dst, n, true);
}

u64 neg(int e) { return static_cast<u64>(-static_cast<int64_t>(e)); }

// Copies n bytes a program points a helper at (a key, a value, a format): straight from
// memory when the running program may read them (its stack, its context, map values:
// nearly always, a key sits on the stack), else by the fault-safe copy, which costs two
// system calls (about a microsecond: it made a hash-map increment cost 1.5 us). The
// helpers that call this are registered needs_run, so current_run() is theirs.
template <bool kTrusted>
bool read_arg(void* dst, u64 src, size_t n) {
  if constexpr (!kTrusted) {
    const RunState* r = current_run();
    if (!r || !n || !run_allows(r, src, n, false)) return os::safe_read(dst, src, n);
  }
  gpr::copy(dst, reinterpret_cast<const void*>(src), n);
  return true;
}

// The map a program passes: any address, checked against the registered files, or
// (trusted) the header the loader put in the program's lddw.
template <bool kTrusted>
MapHeader* map_arg(u64 map) {
  if constexpr (kTrusted) return reinterpret_cast<MapHeader*>(map);
  return map_from_addr(map);
}

// A word of the tracing context's header (ctx[-1] count, ctx[-2] function, ctx[-3]
// cookie) or an argument: fault-safe unless the verifier proved `ctx` is the context.
template <bool kTrusted>
bool read_ctx(u64 ctx, int64_t slot, u64* out) {
  if constexpr (kTrusted) {
    std::memcpy(out, reinterpret_cast<const void*>(ctx + static_cast<u64>(slot * 8)), 8);
    return true;
  }
  return os::safe_read(out, ctx + static_cast<u64>(slot * 8), 8);
}

template <bool kTrusted>
u64 h_map_lookup(u64 map, u64 key, u64, u64, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && (!m || map_type(m) == uint32_t(MapType::ringbuf))) return 0;
  if constexpr (kTrusted) return reinterpret_cast<u64>(map_lookup(m, reinterpret_cast<const void*>(key)));
  uint8_t k[512];
  if (!read_arg<kTrusted>(k, key, map_key_size(m))) return 0;
  return reinterpret_cast<u64>(map_lookup(m, k));
}

template <bool kTrusted>
u64 h_map_update(u64 map, u64 key, u64 value, u64 flags, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && (!m || map_type(m) == uint32_t(MapType::ringbuf))) return neg(EINVAL);
  if constexpr (kTrusted)
    return static_cast<u64>(map_update(m, reinterpret_cast<const void*>(key), reinterpret_cast<const void*>(value), flags));
  uint8_t k[512], v[kMaxCopy];
  if (map_value_size(m) > sizeof v) return neg(E2BIG);
  if (!read_arg<kTrusted>(k, key, map_key_size(m)) || !read_arg<kTrusted>(v, value, map_value_size(m)))
    return neg(EFAULT);
  return static_cast<u64>(map_update(m, k, v, flags));
}

template <bool kTrusted>
u64 h_map_delete(u64 map, u64 key, u64, u64, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && !m) return neg(EINVAL);
  if constexpr (kTrusted) return static_cast<u64>(map_delete(m, reinterpret_cast<const void*>(key)));
  uint8_t k[512];
  if (!read_arg<kTrusted>(k, key, map_key_size(m))) return neg(EFAULT);
  return static_cast<u64>(map_delete(m, k));
}

// The vDSO's clock through arch/call_slot.hpp's slot (make_runtime sets it), so that a
// probe handler calling this is proven general-purpose-only (glibc's clock_gettime
// calls the vDSO through a pointer in a register, which the proof cannot follow).
u64 h_ktime(u64, u64, u64, u64, u64) {
  timespec ts{};
  arch::utramp_slot_clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<u64>(ts.tv_sec) * 1000000000ull + static_cast<u64>(ts.tv_nsec);
}

// pid/tid cached per thread; a forked child's thread has another pid (the generation
// changes in the child's atfork handler).
std::atomic<uint32_t> g_fork_gen{0};
__attribute__((tls_model("initial-exec"))) thread_local uint64_t t_pid_tgid = 0;
__attribute__((tls_model("initial-exec"))) thread_local uint32_t t_gen = ~0u;
void on_fork_child() { g_fork_gen.fetch_add(1); }

u64 h_pid_tgid(u64, u64, u64, u64, u64) {
  const uint32_t g = g_fork_gen.load(std::memory_order_relaxed);
  if (t_gen != g) {
    // Made directly, not through libc: its wrappers' PLT slots may not be bound yet, and
    // the loader's lazy binding saves the vector state (a probe handler reaching it is
    // not proven general-purpose-only: docs/probes.md, "Vector state").
    t_pid_tgid = (static_cast<u64>(arch::raw_syscall6(SYS_getpid)) << 32) |
                 static_cast<uint32_t>(arch::raw_syscall6(SYS_gettid));
    t_gen = g;
  }
  return t_pid_tgid;
}

template <bool kTrusted>
u64 h_comm(u64 dst, u64 size, u64, u64, u64) {
  if (!writable<kTrusted>(dst, size)) return neg(EFAULT);
  char name[16] = {};
  prctl(PR_GET_NAME, name);
  auto* d = reinterpret_cast<char*>(dst);
  std::memset(d, 0, size);
  std::memcpy(d, name, std::min<u64>(size - 1, strnlen(name, 15)));
  return 0;
}

u64 h_cpu(u64, u64, u64, u64, u64) {
  return os::current_cpu();
}

__attribute__((tls_model("initial-exec"))) thread_local uint64_t t_rand = 0;
u64 h_prandom(u64, u64, u64, u64, u64) {
  if (!t_rand) t_rand = (arch::cycles() ^ (h_pid_tgid(0, 0, 0, 0, 0) * 0x9e3779b97f4a7c15ull)) | 1;
  t_rand ^= t_rand << 13;
  t_rand ^= t_rand >> 7;
  t_rand ^= t_rand << 17;
  return static_cast<uint32_t>(t_rand >> 16);
}

// probe_read's size is a size_or_zero argument: 0 copies nothing and succeeds.
template <bool kTrusted>
u64 h_probe_read(u64 dst, u64 size, u64 src, u64, u64) {
  if (size == 0) return 0;
  if (size > (1u << 16) || !writable<kTrusted>(dst, size)) return neg(EFAULT);
  if (os::safe_read(reinterpret_cast<void*>(dst), src, size)) return 0;
  gpr::zero(reinterpret_cast<void*>(dst), size);
  return neg(EFAULT);
}

// Reads a NUL-terminated string of at most size-1 bytes, a page's part at a time (the
// string may end just before an unmapped page). Returns the bytes with the NUL. As the
// kernel's (since 5.9), nothing is written past the NUL: a program that zeroed a key
// and read a string into it gets the same key for the same string (the bytes after it
// read from the source would differ). So each part goes through a bounce buffer.
template <bool kTrusted>
u64 h_probe_read_str(u64 dst, u64 size, u64 src, u64, u64) {
  if (size == 0 || size > (1u << 16) || !writable<kTrusted>(dst, size)) return neg(EFAULT);
  auto* d = reinterpret_cast<char*>(dst);
  char buf[256];
  u64 n = 0;
  while (n < size - 1) {
    const u64 page_left = 4096 - ((src + n) & 4095);
    const u64 chunk = std::min({page_left, size - 1 - n, u64{sizeof buf}});
    if (!os::safe_read(buf, src + n, chunk)) {
      if (n == 0) {
        gpr::zero(d, size);
        return neg(EFAULT);
      }
      break;
    }
    if (const void* z = gpr::find(buf, 0, chunk)) {
      const u64 len = static_cast<u64>(static_cast<const char*>(z) - buf) + 1;
      gpr::copy(d + n, buf, len);
      return n + len;
    }
    gpr::copy(d + n, buf, chunk);
    n += chunk;
  }
  d[n] = 0;
  return n + 1;
}

// bpf_trace_printk(fmt, fmt_size, a, b, c): the kernel's subset of printf conversions
// (%d %i %u %x %X %p %s %c %%, with l/ll/h/hh and width/zero/minus flags), at most three
// arguments, %s read fault-safe (64 bytes at most).
template <bool kTrusted>
u64 h_printk(u64 fmt, u64 fmt_size, u64 a1, u64 a2, u64 a3) {
  char f[256];
  if (fmt_size == 0 || fmt_size > sizeof f || !read_arg<kTrusted>(f, fmt, fmt_size)) return neg(EINVAL);
  f[std::min<u64>(fmt_size, sizeof f) - 1] = 0;
  const u64 args[3] = {a1, a2, a3};
  int next = 0;
  // The ring record: its PrintkHead, then the line, formatted in place.
  constexpr size_t kLine = 512;
  char rec[sizeof(PrintkHead) + kLine];
  char* const out = rec + sizeof(PrintkHead);
  size_t o = 0;
  auto put = [&](const char* s, size_t n) {
    n = std::min(n, kLine - 1 - o);
    std::memcpy(out + o, s, n);
    o += n;
  };
  for (const char* p = f; *p && o < kLine - 1;) {
    if (*p != '%') {
      put(p++, 1);
      continue;
    }
    const char* start = p++;
    if (*p == '%') {
      put(p++, 1);
      continue;
    }
    while (*p == '-' || *p == '0' || (*p >= '1' && *p <= '9')) ++p;
    int longs = 0;
    while (*p == 'l') ++longs, ++p;
    int shorts = 0;
    while (*p == 'h') ++shorts, ++p;
    const char conv = *p ? *p++ : 0;
    if (!conv || next >= 3) return neg(EINVAL);
    u64 v = args[next++];
    char spec[16];
    const size_t flen = std::min<size_t>(static_cast<size_t>(p - start - 1 - longs - shorts), 8);
    char buf[96];
    int n = 0;
    std::memcpy(spec, start, flen);  // "%-08" (flags and width)
    switch (conv) {
      case 'd': case 'i': {
        int64_t s = longs ? static_cast<int64_t>(v) : shorts == 1 ? static_cast<int16_t>(v)
                    : shorts >= 2 ? static_cast<int8_t>(v) : static_cast<int32_t>(v);
        std::memcpy(spec + flen, "lld", 4);
        n = snprintf(buf, sizeof buf, spec, static_cast<long long>(s));
        break;
      }
      case 'u': case 'x': case 'X': {
        if (!longs) v = shorts == 1 ? static_cast<uint16_t>(v) : shorts >= 2 ? static_cast<uint8_t>(v) : static_cast<uint32_t>(v);
        spec[flen] = 'l', spec[flen + 1] = 'l', spec[flen + 2] = conv, spec[flen + 3] = 0;
        n = snprintf(buf, sizeof buf, spec, static_cast<unsigned long long>(v));
        break;
      }
      case 'p':
        n = snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
        break;
      case 'c':
        buf[0] = static_cast<char>(v);
        n = 1;
        break;
      case 's': {
        char s[65];
        u64 len = 0;
        while (len < 64 && os::safe_read(s + len, v + len, 1) && s[len]) ++len;
        if (len == 0 && !os::safe_read(s, v, 1)) {
          std::memcpy(s, "(fault)", 8);
          len = 7;
        }
        s[len] = 0;
        std::memcpy(spec + flen, "s", 2);
        n = snprintf(buf, sizeof buf, spec, s);
        break;
      }
      default: return neg(EINVAL);
    }
    if (n > 0) put(buf, std::min<size_t>(static_cast<size_t>(n), sizeof buf - 1));
  }
  while (o && out[o - 1] == '\n') --o;
  MapHeader* ring = g_printk.load(std::memory_order_acquire);
  if (!ring) return o;
  PrintkHead head{};
  const u64 pt = h_pid_tgid(0, 0, 0, 0, 0);
  head.pid = static_cast<uint32_t>(pt >> 32);
  head.tid = static_cast<uint32_t>(pt);
  // The name now, not cached: programs rename their threads (pthread_setname_np).
  if (arch::raw_syscall6(SYS_prctl, PR_GET_NAME, reinterpret_cast<long>(head.comm)) != 0) head.comm[0] = 0;
  std::memcpy(rec, &head, sizeof head);
  (void)ringbuf_output(ring, rec, sizeof head + o);
  return o;
}

template <bool kTrusted>
u64 h_ringbuf_output(u64 map, u64 data, u64 size, u64, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && (!m || map_type(m) != uint32_t(MapType::ringbuf))) return neg(EINVAL);
  void* r = ringbuf_reserve(m, size);
  if (!r) return neg(EAGAIN);
  if (!read_arg<kTrusted>(r, data, size)) {
    ringbuf_commit(m, r, true);
    return neg(EFAULT);
  }
  ringbuf_commit(m, r, false);
  return 0;
}

template <bool kTrusted>
u64 h_ringbuf_reserve(u64 map, u64 size, u64, u64, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && (!m || map_type(m) != uint32_t(MapType::ringbuf))) return 0;
  return reinterpret_cast<u64>(ringbuf_reserve(m, size));
}

u64 h_ringbuf_submit(u64 rec, u64, u64, u64, u64) {
  if (MapHeader* m = ringbuf_holding(rec)) ringbuf_commit(m, reinterpret_cast<void*>(rec), false);
  return 0;
}

u64 h_ringbuf_discard(u64 rec, u64, u64, u64, u64) {
  if (MapHeader* m = ringbuf_holding(rec)) ringbuf_commit(m, reinterpret_cast<void*>(rec), true);
  return 0;
}

// bpf_perf_event_output(ctx, map, flags, data, size): ctx is not needed here (the
// kernel takes the sample's registers from it; a record here is the data alone).
template <bool kTrusted>
u64 h_perf_output(u64, u64 map, u64 flags, u64 data, u64 size) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && (!m || map_type(m) != uint32_t(MapType::perf_event_array))) return neg(EINVAL);
  int64_t err = 0;
  void* r = perf_reserve(m, flags, size, &err);
  if (!r) return static_cast<u64>(err);
  if (size && !read_arg<kTrusted>(r, data, size)) {
    perf_commit(r, true);
    return neg(EFAULT);
  }
  perf_commit(r, false);
  return 0;
}

// Queues, stacks and bloom filters (maps.hpp: map_push, map_pop, map_peek).
template <bool kTrusted>
u64 h_map_push(u64 map, u64 value, u64 flags, u64, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && !m) return neg(EINVAL);
  if constexpr (kTrusted) return static_cast<u64>(map_push(m, reinterpret_cast<const void*>(value), flags));
  uint8_t v[kMaxCopy];
  if (map_value_size(m) > sizeof v) return neg(E2BIG);
  if (!read_arg<kTrusted>(v, value, map_value_size(m))) return neg(EFAULT);
  return static_cast<u64>(map_push(m, v, flags));
}

template <bool kTrusted>
u64 h_map_pop(u64 map, u64 value, u64, u64, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && !m) return neg(EINVAL);
  if (!writable<kTrusted>(value, map_value_size(m))) return neg(EFAULT);
  return static_cast<u64>(map_pop(m, reinterpret_cast<void*>(value)));
}

// A bloom filter's peek reads the value (a test); a queue's or stack's writes it.
template <bool kTrusted>
u64 h_map_peek(u64 map, u64 value, u64, u64, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && !m) return neg(EINVAL);
  if constexpr (!kTrusted) {
    if (map_type(m) == uint32_t(MapType::bloom_filter)) {
      uint8_t v[kMaxCopy];
      if (map_value_size(m) > sizeof v) return neg(E2BIG);
      if (!read_arg<kTrusted>(v, value, map_value_size(m))) return neg(EFAULT);
      return static_cast<u64>(map_peek(m, v));
    }
    if (!writable<kTrusted>(value, map_value_size(m))) return neg(EFAULT);
  }
  return static_cast<u64>(map_peek(m, reinterpret_cast<void*>(value)));
}

template <bool kTrusted>
u64 h_func_arg(u64 ctx, u64 n, u64 value, u64, u64) {
  u64 cnt = 0, v = 0;
  if (!writable<kTrusted>(value, 8)) return neg(EFAULT);
  if (!read_ctx<kTrusted>(ctx, abi::kCtxArgCount, &cnt) || (cnt &= abi::kCtxArgCountMask, n >= cnt) ||
      !read_ctx<kTrusted>(ctx, static_cast<int64_t>(n), &v)) {
    *reinterpret_cast<u64*>(value) = 0;
    return neg(EINVAL);
  }
  *reinterpret_cast<u64*>(value) = v;
  return 0;
}

// The kernel's verifier turns this helper into -EOPNOTSUPP outside fexit and fmod_ret
// programs; here the image says whether the return slot is valid (abi::kCtxRetValid).
// *value is written on every path, 0 on a failure, as bpf_get_func_arg's: the verifier
// counts the 8 bytes as written by the call (a u64_out argument), so a program may read
// them whatever the call returned.
template <bool kTrusted>
u64 h_func_ret(u64 ctx, u64 value, u64, u64, u64) {
  u64 head = 0, v = 0;
  if (!writable<kTrusted>(value, 8)) return neg(EFAULT);
  *reinterpret_cast<u64*>(value) = 0;
  if (!read_ctx<kTrusted>(ctx, abi::kCtxArgCount, &head)) return neg(EINVAL);
  if (!(head & abi::kCtxRetValid)) return neg(EOPNOTSUPP);
  const u64 cnt = head & abi::kCtxArgCountMask;
  if (cnt > 64 || !read_ctx<kTrusted>(ctx, static_cast<int64_t>(cnt), &v)) return neg(EINVAL);
  *reinterpret_cast<u64*>(value) = v;
  return 0;
}

template <bool kTrusted>
u64 h_func_arg_cnt(u64 ctx, u64, u64, u64, u64) {
  u64 cnt = 0;
  return read_ctx<kTrusted>(ctx, abi::kCtxArgCount, &cnt) ? cnt & abi::kCtxArgCountMask : 0;
}
template <bool kTrusted>
u64 h_func_ip(u64 ctx, u64, u64, u64, u64) {
  u64 ip = 0;
  return read_ctx<kTrusted>(ctx, abi::kCtxFuncIp, &ip) ? ip : 0;
}
template <bool kTrusted>
u64 h_cookie(u64 ctx, u64, u64, u64, u64) {
  u64 c = 0;
  return read_ctx<kTrusted>(ctx, abi::kCtxCookie, &c) ? c : 0;
}

// bpf_override_return's request (this thread's, for the run whose context it names):
// the uprobe handler clears it before the run and takes it after (agent/bpf.cpp).
// Trivially destructible, initial-exec: the handler may run in a signal handler.
struct OverrideRequest {
  u64 ctx;
  u64 rc;
};
__attribute__((tls_model("initial-exec"))) thread_local OverrideRequest t_override{0, 0};

// The checked form asks that `ctx` be the running program's context: only a request
// naming the handler's own context is taken, and a program may pass nothing else.
template <bool kTrusted>
u64 h_override_return(u64 ctx, u64 rc, u64, u64, u64) {
  if constexpr (!kTrusted) {
    const RunState* r = current_run();
    if (!r || ctx != r->ctx_lo) return neg(EINVAL);
  }
  t_override.rc = rc;
  t_override.ctx = ctx;
  return 0;
}

// ---- user stacks (bpf_get_stackid, bpf_get_stack) ------------------------------------

// The user stack at the probe whose context is `ctx`, the first `skip` frames left out:
// up to `max` ips into `out`; the count, or -errno as the kernel's: -EFAULT for a stack
// that has no frame after the skip (a kernel stack: there is none in user space),
// -EOPNOTSUPP for a context with neither registers nor an entry frame (a tracing
// context whose image was not asked to publish it: abi/ctx.hpp, kCtxEntrySpValid).
//
// A uprobe's context gives its registers. An fentry, fexit or fmod_ret program's gives
// the traced function's entry as a uprobe at its first instruction would see it: ip the
// function, sp where its caller's return address is (ctx[-5]), rbp the word just below
// it (the image pushed the function's rbp there). So the stack is the same from both,
// and for fexit (the body has returned, the image's frame still holds both words) too.
template <bool kTrusted>
int64_t user_stack(u64 ctx, u64 flags, u64* out, uint32_t max) {
  if (!(flags & kStackUser)) return -EFAULT;
  u64 head = 0;
  if (!read_ctx<kTrusted>(ctx, abi::kCtxArgCount, &head)) return -EFAULT;
  arch::UnwindRegs regs{};
  if (head & abi::kCtxPtRegs) {
    if (!read_ctx<kTrusted>(ctx, pt_regs_offset("ip") / 8, &regs.ip) ||
        !read_ctx<kTrusted>(ctx, pt_regs_offset("sp") / 8, &regs.sp) ||
        !read_ctx<kTrusted>(ctx, pt_regs_offset("bp") / 8, &regs.bp))
      return -EFAULT;
  } else if (head & abi::kCtxEntrySpValid) {
    if (!read_ctx<kTrusted>(ctx, abi::kCtxFuncIp, &regs.ip) || !read_ctx<kTrusted>(ctx, abi::kCtxEntrySp, &regs.sp) ||
        !read_ctx<kTrusted>(regs.sp, -1, &regs.bp))
      return -EFAULT;
  } else {
    return -EOPNOTSUPP;
  }
  const uint32_t skip = static_cast<uint32_t>(flags & kStackSkipMask);
  u64 ips[kMaxStackFrames];
  // Its reads and return-address fix through arch/call_slot.hpp's slots (set_safe_read
  // in make_runtime, set_ra_fix by set_return_address_fix): called directly, so that a
  // probe handler taking stacks is proven general-purpose-only.
  const size_t n = arch::unwind_user_slots(regs, ips, std::min<size_t>(kMaxStackFrames, size_t(skip) + max));
  if (n <= skip) return -EFAULT;
  gpr::copy(out, ips + skip, (n - skip) * 8);
  return static_cast<int64_t>(n - skip);
}

// bpf_get_stackid(ctx, map, flags): the stack's id in a stack trace map (maps.hpp
// stack_map_put: -EEXIST for another stack in its bucket without BPF_F_REUSE_STACKID).
template <bool kTrusted>
u64 h_get_stackid(u64 ctx, u64 map, u64 flags, u64, u64) {
  MapHeader* m = map_arg<kTrusted>(map);
  if (!kTrusted && (!m || map_type(m) != uint32_t(MapType::stack_trace))) return neg(EINVAL);
  if (flags & ~(kStackSkipMask | kStackUser | kStackFastCmp | kStackReuseId)) return neg(EINVAL);
  u64 ips[kMaxStackFrames];
  const int64_t n = user_stack<kTrusted>(ctx, flags, ips, map_value_size(m) / 8);
  if (n < 0) return static_cast<u64>(n);
  return static_cast<u64>(stack_map_put(m, ips, static_cast<uint32_t>(n), flags));
}

// bpf_get_stack(ctx, buf, size, flags): the ips into buf, the rest of it zeroed; the
// bytes written, or -errno with buf zeroed. BPF_F_USER_BUILD_ID: -EOPNOTSUPP (build-id
// stacks are not provided; utramp run symbolises addresses itself).
template <bool kTrusted>
u64 h_get_stack(u64 ctx, u64 buf, u64 size, u64 flags, u64) {
  if (size && !writable<kTrusted>(buf, size)) return neg(EFAULT);
  auto* dst = reinterpret_cast<uint8_t*>(buf);
  int64_t err = -EINVAL;
  if (!(flags & ~(kStackSkipMask | kStackUser | kStackBuildId)) && size % 8 == 0) {
    if (flags & kStackBuildId) {
      err = (flags & kStackUser) ? -EOPNOTSUPP : -EINVAL;
    } else {
      u64 ips[kMaxStackFrames];
      const int64_t n = user_stack<kTrusted>(ctx, flags, ips, static_cast<uint32_t>(std::min<u64>(size / 8, kMaxStackFrames)));
      if (n >= 0) {
        const size_t bytes = std::min<size_t>(size_t(n) * 8, size);
        gpr::copy(dst, ips, bytes);
        gpr::zero(dst + bytes, size - bytes);
        return bytes;
      }
      err = n;
    }
  }
  if (size) gpr::zero(dst, size);
  return static_cast<u64>(err);
}

// What helper 12's table entry points to. No engine calls it (helpers.hpp,
// kTailCallHelper: they run tail calls themselves and make_env leaves its callx slot
// empty); were one to, the call falls through as a failed tail call does.
uint64_t h_tail_call(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t) { return uint64_t(-EOPNOTSUPP); }

constexpr uint32_t type_bit(MapType t) { return 1u << static_cast<uint32_t>(t); }
constexpr uint32_t kKeyedMaps = type_bit(MapType::hash) | type_bit(MapType::array) | type_bit(MapType::percpu_hash) |
                                type_bit(MapType::percpu_array) | type_bit(MapType::lru_hash) |
                                type_bit(MapType::lpm_trie);
constexpr uint32_t kRingbufs = type_bit(MapType::ringbuf);
constexpr uint32_t kPerfArrays = type_bit(MapType::perf_event_array);
constexpr uint32_t kStackTraces = type_bit(MapType::stack_trace);
constexpr uint32_t kQueues = type_bit(MapType::queue) | type_bit(MapType::stack);
constexpr uint32_t kPushPeekMaps = kQueues | type_bit(MapType::bloom_filter);

HelperProto proto(Ret r, std::initializer_list<Arg> args, uint32_t map_types = 0) {
  HelperProto p;
  p.ret = r;
  size_t i = 0;
  for (Arg a : args) p.args[i++] = a;
  p.map_types = map_types;
  return p;
}

HelperTable make_runtime() {
  pthread_atfork(nullptr, nullptr, on_fork_child);
  arch::set_safe_read(os::safe_read);
  // The vDSO's clock_gettime for bpf_ktime_get_ns (else the slot's system call).
  if (void* vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD))
    if (void* f = dlsym(vdso, "__vdso_clock_gettime"))
      arch::set_clock_gettime(reinterpret_cast<int (*)(int, timespec*) noexcept>(f));
  HelperTable t;
  auto add = [&](uint32_t id, HelperFn fn, bool needs_run, HelperProto p, HelperFn trusted = nullptr) {
    // A refusal leaves the helper out, which unit_ebpf_verifier's check of this table
    // against docs/ebpf.md's list reports.
    (void)t.add(id, std::string(kernel_helper_name(id)), fn, needs_run, p, trusted);
  };
  using A = Arg;
  add(1, h_map_lookup<false>, true, proto(Ret::map_value_or_null, {A::map, A::map_key}, kKeyedMaps),
      h_map_lookup<true>);  // needs_run: read_arg's direct path
  add(2, h_map_update<false>, true, proto(Ret::scalar, {A::map, A::map_key, A::map_value, A::scalar}, kKeyedMaps),
      h_map_update<true>);
  add(3, h_map_delete<false>, true, proto(Ret::scalar, {A::map, A::map_key}, kKeyedMaps), h_map_delete<true>);
  const HelperProto probe_read = proto(Ret::scalar, {A::mem_uninit, A::size_or_zero, A::anything});
  const HelperProto probe_read_str = proto(Ret::scalar, {A::mem_uninit, A::size, A::anything});
  add(4, h_probe_read<false>, true, probe_read, h_probe_read<true>);
  add(5, h_ktime, false, proto(Ret::scalar, {}));
  // Its arguments 3-5 are passed as they are: the format decides which it reads.
  add(6, h_printk<false>, true, proto(Ret::scalar, {A::mem, A::size}),
      h_printk<true>);
  add(7, h_prandom, false, proto(Ret::scalar, {}));
  add(8, h_cpu, false, proto(Ret::scalar, {}));
  add(kTailCallHelper, h_tail_call, false,
      proto(Ret::none, {A::ctx, A::map, A::scalar}, type_bit(MapType::prog_array)));
  add(14, h_pid_tgid, false, proto(Ret::scalar, {}));
  add(16, h_comm<false>, true, proto(Ret::scalar, {A::mem_uninit, A::size}), h_comm<true>);
  add(25, h_perf_output<false>, true,
      proto(Ret::scalar, {A::ctx, A::map, A::scalar, A::mem, A::size_or_zero}, kPerfArrays), h_perf_output<true>);
  add(27, h_get_stackid<false>, false, proto(Ret::scalar, {A::ctx, A::map, A::scalar}, kStackTraces),
      h_get_stackid<true>);
  add(67, h_get_stack<false>, true, proto(Ret::scalar, {A::ctx, A::mem_uninit, A::size_or_zero, A::scalar}),
      h_get_stack<true>);
  add(45, h_probe_read_str<false>, true, probe_read_str, h_probe_read_str<true>);
  add(58, h_override_return<false>, true, proto(Ret::scalar, {A::ctx, A::scalar}), h_override_return<true>);
  add(112, h_probe_read<false>, true, probe_read, h_probe_read<true>);
  add(113, h_probe_read<false>, true, probe_read, h_probe_read<true>);
  add(114, h_probe_read_str<false>, true, probe_read_str, h_probe_read_str<true>);
  add(115, h_probe_read_str<false>, true, probe_read_str, h_probe_read_str<true>);
  add(87, h_map_push<false>, true, proto(Ret::scalar, {A::map, A::map_value, A::scalar}, kPushPeekMaps),
      h_map_push<true>);
  add(88, h_map_pop<false>, true, proto(Ret::scalar, {A::map, A::map_value_out}, kQueues), h_map_pop<true>);
  add(89, h_map_peek<false>, true, proto(Ret::scalar, {A::map, A::map_value_out}, kPushPeekMaps),
      h_map_peek<true>);
  add(130, h_ringbuf_output<false>, true, proto(Ret::scalar, {A::map, A::mem, A::size_or_zero, A::scalar}, kRingbufs),
      h_ringbuf_output<true>);
  add(131, h_ringbuf_reserve<false>, false, proto(Ret::ringbuf_record_or_null, {A::map, A::alloc_size, A::scalar}, kRingbufs),
      h_ringbuf_reserve<true>);
  add(132, h_ringbuf_submit, false, proto(Ret::none, {A::ringbuf_record, A::scalar}));
  add(133, h_ringbuf_discard, false, proto(Ret::none, {A::ringbuf_record, A::scalar}));
  add(173, h_func_ip<false>, false, proto(Ret::scalar, {A::ctx}), h_func_ip<true>);
  add(174, h_cookie<false>, false, proto(Ret::scalar, {A::ctx}), h_cookie<true>);
  add(183, h_func_arg<false>, true, proto(Ret::scalar, {A::ctx, A::scalar, A::u64_out}), h_func_arg<true>);
  add(184, h_func_ret<false>, true, proto(Ret::scalar, {A::ctx, A::u64_out}), h_func_ret<true>);
  add(185, h_func_arg_cnt<false>, false, proto(Ret::scalar, {A::ctx}), h_func_arg_cnt<true>);
  return t;
}

}  // namespace

const HelperTable& runtime_helpers() {
  static const HelperTable t = make_runtime();
  return t;
}

void clear_override() noexcept { t_override.ctx = 0; }

bool take_override(uint64_t ctx, uint64_t* rc) noexcept {
  if (!ctx || t_override.ctx != ctx) return false;
  *rc = t_override.rc;
  t_override.ctx = 0;
  return true;
}

void set_return_address_fix(uint64_t (*fix)(uint64_t, uint64_t) noexcept) {
  arch::set_ra_fix(fix);
}

void set_printk_ring(MapHeader* ring) { g_printk.store(ring, std::memory_order_release); }

}  // namespace utramp::ebpf
