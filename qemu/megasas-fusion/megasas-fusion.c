/*
 * MegaRAID "Fusion" (MPT-based MegaRAID) controller model for QEMU 7.2:
 * Invader (SAS3108), Ventura (SAS35xx) and Aero (SAS39xx).
 *
 * Written for the baremq project from what Linux's megaraid_sas and
 * FreeBSD's mrsas drivers expect of the firmware, and judged against
 * Linux's driver. Logical drives and JBOD disks are scsi-hd devices on
 * the controller's SCSI bus: channel 0 holds the logical drives (target id =
 * scsi-id), channel 1 the system PDs (device id = scsi-id).
 *
 * Copyright (c) 2026 the baremq authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 *
 * This program is free software; you can redistribute it and/or modify it
 * under the terms of the GNU General Public License as published by the Free
 * Software Foundation; either version 2 of the License, or (at your option)
 * any later version.
 */

#include "qemu/osdep.h"
#include "qemu/log.h"
#include "qemu/module.h"
#include "qemu/cutils.h"
#include "sysemu/block-backend.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "hw/pci/pci.h"
#include "hw/pci/msix.h"
#include "hw/pci/pcie.h"
#include "hw/qdev-properties.h"
#include "migration/vmstate.h"
#include "sysemu/dma.h"
#include "hw/scsi/scsi.h"
#include "scsi/constants.h"
#include "qom/object.h"
#include "sysemu/sysemu.h"

#define TYPE_MEGASAS_FUSION "megasas-fusion"
OBJECT_DECLARE_SIMPLE_TYPE(FusionState, MEGASAS_FUSION)

/* ---- register offsets (memory BAR; the I/O BAR mirrors the first 256 bytes) */
enum {
    REG_DOORBELL = 0x00,
    REG_DIAG_SEQUENCE = 0x04,
    REG_HOST_DIAG = 0x08,
    REG_OUTBOUND_STATUS = 0x30,
    REG_OUTBOUND_MASK = 0x34,
    REG_REPLY_HOST_INDEX = 0x6C,
    REG_SCRATCH0 = 0xB0,
    REG_SCRATCH1 = 0xB4,
    REG_SCRATCH2 = 0xB8,
    REG_SCRATCH3 = 0xBC,
    REG_REQUEST_LOW = 0xC0,
    REG_REQUEST_HIGH = 0xC4,
    REG_REQUEST_ATOMIC = 0xC8,
    REG_COMBINED_HOST_INDEX = 0x30C, /* + 0x10 per group of 8 queues */
    REG_WINDOW = 0x4000,
};

/* ---- firmware states (SP0 bits 31:28) and SP0 flag bits */
enum {
    STATE_READY = 0xB,
    STATE_OPERATIONAL = 0xC,
    STATE_FAULT = 0xF,
};
#define SP0_MSIX_CAPABLE (1u << 26)
#define SP0_FAULT_RESET_ADAPTER (1u << 1)
#define INJECTED_FAULT_CODE 0x0BA

/* SP1 fields */
#define SP1_QUEUES_SHIFT 14
#define SP1_CHAIN_UNITS_SHIFT 5 /* units of 128 bytes (bit 22 clear) */
#define SP1_RDPQ (1u << 23)
#define SP1_SYNC_CACHE_AND_ATOMIC (1u << 24)
#define SP1_64BIT_DMA (1u << 25)

/* doorbell values */
#define DOORBELL_RESET_FLAGS 0x07
#define DOORBELL_STOP_ADAPTER 0x20

/* host diag register */
#define DIAG_WRITE_ENABLE (1u << 7)
#define DIAG_RESET_ADAPTER (1u << 2)

/* outbound interrupt bits */
#define INTR_REPLY (1u << 3)

/* request descriptor types (RequestFlags bits 3:1) */
enum {
    DESC_SCSI_IO = 0,
    DESC_MFA = 1,
    DESC_NO_LOCK = 2,
    DESC_HIGH_PRIORITY = 3,
    DESC_FP_IO = 6,
    DESC_LD_IO = 7,
};

/* MPI functions */
enum {
    FUNC_SCSI_IO = 0x00,
    FUNC_TASK_MGMT = 0x01,
    FUNC_IOC_INIT = 0x02,
    FUNC_MFI_PASSTHRU = 0xF0,
    FUNC_LD_IO = 0xF1,
};

/* request frame layout (256-byte slots) */
enum {
    FRAME_SIZE = 256,
    FR_DEV_HANDLE = 0x00,
    FR_FUNCTION = 0x03,
    FR_SENSE_LOW = 0x0C,
    FR_SENSE_LEN = 0x12,
    FR_SGL_OFFSET0 = 0x14,
    FR_DATA_LENGTH = 0x1C,
    FR_IO_FLAGS = 0x24,
    FR_LUN = 0x34,
    FR_CONTROL = 0x3C,
    FR_CDB = 0x40,
    FR_RAID_TARGET = 0x66,
    FR_RAID_EX_STATUS = 0x76,
    FR_RAID_STATUS = 0x77,
    FR_RAID_FLAGS = 0x78,
    FR_SGL = 0x80,
    /* task management */
    FR_TM_TASK_TYPE = 0x05,
    FR_TM_TASK_MID = 0x30,
    FR_TM_REPLY = 0x80,
};
#define CONTROL_WRITE (1u << 24)
#define CONTROL_READ (1u << 25)
#define RAID_FLAGS_SUBTYPE_SYSTEM_PD 0x10
#define SGE_SIZE 16
#define SGE_CHAIN 0x80
#define SGE_END_OF_LIST 0x40
#define CHAIN_FRAME_BYTES 1024

/* MFI frame header */
enum {
    MFI_CMD = 0x00,
    MFI_STATUS = 0x02,
    MFI_FLAGS = 0x10,
    MFI_SGE_COUNT = 0x07,
    MFI_DCMD_OPCODE = 0x18,
    MFI_DCMD_MBOX = 0x1C,
    MFI_DCMD_SGL = 0x28,
    MFI_ABORT_FRAME_ADDR = 0x20,
    MFI_FRAME_BYTES = 64,
};
enum {
    MFI_CMD_INIT = 0x00,
    MFI_CMD_DCMD = 0x05,
    MFI_CMD_ABORT = 0x06,
};
#define MFI_FLAG_SGL64 0x0002
#define MFI_FLAG_IEEE 0x0020

/* MFI and RAID-context status codes */
enum {
    MFI_STAT_OK = 0x00,
    MFI_STAT_INVALID_CMD = 0x01,
    MFI_STAT_INVALID_DCMD = 0x02,
    MFI_STAT_INVALID_PARAMETER = 0x03,
    MFI_STAT_DEVICE_NOT_FOUND = 0x0C,
    MFI_STAT_NOT_FOUND = 0x23,
    MFI_STAT_SCSI_DONE_WITH_ERROR = 0x2D,
    MFI_STAT_SCSI_IO_FAILED = 0x2E,
    MFI_STAT_CONFIG_SEQ_MISMATCH = 0x67,
};

/* DCMD opcodes */
#define DCMD_CTRL_GET_INFO 0x01010000
#define DCMD_CTRL_EVENT_GET_INFO 0x01040100
#define DCMD_CTRL_EVENT_WAIT 0x01040500
#define DCMD_CTRL_SHUTDOWN 0x01050000
#define DCMD_HIBERNATE_SHUTDOWN 0x01060000
#define DCMD_CTRL_CACHE_FLUSH 0x01101000
#define DCMD_PD_LIST_QUERY 0x02010100
#define DCMD_PD_GET_INFO 0x02020000
#define DCMD_LD_GET_LIST 0x03010000
#define DCMD_LD_LIST_QUERY 0x03010100
#define DCMD_LD_MAP_GET_INFO 0x0300E101

/* sizes of the replies we build */
#define CTRL_INFO_BYTES 0x950
#define LEGACY_MAP_HEADER_BYTES 0x28A8
#define LEGACY_MAP_BYTES 0x2A0A8
#define MAP_TARGET_TO_LD 0x20
#define MAP_DEV_HANDLES 0x20A8
#define MAX_LDS 64
#define MAX_SYSTEM_PDS 256

/*
 * The RAID logical drive (property raid=raid0|raid1): target 0, striped or
 * mirrored over the scsi-hd disks on channel 2 (PD id = scsi-id). Described
 * to the driver by a dynamic RAID map (Ventura/Aero: SP2 bits 24:16 give its
 * size in 64 KiB units), the format Linux expects once SP2 announces it.
 */
#define RAID_CHANNEL 2
#define RAID_LD_TARGET 0
#define RAID_MAX_ARMS 32
#define RAID_LD_SEQ 0x0101         /* the LD's first configuration sequence number */
#define PD_HANDLE_BASE 0x0100      /* a PD's device handle: 0x100 + PD id */
#define PD_INTERFACE_SAS 2
#define LD_STATE_OPTIMAL 3
#define SP2_MAP_UNITS_SHIFT 16
#define DYN_MAP_UNITS 1            /* 64 KiB */
#define DYN_DESC_TABLE 0x58
#define DYN_DESC_COUNT 4
#define DYN_DATA (DYN_DESC_TABLE + DYN_DESC_COUNT * 16)
#define DYN_DEV_HANDLES 0          /* offsets inside the data area */
#define DYN_TGT_TO_LD (DYN_DEV_HANDLES + MAX_SYSTEM_PDS * 8)
#define DYN_ARRAYS (DYN_TGT_TO_LD + MAX_SYSTEM_PDS * 2)
#define DYN_SPANS (DYN_ARRAYS + 64)
#define LD_SPAN_MAP_BYTES 0x9E0
#define DYN_MAP_BYTES (DYN_DATA + DYN_SPANS + LD_SPAN_MAP_BYTES)
/* MR_LD_RAID capability bits */
#define CAP_FP_CAPABLE (1u << 0)
#define CAP_FP_WRITE (1u << 20)
#define CAP_FP_READ (1u << 21)
/* RAID context (frame + 0x60) fields checked on FastPath */
#define FR_RAID_SPAN_ARM 0x79
#define FR_RAID_SEQ_NUM 0x7A
#define IO_FLAGS_FAST_PATH 0x4000

#define MAX_QUEUES 128
#define DEFAULT_FW_CMDS 256
/* what a SAS39xx (Aero) reports in SP0[15:0] */
#define MAX_FW_CMDS 5101
#define MAX_SMID (2 * MAX_FW_CMDS + 2)

/* IOC INIT MsgFlags bit 0: ReplyDescriptorPostQueueAddress is an RDPQ array */
#define IOC_INIT_FLAG_RDPQ 0x01
/* an RDPQ array entry: u64 ring base, two reserved dwords */
#define RDPQ_ENTRY_BYTES 16
#define FOUR_GIB (1ULL << 32)

typedef enum FusionGeneration {
    GEN_INVADER,
    GEN_VENTURA,
    GEN_AERO,
} FusionGeneration;

typedef struct GenerationInfo {
    const char *name;
    uint16_t device_id;
    uint16_t subsystem_id;
    uint8_t register_bar;
    uint8_t io_bar;
    const char *product;
    /* more than this many firmware queues selects combined reply mode */
    unsigned combined_above;
    /*
     * RDPQ: each group of this many reply queues (0..n-1, n..2n-1, ...) must
     * lie in one 4 GiB window (the same upper 32 address bits).
     */
    unsigned rdpq_window_group;
} GenerationInfo;

static const GenerationInfo generations[] = {
    [GEN_INVADER] = { "invader", 0x005D, 0x9361, 1, 0,
                      "baremq Fusion Invader (SAS3108)", 8, 8 },
    [GEN_VENTURA] = { "ventura", 0x0016, 0x9460, 0, 2,
                      "baremq Fusion Ventura (SAS3516)", 16, 16 },
    [GEN_AERO] = { "aero", 0x10E2, 0x9560, 0, 2,
                   "baremq Fusion Aero (SAS3916)", 16, 16 },
};

typedef enum CmdKind {
    CMD_FREE,
    CMD_SCSI,     /* a SCSI request in flight on the bus */
    CMD_HELD,     /* an I/O held on purpose (fault injection) */
    CMD_PENDED,   /* a DCMD the firmware keeps until an event or abort */
} CmdKind;

/* what a SCSIRequest's hba_private points to: a command or a part of one */
enum { OWNER_CMD = 0, OWNER_PART = 1 };

/* One physical-disk request of a RAID LD command (a strip run or a mirror arm). */
typedef struct FusionPart {
    uint8_t owner;                 /* OWNER_PART */
    struct FusionCmd *cmd;
    SCSIRequest *req;
    QEMUSGList qsg;
} FusionPart;

