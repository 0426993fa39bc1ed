//! The block-layer binding: one [`Host`] per controller, one `blk::Queue` per namespace, each
//! with one hardware queue per I/O queue pair.
//!
//! Command slots: every I/O submission queue has `namespaces × depth` command slots; request
//! `tag` of namespace `i` on hardware queue `h` uses slot `i × depth + tag` of SQ `h + 1` (and
//! that slot's PRP list page). The CID is the slot index plus a per-slot sequence number in the
//! spare high bits; the block-layer generation of the request is kept in the slot and handed back
//! with the completion, so a stale completion is refused twice over.
//!
//! Recovery (see [`Controller::timeout`]): a request that times out gets an Abort and one more
//! timeout period; if it is still outstanding then, the controller is reset. The timed-out
//! request ends with `Status::Timeout`; every other request in flight is re-issued once on the
//! re-created queues (a request that a reset already re-issued is failed with `IoError` instead).
//! Failures are delivered by [`Host::tick`] (or the next interrupt or poll), on the CPU running it.

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};

use blk::{
    BlkError, CompletionPolicy, Driver, HwCtx, Op, Platform, Queue, QueueConfig, QueueRqError, Rq, Status, TimedOutRq,
    TimeoutAction,
};
use spin::Mutex;

use crate::adaptive::{AdaptiveConfig, AdaptiveCounters, VectorMask, Windows};
use crate::cmd::IoCmd;
use crate::controller::{PostError, ResetOutcome, TimeoutVerdict};
use crate::{Controller, Delay, Dma, Error, Mmio, NamespaceInfo, NvmeStatus, QueuePlan, Report, prp};

mod floor;
pub use floor::{FLOOR_SLOTS, FloorResult, FloorSpec};

/// The block layer's issue/complete calls, in one place so that an API change touches only this.
mod glue {
    use blk::{BlkError, CompletionBatch, Driver, IssueToken, Queue, Rq, Status, TimedOutRq};

    /// Marks `rq` issued; returns the generation of this issue and when it was issued.
    pub fn issue<D: Driver>(rq: Rq<'_, D>) -> (u16, u64) {
        let (token, issued_ns) = rq.issue_timed();
        (token.generation(), issued_ns)
    }

    /// Reports the completion of issue `generation` of `tag`.
    pub fn complete<D: Driver>(
        queue: &Queue<D>,
        cpu: usize,
        hwq: usize,
        tag: u32,
        generation: u16,
        status: Status,
    ) -> Result<(), BlkError> {
        queue.complete(cpu, hwq, IssueToken::new(tag, generation), status)
    }

    /// Opens a batch for the completions one drain reaps from hardware queue `hwq` of `queue`.
    pub fn completion_batch<D: Driver>(
        queue: &Queue<D>,
        cpu: usize,
        hwq: usize,
    ) -> Result<CompletionBatch<'_, D>, BlkError> {
        queue.completion_batch(cpu, hwq)
    }

    /// [`complete`] inside a batch from [`completion_batch`].
    pub fn complete_in<D: Driver>(
        batch: &mut CompletionBatch<'_, D>,
        tag: u32,
        generation: u16,
        status: Status,
    ) -> Result<(), BlkError> {
        batch.complete(IssueToken::new(tag, generation), status)
    }

    /// Hands issue `generation` of `tag` back to be dispatched again (new generation, fresh
    /// deadline).
    pub fn requeue<D: Driver>(
        queue: &Queue<D>,
        cpu: usize,
        hwq: usize,
        tag: u32,
        generation: u16,
    ) -> Result<(), BlkError> {
        queue.requeue(cpu, hwq, IssueToken::new(tag, generation))
    }

    /// The generation of the issue that timed out.
    pub fn timed_out_generation<D: Driver>(rq: &TimedOutRq<'_, D>) -> u16 {
        rq.token().generation()
    }
}

/// [`Mmio`] usable from every CPU (what a `blk::Driver` needs).
pub trait SyncMmio: Mmio + Send + Sync + 'static {}
impl<X: Mmio + Send + Sync + 'static> SyncMmio for X {}
/// [`Dma`] usable from every CPU.
pub trait SyncDma: Dma + Send + Sync + 'static {}
impl<X: Dma + Send + Sync + 'static> SyncDma for X {}
/// [`Delay`] usable from every CPU.
pub trait SyncDelay: Delay + Send + Sync + 'static {}
impl<X: Delay + Send + Sync + 'static> SyncDelay for X {}

