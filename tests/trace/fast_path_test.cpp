// The tracer's fast path (src/ftrace/graph_fast.cpp) is called from images with the
// traced call's registers live and saves only the general registers it uses: it must
// call nothing, jump nowhere indirectly and touch no vector or x87 register. Checked on
// the machine code of the built library, so a compiler or flag change that breaks it
// fails here rather than corrupting a traced program's floating-point arguments.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "arch/arch.hpp"
#include "ftrace/graph.hpp"
#include "os/elf_file.hpp"

using namespace utramp;

namespace {

void check_function(const std::string& name, uint64_t addr) {
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(addr), &info), 0) << name;
  auto elf = os::ElfFile::open(info.dli_fname);
  ASSERT_TRUE(elf.ok()) << info.dli_fname;
  const uint64_t bias = reinterpret_cast<uint64_t>(info.dli_fbase);
  const os::ElfSymbol* sym = nullptr;
  for (const auto& s : (*elf)->symbols())
    if (s.name == name) sym = &s;
  ASSERT_NE(sym, nullptr) << name << " not in the symbol table of " << info.dli_fname;
  ASSERT_EQ((*elf)->is_dyn() ? sym->value + bias : sym->value, addr) << name;
  ASSERT_GT(sym->size, 0u);
  const auto* code = reinterpret_cast<const uint8_t*>(addr);
  size_t rets = 0;
  for (uint64_t off = 0; off < sym->size;) {
    auto insn = arch::decode(code + off, sym->size - off, addr + off);
    ASSERT_TRUE(insn.ok()) << name << "+" << off;
    const std::string text = insn->text();
    SCOPED_TRACE(name + "+" + std::to_string(off) + ": " + text);
    EXPECT_EQ(text.find("call"), std::string::npos);
    EXPECT_EQ(text.find("xmm"), std::string::npos);
    EXPECT_EQ(text.find("ymm"), std::string::npos);
    EXPECT_EQ(text.find("zmm"), std::string::npos);
    EXPECT_EQ(text.find("st("), std::string::npos);
    EXPECT_EQ(text.find("st0"), std::string::npos);
    if (text.starts_with("jmp")) {
      EXPECT_TRUE(insn->relative_branch) << "indirect jump";
    }
    if (text.starts_with("ret")) ++rets;
    off += insn->length;
  }
  EXPECT_GT(rets, 0u);
}

}  // namespace

TEST(FastPath, CallsNothingAndUsesGeneralRegistersOnly) {
  const arch::TracerHooks h = ftrace::hooks();
  ASSERT_NE(h.entry, 0u);
  ASSERT_NE(h.exit, 0u);
  check_function("utramp_graph_fast_entry", h.entry);
  check_function("utramp_graph_fast_exit", h.exit);
  // A -F/-N function's entry hook (always "go general") is called the same way.
  const arch::TracerHooks f = ftrace::scope_hooks(ftrace::Scope::filter);
  EXPECT_FALSE(f.inline_path);
  EXPECT_EQ(f.exit, h.exit);
  check_function("utramp_graph_scope_entry", f.entry);
}
