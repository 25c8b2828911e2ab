#include "os/dwarf.hpp"

#include <dwarf.h>
#include <elf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fmt/format.h>
#include <fcntl.h>
#include <gelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "os/file.hpp"

namespace utramp::os {
namespace {

using abi::ArgType;
using abi::Part;
using abi::RetType;
using abi::Signature;

// Deepest nesting followed through types (typedef chains, members of members) and
// DW_AT_abstract_origin/DW_AT_specification chains; real code stays far below.
constexpr int kMaxDepth = 48;

// DWARF register numbers (psABI Figure 3.36) of the argument registers, in ABI order.
constexpr int kIntArgRegs[6] = {5, 4, 1, 2, 8, 9};  // rdi rsi rdx rcx r8 r9
constexpr int kXmm0 = 17;                            // xmm0..xmm7 are 17..24
constexpr const char* kIntArgNames[6] = {"rdi", "rsi", "rdx", "rcx", "r8", "r9"};

std::string reg_name(int dwreg) {
  for (int i = 0; i < 6; ++i)
    if (kIntArgRegs[i] == dwreg) return kIntArgNames[i];
  if (dwreg >= kXmm0 && dwreg < kXmm0 + 16) return fmt::format("xmm{}", dwreg - kXmm0);
  static constexpr const char* kOthers[] = {"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
                                            "r8",  "r9",  "r10", "r11", "r12", "r13", "r14", "r15"};
  if (dwreg >= 0 && dwreg < 16) return kOthers[dwreg];
  return fmt::format("DWARF register {}", dwreg);
}

// ---------------------------------------------------------------------------------------
// Small attribute helpers. The *_integrate forms follow DW_AT_abstract_origin and
// DW_AT_specification, so a concrete out-of-line instance answers with what its abstract
// instance or in-class declaration says.

const char* str_attr(Dwarf_Die* die, unsigned name, bool integrate = true) {
  Dwarf_Attribute a;
  Dwarf_Attribute* p = integrate ? dwarf_attr_integrate(die, name, &a) : dwarf_attr(die, name, &a);
  return p ? dwarf_formstring(p) : nullptr;
}

std::optional<Dwarf_Word> udata_attr(Dwarf_Die* die, unsigned name, bool integrate = false) {
  Dwarf_Attribute a;
  Dwarf_Attribute* p = integrate ? dwarf_attr_integrate(die, name, &a) : dwarf_attr(die, name, &a);
  Dwarf_Word w;
  if (p == nullptr || dwarf_formudata(p, &w) != 0) return std::nullopt;
  return w;
}

bool flag_attr(Dwarf_Die* die, unsigned name, bool integrate = false) {
  Dwarf_Attribute a;
  Dwarf_Attribute* p = integrate ? dwarf_attr_integrate(die, name, &a) : dwarf_attr(die, name, &a);
  bool f = false;
  return p != nullptr && dwarf_formflag(p, &f) == 0 && f;
}

std::optional<Dwarf_Die> ref_attr(Dwarf_Die* die, unsigned name, bool integrate = false) {
  Dwarf_Attribute a;
  Dwarf_Attribute* p = integrate ? dwarf_attr_integrate(die, name, &a) : dwarf_attr(die, name, &a);
  Dwarf_Die out;
  if (p == nullptr || dwarf_formref_die(p, &out) == nullptr) return std::nullopt;
  return out;
}

std::string die_name(Dwarf_Die* die) {
  const char* n = str_attr(die, DW_AT_name);
  return n ? n : "";
}

// A readable C-ish spelling of a type for diagnostics.
std::string type_name(Dwarf_Die die, int depth = 0) {
  if (depth > 8) return "...";
  if (auto sig = ref_attr(&die, DW_AT_signature)) die = *sig;  // type unit
  const char* n = dwarf_diename(&die);
  auto inner = [&]() -> std::string {
    auto t = ref_attr(&die, DW_AT_type);
    return t ? type_name(*t, depth + 1) : "void";
  };
  auto tagged = [&](const char* kw) { return fmt::format("{} {}", kw, n ? n : "<anonymous>"); };
  switch (dwarf_tag(&die)) {
    case DW_TAG_base_type:
    case DW_TAG_typedef:
    case DW_TAG_unspecified_type: return n ? n : "<unnamed>";
    case DW_TAG_structure_type: return tagged("struct");
    case DW_TAG_class_type: return tagged("class");
    case DW_TAG_union_type: return tagged("union");
    case DW_TAG_enumeration_type: return tagged("enum");
    case DW_TAG_pointer_type: return inner() + "*";
    case DW_TAG_reference_type: return inner() + "&";
    case DW_TAG_rvalue_reference_type: return inner() + "&&";
    case DW_TAG_const_type: return "const " + inner();
    case DW_TAG_volatile_type: return "volatile " + inner();
    case DW_TAG_restrict_type: return inner() + " restrict";
    case DW_TAG_atomic_type: return "_Atomic " + inner();
    case DW_TAG_array_type: return inner() + "[]";
    case DW_TAG_ptr_to_member_type: return inner() + " (member pointer)";
    case DW_TAG_subroutine_type: return "function";
    default: return fmt::format("<DWARF tag {:#x}>", dwarf_tag(&die));
  }
}

bool is_record(int tag) {
  return tag == DW_TAG_structure_type || tag == DW_TAG_class_type || tag == DW_TAG_union_type;
}

// Calls fn(cu_die, walk_die) for each compile unit, walk_die being the split unit of a
// skeleton (-gsplit-dwarf) and the unit itself otherwise; stops when fn returns true.
template <class F>
bool for_each_cu(Dwarf* dw, F&& fn) {
  Dwarf_CU* cu = nullptr;
  Dwarf_CU* next = nullptr;
  Dwarf_Half version;
  uint8_t type;
  Dwarf_Die cudie, subdie;
  while (dwarf_get_units(dw, cu, &next, &version, &type, &cudie, &subdie) == 0) {
    cu = next;
    if (type == DW_UT_skeleton) {
      Dwarf_Die split{};
      if (dwarf_cu_info(cu, nullptr, nullptr, nullptr, &split, nullptr, nullptr, nullptr) == 0 &&
          split.addr != nullptr && fn(cudie, split))
        return true;
      continue;
    }
    if (type != DW_UT_compile && type != DW_UT_partial) continue;  // type units hold no code
    if (fn(cudie, cudie)) return true;
  }
  return false;
}

// Visits every DW_TAG_subprogram under `parent`, descending into the scopes that can
// hold function definitions: namespaces, classes (member definitions), functions and
// blocks (member functions of local classes). Stops when fn returns true.
template <class F>
bool walk_subprograms(Dwarf_Die* parent, F& fn, int depth = 0) {
  Dwarf_Die child;
  if (depth > kMaxDepth || dwarf_child(parent, &child) != 0) return false;
  do {
    switch (dwarf_tag(&child)) {
      case DW_TAG_subprogram:
        if (fn(child)) return true;
        [[fallthrough]];
      case DW_TAG_namespace:
      case DW_TAG_structure_type:
      case DW_TAG_class_type:
      case DW_TAG_union_type:
      case DW_TAG_lexical_block:
        if (walk_subprograms(&child, fn, depth + 1)) return true;
        break;
      default: break;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
  return false;
}

// The entry of a function DIE with code: DW_AT_entry_pc or DW_AT_low_pc, else the start
// of its first range (gcc's hot part of a hot/cold split lists first).
std::optional<Dwarf_Addr> entry_of(Dwarf_Die* fn) {
  Dwarf_Addr a;
  if (dwarf_entrypc(fn, &a) == 0) return a;
  Dwarf_Addr base, start, end;
  if (dwarf_ranges(fn, 0, &base, &start, &end) > 0) return start;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------
// Finding separate debug info, locally only.
//
// libdwfl's own lookup (dwfl_standard_find_debuginfo) ends, when nothing is found on
// disk, by loading libdebuginfod with dlopen and asking a server. This code runs inside
// the traced process, often while utramp holds its locks: that dlopen re-entered the
// agent and deadlocked (a target without debug info), and a network fetch would stall
// the target for as long as the server takes. So the search is libdwfl's on-disk one,
// done here: the build-id tree, .gnu_debuglink, and debuginfod's client cache (what
// `debuginfod-find debuginfo FILE` fetched beforehand), never the network.

// The debug-info path: UTRAMP_DEBUGINFO_PATH, else elfutils' default. Entries are
// separated by ':'; an absolute one is a root under which the file's own directory is
// looked for, a relative one is relative to the file's directory, an empty one is that
// directory itself.
std::string debuginfo_path() {
  const char* env = std::getenv("UTRAMP_DEBUGINFO_PATH");
  return env != nullptr && *env != '\0' ? env : ":.debug:/usr/lib/debug";
}

std::vector<uint8_t> build_id_of(Elf* elf) {
  const void* bits = nullptr;
  const ssize_t n = dwelf_elf_gnu_build_id(elf, &bits);
  if (n <= 0) return {};
  const auto* b = static_cast<const uint8_t*>(bits);
  return {b, b + n};
}

// An open descriptor of `path` when it is a regular file whose build-id is `want` (any
// file when `want` is empty: the module has none to compare), else -1.
int open_matching(const std::string& path, const std::vector<uint8_t>& want) {
  auto opened = open_regular(path);
  if (!opened) return -1;
  const int fd = *opened;
  if (want.empty()) return fd;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  const bool same = elf != nullptr && build_id_of(elf) == want;
  if (elf != nullptr) elf_end(elf);
  if (same) return fd;
  ::close(fd);
  return -1;
}

int find_debuginfo_local(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                         const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                         char** debuginfo_file_name) {
  // The build-id tree under each root of the debuginfo path.
  int fd = dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
                                        debuglink_crc, debuginfo_file_name);
  if (fd >= 0) return fd;
  std::vector<uint8_t> id;
  const unsigned char* bits = nullptr;
  GElf_Addr id_vaddr = 0;
  if (const int n = dwfl_module_build_id(mod, &bits, &id_vaddr); n > 0) id.assign(bits, bits + n);
  std::vector<std::string> candidates;
  const std::string file = file_name != nullptr ? file_name : "";
  const std::string dir = file.find('/') == std::string::npos ? "." : file.substr(0, file.rfind('/'));
  if (debuglink_file != nullptr && *debuglink_file != '\0') {
    const std::string link = debuglink_file;
    const std::string paths = debuginfo_path();
    for (size_t pos = 0; pos <= paths.size();) {
      const size_t colon = std::min(paths.find(':', pos), paths.size());
      const std::string entry = paths.substr(pos, colon - pos);
      if (entry.empty()) candidates.push_back(dir + "/" + link);
      else if (entry[0] == '/') candidates.push_back(entry + (dir[0] == '/' ? dir : "/" + dir) + "/" + link);
      else candidates.push_back(dir + "/" + entry + "/" + link);
      pos = colon + 1;
    }
  }
  if (!id.empty()) {
    // debuginfod's client cache: <cache>/<build-id in hex>/debuginfo.
    std::string hex;
    for (uint8_t b : id) hex += fmt::format("{:02x}", b);
    std::string cache;
    if (const char* c = std::getenv("DEBUGINFOD_CACHE_PATH"); c != nullptr && *c != '\0') cache = c;
    else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
      cache = std::string(x) + "/debuginfod_client";
    else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
      cache = std::string(h) + "/.cache/debuginfod_client";
    if (!cache.empty()) candidates.push_back(cache + "/" + hex + "/debuginfo");
  }
  for (const std::string& c : candidates) {
    if (c == file) continue;  // the file itself was already read
    fd = open_matching(c, id);
    if (fd >= 0) {
      *debuginfo_file_name = strdup(c.c_str());
      return fd;
    }
  }
  return -1;
}

// ---------------------------------------------------------------------------------------
// The open file: libdwfl, with separate debug info found on disk (above).

class Debug {
 public:
  // `what` names the function for the not-found message.
  static Result<std::unique_ptr<Debug>> open(const std::string& path, const std::string& what);
  ~Debug() {
    if (dwfl_ != nullptr) dwfl_end(dwfl_);
  }
  Debug(const Debug&) = delete;
  Debug& operator=(const Debug&) = delete;

  Dwarf* dw = nullptr;
  Dwfl_Module* mod = nullptr;
  Dwarf_Addr dwbias = 0;    // DWARF address + dwbias = Dwfl address
  Dwarf_Addr mainbias = 0;  // file vaddr + mainbias = Dwfl address
  bool relocatable = false; // ET_REL: no discarded-COMDAT address 0 to skip
  std::string path;

  Dwarf_Addr to_dwarf(uint64_t vaddr) const { return vaddr + mainbias - dwbias; }
  uint64_t to_file(Dwarf_Addr a) const { return a + dwbias - mainbias; }

  // Function entries (DWARF addresses) -> their DIE and unit, for by_address(): built
  // once a file has been asked for kIndexAfter functions. Attaching to every function
  // of a program asks for each: one walk of all its DIEs per function made start-up
  // quadratic (30 s for 5,000 functions). A few lookups (`run` attaching to one
  // function of libc) walk only the units that hold the address instead. call_once's
  // lock is held only while the index is built: libdw calls, no call back into utramp.
  struct Entry {
    Dwarf_Die die, unit;
  };
  static constexpr unsigned kIndexAfter = 8;
  mutable std::atomic<unsigned> lookups{0};
  mutable std::once_flag index_once;
  // First in unit order, as the search without an index finds them: in a unit whose
  // ranges hold the entry, else in any other (a unit whose ranges are missing).
  mutable std::unordered_map<Dwarf_Addr, Entry> entries_in_unit, entries_elsewhere;
  // Function symbols by Dwfl address (symbols_at()), built on first use: the first in
  // table order (for messages), and whether any is not a gcc clone's name.
  struct SymbolsAt {
    std::string first;
    bool plain = false;
  };
  mutable std::once_flag symbols_once;
  mutable std::unordered_map<Dwarf_Addr, SymbolsAt> symbols;
  // What each type DIE classifies as (type_class(), below), for a unit's language and
  // producer: a program's functions share a few types, and a tracer asks for all of
  // them. By the DIE's address in the file's mapped data (unique while the file is
  // open, which this object keeps).
  struct TypeClass;
  // What build_signature needs of a compile unit (unit_of(), below), by the unit DIE's
  // address, read once per unit rather than once per function.
  struct Unit {
    int lang = 0;
    bool clang = false;    // produced by clang
    bool minimal = false;  // the producer says -g1 / -gmlt / -gline-tables-only
    std::string producer;
  };
  mutable std::mutex units_mu;
  mutable std::unordered_map<const void*, Unit> units;
  mutable std::mutex classes_mu;
  mutable std::map<std::tuple<const void*, bool, bool>, std::shared_ptr<const TypeClass>> classes;

 private:
  Debug() = default;
  // libdwfl keeps a pointer to the callbacks, and they to the path: both live here.
  Dwfl_Callbacks callbacks_{};
  std::string debuginfo_path_;
  char* debuginfo_path_ptr_ = nullptr;
  Dwfl* dwfl_ = nullptr;
};

Result<std::unique_ptr<Debug>> Debug::open(const std::string& path, const std::string& what) {
  std::unique_ptr<Debug> d(new Debug);
  d->path = path;
  d->debuginfo_path_ = debuginfo_path();
  d->debuginfo_path_ptr_ = d->debuginfo_path_.data();
  d->callbacks_.find_elf = dwfl_build_id_find_elf;  // not called: the file is given
  d->callbacks_.find_debuginfo = find_debuginfo_local;
  d->callbacks_.section_address = dwfl_offline_section_address;
  d->callbacks_.debuginfo_path = &d->debuginfo_path_ptr_;
  d->dwfl_ = dwfl_begin(&d->callbacks_);
  if (d->dwfl_ == nullptr)
    return make_error(Errc::no_memory, fmt::format("dwfl_begin: {}", dwfl_errmsg(-1)));

  d->mod = dwfl_report_offline(d->dwfl_, path.c_str(), path.c_str(), -1);
  if (d->mod == nullptr) {
    const bool readable = access(path.c_str(), R_OK) == 0;
    return make_error(readable ? Errc::bad_format : Errc::io,
                      fmt::format("{}: {}", path, dwfl_errmsg(-1)));
  }
  dwfl_report_end(d->dwfl_, nullptr, nullptr);

  Elf* elf = dwfl_module_getelf(d->mod, &d->mainbias);
  if (elf == nullptr)
    return make_error(Errc::bad_format, fmt::format("{}: {}", path, dwfl_errmsg(-1)));
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) != nullptr) d->relocatable = ehdr.e_type == ET_REL;

  d->dw = dwfl_module_getdwarf(d->mod, &d->dwbias);
  if (d->dw == nullptr) {
    // Evidence: what a separate debug file would have been found by.
    const int err = dwfl_errno();
    std::string how;
    const unsigned char* bits = nullptr;
    GElf_Addr id_vaddr = 0;
    const int id_len = dwfl_module_build_id(d->mod, &bits, &id_vaddr);
    if (id_len > 0) {
      std::string hex;
      for (int i = 0; i < id_len; ++i) hex += fmt::format("{:02x}", bits[i]);
      how += fmt::format("build-id {} (looked for .build-id/{}/{}.debug)", hex, hex.substr(0, 2),
                         hex.substr(2));
    } else {
      how += "no build-id";
    }
    GElf_Word crc = 0;
    const char* link = dwelf_elf_gnu_debuglink(elf, &crc);
    how += link != nullptr ? fmt::format(", .gnu_debuglink {}", link) : ", no .gnu_debuglink";
    return make_error(Errc::not_found,
                      fmt::format("no debug info for {} in {}: {}; {}", what, path, dwfl_errmsg(err), how));
  }
  return d;
}

// Every named symbol of `mod`'s symbol table, in table order, with its Dwfl address
// and section index, until `fn` returns true.
template <class F>
void for_each_symbol(Dwfl_Module* mod, F&& fn) {
  const int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    GElf_Word shndx = 0;
    Elf* elf = nullptr;
    Dwarf_Addr bias = 0;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, &elf, &bias);
    if (name != nullptr && fn(name, sym, addr, shndx)) return;
  }
}