/// Block-layer settings of every namespace queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// Request timeout in ns (0: none). The first expiry sends Abort, the second resets.
    pub timeout_ns: u64,
    /// Initial completion policy.
    pub completion: CompletionPolicy,
    /// Most completion entries one `handle_vector`/`poll` call takes from one CQ (0: the CQ
    /// size). Bounds the work per interrupt; the rest waits for the next call.
    pub cq_budget: u32,
    /// Adaptive interrupt-then-poll completion (`nvme.irq_poll=`, [`crate::adaptive`]); `None`:
    /// one interrupt per doorbell pass as the device sends them. MSI-X plans only.
    pub adaptive: Option<AdaptiveConfig>,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            timeout_ns: 30_000_000_000,
            completion: CompletionPolicy::Irq,
            cq_budget: 0,
            adaptive: None,
        }
    }
}

/// The adaptive mode's state: a window per vector and the clock its idle times are read from.
struct Adaptive {
    windows: Windows,
    clock: Arc<dyn Platform>,
}

/// The `blk::Driver` of one namespace.
pub struct NsDriver<M: SyncMmio, D: SyncDma, T: SyncDelay> {
    ctrl: Arc<Controller<M, D, T>>,
    host: Weak<HostInner<M, D, T>>,
    /// This namespace's first command slot (its index × the depth): a request's slot is this
    /// plus its tag.
    slot_base: u32,
    nsid: u32,
    lba_shift: u32,
    /// Logical block size - 1 (the bits a byte offset or length in whole blocks has clear).
    lba_mask: u64,
    max_transfer: u64,
}

/// Counters of the binding (the controller's are in [`Report`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostReport {
    /// The controller's counters.
    pub controller: Report,
    /// Completions delivered per interrupt vector (by `handle_vector`).
    pub per_vector: Vec<u64>,
    /// Completions delivered by polling.
    pub polled: u64,
    /// Requests failed by recovery (delivered with `IoError` after a reset).
    pub failed_by_recovery: u64,
    /// Completions the block layer refused (stale generation, not in flight).
    pub refused_by_blk: u64,
    /// Requests refused before reaching the device (bad alignment, PRP rules, too long).
    pub rejected: u64,
}

struct HostInner<M: SyncMmio, D: SyncDma, T: SyncDelay> {
    ctrl: Arc<Controller<M, D, T>>,
    plan: QueuePlan,
    queues: Vec<Queue<NsDriver<M, D, T>>>,
    depth: u32,
    budget: u32,
    per_vector: Vec<AtomicU64>,
    polled: AtomicU64,
    failed_by_recovery: AtomicU64,
    refused_by_blk: AtomicU64,
    rejected: AtomicU64,
    io_errors_logged: AtomicU64,
    /// (hwq, slot, generation, status) failed by a reset, waiting for a context with a CPU
    /// number: `Timeout` for the reset's culprit, `IoError` for the rest.
    pending_failures: Mutex<Vec<(usize, u16, u16, Status)>>,
    /// (hwq, slot, generation) a reset handed back, to requeue through blk once no driver or
    /// blk lock is held (requeue may dispatch, i.e. call `queue_rq`, at once).
    pending_requeues: Mutex<Vec<(usize, u16, u16)>>,
    has_pending: AtomicBool,
    /// Held by the CPU running the timeout scans of this controller's queues (one at a time:
    /// another CPU's tick skips the scan; the periodic tick comes again).
    scan: Mutex<()>,
    /// The CPU holding `scan` (`usize::MAX`: none), so that a timeout handler, which blk calls
    /// without a CPU number, can requeue what its reset handed back at once, before the scan
    /// reaches those requests and finds their pre-reset deadlines passed.
    scan_cpu: AtomicUsize,
    /// Per hardware queue: a drain stopped at its budget with entries left. The device does not
    /// signal again for entries already posted, so the tick drains these.
    leftover: Vec<AtomicBool>,
    /// The floor's command slots (see [`floor`]).
    floor: floor::FloorSlots,
    /// `nvme.irq_poll=`: polling windows per vector (`None`: off).
    adaptive: Option<Adaptive>,
}

/// One NVMe controller bound to the block layer.
pub struct Host<M: SyncMmio, D: SyncDma, T: SyncDelay> {
    inner: Arc<HostInner<M, D, T>>,
}

