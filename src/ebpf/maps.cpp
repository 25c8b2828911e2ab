#include "ebpf/maps.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/gpr_mem.hpp"
#include "os/cpu_id.hpp"

namespace utramp::ebpf {

namespace {

constexpr uint64_t kFileMagic = 0x314d504642525455ull;  // "UTRBPFM1"
constexpr uint32_t kMapMagic = 0x4d415042;              // "BPAM"
constexpr uint32_t kVersion = 6;  // 3: perf event arrays, queues, stacks, bloom filters; 4: LPM tries; 5: prog arrays; 6: stack traces
constexpr size_t kPage = 4096;
constexpr uint32_t kBusy = 1u << 31, kDiscard = 1u << 30;
constexpr uint32_t kLruWindow = 32;

struct FileHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t nmaps;
  uint64_t size;
  uint32_t cpus;
  uint32_t pad;
};

}  // namespace

struct MapHeader {
  uint32_t magic;
  uint32_t type;
  uint32_t key_size, value_size, max_entries, flags;
  uint32_t stride;       // value size rounded up to 8
  uint32_t cpus;         // per-CPU slots (1 for other maps)
  uint64_t self_off;     // this header's offset in the file
  uint64_t data_off, data_size;
  uint64_t values_off, values_size;  // what programs may store into (MapFile::values)
  uint32_t nbuckets;     // hash: power of two
  uint32_t entry_size;   // hash: Entry + key (rounded)
  uint8_t global_data, readonly, pad[2];
  uint32_t ring_bytes;   // perf_event_array: bytes of records of each ring
  uint64_t nbits;        // bloom_filter: bits (a power of two)
  uint32_t nhash;        // bloom_filter: hash functions
  uint32_t pad2;
  char name[kMapNameMax + 1];
  // Runtime state, in the file.
  alignas(64) uint32_t free_lock;
  uint32_t free_head;    // entry index + 1, 0: none
  uint64_t count;        // live entries (hash)
  uint64_t clock;        // LRU stamps
  uint64_t lru_hand;
  uint64_t dropped;      // ringbuf, perf_event_array: records refused (full); prog_array:
                         // tail calls refused at kMaxTailCalls
  uint64_t seq;          // perf_event_array: the last record stamp given
};
static_assert(sizeof(MapHeader) <= 256);
constexpr size_t kHeaderStride = 256;

namespace {

// Hash layout. A bucket's lock is a sequence count (a seqlock): odd while held, and one
// more when released, so that a lookup can walk the bucket without taking it and know
// afterwards whether a writer changed anything meanwhile (map_lookup).
struct Bucket {
  uint32_t lock;  // sequence: odd held, even free
  uint32_t head;  // entry index + 1
};
struct Entry {
  uint32_t next;  // entry index + 1
  uint32_t used;
  uint64_t stamp;
  // key (rounded up to 8); the entry's `cpus` values are in the value area
};
// Ringbuf layout.
struct RingCtl {
  alignas(64) uint64_t consumer;
  alignas(64) uint64_t producer;
  uint32_t lock;
};
constexpr size_t kRingCtl = 192;
static_assert(sizeof(RingCtl) <= kRingCtl);
// A queue's or stack's control words; the max_entries + 1 value slots follow (one
// always empty: head == tail is empty, head + 1 == tail full). push writes at head;
// a queue pops at tail (the oldest), a stack at head - 1 (the newest).
struct QueueCtl {
  uint32_t lock;
  uint32_t pad;
  uint32_t head, tail;
};
constexpr size_t kQueueCtl = 64;
static_assert(sizeof(QueueCtl) <= kQueueCtl);
// A program array's slot (prog_array_set).
struct ProgSlot {
  uint32_t prog;  // the program's index in its object + 1; 0: empty
  uint32_t pad;
  uint64_t exe;   // const Executable* in the agent's address space
};


// A stack trace map's bucket; value_size/8 ips follow.
struct StackBucket {
  uint32_t lock;
  uint32_t nr;    // frames held, 0: empty
  uint32_t hash;
  uint32_t pad;
};

size_t round8(size_t v) { return (v + 7) & ~size_t{7}; }
size_t round_page(size_t v) { return (v + kPage - 1) & ~(kPage - 1); }

template <class T>
std::atomic_ref<T> aref(T& v) {
  return std::atomic_ref<T>(v);
}

// Map locks and the thread that holds them. A program may run in a signal handler that
// interrupted its own thread inside a map operation, holding a bucket, free-list or ring
// lock: waiting for that lock there would never end. As the kernel's per-CPU map_locked
// counters make such a nested update fail with -EBUSY, an operation that needs a lock
// its own thread holds fails: -EBUSY for updates and deletes, no value for lookups, a
// refused reservation for ring buffers. Each thread keeps the locks it holds or is
// taking as a stack (a handler's are above and gone before it returns); a lock is
// pushed before it is taken and popped after it is released, so a handler that comes in
// between sees it as its thread's (and fails, harmlessly) rather than waiting for it.
constexpr int kMaxHeld = 8;
__attribute__((tls_model("initial-exec"))) thread_local uint32_t* t_held[kMaxHeld];
__attribute__((tls_model("initial-exec"))) thread_local int t_nheld = 0;

// One attempt at lock word w: a plain lock (0 free, 1 held), or with kSeq a hash
// bucket's sequence (Bucket::lock: odd held, one more at each take and release, so that
// a lookup can tell whether a writer came by: map_lookup).
template <bool kSeq>
bool try_take(uint32_t& w) noexcept {
  auto a = aref(w);
  uint32_t v = a.load(std::memory_order_relaxed);
  if constexpr (kSeq)
    return !(v & 1) && a.compare_exchange_weak(v, v + 1, std::memory_order_acquire, std::memory_order_relaxed);
  else
    return v == 0 && a.exchange(1, std::memory_order_acquire) == 0;
}
template <bool kSeq>
void release(uint32_t& w) noexcept {
  auto a = aref(w);
  a.store(kSeq ? a.load(std::memory_order_relaxed) + 1 : 0, std::memory_order_release);
}

template <bool kSeq = false>
bool lock(uint32_t& w) noexcept {
  for (int i = 0; i < t_nheld; ++i)
    if (t_held[i] == &w) return false;  // this thread's: a handler re-entered a map operation
  if (t_nheld == kMaxHeld) return false;  // nested deeper than any operation takes locks
  t_held[t_nheld++] = &w;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // pushed before the lock is taken
  while (!try_take<kSeq>(w)) __builtin_ia32_pause();
  return true;
}
template <bool kSeq = false>
void unlock(uint32_t& w) noexcept {
  release<kSeq>(w);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // released before it is popped
  --t_nheld;  // LIFO: operations release in the reverse order they take
}

template <bool kSeq>
struct BasicGuard {
  uint32_t& w;
  const bool held;
  explicit BasicGuard(uint32_t& x) : w(x), held(lock<kSeq>(x)) {}
  ~BasicGuard() {
    if (held) unlock<kSeq>(w);
  }
  explicit operator bool() const { return held; }
};
using Guard = BasicGuard<false>;
using BucketGuard = BasicGuard<true>;  // a hash bucket's

uint8_t* file_base(const MapHeader* m) {
  return const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(m)) - m->self_off;
}
uint8_t* data_of(const MapHeader* m) { return file_base(m) + m->data_off; }
bool is_hash(uint32_t t) {
  return t == uint32_t(MapType::hash) || t == uint32_t(MapType::percpu_hash) ||
         t == uint32_t(MapType::lru_hash);
}
bool is_queue(uint32_t t) { return t == uint32_t(MapType::queue) || t == uint32_t(MapType::stack); }
bool is_percpu(uint32_t t) {
  return t == uint32_t(MapType::percpu_hash) || t == uint32_t(MapType::percpu_array);
}
using os::current_cpu;
uint32_t this_cpu(const MapHeader* m) { return current_cpu() % m->cpus; }

Bucket* buckets(const MapHeader* m) { return reinterpret_cast<Bucket*>(data_of(m)); }
Entry* entry(const MapHeader* m, uint32_t idx) {
  return reinterpret_cast<Entry*>(data_of(m) + m->nbuckets * sizeof(Bucket) +
                                  size_t(idx) * m->entry_size);
}
uint8_t* entry_key(Entry* e) { return reinterpret_cast<uint8_t*>(e + 1); }
// The value of the entry whose index + 1 is `at` (by the index: no division by the
// entry size on the hit path).
uint8_t* entry_value(const MapHeader* m, uint32_t at, uint32_t cpu) {
  return file_base(m) + m->values_off + (size_t(at - 1) * m->cpus + cpu) * m->stride;
}

uint64_t hash_key(const void* key, uint32_t n) { return gpr::hash(key, n); }

// Finds key in the bucket; returns the entry index + 1, 0 if absent. Under the bucket's
// lock, or inside a seqlock read (map_lookup): then entries may change under the walk,
// whose links are read whole and whose length is bounded, and the sequence says
// afterwards whether the answer stands.
uint32_t find_in(const MapHeader* m, Bucket& b, const void* key, uint32_t* prev) {
  uint32_t p = 0;
  for (uint32_t i = aref(b.head).load(std::memory_order_relaxed), guard = 0; i && guard <= m->max_entries;
       i = aref(entry(m, i - 1)->next).load(std::memory_order_relaxed), ++guard) {
    if (gpr::equal(entry_key(entry(m, i - 1)), key, m->key_size)) {
      if (prev) *prev = p;
      return i;
    }
    p = i;
  }
  return 0;
}

// A free entry's index + 1; 0 when there is none, kBusyEntry when the free list's lock is
// this thread's (a re-entered operation).
constexpr uint32_t kBusyEntry = UINT32_MAX;
uint32_t alloc_entry(MapHeader* m) {
  Guard g(m->free_lock);
  if (!g) return kBusyEntry;
  const uint32_t i = m->free_head;
  if (i) m->free_head = aref(entry(m, i - 1)->next).load(std::memory_order_relaxed);
  return i;
}
void free_entry(MapHeader* m, uint32_t i) {
  Guard g(m->free_lock);
  if (!g) return;  // a handler re-entered its thread's free-list update: the entry is lost
  aref(entry(m, i - 1)->next).store(m->free_head, std::memory_order_relaxed);  // a lookup may be on it
  m->free_head = i;
}

