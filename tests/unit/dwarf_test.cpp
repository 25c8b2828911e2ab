// Signatures from DWARF: every function of dwarf_fixture.c / .cpp, in every build of the
// matrix (gcc and clang, -O0 and -O2, DWARF 5 and 4, type units, split DWARF, a
// .gnu_debuglink file), by name and by address, against its exact Signature::describe() string; then
// the refusals and the not-found cases with their messages.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "os/dwarf.hpp"
#include "os/elf_file.hpp"
#include "abi/signature.hpp"

namespace utramp {
namespace {

namespace fs = std::filesystem;

const std::string kDir = UTRAMP_DWARF_FIXTURE_DIR;

struct Case {
  const char* name;    // what signature_from_dwarf is asked for
  const char* symbol;  // the ELF symbol whose address is asked for too (null: same as name)
  const char* expect;  // Signature::describe()
  const char* clang = nullptr;  // where clang's ABI differs from gcc's
};

// dwarf_fixture.c, the same for both compilers at every level.
const Case kCCases[] = {
    {"f_i8", nullptr, "(i8) -> i8"},
    {"f_u16", nullptr, "(i16, i8, i8) -> i16"},
    {"f_scalars", nullptr, "(i32, i64, i64, i64, i64, i32) -> i64"},
    {"f_fp", nullptr, "(f32, f64) -> f64"},
    {"f_retf", nullptr, "() -> f32"},
    {"f_ld", nullptr, "(m16, i32) -> f80"},                      // long double: memory / st(0)
    {"f_i128", nullptr, "(s16:ii, s16:ii) -> s16:ii"},
    {"f_cf", nullptr, "(f64) -> f64"},                           // _Complex float: one SSE
    {"f_cd", nullptr, "(s16:ss) -> s16:ss"},
    {"f_cld", nullptr, "(m32) -> i32"},                          // _Complex long double
    {"f_structs", nullptr, "(i32, i64, s12:ii, s16:is, s16:ss, f64) -> void"},
    {"f_big", nullptr, "(m24, s12:ss, i64) -> m24"},             // {float,int}: INTEGER
    {"f_mix", nullptr, "(s16:is, s16:ii, s16:ss, s12:si) -> s16:is"},
    {"f_unions", nullptr, "(i64, f64) -> i64"},
    {"f_bits", nullptr, "(s16:ii, i64) -> s16:ii"},
    {"f_packed", nullptr, "(m5, i64) -> i32"},                   // unaligned field: MEMORY
    {"f_ldstruct", nullptr, "(m16) -> f80"},
    {"f_empty", nullptr, "(i32) -> i32"},                        // empty struct: no slot
    {"f_al16", nullptr, "(i64, f64, m17) -> i64"},
    {"f_cv", nullptr, "(i64, i32, f64) -> i32"},
    {"f_flex", nullptr, "(i32) -> i32", "(m4) -> i32"},          // flexible array member
    {"f_i128s", nullptr, "(s16:ii) -> s16:ii"},
    {"f_ldu", nullptr, "(m16) -> m16"},                          // X87UP without X87
    {"f_fnptr", nullptr, "(i64, i64) -> i64"},
    {"f_arrnest", nullptr, "(s16:ss) -> s16:ss"},
    {"f_many", nullptr, "(i32, i32, i32, i32, i32, i32, i32, f64, s16:is, m16) -> i32"},
    {"f_variadic", nullptr, "(i32, ...) -> i32"},
    {"f_noreturn", nullptr, "(i32) -> void noreturn"},
    {"f_knr", nullptr, "(i32, f64) -> i32"},                     // promoted: K&R definition
    {"f_void", nullptr, "() -> void"},
    {"f_inl_ptr", nullptr, "() -> i64"},
    {"f_inl_user", nullptr, "(i32) -> i32"},
    {"inl_twice", nullptr, "(i32, f64) -> i32"},                 // abstract origin at -O2
};

// dwarf_fixture.cpp.
const Case kCxxCases[] = {
    {"get", "_ZNK3Obj3getEi", "(i64, i32) -> i32"},              // this, x
    {"_ZNK3Obj3getEi", nullptr, "(i64, i32) -> i32"},
    {"st", "_ZN3Obj2stEi", "(i32) -> i32"},                      // static: no this
    {"make", "_ZNK3Obj4makeEv", "(i64) -> m4"},                  // hidden pointer + this
    {"pair", "_ZN3Obj4pairEd", "(i64, f64) -> s16:is"},
    {"f", "_ZN4Virt1fEv", "(i64) -> i32"},
    {"t_trivial", "_Z9t_trivial7Trivial4Base7Derived", "(s16:is, i32, i64) -> s16:is"},
    {"t_dtor", "_Z6t_dtor8WithDtori", "(i64, i32) -> m4"},        // by invisible reference
    {"t_copy", "_Z6t_copy8WithCopy9Defaulted8MoveOnly", "(i64, i32, i32) -> i32"},
    {"t_nocopy", "_Z8t_nocopy6NoCopy", "(i64) -> i32"},
    {"t_virt", "_Z6t_virt4Virt", "(i64) -> i32"},
    {"t_member", "_Z8t_member9HasMember", "(i64) -> i32"},
    {"t_empty", "_Z7t_empty5Emptyi", "(i32) -> i32"},
    {"t_refs", "_Z6t_refsRiRK7TrivialOS0_", "(i64, i64, i64) -> i32"},
    {"t_memptr", "_Z8t_memptrM3ObjiMS_KFiiE", "(i64, s16:ii) -> i64"},
    {"t_null", "_Z6t_nullDn5Small", "(i64, i8) -> void"},
    {"t_noreturn", "_Z10t_noreturni", "(i32) -> void noreturn"},
    {"scaled", "_ZN2ns6scaledEdf", "(f64, f32) -> f64"},
    {"_Z4overi", nullptr, "(i32) -> i32"},
    {"_Z4overd", nullptr, "(f64) -> f64"},
    {"_Z5twiceIdET_S0_", nullptr, "(f64) -> f64"},
    {"_Z5countIJidcEEiDpT_", nullptr, "(i32, f64, i8) -> i32"},  // expanded parameter pack
};

std::string fixture(const std::string& file) { return kDir + "/" + file; }

std::optional<uint64_t> symbol_address(const std::string& path, const std::string& sym) {
  auto elf = os::ElfFile::open(path);
  if (!elf) return std::nullopt;
  for (const auto& s : (*elf)->symbols())
    if (s.name == sym) return s.value;
  return std::nullopt;
}

std::string describe(const Result<abi::Signature>& r) {
  return r ? r->describe() : std::string(errc_name(r.error().code)) + ": " + r.error().message;
}

void check_cases(const std::string& file, const Case* begin, const Case* end) {
  const std::string path = fixture(file);
  if (!fs::exists(path)) GTEST_SKIP() << path << " was not built (compiler missing at configure time)";
  const bool clang = file.find("_clang_") != std::string::npos;
  for (const Case* c = begin; c != end; ++c) {
    SCOPED_TRACE(c->name);
    const std::string expect = clang && c->clang ? c->clang : c->expect;
    auto by_name = os::signature_from_dwarf(path, std::string_view(c->name));
    EXPECT_EQ(describe(by_name), expect);
    if (by_name) {
      EXPECT_EQ(by_name->source, "DWARF");
      EXPECT_TRUE(by_name->known);
    }
    const auto addr = symbol_address(path, c->symbol ? c->symbol : c->name);
    ASSERT_TRUE(addr.has_value()) << "no symbol " << (c->symbol ? c->symbol : c->name) << " in " << path;
    EXPECT_EQ(describe(os::signature_from_dwarf(path, *addr)), expect) << "by address " << *addr;
  }
}

std::string param_name(const testing::TestParamInfo<std::string>& info) {
  std::string s = info.param.substr(5);  // drop "dwfx_"
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class CFixture : public testing::TestWithParam<std::string> {};
class CxxFixture : public testing::TestWithParam<std::string> {};

TEST_P(CFixture, EverySignature) { check_cases(GetParam(), std::begin(kCCases), std::end(kCCases)); }
TEST_P(CxxFixture, EverySignature) { check_cases(GetParam(), std::begin(kCxxCases), std::end(kCxxCases)); }

INSTANTIATE_TEST_SUITE_P(Dwarf, CFixture,
                         testing::Values("dwfx_c_gcc_O0.so", "dwfx_c_gcc_O2.so", "dwfx_c_clang_O0.so",
                                         "dwfx_c_clang_O2.so", "dwfx_c_gcc_O2_dwarf4.so",
                                         "dwfx_c_clang_O2_dwarf4.so", "dwfx_c_gcc_O2_types.so",
                                         "dwfx_c_clang_O2_types.so", "dwfx_c_gcc_O2_split.so",
                                         "dwfx_c_clang_O2_split.so", "dwfx_c_gcc_O2_linked.so"),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Dwarf, CxxFixture,
                         testing::Values("dwfx_cxx_gcc_O0.so", "dwfx_cxx_gcc_O2.so", "dwfx_cxx_clang_O0.so",
                                         "dwfx_cxx_clang_O2.so", "dwfx_cxx_gcc_O2_dwarf4.so",
                                         "dwfx_cxx_clang_O2_dwarf4.so", "dwfx_cxx_gcc_O2_types.so",
                                         "dwfx_cxx_clang_O2_types.so", "dwfx_cxx_gcc_O2_split.so",
                                         "dwfx_cxx_clang_O2_split.so"),
                         param_name);

// Local functions: as written at -O0; refused at -O2, where gcc cloned them
// (local_const.constprop.0) and clang dropped their arguments in place.
TEST(Dwarf, LocalFunctionsTheOptimiserChanged) {
  for (const char* cc : {"gcc", "clang"}) {
    const std::string o0 = fixture(std::string("dwfx_c_") + cc + "_O0.so");
    const std::string o2 = fixture(std::string("dwfx_c_") + cc + "_O2.so");
    if (!fs::exists(o0) || !fs::exists(o2)) {
      ADD_FAILURE() << cc << " fixtures not built; skipping " << cc;
      continue;
    }
    SCOPED_TRACE(cc);
    EXPECT_EQ(describe(os::signature_from_dwarf(o0, std::string_view("local_dropped"))),
              "(i32, i32, i64) -> i32");
    EXPECT_EQ(describe(os::signature_from_dwarf(o0, std::string_view("local_const"))), "(i32, i32) -> i32");
    for (const char* fn : {"local_dropped", "local_const"}) {
      auto r = os::signature_from_dwarf(o2, std::string_view(fn));
      ASSERT_FALSE(r) << fn << ": " << r->describe();
      EXPECT_EQ(r.error().code, Errc::unsupported) << r.error().message;
      EXPECT_NE(r.error().message.find("optimiser"), std::string::npos) << r.error().message;
    }
  }
}

TEST(Dwarf, RefusesTypesWithoutCtxForm) {
  for (const char* file : {"dwfx_c_gcc_O0.so", "dwfx_c_clang_O2.so"}) {
    const std::string path = fixture(file);
    if (!fs::exists(path)) GTEST_SKIP() << path << " not built";
    auto v = os::signature_from_dwarf(path, std::string_view("f_vector"));
    ASSERT_FALSE(v);
    EXPECT_EQ(v.error().code, Errc::unsupported);
    EXPECT_NE(v.error().message.find("parameter 2 ('v') of type 'v4sf'"), std::string::npos) << v.error().message;
    EXPECT_NE(v.error().message.find("vector"), std::string::npos) << v.error().message;

    auto c = os::signature_from_dwarf(path, std::string_view("f_cld_ret"));
    ASSERT_FALSE(c);
    EXPECT_EQ(c.error().code, Errc::unsupported);
    EXPECT_NE(c.error().message.find("COMPLEX_X87"), std::string::npos) << c.error().message;

    auto q = os::signature_from_dwarf(path, std::string_view("f_f128"));
    ASSERT_FALSE(q);
    EXPECT_EQ(q.error().code, Errc::unsupported);
    EXPECT_NE(q.error().message.find("parameter 1 ('x')"), std::string::npos) << q.error().message;
    EXPECT_NE(q.error().message.find("SSEUP"), std::string::npos) << q.error().message;
  }
}

TEST(Dwarf, StrippedFileIsNotFound) {
  const std::string path = fixture("dwfx_c_gcc_O2_stripped.so");
  if (!fs::exists(path)) GTEST_SKIP() << path << " not built (gcc, strip)";
  auto r = os::signature_from_dwarf(path, std::string_view("f_i8"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_found);
  EXPECT_NE(r.error().message.find("no debug info for 'f_i8' in " + path), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("build-id"), std::string::npos) << r.error().message;

  const auto addr = symbol_address(path, "f_i8");
  ASSERT_TRUE(addr);
  auto a = os::signature_from_dwarf(path, *addr);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, Errc::not_found);
  EXPECT_NE(a.error().message.find("no debug info for 0x"), std::string::npos) << a.error().message;
}

// The stripped file and its .debug share a build-id: put the .debug where a debuginfo
// directory's .build-id/xx/yyyy.debug would hold it.
TEST(Dwarf, SeparateDebugFileByBuildId) {
  const std::string stripped = fixture("dwfx_c_gcc_O2_stripped.so");
  const std::string debug = fixture("dwfx_c_gcc_O2_linked.debug");
  if (!fs::exists(stripped) || !fs::exists(debug)) GTEST_SKIP() << "stripped/debug fixtures not built";
  auto elf = os::ElfFile::open(stripped);
  ASSERT_TRUE(elf);
  const os::ElfSection* note = (*elf)->section(".note.gnu.build-id");
  ASSERT_NE(note, nullptr) << "fixture linked without --build-id";
  auto bytes = (*elf)->section_data(*note);
  ASSERT_GT(bytes.size(), 16u);
  // Elf64_Nhdr: namesz, descsz, type; then "GNU\0" and the id.
  const uint32_t namesz = bytes[0] | bytes[1] << 8 | bytes[2] << 16 | uint32_t(bytes[3]) << 24;
  const uint32_t descsz = bytes[4] | bytes[5] << 8 | bytes[6] << 16 | uint32_t(bytes[7]) << 24;
  const size_t off = 12 + ((namesz + 3) & ~3u);
  ASSERT_LE(off + descsz, bytes.size());
  std::string hex;
  for (size_t i = 0; i < descsz; ++i) {
    char b[3];
    snprintf(b, sizeof b, "%02x", bytes[off + i]);
    hex += b;
  }
  char tmpl[] = "/tmp/utramp-dwarf-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  fs::create_directories(root / ".build-id" / hex.substr(0, 2));
  fs::create_symlink(debug, root / ".build-id" / hex.substr(0, 2) / (hex.substr(2) + ".debug"));

  ASSERT_EQ(setenv("UTRAMP_DEBUGINFO_PATH", root.c_str(), 1), 0);
  auto r = os::signature_from_dwarf(stripped, std::string_view("f_mix"));
  unsetenv("UTRAMP_DEBUGINFO_PATH");
  fs::remove_all(root);
  EXPECT_EQ(describe(r), "(s16:is, s16:ii, s16:ss, s12:si) -> s16:is");
}

TEST(Dwarf, NotFoundAndBadInputs) {
  const std::string c = fixture("dwfx_c_gcc_O0.so");
  const std::string cxx = fixture("dwfx_cxx_clang_O0.so");
  if (!fs::exists(c) || !fs::exists(cxx)) GTEST_SKIP() << "gcc/clang++ -O0 fixtures not built";

  auto missing = os::signature_from_dwarf(c, std::string_view("no_such_function"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::not_found);
  EXPECT_NE(missing.error().message.find("no debug info for 'no_such_function' in " + c), std::string::npos)
      << missing.error().message;

  // An address inside a function rather than at its entry.
  const auto many = symbol_address(c, "f_many");
  ASSERT_TRUE(many);
  auto inside = os::signature_from_dwarf(c, *many + 1);
  ASSERT_FALSE(inside);
  EXPECT_EQ(inside.error().code, Errc::not_found);
  EXPECT_NE(inside.error().message.find("inside f_many"), std::string::npos) << inside.error().message;

  auto ambiguous = os::signature_from_dwarf(cxx, std::string_view("over"));
  ASSERT_FALSE(ambiguous);
  EXPECT_EQ(ambiguous.error().code, Errc::invalid_argument);
  EXPECT_NE(ambiguous.error().message.find("_Z4overi"), std::string::npos) << ambiguous.error().message;
  EXPECT_NE(ambiguous.error().message.find("_Z4overd"), std::string::npos) << ambiguous.error().message;

  auto nofile = os::signature_from_dwarf(kDir + "/does-not-exist.so", std::string_view("f"));
  ASSERT_FALSE(nofile);
  EXPECT_EQ(nofile.error().code, Errc::io) << nofile.error().message;

  auto notelf = os::signature_from_dwarf(std::string(UTRAMP_SOURCE_DIR) + "/tests/unit/dwarf_fixture.c",
                                         std::string_view("f"));
  ASSERT_FALSE(notelf);
  EXPECT_EQ(notelf.error().code, Errc::bad_format) << notelf.error().message;
}

// gcc omits a transparent union's members: at -O2 its entry location (rsi) gives the
// class; at -O0 (a stack slot) nothing does. clang describes the members.
TEST(Dwarf, TransparentUnion) {
  const struct {
    const char* file;
    const char* expect;  // null: refused
  } cases[] = {{"dwfx_c_gcc_O0.so", nullptr},
               {"dwfx_c_gcc_O2.so", "(i32, i64, i32) -> i32"},
               {"dwfx_c_clang_O0.so", "(i32, i64, i32) -> i32"},
               {"dwfx_c_clang_O2.so", "(i32, i64, i32) -> i32"}};
  for (const auto& c : cases) {
    const std::string path = fixture(c.file);
    if (!fs::exists(path)) GTEST_SKIP() << path << " not built";
    SCOPED_TRACE(c.file);
    auto r = os::signature_from_dwarf(path, std::string_view("f_transparent"));
    if (c.expect) {
      EXPECT_EQ(describe(r), c.expect);
      continue;
    }
    ASSERT_FALSE(r) << r->describe();
    EXPECT_EQ(r.error().code, Errc::unsupported);
    EXPECT_NE(r.error().message.find("parameter 2 ('p') of type 'sockish'"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("transparent union"), std::string::npos) << r.error().message;
  }
}

TEST(Dwarf, AssemblyFunctionIsNotFound) {
  const std::string path = fixture("dwfx_asm_gcc.so");
  if (!fs::exists(path)) GTEST_SKIP() << path << " not built";
  auto r = os::signature_from_dwarf(path, std::string_view("asm_add"));
  ASSERT_FALSE(r) << r->describe();
  EXPECT_EQ(r.error().code, Errc::not_found);
  EXPECT_NE(r.error().message.find("written in assembly"), std::string::npos) << r.error().message;
}

// clang declares the class in the unit that takes it by value; its definition is in
// the unit that defines the constructor.
TEST(Dwarf, DefinitionInAnotherUnit) {
  for (const char* file : {"dwfx_xtu_gcc.so", "dwfx_xtu_clang.so"}) {
    const std::string path = fixture(file);
    if (!fs::exists(path)) GTEST_SKIP() << path << " not built";
    SCOPED_TRACE(file);
    EXPECT_EQ(describe(os::signature_from_dwarf(path, std::string_view("use_homed"))), "(s16:is) -> i32");
  }
}

// A class whose definition the compiler left out of this file's debug info.
TEST(Dwarf, DeclarationOnlyClass) {
  for (const char* file : {"dwfx_cxx_gcc_O0.so", "dwfx_cxx_clang_O2.so"}) {
    const std::string path = fixture(file);
    if (!fs::exists(path)) GTEST_SKIP() << path << " not built";
    auto r = os::signature_from_dwarf(path, std::string_view("t_remote"));
    ASSERT_FALSE(r) << r->describe();
    EXPECT_EQ(r.error().code, Errc::unsupported);
    EXPECT_NE(r.error().message.find("parameter 1 ('r') of type 'struct Remote'"), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find("only declared"), std::string::npos) << r.error().message;
  }
}

// gcc -g1 lists functions without types: not a signature to trust.
TEST(Dwarf, MinimalDebugInfoIsNotFound) {
  const std::string path = fixture("dwfx_c_gcc_g1.so");
  if (!fs::exists(path)) GTEST_SKIP() << path << " not built";
  auto r = os::signature_from_dwarf(path, std::string_view("f_fp"));
  ASSERT_FALSE(r) << r->describe();
  EXPECT_EQ(r.error().code, Errc::not_found);
  EXPECT_NE(r.error().message.find("minimal debug info"), std::string::npos) << r.error().message;
}

// parse_signature() reads what describe() writes (without the parentheses).
TEST(Dwarf, ParseSignatureRoundTrips) {
  for (const char* text : {"(i32, f64, s16:is) -> m24", "(i64, ...) -> i32", "() -> void noreturn",
                           "(m16) -> f80", "(i8, i16, i32, i64) -> s16:ss", "(f32) -> f64",
                           "(s12:si, m40) -> s16:ii", "(...) -> void"}) {
    std::string s = text;
    const size_t close = s.find(')');
    const std::string bare = s.substr(1, close - 1) + s.substr(close + 1);
    auto r = abi::parse_signature(bare);
    ASSERT_TRUE(r) << bare << ": " << r.error().message;
    EXPECT_EQ(r->describe(), text) << bare;
  }
}

// A tracer announces its lookups (os::expect_lookups: the file's index is built by the
// first one): every signature, and what an address inside a function is said to be,
// as without the announcement; a file that cannot be opened keeps its errors.
TEST(Dwarf, AnnouncedLookupsGiveTheSameAnswers) {
  const std::string c = fixture("dwfx_c_clang_O0.so");
  if (!fs::exists(c)) GTEST_SKIP() << "clang -O0 fixture not built";
  os::expect_lookups(c, 1000);
  check_cases("dwfx_c_clang_O0.so", std::begin(kCCases), std::end(kCCases));
  const auto many = symbol_address(c, "f_many");
  ASSERT_TRUE(many);
  auto inside = os::signature_from_dwarf(c, *many + 1);
  ASSERT_FALSE(inside);
  EXPECT_NE(inside.error().message.find("inside f_many"), std::string::npos) << inside.error().message;
  const std::string nofile = kDir + "/does-not-exist.so";
  os::expect_lookups(nofile, 1000);
  auto r = os::signature_from_dwarf(nofile, uint64_t{0x1000});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::io);
}

// Lookups done (os::lookups_done: the file's debug info and index let go): the next ones
// open the file again and give the same answers, errors included.
TEST(Dwarf, LookupsAfterTheyAreDoneGiveTheSameAnswers) {
  const std::string c = fixture("dwfx_c_clang_O0.so");
  if (!fs::exists(c)) GTEST_SKIP() << "clang -O0 fixture not built";
  os::expect_lookups(c, 1000);
  check_cases("dwfx_c_clang_O0.so", std::begin(kCCases), std::end(kCCases));
  os::lookups_done(c, 1000);
  check_cases("dwfx_c_clang_O0.so", std::begin(kCCases), std::end(kCCases));
  os::lookups_done(c, 1000);  // nothing cached: nothing to let go
  const std::string nofile = kDir + "/does-not-exist.so";
  os::expect_lookups(nofile, 1000);
  os::lookups_done(nofile, 1000);
  auto r = os::signature_from_dwarf(nofile, uint64_t{0x1000});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::io);
}

}  // namespace
}  // namespace utramp
