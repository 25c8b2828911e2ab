// The trace directory: writer (record) and streaming reader (replay, report, dump).
// The format is docs/trace-format.md; keep the two in step.
#include "trace/trace_dir.hpp"
#include "trace/zstd_frames.hpp"

#include "os/elf_file.hpp"
#include "os/file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <list>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

namespace utramp::trace {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxOpenFiles = 128;  // events files the writer keeps open at once

std::string errno_text(int err) { return std::strerror(err); }

uint64_t thread_key(uint32_t pid, uint32_t tid) { return (uint64_t{pid} << 32) | tid; }

std::string events_name(uint32_t pid, uint32_t tid) {
  return "events-" + std::to_string(pid) + "-" + std::to_string(tid) + ".bin";
}
// The last program's files, and (IMAGE >= 0) those of program IMAGE before an exec.
std::string functions_name(uint32_t pid, int64_t image = -1) {
  return "functions-" + std::to_string(pid) + (image < 0 ? "" : "-" + std::to_string(image)) + ".tsv";
}
std::string process_name(uint32_t pid) { return "process-" + std::to_string(pid) + ".json"; }
std::string maps_name(uint32_t pid, int64_t image = -1) {
  return "maps-" + std::to_string(pid) + (image < 0 ? "" : "-" + std::to_string(image)) + ".txt";
}

// Parses "PREFIX<n>[-<m>]SUFFIX"; m is required when `two`.
bool parse_name(const std::string& name, const char* prefix, const char* suffix, bool two,
                uint32_t* a, uint32_t* b) {
  const size_t pl = std::strlen(prefix), sl = std::strlen(suffix);
  if (name.size() <= pl + sl || name.compare(0, pl, prefix) != 0 ||
      name.compare(name.size() - sl, sl, suffix) != 0)
    return false;
  const std::string mid = name.substr(pl, name.size() - pl - sl);
  unsigned long x = 0, y = 0;
  int used = 0;
  if (two) {
    if (std::sscanf(mid.c_str(), "%lu-%lu%n", &x, &y, &used) != 2) return false;
  } else if (std::sscanf(mid.c_str(), "%lu%n", &x, &used) != 1) {
    return false;
  }
  if (static_cast<size_t>(used) != mid.size() || x > UINT32_MAX || y > UINT32_MAX) return false;
  *a = static_cast<uint32_t>(x);
  if (b) *b = static_cast<uint32_t>(y);
  return true;
}

// Runs F(dirfd) with a descriptor of DIR: the path forms of the process files' writers.
template <class F>
auto with_dir(const std::string& dir, F f) -> decltype(f(0)) {
  const int dfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return make_error(errno == ENOENT ? Errc::not_found : Errc::io, dir + ": " + errno_text(errno));
  auto r = f(dfd);
  ::close(dfd);
  return r;
}


// False with errno set when PATH cannot be read.
bool read_small_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

// Files a trace directory may hold; create() removes only these.
bool is_trace_file(const std::string& name) {
  uint32_t a, b;
  std::string n = name;
  if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) n.resize(n.size() - 4);
  return name == "reserve.tmp" || n == "info.json" || n == "agent.json" || n == "buffers.shm" ||
         parse_name(n, "events-", ".bin", true, &a, &b) ||
         parse_name(n, "functions-", ".tsv", false, &a, nullptr) ||
         parse_name(n, "functions-", ".tsv", true, &a, &b) ||
         parse_name(n, "process-", ".json", false, &a, nullptr) ||
         parse_name(n, "maps-", ".txt", false, &a, nullptr) ||
         parse_name(n, "maps-", ".txt", true, &a, &b) ||
         parse_name(n, "agent-", ".log", false, &a, nullptr);
}

json to_json(const TraceInfo& info) {
  json threads = json::array();
  for (const auto& t : info.threads) {
    json j{{"pid", t.pid}, {"tid", t.tid}, {"events", t.events}, {"lost", t.lost}};
    if (t.unsaved) j["unsaved"] = t.unsaved;
    if (!t.overwritten.empty()) j["overwritten"] = t.overwritten;
    threads.push_back(std::move(j));
  }
  json j{{"format", "utramp-trace"},
              {"version", info.version},
              {"command", info.command},
              {"binary", info.binary},
              {"build_id", info.build_id},
              {"date", info.date},
              {"tracer", info.tracer},
              {"time_unit", info.time_unit},
              {"ticks_per_ns", info.ticks_per_ns},
              {"start_time", info.start_time},
              {"buffer_mode", info.buffer_mode},
              {"compression", info.compression},
              {"exit", info.exit},
              {"exit_code", info.exit_code},
              {"unclaimed_threads", info.unclaimed_threads},
              {"threads", threads},
              {"state", info.state},
              {"recorder_pid", info.recorder_pid},
              {"still_running", info.still_running}};
  if (!info.cut_reason.empty()) j["cut"] = {{"reason", info.cut_reason}, {"time", info.cut_time}};
  if (!info.rings_overwritten.empty()) j["rings_overwritten"] = info.rings_overwritten;
  return j;
}

// Reads what it can; `problem` says what was wrong with the rest.
TraceInfo info_from_json(const json& j, std::string* problem) {
  TraceInfo info;
  auto get = [&](const char* key, auto& field) {
    if (!j.contains(key)) return;
    try {
      j.at(key).get_to(field);
    } catch (const json::exception&) {
      if (problem->empty()) *problem = std::string("bad value for \"") + key + "\"";
    }
  };
  get("version", info.version);
  get("command", info.command);
  get("binary", info.binary);
  get("build_id", info.build_id);
  get("date", info.date);
  get("tracer", info.tracer);
  get("time_unit", info.time_unit);
  get("ticks_per_ns", info.ticks_per_ns);
  get("start_time", info.start_time);
  get("buffer_mode", info.buffer_mode);
  get("compression", info.compression);
  get("exit", info.exit);
  get("exit_code", info.exit_code);
  get("unclaimed_threads", info.unclaimed_threads);
  get("state", info.state);  // absent (older recorders): complete, as they wrote it last
  get("recorder_pid", info.recorder_pid);
  get("still_running", info.still_running);
  get("rings_overwritten", info.rings_overwritten);
  if (j.contains("cut") && j["cut"].is_object()) {
    try {
      info.cut_reason = j["cut"].value("reason", std::string("unknown"));
      info.cut_time = j["cut"].value("time", uint64_t{0});
    } catch (const json::exception&) {
      if (problem->empty()) *problem = "bad value for \"cut\"";
    }
  }
  if (j.contains("threads") && j["threads"].is_array()) {
    for (const auto& t : j["threads"]) {
      ThreadInfo ti;
      try {
        ti.pid = t.at("pid").get<uint32_t>();
        ti.tid = t.at("tid").get<uint32_t>();
        ti.events = t.value("events", uint64_t{0});
        ti.lost = t.value("lost", uint64_t{0});
        ti.unsaved = t.value("unsaved", uint64_t{0});
        ti.overwritten = t.value("overwritten", std::string());
      } catch (const json::exception&) {
        if (problem->empty()) *problem = "bad entry in \"threads\"";
        continue;
      }
      info.threads.push_back(ti);
    }
  }
  if (info.tracer != "function_graph" && info.tracer != "function") {
    if (problem->empty()) *problem = "unknown tracer \"" + info.tracer + "\", using function_graph";
    info.tracer = "function_graph";
  }
  if (info.time_unit != "ns" && info.time_unit != "tsc") {
    if (problem->empty()) *problem = "unknown time_unit \"" + info.time_unit + "\", using ns";
    info.time_unit = "ns";
  }
  if (info.state != "recording" && info.state != "complete" && info.state != "cut") {
    if (problem->empty()) *problem = "unknown state \"" + info.state + "\"";
    info.state = "complete";
  }
  if (info.time_unit == "tsc" && !(info.ticks_per_ns > 0)) {
    if (problem->empty()) *problem = "ticks_per_ns must be > 0, using 1";
    info.ticks_per_ns = 1.0;
  }
  return info;
}

}  // namespace

