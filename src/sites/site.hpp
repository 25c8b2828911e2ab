// What a function entry holds, and what it takes to turn it into a patchable site.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/result.hpp"

namespace utramp::sites {

enum class SiteKind : uint8_t {
  nop5,             // one 5-byte NOP (clang -fpatchable-function-entry=5, canonical form)
  nop1x5,           // five 1-byte NOPs (gcc -fpatchable-function-entry=5)
  fentry_call,      // call __fentry__ (-pg -mfentry)
  fentry_gotpcrel,  // call *__fentry__@GOTPCREL(%rip) (-pg -mfentry, PIE)
  xray_sled,        // jmp +9; nop9 (clang -fxray-instrument)
  mcount,           // call mcount (or through its GOT slot) once the frame is set up
                    // (-pg without -mfentry): the site is that call, not the entry
  prologue,         // no compiler site: whole prologue instructions are relocated
  none,             // nothing usable; `reason` says why
};

std::string_view site_kind_name(SiteKind k) noexcept;

// Whether callers of a function with this entry may rely on more than the ABI: keep
// values in call-clobbered registers the function does not touch (gcc -fipa-ra, on from
// -O2, for callers in the same translation unit). gcc turns that off in translation
// units built with -pg or -fpatchable-function-entry, and clang has no interprocedural
// register allocation by default, so only a function without a compiler site is
// exposed (a gcc `patchable_function_entry` attribute alone plants a site without
// turning it off: docs/sites.md). Everything utramp runs around an exposed function
// keeps every register (arch/image.hpp: preserve_all).
constexpr bool ipa_ra_exposed(SiteKind k) noexcept { return k == SiteKind::prologue; }

// (The small members together: one per function of every object analysed.)
struct SiteInfo {
  std::string name;
  uint64_t func = 0;      // function start
  uint64_t size = 0;      // symbol size
  uint64_t site = 0;      // address the 5-byte call/jmp will occupy (mcount: the call's)
  SiteKind kind = SiteKind::none;
  bool endbr = false;     // the site follows an endbr64
  uint8_t site_len = 0;   // bytes of the original instruction(s) the canonical site replaces
  bool attachable = false;
  bool listed = false;    // listed in __patchable_function_entries / __mcount_loc
  bool ifunc = false;     // an STT_GNU_IFUNC symbol: `func` is its resolver, not the function
  std::string reason;     // why not attachable
  // Canonicalisation must happen while no thread can be inside the site (nop1x5).
  bool needs_quiescence() const { return kind == SiteKind::nop1x5; }
};

// What the classifier may ask about the object the function lives in.
struct ObjectContext {
  // The address is listed in __patchable_function_entries or __mcount_loc.
  std::function<bool(uint64_t)> listed;
  // `call rel32` to this address calls __fentry__ (a PLT stub or the symbol).
  std::function<bool(uint64_t)> is_fentry;
  // This GOT slot holds __fentry__'s address.
  std::function<bool(uint64_t)> is_fentry_slot;
  // `call rel32` to this address calls mcount (-pg without -mfentry).
  std::function<bool(uint64_t)> is_mcount;
  // This GOT slot holds mcount's address.
  std::function<bool(uint64_t)> is_mcount_slot;
  // The object carries XRay instrumentation maps.
  bool has_xray = false;
};

// Classifies the entry of a function whose bytes are `code` (from `func`, `size` long;
// `code` may be shorter when the reader could not supply all of it).
SiteInfo classify(std::string_view name, uint64_t func, uint64_t size,
                  std::span<const uint8_t> code, const ObjectContext& ctx);

// For the relocated-prologue kind: the number of bytes of whole instructions from `site`
// that will move (>= 5), or an error naming the instruction that prevents it.
Result<uint8_t> prologue_length(std::string_view name, uint64_t func,
                                std::span<const uint8_t> code, uint64_t site);

}  // namespace utramp::sites
