// Python function calls counted by name, from the USDT probes Debian's python3 ships
// (python:function__entry, guarded by a semaphore: CPython reports calls only while a
// tracer is attached), in the shape of bcc's ucalls / libbpf-tools' usdt users:
//
//   utramp run usdt_pycalls.bpf.o \
//       --attach py_entry=usdt:python3:python:function__entry -- python3 script.py
//
// CPython 3.11 (Debian 12's) fires function__entry for a call only while python:line's
// semaphore is raised too (or sys.settrace/setprofile is set), and otherwise only for a
// generator entered by throw() or close() (CPython issue gh-98894). Attached to
// python:function__return instead, it counts every exit of a frame (returns, yields,
// exceptions); this object run beside it with `utramp run -p PID --attach
// py_entry=usdt:/usr/bin/python3:python:line` turns every entry on, and counts the lines
// run by function (docs/attach.md, "Limits").
//
// function__entry's arguments: the code's file name, the function's name (C strings in
// the target's memory) and the line number.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

struct fn_name {
	char name[32];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct fn_name);
	__type(value, u64);
} calls SEC(".maps");

SEC("usdt")
int BPF_USDT(py_entry, const char *file, const char *func, int line)
{
	struct fn_name key = {};
	u64 zero = 0, *n;

	bpf_probe_read_user_str(key.name, sizeof(key.name), func);
	n = bpf_map_lookup_elem(&calls, &key);
	if (!n) {
		/* another thread may have added it since: NOEXIST keeps its count */
		bpf_map_update_elem(&calls, &key, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&calls, &key);
	}
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
