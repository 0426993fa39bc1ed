//! The driver contract and the platform hooks.

use crate::counters::CpuCounters;
use crate::error::BlkError;
use crate::queue::{Ending, Queue};
use crate::request::{Completion, IssueToken, Op, Segment, Slot, Status, state};
use crate::sync::Ordering;
use core::fmt;

/// Hooks the kernel (or a host test) provides. Every method may be called from interrupt
/// context and must not block.
pub trait Platform: Send + Sync {
    /// Monotonic time in nanoseconds, for request deadlines.
    fn now_ns(&self) -> u64;
    /// Ask `cpu` to run [`Queue::run_completions`] for it soon (an IPI). Called only when that
    /// CPU's completion list goes from empty to non-empty, so one IPI covers a whole batch.
    fn send_completion_ipi(&self, cpu: usize);
    /// Ask the current CPU, `cpu`, to run [`Queue::run_completions`] soon, outside the
    /// interrupt handler (Linux raises BLOCK_SOFTIRQ). Called on empty to non-empty only.
    fn raise_completion_softirq(&self, cpu: usize);
    /// A request finished. Called exactly once per accepted request, on the completing CPU,
    /// except for the unsplit requests a done board takes ([`Platform::done_board`]).
    fn end_io(&self, completion: &Completion);

    /// The done board of a platform whose submitters need only the cookie (their slot), the
    /// submitting CPU and the status of a finished request. Asked once, when a queue is built:
    /// the queue then delivers every unsplit request to the board itself
    /// ([`done::DoneBoard::deliver_from`]: no [`Completion`] built, no call through the
    /// platform; the board counts what it refuses and wakes a submitter on another CPU).
    /// Split bios, and every request while stage tracing is on, still end through
    /// [`Platform::end_io`]. The default, `None`, reports everything through `end_io`.
    fn done_board(&self) -> Option<&'static done::DoneBoard<Status>> {
        None
    }

    /// [`crate::QuiesceCheck::Sleeping`]: park CPU `cpu` until [`Platform::wake`] is called for
    /// it (halt until the wake-up IPI). Must return if `wake(cpu)` was called since this last
    /// returned, even before this call (a per-CPU pending flag), or a wake-up is lost; may also
    /// return spuriously (the caller retries). The default returns at once, after a spin hint,
    /// so a platform without a wake mechanism spins.
    fn wait_for_wake(&self, cpu: usize) {
        let _ = cpu;
        core::hint::spin_loop();
    }

    /// [`crate::QuiesceCheck::Sleeping`]: wake CPU `cpu` from [`Platform::wait_for_wake`]
    /// (set its pending flag, send the wake-up IPI). Called by the CPU that releases the queue
    /// lock, possibly from interrupt context. The default does nothing.
    fn wake(&self, cpu: usize) {
        let _ = cpu;
    }

    /// Stage tracing (see [`Stage`]): request `request` (the queue's slot index: tag plus tag
    /// set times depth, stable while the request lives) reached `stage` on CPU `cpu`. Called
    /// only while [`Queue::set_stage_trace`] is on, from any context; it must be cheap and must
    /// not block. The default does nothing.
    fn stage(&self, cpu: usize, request: u32, stage: Stage) {
        let _ = (cpu, request, stage);
    }
}

/// Where a request is on its way, for [`Platform::stage`] (per-stage latency tracing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Stage {
    /// Accepted by [`Queue::submit`] (tag allocated, request queued).
    Submit = 0,
    /// Taken off the dispatch FIFO, about to be handed to the driver's `queue_rq`.
    Dispatch = 1,
    /// The driver's `queue_rq` returned `Ok` (the doorbell was rung). With a device that
    /// completes inside `queue_rq`, this comes after the completion stages.
    Doorbell = 2,
    /// The driver reported the completion ([`Queue::complete`] claimed it).
    DeviceComplete = 3,
    /// Pushed onto a CPU's completion list (local and remote completion only).
    ListPush = 4,
    /// Taken off the completion list by [`Queue::run_completions`] (the IPI / softirq handler).
    Softirq = 5,
    /// Ended: [`Platform::end_io`] is about to be called.
    EndIo = 6,
    /// Not emitted by the block layer: the platform's own stage for when the submitter reaps
    /// the completion.
    Reap = 7,
}