// Unlinks `idx` from the (locked) bucket b; prev is its predecessor (0: head).
void unlink(MapHeader* m, Bucket& b, uint32_t idx, uint32_t prev) {
  Entry* e = entry(m, idx - 1);
  // Stored whole: a lookup may be walking the bucket (map_lookup).
  const uint32_t next = aref(e->next).load(std::memory_order_relaxed);
  if (prev) aref(entry(m, prev - 1)->next).store(next, std::memory_order_relaxed);
  else aref(b.head).store(next, std::memory_order_relaxed);
  aref(e->used).store(0, std::memory_order_relaxed);
  aref(m->count).fetch_sub(1, std::memory_order_relaxed);
}

// LRU: evicts the least recently stamped of a window of used entries. False if the
// window had none to evict. An entry it evicted is handed to the caller in `got` (its
// index + 1) rather than put back on the free list, where another thread's update could
// take it first: under threads that race, an update evicting for itself would otherwise
// starve and fail with a full map that it had just made room in.
bool lru_evict(MapHeader* m, uint32_t& got) {
  got = 0;
  const uint64_t start = aref(m->lru_hand).fetch_add(kLruWindow, std::memory_order_relaxed);
  uint32_t best = 0;
  uint64_t best_stamp = UINT64_MAX;
  for (uint32_t k = 0; k < kLruWindow * 4 && k < m->max_entries * 2; ++k) {
    const uint32_t i = static_cast<uint32_t>((start + k) % m->max_entries);
    Entry* e = entry(m, i);
    if (!aref(e->used).load(std::memory_order_relaxed)) continue;
    const uint64_t s = aref(e->stamp).load(std::memory_order_relaxed);
    if (s < best_stamp) {
      best_stamp = s;
      best = i + 1;
    }
  }
  if (!best) return false;
  // Re-find it under its bucket's lock: it may have gone meanwhile.
  Entry* e = entry(m, best - 1);
  uint8_t key[512];
  if (m->key_size > sizeof key) return false;
  gpr::copy(key, entry_key(e), m->key_size);
  Bucket& b = buckets(m)[hash_key(key, m->key_size) & (m->nbuckets - 1)];
  uint32_t prev = 0;
  {
    BucketGuard g(b.lock);
    if (!g) return false;
    const uint32_t at = find_in(m, b, key, &prev);
    if (at != best) return true;  // someone else changed it: retry the allocation
    unlink(m, b, at, prev);
  }
  got = best;
  return true;
}

void stamp(MapHeader* m, Entry* e) {
  if (m->type == uint32_t(MapType::lru_hash))
    aref(e->stamp).store(aref(m->clock).fetch_add(1, std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
}

int64_t hash_update(MapHeader* m, const void* key, const void* value, uint64_t flags, bool all) {
  if (flags > 2) return -EINVAL;
  Bucket& b = buckets(m)[hash_key(key, m->key_size) & (m->nbuckets - 1)];
  const uint32_t cpu = all ? 0 : this_cpu(m);
  auto write_value = [&](uint32_t at, bool fresh) {
    if (all) {
      gpr::copy(entry_value(m, at, 0), value, size_t(m->stride) * m->cpus);
      return;
    }
    if (fresh && m->cpus > 1) gpr::zero(entry_value(m, at, 0), size_t(m->stride) * m->cpus);
    gpr::copy(entry_value(m, at, cpu), value, m->value_size);
  };
  {
    BucketGuard g(b.lock);
    if (!g) return -EBUSY;
    if (uint32_t at = find_in(m, b, key, nullptr)) {
      if (flags == 1) return -EEXIST;
      write_value(at, false);
      stamp(m, entry(m, at - 1));
      return 0;
    }
    if (flags == 2) return -ENOENT;
  }
  // Not there: take a free entry outside the bucket lock (eviction locks other
  // buckets), fill it, then link it unless another thread inserted the key meanwhile.
  uint32_t idx = alloc_entry(m);
  // Bounded: a handler must not spin. A window without a used entry (every entry held by
  // an update in flight, which links or frees it at once) is tried again as a lost race is.
  for (int tries = 0; !idx && m->type == uint32_t(MapType::lru_hash) && tries < 64; ++tries) {
    if (!lru_evict(m, idx) && tries >= 8) break;
    if (!idx) idx = alloc_entry(m);  // lost the race to evict: maybe another freed one
  }
  if (idx == kBusyEntry) return -EBUSY;
  if (!idx) return -E2BIG;
  Entry* e = entry(m, idx - 1);
  gpr::copy(entry_key(e), key, m->key_size);
  write_value(idx, true);
  int64_t rc = 0;
  bool lost_race = false;
  {
    BucketGuard g(b.lock);
    if (!g) {
      lost_race = true;
      rc = -EBUSY;
    } else if (uint32_t at = find_in(m, b, key, nullptr)) {
      lost_race = true;
      if (flags == 1) rc = -EEXIST;
      else {
        write_value(at, false);
        stamp(m, entry(m, at - 1));
      }
    } else {
      stamp(m, e);
      aref(e->next).store(b.head, std::memory_order_relaxed);
      aref(e->used).store(1, std::memory_order_relaxed);
      aref(b.head).store(idx, std::memory_order_relaxed);
      aref(m->count).fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (lost_race) free_entry(m, idx);
  return rc;
}

// ---- LPM tries ------------------------------------------------------------------------
//
// The kernel's lpm_trie: a binary trie of prefixes where each node's children extend
// its prefix by at least one bit (child[b] for the next bit b). A node is an entry, or
// intermediate: made where two prefixes part, with no value, and dropped again when a
// delete leaves it one child. So lookups walk down at most max_prefixlen + 1 nodes.

// An LPM trie's control words; 2 * max_entries nodes of entry_size bytes follow.
struct LpmCtl {
  uint32_t lock;
  uint32_t root;       // node index + 1, 0: empty
  uint32_t free_head;  // node index + 1, linked through child[0]
  uint32_t count;      // entries (intermediate nodes are not)
};
constexpr size_t kLpmCtl = 64;
static_assert(sizeof(LpmCtl) <= kLpmCtl);
struct LpmNode {
  uint32_t child[2];   // node index + 1
  uint32_t prefixlen;
  uint32_t flags;      // kLpmIntermediate
  // the key's data bytes (key_size - 4, rounded up to 8)
};
constexpr uint32_t kLpmIntermediate = 1;
// Bits of data an LPM key may have at most (the kernel's LPM_DATA_SIZE_MAX, 256 bytes).
constexpr uint32_t kLpmDataMax = 256;

uint32_t lpm_nodes(uint32_t max_entries) { return max_entries * 2; }
uint32_t lpm_node_size(uint32_t key_size) { return static_cast<uint32_t>(sizeof(LpmNode) + round8(key_size - 4)); }

// A trie seen through a layout (the agent's header, or the CLI's own copy): every
// index is checked against the pool, so a scribbled link ends a walk instead of leaving
// the map.
struct LpmView {
  LpmCtl* ctl;
  uint8_t* nodes;
  uint8_t* values;
  uint32_t node_size, nnodes, data_len, max_prefixlen, stride;

  // data: the map's data area (or a copy of it), values: its values there.
  LpmView(const MapHeader& L, uint8_t* data, uint8_t* values)
      : ctl(reinterpret_cast<LpmCtl*>(data)), nodes(data + kLpmCtl), values(values), node_size(L.entry_size), nnodes(lpm_nodes(L.max_entries)),
        data_len(L.key_size - 4), max_prefixlen((L.key_size - 4) * 8), stride(L.stride) {}
  LpmNode* at(uint32_t i) const {
    return i && i <= nnodes ? reinterpret_cast<LpmNode*>(nodes + size_t(i - 1) * node_size) : nullptr;
  }
  static uint8_t* data(LpmNode* n) { return reinterpret_cast<uint8_t*>(n + 1); }
  uint8_t* value(uint32_t i) const { return values + size_t(i - 1) * stride; }

  // Bits of the node's prefix the key's first prefixlen bits share with it.
  uint32_t match(LpmNode* n, const uint8_t* kd, uint32_t kp) const {
    const uint32_t limit = std::min({n->prefixlen, kp, max_prefixlen});
    const uint8_t* nd = data(n);
    for (uint32_t b = 0; b < limit; b += 8) {
      const uint8_t diff = nd[b / 8] ^ kd[b / 8];
      if (diff) return std::min(limit, b + static_cast<uint32_t>(std::countl_zero(diff)));
    }
    return limit;
  }
  // Bit `index` of data, most significant bit of the first byte first.
  static uint32_t bit(const uint8_t* d, uint32_t index) { return (d[index / 8] >> (7 - index % 8)) & 1; }

  uint32_t alloc() {
    const uint32_t i = ctl->free_head;
    LpmNode* n = at(i);
    if (!n) return 0;
    ctl->free_head = n->child[0];
    return i;
  }
  void release(uint32_t i) {
    LpmNode* n = at(i);
    n->child[0] = ctl->free_head;
    n->child[1] = 0;
    n->flags = 0;
    ctl->free_head = i;
  }

  // The kernel's trie_get_next_key, under the trie's lock: the node after `key` in
  // post-order (the first when key is null or not an entry); 0 when there is none.
  uint32_t next(const uint8_t* key) const {
    uint32_t stack[kLpmDataMax * 8 + 2];
    uint32_t sp = 0;
    uint32_t from = ctl->root;
    if (key) {
      uint32_t kp;
      std::memcpy(&kp, key, 4);
      const uint8_t* kd = key + 4;
      uint32_t i = ctl->root, ml = 0;
      LpmNode* n = nullptr;
      while ((n = at(i)) && sp < std::size(stack)) {
        stack[sp++] = i;
        ml = match(n, kd, kp);
        if (n->prefixlen != ml || n->prefixlen == kp || n->prefixlen >= max_prefixlen) break;
        i = n->child[bit(kd, n->prefixlen)];
      }
      if (n && kp <= max_prefixlen && n->prefixlen == ml && n->prefixlen == kp && !(n->flags & kLpmIntermediate)) {
        // Up from the entry: the parent's right subtree when we come from its left, else
        // the parent itself when it is an entry.
        for (; sp > 1; --sp) {
          LpmNode* parent = at(stack[sp - 2]);
          if (parent->child[0] == stack[sp - 1] && at(parent->child[1])) return leftmost(parent->child[1]);
          if (!(parent->flags & kLpmIntermediate)) return stack[sp - 2];
        }
        return 0;
      }
    }
    return leftmost(from);
  }
  // The first node of the subtree at i in post-order: down the leftmost path to a leaf
  // (a leaf is never intermediate).
  uint32_t leftmost(uint32_t i) const {
    uint32_t found = 0;
    for (uint32_t steps = 0; LpmNode* n = at(i); ++steps) {
      if (steps > max_prefixlen + 1) return 0;  // longer than any trie: a cycle
      if (!(n->flags & kLpmIntermediate)) found = i;
      i = n->child[0] ? n->child[0] : (n->flags & kLpmIntermediate ? 0 : n->child[1]);
    }
    return found;
  }
};

LpmView lpm(MapHeader* m) { return LpmView(*m, data_of(m), file_base(m) + m->values_off); }

void* lpm_lookup(MapHeader* m, const uint8_t* key) {
  LpmView t = lpm(m);
  uint32_t kp;
  std::memcpy(&kp, key, 4);
  const uint8_t* kd = key + 4;
  Guard g(t.ctl->lock);
  if (!g) return nullptr;
  uint32_t found = 0;
  uint32_t i = t.ctl->root;
  for (uint32_t steps = 0; LpmNode* n = t.at(i); ++steps) {
    if (steps > t.max_prefixlen) break;
    const uint32_t ml = t.match(n, kd, kp);
    if (ml == t.max_prefixlen) {
      found = i;
      break;
    }
    if (ml < n->prefixlen) break;
    if (!(n->flags & kLpmIntermediate)) found = i;
    if (n->prefixlen >= t.max_prefixlen) break;
    i = n->child[LpmView::bit(kd, n->prefixlen)];
  }
  return found ? t.value(found) : nullptr;
}

int64_t lpm_update(MapHeader* m, const uint8_t* key, const void* value, uint64_t flags) {
  LpmView t = lpm(m);
  uint32_t kp;
  std::memcpy(&kp, key, 4);
  const uint8_t* kd = key + 4;
  if (flags > 2 || kp > t.max_prefixlen) return -EINVAL;
  Guard g(t.ctl->lock);
  if (!g) return -EBUSY;
  // Down to the slot where the prefix belongs: past every node whose whole prefix the
  // key extends.
  uint32_t* slot = &t.ctl->root;
  LpmNode* n = nullptr;
  uint32_t i = 0, ml = 0;
  for (uint32_t steps = 0; (n = t.at(i = *slot)); ++steps) {
    ml = t.match(n, kd, kp);
    if (n->prefixlen != ml || n->prefixlen == kp || n->prefixlen >= t.max_prefixlen || steps > t.max_prefixlen)
      break;
    slot = &n->child[LpmView::bit(kd, n->prefixlen)];
  }
  if (n && n->prefixlen == ml && ml == kp) {  // the prefix has a node: an entry, or intermediate
    if (!(n->flags & kLpmIntermediate)) {
      if (flags == 1) return -EEXIST;
      gpr::copy(t.value(i), value, m->value_size);
      gpr::copy(LpmView::data(n), kd, t.data_len);  // the bits past the prefix too, as the kernel's new node
      return 0;
    }
    if (flags == 2) return -ENOENT;
    if (t.ctl->count >= m->max_entries) return -ENOSPC;
    gpr::copy(t.value(i), value, m->value_size);
    gpr::copy(LpmView::data(n), kd, t.data_len);
    n->flags = 0;
    ++t.ctl->count;
    return 0;
  }
  if (flags == 2) return -ENOENT;
  if (t.ctl->count >= m->max_entries) return -ENOSPC;
  const uint32_t ni = t.alloc();
  if (!ni) return -ENOSPC;
  LpmNode* nn = t.at(ni);
  *nn = LpmNode{{0, 0}, kp, 0};
  gpr::copy(LpmView::data(nn), kd, t.data_len);
  gpr::copy(t.value(ni), value, m->value_size);
  if (!n) {
    *slot = ni;
  } else if (ml == kp) {  // the new prefix contains the node's: it goes above it
    nn->child[LpmView::bit(LpmView::data(n), ml)] = i;
    *slot = ni;
  } else {  // they part at bit ml: an intermediate node of that prefix holds both
    const uint32_t im = t.alloc();
    if (!im) {
      t.release(ni);
      return -ENOSPC;
    }
    LpmNode* in = t.at(im);
    *in = LpmNode{{0, 0}, ml, kLpmIntermediate};
    gpr::copy(LpmView::data(in), LpmView::data(n), t.data_len);
    const uint32_t b = LpmView::bit(kd, ml);
    in->child[b] = ni;
    in->child[1 - b] = i;
    *slot = im;
  }
  ++t.ctl->count;
  return 0;
}

int64_t lpm_delete(MapHeader* m, const uint8_t* key) {
  LpmView t = lpm(m);
  uint32_t kp;
  std::memcpy(&kp, key, 4);
  const uint8_t* kd = key + 4;
  if (kp > t.max_prefixlen) return -EINVAL;
  Guard g(t.ctl->lock);
  if (!g) return -EBUSY;
  // trim: the slot that links the node; trim2: the one that links its parent.
  uint32_t* trim = &t.ctl->root;
  uint32_t* trim2 = trim;
  uint32_t parent = 0, i = 0, ml = 0;
  LpmNode* n = nullptr;
  for (uint32_t steps = 0; (n = t.at(i = *trim)); ++steps) {
    ml = t.match(n, kd, kp);
    if (n->prefixlen != ml || n->prefixlen == kp || n->prefixlen >= t.max_prefixlen || steps > t.max_prefixlen)
      break;
    parent = i;
    trim2 = trim;
    trim = &n->child[LpmView::bit(kd, n->prefixlen)];
  }
  if (!n || n->prefixlen != kp || ml != kp || (n->flags & kLpmIntermediate)) return -ENOENT;
  --t.ctl->count;
  if (n->child[0] && n->child[1]) {  // still where two prefixes part
    n->flags = kLpmIntermediate;
    return 0;
  }
  LpmNode* p = t.at(parent);
  if (p && (p->flags & kLpmIntermediate) && !n->child[0] && !n->child[1]) {
    // The parent parted this leaf from its sibling: the sibling takes the parent's place.
    *trim2 = p->child[0] == i ? p->child[1] : p->child[0];
    t.release(parent);
    t.release(i);
    return 0;
  }
  *trim = n->child[0] ? n->child[0] : n->child[1];
  t.release(i);
  return 0;
}

// Registered mappings (the agent's file; tests may attach more).
struct Registered {
  std::atomic<uint64_t> lo{0}, hi{0};
};
Registered g_files[8];

// The kernel's names of the types not supported, for messages.
std::string kernel_map_type(uint32_t t) {
  static const char* const names[] = {"unspec", "hash", "array", "prog_array", "perf_event_array",
                                      "percpu_hash", "percpu_array", "stack_trace", "cgroup_array",
                                      "lru_hash", "lru_percpu_hash", "lpm_trie", "array_of_maps",
                                      "hash_of_maps", "devmap", "sockmap", "cpumap", "xskmap", "sockhash",
                                      "cgroup_storage", "reuseport_sockarray", "percpu_cgroup_storage",
                                      "queue", "stack", "sk_storage", "devmap_hash", "struct_ops",
                                      "ringbuf", "inode_storage", "task_storage", "bloom_filter",
                                      "user_ringbuf", "cgrp_storage"};
  return t < std::size(names) ? fmt::format(" ({})", names[t]) : std::string();
}

}  // namespace

const char* map_type_name(uint32_t type) {
  switch (static_cast<MapType>(type)) {
    case MapType::hash: return "hash";
    case MapType::array: return "array";
    case MapType::percpu_hash: return "percpu_hash";
    case MapType::percpu_array: return "percpu_array";
    case MapType::lru_hash: return "lru_hash";
    case MapType::ringbuf: return "ringbuf";
    case MapType::perf_event_array: return "perf_event_array";
    case MapType::queue: return "queue";
    case MapType::stack: return "stack";
    case MapType::bloom_filter: return "bloom_filter";
    case MapType::lpm_trie: return "lpm_trie";
    case MapType::prog_array: return "prog_array";
    case MapType::stack_trace: return "stack_trace";
  }
  return "";
}
bool map_type_supported(uint32_t type) { return *map_type_name(type) != 0; }

Result<void> check_map_spec(const MapSpec& s) {
  auto bad = [&](const std::string& why) {
    return make_error(Errc::invalid_argument, fmt::format("map '{}' ({}): {}", s.name,
                                                          map_type_name(s.type), why));
  };
  if (!map_type_supported(s.type))
    return make_error(Errc::unsupported,
                      fmt::format("map '{}': map type {}{} is not supported (supported: hash, array, "
                                  "percpu_hash, percpu_array, lru_hash, ringbuf, perf_event_array, queue, "
                                  "stack, bloom_filter, lpm_trie, prog_array, stack_trace)",
                                  s.name, s.type, kernel_map_type(s.type)));
  if (s.name.size() > kMapNameMax) return bad(fmt::format("name longer than {} bytes", kMapNameMax));
  if (s.max_entries == 0) return bad("max_entries is 0");
  if (s.map_extra && s.type != uint32_t(MapType::bloom_filter))
    return bad(fmt::format("map_extra {} (only bloom filters take one)", s.map_extra));
  if (s.type == uint32_t(MapType::ringbuf)) {
    if (s.key_size || s.value_size) return bad("a ring buffer has no key or value");
    if (!std::has_single_bit(s.max_entries) || s.max_entries < kPage)
      return bad(fmt::format("ring size {} is not a power of two of at least {}", s.max_entries, kPage));
    if (s.max_entries > (1u << 30)) return bad("ring larger than 1 GiB");
    return {};
  }
  if (s.type == uint32_t(MapType::perf_event_array)) {
    if (s.key_size != 4 || s.value_size != 4)
      return bad(fmt::format("key size {} and value size {} (a perf event array has 4 and 4)", s.key_size,
                             s.value_size));
    if (s.max_entries > 4096) return bad(fmt::format("{} rings (at most 4096)", s.max_entries));
    const uint32_t rb = s.ring_bytes ? s.ring_bytes : kDefaultPerfRingBytes;
    if (!std::has_single_bit(rb) || rb < kPage || rb > (1u << 30))
      return bad(fmt::format("ring size {} is not a power of two of a page to 1 GiB", rb));
    if (uint64_t(s.max_entries) * rb > (1ull << 32)) return bad("rings larger than 4 GiB in all");
    return {};
  }
  if (s.type == uint32_t(MapType::prog_array)) {
    if (s.key_size != 4 || s.value_size != 4)
      return bad(fmt::format("key size {} and value size {} (a program array has 4 and 4)", s.key_size,
                             s.value_size));
    if (s.max_entries > (1u << 20)) return bad("more than 2^20 programs");
    return {};
  }
  if (s.type == uint32_t(MapType::stack_trace)) {
    // The kernel's stack_map_alloc: 4-byte ids, whole u64 frames, at most
    // perf_event_max_stack of them; the build-id form is not provided here.
    if (s.flags & kMapStackBuildId)
      return bad("map_flags BPF_F_STACK_BUILD_ID: build-id stacks are not provided here (values are "
                 "instruction addresses; utramp run symbolises them itself)");
    if (s.key_size != 4) return bad(fmt::format("key size {} (a stack id is 4 bytes)", s.key_size));
    if (s.value_size == 0 || s.value_size % 8 || s.value_size / 8 > kMaxStackFrames)
      return bad(fmt::format("value size {} (a stack is 8 bytes per frame, 1 to {} frames)", s.value_size,
                             kMaxStackFrames));
    if (s.max_entries > (1u << 20)) return bad("more than 2^20 entries");
    return {};
  }
  if (s.value_size == 0 || s.value_size > (1u << 20)) return bad(fmt::format("value size {}", s.value_size));
  if (s.type == uint32_t(MapType::array) || s.type == uint32_t(MapType::percpu_array)) {
    if (s.key_size != 4) return bad(fmt::format("key size {} (arrays have 4-byte keys)", s.key_size));
  } else if (is_queue(s.type) || s.type == uint32_t(MapType::bloom_filter)) {
    if (s.key_size != 0) return bad(fmt::format("key size {} (it has no keys: 0)", s.key_size));
    if (s.type == uint32_t(MapType::bloom_filter) && (s.map_extra & ~uint64_t{0xf}))
      return bad(fmt::format("map_extra {:#x}: the number of hash functions is 1 to 15 (0: 5)", s.map_extra));
  } else if (s.type == uint32_t(MapType::lpm_trie)) {
    // The kernel's trie_alloc: a u32 prefix length and 1 to 256 bytes of data, and no
    // preallocation (the trie allocates its nodes as it grows; here the pool is made
    // with the file, but the flag is required as the kernel requires it).
    if (s.key_size < 5 || s.key_size > 4 + kLpmDataMax)
      return bad(fmt::format("key size {} (an LPM key is a u32 prefix length and 1 to {} bytes of data)", s.key_size,
                             kLpmDataMax));
    if (!(s.flags & kMapNoPrealloc))
      return bad("map_flags must have BPF_F_NO_PREALLOC, as the kernel requires for an LPM trie");
    if (s.max_entries > (1u << 23)) return bad("more than 2^23 entries");
  } else if (s.key_size == 0 || s.key_size > 512) {
    return bad(fmt::format("key size {}", s.key_size));
  }
  if (uint64_t(s.max_entries) * s.value_size > (1ull << 32)) return bad("larger than 4 GiB");
  if (s.max_entries > (1u << 24)) return bad("more than 2^24 entries");
  return {};
}

namespace {
uint32_t possible_cpus() { return static_cast<uint32_t>(std::max(1, get_nprocs_conf())); }

// A bloom filter's bits, as the kernel sizes them: max_entries * hash functions / ln 2
// (7/5), rounded up to a power of two, at least 64, at most 2^31.
uint64_t bloom_bits(uint32_t max_entries, uint32_t nhash) {
  const uint64_t want = uint64_t(max_entries) * nhash / 5 * 7;
  return std::min<uint64_t>(std::bit_ceil(std::max<uint64_t>(want, 64)), uint64_t(1) << 31);
}
uint32_t bloom_hashes(uint64_t map_extra) { return map_extra & 0xf ? static_cast<uint32_t>(map_extra & 0xf) : 5; }
}  // namespace

void complete_map_spec(MapSpec& s) {
  // A prog_array declared with __array(values, ...) gives no value size: libbpf makes it
  // 4 (a program's fd), as the kernel requires.
  if (s.type == uint32_t(MapType::prog_array) && s.value_size == 0) s.value_size = 4;
  if (s.type != uint32_t(MapType::perf_event_array)) return;
  if (s.max_entries == 0) s.max_entries = possible_cpus();
  if (s.key_size == 0) s.key_size = 4;
  if (s.value_size == 0) s.value_size = 4;
}

MapFile::MapFile(MapFile&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)),
      registered_(std::exchange(o.registered_, false)), own_(std::move(o.own_)),
      ring_pos_(std::move(o.ring_pos_)), cpus_(o.cpus_), unlocked_reads_(o.unlocked_reads_),
      corrupt_reads_(o.corrupt_reads_) {}
MapFile& MapFile::operator=(MapFile&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    registered_ = std::exchange(o.registered_, false);
    own_ = std::move(o.own_);
    ring_pos_ = std::move(o.ring_pos_);
    cpus_ = o.cpus_;
    unlocked_reads_ = o.unlocked_reads_;
    corrupt_reads_ = o.corrupt_reads_;
  }
  return *this;
}
MapFile::~MapFile() { release(); }

void MapFile::release() {
  for (MapHeader* h : own_) delete h;
  own_.clear();
  if (!base_) return;
  if (registered_)
    for (auto& f : g_files)
      if (f.lo.load() == reinterpret_cast<uint64_t>(base_)) {
        f.hi.store(0);
        f.lo.store(0);
      }
  munmap(base_, size_);
  base_ = nullptr;
}

namespace {
Result<std::pair<uint8_t*, size_t>> map_fd(int fd, size_t size, const std::string& path) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return make_error(Errc::io, fmt::format("map file {}: mmap: {}", path, strerror(errno)));
  return std::pair{static_cast<uint8_t*>(p), size};
}

void register_file(uint8_t* base, size_t size) {
  for (auto& f : g_files) {
    uint64_t z = 0;
    if (f.lo.compare_exchange_strong(z, reinterpret_cast<uint64_t>(base))) {
      f.hi.store(reinterpret_cast<uint64_t>(base) + size);
      return;
    }
  }
}
}  // namespace

