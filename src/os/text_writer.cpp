#include "os/text_writer.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace utramp::os {

namespace {

std::mutex g_mem_mu;
int g_mem_fd = -1;
pid_t g_mem_pid = 0;
TextWriteCount g_count;  // guarded by g_mem_mu

// /proc/self/mem is bound to the address space it was opened in; a forked child must
// open its own.
Result<int> mem_fd_locked() {
  const pid_t pid = getpid();
  if (g_mem_fd >= 0 && g_mem_pid == pid) return g_mem_fd;
  if (g_mem_fd >= 0) close(g_mem_fd);
  g_mem_fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  if (g_mem_fd < 0)
    return make_error(Errc::io, fmt::format("cannot open /proc/self/mem: {}", strerror(errno)));
  g_mem_pid = pid;
  return g_mem_fd;
}

}  // namespace

void text_fork_lock() { g_mem_mu.lock(); }
void text_fork_unlock() { g_mem_mu.unlock(); }

namespace {

Result<void> write_one_locked(int fd, uint64_t addr, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = pwrite(fd, bytes.data() + done, bytes.size() - done,
                       static_cast<off_t>(addr + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return make_error(Errc::io, fmt::format("cannot write {} bytes at {:#x} through "
                                              "/proc/self/mem: {}",
                                              bytes.size() - done, addr + done,
                                              n < 0 ? strerror(errno) : "short write"));
    done += static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

Result<void> write_text(uint64_t addr, std::span<const uint8_t> bytes) {
  const TextWrite w{addr, bytes};
  return write_texts({&w, 1});
}

Result<void> write_texts(std::span<const TextWrite> writes) {
  std::lock_guard lock(g_mem_mu);
  auto fd = mem_fd_locked();
  if (!fd) return std::move(fd).error();
  for (const TextWrite& w : writes) {
    ++g_count.writes;
    g_count.bytes += w.bytes.size();
    UTRAMP_TRY(write_one_locked(*fd, w.addr, w.bytes));
  }
  return {};
}

TextWriteCount text_write_count() {
  std::lock_guard lock(g_mem_mu);
  return g_count;
}

Result<bool> replace_word(uint64_t addr, uint64_t expected, uint64_t value, bool read_only) {
  auto* word = reinterpret_cast<uint64_t*>(addr);
  if (!read_only) return __atomic_compare_exchange_n(word, &expected, value, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != expected) return false;
  UTRAMP_TRY(write_text(addr, {reinterpret_cast<const uint8_t*>(&value), sizeof value}));
  return true;
}

Result<void> sync_cores() {
  static std::once_flag once;
  static int reg_errno = 0;
  std::call_once(once, [] {
    if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) != 0)
      reg_errno = errno;
  });
  if (reg_errno)
    return make_error(Errc::unsupported,
                      fmt::format("membarrier(REGISTER_PRIVATE_EXPEDITED_SYNC_CORE): {}",
                                  strerror(reg_errno)));
  if (syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) != 0)
    return make_error(Errc::io, fmt::format("membarrier(PRIVATE_EXPEDITED_SYNC_CORE): {}",
                                            strerror(errno)));
  return {};
}

namespace {
std::atomic<size_t> g_parked{0};
std::atomic<uint64_t> g_scans{0};
// The count of this thread's outermost ThreadCountOnce (0: none alive).
// (32 bits each, one 8-byte slot of the agent's static TLS, which has a budget:
// unit_boundary.agent_tls.)
thread_local uint32_t t_scope_count = 0;
thread_local uint32_t t_scope_depth = 0;
}  // namespace

void set_own_thread_parked(bool parked) {
  if (parked) g_parked.fetch_add(1, std::memory_order_acq_rel);
  else g_parked.fetch_sub(1, std::memory_order_acq_rel);
}

Result<size_t> thread_count() {
  if (t_scope_count) return t_scope_count;
  g_scans.fetch_add(1, std::memory_order_relaxed);
  DIR* d = opendir("/proc/self/task");
  if (!d) return make_error(Errc::io, fmt::format("/proc/self/task: {}", strerror(errno)));
  size_t n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  const size_t parked = g_parked.load(std::memory_order_acquire);
  return n > parked ? n - parked : 1;
}

ThreadCountOnce::ThreadCountOnce() : outer_(t_scope_depth++ == 0) {
  if (!outer_) return;
  auto n = thread_count();
  t_scope_count = n ? static_cast<uint32_t>(*n) : 0;  // a failed scan is asked again (and fails again) each time
}

ThreadCountOnce::~ThreadCountOnce() {
  --t_scope_depth;
  if (outer_) t_scope_count = 0;
}

uint64_t thread_scans() { return g_scans.load(std::memory_order_relaxed); }

}  // namespace utramp::os
