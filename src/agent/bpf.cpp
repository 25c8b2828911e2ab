#include "agent/bpf.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "ebpf/engine.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/loader.hpp"
#include "ebpf/maps.hpp"
#include "os/dwarf.hpp"
#include "sites/table.hpp"
#include "tramp/trampoline.hpp"

namespace utramp::agent {

namespace {

// Live for the whole process: programs may run until exit (images are not torn down).
struct BpfState {
  ebpf::MapFile maps;
  std::vector<std::unique_ptr<ebpf::Executable>> progs;
};
BpfState* g_bpf = nullptr;

tramp::AttachType attach_type(ebpf::ProgKind k) {
  switch (k) {
    case ebpf::ProgKind::fentry: return tramp::AttachType::fentry;
    case ebpf::ProgKind::fexit: return tramp::AttachType::fexit;
    case ebpf::ProgKind::fmod_ret: return tramp::AttachType::fmod_ret;
  }
  return tramp::AttachType::fentry;
}

}  // namespace

Result<void> bpf_start(const Config& cfg) {
  auto st = std::make_unique<BpfState>();
  auto mf = ebpf::MapFile::attach(cfg.bpf_map_file);
  if (!mf) return std::move(mf).error();
  st->maps = std::move(*mf);
  const ebpf::MapFile& maps = st->maps;
  for (size_t i = 0; i < maps.count(); ++i)
    if (maps.spec(i).name == ".printk") ebpf::set_printk_ring(maps.header(i));

  auto& table = sites::SiteTable::instance();
  if (auto r = table.discover(); !r) return std::move(r).error();
  (void)table.canonicalize(sites::Quiescence::live);

  const ebpf::HelperTable& helpers = ebpf::runtime_helpers();
  std::vector<tramp::Manager::AttachRequest> reqs;
  std::vector<std::string> what;
  size_t map_base = 0;
  for (const std::string& path : cfg.bpf_objects) {
    auto obj = ebpf::load_object_file(path, helpers);
    if (!obj) return std::move(obj).error();
    if (map_base + obj->maps.size() > maps.count())
      return make_error(Errc::bad_format, fmt::format("{}: the map file has fewer maps than the object", path));
    std::vector<uint64_t> hdr, val;
    ebpf::ExecOptions o;
    o.helpers = &helpers;
    for (size_t i = 0; i < obj->maps.size(); ++i) {
      const size_t k = map_base + i;
      if (maps.spec(k).name != obj->maps[i].name)
        return make_error(Errc::bad_format, fmt::format("{}: map {} is '{}' in the map file, '{}' in the object",
                                                        path, i, maps.spec(k).name, obj->maps[i].name));
      hdr.push_back(reinterpret_cast<uint64_t>(maps.header(k)));
      auto d = maps.values(k);  // never the map's locks, links or positions
      val.push_back(reinterpret_cast<uint64_t>(d.data()));
      o.regions.push_back({reinterpret_cast<uint64_t>(d.data()), reinterpret_cast<uint64_t>(d.data() + d.size()),
                           !obj->maps[i].readonly});
    }
    map_base += obj->maps.size();
    for (ebpf::LoadedProgram& p : obj->programs) {
      sites::Site* s = table.find_name(p.target);
      if (!s)
        return make_error(Errc::not_found, fmt::format("{}: program '{}' ({}): no function '{}' in the target",
                                                       path, p.name, p.section, p.target));
      auto sig = os::signature_from_dwarf(s->object, s->info.func - s->bias);
      tramp::Signature sg = sig ? *sig : tramp::Signature::fallback();
      if (sig) UTRAMP_TRY(ebpf::check_prototype(p, sg));
      ebpf::resolve(p, hdr, val);
      ebpf::ExecOptions po = o;
      po.ctx_size = 8 * static_cast<uint64_t>(sg.arg_slots() + (p.kind == ebpf::ProgKind::fentry ? 0 : std::max(1, sg.ret.slots())));
      ebpf::Program prog{p.name, p.section, std::move(p.insns)};
      auto ex = ebpf::load(std::move(prog), po, ebpf::EngineKind::jit);
      if (!ex) return make_error(ex.error().code, fmt::format("{}: program '{}': {}", path, p.name, ex.error().message));
      tramp::AttachOptions ao;
      reqs.push_back({s->info.func, attach_type(p.kind), reinterpret_cast<uint64_t>((*ex)->native()), ao});
      what.push_back(fmt::format("{} ({} {})", p.name, prog_kind_name(p.kind), p.target));
      st->progs.push_back(std::move(*ex));
    }
  }
  auto& mgr = tramp::Manager::instance();
  auto res = mgr.attach_many(reqs);
  std::string errors;
  for (size_t i = 0; i < res.size(); ++i)
    if (!res[i]) errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", what[i], res[i].error().message);
  if (!errors.empty()) {
    for (auto& r : res)
      if (r) (void)mgr.detach(*r);
    return make_error(Errc::invalid_argument, "cannot attach " + errors);
  }
  g_bpf = st.release();
  return {};
}

void bpf_start_or_exit(const Config& cfg) {
  auto r = bpf_start(cfg);
  const std::string msg = r ? std::string("ok\n") : "error: " + r.error().message + "\n";
  if (!cfg.bpf_status_file.empty()) {
    const int fd = open(cfg.bpf_status_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      (void)!write(fd, msg.data(), msg.size());
      close(fd);
    }
  }
  if (!r) _exit(125);
}

}  // namespace utramp::agent