impl Stage {
    /// Every stage, in its usual order on a request's way.
    pub const ALL: [Stage; 8] = [
        Stage::Submit,
        Stage::Dispatch,
        Stage::Doorbell,
        Stage::DeviceComplete,
        Stage::ListPush,
        Stage::Softirq,
        Stage::EndIo,
        Stage::Reap,
    ];

    /// Short name for reports and traces.
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::Submit => "submit",
            Stage::Dispatch => "dispatch",
            Stage::Doorbell => "doorbell",
            Stage::DeviceComplete => "device_complete",
            Stage::ListPush => "list_push",
            Stage::Softirq => "softirq",
            Stage::EndIo => "end_io",
            Stage::Reap => "reap",
        }
    }

    /// The stage numbered `n` (its `as u8`), if any.
    pub const fn from_u8(n: u8) -> Option<Stage> {
        match n {
            0 => Some(Stage::Submit),
            1 => Some(Stage::Dispatch),
            2 => Some(Stage::Doorbell),
            3 => Some(Stage::DeviceComplete),
            4 => Some(Stage::ListPush),
            5 => Some(Stage::Softirq),
            6 => Some(Stage::EndIo),
            7 => Some(Stage::Reap),
            _ => None,
        }
    }
}

/// What the driver says about a request whose deadline passed.
///
/// # The timeout contract
///
/// A request's buffers belong to the device from [`Rq::issue`] until the device has provably
/// given up the tag: it completed the command, an abort of it was confirmed, or the controller
/// was reset. The block layer ends a request (and hands its buffers back through
/// [`Platform::end_io`]) only on one of: an accepted [`Queue::complete`] with the issue's
/// token, [`Queue::requeue`], or a `Done`/`Requeue` verdict here. So a driver must not give
/// either verdict, nor call `complete`/`requeue` for the token, while the device may still
/// write to the buffers.
///
/// A timeout therefore ends in one of two ways:
/// - **Synchronously**: the handler itself gets the device to give up the tag (an abort that
///   completes while it waits, a controller reset inside the handler) and returns
///   [`TimeoutAction::Done`] or [`TimeoutAction::Requeue`].
/// - **Later** (an abort → reset ladder, as MegaRAID and NVMe drivers need): the handler starts
///   recovery (sends an abort for [`TimedOutRq::token`], schedules a reset), remembers that in
///   its PDU, and returns [`TimeoutAction::ResetTimer`] or [`TimeoutAction::ResetTimerAfter`]
///   with the time it gives the recovery. The request stays in flight, owned by the device.
///   When the recovery confirms that the device gave up the tag, the driver finishes the
///   request with [`Queue::complete`]`(cpu, hwq, token, Status::Aborted)` (or
///   [`Queue::requeue`]`(cpu, hwq, token)` to issue it again); after a controller reset it does
///   that for every request it had in flight ([`Queue::for_each_issued`] lists them). If the
///   recovery has not finished by the new deadline, the handler runs again with the same token
///   and escalates (abort → reset).
///
/// Exactly one outcome per issue: the device's own completion, the driver's `complete` or
/// `requeue` with the token, and a `Done`/`Requeue` verdict race through one CAS on the slot's
/// state + generation word; the first wins and the others are refused (`NotInFlight`, or
/// `StaleCompletion` once the generation moved on). A completion that arrives while the
/// handler runs (from the device, or from the driver inside the handler) is recorded and
/// applied after a `ResetTimer*`; after `Done` the driver's status stands; after `Requeue` the
/// recorded completion is applied instead of issuing the request again (it did complete).
/// `Done` and `Requeue` retire the timed-out issue's generation, so anything the device reports
/// for it later is refused as stale and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutAction {
    /// The request stays in flight (the device still owns it): run the handler again after
    /// another full timeout.
    ResetTimer,
    /// As `ResetTimer`, but run the handler again after this many ns (for example the time an
    /// abort is given before escalating to a reset). 0 means the next `tick`.
    ResetTimerAfter(u64),
    /// The device has provably given up the tag (see the contract above): finish the request
    /// now with this status.
    Done(Status),
    /// The device has provably given up the tag: put the request back in line to be
    /// dispatched (and issued, with a new generation) again.
    Requeue,
}

