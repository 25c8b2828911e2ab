// Trace events: what the tracers write into per-thread ring buffers and what a trace
// directory stores (docs/trace-format.md).
#pragma once

#include <cstdint>

namespace utramp::trace {

// 2: `leaf` events (an entry and its exit in one record); 3: `context` events; 4: events
// files may be zstd frames (the header's flags say so; a version-3 reader would take them
// for records).
inline constexpr uint32_t kFormatVersion = 4;

enum class EventType : uint8_t {
  none = 0,
  entry = 1,         // a traced function was entered: addr = function, data = caller
  exit = 2,          // it returned: addr = function, data = return value (when captured)
  exit_unwound = 3,  // a C++ exception (or forced unwind) went through its frame
  exit_longjmp = 4,  // a longjmp went over its frame (detected at the next event)
  arg = 5,           // an argument captured for the preceding entry: aux = index,
                     // flags = ValueFormat
  string = 6,        // bytes of the C string of the arg/exit event before it: 16 per
                     // event in addr and data (time: the call's); aux = total length
                     // << 8 | chunk index; flags bit 0: the pointer was unreadable
  lost = 7,          // `data` events were lost here (dropped by a full ring in discard
                     // mode, overwritten in overwrite mode: the consumer inserts those)
  fork = 8,          // this process forked: data = child pid
  depth_overrun = 9, // calls deeper than the depth limit were not recorded: data = count
  leaf = 10,         // an entry and its exit, no event between them: time = the entry's,
                     // data = the exit's time (readers see an entry and an exit)
  context = 11,      // the thread switched execution stacks (swapcontext): addr = the
                     // name the stack left is kept under, data = the name of the stack
                     // it runs on now, depth = that stack's open calls; flags bit 0:
                     // the stack left could not be kept (too many), its calls end here
};

// Value formats for arg/exit data (aux low byte).
// How an arg or exit event's `data` is shown (docs/trace-format.md): integer signed,
// uinteger unsigned, pointer in hex, dbl and flt the IEEE bits of a double and of a float
// (in the low half), character one byte, string a pointer followed by string events.
enum class ValueFormat : uint8_t {
  none = 0, integer = 1, pointer = 2, dbl = 3, string = 4, uinteger = 5, character = 6, flt = 7
};

// 32 bytes, naturally aligned; written by the traced thread, read by the CLI.
struct Event {
  uint64_t time;   // TSC ticks or ns (the trace's info.json says which and the rate)
  uint64_t addr;   // function address in the traced process
  uint64_t data;   // see EventType
  uint16_t depth;  // call depth on this thread (entry: of the callee)
  uint8_t type;    // EventType
  uint8_t flags;   // ValueFormat of `data` for exit/arg events
  uint32_t aux;    // arg: index (bits 0..7); string: length << 8 | chunk index
};
static_assert(sizeof(Event) == 32);

}  // namespace utramp::trace
