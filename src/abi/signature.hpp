// A function's signature as the trampoline needs it: where each argument arrives and
// where the return value leaves, in System V x86-64 terms, and how the context (the
// kernel's u64 ctx[] array) lays them out.
//
// (The context those signatures are laid out in is abi/ctx.hpp.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "abi/ctx.hpp"
#include "common/result.hpp"

namespace utramp::abi {

// The ABI class of one eightbyte of a value (SysV §3.2.3, reduced to what we pass).
enum class Part : uint8_t { none, integer, sse };

// What a scalar argument or return value is in C, when the signature comes from DWARF:
// how `record -A/-R` shows it by default (its width is the type's size). `none`: not a
// scalar (a struct), or not known (a signature from options or the fallback).
enum class Scalar : uint8_t { none, sint, uint, character, boolean, floating, pointer };

struct ArgType {
  enum class Kind : uint8_t {
    reg,     // one or two eightbytes in registers, classes in parts[]
    memory,  // passed on the stack by value (large struct, long double)
  } kind = Kind::reg;
  uint16_t size = 8;            // bytes
  uint16_t align = 8;           // for memory args on the stack
  Part parts[2] = {Part::integer, Part::none};
  Scalar scalar = Scalar::none;

  static ArgType integer(uint16_t size = 8) { return {Kind::reg, size, size, {Part::integer, Part::none}}; }
  static ArgType sse(uint16_t size = 8) { return {Kind::reg, size, size, {Part::sse, Part::none}}; }
  // align: 16 for __int128 (and structs holding one), which take 16-aligned stack slots.
  static ArgType pair(Part a, Part b, uint16_t size = 16, uint16_t align = 8) { return {Kind::reg, size, align, {a, b}}; }
  static ArgType memory(uint16_t size, uint16_t align = 8) { return {Kind::memory, size, align, {Part::none, Part::none}}; }
  int eightbytes() const { return kind == Kind::memory ? 0 : (parts[1] == Part::none ? 1 : 2); }
};

struct RetType {
  enum class Kind : uint8_t {
    none,    // void
    reg,     // rax / xmm0, or two of rax, rdx, xmm0, xmm1 per parts[]
    x87,     // long double in st(0)
    memory,  // through a hidden pointer passed in rdi and returned in rax
  } kind = Kind::reg;
  uint16_t size = 8;
  Part parts[2] = {Part::integer, Part::none};
  bool aggregate = false;       // a struct or union (in registers): not for fmod_ret
  Scalar scalar = Scalar::none;

  static RetType void_() { return {Kind::none, 0, {Part::none, Part::none}}; }
  static RetType integer(uint16_t size = 8) { return {Kind::reg, size, {Part::integer, Part::none}}; }
  static RetType sse(uint16_t size = 8) { return {Kind::reg, size, {Part::sse, Part::none}}; }
  static RetType pair(Part a, Part b, uint16_t size = 16) { return {Kind::reg, size, {a, b}}; }
  static RetType x87() { return {Kind::x87, 16, {Part::none, Part::none}}; }
  static RetType memory(uint16_t size) { return {Kind::memory, size, {Part::none, Part::none}}; }
  int slots() const { return kind == Kind::none ? 0 : (kind == Kind::reg && parts[1] == Part::none) || kind == Kind::memory ? 1 : 2; }
};

struct Signature {
  std::vector<ArgType> args;
  RetType ret = RetType::integer();
  bool variadic = false;   // preserve al and every argument register
  bool noreturn = false;   // fexit and fmod_ret are refused
  bool known = true;       // false: the fallback of six integer registers (see below)
  std::string source;      // where it came from: "C++ type", "DWARF", "options", "default"

  // Without DWARF and without options: six integer argument registers in ctx[0..5], all
  // argument registers (and al) preserved, a 64-byte window of stack arguments copied
  // when the original is called, the return value read as rax:rdx.
  static Signature fallback();
  // Number of ctx argument slots.
  int arg_slots() const;
  std::string describe() const;  // "(i64, double, struct{16: int,sse}) -> i64"
};

// Parses the options string form: comma-separated argument types, then "->" and the
// return type. Types: i8 i16 i32 i64 u8..u64 ptr (integer), f32 f64 (sse), f80
// (long double), i128, struct forms s<size>:<parts> with parts from "i" and "s"
// per eightbyte (e.g. "s16:is"), m<size> for a struct passed in memory; "void";
// "..." for variadic; a trailing "noreturn" flag after the return type.
// Example: "i32,ptr,f64,m24 -> void"; "i64,... -> i32" (variadic).
Result<Signature> parse_signature(const std::string& text);

}  // namespace utramp::abi
