#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "arch/arch.hpp"
#include "common/hex.hpp"
#include "sites/site.hpp"

namespace utramp::sites {

std::string_view site_kind_name(SiteKind k) noexcept {
  switch (k) {
    case SiteKind::nop5: return "nop5";
    case SiteKind::nop1x5: return "nop1x5";
    case SiteKind::fentry_call: return "fentry";
    case SiteKind::fentry_gotpcrel: return "fentry-got";
    case SiteKind::xray_sled: return "xray";
    case SiteKind::mcount: return "mcount";
    case SiteKind::prologue: return "prologue";
    case SiteKind::none: return "none";
  }
  return "?";
}

namespace {

std::string where(std::string_view name, uint64_t func, uint64_t addr) {
  return fmt::format("{}+{:#x}", name, addr - func);
}

// How far into a function a -pg profiling call is looked for: gcc puts it right after
// the frame set-up (and the stack allocation at -O0); clang after storing or moving the
// arguments away, which for six arguments is about 40 bytes.
constexpr size_t kMcountWindow = 128;

// -pg without -mfentry: `call mcount` (or through its GOT slot) once the frame is set
// up. Returns false when the function's first call is not one, else classifies it: the
// call is the site when everything before it can be undone from there (the stub does:
// arch::frame_undo), otherwise `s.reason` says which instruction prevents it.
bool classify_mcount(std::string_view name, std::span<const uint8_t> code, size_t off,
                     const ObjectContext& ctx, SiteInfo& s) {
  if (!ctx.is_mcount && !ctx.is_mcount_slot) return false;
  const size_t limit = std::min(code.size(), s.size ? std::min<size_t>(s.size, kMcountWindow)
                                                    : kMcountWindow);
  for (size_t a = off; a < limit;) {
    auto insn = arch::decode(code.data() + a, code.size() - a, s.func + a);
    if (!insn) return false;
    const bool hit =
        (insn->flow == arch::Flow::call && ctx.is_mcount && ctx.is_mcount(insn->target)) ||
        (insn->flow == arch::Flow::indirect_call && insn->rip_relative && insn->length == 6 &&
         ctx.is_mcount_slot && ctx.is_mcount_slot(insn->target));
    if (!hit) {
      if (insn->flow != arch::Flow::none) return false;  // another call or a branch first
      a += insn->length;
      continue;
    }
    s.listed = s.listed || (ctx.listed && ctx.listed(s.func + a));
    auto undo = arch::frame_undo(code.first(a), s.func);
    if (!undo) {
      s.reason = fmt::format("{}: the profiling call '{}' at {} cannot be the site: what runs "
                             "before it cannot be undone from there: {}{}",
                             name, insn->text(), where(name, s.func, s.func + a), name,
                             undo.error().message);
      return true;
    }
    s.kind = SiteKind::mcount;
    s.site = s.func + a;
    s.site_len = insn->length;
    s.attachable = true;
    return true;
  }
  return false;
}

}  // namespace

Result<uint8_t> prologue_length(std::string_view name, uint64_t func,
                                std::span<const uint8_t> code, uint64_t site) {
  const uint64_t end = func + code.size();
  if (site + arch::kSiteLen > end)
    return make_error(Errc::too_small,
                      fmt::format("{} is {} bytes long: too short for a 5-byte site at +{:#x}", name,
                                  code.size(), site - func));
  // Decode the whole function: collect every direct branch target and every indirect
  // jump, since either could land inside the bytes we would move.
  uint64_t moved_end = 0;
  std::vector<std::pair<uint64_t, uint64_t>> branches;  // (from, target)
  for (uint64_t a = func; a < end;) {
    auto insn = arch::decode(code.data() + (a - func), end - a, a);
    if (!insn)
      return make_error(Errc::unsupported,
                        fmt::format("{}: cannot decode at {}: {}", name, where(name, func, a),
                                    insn.error().message));
    if (a >= site && moved_end == 0 && a + insn->length >= site + arch::kSiteLen)
      moved_end = a + insn->length;
    if (a < site && a + insn->length > site)
      return make_error(Errc::not_instruction_boundary,
                        fmt::format("{}: site at {} is inside an instruction", name,
                                    where(name, func, site)));
    if (insn->relative_branch) branches.push_back({a, insn->target});
    if (insn->flow == arch::Flow::indirect_jump && !insn->rip_relative)
      return make_error(Errc::unsupported,
                        fmt::format("{}: indirect jump '{}' at {} may target the first bytes "
                                    "(jump table): cannot prove the prologue can move",
                                    name, insn->text(), where(name, func, a)));
    a += insn->length;
  }
  if (moved_end == 0 || moved_end - site > arch::kMaxInsnLen + arch::kSiteLen)
    return make_error(Errc::too_small, fmt::format("{}: no whole instructions cover 5 bytes", name));
  for (auto [from, target] : branches)
    if (target > site && target < moved_end)
      return make_error(Errc::unsupported,
                        fmt::format("{}: branch at {} targets {}, inside the {} bytes the site "
                                    "would replace",
                                    name, where(name, func, from), where(name, func, target),
                                    moved_end - site));
  // Each moved instruction must be relocatable: try a move a page away.
  auto r = arch::relocate(code.subspan(site - func, moved_end - site), site, site + 0x100000);
  if (!r) return make_error(r.error().code, fmt::format("{}: {}", name, r.error().message));
  return static_cast<uint8_t>(moved_end - site);
}

SiteInfo classify(std::string_view name, uint64_t func, uint64_t size,
                  std::span<const uint8_t> code, const ObjectContext& ctx) {
  SiteInfo s;
  s.name = std::string(name);
  s.func = func;
  s.size = size;
  const size_t off = arch::landing_pad_length(code);
  s.endbr = off != 0;
  s.site = func + off;
  s.listed = ctx.listed && (ctx.listed(func) || ctx.listed(s.site));

  using P = arch::EntryPattern::Kind;
  const arch::EntryPattern pat = off < code.size() ? arch::classify_entry(code.subspan(off), s.site)
                                                   : arch::EntryPattern{};
  switch (pat.kind) {
    case P::nop5: s.kind = SiteKind::nop5; break;  // clang's 0f 1f 44 00 08 too (canonicalised)
    case P::nop1x5: s.kind = SiteKind::nop1x5; break;
    // A profiling call at the very entry, before any frame, is an fentry site whatever
    // it calls (mcount there has nothing to undo).
    case P::call_rel32:
      if ((ctx.is_fentry && ctx.is_fentry(pat.target)) || (ctx.is_mcount && ctx.is_mcount(pat.target)))
        s.kind = SiteKind::fentry_call;
      break;
    case P::call_rip_indirect:
      if ((ctx.is_fentry_slot && ctx.is_fentry_slot(pat.target)) ||
          (ctx.is_mcount_slot && ctx.is_mcount_slot(pat.target)))
        s.kind = SiteKind::fentry_gotpcrel;
      break;
    case P::xray_sled:
      if (ctx.has_xray) s.kind = SiteKind::xray_sled;
      break;
    case P::none: break;
  }
  if (s.kind != SiteKind::none) s.site_len = pat.len;
  if (s.kind != SiteKind::none) {
    s.attachable = true;
    return s;
  }
  if (classify_mcount(name, code, off, ctx, s) && s.attachable) return s;
  // A profiling call that cannot be a site keeps its reason; the entry may still be a
  // relocated prologue (the call then runs as without utramp).
  const std::string mcount_refused = std::move(s.reason);
  s.reason.clear();
  // No compiler site: a relocated prologue, if it can be proven safe.
  if (name.ends_with(".cold") || name.find(".cold.") != std::string_view::npos) {
    s.reason = "a cold fragment split out of its function, not a function entry";
    return s;
  }
  if (size == 0) {
    s.reason = "the symbol has no size: the function's bounds are unknown";
    return s;
  }
  if (code.size() < size) {
    s.reason = fmt::format("only {} of {} bytes readable", code.size(), size);
    return s;
  }
  // `code` may run past the symbol (the reader supplies at least 16 bytes); only the
  // function's own bytes may be decoded, or the padding and the next function would be.
  auto len = prologue_length(name, func, code.first(size), s.site);
  if (!len) {
    s.reason = mcount_refused.empty() ? len.error().message
                                      : fmt::format("{}; {}", mcount_refused, len.error().message);
    return s;
  }
  s.kind = SiteKind::prologue;
  s.site_len = *len;
  s.attachable = true;
  s.reason = mcount_refused;  // why the profiling call is not the site, when there is one
  return s;
}

}  // namespace utramp::sites
