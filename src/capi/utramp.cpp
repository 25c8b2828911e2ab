// The C API over the internal layers: arguments checked, errors turned into errno values
// and messages, option structs read by the growth rules of utramp.h.
#include <utramp/utramp.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "abi/ctx.hpp"
#include "abi/signature.hpp"
#include "common/result.hpp"
#include "os/thread_memory.hpp"
#include "probe/hit.hpp"
#include "probe/probe.hpp"
#include "sites/table.hpp"
#include "tramp/threads.hpp"
#include "tramp/trampoline.hpp"
#include "utramp_version.hpp"

namespace {

using utramp::Errc;
using utramp::Error;
using utramp::make_error;
namespace tramp = utramp::tramp;

// The last failure's message, per thread. A fixed buffer mapped on the thread's first
// failure and reached through an initial-exec pointer (os/thread_memory.hpp: no
// allocation, and little initial-exec TLS, which a library loaded into a running
// process has few hundred bytes of): the [any] functions write it from programs and
// signal handlers too. Longer messages are cut; a thread that never failed reads "".
constexpr size_t kErrorLen = 1024;
thread_local char* t_last_error __attribute__((tls_model("initial-exec"))) = nullptr;

void set_message(std::string_view m) {
  char* buf = t_last_error;
  if (!buf)
    buf = static_cast<char*>(
        utramp::os::map_thread_memory(reinterpret_cast<void**>(&t_last_error), kErrorLen));
  if (!buf) return;  // no memory for the message: the return value and errno still say it
  const size_t n = std::min(m.size(), kErrorLen - 1);
  std::memcpy(buf, m.data(), n);
  buf[n] = '\0';
}

int errno_of(Errc c) {
  switch (c) {
    case Errc::invalid_argument: return EINVAL;
    case Errc::not_found: return ENOENT;
    case Errc::busy: return EBUSY;
    case Errc::out_of_range: return ERANGE;
    case Errc::not_instruction_boundary: return EINVAL;
    case Errc::too_small: return EINVAL;
    case Errc::too_big: return E2BIG;
    case Errc::unsupported: return EOPNOTSUPP;
    case Errc::bytes_mismatch: return EILSEQ;
    case Errc::not_executable: return EFAULT;
    case Errc::no_memory: return ENOMEM;
    case Errc::io: return EIO;
    case Errc::bad_format: return ENOEXEC;
  }
  return EINVAL;
}

// [thread] functions: the message, errno, and -errno to return.
int fail(const Error& e) {
  set_message(e.message);
  const int err = errno_of(e.code);
  errno = err;
  return -err;
}
template <class T>
T* fail_null(const Error& e) {
  fail(e);
  return nullptr;
}
Error null_arg(const char* fn, const char* arg) {
  return make_error(Errc::invalid_argument, fmt::format("{}: {} is NULL", fn, arg));
}

// [any] functions: the message only (errno belongs to the traced function), no
// formatting (it may allocate).
int ctx_fail(const char* message) {
  set_message(message);
  return -EINVAL;
}
uint64_t ctx_fail_value(const char* message) {
  set_message(message);
  return 0;
}

// [thread] functions refuse to run inside a program or a probe handler: they take the
// library's locks, which the interrupted code on this thread may hold, and detach
// waits for running programs and handlers, which may be this thread's.
utramp::Result<void> ordinary_thread(const char* fn) {
  const auto frame = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  if (utramp::probe::in_probe_handler() || tramp::this_thread_in_program(frame))
    return make_error(Errc::busy, fmt::format("{}: called from inside a program or probe handler", fn));
  return {};
}

// A caller's option struct read by the rules of utramp.h: the fields within its sz, the
// defaults (zero) for the others, E2BIG for non-zero bytes this library does not know.
template <class T>
utramp::Result<T> read_opts(const T* in, const char* name) {
  T out{};
  out.sz = sizeof(T);
  if (!in) return out;
  if (in->sz < sizeof(in->sz))
    return make_error(Errc::invalid_argument, fmt::format("{}.sz is {}: it must be sizeof(struct {})",
                                                          name, in->sz, name));
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(T); i < in->sz; ++i)
    if (bytes[i] != 0)
      return make_error(Errc::too_big,
                        fmt::format("{}.sz is {}, this library knows {} bytes of it and byte {} is "
                                    "{:#04x}, not 0: a field of a newer version",
                                    name, in->sz, sizeof(T), i, bytes[i]));
  std::memcpy(&out, in, std::min(in->sz, sizeof(T)));
  out.sz = sizeof(T);
  return out;
}

