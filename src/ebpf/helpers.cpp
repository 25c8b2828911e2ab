#include "ebpf/helpers.hpp"

#include <algorithm>

namespace utramp::ebpf {

void HelperTable::add(uint32_t id, std::string name, HelperFn fn, bool needs_run) {
  auto it = std::lower_bound(helpers_.begin(), helpers_.end(), id,
                             [](const HelperInfo& h, uint32_t v) { return h.id < v; });
  HelperInfo info{id, std::move(name), fn, needs_run};
  if (it != helpers_.end() && it->id == id) *it = std::move(info);
  else helpers_.insert(it, std::move(info));
}

const HelperInfo* HelperTable::find(uint32_t id) const {
  auto it = std::lower_bound(helpers_.begin(), helpers_.end(), id,
                             [](const HelperInfo& h, uint32_t v) { return h.id < v; });
  return it != helpers_.end() && it->id == id ? &*it : nullptr;
}

uint32_t HelperTable::id_limit() const { return helpers_.empty() ? 0 : helpers_.back().id + 1; }

std::string_view kernel_helper_name(uint32_t id) {
  // The ids of include/uapi/linux/bpf.h (___BPF_FUNC_MAPPER) that tracing programs use.
  switch (id) {
    case 1: return "bpf_map_lookup_elem";
    case 2: return "bpf_map_update_elem";
    case 3: return "bpf_map_delete_elem";
    case 4: return "bpf_probe_read";
    case 5: return "bpf_ktime_get_ns";
    case 6: return "bpf_trace_printk";
    case 7: return "bpf_get_prandom_u32";
    case 8: return "bpf_get_smp_processor_id";
    case 12: return "bpf_tail_call";
    case 14: return "bpf_get_current_pid_tgid";
    case 15: return "bpf_get_current_uid_gid";
    case 16: return "bpf_get_current_comm";
    case 25: return "bpf_perf_event_output";
    case 27: return "bpf_get_stackid";
    case 35: return "bpf_get_current_task";
    case 45: return "bpf_probe_read_str";
    case 67: return "bpf_get_stack";
    case 112: return "bpf_probe_read_user";
    case 113: return "bpf_probe_read_kernel";
    case 114: return "bpf_probe_read_user_str";
    case 115: return "bpf_probe_read_kernel_str";
    case 125: return "bpf_ktime_get_boot_ns";
    case 130: return "bpf_ringbuf_output";
    case 131: return "bpf_ringbuf_reserve";
    case 132: return "bpf_ringbuf_submit";
    case 133: return "bpf_ringbuf_discard";
    case 134: return "bpf_ringbuf_query";
    case 164: return "bpf_for_each_map_elem";
    case 165: return "bpf_snprintf";
    case 173: return "bpf_get_func_ip";
    case 174: return "bpf_get_attach_cookie";
    case 177: return "bpf_trace_vprintk";
    case 181: return "bpf_loop";
    case 183: return "bpf_get_func_arg";
    case 184: return "bpf_get_func_ret";
    case 185: return "bpf_get_func_arg_cnt";
    default: return {};
  }
}

}  // namespace utramp::ebpf