// ---------------------------------------------------------------------------------
// The files of one traced process

std::string exit_description(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited " + std::to_string(WEXITSTATUS(wait_status));
  if (!WIFSIGNALED(wait_status)) return {};
  const int sig = WTERMSIG(wait_status);
  const char* abbrev = sigabbrev_np(sig);
  return "killed by " + (abbrev ? "SIG" + std::string(abbrev) : "signal " + std::to_string(sig)) +
         (WCOREDUMP(wait_status) ? " (core dumped)" : "");
}

Result<void> write_functions_file(const std::string& dir, uint32_t pid,
                                  std::span<const Function> functions) {
  return with_dir(dir, [&](int dfd) { return write_functions_file(dfd, dir, pid, functions); });
}

Result<void> write_functions_file(int dirfd, const std::string& dir, uint32_t pid,
                                  std::span<const Function> functions) {
  std::string text = "# address\tsize\tname\tobject\n";
  size_t left_out = 0;
  const Function* first_bad = nullptr;
  for (const auto& f : functions) {
    if (f.name.find_first_of("\t\n") != std::string::npos ||
        f.object.find_first_of("\t\n") != std::string::npos) {
      if (!left_out++) first_bad = &f;
      continue;
    }
    char num[64];
    std::snprintf(num, sizeof num, "%#" PRIx64 "\t%" PRIu64 "\t", f.addr, f.size);
    text += num;
    text += f.name;
    text += '\t';
    text += f.object;
    text += '\n';
  }
  const std::string path = dir + "/" + functions_name(pid);
  if (auto w = os::write_file_at(dirfd, dir, functions_name(pid), text); !w) return w;
  if (left_out)
    return make_error(Errc::invalid_argument,
                      path + ": " + std::to_string(left_out) +
                          " function(s) left out: a TAB or newline in the name or object path "
                          "(the first: " + json(first_bad->name).dump() + " in " +
                          json(first_bad->object).dump() + ")");
  return {};
}

Result<void> write_process_file(const std::string& dir, const ProcessInfo& p) {
  return with_dir(dir, [&](int dfd) { return write_process_file(dfd, dir, p); });
}

Result<void> write_process_file(int dirfd, const std::string& dir, const ProcessInfo& p) {
  json j{{"pid", p.pid},           {"parent", p.parent},
         {"command", p.command},   {"start_time", p.start_time},
         {"end_time", p.end_time}, {"exit", p.exit}};
  if (!p.images.empty()) {
    json images = json::array();
    for (const auto& im : p.images) images.push_back({{"time", im.time}, {"command", im.command}});
    j["images"] = std::move(images);
  }
  return os::write_file_at(dirfd, dir, process_name(p.pid),
                           j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

Result<ProcessInfo> read_process_file(const std::string& dir, uint32_t pid) {
  return with_dir(dir, [&](int dfd) { return read_process_file(dfd, dir, pid); });
}

Result<ProcessInfo> read_process_file(int dirfd, const std::string& dir, uint32_t pid) {
  const std::string path = dir + "/" + process_name(pid);
  std::string text;
  const int fd = ::openat(dirfd, process_name(pid).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return make_error(Errc::not_found, path + ": no such file");
    return make_error(Errc::io, path + ": " + errno_text(errno));
  }
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const bool read_ok = regular && read_small_file("/proc/self/fd/" + std::to_string(fd), &text);
  const int err = errno;
  ::close(fd);
  if (!regular) return make_error(Errc::bad_format, path + ": " + os::file_kind(st.st_mode) + ", not a regular file");
  if (!read_ok) return make_error(Errc::io, path + ": " + errno_text(err));
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return make_error(Errc::bad_format, process_name(pid) + ": not valid JSON");
  ProcessInfo p;
  p.pid = pid;
  try {
    p.parent = j.value("parent", 0u);
    if (j.contains("command")) j.at("command").get_to(p.command);
    p.start_time = j.value("start_time", uint64_t{0});
    p.end_time = j.value("end_time", uint64_t{0});
    p.exit = j.value("exit", std::string());
    if (j.contains("images"))
      for (const auto& im : j.at("images")) {
        ProgramImage image;
        image.time = im.value("time", uint64_t{0});
        if (im.contains("command")) im.at("command").get_to(image.command);
        p.images.push_back(std::move(image));
      }
  } catch (const json::exception&) {
    return make_error(Errc::bad_format, process_name(pid) + ": bad values");
  }
  for (size_t i = 1; i < p.images.size(); ++i)
    if (p.images[i].time < p.images[i - 1].time)
      return make_error(Errc::bad_format, process_name(pid) + ": images not in time order (image " +
                                              std::to_string(i) + " before image " + std::to_string(i - 1) + ")");
  return p;
}

Result<void> write_maps_file(const std::string& dir, uint32_t pid, std::string_view maps) {
  return with_dir(dir, [&](int dfd) { return write_maps_file(dfd, dir, pid, maps); });
}

Result<void> write_maps_file(int dirfd, const std::string& dir, uint32_t pid, std::string_view maps) {
  return os::write_file_at(dirfd, dir, maps_name(pid), maps);
}

Result<void> keep_image_files(int dirfd, const std::string& dir, uint32_t pid, uint32_t index) {
  for (const auto& [from, to] : {std::pair{functions_name(pid), functions_name(pid, index)},
                                 std::pair{maps_name(pid), maps_name(pid, index)}})
    if (::renameat(dirfd, from.c_str(), dirfd, to.c_str()) != 0 && errno != ENOENT)
      return make_error(Errc::io, dir + "/" + from + " -> " + to + ": " + errno_text(errno));
  return {};
}

// ---------------------------------------------------------------------------------
// TraceWriter

namespace {

// Space kept free for the end of a recording (info.json and its temporary copy, the
// process file record completes): enough for thousands of threads' counts.
constexpr off_t kReserveBytes = 1 << 20;
constexpr const char* kReserveName = "reserve.tmp";

uint64_t events_in(std::span<const Event> events) {
  uint64_t n = 0;
  for (const Event& e : events)
    n += e.type == static_cast<uint8_t>(EventType::leaf) ? 2 : e.type != static_cast<uint8_t>(EventType::lost);
  return n;
}

// The time of the first event of EVENTS that has one (arg and string events carry
// values), or `otherwise`.
uint64_t first_time(std::span<const Event> events, uint64_t otherwise) {
  for (const Event& e : events)
    if (e.type != static_cast<uint8_t>(EventType::arg) && e.type != static_cast<uint8_t>(EventType::string))
      return e.time;
  return otherwise;
}

// The recorder info.json in DIRFD names, 0 when unknown.
uint32_t recorder_in(int dirfd) {
  const int fd = ::openat(dirfd, "info.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < (1u << 20);)
    text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("recorder_pid") || !j["recorder_pid"].is_number_unsigned()) return 0;
  return j["recorder_pid"].get<uint32_t>();
}

// DIR, opened to write a trace into: created (0700) when missing; refused when it, or a
// symbolic link at its name, belongs to another user (root's trace written into a
// directory someone else controls could be read or redirected by them).
Result<int> open_trace_dir(const std::string& dir) {
  const uid_t me = ::geteuid();
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return make_error(Errc::io, dir + ": " + errno_text(errno));
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return make_error(Errc::io, dir + ": cannot create: " + errno_text(errno));
    if (::lstat(dir.c_str(), &st) != 0) return make_error(Errc::io, dir + ": " + errno_text(errno));
  }
  // A link is followed only when its owner is the user or root (the rule the kernel's
  // protected_symlinks applies in sticky directories): another user could point it at
  // any directory of ours.
  if (S_ISLNK(st.st_mode) && st.st_uid != me && st.st_uid != 0)
    return make_error(Errc::invalid_argument,
                      dir + ": a symbolic link owned by uid " + std::to_string(st.st_uid) +
                          ", not by you: not followed; remove it or choose another directory with -o");
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR) return make_error(Errc::invalid_argument, dir + ": not a directory");
    return make_error(Errc::io, dir + ": " + errno_text(errno));
  }
  if (::fstat(fd, &st) != 0 || st.st_uid != me) {
    const uid_t owner = st.st_uid;
    ::close(fd);
    return make_error(Errc::invalid_argument,
                      dir + ": owned by uid " + std::to_string(owner) +
                          ", not by you: its owner could read the trace or change it; choose "
                          "another directory with -o");
  }
  return fd;
}

}  // namespace

