// zstd frames of compressed events files (zstd_frames.hpp).
#include "trace/zstd_frames.hpp"

#include <unistd.h>
#include <zstd.h>
// XXH64, the checksum of zstd frames, for the frames stored without compression;
// inlined from the header (Debian: libxxhash-dev), no library to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace utramp::trace {

namespace {

// Level 1: the recorder compresses while the target runs and must keep up with it
// (docs/benchmarks.md, "Compression": bytes and time per level on a recording).
constexpr int kLevel = 1;
constexpr size_t kReadAhead = 128 << 10;

std::string at(uint64_t offset) { return "at byte " + std::to_string(offset); }

}  // namespace

ZstdFrameWriter::ZstdFrameWriter() : cctx_(ZSTD_createCCtx()) {
  if (cctx_) {
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, kLevel);
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_contentSizeFlag, 1);
  }
}

ZstdFrameWriter::~ZstdFrameWriter() { ZSTD_freeCCtx(cctx_); }

std::span<const char> ZstdFrameWriter::compress(std::span<const Event> events, std::string* error) {
  if (!cctx_) {
    *error = "zstd: cannot create a compression context";
    return {};
  }
  out_.resize(ZSTD_compressBound(events.size_bytes()));
  const size_t n = ZSTD_compress2(cctx_, out_.data(), out_.size(), events.data(), events.size_bytes());
  if (ZSTD_isError(n)) {
    *error = std::string("zstd: ") + ZSTD_getErrorName(n);
    return {};
  }
  return {out_.data(), n};
}

// A frame of raw blocks (RFC 8878, 3.1.1): the magic; a frame header descriptor saying
// single segment (no window descriptor: the content size is the window), a 4-byte content
// size and a content checksum; blocks of at most 128 KiB, each a 3-byte header (last-block
// bit, type 0 = raw, size) and its bytes; the low 32 bits of the content's XXH64 (seed 0).
std::span<const char> ZstdFrameWriter::store(std::span<const Event> events) {
  constexpr uint32_t kMagic = 0xFD2FB528;
  constexpr uint8_t kDescriptor = (2u << 6) | (1u << 5) | (1u << 2);  // FCS 4 bytes, single, checksum
  constexpr size_t kBlockMax = 128u << 10;
  const auto* data = reinterpret_cast<const char*>(events.data());
  const size_t size = events.size_bytes();  // < 4 GiB: a frame holds kZstdFrameEvents
  const size_t blocks = size == 0 ? 1 : (size + kBlockMax - 1) / kBlockMax;
  out_.resize(4 + 1 + 4 + blocks * 3 + size + 4);
  char* p = out_.data();
  auto put_le = [&p](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) *p++ = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put_le(kMagic, 4);
  *p++ = static_cast<char>(kDescriptor);
  put_le(size, 4);
  size_t done = 0;
  do {
    const size_t n = std::min(kBlockMax, size - done);
    const bool last = done + n == size;
    put_le((n << 3) | (0u << 1) | (last ? 1u : 0u), 3);
    if (n) std::memcpy(p, data + done, n);
    p += n;
    done += n;
  } while (done < size);
  put_le(XXH64(data, size, 0) & 0xffffffffu, 4);
  return {out_.data(), static_cast<size_t>(p - out_.data())};
}

ZstdFrameReader::ZstdFrameReader(uint64_t offset) : dctx_(ZSTD_createDCtx()), in_off_(offset) {}

ZstdFrameReader::~ZstdFrameReader() { ZSTD_freeDCtx(dctx_); }

bool ZstdFrameReader::fill(int fd) {
  if (in_pos_ > 0) {  // keep what is left at the front
    std::memmove(in_.data(), in_.data() + in_pos_, in_len_ - in_pos_);
    in_len_ -= in_pos_;
    in_pos_ = 0;
  }
  if (in_.size() < in_len_ + kReadAhead) in_.resize(in_len_ + kReadAhead);
  for (;;) {
    const ssize_t n = ::pread(fd, in_.data() + in_len_, kReadAhead, static_cast<off_t>(in_off_));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error_ = at(in_off_) + ": " + std::strerror(errno);
      return false;
    }
    in_len_ += static_cast<size_t>(n);
    in_off_ += static_cast<uint64_t>(n);
    return n > 0;
  }
}

bool ZstdFrameReader::next(int fd, std::vector<Event>* out) {
  out->clear();
  if (!error_.empty()) return false;
  if (!dctx_) {
    error_ = "zstd: cannot create a decompression context";
    return false;
  }
  if (in_pos_ == in_len_ && !fill(fd)) return false;  // the end, between frames
  const uint64_t start = in_off_ - (in_len_ - in_pos_);  // where this frame begins
  ZSTD_DCtx_reset(dctx_, ZSTD_reset_session_only);
  frame_.clear();
  for (;;) {
    if (in_pos_ == in_len_ && !fill(fd)) {
      if (error_.empty())
        error_ = "truncated: the zstd frame " + at(start) + " ends with the file at byte " +
                 std::to_string(in_off_);
      return false;
    }
    // Room for one more block of output; a frame larger than any we write is refused.
    const size_t have = frame_.size();
    if (have >= kZstdMaxFrameBytes) {
      error_ = "corrupt: the zstd frame " + at(start) + " holds more than " +
               std::to_string(kZstdMaxFrameBytes) + " bytes (a writer makes " +
               std::to_string(kZstdFrameEvents * sizeof(Event)) + " at most)";
      return false;
    }
    frame_.resize(have + ZSTD_DStreamOutSize());
    ZSTD_outBuffer o{frame_.data(), frame_.size(), have};
    ZSTD_inBuffer i{in_.data(), in_len_, in_pos_};
    const size_t r = ZSTD_decompressStream(dctx_, &o, &i);
    in_pos_ = i.pos;
    frame_.resize(o.pos);
    if (ZSTD_isError(r)) {
      error_ = "corrupt: the zstd frame " + at(start) + ": " + ZSTD_getErrorName(r);
      return false;
    }
    if (r == 0) break;  // the frame ended and its checksum matched
  }
  if (frame_.size() % sizeof(Event) != 0) {
    error_ = "corrupt: the zstd frame " + at(start) + " holds " + std::to_string(frame_.size()) +
             " bytes, not whole " + std::to_string(sizeof(Event)) + "-byte records";
    return false;
  }
  out->resize(frame_.size() / sizeof(Event));
  std::memcpy(out->data(), frame_.data(), frame_.size());
  return true;
}

}  // namespace utramp::trace
