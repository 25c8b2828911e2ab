// The BPF trampoline for user-space functions (DESIGN §5): one Trampoline per attach
// point, its links, and immutable generated Images swapped in with one patch each.
//
// Lifetimes. A Link is the user's handle; detaching it takes effect at once (a new image
// without it is published) and returns once no thread runs its program any more,
// without waiting for threads inside the traced function (Manager::detach). An Image
// that is replaced is retired and freed by the reclaimer once no thread can execute it
// (see threads.hpp and arch/image.hpp for the counters that prove it). Trampolines and
// their stubs are permanent: one per function ever attached.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <span>
#include <vector>

#include "common/result.hpp"
#include "abi/signature.hpp"

namespace utramp::sites {
struct Site;
}

namespace utramp::tramp {

// tracer: a function tracer's hooks (arch::TracerHooks, `prog` is their address, kept
// alive by the caller), inlined in the image around the call; at most one per function,
// alongside any fentry/fexit/fmod_ret programs (DESIGN §6: tracer ops and trampolines
// on one site).
enum class AttachType : uint8_t { fentry, fexit, fmod_ret, freplace, tracer };
std::string_view attach_type_name(AttachType t) noexcept;

inline constexpr size_t kMaxLinks = 38;  // the kernel's BPF_MAX_TRAMP_LINKS

struct ProgStats {
  std::atomic<uint64_t> run_cnt{0};
  std::atomic<uint64_t> run_ns{0};
};

// A program: a native function uint64_t(uint64_t* ctx). Links of the same function
// share one Prog, and so one recursion guard and one set of counters, as kernel links
// of one bpf_prog do.
struct Prog {
  uint64_t fn = 0;
  uint32_t guard = 0;
  std::atomic<uint64_t> misses{0};
  ProgStats stats;
  // Where the images count: these two, or what the program's first link asked for
  // (AttachOptions::stats_at, misses_at).
  ProgStats* stats_at = &stats;
  std::atomic<uint64_t>* misses_at = &misses;
  int links = 0;
};

struct Trampoline;
struct ProgCall;

struct Link {
  Trampoline* tramp = nullptr;
  AttachType type = AttachType::fentry;
  Prog* prog = nullptr;        // null for freplace
  uint64_t replacement = 0;    // freplace: the function; tracer: its arch::TracerHooks
  uint64_t cookie = 0;
  uint64_t id = 0;
  bool attached = false;
  bool caller = false;         // AttachOptions::caller
  bool frame = false;          // AttachOptions::frame
};

struct AttachOptions {
  uint64_t cookie = 0;
  // From the caller (C++ type, or options string); null: DWARF's, or the fallback. Out of
  // line and shared: a tracer's thousand requests carry none, and a signature's copy
  // was most of a request's bytes (docs/benchmarks.md, "The agent's start-up heap").
  std::shared_ptr<const abi::Signature> signature;
  // The program reads ctx[-4], the caller's return address (utramp's extension): the
  // image stores it only when one of its links asks (two instructions per call).
  bool caller = false;
  // The program takes user stacks (bpf_get_stackid, bpf_get_stack): the image stores the
  // function's entry stack pointer in ctx[-5] for the unwinder (three instructions per
  // call), only when one of its links asks.
  bool frame = false;
  // Where the program's counters live when not in the Prog: memory another process
  // reads (utramp run --metrics: the map file). Taken from the program's first link;
  // its later links count where that one does. Null: in the Prog.
  ProgStats* stats_at = nullptr;
  std::atomic<uint64_t>* misses_at = nullptr;
};

// A live link as the read side reports it. The counters are its program's: links of one
// program share them, as kernel links of one bpf_prog share its stats (run_cnt and
// run_ns count only while stats are on).
struct LinkInfo {
  const Link* link;
  uint64_t id;
  AttachType type;
  uint64_t prog;           // the program; freplace: the replacement; tracer: its hooks
  uint64_t cookie;
  uint64_t func;
  const char* function;    // its name (trampolines are permanent, so is the string)
  uint64_t run_cnt, run_ns, misses;
};

struct TrampolineInfo {
  std::string function;
  uint64_t func;
  std::string signature;
  std::string signature_source;
  bool has_image;
  size_t image_bytes;
  std::vector<LinkInfo> links;
};

class Manager {
 public:
  static Manager& instance();

  // Attaches `prog` (or, for freplace, the replacement function) to the function at
  // `func`. Errors name the function and the reason; nothing changes on error.
  Result<Link*> attach(uint64_t func, AttachType type, uint64_t prog, const AttachOptions& opts);
  struct AttachRequest {
    uint64_t func;
    AttachType type;
    uint64_t prog;
    AttachOptions opts;
  };
  // Many links at once (a tracer attaching to every function): every image is built
  // first, then all go live with one patch batch per step. Each request gets its own
  // result; a failing one does not stop the others.
  std::vector<Result<Link*>> attach_many(const std::vector<AttachRequest>& reqs);
  Result<Link*> attach_name(const std::string& symbol, AttachType type, uint64_t prog,
                            const AttachOptions& opts);
  // Detaches at once; returns when no thread runs the link's program any more (never
  // waiting for a thread inside the traced function: docs/trampolines.md, "Detach").
  // The link is freed here, the images it ran in later. busy from inside its program.
  Result<void> detach(Link* link);
  // Many links at once (a client's, everything at detach -p or teardown): every
  // trampoline that loses links gets its new image, all published with one patch batch
  // per step, then one wait for all the programs (as detach's). Each link gets its own
  // result; a link that cannot be detached (not live, called from inside its program,
  // its trampoline's new image not buildable) does not stop the others.
  std::vector<Result<void>> detach_many(const std::vector<Link*>& links);