struct TraceWriter::Impl {
  struct File {
    int fd = -1;
    bool started = false;  // the file exists with its header
    uint64_t bytes = 0;    // its size: the header and whole records (or frames)
    ThreadInfo info;
    std::vector<Event> pending;  // zstd: events not written yet (less than a frame)
    std::list<uint64_t>::iterator lru;
  };
  std::string dir;
  int dirfd = -1;       // DIR, locked (flock) while this writer lives
  int reserve_fd = -1;  // reserve.tmp
  std::string cut_reason;
  uint64_t cut_time = 0;
  std::unordered_map<uint64_t, File> files;
  std::vector<uint64_t> order;   // threads in order of first appearance
  std::list<uint64_t> open_lru;  // most recently used first
  Compression compression = Compression::none;
  std::unique_ptr<ZstdFrameWriter> zstd;
  size_t pending_total = 0;  // events held in every File::pending
  bool store_frames = false;  // set_store_frames()
  uint64_t stored_frames = 0;

  ~Impl() {
    (void)flush_all();  // what a writer dropped without finish() held: saved if it can be
    close_all();
    release_reserve();
    if (dirfd >= 0) ::close(dirfd);
  }
  void close_all() {
    for (auto& [k, f] : files)
      if (f.fd >= 0) {
        ::close(f.fd);
        f.fd = -1;
      }
    open_lru.clear();
  }
  void release_reserve() {
    if (reserve_fd < 0) return;
    ::close(reserve_fd);
    ::unlinkat(dirfd, kReserveName, 0);
    reserve_fd = -1;
  }
  void cut(std::string reason, uint64_t time) {
    if (!cut_reason.empty()) return;
    cut_reason = std::move(reason);
    cut_time = time;
    close_all();  // nothing more is written: no descriptor kept for it
    // What was held for frames will not be written either.
    for (auto& [k, f] : files) {
      f.info.unsaved += events_in(f.pending);
      f.pending.clear();
      f.pending.shrink_to_fit();
    }
    pending_total = 0;
  }
  // Writes F's pending events as one zstd frame.
  Result<void> write_frame(File& f) {
    if (f.pending.empty()) return {};
    std::vector<Event> events;
    events.swap(f.pending);
    pending_total -= events.size();
    auto r = write_events(f, events);
    events.clear();
    if (f.pending.empty()) f.pending.swap(events);  // its capacity, for the next frame
    return r;
  }
  // EVENTS as one zstd frame of F. A frame written in part is cut off (a reader would
  // take the part for a damaged frame) and cuts the trace.
  Result<void> write_events(File& f, std::vector<Event>& events) {
    if (!cut_reason.empty()) {
      f.info.unsaved += events_in(events);
      return {};
    }
    auto fd = open_file(f);
    std::string why;
    if (fd) {
      const std::span<const char> frame = store_frames ? zstd->store(events) : zstd->compress(events, &why);
      stored_frames += store_frames;
      if (why.empty()) {
        const size_t done = os::write_some(*fd, frame.data(), frame.size());
        if (done == frame.size()) {
          f.bytes += frame.size();
          f.info.events += events_in(events);
          return {};
        }
        const int err = errno;
        if (done != 0) (void)!::ftruncate(*fd, static_cast<off_t>(f.bytes));
        why = errno_text(err);
      }
      why = dir + "/" + events_name(f.info.pid, f.info.tid) + ": " + why;
    } else {
      why = fd.error().message;
    }
    f.info.unsaved += events_in(events);
    cut(why, first_time(events, 0));
    return make_error(Errc::io, why);
  }
  Result<void> flush_all() {
    Result<void> first;
    for (uint64_t k : order)
      if (auto r = write_frame(files.at(k)); !r && first) first = std::move(r);
    return first;
  }
  File& file(uint32_t pid, uint32_t tid) {
    const uint64_t k = thread_key(pid, tid);
    auto [it, fresh] = files.try_emplace(k);
    if (fresh) {
      it->second.info.pid = pid;
      it->second.info.tid = tid;
      order.push_back(k);
    }
    return it->second;
  }
  Result<int> open_file(File& f) {
    if (f.fd >= 0) {
      open_lru.erase(f.lru);
      open_lru.push_front(thread_key(f.info.pid, f.info.tid));
      f.lru = open_lru.begin();
      return f.fd;
    }
    auto close_oldest = [&] {
      File& victim = files[open_lru.back()];
      ::close(victim.fd);
      victim.fd = -1;
      open_lru.pop_back();
    };
    while (open_lru.size() >= kMaxOpenFiles) close_oldest();
    const std::string name = events_name(f.info.pid, f.info.tid);
    // Created here with its header (create() removed any old one; the name appears only
    // with the header whole in it, so a CLI killed at any instant leaves no events file
    // a reader would take for corrupt), or reopened: never a link.
    int err = 0;
    auto open_once = [&]() -> int {  // -1, the cause in err
      if (f.started) {
        const int fd = ::openat(dirfd, name.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
        err = errno;
        return fd;
      }
      EventFileHeader h{};
      std::memcpy(h.magic, kEventFileMagic, sizeof h.magic);
      h.version = kFormatVersion;
      h.record_size = sizeof(Event);
      h.pid = f.info.pid;
      h.tid = f.info.tid;
      h.flags = compression == Compression::zstd ? kEventFileZstd : 0;
      auto r = os::create_with_head_at(dirfd, dir, name,
                                       std::string_view(reinterpret_cast<const char*>(&h), sizeof h));
      if (r) return *r;
      err = errno;
      return -1;
    };
    int fd = open_once();
    // Out of descriptors (a low RLIMIT_NOFILE): the files kept open are only a cache,
    // so half of them go and the open is tried again; only with none left is it a
    // failure (which cuts the trace).
    while (fd < 0 && (err == EMFILE || err == ENFILE) && !open_lru.empty()) {
      for (size_t n = (open_lru.size() + 1) / 2; n > 0; --n) close_oldest();
      fd = open_once();
    }
    if (fd < 0) return make_error(Errc::io, dir + "/" + name + ": " + errno_text(err));
    if (!f.started) {
      f.started = true;
      f.bytes = sizeof(EventFileHeader);
    }
    f.fd = fd;
    open_lru.push_front(thread_key(f.info.pid, f.info.tid));
    f.lru = open_lru.begin();
    return fd;
  }
};

Result<TraceWriter> TraceWriter::create(const std::string& dir, Compression compression) {
  if (dir.empty()) return make_error(Errc::invalid_argument, "empty trace directory name");
  auto opened = open_trace_dir(dir);
  if (!opened) return std::move(opened).error();
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->compression = compression;
  if (compression == Compression::zstd) impl->zstd = std::make_unique<ZstdFrameWriter>();
  impl->dirfd = *opened;
  const int fd = *opened;
  // One writer at a time, and the lock before anything is removed. Where the file system
  // has no flock (some network ones) there is no lock.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    const uint32_t pid = recorder_in(fd);
    return make_error(Errc::busy, dir + ": another utramp record" +
                                      (pid ? " (pid " + std::to_string(pid) + ")" : std::string()) +
                                      " is recording into it; wait for it to end, or choose another "
                                      "directory with -o");
  }
  DIR* d = ::fdopendir(::dup(fd));
  if (!d) return make_error(Errc::io, dir + ": " + errno_text(errno));
  std::vector<std::string> ours;
  std::string foreign;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (is_trace_file(name))
      ours.push_back(name);
    else if (foreign.empty())
      foreign = name;
  }
  ::closedir(d);
  // Never empty a directory that holds anything but a trace: DIR may be a typo for $HOME.
  if (!foreign.empty())
    return make_error(Errc::invalid_argument,
                      dir + ": exists and is not a utramp trace directory (it holds " + foreign +
                          "); remove it or choose another with -o");
  for (const auto& name : ours)
    if (::unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT)
      return make_error(Errc::io, dir + "/" + name + ": " + errno_text(errno));
  // Arguments captured with -A can be passwords: the user's alone, whatever the umask.
  if (::fchmod(fd, 0700) != 0) return make_error(Errc::io, dir + ": chmod: " + errno_text(errno));
  // The space the end of the recording needs, taken now (a full disk later cuts the
  // events, never the files that say so).
  impl->reserve_fd = ::openat(fd, kReserveName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (impl->reserve_fd < 0) return make_error(Errc::io, dir + "/" + kReserveName + ": " + errno_text(errno));
  int err = ::posix_fallocate(impl->reserve_fd, 0, kReserveBytes);
  if (err == EOPNOTSUPP || err == EINVAL) {  // no fallocate here: written out
    const std::vector<char> zeros(kReserveBytes);
    err = os::write_all(impl->reserve_fd, std::string_view(zeros.data(), zeros.size())) ? 0 : errno;
  }
  if (err != 0)
    return make_error(Errc::io, dir + ": cannot keep " + std::to_string(kReserveBytes >> 10) +
                                    " KiB for the end of the recording: " + errno_text(err));
  TraceWriter w;
  w.impl_ = std::move(impl);
  return w;
}