utramp::Result<tramp::AttachOptions> attach_options(const utramp_attach_opts* opts) {
  auto o = read_opts(opts, "utramp_attach_opts");
  if (!o) return std::move(o).error();
  tramp::AttachOptions out;
  out.cookie = o->cookie;
  if (o->signature) {
    auto sig = utramp::abi::parse_signature(o->signature);
    if (!sig) return std::move(sig).error();
    out.signature = std::make_shared<const utramp::abi::Signature>(std::move(*sig));
  }
  return out;
}

utramp::Result<tramp::AttachType> program_type(int type) {
  switch (type) {
    case UTRAMP_FENTRY: return tramp::AttachType::fentry;
    case UTRAMP_FEXIT: return tramp::AttachType::fexit;
    case UTRAMP_FMOD_RET: return tramp::AttachType::fmod_ret;
    case UTRAMP_FREPLACE:
      return make_error(Errc::invalid_argument,
                        "UTRAMP_FREPLACE attaches a function, not a program: use utramp_attach_replace");
    default:
      return make_error(Errc::invalid_argument, fmt::format("unknown program attach type {}", type));
  }
}

int c_type(tramp::AttachType t) {
  switch (t) {
    case tramp::AttachType::fentry: return UTRAMP_FENTRY;
    case tramp::AttachType::fexit: return UTRAMP_FEXIT;
    case tramp::AttachType::fmod_ret: return UTRAMP_FMOD_RET;
    case tramp::AttachType::freplace: return UTRAMP_FREPLACE;
    case tramp::AttachType::tracer: return UTRAMP_TRACER;
  }
  return UTRAMP_TRACER;
}

// The handle is the internal link; the manager tells live links from anything else.
utramp_link* handle(tramp::Link* l) { return reinterpret_cast<utramp_link*>(l); }
tramp::Link* internal(const utramp_link* l) {
  return reinterpret_cast<tramp::Link*>(const_cast<utramp_link*>(l));
}

utramp_link* link_result(utramp::Result<tramp::Link*> r) {
  if (!r) return fail_null<utramp_link>(r.error());
  return handle(*r);
}

// The checks every attach of a program makes, then `attach(type, options)`.
template <class Attach>
utramp_link* attach_program(const char* fn, int type, utramp_prog_t prog,
                            const utramp_attach_opts* opts, Attach&& attach) {
  auto t = program_type(type);
  if (!t) return fail_null<utramp_link>(t.error());
  if (!prog) return fail_null<utramp_link>(null_arg(fn, "prog"));
  auto o = attach_options(opts);
  if (!o) return fail_null<utramp_link>(o.error());
  return link_result(attach(*t, *o));
}

template <class Attach>
utramp_link* attach_replacement(const char* fn, void* replacement, const utramp_attach_opts* opts,
                                Attach&& attach) {
  if (!replacement) return fail_null<utramp_link>(null_arg(fn, "replacement"));
  auto o = attach_options(opts);
  if (!o) return fail_null<utramp_link>(o.error());
  return link_result(attach(*o));
}

utramp_link_info c_info(const tramp::LinkInfo& i) {
  UTRAMP_OPTS(utramp_link_info, out);
  out.id = i.id;
  out.type = static_cast<uint64_t>(c_type(i.type));
  out.func = reinterpret_cast<void*>(i.func);
  out.func_name = i.function;
  if (i.type == tramp::AttachType::freplace) out.replacement = reinterpret_cast<void*>(i.prog);
  else if (i.type != tramp::AttachType::tracer) out.prog = reinterpret_cast<utramp_prog_t>(i.prog);
  out.cookie = i.cookie;
  out.run_cnt = i.run_cnt;
  out.run_time_ns = i.run_ns;
  out.misses = i.misses;
  out.link = handle(const_cast<tramp::Link*>(i.link));
  return out;
}

}  // namespace

