// eBPF maps in shared memory: the target's programs update them, the CLI reads them
// while the target runs and after it ends (SIGKILL included).
//
// One file holds every map of a run. The CLI creates it from the object's map specs
// (loader.hpp) and maps it; the agent in the target maps the same file and finds each
// map by index. Everything inside is addressed by offsets, so the two mappings may sit
// at different addresses.
//
//   FileHeader   (4096 bytes)  magic, version, size, map count, per-CPU slot count
//   MapHeader[n] (256 each)    spec, offsets, locks and counters of map i
//   data areas                 page-aligned, one per map (layouts below)
//
// A program gets a map as the address of its MapHeader (the lddw of a map reference);
// helpers check such an address against the registered files (map_from_addr) before
// they trust it, and get the file's base from the header's own offset.
//
// Layouts (stride = value size rounded up to 8; C = per-CPU slots, sched_getcpu() % C):
//   array          value[max_entries]
//   percpu_array   value[max_entries][C]
//   hash/lru_hash  Bucket[nb] (nb = power of two >= max_entries), Entry[max_entries]
//                  (link, LRU stamp, key), then value[max_entries] apart from them
//   percpu_hash    as hash, value[max_entries][C]
//   ringbuf        producer/consumer positions (own cache lines), then max_entries
//                  bytes of records
//   perf_event_array  max_entries rings (one per CPU index), each laid out as a ringbuf
//                  of ring_bytes; a record's first 8 bytes are its stamp (below)
//   queue/stack    QueueCtl (lock, head, tail), then max_entries + 1 value slots
//   bloom_filter   nbits bits (a power of two) of u64 words
//   lpm_trie       LpmCtl (lock, root, free list, count), then 2 * max_entries nodes
//                  (children, prefix length, flags, the key's data bytes), then
//                  value[2 * max_entries] apart from them (a node's value by its index)
//   stack_trace    StackBucket[nb] (nb = power of two >= max_entries): lock, frame
//                  count (0: empty), hash, then value_size/8 ips; a stack's id is its
//                  bucket's index
//   prog_array     ProgSlot[max_entries]: the program's index in its object + 1 (0:
//                  empty; what the CLI prints) and the agent's Executable of it (an
//                  address in the agent's mapping only: the CLI never reads it)
//
// Concurrency. Hash maps take a per-bucket spinlock (a word in the file) for lookups
// and changes, and one map-wide spinlock for the free list of preallocated entries.
// Entries are never freed, only recycled, so a value pointer a lookup returned stays
// memory of the map (as with the kernel's preallocated maps, a deleted entry may be
// reused under a program that still holds it). Array values are plain memory: programs
// update them with atomics. LRU maps stamp an entry on each lookup and update; when the
// free list is empty an update evicts the oldest of a window of entries it scans.
// Ring buffers: one spinlock serialises reservations (as the kernel's); a record's
// header carries a busy bit until submit or discard clears it (store-release, pairs
// with the consumer's load-acquire), and the consumer stops at the first busy record.
// A record never wraps: the producer pads to the ring's end with a discarded record.
// Perf event arrays: a ring per CPU index, each as a ring buffer; the record a program
// sends is stamped, under its ring's lock, from one counter per map (an acq_rel
// fetch_add), so a thread's records carry increasing stamps whichever rings they went
// to. The consumer merges the rings by stamp (MapFile::consume_perf says how it keeps
// each thread's order though rings are read one after the other).
// Queues and stacks: one spinlock per map around a circular array (the kernel's
// queue_stack_maps layout: max_entries + 1 slots, head and tail indices). Bloom
// filters take no lock: a push sets bits with an atomic or, a peek tests them.
// LPM tries: one spinlock per map around every operation, lookups included (the
// kernel's lookups are RCU readers; here a handler that interrupted its own thread's
// update finds nothing, as a hash lookup does). The trie is the kernel's: a binary
// Patricia trie whose nodes hold a prefix, with intermediate nodes (no value, not an
// entry) where two prefixes part; max_entries counts entries only, so the pool holds
// 2 * max_entries nodes. Nodes are recycled, never freed, as hash entries are.
//
// What programs may store into (MapFile::values, the regions the loader registers):
// array values, hash values and ring buffer records, never a header, bucket, entry link,
// key, lock or ring position. Until a verifier proves pointers, programs are untrusted,
// and a lock word a program could write would let one stray store hang every thread
// that takes it; the engines refuse such a store (FaultKind::bad_store) instead.
// (Record headers inside a ring are the exception: reserve hands out the bytes just
// after one. The consumer bounds every length it reads, so a corrupt header stops the
// consumer, never makes it read outside the ring.)
//
// Everything a program calls is async-signal-safe: no allocation, no system calls (the
// CPU number is read from the thread's rseq area: os/cpu_id.hpp), spinlocks held for a
// bounded walk only. And it touches only the general-purpose registers (copies,
// compares and hashes through common/gpr_mem.hpp, maps.cpp compiled with
// -mgeneral-regs-only), so that a uprobe handler that reaches it is proven so and runs
// without the vector state saved (docs/probes.md, "Vector state").
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace utramp::ebpf {

// The kernel's map type ids (enum bpf_map_type), those supported here.
enum class MapType : uint32_t {
  hash = 1,
  array = 2,
  percpu_hash = 5,
  percpu_array = 6,
  perf_event_array = 4,
  lru_hash = 9,
  queue = 22,
  stack = 23,
  ringbuf = 27,
  lpm_trie = 11,
  bloom_filter = 30,
  prog_array = 3,
  stack_trace = 7,
};
// BPF_F_NO_PREALLOC: an LPM trie must be created with it, as the kernel requires.
inline constexpr uint32_t kMapNoPrealloc = 1;
const char* map_type_name(uint32_t type);  // "hash", or "" when unknown
bool map_type_supported(uint32_t type);

// A named global variable of a data section (.data/.rodata/.bss), from the object's BTF
// (the section's DATASEC), for printing: where it is in the section's value and how to
// show it.
struct GlobalVar {
  enum class Kind : uint8_t { signed_int, unsigned_int, boolean, chars, bytes };
  std::string name;
  uint32_t offset = 0;
  uint32_t size = 0;
  Kind kind = Kind::bytes;
  uint32_t type_id = 0;  // in the object's BTF (ebpf/btf_value.hpp decodes it)
};

struct MapSpec {
  std::string name;
  uint32_t type = 0;
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t max_entries = 0;
  uint32_t flags = 0;
  uint64_t map_extra = 0;     // bloom_filter: number of hash functions (low 4 bits; 0: 5)
  // perf_event_array: bytes of each CPU index's ring (a power of two of at least a
  // page), the consumer's choice as libbpf's perf_buffer__new page count is; 0: 64 pages.
  uint32_t ring_bytes = 0;
  std::vector<uint8_t> init;  // global data (.data/.rodata): the value of entry 0
  bool global_data = false;   // .data/.rodata/.bss (not printed as a user map)
  bool readonly = false;      // .rodata: programs may not store into it
  std::vector<GlobalVar> vars;  // global data: its named variables, by offset (not in the file)
  // prog_array: the slots libbpf's `__array(values, ...)` initialiser sets; the agent
  // fills them before any program runs.
  struct ProgSlotInit {
    uint32_t slot = 0;
    uint32_t prog = 0;   // the program's index in its object
    std::string name;    // its name, for printing
  };
  std::vector<ProgSlotInit> prog_slots;
  // The object's BTF types of a key and a value (`__type(key, ...)`, `__type(value, ...)`
  // in .maps); 0 when the map gives only sizes (not in the file).
  uint32_t key_type = 0;
  uint32_t value_type = 0;
};

// Checks a spec's sizes against its type; the message names the map.
Result<void> check_map_spec(const MapSpec& s);
// Fills in what libbpf fills in before it creates a map: a perf event array's
// max_entries (0: one per possible CPU) and its 4-byte key and value sizes.
void complete_map_spec(MapSpec& s);
// Bytes of each ring of a perf event array when the spec leaves it to us (64 pages).
inline constexpr uint32_t kDefaultPerfRingBytes = 64 * 4096;

inline constexpr uint32_t kMapNameMax = 63;

// `utramp run --metrics`: the CLI adds a global data map of this name to the map file,
// one ProgStatsRecord per program of its objects, in load order (each object's programs
// in its order; a USDT program's sites share one); the agent has its programs count
// there (tramp::AttachOptions::stats_at/misses_at for fentry, fexit and fmod_ret; the
// uprobe handler for uprobes, uretprobes and USDT probes) and turns the statistics on.
inline constexpr const char* kProgStatsMap = ".progstats";
struct ProgStatsRecord {
  uint64_t run_cnt;  // runs
  uint64_t run_ns;   // time in them, in ns
  uint64_t misses;   // runs skipped (already running on the thread; a uprobe's: utramp's own call)
};

// `utramp run` with a stack trace map: the CLI adds a global data map of this name (one
// value of kObjectsBytes), where the agent keeps the executable ranges of the target's
// loaded objects (at start-up and at each loader announcement), so that the CLI
// symbolises stacks after the target has exited. The value: a sequence word (odd while
// the agent writes), the text's length, then one line per range, "LO HI BIAS PATH" (hex
// numbers; PATH as the loader names it, the program's own path for the program).
inline constexpr const char* kObjectsMap = ".objects";
inline constexpr uint32_t kObjectsBytes = 64 * 1024;
struct LoadedRange {
  uint64_t lo = 0, hi = 0;  // [lo, hi): an executable segment
  uint64_t bias = 0;        // the object's load bias: an address less it is the file's vaddr
  std::string path;
};
// Writes `ranges` into the map's value (those that fit); the reader sees whole lists only.
void write_loaded_ranges(std::span<uint8_t> value, const std::vector<LoadedRange>& ranges);
// The list the agent wrote last (empty when none, or when it could not be read whole).
std::vector<LoadedRange> read_loaded_ranges(std::span<const uint8_t> value);

struct MapHeader;  // in the file; opaque outside maps.cpp

// A snapshot of every entry: key bytes and one value per CPU slot (one for non-per-CPU
// maps), in key order for arrays, unspecified for hashes; a queue's or stack's elements
// in the order pops would give them, keyed by that position (a u32 from 0); an LPM
// trie's in get_next_key order (map_get_next_key: more specific prefixes first). Bloom
// filters and perf event arrays have no entries to show.
struct MapEntry {
  std::vector<uint8_t> key;
  std::vector<std::vector<uint8_t>> values;
};

// The map file, from either side.
//
// The CLI's side (create) owns the file but not its content: the target shares it, may
// scribble over it (a stray memset), and may die holding a lock. Everything the CLI
// reads goes through this class, which takes the layout (count, offsets, sizes, types,
// names) from the CLI's own copy made at create(), checks every index it reads from the
// file against that layout, bounds every walk, and waits for a bucket lock at most a
// few milliseconds in all per read (then reads without it: what a dead target left).
// So reading maps of a dead or hostile target ends in bounded time and never reads
// outside the file; what it reads may be garbage, as the target made it.
class MapFile {
 public:
  // CLI side: creates `path` (truncating) with a map per spec, and maps it.
  static Result<MapFile> create(const std::string& path, const std::vector<MapSpec>& specs);
  // Agent side: maps an existing file and registers it for map_from_addr().
  static Result<MapFile> attach(const std::string& path);
  MapFile() = default;
  MapFile(MapFile&&) noexcept;
  MapFile& operator=(MapFile&&) noexcept;
  ~MapFile();

  size_t count() const;
  uint32_t cpus() const;
  MapHeader* header(size_t i) const;
  // The whole data area of map i (values and, for hash maps and ring buffers, their
  // control words).
  std::span<uint8_t> data(size_t i) const;
  // The part of it programs may store into: array values, hash values (apart from the
  // buckets and entries), ring buffer records (after the positions and lock).
  std::span<uint8_t> values(size_t i) const;
  MapSpec spec(size_t i) const;

  // Reading, for the CLI (see above); also correct on the agent's side.
  std::vector<MapEntry> entries(size_t i) const;
  // Calls fn for every submitted record of ring buffer i, in order; returns how many.
  // Stops at a record still being written, or at one whose header makes no sense.
  size_t consume_ring(size_t i, const std::function<void(std::span<const uint8_t>)>& fn);
  // Calls fn(cpu index, record) for the records of perf event array i that can be given
  // without breaking any thread's order, merged over the rings by stamp; returns how
  // many. Two passes over the rings: the first notes the highest stamp submitted (M),
  // the second collects what is submitted, up to each ring's first record still being
  // written (whose stamp S is noted). Only records stamped <= M and < every such S are
  // given, each ring's in order. A thread's earlier record R was submitted before its
  // later one took its stamp, and stamps are taken by an acq_rel fetch_add, so when the
  // first pass saw a record stamped M, every record stamped below M by that time whose
  // writer finished it is visible to the second pass; one stuck behind a record still
  // being written has a stamp above that record's S (stamps grow along a ring). So no
  // record is given before an earlier one of its thread. `final` (the target has
  // ended) gives everything submitted.
  size_t consume_perf(size_t i, const std::function<void(uint32_t, std::span<const uint8_t>)>& fn,
                      bool final = false);
  uint64_t ring_dropped(size_t i) const;   // reservations refused (ring or perf ring full)
  uint64_t entry_count(size_t i) const;    // live entries of a hash map
  // Reads done without a bucket lock held by someone else all along (a target that
  // died holding it), and reads that stopped at an index outside the map.
  uint64_t unlocked_reads() const { return unlocked_reads_; }
  uint64_t corrupt_reads() const { return corrupt_reads_; }

 private:
  void release();
  const MapHeader& layout(size_t i) const;  // the CLI's copy when it created the file
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool registered_ = false;
  std::vector<MapHeader*> own_;     // create(): the headers as made (heap copies)
  std::vector<std::vector<uint64_t>> ring_pos_;  // create(): each ring's consumer position, ours
  uint32_t cpus_ = 1;
  mutable uint64_t unlocked_reads_ = 0, corrupt_reads_ = 0;
};

// ---- operations on one map (from helpers, the CLI and tests) ------------------------

// The header at `addr` if it is a map of a registered (attached) file, else null.
MapHeader* map_from_addr(uint64_t addr) noexcept;

uint32_t map_type(const MapHeader* m) noexcept;
uint32_t map_key_size(const MapHeader* m) noexcept;
uint32_t map_value_size(const MapHeader* m) noexcept;

// This CPU's value of `key` (per-CPU maps: this CPU's slot), or null.
void* map_lookup(MapHeader* m, const void* key) noexcept;
// BPF_ANY (0), BPF_NOEXIST (1), BPF_EXIST (2). Per-CPU maps: `value` is this CPU's
// value (other slots of a new entry are zero) unless `all_cpus`, where it holds C values
// of stride bytes each. Returns 0 or -errno (-E2BIG full, -EEXIST, -ENOENT, -EINVAL).
int64_t map_update(MapHeader* m, const void* key, const void* value, uint64_t flags,
                   bool all_cpus = false) noexcept;
int64_t map_delete(MapHeader* m, const void* key) noexcept;

// LPM tries (key: a u32 prefix length, then the data bytes, most significant bit
// first). lookup: the value of the longest prefix that matches the key's first
// prefixlen bits. update: -EINVAL for a prefix length beyond the data's bits or flags
// above BPF_EXIST, -ENOSPC when max_entries prefixes are stored, -EEXIST/-ENOENT as
// hash maps. delete: the exact prefix (length and bits), else -ENOENT.
// get_next_key, the kernel's order: a post-order walk of the trie, so more specific
// prefixes come before the prefixes that contain them; the first key when `key` is
// null or not in the trie; -ENOENT after the last. Other map types: -EINVAL.
int64_t map_get_next_key(MapHeader* m, const void* key, void* next) noexcept;

// Ring buffers. reserve gives record memory or null (full: counted as dropped).
void* ringbuf_reserve(MapHeader* m, uint64_t size) noexcept;
// `rec` must be what reserve returned and not yet submitted or discarded: returns false
// (doing nothing) otherwise.
bool ringbuf_commit(MapHeader* m, void* rec, bool discard) noexcept;
// The registered ring buffer whose records hold `addr`, or null.
MapHeader* ringbuf_holding(uint64_t addr) noexcept;
int64_t ringbuf_output(MapHeader* m, const void* data, uint64_t size) noexcept;

// Perf event arrays (bpf_perf_event_output). `flags` is the ring's index, or
// BPF_F_CURRENT_CPU (0xffffffff) for the calling CPU's; other bits are -EINVAL, an index
// >= max_entries -E2BIG, a full ring -ENOSPC (counted as lost). perf_reserve gives
// `size` bytes of a record (or null with *err set); perf_commit submits or discards it.
void* perf_reserve(MapHeader* m, uint64_t flags, uint64_t size, int64_t* err) noexcept;
void perf_commit(void* rec, bool discard) noexcept;
int64_t perf_output(MapHeader* m, uint64_t flags, const void* data, uint64_t size) noexcept;

// Stack trace maps (bpf_get_stackid), the kernel's stackmap: `ips` (n frames, n >= 1,
// at most value_size/8: the caller cuts) go into the bucket of their hash, whose index
// is the stack's id. The bucket already holds the same stack: its id (with
// kStackFastCmp, the same hash is enough). It holds another: -EEXIST, unless
// kStackReuseId, which replaces it. -EBUSY for a handler that interrupted its own
// thread inside an operation on the same bucket. A lookup (map_lookup, the CLI's
// entries()) gives the frames, the rest of the value zero; map_delete empties a
// bucket (-ENOENT: empty, -E2BIG: beyond the buckets).
inline constexpr uint64_t kStackSkipMask = 0xff;      // BPF_F_SKIP_FIELD_MASK
inline constexpr uint64_t kStackUser = 1ull << 8;     // BPF_F_USER_STACK
inline constexpr uint64_t kStackFastCmp = 1ull << 9;  // BPF_F_FAST_STACK_CMP
inline constexpr uint64_t kStackReuseId = 1ull << 10; // BPF_F_REUSE_STACKID
inline constexpr uint64_t kStackBuildId = 1ull << 11; // BPF_F_USER_BUILD_ID
inline constexpr uint32_t kMapStackBuildId = 1u << 5; // map_flags BPF_F_STACK_BUILD_ID
inline constexpr uint32_t kMaxStackFrames = 127;      // the kernel's perf_event_max_stack default
int64_t stack_map_put(MapHeader* m, const uint64_t* ips, uint32_t n, uint64_t flags) noexcept;

// Program arrays (bpf_tail_call). A slot holds a program of the object: `prog` its
// index among the object's programs, `exe` what runs it (this process's; null empties
// the slot). Set by the loader before any program runs (libbpf's `__array(values, ...)`
// initialisers); -E2BIG for an index beyond the map, -EINVAL for another map type.
// `exe` is stored with release, and read with acquire by tail_call_target (pairs).
class Executable;
inline constexpr uint64_t kMaxTailCalls = 33;  // the kernel's MAX_TAIL_CALL_CNT
int64_t prog_array_set(MapHeader* m, uint32_t index, uint32_t prog, const Executable* exe) noexcept;
// bpf_tail_call's lookup, in the kernel's order: `map` must be a registered prog_array
// (else null); an index (as u32) >= max_entries: null; `*count` tail calls already made
// by this invocation >= kMaxTailCalls: null, counted in the map (ring_dropped()); else
// ++*count and the slot's program, null when empty. Async-signal-safe, lock-free.
const Executable* tail_call_target(uint64_t map, uint64_t index, uint64_t* count) noexcept;

// Queues, stacks (value_size bytes per element) and bloom filters. push: flags BPF_ANY
// or BPF_EXIST (queue/stack: when full, drop the oldest element to make room; without
// it a full map is -E2BIG); bloom filters take BPF_ANY only. pop: the head (queue: the
// oldest, stack: the newest) into `value`, -ENOENT when empty (bloom: -EOPNOTSUPP).
// peek: as pop without removing; a bloom filter's peek tests `value`: 0 if it may have
// been pushed, -ENOENT if it never was. -EBUSY for a handler that interrupted its own
// thread inside an operation on the same map.
int64_t map_push(MapHeader* m, const void* value, uint64_t flags) noexcept;
int64_t map_pop(MapHeader* m, void* value) noexcept;
int64_t map_peek(MapHeader* m, void* value) noexcept;

}  // namespace utramp::ebpf
