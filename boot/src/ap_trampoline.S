# Application-processor trampoline. Copied to physical 0x8000 (SIPI vector
# 0x08); every address inside is computed as TBASE + (label - start) because
# the blob runs at a different address from the one it is linked at.
# The BSP patches CR3, the entry point, the stack, the argument and clears
# the started flag before each INIT-SIPI-SIPI (offsets mirror
# boot::trampoline_layout).

    .set TBASE, 0x8000
    .section .rodata.ap_trampoline, "a"
    .code16
    .global ap_trampoline_start
ap_trampoline_start:
    cli
    jmp ap_t16
    .p2align 3
ap_t_cr3:                                          # offset 8
    .long 0
    .long 0
ap_t_entry:                                        # offset 16
    .quad 0
ap_t_stack:                                        # offset 24
    .quad 0
ap_t_arg:                                          # offset 32
    .quad 0
ap_t_started:                                      # offset 40
    .long 0
    .long 0
ap_t_gdt:
    .quad 0
    .quad 0x00CF9A000000FFFF                       # 0x08: 32-bit code
    .quad 0x00CF92000000FFFF                       # 0x10: data
    .quad 0x00AF9A000000FFFF                       # 0x18: 64-bit code
ap_t_gdt_ptr:
    .short 31
    .long TBASE + (ap_t_gdt - ap_trampoline_start)

ap_t16:
    xorw %ax, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    lgdtl TBASE + (ap_t_gdt_ptr - ap_trampoline_start)
    movl %cr0, %eax
    orl $1, %eax
    movl %eax, %cr0
    ljmpl $0x08, $(TBASE + (ap_t32 - ap_trampoline_start))

    .code32
ap_t32:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movl TBASE + (ap_t_cr3 - ap_trampoline_start), %eax
    movl %eax, %cr3
    movl %cr4, %eax
    orl $0xA0, %eax                                # PAE | PGE
    movl %eax, %cr4
    movl $0x80000001, %eax
    cpuid
    movl %edx, %esi
    movl $0xC0000080, %ecx
    rdmsr
    orl $0x100, %eax                               # LME
    testl $0x100000, %esi
    jz 1f
    orl $0x800, %eax                               # NXE, as on the BSP
1:  wrmsr
    movl %cr0, %eax
    orl $0x80010000, %eax                          # PG | WP
    movl %eax, %cr0
    ljmpl $0x18, $(TBASE + (ap_t64 - ap_trampoline_start))

    .code64
ap_t64:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    xorw %ax, %ax
    movw %ax, %fs
    movw %ax, %gs
    # Claim the stack before any push: RSP is garbage here.
    movq TBASE + (ap_t_stack - ap_trampoline_start), %rsp
    movq TBASE + (ap_t_arg - ap_trampoline_start), %rdi
    movq TBASE + (ap_t_entry - ap_trampoline_start), %rax
    # Tell the BSP this AP has read its parameters; it may reuse the page.
    lock incl TBASE + (ap_t_started - ap_trampoline_start)
    call *%rax
2:  cli
    hlt
    jmp 2b
    .global ap_trampoline_end
ap_trampoline_end:
