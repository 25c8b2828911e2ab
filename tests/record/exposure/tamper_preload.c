/* Preloaded after the agent (the CLI puts the user's LD_PRELOAD after its own): the
 * loader runs the initialisers of preloaded objects that do not depend on one another
 * last-loaded first, so this one runs before the agent's and changes the configuration
 * the CLI wrote, as another user able to write its directory could have:
 * EXP_TAMPER=chown gives it to nobody, EXP_TAMPER=chmod makes it readable by all. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

__attribute__((constructor)) static void tamper(void) {
  const char* path = getenv("UTRAMP_AGENT");
  const char* how = getenv("EXP_TAMPER");
  if (!path || !how) return;
  if (strcmp(how, "chown") == 0) (void)!chown(path, 65534, 65534);
  else if (strcmp(how, "chmod") == 0) (void)!chmod(path, 0644);
}
