// Function names (src/symbols): the three forms of a symbol and the glob rule, on the
// names that trip simple demanglers: templates, operators, lambdas, local classes,
// anonymous namespaces, ABI tags, clones, thunks, functions returning function
// pointers, and C names that look like manglings.
#include <gtest/gtest.h>

#include "symbols/glob.hpp"
#include "symbols/names.hpp"

using namespace utramp::symbols;

namespace {

struct Case {
  const char* symbol;
  const char* full;
  const char* simple;
};

// Full forms are what the libstdc++ demangler prints (as c++filt does).
const Case kCases[] = {
    // C names: never demangled, although "a" is the mangling of `signed char`, "f" of
    // `float`... (the demangler alone turns them into types)
    {"a", "a", "a"},
    {"b", "b", "b"},
    {"c", "c", "c"},
    {"d", "d", "d"},
    {"f", "f", "f"},
    {"i", "i", "i"},
    {"main", "main", "main"},
    {"foo.isra.0", "foo.isra.0", "foo.isra.0"},
    {"foo.cold", "foo.cold", "foo.cold"},
    // C names that start like a mangling but are not one
    {"_Zap", "_Zap", "_Zap"},
    {"_Z", "_Z", "_Z"},
    {"Z3foov", "Z3foov", "Z3foov"},
    {"__Z3foov", "__Z3foov", "__Z3foov"},
    // plain functions, namespaces, members
    {"_Z3fibi", "fib(int)", "fib"},
    {"_ZN4shop4Cart3addEi", "shop::Cart::add(int)", "shop::Cart::add"},
    {"_ZNK4shop4Cart5totalEv", "shop::Cart::total() const", "shop::Cart::total"},
    {"_ZN2ns1SC2Ev", "ns::S::S()", "ns::S::S"},
    {"_ZN2ns1SD1Ev", "ns::S::~S()", "ns::S::~S"},
    {"_ZNO2ns1S3setEi", "ns::S::set(int) &&", "ns::S::set"},
    // templates: arguments and the return type go
    {"_ZNSt6vectorIiSaIiEE9push_backEOi",
     "std::vector<int, std::allocator<int> >::push_back(int&&)", "std::vector::push_back"},
    {"_ZN5Outer5InnerIiE4callIcEEvT_", "void Outer::Inner<int>::call<char>(char)",
     "Outer::Inner::call"},
    {"_ZN3FooC1IiEET_", "Foo::Foo<int>(int)", "Foo::Foo"},
    {"_Z1fIJidEEvDpT_", "void f<int, double>(int, double)", "f"},
    {"_ZN1AIiE1fIXgtLi3ELi2EEEEvv", "void A<int>::f<((3)>(2))>()", "A::f"},
    {"_ZNKSt8functionIFiiEEclEi", "std::function<int (int)>::operator()(int) const",
     "std::function::operator()"},
    // operators
    {"_ZN2nsltIiEEbRKNS_3BoxIT_EES5_",
     "bool ns::operator< <int>(ns::Box<int> const&, ns::Box<int> const&)", "ns::operator<"},
    {"_ZN2nslsIiEERSoS1_RKNS_3BoxIT_EE",
     "std::ostream& ns::operator<< <int>(std::ostream&, ns::Box<int> const&)", "ns::operator<<"},
    {"_ZN2nsrsERSiRi", "ns::operator>>(std::istream&, int&)", "ns::operator>>"},
    {"_ZN2nsdeIiEERT_PS1_", "int& ns::operator*<int>(int*)", "ns::operator*"},
    {"_ZNK2ns3BoxIiEptEv", "ns::Box<int>::operator->() const", "ns::Box::operator->"},
    {"_ZNK2ns1XssERKS0_", "ns::X::operator<=>(ns::X const&) const", "ns::X::operator<=>"},
    {"_ZN2ns3BoxIiEaSERKS1_", "ns::Box<int>::operator=(ns::Box<int> const&)",
     "ns::Box::operator="},
    {"_ZNKSt6vectorIiSaIiEEixEm",
     "std::vector<int, std::allocator<int> >::operator[](unsigned long) const",
     "std::vector::operator[]"},
    {"_Znwm", "operator new(unsigned long)", "operator new"},
    {"_ZdaPv", "operator delete[](void*)", "operator delete[]"},
    {"_ZNK2ns3BoxIiEcviEv", "ns::Box<int>::operator int() const", "ns::Box::operator int"},
    {"_ZNK2ns3BoxIiEcvSt6vectorIiSaIiEEEv",
     "ns::Box<int>::operator std::vector<int, std::allocator<int> >() const",
     "ns::Box::operator std::vector"},
    {"_ZN2ns1XcvPFivEEv", "ns::X::operator int (*)()()", "ns::X::operator int (*)()"},
    {"_Zli2_kmy", "operator\"\" _k(unsigned long, unsigned long long)", "operator\"\" _k"},
    // lambdas and local classes: the enclosing function's parameters go too
    {"_ZZ3runvENKUliE_clEi", "run()::{lambda(int)#1}::operator()(int) const",
     "run::{lambda#1}::operator()"},
    {"_ZZN2ns1fEvENKUlvE0_clEv", "ns::f()::{lambda()#2}::operator()() const",
     "ns::f::{lambda#2}::operator()"},
    {"_ZZZ3runvENKUliE_clEiENKUlvE_clEv",
     "run()::{lambda(int)#1}::operator()(int) const::{lambda()#1}::operator()() const",
     "run::{lambda#1}::operator()::{lambda#1}::operator()"},
    {"_ZZ3runvEN5Local2goEv", "run()::Local::go()", "run::Local::go"},
    {"_ZZ4mainENK3$_0clEv", "main::$_0::operator()() const", "main::$_0::operator()"},
    // anonymous namespaces and ABI tags
    {"_ZN12_GLOBAL__N_11fEv", "(anonymous namespace)::f()", "(anonymous namespace)::f"},
    {"_ZN2ns12_GLOBAL__N_16hiddenEi", "ns::(anonymous namespace)::hidden(int)",
     "ns::(anonymous namespace)::hidden"},
    {"_ZN2ns5titleB5cxx11Ei", "ns::title[abi:cxx11](int)", "ns::title"},
    {"_ZNKR2ns1S4nameB5cxx11Ev", "ns::S::name[abi:cxx11]() const &", "ns::S::name"},
    {"_ZN2ns1fB5cxx11B3xyzEv", "ns::f[abi:cxx11][abi:xyz]()", "ns::f"},
    // clones keep their suffix, as a C function's does
    {"_Z3fooi.isra.0", "foo(int) [clone .isra.0]", "foo.isra.0"},
    {"_Z3fooi.cold", "foo(int) [clone .cold]", "foo.cold"},
    {"_Z3fooi.isra.0.cold", "foo(int) [clone .isra.0] [clone .cold]", "foo.isra.0.cold"},
    {"_ZN1S1fEv.llvm.123456", "S::f() [clone .llvm.123456]", "S::f.llvm.123456"},
    // thunks say what they are
    {"_ZThn8_N1B1fEv", "non-virtual thunk to B::f()", "non-virtual thunk to B::f"},
    {"_ZTv0_n24_N1B1fEv", "virtual thunk to B::f()", "virtual thunk to B::f"},
    // a function returning a pointer to function: its name is inside the declarator
    {"_ZN2ns2tfIiEEPFvcET_", "void (*ns::tf<int>(int))(char)", "ns::tf"},
    // static constructors keyed to a file or to a mangled function
    {"_GLOBAL__sub_I_main.cpp", "_GLOBAL__sub_I_main.cpp", "_GLOBAL__sub_I_main.cpp"},
    {"_GLOBAL__sub_I__ZN2ns4initEv", "_GLOBAL__sub_I_ns::init()", "_GLOBAL__sub_I_ns::init"},
    {"_GLOBAL__sub_D__Z3foov", "_GLOBAL__sub_D_foo()", "_GLOBAL__sub_D_foo"},
    // a version from .dynsym
    {"_ZNSt6thread4joinEv@@GLIBCXX_3.4.11", "std::thread::join()@@GLIBCXX_3.4.11",
     "std::thread::join@@GLIBCXX_3.4.11"},
};

TEST(Symbols, Forms) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.symbol);
    EXPECT_EQ(demangle(c.symbol), c.full);
    EXPECT_EQ(simple_name(c.symbol), c.simple);
    const Name n(c.symbol);
    EXPECT_EQ(n.in(Style::mangled), c.symbol);
    EXPECT_EQ(n.in(Style::full), c.full);
    EXPECT_EQ(n.in(Style::simple), c.simple);
  }
}

