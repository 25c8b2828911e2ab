#include "launch.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>

#include "os/elf_file.hpp"
#include "os/file.hpp"
#include "trace/trace_dir.hpp"

namespace utramp::cli {

namespace {

Result<std::string> find_program(const std::string& prog) {
  std::string why = fmt::format("{}: no such file", prog);
  auto check = [&](const std::string& p) -> bool {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) return false;
    if (!S_ISREG(st.st_mode)) {
      why = fmt::format("{}: not a regular file", p);
      return false;
    }
    if (access(p.c_str(), X_OK) != 0) {
      why = fmt::format("{}: not executable", p);
      return false;
    }
    return true;
  };
  if (prog.find('/') != std::string::npos) {
    if (check(prog)) return prog;
    return make_error(Errc::not_found, why);
  }
  const char* path = getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t pos = 0; pos <= dirs.size();) {
    const size_t c = std::min(dirs.find(':', pos), dirs.size());
    std::string dir = dirs.substr(pos, c - pos);
    if (dir.empty()) dir = ".";
    if (check(dir + "/" + prog)) return dir + "/" + prog;
    pos = c + 1;
  }
  if (why.find("not ") == std::string::npos) why = fmt::format("{}: not found in PATH", prog);
  return make_error(Errc::not_found, why);
}

// The interpreter a #! script names ("" if `path` is not a script).
std::string script_interpreter(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string line;
  if (!std::getline(f, line) || !line.starts_with("#!")) return {};
  line = line.substr(2);
  const size_t b = line.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  line = line.substr(b);
  return line.substr(0, line.find_first_of(" \t\r"));
}

// Why the loader would run `path` in secure mode (AT_SECURE), ignoring LD_PRELOAD; "" if
// it would not.
std::string secure_mode(const std::string& path, const struct stat& st) {
  if ((st.st_mode & S_ISUID) && st.st_uid != geteuid())
    return "it is set-user-ID (the loader ignores LD_PRELOAD for it)";
  if ((st.st_mode & S_ISGID) && st.st_gid != getegid())
    return "it is set-group-ID (the loader ignores LD_PRELOAD for it)";
  if (getxattr(path.c_str(), "security.capability", nullptr, 0) > 0 && geteuid() != 0)
    return "it has file capabilities (the loader ignores LD_PRELOAD for it)";
  return {};
}

// Why the agent cannot be loaded into the ELF at `path`; "" if it can.
Result<std::string> agent_refusal(const std::string& path) {
  auto elf = os::ElfFile::open(path);
  if (!elf) return std::move(elf).error();
  if (!(*elf)->has_interp())
    return std::string(
        "it is statically linked: utramp's agent is loaded by the dynamic loader (LD_PRELOAD), "
        "which a static program does not have");
  struct stat st;
  if (stat(path.c_str(), &st) == 0)
    if (std::string why = secure_mode(path, st); !why.empty()) return why;
  return std::string();
}

}  // namespace

Result<Target> resolve_target(const std::string& program) {
  auto p = find_program(program);
  if (!p) return std::move(p).error();
  Target t;
  t.path = *p;
  t.binary = *p;
  if (std::string interp = script_interpreter(*p); !interp.empty()) {
    auto ip = find_program(interp);
    if (!ip)
      return make_error(Errc::not_found, fmt::format("{}: its interpreter {}", *p, ip.error().message));
    t.interpreter = *ip;
    t.binary = *ip;
  }
  auto why = agent_refusal(t.binary);
  if (!why) return make_error(why.error().code, fmt::format("{}: {}", t.binary, why.error().message));
  if (!why->empty()) {
    const std::string what = t.interpreter.empty() ? t.path : fmt::format("{} (the interpreter of {})", t.binary, t.path);
    return make_error(Errc::unsupported, fmt::format("{} cannot be traced: {}", what, *why));
  }
  return t;
}

std::string unfollowed_exec_note(const Target& t, bool follow_exec) {
  if (follow_exec || t.interpreter.empty()) return {};
  if (t.interpreter.substr(t.interpreter.rfind('/') + 1) != "env") return {};
  return fmt::format("{} is a script started by {}, which only execs the interpreter it names: that program "
                     "is traced with --follow-exec",
                     t.path, t.interpreter);
}

std::string agent_library() { return cli_library("libutramp-agent.so"); }

