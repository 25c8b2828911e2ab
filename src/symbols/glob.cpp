#include "symbols/glob.hpp"

#include <fnmatch.h>

namespace utramp::symbols {

bool glob_matches(const std::string& pattern, const Name& name) {
  if (fnmatch(pattern.c_str(), name.symbol().c_str(), 0) == 0) return true;
  // A name that is not mangled is its own full and simple form.
  if (!is_mangled(name.symbol())) return false;
  return fnmatch(pattern.c_str(), name.full().c_str(), 0) == 0 ||
         fnmatch(pattern.c_str(), name.simple().c_str(), 0) == 0;
}

bool Globs::matches(const Name& name) const {
  for (const auto& p : patterns_)
    if (glob_matches(p, name)) return true;
  return false;
}

}  // namespace utramp::symbols
