// Declarations of the targets in behaviour_targets.c and behaviour_throw.cpp.
#pragma once

#include <atomic>
#include <cstdint>

extern "C" {
extern std::atomic<int> tb_self_body;  // C11 atomic_int: same layout
extern std::atomic<int> tb_sig_body;
int tb_self(int x);
int tb_sig(int x);
int tb_sleepy(int block, std::atomic<int>* inside, std::atomic<int>* release);
int tb_rec(int n);
int tb_forked(int x);
int tb_stats(int x);
int tb_throw(int x);       // throws TbError{x} when x < 0, else returns 2x
int tb_throw_deep(int x);  // throws std::invalid_argument when x < 0, else 3(x+1)
}

struct TbError {
  int value;
};
