#include "symbols/names.hpp"

#include <cxxabi.h>

#include <cstdlib>

namespace utramp::symbols {

namespace {

// Static constructors and destructors of a translation unit (gcc, clang) are named
// after its file or its first function: "_GLOBAL__sub_I_main.cpp",
// "_GLOBAL__sub_I__ZN2ns4initEv". The key is demangled when it is mangled; the prefix
// stays, so that the name still says what the function is.
constexpr std::string_view kGlobalPrefixes[] = {"_GLOBAL__sub_I_", "_GLOBAL__sub_D_",
                                                "_GLOBAL__I_", "_GLOBAL__D_"};

// The key of a _GLOBAL_ name when it is a mangled one, else empty.
std::string_view global_prefix(std::string_view symbol) {
  for (std::string_view p : kGlobalPrefixes)
    if (symbol.starts_with(p) && symbol.substr(p.size()).starts_with("_Z")) return p;
  return {};
}

// What __cxa_demangle makes of S: nullopt when S is not a valid mangled name.
std::optional<std::string> cxa_demangle(std::string_view s) {
  const std::string z(s);
  int status = 0;
  char* d = ::abi::__cxa_demangle(z.c_str(), nullptr, nullptr, &status);
  std::optional<std::string> out;
  if (status == 0 && d) out = d;
  std::free(d);
  return out;
}

// Names of special functions the demangler puts in front of the function they are
// made from: the prefix stays in the simple form.
constexpr std::string_view kSpecialPrefixes[] = {
    "non-virtual thunk to ", "virtual thunk to ", "covariant return thunk to ",
    "transaction clone for ", "non-transaction clone for "};

// Operator spellings after "operator", longest first (so that "->*" is not read as "->").
constexpr std::string_view kOperatorTokens[] = {
    "<=>", "<<=", ">>=", "->*", "()", "[]", "<<", ">>", "<=", ">=", "->", "==", "!=", "&&",
    "||",  "++",  "--",  "+=",  "-=", "*=", "/=", "%=", "&=", "|=", "^=", "\"\"", "~", "!",
    "+",   "-",   "*",   "/",   "%",  "^",  "&",  "|",  "=",  "<",  ">",  ","};
constexpr std::string_view kOperatorWords[] = {"new[]", "delete[]", "new", "delete", "co_await"};

// What may follow a function's parameter list in a demangled name.
constexpr std::string_view kQualifiers[] = {"const", "volatile", "restrict", "noexcept",
                                            "transaction_safe", "throw()", "&&", "&"};

bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$';
}

// One pass over a demangled name that copies the qualified name and leaves out what the
// simple form has not. The text is the demangler's output, so a group it opens is always
// closed; an unbalanced one (not a demangled name) runs to the end.
//
//   "bool ns::operator< <int>(ns::Box<int> const&, ns::Box<int> const&)"  -> ns::operator<
//   "run()::{lambda(int)#1}::operator()(int) const"              -> run::{lambda#1}::operator()
//   "void (*ns::tf<int>(int))(char)"                                       -> ns::tf
//   "ns::Box<int>::operator std::vector<int, std::allocator<int> >() const"
//                                                           -> ns::Box::operator std::vector
class Simplifier {
 public:
  explicit Simplifier(std::string_view d) : d_(d) {}

  std::string run() {
    size_t i = 0;
    while (i < d_.size()) {
      const char c = d_[i];
      if (c == 'o' && operator_at(i)) {
        i = copy_operator(i);
      } else if (c == '<') {
        i = group_end(i);  // template arguments
      } else if (c == '(') {
        if (d_.substr(i).starts_with("(anonymous namespace)")) {
          out_ += "(anonymous namespace)";
          i += 21;
        } else if (i + 1 < d_.size() && (d_[i + 1] == '*' || d_[i + 1] == '&') &&
                   (out_.empty() || out_.back() == ' ')) {
          // A function returning a pointer to function: its name is in the declarator.
          ++declarators_;
          name_start_ = out_.size();
          i += 2;
        } else {
          const size_t end = group_end(i);
          if (final_parameters(end)) break;
          // An enclosing function's parameters: "f() const::Local::g()".
          i = skip_qualifiers(end);
        }
      } else if (c == ')' && declarators_ > 0) {
        break;  // the end of the declarator: the rest is the returned type's
      } else if (c == '{') {
        i = copy_braces(i);
      } else if (c == '[' && d_.substr(i).starts_with("[abi:")) {
        const size_t close = d_.find(']', i);
        i = close == std::string_view::npos ? d_.size() : close + 1;
      } else if (c == ' ') {
        // Before template arguments ("operator< <int>"), or after a return type.
        if (i + 1 >= d_.size() || d_[i + 1] != '<') {
          out_ += ' ';
          name_start_ = out_.size();
        }
        ++i;
      } else {
        out_ += c;
        ++i;
      }
    }
    std::string name = out_.substr(name_start_);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    return name.empty() ? std::string(d_) : name;
  }

 private:
  // The index after the group D_[open] opens: <...> (parentheses inside protect '>'
  // as in "f<((3)>(2))>"), (...) or {...}.
  size_t group_end(size_t open) const {
    const char o = d_[open];
    const char c = o == '<' ? '>' : o == '(' ? ')' : '}';
    int depth = 0, parens = 0;
    for (size_t i = open; i < d_.size(); ++i) {
      const char x = d_[i];
      if (o == '<' && x == '(') ++parens;
      else if (o == '<' && x == ')') --parens;
      else if (parens > 0) continue;
      else if (x == o) ++depth;
      else if (x == c && --depth == 0) return i + 1;
    }
    return d_.size();
  }

