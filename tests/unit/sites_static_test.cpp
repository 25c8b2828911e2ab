// Static site discovery: classify() on byte goldens, and analyse_file() on every
// fixture of the build matrix (gcc and clang, -O0 and -O2, each site flavour, with and
// without endbr64, PIE, non-PIE and shared library), plus the files it must refuse.
#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "arch/arch.hpp"
#include "common/hex.hpp"
#include "fixture_matrix.hpp"
#include "os/elf_file.hpp"
#include "sites/object.hpp"
#include "sites/site.hpp"

using namespace utramp;
using sites::SiteKind;
using test::Fixture;

namespace {

constexpr uint64_t kFunc = 0x401000;

// A context for byte goldens: __fentry__ is at 0x400100 (a PLT stub), its GOT slot at
// 0x403000; mcount at 0x400200, its slot at 0x403008; only the function is listed.
sites::ObjectContext golden_context(bool xray = false) {
  sites::ObjectContext c;
  c.listed = [](uint64_t a) { return a == kFunc; };
  c.is_fentry = [](uint64_t a) { return a == 0x400100; };
  c.is_fentry_slot = [](uint64_t a) { return a == 0x403000; };
  c.is_mcount = [](uint64_t a) { return a == 0x400200; };
  c.is_mcount_slot = [](uint64_t a) { return a == 0x403008; };
  c.has_xray = xray;
  return c;
}

sites::SiteInfo classify_bytes(std::vector<uint8_t> code, bool xray = false) {
  return sites::classify("f", kFunc, code.size(), code, golden_context(xray));
}

}  // namespace

// ---- classify() on byte goldens -------------------------------------------------

