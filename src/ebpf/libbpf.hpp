// libbpf, loaded the first time an eBPF object's BTF is read (dlopen), not linked: the
// agent that `utramp record` preloads into every traced program does not load it (nor
// relocate it) for nothing; only `utramp run` reads eBPF objects. The one list of the
// libbpf functions the runtime calls, each bound to the symbol version of the ABI it
// was written against.
#pragma once

#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "common/result.hpp"

namespace utramp::ebpf {

// X(function, "LIBBPF_x.y.z"): the version that introduced it.
#define UTRAMP_LIBBPF_FUNCTIONS(X)                 \
  X(btf__add_array, "LIBBPF_0.2.0")                \
  X(btf__add_enum, "LIBBPF_0.2.0")                 \
  X(btf__add_enum_value, "LIBBPF_0.2.0")           \
  X(btf__add_field, "LIBBPF_0.2.0")                \
  X(btf__add_float, "LIBBPF_0.4.0")                \
  X(btf__add_int, "LIBBPF_0.2.0")                  \
  X(btf__add_ptr, "LIBBPF_0.2.0")                  \
  X(btf__add_struct, "LIBBPF_0.2.0")               \
  X(btf__add_typedef, "LIBBPF_0.2.0")              \
  X(btf__add_union, "LIBBPF_0.2.0")                \
  X(btf__find_by_name_kind, "LIBBPF_0.0.6")        \
  X(btf__free, "LIBBPF_0.0.1")                     \
  X(btf__name_by_offset, "LIBBPF_0.0.1")           \
  X(btf__new, "LIBBPF_0.0.1")                      \
  X(btf__new_empty, "LIBBPF_0.2.0")                \
  X(btf__resolve_size, "LIBBPF_0.0.1")             \
  X(btf__resolve_type, "LIBBPF_0.0.1")             \
  X(btf__type_by_id, "LIBBPF_0.0.1")               \
  X(btf__type_cnt, "LIBBPF_0.6.0")                 \
  X(btf_ext__free, "LIBBPF_0.0.2")                 \
  X(btf_ext__new, "LIBBPF_0.0.2")                  \
  X(libbpf_set_print, "LIBBPF_0.0.1")

struct Libbpf {
#define UTRAMP_LIBBPF_MEMBER(fn, version) decltype(&::fn) fn = nullptr;
  UTRAMP_LIBBPF_FUNCTIONS(UTRAMP_LIBBPF_MEMBER)
#undef UTRAMP_LIBBPF_MEMBER
};

// Loads libbpf once (thread-safe); the error names the library or the symbol missing,
// the same at every call. Called where a BTF is first made (the object parser, DWARF's
// types as BTF): every other call has a BTF, so libbpf is loaded.
Result<const Libbpf*> load_libbpf();

// The loaded library's functions. Only where a BTF exists (see load_libbpf): were it
// not loaded, the process ends with load_libbpf's error on stderr.
const Libbpf& libbpf();

}  // namespace utramp::ebpf
