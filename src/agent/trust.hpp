// What the agent trusts, and the one way it reaches the files it writes.
//
// The agent runs inside the traced program, often as root, and is told where to read and
// write by a path in its environment (UTRAMP_AGENT). Any directory on that path may be
// one another user can write: the trace directory's parent, /tmp, /dev/shm. So:
//
//   - the configuration is trusted only from a file the CLI created for this user: a
//     regular file, opened without following a symbolic link, owned by the effective uid,
//     with no permission for group or others and a single link, in a directory that user
//     owns and no one else can write (load_trusted_config). Anything else is refused,
//     and the agent then does nothing at all;
//   - that directory is the trace directory (the CLI writes the configuration into the
//     directory it made for the recording): every file the agent writes there is opened
//     relative to a descriptor of it that is checked at each use (TrustedDir::open_fd:
//     the same directory -- device and inode -- as when the configuration was read,
//     still the user's and writable by no one else), never through a symbolic link, and
//     created 0600 (os/file.hpp). A directory renamed away and replaced (by whoever can
//     write its parent) is detected, and nothing is written;
//   - a file the agent opens outside it (the shared ring buffers, in /dev/shm) is used
//     only when, opened without following a link, it is the user's own (os::not_own_file)
//     with no permission for others.
//
// A descriptor of the directory is not kept open between uses: a program may close every
// descriptor it did not open itself (daemons do), and a number kept would then name
// whatever the program opened next.
#pragma once

#include <sys/types.h>

#include <string>

#include "agent/config.hpp"
#include "common/result.hpp"

namespace utramp::agent {

class TrustedDir {
 public:
  // PATH checked: a directory owned by the effective uid that neither group nor others
  // may write. The error says which of these does not hold.
  static Result<TrustedDir> open(const std::string& path);
  TrustedDir() = default;

  // An O_PATH descriptor of the directory (the caller closes it), after checking that
  // PATH still names the same directory, still as open() required. For *at() calls.
  Result<int> open_fd() const;
  // Whether DIR_PATH names this directory, and FILE_PATH's directory is this one (paths
  // the configuration names).
  bool is(const std::string& dir_path) const;
  bool holds(const std::string& file_path) const;
  const std::string& path() const { return path_; }
  bool empty() const { return path_.empty(); }

 private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

struct TrustedConfig {
  Config config;
  TrustedDir dir;  // the directory holding it: the trace (or scratch) directory
};

// The configuration at PATH, if it can be trusted (above); the paths it names for the
// agent to write (trace_dir, bpf_status_file, bpf_map_file) must be in the same
// directory. Errors name the file and what is wrong: the CLI shows this message when
// the agent did not start.
Result<TrustedConfig> load_trusted_config(const std::string& path);

// A configuration sent over the control channel (agent/control_protocol.hpp:
// apply_config, from a peer already checked) instead of read from a file: TEXT is
// dump_config's JSON, the one format of both. Trusted under the file's rules, its
// directory being its trace directory (or `utramp run`'s, that of its status file): a
// directory the effective uid owns and no one else may write, holding every path the
// configuration names for the agent to write. Errors say what is wrong.
Result<TrustedConfig> trust_sent_config(const std::string& text);

// PATH opened (O_RDWR, without following a symbolic link) if it is the user's own
// regular file with no permission for group or others: the shared files the CLI
// created for the agent (the ring buffers, outside the trace directory). A path
// /proc/PID/fd/N (the CLI's sealed memfd of ring buffers) is followed, and the file must
// be the user's own sealed memfd. The caller closes it.
Result<int> open_own_shared_file(const std::string& path);
// The same for a file the configuration names in DIR (the eBPF map file), opened
// relative to the checked directory.
Result<int> open_own_shared_file(const TrustedDir& dir, const std::string& path);

}  // namespace utramp::agent
