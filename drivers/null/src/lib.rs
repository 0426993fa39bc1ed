//! A null block device (Linux's null_blk): a [`Driver`] with no hardware behind it.
//!
//! Used by the benchmark, by the host tests, and by the kernel as a real block device when no
//! controller is present. Completion modes:
//! - [`NullMode::Inline`]: the request ends inside `queue_rq` (null_blk `irqmode=0`); the
//!   completion policy is bypassed.
//! - [`NullMode::Immediate`]: the request is issued and its "interrupt" fires at once on the
//!   dispatching CPU, so it goes through the queue's completion policy.
//! - [`NullMode::Deferred`]: the request is issued and parked; it completes when the caller
//!   fires the hardware queue's "interrupt" ([`NullDriver::fire_interrupt`]) or polls it
//!   ([`blk::Queue::poll`]).
//!
//! Optional fault injection turns requests away (`Busy`) or fails them (`IoError`) with a
//! chosen probability, and an optional memory backing stores written data so that reads return
//! it.

#![no_std]

extern crate alloc;

use alloc::boxed::Box;
use alloc::vec::Vec;
use blk::list::{Links, TagStack};
use blk::{
    CachePadded, Driver, HwCtx, IssueToken, Op, Queue, QueueConfig, QueueRqError, Rq, SECTOR_SIZE, Segment, Status,
};
use core::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

/// When a null request completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullMode {
    /// Ended inside `queue_rq`.
    Inline,
    /// Issued, then completed at once through the completion policy on the dispatching CPU.
    Immediate,
    /// Issued and parked until `fire_interrupt` or `poll`.
    Deferred,
}

/// Null device parameters.
#[derive(Debug, Clone)]
pub struct NullConfig {
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Logical block size in bytes.
    pub logical_block_size: u32,
    /// Completion mode.
    pub mode: NullMode,
    /// Turn away about one request in this many with `Busy` (0: never).
    pub busy_one_in: u32,
    /// Fail about one request in this many with `IoError` (0: never).
    pub error_one_in: u32,
    /// Keep written data in memory (`capacity_sectors * 512` bytes are allocated) and copy it
    /// to and from segments that carry a CPU mapping.
    pub memory_backed: bool,
    /// Seed of the fault-injection decisions.
    pub seed: u64,
}

