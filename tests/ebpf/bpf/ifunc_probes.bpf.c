// Uprobes on IFUNC symbols: glibc's strlen (named `libc.so.6:strlen`, as a user names
// it) and ifunc_target's own ifunc_add. Each symbol is its resolver; the probes must be
// on the implementations the resolvers chose, so they see every call. Only calls on
// ifunc_target's marked string are counted, so the counts are exact against the
// target's own.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define MARK "utramp-ifunc-mark-0123456789!"  // ifunc_target.c: kMark
#define MARK_LEN (sizeof(MARK) - 1)

// [0] strlen entries on the mark, [1] strlen returns of MARK_LEN, [2] ifunc_add calls,
// [3] the sum of their second arguments.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 4);
  __type(key, __u32);
  __type(value, __u64);
} counts SEC(".maps");

static __always_inline void add(__u32 key, __u64 v)
{
  __u64 *c = bpf_map_lookup_elem(&counts, &key);

  if (c)
    __sync_fetch_and_add(c, v);
}

SEC("uprobe/libc.so.6:strlen")
int BPF_KPROBE(strlen_enter, const char *s)
{
  const char mark[] = MARK;
  char b[sizeof(MARK)];

  if (bpf_probe_read_user(b, sizeof(b), s))
    return 0;
#pragma unroll
  for (int i = 0; i < (int)sizeof(MARK); i++)
    if (b[i] != mark[i])
      return 0;
  add(0, 1);
  return 0;
}

SEC("uretprobe/libc.so.6:strlen")
int BPF_KRETPROBE(strlen_exit, long ret)
{
  if (ret == MARK_LEN)
    add(1, 1);
  return 0;
}

SEC("uprobe//proc/self/exe:ifunc_add")
int BPF_KPROBE(add_enter, int a, int b)
{
  add(2, 1);
  add(3, b);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