// gcc names the copies whose calling convention it changed f.isra.N (scalar replacement
// of aggregates), f.constprop.N (constant arguments dropped), f.part.N (split-off tail)
// and f.cold (the cold part, not an entry).
bool is_gcc_clone(std::string_view sym) {
  size_t pos = sym.find('.');
  while (pos != std::string_view::npos) {
    const size_t end = sym.find('.', pos + 1);
    const std::string_view tok = sym.substr(pos + 1, end == std::string_view::npos ? end : end - pos - 1);
    if (tok == "isra" || tok == "constprop" || tok == "part" || tok == "cold") return true;
    pos = end;
  }
  return false;
}

// What the function symbols at a Dwfl address say (nullptr: there are none): from the
// file's index of them, built on first use (one pass over the symbol table, not one per
// function looked up).
const Debug::SymbolsAt* symbols_at(const Debug& d, Dwarf_Addr dwfl_addr) {
  std::call_once(d.symbols_once, [&] {
    for_each_symbol(d.mod, [&](const char* name, const GElf_Sym& sym, GElf_Addr addr, GElf_Word) {
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC) return false;
      auto [it, fresh] = d.symbols.try_emplace(addr);
      if (fresh) it->second.first = name;
      it->second.plain = it->second.plain || !is_gcc_clone(name);
      return false;
    });
  });
  auto it = d.symbols.find(dwfl_addr);
  return it == d.symbols.end() ? nullptr : &it->second;
}

// ---------------------------------------------------------------------------------------
// Classification, SysV x86-64 psABI §3.2.3.

// The classes of one eightbyte; SSEUP is absent as every type that needs it is refused.
enum class Cls : uint8_t { none, integer, sse, x87, x87up, complex_x87, memory };

// Rule 4 (merging the classes of two fields that share an eightbyte), in the ABI's order.
Cls merge(Cls a, Cls b) {
  if (a == b) return a;
  if (a == Cls::none) return b;
  if (b == Cls::none) return a;
  if (a == Cls::memory || b == Cls::memory) return Cls::memory;
  if (a == Cls::integer || b == Cls::integer) return Cls::integer;
  auto x87 = [](Cls c) { return c == Cls::x87 || c == Cls::x87up || c == Cls::complex_x87; };
  if (x87(a) || x87(b)) return Cls::memory;
  return Cls::sse;
}

