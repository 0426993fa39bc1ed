//! A fake MFI controller over plain memory, modelled on what QEMU 7.2's `megasas` and
//! `megasas-gen2` do (`hw/scsi/megasas.c`), including the quirks the driver must
//! survive: the ring wraps at `fw_cmds` with no full check, masked mode does not advance the
//! producer, an all-ones OMSK resets the firmware, LD_LIST_QUERY returns LUNs, LD_GET_LIST rejects
//! buffers over 1032 bytes, zero-data SCSI commands need an SGE, the IQPH latch is cleared by every
//! post, and frames past the command limit come back BUSY.
//!
//! The fake keeps its own "physical" address space: every allocation from [`FakeDma`] gets a bus
//! address (below 4 GiB by default, or above with [`FakeConfig::phys_base`]) and every DMA the
//! device does is translated and bounds-checked against the allocations. A stray address is
//! recorded in [`FakeStats::dma_violations`] instead of touching memory, so a test can assert the
//! driver never pointed the device anywhere wrong.
//!
//! Injectable faults: BUSY replies, duplicate and invented reply contexts, a corrupt producer
//! index, per-LBA error statuses with sense, unit attentions, FAULT state, and a firmware stuck in
//! any state (which must time out, not hang: [`FakeDelay`] advances a virtual clock).
//!
//! Written from QEMU's behaviour, independently of the driver's constants, so
//! that a wrong offset in the driver shows up as a test failure rather than agreeing with itself.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

pub use devhal::fake::FakeDma;
use devhal::fake::{FakeMemory, le_u16, le_u32, le_u64, sgl_pieces};
use spin::Mutex;

use crate::{Delay, FwState, Mmio, Model, Segment};

/// One disk attached to the fake controller.
#[derive(Clone, Debug)]
pub struct FakeDiskSpec {
    /// SCSI id, which becomes the LD target id.
    pub scsi_id: u8,
    /// Size in bytes (a multiple of the block size).
    pub bytes: u64,
    /// Logical block size.
    pub block_size: u32,
}

/// When I/O completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionMode {
    /// Inside the doorbell write, like QEMU's DCMDs.
    Immediate,
    /// When the test calls [`FakeDevice::complete_pending`] (or the driver waits in [`FakeDelay`]),
    /// like QEMU's block I/O completing from its main loop.
    Deferred,
}

/// How the fake signals completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeIrq {
    /// MSI-X or MSI: one message per completion, OSTS reads 0.
    Msi,
    /// Level INTx with the doorbell counter, OSTS and ODCR0.
    Intx,
}

/// Construction parameters.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// Which model to imitate.
    pub model: Model,
    /// QEMU's `max_cmds` property (fw_cmds), capped at 2048.
    pub max_cmds: u16,
    /// QEMU's `max_sge` property: 80 or more gives 80, less gives 16.
    pub max_sge: u32,
    /// Whether the MSI-X capability exists (status bit 26).
    pub msix: bool,
    /// Disks in creation order.
    pub disks: Vec<FakeDiskSpec>,
    /// When I/O completes.
    pub completion: CompletionMode,
    /// States shown before READY, each for the given virtual microseconds (`u64::MAX`: forever).
    /// WAIT_HANDSHAKE and BOOT_MSG_PENDING also wait for their doorbell bit.
    pub boot: Vec<(FwState, u64)>,
    /// Bus address of the first DMA allocation.
    pub phys_base: u64,
    /// DCMD opcodes answered with status 0x01 (INVALID_CMD), as firmware without them would.
    pub refused_dcmds: Vec<u32>,
    /// QEMU's `use_jbod=on`: the disks are system PDs. LD_GET_LIST is empty, LD SCSI
    /// pass-through answers DEVICE_NOT_FOUND, PD_LIST_QUERY lists the disks for every flag.
    pub use_jbod: bool,
}

impl FakeConfig {
    /// QEMU defaults for `model` with one 64 MiB, 512-byte-block disk at SCSI id 0.
    pub fn new(model: Model) -> Self {
        Self {
            model,
            max_cmds: match model {
                Model::Sas1078 => 1000,
                Model::Sas2108Gen2 => 1008,
            },
            max_sge: 80,
            msix: true,
            disks: vec![FakeDiskSpec {
                scsi_id: 0,
                bytes: 64 << 20,
                block_size: 512,
            }],
            completion: CompletionMode::Immediate,
            boot: Vec::new(),
            phys_base: 0x0010_0000,
            use_jbod: false,
            refused_dcmds: Vec::new(),
        }
    }
}

/// Counters and findings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeStats {
    /// Frames posted through IQP or IQPL.
    pub frames_posted: u64,
    /// Frames posted with a non-zero latched high word.
    pub high_posts: u64,
    /// Completions written to the reply ring (duplicates and injections included).
    pub replies: u64,
    /// MSI/MSI-X messages sent.
    pub msi_messages: u64,
    /// INTx line assertions (0 -> 1 transitions of the doorbell counter).
    pub intx_raised: u64,
    /// BUSY replies (out of frame slots, or injected).
    pub busy_replies: u64,
    /// Highest number of outstanding I/O frames seen.
    pub max_outstanding: usize,
    /// SYNCHRONIZE CACHE commands executed.
    pub sync_caches: u64,
    /// Soft resets.
    pub resets: u64,
    /// ABORT frames received.
    pub aborts: u64,
    /// ABORT frames that found their command and cancelled it.
    pub aborts_done: u64,
    /// Device writes into a buffer the test had retired (its request already ended).
    pub writes_after_end: Vec<String>,
    /// INIT frames that configured a queue.
    pub inits: u64,
    /// DCMD opcodes received, in order, with mailbox byte 0.
    pub dcmds: Vec<(u32, u8)>,
    /// DMA the device was asked to do outside any allocation, and other protocol violations.
    pub dma_violations: Vec<String>,
}

/// A status to return for I/O that touches some blocks.
#[derive(Clone, Debug)]
pub struct ErrorRule {
    /// Target id.
    pub target: u8,
    /// First block of the failing range.
    pub lba: u64,
    /// Number of blocks in the range.
    pub blocks: u64,
    /// MFI status to return.
    pub mfi_status: u8,
    /// SCSI status to return.
    pub scsi_status: u8,
    /// Sense bytes to return (empty for none).
    pub sense: Vec<u8>,
    /// Keep failing (otherwise the rule fires once).
    pub persistent: bool,
}

impl ErrorRule {
    /// What QEMU returns when the backing store fails a request with EIO (blkdebug): CHECK
    /// CONDITION, ABORTED COMMAND, 00/06.
    pub fn host_eio(target: u8, lba: u64) -> Self {
        Self {
            target,
            lba,
            blocks: 1,
            mfi_status: 0x2D,
            scsi_status: 0x02,
            sense: fixed_sense(0x70, 0xB, 0x00, 0x06).to_vec(),
            persistent: true,
        }
    }

