// USDT support (src/ebpf/usdt.hpp): argument operands as <sys/sdt.h> writes them, the
// spec bytes usdt.bpf.h reads, the notes of the usdt_target builds and of Debian's
// python3, the usdt sections and attach specs, and the .kconfig extern usdt.bpf.h asks.
#include <unistd.h>
#include <gtest/gtest.h>

#include <cstring>
#include <elf.h>
#include <map>

#include "ebpf/helpers.hpp"
#include "ebpf/loader.hpp"
#include "ebpf/usdt.hpp"
#include "os/dwarf.hpp"
#include "os/elf_file.hpp"

namespace utramp::ebpf {
namespace {

UsdtArg arg(const char* text) {
  auto a = parse_usdt_arg(text);
  EXPECT_TRUE(a) << text << ": " << (a ? "" : a.error().message);
  return a ? *a : UsdtArg{};
}

std::string refusal(const char* text) {
  auto a = parse_usdt_arg(text);
  EXPECT_FALSE(a) << text << " was accepted";
  return a ? "" : a.error().message;
}

TEST(Usdt, OperandsOfEveryKind) {
  UsdtArg a = arg("-4@%edi");
  EXPECT_EQ(a.kind, UsdtArg::Kind::reg);
  EXPECT_EQ(a.size, 4u);
  EXPECT_TRUE(a.is_signed);
  EXPECT_EQ(a.reg, "di");
  EXPECT_EQ(arg("-1@%dil").reg, "di");
  EXPECT_EQ(arg("1@%sil").reg, "si");
  EXPECT_EQ(arg("2@%cx").reg, "cx");
  EXPECT_EQ(arg("8@%rax").reg, "ax");
  EXPECT_EQ(arg("-4@%r8d").reg, "r8");
  EXPECT_EQ(arg("2@%r15w").reg, "r15");
  EXPECT_EQ(arg("1@%r10b").reg, "r10");
  EXPECT_EQ(arg("8@%rbp").reg, "bp");

  a = arg("8@-16(%rbp)");
  EXPECT_EQ(a.kind, UsdtArg::Kind::reg_deref);
  EXPECT_EQ(a.val_off, -16);
  EXPECT_EQ(a.reg, "bp");
  EXPECT_FALSE(a.is_signed);
  a = arg("-2@(%rsp)");
  EXPECT_EQ(a.kind, UsdtArg::Kind::reg_deref);
  EXPECT_EQ(a.val_off, 0);
  EXPECT_EQ(a.reg, "sp");
  EXPECT_EQ(arg("8@0x10(%rax)").val_off, 16);

  a = arg("-4@$-7");
  EXPECT_EQ(a.kind, UsdtArg::Kind::constant);
  EXPECT_EQ(a.val_off, -7);
  EXPECT_EQ(arg("-8@$123456789012").val_off, 123456789012);
  EXPECT_EQ(static_cast<uint64_t>(arg("8@$18446744073709551615").val_off), ~0ull);

  auto all = parse_usdt_args("-1@-52(%rbp) 1@%sil -4@$5  8@16(%rsp)");
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[3].val_off, 16);
  auto none = parse_usdt_args("");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST(Usdt, OperandsLibbpf11CannotReadAreRefusedSayingWhy) {
  EXPECT_NE(refusal("-8@(%rdx,%rax,8)").find("base + index * scale"), std::string::npos);
  EXPECT_NE(refusal("-4@counter(%rip)").find("offset 'counter' is not a number"), std::string::npos);
  EXPECT_NE(refusal("8@$table").find("constant 'table' is not a number"), std::string::npos);
  EXPECT_NE(refusal("1@%ah").find("register %ah is not one of struct pt_regs"), std::string::npos);
  EXPECT_NE(refusal("8@%xmm0").find("register %xmm0"), std::string::npos);
  EXPECT_NE(refusal("3@%eax").find("size '3' is not 1, 2, 4 or 8"), std::string::npos);
  EXPECT_NE(refusal("%eax").find("no SIZE@"), std::string::npos);
  EXPECT_NE(refusal("4@eax").find("none of $CONST, %REG, OFF(%REG)"), std::string::npos);
  auto many = parse_usdt_args("1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al 1@%al");
  ASSERT_FALSE(many);
  EXPECT_NE(many.error().message.find("13 arguments: usdt.bpf.h reads at most 12"), std::string::npos);
}

// The bytes of libbpf 1.1's struct __bpf_usdt_spec (usdt.bpf.h), field by field.
TEST(Usdt, SpecBytesAreLibbpfsLayout) {
  auto args = parse_usdt_args("-1@%dil 8@-16(%rbp) -4@$-7");
  ASSERT_TRUE(args);
  const auto s = encode_usdt_spec(*args, 0x1122334455667788);
  auto u64 = [&](size_t o) {
    uint64_t v;
    std::memcpy(&v, s.data() + o, 8);
    return v;
  };
  auto u32 = [&](size_t o) {
    uint32_t v;
    std::memcpy(&v, s.data() + o, 4);
    return v;
  };
  auto s16 = [&](size_t o) {
    int16_t v;
    std::memcpy(&v, s.data() + o, 2);
    return v;
  };
  // args[0]: register di, signed, 1 byte: shifted by 56.
  EXPECT_EQ(u32(8), 1u);
  EXPECT_EQ(s16(12), pt_regs_offset("di"));
  EXPECT_EQ(s.at(14), 1);
  EXPECT_EQ(s.at(15), 56);
  // args[1]: memory at bp - 16, unsigned, 8 bytes.
  EXPECT_EQ(u64(16), static_cast<uint64_t>(-16));
  EXPECT_EQ(u32(24), 2u);
  EXPECT_EQ(s16(28), pt_regs_offset("bp"));
  EXPECT_EQ(s.at(30), 0);
  EXPECT_EQ(s.at(31), 0);
  // args[2]: the constant -7, signed, 4 bytes.
  EXPECT_EQ(u64(32), static_cast<uint64_t>(-7));
  EXPECT_EQ(u32(40), 0u);
  EXPECT_EQ(s.at(46), 1);
  EXPECT_EQ(s.at(47), 32);
  for (size_t i = 48; i < 192; ++i) EXPECT_EQ(s.at(i), 0) << i;
  EXPECT_EQ(u64(192), 0x1122334455667788u);
  EXPECT_EQ(s16(200), 3);
}

std::unique_ptr<os::ElfFile> open_elf(const std::string& path) {
  auto e = os::ElfFile::open(path);
  EXPECT_TRUE(e) << path << ": " << (e ? "" : e.error().message);
  return e ? std::move(*e) : nullptr;
}

// Every build of usdt_target: its three probes, each argument decodable, the guarded
// one with a semaphore in .probes, each site a 1-byte nop in the file.
TEST(Usdt, NotesOfEveryBuildOfTheTarget) {
  for (const char* b : {"usdt_target_gcc_O0", "usdt_target", "usdt_target_clang_O0", "usdt_target_clang_O2"}) {
    const std::string path = std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/" + b;
    SCOPED_TRACE(path);
    auto elf = open_elf(path);
    ASSERT_TRUE(elf);
    auto notes = read_usdt_notes(*elf);
    ASSERT_TRUE(notes) << notes.error().message;
    std::map<std::string, int> count;
    for (const UsdtSite& s : *notes) {
      EXPECT_EQ(s.provider, "demo");
      ++count[s.name];
      auto args = parse_usdt_args(s.args);
      ASSERT_TRUE(args) << s.name << " '" << s.args << "': " << args.error().message;
      EXPECT_EQ(args->size(), s.name == "args" ? 8u : s.name == "consts" ? 3u : 2u) << s.args;
      const auto code = elf->bytes_at(s.pc, 1);
      ASSERT_EQ(code.size(), 1u);
      EXPECT_EQ(code[0], 0x90) << s.name << " at " << std::hex << s.pc;
      if (s.name == "guarded") {
        const os::ElfSection* probes = elf->section(".probes");
        ASSERT_NE(probes, nullptr);
        EXPECT_GE(s.semaphore, probes->addr);
        EXPECT_LT(s.semaphore, probes->addr + probes->size);
      } else {
        EXPECT_EQ(s.semaphore, 0u) << s.name;
      }
    }
    EXPECT_EQ(count, (std::map<std::string, int>{{"args", 1}, {"consts", 1}, {"guarded", 1}}));
  }
}

// A program nobody here wrote: Debian's python3 (stripped) ships USDT probes, each with
// a semaphore (python:function__entry ...). Its notes are read, every operand decodes,
// every semaphore is a u16 of writable data. (Debian 12's libc has no notes.)
TEST(Usdt, NotesOfDebiansPython) {
  char real[4096];
  const ssize_t n = readlink("/usr/bin/python3", real, sizeof real - 1);
  if (n <= 0) GTEST_SKIP() << "no /usr/bin/python3";
  real[n] = 0;
  const std::string path = real[0] == '/' ? std::string(real) : "/usr/bin/" + std::string(real);
  auto elf = open_elf(path);
  ASSERT_TRUE(elf);
  auto notes = read_usdt_notes(*elf);
  ASSERT_TRUE(notes) << notes.error().message;
  if (notes->empty()) GTEST_SKIP() << path << " has no .note.stapsdt (built without systemtap)";
  bool entry = false;
  for (const UsdtSite& s : *notes) {
    EXPECT_EQ(s.provider, "python");
    auto args = parse_usdt_args(s.args);
    EXPECT_TRUE(args) << s.name << " '" << s.args << "': " << (args ? "" : args.error().message);
    ASSERT_NE(s.semaphore, 0u) << s.name;
    const auto code = elf->bytes_at(s.pc, 1);
    ASSERT_EQ(code.size(), 1u);
    EXPECT_EQ(code[0], 0x90) << s.name;
    if (s.name != "function__entry") continue;
    entry = true;
    ASSERT_TRUE(args);
    EXPECT_EQ(args->size(), 3u) << s.args;  // file name, function name, line
  }
  EXPECT_TRUE(entry);
}

TEST(Usdt, SectionsAndAttachSpecs) {
  auto o = load_object_file(std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/usdt_args.bpf.o", runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  std::map<std::string, const LoadedProgram*> by;
  for (const auto& p : o->programs) by[p.name] = &p;
  ASSERT_EQ(by.size(), 3u);
  EXPECT_EQ(by["on_args"]->kind, ProgKind::usdt);
  EXPECT_EQ(by["on_args"]->binary, "/proc/self/exe");
  EXPECT_EQ(by["on_args"]->target, "demo:args");
  EXPECT_EQ(by["on_guarded"]->binary, "usdt_target");
  EXPECT_EQ(by["on_guarded"]->target, "demo:guarded");
  EXPECT_EQ(by["on_consts"]->target, "");  // bare SEC("usdt")
  EXPECT_TRUE(is_uprobe(ProgKind::usdt));   // its context is struct pt_regs

  // usdt.bpf.h's `extern const bool LINUX_HAS_BPF_COOKIE __kconfig` reads 1.
  auto k = std::find_if(o->maps.begin(), o->maps.end(), [](const MapSpec& m) { return m.name == ".kconfig"; });
  ASSERT_NE(k, o->maps.end());
  EXPECT_TRUE(k->readonly);
  ASSERT_EQ(k->init.size(), 1u);
  EXPECT_EQ(k->init[0], 1);
  EXPECT_GE(usdt_specs_map(*o), 0);

  auto bare = apply_attach(*o, {});
  ASSERT_FALSE(bare);
  EXPECT_NE(bare.error().message.find("program 'on_consts' (section 'usdt') names no USDT probe: attach it with "
                                      "--attach on_consts=usdt:BINARY:PROVIDER:NAME"),
            std::string::npos)
      << bare.error().message;

  auto spec = parse_attach_spec("on_consts=usdt:/usr/bin/x:y:demo:consts");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->kind, ProgKind::usdt);
  EXPECT_EQ(spec->binary, "/usr/bin/x:y");  // the provider and name are the last two fields
  EXPECT_EQ(spec->func, "demo:consts");
  ASSERT_TRUE(apply_attach(*o, std::vector<AttachSpec>{*spec}));
  EXPECT_EQ(by["on_consts"]->target, "demo:consts");
  EXPECT_EQ(by["on_consts"]->kind, ProgKind::usdt);

  for (const char* bad : {"p=usdt:bin:name", "p=usdt:bin::name", "p=usdt::prov:name", "p=usdt:bin:prov:"}) {
    auto b = parse_attach_spec(bad);
    EXPECT_FALSE(b) << bad;
    if (!b) {
      EXPECT_NE(b.error().message.find("BINARY:PROVIDER:NAME"), std::string::npos) << b.error().message;
    }
  }
  // A tracing program cannot take a pt_regs kind.
  auto lat = load_object_file(std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/latency.bpf.o", runtime_helpers());
  ASSERT_TRUE(lat);
  auto u = parse_attach_spec(lat->programs[0].name + "=usdt:x:p:n");
  ASSERT_TRUE(u);
  EXPECT_FALSE(apply_attach(*lat, std::vector<AttachSpec>{*u}));
}

// Where the plan finds nothing, the message lists what the binary has.
TEST(Usdt, PlanNamesTheProbesABinaryHas) {
  auto o = load_object_file(std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/usdt_args.bpf.o", runtime_helpers());
  ASSERT_TRUE(o);
  auto spec = parse_attach_spec("on_consts=usdt:usdt_target:demo:nope");
  ASSERT_TRUE(spec);
  ASSERT_TRUE(apply_attach(*o, std::vector<AttachSpec>{*spec}));
  auto elf = open_elf(std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/usdt_target");
  ASSERT_TRUE(elf);
  auto plan = plan_usdt(*o, *elf);
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message.find("no USDT probe 'demo:nope' in"), std::string::npos) << plan.error().message;
  EXPECT_NE(plan.error().message.find("its probes: demo:args, demo:consts, demo:guarded"), std::string::npos)
      << plan.error().message;

  auto good = parse_attach_spec("on_consts=usdt:usdt_target:demo:consts");
  ASSERT_TRUE(good);
  auto o2 = load_object_file(std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/usdt_args.bpf.o", runtime_helpers());
  ASSERT_TRUE(o2);
  ASSERT_TRUE(apply_attach(*o2, std::vector<AttachSpec>{*good}));
  auto ok = plan_usdt(*o2, *elf);
  ASSERT_TRUE(ok) << ok.error().message;
  ASSERT_EQ(ok->size(), 3u);
  uint32_t next = 0;  // spec ids: one per site, in program order, from 0
  for (const UsdtPlan& p : *ok) {
    EXPECT_EQ(p.first_spec, next);
    next += static_cast<uint32_t>(p.sites.size());
  }
}

// Where no symbol covers a USDT site (stripped .cold code), the probe layer decodes
// from the call frame information row that holds it (os::cfi_row_range): a row inside
// the function, starting on one of its instruction boundaries.
TEST(Usdt, CfiRowHoldsEachSite) {
  const std::string path = std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/usdt_target";
  auto elf = open_elf(path);
  ASSERT_TRUE(elf);
  auto notes = read_usdt_notes(*elf);
  ASSERT_TRUE(notes);
  for (const UsdtSite& s : *notes) {
    SCOPED_TRACE(s.name);
    const os::ElfSymbol* fn = nullptr;
    for (const os::ElfSymbol& y : elf->symbols())
      if (y.type == STT_FUNC && y.value <= s.pc && s.pc < y.value + y.size) fn = &y;
    ASSERT_NE(fn, nullptr);
    auto row = os::cfi_row_range(path, s.pc);
    ASSERT_TRUE(row) << row.error().message;
    EXPECT_LE(row->first, s.pc);
    EXPECT_LT(s.pc, row->second);
    EXPECT_GE(row->first, fn->value);
    EXPECT_LE(row->second, fn->value + fn->size);
  }
  auto none = os::cfi_row_range(path, 0x10);  // the ELF header: no code
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, Errc::not_found);
}

// bpf_probe_read_user_str writes nothing past the NUL, as the kernel's: usdt_pycalls
// keys a hash map by a zeroed struct the function's name is read into, and bytes read
// past the name made one name many keys. (Here because USDT programs showed it.)
TEST(Usdt, ProbeReadStrWritesNothingPastTheNul) {
  const HelperInfo* h = runtime_helpers().find(114);  // bpf_probe_read_user_str
  ASSERT_NE(h, nullptr);
  const char src[32] = "tick\0garbage after the name";
  // The trusted form (a verified program's; the checked one needs a running program).
  char dst[32];
  std::memset(dst, 0, sizeof dst);
  const uint64_t n = h->trusted_fn()(reinterpret_cast<uint64_t>(dst), sizeof dst, reinterpret_cast<uint64_t>(src), 0, 0);
  EXPECT_EQ(n, 5u);
  EXPECT_STREQ(dst, "tick");
  for (size_t i = 5; i < sizeof dst; ++i) EXPECT_EQ(dst[i], 0) << i;
  // A string longer than the destination: size-1 bytes and a NUL.
  char small[4];
  std::memset(small, 0x55, sizeof small);
  EXPECT_EQ(h->trusted_fn()(reinterpret_cast<uint64_t>(small), sizeof small, reinterpret_cast<uint64_t>(src), 0, 0),
            4u);
  EXPECT_EQ(std::string(small, 4), std::string("tic\0", 4));
}

}  // namespace
}  // namespace utramp::ebpf