// How one value travels.
struct Value {
  enum class How : uint8_t {
    regs,          // cls[] per eightbyte (may still be x87: memory as an argument)
    memory,        // by value on the stack; through the hidden pointer as a return value
    by_reference,  // C++ class not trivially copyable for calls: a pointer
    empty,         // no eightbyte has a class: nothing passed
  } how = How::regs;
  uint64_t size = 0;
  uint64_t align = 1;
  Cls cls[2] = {Cls::none, Cls::none};
  bool complex_x87 = false;  // _Complex long double
  // A C struct/union of nonzero size whose members the debug info leaves out (gcc does
  // so for glibc's transparent unions such as __CONST_SOCKADDR_ARG): no class known.
  bool undescribed = false;
};

class Classifier {
 public:
  // clang_: the unit's producer is clang, which (unlike gcc since 4.4) passes a struct
  // with a flexible array member in memory.
  Classifier(Dwarf* dw, bool cxx, bool clang) : dw_(dw), cxx_(cxx), clang_(clang) {}
  bool cxx() const { return cxx_; }
  bool clang() const { return clang_; }

  // Strips typedefs and qualifiers and resolves declarations (type-unit signatures, or
  // the definition in another unit) as far as it can.
  Result<Dwarf_Die> strip(Dwarf_Die die) {
    for (int depth = 0; depth < kMaxDepth; ++depth) {
      const int tag = dwarf_tag(&die);
      switch (tag) {
        case DW_TAG_typedef:
        case DW_TAG_const_type:
        case DW_TAG_volatile_type:
        case DW_TAG_restrict_type:
        case DW_TAG_atomic_type:
        case DW_TAG_immutable_type:
        case DW_TAG_shared_type:
        case DW_TAG_packed_type: {
          auto t = ref_attr(&die, DW_AT_type);
          if (!t) return make_error(Errc::unsupported, fmt::format("'{}' qualifies void", type_name(die)));
          die = *t;
          continue;
        }
        default: break;
      }
      // A type in a type unit (-fdebug-types-section): gcc's stand-in has only the
      // signature, clang's is a declaration with it.
      if (auto sig = ref_attr(&die, DW_AT_signature)) {
        die = *sig;
        continue;
      }
      if ((is_record(tag) || tag == DW_TAG_enumeration_type) && flag_attr(&die, DW_AT_declaration)) {
        if (auto def = find_definition(die)) return *def;
      }
      return die;
    }
    return make_error(Errc::bad_format, "type chain too deep (a DWARF cycle?)");
  }

  // What a scalar of TYPE is in C, for showing its value (`record -A/-R`): typedefs
  // and qualifiers stripped, an enum as its underlying type.
  abi::Scalar scalar(Dwarf_Die type) {
    auto s = strip(type);
    if (!s) return abi::Scalar::none;
    Dwarf_Die die = *s;
    switch (dwarf_tag(&die)) {
      case DW_TAG_pointer_type:
      case DW_TAG_reference_type:
      case DW_TAG_rvalue_reference_type: return abi::Scalar::pointer;
      case DW_TAG_enumeration_type: {
        auto under = ref_attr(&die, DW_AT_type);
        return under ? scalar(*under) : abi::Scalar::sint;  // older gcc names no underlying type
      }
      case DW_TAG_base_type: break;
      default: return abi::Scalar::none;
    }
    switch (udata_attr(&die, DW_AT_encoding).value_or(0)) {
      case DW_ATE_signed: return abi::Scalar::sint;
      case DW_ATE_unsigned:
      case DW_ATE_UTF:
      case DW_ATE_address: return abi::Scalar::uint;
      case DW_ATE_signed_char:
      case DW_ATE_unsigned_char: return abi::Scalar::character;
      case DW_ATE_boolean: return abi::Scalar::boolean;
      case DW_ATE_float: return abi::Scalar::floating;
      default: return abi::Scalar::none;
    }
  }

  // Top-level classification of an argument or return type.
  Result<Value> classify(Dwarf_Die type) {
    auto s = strip(type);
    if (!s) return std::move(s).error();
    Dwarf_Die die = *s;
    const int tag = dwarf_tag(&die);
    Value v;
    if (is_record(tag) && flag_attr(&die, DW_AT_declaration)) return incomplete(die);
    auto size = size_of(die);
    if (!size) return std::move(size).error();
    auto align = align_of(die, 0);
    if (!align) return std::move(align).error();
    v.size = *size;
    v.align = *align;
    if (is_record(tag)) {
      auto byref = by_reference(die, 0);
      if (!byref) return std::move(byref).error();
      if (*byref) {
        v.how = Value::How::by_reference;
        return v;
      }
    }
    if (tag == DW_TAG_base_type) {
      const auto enc = udata_attr(&die, DW_AT_encoding);
      if (enc && *enc == DW_ATE_complex_float && v.size == 32) {
        v.complex_x87 = true;
        v.how = Value::How::memory;
        return v;
      }
    }
    if (tag == DW_TAG_array_type || tag == DW_TAG_subroutine_type)
      return make_error(Errc::unsupported, fmt::format("'{}' is not a value type", type_name(die)));
    // Rule 1: over two eightbytes (no SSEUP here) is MEMORY.
    if (v.size > 16) {
      // Still refuse what has no ctx form at any size (vectors).
      auto r = place(die, 0, nullptr, 0);
      if (!r) return std::move(r).error();
      v.how = Value::How::memory;
      return v;
    }
    if (v.size == 0) {  // GNU C's empty struct
      v.how = Value::How::empty;
      return v;
    }
    if (!cxx_ && is_record(tag) && !has_data_members(die)) {
      v.undescribed = true;
      return v;
    }
    auto r = place(die, 0, v.cls, 0);
    if (!r) return std::move(r).error();
    // Rule 5 (post-merger cleanup).
    if (v.cls[0] == Cls::memory || v.cls[1] == Cls::memory ||
        (v.cls[1] == Cls::x87up && v.cls[0] != Cls::x87)) {
      v.how = Value::How::memory;
      return v;
    }
    if (v.cls[0] == Cls::none && v.cls[1] == Cls::none) {
      v.how = Value::How::empty;
      return v;
    }
    if (v.cls[0] == Cls::none)
      return make_error(Errc::unsupported,
                        fmt::format("'{}' has data only in its second eightbyte (first has no class)",
                                    type_name(die)));
    return v;
  }

 private:
  Result<Value> incomplete(Dwarf_Die die) {
    return make_error(Errc::unsupported,
                      fmt::format("'{}' is only declared in the debug info, its definition is in no "
                                  "unit of this file (clang: -fstandalone-debug; gcc: "
                                  "-femit-class-debug-always)",
                                  type_name(die)));
  }

  // The complete definition of a declared struct/class/union/enum elsewhere in this
  // file's units, matched by its scope path (namespaces and enclosing classes).
  std::optional<Dwarf_Die> find_definition(Dwarf_Die decl) {
    Dwarf_Die* scopes = nullptr;
    const int n = dwarf_getscopes_die(&decl, &scopes);
    if (n <= 0) return std::nullopt;
    std::vector<std::pair<int, std::string>> path;  // outermost first, the type last
    bool named = true;
    for (int i = n - 2; i >= 0; --i) {  // scopes[n-1] is the unit
      const char* nm = dwarf_diename(&scopes[i]);
      if (nm == nullptr) named = false;
      path.emplace_back(dwarf_tag(&scopes[i]), nm ? nm : "");
    }
    free(scopes);
    if (!named || path.empty()) return std::nullopt;  // anonymous: unit-local

    std::optional<Dwarf_Die> found;
    auto same_kind = [](int a, int b) {
      auto rec = [](int t) { return t == DW_TAG_structure_type || t == DW_TAG_class_type; };
      return a == b || (rec(a) && rec(b));
    };
    auto search = [&](auto& self, Dwarf_Die* parent, size_t k) -> bool {
      Dwarf_Die c;
      if (dwarf_child(parent, &c) != 0) return false;
      do {
        const char* nm = dwarf_diename(&c);
        if (nm == nullptr || path[k].second != nm || !same_kind(dwarf_tag(&c), path[k].first)) continue;
        if (k + 1 == path.size()) {
          if (!flag_attr(&c, DW_AT_declaration) && dwarf_hasattr(&c, DW_AT_byte_size)) {
            found = c;
            return true;
          }
        } else if (self(self, &c, k + 1)) {
          return true;
        }
      } while (dwarf_siblingof(&c, &c) == 0);
      return false;
    };
    for_each_cu(dw_, [&](Dwarf_Die&, Dwarf_Die& unit) { return search(search, &unit, 0); });
    return found;
  }

  Result<uint64_t> size_of(Dwarf_Die die) {
    switch (dwarf_tag(&die)) {
      case DW_TAG_pointer_type:
      case DW_TAG_reference_type:
      case DW_TAG_rvalue_reference_type: return uint64_t{8};
      case DW_TAG_ptr_to_member_type: {
        if (auto sz = udata_attr(&die, DW_AT_byte_size)) return uint64_t{*sz};
        // Itanium C++ ABI: a pointer to member function is {ptr, adj}.
        auto t = ref_attr(&die, DW_AT_type);
        return uint64_t{t && dwarf_tag(&*t) == DW_TAG_subroutine_type ? 16u : 8u};
      }
      case DW_TAG_unspecified_type: return uint64_t{8};  // decltype(nullptr)
      case DW_TAG_array_type: {
        Dwarf_Word sz;
        return uint64_t{dwarf_aggregate_size(&die, &sz) == 0 ? sz : 0};  // flexible: 0
      }
      case DW_TAG_enumeration_type:
        if (auto sz = udata_attr(&die, DW_AT_byte_size)) return uint64_t{*sz};
        if (auto t = ref_attr(&die, DW_AT_type)) {
          auto s = strip(*t);
          if (!s) return std::move(s).error();
          return size_of(*s);
        }
        break;
      default:
        if (auto sz = udata_attr(&die, DW_AT_byte_size)) return uint64_t{*sz};
        break;
    }
    return make_error(Errc::unsupported, fmt::format("'{}' has no size in the debug info", type_name(die)));
  }

  // Natural alignment (what the scalar check of rule 1 and stack slots use). A struct
  // whose own members sit off their alignment is packed: alignment 1 (DWARF does not
  // record packing, only explicit DW_AT_alignment).
  Result<uint64_t> align_of(Dwarf_Die die, int depth) {
    if (depth > kMaxDepth) return make_error(Errc::bad_format, "type nesting too deep");
    auto s = strip(die);
    if (!s) return std::move(s).error();
    die = *s;
    if (auto a = udata_attr(&die, DW_AT_alignment)) return uint64_t{*a};
    const int tag = dwarf_tag(&die);
    switch (tag) {
      case DW_TAG_pointer_type:
      case DW_TAG_reference_type:
      case DW_TAG_rvalue_reference_type:
      case DW_TAG_ptr_to_member_type:
      case DW_TAG_unspecified_type: return uint64_t{8};
      case DW_TAG_enumeration_type: return size_of(die);
      case DW_TAG_base_type: {
        auto sz = size_of(die);
        if (!sz) return sz;
        const auto enc = udata_attr(&die, DW_AT_encoding).value_or(0);
        if (enc == DW_ATE_complex_float || enc == DW_ATE_lo_user) return *sz / 2;  // per part
        return *sz == 0 ? uint64_t{1} : *sz;  // __int128 and long double: 16
      }
      case DW_TAG_array_type: {
        auto t = ref_attr(&die, DW_AT_type);
        if (!t) return make_error(Errc::bad_format, "array without element type");
        return align_of(*t, depth + 1);
      }
      default: break;
    }
    if (!is_record(tag)) return uint64_t{1};
    uint64_t max = 1;
    bool packed = false;
    Dwarf_Die c;
    if (dwarf_child(&die, &c) == 0) {
      do {
        const int ct = dwarf_tag(&c);
        if (ct != DW_TAG_member && ct != DW_TAG_inheritance) continue;
        if (flag_attr(&c, DW_AT_declaration) || flag_attr(&c, DW_AT_external)) continue;
        if (dwarf_hasattr(&c, DW_AT_bit_size)) continue;
        auto t = ref_attr(&c, DW_AT_type);
        if (!t) continue;
        auto a = align_of(*t, depth + 1);
        if (!a) return a;
        auto off = member_offset(&c);
        if (!off) return std::move(off).error();
        if (*a > 0 && *off % *a != 0) packed = true;
        max = std::max(max, *a);
      } while (dwarf_siblingof(&c, &c) == 0);
    }
    auto sz = size_of(die);
    if (sz && *sz % max != 0) packed = true;
    return packed ? uint64_t{1} : max;
  }

  // DW_AT_data_member_location: a constant, or (DWARF 2) DW_OP_plus_uconst.
  Result<uint64_t> member_offset(Dwarf_Die* m) {
    Dwarf_Attribute a;
    if (dwarf_attr(m, DW_AT_data_member_location, &a) == nullptr) return uint64_t{0};
    Dwarf_Word w;
    if (dwarf_formudata(&a, &w) == 0) return uint64_t{w};
    Dwarf_Op* ops = nullptr;
    size_t n = 0;
    if (dwarf_getlocation(&a, &ops, &n) == 0 && n == 1 &&
        (ops[0].atom == DW_OP_plus_uconst || ops[0].atom == DW_OP_constu))
      return uint64_t{ops[0].number};
    return make_error(Errc::unsupported,
                      fmt::format("member '{}' is at a computed offset (a virtual base)", die_name(m)));
  }

  // Merges class `c` into every eightbyte that [bit, bit+bits) touches. With cls null
  // (a value over 16 bytes) nothing is recorded; only refusals matter.
  static void mark(Cls* cls, uint64_t bit, uint64_t bits, Cls first, Cls rest) {
    if (cls == nullptr || bits == 0) return;
    for (uint64_t k = bit / 64; k <= (bit + bits - 1) / 64; ++k) {
      if (k >= 2) {
        cls[0] = Cls::memory;
        return;
      }
      cls[k] = merge(cls[k], k == bit / 64 ? first : rest);
    }
  }

  // A scalar of `size` bytes at `bit`: rule 1's unaligned field makes the whole value MEMORY.
  static void scalar(Cls* cls, uint64_t bit, uint64_t size, uint64_t align, Cls first, Cls rest) {
    if (cls == nullptr) return;
    if (align > 1 && bit % (align * 8) != 0) {
      cls[0] = Cls::memory;
      return;
    }
    mark(cls, bit, size * 8, first, rest);
  }

  // Places a value of type `die` at bit offset `bit` of the top-level value and merges
  // the classes of its eightbytes (rules 3 and 4, recursively).
  Result<void> place(Dwarf_Die die, uint64_t bit, Cls* cls, int depth) {
    if (depth > kMaxDepth) return make_error(Errc::bad_format, "type nesting too deep");
    auto s = strip(die);
    if (!s) return std::move(s).error();
    die = *s;
    const int tag = dwarf_tag(&die);
    switch (tag) {
      case DW_TAG_pointer_type:
      case DW_TAG_reference_type:
      case DW_TAG_rvalue_reference_type:
      case DW_TAG_unspecified_type:
      case DW_TAG_ptr_to_member_type:
      case DW_TAG_enumeration_type: {
        if (tag == DW_TAG_unspecified_type) {
          const std::string n = die_name(&die);
          if (n != "decltype(nullptr)" && n != "nullptr_t" && n != "std::nullptr_t")
            return make_error(Errc::unsupported, fmt::format("unspecified type '{}'", n));
        }
        auto sz = size_of(die);
        if (!sz) return std::move(sz).error();
        scalar(cls, bit, *sz, std::min<uint64_t>(*sz, 8), Cls::integer, Cls::integer);
        return {};
      }
      case DW_TAG_base_type: return place_base(die, bit, cls);
      case DW_TAG_array_type: {
        if (flag_attr(&die, DW_AT_GNU_vector))
          return make_error(Errc::unsupported,
                            fmt::format("'{}' is a vector type (SSEUP): not supported", type_name(die)));
        auto elem = ref_attr(&die, DW_AT_type);
        if (!elem) return make_error(Errc::bad_format, "array without element type");
        if (is_flexible(die)) {
          if (clang_ && cls != nullptr) cls[0] = Cls::memory;
          return {};
        }
        auto total = size_of(die);
        auto es = strip(*elem);
        if (!total || !es) return make_error(Errc::bad_format, "array of unknown size");
        auto esize = size_of(*es);
        if (!esize) return std::move(esize).error();
        if (*esize == 0 || *total == 0) return {};  // flexible or zero-length: nothing
        // Over 16 bytes only the element type matters (refusals); once is enough.
        const uint64_t count = cls == nullptr ? 1 : *total / *esize;
        for (uint64_t i = 0; i < count; ++i) {
          auto r = place(*es, bit + i * *esize * 8, cls, depth + 1);
          if (!r) return r;
        }
        return {};
      }
      default: break;
    }
    if (!is_record(tag))
      return make_error(Errc::unsupported, fmt::format("'{}' cannot be classified", type_name(die)));
    if (flag_attr(&die, DW_AT_declaration)) {
      auto r = incomplete(die);
      return std::move(r).error();
    }
    if (!cxx_ && !has_data_members(die)) {
      auto sz = size_of(die);
      if (sz && *sz > 0)
        return make_error(Errc::unsupported,
                          fmt::format("'{}' ({} bytes) has no members in the debug info", type_name(die), *sz));
    }
    Dwarf_Die c;
    if (dwarf_child(&die, &c) != 0) return {};
    do {
      const int ct = dwarf_tag(&c);
      if (ct != DW_TAG_member && ct != DW_TAG_inheritance) continue;
      if (flag_attr(&c, DW_AT_declaration) || flag_attr(&c, DW_AT_external)) continue;  // static
      if (ct == DW_TAG_inheritance && udata_attr(&c, DW_AT_virtuality).value_or(0) != 0)
        return make_error(Errc::unsupported,
                          fmt::format("'{}' has a virtual base", type_name(die)));
      auto t = ref_attr(&c, DW_AT_type);
      if (!t) return make_error(Errc::bad_format, fmt::format("member '{}' has no type", die_name(&c)));
      auto off = member_offset(&c);
      if (!off) return std::move(off).error();
      if (auto bits = udata_attr(&c, DW_AT_bit_size)) {
        // Bitfields are INTEGER wherever their bits lie, aligned or not.
        uint64_t pos = *off * 8;
        if (auto dbo = udata_attr(&c, DW_AT_data_bit_offset)) {
          pos = *dbo;
        } else if (auto bo = udata_attr(&c, DW_AT_bit_offset)) {
          // DWARF 2/3: bit_offset counts from the storage unit's most significant bit.
          const uint64_t unit = udata_attr(&c, DW_AT_byte_size).value_or(0) * 8;
          if (unit >= *bo + *bits) pos += unit - *bo - *bits;
        }
        mark(cls, bit + pos, *bits, Cls::integer, Cls::integer);
        continue;
      }
      auto r = place(*t, bit + *off * 8, cls, depth + 1);
      if (!r) return r;
    } while (dwarf_siblingof(&c, &c) == 0);
    return {};
  }

  Result<void> place_base(Dwarf_Die die, uint64_t bit, Cls* cls) {
    auto szr = size_of(die);
    if (!szr) return std::move(szr).error();
    const uint64_t size = *szr;
    const auto enc = udata_attr(&die, DW_AT_encoding);
    const std::string name = die_name(&die);
    auto refuse = [&](const char* why) {
      return make_error(Errc::unsupported, fmt::format("'{}' ({} bytes): {}", name, size, why));
    };
    if (!enc) return refuse("base type without encoding");
    switch (*enc) {
      case DW_ATE_boolean:
      case DW_ATE_signed:
      case DW_ATE_unsigned:
      case DW_ATE_signed_char:
      case DW_ATE_unsigned_char:
      case DW_ATE_UTF:
      case DW_ATE_address:
        // Integers; over 16 bytes (_BitInt) the value is MEMORY by size before this.
        scalar(cls, bit, size, std::min<uint64_t>(size, 16), Cls::integer, Cls::integer);
        return {};
      case DW_ATE_float:
      case DW_ATE_decimal_float:
        if (size == 2 || size == 4 || size == 8) {
          scalar(cls, bit, size, size, Cls::sse, Cls::sse);
          return {};
        }
        // 16 bytes: x87 long double (also _Float64x), or binary128/_Decimal128 (SSE+SSEUP).
        if (size == 16 && *enc == DW_ATE_float && name.find("128") == std::string::npos) {
          scalar(cls, bit, 16, 16, Cls::x87, Cls::x87up);
          return {};
        }
        return refuse("a 128-bit SSE scalar (SSEUP class): not supported");
      case DW_ATE_complex_float:
        if (size == 4 || size == 8 || size == 16) {  // two float parts, each its own scalar
          scalar(cls, bit, size / 2, size / 2, Cls::sse, Cls::sse);
          scalar(cls, bit + size * 4, size / 2, size / 2, Cls::sse, Cls::sse);
          return {};
        }
        if (size == 32 && name.find("128") == std::string::npos) {  // _Complex long double
          if (cls != nullptr) cls[0] = merge(cls[0], Cls::complex_x87);
          return {};
        }
        return refuse("a complex of 128-bit SSE parts: not supported");
      case DW_ATE_lo_user:  // gcc's complex integer
        scalar(cls, bit, size / 2, std::min<uint64_t>(size / 2, 16), Cls::integer, Cls::integer);
        scalar(cls, bit + size * 4, size / 2, std::min<uint64_t>(size / 2, 16), Cls::integer,
               Cls::integer);
        return {};
      default: return refuse(fmt::format("DWARF encoding {:#x}", *enc).c_str());
    }
  }

