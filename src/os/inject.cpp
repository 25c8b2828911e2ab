#include "os/inject.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "os/elf_file.hpp"
#include "os/maps.hpp"

namespace utramp::os {

namespace {

uint64_t mono_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of FIELD ("TracerPid", "Uid") in /proc/PID/status; "" if absent.
std::string status_field(pid_t pid, const std::string& field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(field + ":")) {
      const size_t b = line.find_first_not_of(" \t", field.size() + 1);
      return b == std::string::npos ? std::string() : line.substr(b);
    }
  return {};
}

std::string comm_of(pid_t pid) {
  std::string c = read_text(fmt::format("/proc/{}/comm", pid));
  while (!c.empty() && c.back() == '\n') c.pop_back();
  return c;
}

std::vector<pid_t> task_ids(pid_t pid) {
  std::vector<pid_t> out;
  DIR* d = opendir(fmt::format("/proc/{}/task", pid).c_str());
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  closedir(d);
  return out;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// A symbol defined in OBJECT (mapped at offset 0 at START in PID), by name: its address
// in the process, or 0.
uint64_t symbol_in(pid_t pid, const std::string& object, uint64_t start, const std::string& name) {
  // Through the process's root: its paths are its mount namespace's.
  auto elf = ElfFile::open(fmt::format("/proc/{}/root{}", pid, object));
  if (!elf) elf = ElfFile::open(object);
  if (!elf) return 0;
  for (const ElfSymbol& s : (*elf)->symbols())
    if (s.name == name && s.type == STT_FUNC && s.shndx != SHN_UNDEF && s.value)
      return start - (*elf)->first_load_vaddr() + s.value;
  return 0;
}

}  // namespace

std::string ptrace_refusal(pid_t pid) {
  const bool privileged = geteuid() == 0;
  std::string scope = read_text("/proc/sys/kernel/yama/ptrace_scope");
  while (!scope.empty() && (scope.back() == '\n' || scope.back() == ' ')) scope.pop_back();
  if (scope == "3")
    return "Yama's kernel.yama.ptrace_scope is 3 (no attach): no process may attach to another "
           "until the system restarts";
  if (scope == "2" && !privileged)
    return "Yama's kernel.yama.ptrace_scope is 2 (admin-only attach): only a process with "
           "CAP_SYS_PTRACE (root) may attach";
  std::istringstream uids(status_field(pid, "Uid"));
  uid_t real = 0, eff = 0, saved = 0;
  if (uids >> real >> eff >> saved && !privileged &&
      (real != geteuid() || eff != geteuid() || saved != geteuid()))
    return fmt::format("process {} runs as uid {} (effective {}), this utramp as uid {}: only its "
                       "own user or root (CAP_SYS_PTRACE) may attach",
                       pid, real, eff, geteuid());
  if (scope == "1" && !privileged)
    return "Yama's kernel.yama.ptrace_scope is 1 (restricted): only an ancestor of the process, "
           "or one it named with prctl(PR_SET_PTRACER), may attach; run utramp as root "
           "(CAP_SYS_PTRACE), or set kernel.yama.ptrace_scope=0";
  return {};
}

Result<ProcessFacts> check_attachable(pid_t pid) {
  ProcessFacts f;
  f.pid = pid;
  if (pid <= 0) return make_error(Errc::invalid_argument, fmt::format("{} is not a process id", pid));
  const std::string stat = read_text(fmt::format("/proc/{}/stat", pid));
  const size_t paren = stat.rfind(')');
  if (stat.empty() || paren == std::string::npos || paren + 2 >= stat.size())
    return make_error(Errc::not_found, fmt::format("no process {}", pid));
  // /proc/PID also answers for a thread id that is not a process.
  if (std::atoi(status_field(pid, "Tgid").c_str()) != pid)
    return make_error(Errc::unsupported,
                      fmt::format("{} is a thread of process {}, not a process: give the process id",
                                  pid, status_field(pid, "Tgid")));
  const char state = stat[paren + 2];
  if (state == 'Z' || state == 'X')
    return make_error(Errc::unsupported,
                      fmt::format("process {} ({}) is a zombie: it has exited and only waits for its "
                                  "parent to reap it",
                                  pid, comm_of(pid)));
  if (const std::string tracer = status_field(pid, "TracerPid"); !tracer.empty() && tracer != "0")
    return make_error(Errc::unsupported,
                      fmt::format("process {} ({}) is already traced by process {} ({}): ptrace "
                                  "allows one tracer at a time (gdb, strace); end that one first",
                                  pid, comm_of(pid), tracer, comm_of(std::atoi(tracer.c_str()))));
  // The environment the process was started with (a later setenv does not show here).
  {
    std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    const std::string want = std::string(kLockdownVar) + "=1";
    for (std::string var; std::getline(in, var, '\0');)
      if (var == want)
        return make_error(Errc::unsupported,
                          fmt::format("process {} ({}) forbids attaching: it was started with {} in "
                                      "its environment (docs/attach.md, \"Lockdown\")",
                                      pid, comm_of(pid), want));
  }
  char exe[4096];
  const ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), exe, sizeof exe - 1);
  if (n > 0) f.exe.assign(exe, static_cast<size_t>(n));
  {
    unsigned char ehdr[20] = {};
    const int fd = open(fmt::format("/proc/{}/exe", pid).c_str(), O_RDONLY | O_CLOEXEC);
    const ssize_t got = fd >= 0 ? pread(fd, ehdr, sizeof ehdr, 0) : -1;
    const int e = errno;
    if (fd >= 0) close(fd);
    if (got < 0) {
      if (std::string why = ptrace_refusal(pid); !why.empty()) return make_error(Errc::unsupported, why);
      return make_error(Errc::io, fmt::format("process {}: cannot read its program: {}", pid, strerror(e)));
    }
    const uint16_t machine = static_cast<uint16_t>(ehdr[18] | (ehdr[19] << 8));
    if (got != sizeof ehdr || memcmp(ehdr, ELFMAG, SELFMAG) != 0 || ehdr[EI_CLASS] != ELFCLASS64 ||
        machine != EM_X86_64)
      return make_error(Errc::unsupported,
                        fmt::format("process {} ({}) is not an x86-64 program (ELF class {}, machine "
                                    "{}): utramp attaches only to x86-64 processes",
                                    pid, f.exe, ehdr[EI_CLASS], machine));
  }
  auto maps = read_maps(pid);
  if (!maps) {
    if (std::string why = ptrace_refusal(pid); !why.empty()) return make_error(Errc::unsupported, why);
    return std::move(maps).error();
  }
  bool loader = false;
  uint64_t libc_start = 0, libdl_start = 0;
  std::string libdl;
  for (const Mapping& m : *maps) {
    const std::string b = base_name(m.path);
    if (b.starts_with("ld-linux")) loader = true;
    if (m.offset != 0) continue;
    if ((b.starts_with("libc.so") || b.starts_with("libc-2.")) && f.libc.empty()) {
      f.libc = m.path;
      libc_start = m.start;
    }
    if (b.starts_with("libdl.so") && libdl.empty()) {
      libdl = m.path;
      libdl_start = m.start;
    }
  }
  if (!loader || f.libc.empty())
    return make_error(Errc::unsupported,
                      fmt::format("process {} ({}) is statically linked: it has no dynamic loader "
                                  "and C library to load utramp's agent with",
                                  pid, f.exe));
  f.dlopen = symbol_in(pid, f.libc, libc_start, "dlopen");  // glibc >= 2.34
  f.dlopen_name = "dlopen";
  if (!f.dlopen && !libdl.empty()) f.dlopen = symbol_in(pid, libdl, libdl_start, "dlopen");
  if (f.dlopen) {
    f.dlerror = symbol_in(pid, f.libc, libc_start, "dlerror");
    if (!f.dlerror && !libdl.empty()) f.dlerror = symbol_in(pid, libdl, libdl_start, "dlerror");
  } else {
    f.dlopen = symbol_in(pid, f.libc, libc_start, "__libc_dlopen_mode");
    f.dlopen_name = "__libc_dlopen_mode";
  }
  if (!f.dlopen)
    return make_error(Errc::unsupported,
                      fmt::format("process {} ({}): its C library {} has no dlopen or "
                                  "__libc_dlopen_mode in its symbol table, and no libdl is loaded",
                                  pid, f.exe, f.libc));
  f.threads = task_ids(pid).size();
  return f;
}

