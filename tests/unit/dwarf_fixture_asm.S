/* An assembly function: gas's DWARF names it (DW_LANG_Mips_Assembler) but has no
   argument types, so dwarf_test.cpp expects "written in assembly". */
	.text
	.globl	asm_add
	.type	asm_add, @function
asm_add:
	leaq	(%rdi,%rsi), %rax
	ret
	.size	asm_add, .-asm_add
	.section	.note.GNU-stack,"",@progbits
