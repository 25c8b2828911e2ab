// The text patcher: batches of compare-and-write changes to live code.
//
// Protocol for one batch (the kernel's text_poke_bp, for user space):
//   0. every op's current bytes are compared with what it expects; any mismatch fails
//      the batch before anything is written;
//   1. publish each op's emulation in the trap table, write int3 over byte 0 of every op,
//      sync every core (membarrier SYNC_CORE);
//   2. write bytes 1..n-1 of every op; sync;
//   3. write byte 0 of every op; sync; withdraw the emulations.
// A thread that executes a site between 1 and 3 traps on the int3; the SIGTRAP handler
// sends it on as the new instruction would (call, jump, or fall through). A thread whose
// trap is handled after 3 finds no int3 at the site any more and re-executes it. Writes
// go through /proc/self/mem (os::write_text) and are coalesced per step, so a batch
// costs three membarriers, no protection changes, and one write per cluster of nearby
// sites, whatever its size.
//
// A batch in a process with no other thread that may run (os::thread_count() == 1: the
// agent's start-up before main) skips the int3s: steps 1-3 become one write of every
// op's whole bytes (signals blocked meanwhile) and one sync, with ops up to a page apart
// sharing a write. No thread can trap on it meanwhile: only an op whose int3 stays
// (below) gets a trap-table entry, and entries earlier batches made are withdrawn.
//
// An op marked `keep_trap` (its new bytes begin with int3) leaves the int3 in place with
// its emulation published: from then on every thread that reaches the site traps and is
// sent on as the emulation says (an entry diverted by a trap: docs/sites.md, "Entries
// diverted by int3"). A later batch that writes other bytes there withdraws it as usual;
// one with the same bytes and another emulation just publishes the new one, once the
// whole batch has been written (a batch that fails leaves the old one). (The int3s
// of probes are not so marked: the probe layer's hook handles them.)
#pragma once

#include <signal.h>
#include <ucontext.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace utramp::patch {

// How a thread that traps on a site mid-patch is sent on.
struct Emulation {
  enum class Kind : uint8_t { none, jump, call } kind = Kind::none;
  uint64_t target = 0;       // where execution continues
  uint64_t return_to = 0;    // for call: the return address pushed
  static Emulation jump_to(uint64_t t) { return {Kind::jump, t, 0}; }
  static Emulation call(uint64_t t, uint64_t ret) { return {Kind::call, t, ret}; }
};

// An op's bytes: up to kInline of them in place (a site's op is 5 or 6 bytes, an XRay
// sled's 7, a jump's 5), longer ones (a probe's region) on the heap. A batch of 1,000
// sites made 2,000 five-byte heap vectors, copied again when ops were gathered
// (docs/benchmarks.md, "Start-up"). 24 bytes: the heap pointer shares the inline bytes'
// place (a site keeps three: sites/table.hpp).
class OpBytes {
 public:
  static constexpr size_t kInline = 16;
  using value_type = uint8_t;
  using iterator = uint8_t*;
  using const_iterator = const uint8_t*;

  OpBytes() = default;
  OpBytes(std::initializer_list<uint8_t> b) { assign(b.begin(), b.end()); }
  OpBytes(std::span<const uint8_t> b) { assign(b.begin(), b.end()); }  // implicit
  OpBytes(const std::vector<uint8_t>& b) { assign(b.begin(), b.end()); }  // implicit
  template <class It>
  OpBytes(It first, It last) {
    assign(first, last);
  }
  OpBytes(const OpBytes& o) { assign(o.begin(), o.end()); }
  ~OpBytes() {
    if (cap_) delete[] heap_;
  }
  OpBytes(OpBytes&& o) noexcept { take(o); }
  OpBytes& operator=(const OpBytes& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  OpBytes& operator=(OpBytes&& o) noexcept {
    if (this != &o) take(o);
    return *this;
  }

  template <class It>
  void assign(It first, It last) {
    size_ = 0;
    append(first, last);
  }
  template <class It>
  void append(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<uint8_t>(*first));
  }
  void push_back(uint8_t b) {
    if (size_ == capacity()) grow(size_ * 2);
    data()[size_++] = b;
  }

  uint8_t* data() { return cap_ ? heap_ : inline_; }
  const uint8_t* data() const { return cap_ ? heap_ : inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() { size_ = 0; }
  uint8_t* begin() { return data(); }
  uint8_t* end() { return data() + size_; }
  const uint8_t* begin() const { return data(); }
  const uint8_t* end() const { return data() + size_; }
  uint8_t& operator[](size_t i) { return data()[i]; }
  uint8_t operator[](size_t i) const { return data()[i]; }
  operator std::span<const uint8_t>() const { return {data(), size_}; }  // implicit

  friend bool operator==(const OpBytes& a, const OpBytes& b) {
    return a.size_ == b.size_ && std::memcmp(a.data(), b.data(), a.size_) == 0;
  }
  friend bool operator==(const OpBytes& a, const std::vector<uint8_t>& b) {
    return a.size_ == b.size() && std::memcmp(a.data(), b.data(), a.size_) == 0;
  }

 private:
  size_t capacity() const { return cap_ ? cap_ : kInline; }
  void grow(size_t cap) {
    auto* h = new uint8_t[cap];
    std::memcpy(h, data(), size_);
    if (cap_) delete[] heap_;
    heap_ = h;
    cap_ = static_cast<uint32_t>(cap);
  }
  void take(OpBytes& o) noexcept {
    if (cap_) delete[] heap_;
    cap_ = o.cap_;
    size_ = o.size_;
    if (cap_) heap_ = o.heap_;
    else std::memcpy(inline_, o.inline_, size_);
    o.cap_ = 0;
    o.size_ = 0;
  }
  // cap_ 0: the bytes are inline_; else heap_ holds cap_ of them.
  union {
    uint8_t inline_[kInline];
    uint8_t* heap_;
  };
  uint32_t size_ = 0, cap_ = 0;
};

struct PatchOp {
  uint64_t addr = 0;
  OpBytes expected;     // bytes that must be there now
  OpBytes replacement;  // bytes to write (same length, one or more whole
                        // instructions, byte 0 starting the first)
  Emulation emulate;                 // the new code's effect, for trapped threads
  std::string label;                 // "symbol+0x4", for diagnostics
  bool keep_trap = false;            // the int3 of `replacement` stays, `emulate` with it
  // Instead of `label` (empty): the label made by describe(of), only for a diagnostic
  // (a batch of 1,000 sites formatted 1,000 labels nobody read).
  std::string (*describe)(const void* of) = nullptr;
  const void* of = nullptr;
  std::string name() const { return label.empty() && describe ? describe(of) : label; }
};

struct PatchStats {
  uint64_t batches = 0, ops = 0, writes = 0, syncs = 0, traps_emulated = 0, traps_restarted = 0,
           traps_forwarded = 0;
};

// Applies every op or none. Thread-safe (batches are serialised).
Result<void> apply(std::span<const PatchOp> ops);

// Installs the SIGTRAP handler now (apply() does it too). Chains to the handler the
// program had; re-installs itself if the program replaced it since.
Result<void> install_trap_handler();

// sigaction(SIGTRAP, ACT, OLD) on the program's behalf (the agent interposes it): while
// our handler is installed, ACT becomes the handler that traps not ours are passed to and
// ours stays; OLD gets the program's previous one. Without ours, the real sigaction.
Result<void> set_program_trap_action(const struct sigaction* act, struct sigaction* old);

// Gives SIGTRAP back to the program's action (the one ours passed foreign traps to, as
// the program set it since through set_program_trap_action) when ours is installed; the
// next batch installs ours again. For when nothing of utramp's can trap any more (the
// agent's detach from a running process, a forked child that is not traced).
Result<void> restore_program_trap_action();

// Consulted by the SIGTRAP handler for a trap that is not explained by a batch in
// flight, before passing it to the program's previous handler; returns true when it
// handled the trap. Async-signal-safe. The handler runs with SA_NODEFER, so a hook may
// run code that traps again (probe handlers that hit probes). probe/ installs one.
using TrapHook = bool (*)(siginfo_t* si, ucontext_t* uc);
void set_trap_hook(TrapHook hook);

PatchStats stats();

// Held across fork() (pthread_atfork, see tramp/trampoline.cpp) so that the child never
// inherits it locked by a thread it does not have.
void fork_lock();
void fork_unlock();

}  // namespace utramp::patch