namespace {

// The threads of one process, stopped under ptrace for the length of an injection.
class Stopped {
 public:
  explicit Stopped(pid_t pid) : pid_(pid) {}
  Stopped(const Stopped&) = delete;
  Stopped& operator=(const Stopped&) = delete;
  ~Stopped() { release(); }

  // Seizes and interrupts every thread, until a pass over /proc/PID/task finds none new.
  // Each pass interrupts all the threads it found first, and only then waits for their
  // stops: a busy thread stops when the scheduler next runs it, and with more busy
  // threads than cores that is a wait for its turn. Interrupted together, they all wait
  // their turn at once (each stops within microseconds of running); one after the other,
  // each wait would include the turns of every thread still running (seconds for 64
  // spinning threads on two cores: docs/benchmarks.md, "Attach pause").
  Result<void> stop_all() {
    for (bool found = true; found;) UTRAMP_TRY(stop(task_ids(pid_), &found));
    return {};
  }

  // Seizes and interrupts the threads of TIDS not stopped yet, then waits for their
  // stops (one pass of stop_all); *found: whether there was one. A thread that ended
  // meanwhile is left out.
  Result<void> stop(const std::vector<pid_t>& tids, bool* found = nullptr) {
    std::vector<pid_t> interrupted;
    Result<void> failed;
    if (found) *found = false;
    for (pid_t tid : tids) {
      if (threads_.count(tid)) continue;
      if (found) *found = true;
      if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
        const int e = errno;
        if (e == ESRCH) continue;  // it ended since the listing
        if (threads_.empty()) {
          if (std::string why = ptrace_refusal(pid_); !why.empty())
            return make_error(Errc::unsupported, why);
          return make_error(Errc::unsupported,
                            fmt::format("the kernel refused to let this process trace process {} "
                                        "({}): {}",
                                        pid_, comm_of(pid_), strerror(e)));
        }
        failed = make_error(Errc::io, fmt::format("thread {} of process {}: PTRACE_SEIZE: {}", tid,
                                                  pid_, strerror(e)));
        break;
      }
      threads_[tid] = {};
      if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 && errno != ESRCH) {
        failed = make_error(Errc::io, fmt::format("thread {}: PTRACE_INTERRUPT: {}", tid, strerror(errno)));
        break;
      }
      interrupted.push_back(tid);
    }
    // Every thread seized is waited for, even after a failure: release() detaches only
    // stopped threads (PTRACE_DETACH needs a stopped tracee), and a seized thread left
    // unstopped would stay traced.
    for (pid_t tid : interrupted) {
      auto r = wait_stop(tid);
      if (!r && failed) failed = std::move(r).error();
    }
    return failed;
  }

  // Waits for TID's first stop after the interrupt. A signal-delivery stop is a stop too:
  // the signal is kept and delivered when the thread is let go.
  Result<void> wait_stop(pid_t tid) {
    int st = 0;
    for (;;) {
      if (waitpid(tid, &st, __WALL) < 0) {
        if (errno == EINTR) continue;
        return make_error(Errc::io, fmt::format("thread {}: waitpid: {}", tid, strerror(errno)));
      }
      break;
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      threads_.erase(tid);
      if (tid == pid_) return make_error(Errc::not_found, fmt::format("process {} ended", pid_));
      return {};
    }
    if (WIFSTOPPED(st) && (st >> 16) != PTRACE_EVENT_STOP) threads_[tid].signal = WSTOPSIG(st);
    threads_[tid].stopped = true;
    return {};
  }

  // Lets every thread go: no ptrace stays attached.
  void release() {
    for (auto& [tid, t] : threads_)
      if (t.stopped) (void)ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(t.signal)));
    threads_.clear();
  }

  // The thread to make the call: see inject.hpp, step 3.
  pid_t choose() const {
    pid_t best = 0;
    int best_rank = 99;
    for (const auto& [tid, t] : threads_) {
      if (!t.stopped) continue;
      user_regs_struct r{};
      if (ptrace(PTRACE_GETREGS, tid, nullptr, &r) != 0) continue;
      const long nr = static_cast<long>(r.orig_rax);
      const bool blocked = nr >= 0 && nr != SYS_futex;
      int rank = (blocked ? 0 : 2) + (tid == pid_ ? 0 : 1) + (t.signal ? 4 : 0);
      if (rank < best_rank) {
        best_rank = rank;
        best = tid;
      }
    }
    return best;
  }

  size_t count() const { return threads_.size(); }
  bool stopped(pid_t tid) const {
    auto it = threads_.find(tid);
    return it != threads_.end() && it->second.stopped;
  }
  int& signal_of(pid_t tid) { return threads_[tid].signal; }
  void forget(pid_t tid) { threads_.erase(tid); }

 private:
  struct Thread {
    bool stopped = false;
    int signal = 0;  // the signal its stop was for, delivered when it is let go
  };
  pid_t pid_;
  std::map<pid_t, Thread> threads_;
};