typedef struct FusionCmd {
    uint8_t owner;                 /* OWNER_CMD */
    struct FusionState *s;
    uint16_t smid;
    uint8_t queue;
    CmdKind kind;
    bool is_mfi;
    uint32_t opcode;
    hwaddr frame_pa;
    hwaddr mfi_pa;
    hwaddr sense_pa;
    uint32_t sense_len;
    uint32_t data_length;
    uint16_t target;
    SCSIRequest *req;
    QEMUSGList qsg;
    /* a RAID LD command: its disk requests, how many are still out */
    FusionPart **parts;
    unsigned nparts;
    unsigned parts_pending;
    bool part_failed;
    uint8_t part_status;
    uint8_t part_sense[SCSI_SENSE_BUF_SIZE];
    int part_sense_len;
} FusionCmd;

typedef enum RaidLevel {
    RAID_NONE,
    RAID_0,
    RAID_1,
} RaidLevel;

/* The RAID LD as the disks on channel 2 make it. */
typedef struct RaidLayout {
    unsigned arms;
    int pd[RAID_MAX_ARMS];
    SCSIDevice *dev[RAID_MAX_ARMS];
    uint32_t strip_blocks;
    uint8_t strip_shift;
    uint64_t rows;            /* strips per arm */
    uint64_t ld_blocks;
} RaidLayout;

struct FusionState {
    PCIDevice parent_obj;

    MemoryRegion bar;
    MemoryRegion regs;
    MemoryRegion io;
    SCSIBus bus;

    /* properties */
    char *generation_name;
    uint32_t fw_cmds;
    uint32_t msix_vectors;
    bool msix;
    uint32_t fault_after;
    uint32_t hold_after;
    bool rdpq;
    bool debug;
    char *raid_name;
    uint32_t strip_kib;
    RaidLevel raid;
    bool raid_reported;
    uint64_t fastpath_ios;
    uint64_t ld_path_ios;
    uint64_t stale_seq_refused;
    uint16_t raid_seq;        /* the LD's sequence number in the map */
    uint32_t config_changes;  /* change-config events so far */
    Notifier exit_notifier;

    const GenerationInfo *gen;
    FusionGeneration gen_id;

    /* firmware */
    uint32_t state;
    uint32_t fault_word;
    bool stopped;
    uint32_t intr_mask;
    uint32_t diag_seq_pos;
    bool diag_write_enable;
    uint32_t request_low;
    uint32_t io_count;
    bool fault_done;
    bool hold_done;

    /* from IOC INIT */
    hwaddr frame_base;
    bool rdpq_mode;
    hwaddr ring[MAX_QUEUES]; /* each reply queue's ring base */
    uint32_t sense_high;
    uint32_t reply_depth;
    uint32_t queues;
    uint32_t max_smid;
    bool combined;

    uint32_t producer[MAX_QUEUES];
    uint32_t host_index[MAX_QUEUES];

    uint32_t event_seq;
    FusionCmd cmds[MAX_SMID + 1];
};

