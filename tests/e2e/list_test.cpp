// `utramp list` end to end: the real CLI binary on the fixture matrix.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "fixture_matrix.hpp"

using namespace utramp;
using test::Fixture;
using test::run_cli;

namespace {

// One row of the text table: ADDRESS SITE ATTACH OBJECT FUNCTION [(reason)].
struct Row {
  std::string address, site, attach, object, function, reason;
};

std::vector<Row> parse_table(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream in(out);
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (header) {
      header = false;
      if (line.starts_with("ADDRESS")) continue;
    }
    std::istringstream ls(line);
    Row r;
    ls >> r.address >> r.site >> r.attach >> r.object >> r.function;
    std::string rest;
    std::getline(ls, rest);
    if (auto p = rest.find('('); p != std::string::npos) r.reason = rest.substr(p);
    rows.push_back(r);
  }
  return rows;
}

std::map<std::string, Row> by_function(const std::vector<Row>& rows) {
  std::map<std::string, Row> m;
  for (const auto& r : rows) m[r.function] = r;
  return m;
}

std::string path_of(const char* file) { return test::fixture_path(file); }

bool built(const char* file, std::string* why) {
  const Fixture* f = test::find_fixture(file);
  if (!f) {
    *why = std::string(file) + " is not in the fixture matrix";
    return false;
  }
  *why = f->missing;
  return f->missing.empty();
}

}  // namespace

// --json on every fixture: the CLI reports what the matrix says each entry holds.
class ListJson : public ::testing::TestWithParam<Fixture> {};

