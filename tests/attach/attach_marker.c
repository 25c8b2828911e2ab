// Loaded into attach_target by the tests: its constructor appends "loaded PID" to the
// file ATTACH_MARKER names in the process's environment, so that a test sees that the
// library's code ran in the target.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void marker_loaded(void) {
  const char* path = getenv("ATTACH_MARKER");
  if (!path) return;
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  char line[64];
  const int n = snprintf(line, sizeof line, "loaded %d\n", (int)getpid());
  if (n > 0) (void)!write(fd, line, (size_t)n);
  close(fd);
}