TEST(Symbols, OnlyItaniumNamesAreMangled) {
  EXPECT_TRUE(is_mangled("_Z3fibi"));
  EXPECT_TRUE(is_mangled("_GLOBAL__sub_I__Z3foov"));
  EXPECT_FALSE(is_mangled("_GLOBAL__sub_I_main.cpp"));
  EXPECT_FALSE(is_mangled("f"));
  EXPECT_FALSE(is_mangled("Z3foov"));
}

// What is not a demangled name comes back as it was (never empty, never a crash).
TEST(Symbols, SimplifyOddText) {
  EXPECT_EQ(simplify("plain"), "plain");
  EXPECT_EQ(simplify(""), "");
  EXPECT_EQ(simplify("f(int"), "f");
  EXPECT_EQ(simplify("a<b"), "a");
  EXPECT_EQ(simplify("operator"), "operator");
  EXPECT_EQ(simplify("(x)"), "(x)");
}

// One rule everywhere: a glob names a function when it matches any of its forms.
TEST(Symbols, GlobRule) {
  const Name m("_ZN2ns3BoxIiE3getEv");  // ns::Box<int>::get()
  for (const char* g : {"ns::Box::get", "ns::Box<int>::get()", "_ZN2ns3BoxIiE3getEv", "ns::*",
                        "*::get", "*get*", "_ZN2ns*"})
    EXPECT_TRUE(glob_matches(g, m)) << g;
  for (const char* g : {"get", "ns::Box<int>::get", "Box::get", "ns::box::get"})
    EXPECT_FALSE(glob_matches(g, m)) << g;

  // C names: the name itself, never what the demangler would make of it.
  EXPECT_TRUE(glob_matches("f", Name("f")));
  EXPECT_FALSE(glob_matches("float", Name("f")));
  EXPECT_FALSE(glob_matches("f*", Name("main")));

  // Clones are names of their own: `foo` does not name foo.isra.0; `foo*` does.
  EXPECT_FALSE(glob_matches("foo", Name("_Z3fooi.isra.0")));
  EXPECT_TRUE(glob_matches("foo*", Name("_Z3fooi.isra.0")));
  EXPECT_FALSE(glob_matches("foo", Name("foo.cold")));

  const Globs none;
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.matches(m));
  const Globs some({"nothing", "ns::Box::*"});
  EXPECT_TRUE(some.matches(m));
  EXPECT_FALSE(some.matches(Name("main")));
}

}  // namespace