  // One live link (not_found for anything else), and every live link in attach order.
  Result<LinkInfo> link_info(const Link* link);
  std::vector<LinkInfo> links();

  void set_stats(bool on);
  bool stats() const { return stats_.load(); }

  std::vector<TrampolineInfo> list();
  // Retired images not yet freed, and a synchronous reclamation attempt (tests).
  size_t retired() const;
  size_t reclaim_now();
  // Runs FREE once every image retired before this call has been freed (reclamation's
  // grace period, docs/trampolines.md): what detached links' programs used and their
  // images may still touch after the program returned (the programs' code, counters in
  // memory of their own: AttachOptions::stats_at) is then unreachable. Run by the
  // reclaimer, or by a reclaim_now() caller, with no Manager lock held; never once exit
  // has begun (what it frees is left, as images are). Call with no Manager lock held.
  // pending_frees(): how many are still waiting.
  void after_grace(std::function<void()> free);
  size_t pending_frees() const;

  void fork_prepare();
  void fork_release();

 public:
  struct Image;

 private:
  Manager() = default;
  struct Retired;
  Result<std::unique_ptr<Link>> make_link(Trampoline& t, AttachType type, uint64_t prog,
                                          const AttachOptions& opts,
                                          const std::vector<Link*>& links);
  // Trampolines made by one attach_many, their stubs staged in the executable arena
  // (os::ExecArena::stage) and sealed with the batch's images before anything can reach
  // them; unmake_stubs() undoes them when that fails (each with its site's prologue_ool
  // before).
  struct MadeStubs {
    std::vector<std::pair<Trampoline*, uint64_t>> made;
  };
  Result<Trampoline*> trampoline_for(uint64_t func, const AttachOptions& opts, MadeStubs& made);
  void unmake_stubs(MadeStubs& w);
  struct Plan;
  // staged: the new image's code is staged, not sealed, and its registration left to
  // register_images(), for the caller to make both together for a batch (after
  // os::ExecArena::seal_staged) before publish(). Otherwise written and registered.
  Result<Plan> prepare(Trampoline& t, std::vector<Link*> links, bool staged = false);
  static Result<void> register_image(Plan& plan);
  // register_image() of many plans: one registration of their images (arch::register_images).
  static std::vector<Result<void>> register_images(std::span<Plan* const> plans);
  // wake: tell the reclaimer of the images retired (detach does not: it reclaims them
  // itself at once, and wakes the reclaimer only for what it leaves).
  Result<void> publish(std::vector<Plan>& plans, bool wake = true);
  Result<void> rebuild(Trampoline& t, std::vector<Link*> links);
  void retire(Trampoline& t, Image* img, bool wake);
  // A detached link whose program may still run from a retired image.
  struct Leaving {
    uint64_t id;
    uint32_t guard;
    std::string name;  // its function's, for diagnostics
  };
  void quiesce(std::vector<Leaving> leaving);
  // Drops from LEAVING the links no retired image runs any more; whether any is left.
  bool still_run(std::vector<Leaving>& leaving) const;
  Result<void> disable_calls(const std::vector<Leaving>& leaving);
  Result<void> make_skips(Image& img, const std::vector<ProgCall*>& calls);
  static void wait_outside(uint32_t guard);
  void reclaimer_loop();
  void start_reclaimer();
  // Starts the reclaimer, if an image was retired, when the scope ends: declared before
  // the scope's lock of mu_, it runs after the lock is released.
  struct ReclaimerKick {
    Manager& m;
    ~ReclaimerKick();
  };

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Trampoline>> tramps_;
  // tramps_ by function address and by site address (the latest for each address: one
  // of an unloaded object is replaced when a new object's function gets one there).
  std::unordered_map<uint64_t, Trampoline*> tramp_at_;
  std::vector<std::unique_ptr<Prog>> progs_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<std::unique_ptr<Retired>> retired_;  // guarded by retired_mu_, not mu_:
  mutable std::mutex retired_mu_;  // a busy attacher must not starve the reclaimer
  // after_grace(): each waits for the images retired up to its sequence number
  // (Retired::seq); guarded by retired_mu_.
  struct Deferred {
    uint64_t after;
    std::function<void()> free;
  };
  std::vector<Deferred> deferred_;
  uint64_t retire_seq_ = 0;
  // Runs the deferred frees whose images are all gone (reclaim_now's end).
  void run_due_frees();
  uint64_t next_link_id_ = 1;
  std::atomic<bool> stats_{false};

  std::condition_variable cv_;
  std::atomic<bool> reclaimer_wanted_{false};  // an image was retired in this process
  std::atomic<int> reclaimer_pid_{0};          // the process whose reclaimer runs
  friend struct Trampoline;
};

// Called on the unwinding thread when a C++ exception (or a forced unwind) leaves a
// traced function through an image that called it: the tracers close its frame.
void set_unwind_hook(void (*hook)(uint64_t func));

// Whether `func` was marked with UTRAMP_ALLOW_ERROR_INJECTION.
bool error_injectable(uint64_t func);

}  // namespace utramp::tramp