impl NullConfig {
    /// A fault-free, data-less device of `capacity_sectors` with 512-byte blocks and the given
    /// mode.
    pub fn new(capacity_sectors: u64, mode: NullMode) -> Self {
        Self {
            capacity_sectors,
            logical_block_size: SECTOR_SIZE,
            mode,
            busy_one_in: 0,
            error_one_in: 0,
            memory_backed: false,
            seed: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// A queue config for this device with the queue's defaults otherwise.
    pub fn queue_config(&self, ncpus: usize, nr_hw_queues: usize, depth: u32) -> QueueConfig {
        let mut c = QueueConfig::new(ncpus, nr_hw_queues, depth, self.capacity_sectors);
        c.logical_block_size = self.logical_block_size;
        // The null device discards any length in one request (Linux's null_blk: UINT_MAX >> 9).
        c.max_discard_sectors = u32::MAX >> 9;
        c
    }
}

/// The null driver. Build it with the queue's geometry so that it can index its own tables.
pub struct NullDriver {
    cfg: NullConfig,
    depth: u32,
    shared_tags: bool,
    /// Deferred mode: per hardware queue, requests waiting for their "interrupt".
    parked: Box<[CachePadded<TagStack>]>,
    links: Links,
    /// Status each parked request will complete with.
    parked_status: Box<[AtomicU8]>,
    /// The issue token of each parked request (what a real device echoes in its reply).
    parked_token: Box<[AtomicU32]>,
    /// Per hardware queue decision counter for fault injection.
    decisions: Box<[CachePadded<AtomicU64>]>,
    store: Option<Box<[AtomicU8]>>,
    /// What `queue_rq` does with every request when each succeeds at once (no fault
    /// injection, no memory to copy, not deferred), as one value: one test per request.
    fast: Fast,
}

/// [`NullDriver`]'s short path of `queue_rq`, decided once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fast {
    /// None: fault injection, memory or the deferred mode.
    No,
    /// Ends every request with success (the inline mode).
    End,
    /// Completes every request with success (the immediate mode).
    Complete,
}

fn mix(mut x: u64) -> u64 {
    // splitmix64 finaliser: a cheap, well-spread hash of a counter.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl NullDriver {
    /// A null driver for a queue of `nr_hw_queues` hardware queues and `depth` tags per tag
    /// set (`shared_tags`: one set for all queues, also with `host_tags`). These must match the
    /// queue's config.
    pub fn new(cfg: NullConfig, nr_hw_queues: usize, depth: u32, shared_tags: bool) -> Self {
        let nsets = if shared_tags { 1 } else { nr_hw_queues };
        let nreq = nsets * depth as usize;
        let store = cfg.memory_backed.then(|| {
            let bytes = cfg.capacity_sectors as usize * SECTOR_SIZE as usize;
            (0..bytes)
                .map(|_| AtomicU8::new(0))
                .collect::<Vec<_>>()
                .into_boxed_slice()
        });
        Self {
            depth,
            shared_tags,
            parked: (0..nr_hw_queues).map(|_| CachePadded(TagStack::new())).collect(),
            links: Links::new(nreq),
            parked_status: (0..nreq).map(|_| AtomicU8::new(0)).collect(),
            parked_token: (0..nreq).map(|_| AtomicU32::new(0)).collect(),
            decisions: (0..nr_hw_queues).map(|_| CachePadded(AtomicU64::new(0))).collect(),
            store,
            fast: match cfg.mode {
                _ if cfg.busy_one_in != 0 || cfg.error_one_in != 0 || cfg.memory_backed => Fast::No,
                NullMode::Inline => Fast::End,
                NullMode::Immediate => Fast::Complete,
                NullMode::Deferred => Fast::No,
            },
            cfg,
        }
    }

    /// The device parameters.
    pub fn config(&self) -> &NullConfig {
        &self.cfg
    }

    fn index(&self, hwq: usize, tag: u32) -> u32 {
        let set = if self.shared_tags { 0 } else { hwq as u32 };
        set * self.depth + tag
    }

    /// Fires hardware queue `hwq`'s "interrupt" on CPU `cpu`: completes every parked request
    /// of that queue through [`Queue::complete`]. Returns how many completed.
    pub fn fire_interrupt(&self, queue: &Queue<Self>, cpu: usize, hwq: usize) -> usize {
        let Some(parked) = self.parked.get(hwq) else {
            return 0;
        };
        // A plain load first: taking an empty list would still be an RMW on a line that the
        // submitting CPU writes.
        if parked.is_empty() {
            return 0;
        }
        let mut n = 0;
        for index in parked.take_all(&self.links) {
            let status = match self.parked_status[index as usize].load(Ordering::Relaxed) {
                0 => Status::Ok,
                _ => Status::IoError,
            };
            let token = IssueToken::from_bits(self.parked_token[index as usize].load(Ordering::Relaxed));
            if queue.complete(cpu, hwq, token, status).is_ok() {
                n += 1;
            }
        }
        n
    }

    /// Whether hardware queue `hwq` has parked requests (a hint).
    pub fn has_parked(&self, hwq: usize) -> bool {
        self.parked.get(hwq).is_some_and(|p| !p.is_empty())
    }

    fn copy_data(&self, op: Op, sector: u64, segments: &[Segment]) -> Status {
        let Some(store) = &self.store else {
            return Status::Ok;
        };
        let mut offset = sector as usize * SECTOR_SIZE as usize;
        for seg in segments {
            let len = seg.len as usize;
            if offset.checked_add(len).is_none_or(|end| end > store.len()) {
                return Status::IoError;
            }
            if let Some(virt) = seg.virt() {
                for i in 0..len {
                    let cell = &store[offset + i];
                    // SAFETY: the submitter created this segment with `Segment::with_virt`,
                    // promising that `virt..virt + len` is valid and reserved for this I/O
                    // until it completes; `i < len`.
                    unsafe {
                        let p = virt.add(i);
                        match op {
                            Op::Write => cell.store(p.read(), Ordering::Relaxed),
                            _ => p.write(cell.load(Ordering::Relaxed)),
                        }
                    }
                }
            }
            offset += len;
        }
        Status::Ok
    }
}

impl NullDriver {
    /// A discard on a memory-backed device reads back as zeros afterwards (what NVMe's
    /// deallocate reports with DLFEAT's "reads zeros"); without memory there is nothing to do.
    fn discard_data(&self, sector: u64, nr_sectors: u32) -> Status {
        let Some(store) = &self.store else {
            return Status::Ok;
        };
        let start = sector as usize * SECTOR_SIZE as usize;
        let len = nr_sectors as usize * SECTOR_SIZE as usize;
        let Some(cells) = start.checked_add(len).and_then(|end| store.get(start..end)) else {
            return Status::IoError;
        };
        for cell in cells {
            cell.store(0, Ordering::Relaxed);
        }
        Status::Ok
    }
}

impl Driver for NullDriver {
    type Pdu = ();

