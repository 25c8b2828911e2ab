/* utramp: user-space dynamic tracing. The stable C API. */
#ifndef UTRAMP_UTRAMP_H
#define UTRAMP_UTRAMP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0" */
const char *utramp_version(void);

/* The message of the last failure on this thread ("" if none). */
const char *utramp_last_error(void);

/* Site kinds, as utramp_site_info reports them. */
enum utramp_site_kind {
  UTRAMP_SITE_NOP5 = 0,        /* one 5-byte NOP */
  UTRAMP_SITE_NOP1X5 = 1,      /* five 1-byte NOPs (gcc -fpatchable-function-entry=5) */
  UTRAMP_SITE_FENTRY = 2,      /* call __fentry__ (-pg -mfentry) */
  UTRAMP_SITE_FENTRY_GOT = 3,  /* call *__fentry__@GOTPCREL(%rip) */
  UTRAMP_SITE_XRAY = 4,        /* XRay entry sled */
  UTRAMP_SITE_PROLOGUE = 5,    /* no compiler site: the prologue is relocated */
  UTRAMP_SITE_NONE = 6         /* cannot be attached; see `reason` */
};

struct utramp_site_info {
  const char *name;     /* symbol */
  const char *object;   /* path of the ELF object */
  uint64_t func;        /* function address */
  uint64_t site;        /* address of the 5-byte site (after endbr64 if any) */
  int kind;             /* enum utramp_site_kind */
  int attachable;       /* 1 if the site can be patched now */
  const char *reason;   /* why not, when attachable == 0 */
};

/* Discovers the functions of every object loaded so far (call again after dlopen) and
 * canonicalises their compiler sites where that is safe. Returns the number of sites
 * known, or -errno. */
int utramp_sites_discover(void);

/* Calls `fn` for every known site whose symbol matches the glob (NULL: all). Stops
 * early when `fn` returns non-zero. Returns the number of sites visited. */
int utramp_sites_foreach(const char *glob,
                         int (*fn)(const struct utramp_site_info *info, void *arg), void *arg);

#ifdef __cplusplus
}
#endif

#endif /* UTRAMP_UTRAMP_H */
