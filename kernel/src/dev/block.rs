//! Block devices on the running kernel: the `blk` queues of every driver,
//! the kernel's hooks for the block layer (clock, completion IPIs, end of
//! I/O), and the completion sinks the workload engine reaps from.
//!
//! A finished request reaches its submitter without locks: `end_io` (on
//! whatever CPU the block layer finished it) stores the status in the
//! submitter's slot and sets the slot's bit in that CPU's done bitmap; the
//! submitting CPU swaps the bitmap words to zero and reports each set bit.

use crate::arch::percpu::MAX_CPUS;
use crate::arch::{apic, idle, irq, percpu, time};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use blk::{
    Bio, BlkError, Completion, CompletionPolicy, CounterSnapshot, Driver, Queue, QuiesceCheck, Status, Submitted,
};
use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Requests one CPU may keep in flight on one device (the sink's slots).
pub const MAX_SLOTS_PER_CPU: usize = 256;
const WORDS: usize = MAX_SLOTS_PER_CPU / 64;

/// Encodes the submitter and its slot in a request cookie.
pub fn cookie(cpu: usize, slot: usize) -> u64 {
    ((cpu as u64) << 32) | slot as u64
}

/// Per-CPU done bitmaps and statuses for one device.
pub struct CompletionSink {
    done: Box<[[AtomicU64; WORDS]]>,
    status: Box<[[AtomicU8; MAX_SLOTS_PER_CPU]]>,
    bogus: AtomicU64,
}

impl CompletionSink {
    fn new() -> Self {
        CompletionSink {
            done: (0..MAX_CPUS).map(|_| [const { AtomicU64::new(0) }; WORDS]).collect(),
            status: (0..MAX_CPUS)
                .map(|_| [const { AtomicU8::new(0) }; MAX_SLOTS_PER_CPU])
                .collect(),
            bogus: AtomicU64::new(0),
        }
    }

    fn deliver(&self, c: &Completion) {
        let cpu = (c.cookie >> 32) as usize;
        let slot = (c.cookie & 0xFFFF_FFFF) as usize;
        if cpu >= MAX_CPUS || slot >= MAX_SLOTS_PER_CPU {
            self.bogus.fetch_add(1, Ordering::Relaxed);
            log::error!("block: completion with a cookie naming no submitter: {:#x}", c.cookie);
            return;
        }
        self.status[cpu][slot].store(c.status as u8, Ordering::Relaxed);
        // Release pairs with the Acquire swap in `take`: the status store above
        // is visible to the submitter that sees the bit.
        self.done[cpu][slot / 64].fetch_or(1 << (slot % 64), Ordering::Release);
    }

    /// Reports every finished slot of CPU `cpu` to `f(slot, status)`; returns how many.
    pub fn take(&self, cpu: usize, mut f: impl FnMut(usize, Status)) -> usize {
        let mut n = 0;
        for (w, word) in self.done[cpu].iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                let slot = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                f(slot, Status::from_u8(self.status[cpu][slot].load(Ordering::Relaxed)));
                n += 1;
            }
        }
        n
    }

    /// Whether CPU `cpu` has finished slots waiting to be taken.
    pub fn has_done(&self, cpu: usize) -> bool {
        // Acquire pairs with the Release in `deliver` (what `take` will read).
        self.done[cpu].iter().any(|w| w.load(Ordering::Acquire) != 0)
    }

    /// Completions whose cookie named no submitter.
    pub fn bogus(&self) -> u64 {
        self.bogus.load(Ordering::Relaxed)
    }
}

/// The kernel's side of the block layer for one device.
pub struct KernelPlatform {
    sink: Arc<CompletionSink>,
}

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

    fn end_io(&self, c: &Completion) {
        // Before the delivery: the submitter may take it (and record its reap) at once.
        crate::arch::stagetrace::ended((c.cookie >> 32) as usize, (c.cookie & 0xFFFF_FFFF) as usize);
        self.sink.deliver(c);
        // The submitter may be halted waiting for exactly this (idle=halt).
        idle::wake((c.cookie >> 32) as usize);
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
    pub irq_vectors: Vec<u8>,
}