  // After qualifiers of a parameter list (" const", " &&"...): where the text goes on.
  size_t skip_qualifiers(size_t i) const {
    for (;;) {
      size_t j = i;
      while (j < d_.size() && d_[j] == ' ') ++j;
      bool found = false;
      for (std::string_view q : kQualifiers) {
        if (!d_.substr(j).starts_with(q)) continue;
        const size_t end = j + q.size();
        if (ident_char(q.back()) && end < d_.size() && ident_char(d_[end])) continue;
        i = end;
        found = true;
        break;
      }
      if (!found) return i;
    }
  }

  // Whether the parameter list ending before I is the function's own: nothing but
  // qualifiers follows it (or, inside a declarator, its closing parenthesis).
  bool final_parameters(size_t i) const {
    i = skip_qualifiers(i);
    while (i < d_.size() && d_[i] == ' ') ++i;
    return i == d_.size() || (declarators_ > 0 && d_[i] == ')');
  }

  bool operator_at(size_t i) const {
    return d_.substr(i).starts_with("operator") && (i == 0 || !ident_char(d_[i - 1])) &&
           (i + 8 >= d_.size() || !ident_char(d_[i + 8]));
  }

  // "operator<" and the like, "operator new[]", "operator\"\" _km", or a conversion
  // "operator TYPE" (TYPE without its template arguments); returns the index after it.
  size_t copy_operator(size_t i) {
    out_ += "operator";
    size_t j = i + 8;
    if (j >= d_.size()) return j;
    if (d_[j] != ' ') {
      for (std::string_view t : kOperatorTokens) {
        if (!d_.substr(j).starts_with(t)) continue;
        out_ += t;
        j += t.size();
        if (t == "\"\"" && j < d_.size() && d_[j] == ' ') {  // a literal operator's suffix
          out_ += ' ';
          for (++j; j < d_.size() && ident_char(d_[j]); ++j) out_ += d_[j];
        }
        return j;
      }
      return j;
    }
    for (std::string_view w : kOperatorWords) {
      const size_t end = j + 1 + w.size();
      if (d_.substr(j + 1).starts_with(w) && (end >= d_.size() || !ident_char(d_[end]))) {
        out_ += ' ';
        out_ += w;
        return end;
      }
    }
    out_ += ' ';
    for (++j; j < d_.size();) {
      const char c = d_[j];
      if (c == '<') {
        j = group_end(j);
      } else if (c == '(') {
        const size_t end = group_end(j);
        if (final_parameters(end)) return j;
        out_.append(d_.substr(j, end - j));  // part of the type: "operator int (*)()"
        j = end;
      } else if (c == '[' && d_.substr(j).starts_with("[abi:")) {
        const size_t close = d_.find(']', j);
        j = close == std::string_view::npos ? d_.size() : close + 1;
      } else {
        out_ += c;
        ++j;
      }
    }
    return j;
  }

  // "{lambda(int)#1}" -> "{lambda#1}"; "{unnamed type#1}" as it is.
  size_t copy_braces(size_t open) {
    const size_t end = group_end(open);
    for (size_t k = open; k < end;) {
      if (d_[k] == '(') {
        k = group_end(k);
      } else {
        out_ += d_[k];
        ++k;
      }
    }
    return end;
  }

  std::string_view d_;
  std::string out_;
  size_t name_start_ = 0;  // where the name begins in out_: after the return type
  int declarators_ = 0;
};

}  // namespace

bool is_mangled(std::string_view symbol) {
  return symbol.starts_with("_Z") || !global_prefix(symbol).empty();
}

std::string demangle(std::string_view symbol) {
  if (const std::string_view p = global_prefix(symbol); !p.empty())
    return std::string(p) + demangle(symbol.substr(p.size()));
  if (!symbol.starts_with("_Z")) return std::string(symbol);
  if (auto d = cxa_demangle(symbol)) return *d;
  // A symbol version ("@@GLIBCXX_3.4") is no part of the mangling.
  if (const size_t at = symbol.find('@'); at != std::string_view::npos)
    if (auto d = cxa_demangle(symbol.substr(0, at))) return *d + std::string(symbol.substr(at));
  return std::string(symbol);
}

std::string simplify(std::string_view demangled) {
  for (std::string_view p : kSpecialPrefixes)
    if (demangled.starts_with(p)) return std::string(p) + simplify(demangled.substr(p.size()));
  return Simplifier(demangled).run();
}

std::string simple_name(std::string_view symbol) {
  if (const std::string_view p = global_prefix(symbol); !p.empty())
    return std::string(p) + simple_name(symbol.substr(p.size()));
  if (!symbol.starts_with("_Z")) return std::string(symbol);
  // What the compiler appends to a mangled name (a clone: ".isra.0", ".cold",
  // ".constprop.0", ".llvm.123") or the linker (a version: "@@V1") is no part of the
  // mangling: it stays, as on a C function's name ("foo.isra.0").
  const size_t cut = symbol.find_first_of(".@");
  const std::string_view head = symbol.substr(0, cut);
  auto d = cxa_demangle(head);
  if (!d) return std::string(symbol);
  std::string out = simplify(*d);
  if (cut != std::string_view::npos) out += symbol.substr(cut);
  return out;
}

const std::string& Name::full() const {
  if (!full_) full_ = demangle(symbol_);
  return *full_;
}

const std::string& Name::simple() const {
  if (!simple_) simple_ = simple_name(symbol_);
  return *simple_;
}

const std::string& Name::in(Style style) const {
  switch (style) {
    case Style::simple:
      return simple();
    case Style::full:
      return full();
    case Style::mangled:
      break;
  }
  return symbol_;
}

}  // namespace utramp::symbols
