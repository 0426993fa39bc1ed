//! Block devices on the running kernel: the registry of every driver's
//! `blk` queues, the kernel's hooks for the block layer (clock, completion
//! IPIs, end of I/O), and the one done board the workload engine reaps from.
//!
//! A finished request reaches its submitter through `blk`'s per-CPU lists
//! and then [`done::DoneBoard`], nothing else: the block layer delivers it
//! (on whatever CPU it finished) to the submitter's slot (the cookie is the
//! slot; the CPU is the request's submitting CPU), and the board wakes that
//! CPU if it may have halted waiting. Split bios and stage-traced requests
//! come the same way through `end_io`.
//!
//! A driver either lets the kernel build its queue ([`Disk::new`], the null
//! device) or owns its queues ([`Disk::with_queue`]: a controller that serves
//! several disks from one tag set and one interrupt, e.g. MegaRAID); such a
//! driver gives a [`HostHooks`] for the kernel's poll and tick. One generic
//! [`Disk`] serves both.

use crate::arch::percpu::MAX_CPUS;
use crate::arch::{apic, idle, irq, percpu, time};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use blk::{Bio, BlkError, Completion, CompletionPolicy, CounterSnapshot, Driver, Queue, QuiesceCheck, Submitted};
use core::sync::atomic::{AtomicU64, Ordering};
use done::DoneBoard;

/// Requests one job context may keep in flight on one device.
pub const MAX_SLOTS_PER_CPU: usize = 256;

/// The done board's slots per CPU: room for the contexts a CPU runs by turns (more clones or
/// jobs than CPUs), each in a window of its own that starts a 64-slot word.
pub const BOARD_SLOTS_PER_CPU: usize = 4 * MAX_SLOTS_PER_CPU;

/// The one done board: per CPU, a status and a done bit per submitter slot. Jobs run one at a
/// time and drain before the next starts, so one board serves every device.
static DONE: spin::Once<DoneBoard<blk::Status>> = spin::Once::new();

/// The done board (created on first use, after the heap is up). A submitter halted waiting for
/// its completions (`idle=halt`) is woken by the board when another CPU delivers to it.
pub fn done_board() -> &'static DoneBoard<blk::Status> {
    DONE.call_once(|| {
        DoneBoard::new(MAX_CPUS, BOARD_SLOTS_PER_CPU)
            .expect("MAX_CPUS and BOARD_SLOTS_PER_CPU are in range")
            .with_waker(idle::wake)
    })
}

/// The cookie of a request submitted from slot `slot` (the submitting CPU travels in the request).
pub fn cookie(slot: usize) -> u64 {
    slot as u64
}

/// Completions whose slot was out of range or already done, logged one by one up to this many.
const BOGUS_LOGGED: u64 = 16;
static BOGUS_LOG_COUNT: AtomicU64 = AtomicU64::new(0);

/// The kernel's side of the block layer (one for every queue).
struct KernelPlatform;

impl blk::Platform for KernelPlatform {
    fn now_ns(&self) -> u64 {
        time::now_ns()
    }

    fn send_completion_ipi(&self, cpu: usize) {
        send_completion_interrupt(cpu);
    }

    fn raise_completion_softirq(&self, cpu: usize) {
        // baremq's "softirq" is a self-IPI: it runs once the current handler returns.
        send_completion_interrupt(cpu);
    }

    /// Split bios and stage-traced requests (everything else the block layer delivers to the
    /// done board itself).
    fn end_io(&self, c: &Completion) {
        let cpu = usize::from(c.submit_cpu);
        // Before the delivery: the submitter may take it (and record its reap) at once.
        if let Ok(slot) = usize::try_from(c.cookie) {
            crate::arch::stagetrace::ended(cpu, slot);
        }
        if let Err(e) = done_board().deliver_from(usize::from(c.complete_cpu), cpu, c.cookie, c.status) {
            log_bogus(&e);
        }
    }

    fn done_board(&self) -> Option<&'static DoneBoard<blk::Status>> {
        Some(done_board())
    }

    fn wait_for_wake(&self, cpu: usize) {
        crate::arch::park::wait_for_wake(cpu);
    }

    fn wake(&self, cpu: usize) {
        crate::arch::park::wake(cpu);
    }

    fn stage(&self, _cpu: usize, request: u32, stage: blk::Stage) {
        crate::arch::stagetrace::stage(request, stage as u8);
    }
}