extern "C" {

const char* utramp_version(void) { return UTRAMP_VERSION_STRING; }

const char* utramp_last_error(void) { return t_last_error ? t_last_error : ""; }

int utramp_sites_discover(void) {
  if (auto r = ordinary_thread(__func__); !r) return fail(r.error());
  auto& t = utramp::sites::SiteTable::instance();
  auto n = t.discover();
  if (!n) return fail(n.error());
  auto c = t.canonicalize(utramp::sites::Quiescence::live);
  if (!c) return fail(c.error());
  return static_cast<int>(t.all().size());
}

int utramp_sites_foreach(const char* glob, int (*fn)(const utramp_site_info*, void*), void* arg) {
  if (!fn) return fail(null_arg(__func__, "fn"));
  if (auto r = ordinary_thread(__func__); !r) return fail(r.error());
  auto& t = utramp::sites::SiteTable::instance();
  auto sites = glob ? t.match(glob) : t.all();
  int n = 0;
  for (auto* s : sites) {
    std::string why;
    const bool ok = s->usable(&why);
    utramp_site_info info{s->info.name.c_str(), s->object().c_str(), s->info.func, s->info.site,
                          static_cast<int>(s->info.kind), ok ? 1 : 0, ok ? "" : why.c_str()};
    ++n;
    if (fn(&info, arg)) break;
  }
  return n;
}

// ---- trampolines ------------------------------------------------------------------

struct utramp_link* utramp_attach(void* func, enum utramp_attach_type type, utramp_prog_t prog,
                                  const struct utramp_attach_opts* opts) {
  if (auto r = ordinary_thread(__func__); !r) return fail_null<utramp_link>(r.error());
  if (!func) return fail_null<utramp_link>(null_arg(__func__, "func"));
  return attach_program(__func__, type, prog, opts, [&](tramp::AttachType t, const tramp::AttachOptions& o) {
    return tramp::Manager::instance().attach(reinterpret_cast<uint64_t>(func), t,
                                             reinterpret_cast<uint64_t>(prog), o);
  });
}

struct utramp_link* utramp_attach_name(const char* symbol, enum utramp_attach_type type,
                                       utramp_prog_t prog, const struct utramp_attach_opts* opts) {
  if (auto r = ordinary_thread(__func__); !r) return fail_null<utramp_link>(r.error());
  if (!symbol) return fail_null<utramp_link>(null_arg(__func__, "symbol"));
  return attach_program(__func__, type, prog, opts, [&](tramp::AttachType t, const tramp::AttachOptions& o) {
    return tramp::Manager::instance().attach_name(symbol, t, reinterpret_cast<uint64_t>(prog), o);
  });
}

struct utramp_link* utramp_attach_replace(void* func, void* replacement,
                                          const struct utramp_attach_opts* opts) {
  if (auto r = ordinary_thread(__func__); !r) return fail_null<utramp_link>(r.error());
  if (!func) return fail_null<utramp_link>(null_arg(__func__, "func"));
  return attach_replacement(__func__, replacement, opts, [&](const tramp::AttachOptions& o) {
    return tramp::Manager::instance().attach(reinterpret_cast<uint64_t>(func), tramp::AttachType::freplace,
                                             reinterpret_cast<uint64_t>(replacement), o);
  });
}

struct utramp_link* utramp_attach_replace_name(const char* symbol, void* replacement,
                                               const struct utramp_attach_opts* opts) {
  if (auto r = ordinary_thread(__func__); !r) return fail_null<utramp_link>(r.error());
  if (!symbol) return fail_null<utramp_link>(null_arg(__func__, "symbol"));
  return attach_replacement(__func__, replacement, opts, [&](const tramp::AttachOptions& o) {
    return tramp::Manager::instance().attach_name(symbol, tramp::AttachType::freplace,
                                                  reinterpret_cast<uint64_t>(replacement), o);
  });
}

int utramp_attach_batch(struct utramp_attach_req* reqs, size_t n) {
  if (!reqs && n) return fail(null_arg(__func__, "reqs"));
  if (auto r = ordinary_thread(__func__); !r) return fail(r.error());
  std::vector<tramp::Manager::AttachRequest> valid;
  std::vector<size_t> index;  // valid[k] is reqs[index[k]]
  std::optional<Error> first;  // the message of the lowest failing request
  size_t first_at = n;
  auto refuse = [&](size_t i, const Error& e) {
    reqs[i].link = nullptr;
    reqs[i].err = -errno_of(e.code);
    if (i < first_at) {
      first_at = i;
      first = make_error(e.code, fmt::format("request {}: {}", i, e.message));
    }
  };
  for (size_t i = 0; i < n; ++i) {
    utramp_attach_req& q = reqs[i];
    auto t = program_type(q.type);
    auto o = attach_options(q.opts);
    if (!q.func) refuse(i, null_arg(__func__, "func"));
    else if (!t) refuse(i, t.error());
    else if (!q.prog) refuse(i, null_arg(__func__, "prog"));
    else if (!o) refuse(i, o.error());
    else {
      valid.push_back({reinterpret_cast<uint64_t>(q.func), *t, reinterpret_cast<uint64_t>(q.prog),
                       std::move(*o)});
      index.push_back(i);
    }
  }
  int made = 0;
  auto results = tramp::Manager::instance().attach_many(valid);
  for (size_t k = 0; k < results.size(); ++k) {
    if (!results[k]) {
      refuse(index[k], results[k].error());
      continue;
    }
    reqs[index[k]].link = handle(*results[k]);
    reqs[index[k]].err = 0;
    ++made;
  }
  if (first) {
    set_message(first->message);
    errno = errno_of(first->code);
  }
  return made;
}

int utramp_link_detach(struct utramp_link* link) {
  if (!link) return fail(null_arg(__func__, "link"));
  if (auto r = ordinary_thread(__func__); !r) return fail(r.error());
  auto& m = tramp::Manager::instance();
  auto info = m.link_info(internal(link));
  if (!info) return fail(info.error());
  if (info->type == tramp::AttachType::tracer)
    return fail(make_error(Errc::invalid_argument,
                           fmt::format("{}: link {} on {} belongs to the function_graph tracer",
                                       __func__, info->id, info->function)));
  auto r = m.detach(internal(link));
  if (!r) return fail(r.error());
  return 0;
}

uint64_t utramp_get_func_ip(const uint64_t* ctx) {
  if (!ctx) return ctx_fail_value("utramp_get_func_ip: ctx is NULL");
  return ctx[utramp::abi::kCtxFuncIp];
}

uint64_t utramp_get_func_arg_cnt(const uint64_t* ctx) {
  if (!ctx) return ctx_fail_value("utramp_get_func_arg_cnt: ctx is NULL");
  return utramp::abi::ctx_arg_count(ctx);
}

int utramp_get_func_arg(const uint64_t* ctx, uint32_t n, uint64_t* value) {
  if (!ctx) return ctx_fail("utramp_get_func_arg: ctx is NULL");
  if (!value) return ctx_fail("utramp_get_func_arg: value is NULL");
  if (n >= utramp::abi::ctx_arg_count(ctx)) return -EINVAL;
  *value = ctx[n];
  return 0;
}

int utramp_get_func_ret(const uint64_t* ctx, uint64_t* value) {
  if (!ctx) return ctx_fail("utramp_get_func_ret: ctx is NULL");
  if (!value) return ctx_fail("utramp_get_func_ret: value is NULL");
  if (!utramp::abi::ctx_ret_valid(ctx)) {
    set_message("utramp_get_func_ret: no return value yet (an fentry program)");
    return -EOPNOTSUPP;
  }
  *value = ctx[utramp::abi::ctx_arg_count(ctx)];
  return 0;
}

uint64_t utramp_get_attach_cookie(const uint64_t* ctx) {
  if (!ctx) return ctx_fail_value("utramp_get_attach_cookie: ctx is NULL");
  return ctx[utramp::abi::kCtxCookie];
}

void utramp_set_stats(int on) {
  if (auto r = ordinary_thread(__func__); !r) {
    fail(r.error());
    return;
  }
  tramp::Manager::instance().set_stats(on != 0);
}

int utramp_link_get_info(const struct utramp_link* link, struct utramp_link_info* info) {
  if (!link) return fail(null_arg(__func__, "link"));
  if (!info) return fail(null_arg(__func__, "info"));
  if (info->sz < offsetof(utramp_link_info, id) + sizeof(info->id))
    return fail(make_error(Errc::invalid_argument,
                           fmt::format("{}: info->sz is {}: it must be sizeof(struct "
                                       "utramp_link_info)", __func__, info->sz)));
  if (auto r = ordinary_thread(__func__); !r) return fail(r.error());
  auto i = tramp::Manager::instance().link_info(internal(link));
  if (!i) return fail(i.error());
  const utramp_link_info out = c_info(*i);
  const size_t sz = info->sz;
  std::memcpy(info, &out, std::min(sz, sizeof out));
  if (sz > sizeof out) std::memset(reinterpret_cast<char*>(info) + sizeof out, 0, sz - sizeof out);
  info->sz = sz;
  return 0;
}

int utramp_links_foreach(int (*fn)(const struct utramp_link_info* info, void* arg), void* arg) {
  if (!fn) return fail(null_arg(__func__, "fn"));
  if (auto r = ordinary_thread(__func__); !r) return fail(r.error());
  int n = 0;
  for (const tramp::LinkInfo& l : tramp::Manager::instance().links()) {
    const utramp_link_info info = c_info(l);
    ++n;
    if (fn(&info, arg)) break;
  }
  return n;
}

}  // extern "C"