Result<MapFile> MapFile::create(const std::string& path, const std::vector<MapSpec>& specs) {
  const uint32_t cpus = possible_cpus();
  std::vector<MapHeader> hs(specs.size());
  size_t off = round_page(kPage + specs.size() * kHeaderStride);
  for (size_t i = 0; i < specs.size(); ++i) {
    const MapSpec& s = specs[i];
    UTRAMP_TRY(check_map_spec(s));
    MapHeader& h = hs[i];
    std::memset(&h, 0, sizeof h);
    h.magic = kMapMagic;
    h.type = s.type;
    h.key_size = s.key_size;
    h.value_size = s.value_size;
    h.max_entries = s.max_entries;
    h.flags = s.flags;
    h.stride = static_cast<uint32_t>(round8(s.value_size));
    h.cpus = is_percpu(s.type) ? cpus : 1;
    h.self_off = kPage + i * kHeaderStride;
    h.global_data = s.global_data;
    h.readonly = s.readonly;
    std::memcpy(h.name, s.name.data(), std::min<size_t>(s.name.size(), kMapNameMax));
    size_t bytes = 0;
    h.values_off = off;  // programs store into none of the maps below but through helpers
    h.values_size = 0;
    if (s.type == uint32_t(MapType::ringbuf)) {
      bytes = kRingCtl + s.max_entries;
      h.values_off = off + kRingCtl;
      h.values_size = s.max_entries;
    } else if (s.type == uint32_t(MapType::perf_event_array)) {
      h.ring_bytes = s.ring_bytes ? s.ring_bytes : kDefaultPerfRingBytes;
      bytes = size_t(s.max_entries) * (kRingCtl + h.ring_bytes);
    } else if (is_queue(s.type)) {
      bytes = kQueueCtl + (size_t(s.max_entries) + 1) * h.stride;
    } else if (s.type == uint32_t(MapType::prog_array)) {
      bytes = size_t(s.max_entries) * sizeof(ProgSlot);
    } else if (s.type == uint32_t(MapType::stack_trace)) {
      h.nbuckets = std::bit_ceil(s.max_entries);
      h.entry_size = static_cast<uint32_t>(sizeof(StackBucket) + s.value_size);
      bytes = size_t(h.nbuckets) * h.entry_size;
    } else if (s.type == uint32_t(MapType::bloom_filter)) {
      h.nhash = bloom_hashes(s.map_extra);
      h.nbits = bloom_bits(s.max_entries, h.nhash);
      bytes = h.nbits / 8;
    } else if (s.type == uint32_t(MapType::lpm_trie)) {
      h.entry_size = lpm_node_size(s.key_size);
      const size_t control = (kLpmCtl + size_t(lpm_nodes(s.max_entries)) * h.entry_size + 63) & ~size_t{63};
      h.values_off = off + control;
      h.values_size = size_t(lpm_nodes(s.max_entries)) * h.stride;
      bytes = control + h.values_size;
    } else if (is_hash(s.type)) {
      h.nbuckets = std::bit_ceil(s.max_entries);
      h.entry_size = static_cast<uint32_t>(sizeof(Entry) + round8(s.key_size));
      const size_t control = (size_t(h.nbuckets) * sizeof(Bucket) + size_t(s.max_entries) * h.entry_size + 63) & ~size_t{63};
      h.values_off = off + control;
      h.values_size = size_t(s.max_entries) * h.stride * h.cpus;
      bytes = control + h.values_size;
    } else {
      bytes = size_t(s.max_entries) * h.stride * h.cpus;
      h.values_off = off;
      h.values_size = bytes;
    }
    h.data_off = off;
    h.data_size = bytes;
    off = round_page(off + bytes);
  }
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(Errc::io, fmt::format("map file {}: {}", path, strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(off)) != 0) {
    const int e = errno;
    close(fd);
    return make_error(Errc::io, fmt::format("map file {}: ftruncate {} bytes: {}", path, off, strerror(e)));
  }
  auto m = map_fd(fd, off, path);
  close(fd);
  if (!m) return std::move(m).error();
  MapFile f;
  f.base_ = m->first;
  f.size_ = off;
  for (size_t i = 0; i < specs.size(); ++i) {
    MapHeader* h = reinterpret_cast<MapHeader*>(f.base_ + hs[i].self_off);
    *h = hs[i];
    uint8_t* d = f.base_ + h->data_off;
    if (is_hash(h->type)) {
      for (uint32_t k = 0; k < h->max_entries; ++k) entry(h, k)->next = k + 2 <= h->max_entries ? k + 2 : 0;
      h->free_head = h->max_entries ? 1 : 0;
    } else if (h->type == uint32_t(MapType::lpm_trie)) {
      LpmView t(*h, d, f.base_ + h->values_off);
      for (uint32_t k = 1; k <= t.nnodes; ++k) t.at(k)->child[0] = k < t.nnodes ? k + 1 : 0;
      t.ctl->free_head = 1;
    } else if (!specs[i].init.empty() && h->type == uint32_t(MapType::array)) {
      std::memcpy(d, specs[i].init.data(), std::min<size_t>(specs[i].init.size(), h->value_size));
    }
  }
  for (const MapHeader& h : hs) f.own_.push_back(new MapHeader(h));
  for (const MapHeader& h : hs)
    f.ring_pos_.emplace_back(h.type == uint32_t(MapType::perf_event_array) ? h.max_entries : 1, 0);
  f.cpus_ = cpus;
  auto* fh = reinterpret_cast<FileHeader*>(f.base_);
  fh->version = kVersion;
  fh->nmaps = static_cast<uint32_t>(specs.size());
  fh->size = off;
  fh->cpus = cpus;
  aref(fh->magic).store(kFileMagic, std::memory_order_release);
  return f;
}

