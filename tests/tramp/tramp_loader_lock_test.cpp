// The lock order between the loader and the trampoline manager (docs/architecture.md,
// "Locks"): the loader's locks come first. A thread inside dlopen holds them while the
// loader hook runs, and the hook may wait for the manager's lock (the agent attaches to
// what was just loaded). The first detach of a process retires an image and starts the
// reclaimer thread; pthread_create takes the loader's TLS lock. Were the thread created
// with the manager's lock held, the two threads would wait for each other for ever.
//
// Here the hook, once it runs, lets the main thread detach and then, 50 ms later, takes
// the manager's lock: without the fix the main thread is then inside pthread_create,
// under that lock, waiting for the loader's. The case runs in a child (a fresh process
// has no reclaimer yet) that the parent kills after 10 s.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utramp/utramp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <csignal>
#include <thread>

#include "sites/loader_watch.hpp"
#include "targets.h"
#include "tramp/trampoline.hpp"

namespace {

std::atomic<int> g_in_hook{0};
std::atomic<bool> g_detached{false};

void on_loader(utramp::sites::LoaderState) {
  if (g_detached.load()) return;
  g_in_hook.store(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  (void)utramp::tramp::Manager::instance().links();  // takes the manager's lock
}

uint64_t count_prog(uint64_t*) { return 0; }

// The child's whole run; its exit status is the result.
int child() {
  UTRAMP_OPTS(utramp_attach_opts, o, .signature = "i64,i64 -> i64");
  utramp_link* link = utramp_attach(reinterpret_cast<void*>(&tt_add), UTRAMP_FENTRY, &count_prog, &o);
  if (!link) {
    fprintf(stderr, "attach: %s\n", utramp_last_error());
    return 10;
  }
  if (!utramp::sites::watch_loader(&on_loader)) return 11;
  std::thread loader([] {
    while (!g_detached.load()) {
      void* h = dlopen(UTRAMP_LOADER_LOCK_PLUGIN, RTLD_NOW | RTLD_LOCAL);
      if (h) dlclose(h);
    }
  });
  while (!g_in_hook.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  const int rc = utramp_link_detach(link);  // retires the image: the reclaimer starts
  g_detached.store(true);
  loader.join();
  return rc == 0 ? 0 : 12;
}

TEST(TrampLoaderLock, FirstDetachDuringALoaderHookDoesNotDeadlock) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(child());
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  pid_t r = 0;
  while ((r = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (r == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "deadlock: the child was still detaching after 10 s";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: attach failed, 11: loader hook refused, 12: detach failed";
}

}  // namespace
