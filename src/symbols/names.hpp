// Function names as utramp shows them and as users type them: one definition for the
// agent, `list`, `record`, `replay`, `report`, `dump` and `hist`.
//
// A function symbol has three forms:
//
//   symbol   as in the object file: "_ZNK2ns3BoxIiE3getEv", "main", "foo.isra.0"
//   full     demangled, with everything the mangling says:
//            "ns::Box<int>::get() const" (the symbol itself unless it is mangled)
//   simple   the qualified name alone, as uftrace shows calls: "ns::Box::get" (no
//            return type, template arguments, parameter lists, cv/ref qualifiers or ABI
//            tags; a lambda is "{lambda#1}", a clone keeps its suffix: "foo.isra.0")
//
// Only Itanium C++ names (`_Z...`, and the `_GLOBAL__sub_I_` constructor names built on
// them) are demangled: C functions named `f` or `i` are valid type manglings ("float",
// "int") and must stay as they are. Nothing here runs on a hit path.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace utramp::symbols {

// How names are shown: replay/report/dump `--demangle simple|full|no`.
enum class Style { simple, full, mangled };

// Whether SYMBOL is an Itanium C++ mangled name (what the demangler is asked about).
bool is_mangled(std::string_view symbol);

// The full demangled form of SYMBOL, or SYMBOL unchanged when it is not mangled or does
// not demangle.
std::string demangle(std::string_view symbol);

// The simple form of SYMBOL.
std::string simple_name(std::string_view symbol);

// The simple form of a full demangled name ("ns::Box<int>::get() const" -> "ns::Box::get").
std::string simplify(std::string_view demangled);

// One symbol and its other forms, each computed on first use (most names a glob is
// tried against are C names, or match on the symbol already).
class Name {
 public:
  explicit Name(std::string symbol) : symbol_(std::move(symbol)) {}
  const std::string& symbol() const { return symbol_; }
  const std::string& full() const;
  const std::string& simple() const;
  const std::string& in(Style style) const;

 private:
  std::string symbol_;
  mutable std::optional<std::string> full_, simple_;
};

}  // namespace utramp::symbols