    /// A MEDIUM ERROR, unrecovered read error (03/11/00).
    pub fn medium_error(target: u8, lba: u64) -> Self {
        Self {
            target,
            lba,
            blocks: 1,
            mfi_status: 0x2D,
            scsi_status: 0x02,
            sense: fixed_sense(0x70, 0x3, 0x11, 0x00).to_vec(),
            persistent: true,
        }
    }
}

/// 18-byte fixed-format sense.
pub fn fixed_sense(code: u8, key: u8, asc: u8, ascq: u8) -> [u8; 18] {
    let mut s = [0u8; 18];
    s[0] = code;
    s[2] = key;
    s[7] = 10;
    s[12] = asc;
    s[13] = ascq;
    s
}

struct Queue {
    ring: u64,
    pi: u64,
    head: u32,
}

struct Disk {
    id: u8,
    block_size: u32,
    blocks: u64,
    data: BTreeMap<u64, Vec<u8>>,
}

enum Work {
    Io {
        write: bool,
        target: u8,
        lba: u64,
        blocks: u64,
        sgl: Vec<(u64, u32)>,
    },
    DataIn {
        data: Vec<u8>,
        sgl: Vec<(u64, u32)>,
    },
    Status {
        mfi: u8,
        scsi: u8,
        sense: Vec<u8>,
    },
}

struct Pending {
    frame: u64,
    ctx: u32,
    work: Work,
    /// Held at the "backend": never completes on its own (only an abort or a reset ends it).
    held: bool,
}

struct Inner {
    model: Model,
    jbod: bool,
    refused_dcmds: Vec<u32>,
    fw_cmds: u16,
    fw_sge: u8,
    msix: bool,
    completion: CompletionMode,
    state: FwState,
    boot: VecDeque<(FwState, u64)>,
    boot_elapsed: u64,
    stuck: bool,
    omsk: u32,
    doorbell: u32,
    iqph: u32,
    seq_pos: usize,
    diag_write_enabled: bool,
    queue: Option<Queue>,
    pending: VecDeque<Pending>,
    held: Vec<u64>,
    unit_attention: BTreeSet<u8>,
    disks: Vec<Disk>,
    busy_next: u32,
    duplicate_next: bool,
    /// The next this many I/O frames are held (never complete on their own).
    hold_next: u32,
    /// ABORT frames are swallowed: never answered, never act.
    ignore_aborts: bool,
    /// INTx reads pending forever and ODCR0 does not clear it (a stuck line).
    intx_stuck: bool,
    /// ABORT frames are answered with this status without acting.
    refuse_aborts: Option<u8>,
    /// A completion without sense leaves the header's sense length as the driver wrote it (as
    /// QEMU does) instead of writing 0 there.
    keep_sense_len: bool,
    frozen: bool,
    errors: Vec<ErrorRule>,
    irq: FakeIrq,
    stats: FakeStats,
}

/// The fake controller. Share it through `Arc`; hand the driver [`FakeMmio`], [`FakeDma`] and
/// [`FakeDelay`].
pub struct FakeDevice {
    inner: Mutex<Inner>,
    /// The bus address space the driver's allocations live in; stray accesses are logged in
    /// [`FakeStats::dma_violations`] by the fake itself, so only the unrecorded accessors are used.
    mem: Arc<FakeMemory>,
    /// Ranges the test declared finished ([`FakeDevice::retire`]): a device write there is a
    /// write into a buffer whose request already ended.
    retired: Mutex<Vec<(u64, u64)>>,
    clock_us: AtomicU64,
}

const SEQ_MAGIC: [u32; 6] = [0x0, 0x4, 0xB, 0x2, 0x7, 0xD];

impl FakeDevice {
    /// Creates the fake in the state QEMU shows at power-on (after `config.boot`): READY, masked.
    pub fn new(config: FakeConfig) -> Arc<Self> {
        let fw_sge = if config.max_sge >= 80 { 80 } else { 16 };
        let disks = config
            .disks
            .iter()
            .map(|d| Disk {
                id: d.scsi_id,
                block_size: d.block_size,
                blocks: d.bytes / u64::from(d.block_size),
                data: BTreeMap::new(),
            })
            .collect();
        let boot: VecDeque<_> = config.boot.iter().copied().collect();
        let state = boot.front().map_or(FwState::Ready, |b| b.0);
        Arc::new(Self {
            inner: Mutex::new(Inner {
                model: config.model,
                fw_cmds: config.max_cmds.min(2048),
                fw_sge,
                msix: config.msix,
                jbod: config.use_jbod,
                refused_dcmds: config.refused_dcmds.clone(),
                completion: config.completion,
                state,
                boot,
                boot_elapsed: 0,
                stuck: false,
                omsk: 0xFFFF_FFFF,
                doorbell: 0,
                iqph: 0,
                seq_pos: 0,
                diag_write_enabled: false,
                queue: None,
                pending: VecDeque::new(),
                held: Vec::new(),
                unit_attention: BTreeSet::new(),
                disks,
                busy_next: 0,
                duplicate_next: false,
                hold_next: 0,
                ignore_aborts: false,
                intx_stuck: false,
                keep_sense_len: false,
                refuse_aborts: None,
                frozen: false,
                errors: Vec::new(),
                irq: FakeIrq::Msi,
                stats: FakeStats::default(),
            }),
            mem: FakeMemory::new(config.phys_base),
            retired: Mutex::new(Vec::new()),
            clock_us: AtomicU64::new(0),
        })
    }

    /// Register access for the driver.
    pub fn mmio(self: &Arc<Self>) -> FakeMmio {
        FakeMmio(self.clone())
    }

    /// DMA allocator for the driver.
    pub fn dma(&self) -> FakeDma {
        self.mem.dma()
    }

    /// Delay hook for the driver: advances virtual time and lets the device make progress.
    pub fn delay(self: &Arc<Self>) -> FakeDelay {
        FakeDelay(self.clone())
    }

    /// A DMA data buffer for test I/O.
    pub fn buffer(self: &Arc<Self>, len: usize) -> FakeBuffer {
        let r = self.mem.alloc_zeroed(len, 64).expect("fake DMA allocation");
        FakeBuffer {
            dev: self.clone(),
            phys: r.phys,
            len,
        }
    }

    /// Virtual microseconds the driver has waited.
    pub fn virtual_time_us(&self) -> u64 {
        self.clock_us.load(Ordering::Relaxed)
    }