// ---- probes -------------------------------------------------------------------------

static_assert(sizeof(utramp_regs) == sizeof(utramp::arch::PtRegs));
static_assert(offsetof(utramp_regs, rip) == offsetof(utramp::arch::PtRegs, rip));
static_assert(offsetof(utramp_regs, rsp) == offsetof(utramp::arch::PtRegs, rsp));
// Option structs have no padding (utramp.h): the bytes past sz of an older caller are
// whole fields.
static_assert(sizeof(utramp_attach_opts) == 3 * 8);
static_assert(sizeof(utramp_link_info) == 12 * 8);

namespace {

// The same function type but for the register struct's name: the layouts are one.
utramp::probe::Handler to_handler(utramp_probe_handler_t h) {
  return reinterpret_cast<utramp::probe::Handler>(h);
}

utramp_probe* probe_result(utramp::Result<utramp::probe::Probe*> r) {
  if (!r) return fail_null<utramp_probe>(r.error());
  return reinterpret_cast<utramp_probe*>(*r);
}

}  // namespace

extern "C" {

struct utramp_probe* utramp_probe_attach(void* addr, utramp_probe_handler_t pre,
                                         utramp_probe_handler_t post, uint64_t cookie) {
  if (auto r = ordinary_thread(__func__); !r) return fail_null<utramp_probe>(r.error());
  if (!addr) return fail_null<utramp_probe>(null_arg(__func__, "addr"));
  utramp::probe::ProbeSpec spec{reinterpret_cast<uint64_t>(addr), to_handler(pre),
                                to_handler(post), cookie};
  return probe_result(utramp::probe::Manager::instance().attach(spec));
}

struct utramp_probe* utramp_probe_attach_name(const char* symbol, uint64_t offset,
                                              utramp_probe_handler_t pre,
                                              utramp_probe_handler_t post, uint64_t cookie) {
  if (auto r = ordinary_thread(__func__); !r) return fail_null<utramp_probe>(r.error());
  if (!symbol) return fail_null<utramp_probe>(null_arg(__func__, "symbol"));
  auto& m = utramp::probe::Manager::instance();
  auto addr = m.resolve(symbol, offset);
  if (!addr) return fail_null<utramp_probe>(addr.error());
  return probe_result(m.attach({*addr, to_handler(pre), to_handler(post), cookie}));
}

struct utramp_probe* utramp_retprobe_attach(void* func, utramp_probe_handler_t entry,
                                            utramp_probe_handler_t ret, uint64_t cookie,
                                            int maxactive) {
  if (auto r = ordinary_thread(__func__); !r) return fail_null<utramp_probe>(r.error());
  if (!func) return fail_null<utramp_probe>(null_arg(__func__, "func"));
  utramp::probe::RetprobeSpec spec{reinterpret_cast<uint64_t>(func), to_handler(entry),
                                   to_handler(ret), cookie, maxactive};
  return probe_result(utramp::probe::Manager::instance().attach_retprobe(spec));
}

int utramp_probe_detach(struct utramp_probe* probe) {
  if (!probe) return fail(null_arg(__func__, "probe"));
  if (auto r = ordinary_thread(__func__); !r) return fail(r.error());
  auto r = utramp::probe::Manager::instance().detach(reinterpret_cast<utramp::probe::Probe*>(probe));
  if (!r) return fail(r.error());
  return 0;
}

}  // extern "C"
