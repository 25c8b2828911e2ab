#include "sites/loader_watch.hpp"

#include <elf.h>
#include <errno.h>
#include <fmt/format.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "arch/arch.hpp"
#include "common/hex.hpp"
#include "os/exec_memory.hpp"
#include "os/maps.hpp"
#include "patch/patcher.hpp"

namespace utramp::sites {

namespace {

std::atomic<LoaderCallback> g_callback{nullptr};
r_debug* g_debug = nullptr;  // set before the hook is reachable, never changed
uint64_t g_site = 0;        // where the jump went, and the bytes before and after it
uint8_t g_original[arch::kSiteLen], g_jump[arch::kSiteLen];
uint64_t g_hop = 0;
bool g_installed = false;    // under the patcher's serialisation (install is rare)

// Jumped to by the patched r_brk, as r_brk itself: called by the loader, returns to it.
// errno is the loader's to keep.
// A removal (RT_DELETE, then the unmapping, then RT_CONSISTENT) makes cached views of
// the mappings stale: the generation they compare (os::unmap_generation) moves before
// the callback hears of the end of it, since the loader's own count of removals
// (dlpi_subs) may not have moved yet. Announcements are serialised by the loader's lock.
bool g_removing = false;
extern "C" void utramp_loader_brk() {
  const int saved = errno;
  const auto state = static_cast<LoaderState>(g_debug->r_state);
  if (state == LoaderState::remove) g_removing = true;
  if (state == LoaderState::consistent && g_removing) {
    g_removing = false;
    os::bump_unmap_generation();
  }
  if (LoaderCallback cb = g_callback.load(std::memory_order_acquire)) cb(state);
  errno = saved;
}

// The main program's r_debug, from its DT_DEBUG entry (the loader fills it in), without
// asking the loader (dlsym would take its lock).
r_debug* find_r_debug() {
  r_debug* found = nullptr;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_DYNAMIC) continue;
          for (auto* d = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + ph.p_vaddr);
               d->d_tag != DT_NULL; ++d)
            if (d->d_tag == DT_DEBUG && d->d_un.d_ptr)
              *static_cast<r_debug**>(data) = reinterpret_cast<r_debug*>(d->d_un.d_ptr);
        }
        return 1;  // the first object is the main program
      },
      &found);
  return found;
}

// True when [from, to) holds nothing but NOP and int3 instructions that end exactly at
// `to`: alignment padding, which no code reaches.
bool padding(uint64_t from, uint64_t to) {
  for (uint64_t a = from; a < to;) {
    const auto* p = reinterpret_cast<const uint8_t*>(a);
    if (*p == arch::kTrapByte) {
      ++a;
      continue;
    }
    auto insn = arch::decode(p, to - a, a);
    if (!insn || !insn->is_nop) return false;
    a += insn->length;
  }
  return true;
}

}  // namespace

Result<void> watch_loader(LoaderCallback callback) {
  g_callback.store(callback, std::memory_order_release);
  if (g_installed) return {};
  r_debug* dbg = find_r_debug();
  if (!dbg || !dbg->r_brk)
    return make_error(Errc::unsupported, "the program has no r_debug (DT_DEBUG): statically linked?");
  const uint64_t brk = dbg->r_brk;
  const auto* code = reinterpret_cast<const uint8_t*>(brk);
  const uint64_t site = brk + arch::landing_pad_length({code, arch::kMaxInsnLen});
  const uint64_t end = (site + 1 + 15) & ~uint64_t{15};  // the next 16-byte boundary
  const std::span<const uint8_t> seen(reinterpret_cast<const uint8_t*>(site), arch::kSiteLen);
  auto ret = arch::decode(seen.data(), seen.size(), site);
  if (!ret || ret->flow != arch::Flow::ret || ret->length != 1 || end < site + arch::kSiteLen ||
      !padding(site + 1, end))
    return make_error(Errc::unsupported,
                      fmt::format("the loader's r_brk at {:#x} is not an empty function followed by "
                                  "padding (bytes {}): cannot hook it",
                                  brk, hex_bytes(std::span(reinterpret_cast<const uint8_t*>(brk), end - brk))));
  // The hop: r_brk jumps (rel32) to a stub near it that jumps to the hook, wherever the
  // runtime was loaded.
  const auto w = arch::rel32_window(site);
  auto probe = arch::encode_jump_anywhere(w.lo, reinterpret_cast<uint64_t>(&utramp_loader_brk));
  if (!probe) return std::move(probe).error();
  auto block = os::ExecArena::instance().allocate(probe->size() + 16, w.lo, w.hi);
  if (!block) return std::move(block).error();
  auto stub = arch::encode_jump_anywhere(block->addr, reinterpret_cast<uint64_t>(&utramp_loader_brk));
  if (!stub) return std::move(stub).error();
  UTRAMP_TRY(os::ExecArena::instance().write(*block, 0, *stub));
  auto jmp = arch::encode_jmp(site, block->addr);
  if (!jmp) return std::move(jmp).error();
  g_debug = dbg;
  patch::PatchOp op;
  op.addr = site;
  op.expected.assign(seen.begin(), seen.end());
  op.replacement.assign(jmp->begin(), jmp->end());
  op.emulate = patch::Emulation::jump_to(block->addr);
  op.label = "_dl_debug_state (r_brk)";
  UTRAMP_TRY(patch::apply(std::span(&op, 1)));
  g_installed = true;
  g_site = site;
  std::copy(op.expected.begin(), op.expected.end(), g_original);
  std::copy(op.replacement.begin(), op.replacement.end(), g_jump);
  g_hop = block->addr;
  return {};
}

Result<void> unwatch_loader() {
  g_callback.store(nullptr, std::memory_order_release);
  if (!g_installed) return {};
  patch::PatchOp op;
  op.addr = g_site;
  op.expected.assign(g_jump, g_jump + arch::kSiteLen);
  op.replacement.assign(g_original, g_original + arch::kSiteLen);
  // A thread trapped on the int3 goes on to the hook, which returns to the loader (the
  // callback is gone: it does nothing else of note).
  op.emulate = patch::Emulation::jump_to(g_hop);
  op.label = "_dl_debug_state (r_brk)";
  UTRAMP_TRY(patch::apply(std::span(&op, 1)));
  g_installed = false;
  return {};
}

}  // namespace utramp::sites