/// A `queue_rq` failure. Every variant hands the request back, so nothing leaks.
pub enum QueueRqError<'a, D: Driver> {
    /// Driver resources are exhausted (BLK_STS_RESOURCE): requeue and rerun later. The block
    /// layer reruns the queue after the next completion on it or at the next `tick`.
    Busy(Rq<'a, D>),
    /// The device itself is busy (BLK_STS_DEV_RESOURCE); handled like `Busy`.
    DevBusy(Rq<'a, D>),
    /// The request failed; finish it with this status.
    Io(Rq<'a, D>, Status),
}

impl<D: Driver> fmt::Debug for QueueRqError<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy(rq) => write!(f, "Busy(tag {})", rq.tag()),
            Self::DevBusy(rq) => write!(f, "DevBusy(tag {})", rq.tag()),
            Self::Io(rq, s) => write!(f, "Io(tag {}, {s:?})", rq.tag()),
        }
    }
}

/// The driver contract (Linux's `blk_mq_ops`).
///
/// Tags are `0..depth` per tag set; with shared tags (MegaRAID) one tag set serves every
/// hardware queue, so a tag can be used directly as a firmware context.
pub trait Driver: Send + Sync + Sized {
    /// Per-request driver data (Linux's PDU), created at queue creation.
    type Pdu: Send + Default;

    /// Prepares the driver data of one request slot at queue creation (not on the hot path).
    fn init_request(&self, hwq_set: usize, tag: u32, pdu: &mut Self::Pdu) -> Result<(), BlkError> {
        let _ = (hwq_set, tag, pdu);
        Ok(())
    }

    /// Starts a request. `last` is false when more requests follow in this batch, so the
    /// driver may defer its doorbell to [`Driver::commit_rqs`]. On success the driver has
    /// consumed `rq` with [`Rq::issue`], [`Rq::end`] or [`Rq::complete`].
    fn queue_rq<'a>(&self, hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, last: bool) -> Result<(), QueueRqError<'a, Self>>;

    /// The driver defers its doorbell when `last` is false and rings it in
    /// [`Driver::commit_rqs`]. Only then does [`Queue::submit_deferred`] hold doorbells across
    /// submissions (for a driver that posts each command with its own write, MegaRAID's queue
    /// port, there is nothing to batch and the submission path stays as it is).
    const DEFERS_DOORBELL: bool = false;

    /// Rings the doorbell for requests queued with `last == false`. Called when a batch ends
    /// early (a `Busy` or error) after such requests, and by [`Queue::commit`] after
    /// [`Queue::submit_deferred`]; it may find nothing to ring.
    fn commit_rqs(&self, hw: &HwCtx<'_, Self>) {
        let _ = hw;
    }

    /// The driver has its own [`Driver::complete`]. `false` (the default): the block layer ends
    /// a completed request with its status itself, without building a handle for the default
    /// `complete`. A driver that overrides `complete` must set this to `true`, or its
    /// `complete` is never called.
    const HAS_COMPLETE: bool = false;

    /// Finishes a completed request in the completion context chosen by the policy. `rq.status()`
    /// holds the status given to [`Queue::complete`]. The default ends it with that status.
    /// Called only where [`Driver::HAS_COMPLETE`] is `true`.
    fn complete(&self, rq: Rq<'_, Self>) {
        let status = rq.status();
        rq.end(status);
    }

    /// A request passed its deadline. The request cannot be completed by anyone else while
    /// this runs; a completion that arrives meanwhile is recorded and applied afterwards.
    fn timeout(&self, rq: &mut TimedOutRq<'_, Self>) -> TimeoutAction {
        let _ = rq;
        TimeoutAction::ResetTimer
    }