// The memory of the stopped process, through /proc/PID/mem.
class Memory {
 public:
  explicit Memory(pid_t pid) : fd_(open(fmt::format("/proc/{}/mem", pid).c_str(), O_RDWR | O_CLOEXEC)) {}
  ~Memory() {
    if (fd_ >= 0) close(fd_);
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool write(uint64_t addr, const void* p, size_t n) const {
    return pwrite(fd_, p, n, static_cast<off_t>(addr)) == static_cast<ssize_t>(n);
  }
  std::string read_string(uint64_t addr, size_t max) const {
    std::string s(max, '\0');
    const ssize_t n = pread(fd_, s.data(), max, static_cast<off_t>(addr));
    s.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return s.substr(0, s.find('\0'));
  }

 private:
  int fd_;
};

// One thread's whole register state: general registers and the XSAVE area.
struct SavedState {
  user_regs_struct regs{};
  std::vector<uint8_t> xstate;
};

Result<SavedState> save_state(pid_t tid) {
  SavedState s;
  if (ptrace(PTRACE_GETREGS, tid, nullptr, &s.regs) != 0)
    return make_error(Errc::io, fmt::format("thread {}: PTRACE_GETREGS: {}", tid, strerror(errno)));
  s.xstate.resize(1 << 16);
  iovec iov{s.xstate.data(), s.xstate.size()};
  if (ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov) != 0)
    return make_error(Errc::io, fmt::format("thread {}: PTRACE_GETREGSET NT_X86_XSTATE: {}", tid, strerror(errno)));
  s.xstate.resize(iov.iov_len);
  return s;
}

