# baremq boot entry: loader headers, the 32-bit entry shared by every boot
# protocol, identity paging for the low 4 GiB, and the jump to Rust's kmain.
# AT&T syntax; no C preprocessor (this text goes through global_asm!).

# ---------------------------------------------------------------------------
# Multiboot1 header with the a.out-kludge address fields (flag bit 16): QEMU's
# -kernel refuses an ELF64 otherwise. Must lie in the first 8 KiB of the file.
    .section .multiboot, "a"
    .p2align 2
mb1_header:
    .long 0x1BADB002
    .long 0x00010003                               # page-align, memory info, address fields
    .long 0x100000000 - (0x1BADB002 + 0x00010003)
    .long mb1_header                               # header_addr
    .long __kernel_start                           # load_addr
    .long __load_end                               # load_end_addr
    .long __bss_end                                # bss_end_addr
    .long _start32                                 # entry_addr

# ---------------------------------------------------------------------------
# Multiboot2 header (GRUB `multiboot2`, BIOS and UEFI). Must lie in the first
# 32 KiB, 8-byte aligned. Header length 48: fixed part (16), an optional
# framebuffer request (20, padded to 24: tags are 8-byte aligned), end tag (8).
# The framebuffer (UEFI GOP, or a VBE mode) gets a copy of the console for
# iKVM users; "optional" lets GRUB boot without one (no display, serial only).
    .section .multiboot2, "a"
    .p2align 3
mb2_header:
    .long 0xE85250D6
    .long 0                                        # architecture: i386 protected mode
    .long 48
    .long 0x100000000 - (0xE85250D6 + 0 + 48)
    .short 5                                       # framebuffer tag
    .short 1                                       # optional
    .long 20
    .long 0                                        # width: no preference
    .long 0                                        # height: no preference
    .long 32                                       # bits per pixel
    .long 0                                        # padding to 8 bytes
    .short 0                                       # end tag
    .short 0
    .long 8

# ---------------------------------------------------------------------------
# Xen PVH entry note (type 18, XEN_ELFNOTE_PHYS32_ENTRY): used by QEMU -kernel
# when there is no multiboot1 header, and by Firecracker/cloud-hypervisor.
    .section .note.Xen, "a", @note
    .p2align 2
    .long 4                                        # name size ("Xen\0")
    .long 4                                        # descriptor size
    .long 18
    .asciz "Xen"
    .long _start_pvh

# ---------------------------------------------------------------------------
    .section .boot.text, "ax"
    .code32
    .global _start_pvh
_start_pvh:
    # PVH leaves the start_info pointer in EBX and no magic in EAX: supply
    # the PVH magic so kmain can tell the protocols apart.
    movl $0x336ec578, %eax
    jmp _start32

    .global _start32
_start32:
    cli
    cld
    # .data survives the .bss clear below.
    movl %eax, boot_magic
    movl %ebx, boot_info

    # When the kernel got control (kmain prints the boot phases from it).
    rdtsc
    movl %eax, boot_entry_tsc
    movl %edx, boot_entry_tsc + 4

    # Clear .bss but not the boot stack at its end (linker.ld): nothing
    # reads the stack before writing it, and under emulation every byte
    # cleared costs. Both bounds are 4 KiB aligned: clear by dwords.
    movl $__bss_start, %edi
    movl $__bss_clear_end, %ecx
    subl %edi, %ecx
    shrl $2, %ecx
    xorl %eax, %eax
    rep stosl

    movl $boot_stack_top, %esp

    # Long mode is required; NX is used when present.
    movl $0x80000000, %eax
    cpuid
    cmpl $0x80000001, %eax
    jb no_long_mode
    movl $0x80000001, %eax
    cpuid
    testl $0x20000000, %edx
    jz no_long_mode
    movl %edx, %esi

    # PML4[0] -> PDPT; PDPT[0..3] -> four page directories; 2048 x 2 MiB
    # pages identity-map 0..4 GiB. 3..4 GiB (LAPIC, I/O APIC, PCI holes) is
    # mapped uncached (PCD).
    movl $boot_pdpt, %eax
    orl $3, %eax
    movl %eax, boot_pml4
    movl $boot_pd, %eax
    orl $3, %eax
    movl $boot_pdpt, %edi
    movl $4, %ecx
1:  movl %eax, (%edi)
    addl $0x1000, %eax
    addl $8, %edi
    decl %ecx
    jnz 1b

    movl $boot_pd, %edi
    xorl %ecx, %ecx
2:  movl %ecx, %eax
    shll $21, %eax
    orl $0x83, %eax                                # present, writable, 2 MiB page
    cmpl $1536, %ecx
    jb 3f
    orl $0x10, %eax                                # cache disable
3:  movl %eax, (%edi,%ecx,8)
    incl %ecx
    cmpl $2048, %ecx
    jb 2b

    movl $boot_pml4, %eax
    movl %eax, %cr3
    movl %cr4, %eax
    orl $0xA0, %eax                                # PAE | PGE
    movl %eax, %cr4
    movl $0xC0000080, %ecx                         # IA32_EFER
    rdmsr
    orl $0x100, %eax                               # LME
    testl $0x100000, %esi
    jz 4f
    orl $0x800, %eax                               # NXE
4:  wrmsr
    movl %cr0, %eax
    orl $0x80010001, %eax                          # PG | WP | PE
    movl %eax, %cr0

    lgdt boot_gdt_ptr
    ljmpl $0x08, $start64

no_long_mode:
    movl $no_long_mode_msg, %esi
5:  movb (%esi), %al
    testb %al, %al
    jz 7f
    movw $0x3fd, %dx                               # wait for THR empty
6:  inb %dx, %al
    testb $0x20, %al
    jz 6b
    movb (%esi), %al
    movw $0x3f8, %dx
    outb %al, %dx
    incl %esi
    jmp 5b
7:  hlt
    jmp 7b

    .code64
start64:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    xorw %ax, %ax
    movw %ax, %fs
    movw %ax, %gs
    movq $boot_stack_top, %rsp
    movl boot_magic(%rip), %edi
    movl boot_info(%rip), %esi
    call kmain
8:  cli
    hlt
    jmp 8b

# ---------------------------------------------------------------------------
    .section .rodata.boot, "a"
no_long_mode_msg:
    .asciz "baremq: FATAL: this CPU has no 64-bit long mode\r\n"

    .section .data.boot, "aw"
    .p2align 3
    # null, 64-bit code (0x08), data (0x10); accessed bits preset so the
    # CPU never writes to this table.
boot_gdt:
    .quad 0
    .quad 0x00AF9B000000FFFF
    .quad 0x00CF93000000FFFF
boot_gdt_end:
    .global boot_gdt_ptr
boot_gdt_ptr:
    .short boot_gdt_end - boot_gdt - 1
    .quad boot_gdt
    .global boot_magic
boot_magic:
    .long 0
    .global boot_info
boot_info:
    .long 0
    .p2align 3
    .global boot_entry_tsc
boot_entry_tsc:
    .quad 0

    .section .bss.boot, "aw", @nobits
    .p2align 12
    .global boot_pml4
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
    .global boot_pd
boot_pd:
    .skip 4096 * 4

    # Not cleared at entry: linker.ld puts .boot_stack after __bss_clear_end.
    .section .boot_stack, "aw", @nobits
    .p2align 12
boot_stack:
    .skip 512 * 1024                               # debug builds are stack-hungry
    .global boot_stack_top
boot_stack_top:
