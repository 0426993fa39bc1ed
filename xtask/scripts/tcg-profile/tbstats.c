/* A TCG plugin for QEMU 7.2 (plugin API version 1) that counts, per translated block of guest
 * code, how often it ran, its instructions and its memory accesses, (with exits=on) how the
 * block ends and how often the next block lies on another guest page, and (with mmio=on) its
 * reads and writes of device memory (MMIO), written to OUT.mmio. Under TCG those are the
 * costs: every memory access goes through a software TLB check, and a return, an indirect
 * call or jump, or a jump to another page cannot be chained and needs a code lookup.
 *
 * Built and used by profile.sh beside it. Only the few API entry points used are declared here. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t plugin_id;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_info_t;
enum inline_op { INLINE_ADD_U64 = 0 };
enum mem_access { MEM_READ_OR_WRITE = 3 };
enum cb_flags { CB_NO_REGS = 0 };
enum mem_rw { MEM_RW = 3 };
struct qemu_plugin_hwaddr;

void qemu_plugin_register_vcpu_tb_trans_cb(plugin_id, void (*)(plugin_id, struct qemu_plugin_tb *));
void qemu_plugin_register_atexit_cb(plugin_id, void (*)(plugin_id, void *), void *);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *, size_t);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *);
char *qemu_plugin_insn_disas(const struct qemu_plugin_insn *);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *, enum inline_op, void *, uint64_t);
void qemu_plugin_register_vcpu_mem_inline(struct qemu_plugin_insn *, enum mem_access, enum inline_op, void *, uint64_t);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *, void (*)(unsigned int, void *), enum cb_flags, void *);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *, void (*)(unsigned int, uint32_t, uint64_t, void *),
                                      enum cb_flags, enum mem_rw, void *);
struct qemu_plugin_hwaddr *qemu_plugin_get_hwaddr(uint32_t, uint64_t);
_Bool qemu_plugin_hwaddr_is_io(const struct qemu_plugin_hwaddr *);
_Bool qemu_plugin_mem_is_store(uint32_t);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* One entry per distinct block (start address and length); a block retranslated later finds
 * its entry again, so its counts add up. Open addressing, never resized. */
#define TABLE_SIZE (1u << 20)
struct block {
    uint64_t start, insns, last_insn, runs, mem_accesses, next_on_other_page, mmio_reads, mmio_writes;
    char last_disas[64];
};
static struct block *table;
static struct block *previous;
static const char *out_path = "tbstats.txt";
static int track_exits;
static int track_mmio;

static struct block *lookup(uint64_t start, uint64_t insns)
{
    uint64_t h = (start * 0x9E3779B97F4A7C15ull ^ insns) & (TABLE_SIZE - 1);
    for (;;) {
        struct block *b = &table[h];
        if (b->insns == 0) {
            b->start = start;
            b->insns = insns;
            return b;
        }
        if (b->start == start && b->insns == insns)
            return b;
        h = (h + 1) & (TABLE_SIZE - 1);
    }
}

/* Only one vCPU is profiled (smp 1), so `previous` needs no lock. */
static void on_block_run(unsigned int vcpu, void *data)
{
    struct block *b = data;
    (void)vcpu;
    if (previous && (previous->last_insn >> 12) != (b->start >> 12))
        previous->next_on_other_page++;
    previous = b;
}

/* One call per memory access (mmio=on only: it is slow): device memory is told from RAM by the
 * softmmu's view of the address. */
static void on_mem(unsigned int vcpu, uint32_t info, uint64_t vaddr, void *data)
{
    struct block *b = data;
    struct qemu_plugin_hwaddr *hw = qemu_plugin_get_hwaddr(info, vaddr);
    (void)vcpu;
    if (hw && qemu_plugin_hwaddr_is_io(hw)) {
        if (qemu_plugin_mem_is_store(info))
            b->mmio_writes++;
        else
            b->mmio_reads++;
    }
}

static void on_translate(plugin_id id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    struct block *b = lookup(qemu_plugin_tb_vaddr(tb), n);
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, &b->runs, 1);
    for (size_t i = 0; i < n; i++) {
        qemu_plugin_register_vcpu_mem_inline(qemu_plugin_tb_get_insn(tb, i), MEM_READ_OR_WRITE, INLINE_ADD_U64,
                                             &b->mem_accesses, 1);
        if (track_mmio)
            qemu_plugin_register_vcpu_mem_cb(qemu_plugin_tb_get_insn(tb, i), on_mem, CB_NO_REGS, MEM_RW, b);
    }
    if (track_exits) {
        struct qemu_plugin_insn *last = qemu_plugin_tb_get_insn(tb, n - 1);
        char *text = qemu_plugin_insn_disas(last);
        b->last_insn = qemu_plugin_insn_vaddr(last);
        snprintf(b->last_disas, sizeof b->last_disas, "%s", text);
        free(text);
        for (char *p = b->last_disas; *p; p++)
            if (*p == ' ' || *p == '\t')
                *p = '_';
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block_run, CB_NO_REGS, b);
    }
}

static void write_results(plugin_id id, void *data)
{
    FILE *f = fopen(out_path, "w");
    (void)id;
    (void)data;
    if (!f)
        return;
    for (size_t i = 0; i < TABLE_SIZE; i++) {
        struct block *b = &table[i];
        if (b->runs)
            fprintf(f, "%llx %llu %llu %llu %llu %s\n", (unsigned long long)b->start, (unsigned long long)b->insns,
                    (unsigned long long)b->runs, (unsigned long long)b->mem_accesses,
                    (unsigned long long)b->next_on_other_page, b->last_disas[0] ? b->last_disas : "-");
    }
    fclose(f);
    if (!track_mmio)
        return;
    char mmio_path[4096];
    snprintf(mmio_path, sizeof mmio_path, "%s.mmio", out_path);
    f = fopen(mmio_path, "w");
    if (!f)
        return;
    for (size_t i = 0; i < TABLE_SIZE; i++) {
        struct block *b = &table[i];
        if (b->mmio_reads || b->mmio_writes)
            fprintf(f, "%llx %llu %llu\n", (unsigned long long)b->start, (unsigned long long)b->mmio_reads,
                    (unsigned long long)b->mmio_writes);
    }
    fclose(f);
}

__attribute__((visibility("default"))) int qemu_plugin_install(plugin_id id, const struct qemu_info_t *info, int argc,
                                                               char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "out=", 4))
            out_path = strdup(argv[i] + 4);
        else if (!strcmp(argv[i], "exits=on"))
            track_exits = 1;
        else if (!strcmp(argv[i], "mmio=on"))
            track_mmio = 1;
    }
    table = calloc(TABLE_SIZE, sizeof *table);
    if (!table)
        return -1;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, write_results, NULL);
    return 0;
}