Result<void> restore_state(pid_t tid, SavedState& s) {
  iovec iov{s.xstate.data(), s.xstate.size()};
  if (ptrace(PTRACE_SETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov) != 0)
    return make_error(Errc::io, fmt::format("thread {}: PTRACE_SETREGSET NT_X86_XSTATE: {}", tid, strerror(errno)));
  if (ptrace(PTRACE_SETREGS, tid, nullptr, &s.regs) != 0)
    return make_error(Errc::io, fmt::format("thread {}: PTRACE_SETREGS: {}", tid, strerror(errno)));
  return {};
}

// Calls FN(A0, A1) on the stopped thread TID, with TEXT (when not empty) copied below
// its stack and passed as A0, and returns rax. The frame, from the saved rsp down:
//
//   saved rsp - 128        the red zone, left alone (a leaf function's locals)
//   ...                    TEXT, NUL-terminated, 16-aligned
//   sp                     16-aligned
//   sp - 8                 return address 0: rsp at FN's entry (rsp + 8 is 16-aligned,
//                          as after a call)
struct CallResult {
  uint64_t rax = 0;
  bool timed_out = false;
};
Result<CallResult> remote_call(Stopped& threads, const Memory& mem, pid_t tid, const user_regs_struct& saved,
                               uint64_t fn, const std::string& text, uint64_t a0, uint64_t a1, int timeout_ms) {
  constexpr uint64_t kRedZone = 128;
  uint64_t text_at = (saved.rsp - kRedZone - text.size() - 1) & ~uint64_t{15};
  const uint64_t sp = text_at - 16;
  if (!text.empty()) {
    if (!mem.write(text_at, text.c_str(), text.size() + 1))
      return make_error(Errc::io, fmt::format("thread {}: cannot write below its stack at {:#x}", tid, text_at));
    a0 = text_at;
  }
  const uint64_t zero = 0;
  if (!mem.write(sp - 8, &zero, sizeof zero))
    return make_error(Errc::io, fmt::format("thread {}: cannot write below its stack at {:#x}", tid, sp - 8));
  user_regs_struct r = saved;
  r.rip = fn;
  r.rsp = sp - 8;
  r.rdi = a0;
  r.rsi = a1;
  r.rax = 0;
  r.orig_rax = static_cast<unsigned long long>(-1);  // no system call to restart
  if (ptrace(PTRACE_SETREGS, tid, nullptr, &r) != 0)
    return make_error(Errc::io, fmt::format("thread {}: PTRACE_SETREGS: {}", tid, strerror(errno)));
  int deliver = threads.signal_of(tid);
  threads.signal_of(tid) = 0;
  const uint64_t give_up = mono_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
  for (;;) {
    if (ptrace(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(deliver))) != 0)
      return make_error(Errc::io, fmt::format("thread {}: PTRACE_CONT: {}", tid, strerror(errno)));
    deliver = 0;
    int st = 0;
    pid_t w;
    while ((w = waitpid(tid, &st, __WALL | WNOHANG)) == 0) {
      if (mono_ns() >= give_up) {
        CallResult c;
        c.timed_out = true;
        return c;
      }
      const timespec nap{0, 20000};
      nanosleep(&nap, nullptr);
    }
    if (w < 0) return make_error(Errc::io, fmt::format("thread {}: waitpid: {}", tid, strerror(errno)));
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      threads.forget(tid);
      return make_error(Errc::io, fmt::format("thread {} ended during the call", tid));
    }
    if ((st >> 16) == PTRACE_EVENT_STOP) continue;  // our interrupt, still pending
    const int sig = WSTOPSIG(st);
    user_regs_struct now{};
    if (ptrace(PTRACE_GETREGS, tid, nullptr, &now) != 0)
      return make_error(Errc::io, fmt::format("thread {}: PTRACE_GETREGS: {}", tid, strerror(errno)));
    if (sig == SIGSEGV && now.rip == 0) {
      CallResult c;
      c.rax = now.rax;
      return c;
    }
    deliver = sig;  // the program's own signal: delivered as it would have been
  }
}

}  // namespace