#define FDBG(s, fmt, ...)                                                    \
    do {                                                                     \
        if ((s)->debug) {                                                    \
            fprintf(stderr, "megasas-fusion: " fmt "\n", ##__VA_ARGS__);     \
        }                                                                    \
    } while (0)

/*
 * A driver doing what neither Linux's nor FreeBSD's driver does is told on
 * stderr (the first 32 times per QEMU run), so a test harness can require
 * that none happened.
 */
static unsigned fusion_violations;
#define GUEST_ERROR(fmt, ...)                                                \
    do {                                                                     \
        if (fusion_violations++ < 32) {                                      \
            fprintf(stderr, "megasas-fusion: protocol violation: " fmt "\n", \
                    ##__VA_ARGS__);                                          \
        }                                                                    \
    } while (0)

/* ------------------------------------------------------------------ helpers */

static uint32_t fusion_sp0(FusionState *s)
{
    if (s->state == STATE_FAULT) {
        return s->fault_word;
    }
    uint32_t v = (s->state << 28) | (s->fw_cmds & 0xFFFF);
    if (s->msix) {
        v |= SP0_MSIX_CAPABLE;
    }
    return v;
}

static uint32_t fusion_sp1(FusionState *s)
{
    uint32_t queues = s->msix ? s->msix_vectors : 1;
    return ((queues - 1) << SP1_QUEUES_SHIFT) |
           ((CHAIN_FRAME_BYTES / 128) << SP1_CHAIN_UNITS_SHIFT) |
           (s->rdpq ? SP1_RDPQ : 0) | SP1_SYNC_CACHE_AND_ATOMIC |
           SP1_64BIT_DMA;
}

static bool fusion_intr_enabled(FusionState *s)
{
    return !(s->intr_mask & INTR_REPLY);
}

static bool fusion_queue_pending(FusionState *s, unsigned q)
{
    return s->producer[q] != s->host_index[q];
}

static bool fusion_any_pending(FusionState *s)
{
    for (unsigned q = 0; q < s->queues; q++) {
        if (fusion_queue_pending(s, q)) {
            return true;
        }
    }
    return false;
}

static void fusion_update_intx(FusionState *s)
{
    PCIDevice *pci = PCI_DEVICE(s);
    bool level = !msix_enabled(pci) && fusion_intr_enabled(s) &&
                 s->state == STATE_OPERATIONAL && fusion_any_pending(s);
    pci_set_irq(pci, level);
}

static void fusion_notify(FusionState *s, unsigned q)
{
    PCIDevice *pci = PCI_DEVICE(s);
    if (!fusion_intr_enabled(s)) {
        return;
    }
    if (msix_enabled(pci)) {
        msix_notify(pci, q);
    } else {
        fusion_update_intx(s);
    }
}

/* Writes the reply descriptor {type 0, queue, SMID, 0} as one 8-byte store. */
static void fusion_post_reply(FusionState *s, FusionCmd *cmd)
{
    unsigned q = cmd->queue;
    uint64_t desc = ((uint64_t)cmd->smid << 16) | ((uint64_t)q << 8);
    hwaddr slot = s->ring[q] + (hwaddr)s->producer[q] * 8;

    FDBG(s, "reply smid %u queue %u slot %u", cmd->smid, q, s->producer[q]);
    stq_le_pci_dma(PCI_DEVICE(s), slot, desc, MEMTXATTRS_UNSPECIFIED);
    s->producer[q] = (s->producer[q] + 1) % s->reply_depth;
    if (s->producer[q] == s->host_index[q]) {
        GUEST_ERROR("reply queue %u overflowed (host index %u)", q,
                    s->host_index[q]);
    }
    fusion_notify(s, q);
}

static void fusion_free_parts(FusionCmd *cmd)
{
    for (unsigned i = 0; i < cmd->nparts; i++) {
        FusionPart *part = cmd->parts[i];
        if (part->req) {
            scsi_req_unref(part->req);
        }
        if (part->qsg.sg) {
            qemu_sglist_destroy(&part->qsg);
        }
        g_free(part);
    }
    g_free(cmd->parts);
    cmd->parts = NULL;
    cmd->nparts = 0;
    cmd->parts_pending = 0;
}

/* Cancels the command's requests on the bus (their cancel callbacks run now). */
static void fusion_cancel_requests(FusionCmd *cmd)
{
    if (cmd->req) {
        SCSIRequest *req = cmd->req;
        scsi_req_ref(req);
        scsi_req_cancel(req);
        scsi_req_unref(req);
    }
    for (unsigned i = 0; i < cmd->nparts; i++) {
        SCSIRequest *req = cmd->parts[i]->req;
        if (req) {
            scsi_req_ref(req);
            scsi_req_cancel(req);
            scsi_req_unref(req);
        }
    }
}

static void fusion_free_cmd(FusionCmd *cmd)
{
    fusion_free_parts(cmd);
    if (cmd->req) {
        scsi_req_unref(cmd->req);
        cmd->req = NULL;
    }
    if (cmd->qsg.sg) {
        qemu_sglist_destroy(&cmd->qsg);
    }
    cmd->kind = CMD_FREE;
}

static void fusion_finish(FusionState *s, FusionCmd *cmd)
{
    fusion_free_cmd(cmd);
    if (s->state == STATE_OPERATIONAL) {
        fusion_post_reply(s, cmd);
    }
}

/* Completes an LD / PD request with a RAID-context status. */
static void fusion_finish_io(FusionState *s, FusionCmd *cmd, uint8_t status,
                             uint8_t ex_status)
{
    PCIDevice *pci = PCI_DEVICE(s);
    uint8_t st[2] = { ex_status, status };

    pci_dma_write(pci, cmd->frame_pa + FR_RAID_EX_STATUS, st, 2);
    fusion_finish(s, cmd);
}

/* Drops every command without a reply: what a firmware reset does. */
static void fusion_drop_all(FusionState *s)
{
    for (unsigned i = 1; i <= MAX_SMID; i++) {
        FusionCmd *cmd = &s->cmds[i];
        if (cmd->kind == CMD_SCSI) {
            fusion_cancel_requests(cmd);
        }
        if (cmd->kind != CMD_FREE) {
            fusion_free_cmd(cmd);
        }
    }
}

static void fusion_to_ready(FusionState *s)
{
    fusion_drop_all(s);
    s->state = STATE_READY;
    s->queues = 0;
    s->rdpq_mode = false;
    memset(s->ring, 0, sizeof(s->ring));
    s->frame_base = 0;
    memset(s->producer, 0, sizeof(s->producer));
    memset(s->host_index, 0, sizeof(s->host_index));
    s->request_low = 0;
    fusion_update_intx(s);
}

static void fusion_enter_fault(FusionState *s, const char *why)
{
    FDBG(s, "FAULT: %s", why);
    fprintf(stderr, "megasas-fusion: firmware FAULT injected (%s)\n", why);
    s->state = STATE_FAULT;
    s->fault_word = (STATE_FAULT << 28) | (INJECTED_FAULT_CODE << 16) |
                    SP0_FAULT_RESET_ADAPTER;
    fusion_update_intx(s);
}

/* ------------------------------------------------------------------ IOC INIT */

/*
 * Reads the RDPQ array into ring[]: one 16-byte entry per reply queue. Each
 * ring of `depth` descriptors must start at a non-zero 16-byte-aligned
 * address, leave the reserved dwords zero, stay inside one 4 GiB window,
 * overlap no other ring, and share that window with the rest of its group
 * (the constraint Linux allocates its rings for). A bad entry fails IOC INIT.
 */
static bool fusion_read_rdpq(FusionState *s, hwaddr array, uint32_t queues,
                             uint32_t depth, hwaddr *ring)
{
    PCIDevice *pci = PCI_DEVICE(s);
    uint64_t ring_bytes = (uint64_t)depth * 8;
    unsigned group = s->gen->rdpq_window_group;

    for (uint32_t q = 0; q < queues; q++) {
        uint8_t entry[RDPQ_ENTRY_BYTES];
        pci_dma_read(pci, array + (hwaddr)q * RDPQ_ENTRY_BYTES, entry,
                     sizeof(entry));
        hwaddr base = ldq_le_p(entry);
        if (!base || (base & 15)) {
            GUEST_ERROR("IOC INIT: RDPQ entry %u base 0x%" HWADDR_PRIx
                        " is zero or not 16-byte aligned", q, base);
            return false;
        }
        if (ldl_le_p(entry + 8) || ldl_le_p(entry + 12)) {
            GUEST_ERROR("IOC INIT: RDPQ entry %u reserved dwords not zero", q);
            return false;
        }
        if (base / FOUR_GIB != (base + ring_bytes - 1) / FOUR_GIB) {
            GUEST_ERROR("IOC INIT: RDPQ ring %u at 0x%" HWADDR_PRIx
                        " (%u entries) crosses a 4 GiB boundary", q, base,
                        depth);
            return false;
        }
        uint32_t first = q - q % group;
        if (q != first && base / FOUR_GIB != ring[first] / FOUR_GIB) {
            GUEST_ERROR("IOC INIT: RDPQ ring %u at 0x%" HWADDR_PRIx
                        " is outside the 4 GiB window of ring %u (0x%"
                        HWADDR_PRIx "); each group of %u must share one",
                        q, base, first, ring[first], group);
            return false;
        }
        for (uint32_t p = 0; p < q; p++) {
            if (base < ring[p] + ring_bytes && ring[p] < base + ring_bytes) {
                GUEST_ERROR("IOC INIT: RDPQ rings %u and %u overlap", p, q);
                return false;
            }
        }
        ring[q] = base;
    }
    return true;
}

static void fusion_ioc_init(FusionState *s, hwaddr init_frame)
{
    PCIDevice *pci = PCI_DEVICE(s);
    uint8_t mfi[MFI_FRAME_BYTES];
    uint8_t ioc[72];
    uint8_t status = MFI_STAT_INVALID_PARAMETER;

    pci_dma_read(pci, init_frame, mfi, sizeof(mfi));
    if (mfi[MFI_CMD] != MFI_CMD_INIT) {
        GUEST_ERROR("MFA descriptor frame is MFI command 0x%x, not INIT",
                    mfi[MFI_CMD]);
        status = MFI_STAT_INVALID_CMD;
        goto out;
    }
    if (s->state != STATE_READY) {
        GUEST_ERROR("IOC INIT in firmware state 0x%x", s->state);
        goto out;
    }
    hwaddr req_pa = ldq_le_p(mfi + 0x18);
    pci_dma_read(pci, req_pa, ioc, sizeof(ioc));
    uint8_t function = ioc[0x03];
    uint8_t who = ioc[0x00];
    uint16_t frame_dwords = lduw_le_p(ioc + 0x1A);
    uint16_t depth = lduw_le_p(ioc + 0x1C);
    uint8_t vectors = ioc[0x17];
    uint8_t msg_flags = ioc[0x07];
    hwaddr frames = ldq_le_p(ioc + 0x28);
    hwaddr replies = ldq_le_p(ioc + 0x30);
    uint32_t queues = vectors ? vectors : 1;
    uint32_t fw_queues = s->msix ? s->msix_vectors : 1;

    if (function != FUNC_IOC_INIT || who != 0x04) {
        GUEST_ERROR("IOC INIT: function 0x%x whoinit 0x%x", function, who);
        goto out;
    }
    if (frame_dwords != FRAME_SIZE / 4) {
        GUEST_ERROR("IOC INIT: request frame size %u dwords", frame_dwords);
        goto out;
    }
    if ((msg_flags & IOC_INIT_FLAG_RDPQ) && !s->rdpq) {
        GUEST_ERROR("IOC INIT: RDPQ requested but not advertised");
        goto out;
    }
    if (depth == 0 || depth % 16 || depth < s->fw_cmds) {
        GUEST_ERROR("IOC INIT: reply depth %u (firmware commands %u)", depth,
                    s->fw_cmds);
        goto out;
    }
    if (queues > fw_queues || queues > MAX_QUEUES) {
        GUEST_ERROR("IOC INIT: %u reply queues, firmware offers %u", queues,
                    fw_queues);
        goto out;
    }
    if (!frames || !replies || (frames & 15) || (replies & 15)) {
        GUEST_ERROR("IOC INIT: frame base 0x%" HWADDR_PRIx
                    " reply base 0x%" HWADDR_PRIx, frames, replies);
        goto out;
    }
    hwaddr ring[MAX_QUEUES];
    bool rdpq_mode = msg_flags & IOC_INIT_FLAG_RDPQ;
    if (rdpq_mode) {
        if (!fusion_read_rdpq(s, replies, queues, depth, ring)) {
            goto out;
        }
    } else {
        for (uint32_t q = 0; q < queues; q++) {
            ring[q] = replies + (hwaddr)q * depth * 8;
        }
    }
    s->frame_base = frames;
    s->rdpq_mode = rdpq_mode;
    memset(s->ring, 0, sizeof(s->ring));
    memcpy(s->ring, ring, queues * sizeof(ring[0]));
    s->reply_depth = depth;
    s->queues = queues;
    s->sense_high = ldl_le_p(ioc + 0x20);
    s->max_smid = MIN(2 * s->fw_cmds + 2, MAX_SMID);
    s->combined = s->msix && s->msix_vectors > s->gen->combined_above;
    memset(s->producer, 0, sizeof(s->producer));
    memset(s->host_index, 0, sizeof(s->host_index));
    s->state = STATE_OPERATIONAL;
    status = MFI_STAT_OK;
    FDBG(s, "IOC INIT ok: depth %u queues %u frames 0x%" HWADDR_PRIx
         " %s 0x%" HWADDR_PRIx " caps 0x%x", depth, queues, frames,
         rdpq_mode ? "RDPQ array" : "replies", replies,
         ldl_le_p(mfi + 0x04));
out:
    pci_dma_write(pci, init_frame + MFI_STATUS, &status, 1);
}

/* ------------------------------------------------------------------ SCSI */

static bool fusion_owner_is_part(SCSIRequest *req)
{
    return *(uint8_t *)req->hba_private == OWNER_PART;
}

static QEMUSGList *fusion_get_sg_list(SCSIRequest *req)
{
    if (fusion_owner_is_part(req)) {
        FusionPart *part = req->hba_private;
        return &part->qsg;
    }
    FusionCmd *cmd = req->hba_private;
    return &cmd->qsg;
}

/* Ends a SCSI command that failed: bytes moved, sense, SCSI status. */
static void fusion_finish_scsi_error(FusionState *s, FusionCmd *cmd,
                                     uint8_t scsi_status, const uint8_t *sense,
                                     int sense_len, uint32_t done)
{
    PCIDevice *pci = PCI_DEVICE(s);

    stl_le_pci_dma(pci, cmd->frame_pa + FR_DATA_LENGTH, done,
                   MEMTXATTRS_UNSPECIFIED);
    if (scsi_status == CHECK_CONDITION && cmd->sense_pa && cmd->sense_len &&
        sense_len > 0) {
        pci_dma_write(pci, cmd->sense_pa, sense,
                      MIN((uint32_t)sense_len, cmd->sense_len));
    }
    fusion_finish_io(s, cmd, MFI_STAT_SCSI_DONE_WITH_ERROR, scsi_status);
}

/* CHECK CONDITION with fixed-format sense built by the firmware itself. */
static void fusion_finish_check(FusionState *s, FusionCmd *cmd, uint8_t key,
                                uint8_t asc, uint8_t ascq)
{
    uint8_t sense[18] = { 0x70, 0, key, 0, 0, 0, 0, 10 };
    sense[12] = asc;
    sense[13] = ascq;
    fusion_finish_scsi_error(s, cmd, CHECK_CONDITION, sense, sizeof(sense), 0);
}

/* Every part of a RAID LD command has completed. */
static void fusion_parts_done(FusionCmd *cmd)
{
    FusionState *s = cmd->s;

    if (s->state != STATE_OPERATIONAL) {
        return; /* a faulted firmware never answers */
    }
    if (!cmd->part_failed) {
        fusion_finish_io(s, cmd, MFI_STAT_OK, 0);
        return;
    }
    /* which prefix of the transfer is intact is unknown: report none */
    fusion_finish_scsi_error(s, cmd, cmd->part_status, cmd->part_sense,
                             cmd->part_sense_len, 0);
}

static void fusion_part_complete(FusionPart *part, SCSIRequest *req)
{
    FusionCmd *cmd = part->cmd;

    if (cmd->kind != CMD_SCSI || part->req != req) {
        return;
    }
    if (req->status != GOOD && !cmd->part_failed) {
        cmd->part_failed = true;
        cmd->part_status = req->status;
        cmd->part_sense_len = scsi_req_get_sense(req, cmd->part_sense,
                                                 sizeof(cmd->part_sense));
    }
    if (--cmd->parts_pending == 0) {
        fusion_parts_done(cmd);
    }
}

static void fusion_command_complete(SCSIRequest *req, size_t residual)
{
    if (fusion_owner_is_part(req)) {
        fusion_part_complete(req->hba_private, req);
        return;
    }
    FusionCmd *cmd = req->hba_private;
    FusionState *s = cmd->s;

    if (cmd->kind != CMD_SCSI || cmd->req != req) {
        return;
    }
    FDBG(s, "smid %u done status 0x%x residual %zu", cmd->smid, req->status,
         residual);
    if (s->state != STATE_OPERATIONAL) {
        /* A faulted firmware never answers; the reset drops the command. */
        return;
    }
    if (req->status == GOOD) {
        fusion_finish_io(s, cmd, MFI_STAT_OK, 0);
        return;
    }
    uint32_t done = cmd->data_length > residual ? cmd->data_length - residual
                                                : 0;
    uint8_t sense[SCSI_SENSE_BUF_SIZE] = { 0 };
    int len = scsi_req_get_sense(req, sense, sizeof(sense));
    fusion_finish_scsi_error(s, cmd, req->status, sense, len, done);
}

static void fusion_command_cancel(SCSIRequest *req)
{
    if (fusion_owner_is_part(req)) {
        FusionPart *part = req->hba_private;
        if (part->req == req) {
            scsi_req_unref(req);
            part->req = NULL;
        }
        return;
    }
    FusionCmd *cmd = req->hba_private;
    if (cmd && cmd->req == req) {
        scsi_req_unref(req);
        cmd->req = NULL;
    }
}

static const struct SCSIBusInfo fusion_scsi_info = {
    .tcq = true,
    .max_channel = RAID_CHANNEL,
    .max_target = MAX_SYSTEM_PDS - 1,
    .max_lun = 7,
    .complete = fusion_command_complete,
    .cancel = fusion_command_cancel,
    .get_sg_list = fusion_get_sg_list,
};

/*
 * Walks the IEEE SGL of a request frame into cmd->qsg: up to the frame's end,
 * at most one chain element (marked by its flag, not by ChainOffset), until
 * the data length is covered or an end-of-list flag.
 */
static bool fusion_build_sgl(FusionState *s, FusionCmd *cmd,
                             const uint8_t *frame)
{
    PCIDevice *pci = PCI_DEVICE(s);
    uint32_t want = cmd->data_length;
    uint64_t have = 0;
    unsigned off = frame[FR_SGL_OFFSET0] * 4;
    uint8_t chain[CHAIN_FRAME_BYTES];
    const uint8_t *base = frame;
    unsigned end = FRAME_SIZE;
    bool chained = false;

    qemu_sglist_init(&cmd->qsg, DEVICE(s), 8, pci_get_address_space(pci));
    if (want == 0) {
        return true;
    }
    if (off < FR_SGL || off >= FRAME_SIZE) {
        GUEST_ERROR("smid %u: SGL offset 0x%x", cmd->smid, off);
        return false;
    }
    while (have < want) {
        if (off + SGE_SIZE > end) {
            GUEST_ERROR("smid %u: SGL ends after %" PRIu64 " of %u bytes",
                        cmd->smid, have, want);
            return false;
        }
        const uint8_t *sge = base + off;
        uint64_t addr = ldq_le_p(sge);
        uint32_t len = ldl_le_p(sge + 8);
        uint8_t flags = sge[15];
        off += SGE_SIZE;
        if (flags & SGE_CHAIN) {
            if (chained || len == 0 || len > CHAIN_FRAME_BYTES ||
                len % SGE_SIZE) {
                GUEST_ERROR("smid %u: bad chain element (len %u, nested %d)",
                            cmd->smid, len, chained);
                return false;
            }
            pci_dma_read(pci, addr, chain, len);
            base = chain;
            off = 0;
            end = len;
            chained = true;
            continue;
        }
        if (len) {
            uint32_t take = MIN((uint64_t)len, want - have);
            qemu_sglist_add(&cmd->qsg, addr, take);
            have += take;
        }
        if (flags & SGE_END_OF_LIST) {
            break;
        }
    }
    if (have < want) {
        GUEST_ERROR("smid %u: SGL covers %" PRIu64 " of %u bytes", cmd->smid,
                    have, want);
        return false;
    }
    return true;
}

static SCSIDevice *fusion_find_device(FusionState *s, int channel, int id,
                                      int lun)
{
    SCSIDevice *d = scsi_device_find(&s->bus, channel, id, lun);
    if (!d || d->channel != channel || d->id != id || d->lun != lun) {
        return NULL;
    }
    return d;
}

static unsigned fusion_list_devices(FusionState *s, int channel, int *ids,
                                    unsigned max);

/* ------------------------------------------------------------------ RAID LD */

static uint64_t fusion_device_sectors(FusionState *s, int channel, int id);

/*
 * The RAID LD over the scsi-hd disks of channel 2, in scsi-id order. False
 * (once told on stderr) when those disks cannot make the configured level:
 * the map then has no LD and target 0 does not exist.
 */
static bool fusion_raid_layout(FusionState *s, RaidLayout *l)
{
    BusChild *kid;
    bool seen[MAX_SYSTEM_PDS] = { false };
    uint64_t min_blocks = UINT64_MAX;

    memset(l, 0, sizeof(*l));
    if (s->raid == RAID_NONE) {
        return false;
    }
    QTAILQ_FOREACH(kid, &s->bus.qbus.children, sibling) {
        SCSIDevice *d = SCSI_DEVICE(kid->child);
        if (d->channel == RAID_CHANNEL && d->lun == 0 &&
            d->id < MAX_SYSTEM_PDS) {
            seen[d->id] = true;
        }
    }
    for (int id = 0; id < MAX_SYSTEM_PDS; id++) {
        if (!seen[id]) {
            continue;
        }
        if (l->arms == RAID_MAX_ARMS) {
            l->arms++;
            break;
        }
        l->pd[l->arms] = id;
        l->dev[l->arms] = fusion_find_device(s, RAID_CHANNEL, id, 0);
        /* the firmware owns its member disks: their unit attentions (power
         * on, reset) are its own, never the LD's */
        l->dev[l->arms]->unit_attention = SENSE_CODE(NO_SENSE);
        min_blocks = MIN(min_blocks, fusion_device_sectors(s, RAID_CHANNEL,
                                                           id));
        l->arms++;
    }
    l->strip_blocks = s->strip_kib * 2;
    l->strip_shift = ctz32(l->strip_blocks);
    bool ok = s->raid == RAID_1 ? l->arms == 2
                                : l->arms >= 2 && l->arms <= RAID_MAX_ARMS;
    if (ok) {
        l->rows = min_blocks >> l->strip_shift;
        ok = l->rows > 0;
    }
    if (!ok) {
        if (!s->raid_reported) {
            s->raid_reported = true;
            fprintf(stderr, "megasas-fusion: raid=%s needs %s scsi-hd disks "
                    "of at least one strip on channel %d (found %u): no LD\n",
                    s->raid_name, s->raid == RAID_1 ? "2" : "2..32",
                    RAID_CHANNEL, l->arms);
        }
        return false;
    }
    l->ld_blocks = (l->rows << l->strip_shift) *
                   (s->raid == RAID_1 ? 1 : l->arms);
    return true;
}

/* The arm (index into the layout) holding a PD, or -1. */
static int fusion_raid_arm_of_pd(const RaidLayout *l, int pd)
{
    for (unsigned a = 0; a < l->arms; a++) {
        if (l->pd[a] == pd) {
            return a;
        }
    }
    return -1;
}

static void fusion_dyn_desc(uint8_t *map, unsigned index, uint32_t type,
                            uint32_t offset, uint32_t bytes, uint32_t elements)
{
    uint8_t *d = map + DYN_DESC_TABLE + index * 16;
    stl_le_p(d + 0, type);
    stl_le_p(d + 4, offset);
    stl_le_p(d + 8, bytes);
    stl_le_p(d + 12, elements);
}

/*
 * The dynamic RAID map (MR_FW_RAID_MAP_DYNAMIC): a header, a table of four
 * descriptors (device handles, target-to-LD, arrays, LD span maps) and their
 * data. Every PD (JBOD or RAID member) gets its device handle; the RAID LD,
 * when the disks make one, is LD 0 at target 0.
 */
static void fusion_fill_dynamic_map(FusionState *s, uint8_t *map)
{
    RaidLayout l;
    bool have_ld = fusion_raid_layout(s, &l);
    uint8_t *data = map + DYN_DATA;
    int ids[MAX_SYSTEM_PDS];
    unsigned n;

    stl_le_p(map + 0x00, DYN_MAP_BYTES);
    stl_le_p(map + 0x04, DYN_DESC_TABLE);
    stl_le_p(map + 0x08, DYN_DESC_COUNT * 16);
    stl_le_p(map + 0x0C, DYN_DESC_COUNT);
    map[0x24] = 10;                       /* FastPath PD I/O timeout, s */
    stw_le_p(map + 0x2C, have_ld ? 1 : 0); /* LDs */
    stw_le_p(map + 0x2E, have_ld ? 1 : 0); /* arrays */
    stw_le_p(map + 0x30, have_ld ? 1 : 0); /* spans */
    fusion_dyn_desc(map, 0, 0, DYN_DEV_HANDLES, MAX_SYSTEM_PDS * 8,
                    MAX_SYSTEM_PDS);
    fusion_dyn_desc(map, 1, 1, DYN_TGT_TO_LD, MAX_SYSTEM_PDS * 2,
                    MAX_SYSTEM_PDS);
    fusion_dyn_desc(map, 2, 2, DYN_ARRAYS, 64, have_ld ? 1 : 0);
    fusion_dyn_desc(map, 3, 3, DYN_SPANS, LD_SPAN_MAP_BYTES, have_ld ? 1 : 0);

    for (unsigned pd = 0; pd < MAX_SYSTEM_PDS; pd++) {
        uint8_t *e = data + DYN_DEV_HANDLES + pd * 8;
        stw_le_p(e + 0, 0xFFFF);
        stw_le_p(e + 4, 0xFFFF);
        stw_le_p(e + 6, 0xFFFF);
    }
    n = fusion_list_devices(s, 1, ids, MAX_SYSTEM_PDS);
    for (unsigned i = 0; i < n + (have_ld ? l.arms : 0); i++) {
        int pd = i < n ? ids[i] : l.pd[i - n];
        uint8_t *e = data + DYN_DEV_HANDLES + pd * 8;
        stw_le_p(e + 0, PD_HANDLE_BASE + pd);
        e[2] = 1;                         /* valid handles */
        e[3] = PD_INTERFACE_SAS;
        stw_le_p(e + 4, PD_HANDLE_BASE + pd);
    }
    for (unsigned t = 0; t < MAX_SYSTEM_PDS; t++) {
        stw_le_p(data + DYN_TGT_TO_LD + t * 2, 0xFFFF);
    }
    for (unsigned arm = 0; arm < 32; arm++) {
        stw_le_p(data + DYN_ARRAYS + arm * 2, 0xFFFF);
    }
    if (!have_ld) {
        return;
    }
    stw_le_p(data + DYN_TGT_TO_LD + RAID_LD_TARGET * 2, 0);
    for (unsigned a = 0; a < l.arms; a++) {
        stw_le_p(data + DYN_ARRAYS + a * 2, l.pd[a]);
    }

    /* MR_LD_SPAN_MAP: MR_LD_RAID (0x80), dataArmMap[32], spanBlock[8] */
    uint8_t *ld = data + DYN_SPANS;
    bool mirror = s->raid == RAID_1;
    uint32_t caps = CAP_FP_CAPABLE | CAP_FP_READ;
    if (!mirror) {
        /* RAID-1 writes would go FastPath as peer pairs: not modelled */
        caps |= CAP_FP_WRITE;
    }
    stl_le_p(ld + 0x00, caps);
    stq_le_p(ld + 0x08, l.ld_blocks);
    ld[0x10] = 1;                         /* span depth */
    ld[0x11] = mirror ? 1 : 0;            /* RAID level */
    ld[0x12] = l.strip_shift;
    ld[0x13] = l.arms;                    /* row size */
    ld[0x14] = mirror ? 1 : l.arms;       /* data arms per row */
    stw_le_p(ld + 0x18, RAID_LD_TARGET);
    ld[0x1A] = LD_STATE_OPTIMAL;
    ld[0x1C] = mirror ? 1 : l.arms;       /* mod factor */
    stw_le_p(ld + 0x1E, s->raid_seq);
    ld[0x2C] = 10;                        /* FastPath I/O timeout, s */
    stl_le_p(ld + 0x30, 512);             /* logical block length */
    for (unsigned a = 0; a < l.arms; a++) {
        ld[0x80 + a] = mirror ? 0 : a;    /* data arm map */
    }
    uint8_t *span = ld + 0xA0;            /* spanBlock[0] */
    stq_le_p(span + 0x00, l.rows);
    stq_le_p(span + 0x08, 0);             /* start block */
    stq_le_p(span + 0x10, l.rows << l.strip_shift);
    stw_le_p(span + 0x18, 0);             /* array 0 */
    span[0x1A] = l.arms;
    span[0x1B] = mirror ? 1 : l.arms;
    stl_le_p(span + 0x20, 1);             /* one quad element */
    stq_le_p(span + 0x28, 0);             /* logical start row */
    stq_le_p(span + 0x30, l.rows - 1);    /* logical end row */
    stq_le_p(span + 0x38, 0);             /* offset in span */
    stl_le_p(span + 0x40, 1);             /* diff */
}

/* Start LBA and block count of a READ/WRITE(6/10/12/16); false otherwise. */
static bool fusion_rw_cdb(const uint8_t *cdb, unsigned len, bool *write,
                          uint64_t *lba, uint32_t *count)
{
    switch (cdb[0]) {
    case READ_6:
    case WRITE_6:
        if (len < 6) {
            return false;
        }
        *lba = ((cdb[1] & 0x1F) << 16) | (cdb[2] << 8) | cdb[3];
        *count = cdb[4] ? cdb[4] : 256;
        break;
    case READ_10:
    case WRITE_10:
        if (len < 10) {
            return false;
        }
        *lba = ldl_be_p(cdb + 2);
        *count = lduw_be_p(cdb + 7);
        break;
    case READ_12:
    case WRITE_12:
        if (len < 12) {
            return false;
        }
        *lba = ldl_be_p(cdb + 2);
        *count = ldl_be_p(cdb + 6);
        break;
    case READ_16:
    case WRITE_16:
        if (len < 16) {
            return false;
        }
        *lba = ldq_be_p(cdb + 2);
        *count = ldl_be_p(cdb + 10);
        break;
    default:
        return false;
    }
    *write = cdb[0] == WRITE_6 || cdb[0] == WRITE_10 || cdb[0] == WRITE_12 ||
             cdb[0] == WRITE_16;
    return true;
}

/* dst = the bytes [off, off + len) of src. */
static void fusion_sg_slice(FusionState *s, QEMUSGList *dst,
                            const QEMUSGList *src, uint64_t off, uint64_t len)
{
    qemu_sglist_init(dst, DEVICE(s), 4, src->as);
    for (int i = 0; i < src->nsg && len; i++) {
        dma_addr_t l = src->sg[i].len;
        if (off >= l) {
            off -= l;
            continue;
        }
        dma_addr_t take = MIN(l - off, len);
        qemu_sglist_add(dst, src->sg[i].base + off, take);
        len -= take;
        off = 0;
    }
}

/* Adds a disk request (not yet started) to a RAID LD command. */
static FusionPart *fusion_add_part(FusionState *s, FusionCmd *cmd,
                                   SCSIDevice *dev, const uint8_t *cdb,
                                   unsigned cdb_len, uint64_t byte_off,
                                   uint64_t bytes)
{
    FusionPart *part = g_new0(FusionPart, 1);
    part->owner = OWNER_PART;
    part->cmd = cmd;
    fusion_sg_slice(s, &part->qsg, &cmd->qsg, byte_off, bytes);
    part->req = scsi_req_new(dev, cmd->smid, 0, (uint8_t *)cdb, cdb_len,
                             part);
    cmd->parts = g_renew(FusionPart *, cmd->parts, cmd->nparts + 1);
    cmd->parts[cmd->nparts++] = part;
    return part;
}

/* Starts every part; the command completes when the last one does. */
static void fusion_start_parts(FusionCmd *cmd)
{
    unsigned n = cmd->nparts;

    cmd->kind = CMD_SCSI;
    /* one count for this loop, so a part failing at once ends nothing early */
    cmd->parts_pending = n + 1;
    for (unsigned i = 0; i < n && cmd->kind == CMD_SCSI; i++) {
        FusionPart *part = cmd->parts[i];
        SCSIRequest *req = part->req;
        int32_t len = scsi_req_enqueue(req);
        if (len != 0 && cmd->kind == CMD_SCSI && part->req == req) {
            scsi_req_continue(req);
        }
    }
    if (cmd->kind == CMD_SCSI && --cmd->parts_pending == 0) {
        fusion_parts_done(cmd);
    }
}

static void fusion_rw16(uint8_t *cdb, bool write, uint8_t flags, uint64_t lba,
                        uint32_t count)
{
    memset(cdb, 0, 16);
    cdb[0] = write ? WRITE_16 : READ_16;
    cdb[1] = flags & 0x18; /* DPO, FUA */
    stq_be_p(cdb + 2, lba);
    stl_be_p(cdb + 10, count);
}

/*
 * An LD command to the RAID LD on the firmware path: READ/WRITE split at
 * strip boundaries onto the arms (RAID-0) or sent to both arms (RAID-1
 * writes; reads from arm 0), READ CAPACITY answered with the LD's size,
 * SYNCHRONIZE CACHE sent to every arm, commands that change blocks without
 * naming them (UNMAP, WRITE SAME, FORMAT) refused, anything else (INQUIRY,
 * MODE SENSE, TEST UNIT READY, ...) answered by arm 0.
 */
static void fusion_raid_ld_io(FusionState *s, FusionCmd *cmd,
                              const uint8_t *frame, const uint8_t *cdb,
                              unsigned cdb_len, uint8_t lun)
{
    RaidLayout l;
    bool write;
    uint64_t lba;
    uint32_t count;

    if (!fusion_raid_layout(s, &l) || lun != 0) {
        fusion_finish_io(s, cmd, MFI_STAT_DEVICE_NOT_FOUND, 0);
        return;
    }
    if (!fusion_build_sgl(s, cmd, frame)) {
        fusion_finish_io(s, cmd, MFI_STAT_SCSI_IO_FAILED, 0);
        return;
    }
    s->ld_path_ios++;
    if (fusion_rw_cdb(cdb, cdb_len, &write, &lba, &count)) {
        uint8_t sub[16];
        if (lba > l.ld_blocks || count > l.ld_blocks - lba) {
            fusion_finish_check(s, cmd, ILLEGAL_REQUEST, 0x21, 0x00);
            return;
        }
        if ((uint64_t)count * 512 != cmd->data_length) {
            GUEST_ERROR("smid %u: %u blocks but DataLength %u", cmd->smid,
                        count, cmd->data_length);
            fusion_finish_io(s, cmd, MFI_STAT_INVALID_PARAMETER, 0);
            return;
        }
        if (count == 0) {
            fusion_finish_io(s, cmd, MFI_STAT_OK, 0);
            return;
        }
        if (s->raid == RAID_1) {
            for (unsigned a = 0; a < (write ? l.arms : 1); a++) {
                fusion_rw16(sub, write, cdb[1], lba, count);
                fusion_add_part(s, cmd, l.dev[a], sub, 16, 0,
                                cmd->data_length);
            }
        } else {
            uint64_t off = 0;
            while (count) {
                uint64_t strip = lba >> l.strip_shift;
                uint32_t in_strip = lba & (l.strip_blocks - 1);
                uint32_t n = MIN(count, l.strip_blocks - in_strip);
                unsigned arm = strip % l.arms;
                uint64_t pd_lba = ((strip / l.arms) << l.strip_shift) +
                                  in_strip;
                fusion_rw16(sub, write, cdb[1], pd_lba, n);
                fusion_add_part(s, cmd, l.dev[arm], sub, 16, off,
                                (uint64_t)n * 512);
                off += (uint64_t)n * 512;
                lba += n;
                count -= n;
            }
        }
        fusion_start_parts(cmd);
        return;
    }
    switch (cdb[0]) {
    case READ_CAPACITY_10:
    case SERVICE_ACTION_IN_16: {
        uint8_t data[32] = { 0 };
        unsigned len = 8;
        uint64_t last = l.ld_blocks - 1;
        dma_addr_t residual;
        if (cdb[0] == SERVICE_ACTION_IN_16) {
            if ((cdb[1] & 0x1F) != SAI_READ_CAPACITY_16) {
                fusion_finish_check(s, cmd, ILLEGAL_REQUEST, 0x24, 0x00);
                return;
            }
            stq_be_p(data, last);
            stl_be_p(data + 8, 512);
            len = 32;
        } else {
            stl_be_p(data, MIN(last, 0xFFFFFFFFULL));
            stl_be_p(data + 4, 512);
        }
        len = MIN(len, cmd->data_length);
        dma_buf_read(data, len, &residual, &cmd->qsg, MEMTXATTRS_UNSPECIFIED);
        stl_le_pci_dma(PCI_DEVICE(s), cmd->frame_pa + FR_DATA_LENGTH, len,
                       MEMTXATTRS_UNSPECIFIED);
        fusion_finish_io(s, cmd, MFI_STAT_OK, 0);
        return;
    }
    case SYNCHRONIZE_CACHE:
    case SYNCHRONIZE_CACHE_16: {
        uint8_t sub[16] = { 0 };
        unsigned len = cdb[0] == SYNCHRONIZE_CACHE ? 10 : 16;
        sub[0] = cdb[0]; /* LBA 0, 0 blocks: the whole disk */
        for (unsigned a = 0; a < l.arms; a++) {
            fusion_add_part(s, cmd, l.dev[a], sub, len, 0, 0);
        }
        fusion_start_parts(cmd);
        return;
    }
    case UNMAP:
    case WRITE_SAME_10:
    case WRITE_SAME_16:
    case FORMAT_UNIT:
    case WRITE_VERIFY_10:
    case WRITE_VERIFY_12:
    case WRITE_VERIFY_16:
    case VERIFY_10:
    case VERIFY_12:
    case VERIFY_16:
        fusion_finish_check(s, cmd, ILLEGAL_REQUEST, 0x20, 0x00);
        return;
    default: {
        cmd->kind = CMD_SCSI;
        SCSIRequest *req = scsi_req_new(l.dev[0], cmd->smid, 0,
                                        (uint8_t *)cdb, cdb_len, cmd);
        cmd->req = req;
        int32_t len = scsi_req_enqueue(req);
        if (len != 0 && cmd->kind == CMD_SCSI && cmd->req == req) {
            scsi_req_continue(req);
        }
        return;
    }
    }
}

/*
 * FastPath to a RAID LD's member disk: the driver computed the disk and its
 * LBA from the map. The sequence number must be the map's (else
 * CONFIG_SEQ_MISMATCH, the status a driver retries on after re-reading the
 * map), and the disk range must lie inside one strip of that arm, which is
 * where the LD's blocks are; the CDB then goes to the disk unchanged.
 */
static void fusion_raid_fastpath(FusionState *s, FusionCmd *cmd,
                                 const uint8_t *frame, const RaidLayout *l,
                                 unsigned arm, const uint8_t *cdb,
                                 unsigned cdb_len)
{
    uint16_t seq = lduw_le_p(frame + FR_RAID_SEQ_NUM);
    uint16_t target = lduw_le_p(frame + FR_RAID_TARGET);
    uint16_t io_flags = lduw_le_p(frame + FR_IO_FLAGS);
    bool write;
    uint64_t lba;
    uint32_t count;

    if (seq != s->raid_seq) {
        s->stale_seq_refused++;
        if (!s->config_changes) {
            /* no map ever carried another number: the driver made it up */
            GUEST_ERROR("smid %u: FastPath with sequence number 0x%x, the "
                        "map's is 0x%x", cmd->smid, seq, s->raid_seq);
        }
        fusion_finish_io(s, cmd, MFI_STAT_CONFIG_SEQ_MISMATCH, 0);
        return;
    }
    if (target != RAID_LD_TARGET || !(io_flags & IO_FLAGS_FAST_PATH)) {
        GUEST_ERROR("smid %u: FastPath to PD %d names LD %u, IoFlags 0x%x",
                    cmd->smid, l->pd[arm], target, io_flags);
        fusion_finish_io(s, cmd, MFI_STAT_INVALID_PARAMETER, 0);
        return;
    }
    if (!fusion_rw_cdb(cdb, cdb_len, &write, &lba, &count)) {
        GUEST_ERROR("smid %u: FastPath CDB 0x%02x to a RAID member (the map "
                    "does not offer non-R/W FastPath)", cmd->smid, cdb[0]);
        fusion_finish_io(s, cmd, MFI_STAT_INVALID_PARAMETER, 0);
        return;
    }
    uint64_t arm_blocks = l->rows << l->strip_shift;
    if (count == 0 || lba >= arm_blocks || count > arm_blocks - lba ||
        (lba >> l->strip_shift) != ((lba + count - 1) >> l->strip_shift) ||
        (s->raid == RAID_1 && write)) {
        GUEST_ERROR("smid %u: FastPath %s of %u blocks at PD %d LBA %" PRIu64
                    " is not inside one strip of the LD (strip %u blocks)",
                    cmd->smid, write ? "write" : "read", count, l->pd[arm], lba,
                    l->strip_blocks);
        fusion_finish_io(s, cmd, MFI_STAT_INVALID_PARAMETER, 0);
        return;
    }
    if (!fusion_build_sgl(s, cmd, frame)) {
        fusion_finish_io(s, cmd, MFI_STAT_SCSI_IO_FAILED, 0);
        return;
    }
    if (++s->fastpath_ios == 1) {
        fprintf(stderr, "megasas-fusion: first LD FastPath I/O served "
                "(PD %d, handle 0x%x)\n", l->pd[arm],
                PD_HANDLE_BASE + l->pd[arm]);
    }
    cmd->kind = CMD_SCSI;
    SCSIRequest *req = scsi_req_new(l->dev[arm], cmd->smid, 0, (uint8_t *)cdb,
                                    cdb_len, cmd);
    cmd->req = req;
    int32_t len = scsi_req_enqueue(req);
    if (len != 0 && cmd->kind == CMD_SCSI && cmd->req == req) {
        scsi_req_continue(req);
    }
}

static void fusion_handle_io(FusionState *s, FusionCmd *cmd,
                             const uint8_t *frame, uint8_t function)
{
    uint16_t handle = lduw_le_p(frame + FR_DEV_HANDLE);
    uint16_t target = lduw_le_p(frame + FR_RAID_TARGET);
    uint8_t lun = frame[FR_LUN + 1];
    uint8_t cdb_len = lduw_le_p(frame + FR_IO_FLAGS) & 0x1F;
    uint8_t cdb[32];
    int channel;
    int id;

    s->io_count++;
    if (s->fault_after && !s->fault_done && s->io_count >= s->fault_after) {
        s->fault_done = true;
        cmd->kind = CMD_HELD;
        fusion_enter_fault(s, "fault-after");
        return;
    }
    if (s->hold_after && !s->hold_done && s->io_count >= s->hold_after) {
        s->hold_done = true;
        cmd->kind = CMD_HELD;
        fprintf(stderr, "megasas-fusion: holding request smid %u "
                "(hold-after=%u)\n", cmd->smid, s->hold_after);
        return;
    }

    cmd->data_length = ldl_le_p(frame + FR_DATA_LENGTH);
    cmd->sense_pa = ((hwaddr)s->sense_high << 32) |
                    ldl_le_p(frame + FR_SENSE_LOW);
    cmd->sense_len = frame[FR_SENSE_LEN];
    if (function == FUNC_LD_IO &&
        (frame[FR_RAID_FLAGS] & 0x30) != RAID_FLAGS_SUBTYPE_SYSTEM_PD) {
        channel = 0;
        id = handle;
    } else {
        /* system PD: FastPath without a device handle names the target in
         * the RAID context */
        channel = 1;
        id = handle == 0xFFFF ? target : handle;
    }
    cmd->target = id;
    if (s->raid != RAID_NONE) {
        if (cdb_len == 0 || cdb_len > 16) {
            GUEST_ERROR("smid %u: CDB length %u", cmd->smid, cdb_len);
            fusion_finish_io(s, cmd, MFI_STAT_INVALID_PARAMETER, 0);
            return;
        }
        memcpy(cdb, frame + FR_CDB, sizeof(cdb));
        if (channel == 0) {
            /* with a RAID LD, it is the only LD */
            if (id != RAID_LD_TARGET) {
                fusion_finish_io(s, cmd, MFI_STAT_DEVICE_NOT_FOUND, 0);
                return;
            }
            fusion_raid_ld_io(s, cmd, frame, cdb, cdb_len, lun);
            return;
        }
        if (handle != 0xFFFF) {
            /* the map gave every PD a handle: JBOD or RAID member */
            RaidLayout l;
            int pd = handle - PD_HANDLE_BASE;
            if (handle < PD_HANDLE_BASE || pd >= MAX_SYSTEM_PDS) {
                GUEST_ERROR("smid %u: device handle 0x%x is in no map",
                            cmd->smid, handle);
                fusion_finish_io(s, cmd, MFI_STAT_DEVICE_NOT_FOUND, 0);
                return;
            }
            int arm = fusion_raid_layout(s, &l) ? fusion_raid_arm_of_pd(&l, pd)
                                                : -1;
            if (arm >= 0) {
                cmd->target = pd;
                fusion_raid_fastpath(s, cmd, frame, &l, arm, cdb, cdb_len);
                return;
            }
            id = pd;
            cmd->target = id;
        }
    }
    SCSIDevice *sdev = (channel == 0 && id >= MAX_LDS)
                           ? NULL
                           : fusion_find_device(s, channel, id, lun);
    if (!sdev) {
        FDBG(s, "smid %u: no device channel %d id %d lun %d", cmd->smid,
             channel, id, lun);
        fusion_finish_io(s, cmd, MFI_STAT_DEVICE_NOT_FOUND, 0);
        return;
    }
    if (cdb_len == 0 || cdb_len > 16) {
        GUEST_ERROR("smid %u: CDB length %u", cmd->smid, cdb_len);
        fusion_finish_io(s, cmd, MFI_STAT_INVALID_PARAMETER, 0);
        return;
    }
    if (!fusion_build_sgl(s, cmd, frame)) {
        fusion_finish_io(s, cmd, MFI_STAT_SCSI_IO_FAILED, 0);
        return;
    }
    memcpy(cdb, frame + FR_CDB, sizeof(cdb));
    cmd->kind = CMD_SCSI;
    SCSIRequest *req = scsi_req_new(sdev, cmd->smid, lun, cdb, cdb_len, cmd);
    cmd->req = req;
    int32_t len = scsi_req_enqueue(req);
    /* a request that failed at once has already completed and been freed */
    if (len != 0 && cmd->kind == CMD_SCSI && cmd->req == req) {
        uint32_t control = ldl_le_p(frame + FR_CONTROL);
        bool dir_ok = len > 0 ? !(control & CONTROL_WRITE)
                              : !(control & CONTROL_READ);
        if (!dir_ok) {
            GUEST_ERROR("smid %u: CDB 0x%02x data direction disagrees with "
                        "Control 0x%08x", cmd->smid, cdb[0], control);
        }
        scsi_req_continue(req);
    }
}

/* ------------------------------------------------------------------ DCMDs */

typedef struct DcmdData {
    hwaddr addr[8];
    uint32_t len[8];
    unsigned count;
    uint32_t total;
} DcmdData;

static bool fusion_dcmd_sgl(const uint8_t *mfi, DcmdData *d)
{
    uint16_t flags = lduw_le_p(mfi + MFI_FLAGS);
    unsigned count = mfi[MFI_SGE_COUNT];
    unsigned stride = (flags & MFI_FLAG_IEEE) ? 16
                      : (flags & MFI_FLAG_SGL64) ? 12 : 8;

    d->count = 0;
    d->total = 0;
    if (count > 2 || MFI_DCMD_SGL + count * stride > MFI_FRAME_BYTES) {
        return false;
    }
    for (unsigned i = 0; i < count; i++) {
        const uint8_t *e = mfi + MFI_DCMD_SGL + i * stride;
        if (stride == 8) {
            d->addr[i] = ldl_le_p(e);
            d->len[i] = ldl_le_p(e + 4);
        } else {
            d->addr[i] = ldq_le_p(e);
            d->len[i] = ldl_le_p(e + 8);
        }
        d->total += d->len[i];
    }
    d->count = count;
    return true;
}

/* Copies buf into the DCMD's buffers, as far as they reach. */
static void fusion_dcmd_write(FusionState *s, DcmdData *d, const void *buf,
                              size_t len)
{
    const uint8_t *p = buf;
    for (unsigned i = 0; i < d->count && len; i++) {
        uint32_t n = MIN((size_t)d->len[i], len);
        pci_dma_write(PCI_DEVICE(s), d->addr[i], p, n);
        p += n;
        len -= n;
    }
}

static unsigned fusion_list_lds(FusionState *s, int *ids);

static void fusion_ctrl_info(FusionState *s, uint8_t *ci)
{
    PCIDevice *pci = PCI_DEVICE(s);

    stw_le_p(ci + 0x00, pci_get_word(pci->config + PCI_VENDOR_ID));
    stw_le_p(ci + 0x02, pci_get_word(pci->config + PCI_DEVICE_ID));
    stw_le_p(ci + 0x04, pci_get_word(pci->config + PCI_SUBSYSTEM_VENDOR_ID));
    stw_le_p(ci + 0x06, pci_get_word(pci->config + PCI_SUBSYSTEM_ID));
    ci[0x20] = 0x02;                  /* host interface: PCIe */
    ci[0x53C] = 32;                   /* max arms */
    ci[0x53D] = 8;                    /* max spans */
    ci[0x53E] = 128;                  /* max arrays */
    ci[0x53F] = MAX_LDS;              /* max LDs */
    pstrcpy((char *)ci + 0x540, 80, s->gen->product);
    pstrcpy((char *)ci + 0x590, 32, "BAREMQ-FUSION-0001");
    stw_le_p(ci + 0x5B8, s->fw_cmds);
    stw_le_p(ci + 0x5BA, 64);         /* max SG elements */
    stl_le_p(ci + 0x5BC, 2048);       /* max request size, sectors */
    {
        int ids[MAX_SYSTEM_PDS];
        stw_le_p(ci + 0x5C0, fusion_list_lds(s, ids));
        stw_le_p(ci + 0x5C6, fusion_list_devices(s, 1, ids, MAX_SYSTEM_PDS));
    }
    stw_le_p(ci + 0x5D0, 1024);       /* memory size (MiB): an "MR" card */
    stw_le_p(ci + 0x5DA, 64);         /* max strips per I/O */
    stl_le_p(ci + 0x5DC, 0x3);        /* RAID 0 and 1 */
    /* strip size min and max (log2 of 512-byte blocks): the configured one */
    ci[0x5E8] = ctz32(s->strip_kib * 2);
    ci[0x5E9] = ctz32(s->strip_kib * 2);
    /* OnOffProperties @0x620: online controller reset stays enabled (bit 10
     * clear); adapterOperations2/3/4 all zero: 64-LD legacy map, no crash
     * dump, no secure JBOD, no JBOD sequence map. */
    ci[0x94B] = 30;                   /* TaskAbortTO, s */
    ci[0x94C] = 60;                   /* MaxResetTO, s */
}

/* An empty but valid legacy (64-LD) RAID map: no LDs, no device handles. */
static void fusion_fill_map(uint8_t *map)
{
    stl_le_p(map + 0x00, LEGACY_MAP_HEADER_BYTES);
    memset(map + MAP_TARGET_TO_LD, 0xFF, 128);
    for (unsigned i = 0; i < MAX_SYSTEM_PDS; i++) {
        stw_le_p(map + MAP_DEV_HANDLES + i * 8, 0xFFFF);
    }
}

static unsigned fusion_list_devices(FusionState *s, int channel, int *ids,
                                    unsigned max)
{
    BusChild *kid;
    unsigned n = 0;
    bool seen[MAX_SYSTEM_PDS] = { false };

    QTAILQ_FOREACH(kid, &s->bus.qbus.children, sibling) {
        SCSIDevice *d = SCSI_DEVICE(kid->child);
        if (d->channel != channel || d->lun != 0 || d->id >= max ||
            seen[d->id]) {
            continue;
        }
        seen[d->id] = true;
    }
    for (unsigned id = 0; id < max; id++) {
        if (seen[id]) {
            ids[n++] = id;
        }
    }
    return n;
}

static uint64_t fusion_device_sectors(FusionState *s, int channel, int id)
{
    SCSIDevice *d = fusion_find_device(s, channel, id, 0);
    uint64_t sectors = 0;
    if (d && d->conf.blk) {
        uint64_t bytes = blk_getlength(d->conf.blk);
        sectors = bytes / 512;
    }
    return sectors;
}

/* The LDs' target ids: the RAID LD alone, or the scsi-hd disks of channel 0. */
static unsigned fusion_list_lds(FusionState *s, int *ids)
{
    RaidLayout l;
    if (s->raid == RAID_NONE) {
        return fusion_list_devices(s, 0, ids, MAX_LDS);
    }
    if (!fusion_raid_layout(s, &l)) {
        return 0;
    }
    ids[0] = RAID_LD_TARGET;
    return 1;
}

static uint64_t fusion_ld_sectors(FusionState *s, int target)
{
    RaidLayout l;
    if (s->raid == RAID_NONE) {
        return fusion_device_sectors(s, 0, target);
    }
    return fusion_raid_layout(s, &l) ? l.ld_blocks : 0;
}

/* The dynamic map into a DCMD's buffers; INVALID_PARAMETER if they are short. */
static int fusion_write_dynamic_map(FusionState *s, DcmdData *d)
{
    if (d->total < DYN_MAP_BYTES) {
        return MFI_STAT_INVALID_PARAMETER;
    }
    g_autofree uint8_t *map = g_malloc0(DYN_MAP_BYTES);
    fusion_fill_dynamic_map(s, map);
    fusion_dcmd_write(s, d, map, DYN_MAP_BYTES);
    return MFI_STAT_OK;
}

/* Whether a map sync's LD list differs from the configuration now. */
static bool fusion_map_sync_stale(FusionState *s, DcmdData *d, unsigned lds)
{
    RaidLayout l;
    uint8_t entry[4];
    bool have_ld = fusion_raid_layout(s, &l);

    if (lds != (have_ld ? 1u : 0u)) {
        return true;
    }
    if (!have_ld) {
        return false;
    }
    if (!d->count || d->len[0] < sizeof(entry)) {
        return true;
    }
    pci_dma_read(PCI_DEVICE(s), d->addr[0], entry, sizeof(entry));
    return entry[0] != RAID_LD_TARGET || lduw_le_p(entry + 2) != s->raid_seq;
}

/* Returns an MFI status, or -1 when the command is kept pending. */
static int fusion_dcmd(FusionState *s, FusionCmd *cmd, uint8_t *mfi)
{
    uint32_t opcode = ldl_le_p(mfi + MFI_DCMD_OPCODE);
    uint8_t *mbox = mfi + MFI_DCMD_MBOX;
    DcmdData d;
    int ids[MAX_SYSTEM_PDS];
    unsigned n;

    cmd->opcode = opcode;
    if (!fusion_dcmd_sgl(mfi, &d)) {
        GUEST_ERROR("DCMD 0x%08x: bad SGL", opcode);
        return MFI_STAT_INVALID_PARAMETER;
    }
    FDBG(s, "DCMD 0x%08x mbox %02x %02x %02x buffer %u", opcode, mbox[0],
         mbox[1], mbox[2], d.total);
    switch (opcode) {
    case DCMD_CTRL_GET_INFO: {
        g_autofree uint8_t *ci = g_malloc0(CTRL_INFO_BYTES);
        fusion_ctrl_info(s, ci);
        fusion_dcmd_write(s, &d, ci, CTRL_INFO_BYTES);
        return MFI_STAT_OK;
    }
    case DCMD_LD_MAP_GET_INFO:
        if (mbox[1] == 1) {
            /*
             * Map sync: the driver's {target, 0, sequence number} per LD in
             * the buffer, mbox[0] LDs. Held until the configuration changes,
             * then answered with the new map in the same buffer; a driver
             * whose list is already stale gets the map at once.
             */
            if (s->raid != RAID_NONE && fusion_map_sync_stale(s, &d, mbox[0])) {
                return fusion_write_dynamic_map(s, &d);
            }
            return -1;
        }
        if (s->raid != RAID_NONE) {
            if (d.total < DYN_MAP_BYTES) {
                return MFI_STAT_INVALID_PARAMETER;
            }
            g_autofree uint8_t *map = g_malloc0(DYN_MAP_BYTES);
            fusion_fill_dynamic_map(s, map);
            fusion_dcmd_write(s, &d, map, DYN_MAP_BYTES);
            return MFI_STAT_OK;
        }
        if (d.total < LEGACY_MAP_BYTES) {
            return MFI_STAT_INVALID_PARAMETER;
        }
        {
            g_autofree uint8_t *map = g_malloc0(LEGACY_MAP_BYTES);
            fusion_fill_map(map);
            fusion_dcmd_write(s, &d, map, LEGACY_MAP_BYTES);
        }
        return MFI_STAT_OK;
    case DCMD_LD_LIST_QUERY: {
        /* {u32 size, u32 count, 3 pad, u8 targetId[256]} */
        uint8_t list[8 + 3 + 256] = { 0 };
        n = fusion_list_lds(s, ids);
        stl_le_p(list + 0, sizeof(list));
        stl_le_p(list + 4, n);
        for (unsigned i = 0; i < n; i++) {
            list[11 + i] = ids[i];
        }
        fusion_dcmd_write(s, &d, list, sizeof(list));
        return MFI_STAT_OK;
    }
    case DCMD_LD_GET_LIST: {
        /* {u32 count, u32 rsvd, 256 x {tgt, rsvd, u16 seq, state, 3 rsvd,
         * u64 size}} */
        g_autofree uint8_t *list = g_malloc0(8 + 256 * 16);
        n = fusion_list_lds(s, ids);
        stl_le_p(list, n);
        for (unsigned i = 0; i < n; i++) {
            uint8_t *e = list + 8 + i * 16;
            e[0] = ids[i];
            e[4] = LD_STATE_OPTIMAL;
            stq_le_p(e + 8, fusion_ld_sectors(s, ids[i]));
        }
        fusion_dcmd_write(s, &d, list, 8 + 256 * 16);
        return MFI_STAT_OK;
    }
    case DCMD_PD_LIST_QUERY: {
        /* {u32 size, u32 count, 24-byte entries}; only system PDs */
        g_autofree uint8_t *list = g_malloc0(8 + MAX_SYSTEM_PDS * 24);
        n = fusion_list_devices(s, 1, ids, MAX_SYSTEM_PDS);
        stl_le_p(list, 8 + n * 24);
        stl_le_p(list + 4, n);
        for (unsigned i = 0; i < n; i++) {
            uint8_t *e = list + 8 + i * 24;
            stw_le_p(e + 0, ids[i]);
            stw_le_p(e + 2, 0xFFFF);
            e[5] = ids[i];
            e[6] = TYPE_DISK;
            e[7] = 1;
            stq_le_p(e + 8, 0x5000C50000000000ULL | ids[i]);
        }
        fusion_dcmd_write(s, &d, list, 8 + n * 24);
        return MFI_STAT_OK;
    }
    case DCMD_PD_GET_INFO: {
        uint16_t id = lduw_le_p(mbox);
        uint8_t info[512] = { 0 };
        if (id >= MAX_SYSTEM_PDS || !fusion_find_device(s, 1, id, 0)) {
            return MFI_STAT_DEVICE_NOT_FOUND;
        }
        stw_le_p(info + 0, id);
        stw_le_p(info + 0xBC, 0x2000); /* interface type 2: SAS */
        fusion_dcmd_write(s, &d, info, sizeof(info));
        return MFI_STAT_OK;
    }
    case DCMD_CTRL_EVENT_GET_INFO: {
        uint8_t info[20] = { 0 };
        stl_le_p(info + 0, s->event_seq);  /* newest */
        stl_le_p(info + 16, s->event_seq); /* boot */
        fusion_dcmd_write(s, &d, info, sizeof(info));
        return MFI_STAT_OK;
    }
    case DCMD_CTRL_EVENT_WAIT:
        /* no events are ever generated: the wait stays pending */
        return -1;
    case DCMD_CTRL_CACHE_FLUSH:
    case DCMD_CTRL_SHUTDOWN:
    case DCMD_HIBERNATE_SHUTDOWN:
        return MFI_STAT_OK;
    default:
        FDBG(s, "DCMD 0x%08x refused", opcode);
        return MFI_STAT_INVALID_DCMD;
    }
}

static void fusion_mfi_status(FusionState *s, FusionCmd *cmd, uint8_t status)
{
    pci_dma_write(PCI_DEVICE(s), cmd->mfi_pa + MFI_STATUS, &status, 1);
}

static void fusion_abort(FusionState *s, FusionCmd *cmd, const uint8_t *mfi)
{
    hwaddr victim_pa = ldq_le_p(mfi + MFI_ABORT_FRAME_ADDR);

    for (unsigned i = 1; i <= s->max_smid; i++) {
        FusionCmd *v = &s->cmds[i];
        if (v->kind == CMD_PENDED && v->is_mfi && v->mfi_pa == victim_pa) {
            FDBG(s, "abort of pended DCMD 0x%08x (smid %u)", v->opcode,
                 v->smid);
            fusion_mfi_status(s, v, MFI_STAT_NOT_FOUND);
            fusion_finish(s, v);
            break;
        }
    }
    fusion_mfi_status(s, cmd, MFI_STAT_OK);
}

static void fusion_handle_mfi(FusionState *s, FusionCmd *cmd,
                              const uint8_t *frame)
{
    uint8_t mfi[MFI_FRAME_BYTES];
    const uint8_t *chain = frame + FR_SGL;
    int status;

    cmd->is_mfi = true;
    if (!(chain[15] & SGE_CHAIN)) {
        GUEST_ERROR("smid %u: MFI pass-through without a chain element",
                    cmd->smid);
    }
    cmd->mfi_pa = ldq_le_p(chain);
    pci_dma_read(PCI_DEVICE(s), cmd->mfi_pa, mfi, sizeof(mfi));
    switch (mfi[MFI_CMD]) {
    case MFI_CMD_DCMD:
        status = fusion_dcmd(s, cmd, mfi);
        if (status < 0) {
            cmd->kind = CMD_PENDED;
            return;
        }
        break;
    case MFI_CMD_ABORT:
        fusion_abort(s, cmd, mfi);
        fusion_finish(s, cmd);
        return;
    default:
        GUEST_ERROR("smid %u: MFI command 0x%x not supported", cmd->smid,
                    mfi[MFI_CMD]);
        status = MFI_STAT_INVALID_CMD;
        break;
    }
    fusion_mfi_status(s, cmd, status);
    fusion_finish(s, cmd);
}

/* Task management: abort task (1), target reset (3), LUN reset (5). */
static void fusion_handle_tm(FusionState *s, FusionCmd *cmd,
                             const uint8_t *frame)
{
    PCIDevice *pci = PCI_DEVICE(s);
    uint8_t type = frame[FR_TM_TASK_TYPE];
    uint16_t task = lduw_le_p(frame + FR_TM_TASK_MID);
    uint16_t handle = lduw_le_p(frame + FR_DEV_HANDLE);
    uint32_t terminated = 0;
    uint8_t reply[28] = { 0 };

    for (unsigned i = 1; i <= s->max_smid; i++) {
        FusionCmd *v = &s->cmds[i];
        bool hit;
        if (v == cmd || v->is_mfi ||
            (v->kind != CMD_SCSI && v->kind != CMD_HELD)) {
            continue;
        }
        hit = type == 1 ? v->smid == task : v->target == handle;
        if (!hit) {
            continue;
        }
        if (v->kind == CMD_SCSI) {
            fusion_cancel_requests(v);
        }
        /* MPT answers a terminated I/O before the TM itself */
        fusion_finish_io(s, v, MFI_STAT_SCSI_IO_FAILED, 0);
        terminated++;
    }
    FDBG(s, "TM type %u task %u handle %u: %u terminated", type, task, handle,
         terminated);
    reply[0x03] = FUNC_TASK_MGMT;
    reply[0x05] = type;
    stl_le_p(reply + 0x14, terminated);
    pci_dma_write(pci, cmd->frame_pa + FR_TM_REPLY, reply, sizeof(reply));
    fusion_finish(s, cmd);
}

/* ------------------------------------------------------------------ intake */

static void fusion_request(FusionState *s, uint64_t desc)
{
    PCIDevice *pci = PCI_DEVICE(s);
    uint8_t type = (desc >> 1) & 0x7;
    uint8_t queue = (desc >> 8) & 0xFF;
    uint16_t smid = (desc >> 16) & 0xFFFF;
    uint8_t frame[FRAME_SIZE];

    if (s->stopped) {
        return;
    }
    if (type == DESC_MFA) {
        fusion_ioc_init(s, desc & ~0xFFULL);
        return;
    }
    if (s->state == STATE_FAULT) {
        /* a driver learns of a fault only by polling SP0: not its mistake */
        FDBG(s, "request 0x%016" PRIx64 " dropped: firmware in FAULT", desc);
        return;
    }
    if (s->state != STATE_OPERATIONAL) {
        GUEST_ERROR("request descriptor 0x%016" PRIx64 " in state 0x%x", desc,
                    s->state);
        return;
    }
    if (smid == 0 || smid > s->max_smid) {
        GUEST_ERROR("request with SMID %u (max %u)", smid, s->max_smid);
        return;
    }
    FusionCmd *cmd = &s->cmds[smid];
    if (cmd->kind != CMD_FREE) {
        GUEST_ERROR("SMID %u posted while still outstanding", smid);
        return;
    }
    if (queue >= s->queues) {
        GUEST_ERROR("SMID %u asks for reply queue %u of %u", smid, queue,
                    s->queues);
        queue = 0;
    }
    memset(cmd, 0, sizeof(*cmd));
    cmd->s = s;
    cmd->smid = smid;
    cmd->queue = queue;
    cmd->frame_pa = s->frame_base + (hwaddr)smid * FRAME_SIZE;
    cmd->kind = CMD_HELD; /* busy until a handler says otherwise */
    pci_dma_read(pci, cmd->frame_pa, frame, sizeof(frame));
    uint8_t function = frame[FR_FUNCTION];
    FDBG(s, "request type %u queue %u smid %u function 0x%02x", type, queue,
         smid, function);

    switch (function) {
    case FUNC_MFI_PASSTHRU:
        fusion_handle_mfi(s, cmd, frame);
        break;
    case FUNC_LD_IO:
    case FUNC_SCSI_IO:
        fusion_handle_io(s, cmd, frame, function);
        break;
    case FUNC_TASK_MGMT:
        fusion_handle_tm(s, cmd, frame);
        break;
    default:
        GUEST_ERROR("SMID %u: unknown function 0x%02x (descriptor type %u)",
                    smid, function, type);
        fusion_finish_io(s, cmd, MFI_STAT_INVALID_CMD, 0);
        break;
    }
}

/* ------------------------------------------------------------------ registers */

static void fusion_host_index(FusionState *s, unsigned queue, uint32_t index)
{
    if (queue >= s->queues || (index & 0xFFFFFF) >= s->reply_depth) {
        GUEST_ERROR("host index 0x%x for queue %u (%u queues, depth %u)",
                    index, queue, s->queues, s->reply_depth);
        return;
    }
    s->host_index[queue] = index & 0xFFFFFF;
    fusion_update_intx(s);
}

static void fusion_diag_reset(FusionState *s)
{
    FDBG(s, "diag reset");
    s->stopped = false;
    s->diag_write_enable = false;
    s->diag_seq_pos = 0;
    fusion_to_ready(s);
}

static const uint8_t diag_keys[] = { 0x0, 0xF, 0x4, 0xB, 0x2, 0x7, 0xD };

static void fusion_diag_sequence(FusionState *s, uint32_t val)
{
    val &= 0xF;
    if (val == diag_keys[s->diag_seq_pos]) {
        s->diag_seq_pos++;
    } else {
        s->diag_seq_pos = val == diag_keys[0] ? 1 : 0;
        s->diag_write_enable = false;
    }
    if (s->diag_seq_pos == ARRAY_SIZE(diag_keys)) {
        s->diag_write_enable = true;
        s->diag_seq_pos = 0;
    }
}

static uint64_t fusion_reg_read(void *opaque, hwaddr addr, unsigned size)
{
    FusionState *s = opaque;
    uint64_t v = 0;

    switch (addr) {
    case REG_DOORBELL:
        v = 0; /* handshakes complete at once: bit 0 never reads busy */
        break;
    case REG_HOST_DIAG:
        v = s->diag_write_enable ? DIAG_WRITE_ENABLE : 0;
        break;
    case REG_OUTBOUND_STATUS:
        v = (s->state == STATE_OPERATIONAL && fusion_any_pending(s))
                ? INTR_REPLY : 0;
        break;
    case REG_OUTBOUND_MASK:
        v = s->intr_mask;
        break;
    case REG_SCRATCH0:
        v = fusion_sp0(s);
        break;
    case REG_SCRATCH1:
        v = fusion_sp1(s);
        break;
    case REG_SCRATCH2:
        /* Ventura/Aero: the dynamic RAID map's size, in 64 KiB units */
        v = s->raid != RAID_NONE ? DYN_MAP_UNITS << SP2_MAP_UNITS_SHIFT : 0;
        break;
    case REG_SCRATCH3:
        v = 0;
        break;
    default:
        break;
    }
    if (size == 8 && addr == REG_SCRATCH0) {
        v |= (uint64_t)fusion_sp1(s) << 32;
    }
    return v;
}

static void fusion_reg_write(void *opaque, hwaddr addr, uint64_t val,
                             unsigned size)
{
    FusionState *s = opaque;

    if (size == 8 && addr == REG_REQUEST_LOW) {
        fusion_request(s, val);
        return;
    }
    switch (addr) {
    case REG_DOORBELL:
        FDBG(s, "doorbell 0x%" PRIx64, val);
        if (val == DOORBELL_STOP_ADAPTER) {
            fusion_drop_all(s);
            s->stopped = true;
            s->state = STATE_FAULT;
            s->fault_word = STATE_FAULT << 28;
        } else if ((val & DOORBELL_RESET_FLAGS) == DOORBELL_RESET_FLAGS &&
                   s->state == STATE_OPERATIONAL) {
            fusion_to_ready(s);
        }
        /* 0x18 / 0x10 handshakes: the firmware never waits for them */
        break;
    case REG_DIAG_SEQUENCE:
        fusion_diag_sequence(s, val);
        break;
    case REG_HOST_DIAG:
        if (s->diag_write_enable && (val & DIAG_RESET_ADAPTER)) {
            fusion_diag_reset(s);
        }
        break;
    case REG_OUTBOUND_STATUS:
        break; /* the level follows the host indices, not this write */
    case REG_OUTBOUND_MASK: {
        bool was_enabled = fusion_intr_enabled(s);
        s->intr_mask = val;
        if (!was_enabled && fusion_intr_enabled(s) &&
            s->state == STATE_OPERATIONAL) {
            /* replies posted while masked are signalled now */
            for (unsigned q = 0; q < s->queues; q++) {
                if (fusion_queue_pending(s, q)) {
                    fusion_notify(s, q);
                }
            }
        }
        fusion_update_intx(s);
        break;
    }
    case REG_REPLY_HOST_INDEX:
        if (s->combined) {
            GUEST_ERROR("0x6C written in combined reply mode");
        }
        fusion_host_index(s, (val >> 24) & 0x7F, val & 0xFFFFFF);
        break;
    case REG_REQUEST_LOW:
        s->request_low = val;
        break;
    case REG_REQUEST_HIGH:
        fusion_request(s, ((uint64_t)val << 32) | s->request_low);
        break;
    case REG_REQUEST_ATOMIC:
        if (s->gen_id != GEN_AERO) {
            GUEST_ERROR("atomic descriptor port used on a non-Aero card");
            break;
        }
        fusion_request(s, (uint32_t)val);
        break;
    default:
        if (addr >= REG_COMBINED_HOST_INDEX &&
            addr < REG_COMBINED_HOST_INDEX + 16 * 0x10 &&
            (addr - REG_COMBINED_HOST_INDEX) % 0x10 == 0) {
            unsigned group = (addr - REG_COMBINED_HOST_INDEX) / 0x10;
            if (!s->combined) {
                GUEST_ERROR("0x%" HWADDR_PRIx " written outside combined "
                            "reply mode", addr);
            }
            fusion_host_index(s, group * 8 + ((val >> 24) & 7),
                              val & 0xFFFFFF);
            break;
        }
        qemu_log_mask(LOG_UNIMP, "megasas-fusion: write 0x%" PRIx64
                      " to register 0x%" HWADDR_PRIx "\n", val, addr);
        break;
    }
}

static const MemoryRegionOps fusion_reg_ops = {
    .read = fusion_reg_read,
    .write = fusion_reg_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    .valid = { .min_access_size = 4, .max_access_size = 8 },
    .impl = { .min_access_size = 4, .max_access_size = 8 },
};

/* ------------------------------------------------------------------ QOM */

static void fusion_inject_fault(Object *obj, bool value, Error **errp)
{
    FusionState *s = MEGASAS_FUSION(obj);
    if (value && s->state == STATE_OPERATIONAL) {
        fusion_enter_fault(s, "inject-fault");
    }
}

/*
 * A configuration change (`qom-set ... change-config true`): the RAID LD's
 * sequence number moves on, FastPath requests routed with the old map are
 * refused (0x67) from now on, and every pended map sync is answered, so a
 * driver that keeps one re-reads the map.
 */
static void fusion_change_config(Object *obj, bool value, Error **errp)
{
    FusionState *s = MEGASAS_FUSION(obj);
    unsigned answered = 0;

    if (!value) {
        return;
    }
    if (s->raid == RAID_NONE) {
        error_setg(errp, "megasas-fusion: change-config needs raid=raid0|raid1");
        return;
    }
    s->raid_seq++;
    s->config_changes++;
    for (unsigned i = 1; i <= s->max_smid; i++) {
        FusionCmd *v = &s->cmds[i];
        if (v->kind == CMD_PENDED && v->is_mfi &&
            v->opcode == DCMD_LD_MAP_GET_INFO) {
            /* the new map goes into the sync's own buffer */
            uint8_t mfi[MFI_FRAME_BYTES];
            DcmdData d;
            int status = MFI_STAT_INVALID_PARAMETER;
            pci_dma_read(PCI_DEVICE(s), v->mfi_pa, mfi, sizeof(mfi));
            if (fusion_dcmd_sgl(mfi, &d)) {
                status = fusion_write_dynamic_map(s, &d);
            }
            fusion_mfi_status(s, v, status);
            fusion_finish(s, v);
            answered++;
        }
    }
    fprintf(stderr, "megasas-fusion: RAID configuration changed (sequence "
            "number 0x%x) after %" PRIu64 " FastPath I/Os; %u pended map "
            "sync(s) answered\n", s->raid_seq, s->fastpath_ios, answered);
}

static bool fusion_get_change_config(Object *obj, Error **errp)
{
    return MEGASAS_FUSION(obj)->config_changes > 0;
}

static bool fusion_get_fault(Object *obj, Error **errp)
{
    return MEGASAS_FUSION(obj)->state == STATE_FAULT;
}

static void fusion_reset(DeviceState *dev)
{
    FusionState *s = MEGASAS_FUSION(dev);
    fusion_drop_all(s);
    s->stopped = false;
    s->intr_mask = 0xFFFFFFFF;
    s->diag_seq_pos = 0;
    s->diag_write_enable = false;
    fusion_to_ready(s);
}

/* At QEMU's exit: how the RAID LD's I/O went (the FastPath count shows a
 * driver that used the map). */
static void fusion_report_counts(Notifier *n, void *data)
{
    FusionState *s = container_of(n, FusionState, exit_notifier);
    fprintf(stderr, "megasas-fusion: RAID LD I/Os: FastPath %" PRIu64
            ", LD path %" PRIu64 ", stale sequence numbers refused %" PRIu64
            "\n", s->fastpath_ios, s->ld_path_ios, s->stale_seq_refused);
}

static void fusion_get_u64_counter(Object *obj, Visitor *v, const char *name,
                                   void *opaque, Error **errp)
{
    uint64_t value = *(uint64_t *)opaque;
    visit_type_uint64(v, name, &value, errp);
}

static void fusion_realize(PCIDevice *pci, Error **errp)
{
    FusionState *s = MEGASAS_FUSION(pci);
    unsigned i;

    const char *wanted = s->generation_name ? s->generation_name : "invader";
    for (i = 0; i < ARRAY_SIZE(generations); i++) {
        if (!g_strcmp0(wanted, generations[i].name)) {
            break;
        }
    }
    if (i == ARRAY_SIZE(generations)) {
        error_setg(errp, "megasas-fusion: generation '%s' is not one of "
                   "invader, ventura, aero", wanted);
        return;
    }
    s->gen_id = i;
    s->gen = &generations[i];
    if (s->fw_cmds < 32 || s->fw_cmds > MAX_FW_CMDS) {
        error_setg(errp, "megasas-fusion: fw_cmds %u outside 32..%u",
                   s->fw_cmds, MAX_FW_CMDS);
        return;
    }
    if (s->msix_vectors < 1 || s->msix_vectors > MAX_QUEUES) {
        error_setg(errp, "megasas-fusion: msix_vectors %u outside 1..%u",
                   s->msix_vectors, MAX_QUEUES);
        return;
    }
    if (!s->raid_name || !g_strcmp0(s->raid_name, "off")) {
        s->raid = RAID_NONE;
    } else if (!g_strcmp0(s->raid_name, "raid0")) {
        s->raid = RAID_0;
    } else if (!g_strcmp0(s->raid_name, "raid1")) {
        s->raid = RAID_1;
    } else {
        error_setg(errp, "megasas-fusion: raid '%s' is not one of off, raid0, "
                   "raid1", s->raid_name);
        return;
    }
    if (s->raid != RAID_NONE && s->gen_id == GEN_INVADER) {
        error_setg(errp, "megasas-fusion: raid=%s needs generation ventura or "
                   "aero (the dynamic RAID map)", s->raid_name);
        return;
    }
    if (s->strip_kib < 8 || s->strip_kib > 1024 ||
        (s->strip_kib & (s->strip_kib - 1))) {
        error_setg(errp, "megasas-fusion: strip_kb %u is not a power of two "
                   "in 8..1024", s->strip_kib);
        return;
    }

    pci_config_set_device_id(pci->config, s->gen->device_id);
    pci_set_word(pci->config + PCI_SUBSYSTEM_VENDOR_ID, 0x1000);
    pci_set_word(pci->config + PCI_SUBSYSTEM_ID, s->gen->subsystem_id);
    pci->config[PCI_INTERRUPT_PIN] = 0x01;

    memory_region_init(&s->bar, OBJECT(s), "megasas-fusion-bar", 0x10000);
    memory_region_init_io(&s->regs, OBJECT(s), &fusion_reg_ops, s,
                          "megasas-fusion-regs", REG_WINDOW);
    memory_region_add_subregion(&s->bar, 0, &s->regs);
    memory_region_init_io(&s->io, OBJECT(s), &fusion_reg_ops, s,
                          "megasas-fusion-io", 256);

    if (pci_bus_is_express(pci_get_bus(pci))) {
        pcie_endpoint_cap_init(pci, 0xa0);
    }
    if (s->msix) {
        if (msix_init(pci, s->msix_vectors, &s->bar, s->gen->register_bar,
                      0x8000, &s->bar, s->gen->register_bar, 0xC000, 0,
                      errp)) {
            return;
        }
        for (i = 0; i < s->msix_vectors; i++) {
            msix_vector_use(pci, i);
        }
    }
    pci_register_bar(pci, s->gen->io_bar, PCI_BASE_ADDRESS_SPACE_IO, &s->io);
    pci_register_bar(pci, s->gen->register_bar,
                     PCI_BASE_ADDRESS_SPACE_MEMORY |
                     PCI_BASE_ADDRESS_MEM_TYPE_64, &s->bar);

    for (i = 0; i <= MAX_SMID; i++) {
        s->cmds[i].s = s;
        s->cmds[i].smid = i;
    }
    s->event_seq = 1;
    s->intr_mask = 0xFFFFFFFF;
    s->state = STATE_READY;
    s->raid_seq = RAID_LD_SEQ;
    if (s->raid != RAID_NONE) {
        s->exit_notifier.notify = fusion_report_counts;
        qemu_add_exit_notifier(&s->exit_notifier);
    }
    scsi_bus_init(&s->bus, sizeof(s->bus), DEVICE(pci), &fusion_scsi_info);
}

static void fusion_exit(PCIDevice *pci)
{
    FusionState *s = MEGASAS_FUSION(pci);
    fusion_drop_all(s);
    if (s->msix) {
        msix_uninit(pci, &s->bar, &s->bar);
    }
}

static Property fusion_properties[] = {
    DEFINE_PROP_STRING("generation", FusionState, generation_name),
    DEFINE_PROP_UINT32("fw_cmds", FusionState, fw_cmds, DEFAULT_FW_CMDS),
    DEFINE_PROP_UINT32("msix_vectors", FusionState, msix_vectors, MAX_QUEUES),
    DEFINE_PROP_BOOL("msix", FusionState, msix, true),
    DEFINE_PROP_UINT32("fault_after", FusionState, fault_after, 0),
    DEFINE_PROP_UINT32("hold_after", FusionState, hold_after, 0),
    DEFINE_PROP_BOOL("rdpq", FusionState, rdpq, false),
    DEFINE_PROP_BOOL("debug", FusionState, debug, false),
    DEFINE_PROP_STRING("raid", FusionState, raid_name),
    DEFINE_PROP_UINT32("strip_kb", FusionState, strip_kib, 64),
    DEFINE_PROP_END_OF_LIST(),
};

static const VMStateDescription fusion_vmstate = {
    .name = TYPE_MEGASAS_FUSION,
    .unmigratable = 1,
};

static void fusion_instance_init(Object *obj)
{
    FusionState *s = MEGASAS_FUSION(obj);
    object_property_add_bool(obj, "inject-fault", fusion_get_fault,
                             fusion_inject_fault);
    object_property_add_bool(obj, "change-config", fusion_get_change_config,
                             fusion_change_config);
    object_property_add(obj, "fastpath-ios", "uint64", fusion_get_u64_counter,
                        NULL, NULL, &s->fastpath_ios);
    object_property_add(obj, "ld-path-ios", "uint64", fusion_get_u64_counter,
                        NULL, NULL, &s->ld_path_ios);
}

static void fusion_class_init(ObjectClass *oc, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(oc);
    PCIDeviceClass *pc = PCI_DEVICE_CLASS(oc);

    pc->realize = fusion_realize;
    pc->exit = fusion_exit;
    pc->vendor_id = 0x1000;
    pc->device_id = 0x005D;
    pc->class_id = PCI_CLASS_STORAGE_RAID;
    dc->reset = fusion_reset;
    dc->vmsd = &fusion_vmstate;
    dc->desc = "MegaRAID Fusion (Invader/Ventura/Aero) model";
    device_class_set_props(dc, fusion_properties);
    set_bit(DEVICE_CATEGORY_STORAGE, dc->categories);
}

static const TypeInfo fusion_type_info = {
    .name = TYPE_MEGASAS_FUSION,
    .parent = TYPE_PCI_DEVICE,
    .instance_size = sizeof(FusionState),
    .instance_init = fusion_instance_init,
    .class_init = fusion_class_init,
    .interfaces = (InterfaceInfo[]) {
        /* like megasas-gen2: a PCIe endpoint on q35, plain PCI on pc */
        { INTERFACE_PCIE_DEVICE },
        { },
    },
};

static void fusion_register_types(void)
{
    type_register_static(&fusion_type_info);
}

type_init(fusion_register_types)
