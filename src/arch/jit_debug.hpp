// Making generated images visible to the C++ unwinder and gdb (perf's map: os/perf_map.hpp).
//
// Every image shares one frame layout, so one unwind program describes them all:
//
//   image+0:          push rbp                 CFA = rsp+8,  ra at CFA-8
//   image+1:          mov  rbp, rsp            CFA = rsp+16, rbp saved at CFA-16
//   image+4 .. :      body                     CFA = rbp+16, rbp saved at CFA-16
//   exit:             leave                    (one per exit; any number of exits)
//   exit+1:           ret                      CFA = rsp+8,  rbp = caller's value
//   exit+2 .. :       more body (middle exit)  CFA = rbp+16 again
//
//   stack inside the body:   [rbp+8]  return address     <- CFA-8
//                            [rbp+0]  caller's rbp       <- CFA-16
//                            [rbp-…]  the image's locals
//
// register_image() publishes two views of one image (register_images() of many):
//   - an .eh_frame CIE+FDE registered with libgcc (__register_frame), so C++ exceptions
//     and _Unwind_Backtrace/backtrace() walk through the image;
//   - an in-memory ELF symbol file announced through GDB's JIT interface
//     (__jit_debug_descriptor / __jit_debug_register_code), so gdb names the frame.
//
// Order (size, emit, protect, publish): register an image after its bytes are written
// and sealed and before any site can reach it; unregister only once no thread can be
// executing it (after reclamation), because the unwinder reads the FDE of every frame
// it walks through. Registration is thread-safe. Not for hit paths: it allocates and
// locks.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace utramp::arch {

struct ImageFrame {
  uint64_t start = 0;
  uint64_t size = 0;
  // Offset of each exit's `leave` (its `ret` follows at +1), in any order.
  std::vector<uint32_t> exit_offsets;
  // Bytes of each exit from its `leave` to the end of the exit sequence. 2 is `leave;
  // ret`; an image that leaves by `leave; jmp ...` (or more instructions that touch
  // neither rsp nor rbp) gives that sequence's length, and only the `leave` is checked.
  uint32_t exit_len = 2;
  // Bytes from each exit's `leave` to the end of one `push` in it (0: none): from there
  // to the end of the exit the CFA is rsp+16. An image that keeps every register pushes
  // r11 there for the stub's exit to pop (arch/image.hpp).
  uint32_t exit_push = 0;
};

struct DebugHandle;  // opaque; owned by the registration

// Validates `frame` against the image's bytes (push rbp; mov rbp,rsp at the start,
// leave; ret at each exit: Errc::bytes_mismatch with the bytes found otherwise), then
// registers its unwind info and GDB symbol file.
//
// `personality`, when non-null, is an _Unwind_Personality_Fn stored in the CIE
// (augmentation "zPR"); libgcc calls it for the image's frame in both phases of C++
// exception unwinding (no LSDA: it receives none). It must return _URC_CONTINUE_UNWIND
// unless it means to stop the unwind at the image.
//
// An image overlapping one still registered is refused (Errc::busy): libgcc >= 13 cannot
// hold two registrations of one start address.
//
// Whatever fails returns an error and leaves nothing registered.
Result<DebugHandle*> register_image(const ImageFrame& frame, std::string_view name,
                                    void* personality);

// register_image() for many images at once (an attach of many functions): each is
// checked as register_image() checks it, and those refused get their error in their
// place; the others share one record of the batch (one CIE, an FDE each, one symbol file
// for gdb naming them all, one gdb registration), and each handle unregisters its own
// image only. `names` is as long as `frames`.
std::vector<Result<DebugHandle*>> register_images(std::span<const ImageFrame* const> frames,
                                                  std::span<const std::string_view> names,
                                                  void* personality);

// __deregister_frame of the image's FDE and, for gdb, its symbol file without the image
// (read again by gdb; the batch's record is freed with its last image). Null is ignored.
void unregister_image(DebugHandle* handle);


// The .eh_frame bytes register_image() builds for `frame`: one CIE, one FDE, a zero
// terminator. Pointers are absolute (DW_EH_PE_absptr, 8 bytes), so the buffer may live
// anywhere, not only within ±2 GB of the image. Exposed for golden tests.
Result<std::vector<uint8_t>> build_eh_frame(const ImageFrame& frame, void* personality);

}  // namespace utramp::arch
