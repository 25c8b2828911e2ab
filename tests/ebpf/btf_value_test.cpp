// ebpf/btf_value.hpp: values decoded with BTF types built here with libbpf's writer, as
// clang would describe them, and rendered the way bpftrace prints values.
#include <bpf/btf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "ebpf/btf_value.hpp"

namespace {

using utramp::ebpf::btf_value;
using utramp::ebpf::find_record_type;
using utramp::ebpf::render_value;
using utramp::ebpf::type_name;

struct BtfFree {
  void operator()(btf* b) const { btf__free(b); }
};

// struct rec {                      offset
//   int s;                          0      (-7)
//   unsigned char u8;               4      (200)
//   _Bool ok;                       5      (1)
//   unsigned short bits_lo : 3;     6.0    (5)
//   short bits_hi : 5;              6.3    (-3)
//   enum color c;                   8      (GREEN = 2)
//   char name[8];                   12     ("abc")
//   unsigned int arr[3];            20     ({1, 2, 3})
//   union { long l; int i; };       32     (anonymous: l = 9 lifted)
//   void *p;                        40     (0x1000)
// };                                48
class BtfValue : public ::testing::Test {
 protected:
  void SetUp() override {
    b_.reset(btf__new_empty());
    ASSERT_TRUE(b_);
    btf* b = b_.get();
    const int i32 = btf__add_int(b, "int", 4, BTF_INT_SIGNED);
    const int u8 = btf__add_int(b, "unsigned char", 1, BTF_INT_CHAR);
    const int boolean = btf__add_int(b, "_Bool", 1, BTF_INT_BOOL);
    const int u16 = btf__add_int(b, "unsigned short", 2, 0);
    const int s16 = btf__add_int(b, "short", 2, BTF_INT_SIGNED);
    const int chr = btf__add_int(b, "char", 1, BTF_INT_SIGNED | BTF_INT_CHAR);
    const int u32 = btf__add_int(b, "unsigned int", 4, 0);
    const int i64 = btf__add_int(b, "long", 8, BTF_INT_SIGNED);
    const int color = btf__add_enum(b, "color", 4);
    btf__add_enum_value(b, "RED", 1);
    btf__add_enum_value(b, "GREEN", 2);
    const int name = btf__add_array(b, u32, chr, 8);
    const int arr = btf__add_array(b, u32, u32, 3);
    const int anon = btf__add_union(b, nullptr, 8);
    btf__add_field(b, "l", i64, 0, 0);
    btf__add_field(b, "i", i32, 0, 0);
    const int ptr = btf__add_ptr(b, 0);
    rec_ = btf__add_struct(b, "rec", 48);
    btf__add_field(b, "s", i32, 0, 0);
    btf__add_field(b, "u8", u8, 32, 0);
    btf__add_field(b, "ok", boolean, 40, 0);
    btf__add_field(b, "bits_lo", u16, 48, 3);
    btf__add_field(b, "bits_hi", s16, 51, 5);
    btf__add_field(b, "c", color, 64, 0);
    btf__add_field(b, "name", name, 96, 0);
    btf__add_field(b, "arr", arr, 160, 0);
    btf__add_field(b, nullptr, anon, 256, 0);
    btf__add_field(b, "p", ptr, 320, 0);
    other_ = btf__add_struct(b, "other", 48);  // same size: auto-detection is ambiguous
    btf__add_field(b, "x", i64, 0, 0);
    small_ = btf__add_struct(b, "small", 4);
    btf__add_field(b, "v", i32, 0, 0);
    ASSERT_GT(rec_, 0);

    bytes_.assign(48, 0);
    const int32_t s = -7;
    std::memcpy(&bytes_[0], &s, 4);
    bytes_[4] = 200;
    bytes_[5] = 1;
    const uint16_t bits = static_cast<uint16_t>(5 | ((-3 & 0x1f) << 3));
    std::memcpy(&bytes_[6], &bits, 2);
    const uint32_t green = 2;
    std::memcpy(&bytes_[8], &green, 4);
    std::memcpy(&bytes_[12], "abc", 4);
    const uint32_t a[3] = {1, 2, 3};
    std::memcpy(&bytes_[20], a, sizeof a);
    const int64_t l = 9;
    std::memcpy(&bytes_[32], &l, 8);
    const uint64_t p = 0x1000;
    std::memcpy(&bytes_[40], &p, 8);
  }

  std::unique_ptr<btf, BtfFree> b_;
  int rec_ = 0, other_ = 0, small_ = 0;
  std::vector<uint8_t> bytes_;
};

TEST_F(BtfValue, EveryKindDecodes) {
  const auto v = btf_value(b_.get(), static_cast<uint32_t>(rec_), bytes_);
  EXPECT_EQ(v.dump(),
            R"({"s":-7,"u8":200,"ok":true,"bits_lo":5,"bits_hi":-3,"c":"GREEN","name":"abc","arr":[1,2,3],)"
            R"("l":9,"p":4096})");
}

TEST_F(BtfValue, RenderedAsBpftracePrintsIt) {
  EXPECT_EQ(render_value(btf_value(b_.get(), static_cast<uint32_t>(rec_), bytes_)),
            R"({ .s = -7, .u8 = 200, .ok = true, .bits_lo = 5, .bits_hi = -3, .c = "GREEN", .name = "abc", )"
            R"(.arr = [1, 2, 3], .l = 9, .p = 4096 })");
}

TEST_F(BtfValue, UnknownEnumValueIsItsNumberAndShortBytesAreCut) {
  uint32_t seven = 7;
  std::memcpy(&bytes_[8], &seven, 4);
  const auto v = btf_value(b_.get(), static_cast<uint32_t>(rec_), std::span(bytes_).first(10));
  EXPECT_EQ(v["s"], -7);
  EXPECT_TRUE(v["c"].is_null());  // only 2 of its 4 bytes: cut, not guessed
  EXPECT_FALSE(v.contains("arr"));
  EXPECT_EQ(render_value(v).find(".c = (cut)") != std::string::npos, true) << render_value(v);
  EXPECT_EQ(btf_value(b_.get(), static_cast<uint32_t>(rec_), bytes_)["c"], 7);
}

TEST_F(BtfValue, NoBtfGivesTheBytesInHex) {
  const uint8_t b[3] = {0xde, 0xad, 0x01};
  EXPECT_EQ(btf_value(nullptr, 1, b), "dead01");
}

TEST_F(BtfValue, RecordTypeByNameOrUniqueSize) {
  auto by_size = find_record_type(b_.get(), 4);
  ASSERT_TRUE(by_size.ok()) << by_size.error().message;
  EXPECT_EQ(*by_size, static_cast<uint32_t>(small_));
  auto ambiguous = find_record_type(b_.get(), 48);
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.error().message.find("2 structs of 48 bytes"), std::string::npos) << ambiguous.error().message;
  EXPECT_NE(ambiguous.error().message.find("struct rec, struct other"), std::string::npos) << ambiguous.error().message;
  auto none = find_record_type(b_.get(), 13);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, utramp::Errc::not_found);
  for (const char* n : {"rec", "struct rec"}) {
    auto named = find_record_type(b_.get(), 48, n);
    ASSERT_TRUE(named.ok()) << n;
    EXPECT_EQ(*named, static_cast<uint32_t>(rec_));
  }
  EXPECT_FALSE(find_record_type(b_.get(), 48, "union rec").ok());
  EXPECT_FALSE(find_record_type(b_.get(), 48, "nope").ok());
  EXPECT_EQ(type_name(b_.get(), static_cast<uint32_t>(rec_)), "struct rec");
}

}  // namespace
