//! The device floor: what the controller allows with no block layer in the way.
//!
//! [`Host::measure_floor`] keeps `queue_depth` one-block reads in flight on the calling CPU's
//! I/O queue pair, built and posted straight to its submission queue and reaped from its
//! completion queue, and times each one. No `blk` queue, no workload engine: every job's figure
//! can then be read as a fraction of this one.
//!
//! Command slots: with `Config::floor_slots` = N, every I/O submission queue has N slots after
//! the block layer's `namespaces × depth`, which only the floor uses. Their CIDs (slot index plus
//! the per-slot sequence number, like every CID) can therefore never be one a block-layer request
//! holds, whatever the block layer does meanwhile; both share the queue's rings and locks and the
//! controller's completion validation (a CQE naming a floor slot that is not outstanding, a wrong
//! SQ or SQ head is refused and counted like any other). Whoever drains the completion queue
//! (the run itself, an interrupt handler, a poll or the tick) hands a floor slot's completion to
//! [`FloorSlots::complete`], which the run watches.
//!
//! A run that sees no completion for `stall_timeout_ns` gives up with [`Error::FloorStalled`];
//! the reads it leaves with the device keep their slots (state [`ABANDONED`]) until their
//! completions arrive or a controller reset ends them, so a slot is never reused while the
//! device may still write into the run's buffer. The caller keeps that buffer for the same
//! reason (the kernel leaks it after a stall).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use blk::Status;

use super::{Host, SyncDelay, SyncDma, SyncMmio};
use crate::Error;
use crate::cmd::IoCmd;
use crate::controller::PostError;
use crate::prp;

/// Floor slots per I/O queue `nvme.floor=` reserves: enough for the QD 32 run.
pub const FLOOR_SLOTS: u32 = 32;

/// Per-slot state of a floor command: devhal's floor slot states.
use drvkit::floor::slot::{ABANDONED, DONE_FAILED, DONE_OK, IDLE, IN_FLIGHT};

pub use drvkit::floor::{FloorResult, FloorSpec};

/// The floor slots of every I/O queue and their states.
pub(super) struct FloorSlots {
    /// Slot index of the first floor slot (`namespaces × depth`).
    base: u32,
    /// Floor slots per queue (0: no floor).
    per_queue: u32,
    /// `[hwq × per_queue + i]`: state of floor slot `base + i` of hardware queue `hwq`.
    state: Vec<AtomicU8>,
    /// Per hardware queue: a run holds its floor slots.
    running: Vec<AtomicBool>,
    /// Floor completions delivered so far (a run's "news" while it waits).
    completions: AtomicU64,
    /// Completions of floor slots no run was waiting for (counted, dropped).
    stray: AtomicU64,
}

impl FloorSlots {
    pub(super) fn new(base: u32, per_queue: u32, queues: usize) -> Self {
        Self {
            base,
            per_queue,
            state: (0..queues * per_queue as usize).map(|_| AtomicU8::new(IDLE)).collect(),
            running: (0..queues).map(|_| AtomicBool::new(false)).collect(),
            completions: AtomicU64::new(0),
            stray: AtomicU64::new(0),
        }
    }

    /// Whether command slot `slot` is a floor slot (of any queue).
    pub(super) fn owns(&self, slot: u16) -> bool {
        (self.base..self.base + self.per_queue).contains(&u32::from(slot))
    }

    fn state(&self, hwq: usize, slot: u16) -> Option<&AtomicU8> {
        let i = u32::from(slot).checked_sub(self.base)?;
        if i >= self.per_queue {
            return None;
        }
        self.state.get(hwq * self.per_queue as usize + i as usize)
    }

