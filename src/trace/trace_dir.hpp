// The trace directory (docs/trace-format.md): written by `utramp record` while the
// target runs, read back — streaming, never whole — by replay, report, dump and hist.
//
//   DIR/info.json                 format version, command, time base, how the target
//                                 ended, per-thread event and loss counts
//   DIR/events-PID-TID.bin        a 32-byte file header (EventFileHeader), then that
//                                 thread's Events in order (32 bytes each)
//   DIR/functions-PID.tsv         "address<TAB>size<TAB>name<TAB>object" of every
//                                 function the agent traced in process PID (in the
//                                 program it ran last)
//   DIR/functions-PID-N.tsv       the same for the program it ran before exec number
//                                 N+1 (--follow-exec)
//   DIR/process-PID.json          parent pid (fork), the programs it ran, start/end
//   DIR/maps-PID.txt              /proc/PID/maps as the agent last saw it (start, dlopen)
//   DIR/maps-PID-N.txt            the same for the program before exec number N+1
// and, from `utramp record`, agent.json, agent-PID.log and, while it records,
// reserve.tmp (TraceWriter::create() removes these too, and refuses to empty a directory
// holding anything else).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "trace/event.hpp"

namespace utramp::trace {

struct ThreadInfo {
  uint32_t pid = 0, tid = 0;
  uint64_t events = 0, lost = 0;  // events saved; events lost in its ring
  uint64_t unsaved = 0;           // recorded but not saved: the trace was cut there
  std::string overwritten;        // the program overwrote this thread's ring: what was found
};

struct TraceInfo {
  uint32_t version = kFormatVersion;
  std::vector<std::string> command;
  std::string binary;             // the ELF that ran (a script's: its interpreter)
  std::string build_id;           // its GNU build-id in hex, "" when it has none
  std::string date;               // when the recording started, UTC, ISO 8601
  std::string tracer = "function_graph";  // or "function": entries only, data = caller
  std::string time_unit = "ns";   // "ns" or "tsc"
  double ticks_per_ns = 1.0;      // for "tsc"
  uint64_t start_time = 0;        // in time_unit
  std::string buffer_mode = "discard";
  std::string compression = "none";  // of the events files: "none" or "zstd" (record --compress)
  std::string exit;               // "exited 0", "killed by SIGSEGV", ...
  int exit_code = 0;
  uint64_t unclaimed_threads = 0; // threads that got no buffer
  std::vector<ThreadInfo> threads;
  // "recording" from the start of a recording (what one whose recorder was killed
  // keeps), "complete" when it finished, "cut" when it finished with events it could not
  // save: the first failure (a full disk) is cut_reason, at cut_time (time_unit).
  std::string state = "complete";
  uint32_t recorder_pid = 0;      // the `utramp record` that wrote it
  std::string cut_reason;
  uint64_t cut_time = 0;
  // Processes still running when the recording ended (record waits for a traced
  // process's children only so long: --wait-children): their events stop there.
  std::vector<uint32_t> still_running;
  // What the program overwrote in the rings that belongs to no thread the recorder knew
  // (their header, a ring before its owner was known): what was found.
  std::vector<std::string> rings_overwritten;
};

// The first 32 bytes of every events-PID-TID.bin, never compressed.
struct EventFileHeader {
  char magic[8];           // "UTRTHR01"
  uint32_t version;        // kFormatVersion
  uint32_t record_size;    // sizeof(Event)
  uint32_t pid, tid;
  uint32_t flags;          // kEventFile* (0 in version 2, where flags and reserved were
  uint32_t reserved;       // one u64 "reserved")
};
static_assert(sizeof(EventFileHeader) == 32);
inline constexpr char kEventFileMagic[8] = {'U', 'T', 'R', 'T', 'H', 'R', '0', '1'};
// flags: the records after the header are zstd frames (zstd_frames.hpp), not plain.
inline constexpr uint32_t kEventFileZstd = 1;

// How `record` writes the events files (record --compress).
enum class Compression { none, zstd };

struct Function {
  uint64_t addr = 0, size = 0;
  std::string name, object;
};

// One program a process ran under the agent (process-PID.json "images").
struct ProgramImage {
  uint64_t time = 0;                 // when the agent started in it, in the trace's time_unit
  std::vector<std::string> command;  // its argv
};

// process-PID.json: one traced process.
struct ProcessInfo {
  uint32_t pid = 0;
  uint32_t parent = 0;               // the traced process that started it, 0 for the one
                                     // `record` started
  std::vector<std::string> command;  // argv (after exec, the new one)
  uint64_t start_time = 0, end_time = 0;  // in the trace's time_unit, 0 when unknown
  std::string exit;                  // "exited 0", "killed by SIGKILL", "" when unknown
  // Every program it ran under the agent, in time order (--follow-exec: more than one).
  // Image N < last has its functions in functions-PID-N.tsv, the last in
  // functions-PID.tsv. Empty in traces written before programs were kept: one.
  std::vector<ProgramImage> images;
};

// How a process ended, from its wait status (waitpid(2)), as info.json and
// process-PID.json say it: "exited 3", "killed by SIGSEGV (core dumped)".
std::string exit_description(int wait_status);

// ---- The files of one traced process ---------------------------------------------
// The agent writes them inside each traced process: functions and maps after start-up,
// after each dlopen and in a forked child; process at start-up and fork, and again
// when the process calls exit. `record` completes the process file of the process it
// started with how that one ended, which only it knows. Each file is written whole (to
// NAME.tmp, then renamed, so that a reader never sees half of one), mode 0600, never
// through a symbolic link.

//
// Each comes in two forms: by the directory's path, and relative to DIRFD, a descriptor
// of the directory (O_PATH is enough) that the caller checked (the agent: DIR is then
// only shown in messages; agent/trust.hpp).

// functions-PID.tsv: the functions traced in process PID, symbols as in the object. A
// function whose name or object path holds a TAB or newline cannot be written: it is
// left out, and the error says which (the others are written).
Result<void> write_functions_file(const std::string& dir, uint32_t pid,
                                  std::span<const Function> functions);
Result<void> write_functions_file(int dirfd, const std::string& dir, uint32_t pid,
                                  std::span<const Function> functions);
// process-PID.json.
Result<void> write_process_file(const std::string& dir, const ProcessInfo& process);
Result<void> write_process_file(int dirfd, const std::string& dir, const ProcessInfo& process);
// process-PID.json as written; Errc::not_found when there is none, bad_format when it
// is not one (the message says what is wrong). Never read through a symbolic link.
Result<ProcessInfo> read_process_file(const std::string& dir, uint32_t pid);
Result<ProcessInfo> read_process_file(int dirfd, const std::string& dir, uint32_t pid);
// maps-PID.txt: the text of /proc/PID/maps.
Result<void> write_maps_file(const std::string& dir, uint32_t pid, std::string_view maps);
Result<void> write_maps_file(int dirfd, const std::string& dir, uint32_t pid, std::string_view maps);
// At an exec under --follow-exec, before the new program writes its own: the files of
// the program that exec'd (functions-PID.tsv, maps-PID.txt) become image INDEX's
// (functions-PID-INDEX.tsv, maps-PID-INDEX.txt). A file that is not there is no error.
Result<void> keep_image_files(int dirfd, const std::string& dir, uint32_t pid, uint32_t index);

// The writer of a recording (`record`). It owns DIR while it lives:
//   - DIR is created 0700, or is an existing trace directory of the user's (never one
//     owned by someone else, never reached through a symbolic link another user owns),
//     made 0700; every file in it is created 0600, relative to DIR's descriptor, never
//     through a symbolic link and never over a file it did not remove first;
//   - DIR is locked (flock) against a second writer, which is refused before it removes
//     anything: TraceReader tells a recording in progress from one whose recorder died;
//   - space for the final info.json is kept (reserve.tmp, 1 MiB) from the start and
//     given back by finish(), so that a disk that fills still gets a readable trace.
// A write that fails (a full disk) cuts the trace there: every events file keeps its
// whole records, later events are counted as unsaved (ThreadInfo::unsaved) and not
// written, and finish() says where and why (TraceInfo::state "cut").
//
// With Compression::zstd, each thread's events are kept in memory until they fill a frame
// (kZstdFrameEvents), or until flush(), and written as one zstd frame: a recorder that
// dies loses what it held (flush() now and then bounds that), a disk that fills keeps
// whole frames.
class TraceWriter {
 public:
  // Creates or empties DIR.
  static Result<TraceWriter> create(const std::string& dir, Compression compression = Compression::none);
  TraceWriter() = default;
  TraceWriter(TraceWriter&&) noexcept;
  TraceWriter& operator=(TraceWriter&&) noexcept;
  ~TraceWriter();
  // Appends events of one thread (files opened on first use, kept open). The error of
  // the write that cut the trace is returned once; after the cut, events are counted
  // as unsaved and not written.
  Result<void> append(uint32_t pid, uint32_t tid, std::span<const Event> events);
  void add_lost(uint32_t pid, uint32_t tid, uint64_t n);
  // Writes info.json (early, to leave a readable trace if we die). An empty info.threads
  // is filled from what append()/add_lost() saw.
  Result<void> write_info(const TraceInfo& info);
  // The end of the recording: gives back the space kept for it, then writes info.json
  // with the state ("complete", or "cut" with where and why) and the threads' counts
  // (info.threads as given, with the counts of the threads this writer saw).
  Result<void> finish(const TraceInfo& info);
  // Where the trace was cut (empty reason: it was not).
  const std::string& cut_reason() const;
  uint64_t cut_time() const;
  // Writes what is held in memory (compressed files: the frames not yet full).
  Result<void> flush();
  // Compressed files: while set, frames are stored (zstd frames of raw blocks, read as
  // any other: ZstdFrameWriter::store()) instead of compressed, for a recorder whose
  // compression falls behind the program (WriteQueue). Counted by stored_frames().
  void set_store_frames(bool store);
  uint64_t stored_frames() const;
  // Flushes and closes every events file (the destructor does too).
  Result<void> close();
  const std::string& dir() const;
  std::vector<ThreadInfo> threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Symbols of one program of a process: address -> function (from functions-PID.tsv or
// functions-PID-N.tsv).
class SymbolTable {
 public:
  void add(Function f);
  const Function* find(uint64_t addr) const;  // the function containing addr
  std::string name(uint64_t addr) const;      // "name" or "0xADDR"
  size_t size() const { return by_addr_.size(); }
 private:
  std::map<uint64_t, Function> by_addr_;
};

// One thread's events, read in chunks.
class EventStream {
 public:
  virtual ~EventStream() = default;
  virtual uint32_t pid() const = 0;
  virtual uint32_t tid() const = 0;
  // The next event, or nullopt at the end (a truncated last record is reported through
  // warnings(), not returned).
  virtual std::optional<Event> next() = 0;
};

class TraceReader {
 public:
  // Opens DIR; a missing or corrupt info.json is a warning when events can still be
  // read (replay shows what it can), an error when nothing can.
  static Result<TraceReader> open(const std::string& dir);
  TraceReader() = default;
  TraceReader(TraceReader&&) noexcept;
  TraceReader& operator=(TraceReader&&) noexcept;
  ~TraceReader();

  const TraceInfo& info() const;
  const std::vector<std::string>& warnings() const;
  std::vector<std::pair<uint32_t, uint32_t>> threads() const;  // (pid, tid)
  std::unique_ptr<EventStream> stream(uint32_t pid, uint32_t tid) const;
  // Every thread's events merged by time (ties: thread order), streaming. `arg` and
  // `string` events stay right behind the event they belong to.
  std::unique_ptr<EventStream> merged() const;  // pid()/tid() of the last event
  // The functions of the program process PID ran at TIME (in the trace's time_unit;
  // the default: the last it ran). A forked child without a file of its own has its
  // parent's program of when it forked.
  const SymbolTable& symbols(uint32_t pid, uint64_t time = UINT64_MAX) const;
  double to_ns(uint64_t ticks) const;           // durations in ns
  const std::string& dir() const;
  // process-PID.json of every process that has one, by pid.
  const std::map<uint32_t, ProcessInfo>& processes() const;
  // Events stored for a thread (whole records in its file).
  uint64_t event_count(uint32_t pid, uint32_t tid) const;
  // Whether a thread's file ends with part of a record (the recording was cut short
  // while writing it: what followed is lost).
  bool truncated(uint32_t pid, uint32_t tid) const;
  // The function around a code address that is not a traced function's (a caller in a
  // library, or a function -F left out): from maps-PID.txt (the process's mappings as
  // the agent saw them) and the symbol tables of the mapped files, read now; "" when
  // unknown (no maps file, a file that changed or is gone, no symbol there).
  // TIME chooses the program, as for symbols().
  std::string object_symbol(uint32_t pid, uint64_t addr, uint64_t time = UINT64_MAX) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace utramp::trace