Result<MapFile> MapFile::attach(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return make_error(Errc::io, fmt::format("map file {}: {}", path, strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kPage)) {
    close(fd);
    return make_error(Errc::bad_format, fmt::format("map file {}: too small", path));
  }
  auto m = map_fd(fd, static_cast<size_t>(st.st_size), path);
  close(fd);
  if (!m) return std::move(m).error();
  MapFile f;
  f.base_ = m->first;
  f.size_ = m->second;
  const auto* fh = reinterpret_cast<const FileHeader*>(f.base_);
  if (fh->magic != kFileMagic || fh->version != kVersion || fh->size != f.size_ ||
      kPage + size_t(fh->nmaps) * kHeaderStride > f.size_)
    return make_error(Errc::bad_format, fmt::format("map file {}: not a utramp map file", path));
  for (size_t i = 0; i < fh->nmaps; ++i) {
    const MapHeader* h = f.header(i);
    if (h->magic != kMapMagic || h->data_off + h->data_size > f.size_ || h->values_off < h->data_off ||
        h->values_off + h->values_size > h->data_off + h->data_size)
      return make_error(Errc::bad_format, fmt::format("map file {}: map {} is corrupt", path, i));
  }
  register_file(f.base_, f.size_);
  f.registered_ = true;
  return f;
}

// The owner's copies when there are (create), the file's otherwise (attach: checked
// then, and the agent's side trusts its own target).
size_t MapFile::count() const {
  if (!own_.empty() || !base_) return own_.size();
  return reinterpret_cast<const FileHeader*>(base_)->nmaps;
}
uint32_t MapFile::cpus() const {
  if (!own_.empty() || !base_) return cpus_;
  return reinterpret_cast<const FileHeader*>(base_)->cpus;
}
const MapHeader& MapFile::layout(size_t i) const {
  return own_.empty() ? *header(i) : *own_[i];
}
MapHeader* MapFile::header(size_t i) const {
  return reinterpret_cast<MapHeader*>(base_ + kPage + i * kHeaderStride);
}
std::span<uint8_t> MapFile::data(size_t i) const {
  const MapHeader& h = layout(i);
  return {base_ + h.data_off, h.data_size};
}
std::span<uint8_t> MapFile::values(size_t i) const {
  const MapHeader& h = layout(i);
  return {base_ + h.values_off, h.values_size};
}
MapSpec MapFile::spec(size_t i) const {
  const MapHeader* h = &layout(i);
  MapSpec s;
  s.name.assign(h->name, strnlen(h->name, sizeof h->name));
  s.type = h->type;
  s.key_size = h->key_size;
  s.value_size = h->value_size;
  s.max_entries = h->max_entries;
  s.flags = h->flags;
  s.ring_bytes = h->ring_bytes;
  s.global_data = h->global_data;
  s.readonly = h->readonly;
  return s;
}

MapHeader* map_from_addr(uint64_t addr) noexcept {
  for (auto& f : g_files) {
    const uint64_t lo = f.lo.load(std::memory_order_acquire), hi = f.hi.load(std::memory_order_acquire);
    if (!lo || addr < lo + kPage || addr >= hi) continue;
    const auto* fh = reinterpret_cast<const FileHeader*>(lo);
    const uint64_t rel = addr - lo - kPage;
    if (rel % kHeaderStride || rel / kHeaderStride >= fh->nmaps) return nullptr;
    auto* h = reinterpret_cast<MapHeader*>(addr);
    return h->magic == kMapMagic ? h : nullptr;
  }
  return nullptr;
}

uint32_t map_type(const MapHeader* m) noexcept { return m->type; }
uint32_t map_key_size(const MapHeader* m) noexcept { return m->key_size; }
uint32_t map_value_size(const MapHeader* m) noexcept { return m->value_size; }

void* map_lookup(MapHeader* m, const void* key) noexcept {
  switch (static_cast<MapType>(m->type)) {
    case MapType::array:
    case MapType::percpu_array: {
      uint32_t k;
      std::memcpy(&k, key, 4);
      if (k >= m->max_entries) return nullptr;
      const uint32_t cpu = m->cpus > 1 ? this_cpu(m) : 0;
      return data_of(m) + (size_t(k) * m->cpus + cpu) * m->stride;
    }
    case MapType::hash:
    case MapType::percpu_hash:
    case MapType::lru_hash: {
      Bucket& b = buckets(m)[hash_key(key, m->key_size) & (m->nbuckets - 1)];
      // Without the lock first: a walk between two equal, even readings of the bucket's
      // sequence saw no writer (no locked instruction: the lookup of a counter that a
      // program then adds to atomically costs one fewer). A writer in the bucket (maybe
      // this thread's, interrupted: then the lock below fails, as it always did), or
      // writers faster than the walk: the lock.
      auto seq = aref(b.lock);
      uint32_t at = 0;
      bool seen = false;
      for (int tries = 0; tries < 2 && !seen; ++tries) {
        const uint32_t v = seq.load(std::memory_order_acquire);
        if (v & 1) break;
        at = find_in(m, b, key, nullptr);
        std::atomic_thread_fence(std::memory_order_acquire);
        seen = seq.load(std::memory_order_relaxed) == v;
      }
      if (!seen) {
        BucketGuard g(b.lock);
        if (!g) return nullptr;
        at = find_in(m, b, key, nullptr);
      }
      if (!at) return nullptr;
      stamp(m, entry(m, at - 1));
      return entry_value(m, at, m->cpus > 1 ? this_cpu(m) : 0);
    }
    case MapType::lpm_trie: return lpm_lookup(m, static_cast<const uint8_t*>(key));
    default: return nullptr;  // stack traces: read by the CLI (entries()), not by programs
  }
}

int64_t map_update(MapHeader* m, const void* key, const void* value, uint64_t flags, bool all) noexcept {
  switch (static_cast<MapType>(m->type)) {
    case MapType::array:
    case MapType::percpu_array: {
      if (flags > 2) return -EINVAL;
      if (flags == 1) return -EEXIST;  // array entries always exist
      uint32_t k;
      std::memcpy(&k, key, 4);
      if (k >= m->max_entries) return -E2BIG;
      uint8_t* row = data_of(m) + size_t(k) * m->cpus * m->stride;
      if (all) gpr::copy(row, value, size_t(m->cpus) * m->stride);
      else gpr::copy(row + (m->cpus > 1 ? this_cpu(m) : 0) * m->stride, value, m->value_size);
      return 0;
    }
    case MapType::hash:
    case MapType::percpu_hash:
    case MapType::lru_hash:
      return hash_update(m, key, value, flags, all);
    case MapType::lpm_trie: return lpm_update(m, static_cast<const uint8_t*>(key), value, flags);
    default: return -EINVAL;
  }
}

namespace {
StackBucket* stack_bucket(const MapHeader* m, uint32_t id) {
  return reinterpret_cast<StackBucket*>(data_of(m) + size_t(id) * m->entry_size);
}
uint64_t* stack_ips(StackBucket* b) { return reinterpret_cast<uint64_t*>(b + 1); }

int64_t stack_delete(MapHeader* m, const void* key) {
  uint32_t id;
  std::memcpy(&id, key, 4);
  if (id >= m->nbuckets) return -E2BIG;
  StackBucket* b = stack_bucket(m, id);
  Guard g(b->lock);
  if (!g) return -EBUSY;
  if (!b->nr) return -ENOENT;
  aref(b->nr).store(0, std::memory_order_relaxed);
  return 0;
}
}  // namespace