impl<M: SyncMmio, D: SyncDma, T: SyncDelay> Clone for Host<M, D, T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<M: SyncMmio, D: SyncDma, T: SyncDelay> Host<M, D, T> {
    /// Creates the I/O queues of `plan` on `ctrl` (MSI-X must already be programmed and enabled
    /// when the plan uses it) and one `blk::Queue` per namespace, in [`Controller::namespaces`]
    /// order, with `plan.cpu_map()` as the CPU map. `platform_for(i, ns)` gives namespace `i`'s
    /// blk platform (the kernel gives each block device its own completion sink).
    pub fn new(
        mut ctrl: Controller<M, D, T>,
        plan: QueuePlan,
        cfg: HostConfig,
        mut platform_for: impl FnMut(usize, &NamespaceInfo) -> Arc<dyn Platform>,
    ) -> Result<Self, Error> {
        let namespaces: Vec<NamespaceInfo> = ctrl.namespaces().to_vec();
        if cfg.adaptive.is_some() && !matches!(plan.mode(), crate::IrqMode::MsiX { .. }) {
            return Err(Error::InvalidConfig {
                field: "nvme.irq_poll with interrupts other than MSI-X",
                value: 0,
                accepted: "MSI-X (the per-vector mask bit)",
            });
        }
        ctrl.create_io_queues(&plan, namespaces.len())?;
        let depth = ctrl.queue_depth();
        let budget = if cfg.cq_budget == 0 {
            ctrl.io_queue_entries()
        } else {
            cfg.cq_budget
        };
        let ctrl = Arc::new(ctrl);
        let mut failure: Option<Error> = None;
        let inner = Arc::new_cyclic(|weak: &Weak<HostInner<M, D, T>>| {
            let mut queues = Vec::new();
            let mut clock: Option<Arc<dyn Platform>> = None;
            for (i, ns) in namespaces.iter().enumerate() {
                let driver = NsDriver {
                    ctrl: Arc::clone(&ctrl),
                    host: weak.clone(),
                    slot_base: i as u32 * depth,
                    nsid: ns.nsid,
                    lba_shift: ns.lba_size.trailing_zeros(),
                    lba_mask: u64::from(ns.lba_size) - 1,
                    max_transfer: ns.max_transfer,
                };
                let mut qc = QueueConfig::new(
                    plan.ncpus(),
                    plan.nr_io_queues(),
                    depth,
                    ns.blocks.saturating_mul(u64::from(ns.lba_size)) / u64::from(blk::SECTOR_SIZE),
                );
                qc.logical_block_size = ns.lba_size;
                qc.max_segments = prp::max_data_pages(ns.max_transfer) as usize;
                // MDTS: longer reads and writes are split by blk.
                qc.max_hw_sectors = u32::try_from(ns.max_transfer / u64::from(blk::SECTOR_SIZE))
                    .unwrap_or(u32::MAX)
                    .max(ns.lba_size / blk::SECTOR_SIZE);
                // Discard through Dataset Management only where ONCS says the controller has it
                // (one range of at most 2^32 - 1 blocks per command; blk splits longer ones).
                if ctrl.info().dataset_management {
                    qc.max_discard_sectors =
                        u32::try_from(u64::from(u32::MAX) * u64::from(ns.lba_size / blk::SECTOR_SIZE))
                            .unwrap_or(u32::MAX);
                }
                qc.timeout_ns = cfg.timeout_ns;
                qc.completion = cfg.completion;
                qc.cpu_map = Some(plan.cpu_map().to_vec());
                let platform = platform_for(i, ns);
                clock.get_or_insert_with(|| Arc::clone(&platform));
                match Queue::new(qc, driver, platform) {
                    Ok(q) => queues.push(q),
                    Err(e) => {
                        failure = Some(Error::Blk(e));
                        break;
                    }
                }
            }
            HostInner {
                ctrl: Arc::clone(&ctrl),
                per_vector: (0..plan.nr_vectors()).map(|_| AtomicU64::new(0)).collect(),
                plan: plan.clone(),
                queues,
                depth,
                budget,
                polled: AtomicU64::new(0),
                failed_by_recovery: AtomicU64::new(0),
                refused_by_blk: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
                io_errors_logged: AtomicU64::new(0),
                pending_failures: Mutex::new(Vec::new()),
                pending_requeues: Mutex::new(Vec::new()),
                has_pending: AtomicBool::new(false),
                scan: Mutex::new(()),
                scan_cpu: AtomicUsize::new(usize::MAX),
                leftover: (0..plan.nr_io_queues()).map(|_| AtomicBool::new(false)).collect(),
                floor: floor::FloorSlots::new(
                    ctrl.cids_per_queue() - ctrl.floor_slots(),
                    ctrl.floor_slots(),
                    plan.nr_io_queues(),
                ),
                // Without a namespace there is no I/O and nothing to adapt.
                adaptive: cfg.adaptive.zip(clock).map(|(config, clock)| Adaptive {
                    windows: Windows::new(config, plan.nr_vectors()),
                    clock,
                }),
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(Self { inner })
    }

    /// The controller.
    pub fn controller(&self) -> &Controller<M, D, T> {
        &self.inner.ctrl
    }
    /// The queue plan.
    pub fn plan(&self) -> &QueuePlan {
        &self.inner.plan
    }
    /// Namespaces, index `i` being `queue(i)`.
    pub fn namespaces(&self) -> &[NamespaceInfo] {
        self.inner.ctrl.namespaces()
    }
    /// The block queue of namespace index `i` (the kernel names it `nvme<c>n<i+1>`).
    pub fn queue(&self, i: usize) -> Option<&Queue<NsDriver<M, D, T>>> {
        self.inner.queues.get(i)
    }
    /// Every namespace queue.
    pub fn queues(&self) -> &[Queue<NsDriver<M, D, T>>] {
        &self.inner.queues
    }

    /// Interrupt handler body for MSI-X table entry (or INTx line) `vector`, running on `cpu`:
    /// drains every completion queue on that vector (bounded per queue) and reports each
    /// completion to its namespace's queue. Returns the completions delivered.
    pub fn handle_vector(&self, vector: usize, cpu: usize) -> usize {
        self.inner.handle_vector(vector, cpu)
    }

    /// Reaps hardware queue `hwq` by polling (polled queues, or a CPU waiting for its I/O).
    pub fn poll(&self, hwq: usize, cpu: usize) -> usize {
        self.inner.poll(hwq, cpu)
    }

    /// Whether the adaptive mode (`nvme.irq_poll=`) is on.
    pub fn is_adaptive(&self) -> bool {
        self.inner.adaptive.is_some()
    }

    /// Adaptive mode: the polling window of the vector of `cpu`'s queue is open (the vector is
    /// masked), so a CPU waiting for a completion must poll ([`Self::poll_adaptive`]) rather
    /// than halt.
    pub fn polling_window(&self, cpu: usize) -> bool {
        self.inner.window_of_cpu(cpu).is_some_and(|w| w.is_open())
    }

    /// Whether a CPU waiting for its I/O must poll ([`Self::poll_adaptive`]) rather than halt:
    /// its queue is polled (`nvme.poll_queues=`, `nvme.irq=poll`: no interrupt will come), or
    /// its vector's polling window is open ([`Self::polling_window`]).
    pub fn must_poll(&self, cpu: usize) -> bool {
        self.inner.plan.cpu_polls(cpu) || self.polling_window(cpu)
    }

    /// [`Self::handle_vector`] for the adaptive mode: when the interrupt reaped something and the
    /// vector's window is closed, masks the vector through `mask` and opens the window. Without
    /// the adaptive mode it is `handle_vector`.
    pub fn handle_vector_adaptive(&self, vector: usize, cpu: usize, mask: &dyn VectorMask) -> usize {
        let inner = &*self.inner;
        let n = inner.handle_vector(vector, cpu);
        if let Some(a) = &inner.adaptive
            && let Some(w) = a.windows.vectors.get(vector)
            && let Ok(v) = u16::try_from(vector)
        {
            w.after_interrupt(n, a.clock.now_ns(), || mask.set_masked(v, true));
        }
        n
    }

    /// [`Self::poll`] for the adaptive mode: reaps `hwq`; while its vector's window is open,
    /// closes it when nothing completed for the idle time or the budget is spent: unmask, then
    /// reap every queue of the vector once more, so a completion that landed between the last
    /// empty reap and the unmask is delivered now (see [`crate::adaptive`] for why nothing can
    /// be stranded). Returns completions delivered.
    pub fn poll_adaptive(&self, hwq: usize, cpu: usize, mask: &dyn VectorMask) -> usize {
        let inner = &*self.inner;
        let mut n = inner.poll(hwq, cpu);
        let Some(a) = &inner.adaptive else {
            return n;
        };
        let Some(v) = inner.plan.vector_of_hwq(hwq) else {
            return n;
        };
        let Some(w) = a.windows.vectors.get(usize::from(v)) else {
            return n;
        };
        if w.poll_done(&a.windows.config, n, a.clock.now_ns(), || mask.set_masked(v, false)) {
            // The unmask (an MMIO store) before the re-reap's loads of the completion queues.
            fence(Ordering::SeqCst);
            let caught: usize = inner
                .plan
                .hwqs_of_vector(usize::from(v))
                .map(|h| inner.poll(h, cpu))
                .sum();
            w.caught(caught);
            n += caught;
        }
        n
    }

    /// Adaptive mode, from the periodic tick: polls every queue whose vector's window is open,
    /// so a window that no waiting CPU polls (its job ended) still closes once idle.
    pub fn poll_open_windows(&self, cpu: usize, mask: &dyn VectorMask) -> usize {
        let Some(a) = &self.inner.adaptive else {
            return 0;
        };
        (0..self.inner.plan.nr_io_queues())
            .filter(|&h| {
                self.inner
                    .plan
                    .vector_of_hwq(h)
                    .and_then(|v| a.windows.vectors.get(usize::from(v)))
                    .is_some_and(|w| w.is_open())
            })
            .map(|h| self.poll_adaptive(h, cpu, mask))
            .sum()
    }

    /// Counters of the adaptive mode (zero without it).
    pub fn adaptive_counters(&self) -> AdaptiveCounters {
        self.inner
            .adaptive
            .as_ref()
            .map_or_else(AdaptiveCounters::default, |a| a.windows.counters())
    }

    /// The periodic tick: drains queues an interrupt left entries in (work bound reached), runs
    /// every namespace queue's timeout scan (which may abort or reset) and delivers what a reset
    /// failed. Returns the number of requests that timed out.
    pub fn tick(&self, cpu: usize) -> Result<usize, BlkError> {
        for (hwq, left) in self.inner.leftover.iter().enumerate() {
            if left.swap(false, Ordering::Relaxed) {
                self.inner.drain(hwq, cpu);
            }
        }
        let mut expired = 0;
        let mut result = Ok(());
        if let Some(_scan) = self.inner.scan.try_lock() {
            // Relaxed: read back only by timeout handlers this CPU runs inside `q.tick`.
            self.inner.scan_cpu.store(cpu, Ordering::Relaxed);
            for q in &self.inner.queues {
                match q.tick(cpu) {
                    Ok(n) => expired += n,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            self.inner.scan_cpu.store(usize::MAX, Ordering::Relaxed);
        }
        self.inner.deliver_pending(cpu);
        result.map(|()| expired)
    }

    /// Resets the controller now (e.g. the kernel saw CSTS.CFS): every command in flight is
    /// re-issued once or, if a reset already re-issued it, failed (delivered on `cpu`). Returns
    /// (re-issued, failed, whether the controller came back).
    pub fn reset(&self, cpu: usize) -> (usize, usize, bool) {
        let outcome = self.inner.ctrl.reset(None);
        self.inner.defer_outcome(&outcome, (usize::MAX, 0));
        self.inner.deliver_pending(cpu);
        (outcome.reissued, outcome.failed.len(), outcome.ok)
    }

    /// Counters.
    pub fn report(&self) -> HostReport {
        let i = &self.inner;
        HostReport {
            controller: i.ctrl.report(),
            per_vector: i.per_vector.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            polled: i.polled.load(Ordering::Relaxed),
            failed_by_recovery: i.failed_by_recovery.load(Ordering::Relaxed),
            refused_by_blk: i.refused_by_blk.load(Ordering::Relaxed),
            rejected: i.rejected.load(Ordering::Relaxed),
        }
    }
}

impl<M: SyncMmio, D: SyncDma, T: SyncDelay> HostInner<M, D, T> {
    /// The window of the vector of `cpu`'s queue, in the adaptive mode.
    fn window_of_cpu(&self, cpu: usize) -> Option<&crate::adaptive::VectorWindow> {
        let a = self.adaptive.as_ref()?;
        let v = self.plan.vector_of_hwq(self.plan.hwq_of_cpu(cpu)?)?;
        a.windows.vectors.get(usize::from(v))
    }

    fn handle_vector(&self, vector: usize, cpu: usize) -> usize {
        let mut n = 0;
        for hwq in self.plan.hwqs_of_vector(vector) {
            n += self.drain(hwq, cpu);
        }
        if let Some(c) = self.per_vector.get(vector) {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        self.deliver_pending(cpu);
        n
    }

    fn poll(&self, hwq: usize, cpu: usize) -> usize {
        // A busy-wait poll mostly finds the CQ empty: that costs the head entry's phase tag
        // (read under the CQ lock, taken only if free; see `Controller::cq_pending`), not both
        // queue locks and a block-layer batch. A busy CQ lock counts as news, so a drain
        // in progress elsewhere is waited for, as the drain itself would.
        if !self.ctrl.cq_pending(hwq) {
            self.deliver_pending(cpu);
            return 0;
        }
        let n = self.drain(hwq, cpu);
        self.polled.fetch_add(n as u64, Ordering::Relaxed);
        self.deliver_pending(cpu);
        n
    }

    fn drain(&self, hwq: usize, cpu: usize) -> usize {
        // The first namespace's completions (the common case: one namespace) go through one
        // block-layer batch: the CPU and queue checked once, the queue's rerun check once, when
        // the batch is dropped after the last delivery.
        let mut first = self
            .queues
            .first()
            .and_then(|q| glue::completion_batch(q, cpu, hwq).ok());
        let (n, more) = self.ctrl.drain(hwq, self.budget, |acc| {
            let status = acc.status;
            // Success decided once, here (not again in `to_blk`).
            let blk_status = if status.is_success() {
                Status::Ok
            } else {
                self.log_io_error(hwq, acc.slot, status);
                status.to_blk()
            };
            if u32::from(acc.slot) < self.depth
                && let Some(batch) = first.as_mut()
            {
                if glue::complete_in(batch, u32::from(acc.slot), acc.generation, blk_status).is_err() {
                    self.refused_by_blk.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                self.deliver(cpu, hwq, acc.slot, acc.generation, blk_status);
            }
        });
        drop(first);
        if more && let Some(l) = self.leftover.get(hwq) {
            l.store(true, Ordering::Relaxed);
        }
        n
    }

    fn deliver(&self, cpu: usize, hwq: usize, slot: u16, generation: u16, status: Status) {
        // The first namespace's slots need no division (one namespace is the common case), nor
        // the floor's range test: the floor's slots follow every namespace's.
        let (ns, tag) = if u32::from(slot) < self.depth {
            (0, u32::from(slot))
        } else if self.floor.owns(slot) {
            self.floor.complete(hwq, slot, status);
            return;
        } else {
            (usize::from(slot) / self.depth as usize, u32::from(slot) % self.depth)
        };
        let Some(q) = self.queues.get(ns) else {
            self.refused_by_blk.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if glue::complete(q, cpu, hwq, tag, generation, status).is_err() {
            self.refused_by_blk.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn log_io_error(&self, hwq: usize, slot: u16, status: NvmeStatus) {
        let n = self.io_errors_logged.fetch_add(1, Ordering::Relaxed);
        if n < 16 || n.is_power_of_two() {
            log::warn!(
                "nvme: I/O error on queue {} slot {slot}: {status} ({} so far)",
                hwq + 1,
                n + 1
            );
        }
    }

    /// Queues what a reset did for delivery: the failures (except `trigger`, which its timeout
    /// handler ends) and the requeues; neither may run under the reset's locks.
    fn defer_outcome(&self, outcome: &ResetOutcome, trigger: (usize, u16)) {
        let any = {
            let mut p = self.pending_failures.lock();
            for &(h, s, g) in &outcome.failed {
                if (h, s) == trigger {
                    continue;
                }
                let status = if outcome.culprit == Some((h, s, g)) {
                    Status::Timeout
                } else {
                    Status::IoError
                };
                p.push((h, s, g, status));
            }
            !p.is_empty()
        };
        let any = {
            let mut r = self.pending_requeues.lock();
            r.extend_from_slice(&outcome.handed_back);
            any || !r.is_empty()
        };
        if any {
            // Release pairs with the Acquire in `deliver_pending`: the lists are filled first.
            self.has_pending.store(true, Ordering::Release);
        }
    }

    /// Delivers what a reset deferred ([`Self::defer_outcome`]). The test is inlined (every
    /// poll and interrupt asks, and there is rarely anything); the delivery is out of line.
    #[inline(always)]
    fn deliver_pending(&self, cpu: usize) {
        if self.has_pending.load(Ordering::Acquire) {
            self.deliver_pending_now(cpu);
        }
    }

    /// [`Self::deliver_pending`]'s delivery.
    #[cold]
    #[inline(never)]
    fn deliver_pending_now(&self, cpu: usize) {
        self.has_pending.store(false, Ordering::Relaxed);
        let failures = core::mem::take(&mut *self.pending_failures.lock());
        let requeues = core::mem::take(&mut *self.pending_requeues.lock());
        for (hwq, slot, generation, status) in failures {
            if status == Status::IoError {
                self.failed_by_recovery.fetch_add(1, Ordering::Relaxed);
            }
            self.deliver(cpu, hwq, slot, generation, status);
        }
        for (hwq, slot, generation) in requeues {
            if self.floor.owns(slot) {
                // The reset ended a floor read (the device let go of it): nothing to re-issue.
                self.ctrl.forget_handed_back(hwq, slot);
                self.floor.complete(hwq, slot, Status::Aborted);
                continue;
            }
            let ns = usize::from(slot) / self.depth as usize;
            let tag = u32::from(slot) % self.depth;
            let requeued = self
                .queues
                .get(ns)
                .is_some_and(|q| glue::requeue(q, cpu, hwq, tag, generation).is_ok());
            if !requeued {
                // It ended some other way (its own timeout verdict): nothing to re-issue.
                self.refused_by_blk.fetch_add(1, Ordering::Relaxed);
                self.ctrl.forget_handed_back(hwq, slot);
            }
        }
    }
}

impl<M: SyncMmio, D: SyncDma, T: SyncDelay> NsDriver<M, D, T> {
    fn slot(&self, tag: u32) -> u16 {
        (self.slot_base + tag) as u16
    }

    /// A request the driver cannot build a command for: logged, counted, failed.
    #[cold]
    fn refuse<'a>(&self, rq: Rq<'a, Self>, e: Error) -> QueueRqError<'a, Self> {
        log::warn!("nvme: {:?} at sector {} refused: {e}", rq.op(), rq.sector());
        self.reject();
        QueueRqError::Io(rq, Status::IoError)
    }

    /// A request whose command could not be posted (the controller failed): logged, failed.
    #[cold]
    fn not_posted<'a>(&self, hwq: usize, rq: Rq<'a, Self>, e: Error) -> QueueRqError<'a, Self> {
        log::warn!("nvme: cannot post on queue {}: {e}", hwq + 1);
        QueueRqError::Io(rq, Status::IoError)
    }

    fn reject(&self) {
        if let Some(h) = self.host.upgrade() {
            h.rejected.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The SQE of a read or write, PRPs built into the slot's list page. Inlined into
    /// `queue_rq`, so the entry is built where `post` reads it (one copy fewer).
    #[inline(always)]
    fn build_rw(&self, hwq: usize, slot: u16, rq: &Rq<'_, Self>, write: bool) -> Result<IoCmd, Error> {
        let sector = rq.sector();
        let bytes = rq.bytes();
        if !rw_fits(sector, bytes, self.lba_mask, self.max_transfer) {
            return Err(rw_refusal(sector, bytes, self.lba_shift, self.max_transfer));
        }
        let offset = sector << SECTOR_SHIFT;
        let blocks = (bytes >> self.lba_shift) as u32;
        let mut sqe = IoCmd::read_write(write, self.nsid, offset >> self.lba_shift, blocks);
        let prps = match prp::without_list(rq.segments(), bytes, self.max_transfer)? {
            Some(prps) => prps,
            None => {
                // SAFETY: this request holds block-layer tag `tag` of hardware queue `hwq`, which
                // is the only user of command slot `slot` there; its previous command has
                // completed (the tag was free) or the controller was reset, so the device does
                // not read the list now.
                let (list, list_phys) = unsafe { self.ctrl.prp_list(hwq, slot) };
                prp::build(rq.segments(), bytes, self.max_transfer, list, list_phys)?
            }
        };
        sqe.set_prps(prps.prp1, prps.prp2);
        Ok(sqe)
    }
}

/// log2 of `blk::SECTOR_SIZE`.
const SECTOR_SHIFT: u32 = blk::SECTOR_SIZE.trailing_zeros();
const _: () = assert!(1 << SECTOR_SHIFT == blk::SECTOR_SIZE);

/// Whether a read or write of `bytes` at `sector` can be one command: its byte offset fits in
/// 64 bits (sector below 2^55), offset and length are whole logical blocks (`lba_mask`: the
/// block size - 1), and the length is 1..=`max_transfer`. One test for all of it, not a branch per check
/// with the error's fields set up before the first; [`rw_refusal`] says which failed.
#[inline(always)]
fn rw_fits(sector: u64, bytes: u64, lba_mask: u64, max_transfer: u64) -> bool {
    let misfit = (sector >> (64 - SECTOR_SHIFT)) | ((sector << SECTOR_SHIFT) & lba_mask) | (bytes & lba_mask);
    // `bytes - 1 < max`: the wrap of 0 makes it fail too.
    misfit == 0 && bytes.wrapping_sub(1) < max_transfer
}

/// The error of a read or write [`rw_fits`] refused (out of line).
#[cold]
#[inline(never)]
fn rw_refusal(sector: u64, bytes: u64, lba_shift: u32, max_transfer: u64) -> Error {
    let lba = 1u64 << lba_shift;
    let aligned = sector
        .checked_mul(u64::from(blk::SECTOR_SIZE))
        .is_some_and(|o| o % lba == 0 && bytes.is_multiple_of(lba) && bytes > 0);
    if !aligned {
        return Error::InvalidConfig {
            field: "request alignment",
            value: sector,
            accepted: "whole logical blocks",
        };
    }
    Error::TransferTooLarge {
        bytes,
        max: max_transfer,
    }
}

impl<M: SyncMmio, D: SyncDma, T: SyncDelay> NsDriver<M, D, T> {
    /// The SQE of a discard: Dataset Management, Deallocate, one range written into the slot's
    /// list page (blk sends a discard here only when ONCS has Dataset Management, for which the
    /// controller gave every slot a list page).
    fn build_discard(&self, hwq: usize, slot: u16, rq: &Rq<'_, Self>) -> Result<IoCmd, Error> {
        let lba = 1u64 << self.lba_shift;
        let offset = rq.sector().checked_mul(u64::from(blk::SECTOR_SIZE));
        let bytes = rq.bytes();
        let Some(offset) = offset.filter(|o| o % lba == 0 && bytes.is_multiple_of(lba) && bytes > 0) else {
            return Err(Error::InvalidConfig {
                field: "discard alignment",
                value: rq.sector(),
                accepted: "whole logical blocks",
            });
        };
        let Ok(blocks) = u32::try_from(bytes >> self.lba_shift) else {
            return Err(Error::TransferTooLarge {
                bytes,
                max: u64::from(u32::MAX) << self.lba_shift,
            });
        };
        // SAFETY: as in `build_rw`: this request holds the tag that owns command slot `slot`
        // on `hwq`, and the slot's previous command is no longer in flight.
        let (list, list_phys) = unsafe { self.ctrl.prp_list(hwq, slot) };
        let Some(range) = list.get_mut(..2) else {
            return Err(Error::Unsupported {
                what: "discard without a range list page (Dataset Management not in ONCS)",
                value: u64::from(slot),
            });
        };
        range.copy_from_slice(&crate::cmd::dsm_range(offset >> self.lba_shift, blocks));
        Ok(IoCmd::deallocate(self.nsid, list_phys))
    }
}

impl<M: SyncMmio, D: SyncDma, T: SyncDelay> Driver for NsDriver<M, D, T> {
    type Pdu = ();
    /// The SQ tail doorbell is rung once per burst (`Controller::commit`).
    const DEFERS_DOORBELL: bool = true;

    fn queue_rq<'a>(&self, hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, last: bool) -> Result<(), QueueRqError<'a, Self>> {
        let hwq = hw.hwq();
        let slot = self.slot(rq.tag());
        // Each arm gives the entry itself, a refusal returns at once (a `Result` of the entry
        // from every arm would be copied out once more on the stack).
        let sqe = match rq.op() {
            Op::Read => match self.build_rw(hwq, slot, &rq, false) {
                Ok(s) => s,
                Err(e) => return Err(self.refuse(rq, e)),
            },
            Op::Write => match self.build_rw(hwq, slot, &rq, true) {
                Ok(s) => s,
                Err(e) => return Err(self.refuse(rq, e)),
            },
            Op::Flush => IoCmd::flush(self.nsid),
            Op::Discard => match self.build_discard(hwq, slot, &rq) {
                Ok(s) => s,
                Err(e) => return Err(self.refuse(rq, e)),
            },
            Op::Driver(_) => return Err(QueueRqError::Io(rq, Status::NotSupported)),
        };
        // `post` issues the request only once the command is certain to be posted, under the
        // SQ lock; on Busy/Failed it gives the request back.
        match self.ctrl.post(hwq, slot, sqe, !last, rq, |rq| glue::issue(rq)) {
            Ok(()) => Ok(()),
            Err((PostError::Busy, rq)) => Err(QueueRqError::DevBusy(rq)),
            Err((PostError::Failed(e), rq)) => Err(self.not_posted(hwq, rq, e)),
        }
    }

    fn commit_rqs(&self, hw: &HwCtx<'_, Self>) {
        self.ctrl.commit(hw.hwq());
    }

    fn timeout(&self, rq: &mut TimedOutRq<'_, Self>) -> TimeoutAction {
        let hwq = rq.hwq();
        let slot = self.slot(rq.tag());
        let generation = glue::timed_out_generation(rq);
        let (verdict, outcome) = self.ctrl.timeout(hwq, slot, generation);
        if let (Some(outcome), Some(host)) = (outcome, self.host.upgrade()) {
            host.defer_outcome(&outcome, (hwq, slot));
            // Requeue the handed-back requests now (fresh deadlines) rather than after the
            // scan, which would otherwise find their old deadlines passed and time them out.
            // Without a known CPU (blk's tick called directly), `Host::tick` delivers them.
            let cpu = host.scan_cpu.load(Ordering::Relaxed);
            if cpu != usize::MAX {
                host.deliver_pending(cpu);
            }
        }
        match verdict {
            TimeoutVerdict::Wait => TimeoutAction::ResetTimer,
            TimeoutVerdict::Failed => TimeoutAction::Done(Status::Timeout),
        }
    }

    fn poll(&self, hw: &HwCtx<'_, Self>) -> usize {
        self.host.upgrade().map_or(0, |h| h.poll(hw.hwq(), hw.cpu()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks `rw_fits` replaced, one by one.
    fn fits_reference(sector: u64, bytes: u64, lba_shift: u32, max: u64) -> bool {
        let lba = 1u64 << lba_shift;
        sector
            .checked_mul(u64::from(blk::SECTOR_SIZE))
            .is_some_and(|o| o % lba == 0 && bytes.is_multiple_of(lba) && bytes > 0)
            && bytes <= max
    }

    #[test]
    fn the_one_test_agrees_with_the_checks_it_replaced() {
        let sectors = [
            0u64,
            1,
            7,
            8,
            9,
            4096,
            (1 << 55) - 8,
            (1 << 55) - 1,
            1 << 55,
            u64::MAX / 512,
            u64::MAX,
        ];
        let lengths = [
            0u64,
            1,
            511,
            512,
            4095,
            4096,
            4097,
            8192,
            512 * 1024,
            516 * 1024,
            u64::MAX,
        ];
        for lba_shift in [9u32, 12] {
            for max in [4096u64, 512 * 1024] {
                for &sector in &sectors {
                    for &bytes in &lengths {
                        let fits = rw_fits(sector, bytes, (1 << lba_shift) - 1, max);
                        assert_eq!(
                            fits,
                            fits_reference(sector, bytes, lba_shift, max),
                            "sector {sector} bytes {bytes} lba 2^{lba_shift} max {max}"
                        );
                        if !fits {
                            let e = rw_refusal(sector, bytes, lba_shift, max);
                            let too_large = matches!(e, Error::TransferTooLarge { .. });
                            // Too large only when everything else is right.
                            assert_eq!(
                                too_large,
                                fits_reference(sector, bytes, lba_shift, u64::MAX),
                                "sector {sector} bytes {bytes}: {e:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}
