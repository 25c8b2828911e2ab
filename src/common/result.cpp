#include "common/result.hpp"

namespace utramp {

std::string_view errc_name(Errc e) noexcept {
  switch (e) {
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::not_found: return "not_found";
    case Errc::busy: return "busy";
    case Errc::out_of_range: return "out_of_range";
    case Errc::not_instruction_boundary: return "not_instruction_boundary";
    case Errc::too_small: return "too_small";
    case Errc::too_big: return "too_big";
    case Errc::unsupported: return "unsupported";
    case Errc::bytes_mismatch: return "bytes_mismatch";
    case Errc::not_executable: return "not_executable";
    case Errc::no_memory: return "no_memory";
    case Errc::io: return "io";
    case Errc::bad_format: return "bad_format";
  }
  return "unknown";
}

}  // namespace utramp
