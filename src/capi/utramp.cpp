// The C API over the internal layers.
#include <utramp/utramp.h>

#include <cerrno>
#include <string>

#include "common/result.hpp"
#include "sites/table.hpp"

namespace {

thread_local std::string t_last_error;

int fail(const utramp::Error& e, int err) {
  t_last_error = e.message;
  errno = err;
  return -err;
}

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

const char* utramp_version(void) { return "0.1.0"; }

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
