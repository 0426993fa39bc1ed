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
#include "qemu/timer.h"

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
/* interrupt coalescing: the driver may name coalesced queue groups in IOC INIT */
#define SP1_INTR_COALESCING (1u << 26)

/* MFI INIT frame: one bit per group of 8 reply queues whose interrupts are coalesced */
#define INIT_REPLYQUEUE_MASK 0x12
#define COALESCE_GROUP 8
/*
 * A coalesced queue's interrupt is raised once this many replies are waiting
 * or after COALESCE_NS, whichever comes first (real firmware's values are its
 * own; these keep a lone reply's latency short).
 */
#define COALESCE_REPLIES 8
#define COALESCE_NS (100 * 1000)

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
#define DCMD_SYSTEM_PD_MAP_GET_INFO 0x0200E102

/* sizes of the replies we build */
#define CTRL_INFO_BYTES 0x950
#define LEGACY_MAP_HEADER_BYTES 0x28A8
#define LEGACY_MAP_BYTES 0x2A0A8
#define MAP_TARGET_TO_LD 0x20
#define MAP_DEV_HANDLES 0x20A8
/*
 * The legacy 64-LD map (MR_FW_RAID_MAP_ALL, Invader and Fury): totalSize @0,
 * ldCount (u32) @0x18, target-to-LD (u8, 64 LDs + 64 views) @0x20, the
 * FastPath PD I/O timeout @0xA0, 128 arrays @0xA8, 256 device handles
 * @0x20A8, then one LD span map per LD; totalSize = header + LDs x span map.
 */
#define MAP_ARRAYS 0xA8
#define MAP_FP_TIMEOUT 0xA0
#define MAP_LD_COUNT 0x18
/*
 * The extended 256-LD map (MR_FW_RAID_MAP_EXT, ext_lds=on and a driver that
 * sets max_255lds in IOC INIT): reserved @0, the FastPath PD I/O timeout
 * @0x18, LD/array/span counts (u16) @0x20/0x22/0x24, 256 device handles
 * @0x28, target-to-LD (u8, 256) @0x828, 256 arrays @0x928, 256 LD span maps
 * @0x4928. The driver, not the firmware, knows its size.
 */
#define EXT_MAP_BYTES 0xA2928
#define EXT_FP_TIMEOUT 0x18
#define EXT_LD_COUNT 0x20
#define EXT_DEV_HANDLES 0x28
#define EXT_TARGET_TO_LD 0x828
#define EXT_ARRAYS 0x928
#define EXT_SPANS 0x4928
/* CTRL_GET_INFO adapterOperations3 bit 5: supportMaxExtLDs (256 LDs) */
#define CI_OPS3_MAX_EXT_LDS (1u << 5)
/* MFI INIT frame driver capabilities (@0x04) bit 3: support_max_255lds */
#define INIT_CAP_MAX_255LDS (1u << 3)
#define MAX_LDS 64
#define MAX_SYSTEM_PDS 256

/*
 * The RAID logical drive (property raid=raid0|raid1): target 0, striped or
 * mirrored over the scsi-hd disks on channel 2 (PD id = scsi-id). Described
 * to the driver by a dynamic RAID map on Ventura/Aero (SP2 bits 24:16 give
 * its size in 64 KiB units), the format Linux expects once SP2 announces it;
 * by the legacy 64-LD map on Invader/Fury, or the extended 256-LD map there
 * when the controller offers 256 LDs and the driver takes them.
 */
#define RAID_CHANNEL 2
#define RAID_LD_TARGET 0
#define RAID_MAX_ARMS 32
#define RAID_LD_SEQ 0x0101         /* the LD's first configuration sequence number */
/*
 * The JBOD sequence map (SYSTEM_PD_MAP_GET_INFO): {u32 size, u32 count} and
 * one 8-byte {u16 seqNum, u16 devHandle, u8 capability, u8 reserved, u16
 * pd_target_id} per device id. A request by it names the JBOD's device
 * handle and, in the RAID context, device id + 255 and the map's seqNum.
 */
#define JBOD_MAP_BYTES (8 + MAX_SYSTEM_PDS * 8)
#define JBOD_SEQ_FIRST 0x0201
#define JBOD_SEQ_TARGET_OFFSET (MAX_SYSTEM_PDS - 1)
/* CTRL_GET_INFO adapterOperations3 (0x7E8) bit 24: useSeqNumJbodFP */
#define CI_ADAPTER_OPS3 0x7E8
#define CI_OPS3_JBOD_SEQ_MAP (1u << 24)
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
#define CAP_FP_CACHE_BYPASS (1u << 29)
/* G35 RAID context: routing flags (SLD bit 1) and the raid_flags IO sub-type
 * (high nibble) a FastPath write past the controller cache carries */