fn log_bogus(e: &done::DoneError) {
    if BOGUS_LOG_COUNT.fetch_add(1, Ordering::Relaxed) < BOGUS_LOGGED {
        log::error!("block: completion refused by the done board: {e}");
    }
}

/// The platform every queue is built with (also what a driver that builds its own queues gets).
pub fn platform() -> Arc<dyn blk::Platform> {
    static PLATFORM: spin::Once<Arc<dyn blk::Platform>> = spin::Once::new();
    PLATFORM.call_once(|| Arc::new(KernelPlatform)).clone()
}

fn send_completion_interrupt(cpu: usize) {
    let apic_id = percpu::cpu(cpu.min(MAX_CPUS - 1)).apic_id.load(Ordering::Relaxed);
    apic::send_ipi(apic_id, apic::Delivery::Fixed(irq::VECTOR_BLK_COMPLETE));
}

/// Static facts about a device.
#[derive(Debug, Clone)]
pub struct DeviceFacts {
    pub name: String,
    pub model: String,
    pub sector_size: u32,
    pub capacity_sectors: u64,
    pub max_inflight: u32,
    pub max_transfer_bytes: u32,
    /// IDT vectors of the device's interrupts (empty when it has none), for the job report.
    pub irq_vectors: Vec<crate::dev::interrupts::Vector>,
    /// Stable names beside `name` (PCI address, serial: `disks::names`); a job may use any.
    pub aliases: Vec<String>,
}

/// What the rest of the kernel needs from a block device, whatever its driver.
pub trait BlockDevice: Sync + Send {
    fn facts(&self) -> &DeviceFacts;
    /// Submits a bio on CPU `cpu` (block-layer sectors are 512 bytes).
    fn submit(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError>;
    /// [`BlockDevice::submit`] within a burst: the device's doorbell may wait for
    /// [`BlockDevice::commit`], which the caller must call before it waits for completions.
    /// Says only whether it was taken: the engine's submissions, which come here, need no tag
    /// back, and an outcome without one is a byte the callee writes, not three.
    fn submit_deferred(&self, cpu: usize, bio: &Bio<'_>) -> Result<(), BlkError> {
        self.submit(cpu, bio).map(|_| ())
    }
    /// Submits `bios` in order as one burst, doorbell included (`blk::Queue::submit_batch`):
    /// stops at the first one it cannot take and says why.
    fn submit_batch(&self, cpu: usize, bios: &[Bio<'_>]) -> blk::BatchOutcome {
        for (accepted, bio) in bios.iter().enumerate() {
            if let Err(error) = self.submit_deferred(cpu, bio) {
                self.commit(cpu);
                return blk::BatchOutcome {
                    accepted,
                    error: Some(error),
                };
            }
        }
        self.commit(cpu);
        blk::BatchOutcome {
            accepted: bios.len(),
            error: None,
        }
    }
    /// Ends a burst of [`BlockDevice::submit_deferred`]: rings what it left unrung.
    fn commit(&self, cpu: usize) {
        let _ = cpu;
    }
    /// Whether [`BlockDevice::submit_deferred`] may leave a doorbell for
    /// [`BlockDevice::commit`]; where not, a caller need not call `commit` (asked once per job).
    fn defers_doorbell(&self) -> bool {
        false
    }
    /// Whether [`BlockDevice::polling_window`] can ever be true; where not, a caller need not
    /// ask it on every reap (asked once per job).
    fn has_polling_window(&self) -> bool {
        false
    }
    /// After how many completions of a reap a job first refills and commits the slots freed
    /// so far, so that the device has work again before the whole reap is done, then takes
    /// the rest (0: after the whole reap; docs/bench.md "Refill within a reap"). Asked once
    /// per job.
    fn refill_after(&self) -> usize {
        0
    }
    /// Runs CPU `cpu`'s completion list (the completion IPI handler).
    fn run_completions(&self, cpu: usize) -> usize;
    /// Polls for completions (polled mode).
    fn poll(&self, cpu: usize) -> usize;
    /// Requeues and dispatches what is waiting.
    fn make_progress(&self, cpu: usize);
    /// The periodic tick: timeouts (and, for a controller, its recovery ladder).
    fn tick(&self, cpu: usize);
    fn set_policies(&self, completion: CompletionPolicy, quiesce: QuiesceCheck);
    fn policies(&self) -> (CompletionPolicy, QuiesceCheck);
    fn counters(&self) -> CounterSnapshot;
    fn in_flight(&self) -> usize;
    /// Longest discard (trim) one request carries, in 512-byte sectors; 0: the device has no
    /// discard command.
    fn max_discard_sectors(&self) -> u32 {
        0
    }
    /// Switches the block layer's stage tracing on or off (`trace=N`; see `arch::stagetrace`).
    fn set_stage_trace(&self, on: bool) {
        let _ = on;
    }
    /// Driver-specific lines for the device report.
    fn describe(&self) -> String {
        String::new()
    }
    /// Driver counters for the job report (name, value since boot), e.g. aborts and resets.
    fn driver_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// The driver's interrupt-then-poll window for `cpu`'s queue is open
    /// ([`HostHooks::polling_window`]).
    fn polling_window(&self, cpu: usize) -> bool {
        let _ = cpu;
        false
    }
    /// The device's interrupt vectors as they are aimed now, for counting its interrupts per
    /// CPU: the facts' unless the controller re-aims them ([`HostHooks::irq_vectors`]).
    fn irq_vectors(&self) -> Vec<crate::dev::interrupts::Vector> {
        self.facts().irq_vectors.clone()
    }
}

/// What the kernel calls on a driver that owns its queues (one controller, several disks):
/// the poll and the tick cover the whole controller, not one queue.
pub trait HostHooks: Sync + Send {
    /// Reaps the controller without an interrupt; returns completions delivered.
    fn poll(&self, cpu: usize) -> usize;
    /// The periodic tick: timeout scans of every queue, aborts, resets.
    fn tick(&self, cpu: usize);
    /// Counters of the controller for the job report (name, value since boot).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// An interrupt-then-poll window is open for `cpu`'s queue: the interrupt that would
    /// complete its I/O is masked, so that CPU, waiting, must poll rather than halt.
    fn polling_window(&self, cpu: usize) -> bool {
        let _ = cpu;
        false
    }
    /// [`BlockDevice::refill_after`] for the controller's disks (0: after the whole reap).
    fn refill_after(&self) -> usize {
        0
    }
    /// The controller's interrupt vectors as aimed now, when it re-aims them for a job
    /// (MegaRAID MFI's single vector: `dev::megasas::aim_for_jobs`); `None`: as registered.
    fn irq_vectors(&self) -> Option<Vec<crate::dev::interrupts::Vector>> {
        None
    }
}

/// A block device backed by a `blk` queue of driver `D`.
pub struct Disk<D: Driver + 'static> {
    pub facts: DeviceFacts,
    pub queue: &'static Queue<D>,
    /// The controller that owns the queue, if a driver built it.
    host: Option<&'static dyn HostHooks>,
    pub extra: String,
}

impl<D: Driver + 'static> Disk<D> {
    /// Builds a queue for `driver` with the kernel's platform hooks (kept for good).
    pub fn new(facts: DeviceFacts, mut cfg: blk::QueueConfig, driver: D, extra: String) -> Result<Self, BlkError> {
        // Some CPUs' APIC ids are beyond a device interrupt's reach: their requests complete
        // on reachable CPUs, so by default they travel back to the submitter's list.
        if cfg.completion == CompletionPolicy::Irq
            && !facts.irq_vectors.is_empty()
            && crate::dev::cpumap::needs_remote_completion()
        {
            cfg.completion = CompletionPolicy::Remote;
        }
        let queue = Queue::new(cfg, driver, platform())?;
        Ok(Disk {
            facts,
            queue: Box::leak(Box::new(queue)),
            host: None,
            extra,
        })
    }

    /// A disk on a queue its driver owns (built with [`platform`]); `host` polls and ticks the
    /// controller behind it.
    pub fn with_queue(
        facts: DeviceFacts,
        queue: &'static Queue<D>,
        host: &'static dyn HostHooks,
        extra: String,
    ) -> Self {
        Disk {
            facts,
            queue,
            host: Some(host),
            extra,
        }
    }
}

/// Runs `f` with interrupts disabled on this CPU. Every block-layer entry
/// from task context goes through it: the device's interrupt handler enters
/// the same queue on the CPU it lands on, and with `quiesce=locked` a
/// handler that interrupted this CPU while it held the queue's run lock
/// would spin on that lock forever (lock-free runs would only be delayed).
#[inline(always)]
fn irqs_off<R>(f: impl FnOnce() -> R) -> R {
    use x86_64::instructions::interrupts;
    // `without_interrupts` by hand, so that `f` (the whole submit path) is inlined here
    // rather than called: under emulation each call and return costs a code lookup.
    let were_enabled = interrupts::are_enabled();
    if were_enabled {
        interrupts::disable();
    }
    let result = f();
    if were_enabled {
        interrupts::enable();
    }
    result
}

impl<D: Driver + 'static> BlockDevice for Disk<D> {
    fn facts(&self) -> &DeviceFacts {
        &self.facts
    }
    fn max_discard_sectors(&self) -> u32 {
        self.queue.max_discard_sectors()
    }
    fn submit(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError> {
        irqs_off(|| self.queue.submit(cpu, bio))
    }
    fn submit_deferred(&self, cpu: usize, bio: &Bio<'_>) -> Result<(), BlkError> {
        irqs_off(|| self.queue.submit_deferred(cpu, bio).map(|_| ()))
    }
    fn submit_batch(&self, cpu: usize, bios: &[Bio<'_>]) -> blk::BatchOutcome {
        irqs_off(|| self.queue.submit_batch(cpu, bios))
    }
    fn commit(&self, cpu: usize) {
        irqs_off(|| self.queue.commit(cpu));
    }
    fn run_completions(&self, cpu: usize) -> usize {
        irqs_off(|| self.queue.run_completions(cpu))
    }
    fn polling_window(&self, cpu: usize) -> bool {
        self.host.is_some_and(|h| h.polling_window(cpu))
    }
    fn defers_doorbell(&self) -> bool {
        D::DEFERS_DOORBELL
    }
    fn has_polling_window(&self) -> bool {
        self.host.is_some()
    }
    fn refill_after(&self) -> usize {
        self.host.map_or(0, |h| h.refill_after())
    }
    fn irq_vectors(&self) -> Vec<crate::dev::interrupts::Vector> {
        self.host
            .and_then(|h| h.irq_vectors())
            .unwrap_or_else(|| self.facts.irq_vectors.clone())
    }
    fn poll(&self, cpu: usize) -> usize {
        irqs_off(|| match self.host {
            Some(h) => h.poll(cpu),
            None => (0..self.queue.nr_hw_queues())
                .map(|h| self.queue.poll(cpu, h).unwrap_or(0))
                .sum(),
        })
    }
    fn make_progress(&self, cpu: usize) {
        irqs_off(|| self.queue.make_progress(cpu));
    }
    fn tick(&self, cpu: usize) {
        match self.host {
            Some(h) => irqs_off(|| h.tick(cpu)),
            None => {
                if let Err(e) = irqs_off(|| self.queue.tick(cpu)) {
                    log::warn!("{}: timeout scan: {e}", self.facts.name);
                }
            }
        }
    }
    fn set_policies(&self, completion: CompletionPolicy, quiesce: QuiesceCheck) {
        self.queue.set_completion_policy(completion);
        self.queue.set_quiesce_check(quiesce);
    }
    fn policies(&self) -> (CompletionPolicy, QuiesceCheck) {
        (self.queue.completion_policy(), self.queue.quiesce_check())
    }
    fn set_stage_trace(&self, on: bool) {
        self.queue.set_stage_trace(on);
    }
    fn counters(&self) -> CounterSnapshot {
        self.queue.counters()
    }
    fn in_flight(&self) -> usize {
        self.queue.in_flight()
    }
    fn describe(&self) -> String {
        self.extra.clone()
    }
    fn driver_counters(&self) -> Vec<(&'static str, u64)> {
        self.host.map(HostHooks::counters).unwrap_or_default()
    }
}

static DEVICES: spin::Mutex<Vec<&'static dyn BlockDevice>> = spin::Mutex::new(Vec::new());
static FROZEN_LIST: spin::Once<Vec<&'static dyn BlockDevice>> = spin::Once::new();

/// Adds a device (at init, before [`seal`]).
pub fn register(dev: &'static dyn BlockDevice) {
    DEVICES.lock().push(dev);
}

fn on_completion_ipi(_vector: u8, cpu: u32) {
    for d in devices() {
        d.run_completions(cpu as usize);
    }
}

/// The aliases that are not ambiguous (see [`seal`]), per device in registration order.
static ALIASES: spin::Once<Vec<Vec<String>>> = spin::Once::new();

/// Ends registration; from now on the device list is read without a lock. An alias
/// claimed by two devices (two drives with one serial) is dropped from both, with a warning.
pub fn seal() -> &'static [&'static dyn BlockDevice] {
    irq::register_fn(irq::VECTOR_BLK_COMPLETE, "blk-complete", on_completion_ipi);
    // The done board exists before the first request: a completion interrupt that found its
    // creation under way on the same CPU would spin in `call_once` for ever.
    let _ = done_board();
    let list = FROZEN_LIST.call_once(|| core::mem::take(&mut *DEVICES.lock()));
    ALIASES.call_once(|| {
        let mut named: Vec<(String, Vec<String>)> = list
            .iter()
            .map(|d| (d.facts().name.clone(), d.facts().aliases.clone()))
            .collect();
        for alias in disks::names::remove_ambiguous(&mut named) {
            log::warn!("block: name {alias} fits more than one device; not used");
        }
        named.into_iter().map(|(_, aliases)| aliases).collect()
    });
    list
}