    /// Counters and findings so far.
    pub fn stats(&self) -> FakeStats {
        self.inner.lock().stats.clone()
    }

    /// Current firmware state.
    pub fn state(&self) -> FwState {
        self.inner.lock().state
    }

    /// I/O frames waiting for [`Self::complete_pending`].
    pub fn pending(&self) -> usize {
        self.inner.lock().pending.len()
    }

    /// Contexts of the pending I/O frames, oldest first.
    pub fn pending_contexts(&self) -> Vec<u32> {
        self.inner.lock().pending.iter().map(|p| p.ctx).collect()
    }

    /// A frozen device stops completing queued I/O when the driver waits (a hung backend).
    pub fn set_frozen(&self, frozen: bool) {
        self.inner.lock().frozen = frozen;
    }

    /// Completes up to `max` pending I/Os, oldest first. Returns how many.
    pub fn complete_pending(&self, max: usize) -> usize {
        self.complete_some(max, false)
    }

    /// Completes up to `max` pending I/Os, newest first (out-of-order completion).
    pub fn complete_pending_newest_first(&self, max: usize) -> usize {
        self.complete_some(max, true)
    }

    fn complete_some(&self, max: usize, newest_first: bool) -> usize {
        let mut inner = self.inner.lock();
        let mut n = 0;
        while n < max {
            let next = if newest_first {
                inner.pending.iter().rposition(|p| !p.held)
            } else {
                inner.pending.iter().position(|p| !p.held)
            };
            let Some(p) = next.and_then(|i| inner.pending.remove(i)) else {
                break;
            };
            self.run(&mut inner, p);
            n += 1;
        }
        n
    }

    /// Completes the pending (not held) I/O at position `index` of [`Self::pending_contexts`].
    /// Returns false when there is none there.
    pub fn complete_at(&self, index: usize) -> bool {
        let mut inner = self.inner.lock();
        match inner.pending.get(index) {
            Some(p) if !p.held => {
                let p = inner.pending.remove(index).expect("checked above");
                self.run(&mut inner, p);
                true
            }
            _ => false,
        }
    }

    /// The next `n` I/O frames are held at the backend: they never complete on their own, only
    /// through an ABORT or a reset (a request stuck in the device).
    pub fn hold_next(&self, n: u32) {
        self.inner.lock().hold_next += n;
    }

    /// Held I/O frames.
    pub fn held(&self) -> usize {
        self.inner.lock().pending.iter().filter(|p| p.held).count()
    }

    /// ABORT frames are swallowed (never answered, never act), like a firmware that ignores them.
    pub fn set_ignore_aborts(&self, ignore: bool) {
        self.inner.lock().ignore_aborts = ignore;
    }

    /// ABORT frames are answered with `status` without acting (`None`: normal behaviour).
    pub fn set_refuse_aborts(&self, status: Option<u8>) {
        self.inner.lock().refuse_aborts = status;
    }

    /// Declares `phys..phys+len` finished: its request ended, so any later device write there is
    /// recorded in [`FakeStats::writes_after_end`].
    pub fn retire(&self, phys: u64, len: usize) {
        self.retired.lock().push((phys, phys + len as u64));
    }

    /// Gives a retired range back to a new request.
    pub fn revive(&self, phys: u64, len: usize) {
        let end = phys + len as u64;
        self.retired.lock().retain(|&(a, b)| !(a == phys && b == end));
    }

    /// Records a device write into a retired range.
    fn check_retired(&self, inner: &mut Inner, addr: u64, len: usize, what: &str) {
        let end = addr.saturating_add(len as u64);
        if self.retired.lock().iter().any(|&(a, b)| addr < b && a < end) {
            inner.stats.writes_after_end.push(format!(
                "{what} write at 0x{addr:X}+{len} into a buffer whose request ended"
            ));
        }
    }

    /// The next `n` I/O frames are answered BUSY.
    pub fn inject_busy(&self, n: u32) {
        self.inner.lock().busy_next += n;
    }

    /// The next completion is posted to the reply ring twice.
    pub fn inject_duplicate_next(&self) {
        self.inner.lock().duplicate_next = true;
    }

    /// Adds an error rule for I/O touching its blocks.
    pub fn inject_error(&self, rule: ErrorRule) {
        self.inner.lock().errors.push(rule);
    }

    /// Posts `context` to the reply ring as if a command had completed.
    pub fn inject_context(&self, context: u32) {
        let mut inner = self.inner.lock();
        self.post_reply(&mut inner, context);
    }

    /// Overwrites the producer word with `value`.
    pub fn corrupt_producer(&self, value: u32) {
        let inner = self.inner.lock();
        if let Some(q) = &inner.queue {
            self.store_u32(q.pi, value);
        }
    }

    /// The next SCSI command to `target` gets UNIT ATTENTION 06/29/00, as after a VM reset.
    pub fn inject_unit_attention(&self, target: u8) {
        self.inner.lock().unit_attention.insert(target);
    }

    /// Forces the firmware state (e.g. FAULT).
    pub fn set_state(&self, state: FwState) {
        let mut inner = self.inner.lock();
        inner.state = state;
        inner.boot.clear();
    }

    /// A stuck firmware ignores every reset path.
    pub fn set_stuck(&self, stuck: bool) {
        self.inner.lock().stuck = stuck;
    }

    /// Chooses MSI(-X) or INTx signalling.
    pub fn set_irq_mode(&self, irq: FakeIrq) {
        self.inner.lock().irq = irq;
    }

    /// A stuck INTx: the line reads asserted forever, whatever the driver acknowledges.
    pub fn set_intx_stuck(&self, stuck: bool) {
        self.inner.lock().intx_stuck = stuck;
    }

    /// Completions that write no sense leave the frame's sense length as the driver wrote it, as
    /// QEMU does (by default the fake writes 0 there): the driver then reads its whole buffer.
    pub fn set_keep_sense_len(&self, keep: bool) {
        self.inner.lock().keep_sense_len = keep;
    }

    /// Whether the INTx line is asserted now.
    pub fn intx_asserted(&self) -> bool {
        let inner = self.inner.lock();
        inner.irq == FakeIrq::Intx && inner.omsk != 0xFFFF_FFFF && inner.doorbell > 0
    }

    /// Reads blocks straight from a disk's backing store.
    pub fn disk_read(&self, target: u8, lba: u64, blocks: u64) -> Vec<u8> {
        let inner = self.inner.lock();
        let disk = inner.disks.iter().find(|d| d.id == target).expect("no such fake disk");
        let bs = disk.block_size as usize;
        let mut out = Vec::with_capacity(blocks as usize * bs);
        for b in lba..lba + blocks {
            match disk.data.get(&b) {
                Some(d) => out.extend_from_slice(d),
                None => out.resize(out.len() + bs, 0),
            }
        }
        out
    }