TraceWriter::TraceWriter(TraceWriter&&) noexcept = default;
TraceWriter& TraceWriter::operator=(TraceWriter&&) noexcept = default;
TraceWriter::~TraceWriter() = default;

Result<void> TraceWriter::append(uint32_t pid, uint32_t tid, std::span<const Event> events) {
  if (!impl_) return make_error(Errc::invalid_argument, "trace writer not created");
  auto& f = impl_->file(pid, tid);
  if (!impl_->cut_reason.empty()) {  // cut: counted, not written
    f.info.unsaved += events_in(events);
    return {};
  }
  if (impl_->compression == Compression::zstd) {
    // Frames of kZstdFrameEvents (256 KiB a thread); what is held in all stays bounded
    // (thousands of threads with part of a frame each): past it, every thread's is written.
    constexpr size_t kMaxPending = 1u << 20;  // events: 32 MiB
    while (!events.empty()) {
      const size_t take = std::min(events.size(), kZstdFrameEvents - f.pending.size());
      f.pending.insert(f.pending.end(), events.begin(), events.begin() + static_cast<ptrdiff_t>(take));
      impl_->pending_total += take;
      events = events.subspan(take);
      if (f.pending.size() == kZstdFrameEvents)
        if (auto r = impl_->write_frame(f); !r) {
          f.info.unsaved += events_in(events);
          return r;
        }
    }
    if (impl_->pending_total > kMaxPending) return impl_->flush_all();
    return {};
  }
  auto fd = impl_->open_file(f);
  if (!fd) {
    impl_->cut(fd.error().message, first_time(events, 0));
    f.info.unsaved += events_in(events);
    return std::move(fd).error();
  }
  const size_t done = os::write_some(*fd, events.data(), events.size_bytes());
  const size_t whole = done / sizeof(Event);
  f.info.events += events_in(events.first(whole));
  f.bytes += whole * sizeof(Event);
  if (done == events.size_bytes()) return {};
  // Cut: the file keeps its whole records (part of one would read as a damaged file).
  const int err = errno;
  if (done % sizeof(Event) != 0) (void)!::ftruncate(*fd, static_cast<off_t>(f.bytes));
  const std::string why = impl_->dir + "/" + events_name(pid, tid) + ": " + errno_text(err);
  f.info.unsaved += events_in(events.subspan(whole));
  impl_->cut(why, first_time(events.subspan(whole), whole ? events[whole - 1].time : 0));
  return make_error(Errc::io, why);
}

void TraceWriter::add_lost(uint32_t pid, uint32_t tid, uint64_t n) {
  if (impl_) impl_->file(pid, tid).info.lost += n;
}