Result<Injected> inject_library(pid_t pid, const std::string& library, int timeout_ms) {
  if (library.empty() || library[0] != '/' || library.size() > 1024)
    return make_error(Errc::invalid_argument, fmt::format("'{}': an absolute path is needed", library));
  auto facts = check_attachable(pid);
  if (!facts) return std::move(facts).error();
  Injected out;
  const uint64_t t0 = mono_ns();
  Stopped threads(pid);
  UTRAMP_TRY(threads.stop_all());
  out.threads = threads.count();
  const pid_t tid = threads.choose();
  if (!tid) return make_error(Errc::io, fmt::format("process {}: no stopped thread to make the call", pid));
  out.tid = tid;
  Memory mem(pid);
  if (!mem.ok()) return make_error(Errc::io, fmt::format("process {}: cannot open its memory: {}", pid, strerror(errno)));
  auto saved = save_state(tid);
  if (!saved) return std::move(saved).error();
  constexpr uint64_t kRtldDlopen = 0x80000000;  // glibc's __RTLD_DLOPEN, for __libc_dlopen_mode
  const uint64_t mode = RTLD_NOW | (facts->dlopen_name == "dlopen" ? 0 : kRtldDlopen);
  auto call = remote_call(threads, mem, tid, saved->regs, facts->dlopen, library, 0, mode, timeout_ms);
  if (call && call->timed_out) {
    // The thread is inside dlopen, maybe holding the loader's lock: putting its
    // registers back would abandon that. It is left to finish; the others go.
    threads.forget(tid);
    (void)ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    return make_error(Errc::busy,
                      fmt::format("process {}: thread {} did not return from {} within {} ms; it was "
                                  "left to finish (the library may still be loaded)",
                                  pid, tid, facts->dlopen_name, timeout_ms));
  }
  if (call) {
    out.handle = call->rax;
    if (!out.handle && facts->dlerror) {
      auto msg = remote_call(threads, mem, tid, saved->regs, facts->dlerror, "", 0, 0, timeout_ms);
      if (msg && !msg->timed_out && msg->rax) out.error = mem.read_string(msg->rax, 1024);
    }
    if (!out.handle && out.error.empty()) out.error = "dlopen returned NULL";
  }
  auto restored = restore_state(tid, *saved);
  threads.release();
  out.pause_ns = mono_ns() - t0;
  if (!call) return std::move(call).error();
  if (!restored) return std::move(restored).error();
  return out;
}