TEST_P(ListJson, KindsOfEveryFixtureFunction) {
  const Fixture& f = GetParam();
  if (!f.missing.empty()) GTEST_SKIP() << f.file << " was not built: " << f.missing;
  auto r = run_cli({"list", "--json", f.path(), "fx_*"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto js = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(js.is_array()) << "not a JSON array: " << r.out.substr(0, 200);
  std::map<std::string, nlohmann::json> fns;
  for (const auto& e : js) {
    for (const char* key : {"name", "symbol", "object", "address", "site", "size", "kind", "endbr64",
                            "attachable", "reason", "listed"})
      ASSERT_TRUE(e.contains(key)) << key << " missing in " << e.dump();
    fns[e["symbol"].get<std::string>()] = e;
    EXPECT_EQ(e["object"], f.path());
  }
  std::vector<std::string_view> names(std::begin(test::kCompiledFunctions),
                                      std::end(test::kCompiledFunctions));
  names.insert(names.end(), std::begin(test::kAsmFunctions), std::end(test::kAsmFunctions));
  for (std::string_view fn : names) {
    SCOPED_TRACE(std::string(fn));
    auto it = fns.find(std::string(fn));
    ASSERT_NE(it, fns.end());
    const auto& e = it->second;
    const auto want = test::expected_site(f, fn);
    EXPECT_EQ(e["kind"], std::string(sites::site_kind_name(want.kind))) << e.dump();
    EXPECT_EQ(e["attachable"], want.attachable) << e.dump();
    EXPECT_EQ(e["endbr64"], f.cet);
    EXPECT_EQ(e["listed"], want.listed);
    if (!want.reason.empty()) {
      EXPECT_NE(e["reason"].get<std::string>().find(want.reason), std::string::npos) << e.dump();
    }
    const uint64_t addr = std::stoull(e["address"].get<std::string>(), nullptr, 16);
    const uint64_t site = std::stoull(e["site"].get<std::string>(), nullptr, 16);
    EXPECT_EQ(site, addr + (f.cet ? 4 : 0));
    EXPECT_GT(e["size"].get<uint64_t>(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, ListJson, ::testing::ValuesIn(test::fixture_matrix()),
                         [](const ::testing::TestParamInfo<Fixture>& info) {
                           std::string n = info.param.file;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(ListText, ShowsKindEndbrAndReason) {
  std::string why;
  if (!built("fx_gcc_O2_pfe-cet_pie", &why)) GTEST_SKIP() << why;
  auto r = run_cli({"list", path_of("fx_gcc_O2_pfe-cet_pie")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  ASSERT_TRUE(r.out.starts_with("ADDRESS")) << r.out;
  auto rows = by_function(parse_table(r.out));
  ASSERT_TRUE(rows.count("fx_add")) << r.out;
  EXPECT_EQ(rows["fx_add"].site, "endbr+nop1x5");
  EXPECT_EQ(rows["fx_add"].attach, "yes");
  EXPECT_EQ(rows["fx_add"].object, "fx_gcc_O2_pfe-cet_pie");
  EXPECT_EQ(rows["main"].site, "endbr+nop1x5");
  EXPECT_EQ(rows["fx_loop_entry"].site, "endbr+prologue");
  EXPECT_EQ(rows["fx_branch_entry"].site, "endbr+none");
  EXPECT_EQ(rows["fx_branch_entry"].attach, "no");
  EXPECT_NE(rows["fx_branch_entry"].reason.find("targets fx_branch_entry+0x6"), std::string::npos)
      << rows["fx_branch_entry"].reason;
  // Functions the program got from crt files are listed too.
  EXPECT_TRUE(rows.count("_start")) << r.out;
}

TEST(ListText, EachFlavourByName) {
  const struct {
    const char* file;
    const char* site;
  } cases[] = {{"fx_gcc_O0_plain_nopie", "prologue"},   {"fx_gcc_O2_pfe_nopie", "nop1x5"},
               {"fx_clang_O2_pfe_pie", "nop5"},         {"fx_gcc_O2_fentry_nopie", "fentry"},
               {"fx_gcc_O2_fentry_pie", "fentry-got"},  {"fx_clang_O2_fentry_pie", "fentry"},
               {"fx_gcc_O2_mnop_nopie", "nop5"},        {"fx_clang_O2_xray_pie", "xray"},
               {"fx_clang_O2_xray-cet_pic.so", "endbr+xray"}};
  std::string skipped;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    std::string why;
    if (!built(c.file, &why)) {
      skipped += std::string(c.file) + ": " + why + "; ";
      continue;
    }
    auto r = run_cli({"list", path_of(c.file), "fx_mix"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto rows = parse_table(r.out);
    ASSERT_EQ(rows.size(), 1u) << r.out;
    EXPECT_EQ(rows[0].function, "fx_mix");
    EXPECT_EQ(rows[0].site, c.site);
    EXPECT_EQ(rows[0].attach, "yes");
  }
  if (!skipped.empty()) GTEST_SKIP() << "not built: " << skipped;
}

TEST(ListText, GlobSelectsFunctions) {
  std::string why;
  if (!built("fx_clang_O2_plain_pie", &why)) GTEST_SKIP() << why;
  auto r = run_cli({"list", path_of("fx_clang_O2_plain_pie"), "fx_[az]*"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> names;
  for (const auto& row : parse_table(r.out)) names.insert(row.function);
  EXPECT_EQ(names, (std::set<std::string>{"fx_add", "fx_zero"}));
}

TEST(ListText, AttachableOnly) {
  std::string why;
  if (!built("fx_clang_O2_plain_pie", &why)) GTEST_SKIP() << why;
  auto r = run_cli({"list", "--attachable", path_of("fx_clang_O2_plain_pie"), "fx_*"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> names;
  for (const auto& row : parse_table(r.out)) {
    names.insert(row.function);
    EXPECT_EQ(row.attach, "yes") << row.function;
  }
  EXPECT_EQ(names, (std::set<std::string>{"fx_mix", "fx_fact", "fx_collatz", "fx_loop_entry"}));

  auto none = run_cli({"list", "-a", path_of("fx_clang_O2_plain_pie"), "fx_zero"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.out, "");
  EXPECT_NE(none.err.find("match 'fx_zero', none of them attachable"), std::string::npos)
      << none.err;
}

TEST(ListText, GlobMatchingNothingFails) {
  std::string why;
  if (!built("fx_gcc_O2_plain_pie", &why)) GTEST_SKIP() << why;
  auto r = run_cli({"list", path_of("fx_gcc_O2_plain_pie"), "no_such_fn*"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("no function matches 'no_such_fn*'"), std::string::npos) << r.err;

  auto js = run_cli({"list", "--json", path_of("fx_gcc_O2_plain_pie"), "no_such_fn*"});
  EXPECT_EQ(js.exit_code, 1);
  EXPECT_EQ(nlohmann::json::parse(js.out, nullptr, false), nlohmann::json::array()) << js.out;
  EXPECT_NE(js.err.find("no function matches"), std::string::npos) << js.err;
}

TEST(ListErrors, MissingFile) {
  const std::string p = path_of("no_such_program");
  auto r = run_cli({"list", p});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find(p + ": no such file"), std::string::npos) << r.err;
}

TEST(ListErrors, NotAnElfFile) {
  const std::string p = std::string(UTRAMP_SOURCE_DIR) + "/tests/fixtures/fx_lib.c";
  auto r = run_cli({"list", p});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find(p + ": not an ELF file"), std::string::npos) << r.err;
}

TEST(ListErrors, Directory) {
  auto r = run_cli({"list", UTRAMP_FIXTURE_DIR});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
}

TEST(ListErrors, NoProgramGiven) {
  auto r = run_cli({"list"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("program"), std::string::npos) << r.err;
}

TEST(ListStripped, LibraryListsDynsymWithANote) {
  if (!UTRAMP_FIXTURE_STRIPPED_BUILT) GTEST_SKIP() << "strip was not found at configure time";
  auto r = run_cli({"list", path_of("fx_gcc_O2_pfe_pic_stripped.so"), "fx_*"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("stripped (no .symtab)"), std::string::npos) << r.err;
  auto rows = by_function(parse_table(r.out));
  for (std::string_view fn : test::kCompiledFunctions) {
    ASSERT_TRUE(rows.count(std::string(fn))) << fn << "\n" << r.out;
    EXPECT_EQ(rows[std::string(fn)].site, "nop1x5");
  }
  EXPECT_FALSE(rows.count("fx_switch.cold")) << "local symbols went with .symtab";
}

TEST(ListStripped, ExecutableWithNoSymbolsFails) {
  if (!UTRAMP_FIXTURE_STRIPPED_BUILT) GTEST_SKIP() << "strip was not found at configure time";
  auto r = run_cli({"list", path_of("fx_gcc_O2_plain_pie_stripped")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("no function symbols at all"), std::string::npos) << r.err;
}

TEST(ListLibs, ListsLibcFunctions) {
  std::string why;
  if (!built("fx_gcc_O2_plain_pie", &why)) GTEST_SKIP() << why;
  auto r = run_cli({"list", "--libs", "--json", path_of("fx_gcc_O2_plain_pie"), "printf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto js = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(js.is_array()) << r.out;
  bool libc = false;
  for (const auto& e : js)
    if (e["symbol"] == "printf" && e["object"].get<std::string>().find("libc.so") != std::string::npos)
      libc = true;
  EXPECT_TRUE(libc) << r.out;

  // Without --libs only the program's own functions: printf is imported, not defined.
  auto own = run_cli({"list", path_of("fx_gcc_O2_plain_pie"), "printf"});
  EXPECT_EQ(own.exit_code, 1) << own.out;
}

TEST(ListLibs, LibraryWithoutDependenciesIsNotExecuted) {
  // A shared library is handed to the dynamic loader's list mode, never executed
  // (running it would crash); this one needs nothing, which is said on stderr.
  std::string why;
  if (!built("fx_gcc_O2_plain_pic.so", &why)) GTEST_SKIP() << why;
  auto r = run_cli({"list", "--libs", path_of("fx_gcc_O2_plain_pic.so"), "fx_add"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_table(r.out).size(), 1u) << r.out;
  EXPECT_NE(r.err.find("lists no shared libraries"), std::string::npos) << r.err;
}

TEST(ListDemangle, CxxNamesDemangledUnlessAsked) {
  if (std::string(UTRAMP_FIXTURE_CXX_MISSING) != "")
    GTEST_SKIP() << "fx_gxx_O0_plain_pie was not built: " << UTRAMP_FIXTURE_CXX_MISSING;
  const std::string p = path_of("fx_gxx_O0_plain_pie");
  auto r = run_cli({"list", p, "fx::*"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> names;
  for (const auto& row : parse_table(r.out)) names.insert(row.function);
  EXPECT_EQ(names, (std::set<std::string>{"fx::twice(int)", "fx::Counter::bump(int)"}));

  auto raw = run_cli({"list", "--no-demangle", p, "_ZN2fx*"});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  names.clear();
  for (const auto& row : parse_table(raw.out)) names.insert(row.function);
  EXPECT_EQ(names, (std::set<std::string>{"_ZN2fx5twiceEi", "_ZN2fx7Counter4bumpEi"}));

  auto js = run_cli({"list", "--json", p, "fx::twice*"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  auto j = nlohmann::json::parse(js.out, nullptr, false);
  ASSERT_EQ(j.size(), 1u) << js.out;
  EXPECT_EQ(j[0]["name"], "fx::twice(int)");
  EXPECT_EQ(j[0]["symbol"], "_ZN2fx5twiceEi");
}