    // ---- memory ----

    fn read_mem(&self, phys: u64, len: usize) -> Option<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.mem.try_read(phys, &mut out).then_some(out)
    }

    fn write_mem(&self, phys: u64, data: &[u8]) -> bool {
        self.mem.try_write(phys, data)
    }

    /// The driver reads the producer index and ring entries atomically.
    fn store_u32(&self, phys: u64, v: u32) -> bool {
        self.mem.store_u32_atomic(phys, v)
    }

    fn load_u32(&self, phys: u64) -> Option<u32> {
        self.mem.load_u32_atomic(phys)
    }

    /// The driver polls a frame's status byte atomically.
    fn store_status(&self, phys: u64, v: u8) {
        self.mem.store_u8_atomic(phys, v);
    }

    fn violation(inner: &mut Inner, what: String) {
        inner.stats.dma_violations.push(what);
    }

    // ---- registers ----

    fn status_word(inner: &Inner) -> u32 {
        (u32::from(inner.state.nibble()) << 28)
            | if inner.msix { 1 << 26 } else { 0 }
            | (u32::from(inner.fw_sge) << 16)
            | u32::from(inner.fw_cmds)
    }

    fn read_reg(&self, offset: u32) -> u32 {
        let inner = self.inner.lock();
        match offset {
            0x18 | 0xB0 => Self::status_word(&inner),
            0x30 if inner.omsk != 0xFFFF_FFFF
                && (inner.doorbell > 0 || inner.intx_stuck)
                && inner.irq == FakeIrq::Intx =>
            {
                match inner.model {
                    Model::Sas1078 => 0x8000_0001,
                    Model::Sas2108Gen2 => 0x0000_0001,
                }
            }
            0x34 => inner.omsk,
            0xA0 => u32::from(inner.doorbell != 0),
            0xB4 => 15,
            0xF8 if inner.diag_write_enabled => 0x80,
            _ => 0,
        }
    }

    fn write_reg(&self, offset: u32, value: u32) {
        let mut inner = self.inner.lock();
        match offset {
            0x20 => {
                if inner.stuck {
                    return;
                }
                if value & 0x01 != 0 {
                    self.abort_all(&mut inner);
                }
                if value & 0x02 != 0 {
                    self.soft_reset(&mut inner);
                }
                if value & 0x08 != 0 && inner.state == FwState::WaitHandshake {
                    Self::advance_boot(&mut inner);
                }
                if value & 0x10 != 0 && inner.state == FwState::BootMsgPending {
                    Self::advance_boot(&mut inner);
                }
                if value & 0x20 != 0 {
                    inner.state = FwState::Fault;
                }
            }
            0x34 => {
                if value == 0xFFFF_FFFF {
                    if !inner.stuck {
                        self.soft_reset(&mut inner);
                    }
                    inner.omsk = value;
                } else {
                    inner.omsk = value;
                }
            }
            0x40 => {
                inner.iqph = 0;
                self.post_frame(&mut inner, u64::from(value));
            }
            0xA0 => inner.doorbell = 0,
            0xC0 => {
                let high = inner.iqph;
                inner.iqph = 0;
                if high != 0 {
                    inner.stats.high_posts += 1;
                }
                self.post_frame(&mut inner, (u64::from(high) << 32) | u64::from(value));
            }
            0xC4 => inner.iqph = value,
            0xF8 if inner.diag_write_enabled && value & 0x04 != 0 => {
                inner.diag_write_enabled = false;
                if !inner.stuck {
                    self.soft_reset(&mut inner);
                }
            }
            0xFC => {
                if value == SEQ_MAGIC[inner.seq_pos] {
                    inner.seq_pos += 1;
                    if inner.seq_pos == SEQ_MAGIC.len() {
                        inner.seq_pos = 0;
                        inner.diag_write_enabled = true;
                    }
                } else {
                    inner.seq_pos = usize::from(value == SEQ_MAGIC[0]);
                }
            }
            _ => {}
        }
    }

    fn advance_boot(inner: &mut Inner) {
        inner.boot.pop_front();
        inner.boot_elapsed = 0;
        inner.state = inner.boot.front().map_or(FwState::Ready, |b| b.0);
    }

    fn tick(&self, us: u64) {
        self.clock_us.fetch_add(us, Ordering::Relaxed);
        let mut inner = self.inner.lock();
        if let Some(&(state, dwell)) = inner.boot.front()
            && inner.state == state
            && !matches!(state, FwState::WaitHandshake | FwState::BootMsgPending)
        {
            inner.boot_elapsed = inner.boot_elapsed.saturating_add(us);
            if inner.boot_elapsed >= dwell {
                Self::advance_boot(&mut inner);
            }
        }
        // Time passing lets queued I/O finish, as QEMU's main loop would (held I/O stays).
        while !inner.frozen
            && let Some(p) = inner
                .pending
                .iter()
                .position(|p| !p.held)
                .and_then(|i| inner.pending.remove(i))
        {
            self.run(&mut inner, p);
        }
    }

    /// MFI ABORT, as QEMU does it: looks the victim up by frame address; not found -> OK, context
    /// mismatch -> 0x05, found -> the victim completes with 0x2E, then the ABORT with OK.
    fn abort(&self, inner: &mut Inner, frame: u64, f: &[u8], ctx: u32) {
        inner.stats.aborts += 1;
        if inner.ignore_aborts {
            return;
        }
        if let Some(status) = inner.refuse_aborts {
            self.finish(inner, frame, ctx, status, 0, &[]);
            return;
        }
        let victim_ctx = le_u64(f, 0x18) as u32;
        let victim_frame = le_u64(f, 0x20);
        match inner.pending.iter().position(|p| p.frame == victim_frame) {
            None => self.finish(inner, frame, ctx, 0x00, 0, &[]),
            Some(i) if inner.pending[i].ctx != victim_ctx => self.finish(inner, frame, ctx, 0x05, 0, &[]),
            Some(i) => {
                let p = inner.pending.remove(i).expect("index from position");
                self.finish(inner, p.frame, p.ctx, 0x2E, 0, &[]);
                inner.stats.aborts_done += 1;
                self.finish(inner, frame, ctx, 0x00, 0, &[]);
            }
        }
    }

    fn soft_reset(&self, inner: &mut Inner) {
        let was_ready = inner.state == FwState::Ready;
        self.abort_all(inner);
        inner.held.clear();
        inner.queue = None;
        inner.state = FwState::Ready;
        inner.boot.clear();
        inner.doorbell = 0;
        inner.omsk = 0xFFFF_FFFF;
        inner.iqph = 0;
        if was_ready {
            inner.unit_attention.clear();
        }
        inner.stats.resets += 1;
    }

    fn abort_all(&self, inner: &mut Inner) {
        while let Some(p) = inner.pending.pop_front() {
            self.finish(inner, p.frame, p.ctx, 0x2E, 0, &[]);
        }
    }

    // ---- frames ----

    fn post_frame(&self, inner: &mut Inner, word: u64) {
        inner.stats.frames_posted += 1;
        // Bits 4:0 carry the frame count and a flag; QEMU ignores them and the low address bits.
        let frame = word & !0x1F;
        let Some(f) = self.read_mem(frame, 64) else {
            Self::violation(inner, format!("frame at 0x{frame:X} outside DMA memory"));
            return;
        };
        let ctx = le_u32(&f, 0x08);
        match f[0] {
            0x00 => self.init(inner, frame, &f, ctx),
            0x01..=0x04 => {
                if self.read_mem(frame, 2048).is_none() {
                    // QEMU maps a 2 KiB window from the frame; outside RAM it answers BUSY.
                    Self::violation(inner, format!("frame 0x{frame:X}: 2 KiB SGL window not in DMA memory"));
                    self.finish(inner, frame, ctx, 0x2D, 0x08, &[]);
                    return;
                }
                let outstanding = inner.pending.len() + inner.held.len();
                if inner.busy_next > 0 || outstanding >= usize::from(inner.fw_cmds) {
                    inner.busy_next = inner.busy_next.saturating_sub(1);
                    inner.stats.busy_replies += 1;
                    self.finish(inner, frame, ctx, 0x2D, 0x08, &[]);
                    return;
                }
                if f[0] == 0x03 && inner.jbod {
                    // QEMU refuses LD pass-through entirely in JBOD mode.
                    self.finish(inner, frame, ctx, 0x0C, 0, &[]);
                } else if f[0] >= 0x03 {
                    self.scsi_io(inner, frame, &f, ctx);
                } else {
                    self.ld_io(inner, frame, &f, ctx);
                }
                let outstanding = inner.pending.len() + inner.held.len();
                inner.stats.max_outstanding = inner.stats.max_outstanding.max(outstanding);
            }
            0x05 => self.dcmd(inner, frame, &f, ctx),
            0x06 => self.abort(inner, frame, &f, ctx),
            _ => self.finish(inner, frame, ctx, 0x01, 0, &[]),
        }
    }

    fn init(&self, inner: &mut Inner, frame: u64, f: &[u8], ctx: u32) {
        if inner.queue.is_some() {
            // QEMU: INIT with a queue configured succeeds and changes nothing.
            self.finish(inner, frame, ctx, 0x00, 0, &[]);
            return;
        }
        let qinfo_addr = le_u64(f, 0x18);
        let Some(q) = self.read_mem(qinfo_addr, 32) else {
            Self::violation(inner, format!("INIT queue info at 0x{qinfo_addr:X} outside DMA memory"));
            self.finish(inner, frame, ctx, 0x20, 0, &[]);
            return;
        };
        let entries = le_u32(&q, 4) & 0xFFFF;
        if entries > u32::from(inner.fw_cmds) {
            self.finish(inner, frame, ctx, 0x03, 0, &[]);
            return;
        }
        if le_u32(&q, 0) & 0x2 != 0 {
            Self::violation(
                inner,
                String::from("CONTEXT64 requested; the fake models 32-bit contexts"),
            );
        }
        let ring = le_u64(&q, 8);
        let pi = le_u64(&q, 16);
        let ci = le_u64(&q, 24);
        let (Some(head), Some(_)) = (self.load_u32(pi), self.load_u32(ci)) else {
            Self::violation(inner, String::from("INIT producer/consumer words outside DMA memory"));
            self.finish(inner, frame, ctx, 0x20, 0, &[]);
            return;
        };
        if self.read_mem(ring, 4 * usize::from(inner.fw_cmds)).is_none() {
            // QEMU would write past the driver's ring as its producer wraps at fw_cmds.
            Self::violation(
                inner,
                format!(
                    "reply ring at 0x{ring:X} is shorter than fw_cmds = {} entries",
                    inner.fw_cmds
                ),
            );
        }
        inner.queue = Some(Queue {
            ring,
            pi,
            head: head % u32::from(inner.fw_cmds),
        });
        inner.state = FwState::Operational;
        inner.stats.inits += 1;
        self.finish(inner, frame, ctx, 0x00, 0, &[]);
    }

    /// Writes the final status into the frame and posts the context.
    fn finish(&self, inner: &mut Inner, frame: u64, ctx: u32, mfi: u8, scsi: u8, sense: &[u8]) {
        if let Some(h) = self.read_mem(frame, 0x20) {
            let sense_room = usize::from(h[1]);
            let cmd = h[0];
            let mut written = 0u8;
            if !sense.is_empty() && sense_room > 0 && matches!(cmd, 0x01..=0x04) {
                let flags = le_u16(&h, 0x10);
                let mut addr = u64::from(le_u32(&h, 0x18));
                if flags & 0x4 != 0 {
                    addr |= u64::from(le_u32(&h, 0x1C)) << 32;
                }
                let n = sense.len().min(sense_room);
                self.check_retired(inner, addr, n, "sense");
                if self.write_mem(addr, &sense[..n]) {
                    written = n as u8;
                } else {
                    Self::violation(inner, format!("sense buffer at 0x{addr:X} outside DMA memory"));
                }
            }
            if written > 0 || !inner.keep_sense_len {
                self.write_mem(frame + 1, &[written]);
            }
            self.write_mem(frame + 3, &[scsi]);
            self.store_status(frame + 2, mfi);
        }
        self.post_reply(inner, ctx);
        if core::mem::take(&mut inner.duplicate_next) {
            self.post_reply(inner, ctx);
        }
    }

    fn post_reply(&self, inner: &mut Inner, ctx: u32) {
        let unmasked = inner.omsk != 0xFFFF_FFFF;
        let fw_cmds = u32::from(inner.fw_cmds);
        let Some(q) = inner.queue.as_mut() else {
            if unmasked {
                Self::violation(
                    inner,
                    String::from("completion while unmasked before INIT: QEMU writes the producer to address 0"),
                );
            }
            return;
        };
        let slot = q.ring + 4 * u64::from(q.head);
        let ok = self.store_u32(slot, ctx);
        if !unmasked {
            // Masked: the entry lands at head, which does not advance.
            if !ok {
                Self::violation(inner, format!("reply slot 0x{slot:X} outside DMA memory"));
            }
            return;
        }
        q.head = (q.head + 1) % fw_cmds;
        let head = q.head;
        let pi_ok = self.store_u32(q.pi, head);
        inner.stats.replies += 1;
        if !ok || !pi_ok {
            Self::violation(
                inner,
                format!("reply slot 0x{slot:X} or producer word outside DMA memory"),
            );
        }
        match inner.irq {
            FakeIrq::Msi => inner.stats.msi_messages += 1,
            FakeIrq::Intx => {
                inner.doorbell += 1;
                if inner.doorbell == 1 {
                    inner.stats.intx_raised += 1;
                }
            }
        }
    }

    /// Parses the SGL at `off`; `Err` carries QEMU's synthetic sense for a bad list.
    fn parse_sgl(&self, frame: u64, f_window: &[u8], off: usize, count: u8, flags: u16) -> Result<Vec<(u64, u32)>, ()> {
        if count == 0 || count > 128 {
            return Err(());
        }
        let size = if flags & 0x20 != 0 {
            16
        } else if flags & 0x02 != 0 {
            12
        } else {
            8
        };
        let mut out = Vec::with_capacity(usize::from(count));
        for i in 0..usize::from(count) {
            let at = off + i * size;
            if at + size > 2048 || at + size > f_window.len() {
                return Err(());
            }
            let (addr, len) = if size == 8 {
                (u64::from(le_u32(f_window, at)), le_u32(f_window, at + 4))
            } else {
                (le_u64(f_window, at), le_u32(f_window, at + 8))
            };
            if addr == 0 || len == 0 {
                return Err(());
            }
            out.push((addr, len));
        }
        let _ = frame;
        Ok(out)
    }

    fn sgl_error(&self, inner: &mut Inner, frame: u64, ctx: u32) {
        self.finish(inner, frame, ctx, 0x2D, 0x02, &fixed_sense(0xF0, 0x4, 0x44, 0x00));
    }

    fn find_disk(inner: &Inner, target: u8, lun: u8) -> Option<usize> {
        if target >= 64 || lun != 0 {
            return None;
        }
        inner.disks.iter().position(|d| d.id == target)
    }

    fn ld_io(&self, inner: &mut Inner, frame: u64, f: &[u8], ctx: u32) {
        let write = f[0] == 0x02;
        let (target, lun) = (f[4], f[5]);
        let Some(di) = Self::find_disk(inner, target, lun) else {
            self.finish(inner, frame, ctx, 0x0C, 0, &[]);
            return;
        };
        if inner.unit_attention.remove(&target) {
            self.finish(inner, frame, ctx, 0x2D, 0x02, &fixed_sense(0x70, 0x6, 0x29, 0x00));
            return;
        }
        let window = self.read_mem(frame, 2048).unwrap_or_default();
        let flags = le_u16(f, 0x10);
        let blocks = u64::from(le_u32(f, 0x14));
        let lba = le_u64(f, 0x20);
        let disk = &inner.disks[di];
        let Ok(sgl) = self.parse_sgl(frame, &window, 0x28, f[7], flags) else {
            self.sgl_error(inner, frame, ctx);
            return;
        };
        let total: u64 = sgl.iter().map(|s| u64::from(s.1)).sum();
        if total < blocks * u64::from(disk.block_size) {
            self.sgl_error(inner, frame, ctx);
            return;
        }
        if lba.checked_add(blocks).is_none_or(|end| end > disk.blocks) {
            self.finish(inner, frame, ctx, 0x2D, 0x02, &fixed_sense(0x70, 0x5, 0x21, 0x00));
            return;
        }
        if blocks == 0 {
            self.finish(inner, frame, ctx, 0x00, 0, &[]);
            return;
        }
        let rule = inner
            .errors
            .iter()
            .position(|r| r.target == target && r.lba < lba + blocks && lba < r.lba + r.blocks);
        let work = match rule {
            Some(i) => {
                let r = if inner.errors[i].persistent {
                    inner.errors[i].clone()
                } else {
                    inner.errors.remove(i)
                };
                Work::Status {
                    mfi: r.mfi_status,
                    scsi: r.scsi_status,
                    sense: r.sense,
                }
            }
            None => Work::Io {
                write,
                target,
                lba,
                blocks,
                sgl,
            },
        };
        self.queue_work(
            inner,
            Pending {
                frame,
                ctx,
                work,
                held: false,
            },
        );
    }

    fn queue_work(&self, inner: &mut Inner, mut p: Pending) {
        if inner.hold_next > 0 {
            inner.hold_next -= 1;
            p.held = true;
            inner.pending.push_back(p);
            return;
        }
        match inner.completion {
            CompletionMode::Immediate => self.run(inner, p),
            CompletionMode::Deferred => inner.pending.push_back(p),
        }
    }

    fn scatter(&self, inner: &mut Inner, data: &[u8], sgl: &[(u64, u32)]) -> bool {
        for (addr, piece) in sgl_pieces(sgl, data.len()) {
            let n = piece.len();
            self.check_retired(inner, addr, n, "data");
            if !self.write_mem(addr, &data[piece]) {
                Self::violation(inner, format!("data segment 0x{addr:X}+{n} outside DMA memory"));
                return false;
            }
        }
        true
    }

    fn gather(&self, inner: &mut Inner, len: usize, sgl: &[(u64, u32)]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        for (addr, piece) in sgl_pieces(sgl, len) {
            let n = piece.len();
            let Some(d) = self.read_mem(addr, n) else {
                Self::violation(inner, format!("data segment 0x{addr:X}+{n} outside DMA memory"));
                return None;
            };
            out.extend_from_slice(&d);
        }
        Some(out)
    }

    fn run(&self, inner: &mut Inner, p: Pending) {
        match p.work {
            Work::Io {
                write,
                target,
                lba,
                blocks,
                sgl,
            } => {
                let di = inner.disks.iter().position(|d| d.id == target).unwrap_or(0);
                let bs = inner.disks[di].block_size as usize;
                let len = blocks as usize * bs;
                let ok = if write {
                    match self.gather(inner, len, &sgl) {
                        Some(data) => {
                            let disk = &mut inner.disks[di];
                            for (i, chunk) in data.chunks(bs).enumerate() {
                                disk.data.insert(lba + i as u64, chunk.to_vec());
                            }
                            true
                        }
                        None => false,
                    }
                } else {
                    let disk = &inner.disks[di];
                    let mut data = Vec::with_capacity(len);
                    for b in lba..lba + blocks {
                        match disk.data.get(&b) {
                            Some(d) => data.extend_from_slice(d),
                            None => data.resize(data.len() + bs, 0),
                        }
                    }
                    self.scatter(inner, &data, &sgl)
                };
                if ok {
                    self.finish(inner, p.frame, p.ctx, 0x00, 0, &[]);
                } else {
                    self.finish(inner, p.frame, p.ctx, 0x2D, 0x02, &fixed_sense(0xF0, 0x4, 0x44, 0x00));
                }
            }
            Work::DataIn { data, sgl } => {
                self.scatter(inner, &data, &sgl);
                self.finish(inner, p.frame, p.ctx, 0x00, 0, &[]);
            }
            Work::Status { mfi, scsi, sense } => self.finish(inner, p.frame, p.ctx, mfi, scsi, &sense),
        }
    }

    fn scsi_io(&self, inner: &mut Inner, frame: u64, f: &[u8], ctx: u32) {
        let (target, lun, cdb_len) = (f[4], f[5], f[6]);
        let Some(di) = Self::find_disk(inner, target, lun) else {
            self.finish(inner, frame, ctx, 0x0C, 0, &[]);
            return;
        };
        if cdb_len > 16 {
            self.finish(inner, frame, ctx, 0x2D, 0x02, &fixed_sense(0xF0, 0x5, 0x20, 0x00));
            return;
        }
        let window = self.read_mem(frame, 2048).unwrap_or_default();
        let flags = le_u16(f, 0x10);
        let data_len = le_u32(f, 0x14) as usize;
        let Ok(sgl) = self.parse_sgl(frame, &window, 0x30, f[7], flags) else {
            self.sgl_error(inner, frame, ctx);
            return;
        };
        let total: usize = sgl.iter().map(|s| s.1 as usize).sum();
        if total < data_len {
            self.sgl_error(inner, frame, ctx);
            return;
        }
        if inner.unit_attention.remove(&target) {
            self.finish(inner, frame, ctx, 0x2D, 0x02, &fixed_sense(0x70, 0x6, 0x29, 0x00));
            return;
        }
        let cdb = &f[0x20..0x30];
        let disk = &inner.disks[di];
        if matches!(cdb[0], 0x88 | 0x8A) {
            // READ(16)/WRITE(16) through pass-through (the PD path): bytes = blocks × block size,
            // within the disk, and data_len must cover it (QEMU truncates silently otherwise;
            // the model is stricter and refuses).
            let lba = u64::from_be_bytes(cdb[2..10].try_into().unwrap_or([0; 8]));
            let blocks = u64::from(u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]));
            if lba.checked_add(blocks).is_none_or(|end| end > disk.blocks) {
                self.finish(inner, frame, ctx, 0x2D, 0x02, &fixed_sense(0x70, 0x5, 0x21, 0x00));
                return;
            }
            if data_len as u64 != blocks * u64::from(disk.block_size) {
                Self::violation(
                    inner,
                    format!("pass-through READ/WRITE(16): data_len {data_len} for {blocks} blocks"),
                );
                self.sgl_error(inner, frame, ctx);
                return;
            }
            let work = Work::Io {
                write: cdb[0] == 0x8A,
                target,
                lba,
                blocks,
                sgl,
            };
            self.queue_work(
                inner,
                Pending {
                    frame,
                    ctx,
                    work,
                    held: false,
                },
            );
            return;
        }
        let data = match cdb[0] {
            0x9E if cdb[1] & 0x1F == 0x10 => {
                let mut r = vec![0u8; 32];
                r[0..8].copy_from_slice(&(disk.blocks - 1).to_be_bytes());
                r[8..12].copy_from_slice(&disk.block_size.to_be_bytes());
                let alloc = u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]) as usize;
                r.truncate(alloc.min(data_len));
                r
            }
            0x25 => {
                let mut r = vec![0u8; 8];
                let last = u32::try_from(disk.blocks - 1).unwrap_or(u32::MAX);
                r[0..4].copy_from_slice(&last.to_be_bytes());
                r[4..8].copy_from_slice(&disk.block_size.to_be_bytes());
                r.truncate(data_len);
                r
            }
            0x35 => {
                inner.stats.sync_caches += 1;
                Vec::new()
            }
            0x00 => Vec::new(),
            0x12 => {
                let mut r = vec![0u8; 36];
                r[4] = 31;
                r[8..16].copy_from_slice(b"QEMU    ");
                r[16..32].copy_from_slice(b"QEMU HARDDISK   ");
                r[32..36].copy_from_slice(b"2.5+");
                r.truncate(data_len);
                r
            }
            _ => {
                self.finish(inner, frame, ctx, 0x2D, 0x02, &fixed_sense(0x70, 0x5, 0x20, 0x00));
                return;
            }
        };
        self.queue_work(
            inner,
            Pending {
                frame,
                ctx,
                work: Work::DataIn { data, sgl },
                held: false,
            },
        );
    }

    fn ctrl_info(inner: &Inner) -> Vec<u8> {
        let mut b = vec![0u8; 2048];
        let put = |b: &mut Vec<u8>, off: usize, s: &[u8]| b[off..off + s.len()].copy_from_slice(s);
        let (dev, subdev, product, fw): (u16, u16, &[u8], &[u8]) = match inner.model {
            Model::Sas1078 => (0x0060, 0x1013, b"LSI MegaRAID SAS 8708EM2", b"1.70-QEMU"),
            Model::Sas2108Gen2 => (0x0079, 0x9261, b"LSI MegaRAID SAS 9260-8i", b"1.80-QEMU"),
        };
        put(&mut b, 0x00, &0x1000u16.to_le_bytes());
        put(&mut b, 0x02, &dev.to_le_bytes());
        put(&mut b, 0x04, &0x1000u16.to_le_bytes());
        put(&mut b, 0x06, &subdev.to_le_bytes());
        b[0x20] = 0x02;
        put(&mut b, 0xB4, &1u32.to_le_bytes());
        put(&mut b, 0xB8, b"APP");
        put(&mut b, 0xC0, fw);
        b[0x53F] = 64;
        put(&mut b, 0x540, product);
        put(&mut b, 0x590, b"QEMU123456");
        put(&mut b, 0x5B8, &inner.fw_cmds.to_le_bytes());
        put(&mut b, 0x5BA, &u16::from(inner.fw_sge).to_le_bytes());
        put(&mut b, 0x5BC, &65535u32.to_le_bytes());
        let n = inner.disks.len() as u16;
        put(&mut b, 0x5C0, &n.to_le_bytes());
        put(&mut b, 0x5C6, &n.to_le_bytes());
        put(&mut b, 0x5C8, &n.to_le_bytes());
        put(&mut b, 0x640, b"2.5+-QEMU");
        b
    }

    fn dcmd(&self, inner: &mut Inner, frame: u64, f: &[u8], ctx: u32) {
        let opcode = le_u32(f, 0x18);
        let mbox0 = f[0x1C];
        inner.stats.dcmds.push((opcode, mbox0));
        let count = f[7];
        let flags = le_u16(f, 0x10);
        if count > 1 {
            self.finish(inner, frame, ctx, 0x20, 0, &[]);
            return;
        }
        let buf = if count == 1 {
            let window = self.read_mem(frame, 64).unwrap_or_default();
            match self.parse_sgl(frame, &window, 0x28, 1, flags) {
                Ok(s) => Some(s[0]),
                Err(()) => None,
            }
        } else {
            None
        };
        let len = buf.map_or(0, |b| b.1 as usize);
        let reply: Result<Option<Vec<u8>>, u8> = match opcode {
            op if inner.refused_dcmds.contains(&op) => Err(0x01),
            0x0101_0000 => {
                if len < 2048 {
                    Err(0x03)
                } else {
                    Ok(Some(Self::ctrl_info(inner)))
                }
            }
            0x0201_0000 | 0x0201_0100 => {
                // PD_GET_LIST / PD_LIST_QUERY: every disk for flag 0 (ALL) or in JBOD mode;
                // otherwise OK with nothing written (as QEMU).
                if len < 32 {
                    Err(0x03)
                } else if opcode == 0x0201_0000 || mbox0 == 0 || inner.jbod {
                    let n = inner.disks.len().min((len - 8) / 24);
                    let mut b = vec![0u8; 8 + 24 * n];
                    b[0..4].copy_from_slice(&((8 + 24 * n) as u32).to_le_bytes());
                    b[4..8].copy_from_slice(&(n as u32).to_le_bytes());
                    for (i, d) in inner.disks.iter().take(n).enumerate() {
                        let e = 8 + 24 * i;
                        let device_id = u16::from(d.id) << 8;
                        b[e..e + 2].copy_from_slice(&device_id.to_le_bytes());
                        b[e + 2..e + 4].copy_from_slice(&0xFFFFu16.to_le_bytes());
                        b[e + 5] = d.id;
                        b[e + 7] = 1;
                        let sas = (0x1221u64 << 48) | (u64::from(device_id) << 24);
                        b[e + 8..e + 16].copy_from_slice(&sas.to_le_bytes());
                    }
                    Ok(Some(b))
                } else {
                    Ok(None)
                }
            }
            0x0301_0000 => {
                if !(8..=1032).contains(&len) {
                    Err(0x03)
                } else {
                    // Empty in JBOD mode.
                    let listed = if inner.jbod { 0 } else { inner.disks.len() };
                    let n = listed.min(64).min((len - 8) / 16);
                    let mut b = vec![0u8; 8 + 16 * n];
                    b[0..4].copy_from_slice(&(n as u32).to_le_bytes());
                    // QEMU lists devices in reverse creation order.
                    for (i, d) in inner.disks.iter().rev().take(n).enumerate() {
                        let e = 8 + 16 * i;
                        b[e] = d.id;
                        b[e + 4] = 3;
                        b[e + 8..e + 16].copy_from_slice(&(d.blocks * u64::from(d.block_size) / 512).to_le_bytes());
                    }
                    Ok(Some(b))
                }
            }
            0x0301_0100 => {
                if len < 12 {
                    Err(0x03)
                } else {
                    let n = inner.disks.len().min(len - 11);
                    let mut b = vec![0u8; 11 + n];
                    b[0..4].copy_from_slice(&(11 + n as u32).to_le_bytes());
                    b[4..8].copy_from_slice(&(n as u32).to_le_bytes());
                    // QEMU's bug: it stores each device's LUN (0), not its target id.
                    Ok(Some(b))
                }
            }
            0x0302_0000 => {
                if len < 384 {
                    Err(0x03)
                } else {
                    match Self::find_disk(inner, mbox0, 0) {
                        None => Err(0x0C),
                        Some(di) => {
                            let d = &inner.disks[di];
                            let mut b = vec![0u8; 384];
                            b[0] = d.id;
                            b[0x23] = 3;
                            b[0x24] = 1;
                            b[0x26] = 3;
                            b[0x100..0x108].copy_from_slice(&(d.blocks * u64::from(d.block_size) / 512).to_le_bytes());
                            Ok(Some(b))
                        }
                    }
                }
            }
            0x0104_0500 => {
                // EVENT_WAIT never completes on QEMU.
                inner.held.push(frame);
                return;
            }
            0x0105_0000 => {
                inner.state = FwState::Ready;
                Ok(None)
            }
            // CTRL_CACHE_FLUSH: nothing is cached here (QEMU only drains in-flight I/O).
            0x0110_1000 => Ok(None),
            _ => Ok(None),
        };
        let status = match reply {
            Ok(Some(data)) => match buf {
                Some((addr, blen)) => {
                    let n = data.len().min(blen as usize);
                    if self.write_mem(addr, &data[..n]) {
                        0x00
                    } else {
                        Self::violation(
                            inner,
                            format!("DCMD 0x{opcode:08X} buffer at 0x{addr:X} outside DMA memory"),
                        );
                        0x20
                    }
                }
                None => 0x03,
            },
            Ok(None) => 0x00,
            Err(s) => s,
        };
        self.finish(inner, frame, ctx, status, 0, &[]);
    }
}