    /// Inlined into the dispatch pass, whose cost it is most of, with fault injection and the
    /// memory copy out of line.
    #[inline(always)]
    fn queue_rq<'a>(&self, hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, last: bool) -> Result<(), QueueRqError<'a, Self>> {
        // On the short paths nothing can fail, whatever the operation: without memory a read,
        // write or discard moves no data.
        match self.fast {
            Fast::Complete => rq.complete(Status::Ok),
            Fast::End => rq.end(Status::Ok),
            Fast::No => return self.queue_rq_in_full(hw, rq, last),
        }
        Ok(())
    }

    fn poll(&self, hw: &HwCtx<'_, Self>) -> usize {
        self.fire_interrupt(hw.queue(), hw.cpu(), hw.hwq())
    }
}

/// What [`NullDriver::outcome_in_full`] decided for a request.
enum Outcome {
    /// Fault injection turned it away.
    Busy,
    /// It ends (or completes, or is parked) with this status.
    Ends(Status),
}

impl NullDriver {
    /// [`Driver::queue_rq`] with fault injection, memory and the deferred mode. Only the
    /// decision goes out of line, without the handle: a handle passed to a call would have to
    /// be built in memory before the plain path's branch, on every request.
    #[inline(always)]
    fn queue_rq_in_full<'a>(
        &self,
        hw: &HwCtx<'a, Self>,
        rq: Rq<'a, Self>,
        _last: bool,
    ) -> Result<(), QueueRqError<'a, Self>> {
        let hwq = hw.hwq();
        let status = match self.outcome_in_full(hwq, rq.op(), rq.sector(), rq.nr_sectors(), rq.segments()) {
            Outcome::Busy => return Err(QueueRqError::Busy(rq)),
            Outcome::Ends(status) => status,
        };
        match self.cfg.mode {
            NullMode::Inline => rq.end(status),
            NullMode::Immediate => rq.complete(status),
            NullMode::Deferred => {
                let tag = rq.tag();
                let token = rq.issue();
                self.park(hwq, tag, status, token);
            }
        }
        Ok(())
    }

    /// Fault injection and the memory copy of one request.
    #[inline(never)]
    fn outcome_in_full(&self, hwq: usize, op: Op, sector: u64, nr_sectors: u32, segments: &[Segment]) -> Outcome {
        let mut status = Status::Ok;
        if self.cfg.busy_one_in != 0 || self.cfg.error_one_in != 0 {
            let n = self.decisions[hwq].fetch_add(1, Ordering::Relaxed);
            let r = mix(self.cfg.seed ^ n ^ ((hwq as u64) << 48));
            if self.cfg.busy_one_in != 0 && (r as u32).is_multiple_of(self.cfg.busy_one_in) {
                return Outcome::Busy;
            }
            if self.cfg.error_one_in != 0 && ((r >> 32) as u32).is_multiple_of(self.cfg.error_one_in) {
                status = Status::IoError;
            }
        }
        if status.is_ok() {
            match op {
                Op::Read | Op::Write => status = self.copy_data(op, sector, segments),
                Op::Discard => status = self.discard_data(sector, nr_sectors),
                Op::Flush | Op::Driver(_) => {}
            }
        }
        Outcome::Ends(status)
    }

    /// Parks an issued request of the deferred mode for `fire_interrupt`.
    #[inline(never)]
    fn park(&self, hwq: usize, tag: u32, status: Status, token: IssueToken) {
        let index = self.index(hwq, tag);
        self.parked_status[index as usize].store(u8::from(!status.is_ok()), Ordering::Relaxed);
        self.parked_token[index as usize].store(token.to_bits(), Ordering::Relaxed);
        // The push (Release) publishes `parked_status` and `parked_token` to
        // `fire_interrupt`.
        self.parked[hwq].push(index, &self.links);
    }
}