#define FR_RAID_ROUTING 0x64
#define ROUTING_SLD (1u << 1)
#define RAID_SUBTYPE_CACHE_BYPASS 6
/* raid_flags IO sub-type of a large RAID-1 LD-path write on a controller whose
 * PCIe link Linux judges too slow for FastPath pairs, and the size above
 * which a RAID-1 write is large (Linux's MR_LARGE_IO_MIN_SIZE) */
#define RAID_SUBTYPE_LDIO_BW_LIMIT 7
#define RAID1_LARGE_WRITE_BYTES (32 * 1024)
/* RAID context (frame + 0x60) fields checked on FastPath */
#define FR_RAID_SPAN_ARM 0x79
#define FR_RAID_SEQ_NUM 0x7A
/* G35 RAID context flow-specific u16: a RAID-1 FastPath write's peer SMID */
#define FR_RAID_PEER_SMID 0x74
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
    GEN_FURY,
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
    [GEN_FURY] = { "fury", 0x005F, 0x9341, 1, 0,
                   "baremq Fusion Fury (SAS3008)", 8, 8 },
    [GEN_VENTURA] = { "ventura", 0x0016, 0x9460, 0, 2,
                      "baremq Fusion Ventura (SAS3516)", 16, 16 },
    [GEN_AERO] = { "aero", 0x10E2, 0x9560, 0, 2,
                   "baremq Fusion Aero (SAS3916)", 16, 16 },
};

/* one half of a RAID-1 FastPath write, as its peer must mirror it */
typedef struct Raid1Half {
    bool waiting;
    uint16_t smid;
    uint8_t arm;
    uint64_t lba;
    uint32_t count;
} Raid1Half;

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
    bool coalescing;
    bool jbod_map;
    bool fp_cache_bypass;
    bool ext_lds;             /* offer 256 LDs (the extended map) */
    bool drv_max_255lds;      /* IOC INIT: the driver takes the extended map */
    bool map_format_reported; /* the RAID map's format told on stderr */
    uint32_t link_gts;        /* trained link speed, GT/s (0: the generation's) */
    bool debug;
    char *raid_name;
    uint32_t strip_kib;
    RaidLevel raid;
    bool raid_reported;
    uint64_t fastpath_ios;
    uint64_t ld_path_ios;
    uint64_t stale_seq_refused;
    uint16_t raid_seq;        /* the LD's sequence number in the map */
    uint16_t jbod_seq;        /* every JBOD's sequence number in the JBOD map */
    uint64_t jbod_seq_ios;    /* JBOD requests served by the sequence map */
    uint64_t jbod_raid_map_ios; /* JBOD requests served by the RAID map's handle */
    uint64_t jbod_stale_refused;
    uint32_t config_changes;  /* change-config events so far */
    uint64_t raid1_write_pairs; /* RAID-1 FastPath writes, both halves seen */
    uint64_t cache_bypass_writes; /* FastPath writes marked SLD + CACHE_BYPASS */
    bool pcie_bw_limited;     /* Linux judges the link to limit RAID-1 writes */
    uint64_t ldio_bw_limit_writes; /* LD-path writes marked LDIO_BW_LIMIT */
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
    uint16_t coalesce_mask;   /* IOC INIT's replyqueue_mask */
    bool coalesce_announced;

    /* replies waiting for a coalesced queue's interrupt */
    uint32_t coalesce_waiting[MAX_QUEUES];
    QEMUTimer *coalesce_timer;
    uint64_t coalesced_replies;
    uint64_t coalesced_irqs;
    uint64_t other_replies;

    uint32_t producer[MAX_QUEUES];
    uint32_t host_index[MAX_QUEUES];

    uint32_t event_seq;
    FusionCmd cmds[MAX_SMID + 1];
    /*
     * RAID-1 FastPath write halves waiting for their peer, indexed by the
     * peer's SMID: the first half may complete before the second is posted.
     */
    Raid1Half r1_expected[MAX_SMID + 1];
    bool intake_was_r1_half; /* the request being taken in was one */
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
           SP1_64BIT_DMA | (s->coalescing ? SP1_INTR_COALESCING : 0);
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

static bool fusion_queue_coalesced(FusionState *s, unsigned q)
{
    return (s->coalesce_mask >> (q / COALESCE_GROUP)) & 1;
}