  // Is a C++ class "non-trivial for the purposes of calls" (Itanium C++ ABI §3.1.2.3),
  // i.e. passed and returned by invisible reference? clang says so in
  // DW_AT_calling_convention; gcc does not, so it is worked out from the members: a
  // virtual function or base, a user-provided copy/move constructor or destructor, such
  // a base or member, or every declared copy/move constructor deleted.
  Result<bool> by_reference(Dwarf_Die cls, int depth) {
    if (depth > kMaxDepth) return make_error(Errc::bad_format, "class nesting too deep");
    if (auto cc = udata_attr(&cls, DW_AT_calling_convention)) return *cc == DW_CC_pass_by_reference;
    if (!cxx_) return false;
    std::string base = die_name(&cls);
    if (const size_t lt = base.find('<'); lt != std::string::npos) base.resize(lt);
    bool copy_or_move = false, usable = false;
    Dwarf_Die c;
    if (dwarf_child(&cls, &c) != 0) return false;
    do {
      const int ct = dwarf_tag(&c);
      if (ct == DW_TAG_inheritance || ct == DW_TAG_member) {
        if (ct == DW_TAG_inheritance && udata_attr(&c, DW_AT_virtuality).value_or(0) != 0) return true;
        if (ct == DW_TAG_member && (flag_attr(&c, DW_AT_declaration) || flag_attr(&c, DW_AT_external)))
          continue;
        auto t = ref_attr(&c, DW_AT_type);
        if (!t) continue;
        auto s = strip(*t);
        if (!s) return std::move(s).error();
        Dwarf_Die m = *s;
        while (dwarf_tag(&m) == DW_TAG_array_type) {
          auto e = ref_attr(&m, DW_AT_type);
          if (!e) break;
          auto es = strip(*e);
          if (!es) return std::move(es).error();
          m = *es;
        }
        if (is_record(dwarf_tag(&m)) && !flag_attr(&m, DW_AT_declaration)) {
          auto r = by_reference(m, depth + 1);
          if (!r || *r) return r;
        }
        continue;
      }
      if (ct != DW_TAG_subprogram) continue;
      if (udata_attr(&c, DW_AT_virtuality).value_or(0) != 0) return true;  // dynamic class
      if (flag_attr(&c, DW_AT_artificial)) continue;  // implicit: trivial unless members say
      const std::string name = die_name(&c);
      const bool deleted = flag_attr(&c, DW_AT_deleted);
      const bool defaulted = udata_attr(&c, DW_AT_defaulted).value_or(0) == DW_DEFAULTED_in_class;
      if (!name.empty() && name[0] == '~') {
        if (!defaulted) return true;  // user-provided (or deleted) destructor
        continue;
      }
      if (name != base || !is_copy_or_move(c, cls)) continue;
      copy_or_move = true;
      if (deleted) continue;
      if (!defaulted) return true;  // user-provided copy/move constructor
      usable = true;
    } while (dwarf_siblingof(&c, &c) == 0);
    return copy_or_move && !usable;
  }

  // A constructor whose one non-artificial parameter is a reference to its own class.
  bool is_copy_or_move(Dwarf_Die ctor, Dwarf_Die cls) {
    Dwarf_Die p;
    int n = 0;
    bool self_ref = false;
    if (dwarf_child(&ctor, &p) != 0) return false;
    do {
      if (dwarf_tag(&p) != DW_TAG_formal_parameter || flag_attr(&p, DW_AT_artificial)) continue;
      if (++n > 1) return false;
      auto t = ref_attr(&p, DW_AT_type);
      if (!t) return false;
      const int rt = dwarf_tag(&*t);
      if (rt != DW_TAG_reference_type && rt != DW_TAG_rvalue_reference_type) return false;
      auto target = ref_attr(&*t, DW_AT_type);
      if (!target) return false;
      Dwarf_Die x = *target;
      while (dwarf_tag(&x) == DW_TAG_const_type || dwarf_tag(&x) == DW_TAG_volatile_type) {
        auto y = ref_attr(&x, DW_AT_type);
        if (!y) return false;
        x = *y;
      }
      if (auto sig = ref_attr(&x, DW_AT_signature)) x = *sig;
      self_ref = dwarf_dieoffset(&x) == dwarf_dieoffset(&cls) ||
                 (is_record(dwarf_tag(&x)) && die_name(&x) == die_name(&cls));
    } while (dwarf_siblingof(&p, &p) == 0);
    return n == 1 && self_ref;
  }

  static bool has_data_members(Dwarf_Die rec) {
    Dwarf_Die c;
    if (dwarf_child(&rec, &c) != 0) return false;
    do {
      const int t = dwarf_tag(&c);
      if (t == DW_TAG_inheritance) return true;
      if (t == DW_TAG_member && !flag_attr(&c, DW_AT_declaration) && !flag_attr(&c, DW_AT_external))
        return true;
    } while (dwarf_siblingof(&c, &c) == 0);
    return false;
  }

  // An array of unknown bound (C99 `T x[]`): its subrange has no count or upper bound.
  static bool is_flexible(Dwarf_Die array) {
    Dwarf_Die sub;
    if (dwarf_child(&array, &sub) != 0) return false;
    do {
      if (dwarf_tag(&sub) == DW_TAG_subrange_type)
        return !dwarf_hasattr(&sub, DW_AT_count) && !dwarf_hasattr(&sub, DW_AT_upper_bound);
    } while (dwarf_siblingof(&sub, &sub) == 0);
    return false;
  }

  Dwarf* dw_;
  bool cxx_;
  bool clang_;
};

struct Debug::TypeClass {
  Result<Value> value;
  abi::Scalar scalar;
  bool record;  // a struct, class or union once typedefs and qualifiers are stripped
};

// CL's classification of type T and its scalar kind, once per type of D.
std::shared_ptr<const Debug::TypeClass> type_class(const Debug& d, Classifier& cl, Dwarf_Die t) {
  const auto key = std::make_tuple(static_cast<const void*>(t.addr), cl.cxx(), cl.clang());
  {
    std::lock_guard lock(d.classes_mu);
    if (auto it = d.classes.find(key); it != d.classes.end()) return it->second;
  }
  auto st = cl.strip(t);
  const bool record = st && is_record(dwarf_tag(&*st));
  auto c = std::make_shared<const Debug::TypeClass>(Debug::TypeClass{cl.classify(t), cl.scalar(t), record});
  std::lock_guard lock(d.classes_mu);
  return d.classes.emplace(key, std::move(c)).first->second;
}

// What build_signature needs of the unit CU (a unit DIE), once per unit of D.
const Debug::Unit& unit_of(const Debug& d, Dwarf_Die cu) {
  {
    std::lock_guard lock(d.units_mu);
    if (auto it = d.units.find(cu.addr); it != d.units.end()) return it->second;
  }
  Debug::Unit u;
  u.lang = dwarf_srclang(&cu);
  const char* producer = str_attr(&cu, DW_AT_producer, false);
  u.producer = producer ? producer : "";
  u.clang = u.producer.find("clang") != std::string::npos;
  u.minimal = u.producer.find(" -g1") != std::string::npos || u.producer.find("-gmlt") != std::string::npos ||
              u.producer.find("-gline-tables-only") != std::string::npos;
  std::lock_guard lock(d.units_mu);
  return d.units.emplace(cu.addr, std::move(u)).first->second;  // the first one stays
}

Part part_of(Cls c) {
  return c == Cls::integer ? Part::integer : c == Cls::sse ? Part::sse : Part::none;
}

bool is_x87(Cls c) { return c == Cls::x87 || c == Cls::x87up || c == Cls::complex_x87; }

// ---------------------------------------------------------------------------------------
// From the function DIE to the Signature.

struct Found {
  Dwarf_Die die;
  Dwarf_Die cu;
  Dwarf_Addr entry;  // DWARF address
};

bool is_c_language(int lang) {
  return lang == DW_LANG_C || lang == DW_LANG_C89 || lang == DW_LANG_C99 || lang == DW_LANG_C11 ||
         lang == 0x2c /* DW_LANG_C17 */;
}

bool is_cxx_language(int lang) {
  return lang == DW_LANG_C_plus_plus || lang == DW_LANG_C_plus_plus_03 ||
         lang == DW_LANG_C_plus_plus_11 || lang == DW_LANG_C_plus_plus_14 ||
         lang == 0x2a /* C++17 */ || lang == 0x2b /* C++20 */ || lang == DW_LANG_ObjC_plus_plus;
}

// A few DIEs without a heap allocation (a function's parameters: nearly always fewer
// than kInline).
class DieList {
 public:
  void push_back(const Dwarf_Die& d) {
    if (n_ < kInline) inline_[n_] = d;
    else more_.push_back(d);
    ++n_;
  }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const Dwarf_Die& operator[](size_t i) const { return i < kInline ? inline_[i] : more_[i - kInline]; }

 private:
  static constexpr size_t kInline = 8;
  Dwarf_Die inline_[kInline];
  std::vector<Dwarf_Die> more_;
  size_t n_ = 0;
};