/// What the rest of the kernel needs from a block device, whatever its driver.
pub trait BlockDevice: Sync + Send {
    fn facts(&self) -> &DeviceFacts;
    fn sink(&self) -> &CompletionSink;
    /// Submits a bio on CPU `cpu` (block-layer sectors are 512 bytes).
    fn submit(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError>;
    /// Runs CPU `cpu`'s completion list (the completion IPI handler).
    fn run_completions(&self, cpu: usize) -> usize;
    /// Polls every hardware queue for completions (polled mode).
    fn poll(&self, cpu: usize) -> usize;
    /// Requeues and dispatches what is waiting; checks timeouts.
    fn make_progress(&self, cpu: usize);
    fn tick(&self, cpu: usize);
    fn set_policies(&self, completion: CompletionPolicy, quiesce: QuiesceCheck);
    fn policies(&self) -> (CompletionPolicy, QuiesceCheck);
    fn counters(&self) -> CounterSnapshot;
    fn in_flight(&self) -> usize;
    /// Switches the block layer's stage tracing on or off (`trace=N`; see `arch::stagetrace`).
    fn set_stage_trace(&self, on: bool) {
        let _ = on;
    }
    /// Driver-specific lines for the device report.
    fn describe(&self) -> String {
        String::new()
    }
}

/// A block device backed by a `blk` queue and driver `D`.
pub struct Disk<D: Driver> {
    pub facts: DeviceFacts,
    pub queue: Queue<D>,
    pub sink: Arc<CompletionSink>,
    pub extra: String,
}

impl<D: Driver> Disk<D> {
    /// Builds the queue for `driver` with the kernel's platform hooks.
    pub fn new(facts: DeviceFacts, cfg: blk::QueueConfig, driver: D, extra: String) -> Result<Self, BlkError> {
        let sink = Arc::new(CompletionSink::new());
        let platform: Arc<dyn blk::Platform> = Arc::new(KernelPlatform { sink: sink.clone() });
        let queue = Queue::new(cfg, driver, platform)?;
        Ok(Disk {
            facts,
            queue,
            sink,
            extra,
        })
    }
}

/// Runs `f` with interrupts disabled on this CPU. Every block-layer entry
/// from task context goes through it: the device's interrupt handler enters
/// the same queue on the CPU it lands on, and with `quiesce=locked` a
/// handler that interrupted this CPU while it held the queue's run lock
/// would spin on that lock forever (lock-free runs would only be delayed).
fn irqs_off<R>(f: impl FnOnce() -> R) -> R {
    x86_64::instructions::interrupts::without_interrupts(f)
}

impl<D: Driver + 'static> BlockDevice for Disk<D> {
    fn facts(&self) -> &DeviceFacts {
        &self.facts
    }
    fn sink(&self) -> &CompletionSink {
        &self.sink
    }
    fn submit(&self, cpu: usize, bio: &Bio<'_>) -> Result<Submitted, BlkError> {
        irqs_off(|| self.queue.submit(cpu, bio))
    }
    fn run_completions(&self, cpu: usize) -> usize {
        irqs_off(|| self.queue.run_completions(cpu))
    }
    fn poll(&self, cpu: usize) -> usize {
        irqs_off(|| {
            (0..self.queue.nr_hw_queues())
                .map(|h| self.queue.poll(cpu, h).unwrap_or(0))
                .sum()
        })
    }
    fn make_progress(&self, cpu: usize) {
        irqs_off(|| self.queue.make_progress(cpu));
    }
    fn tick(&self, cpu: usize) {
        if let Err(e) = irqs_off(|| self.queue.tick(cpu)) {
            log::warn!("{}: timeout scan: {e}", self.facts.name);
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

/// Ends registration; from now on the device list is read without a lock.
pub fn seal() -> &'static [&'static dyn BlockDevice] {
    irq::register_fn(irq::VECTOR_BLK_COMPLETE, "blk-complete", on_completion_ipi);
    FROZEN_LIST.call_once(|| core::mem::take(&mut *DEVICES.lock()))
}

/// Every registered device (empty before [`seal`]).
pub fn devices() -> &'static [&'static dyn BlockDevice] {
    FROZEN_LIST.get().map(Vec::as_slice).unwrap_or(&[])
}

/// Finds a device by name.
pub fn find(name: &str) -> Option<&'static dyn BlockDevice> {
    devices().iter().copied().find(|d| d.facts().name == name)
}

/// Prints the device table.
pub fn report() {
    let devs = devices();
    crate::arch::console::kprintln!("block devices: {}", devs.len());
    if devs.is_empty() {
        return;
    }
    crate::arch::console::kprintln!("  name    capacity (bytes)  sectors      sector  max-inflight  max-xfer  model");
    for d in devs {
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
        let extra = d.describe();
        if !extra.is_empty() {
            crate::arch::console::kprintln!("          {extra}");
        }
    }
}