    /// The controller accepted the completion of floor slot `slot` on `hwq` (or a reset ended
    /// its command): the device is done with it.
    pub(super) fn complete(&self, hwq: usize, slot: u16, status: Status) {
        let Some(state) = self.state(hwq, slot) else {
            self.stray.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let done = if status == Status::Ok { DONE_OK } else { DONE_FAILED };
        // AcqRel pairs with the run: Acquire sees its Release store of IN_FLIGHT, Release
        // publishes DONE to its Acquire load.
        match state.compare_exchange(IN_FLIGHT, done, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // Release pairs with the Acquire loads of the run's `news`.
                self.completions.fetch_add(1, Ordering::Release);
            }
            Err(ABANDONED) => {
                // Release pairs with the next run's Acquire load when it picks the slot.
                let _ = state.compare_exchange(ABANDONED, IDLE, Ordering::Release, Ordering::Relaxed);
            }
            Err(_) => {
                self.stray.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Slots whose reads a stalled run left with the device (not yet completed).
    fn abandoned(&self, hwq: usize) -> usize {
        (0..self.per_queue)
            .filter(|&i| {
                self.state
                    .get(hwq * self.per_queue as usize + i as usize)
                    .is_some_and(|s| s.load(Ordering::Relaxed) == ABANDONED)
            })
            .count()
    }
}

impl<M: SyncMmio, D: SyncDma, T: SyncDelay> Host<M, D, T> {
    /// Measures the device floor (see the module docs): `spec.ios` one-block reads of namespace
    /// index `namespace` at `spec.queue_depth`, on the I/O queue of CPU `cpu`, posted straight
    /// to its submission queue and reaped from its completion queue by this call (and by
    /// whoever else drains it), all into the buffer at bus address `buffer_phys`, `buffer_len`
    /// bytes (at least one logical block, dword aligned; a block of more than two pages needs
    /// the buffer page aligned). The reads overwrite it in any order, so its contents mean
    /// nothing afterwards; it must stay the device's after an error (see [`Error::FloorStalled`]).
    ///
    /// `wait(news)` runs whenever a pass found nothing new; `news()` says whether a completion
    /// arrived since (in the completion queue, or already delivered by an interrupt handler).
    /// Call this with interrupts disabled on `cpu` (the driver's locks are not interrupt-safe);
    /// in interrupt mode the kernel's `wait` halts with `sti; hlt` only when `news()` is false,
    /// then disables interrupts again, so no wake-up is lost; with polled queues it spins.
    ///
    /// Errors: [`Error::FloorUnavailable`] (no floor slots configured, bad namespace, CPU,
    /// spec or buffer), [`Error::FloorBusy`] (another run holds the queue's floor slots or a
    /// stalled run's reads are still with the device), [`Error::FloorStalled`], and what the
    /// controller refuses a post with.
    pub fn measure_floor(
        &self,
        cpu: usize,
        namespace: usize,
        spec: FloorSpec,
        buffer_phys: u64,
        buffer_len: usize,
        wait: &mut dyn FnMut(&dyn Fn() -> bool),
    ) -> Result<FloorResult, Error> {
        let inner = &self.inner;
        let floor = &inner.floor;
        let unavailable = |reason| Err(Error::FloorUnavailable { reason });
        if floor.per_queue == 0 {
            return unavailable("the controller has no floor slots (nvme.floor is off)");
        }
        let (Some(ns), Some(queue)) = (inner.ctrl.namespaces().get(namespace), inner.queues.get(namespace)) else {
            return unavailable("no such namespace");
        };
        let Some(hwq) = inner.plan.hwq_of_cpu(cpu) else {
            return unavailable("the CPU has no I/O queue");
        };
        if spec.ios == 0 || spec.queue_depth == 0 {
            return unavailable("a floor run needs at least one read and a queue depth of at least one");
        }
        let block = ns.lba_size;
        if (buffer_len as u64) < u64::from(block) {
            return unavailable("the buffer is smaller than one logical block");
        }
        // Reads of the buffer's whole blocks (the kernel passes the job's block size). The floor
        // slots have no PRP list page: a buffer that needs one is refused by the PRP rules.
        let read_blocks = (buffer_len as u64 / u64::from(block)).min(u64::from(u16::MAX) + 1) as u32;
        let read_len = u64::from(read_blocks) * u64::from(block);
        let prps = prp::build(&[(buffer_phys, read_len as u32)], read_len, ns.max_transfer, &mut [], 0)?;
        let depth = u32::from(spec.queue_depth).min(floor.per_queue).min(spec.ios) as usize;
        // Acquire pairs with the Release store that ends the previous run on this queue.
        if floor.running.get(hwq).is_none_or(|r| {
            r.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        }) {
            return Err(Error::FloorBusy {
                wanted: depth as u16,
                free: 0,
            });
        }
        // Acquire pairs with `complete`'s Release store of IDLE for an abandoned slot.
        let slots: Vec<u16> = (0..floor.per_queue)
            .map(|i| (floor.base + i) as u16)
            .filter(|&s| floor.state(hwq, s).is_some_and(|st| st.load(Ordering::Acquire) == IDLE))
            .take(depth)
            .collect();
        let result = if slots.len() < depth {
            Err(Error::FloorBusy {
                wanted: depth as u16,
                free: slots.len() as u16,
            })
        } else {
            self.floor_run(
                cpu,
                hwq,
                ns.nsid,
                (ns.blocks, read_blocks),
                spec,
                &slots,
                prps,
                queue.platform(),
                wait,
            )
        };
        // Release pairs with the Acquire of the next run's claim.
        floor.running[hwq].store(false, Ordering::Release);
        result
    }

    /// The run proper, with the queue's floor slots `slots` claimed.
    #[allow(clippy::too_many_arguments)]
    fn floor_run(
        &self,
        cpu: usize,
        hwq: usize,
        nsid: u32,
        (blocks, read_blocks): (u64, u32),
        spec: FloorSpec,
        slots: &[u16],
        prps: prp::Prps,
        platform: &dyn blk::Platform,
        wait: &mut dyn FnMut(&dyn Fn() -> bool),
    ) -> Result<FloorResult, Error> {
        let port = FloorRunPort {
            host: self,
            cpu,
            hwq,
            nsid,
            read_blocks,
            positions: (blocks / u64::from(read_blocks)).max(1),
            slots,
            prps,
            platform,
        };
        // Reads still with the device keep their slots (ABANDONED) until their completions
        // arrive or a reset ends them: `FloorSlots::complete` frees them, so nothing is left
        // to hand back here.
        drvkit::floor::run(&port, slots.len(), spec, wait).result
    }

    /// Floor slots of CPU `cpu`'s queue whose reads a stalled run left with the device, and
    /// floor completions no run was waiting for (diagnostics; both 0 after clean runs).
    pub fn floor_leftovers(&self, cpu: usize) -> (usize, u64) {
        let floor = &self.inner.floor;
        let abandoned = self.inner.plan.hwq_of_cpu(cpu).map_or(0, |h| floor.abandoned(h));
        (abandoned, floor.stray.load(Ordering::Relaxed))
    }
}

/// A floor run's view of one I/O queue (`drvkit::floor::run`): slot `i` is command slot
/// `slots[i]`, one of the queue's floor slots.
struct FloorRunPort<'a, M: SyncMmio, D: SyncDma, T: SyncDelay> {
    host: &'a Host<M, D, T>,
    cpu: usize,
    hwq: usize,
    nsid: u32,
    read_blocks: u32,
    /// Block-aligned positions where a read fits the namespace.
    positions: u64,
    slots: &'a [u16],
    prps: prp::Prps,
    platform: &'a dyn blk::Platform,
}

impl<M: SyncMmio, D: SyncDma, T: SyncDelay> drvkit::floor::FloorPort for FloorRunPort<'_, M, D, T> {
    type Error = Error;

    fn state(&self, i: usize) -> &AtomicU8 {
        self.host
            .inner
            .floor
            .state(self.hwq, self.slots[i])
            .expect("claimed slots are floor slots")
    }

    fn post(&self, i: usize, n: u32) -> Result<(), Error> {
        let lba = u64::from(n) % self.positions * u64::from(self.read_blocks);
        let mut sqe = IoCmd::read_write(false, self.nsid, lba, self.read_blocks);
        sqe.set_prps(self.prps.prp1, self.prps.prp2);
        self.host
            .inner
            .ctrl
            .post(self.hwq, self.slots[i], sqe, false, (), |()| (0, 0))
            .map_err(|(e, ())| match e {
                PostError::Busy => Error::NotOperational,
                PostError::Failed(e) => e,
            })
    }

    fn reap(&self) {
        self.host.inner.drain(self.hwq, self.cpu);
        self.host.inner.deliver_pending(self.cpu);
    }

    fn completions(&self) -> u64 {
        // Acquire pairs with the Release increment in `FloorSlots::complete`.
        self.host.inner.floor.completions.load(Ordering::Acquire)
    }

    fn replies_pending(&self) -> bool {
        self.host.inner.ctrl.cq_pending(self.hwq)
    }

    fn now_ns(&self) -> u64 {
        self.platform.now_ns()
    }

    fn stalled(&self, in_flight: u16, completed: u32, waited_ns: u64) -> Error {
        Error::FloorStalled {
            in_flight,
            completed,
            waited_ms: waited_ns / 1_000_000,
        }
    }
}