// The attributes build_signature reads of a function DIE, each as dwarf_attr_integrate
// finds it (the DIE's own, else the first along DW_AT_abstract_origin, else
// DW_AT_specification, at most 17 DIEs), read in one dwarf_getattrs pass per DIE of the
// chain: a dwarf_attr walks the DIE's abbreviation up to the attribute, and a function
// was asked for eight of them, most absent (each a walk to the end, for every DIE of the
// chain).
struct FnAttrs {
  enum Name : uint8_t { calling_convention, external, type, prototyped, artificial, noreturn, decl_file, count };
  static constexpr unsigned kDwarfNames[count] = {DW_AT_calling_convention, DW_AT_external, DW_AT_type,
                                                  DW_AT_prototyped, DW_AT_artificial, DW_AT_noreturn,
                                                  DW_AT_decl_file};
  // The function DIE and the DIEs it inherits from (abstract instance, declaration).
  static constexpr size_t kMaxChain = 17;
  Dwarf_Die chain[kMaxChain];
  size_t chain_len = 0;
  Dwarf_Attribute attr[count];
  unsigned found = 0;  // bit i: attr[i] is kDwarfNames[i]

  Dwarf_Attribute* get(Name n) { return (found & (1u << n)) != 0 ? &attr[n] : nullptr; }
  bool flag(Name n) {
    bool f = false;
    Dwarf_Attribute* a = get(n);
    return a != nullptr && dwarf_formflag(a, &f) == 0 && f;
  }
};

FnAttrs read_fn_attrs(Dwarf_Die fn) {
  FnAttrs out;
  out.chain[0] = fn;
  out.chain_len = 1;
  struct Pass {
    FnAttrs* out;
    Dwarf_Attribute origin, spec;
    bool has_origin, has_spec;
  };
  for (;;) {
    Pass pass{&out, {}, {}, false, false};
    auto cb = [](Dwarf_Attribute* a, void* arg) -> int {
      auto* p = static_cast<Pass*>(arg);
      const unsigned name = dwarf_whatattr(a);
      if (name == DW_AT_abstract_origin) {
        p->origin = *a;
        p->has_origin = true;
      } else if (name == DW_AT_specification) {
        p->spec = *a;
        p->has_spec = true;
      } else {
        for (unsigned i = 0; i < FnAttrs::count; ++i)
          if (FnAttrs::kDwarfNames[i] == name && (p->out->found & (1u << i)) == 0) {
            p->out->attr[i] = *a;
            p->out->found |= 1u << i;
          }
      }
      return DWARF_CB_OK;
    };
    if (dwarf_getattrs(&out.chain[out.chain_len - 1], cb, &pass, 0) < 0) break;
    if (out.chain_len == FnAttrs::kMaxChain || (!pass.has_origin && !pass.has_spec)) break;
    Dwarf_Die next;
    if (dwarf_formref_die(pass.has_origin ? &pass.origin : &pass.spec, &next) == nullptr) break;
    out.chain[out.chain_len++] = next;
  }
  return out;
}

// What build_signature reads of a parameter DIE, in one dwarf_getattrs pass (its type
// as dwarf_attr_integrate finds it, the others its own).
struct ParamAttrs {
  Dwarf_Attribute type, location;
  bool has_type = false, has_location = false, const_value = false;
};

ParamAttrs read_param_attrs(Dwarf_Die* p) {
  ParamAttrs out;
  auto cb = [](Dwarf_Attribute* a, void* arg) -> int {
    auto* o = static_cast<ParamAttrs*>(arg);
    switch (dwarf_whatattr(a)) {
      case DW_AT_type:
        o->type = *a;
        o->has_type = true;
        break;
      case DW_AT_location:
        o->location = *a;
        o->has_location = true;
        break;
      case DW_AT_const_value: o->const_value = true; break;
      default: break;
    }
    return DWARF_CB_OK;
  };
  dwarf_getattrs(p, cb, &out, 0);
  if (!out.has_type) out.has_type = dwarf_attr_integrate(p, DW_AT_type, &out.type) != nullptr;
  return out;
}

// The formal parameters of a function DIE in order (gcc puts a variadic template's
// expanded pack in DW_TAG_GNU_formal_parameter_pack), and whether it ends in "...".
void params_of(Dwarf_Die fn, DieList* params, bool* variadic) {
  Dwarf_Die c;
  if (dwarf_child(&fn, &c) != 0) return;
  do {
    switch (dwarf_tag(&c)) {
      case DW_TAG_formal_parameter: params->push_back(c); break;
      case DW_TAG_unspecified_parameters: *variadic = true; break;
      case DW_TAG_GNU_formal_parameter_pack: {
        Dwarf_Die p;
        if (dwarf_child(&c, &p) == 0) {
          do {
            if (dwarf_tag(&p) == DW_TAG_formal_parameter) params->push_back(p);
          } while (dwarf_siblingof(&p, &p) == 0);
        }
        break;
      }
      default: break;
    }
  } while (dwarf_siblingof(&c, &c) == 0);
}

// Where DWARF says a parameter is at `pc`: a location that is exactly one DW_OP_regN /
// DW_OP_regx there (reg -1 for anything else: stack, pieces, none), and whether it came
// from a location list, whose ranges say "at this pc", or from a single expression,
// which compilers also use for "after the first instructions" (clang describes a union
// argument in rdi by the xmm register it moves it to).
struct ParamReg {
  int reg = -1;
  bool from_list = false;
};

ParamReg register_at(const ParamAttrs& pa, Dwarf_Addr pc) {
  if (!pa.has_location) return {};
  Dwarf_Attribute a = pa.location;
  const unsigned form = dwarf_whatform(&a);
  if (form == DW_FORM_exprloc) {  // one expression for every pc: a lone DW_OP_regN read as is
    Dwarf_Block b;
    if (dwarf_formblock(&a, &b) == 0 && b.length == 1 && b.data[0] >= DW_OP_reg0 && b.data[0] <= DW_OP_reg31)
      return {b.data[0] - DW_OP_reg0, false};
  }
  const bool list = form == DW_FORM_sec_offset || form == DW_FORM_loclistx || form == DW_FORM_data4 ||
                    form == DW_FORM_data8;
  Dwarf_Op* expr = nullptr;
  size_t len = 0;
  if (dwarf_getlocation_addr(&a, pc, &expr, &len, 1) != 1) return {};
  if (len != 1 && !(len == 2 && expr[1].atom == DW_OP_piece && expr[1].number >= 8)) return {};
  if (expr[0].atom >= DW_OP_reg0 && expr[0].atom <= DW_OP_reg31) return {expr[0].atom - DW_OP_reg0, list};
  if (expr[0].atom == DW_OP_regx) return {static_cast<int>(expr[0].number), list};
  return {};
}

bool is_int_arg_reg(int r) {
  for (int x : kIntArgRegs)
    if (x == r) return true;
  return false;
}
bool is_sse_arg_reg(int r) { return r >= kXmm0 && r < kXmm0 + 8; }

