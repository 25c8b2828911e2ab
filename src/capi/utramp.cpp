// The C API over the internal layers.
#include <utramp/utramp.h>

#include <cerrno>
#include <cstddef>
#include <string>

#include "abi/ctx.hpp"
#include "abi/signature.hpp"
#include "common/result.hpp"
#include "probe/probe.hpp"
#include "sites/table.hpp"
#include "tramp/trampoline.hpp"
#include "utramp_version.hpp"

namespace {

thread_local std::string t_last_error;

int fail(const utramp::Error& e, int err) {
  t_last_error = e.message;
  errno = err;
  return -err;
}

std::string fmt_type_error(int type) { return "unknown attach type " + std::to_string(type); }

int errno_of(utramp::Errc c) {
  using utramp::Errc;
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

}  // namespace

extern "C" {

const char* utramp_version(void) { return UTRAMP_VERSION_STRING; }

const char* utramp_last_error(void) { return t_last_error.c_str(); }

int utramp_sites_discover(void) {
  auto& t = utramp::sites::SiteTable::instance();
  auto n = t.discover();
  if (!n) return fail(n.error(), errno_of(n.error().code));
  auto c = t.canonicalize(utramp::sites::Quiescence::live);
  if (!c) return fail(c.error(), errno_of(c.error().code));
  return static_cast<int>(t.all().size());
}

int utramp_sites_foreach(const char* glob, int (*fn)(const utramp_site_info*, void*), void* arg) {
  auto& t = utramp::sites::SiteTable::instance();
  auto sites = glob ? t.match(glob) : t.all();
  int n = 0;
  for (auto* s : sites) {
    std::string why;
    const bool ok = s->usable(&why);
    utramp_site_info info{s->info.name.c_str(), s->object.c_str(), s->info.func, s->info.site,
                          static_cast<int>(s->info.kind), ok ? 1 : 0, ok ? "" : why.c_str()};
    ++n;
    if (fn(&info, arg)) break;
  }
  return n;
}

}  // extern "C"

struct utramp_link {
  utramp::tramp::Link* link;
};

namespace {

utramp::tramp::AttachType to_type(utramp_attach_type t) {
  switch (t) {
    case UTRAMP_FEXIT: return utramp::tramp::AttachType::fexit;
    case UTRAMP_FMOD_RET: return utramp::tramp::AttachType::fmod_ret;
    case UTRAMP_FREPLACE: return utramp::tramp::AttachType::freplace;
    default: return utramp::tramp::AttachType::fentry;
  }
}

template <class F>
utramp_link* attach_common(int type, const utramp_attach_opts* opts, F&& attach) {
  using namespace utramp;
  if (type < UTRAMP_FENTRY || type > UTRAMP_FREPLACE) {
    fail(make_error(Errc::invalid_argument, fmt_type_error(type)), EINVAL);
    return nullptr;
  }
  tramp::AttachOptions o;
  if (opts) {
    if (opts->sz < offsetof(utramp_attach_opts, signature) + sizeof(opts->signature)) {
      fail(make_error(Errc::invalid_argument, "utramp_attach_opts.sz is too small"), EINVAL);
      return nullptr;
    }
    o.cookie = opts->cookie;
    if (opts->signature) {
      auto sig = abi::parse_signature(opts->signature);
      if (!sig) {
        fail(sig.error(), EINVAL);
        return nullptr;
      }
      o.signature = *sig;
    }
  }
  auto r = attach(to_type(static_cast<utramp_attach_type>(type)), o);
  if (!r) {
    fail(r.error(), errno_of(r.error().code));
    return nullptr;
  }
  return new utramp_link{*r};
}

}  // namespace

extern "C" {

struct utramp_link* utramp_attach(void* func, enum utramp_attach_type type, void* prog,
                                  const struct utramp_attach_opts* opts) {
  return attach_common(type, opts, [&](utramp::tramp::AttachType t, const utramp::tramp::AttachOptions& o) {
    return utramp::tramp::Manager::instance().attach(reinterpret_cast<uint64_t>(func), t,
                                                     reinterpret_cast<uint64_t>(prog), o);
  });
}

struct utramp_link* utramp_attach_name(const char* symbol, enum utramp_attach_type type, void* prog,
                                       const struct utramp_attach_opts* opts) {
  if (!symbol) {
    fail(utramp::make_error(utramp::Errc::invalid_argument, "symbol is NULL"), EINVAL);
    return nullptr;
  }
  return attach_common(type, opts, [&](utramp::tramp::AttachType t, const utramp::tramp::AttachOptions& o) {
    return utramp::tramp::Manager::instance().attach_name(symbol, t, reinterpret_cast<uint64_t>(prog), o);
  });
}

int utramp_link_detach(struct utramp_link* link) {
  if (!link) return fail(utramp::make_error(utramp::Errc::invalid_argument, "link is NULL"), EINVAL);
  auto r = utramp::tramp::Manager::instance().detach(link->link);
  if (!r) return fail(r.error(), errno_of(r.error().code));
  delete link;
  return 0;
}

uint64_t utramp_get_func_ip(const uint64_t* ctx) { return ctx[utramp::abi::kCtxFuncIp]; }
uint64_t utramp_get_func_arg_cnt(const uint64_t* ctx) { return utramp::abi::ctx_arg_count(ctx); }
int utramp_get_func_arg(const uint64_t* ctx, uint32_t n, uint64_t* value) {
  if (n >= utramp::abi::ctx_arg_count(ctx)) return -EINVAL;
  *value = ctx[n];
  return 0;
}
int utramp_get_func_ret(const uint64_t* ctx, uint64_t* value) {
  if (!utramp::abi::ctx_ret_valid(ctx)) return -EOPNOTSUPP;
  *value = ctx[utramp::abi::ctx_arg_count(ctx)];
  return 0;
}
uint64_t utramp_get_attach_cookie(const uint64_t* ctx) { return ctx[utramp::abi::kCtxCookie]; }
void utramp_set_stats(int on) { utramp::tramp::Manager::instance().set_stats(on != 0); }

}  // extern "C"

// ---- probes -------------------------------------------------------------------------

static_assert(sizeof(utramp_regs) == sizeof(utramp::arch::PtRegs));
static_assert(offsetof(utramp_regs, rip) == offsetof(utramp::arch::PtRegs, rip));
static_assert(offsetof(utramp_regs, rsp) == offsetof(utramp::arch::PtRegs, rsp));

namespace {

// The same function type but for the register struct's name: the layouts are one.
utramp::probe::Handler to_handler(utramp_probe_handler_t h) {
  return reinterpret_cast<utramp::probe::Handler>(h);
}

utramp_probe* probe_result(utramp::Result<utramp::probe::Probe*> r) {
  if (!r) {
    fail(r.error(), errno_of(r.error().code));
    return nullptr;
  }
  return reinterpret_cast<utramp_probe*>(*r);
}

}  // namespace

extern "C" {

struct utramp_probe* utramp_probe_attach(void* addr, utramp_probe_handler_t pre,
                                         utramp_probe_handler_t post, uint64_t cookie) {
  utramp::probe::ProbeSpec spec{reinterpret_cast<uint64_t>(addr), to_handler(pre),
                                to_handler(post), cookie};
  return probe_result(utramp::probe::Manager::instance().attach(spec));
}

struct utramp_probe* utramp_probe_attach_name(const char* symbol, uint64_t offset,
                                              utramp_probe_handler_t pre,
                                              utramp_probe_handler_t post, uint64_t cookie) {
  if (!symbol) {
    fail(utramp::make_error(utramp::Errc::invalid_argument, "symbol is NULL"), EINVAL);
    return nullptr;
  }
  auto& m = utramp::probe::Manager::instance();
  auto addr = m.resolve(symbol, offset);
  if (!addr) {
    fail(addr.error(), errno_of(addr.error().code));
    return nullptr;
  }
  return probe_result(m.attach({*addr, to_handler(pre), to_handler(post), cookie}));
}

struct utramp_probe* utramp_retprobe_attach(void* func, utramp_probe_handler_t entry,
                                            utramp_probe_handler_t ret, uint64_t cookie,
                                            int maxactive) {
  utramp::probe::RetprobeSpec spec{reinterpret_cast<uint64_t>(func), to_handler(entry),
                                   to_handler(ret), cookie, maxactive};
  return probe_result(utramp::probe::Manager::instance().attach_retprobe(spec));
}

int utramp_probe_detach(struct utramp_probe* probe) {
  if (!probe) return fail(utramp::make_error(utramp::Errc::invalid_argument, "probe is NULL"), EINVAL);
  auto r = utramp::probe::Manager::instance().detach(reinterpret_cast<utramp::probe::Probe*>(probe));
  if (!r) return fail(r.error(), errno_of(r.error().code));
  return 0;
}

}  // extern "C"