    /// Reaps completions of hardware queue `hw.hwq()` by polling, reporting each through
    /// [`HwCtx::complete`]. Returns how many were found.
    fn poll(&self, hw: &HwCtx<'_, Self>) -> usize {
        let _ = hw;
        0
    }
}

/// The context a driver callback runs in: which hardware queue, on which CPU, of which queue.
pub struct HwCtx<'a, D: Driver> {
    pub(crate) queue: &'a Queue<D>,
    pub(crate) hwq: u16,
    pub(crate) cpu: u16,
}

impl<'a, D: Driver> HwCtx<'a, D> {
    /// Hardware queue index.
    pub fn hwq(&self) -> usize {
        usize::from(self.hwq)
    }

    /// CPU running the callback.
    pub fn cpu(&self) -> usize {
        usize::from(self.cpu)
    }

    /// The queue.
    pub fn queue(&self) -> &'a Queue<D> {
        self.queue
    }

    /// Reports a hardware completion of the issue `token` on this queue from this CPU, as
    /// [`Queue::complete`] does.
    pub fn complete(&self, token: IssueToken, status: Status) -> Result<(), BlkError> {
        self.queue.complete(self.cpu(), self.hwq(), token, status)
    }
}

/// A request owned by the driver: a move-only handle. It must be consumed exactly once, by
/// [`Rq::issue`] (handed to the hardware), [`Rq::end`] (finished now) or [`Rq::complete`]
/// (finished through the completion policy), or be handed back in a [`QueueRqError`].
/// Dropping it otherwise is a driver bug: debug builds panic, release builds end the request
/// with [`Status::IoError`] so that the tag is not leaked.
pub struct Rq<'a, D: Driver> {
    queue: &'a Queue<D>,
    /// The request's slot, looked up once: the accessors and the exits read it without a
    /// bounds check and an index multiply each.
    slot: &'a Slot<D::Pdu>,
    /// The counters block of `cpu`, the CPU the handle was given out on and is ended on (it
    /// cannot outlive the call that lent it): its end needs no lookup.
    counters: &'a CpuCounters,
    index: u32,
    cpu: u16,
    /// Given out by the completion path (as opposed to dispatch): ending it is not "inline".
    routed: bool,
    /// Ending it needs no rerun check of its hardware queue: this CPU holds the queue's run
    /// token (given out by dispatch, or by a local completion from inside `queue_rq`,
    /// [`Rq::complete`]), or it came from a [`crate::CompletionBatch`], whose end runs the
    /// check once.
    rerun_covered: bool,
    /// Stage tracing as the path that gave the handle out read it: its completion and end
    /// trace (or not) without reading the switch again.
    tracing: bool,
}