namespace {

// unblock_signal and block_signal: SIG out of (blocked false) or into (true) the masks.
Result<std::vector<pid_t>> set_signal_blocked(pid_t pid, const std::vector<pid_t>& tids, int sig, bool blocked) {
  if (sig < 1 || sig > 64) return make_error(Errc::invalid_argument, fmt::format("signal {}", sig));
  Stopped threads(pid);
  // A thread that ended since it was listed (glibc's own threads block every signal
  // while they end) is left out; a live one of another process is refused.
  std::vector<pid_t> ours;
  for (pid_t tid : tids) {
    if (tid <= 0) return make_error(Errc::invalid_argument, fmt::format("{} is not a thread id", tid));
    const std::string tgid = status_field(tid, "Tgid");
    if (tgid.empty()) continue;
    if (tgid != std::to_string(pid))
      return make_error(Errc::invalid_argument, fmt::format("{} is not a thread of process {}", tid, pid));
    ours.push_back(tid);
  }
  UTRAMP_TRY(threads.stop(ours));
  std::vector<pid_t> changed;
  for (pid_t tid : ours) {
    if (!threads.stopped(tid)) continue;  // it ended meanwhile
    uint64_t mask = 0;
    if (ptrace(PTRACE_GETSIGMASK, tid, reinterpret_cast<void*>(sizeof mask), &mask) != 0) {
      if (errno == ESRCH) continue;  // killed while stopped
      return make_error(Errc::io, fmt::format("thread {}: PTRACE_GETSIGMASK: {}", tid, strerror(errno)));
    }
    const uint64_t bit = uint64_t{1} << (sig - 1);
    if (((mask & bit) != 0) == blocked) continue;
    mask ^= bit;
    if (ptrace(PTRACE_SETSIGMASK, tid, reinterpret_cast<void*>(sizeof mask), &mask) != 0) {
      if (errno == ESRCH) continue;
      return make_error(Errc::io, fmt::format("thread {}: PTRACE_SETSIGMASK: {}", tid, strerror(errno)));
    }
    changed.push_back(tid);
  }
  return changed;  // the threads go on as ~Stopped detaches them
}

}  // namespace

Result<std::vector<pid_t>> unblock_signal(pid_t pid, const std::vector<pid_t>& tids, int sig) {
  return set_signal_blocked(pid, tids, sig, false);
}

Result<std::vector<pid_t>> block_signal(pid_t pid, const std::vector<pid_t>& tids, int sig) {
  return set_signal_blocked(pid, tids, sig, true);
}

}  // namespace utramp::os
