// Compressed events files (docs/trace-format.md, "Compressed events files"): the body
// after the 32-byte header is a sequence of independent zstd frames, each holding whole
// 32-byte records and its own checksum. Independent frames are what makes the file
// usable when it is damaged or cut: a frame is written whole or cut off (the writer
// truncates a partial one away), and a reader hands out a frame's events only once the
// frame has ended and its checksum matched, so every event before a bad frame is read
// and none from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trace/event.hpp"

typedef struct ZSTD_CCtx_s ZSTD_CCtx;
typedef struct ZSTD_DCtx_s ZSTD_DCtx;

namespace utramp::trace {

// Events per frame the writer makes at most (256 KiB of records): large enough to
// compress well, small enough that a reader's buffer per thread stays small and a
// recorder killed with frames pending loses little.
inline constexpr size_t kZstdFrameEvents = 8192;
// A frame that says it holds more than this is not one we wrote (a reader refuses it
// rather than allocate what a damaged header asks for).
inline constexpr size_t kZstdMaxFrameBytes = 64u << 20;

// Compresses EVENTS into one zstd frame (with its content size and checksum).
class ZstdFrameWriter {
 public:
  ZstdFrameWriter();
  ~ZstdFrameWriter();
  ZstdFrameWriter(const ZstdFrameWriter&) = delete;
  ZstdFrameWriter& operator=(const ZstdFrameWriter&) = delete;
  // The frame, valid until the next call; empty with *error set on failure.
  std::span<const char> compress(std::span<const Event> events, std::string* error);
  // EVENTS as one zstd frame of raw (stored) blocks, with the same content size and
  // checksum a compressed one has: what a recorder that cannot compress fast enough
  // writes (TraceWriter::set_store_frames()). Any zstd decoder reads it; it costs a copy
  // and a hash, no compression. Valid until the next call.
  std::span<const char> store(std::span<const Event> events);

 private:
  ZSTD_CCtx* cctx_ = nullptr;
  std::vector<char> out_;
};

// Reads the frames of one compressed events file in order, from byte OFFSET (the end of
// the header). The descriptor is passed to each call, so that a caller may close the file
// between frames (a merge of thousands of threads keeps one open at a time).
class ZstdFrameReader {
 public:
  explicit ZstdFrameReader(uint64_t offset);
  ~ZstdFrameReader();
  ZstdFrameReader(const ZstdFrameReader&) = delete;
  ZstdFrameReader& operator=(const ZstdFrameReader&) = delete;
  // Replaces *OUT with the next whole, checked frame's events: false at the end of the
  // file, or at the first bad frame (error() then says what and where: its byte offset).
  bool next(int fd, std::vector<Event>* out);
  const std::string& error() const { return error_; }

 private:
  bool fill(int fd);  // more input at in_off_; false at the end of the file or on error

  ZSTD_DCtx* dctx_ = nullptr;
  uint64_t in_off_;            // the file offset of the byte after those in in_
  std::vector<char> in_;       // input read ahead: in_[in_pos_, in_len_)
  size_t in_pos_ = 0, in_len_ = 0;
  std::vector<char> frame_;    // the frame being decompressed
  std::string error_;
};

}  // namespace utramp::trace