Result<void> TraceWriter::write_info(const TraceInfo& info) {
  if (!impl_) return make_error(Errc::invalid_argument, "trace writer not created");
  TraceInfo copy = info;
  if (copy.threads.empty()) copy.threads = threads();
  return os::write_file_at(impl_->dirfd, impl_->dir, "info.json", to_json(copy).dump(2) + "\n");
}

Result<void> TraceWriter::finish(const TraceInfo& info) {
  if (!impl_) return make_error(Errc::invalid_argument, "trace writer not created");
  (void)impl_->flush_all();  // a failure cuts the trace: said by the state below
  impl_->close_all();
  impl_->release_reserve();
  TraceInfo copy = info;
  copy.threads = threads();
  // What the caller knows of threads (their rings overwritten), on the writer's counts.
  for (const ThreadInfo& t : info.threads) {
    auto it = std::find_if(copy.threads.begin(), copy.threads.end(),
                           [&](const ThreadInfo& x) { return x.pid == t.pid && x.tid == t.tid; });
    if (it == copy.threads.end()) it = copy.threads.insert(copy.threads.end(), ThreadInfo{t.pid, t.tid});
    if (!t.overwritten.empty()) it->overwritten = t.overwritten;
  }
  copy.state = impl_->cut_reason.empty() ? "complete" : "cut";
  copy.cut_reason = impl_->cut_reason;
  copy.cut_time = impl_->cut_time;
  return os::write_file_at(impl_->dirfd, impl_->dir, "info.json", to_json(copy).dump(2) + "\n");
}

const std::string& TraceWriter::cut_reason() const {
  static const std::string none;
  return impl_ ? impl_->cut_reason : none;
}

uint64_t TraceWriter::cut_time() const { return impl_ ? impl_->cut_time : 0; }

Result<void> TraceWriter::flush() {
  if (!impl_) return {};
  return impl_->flush_all();
}

void TraceWriter::set_store_frames(bool store) {
  if (impl_) impl_->store_frames = store;
}

uint64_t TraceWriter::stored_frames() const { return impl_ ? impl_->stored_frames : 0; }

Result<void> TraceWriter::close() {
  if (!impl_) return {};
  auto r = impl_->flush_all();
  impl_->close_all();
  return r;
}

const std::string& TraceWriter::dir() const {
  static const std::string none;
  return impl_ ? impl_->dir : none;
}

std::vector<ThreadInfo> TraceWriter::threads() const {
  std::vector<ThreadInfo> out;
  if (!impl_) return out;
  for (uint64_t k : impl_->order) out.push_back(impl_->files.at(k).info);
  return out;
}

// ---------------------------------------------------------------------------------
// SymbolTable

void SymbolTable::add(Function f) {
  const uint64_t a = f.addr;
  by_addr_[a] = std::move(f);
}

const Function* SymbolTable::find(uint64_t addr) const {
  auto it = by_addr_.upper_bound(addr);
  if (it == by_addr_.begin()) return nullptr;
  --it;
  const Function& f = it->second;
  // A size of 0 (unknown) matches its start address only.
  if (addr == f.addr || addr - f.addr < f.size) return &f;
  return nullptr;
}