/// The usable aliases of `devices()[index]`.
fn aliases_of(index: usize) -> &'static [String] {
    ALIASES
        .get()
        .and_then(|a| a.get(index))
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Every registered device (empty before [`seal`]).
pub fn devices() -> &'static [&'static dyn BlockDevice] {
    FROZEN_LIST.get().map(Vec::as_slice).unwrap_or(&[])
}

/// Finds a device by name or by one of its stable aliases.
pub fn find(name: &str) -> Option<&'static dyn BlockDevice> {
    devices()
        .iter()
        .enumerate()
        .find(|(i, d)| d.facts().name == name || aliases_of(*i).iter().any(|a| a == name))
        .map(|(_, d)| *d)
}

/// Every device's name with its aliases, for messages: `nvme0n1 (also nvme-pci-0000:41:00.0-ns1), md0`.
pub fn names_and_aliases() -> String {
    let mut text = String::new();
    for (i, d) in devices().iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(&d.facts().name);
        let aliases = aliases_of(i);
        if !aliases.is_empty() {
            text.push_str(" (also ");
            text.push_str(&aliases.join(" "));
            text.push(')');
        }
    }
    text
}

/// Prints the device table.
pub fn report() {
    let devs = devices();
    crate::arch::console::kprintln!("block devices: {}", devs.len());
    if devs.is_empty() {
        return;
    }
    crate::arch::console::kprintln!("  name    capacity (bytes)  sectors      sector  max-inflight  max-xfer  model");
    for (i, d) in devs.iter().enumerate() {
        let f = d.facts();
        crate::arch::console::kprintln!(
            "  {:<7} {:>16}  {:>11}  {:>6}  {:>12}  {:>8}  {}",
            f.name,
            f.capacity_sectors * u64::from(f.sector_size),
            f.capacity_sectors,
            f.sector_size,
            f.max_inflight,
            f.max_transfer_bytes,
            f.model
        );
        let aliases = aliases_of(i);
        if !aliases.is_empty() {
            crate::arch::console::kprintln!("          also named: {}", aliases.join(" "));
        }
        let extra = d.describe();
        if !extra.is_empty() {
            crate::arch::console::kprintln!("          {extra}");
        }
    }
}
