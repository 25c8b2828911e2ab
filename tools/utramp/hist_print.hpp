// Log2 histograms as bcc's funclatency prints them:
//
//          nsecs               : count     distribution
//          256 -> 511          : 12       |*****                                   |
//          512 -> 1023         : 97       |****************************************|
//
// Bucket b >= 1 holds [2^b, 2^(b+1) - 1]; bucket 0 holds 0 and 1. Rows run from the first
// to the last non-empty bucket. Header-only, for `utramp hist` and `report --hist`.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace utramp::cli {

inline size_t log2_bucket(uint64_t v) {
  return v < 2 ? 0 : static_cast<size_t>(std::bit_width(v) - 1);
}

// Counts per bucket of `values` divided by `divisor` (1000 to bucket ns as usecs).
inline std::vector<uint64_t> log2_buckets(const std::vector<uint64_t>& values,
                                          uint64_t divisor = 1) {
  std::vector<uint64_t> b;
  for (uint64_t v : values) {
    const size_t i = log2_bucket(v / (divisor ? divisor : 1));
    if (b.size() <= i) b.resize(i + 1);
    ++b[i];
  }
  return b;
}

// Prints `buckets` (as from log2_buckets) with `unit` as the column title.
inline void print_log2_hist(std::ostream& os, const std::vector<uint64_t>& buckets,
                            std::string_view unit = "nsecs") {
  size_t first = 0, last = 0;
  uint64_t max = 0;
  bool any = false;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!buckets[i]) continue;
    if (!any) first = i;
    any = true;
    last = i;
    max = std::max(max, buckets[i]);
  }
  if (!any) {
    os << "(no values)\n";
    return;
  }
  // Wide rows once the bounds no longer fit in 10 digits, as bcc does past 2^32.
  const bool wide = last >= 32;
  const int num = wide ? 20 : 10, bar = wide ? 20 : 40;
  char line[256];
  std::snprintf(line, sizeof line, "%*s%-*s : count     distribution\n", wide ? 15 : 5, "",
                wide ? 29 : 19, std::string(unit).c_str());
  os << line;
  for (size_t i = first; i <= last; ++i) {
    const uint64_t lo = i == 0 ? 0 : uint64_t{1} << i;
    const uint64_t hi = i == 0 ? 1 : i >= 63 ? UINT64_MAX : (uint64_t{1} << (i + 1)) - 1;
    const uint64_t n = buckets[i];
    // At least one star for a non-empty row, so that no count is invisible.
    int stars = static_cast<int>(static_cast<unsigned __int128>(n) * bar / max);
    if (n && stars == 0) stars = 1;
    std::snprintf(line, sizeof line, "%*llu -> %-*llu : %-8llu |%-*s|\n", num,
                  static_cast<unsigned long long>(lo), num, static_cast<unsigned long long>(hi),
                  static_cast<unsigned long long>(n), bar, std::string(stars, '*').c_str());
    os << line;
  }
}

// Durations in ns, bucketed in `unit` (nsecs, usecs or msecs), then a summary line:
// "avg = 1234 nsecs, total: 5678 nsecs, count: 9".
inline void print_latency_hist(std::ostream& os, const std::vector<uint64_t>& durations_ns,
                               std::string_view unit = "nsecs") {
  const uint64_t div = unit == "msecs" ? 1000000 : unit == "usecs" ? 1000 : 1;
  print_log2_hist(os, log2_buckets(durations_ns, div), unit);
  if (durations_ns.empty()) return;
  unsigned __int128 total = 0;
  for (uint64_t d : durations_ns) total += d;
  const uint64_t t = static_cast<uint64_t>(total / div);
  os << "\navg = " << t / durations_ns.size() << ' ' << unit << ", total: " << t << ' ' << unit
     << ", count: " << durations_ns.size() << '\n';
}

}  // namespace utramp::cli