/* A coalesced queue's interrupt, when replies are still waiting for it. */
static void fusion_coalesce_fire(FusionState *s, unsigned q)
{
    s->coalesce_waiting[q] = 0;
    if (fusion_queue_pending(s, q) && fusion_intr_enabled(s)) {
        s->coalesced_irqs++;
        fusion_notify(s, q);
    }
}

static void fusion_coalesce_timer(void *opaque)
{
    FusionState *s = opaque;
    for (unsigned q = 0; q < s->queues; q++) {
        if (s->coalesce_waiting[q]) {
            fusion_coalesce_fire(s, q);
        }
    }
}

/*
 * A reply was posted on queue q: its interrupt now, or, on a queue the driver
 * asked to coalesce, after COALESCE_REPLIES replies or COALESCE_NS.
 */
static void fusion_reply_notify(FusionState *s, unsigned q)
{
    if (!fusion_queue_coalesced(s, q) || !msix_enabled(PCI_DEVICE(s))) {
        s->other_replies++;
        fusion_notify(s, q);
        return;
    }
    s->coalesced_replies++;
    if (++s->coalesce_waiting[q] >= COALESCE_REPLIES) {
        fusion_coalesce_fire(s, q);
    } else if (!timer_pending(s->coalesce_timer)) {
        timer_mod(s->coalesce_timer,
                  qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) + COALESCE_NS);
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
    fusion_reply_notify(s, q);
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
    memset(s->r1_expected, 0, sizeof(s->r1_expected));
}

static void fusion_to_ready(FusionState *s)
{
    fusion_drop_all(s);
    s->state = STATE_READY;
    s->queues = 0;
    s->rdpq_mode = false;
    s->coalesce_mask = 0;
    memset(s->coalesce_waiting, 0, sizeof(s->coalesce_waiting));
    if (s->coalesce_timer) {
        timer_del(s->coalesce_timer);
    }
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
    uint16_t coalesce_mask = lduw_le_p(mfi + INIT_REPLYQUEUE_MASK);

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
    if (coalesce_mask && !s->coalescing) {
        GUEST_ERROR("IOC INIT: replyqueue_mask 0x%x but interrupt coalescing "
                    "is not advertised", coalesce_mask);
        goto out;
    }
    /* a coalesced group must be 8 reply queues the driver asked for */
    if (coalesce_mask >> (queues / COALESCE_GROUP)) {
        GUEST_ERROR("IOC INIT: replyqueue_mask 0x%x names a group of 8 beyond "
                    "the %u reply queues", coalesce_mask, queues);
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
    s->coalesce_mask = coalesce_mask;
    memset(s->coalesce_waiting, 0, sizeof(s->coalesce_waiting));
    memset(s->producer, 0, sizeof(s->producer));
    memset(s->host_index, 0, sizeof(s->host_index));
    s->drv_max_255lds = ldl_le_p(mfi + 0x04) & INIT_CAP_MAX_255LDS;
    s->state = STATE_OPERATIONAL;
    status = MFI_STAT_OK;
    FDBG(s, "IOC INIT ok: depth %u queues %u frames 0x%" HWADDR_PRIx
         " %s 0x%" HWADDR_PRIx " caps 0x%x replyqueue_mask 0x%x", depth,
         queues, frames, rdpq_mode ? "RDPQ array" : "replies", replies,
         ldl_le_p(mfi + 0x04), coalesce_mask);
    if (coalesce_mask && !s->coalesce_announced) {
        s->coalesce_announced = true;
        fprintf(stderr, "megasas-fusion: IOC INIT: %u reply queues, "
                "replyqueue_mask 0x%x: interrupts of queues 0-%u coalesced\n",
                queues, coalesce_mask,
                COALESCE_GROUP * (32 - __builtin_clz(coalesce_mask)) - 1);
    }
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

#include "megasas-fusion-raid.c.inc"
#include "megasas-fusion-dcmd.c.inc"

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

    s->intake_was_r1_half = false;
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
    if (!s->intake_was_r1_half && s->r1_expected[smid].waiting) {
        GUEST_ERROR("SMID %u is the peer of SMID %u's RAID-1 FastPath write "
                    "but came as function 0x%02x, not the mirror write",
                    smid, s->r1_expected[smid].smid, function);
        s->r1_expected[smid].waiting = false;
    }
    if (!s->intake_was_r1_half && smid >= s->fw_cmds) {
        GUEST_ERROR("SMID %u is above the firmware's %u commands: those are "
                    "for RAID-1 FastPath peer writes only", smid,
                    s->fw_cmds - 1);
    }
}

#include "megasas-fusion-regs.c.inc"