int64_t stack_map_put(MapHeader* m, const uint64_t* ips, uint32_t n, uint64_t flags) noexcept {
  if (m->type != uint32_t(MapType::stack_trace) || n == 0) return -EINVAL;
  n = std::min(n, m->value_size / 8);
  const uint32_t hash = static_cast<uint32_t>(hash_key(ips, n * 8));
  const uint32_t id = hash & (m->nbuckets - 1);
  StackBucket* b = stack_bucket(m, id);
  Guard g(b->lock);
  if (!g) return -EBUSY;
  const bool hash_matches = b->nr && b->hash == hash;
  if (hash_matches && (flags & kStackFastCmp)) return id;
  if (hash_matches && b->nr == n && gpr::equal(stack_ips(b), ips, n * 8)) return id;
  if (b->nr && !(flags & kStackReuseId)) return -EEXIST;
  gpr::copy(stack_ips(b), ips, n * 8);
  b->hash = hash;
  aref(b->nr).store(n, std::memory_order_release);
  return id;
}

int64_t map_delete(MapHeader* m, const void* key) noexcept {
  if (m->type == uint32_t(MapType::lpm_trie)) return lpm_delete(m, static_cast<const uint8_t*>(key));
  if (m->type == uint32_t(MapType::stack_trace)) return stack_delete(m, key);
  if (!is_hash(m->type)) return -EINVAL;
  Bucket& b = buckets(m)[hash_key(key, m->key_size) & (m->nbuckets - 1)];
  uint32_t at = 0, prev = 0;
  {
    BucketGuard g(b.lock);
    if (!g) return -EBUSY;
    at = find_in(m, b, key, &prev);
    if (!at) return -ENOENT;
    unlink(m, b, at, prev);
  }
  free_entry(m, at);
  return 0;
}

// ---- ring buffers --------------------------------------------------------------------

namespace {
RingCtl* ring(const MapHeader* m) { return reinterpret_cast<RingCtl*>(data_of(m)); }
uint8_t* ring_data(const MapHeader* m) { return data_of(m) + kRingCtl; }
}  // namespace

namespace {

// Reserves a record of `size` bytes in the ring at c (control) and d (n bytes of
// records); null when it does not fit (or the ring's lock is this thread's). With
// `stamp`, the record's first 8 bytes get the next value of that counter, taken under
// the ring's lock (so stamps grow along each ring) and before the record is published.
void* ring_reserve(RingCtl* c, uint8_t* d, uint64_t n, uint64_t size, uint64_t* stamp) noexcept {
  const uint64_t total = round8(size + 8);
  Guard g(c->lock);
  if (!g) return nullptr;
  uint64_t pos = c->producer;
  const uint64_t cons = aref(c->consumer).load(std::memory_order_acquire);
  const uint64_t to_end = n - pos % n;
  const uint64_t pad = to_end < total ? to_end : 0;
  if (pos + pad + total - cons > n) return nullptr;
  if (pad) {
    aref(*reinterpret_cast<uint32_t*>(d + pos % n)).store(static_cast<uint32_t>(pad - 8) | kDiscard,
                                                         std::memory_order_relaxed);
    pos += pad;
  }
  auto* hdr = reinterpret_cast<uint32_t*>(d + pos % n);
  aref(*hdr).store(static_cast<uint32_t>(size) | kBusy, std::memory_order_relaxed);
  hdr[1] = 0;
  // acq_rel: a stamp taken after another thread's pairs with it (consume_perf).
  if (stamp) *reinterpret_cast<uint64_t*>(hdr + 2) = aref(*stamp).fetch_add(1, std::memory_order_acq_rel) + 1;
  // Pairs with the consumer's acquire load of producer: it sees the headers above.
  aref(c->producer).store(pos + total, std::memory_order_release);
  return hdr + 2;
}

// Submits or discards the record at rec (its header is the 8 bytes before it): false
// if it was not being written.
bool commit_record(void* rec, bool discard) noexcept {
  auto h = aref(*reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(rec) - 8));
  uint32_t v = h.load(std::memory_order_relaxed);
  if (!(v & kBusy)) return false;
  // Pairs with the consumer's acquire load of the header: the record's bytes first.
  return h.compare_exchange_strong(v, (v & ~kBusy) | (discard ? kDiscard : 0), std::memory_order_release);
}

}  // namespace

void* ringbuf_reserve(MapHeader* m, uint64_t size) noexcept {
  void* r = nullptr;
  if (m->type == uint32_t(MapType::ringbuf) && size != 0 && size <= m->max_entries / 4)
    r = ring_reserve(ring(m), ring_data(m), m->max_entries, size, nullptr);
  if (!r) aref(m->dropped).fetch_add(1, std::memory_order_relaxed);
  return r;
}

bool ringbuf_commit(MapHeader* m, void* rec, bool discard) noexcept {
  if (m->type != uint32_t(MapType::ringbuf)) return false;
  uint8_t* d = ring_data(m);
  const uint64_t at = reinterpret_cast<uint64_t>(rec) - 8;
  if (at < reinterpret_cast<uint64_t>(d) || at + 8 > reinterpret_cast<uint64_t>(d) + m->max_entries ||
      at % 8)
    return false;
  return commit_record(rec, discard);
}

MapHeader* ringbuf_holding(uint64_t addr) noexcept {
  for (auto& f : g_files) {
    const uint64_t lo = f.lo.load(std::memory_order_acquire), hi = f.hi.load(std::memory_order_acquire);
    if (!lo || addr < lo || addr >= hi) continue;
    const auto* fh = reinterpret_cast<const FileHeader*>(lo);
    for (uint32_t i = 0; i < fh->nmaps; ++i) {
      auto* h = reinterpret_cast<MapHeader*>(lo + kPage + i * kHeaderStride);
      if (h->type != uint32_t(MapType::ringbuf)) continue;
      const uint64_t d = reinterpret_cast<uint64_t>(ring_data(h));
      if (addr >= d && addr < d + h->max_entries) return h;
    }
  }
  return nullptr;
}

int64_t ringbuf_output(MapHeader* m, const void* data, uint64_t size) noexcept {
  void* r = ringbuf_reserve(m, size);
  if (!r) return -EAGAIN;
  gpr::copy(r, data, size);
  ringbuf_commit(m, r, false);
  return 0;
}

// ---- perf event arrays -----------------------------------------------------------------

namespace {
constexpr uint64_t kIndexMask = 0xffffffffull;  // BPF_F_INDEX_MASK
constexpr uint64_t kCurrentCpu = kIndexMask;     // BPF_F_CURRENT_CPU
uint8_t* perf_ring(const MapHeader* m, uint64_t idx) {
  return data_of(m) + idx * (kRingCtl + uint64_t(m->ring_bytes));
}
}  // namespace

void* perf_reserve(MapHeader* m, uint64_t flags, uint64_t size, int64_t* err) noexcept {
  if (m->type != uint32_t(MapType::perf_event_array) || (flags & ~kIndexMask)) {
    *err = -EINVAL;
    return nullptr;
  }
  uint64_t idx = flags;
  if (idx == kCurrentCpu) {
    idx = current_cpu();
  }
  if (idx >= m->max_entries) {
    *err = -E2BIG;
    return nullptr;
  }
  // The record: its stamp (8 bytes), then the program's bytes.
  uint8_t* r = nullptr;
  if (size <= m->ring_bytes / 4 - 8) {
    uint8_t* base = perf_ring(m, idx);
    r = static_cast<uint8_t*>(
        ring_reserve(reinterpret_cast<RingCtl*>(base), base + kRingCtl, m->ring_bytes, size + 8, &m->seq));
  }
  if (!r) {
    aref(m->dropped).fetch_add(1, std::memory_order_relaxed);
    *err = -ENOSPC;  // the kernel's perf_output_begin on a full buffer
    return nullptr;
  }
  return r + 8;
}

void perf_commit(void* rec, bool discard) noexcept { commit_record(static_cast<uint8_t*>(rec) - 8, discard); }

int64_t perf_output(MapHeader* m, uint64_t flags, const void* data, uint64_t size) noexcept {
  int64_t err = 0;
  void* r = perf_reserve(m, flags, size, &err);
  if (!r) return err;
  gpr::copy(r, data, size);
  perf_commit(r, false);
  return 0;
}

// ---- queues, stacks, bloom filters -------------------------------------------------------

namespace {

QueueCtl* qctl(const MapHeader* m) { return reinterpret_cast<QueueCtl*>(data_of(m)); }
uint8_t* qslot(const MapHeader* m, uint32_t i) { return data_of(m) + kQueueCtl + size_t(i) * m->stride; }

int64_t qs_push(MapHeader* m, const void* value, uint64_t flags) {
  if (flags != 0 && flags != 2) return -EINVAL;  // BPF_ANY or BPF_EXIST
  QueueCtl* q = qctl(m);
  const uint32_t n = m->max_entries + 1;
  Guard g(q->lock);
  if (!g) return -EBUSY;
  // Indices are kept below n by every operation; the modulo keeps a scribbled one in
  // the map (the agent's side reads its own target's file).
  const uint32_t head = q->head % n;
  uint32_t tail = q->tail % n;
  if ((head + 1) % n == tail) {
    if (flags != 2) return -E2BIG;
    tail = (tail + 1) % n;  // BPF_EXIST: the oldest element goes
  }
  gpr::copy(qslot(m, head), value, m->value_size);
  aref(q->tail).store(tail, std::memory_order_relaxed);
  aref(q->head).store((head + 1) % n, std::memory_order_relaxed);
  return 0;
}

int64_t qs_take(MapHeader* m, void* value, bool remove) {
  QueueCtl* q = qctl(m);
  const uint32_t n = m->max_entries + 1;
  Guard g(q->lock);
  if (!g) return -EBUSY;
  const uint32_t head = q->head % n, tail = q->tail % n;
  if (head == tail) return -ENOENT;
  if (m->type == uint32_t(MapType::queue)) {
    gpr::copy(value, qslot(m, tail), m->value_size);
    if (remove) aref(q->tail).store((tail + 1) % n, std::memory_order_relaxed);
  } else {
    const uint32_t top = (head + n - 1) % n;
    gpr::copy(value, qslot(m, top), m->value_size);
    if (remove) aref(q->head).store(top, std::memory_order_relaxed);
  }
  return 0;
}

// A bloom filter's bits for `value`: k probes by double hashing of one 64-bit hash
// (h1 + i * h2, h2 odd), each a bit of the power-of-two bit array.
template <class F>
bool bloom_probe(const MapHeader* m, const void* value, F&& f) {
  const uint64_t h1 = hash_key(value, m->value_size);
  uint64_t h2 = h1 ^ 0x9e3779b97f4a7c15ull;
  h2 = (h2 ^ (h2 >> 29)) * 0xbf58476d1ce4e5b9ull;
  h2 = (h2 ^ (h2 >> 32)) | 1;
  auto* words = reinterpret_cast<uint64_t*>(data_of(m));
  for (uint32_t i = 0; i < m->nhash; ++i) {
    const uint64_t bit = (h1 + i * h2) & (m->nbits - 1);
    if (!f(words[bit / 64], uint64_t(1) << (bit % 64))) return false;
  }
  return true;
}

}  // namespace