// `what()` names the function for messages: made only for one (a tracer looks up
// thousands of signatures, nearly all found).
template <class What>
Result<Signature> build_signature(const Debug& d, const Found& f, What&& what) {
  Dwarf_Die fn = f.die;
  Dwarf_Die cu = f.cu;
  auto refuse = [&](std::string why) {
    return make_error(Errc::unsupported, fmt::format("{} in {}: {}", what(), d.path, why));
  };

  // A gcc clone's DIE names the original function, whose signature it no longer has.
  if (const auto* syms = symbols_at(d, f.entry + d.dwbias); syms != nullptr && !syms->plain)
    return refuse(fmt::format("the symbol at {:#x} is {}, a gcc clone whose calling convention the "
                              "optimiser changed; DWARF describes the original",
                              d.to_file(f.entry), syms->first));
  FnAttrs fa = read_fn_attrs(fn);
  if (Dwarf_Word cc; fa.get(FnAttrs::calling_convention) != nullptr &&
                     dwarf_formudata(fa.get(FnAttrs::calling_convention), &cc) == 0 &&
                     cc != DW_CC_normal && cc != DW_CC_program) {
    if (cc == DW_CC_nocall)
      return refuse("DW_CC_nocall: the optimiser changed its calling convention (it is not callable "
                    "per the ABI)");
    return refuse(fmt::format("calling convention {:#x} is not the SysV ABI", cc));
  }

  const Debug::Unit& unit = unit_of(d, cu);
  const int lang = unit.lang;
  if (lang == DW_LANG_Mips_Assembler)  // gas describes a symbol, not its arguments
    return make_error(Errc::not_found,
                      fmt::format("no debug info for {} in {}: it is written in assembly (its unit's "
                                  "DWARF has no argument types)",
                                  what(), d.path));
  const bool cxx = is_cxx_language(lang);
  const bool external = fa.flag(FnAttrs::external);

  // Parameters: from the concrete DIE, or from what it inherits if that lists more (a
  // concrete instance may omit parameters the optimiser dropped from its body). The
  // chain is followed this far for parameters (as far as before the attributes were
  // read in one pass).
  constexpr size_t kParamChain = 9;
  DieList params;
  bool variadic = false;
  bool params_concrete = true;
  for (size_t i = 0; i < std::min(fa.chain_len, kParamChain); ++i) {
    DieList p;
    bool va = false;
    params_of(fa.chain[i], &p, &va);
    variadic = variadic || va;
    if (p.size() > params.size()) {
      params = std::move(p);
      params_concrete = i == 0;
    }
  }

  Dwarf_Attribute* rt_attr = fa.get(FnAttrs::type);
  const bool has_ret = rt_attr != nullptr;
  const bool prototyped = fa.flag(FnAttrs::prototyped);

  // Minimal debug info (gcc -g1, clang -gmlt) lists functions without types: a bare
  // "() -> void" would be a lie.
  if (!has_ret && params.empty() && !variadic && !fa.flag(FnAttrs::artificial)) {
    const bool minimal = unit.minimal || fa.get(FnAttrs::decl_file) == nullptr;
    if (minimal)
      return make_error(Errc::not_found,
                        fmt::format("no debug info for {} in {}: only line tables / minimal debug info "
                                    "(no types; producer '{}')",
                                    what(), d.path, unit.producer));
  }

  Signature sig;
  sig.source = "DWARF";
  sig.known = true;
  sig.variadic = variadic;
  sig.noreturn = fa.flag(FnAttrs::noreturn);

  Classifier cl(d.dw, cxx, unit.clang);

  // Return value.
  Dwarf_Die rt_die;
  if (rt_attr == nullptr) {
    sig.ret = RetType::void_();
  } else {
    if (dwarf_formref_die(rt_attr, &rt_die) == nullptr)
      return make_error(Errc::bad_format, fmt::format("{} in {}: bad return type reference", what(), d.path));
    const auto rt_class = type_class(d, cl, rt_die);
    auto v = rt_class->value;
    if (!v)
      return make_error(v.error().code, fmt::format("{} in {}: return type '{}': {}", what(), d.path,
                                                    type_name(rt_die), v.error().message));
    if (v->size > 0xffff)
      return make_error(Errc::too_big, fmt::format("{} in {}: return type '{}' is {} bytes", what(), d.path,
                                                   type_name(rt_die), v->size));
    const auto size = static_cast<uint16_t>(v->size);
    if (v->undescribed)
      return refuse(fmt::format("return type '{}' ({} bytes) has no members in the debug info",
                                type_name(rt_die), v->size));
    switch (v->how) {
      case Value::How::empty: sig.ret = RetType::void_(); break;
      case Value::How::memory:
      case Value::How::by_reference:
        if (v->complex_x87)
          return refuse(fmt::format("return type '{}' comes back in st(0):st(1) (COMPLEX_X87), which "
                                    "has no ctx form",
                                    type_name(rt_die)));
        sig.ret = RetType::memory(size);
        break;
      case Value::How::regs:
        if (v->cls[0] == Cls::x87 && v->cls[1] == Cls::x87up) {
          sig.ret = RetType::x87();
        } else if (is_x87(v->cls[0]) || is_x87(v->cls[1])) {
          sig.ret = RetType::memory(size);
        } else if (v->cls[1] == Cls::none) {
          sig.ret = RetType{RetType::Kind::reg, static_cast<uint16_t>(std::min<uint64_t>(size, 8)),
                            {part_of(v->cls[0]), Part::none}};
          sig.ret.scalar = rt_class->scalar;
        } else {
          sig.ret = RetType::pair(part_of(v->cls[0]), part_of(v->cls[1]), size);
        }
        break;
    }
    // A struct or union in registers is a value fmod_ret cannot produce.
    if (sig.ret.kind == RetType::Kind::reg) sig.ret.aggregate = rt_class->record;
  }
  const bool ret_hidden = sig.ret.kind == RetType::Kind::memory;

  // Arguments, and the registers the ABI assigns them, to check against DWARF's own
  // locations at the entry (rdi carries the hidden return pointer first).
  const bool promote = is_c_language(lang) && !prototyped;  // K&R definition
  int ints = ret_hidden ? 1 : 0, sses = 0;
  sig.args.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    Dwarf_Die p = params[i];
    ParamAttrs pa = read_param_attrs(&p);
    auto pdesc = [&] {
      const std::string pname = die_name(&p);
      return fmt::format("parameter {}{}", i + 1, pname.empty() ? "" : " ('" + pname + "')");
    };
    Dwarf_Die t;
    if (!pa.has_type || dwarf_formref_die(&pa.type, &t) == nullptr)
      return make_error(Errc::bad_format, fmt::format("{} in {}: {} has no type", what(), d.path, pdesc()));
    const auto t_class = type_class(d, cl, t);
    auto v = t_class->value;
    if (!v)
      return make_error(v.error().code, fmt::format("{} in {}: {} of type '{}': {}", what(), d.path, pdesc(),
                                                    type_name(t), v.error().message));
    if (v->size > 0xffff)
      return make_error(Errc::too_big,
                        fmt::format("{} in {}: {} is {} bytes", what(), d.path, pdesc(), v->size));
    const auto size = static_cast<uint16_t>(v->size);

    // Clang drops a local function's constant or unused arguments without renaming it.
    if (!external && params_concrete && pa.const_value)
      return refuse(fmt::format("{} is the same constant in every call (DW_AT_const_value) of this "
                                "local function: the optimiser may have removed it from the calling "
                                "convention",
                                pdesc()));

    // Without members the class can only come from where the argument arrives: the
    // argument register DWARF names at the entry (only gcc omits members, and its
    // locations there are the incoming ones).
    if (v->undescribed) {
      const ParamReg got = params_concrete ? register_at(pa, f.entry) : ParamReg{};
      if (v->size <= 8 && is_int_arg_reg(got.reg)) {
        v->cls[0] = Cls::integer;
      } else if (v->size <= 8 && is_sse_arg_reg(got.reg)) {
        v->cls[0] = Cls::sse;
      } else {
        return refuse(fmt::format("{} of type '{}': {} bytes with no members in the debug info (gcc "
                                  "omits a transparent union's), and no register location at the entry "
                                  "to tell its class",
                                  pdesc(), type_name(t), v->size));
      }
    }

    ArgType a;
    int need_int = 0, need_sse = 0;
    switch (v->how) {
      case Value::How::empty: continue;  // takes no register and no stack slot
      case Value::How::by_reference:
        a = ArgType::integer(8);
        need_int = 1;
        break;
      case Value::How::memory:
        a = ArgType::memory(size, static_cast<uint16_t>(std::max<uint64_t>(v->align, 8)));
        break;
      case Value::How::regs:
        if (is_x87(v->cls[0]) || is_x87(v->cls[1])) {
          a = ArgType::memory(size, 16);
          break;
        }
        for (Cls c : v->cls) {
          need_int += c == Cls::integer;
          need_sse += c == Cls::sse;
        }
        if (v->cls[1] == Cls::none) {
          a = ArgType{ArgType::Kind::reg, static_cast<uint16_t>(std::min<uint64_t>(size, 8)),
                      static_cast<uint16_t>(std::max<uint64_t>(v->align, 1)), {part_of(v->cls[0]), Part::none}};
          if (promote && v->cls[0] == Cls::integer && size < 4) a.size = a.align = 4;
          if (promote && v->cls[0] == Cls::sse && size == 4) a.size = a.align = 8;
        } else {
          a = ArgType::pair(part_of(v->cls[0]), part_of(v->cls[1]), size,
                            static_cast<uint16_t>(std::max<uint64_t>(v->align, 8)));
        }
        break;
    }
    if (v->how == Value::How::by_reference) a.scalar = abi::Scalar::pointer;
    else if (a.kind == ArgType::Kind::reg && a.eightbytes() == 1) a.scalar = t_class->scalar;
    sig.args.push_back(a);

    // Which register the ABI gives the first eightbyte, if any (rule: an argument that
    // does not fit in the registers left goes wholly on the stack).
    int expect = -1;
    if (need_int + need_sse > 0) {
      if (ints + need_int <= 6 && sses + need_sse <= 8) {
        const bool first_int = v->how == Value::How::by_reference || v->cls[0] == Cls::integer;
        expect = first_int ? kIntArgRegs[ints] : kXmm0 + sses;
        ints += need_int;
        sses += need_sse;
      }
    }
    // A location list that covers the entry is evidence for any function. A single
    // expression is only weighed for local functions (the ones whose convention the
    // optimiser may change) and only when it names an argument register of the class
    // the ABI expects, or any argument register where the ABI expects the stack.
    if (params_concrete) {
      const ParamReg got = register_at(pa, f.entry);
      bool wrong = got.reg >= 0 && got.reg != expect;
      if (wrong && !got.from_list) {
        const bool arg_reg = is_int_arg_reg(got.reg) || is_sse_arg_reg(got.reg);
        const bool same_class = expect < 0 ? arg_reg
                                           : (is_int_arg_reg(expect) && is_int_arg_reg(got.reg)) ||
                                                 (is_sse_arg_reg(expect) && is_sse_arg_reg(got.reg));
        wrong = !external && same_class;
      }
      if (wrong)
        return refuse(fmt::format("DWARF puts {} in {} at the entry where the ABI puts it in {}: the "
                                  "optimiser changed this function's calling convention",
                                  pdesc(), reg_name(got.reg), expect >= 0 ? reg_name(expect) : "memory"));
    }
  }
  return sig;
}

// ---------------------------------------------------------------------------------------
// Finding the function DIE.

bool plausible_entry(const Debug& d, Dwarf_Addr a) {
  // Linkers resolve the debug info of discarded COMDAT copies to 0 (GNU ld) or to the
  // tombstones -1/-2 (lld).
  return (d.relocatable || a != 0) && a < ~Dwarf_Addr{1};
}


// The function DIE whose entry is `addr` (a DWARF address); `what` names it for messages,
// with the DIE's name added when `add_name`.
void build_index(const Debug& d) {
  // The unit's ranges, read once (dwarf_haspc reads them all again for each function),
  // sorted and merged: an entry is in the unit when one of them holds it.
  std::vector<std::pair<Dwarf_Addr, Dwarf_Addr>> ranges;
  auto in_unit = [&](Dwarf_Addr a) {
    auto it = std::upper_bound(ranges.begin(), ranges.end(), a,
                               [](Dwarf_Addr x, const auto& r) { return x < r.first; });
    return it != ranges.begin() && a < std::prev(it)->second;
  };
  for_each_cu(d.dw, [&](Dwarf_Die& cudie, Dwarf_Die& unit) {
    ranges.clear();
    Dwarf_Addr base, start, end;
    for (ptrdiff_t off = 0; (off = dwarf_ranges(&cudie, off, &base, &start, &end)) > 0;)
      if (start < end) ranges.emplace_back(start, end);
    std::sort(ranges.begin(), ranges.end());
    size_t merged = 0;
    for (const auto& r : ranges) {
      if (merged > 0 && r.first <= ranges[merged - 1].second)
        ranges[merged - 1].second = std::max(ranges[merged - 1].second, r.second);
      else
        ranges[merged++] = r;
    }
    ranges.resize(merged);
    auto visit = [&](Dwarf_Die& fn) {
      if (auto e = entry_of(&fn)) {
        auto& into = in_unit(*e) ? d.entries_in_unit : d.entries_elsewhere;
        into.emplace(*e, Debug::Entry{fn, unit});  // the first one stays
      }
      return false;
    };
    walk_subprograms(&unit, visit);
    return false;
  });
}

