// The rule `utramp run` reads stack ids in struct keys by (tools/utramp/ustack.hpp,
// stack_id_members): top-level 4- or 8-byte integer members of a hash map's struct key
// whose name has "stack" in it and ends in "id", through typedefs; nothing for other
// map types, non-struct keys, bitfields, or other sizes.
#include <bpf/btf.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ustack.hpp"

namespace {

using utramp::cli::stack_id_members;
using utramp::ebpf::MapSpec;
using utramp::ebpf::MapType;

struct BtfFree {
  void operator()(btf* b) const { btf__free(b); }
};

MapSpec map(MapType t) {
  MapSpec s;
  s.name = "counts";
  s.type = uint32_t(t);
  return s;
}

TEST(StackIdMembers, LibbpfToolsKeysAndLookalikes) {
  std::unique_ptr<btf, BtfFree> owner(btf__new_empty());
  ASSERT_TRUE(owner);
  btf* b = owner.get();
  const int u32 = btf__add_int(b, "unsigned int", 4, 0);
  const int s32 = btf__add_int(b, "int", 4, BTF_INT_SIGNED);
  const int u64 = btf__add_int(b, "unsigned long long", 8, 0);
  const int u16 = btf__add_int(b, "unsigned short", 2, 0);
  const int chr = btf__add_int(b, "char", 1, BTF_INT_SIGNED | BTF_INT_CHAR);
  const int s32_t = btf__add_typedef(b, "s32", s32);
  const int comm = btf__add_array(b, u32, chr, 16);
  // struct key_t { u32 pid; s32 user_stack_id; int kern_stack_id; u64 StackId;
  //                u32 stack_depth; u32 ids; u16 short_stack_id; char name[16];
  //                u32 bits_stack_id : 4; }
  const int key = btf__add_struct(b, "key_t", 56);
  ASSERT_GT(key, 0);
  btf__add_field(b, "pid", u32, 0, 0);
  btf__add_field(b, "user_stack_id", s32_t, 32, 0);
  btf__add_field(b, "kern_stack_id", s32, 64, 0);
  btf__add_field(b, "StackId", u64, 128, 0);
  btf__add_field(b, "stack_depth", u32, 192, 0);
  btf__add_field(b, "ids", u32, 224, 0);
  btf__add_field(b, "short_stack_id", u16, 256, 0);
  btf__add_field(b, "name", comm, 272, 0);
  btf__add_field(b, "bits_stack_id", u32, 416, 4);
  const int key_typedef = btf__add_typedef(b, "key_t_t", key);

  const std::vector<std::string> want = {"user_stack_id", "kern_stack_id", "StackId"};
  EXPECT_EQ(stack_id_members(map(MapType::hash), b, key), want);
  EXPECT_EQ(stack_id_members(map(MapType::lru_hash), b, key_typedef), want);
  EXPECT_EQ(stack_id_members(map(MapType::percpu_hash), b, key), want);
  EXPECT_TRUE(stack_id_members(map(MapType::array), b, key).empty());
  EXPECT_TRUE(stack_id_members(map(MapType::hash), b, u32).empty());   // a plain integer key
  EXPECT_TRUE(stack_id_members(map(MapType::hash), b, 0).empty());     // no BTF type
  EXPECT_TRUE(stack_id_members(map(MapType::hash), nullptr, key).empty());
}

}  // namespace