int64_t map_push(MapHeader* m, const void* value, uint64_t flags) noexcept {
  if (is_queue(m->type)) return qs_push(m, value, flags);
  if (m->type != uint32_t(MapType::bloom_filter)) return -EINVAL;
  if (flags != 0) return -EINVAL;
  // Pairs with the acquire loads of a peek: a value pushed before is found.
  bloom_probe(m, value, [](uint64_t& w, uint64_t b) {
    aref(w).fetch_or(b, std::memory_order_release);
    return true;
  });
  return 0;
}

int64_t map_pop(MapHeader* m, void* value) noexcept {
  if (is_queue(m->type)) return qs_take(m, value, true);
  return m->type == uint32_t(MapType::bloom_filter) ? -EOPNOTSUPP : -EINVAL;
}

int64_t map_peek(MapHeader* m, void* value) noexcept {
  if (is_queue(m->type)) return qs_take(m, value, false);
  if (m->type != uint32_t(MapType::bloom_filter)) return -EINVAL;
  const bool maybe = bloom_probe(m, value, [](uint64_t& w, uint64_t b) {
    return (aref(w).load(std::memory_order_acquire) & b) != 0;
  });
  return maybe ? 0 : -ENOENT;
}

int64_t map_get_next_key(MapHeader* m, const void* key, void* next) noexcept {
  if (m->type != uint32_t(MapType::lpm_trie)) return -EINVAL;
  LpmView t = lpm(m);
  Guard g(t.ctl->lock);
  if (!g) return -EBUSY;
  const uint32_t i = t.next(static_cast<const uint8_t*>(key));
  LpmNode* n = t.at(i);
  if (!n) return -ENOENT;
  std::memcpy(next, &n->prefixlen, 4);
  gpr::copy(static_cast<uint8_t*>(next) + 4, LpmView::data(n), t.data_len);
  return 0;
}

// ---- the target's loaded objects (kObjectsMap) ------------------------------------------

void write_loaded_ranges(std::span<uint8_t> value, const std::vector<LoadedRange>& ranges) {
  if (value.size() < 16) return;
  auto* seq = reinterpret_cast<uint64_t*>(value.data());
  std::string text;
  for (const LoadedRange& r : ranges) {
    std::string line = fmt::format("{:x} {:x} {:x} {}\n", r.lo, r.hi, r.bias, r.path);
    if (16 + text.size() + line.size() > value.size()) break;
    text += line;
  }
  const uint64_t s0 = aref(*seq).load(std::memory_order_relaxed);
  aref(*seq).store(s0 | 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const uint64_t len = text.size();
  std::memcpy(value.data() + 8, &len, 8);
  std::memcpy(value.data() + 16, text.data(), text.size());
  aref(*seq).store((s0 | 1) + 1, std::memory_order_release);
}

std::vector<LoadedRange> read_loaded_ranges(std::span<const uint8_t> value) {
  std::vector<LoadedRange> out;
  if (value.size() < 16) return out;
  auto* seq = const_cast<uint64_t*>(reinterpret_cast<const uint64_t*>(value.data()));
  std::string text;
  for (int tries = 0;; ++tries) {
    if (tries == 1000) return out;
    const uint64_t s1 = aref(*seq).load(std::memory_order_acquire);
    if (s1 & 1) continue;
    uint64_t len = 0;
    std::memcpy(&len, value.data() + 8, 8);
    len = std::min<uint64_t>(len, value.size() - 16);
    text.assign(reinterpret_cast<const char*>(value.data()) + 16, len);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (aref(*seq).load(std::memory_order_relaxed) == s1) break;
  }
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(at, nl - at);
    at = nl + 1;
    LoadedRange r;
    int used = 0;
    unsigned long long lo, hi, bias;
    if (std::sscanf(line.c_str(), "%llx %llx %llx %n", &lo, &hi, &bias, &used) != 3 || used <= 0) continue;
    r.lo = lo, r.hi = hi, r.bias = bias;
    r.path = line.substr(static_cast<size_t>(used));
    out.push_back(std::move(r));
  }
  return out;
}

// ---- reading, for the CLI (MapFile's comment) -------------------------------------------

namespace {

// Waits for a lock word at most until `deadline_ns` (CLOCK_MONOTONIC); false if it is
// still held then.
template <bool kSeq = false>
bool lock_until(uint32_t& w, uint64_t deadline_ns) noexcept {
  for (unsigned spins = 0;; ++spins) {
    if (try_take<kSeq>(w)) return true;
    if ((spins & 255) == 255) {
      timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      if (uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec) >= deadline_ns) return false;
    }
    __builtin_ia32_pause();
  }
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// All the waiting one entries() call may do for bucket locks held by others.
constexpr uint64_t kLockWaitNs = 20'000'000;

}  // namespace

std::vector<MapEntry> MapFile::entries(size_t i) const {
  std::vector<MapEntry> out;
  if (i >= count()) return out;
  const MapHeader& L = layout(i);
  uint8_t* d = base_ + L.data_off;
  auto values = [&](size_t first_value) {  // index of the entry's first value slot
    std::vector<std::vector<uint8_t>> vs;
    const uint8_t* v = base_ + L.values_off + first_value * L.stride;
    for (uint32_t c = 0; c < L.cpus; ++c)
      vs.emplace_back(v + size_t(c) * L.stride, v + size_t(c) * L.stride + L.value_size);
    return vs;
  };
  if (L.type == uint32_t(MapType::array) || L.type == uint32_t(MapType::percpu_array)) {
    for (uint32_t k = 0; k < L.max_entries; ++k) {
      MapEntry e;
      e.key.resize(4);
      std::memcpy(e.key.data(), &k, 4);
      e.values = values(size_t(k) * L.cpus);
      out.push_back(std::move(e));
    }
  } else if (is_hash(L.type)) {
    auto* bk = reinterpret_cast<Bucket*>(d);
    auto ent = [&](uint32_t idx) {
      return reinterpret_cast<Entry*>(d + size_t(L.nbuckets) * sizeof(Bucket) + size_t(idx) * L.entry_size);
    };
    const uint64_t deadline = now_ns() + kLockWaitNs;
    for (uint32_t bi = 0; bi < L.nbuckets; ++bi) {
      Bucket& b = bk[bi];
      const bool locked = lock_until<true>(b.lock, deadline);
      if (!locked) ++unlocked_reads_;
      uint32_t idx = aref(b.head).load(std::memory_order_acquire);
      for (uint32_t walked = 0; idx != 0; ++walked) {
        if (idx > L.max_entries || walked >= L.max_entries) {  // not an entry, or a cycle
          ++corrupt_reads_;
          break;
        }
        Entry* en = ent(idx - 1);
        MapEntry e;
        e.key.assign(entry_key(en), entry_key(en) + L.key_size);
        e.values = values(size_t(idx - 1) * L.cpus);
        out.push_back(std::move(e));
        idx = aref(en->next).load(std::memory_order_acquire);
      }
      if (locked) ebpf::release<true>(b.lock);  // not on this thread's stack
    }
  } else if (L.type == uint32_t(MapType::stack_trace)) {
    // Each bucket that holds a stack: its id, its frames (the rest of the value zero),
    // copied under the bucket's lock (waited for as a hash bucket's).
    const uint64_t deadline = now_ns() + kLockWaitNs;
    for (uint32_t id = 0; id < L.nbuckets; ++id) {
      auto* b = reinterpret_cast<StackBucket*>(d + size_t(id) * L.entry_size);
      const bool locked = lock_until(b->lock, deadline);
      if (!locked) ++unlocked_reads_;
      const uint32_t nr = aref(b->nr).load(std::memory_order_acquire);
      std::vector<uint8_t> v(L.value_size, 0);
      if (nr > L.value_size / 8) ++corrupt_reads_;
      else if (nr) std::memcpy(v.data(), b + 1, size_t(nr) * 8);
      if (locked) aref(b->lock).store(0, std::memory_order_release);
      if (!nr || nr > L.value_size / 8) continue;
      MapEntry e;
      e.key.resize(4);
      std::memcpy(e.key.data(), &id, 4);
      e.values.push_back(std::move(v));
      out.push_back(std::move(e));
    }
  } else if (L.type == uint32_t(MapType::prog_array)) {
    // The set slots: the program's index in its object, as a u32 value.
    const auto* slots = reinterpret_cast<const ProgSlot*>(d);
    for (uint32_t k = 0; k < L.max_entries; ++k) {
      const uint32_t prog = aref(const_cast<ProgSlot&>(slots[k]).prog).load(std::memory_order_relaxed);
      if (prog == 0) continue;
      MapEntry e;
      e.key.resize(4);
      std::memcpy(e.key.data(), &k, 4);
      e.values.emplace_back(4);
      const uint32_t v = prog - 1;
      std::memcpy(e.values[0].data(), &v, 4);
      out.push_back(std::move(e));
    }
  } else if (is_queue(L.type)) {
    auto* q = reinterpret_cast<QueueCtl*>(d);
    const uint32_t n = L.max_entries + 1;
    // The target's push and pop spin on this lock: under it only a copy of the slots
    // (into memory allocated before), the entries built after it is released.
    std::vector<uint8_t> slots(size_t(n) * L.stride);
    const bool locked = lock_until(q->lock, now_ns() + kLockWaitNs);
    if (!locked) ++unlocked_reads_;
    const uint32_t head = aref(q->head).load(std::memory_order_relaxed);
    const uint32_t tail = aref(q->tail).load(std::memory_order_relaxed);
    std::memcpy(slots.data(), d + kQueueCtl, slots.size());
    if (locked) aref(q->lock).store(0, std::memory_order_release);
    if (head >= n || tail >= n) {
      ++corrupt_reads_;
    } else {
      const uint32_t len = (head + n - tail) % n;
      for (uint32_t k = 0; k < len; ++k) {
        // Pop order: a queue from its tail up, a stack from its head down.
        const uint32_t at = L.type == uint32_t(MapType::queue) ? (tail + k) % n : (head + n - 1 - k) % n;
        MapEntry e;
        e.key.resize(4);
        std::memcpy(e.key.data(), &k, 4);
        const uint8_t* v = slots.data() + size_t(at) * L.stride;
        e.values.emplace_back(v, v + L.value_size);
        out.push_back(std::move(e));
      }
    }
  } else if (L.type == uint32_t(MapType::lpm_trie)) {
    // As with queues: under the trie's lock only a copy (into memory allocated before),
    // walked after it is released, in get_next_key order. The walk checks every index
    // (LpmView) and stops after as many keys as the pool has nodes.
    std::vector<uint8_t> copy(L.data_size);
    auto* ctl = reinterpret_cast<LpmCtl*>(d);
    const bool locked = lock_until(ctl->lock, now_ns() + kLockWaitNs);
    if (!locked) ++unlocked_reads_;
    std::memcpy(copy.data(), d, copy.size());
    if (locked) aref(ctl->lock).store(0, std::memory_order_release);
    LpmView t(L, copy.data(), copy.data() + (L.values_off - L.data_off));
    std::vector<uint8_t> key;
    for (uint32_t k = 0; k < t.nnodes; ++k) {
      LpmNode* n = t.at(t.next(key.empty() ? nullptr : key.data()));
      if (!n) break;
      key.resize(L.key_size);
      std::memcpy(key.data(), &n->prefixlen, 4);
      std::memcpy(key.data() + 4, LpmView::data(n), t.data_len);
      MapEntry e;
      e.key = key;
      const uint8_t* v = t.value(static_cast<uint32_t>((reinterpret_cast<uint8_t*>(n) - t.nodes) / t.node_size + 1));
      e.values.emplace_back(v, v + L.value_size);
      out.push_back(std::move(e));
    }
  }
  return out;
}