impl<'a, D: Driver> Rq<'a, D> {
    /// # Safety
    /// The slot `index` (`slot`, `queue.slot(index)`) is in state DRIVER and no other handle
    /// to it exists.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn new(
        queue: &'a Queue<D>,
        slot: &'a Slot<D::Pdu>,
        counters: &'a CpuCounters,
        index: u32,
        cpu: u16,
        routed: bool,
        rerun_covered: bool,
        tracing: bool,
    ) -> Self {
        debug_assert!(core::ptr::eq(slot, queue.slot(index)));
        debug_assert!(core::ptr::eq(counters, queue.cpu_counters(usize::from(cpu))));
        Self {
            queue,
            slot,
            counters,
            index,
            cpu,
            routed,
            rerun_covered,
            tracing,
        }
    }

    #[inline(always)]
    fn slot(&self) -> &'a Slot<D::Pdu> {
        self.slot
    }

    fn data(&self) -> &crate::request::SlotData<D::Pdu> {
        // SAFETY: the handle owns the slot (state DRIVER) and `&self` excludes `pdu_mut`.
        unsafe { self.slot().data() }
    }

    /// Gives up the handle without running `Drop`; returns the slot index.
    pub(crate) fn into_index(self) -> u32 {
        let idx = self.index;
        core::mem::forget(self);
        idx
    }

    /// The tag (for MegaRAID, the firmware context).
    pub fn tag(&self) -> u32 {
        self.data().tag
    }
    /// Hardware queue the request is dispatched on.
    pub fn hwq(&self) -> usize {
        usize::from(self.data().hwq)
    }
    /// Operation.
    pub fn op(&self) -> Op {
        self.data().op
    }
    /// First sector.
    pub fn sector(&self) -> u64 {
        self.data().sector
    }
    /// Length in sectors.
    pub fn nr_sectors(&self) -> u32 {
        self.data().nr_sectors
    }
    /// Length in bytes.
    pub fn bytes(&self) -> u64 {
        u64::from(self.data().nr_sectors) * u64::from(crate::request::SECTOR_SIZE)
    }
    /// Scatter-gather list.
    pub fn segments(&self) -> &[Segment] {
        self.data().segments()
    }
    /// CPU that submitted the request.
    pub fn submit_cpu(&self) -> usize {
        usize::from(self.data().submit_cpu)
    }
    /// The submitter's cookie.
    pub fn cookie(&self) -> u64 {
        self.data().cookie
    }
    /// CPU this handle was given out on.
    pub fn cpu(&self) -> usize {
        usize::from(self.cpu)
    }
    /// Status recorded by the completion (meaningful in [`Driver::complete`]).
    pub fn status(&self) -> Status {
        self.slot().status()
    }
    /// Driver data.
    pub fn pdu(&self) -> &D::Pdu {
        &self.data().pdu
    }
    /// Driver data, mutable.
    pub fn pdu_mut(&mut self) -> &mut D::Pdu {
        // SAFETY: the handle owns the slot (state DRIVER) and `&mut self` makes this the only
        // reference derived from it.
        unsafe { &mut self.slot().data_mut().pdu }
    }

    /// Hands the request to the hardware and starts its timer. Returns the token of this issue
    /// (tag + a fresh generation); the driver reports the hardware's completion with it to
    /// [`Queue::complete`].
    ///
    /// Call it before the command can reach the device (before the doorbell): from here on a
    /// completion may arrive on any CPU. A completion carrying an older generation of the same
    /// tag is refused as stale.
    pub fn issue(self) -> IssueToken {
        self.issue_timed().0
    }

    /// [`Rq::issue`], also saying when: the platform clock reading the deadline counts from
    /// (0 when the queue has no timeout, which reads no clock). A driver that orders its
    /// commands by age (NVMe's reset picks the oldest aborted one) needs no counter of its own.
    #[inline]
    pub fn issue_timed(self) -> (IssueToken, u64) {
        let tag = self.tag();
        let slot = self.slot();
        let timeout = self.queue.timeout_ns();
        let (issued_ns, deadline) = if timeout == 0 {
            (0, 0)
        } else {
            let now = self.queue.platform().now_ns();
            (now, now.saturating_add(timeout).max(1))
        };
        slot.deadline.store(deadline, Ordering::Relaxed);
        // We own the slot (DRIVER), so nobody else writes its word: this is its latest value.
        let generation = state::generation(slot.word.load(Ordering::Relaxed)).wrapping_add(1);
        // Release pairs with the Acquire CAS in `Queue::complete` and the timeout scan: the
        // deadline and everything the driver wrote are visible to whoever claims the slot.
        slot.word
            .store(state::pack(generation, state::ISSUED), Ordering::Release);
        core::mem::forget(self);
        (IssueToken::new(tag, generation), issued_ns)
    }

    /// Finishes the request now, in this context (null_blk's "irqmode=none").
    pub fn end(self, status: Status) {
        let (queue, slot, counters, index, cpu, routed, rerun_covered, tracing) = (
            self.queue,
            self.slot,
            self.counters,
            self.index,
            self.cpu,
            self.routed,
            self.rerun_covered,
            self.tracing,
        );
        core::mem::forget(self);
        let cpu = usize::from(cpu);
        let how = Ending {
            inline: !routed,
            rerun_covered,
            tracing,
        };
        queue.end_request_in(cpu, counters, slot, index, status, how);
    }

    /// Finishes the request through the completion policy, as if the hardware had completed it
    /// on this CPU (issue followed by an immediate interrupt). Inlined: a driver that completes
    /// in `queue_rq` (the null device) would otherwise pay a call per I/O.
    #[inline(always)]
    pub fn complete(self, status: Status) {
        let (queue, slot, counters, index, cpu, rerun_covered, tracing) = (
            self.queue,
            self.slot,
            self.counters,
            self.index,
            self.cpu,
            self.rerun_covered,
            self.tracing,
        );
        core::mem::forget(self);
        // Left DRIVER: `route_completion` marks it COMPLETING only if it waits on a list.
        queue.stage_if(tracing, usize::from(cpu), index, Stage::DeviceComplete);
        queue.route_completion_in(usize::from(cpu), counters, slot, index, status, rerun_covered, tracing);
    }
}

