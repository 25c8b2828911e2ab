// The functions of one ELF object and what each entry holds.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "os/elf_file.hpp"
#include "sites/site.hpp"

namespace utramp::sites {

struct ObjectSites {
  std::string path;
  uint64_t bias = 0;  // load address minus link-time address
  bool stripped = false;
  bool has_patchable_entries = false, has_mcount_loc = false, has_xray = false;
  // Built with -finstrument-functions: its functions report their calls themselves
  // (it calls __cyg_profile_func_enter), so a tracer needs no site in it.
  bool reports_calls = false;
  std::vector<SiteInfo> functions;  // by address
};

// Reads `len` bytes at run-time address `addr`; returns what it could.
using CodeReader = std::function<std::span<const uint8_t>(uint64_t addr, uint64_t len)>;

// Analyses `elf` as loaded at `bias`, reading the code to classify through `read`
// (the file image for static listing, live memory for a running process).
ObjectSites analyse_object(const os::ElfFile& elf, uint64_t bias, const CodeReader& read);

// Whether an object was built to be traced — compiler-planted entry sites
// (-fpatchable-function-entry, -pg with or without -mfentry, -mrecord-mcount, XRay) or
// -finstrument-functions reports — judged from its outline alone (cheap: no code is
// read). A tracer traces such a library by default, as uftrace does; the others only
// when asked (--libs).
bool built_for_tracing(const os::ElfOutline& outline);

// Static analysis of a file on disk, as `utramp list` shows it.
Result<ObjectSites> analyse_file(const std::string& path);

}  // namespace utramp::sites