size_t MapFile::consume_ring(size_t i, const std::function<void(std::span<const uint8_t>)>& fn) {
  if (i >= count()) return 0;
  const MapHeader& L = layout(i);
  if (L.type != uint32_t(MapType::ringbuf)) return 0;
  auto* c = reinterpret_cast<RingCtl*>(base_ + L.data_off);
  uint8_t* d = base_ + L.data_off + kRingCtl;
  const uint64_t n = L.max_entries;
  // The position is ours (the file's copy is only for the producer to read): a target
  // that overwrites it cannot make us read elsewhere.
  uint64_t cons = own_.empty() ? aref(c->consumer).load(std::memory_order_relaxed) : ring_pos_[i][0];
  size_t got = 0;
  for (;;) {
    const uint64_t prod = aref(c->producer).load(std::memory_order_acquire);
    if (cons >= prod) break;
    if (prod - cons > n) {  // more than the ring holds: not what a producer writes
      ++corrupt_reads_;
      break;
    }
    const uint64_t at = cons % n;
    if (at + 8 > n) {
      ++corrupt_reads_;
      break;
    }
    const uint32_t v = aref(*reinterpret_cast<uint32_t*>(d + at)).load(std::memory_order_acquire);
    if (v & kBusy) break;
    const uint32_t len = v & ~(kBusy | kDiscard);
    if (len + 8 > n - at) {  // a record never wraps: corrupt, stop rather than read past the ring
      ++corrupt_reads_;
      break;
    }
    if (!(v & kDiscard)) {
      fn({d + at + 8, len});
      ++got;
    }
    cons += round8(len + 8);
    if (!own_.empty()) ring_pos_[i][0] = cons;
    // Pairs with the producer's acquire load of consumer: the space is free again.
    aref(c->consumer).store(cons, std::memory_order_release);
  }
  return got;
}

size_t MapFile::consume_perf(size_t i, const std::function<void(uint32_t, std::span<const uint8_t>)>& fn,
                             bool final) {
  if (i >= count()) return 0;
  const MapHeader& L = layout(i);
  if (L.type != uint32_t(MapType::perf_event_array) || own_.empty()) return 0;  // the CLI's side only
  const uint64_t n = L.ring_bytes;
  struct Rec {
    uint64_t stamp;
    uint32_t ring;
    const uint8_t* data;
    uint32_t len;
    uint64_t end;  // the ring's position after it
  };
  std::vector<Rec> recs;
  uint64_t seen_max = 0, busy_min = UINT64_MAX;
  // One walk over ring r from our position: every submitted record (and, with `busy`,
  // the stamp of the first one still being written). Positions and lengths from the
  // file are bounded as consume_ring bounds them.
  // Discarded records free their space too: those before a ring's first record (lead),
  // and those right after a taken record (its end covers them). Without this, a program
  // whose outputs fail (and are discarded) would fill a ring for good.
  std::vector<uint64_t> lead(L.max_entries);
  auto walk = [&](uint32_t r, bool collect) {
    uint8_t* base = base_ + L.data_off + size_t(r) * (kRingCtl + n);
    auto* c = reinterpret_cast<RingCtl*>(base);
    const uint8_t* d = base + kRingCtl;
    uint64_t cons = ring_pos_[i][r];
    bool any = false;  // a record of this ring collected in this walk
    if (collect) lead[r] = cons;
    const uint64_t prod = aref(c->producer).load(std::memory_order_acquire);
    if (prod > cons && prod - cons > n) {
      ++corrupt_reads_;
      return;
    }
    while (cons < prod) {
      const uint64_t at = cons % n;
      const uint32_t v = aref(*reinterpret_cast<const uint32_t*>(d + at)).load(std::memory_order_acquire);
      const uint32_t len = v & ~(kBusy | kDiscard);
      if (at + 8 > n || len + 8 > n - at || (((v & kBusy) || !(v & kDiscard)) && len < 8)) {  // a stamp first
        ++corrupt_reads_;
        return;
      }
      uint64_t stamp;
      std::memcpy(&stamp, d + at + 8, 8);
      if (v & kBusy) {
        if (collect) busy_min = std::min(busy_min, stamp);
        return;
      }
      cons += round8(len + 8);
      if (v & kDiscard) {
        if (collect) (any ? recs.back().end : lead[r]) = cons;
        continue;
      }
      seen_max = std::max(seen_max, stamp);
      if (collect) {
        recs.push_back({stamp, r, d + at + 16, len - 8, cons});
        any = true;
      }
    }
  };
  for (uint32_t r = 0; r < L.max_entries; ++r) walk(r, false);
  const uint64_t first_max = seen_max;
  for (uint32_t r = 0; r < L.max_entries; ++r) walk(r, true);
  const uint64_t limit = final ? UINT64_MAX : std::min(first_max, busy_min - 1);
  // Each ring's records up to the first above the limit (stamps grow along a ring; a
  // scribbled one ends its ring's share here, it cannot reorder what was given).
  std::vector<Rec> take;
  for (size_t k = 0; k < recs.size();) {
    size_t e = k;
    while (e < recs.size() && recs[e].ring == recs[k].ring) ++e;
    for (size_t j = k; j < e && recs[j].stamp <= limit; ++j) take.push_back(recs[j]);
    k = e;
  }
  std::stable_sort(take.begin(), take.end(), [](const Rec& a, const Rec& b) { return a.stamp < b.stamp; });
  for (const Rec& x : take) fn(x.ring, {x.data, x.len});
  // Then the space is free again. Pairs with the producer's acquire load of consumer.
  for (uint32_t r = 0; r < L.max_entries; ++r) ring_pos_[i][r] = std::max(ring_pos_[i][r], lead[r]);
  for (const Rec& x : take) ring_pos_[i][x.ring] = std::max(ring_pos_[i][x.ring], x.end);
  for (uint32_t r = 0; r < L.max_entries; ++r) {
    auto* c = reinterpret_cast<RingCtl*>(base_ + L.data_off + size_t(r) * (kRingCtl + n));
    if (aref(c->consumer).load(std::memory_order_relaxed) != ring_pos_[i][r])
      aref(c->consumer).store(ring_pos_[i][r], std::memory_order_release);
  }
  return take.size();
}

int64_t prog_array_set(MapHeader* m, uint32_t index, uint32_t prog, const Executable* exe) noexcept {
  if (m->type != uint32_t(MapType::prog_array)) return -EINVAL;
  if (index >= m->max_entries) return -E2BIG;
  auto* slot = reinterpret_cast<ProgSlot*>(data_of(m)) + index;
  aref(slot->prog).store(exe ? prog + 1 : 0, std::memory_order_relaxed);
  aref(slot->exe).store(reinterpret_cast<uint64_t>(exe), std::memory_order_release);  // pairs with tail_call_target
  return 0;
}

const Executable* tail_call_target(uint64_t map, uint64_t index, uint64_t* count) noexcept {
  MapHeader* m = map_from_addr(map);
  if (!m || m->type != uint32_t(MapType::prog_array)) return nullptr;
  const uint32_t i = static_cast<uint32_t>(index);  // the kernel compares the index as a u32
  if (i >= m->max_entries) return nullptr;
  if (*count >= kMaxTailCalls) {
    aref(m->dropped).fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  ++*count;  // counted before the slot is read, as the kernel counts
  auto* slot = reinterpret_cast<ProgSlot*>(data_of(m)) + i;
  return reinterpret_cast<const Executable*>(aref(slot->exe).load(std::memory_order_acquire));
}

uint64_t MapFile::ring_dropped(size_t i) const {
  return i < count() ? aref(header(i)->dropped).load(std::memory_order_relaxed) : 0;
}

uint64_t MapFile::entry_count(size_t i) const {
  return i < count() ? aref(header(i)->count).load(std::memory_order_relaxed) : 0;
}

}  // namespace utramp::ebpf