std::string SymbolTable::name(uint64_t addr) const {
  if (const Function* f = find(addr)) {
    if (f->addr == addr) return f->name;
    char off[32];
    std::snprintf(off, sizeof off, "+%#" PRIx64, addr - f->addr);
    return f->name + off;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#" PRIx64, addr);
  return buf;
}

// ---------------------------------------------------------------------------------
// Streams

namespace {

// What a stream adds after the last record of a file: in a trace cut short (a full
// disk), one `lost` event for what the thread recorded and the disk did not take — its
// events not saved, and losses whose markers were not saved either (those info.json
// counts beyond what the file marks).
struct CutEnd {
  bool cut = false;
  uint64_t unsaved = 0, lost = 0;  // of info.json's entry for the thread
};

// One events file, read a chunk at a time with pread (a compressed one: a frame at a
// time). With many threads merged, the file is opened per chunk so that a trace of
// thousands of threads needs no more descriptors than one.
class FileStream final : public EventStream {
 public:
  FileStream(std::string path, uint32_t pid, uint32_t tid, uint64_t records, size_t chunk,
             bool keep_open, bool zstd, CutEnd cut)
      : path_(std::move(path)),
        pid_(pid),
        tid_(tid),
        records_(records),
        chunk_(chunk),
        keep_open_(keep_open),
        cut_(cut) {
    if (zstd) frames_ = std::make_unique<ZstdFrameReader>(sizeof(EventFileHeader));
  }
  ~FileStream() override {
    if (fd_ >= 0) ::close(fd_);
  }
  uint32_t pid() const override { return pid_; }
  uint32_t tid() const override { return tid_; }
  std::optional<Event> next() override {
    if (leaf_exit_) {
      const Event e = *leaf_exit_;
      leaf_exit_.reset();
      return e;
    }
    if (pos_ == buf_.size()) {
      if (!refill()) return end_of_cut_trace();
    }
    Event e = buf_[pos_++];
    if (e.type == static_cast<uint8_t>(EventType::lost)) marked_ += e.data;
    if (e.type != static_cast<uint8_t>(EventType::arg) && e.type != static_cast<uint8_t>(EventType::string))
      last_time_ = e.type == static_cast<uint8_t>(EventType::leaf) ? e.data : e.time;
    if (e.type == static_cast<uint8_t>(EventType::leaf)) {
      // One record, two events: the entry now, its exit (at `data`) next.
      Event x = e;
      x.time = e.data;
      x.data = 0;
      x.type = static_cast<uint8_t>(EventType::exit);
      leaf_exit_ = x;
      e.data = 0;
      e.type = static_cast<uint8_t>(EventType::entry);
    }
    return e;
  }

 private:
  std::optional<Event> end_of_cut_trace() {
    if (!cut_.cut) return std::nullopt;
    cut_.cut = false;
    const uint64_t n = cut_.unsaved + (cut_.lost > marked_ ? cut_.lost - marked_ : 0);
    if (n == 0) return std::nullopt;
    Event e{};
    e.time = last_time_;
    e.data = n;
    e.type = static_cast<uint8_t>(EventType::lost);
    return e;
  }

  bool refill() {
    buf_.clear();
    pos_ = 0;
    if (done_ >= records_) return false;
    const uint64_t want = std::min<uint64_t>(chunk_, records_ - done_);
    if (fd_ < 0) fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      records_ = done_;  // vanished under us: the end
      return false;
    }
    if (frames_) return refill_frame();
    buf_.resize(want);
    size_t got = 0;
    const size_t bytes = want * sizeof(Event);
    const off_t off = static_cast<off_t>(sizeof(EventFileHeader) + done_ * sizeof(Event));
    while (got < bytes) {
      const ssize_t n = ::pread(fd_, reinterpret_cast<char*>(buf_.data()) + got, bytes - got,
                                off + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (!keep_open_) {
      ::close(fd_);
      fd_ = -1;
    }
    buf_.resize(got / sizeof(Event));
    done_ += buf_.size();
    if (buf_.size() < want) records_ = done_;  // shrank since open(): stop there
    return !buf_.empty();
  }

  // The next frame, up to records_ (what open() found readable: a damaged frame ends it).
  bool refill_frame() {
    while (buf_.empty() && frames_->next(fd_, &buf_)) {
    }
    if (!keep_open_) {
      ::close(fd_);
      fd_ = -1;
    }
    if (buf_.size() > records_ - done_) buf_.resize(records_ - done_);
    done_ += buf_.size();
    if (buf_.empty()) records_ = done_;
    return !buf_.empty();
  }

  std::string path_;
  uint32_t pid_, tid_;
  uint64_t records_;
  size_t chunk_;
  bool keep_open_;
  std::unique_ptr<ZstdFrameReader> frames_;  // a compressed file's frames
  int fd_ = -1;
  uint64_t done_ = 0;
  std::vector<Event> buf_;
  size_t pos_ = 0;
  std::optional<Event> leaf_exit_;
  CutEnd cut_;
  uint64_t marked_ = 0;     // counts of the `lost` events read
  uint64_t last_time_ = 0;  // of the last event read that has a time
};

bool glued(const Event& e) {
  return e.type == static_cast<uint8_t>(EventType::arg) ||
         e.type == static_cast<uint8_t>(EventType::string);
}

// k-way merge by (time, thread order). Events that belong to the one before them
// (arguments, string continuations) follow it whatever their time.
class MergedStream final : public EventStream {
 public:
  explicit MergedStream(std::vector<std::unique_ptr<EventStream>> streams)
      : streams_(std::move(streams)) {
    for (size_t i = 0; i < streams_.size(); ++i) advance(i);
  }
  uint32_t pid() const override { return cur_ < streams_.size() ? streams_[cur_]->pid() : 0; }
  uint32_t tid() const override { return cur_ < streams_.size() ? streams_[cur_]->tid() : 0; }
  std::optional<Event> next() override {
    if (sticky_) {
      const Event e = *sticky_;
      sticky_.reset();
      cur_ = sticky_from_;
      advance(cur_);
      return e;
    }
    if (heap_.empty()) return std::nullopt;
    const Head h = heap_.top();
    heap_.pop();
    cur_ = h.index;
    advance(cur_);
    return h.event;
  }

 private:
  struct Head {
    uint64_t time;
    size_t index;
    Event event;
    bool operator>(const Head& o) const { return time != o.time ? time > o.time : index > o.index; }
  };
  void advance(size_t i) {
    auto e = streams_[i]->next();
    if (!e) return;
    if (glued(*e) && i == cur_) {  // construction runs with cur_ == SIZE_MAX
      sticky_ = *e;
      sticky_from_ = i;
      return;
    }
    heap_.push(Head{e->time, i, *e});
  }

  std::vector<std::unique_ptr<EventStream>> streams_;
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heap_;
  std::optional<Event> sticky_;
  size_t sticky_from_ = 0;
  size_t cur_ = SIZE_MAX;
};

}  // namespace

// ---------------------------------------------------------------------------------
// TraceReader

// The functions of one mapped file, by link-time address, and where its bytes go.
struct FileSymbols {
  SymbolTable functions;
  struct Range {
    uint64_t offset, size, addr;  // file offset -> link-time address
  };
  std::vector<Range> ranges;
};

struct TraceReader::Impl {
  struct Thread {
    uint32_t pid, tid;
    std::string path;
    uint64_t records;
    bool truncated;  // the file ends with part of a record (or a bad frame)
    bool zstd;       // its records are zstd frames
  };
  std::string dir;
  TraceInfo info;
  std::vector<std::string> warnings;
  std::vector<Thread> threads;  // sorted by (pid, tid)
  std::map<uint32_t, SymbolTable> symbols;  // functions-PID.tsv: the last program
  std::map<std::pair<uint32_t, uint32_t>, SymbolTable> image_symbols;  // functions-PID-N.tsv
  std::map<uint32_t, ProcessInfo> processes;
  SymbolTable empty;
  // The program of PID at TIME: (the process whose files hold it, its image index, or
  // -1 for the last program: functions-PID.tsv). A forked child without files of its
  // own has its parent's program of when it forked.
  std::pair<uint32_t, int64_t> program_at(uint32_t pid, uint64_t time) const;
  // object_symbol(): mappings by process (loaded on first use), symbols by file.
  struct Mapping {
    uint64_t start, end, offset;
    std::string path;
  };
  std::map<std::pair<uint32_t, int64_t>, std::vector<Mapping>> maps;  // by program_at()
  std::map<std::string, std::shared_ptr<const FileSymbols>> file_symbols;  // by path
};

namespace {

void load_functions(const std::string& path, SymbolTable* table, std::vector<std::string>* warn,
                    const std::string& name) {
  std::ifstream in(path);
  std::string line;
  size_t lineno = 0, bad = 0, first_bad = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    Function f;
    const size_t t1 = line.find('\t');
    const size_t t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    if (t2 == std::string::npos) {
      if (!bad++) first_bad = lineno;
      continue;
    }
    const size_t t3 = line.find('\t', t2 + 1);
    char* end = nullptr;
    const std::string a = line.substr(0, t1), s = line.substr(t1 + 1, t2 - t1 - 1);
    f.addr = std::strtoull(a.c_str(), &end, 16);
    if (a.empty() || *end) {
      if (!bad++) first_bad = lineno;
      continue;
    }
    f.size = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end) {
      if (!bad++) first_bad = lineno;
      continue;
    }
    f.name = line.substr(t2 + 1, t3 == std::string::npos ? std::string::npos : t3 - t2 - 1);
    if (t3 != std::string::npos) f.object = line.substr(t3 + 1);
    table->add(std::move(f));
  }
  if (bad)
    warn->push_back(name + ": " + std::to_string(bad) + " malformed line(s), the first at line " +
                    std::to_string(first_bad));
}

}  // namespace

namespace {

// What info.json says of how the recording went, for the reader to show: not finished
// (its recorder is still at it, or died), cut, processes cut, rings overwritten.
void recording_warnings(const std::string& dir, const TraceInfo& info, std::vector<std::string>* warn) {
  const auto since_start = [&](uint64_t t) {
    const double ticks = t > info.start_time ? static_cast<double>(t - info.start_time) : 0.0;
    char buf[48];
    std::snprintf(buf, sizeof buf, "+%.3f ms", ticks / (info.time_unit == "tsc" ? info.ticks_per_ns : 1.0) / 1e6);
    return std::string(buf);
  };
  const std::string who =
      "utramp record" + (info.recorder_pid ? " (pid " + std::to_string(info.recorder_pid) + ")" : std::string());
  if (info.state == "recording") {
    // The recorder holds DIR's lock while it lives (TraceWriter).
    bool live = false;
    if (const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
      live = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
      ::close(fd);
    }
    warn->push_back(live ? "info.json: being recorded now by " + who + ": this is what it saved so far"
                         : "info.json: the recording did not finish: " + who +
                               " ended before it could (killed?); the events it saved until then are "
                               "shown; what the rings still held, how the target ended and what was "
                               "lost are not known");
  } else if (info.state == "cut") {
    uint64_t unsaved = 0;
    for (const ThreadInfo& t : info.threads) unsaved += t.unsaved;
    warn->push_back("info.json: the recording was cut at " + since_start(info.cut_time) + ": " +
                    info.cut_reason + "; " + std::to_string(unsaved) +
                    " events recorded after that were not saved (each thread's events end with a "
                    "`lost` event for them)");
  }
  for (uint32_t pid : info.still_running)
    warn->push_back("info.json: process " + std::to_string(pid) +
                    " was still running when the recording ended (record waits for the processes "
                    "the program started only as long as --wait-children says): its events stop there");
  for (const std::string& what : info.rings_overwritten)
    warn->push_back("info.json: the program overwrote its ring buffers (" + what +
                    "): threads it started afterwards may not have been recorded");
  for (const ThreadInfo& t : info.threads)
    if (!t.overwritten.empty())
      warn->push_back(events_name(t.pid, t.tid) + ": the program overwrote its ring buffer (" + t.overwritten +
                      "): events from there on may be missing");
}

}  // namespace

