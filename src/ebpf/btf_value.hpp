// Values of an eBPF object's own types, decoded with its BTF: what `utramp run` prints
// for ring buffer and perf records, global variables and (later) map keys and values.
//
// One decoding, two renderings. btf_value() turns bytes of a BTF type into a JSON value:
//   integers      numbers (signed as declared; bool as true/false; 128-bit as hex)
//   enums         the enumerator's name, or the number when no enumerator has it
//   char arrays   a string up to the first NUL (char, signed or unsigned, 1 byte)
//   other arrays  an array of element values
//   structs       an object of member name -> value, in declaration order (anonymous
//                 members' own members are lifted, as C names them); bitfields decoded
//   unions        the first member's value (which one was written is not knowable)
//   pointers      the address as a number
//   floats        a number
//   anything else its bytes as a lowercase hex string
// render_value() writes that JSON value the way bpftrace prints its values: strings
// quoted, arrays as `[1, 2]`, structs as `{ .a = 1, .b = "x" }`.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

struct btf;

namespace utramp::ebpf {

// The value of `size` bytes of BTF type `type_id` (modifiers and typedefs are looked
// through). Bytes past the end of `bytes` are treated as absent (the value is cut).
nlohmann::ordered_json btf_value(const btf* b, uint32_t type_id, std::span<const uint8_t> bytes);

// bpftrace's text for a value built by btf_value (or any JSON value of the same kinds).
std::string render_value(const nlohmann::ordered_json& v);

// The type a stream's records have: the object's named struct or union NAME (with or
// without its `struct `/`union ` keyword), or, with NAME empty, the only named struct
// of exactly `size` bytes in the object. Errors name the candidates found, or say that
// there are none.
Result<uint32_t> find_record_type(const btf* b, uint64_t size, const std::string& name = {});

// The name a type is written with in C (`struct event`, `u64`, `char[16]`).
std::string type_name(const btf* b, uint32_t type_id);

}  // namespace utramp::ebpf