std::string cli_library(std::string_view file) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return {};
  std::string dir(self, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  const std::string dirs = UTRAMP_AGENT_DIRS;
  std::string first;
  for (size_t pos = 0; pos <= dirs.size();) {
    const size_t c = std::min(dirs.find(':', pos), dirs.size());
    const std::string path = dir + "/" + dirs.substr(pos, c - pos) + "/" + std::string(file);
    if (first.empty()) first = path;
    if (access(path.c_str(), R_OK) == 0) return path;
    pos = c + 1;
  }
  return first;
}

namespace {

std::string temp_root() {
  const char* tmp = getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// The scratch directories' prefixes (ScratchDir::create's callers).
constexpr const char* kScratchPrefixes[] = {"utramp-run-", "utramp-hist-", "utramp-live-"};

// The CLI pid in a scratch directory's name PREFIX-PID-XXXXXX; 0 if it is not one.
pid_t scratch_owner(const std::string& name) {
  for (const char* prefix : kScratchPrefixes) {
    if (!name.starts_with(prefix)) continue;
    const std::string rest = name.substr(std::strlen(prefix));
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || rest.size() - dash - 1 != 6 ||
        rest.find_first_not_of("0123456789") != dash)
      return 0;
    return static_cast<pid_t>(std::strtol(rest.substr(0, dash).c_str(), nullptr, 10));
  }
  return 0;
}

// The CLI pid in the name of the ring buffer file older versions of `record` made in
// /dev/shm, utramp-PID-N.buffers (2 GiB sparse, left there when that CLI was killed);
// 0 if it is not one. The rings are anonymous now: nothing new is named so.
pid_t old_rings_owner(const std::string& name) {
  constexpr std::string_view prefix = "utramp-", suffix = ".buffers";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return 0;
  const std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const size_t dash = mid.find('-');
  if (dash == 0 || dash == std::string::npos || dash + 1 == mid.size() ||
      mid.find_first_not_of("0123456789-") != std::string::npos || mid.find('-', dash + 1) != std::string::npos)
    return 0;
  return static_cast<pid_t>(std::strtol(mid.substr(0, dash).c_str(), nullptr, 10));
}

// Whether the CLI OWNER is gone: no such process (a pid reused since only delays the
// sweep).
bool owner_gone(pid_t owner) { return owner > 0 && owner != getpid() && kill(owner, 0) != 0 && errno == ESRCH; }

}  // namespace

Result<ScratchDir> ScratchDir::create(const std::string& prefix) {
  std::string tmpl = fmt::format("{}/{}-{}-XXXXXX", temp_root(), prefix, getpid());
  if (!mkdtemp(tmpl.data()))  // mode 0700
    return make_error(Errc::io, fmt::format("cannot create a directory like {}: {}", tmpl, strerror(errno)));
  // Locked until it is removed: sweep_stale_scratch() leaves it alone meanwhile (a
  // sweeper that sees it before the lock is taken sees this CLI's pid running).
  const int fd = open(tmpl.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (fd >= 0) close(fd);
    rmdir(tmpl.c_str());
    return make_error(Errc::io, fmt::format("{}: cannot lock: {}", tmpl, strerror(e)));
  }
  return ScratchDir(tmpl, fd);
}

void ScratchDir::remove() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  path_.clear();
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
}

ScratchDir::~ScratchDir() { remove(); }

void sweep_stale_scratch() {
  const std::string root = temp_root();
  DIR* d = opendir(root.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!owner_gone(scratch_owner(name))) continue;
    const std::string path = root + "/" + name;
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    // The user's own, and not locked: not a live CLI's in another pid namespace.
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && flock(fd, LOCK_EX | LOCK_NB) == 0)
      stale.push_back(path);
    close(fd);
  }
  closedir(d);
  for (const auto& path : stale) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // Ring buffer files of older versions whose CLI is gone: the user's own regular files
  // (unlinking one still mapped by a traced process takes nothing from it).
  if (DIR* shm = opendir("/dev/shm")) {
    while (dirent* e = readdir(shm)) {
      struct stat st;
      if (owner_gone(old_rings_owner(e->d_name)) &&
          fstatat(dirfd(shm), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
          st.st_uid == geteuid())
        unlinkat(dirfd(shm), e->d_name, 0);
    }
    closedir(shm);
  }
}

