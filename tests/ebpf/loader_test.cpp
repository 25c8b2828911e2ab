// The loader on the example objects (good input) and on each kind of bad input: the
// error names what and where.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "ebpf/check.hpp"
#include "ebpf/core.hpp"
#include "ebpf/helpers.hpp"
#include "ebpf/loader.hpp"
#include "abi/signature.hpp"

namespace utramp::ebpf {
namespace {

std::string example(const std::string& name) { return std::string(UTRAMP_BPF_EXAMPLES_DIR) + "/" + name + ".bpf.o"; }
std::string bad(const std::string& name) { return std::string(UTRAMP_BPF_BAD_DIR) + "/" + name + ".bpf.o"; }

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Result<Object> parse(const std::vector<uint8_t>& b) { return parse_object(b, "obj", runtime_helpers()); }

std::string error_of(const Result<Object>& r) { return r ? std::string("(loaded)") : r.error().message; }

// Replaces the first 8-byte instruction equal to `from` (in any section) with `to`.
bool patch_insn(std::vector<uint8_t>& b, const std::vector<uint8_t>& from, const std::vector<uint8_t>& to) {
  auto it = std::search(b.begin(), b.end(), from.begin(), from.end());
  for (; it != b.end(); it = std::search(it + 1, b.end(), from.begin(), from.end())) {
    if ((it - b.begin()) % 8 == 0) {
      std::copy(to.begin(), to.end(), it);
      return true;
    }
  }
  return false;
}

TEST(Loader, LatencyExample) {
  auto o = load_object_file(example("latency"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  ASSERT_EQ(o->programs.size(), 2u);
  EXPECT_EQ(o->license, "GPL");
  const auto& entry = o->programs[0].kind == ProgKind::fentry ? o->programs[0] : o->programs[1];
  const auto& exit = o->programs[0].kind == ProgKind::fexit ? o->programs[0] : o->programs[1];
  EXPECT_EQ(entry.name, "work_entry");
  EXPECT_EQ(entry.target, "work");
  EXPECT_EQ(exit.name, "work_exit");
  // .bss (calls) plus the two BTF-defined maps.
  ASSERT_EQ(o->maps.size(), 3u);
  auto find = [&](const std::string& n) {
    return std::find_if(o->maps.begin(), o->maps.end(), [&](const MapSpec& m) { return m.name == n; });
  };
  ASSERT_NE(find("start"), o->maps.end());
  EXPECT_EQ(find("start")->type, uint32_t(MapType::hash));
  EXPECT_EQ(find("start")->key_size, 4u);
  EXPECT_EQ(find("start")->value_size, 8u);
  EXPECT_EQ(find("start")->max_entries, 1024u);
  ASSERT_NE(find("hist_ns"), o->maps.end());
  EXPECT_EQ(find("hist_ns")->type, uint32_t(MapType::array));
  EXPECT_EQ(find("hist_ns")->max_entries, 64u);
  ASSERT_NE(find(".bss"), o->maps.end());
  EXPECT_TRUE(find(".bss")->global_data);
  // fexit: start three times (lookup, delete... ) + hist_ns + calls (a value reference).
  EXPECT_EQ(exit.refs.size(), 4u);
  EXPECT_EQ(std::count_if(exit.refs.begin(), exit.refs.end(), [](const MapRef& r) { return r.value; }), 1);
}

TEST(Loader, EveryExampleLoads) {
  for (const char* n :
       {"latency", "percpu_count", "fexit_ret", "fault_inject", "ringbuf_events", "uprobe_args", "core_order",
        "uprobe_sum", "uprobe_add"}) {
    auto o = load_object_file(example(n), runtime_helpers());
    EXPECT_TRUE(o) << n << ": " << error_of(o);
  }
}

TEST(Loader, BpfToBpfCallIsAppendedAndRelocated) {
  auto o = load_object_file(example("fexit_ret"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  ASSERT_EQ(o->programs.size(), 1u);
  const auto& p = o->programs[0];
  size_t local_calls = 0;
  for (size_t i = 0; i < p.insns.size(); ++i) {
    const Insn& n = p.insns[i];
    if (n.code != op::kCallOp || n.src != op::kCallLocal) continue;
    ++local_calls;
    const int64_t t = static_cast<int64_t>(i) + 1 + n.imm;
    ASSERT_GE(t, 0);
    ASSERT_LT(t, static_cast<int64_t>(p.insns.size()));
  }
  EXPECT_EQ(local_calls, 1u);
}

TEST(Loader, RodataIsReadOnlyGlobalData) {
  auto o = load_object_file(example("fault_inject"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  auto it = std::find_if(o->maps.begin(), o->maps.end(), [](const MapSpec& m) { return m.name == ".rodata"; });
  ASSERT_NE(it, o->maps.end());
  EXPECT_TRUE(it->readonly);
  ASSERT_EQ(it->init.size(), 4u);
  uint32_t every;
  std::memcpy(&every, it->init.data(), 4);
  EXPECT_EQ(every, 3u);
  EXPECT_EQ(o->programs[0].kind, ProgKind::fmod_ret);
}

TEST(LoaderBad, MissingFile) {
  auto o = load_object_file("/nonexistent/x.bpf.o", runtime_helpers());
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("/nonexistent/x.bpf.o: cannot open"), std::string::npos) << o.error().message;
}

TEST(LoaderBad, Truncated) {
  const auto b = read_all(example("latency"));
  ASSERT_GT(b.size(), 1000u);
  EXPECT_NE(error_of(parse({b.begin(), b.begin() + 10})).find("truncated: 10 bytes"), std::string::npos);
  // Cut before the section headers (at the end of clang's objects).
  const std::string e = error_of(parse({b.begin(), b.begin() + static_cast<long>(b.size() / 2)}));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // Every shorter prefix fails cleanly (never crashes).
  for (size_t n = 0; n < b.size(); n += 97) EXPECT_FALSE(parse({b.begin(), b.begin() + static_cast<long>(n)}));
}

TEST(LoaderBad, Corrupt) {
  auto b = read_all(example("latency"));
  auto c = b;
  c[0] = 0;
  EXPECT_NE(error_of(parse(c)).find("not an ELF file"), std::string::npos);
  c = b;
  c[18] = 62;  // e_machine = x86-64
  EXPECT_NE(error_of(parse(c)).find("is not BPF"), std::string::npos) << error_of(parse(c));
  // Flipping bytes anywhere never crashes the loader.
  for (size_t i = 0; i < b.size(); i += 7) {
    c = b;
    c[i] ^= 0xff;
    (void)parse(c);
  }
}

TEST(LoaderBad, UnknownSection) {
  const std::string e = error_of(load_object_file(bad("unknown_section"), runtime_helpers()));
  EXPECT_NE(e.find("section 'tracepoint/syscalls/sys_enter_write': unknown program type"), std::string::npos) << e;
}

TEST(LoaderBad, UnsupportedMapType) {
  const std::string e = error_of(load_object_file(bad("unsupported_map"), runtime_helpers()));
  EXPECT_NE(e.find("map 'cgroups': map type 8 (cgroup_array) is not supported"), std::string::npos) << e;
}

TEST(LoaderBad, UnknownHelper) {
  const std::string e = error_of(load_object_file(bad("unknown_helper"), runtime_helpers()));
  EXPECT_NE(e.find("program 'prog' (section 'fentry/work')"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown helper 35 (bpf_get_current_task)"), std::string::npos) << e;
}

TEST(LoaderBad, JumpOutOfRange) {
  auto b = read_all(example("latency"));
  // work_exit's `if r7 == 0 goto +37` (15 07 25 00 ...) made +0x7f00.
  ASSERT_TRUE(patch_insn(b, {0x15, 0x07, 0x25, 0x00, 0, 0, 0, 0}, {0x15, 0x07, 0x00, 0x7f, 0, 0, 0, 0}));
  const std::string e = error_of(parse(b));
  EXPECT_NE(e.find("program 'work_exit'"), std::string::npos) << e;
  EXPECT_NE(e.find("insn 8 "), std::string::npos) << e;
  EXPECT_NE(e.find("outside the program"), std::string::npos) << e;
}

TEST(LoaderBad, ReservedField) {
  auto b = read_all(example("latency"));
  // The first `exit` with imm = 1.
  ASSERT_TRUE(patch_insn(b, {0x95, 0, 0, 0, 0, 0, 0, 0}, {0x95, 0, 0, 0, 1, 0, 0, 0}));
  const std::string e = error_of(parse(b));
  EXPECT_NE(e.find("reserved field imm must be 0, is 1"), std::string::npos) << e;
}

TEST(LoaderBad, PrototypeMismatch) {
  auto o = load_object_file(bad("proto_mismatch"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  ASSERT_TRUE(o->programs[0].proto.has_value());
  abi::Signature sig;
  sig.args = {abi::ArgType::integer(4)};
  sig.ret = abi::RetType::integer(4);
  sig.source = "DWARF";
  auto r = check_prototype(o->programs[0], sig);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("program 'typed' declares (long a, long b) but work is"), std::string::npos)
      << r.error().message;
  sig.args = {abi::ArgType::integer(8), abi::ArgType::integer(8)};
  EXPECT_TRUE(check_prototype(o->programs[0], sig));
}

TEST(LoaderBad, LegacyMapsSection) {
  // A minimal relocatable BPF ELF is easier to take from a real one: rename a section.
  auto b = read_all(example("latency"));
  // The last ".maps\0" is in the section name table (the first in .BTF's strings).
  auto it = std::find_end(b.begin(), b.end(), std::begin(".maps"), std::end(".maps"));
  ASSERT_NE(it, b.end());
  // ".maps\0" -> "maps\0\0" in the section name table.
  std::copy_n("maps\0\0", 6, it);
  const std::string e = error_of(parse(b));
  EXPECT_NE(e.find("section 'maps': legacy map definitions"), std::string::npos) << e;
}

abi::Signature work_signature() {
  abi::Signature sig;
  sig.args = {abi::ArgType::integer(4)};
  sig.ret = abi::RetType::integer(4);
  sig.source = "DWARF";
  return sig;
}

// BPF_PROG's inner function inlined away: no BTF for it, the prototype from DWARF.
TEST(LoaderProto, InlinedPrototypeFromDwarf) {
  auto bad_o = load_object_file(bad("proto_inlined_mismatch"), runtime_helpers());
  ASSERT_TRUE(bad_o) << bad_o.error().message;
  ASSERT_TRUE(bad_o->programs[0].proto.has_value());
  EXPECT_EQ(bad_o->programs[0].proto->text, "(long a, long b)");
  auto r = check_prototype(bad_o->programs[0], work_signature());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("program 'typed' declares (long a, long b) but work is (i32) -> i32 (1 argument)"),
            std::string::npos)
      << r.error().message;

  auto good = load_object_file(bad("proto_inlined_match"), runtime_helpers());
  ASSERT_TRUE(good) << good.error().message;
  ASSERT_TRUE(good->programs[0].proto.has_value());
  EXPECT_EQ(good->programs[0].proto->text, "(int n, int ret)");
  EXPECT_TRUE(check_prototype(good->programs[0], work_signature()));
}

TEST(LoaderProto, OutOfLinePrototype) {
  auto o = load_object_file(bad("proto_match"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  ASSERT_TRUE(o->programs[0].proto.has_value());
  EXPECT_EQ(o->programs[0].proto->text, "(int n)");
  EXPECT_TRUE(check_prototype(o->programs[0], work_signature()));
}

TEST(LoaderUprobe, Sections) {
  auto o = load_object_file(example("uprobe_args"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  std::map<std::string, const LoadedProgram*> by;
  for (const auto& p : o->programs) by[p.name] = &p;
  ASSERT_EQ(by.size(), 4u);
  EXPECT_EQ(by["work_args"]->kind, ProgKind::uprobe);
  EXPECT_EQ(by["work_args"]->target, "work");
  EXPECT_EQ(by["work_args"]->offset, 0u);
  EXPECT_EQ(by["work_ret"]->kind, ProgKind::uretprobe);
  EXPECT_EQ(by["work_body"]->binary, "bpf_target");
  EXPECT_EQ(by["work_body"]->target, "work");
  EXPECT_EQ(by["work_body"]->offset, 5u);
  EXPECT_EQ(by["may_fail_odd"]->binary, "*");
  EXPECT_EQ(by["may_fail_odd"]->target, "may_fail");
}

TEST(LoaderUprobe, BadSections) {
  auto b = read_all(example("uprobe_args"));
  auto rename = [&](const std::string& from, const std::string& to) {
    auto c = b;
    auto it = std::find_end(c.begin(), c.end(), from.begin(), from.end());
    EXPECT_NE(it, c.end()) << from;
    EXPECT_EQ(from.size(), to.size());
    std::copy(to.begin(), to.end(), it);
    return error_of(parse(c));
  };
  EXPECT_NE(rename("uprobe/bpf_target:work+5", "uprobe/bpf_target:work+z").find("offset 'z' is not a number"),
            std::string::npos);
  EXPECT_NE(rename("uretprobe/work", "uretprobe/w+12").find("a return probe attaches at the function's entry"),
            std::string::npos);
  EXPECT_NE(rename("uprobe/*:may_fail", "uprobe/:may_faill").find("empty binary"), std::string::npos);
}

// CO-RE: the records are kept per program; applied against bpf_target's DWARF, the
// offsets become the target's layout.
TEST(LoaderCore, ResolvedAgainstTargetDwarf) {
  auto o = load_object_file(example("core_order"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  ASSERT_EQ(o->programs.size(), 1u);
  LoadedProgram p = o->programs[0];
  ASSERT_FALSE(p.core.empty());
  std::map<std::string, int> kinds;
  for (const auto& r : p.core) kinds[core_kind_name(r.kind)]++;
  EXPECT_EQ(kinds["field_byte_offset"], 2);
  EXPECT_EQ(kinds["field_exists"], 1);
  EXPECT_EQ(kinds["type_exists"], 1);
  EXPECT_EQ(kinds["type_size"], 1);
  EXPECT_EQ(kinds["enumval_value"], 1);
  auto imm_of = [](const LoadedProgram& q, uint32_t kind) {
    std::vector<int64_t> v;
    for (const auto& r : q.core)
      if (r.kind == kind) {
        const Insn& n = q.insns[r.insn];
        v.push_back(n.code == op::kLddw ? int64_t(uint32_t(n.imm)) | int64_t(q.insns[r.insn + 1].imm) << 32 : n.imm);
      }
    return v;
  };
  // Without the target's DWARF: the object's own layout stays.
  LoadedProgram local = p;
  ASSERT_TRUE(apply_core(local, o->local_btf.get(), nullptr));
  EXPECT_EQ(imm_of(local, 0), (std::vector<int64_t>{4, 0}));  // price, qty
  EXPECT_EQ(imm_of(local, 9), (std::vector<int64_t>{24}));
  EXPECT_EQ(imm_of(local, 11), (std::vector<int64_t>{2}));

  auto t = TargetTypes::open(UTRAMP_BPF_TARGET);
  ASSERT_TRUE(t) << t.error().message;
  ASSERT_TRUE(apply_core(p, o->local_btf.get(), t->get()));
  EXPECT_EQ(imm_of(p, 0), (std::vector<int64_t>{12, 8}));     // struct order { long id; int qty; int price; }
  EXPECT_EQ(imm_of(p, 2), (std::vector<int64_t>{0}));         // no `discount` in the target
  EXPECT_EQ(imm_of(p, 8), (std::vector<int64_t>{1}));
  EXPECT_EQ(imm_of(p, 9), (std::vector<int64_t>{16}));
  EXPECT_EQ(imm_of(p, 11), (std::vector<int64_t>{12}));       // ORDER_SHIPPED = 12 there
}

TEST(LoaderCore, UnsupportedKindNamesInstructionAndKind) {
  const std::string e = error_of(load_object_file(bad("core_bitfield"), runtime_helpers()));
  EXPECT_NE(e.find("program 'bits' insn "), std::string::npos) << e;
  EXPECT_NE(e.find("CO-RE relocation field_"), std::string::npos) << e;
  EXPECT_NE(e.find("is not supported (supported: field_byte_offset"), std::string::npos) << e;
}


// The value each CO-RE relocation of `q` left in its instruction, by kind, in order.
std::vector<int64_t> relocated(const LoadedProgram& q, uint32_t kind) {
  std::vector<int64_t> v;
  for (const auto& r : q.core)
    if (r.kind == kind) {
      const Insn& n = q.insns[r.insn];
      if (n.code == op::kLddw) v.push_back(int64_t(uint32_t(n.imm)) | int64_t(q.insns[r.insn + 1].imm) << 32);
      else if (op::is_alu(n.code)) v.push_back(n.imm);
      else v.push_back(n.off);  // a load's field offset
    }
  return v;
}

const LoadedProgram& program(const Object& o, const std::string& name) {
  for (const auto& p : o.programs)
    if (p.name == name) return p;
  ADD_FAILURE() << "no program " << name;
  return o.programs.at(0);
}

// core_pt_regs.bpf.c declares struct pt_regs { long sp; unsigned long di, si, fred_cs; }:
// every kind must give utramp's uprobe context (loader.hpp kPtRegsFields), with or
// without the target's DWARF (which has no pt_regs).
TEST(LoaderCore, PtRegsResolvedAgainstTheUprobeContext) {
  auto o = load_object_file(bad("core_pt_regs"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  auto t = TargetTypes::open(UTRAMP_BPF_TARGET);
  ASSERT_TRUE(t) << t.error().message;
  for (const TargetTypes* target : std::vector<const TargetTypes*>{nullptr, t->get()}) {
    LoadedProgram p = program(*o, "kinds");
    // What clang compiled from the object's own layout.
    EXPECT_EQ(relocated(p, 0), (std::vector<int64_t>{8, 16}));  // di (a load), si
    ASSERT_TRUE(apply_core(p, o->local_btf.get(), target)) << (target ? "with DWARF" : "without");
    EXPECT_EQ(relocated(p, 0), (std::vector<int64_t>{112, 104}));  // field_byte_offset: di, si
    EXPECT_EQ(relocated(p, 1), (std::vector<int64_t>{8}));         // field_byte_size: si
    EXPECT_EQ(relocated(p, 2), (std::vector<int64_t>{1, 0}));      // field_exists: di, fred_cs
    EXPECT_EQ(relocated(p, 3), (std::vector<int64_t>{0}));         // field_signed: sp is unsigned
    EXPECT_EQ(relocated(p, 8), (std::vector<int64_t>{1}));         // type_exists
    EXPECT_EQ(relocated(p, 9), (std::vector<int64_t>{168}));       // type_size
  }
  EXPECT_EQ(pt_regs_offset("di"), 112);
  EXPECT_EQ(pt_regs_offset("ss"), 160);
  EXPECT_EQ(pt_regs_offset("rdi"), -1);
}

TEST(LoaderCore, PtRegsRegisterUtrampLacksIsRefusedByName) {
  auto o = load_object_file(bad("core_pt_regs"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  LoadedProgram p = program(*o, "missing");
  auto r = apply_core(p, o->local_btf.get(), nullptr);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("program 'missing' insn 0: CO-RE field_byte_offset of struct pt_regs.fred_cs"),
            std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("utramp's uprobe context has no register 'fred_cs' (struct pt_regs: r15, r14"),
            std::string::npos)
      << r.error().message;
}

// A tracing program's pt_regs is not the context: it is looked up in the target's
// DWARF as any other type (bpf_target has none).
TEST(LoaderCore, PtRegsOfATracingProgramIsNotTheContext) {
  auto o = load_object_file(bad("core_pt_regs"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  LoadedProgram p = program(*o, "kinds");
  p.kind = ProgKind::fentry;
  auto t = TargetTypes::open(UTRAMP_BPF_TARGET);
  ASSERT_TRUE(t) << t.error().message;
  auto r = apply_core(p, o->local_btf.get(), t->get());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not in the target's DWARF"), std::string::npos) << r.error().message;
}

// Sections that name no function, and kprobe names for user functions.
TEST(LoaderAttach, BareAndKprobeSections) {
  auto o = load_object_file(example("uprobe_sum"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(program(*o, "sum_add").kind, ProgKind::uprobe);
  EXPECT_EQ(program(*o, "sum_add").target, "");
  EXPECT_EQ(program(*o, "sum_add_ret").kind, ProgKind::uretprobe);
  EXPECT_EQ(program(*o, "sum_sub").kind, ProgKind::uprobe);
  EXPECT_EQ(program(*o, "sum_sub").target, "uprobed_sub");
  auto b = load_object_file(example("uprobe_add"), runtime_helpers());
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(program(*b, "uprobe_sub").binary, "/proc/self/exe");
  EXPECT_EQ(program(*b, "uretprobe_sub").kind, ProgKind::uretprobe);
  EXPECT_EQ(program(*b, "uretprobe_sub").target, "uprobed_sub");
}

std::string attach_error(Object o, const std::vector<std::string>& texts) {
  std::vector<AttachSpec> specs;
  for (const auto& t : texts) {
    auto a = parse_attach_spec(t);
    if (!a) return a.error().message;
    specs.push_back(*a);
  }
  auto r = apply_attach(o, specs);
  return r ? std::string("(attached)") : r.error().message;
}

TEST(LoaderAttach, SpecsCompleteAndOverrideSections) {
  auto o = load_object_file(example("uprobe_sum"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_NE(attach_error(*o, {}).find("program 'sum_add' (section 'uprobe') names no function: attach it with "
                                      "--attach sum_add=uprobe:BINARY:FUNC[+OFFSET]"),
            std::string::npos);
  EXPECT_NE(attach_error(*o, {"sum_add=uprobe:adder:uprobed_add"})
                .find("program 'sum_add_ret' (section 'uretprobe') names no function: attach it with --attach "
                      "sum_add_ret=uretprobe:BINARY:FUNC"),
            std::string::npos);
  Object a = *o;
  std::vector<AttachSpec> specs;
  for (const char* t : {"sum_add=uprobe:/x/adder:uprobed_add+0x4", "sum_add_ret=uretprobe:adder:uprobed_add",
                        "sum_sub=uretprobe:*:uprobed_add"}) {
    auto s = parse_attach_spec(t);
    ASSERT_TRUE(s) << s.error().message;
    specs.push_back(*s);
  }
  ASSERT_TRUE(apply_attach(a, specs));
  EXPECT_EQ(program(a, "sum_add").binary, "/x/adder");
  EXPECT_EQ(program(a, "sum_add").target, "uprobed_add");
  EXPECT_EQ(program(a, "sum_add").offset, 4u);
  EXPECT_EQ(program(a, "sum_add_ret").kind, ProgKind::uretprobe);
  EXPECT_EQ(program(a, "sum_sub").kind, ProgKind::uretprobe);  // overridden: kprobe/uprobed_sub
  EXPECT_EQ(program(a, "sum_sub").target, "uprobed_add");
}

TEST(LoaderAttach, BadSpecsSayWhatIsWrong) {
  auto o = load_object_file(example("uprobe_sum"), runtime_helpers());
  ASSERT_TRUE(o) << o.error().message;
  auto has = [&](const std::vector<std::string>& specs, const std::string& what) {
    const std::string e = attach_error(*o, specs);
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  has({"sum_add=usdt:adder:name"}, "'adder:name' is not BINARY:PROVIDER:NAME");
  has({"sum_add=tracepoint:x"}, "unknown kind 'tracepoint'");
  has({"sum_add"}, "no program named before '='");
  has({"sum_add=uprobe:uprobed_add"}, "a uprobe names its binary: BINARY:FUNC");
  has({"sum_add=uretprobe:adder:uprobed_add+8"}, "a return probe attaches at the function's entry, not at +0x8");
  has({"sum_add=uprobe:adder:uprobed_add+x"}, "offset 'x' is not a number");
  has({"nope=uprobe:adder:f"}, "no program 'nope' in ");
  has({"nope=uprobe:adder:f"}, "(its programs: sum_add, sum_add_ret, sum_sub)");
  has({"sum_add=fentry:uprobed_add"},
      "program 'sum_add' (section 'uprobe') is a uprobe program, it cannot be attached as fentry (uprobe, "
      "uretprobe or usdt: its context is struct pt_regs)");
  has({"sum_add=uprobe:a:f", "sum_add=uprobe:a:g"}, "program 'sum_add' is attached by 'sum_add=uprobe:a:f' already");
  auto f = load_object_file(example("fexit_ret"), runtime_helpers());
  ASSERT_TRUE(f) << f.error().message;
  const std::string name = f->programs.at(0).name;
  const std::string e = attach_error(*f, {name + "=fentry:work"});
  EXPECT_NE(e.find("cannot be attached as fentry (only fexit: its context is fixed by its section)"),
            std::string::npos)
      << e;
}

// Item 9: an unsupported map type is the reason given, before a field it has that the
// loader does not read.
TEST(LoaderBad, UnsupportedMapTypeBeforeUnknownField) {
  const std::string e = error_of(load_object_file(bad("map_in_map"), runtime_helpers()));
  EXPECT_NE(e.find("map 'outer': map type 13 (hash_of_maps) is not supported"), std::string::npos) << e;
}

// A prog_array's `__array(values, ...)` initialiser: its slots, by program; handlers
// in bare sections are tail-call targets only (apply_attach asks no --attach for them),
// the dispatcher is attached as its section says.
TEST(Loader, ProgArrayInitialiser) {
  auto obj = load_object_file(example("tail_dispatch"), runtime_helpers());
  ASSERT_TRUE(obj) << obj.error().message;
  auto m = std::find_if(obj->maps.begin(), obj->maps.end(), [](const MapSpec& s) { return s.name == "handlers"; });
  ASSERT_NE(m, obj->maps.end());
  EXPECT_EQ(m->type, uint32_t(MapType::prog_array));
  std::vector<std::pair<uint32_t, std::string>> slots;
  for (const auto& ps : m->prog_slots) {
    slots.emplace_back(ps.slot, ps.name);
    EXPECT_EQ(obj->programs.at(ps.prog).name, ps.name);
    EXPECT_TRUE(tail_call_only(*obj, ps.prog));
  }
  EXPECT_EQ(slots, (std::vector<std::pair<uint32_t, std::string>>{{0, "case0"}, {1, "case1"}, {2, "case2"}}));
  ASSERT_TRUE(apply_attach(*obj, {}));
  for (size_t i = 0; i < obj->programs.size(); ++i)
    if (obj->programs[i].name == "dispatch") {
      EXPECT_FALSE(tail_call_only(*obj, i));
      EXPECT_EQ(obj->programs[i].target, "emit");
    }
}

// Tail calls between programs whose contexts may differ (fentry) are refused.
TEST(LoaderBad, TailCallsNeedThePtRegsContext) {
  const std::string e = error_of(load_object_file(bad("tail_call_fentry"), runtime_helpers()));
  EXPECT_NE(e.find("tail calls are supported between programs of the struct pt_regs context only"), std::string::npos)
      << e;
  EXPECT_NE(e.find("a fentry program's depends on its function"), std::string::npos) << e;
}

// A refused helper is named with its number, and a hint given where there is a way.
TEST(LoaderBad, RefusedHelperNamedWithAHint) {
  auto call = [](int32_t id) {
    std::vector<Insn> insns(3);
    insns[0].code = op::kCallOp;
    insns[0].imm = id;
    insns[1].code = 0xb7;  // mov r0, 0
    insns[2].code = 0x95;  // exit
    auto r = check_program(insns, &runtime_helpers());
    return r ? std::string("(accepted)") : r.error().message;
  };
  const std::string o = call(35);
  EXPECT_NE(o.find("unknown helper 35 (bpf_get_current_task): not provided here; there is no kernel task in user "
                   "space: bpf_get_current_pid_tgid"),
            std::string::npos)
      << o;
  const std::string u = call(100000);
  EXPECT_NE(u.find("unknown helper 100000 (no kernel helper has that number)"), std::string::npos) << u;
}

// bpf_override_return: only a uprobe at offset 0 may call it; every other program that
// does is refused saying why.
TEST(Loader, OverrideReturnOnlyFromAUprobeAtTheEntry) {
  LoadedProgram p;
  p.name = "inject";
  p.target = "f";
  p.insns.resize(4);
  p.insns[0].code = op::kLddw;  // an lddw whose second half looks like `call 58`
  p.insns[1].code = op::kCallOp;
  p.insns[1].imm = 58;
  p.insns[2].code = 0xb7;  // mov r0, 0
  p.insns[3].code = 0x95;  // exit
  EXPECT_FALSE(calls_helper(p, kOverrideReturnHelper));
  p.kind = ProgKind::fentry;
  EXPECT_TRUE(check_override(p));  // it does not call it
  p.insns[0].code = op::kCallOp;
  p.insns[0].imm = 58;
  EXPECT_TRUE(calls_helper(p, kOverrideReturnHelper));
  auto why = [&](ProgKind k, uint64_t off, const char* section) {
    p.kind = k;
    p.offset = off;
    p.section = section;
    auto r = check_override(p);
    return r ? std::string("(accepted)") : r.error().message;
  };
  EXPECT_EQ(why(ProgKind::uprobe, 0, "uprobe/f"), "(accepted)");
  const std::string mid = why(ProgKind::uprobe, 4, "uprobe/f+4");
  EXPECT_NE(mid.find("program 'inject' (section 'uprobe/f+4') calls bpf_override_return (helper 58), which only a "
                     "uprobe at a function's entry may: this one is at f+0x4"),
            std::string::npos)
      << mid;
  EXPECT_NE(why(ProgKind::uretprobe, 0, "uretprobe/f").find("a uretprobe runs after the function returned"),
            std::string::npos);
  EXPECT_NE(why(ProgKind::fentry, 0, "fentry/f").find("fentry programs cannot change what the function does"),
            std::string::npos);
  EXPECT_NE(why(ProgKind::fexit, 0, "fexit/f").find("fexit programs cannot"), std::string::npos);
  EXPECT_NE(why(ProgKind::fmod_ret, 0, "fmod_ret/f").find("return it instead of calling the helper"),
            std::string::npos);
  // A USDT point is mid-function: accepted until the switch named the kind.
  const std::string usdt = why(ProgKind::usdt, 0, "usdt/f:prov:name");
  EXPECT_NE(usdt.find("a USDT probe point lies inside its function"), std::string::npos) << usdt;
}

}  // namespace
}  // namespace utramp::ebpf
