/* Functions with exact instruction layouts for the probe tests: every kind of control
 * flow the int3 path emulates, instructions that run from the slot, windows a jump may
 * or may not replace, and instructions that are refused. Offsets are in the comments;
 * the tests name them with flow_targets.h. */
#include "flow_targets.h"

uint64_t pt_data = 5;
uint64_t pt_data2 = 0;
int (*pt_fnptr)(int) = pt_leaf;

__asm__(
    ".text\n"

    /* int pt_leaf(int x) { return 3 * x; } */
    ".globl pt_leaf\n .type pt_leaf, @function\n .p2align 4\n"
    "pt_leaf:\n"
    "  lea (%rdi,%rdi,2), %eax\n"  /* +0 (3) */
    "  ret\n"                      /* +3 */
    ".size pt_leaf, .-pt_leaf\n"

    /* int pt_jcc(int x) { return x > 0 ? x + 100 : x - 100; } */
    ".globl pt_jcc\n .type pt_jcc, @function\n .p2align 4\n"
    "pt_jcc:\n"
    "  mov %edi, %eax\n"    /* +0 (2) */
    "  test %edi, %edi\n"   /* +2 (2) */
    "  jle 1f\n"            /* +4 (2) jcc rel8 */
    "  add $100, %eax\n"    /* +6 (3) */
    "  ret\n"               /* +9 */
    "1: sub $100, %eax\n"   /* +10 (3) */
    "  jmp 2f\n"            /* +13 (2) jmp rel8 */
    "  ud2\n"
    "2: ret\n"              /* +17 */
    ".size pt_jcc, .-pt_jcc\n"

    /* int pt_call(int x) { return pt_leaf(x) + x; } */
    ".globl pt_call\n .type pt_call, @function\n .p2align 4\n"
    "pt_call:\n"
    "  push %rbx\n"          /* +0 (1) */
    "  mov %edi, %ebx\n"     /* +1 (2) */
    "  call pt_leaf\n"       /* +3 (5) call rel32 */
    "  add %ebx, %eax\n"     /* +8 (2) */
    "  pop %rbx\n"           /* +10 (1) */
    "  ret\n"                /* +11 */
    ".size pt_call, .-pt_call\n"

    /* int pt_icall(int x) { return 81 * x; } through four kinds of indirect call */
    ".globl pt_icall\n .type pt_icall, @function\n .p2align 4\n"
    "pt_icall:\n"
    "  push %rbx\n"                     /* +0 (1) */
    "  lea pt_leaf(%rip), %rax\n"       /* +1 (7) */
    "  call *%rax\n"                    /* +8 (2) register */
    "  mov %eax, %edi\n"                /* +10 (2) */
    "  lea pt_fnptr(%rip), %rcx\n"      /* +12 (7) */
    "  call *(%rcx)\n"                  /* +19 (2) memory, base */
    "  mov %eax, %edi\n"                /* +21 (2) */
    "  call *pt_fnptr(%rip)\n"          /* +23 (6) memory, RIP-relative */
    "  mov %eax, %edi\n"                /* +29 (2) */
    "  lea pt_leaf(%rip), %rax\n"       /* +31 (7) */
    "  push %rax\n"                     /* +38 (1) */
    "  call *(%rsp)\n"                  /* +39 (3) memory, rsp-based (read before the push) */
    "  add $8, %rsp\n"                  /* +42 (4) */
    "  pop %rbx\n"                      /* +46 (1) */
    "  ret\n"                           /* +47 */
    ".size pt_icall, .-pt_icall\n"

    /* int pt_switch(unsigned x) { return x < 3 ? 10 + x : -1; } through a jump table */
    ".globl pt_switch\n .type pt_switch, @function\n .p2align 4\n"
    "pt_switch:\n"
    "  cmp $2, %edi\n"                  /* +0 (3) */
    "  ja 9f\n"                         /* +3 (2) */
    "  mov %edi, %edi\n"                /* +5 (2) */
    "  lea pt_table(%rip), %rax\n"      /* +7 (7) */
    "  jmp *(%rax,%rdi,8)\n"            /* +14 (3) indirect jmp, memory */
    "pt_case0: mov $10, %eax\n ret\n"
    "pt_case1: mov $11, %eax\n ret\n"
    "pt_case2: lea pt_case2b(%rip), %rcx\n jmp *%rcx\n"  /* indirect jmp, register */
    "pt_case2b: mov $12, %eax\n ret\n"
    "9: mov $-1, %eax\n ret\n"
    ".size pt_switch, .-pt_switch\n"
    ".section .data.rel.ro\n .p2align 3\n"
    "pt_table: .quad pt_case0, pt_case1, pt_case2\n"
    ".text\n"

    /* uint64_t pt_loop(uint64_t n) { return n + (n-1) + ... + 1; } with jrcxz and loop */
    ".globl pt_loop\n .type pt_loop, @function\n .p2align 4\n"
    "pt_loop:\n"
    "  xor %eax, %eax\n"     /* +0 (2) */
    "  mov %rdi, %rcx\n"     /* +2 (3) */
    "  jrcxz 2f\n"           /* +5 (2) */
    "1: add %rcx, %rax\n"    /* +7 (3) */
    "  loop 1b\n"            /* +10 (2) */
    "2: ret\n"               /* +12 */
    ".size pt_loop, .-pt_loop\n"

    /* uint64_t pt_retn(uint64_t x) { return x + 1; } through a callee that pops its
     * stack argument with `ret $8` */
    ".globl pt_retn\n .type pt_retn, @function\n .p2align 4\n"
    "pt_retn:\n"
    "  push %rdi\n"           /* +0 (1) */
    "  call pt_retn_callee\n" /* +1 (5) */
    "  ret\n"                 /* +6 */
    ".size pt_retn, .-pt_retn\n"
    ".globl pt_retn_callee\n .type pt_retn_callee, @function\n .p2align 4\n"
    "pt_retn_callee:\n"
    "  mov 8(%rsp), %rax\n"   /* +0 (5) */
    "  add $1, %rax\n"        /* +5 (4) */
    "  ret $8\n"              /* +9 (3) */
    ".size pt_retn_callee, .-pt_retn_callee\n"

    /* uint64_t pt_riprel(uint64_t x) { pt_data2 = x; return pt_data + x; } */
    ".globl pt_riprel\n .type pt_riprel, @function\n .p2align 4\n"
    "pt_riprel:\n"
    "  mov %rdi, pt_data2(%rip)\n"  /* +0 (7) */
    "  mov pt_data(%rip), %rax\n"   /* +7 (7) */
    "  add %rdi, %rax\n"            /* +14 (3) */
    "  ret\n"                       /* +17 */
    ".size pt_riprel, .-pt_riprel\n"

    /* uint64_t pt_redzone(uint64_t x) { return 2 * x; } keeping x in the red zone across
     * a 5-byte NOP and a 5-byte mov (each a window of one instruction) */
    ".globl pt_redzone\n .type pt_redzone, @function\n .p2align 4\n"
    "pt_redzone:\n"
    "  mov %rdi, -8(%rsp)\n"        /* +0 (5) */
    "  mov %rdi, %rax\n"            /* +5 (3) */
    "  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"  /* +8 (5) nopl 0x0(%rax,%rax,1) */
    "  mov $0x1000, %ecx\n"         /* +13 (5) */
    "  add -8(%rsp), %rax\n"        /* +18 (5) */
    "  ret\n"                       /* +23 */
    ".size pt_redzone, .-pt_redzone\n"

    /* int pt_branch_into(int n) { return 3 * n; } (n > 0): the loop jumps back to +2, so
     * a jump at +0 (over +0 and +2) is refused */
    ".globl pt_branch_into\n .type pt_branch_into, @function\n .p2align 4\n"
    "pt_branch_into:\n"
    "  xor %eax, %eax\n"     /* +0 (2) */
    "1: add $3, %eax\n"      /* +2 (3) */
    "  dec %edi\n"           /* +5 (2) */
    "  jnz 1b\n"             /* +7 (2) */
    "  ret\n"                /* +9 */
    ".size pt_branch_into, .-pt_branch_into\n"

    /* int pt_multi(int x) { return (x + 7) * x; }: a jump at +0 replaces two instructions */
    ".globl pt_multi\n .type pt_multi, @function\n .p2align 4\n"
    "pt_multi:\n"
    "  mov %edi, %eax\n"     /* +0 (2) */
    "  add $7, %eax\n"       /* +2 (3) */
    "  imul %edi, %eax\n"    /* +5 (3) */
    "  ret\n"                /* +8 */
    ".size pt_multi, .-pt_multi\n"

    /* int pt_window_call(int x) { return pt_leaf(x) + 1; }: the window at +0 ends with the
     * call, which the detour emulates (push the original return address, jmp) */
    ".globl pt_window_call\n .type pt_window_call, @function\n .p2align 4\n"
    "pt_window_call:\n"
    "  push %rbx\n"          /* +0 (1) */
    "  call pt_leaf\n"       /* +1 (5) */
    "  add $1, %eax\n"       /* +6 (3) */
    "  pop %rbx\n"           /* +9 (1) */
    "  ret\n"                /* +10 */
    ".size pt_window_call, .-pt_window_call\n"

    /* long pt_getpid(void): a system call from the slot */
    ".globl pt_getpid\n .type pt_getpid, @function\n .p2align 4\n"
    "pt_getpid:\n"
    "  mov $39, %eax\n"      /* +0 (5) */
    "  syscall\n"            /* +5 (2) */
    "  ret\n"                /* +7 */
    ".size pt_getpid, .-pt_getpid\n"

    /* uint64_t pt_pushf(void): the flags, pushed from the slot */
    ".globl pt_pushf\n .type pt_pushf, @function\n .p2align 4\n"
    "pt_pushf:\n"
    "  xor %eax, %eax\n"     /* +0 (2): ZF=1 PF=1 */
    "  pushfq\n"             /* +2 (1) */
    "  pop %rax\n"           /* +3 (1) */
    "  ret\n"                /* +4 */
    ".size pt_pushf, .-pt_pushf\n"

    /* Refused: instructions that trap themselves. Never called. */
    ".globl pt_traps\n .type pt_traps, @function\n .p2align 4\n"
    "pt_traps:\n"
    "  nop\n"                /* +0 */
    "  ud2\n"                /* +1 (2) */
    "  int3\n"               /* +3 (1) */
    "  ret\n"                /* +4 */
    ".size pt_traps, .-pt_traps\n");