namespace {

// The C library's own signals (SIGRTMIN's first ones below the SIGRTMIN() programs get:
// thread cancellation, set*id across threads). glibc's posix_spawn (2.36) sets them to
// SIG_IGN in the child, which exec keeps: the program would start with signal 32
// ignored, as it never does when started by a shell (nor by fork and execve). Those the
// CLI does not ignore itself are added to SET, for SIG_DFL in the child; sigaddset
// refuses them, so their bits (the kernel's layout, glibc's sigset_t) are set here, and
// the CLI's own disposition is read with the system call, which glibc's sigaction
// refuses for them too.
void add_reserved_signals(sigset_t* set) {
  for (int sig = __SIGRTMIN; sig < SIGRTMIN; ++sig) {
    struct {
      void (*handler)(int);
      unsigned long flags;
      void (*restorer)();
      uint64_t mask;
    } now{};
    if (syscall(SYS_rt_sigaction, sig, nullptr, &now, sizeof now.mask) == 0 && now.handler == SIG_IGN) continue;
    constexpr int kBits = 8 * sizeof(unsigned long);
    reinterpret_cast<unsigned long*>(set)[(sig - 1) / kBits] |= 1ul << ((sig - 1) % kBits);
  }
}

}  // namespace

Result<Launch> Launch::start(const Target& target, const std::vector<std::string>& argv,
                             const agent::Config& config, const std::string& config_path) {
  sweep_stale_scratch();
  const std::string agent = agent_library();
  if (agent.empty() || access(agent.c_str(), R_OK) != 0)
    return make_error(Errc::not_found, fmt::format("the agent library {} is missing", agent));
  // 0600, created anew, never through a link (the agent trusts only such a file).
  if (auto w = os::write_file_at(AT_FDCWD, "", config_path, agent::dump_config(config)); !w)
    return make_error(Errc::io, "cannot write the agent's configuration: " + w.error().message);
  // The environment and arguments, as execve takes them.
  std::string preload = agent;
  if (const char* p = getenv("LD_PRELOAD"); p && *p) preload += std::string(":") + p;
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    if (v.starts_with("LD_PRELOAD=") || v.starts_with("UTRAMP_AGENT=")) continue;
    env_store.emplace_back(v);
  }
  env_store.push_back("LD_PRELOAD=" + preload);
  env_store.push_back("UTRAMP_AGENT=" + config_path);
  std::vector<char*> envp, args;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_store = argv;
  for (auto& a : argv_store) args.push_back(a.data());
  args.push_back(nullptr);

  Launch l;
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ign, &l.old_int_);
  sigaction(SIGQUIT, &ign, &l.old_quit_);
  l.restore_ = true;
  // posix_spawn, not fork + execve: glibc's child shares the CLI's memory until the exec
  // (CLONE_VM | CLONE_VFORK), so no page table is copied, no page of the CLI's is made
  // copy-on-write and no fork handler runs (about a tenth of the CLI's CPU for a program
  // that exits at once). The program gets the dispositions the CLI got: an ignored
  // SIGINT or SIGQUIT stays ignored through exec, any other is reset to the default (a
  // handler would be by exec anyway); SIGPIPE always (the CLI's own handler, main.cpp).
  // The signal mask is the CLI's, as through fork. Exec's errno is posix_spawn's result,
  // with the child already reaped: the CLI says why, never the child.
  sigset_t to_default;
  sigemptyset(&to_default);
  sigaddset(&to_default, SIGPIPE);
  if (l.old_int_.sa_handler != SIG_IGN) sigaddset(&to_default, SIGINT);
  if (l.old_quit_.sa_handler != SIG_IGN) sigaddset(&to_default, SIGQUIT);
  add_reserved_signals(&to_default);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigdefault(&attr, &to_default);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  std::fflush(nullptr);  // what the CLI printed comes before what the program prints
  pid_t pid = -1;
  const int err = posix_spawn(&pid, target.path.c_str(), nullptr, &attr, args.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (err != 0) return make_error(Errc::io, fmt::format("cannot execute {}: {}", target.path, strerror(err)));
  l.pid_ = pid;
  return l;
}

Launch::Launch(Launch&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), restore_(std::exchange(o.restore_, false)),
      old_int_(o.old_int_), old_quit_(o.old_quit_) {}

void Launch::restore_signals() {
  if (!restore_) return;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGQUIT, &old_quit_, nullptr);
  restore_ = false;
}

Launch::~Launch() {
  if (pid_ > 0) {  // never waited for: an error in the CLI while it ran
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  restore_signals();
}

Ended Launch::wait(const std::function<bool()>& work, int idle_ms) {
  Ended out;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) break;
    if (!work()) std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
  }
  pid_ = -1;
  out.status = status;
  out.signaled = WIFSIGNALED(status);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : out.signaled ? 128 + WTERMSIG(status) : 1;
  out.how = trace::exit_description(status);
  return out;
}

}  // namespace utramp::cli