Result<TraceReader> TraceReader::open(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return make_error(Errc::not_found,
                        dir + ": no such trace directory (record one with `utramp record`)");
    return make_error(Errc::io, dir + ": " + errno_text(errno));
  }
  if (!S_ISDIR(st.st_mode)) return make_error(Errc::invalid_argument, dir + ": not a directory");

  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  auto& warn = impl->warnings;

  bool have_info = false;
  std::string text;
  if (read_small_file(dir + "/info.json", &text)) {
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      warn.push_back(
          "info.json: not valid JSON (the recording may have been cut short); "
          "reading the events without it, times in ns");
    } else {
      std::string problem;
      impl->info = info_from_json(j, &problem);
      if (impl->info.version > kFormatVersion)
        return make_error(Errc::unsupported,
                          dir + ": format version " + std::to_string(impl->info.version) +
                              " was written by a newer utramp; this one reads up to " +
                              std::to_string(kFormatVersion));
      if (!problem.empty()) warn.push_back("info.json: " + problem);
      have_info = true;
    }
  } else {
    warn.push_back(
        "info.json: missing (the recording did not finish); reading the events "
        "without it, times in ns");
  }

  DIR* d = ::opendir(dir.c_str());
  if (!d) return make_error(Errc::io, dir + ": " + errno_text(errno));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.push_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());

  for (const auto& name : names) {
    uint32_t a = 0, b = 0;
    const std::string path = dir + "/" + name;
    if (parse_name(name, "events-", ".bin", true, &a, &b)) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        warn.push_back(name + ": " + errno_text(errno));
        continue;
      }
      struct stat fst {};
      EventFileHeader h{};
      const bool ok_stat = ::fstat(fd, &fst) == 0;
      const ssize_t got = ::pread(fd, &h, sizeof h, 0);
      ::close(fd);
      if (!ok_stat) continue;
      const uint64_t size = static_cast<uint64_t>(fst.st_size);
      if (got != static_cast<ssize_t>(sizeof h)) {
        warn.push_back(name + ": truncated before the end of its header (" + std::to_string(size) +
                       " bytes); no events");
        continue;
      }
      if (std::memcmp(h.magic, kEventFileMagic, sizeof h.magic) != 0) {
        warn.push_back(name + ": not a utramp events file (bad magic); skipped");
        continue;
      }
      if (h.version > kFormatVersion || h.record_size != sizeof(Event) ||
          (h.flags & ~kEventFileZstd) != 0) {
        warn.push_back(name + ": format version " + std::to_string(h.version) + ", record size " +
                       std::to_string(h.record_size) + ", flags " + std::to_string(h.flags) +
                       " not readable by this utramp; skipped");
        continue;
      }
      if (h.pid != a || h.tid != b)
        warn.push_back(name + ": header names thread " + std::to_string(h.pid) + "/" +
                       std::to_string(h.tid) + "; using the file name");
      if (h.flags & kEventFileZstd) {
        // Compressed: its events are counted by reading it through once (zstd decodes
        // far faster than a reader walks the events); a damaged or cut frame ends it
        // there, with every event before it readable.
        uint64_t records = 0;
        ZstdFrameReader frames(sizeof h);
        std::vector<Event> chunk;
        const int zfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (zfd < 0) {
          warn.push_back(name + ": " + errno_text(errno));
          continue;
        }
        while (frames.next(zfd, &chunk)) records += chunk.size();
        ::close(zfd);
        if (!frames.error().empty())
          warn.push_back(name + ": " + frames.error() + "; the " + std::to_string(records) +
                         " events before it are read");
        impl->threads.push_back({a, b, path, records, !frames.error().empty(), true});
        continue;
      }
      const uint64_t body = size - sizeof h;
      const uint64_t records = body / sizeof(Event);
      if (body % sizeof(Event))
        warn.push_back(name + ": truncated after " + std::to_string(records) +
                       " events (last record " + std::to_string(body % sizeof(Event)) + " bytes)");
      impl->threads.push_back({a, b, path, records, body % sizeof(Event) != 0, false});
    } else if (parse_name(name, "functions-", ".tsv", false, &a, nullptr)) {
      load_functions(path, &impl->symbols[a], &warn, name);
    } else if (parse_name(name, "functions-", ".tsv", true, &a, &b)) {
      load_functions(path, &impl->image_symbols[{a, b}], &warn, name);
    } else if (parse_name(name, "process-", ".json", false, &a, nullptr)) {
      auto p = read_process_file(dir, a);
      if (!p) {
        warn.push_back(p.error().message + "; ignored");
        continue;
      }
      impl->processes[a] = std::move(*p);
    }
  }
  std::sort(impl->threads.begin(), impl->threads.end(), [](const auto& x, const auto& y) {
    return x.pid != y.pid ? x.pid < y.pid : x.tid < y.tid;
  });

  if (impl->threads.empty() && !have_info)
    return make_error(Errc::bad_format,
                      dir + ": not a utramp trace directory (no info.json, no events-*.bin)");
  // Threads info.json does not know of (it was written before they appeared).
  for (const auto& t : impl->threads) {
    auto& ti = impl->info.threads;
    if (std::none_of(ti.begin(), ti.end(),
                     [&](const ThreadInfo& x) { return x.pid == t.pid && x.tid == t.tid; }))
      ti.push_back(ThreadInfo{t.pid, t.tid, t.records, 0});
  }
  for (const auto& t : impl->info.threads)
    if (t.events && std::none_of(impl->threads.begin(), impl->threads.end(),
                                 [&](const auto& x) { return x.pid == t.pid && x.tid == t.tid; }))
      warn.push_back(events_name(t.pid, t.tid) + ": missing (info.json lists " +
                     std::to_string(t.events) + " events for it)");
  recording_warnings(dir, impl->info, &warn);

  TraceReader r;
  r.impl_ = std::move(impl);
  return r;
}

TraceReader::TraceReader(TraceReader&&) noexcept = default;
TraceReader& TraceReader::operator=(TraceReader&&) noexcept = default;
TraceReader::~TraceReader() = default;

