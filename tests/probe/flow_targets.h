/* Probe test targets (flow_targets.c: exact layouts in assembly; targets.c: C). */
#ifndef UTRAMP_TESTS_PROBE_FLOW_TARGETS_H
#define UTRAMP_TESTS_PROBE_FLOW_TARGETS_H

#include <setjmp.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

extern uint64_t pt_data, pt_data2;
extern int (*pt_fnptr)(int);

int pt_leaf(int x);
int pt_jcc(int x);
int pt_call(int x);
int pt_icall(int x);
int pt_switch(unsigned x);
uint64_t pt_loop(uint64_t n);
uint64_t pt_retn(uint64_t x);
uint64_t pt_retn_callee(uint64_t x);
uint64_t pt_riprel(uint64_t x);
uint64_t pt_redzone(uint64_t x);
int pt_branch_into(int n);
int pt_multi(int x);
int pt_window_call(int x);
long pt_getpid(void);
uint64_t pt_pushf(void);
void pt_traps(void);

/* targets.c */
int pt_add(int a, int b);
int pt_sub(int a, int b);
int pt_other(int a);
long pt_recurse(int depth);
long pt_work(long x);
int pt_jump_out(jmp_buf* env, int depth);
long pt_fork_in(long x);
long pt_spin(long n);
double pt_fsum(const double* v, int n);
long pt_call_cb(long (*cb)(long), long x);

#ifdef __cplusplus
}
#endif

#endif
