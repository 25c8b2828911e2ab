// Generated code for trampolines: the permanent per-site stub and the images.
//
// How a call reaches the programs (all entries by jmp, so the caller's call and the
// original's ret stay paired for the return-stack predictor):
//
//   site:  jmp stub                      (5 bytes over the site's NOP)
//   stub:  mov r11, fs:[block]           ; this thread's block (tramp/threads.hpp)
//          test r11, r11 ; jz slow       ; none yet: first entry of this thread
//          inc dword [r11 + counters + 4*S]  ; S: this site's counter slot
//   hop:   jmp image | pass              ; the one instruction retargeted per change
//   pass:  mov r11, fs:[block]
//          dec dword [r11 + counters + 4*S]
//   body:  jmp original                  ; site+5, or the relocated prologue below
//   ool:   <prologue relocated>; jmp site+len   (relocated-prologue sites only)
//   slow:  save argument registers, call utramp_register_thread, restore,
//          jmp stub if the pointer is set now, else jmp body: untraced this once (no
//          memory for the block; the thread tries again at its next entry)
//   exit:  dec dword [r11]; ret          (images holding their own counter: r11 is its
//                                         address, taken by the image)
//
// r11 is free at a function's entry and at its return (the ABI passes nothing in it),
// and so wherever the stub runs; the images load the pointer into r11 too, where it is
// free (their entry, after the arguments are saved, their exit).
//
// An mcount site (-pg without -mfentry) is the profiling call, reached with the
// function's frame already set up; its stub first undoes that frame, so that what
// follows sees the function's entry state (return address at [rsp], arguments in their
// registers, the caller's rbp and callee-saved registers), and runs the code before the
// call again as its relocated prologue:
//
//   undo:  mov REG, [rbp + SLOT]   ; each register pushed after mov rbp, rsp
//          leave                   ; rsp, rbp as at the entry
//   stub:  ...                     ; as above
//   ool:   <entry .. the call relocated>; jmp call+len   (mcount is not called)
//
// Keeping every register (StubSpec/ImageSpec::preserve_all). The ABI lets a function
// change rax, rcx, rdx, rsi, rdi, r8-r11, the flags, the vector registers and the x87
// and MXCSR status, and what utramp runs around a call changes them freely. That is
// invisible to callers that rely on the ABI alone, but not to callers compiled with
// gcc's interprocedural register allocation (-fipa-ra, on from -O2): when gcc knows
// what a callee in the same translation unit clobbers, its callers keep values in the
// other call-clobbered registers across the call. gcc turns that off for translation
// units built with -pg or -fpatchable-function-entry (toplev.cc: "Do not use IPA
// optimizations for register allocation if profiler is active or patchable function
// entries are inserted"), so functions with those sites need nothing more; a function
// reached without a compiler site (sites::SiteKind::prologue) may have such callers.
// Its stub and images then keep every general register, and the extended state
// (arch/xstate.hpp: x87, MXCSR, every vector and mask register) around everything that
// calls out; the flags are not kept: gcc counts them (a fixed register) and the x87
// stack as clobbered by every call (final.cc: collect_fn_hard_reg_usage), and clang
// has no interprocedural register allocation by default. Such a stub's `slow` saves
// everything, its exit keeps r11 (the image pushes it before jumping there), and where
// it loads the block pointer it keeps r11 below the stack pointer meanwhile ([rsp-8]:
// free at the function's entry, where rsp points at the return address; the kernel puts
// a signal frame below the red zone); its images do the same at their entry:
//
//   stub:  mov [rsp-8], r11 ; mov r11, fs:[block] ; test r11, r11 ; jz slow
//          inc dword [r11 + counters + 4*S] ; mov r11, [rsp-8]
//   pass:  mov [rsp-8], r11 ; mov r11, fs:[block]
//          dec dword [r11 + counters + 4*S] ; mov r11, [rsp-8]
//   slow:  mov r11, [rsp-8] ; ...
//   exit:  dec dword [r11]; pop r11; ret
//
// The stub and its counter make reclamation exact without stopping threads: a thread
// that may still jump to an old image holds S from before it reads the hop until it
// leaves the image (fentry-only images) or until the image has taken its own counter
// (images that call the original, where a thread may sit for a long time).
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.hpp"
#include "abi/signature.hpp"
#include "arch/arch.hpp"
#include "arch/xstate.hpp"