/// Register access to a [`FakeDevice`].
pub struct FakeMmio(Arc<FakeDevice>);

impl Mmio for FakeMmio {
    fn read32(&self, offset: u32) -> u32 {
        self.0.read_reg(offset)
    }
    fn write32(&self, offset: u32, value: u32) {
        self.0.write_reg(offset, value);
    }
}

/// Delay hook: advances the fake's virtual clock (no real sleeping) and runs queued I/O.
pub struct FakeDelay(Arc<FakeDevice>);

impl Delay for FakeDelay {
    fn delay_us(&self, us: u32) {
        self.0.tick(u64::from(us.max(1)));
    }
}

/// A data buffer in fake DMA memory.
pub struct FakeBuffer {
    dev: Arc<FakeDevice>,
    phys: u64,
    len: usize,
}

impl FakeBuffer {
    /// Bus address of the first byte.
    pub fn phys(&self) -> u64 {
        self.phys
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A segment covering `len` bytes at `off`.
    pub fn segment(&self, off: usize, len: u32) -> Segment {
        assert!(off + len as usize <= self.len, "segment past the buffer");
        Segment {
            phys: self.phys + off as u64,
            len,
        }
    }

    /// Writes `data` at `off`.
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len, "write past the buffer");
        assert!(self.dev.write_mem(self.phys + off as u64, data));
    }

    /// Reads `len` bytes at `off`.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len, "read past the buffer");
        self.dev.read_mem(self.phys + off as u64, len).expect("buffer memory")
    }
}