impl<D: Driver> Drop for Rq<'_, D> {
    fn drop(&mut self) {
        let (queue, index, cpu) = (self.queue, self.index, self.cpu);
        debug_assert!(
            false,
            "request handle for tag {} dropped without issue/end/complete",
            self.tag()
        );
        let how = Ending {
            inline: !self.routed,
            rerun_covered: self.rerun_covered,
            tracing: self.tracing,
        };
        queue.end_request(usize::from(cpu), index, Status::IoError, how);
    }
}

impl<D: Driver> fmt::Debug for Rq<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rq")
            .field("tag", &self.tag())
            .field("op", &self.op())
            .field("sector", &self.sector())
            .field("nr_sectors", &self.nr_sectors())
            .finish()
    }
}

/// A request whose deadline passed, lent to [`Driver::timeout`].
pub struct TimedOutRq<'a, D: Driver> {
    pub(crate) queue: &'a Queue<D>,
    pub(crate) index: u32,
    /// Generation of the issue that timed out.
    pub(crate) generation: u16,
}

impl<'a, D: Driver> TimedOutRq<'a, D> {
    /// The queue (for example to report other completions found while handling this one).
    pub fn queue(&self) -> &'a Queue<D> {
        self.queue
    }
    fn data(&self) -> &crate::request::SlotData<D::Pdu> {
        // SAFETY: the timeout path owns the slot (state TIMEOUT/TIMEOUT_COMPLETED) while this
        // view exists; `&self` excludes `pdu_mut`.
        unsafe { self.queue.slot(self.index).data() }
    }
    /// The tag.
    pub fn tag(&self) -> u32 {
        self.data().tag
    }
    /// The token of the issue that timed out: what the device would complete, and what the
    /// driver passes to [`Queue::complete`] when it finishes the request later (see
    /// [`TimeoutAction`]).
    pub fn token(&self) -> IssueToken {
        IssueToken::new(self.data().tag, self.generation)
    }
    /// Hardware queue.
    pub fn hwq(&self) -> usize {
        usize::from(self.data().hwq)
    }
    /// Operation.
    pub fn op(&self) -> Op {
        self.data().op
    }
    /// First sector.
    pub fn sector(&self) -> u64 {
        self.data().sector
    }
    /// Length in sectors.
    pub fn nr_sectors(&self) -> u32 {
        self.data().nr_sectors
    }
    /// CPU that submitted the request.
    pub fn submit_cpu(&self) -> usize {
        usize::from(self.data().submit_cpu)
    }
    /// The submitter's cookie.
    pub fn cookie(&self) -> u64 {
        self.data().cookie
    }
    /// Driver data.
    pub fn pdu(&self) -> &D::Pdu {
        &self.data().pdu
    }
    /// Driver data, mutable.
    pub fn pdu_mut(&mut self) -> &mut D::Pdu {
        // SAFETY: as in `data`, and `&mut self` makes this the only reference.
        unsafe { &mut self.queue.slot(self.index).data_mut().pdu }
    }
}
