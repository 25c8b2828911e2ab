// Which functions a glob names: the one rule of `record -F/-N/-A/-R`, `hist FUNC`,
// `list PROGRAM GLOB` and `replay/report -F/-N/--hist` (docs/tracing.md, "Function
// names and globs").
//
// A pattern is a shell glob (fnmatch(3), no flags: `*` also crosses `::`) and names a
// function when it matches the whole of any of the function's three forms
// (symbols/names.hpp): the symbol, the full demangled name, or the simple name. So
// `ns::f`, `ns::f(int)` and `_ZN2ns1fEi` all name `int ns::f(int)`, at record time as at
// replay time, whatever the names are shown as.
#pragma once

#include <string>
#include <vector>

#include "symbols/names.hpp"

namespace utramp::symbols {

bool glob_matches(const std::string& pattern, const Name& name);

// A list of patterns; matches when one of them does. An empty list matches nothing.
class Globs {
 public:
  Globs() = default;
  explicit Globs(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {}
  bool empty() const { return patterns_.empty(); }
  bool matches(const Name& name) const;
  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  std::vector<std::string> patterns_;
};

}  // namespace utramp::symbols