namespace utramp::arch {

// This thread's block (tramp/threads.hpp) is reached through a pointer at a fixed
// offset from the thread pointer (initial-exec TLS), null until the thread registers.
struct ThreadLayout {
  int64_t block;     // fs-relative offset of the thread's block pointer (u64)
  int32_t counters;  // offset of counters[0] in the block (uint32 each)
  int32_t active;    // offset of the program guards in the block (uint64 each: 0, or
                     // the stack pointer of the run that holds it)
  bool operator==(const ThreadLayout&) const = default;
};

struct StubSpec {
  uint64_t site;          // the site's address (the stub's hop returns nowhere: jmp)
  uint64_t original;      // where the body continues: site + 5 for compiler sites
  std::vector<uint8_t> prologue;  // relocated-prologue sites: the bytes to move
  uint64_t prologue_from = 0;     // where they are (0: at `site`)
  uint64_t resume = 0;            // where the moved bytes continue (0: right after them)
  bool undo_frame = false;        // mcount sites: the stub starts by undoing the frame
  FrameUndo frame;                // (what to put back)
  uint32_t counter_slot;
  ThreadLayout tls;
  uint64_t register_fn;   // utramp_register_thread
  bool preserve_all = false;  // see the note on keeping every register above
  XStateSave xstate;          // how (preserve_all only)
};

struct StubCode {
  std::vector<uint8_t> code;
  uint32_t hop = 0;       // offset of the 5-byte jmp the patcher retargets
  uint32_t pass = 0;      // offset of the pass-through (hop's target with no image)
  uint32_t original = 0;  // offset of the relocated prologue, or 0 when none
  uint32_t exit = 0;      // offset of the shared exit: dec dword [r11]; ret
                          // (preserve_all: ...; pop r11; ret)
};

Result<StubCode> emit_stub(const StubSpec& spec, uint64_t base);

struct ImageProg {
  uint64_t fn;            // uint64_t fn(uint64_t* ctx)
  uint32_t guard;         // program guard slot
  uint64_t cookie;
  uint64_t misses;        // address of the program's miss counter (uint64_t)
  uint64_t stats;         // address of its stats record, 0 when stats are off
};

// A tracer's hooks (ftrace/graph_state.hpp): called around the call with rdi = the
// function, rsi = the image's frame. `entry`/`exit` keep every register but rax and
// return non-zero when the general code must run: then the image calls `entry_general`/
// `exit_general`, which keep every register. No exit: the tracer records entries only.
//
// `inline_path`, when set, has the images do the common case of the hooks themselves
// (ftrace/graph_fast.cpp is the reference: same checks, same ring protocol as
// trace::Producer::put_fast/complete_leaf), and call the hooks only when it does not
// apply. TracerInline is that protocol's data as the emitted code addresses it: byte
// offsets and values, all filled in by ftrace::detail::inline_layout() from the C++
// types (offsetof, sizeof), where static_asserts pin the widths and shifts below. No
// offset of these structures is written anywhere else.
struct TracerInline {
  // fs-relative offsets of the thread's state pointer (u64) and of its "inside the
  // tracer" word (u64: the holder's rsp).
  int64_t tls_state = 0;
  int64_t tls_in_tracer = 0;
  // The state (ftrace::detail::ThreadTrace): path (u8; `path_fast` allows the fast
  // path), depth (u32: frames on the stack), overflow (u64), the ring's producer, and
  // the shadow stack (frame_size bytes each).
  int32_t path = 0, depth = 0, overflow = 0, producer = 0, stack = 0;
  uint8_t path_fast = 0;
  // One shadow-stack frame (ftrace::detail::Frame): sp, func, time (u64), flags (u8;
  // `written` in an ordinary frame).
  int32_t frame_size = 0, f_sp = 0, f_func = 0, f_time = 0, f_flags = 0;
  uint8_t written = 0;
  // A producer (trace::Producer): control page, ring, mask, tail seen (u64 each); and
  // its control page (trace::Control): head, pending (u64), busy, staged (u32).
  int32_t p_ctl = 0, p_ring = 0, p_mask = 0, p_tail_seen = 0;
  int32_t c_head = 0, c_busy = 0, c_pending = 0, c_staged = 0;
  // An event record (trace::Event), 1 << event_shift bytes: time, addr, data (u64), and
  // a fourth word holding depth (u16) in its low bits, the type (u8) at bit
  // `type_shift` (byte e_type of the record), then flags and aux, both 0 here. The
  // emitted code writes the fourth word whole: depth | type << type_shift.
  int32_t e_time = 0, e_addr = 0, e_data = 0, e_word3 = 0, e_type = 0;
  uint8_t event_shift = 0, type_shift = 0;
  uint8_t type_entry = 0, type_exit = 0, type_leaf = 0;
  uint32_t depth_limit = 0;  // depth >= this: the hooks decide (-D, the stack's size)
  bool operator==(const TracerInline&) const = default;
};

struct TracerHooks {
  uint64_t entry = 0, exit = 0;
  uint64_t entry_general = 0, exit_general = 0;
  bool inline_path = false;  // see TracerInline
  TracerInline fast;
  bool operator==(const TracerHooks&) const = default;
};

struct ImageSpec {
  const abi::Signature* sig = nullptr;
  uint64_t func = 0;          // ctx[-2]
  uint64_t original = 0;      // what the image calls to run the body
  uint64_t pass = 0;          // the stub's pass-through (fentry-only images end there)
  bool calls_original = false;  // fexit or fmod_ret programs present
  std::vector<ImageProg> fentry, fmod_ret, fexit;
  ThreadLayout tls;
  uint32_t site_slot = 0;     // S
  uint32_t image_slot = 0;    // this image's own counter (calls_original only)
  uint64_t exit_fn = 0;       // the stub's exit (calls_original images leave through it)
  uint64_t stats_begin = 0;   // uint64_t (*)(void): a timestamp
  uint64_t stats_end = 0;     // void (*)(uint64_t stats, uint64_t begin)
  uint64_t guard_left = 0;    // uint64_t (*)(uint64_t holder, uint64_t frame): see tramp/threads.hpp
  TracerHooks tracer;         // entry == 0: no tracer on this function
  bool store_caller = false;  // ctx[-4] = the caller's return address (a program reads it)
  bool store_frame = false;   // ctx[-5] = the entry stack pointer (a program takes stacks)
  // Keep every register, as seen by the function and by its caller, around everything
  // the image runs (see the note above). The stub must have been made with it too:
  // `exit_fn` is then the exit that keeps r11.
  bool preserve_all = false;
  XStateSave xstate;          // how (preserve_all only)
};

struct ImageCode {
  std::vector<uint8_t> code;
  std::vector<uint32_t> exits;  // offsets of each `leave` (for unwind information)
  uint32_t exit_len = 0;        // bytes from each `leave` to the end of its exit
  uint32_t exit_push = 0;       // bytes from each `leave` to the end of a `push r11` in
                                // its exit (preserve_all images), 0 when none
  // Offsets of each program's call, in the order the image runs them (fentry, fmod_ret,
  // fexit): a `call rel32`, or the `mov r11, imm64` of a far call. What the emitter says:
  // the trampoline checks it against the bytes before it relies on it.
  std::vector<uint32_t> prog_calls;
};

Result<ImageCode> emit_image(const ImageSpec& spec, uint64_t base);
// An upper bound of the image's size, for allocating before emitting at the real base.
size_t image_size_bound(const ImageSpec& spec);


}  // namespace utramp::arch
