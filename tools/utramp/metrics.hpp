// `utramp run --metrics`: the maps, globals and counters of a run as Prometheus metrics,
// in the text exposition format 0.0.4 (docs/ebpf.md, "Metrics").
//
// The format: each family is introduced by `# HELP name text` and `# TYPE name type`,
// then its samples, one a line: `name{label="value",...} number`. All samples of a
// family follow its TYPE line without another family between them; a name appears in
// one family only. Label values escape backslash, double quote and newline
// (`\\`, `\"`, `\n`); HELP text escapes backslash and newline. A histogram `x` is the
// samples `x_bucket{le="B"}` (cumulative: the count of values <= B, up to le="+Inf"),
// `x_sum` and `x_count` (equal to the +Inf bucket).
//
// What becomes what (one family per map, per numeric field of a struct value):
//   utramp_map_NAME[_FIELD]   an array or hash map of integers (or of structs: one family
//                             per integer field); a gauge, or a counter named
//                             ..._total when the user named the map (--metrics-counter
//                             MAP) or the family's name ends in `_total` (Prometheus
//                             keeps that suffix for counters). Per-CPU maps: the sum over
//                             CPUs. Labels: a struct key's fields (decoded with the
//                             object's BTF, one label per field), any other key as `key`.
//                             Arrays: non-zero entries only (as printed).
//   utramp_map_NAME           a log2 histogram (bpftrace's hist(): an array of u64 named
//                             *hist*, or named by --metrics-hist MAP; libbpf-tools'
//                             struct value with a `slots` integer array, one histogram per
//                             key): buckets le = 2^(i+1)-1 for slot i, which counts the
//                             integers in [2^i, 2^(i+1)) (slot 0: 0 and 1), cumulative;
//                             _sum is a lower bound (each value counted as its slot's
//                             least), as the map keeps no values.
//   utramp_global_NAME        an integer global variable (.data/.bss), a gauge (a
//                             counter when the name ends in `_total`, as above).
// and utramp's own: utramp_map_entries{map}, utramp_ring_records_total{map},
// utramp_ring_lost_total{map}, utramp_printk_lines_total, utramp_prog_* (metrics_progs).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ebpf/maps.hpp"

struct btf;

namespace utramp::cli::metrics {

struct Label {
  std::string name;
  std::string value;
};
using Labels = std::vector<Label>;

// A label value with `\`, `"` and newline escaped, and any byte that is not part of
// valid UTF-8 replaced by U+FFFD (Prometheus refuses a scrape with one).
std::string escape_label_value(std::string_view v);
// HELP text with `\` and newline escaped (and invalid UTF-8 replaced, as above).
std::string escape_help(std::string_view v);
// A valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*): other characters become '_', a
// leading digit gets a '_' before it.
std::string metric_name(std::string_view v);
// A valid label name ([a-zA-Z_][a-zA-Z0-9_]*), never one Prometheus reserves (`__*`) or
// gives a meaning (`le`, `quantile`): those get a `key_` prefix.
std::string label_name(std::string_view v);

enum class Type { counter, gauge, histogram };

// Writes families and their samples in order; a second family of a name already
// written is refused (false), and samples are written only under an accepted family.
class Writer {
 public:
  bool family(const std::string& name, Type type, std::string_view help);
  void sample(std::string_view name, const Labels& labels, uint64_t v);
  void sample(std::string_view name, const Labels& labels, int64_t v);
  void sample(std::string_view name, const Labels& labels, double v);
  // A log2 histogram's samples (see above) for one label set, under family `name`.
  void log2_histogram(std::string_view name, const Labels& labels, std::span<const uint64_t> slots);
  const std::string& text() const { return out_; }

 private:
  void line(std::string_view name, const Labels& labels, std::string_view value);
  std::string out_;
  std::set<std::string> families_;
  bool open_ = false;  // the last family was accepted
};

// The value of a map entry decoded with BTF type `type` (0: as an integer of 1, 2, 4 or
// 8 bytes; null when neither), its per-CPU values summed: numbers added (wrapping as the
// type does), arrays element by element, structs field by field.
nlohmann::ordered_json entry_value(const btf* b, uint32_t type, const ebpf::MapEntry& e);

// The labels of a key: a struct's fields (one each, values as their text), or `key`.
Labels key_labels(const ebpf::MapSpec& s, const btf* b, std::span<const uint8_t> key);

struct MapOptions {
  std::set<std::string> hist;     // --metrics-hist MAP
  std::set<std::string> counter;  // --metrics-counter MAP
};

// One map's families (not streams, bloom filters or global data: see metrics_for).
void write_map(Writer& w, const ebpf::MapSpec& s, const btf* b, const std::vector<ebpf::MapEntry>& entries,
               const MapOptions& opt);
// The integer globals of one global data map (utramp_global_NAME).
void write_globals(Writer& w, const ebpf::MapSpec& s, const btf* b, std::span<const uint8_t> data);

// A program's counters as the agent publishes them (ebpf::ProgStatsRecord).
struct ProgCounters {
  std::string name, section;
  uint64_t run_cnt = 0, run_ns = 0, misses = 0;
};

// What `run` counts itself, for utramp_ring_records_total and utramp_printk_lines_total.
struct RunCounts {
  std::vector<uint64_t> records;  // by map index: records read from each ring
};

// Everything: every map of `mf` (specs[i] gives map i's BTF types; btfs[i] its object's
// BTF, may be null), its globals, the rings' records and losses, and the programs.
std::string render(const ebpf::MapFile& mf, const std::vector<ebpf::MapSpec>& specs,
                   const std::vector<const btf*>& btfs, const MapOptions& opt, const RunCounts& counts,
                   const std::vector<ProgCounters>& progs);

}  // namespace utramp::cli::metrics
