// utramp run --metrics (tools/utramp/metrics.hpp): the text exposition format written
// for maps of every shape, with BTF types built here as clang would describe them; the
// endpoint's address rules and server (metrics_server.hpp).
#include <bpf/btf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>

#include "metrics.hpp"
#include "metrics_server.hpp"

namespace {

using namespace utramp::cli::metrics;
using utramp::ebpf::MapEntry;
using utramp::ebpf::MapSpec;
using utramp::ebpf::MapType;

template <typename T>
std::vector<uint8_t> bytes(const T& v) {
  std::vector<uint8_t> b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

MapSpec spec(const char* name, MapType t, uint32_t key_size, uint32_t value_size) {
  MapSpec s;
  s.name = name;
  s.type = uint32_t(t);
  s.key_size = key_size;
  s.value_size = value_size;
  s.max_entries = 64;
  return s;
}

std::string render_map(const MapSpec& s, const btf* b, const std::vector<MapEntry>& e, const MapOptions& o = {}) {
  Writer w;
  write_map(w, s, b, e, o);
  return w.text();
}

TEST(MetricsText, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(escape_label_value("plain {x=1}"), "plain {x=1}");
  EXPECT_EQ(escape_help("say \"hi\"\\\n"), "say \"hi\"\\\\\\n");  // quotes stay in HELP
  // UTF-8 stays; bytes that are not UTF-8 (a key's char array may hold any) become U+FFFD.
  EXPECT_EQ(escape_label_value("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(escape_label_value("a\xff" "b\xc3"), "a\xef\xbf\xbd" "b\xef\xbf\xbd");
  EXPECT_EQ(escape_label_value("\xc0\x80"), "\xef\xbf\xbd\xef\xbf\xbd");  // overlong NUL
  Writer w;
  ASSERT_TRUE(w.family("m", Type::gauge, "line one\nline two \\"));
  w.sample("m", {{"path", "C:\\dir \"x\"\n"}}, uint64_t{3});
  EXPECT_EQ(w.text(),
            "# HELP m line one\\nline two \\\\\n"
            "# TYPE m gauge\n"
            "m{path=\"C:\\\\dir \\\"x\\\"\\n\"} 3\n");
}

TEST(MetricsText, NamesAreMadeValid) {
  EXPECT_EQ(metric_name("utramp_map_my.map-1"), "utramp_map_my_map_1");
  EXPECT_EQ(metric_name("9lives"), "_9lives");
  EXPECT_EQ(metric_name("a:b"), "a:b");
  EXPECT_EQ(label_name("a:b"), "a_b");
  EXPECT_EQ(label_name("le"), "key_le");
  EXPECT_EQ(label_name("__name__"), "key___name__");
  EXPECT_EQ(label_name("pid"), "pid");
}

TEST(MetricsText, AFamilyIsWrittenOnce) {
  Writer w;
  EXPECT_TRUE(w.family("x", Type::counter, "first"));
  w.sample("x", {}, uint64_t{1});
  EXPECT_FALSE(w.family("x", Type::gauge, "second"));
  w.sample("x", {}, uint64_t{2});  // under the refused family: dropped
  EXPECT_EQ(w.text(), "# HELP x first\n# TYPE x counter\nx 1\n");
}

TEST(MetricsText, Log2HistogramBucketsAreCumulative) {
  Writer w;
  ASSERT_TRUE(w.family("h", Type::histogram, "h"));
  // slot 0: {0, 1}; slot 1: [2, 4); slot 2: [4, 8); slot 3: [8, 16)
  const std::vector<uint64_t> slots{3, 0, 2, 5};
  w.log2_histogram("h", {{"k", "v"}}, slots);
  EXPECT_EQ(w.text(),
            "# HELP h h\n# TYPE h histogram\n"
            "h_bucket{k=\"v\",le=\"1\"} 3\n"
            "h_bucket{k=\"v\",le=\"3\"} 3\n"
            "h_bucket{k=\"v\",le=\"7\"} 5\n"
            "h_bucket{k=\"v\",le=\"15\"} 10\n"
            "h_bucket{k=\"v\",le=\"+Inf\"} 10\n"
            "h_sum{k=\"v\"} 48\n"  // 0*3 + 4*2 + 8*5: each value as its slot's least
            "h_count{k=\"v\"} 10\n");
}

TEST(MetricsText, Slot63IsTheInfBucket) {
  Writer w;
  ASSERT_TRUE(w.family("h", Type::histogram, "h"));
  std::vector<uint64_t> slots(64, 0);
  slots[62] = 1;
  slots[63] = 2;
  w.log2_histogram("h", {}, slots);
  const std::string& t = w.text();
  EXPECT_NE(t.find("h_bucket{le=\"9223372036854775807\"} 1\n"), std::string::npos) << t;  // 2^63 - 1
  EXPECT_NE(t.find("h_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("18446744073709551615"), std::string::npos) << t;  // no bucket past 2^63 - 1
}

TEST(MetricsMaps, PerCpuValuesAreSummed) {
  const MapSpec s = spec("by_cpu", MapType::percpu_hash, 4, 8);
  const std::vector<MapEntry> e{{bytes(uint32_t{7}), {bytes(uint64_t{1}), bytes(uint64_t{2}), bytes(uint64_t{40})}}};
  EXPECT_EQ(render_map(s, nullptr, e),
            "# HELP utramp_map_by_cpu percpu_hash map 'by_cpu' (key 4 bytes, value 8 bytes)\n"
            "# TYPE utramp_map_by_cpu gauge\n"
            "utramp_map_by_cpu{key=\"7\"} 43\n");
}

TEST(MetricsMaps, CountersByNameOrOption) {
  const MapSpec s = spec("calls", MapType::hash, 4, 8);
  const std::vector<MapEntry> e{{bytes(uint32_t{1}), {bytes(uint64_t{5})}}};
  MapOptions o;
  o.counter.insert("calls");
  const std::string t = render_map(s, nullptr, e, o);
  EXPECT_NE(t.find("# TYPE utramp_map_calls_total counter\nutramp_map_calls_total{key=\"1\"} 5\n"), std::string::npos)
      << t;
  const MapSpec named = spec("bytes_total", MapType::hash, 4, 8);
  EXPECT_NE(render_map(named, nullptr, e).find("# TYPE utramp_map_bytes_total counter\n"), std::string::npos);
}

TEST(MetricsMaps, ArraysShowNonZeroEntries) {
  const MapSpec s = spec("slots", MapType::array, 4, 8);
  const std::vector<MapEntry> e{{bytes(uint32_t{0}), {bytes(uint64_t{0})}},
                                {bytes(uint32_t{1}), {bytes(uint64_t{9})}}};
  const std::string t = render_map(s, nullptr, e);
  EXPECT_EQ(t.find("key=\"0\""), std::string::npos) << t;
  EXPECT_NE(t.find("utramp_map_slots{key=\"1\"} 9\n"), std::string::npos) << t;
}

TEST(MetricsMaps, HistArrayBecomesAHistogramSummedOverCpus) {
  const MapSpec s = spec("lat_hist", MapType::percpu_array, 4, 8);
  std::vector<MapEntry> e;
  for (uint32_t i = 0; i < 3; ++i) e.push_back({bytes(i), {bytes(uint64_t{i}), bytes(uint64_t{1})}});
  const std::string t = render_map(s, nullptr, e);
  // slots: 1, 2, 3 (per-CPU 0+1, 1+1, 2+1)
  EXPECT_NE(t.find("# TYPE utramp_map_lat_hist histogram\n"
                   "utramp_map_lat_hist_bucket{le=\"1\"} 1\n"
                   "utramp_map_lat_hist_bucket{le=\"3\"} 3\n"
                   "utramp_map_lat_hist_bucket{le=\"7\"} 6\n"
                   "utramp_map_lat_hist_bucket{le=\"+Inf\"} 6\n"
                   "utramp_map_lat_hist_sum 16\n"
                   "utramp_map_lat_hist_count 6\n"),
            std::string::npos)
      << t;
  // Another name is a histogram when named so.
  const MapSpec other = spec("lat", MapType::percpu_array, 4, 8);
  EXPECT_EQ(render_map(other, nullptr, e).find("histogram"), std::string::npos);
  MapOptions o;
  o.hist.insert("lat");
  EXPECT_NE(render_map(other, nullptr, e, o).find("# TYPE utramp_map_lat histogram\n"), std::string::npos);
}

struct BtfFree {
  void operator()(btf* b) const { btf__free(b); }
};

// struct key { u32 pid; char comm[8]; };           (libbpf-tools' keys)
// struct hist { u32 slots[4]; };                   (libbpf-tools' struct hist)
// struct val { u64 count; s64 delta; char tag[4]; };
class MetricsBtf : public ::testing::Test {
 protected:
  void SetUp() override {
    b_.reset(btf__new_empty());
    ASSERT_TRUE(b_);
    btf* b = b_.get();
    const int u32 = btf__add_int(b, "unsigned int", 4, 0);
    const int chr = btf__add_int(b, "char", 1, BTF_INT_SIGNED | BTF_INT_CHAR);
    const int u64 = btf__add_int(b, "unsigned long long", 8, 0);
    const int s64 = btf__add_int(b, "long long", 8, BTF_INT_SIGNED);
    const int comm = btf__add_array(b, u32, chr, 8);
    key_ = btf__add_struct(b, "key", 12);
    btf__add_field(b, "pid", u32, 0, 0);
    btf__add_field(b, "comm", comm, 32, 0);
    const int slots = btf__add_array(b, u32, u32, 4);
    hist_ = btf__add_struct(b, "hist", 16);
    btf__add_field(b, "slots", slots, 0, 0);
    const int tag = btf__add_array(b, u32, chr, 4);
    val_ = btf__add_struct(b, "val", 24);
    btf__add_field(b, "count", u64, 0, 0);
    btf__add_field(b, "delta", s64, 64, 0);
    btf__add_field(b, "tag", tag, 128, 0);
    s64_ = s64;
  }
  static std::vector<uint8_t> key(uint32_t pid, const char* comm) {
    std::vector<uint8_t> k(12, 0);
    std::memcpy(k.data(), &pid, 4);
    std::memcpy(k.data() + 4, comm, std::min<size_t>(std::strlen(comm), 8));
    return k;
  }
  std::unique_ptr<btf, BtfFree> b_;
  int key_ = 0, hist_ = 0, val_ = 0, s64_ = 0;
};

TEST_F(MetricsBtf, StructKeysAreOneLabelPerField) {
  MapSpec s = spec("counts", MapType::hash, 12, 8);
  s.key_type = uint32_t(key_);
  const std::vector<MapEntry> e{{key(42, "a\"b\\c"), {bytes(uint64_t{5})}}};
  const std::string t = render_map(s, b_.get(), e);
  EXPECT_NE(t.find("# HELP utramp_map_counts hash map 'counts' (key struct key, value 8 bytes)\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("utramp_map_counts{pid=\"42\",comm=\"a\\\"b\\\\c\"} 5\n"), std::string::npos) << t;
}

TEST_F(MetricsBtf, SignedValuesSumPerCpu) {
  MapSpec s = spec("balance", MapType::percpu_array, 4, 8);
  s.value_type = uint32_t(s64_);
  const std::vector<MapEntry> e{{bytes(uint32_t{0}), {bytes(int64_t{-5}), bytes(int64_t{2})}}};
  EXPECT_NE(render_map(s, b_.get(), e).find("utramp_map_balance{key=\"0\"} -3\n"), std::string::npos);
}

TEST_F(MetricsBtf, StructValuesAreAFamilyPerIntegerMember) {
  MapSpec s = spec("stats", MapType::percpu_hash, 4, 24);
  s.value_type = uint32_t(val_);
  struct {
    uint64_t count;
    int64_t delta;
    char tag[4];
    uint32_t pad;
  } a{3, -1, "ab", 0}, c{4, -2, "ab", 0};
  const std::vector<MapEntry> e{{bytes(uint32_t{9}), {bytes(a), bytes(c)}}};
  const std::string t = render_map(s, b_.get(), e);
  EXPECT_NE(t.find("# TYPE utramp_map_stats_count gauge\nutramp_map_stats_count{key=\"9\"} 7\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("# TYPE utramp_map_stats_delta gauge\nutramp_map_stats_delta{key=\"9\"} -3\n"), std::string::npos)
      << t;
  EXPECT_EQ(t.find("tag"), std::string::npos) << t;  // not a number
}

TEST_F(MetricsBtf, SlotsMemberIsAHistogramPerKey) {
  MapSpec s = spec("hists", MapType::hash, 12, 16);
  s.key_type = uint32_t(key_);
  s.value_type = uint32_t(hist_);
  const uint32_t h1[4] = {1, 2, 0, 0}, h2[4] = {0, 0, 0, 4};
  const std::vector<MapEntry> e{{key(1, "sh"), {bytes(h1)}}, {key(2, "ls"), {bytes(h2)}}};
  const std::string t = render_map(s, b_.get(), e);
  EXPECT_NE(t.find("# TYPE utramp_map_hists histogram\n"), std::string::npos) << t;
  EXPECT_NE(t.find("utramp_map_hists_bucket{pid=\"1\",comm=\"sh\",le=\"3\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("utramp_map_hists_count{pid=\"1\",comm=\"sh\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("utramp_map_hists_bucket{pid=\"2\",comm=\"ls\",le=\"7\"} 0\n"), std::string::npos) << t;
  EXPECT_NE(t.find("utramp_map_hists_bucket{pid=\"2\",comm=\"ls\",le=\"15\"} 4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("utramp_map_hists_sum{pid=\"2\",comm=\"ls\"} 32\n"), std::string::npos) << t;
}

// Prometheus keeps `_total` for counters (promtool's lint refuses a gauge so named): a
// global or a struct member whose family ends so is a counter.
TEST_F(MetricsBtf, FamiliesNamedTotalAreCounters) {
  MapSpec data = spec(".bss", MapType::array, 4, 16);
  data.global_data = true;
  using utramp::ebpf::GlobalVar;
  data.vars = {{"total", 0, 8, GlobalVar::Kind::signed_int, uint32_t(s64_)},
               {"level", 8, 8, GlobalVar::Kind::signed_int, uint32_t(s64_)}};
  std::vector<uint8_t> bytes(16, 0);
  bytes[0] = 7;
  bytes[8] = 3;
  Writer w;
  write_globals(w, data, b_.get(), bytes);
  EXPECT_EQ(w.text(),
            "# HELP utramp_global_total global variable 'total' (.bss)\n# TYPE utramp_global_total counter\n"
            "utramp_global_total 7\n"
            "# HELP utramp_global_level global variable 'level' (.bss)\n# TYPE utramp_global_level gauge\n"
            "utramp_global_level 3\n");
}

}  // namespace

namespace {

using utramp::cli::MetricsServer;
using utramp::cli::parse_endpoint;

TEST(MetricsEndpoint, LoopbackIsToldApart) {
  auto a = parse_endpoint("127.0.0.1:9464");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9464);
  EXPECT_TRUE(a->loopback);
  auto b = parse_endpoint("[::1]:0");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->host, "::1");
  EXPECT_TRUE(b->loopback);
  EXPECT_TRUE(parse_endpoint("127.1.2.3:1")->loopback);
  EXPECT_TRUE(parse_endpoint("localhost:1")->loopback);
  EXPECT_FALSE(parse_endpoint("0.0.0.0:9464")->loopback);
  EXPECT_FALSE(parse_endpoint("10.0.0.1:9464")->loopback);
  EXPECT_FALSE(parse_endpoint("[::]:9464")->loopback);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", ":9464", "127.0.0.1:65536", "127.0.0.1:9x", "::1:9464",
                          "[::1]9464", "example.org:80"})
    EXPECT_FALSE(parse_endpoint(bad)) << bad;
}

// The HTTP server is a library of its own, loaded only when metrics are asked for: one
// that cannot be loaded is an error that names it, and nothing is served.
TEST(MetricsEndpoint, MissingLibraryIsNamed) {
  auto at = parse_endpoint("127.0.0.1:0");
  ASSERT_TRUE(at);
  const std::string lib = std::string(UTRAMP_METRICS_LIBRARY) + ".missing";
  auto s = MetricsServer::start(*at, [] { return std::string(); }, lib);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find(lib), std::string::npos) << s.error().message;
}

TEST(MetricsEndpoint, ServesTheTextUntilDestroyed) {
  auto at = parse_endpoint("127.0.0.1:0");
  ASSERT_TRUE(at);
  int renders = 0;
  auto s = MetricsServer::start(*at, [&] {
    ++renders;
    return std::string("# HELP x x\n# TYPE x gauge\nx 1\n");
  }, UTRAMP_METRICS_LIBRARY);
  ASSERT_TRUE(s) << s.error().message;
  const int port = (*s)->port();
  ASSERT_GT(port, 0);
  // The port is taken: a second server there is refused, and says where.
  auto again = MetricsServer::start({"127.0.0.1", port, true}, [] { return std::string(); },
                                    UTRAMP_METRICS_LIBRARY);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find(fmt::format("127.0.0.1:{}", port)), std::string::npos)
      << again.error().message;
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(r->body, "# HELP x x\n# TYPE x gauge\nx 1\n");
  EXPECT_EQ(renders, 1);
  auto other = c.Get("/");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  s->reset();
  httplib::Client gone("127.0.0.1", port);
  gone.set_connection_timeout(1);
  EXPECT_FALSE(gone.Get("/metrics"));
}

}  // namespace
