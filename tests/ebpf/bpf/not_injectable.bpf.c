// Bad at attach time (in the agent): fmod_ret on work(), which is not marked
// UTRAMP_ALLOW_ERROR_INJECTION.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("fmod_ret/work")
int prog(void* ctx) { return 0; }
char LICENSE[] SEC("license") = "GPL";