TEST(ClassifyGolden, OneFiveByteNop) {
  // 0f 1f 44 00 00   nop dword ptr [rax+rax]; c3 ret
  auto s = classify_bytes({0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::nop5);
  EXPECT_TRUE(s.attachable);
  EXPECT_EQ(s.site, kFunc);
  EXPECT_EQ(s.site_len, 5);
  EXPECT_FALSE(s.endbr);
  EXPECT_TRUE(s.listed);
}

TEST(ClassifyGolden, ClangsFiveByteNopWithDisplacement) {
  // 0f 1f 44 00 08   nop dword ptr [rax+rax+8]  (clang -fpatchable-function-entry=5)
  auto s = classify_bytes({0x0f, 0x1f, 0x44, 0x00, 0x08, 0x31, 0xc0, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::nop5);
  EXPECT_EQ(s.site_len, 5);
}

TEST(ClassifyGolden, FiveOneByteNops) {
  // 90 x5 (gcc -fpatchable-function-entry=5); 31 c0 xor eax, eax; c3 ret
  auto s = classify_bytes({0x90, 0x90, 0x90, 0x90, 0x90, 0x31, 0xc0, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::nop1x5);
  EXPECT_TRUE(s.needs_quiescence());
  EXPECT_EQ(s.site_len, 5);
}

TEST(ClassifyGolden, FourOneByteNopsAreNoSite) {
  // 90 x4; c3: no compiler site, and 5 bytes of whole instructions end at the ret.
  auto s = classify_bytes({0x90, 0x90, 0x90, 0x90, 0xc3});
  EXPECT_NE(s.kind, SiteKind::nop1x5);
}

TEST(ClassifyGolden, EndbrMovesTheSite) {
  // f3 0f 1e fa endbr64; 0f 1f 44 00 00 nop; c3 ret
  auto s = classify_bytes({0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3});
  EXPECT_TRUE(s.endbr);
  EXPECT_EQ(s.kind, SiteKind::nop5);
  EXPECT_EQ(s.site, kFunc + 4);
}

TEST(ClassifyGolden, CallFentry) {
  // e8 fb f0 ff ff   call 0x400100 (__fentry__@plt) from 0x401000
  auto s = classify_bytes({0xe8, 0xfb, 0xf0, 0xff, 0xff, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::fentry_call);
  EXPECT_EQ(s.site_len, 5);
}

TEST(ClassifyGolden, CallElsewhereIsNotFentry) {
  // e8 fc f0 ff ff   call 0x400101: some other function; the prologue is a call.
  auto s = classify_bytes({0xe8, 0xfc, 0xf0, 0xff, 0xff, 0xc3});
  EXPECT_NE(s.kind, SiteKind::fentry_call);
}

TEST(ClassifyGolden, CallFentryThroughGot) {
  // ff 15 fa 1f 00 00   call [rip+0x1ffa] = [0x403000] (__fentry__@GOTPCREL)
  auto s = classify_bytes({0xff, 0x15, 0xfa, 0x1f, 0x00, 0x00, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::fentry_gotpcrel);
  EXPECT_EQ(s.site_len, 6);
}

TEST(ClassifyGolden, XraySledOnlyWithXrayMap) {
  // eb 09 jmp +9; 66 0f 1f 84 00 00 02 00 00 nop word ptr [rax+rax+0x200]; 31 c0; c3
  const std::vector<uint8_t> sled = {0xeb, 0x09, 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00,
                                     0x02, 0x00, 0x00, 0x31, 0xc0, 0xc3};
  auto with = classify_bytes(sled, /*xray=*/true);
  EXPECT_EQ(with.kind, SiteKind::xray_sled);
  EXPECT_EQ(with.site_len, 11);
  auto without = classify_bytes(sled, /*xray=*/false);
  EXPECT_NE(without.kind, SiteKind::xray_sled);
}

// -pg without -mfentry: the site is the mcount call after the frame set-up.
TEST(ClassifyGolden, McountAfterTheFrame) {
  // 55 push rbp; 48 89 e5 mov rbp, rsp; e8 f7 f1 ff ff call 0x400200 (mcount); 5d; c3
  auto s = classify_bytes({0x55, 0x48, 0x89, 0xe5, 0xe8, 0xf7, 0xf1, 0xff, 0xff, 0x5d, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::mcount);
  EXPECT_TRUE(s.attachable) << s.reason;
  EXPECT_EQ(s.site, kFunc + 4);
  EXPECT_EQ(s.site_len, 5);
}

TEST(ClassifyGolden, McountAtTheEntryIsAnFentrySite) {
  // e8 fb f1 ff ff   call 0x400200 (mcount) from 0x401000, before any frame
  auto s = classify_bytes({0xe8, 0xfb, 0xf1, 0xff, 0xff, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::fentry_call);
  EXPECT_EQ(s.site, kFunc);
}

TEST(ClassifyGolden, McountThroughGot) {
  // 55; 48 89 e5; ff 15 fe 1f 00 00 call [rip+0x1ffe] = [0x403008] (mcount@GOTPCREL); 5d; c3
  auto s = classify_bytes({0x55, 0x48, 0x89, 0xe5, 0xff, 0x15, 0xfe, 0x1f, 0x00, 0x00, 0x5d, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::mcount);
  EXPECT_EQ(s.site, kFunc + 4);
  EXPECT_EQ(s.site_len, 6);
}

TEST(ClassifyGolden, McountAfterArgumentsMovedToSavedRegisters) {
  // clang -O2: 55; 48 89 e5; 53 push rbx; 50 push rax; 89 fb mov ebx, edi;
  // e8 f3 f1 ff ff call mcount; 5d; c3. rbx is put back from its slot.
  auto s = classify_bytes(
      {0x55, 0x48, 0x89, 0xe5, 0x53, 0x50, 0x89, 0xfb, 0xe8, 0xf3, 0xf1, 0xff, 0xff, 0x5d, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::mcount);
  EXPECT_EQ(s.site, kFunc + 8);
  auto undo = arch::frame_undo(std::vector<uint8_t>{0x55, 0x48, 0x89, 0xe5, 0x53, 0x50, 0x89, 0xfb},
                               kFunc);
  ASSERT_TRUE(undo) << undo.error().message;
  ASSERT_EQ(undo->pushes.size(), 2u);
  EXPECT_EQ(undo->pushes[0].reg, 3);  // rbx at rbp-8
  EXPECT_EQ(undo->pushes[0].offset, -8);
  EXPECT_EQ(undo->pushes[1].reg, 0);  // rax at rbp-16
  EXPECT_EQ(undo->pushes[1].offset, -16);
}

TEST(ClassifyGolden, McountAfterWhatCannotBeUndoneIsRefusedWithEvidence) {
  // 55; 48 89 e5; 89 f8 mov eax, edi (rax was not saved); e8 f5 f1 ff ff call mcount; 5d; c3
  auto s = classify_bytes({0x55, 0x48, 0x89, 0xe5, 0x89, 0xf8, 0xe8, 0xf5, 0xf1, 0xff, 0xff,
                           0x5d, 0xc3});
  EXPECT_NE(s.kind, SiteKind::mcount);
  EXPECT_NE(s.reason.find("f+0x6"), std::string::npos) << s.reason;  // the call
  EXPECT_NE(s.reason.find("f+0x4"), std::string::npos) << s.reason;  // the culprit
  EXPECT_NE(s.reason.find("89 f8"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("mov eax, edi"), std::string::npos) << s.reason;
  // A register changed before it is pushed (the slot would hold the changed value) is
  // refused at the change.
  // 55; 48 89 e5; 89 fb mov ebx, edi; 53 push rbx; e8 f4 f1 ff ff call mcount; 5d; c3
  auto t = classify_bytes({0x55, 0x48, 0x89, 0xe5, 0x89, 0xfb, 0x53, 0xe8, 0xf4, 0xf1, 0xff,
                           0xff, 0x5d, 0xc3});
  EXPECT_NE(t.kind, SiteKind::mcount);
  EXPECT_NE(t.reason.find("f+0x4: 'mov ebx, edi'"), std::string::npos) << t.reason;
}

TEST(ClassifyGolden, PrologueOfWholeInstructions) {
  // 55 push rbp; 48 89 e5 mov rbp, rsp; 89 7d fc mov [rbp-4], edi; 8b 45 fc; 5d; c3
  auto s = classify_bytes({0x55, 0x48, 0x89, 0xe5, 0x89, 0x7d, 0xfc, 0x8b, 0x45, 0xfc, 0x5d, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::prologue);
  EXPECT_TRUE(s.attachable);
  EXPECT_EQ(s.site_len, 7);  // push (1) + mov (3) + mov (3): the first boundary >= 5
}

TEST(ClassifyGolden, TooShortFunction) {
  // 31 c0 xor eax, eax; c3 ret
  auto s = classify_bytes({0x31, 0xc0, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::none);
  EXPECT_FALSE(s.attachable);
  EXPECT_NE(s.reason.find("too short"), std::string::npos) << s.reason;
}

TEST(ClassifyGolden, BytesPastTheSymbolAreNotDecoded) {
  // The reader hands out at least 16 bytes; a 3-byte function followed by padding and
  // the next function is still too short.
  const std::vector<uint8_t> code = {0x31, 0xc0, 0xc3, 0x66, 0x0f, 0x1f, 0x84, 0x00,
                                     0x00, 0x00, 0x00, 0x00, 0x55, 0x48, 0x89, 0xe5};
  auto s = sites::classify("f", kFunc, 3, code, golden_context());
  EXPECT_EQ(s.kind, SiteKind::none);
  EXPECT_NE(s.reason.find("too short"), std::string::npos) << s.reason;
}

TEST(ClassifyGolden, BranchIntoTheReplacedBytes) {
  // 31 c0 xor eax, eax; 83 c0 01 add eax, 1; 39 f8 cmp eax, edi; 7c f9 jl +2; c3
  auto s = classify_bytes({0x31, 0xc0, 0x83, 0xc0, 0x01, 0x39, 0xf8, 0x7c, 0xf9, 0xc3});
  EXPECT_EQ(s.kind, SiteKind::none);
  EXPECT_NE(s.reason.find("f+0x7 targets f+0x2"), std::string::npos) << s.reason;
}

TEST(ClassifyGolden, JumpTable) {
  // 89 f8 mov eax, edi; 48 8b 04 c5 00 20 40 00 mov rax, [rax*8+0x402000]; ff e0 jmp rax
  auto s = classify_bytes({0x89, 0xf8, 0x48, 0x8b, 0x04, 0xc5, 0x00, 0x20, 0x40, 0x00, 0xff, 0xe0});
  EXPECT_EQ(s.kind, SiteKind::none);
  EXPECT_NE(s.reason.find("jump table"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("f+0xa"), std::string::npos) << s.reason;
}

TEST(ClassifyGolden, UnknownSizeIsRefused) {
  std::vector<uint8_t> code = {0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3};
  auto s = sites::classify("f", kFunc, 0, code, golden_context());
  EXPECT_FALSE(s.attachable);
  EXPECT_NE(s.reason.find("no size"), std::string::npos) << s.reason;
}

TEST(ClassifyGolden, ColdFragmentIsNotAnEntry) {
  std::vector<uint8_t> code = {0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3};
  auto s = sites::classify("f.cold", kFunc, code.size(), code, golden_context());
  EXPECT_FALSE(s.attachable);
  EXPECT_NE(s.reason.find("cold"), std::string::npos) << s.reason;
}

// ---- analyse_file() on the fixture matrix ---------------------------------------

class FixtureSites : public ::testing::TestWithParam<Fixture> {};

TEST_P(FixtureSites, EveryFunctionHasTheExpectedSite) {
  const Fixture& f = GetParam();
  if (!f.missing.empty()) GTEST_SKIP() << f.file << " was not built: " << f.missing;
  auto obj = sites::analyse_file(f.path());
  ASSERT_TRUE(obj.ok()) << obj.error().message;
  EXPECT_FALSE(obj->stripped);
  EXPECT_EQ(obj->has_patchable_entries, f.flavour == "pfe");
  EXPECT_EQ(obj->has_mcount_loc, f.flavour == "mnop");
  EXPECT_EQ(obj->has_xray, f.flavour == "xray");

  auto elf = os::ElfFile::open(f.path());
  ASSERT_TRUE(elf.ok());
  std::map<std::string, const sites::SiteInfo*> by_name;
  for (const auto& s : obj->functions) by_name[s.name] = &s;

  std::vector<std::string_view> names(std::begin(test::kCompiledFunctions),
                                      std::end(test::kCompiledFunctions));
  names.insert(names.end(), std::begin(test::kAsmFunctions), std::end(test::kAsmFunctions));
  for (std::string_view fn : names) {
    SCOPED_TRACE(std::string(fn));
    auto it = by_name.find(std::string(fn));
    ASSERT_NE(it, by_name.end()) << fn << " not found in " << f.file;
    const sites::SiteInfo& s = *it->second;
    const test::Expectation want = test::expected_site(f, fn);
    EXPECT_EQ(sites::site_kind_name(s.kind), sites::site_kind_name(want.kind)) << s.reason;
    EXPECT_EQ(s.attachable, want.attachable) << s.reason;
    if (!want.reason.empty()) {
      EXPECT_NE(s.reason.find(want.reason), std::string::npos) << s.reason;
    }
    if (want.attachable) {
      EXPECT_EQ(s.reason, "");
    }
    EXPECT_EQ(s.endbr, f.cet);
    EXPECT_EQ(s.site, s.func + (f.cet ? 4 : 0));
    EXPECT_EQ(s.listed, want.listed);
    if (want.kind == SiteKind::prologue) {
      EXPECT_GE(s.site_len, 5);
    } else if (want.kind != SiteKind::none) {
      EXPECT_EQ(s.site_len, test::compiler_site_len(want.kind));
    }
    // The planted bytes, as the compilers emit them.
    auto bytes = (*elf)->bytes_at(s.site, 5);
    ASSERT_EQ(bytes.size(), 5u);
    const std::string hex = hex_bytes(bytes);
    switch (want.kind) {
      case SiteKind::nop1x5: EXPECT_EQ(hex, "90 90 90 90 90"); break;
      case SiteKind::nop5:
        EXPECT_EQ(hex, f.cc == "gcc" ? "0f 1f 44 00 00" : "0f 1f 44 00 08");
        break;
      case SiteKind::fentry_call: EXPECT_EQ(hex.substr(0, 2), "e8"); break;
      case SiteKind::fentry_gotpcrel: EXPECT_EQ(hex.substr(0, 5), "ff 15"); break;
      case SiteKind::xray_sled: EXPECT_EQ(hex.substr(0, 5), "eb 09"); break;
      default: break;
    }
  }
  // main carries the flavour's site too.
  if (!f.shared() && test::compiler_site(f) != SiteKind::none) {
    auto it = by_name.find("main");
    ASSERT_NE(it, by_name.end());
    EXPECT_EQ(sites::site_kind_name(it->second->kind),
              sites::site_kind_name(test::compiler_site(f)));
  }
  if (f.shared()) {
    EXPECT_EQ(by_name.count("main"), 0u);
  }
  // gcc -O2 splits cold paths into "fn.cold" symbols: never an entry.
  for (const auto& s : obj->functions)
    if (s.name.ends_with(".cold")) {
      EXPECT_FALSE(s.attachable) << s.name;
      EXPECT_NE(s.reason.find("cold fragment"), std::string::npos) << s.reason;
    }
}

std::string fixture_test_name(const ::testing::TestParamInfo<Fixture>& info) {
  std::string n = info.param.file;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Matrix, FixtureSites, ::testing::ValuesIn(test::fixture_matrix()),
                         fixture_test_name);

TEST(FixtureMatrix, CoversEveryCompilerFlavourAndLink) {
  // The matrix itself: every combination the issue names is present (built or skipped
  // with a reason), so a shrinking CMakeLists.txt cannot pass unnoticed.
  std::set<std::string> seen;
  for (const Fixture& f : test::fixture_matrix())
    seen.insert(f.cc + "/" + f.opt + "/" + f.flavour + (f.cet ? "-cet/" : "/") + f.link);
  for (std::string cc : {"gcc", "clang"})
    for (std::string opt : {"O0", "O2"})
      for (std::string fl : {"plain", "pfe", "fentry"})
        for (std::string link : {"pie", "nopie", "pic"}) {
          EXPECT_TRUE(seen.count(cc + "/" + opt + "/" + fl + "/" + link)) << cc << opt << fl << link;
          EXPECT_TRUE(seen.count(cc + "/O2/" + fl + "-cet/" + link)) << cc << fl << link;
        }
  for (std::string link : {"pie", "nopie", "pic"}) {
    EXPECT_TRUE(seen.count("clang/O0/xray/" + link));
    EXPECT_TRUE(seen.count("clang/O2/xray-cet/" + link));
  }
  EXPECT_TRUE(seen.count("gcc/O2/mnop/nopie"));
  EXPECT_TRUE(seen.count("gcc/O2/mnop-cet/nopie"));
}

TEST(AnalyseFile, StrippedLibraryListsItsExportedFunctions) {
  if (!UTRAMP_FIXTURE_STRIPPED_BUILT) GTEST_SKIP() << "strip was not found at configure time";
  auto obj = sites::analyse_file(test::fixture_path("fx_gcc_O2_pfe_pic_stripped.so"));
  ASSERT_TRUE(obj.ok()) << obj.error().message;
  EXPECT_TRUE(obj->stripped);
  EXPECT_TRUE(obj->has_patchable_entries);  // sections survive strip --strip-all
  const Fixture* unstripped = test::find_fixture("fx_gcc_O2_pfe_pic.so");
  ASSERT_NE(unstripped, nullptr);
  std::set<std::string> names;
  for (const auto& s : obj->functions) {
    names.insert(s.name);
    EXPECT_FALSE(s.name.ends_with(".cold")) << "local symbols are gone with .symtab";
    if (s.name.starts_with("fx_")) {
      const auto want = test::expected_site(*unstripped, s.name);
      EXPECT_EQ(s.kind, want.kind) << s.name;
      EXPECT_EQ(s.attachable, want.attachable) << s.name;
    }
  }
  for (std::string_view fn : test::kCompiledFunctions) EXPECT_TRUE(names.count(std::string(fn))) << fn;
  for (std::string_view fn : test::kAsmFunctions) EXPECT_TRUE(names.count(std::string(fn))) << fn;
}

TEST(AnalyseFile, StrippedExecutableHasNoFunctionsLeft) {
  if (!UTRAMP_FIXTURE_STRIPPED_BUILT) GTEST_SKIP() << "strip was not found at configure time";
  auto obj = sites::analyse_file(test::fixture_path("fx_gcc_O2_plain_pie_stripped"));
  ASSERT_TRUE(obj.ok()) << obj.error().message;
  EXPECT_TRUE(obj->stripped);
  for (const auto& s : obj->functions) EXPECT_FALSE(s.name.starts_with("fx_")) << s.name;
}

TEST(AnalyseFile, MissingFile) {
  const std::string p = test::fixture_path("no_such_fixture");
  auto obj = sites::analyse_file(p);
  ASSERT_FALSE(obj.ok());
  EXPECT_EQ(obj.error().code, Errc::not_found);
  EXPECT_NE(obj.error().message.find(p), std::string::npos) << obj.error().message;
}

TEST(AnalyseFile, NotAnElfFile) {
  const std::string p = std::string(UTRAMP_SOURCE_DIR) + "/tests/fixtures/fx_lib.c";
  auto obj = sites::analyse_file(p);
  ASSERT_FALSE(obj.ok());
  EXPECT_EQ(obj.error().code, Errc::bad_format);
  EXPECT_NE(obj.error().message.find("not an ELF file"), std::string::npos) << obj.error().message;
}

TEST(AnalyseFile, Directory) {
  auto obj = sites::analyse_file(UTRAMP_FIXTURE_DIR);
  ASSERT_FALSE(obj.ok());
  EXPECT_EQ(obj.error().code, Errc::bad_format);
  EXPECT_NE(obj.error().message.find("not a regular file"), std::string::npos)
      << obj.error().message;
}

namespace {

// A copy of fixture `from`, changed by `edit`, in a file removed at scope exit.
struct EditedCopy {
  std::string path;
  EditedCopy(const std::string& from, const std::function<void(std::vector<char>&)>& edit) {
    std::ifstream in(from, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    edit(bytes);
    char tmpl[] = "/tmp/utramp_sites_XXXXXX";
    int fd = mkstemp(tmpl);
    path = tmpl;
    if (fd >= 0) {
      if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) path.clear();
      close(fd);
    }
  }
  ~EditedCopy() {
    if (!path.empty()) unlink(path.c_str());
  }
};

}  // namespace

TEST(AnalyseFile, TruncatedFile) {
  const Fixture* f = test::find_fixture("fx_gcc_O0_plain_pie");
  ASSERT_NE(f, nullptr);
  EditedCopy copy(f->path(), [](std::vector<char>& b) { b.resize(b.size() / 2); });
  ASSERT_FALSE(copy.path.empty());
  auto obj = sites::analyse_file(copy.path);
  ASSERT_FALSE(obj.ok());
  EXPECT_EQ(obj.error().code, Errc::bad_format);
  EXPECT_NE(obj.error().message.find(copy.path), std::string::npos) << obj.error().message;
}

TEST(AnalyseFile, OtherMachine) {
  const Fixture* f = test::find_fixture("fx_gcc_O0_plain_pie");
  ASSERT_NE(f, nullptr);
  EditedCopy copy(f->path(), [](std::vector<char>& b) {
    const uint16_t aarch64 = EM_AARCH64;
    memcpy(b.data() + offsetof(Elf64_Ehdr, e_machine), &aarch64, sizeof aarch64);
  });
  ASSERT_FALSE(copy.path.empty());
  auto obj = sites::analyse_file(copy.path);
  ASSERT_FALSE(obj.ok());
  EXPECT_EQ(obj.error().code, Errc::unsupported);
  EXPECT_NE(obj.error().message.find("not an x86-64 ELF file"), std::string::npos)
      << obj.error().message;
}