const TraceInfo& TraceReader::info() const { return impl_->info; }
const std::vector<std::string>& TraceReader::warnings() const { return impl_->warnings; }
const std::string& TraceReader::dir() const { return impl_->dir; }
const std::map<uint32_t, ProcessInfo>& TraceReader::processes() const { return impl_->processes; }

std::vector<std::pair<uint32_t, uint32_t>> TraceReader::threads() const {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& t : impl_->threads) out.emplace_back(t.pid, t.tid);
  return out;
}

uint64_t TraceReader::event_count(uint32_t pid, uint32_t tid) const {
  for (const auto& t : impl_->threads)
    if (t.pid == pid && t.tid == tid) return t.records;
  return 0;
}

bool TraceReader::truncated(uint32_t pid, uint32_t tid) const {
  for (const auto& t : impl_->threads)
    if (t.pid == pid && t.tid == tid) return t.truncated;
  return false;
}

namespace {

CutEnd cut_end(const TraceInfo& info, uint32_t pid, uint32_t tid) {
  CutEnd c;
  if (info.state != "cut") return c;
  c.cut = true;
  for (const ThreadInfo& t : info.threads)
    if (t.pid == pid && t.tid == tid) {
      c.unsaved = t.unsaved;
      c.lost = t.lost;
    }
  return c;
}

}  // namespace

std::unique_ptr<EventStream> TraceReader::stream(uint32_t pid, uint32_t tid) const {
  for (const auto& t : impl_->threads)
    if (t.pid == pid && t.tid == tid)
      return std::make_unique<FileStream>(t.path, t.pid, t.tid, t.records, 4096, true, t.zstd,
                                          cut_end(impl_->info, t.pid, t.tid));
  return nullptr;
}

std::unique_ptr<EventStream> TraceReader::merged() const {
  const size_t n = impl_->threads.size();
  // About 8 MiB of buffers in all, between 64 and 4096 events per thread.
  const size_t chunk =
      std::clamp<size_t>((8u << 20) / sizeof(Event) / std::max<size_t>(n, 1), 64, 4096);
  const bool keep_open = n <= 64;
  std::vector<std::unique_ptr<EventStream>> streams;
  for (const auto& t : impl_->threads)
    streams.push_back(std::make_unique<FileStream>(t.path, t.pid, t.tid, t.records, chunk, keep_open,
                                                   t.zstd, cut_end(impl_->info, t.pid, t.tid)));
  return std::make_unique<MergedStream>(std::move(streams));
}

std::pair<uint32_t, int64_t> TraceReader::Impl::program_at(uint32_t pid, uint64_t time) const {
  // A forked child without a table of its own uses its parent's (same code, same
  // addresses), as the parent's program was when the child started.
  uint32_t p = pid;
  for (uint32_t hops = 0; hops < 64; ++hops) {
    const auto pi = processes.find(p);
    const bool own = symbols.count(p) != 0;
    if (!own && pi != processes.end() && pi->second.parent != 0) {
      if (pi->second.start_time) time = std::min(time, pi->second.start_time);
      p = pi->second.parent;
      continue;
    }
    if (pi == processes.end() || pi->second.images.size() < 2) return {p, -1};
    const auto& images = pi->second.images;
    // The last image that started at or before TIME (the first when TIME is earlier).
    size_t i = 0;
    while (i + 1 < images.size() && images[i + 1].time <= time) ++i;
    return {p, i + 1 == images.size() ? -1 : static_cast<int64_t>(i)};
  }
  return {p, -1};
}

const SymbolTable& TraceReader::symbols(uint32_t pid, uint64_t time) const {
  const auto [p, image] = impl_->program_at(pid, time);
  if (image >= 0) {
    auto it = impl_->image_symbols.find({p, static_cast<uint32_t>(image)});
    return it != impl_->image_symbols.end() ? it->second : impl_->empty;
  }
  auto it = impl_->symbols.find(p);
  if (it != impl_->symbols.end()) return it->second;
  if (impl_->symbols.size() == 1) return impl_->symbols.begin()->second;
  return impl_->empty;
}

namespace {

std::shared_ptr<const FileSymbols> read_file_symbols(const std::string& path) {
  auto out = std::make_shared<FileSymbols>();
  auto elf = os::ElfFile::open(path);
  if (!elf) return out;  // unreadable: remembered as empty
  for (const auto& sym : (*elf)->symbols()) {
    if (sym.type != STT_FUNC && sym.type != STT_GNU_IFUNC) continue;
    Function f;
    f.addr = sym.value;
    f.size = sym.size;
    f.name = sym.name;
    out->functions.add(std::move(f));
  }
  for (const auto& sec : (*elf)->sections())
    if (sec.addr && sec.type != SHT_NOBITS) out->ranges.push_back({sec.offset, sec.size, sec.addr});
  return out;
}

}  // namespace

std::string TraceReader::object_symbol(uint32_t pid, uint64_t addr, uint64_t time) const {
  // The program's maps file (a forked child without one of its own has its parent's).
  const auto program = impl_->program_at(pid, time);
  auto maps = impl_->maps.find(program);
  for (uint32_t p = program.first, hops = 0; maps == impl_->maps.end() && hops < 64; ++hops) {
    std::vector<Impl::Mapping> m;
    std::ifstream in(impl_->dir + "/" + maps_name(p, p == program.first ? program.second : -1));
    for (std::string line; in && std::getline(in, line);) {
      // start-end perms offset dev inode path: executable, file-backed mappings only
      unsigned long long start = 0, end = 0, off = 0, inode = 0;
      char perms[8] = {}, dev[16] = {};
      int path_at = 0;
      if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %15s %llu %n", &start, &end, perms, &off,
                      dev, &inode, &path_at) < 6 ||
          perms[2] != 'x' || path_at <= 0 || static_cast<size_t>(path_at) >= line.size() ||
          line[static_cast<size_t>(path_at)] != '/')
        continue;
      m.push_back({start, end, off, line.substr(static_cast<size_t>(path_at))});
    }
    if (!m.empty()) {
      maps = impl_->maps.emplace(program, std::move(m)).first;
      break;
    }
    auto pi = impl_->processes.find(p);
    if (pi == impl_->processes.end() || pi->second.parent == 0) break;
    p = pi->second.parent;
  }
  if (maps == impl_->maps.end()) return {};
  for (const auto& mp : maps->second) {
    if (addr < mp.start || addr >= mp.end) continue;
    auto& fs = impl_->file_symbols[mp.path];
    if (!fs) fs = read_file_symbols(mp.path);
    const uint64_t file_off = addr - mp.start + mp.offset;
    for (const auto& r : fs->ranges)
      if (file_off >= r.offset && file_off - r.offset < r.size) {
        const Function* f = fs->functions.find(r.addr + (file_off - r.offset));
        return f ? f->name : std::string();
      }
    return {};
  }
  return {};
}

double TraceReader::to_ns(uint64_t ticks) const {
  if (impl_->info.time_unit == "tsc") return static_cast<double>(ticks) / impl_->info.ticks_per_ns;
  return static_cast<double>(ticks);
}

}  // namespace utramp::trace