// `what()` names the address for messages (made only for one), with the DIE's name
// added when `add_name`.
template <class What>
Result<Signature> by_address(const Debug& d, Dwarf_Addr addr, What&& what, bool add_name) {
  auto named = [&](Dwarf_Die die) {
    return [die, &what, add_name]() mutable {
      const char* n = add_name ? str_attr(&die, DW_AT_name) : nullptr;
      return n ? fmt::format("'{}' ({})", n, what()) : what();
    };
  };
  std::optional<Found> found;
  std::optional<Found> around;  // a function the address is inside of, for the diagnostic
  if (d.lookups.fetch_add(1, std::memory_order_relaxed) >= Debug::kIndexAfter) {
    std::call_once(d.index_once, [&] { build_index(d); });
    const Debug::Entry* e = nullptr;
    if (auto it = d.entries_in_unit.find(addr); it != d.entries_in_unit.end()) e = &it->second;
    else if (auto el = d.entries_elsewhere.find(addr); el != d.entries_elsewhere.end()) e = &el->second;
    if (e != nullptr) return build_signature(d, Found{e->die, e->unit, addr}, named(e->die));
    // Not a function entry: the search below says what the address is inside of.
  }
  // `around` is looked for only once the entry was not found: asking each function
  // whether it holds the address cost twice the walk itself.
  auto search = [&](bool prune, bool find_around) {
    return for_each_cu(d.dw, [&](Dwarf_Die& cudie, Dwarf_Die& unit) {
      if (prune && dwarf_haspc(&cudie, addr) <= 0) return false;
      auto visit = [&](Dwarf_Die& fn) {
        auto e = entry_of(&fn);
        if (!e) return false;
        if (*e == addr) {
          found = Found{fn, unit, *e};
          return true;
        }
        if (find_around && !around && dwarf_haspc(&fn, addr) > 0) around = Found{fn, unit, *e};
        return false;
      };
      return walk_subprograms(&unit, visit);
    });
  };
  if (!search(true, false) && !search(false, false))  // a unit whose ranges are missing or wrong
    search(false, true);
  if (!found) {
    if (around) {
      const char* n = str_attr(&around->die, DW_AT_name);
      return make_error(Errc::not_found,
                        fmt::format("no debug info for a function entry at {} in {}: it is inside {} "
                                    "(entry {:#x})",
                                    what(), d.path, n ? n : "<unnamed>", d.to_file(around->entry)));
    }
    return make_error(Errc::not_found,
                      fmt::format("no debug info for {} in {}: no function DIE has that entry", what(), d.path));
  }
  return build_signature(d, *found, named(found->die));
}

// A defined function symbol (its Dwfl address and STT_ type), for names DWARF does not
// know: aliases (glibc's malloc is __libc_malloc) and gcc's clones.
struct Symbol {
  Dwarf_Addr addr;
  int type;
};
std::optional<Symbol> symbol_named(Dwfl_Module* mod, std::string_view name) {
  std::optional<Symbol> found;
  for_each_symbol(mod, [&](const char* s, const GElf_Sym& sym, GElf_Addr addr, GElf_Word shndx) {
    const int type = GELF_ST_TYPE(sym.st_info);
    if (name == s && (type == STT_FUNC || type == STT_GNU_IFUNC) && shndx != SHN_UNDEF) found = Symbol{addr, type};
    return found.has_value();
  });
  return found;
}

}  // namespace

// Opened files are kept: attaching to every function of a program looks each of them up
// by address in the same few files, and opening one costs milliseconds (until the
// lookups a tracer announced are done: lookups_done). A file without
// debug info is remembered too (its error is returned again, naming the new function).
struct CachedDebug {
  std::shared_ptr<Debug> debug;
  std::optional<Error> error;
};

// `what()` names the function for messages (made only for one). Not a template: the
// cache below is one for every caller.
// Function statics: the agent looks files up from a constructor that runs before this
// file's dynamic initialisation.
std::mutex& cache_mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, CachedDebug>& debug_cache() {
  static auto* cache = new std::map<std::string, CachedDebug>();  // never freed (exit order)
  return *cache;
}

Result<std::shared_ptr<Debug>> open_cached(const std::string& path, const std::function<std::string()>& what) {
  // The lock is never held while a file is opened: opening calls into libdw and libelf
  // (allocation, file system), and nothing utramp calls may run under a lock of its own
  // that a re-entrant call could need (docs/architecture.md, "Locks"). Two threads that
  // open the same file at once both read it; the first to finish is kept.
  std::mutex& mu = cache_mu();
  auto* cache = &debug_cache();
  std::optional<CachedDebug> found;
  {
    std::lock_guard lock(mu);
    if (auto it = cache->find(path); it != cache->end()) found = it->second;
  }
  if (!found) {
    auto dr = Debug::open(path, what());
    CachedDebug c;
    if (dr) c.debug = std::shared_ptr<Debug>(std::move(*dr));
    else c.error = dr.error();
    std::lock_guard lock(mu);
    if (cache->size() >= 32 && !cache->count(path)) cache->clear();
    found = cache->emplace(path, std::move(c)).first->second;  // the first one to finish
  }
  if (found->debug) return found->debug;
  Error e = *found->error;
  if (e.code == Errc::not_found) {
    // "no debug info for <first name> in PATH: ..." -> this function's name.
    const std::string prefix = "no debug info for ";
    const size_t in = e.message.find(" in ");
    if (e.message.starts_with(prefix) && in != std::string::npos)
      e.message = prefix + what() + e.message.substr(in);
  }
  return e;
}

void expect_lookups(const std::string& path, size_t n) {
  if (n < Debug::kIndexAfter) return;
  auto dr = open_cached(path, [] { return std::string("functions"); });
  if (!dr) return;
  const Debug& d = **dr;
  unsigned seen = d.lookups.load(std::memory_order_relaxed);
  while (seen < Debug::kIndexAfter &&
         !d.lookups.compare_exchange_weak(seen, Debug::kIndexAfter, std::memory_order_relaxed)) {
  }
}

void lookups_done(const std::string& path, size_t n) {
  if (n < Debug::kIndexAfter) return;
  std::shared_ptr<Debug> last;  // released after the lock (dwfl_end frees libdw's memory)
  std::lock_guard lock(cache_mu());
  auto& cache = debug_cache();
  if (auto it = cache.find(path); it != cache.end()) {
    last = std::move(it->second.debug);
    cache.erase(it);
  }
}

Result<abi::Signature> signature_from_dwarf(const std::string& path, uint64_t func_vaddr) {
  const std::function<std::string()> what = [func_vaddr] { return fmt::format("{:#x}", func_vaddr); };
  auto dr = open_cached(path, what);
  if (!dr) return std::move(dr).error();
  return by_address(**dr, (*dr)->to_dwarf(func_vaddr), what, true);
}

Result<abi::Signature> signature_from_dwarf(const std::string& path, std::string_view name) {
  const std::string what = fmt::format("'{}'", name);
  auto dr = Debug::open(path, what);
  if (!dr) return std::move(dr).error();
  Debug& d = **dr;

  // Matches by linkage name win over matches by DW_AT_name (a C++ mangled name is exact;
  // a plain name may be an overload set). One function may have several DIEs (a
  // concrete instance and its origins are not walked twice, but COMDAT copies are):
  // candidates are keyed by entry.
  std::vector<Found> by_linkage, by_name;
  auto add = [](std::vector<Found>& v, const Found& f) {
    for (const auto& x : v)
      if (x.entry == f.entry) return;
    v.push_back(f);
  };
  for_each_cu(d.dw, [&](Dwarf_Die&, Dwarf_Die& unit) {
    auto visit = [&](Dwarf_Die& fn) {
      const char* ln = str_attr(&fn, DW_AT_linkage_name);
      if (ln == nullptr) ln = str_attr(&fn, DW_AT_MIPS_linkage_name);
      const bool lmatch = ln != nullptr && name == ln;
      const char* nm = str_attr(&fn, DW_AT_name);
      const bool nmatch = nm != nullptr && name == nm;
      if (!lmatch && !nmatch) return false;
      auto e = entry_of(&fn);
      if (!e || !plausible_entry(d, *e)) return false;
      add(lmatch ? by_linkage : by_name, Found{fn, unit, *e});
      return false;
    };
    walk_subprograms(&unit, visit);
    return false;
  });
  const auto& hits = by_linkage.empty() ? by_name : by_linkage;
  if (hits.empty()) {
    if (auto sym = symbol_named(d.mod, name)) {
      if (sym->type == STT_GNU_IFUNC)
        return make_error(Errc::not_found,
                          fmt::format("no debug info for {} in {}: it is an IFUNC symbol, whose address is "
                                      "its resolver's; the implementation is chosen at load time",
                                      what, path));
      return by_address(
          d, sym->addr - d.dwbias, [&] { return fmt::format("{} ({:#x})", what, sym->addr - d.mainbias); },
          false);
    }
    return make_error(Errc::not_found,
                      fmt::format("no debug info for {} in {}: no function by that linkage name or "
                                  "DW_AT_name has code, and no function symbol by that name",
                                  what, path));
  }
  if (hits.size() > 1) {
    std::string list;
    for (auto h : hits) {
      const char* ln = str_attr(&h.die, DW_AT_linkage_name);
      list += fmt::format("{}{} at {:#x}", list.empty() ? "" : ", ", ln ? ln : std::string(name),
                          d.to_file(h.entry));
    }
    return make_error(Errc::invalid_argument,
                      fmt::format("{} is ambiguous in {}: {} functions ({}); give the linkage name or "
                                  "the address",
                                  what, path, hits.size(), list));
  }
  const Found& f = hits.front();
  return build_signature(d, f, [&] { return fmt::format("{} ({:#x})", what, d.to_file(f.entry)); });
}

std::string build_id_hex(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string hex;
  elf_version(EV_CURRENT);
  if (Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr)) {
    for (uint8_t b : build_id_of(elf)) hex += fmt::format("{:02x}", b);
    elf_end(elf);
  }
  ::close(fd);
  return hex;
}

Result<std::pair<uint64_t, uint64_t>> cfi_row_range(const std::string& path, uint64_t vaddr) {
  auto opened = open_regular(path);
  if (!opened) return std::move(opened).error();
  const int fd = *opened;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  Dwarf_CFI* cfi = elf ? dwarf_getcfi_elf(elf) : nullptr;
  Dwarf_Frame* frame = nullptr;
  Result<std::pair<uint64_t, uint64_t>> out =
      make_error(Errc::not_found, fmt::format("no call frame information covers {:#x} in {}", vaddr, path));
  if (cfi && dwarf_cfi_addrframe(cfi, vaddr, &frame) == 0) {
    Dwarf_Addr start = 0, end = 0;
    bool signalp = false;
    if (dwarf_frame_info(frame, &start, &end, &signalp) >= 0 && start <= vaddr && vaddr < end)
      out = std::pair<uint64_t, uint64_t>{start, end};
    free(frame);
  }
  if (cfi) dwarf_cfi_end(cfi);
  if (elf) elf_end(elf);
  ::close(fd);
  return out;
}

}  // namespace utramp::os
