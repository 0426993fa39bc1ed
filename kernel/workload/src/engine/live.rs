//! What CPUs share while a job runs: the stop flag, and the counters and phase each CPU
//! publishes for the progress line.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use crate::detail::DetailOptions;
use crate::flow::FlowGroup;
use crate::plan::JobPlan;
use alloc::sync::Arc;

/// Which part of the job a CPU is in, as published for the progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuPhase {
    /// Not started yet.
    Starting,
    /// The measured phase.
    Running,
    /// Reading back and checking what was written.
    Verifying,
    /// Done; its counters are final.
    Finished,
}

impl CpuPhase {
    fn from_u8(value: u8) -> Self {
        match value {
            1 => Self::Running,
            2 => Self::Verifying,
            3 => Self::Finished,
            _ => Self::Starting,
        }
    }
}

/// Counters one CPU publishes while it runs, for the progress line: about every
/// [`PERIODIC_INTERVAL_NS`], when a phase ends, and when the CPU finishes. Each field has one writer
/// (the CPU running the engine) and any number of readers.
///
/// [`PERIODIC_INTERVAL_NS`]: super::PERIODIC_INTERVAL_NS
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct CpuLive {
    ios: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    mismatches: AtomicU64,
    phase: AtomicU8,
}

/// A consistent-enough reading of one CPU's live counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveCounts {
    /// Completed I/Os (including failed ones and those of the verify pass).
    pub ios: u64,
    /// Bytes moved by successful I/Os.
    pub bytes: u64,
    /// Failed I/Os.
    pub errors: u64,
    /// Verify mismatches.
    pub mismatches: u64,
}

impl LiveCounts {
    /// Field-wise sum.
    pub fn add(&mut self, other: &Self) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.mismatches += other.mismatches;
    }
}

impl CpuLive {
    pub(super) fn publish(&self, counts: &LiveCounts) {
        // Relaxed: plain statistics for display, with no data published through them. The final
        // values are ordered before `finish`'s Release store of the phase.
        self.ios.store(counts.ios, Ordering::Relaxed);
        self.bytes.store(counts.bytes, Ordering::Relaxed);
        self.errors.store(counts.errors, Ordering::Relaxed);
        self.mismatches.store(counts.mismatches, Ordering::Relaxed);
    }

    pub(super) fn set_phase(&self, phase: CpuPhase) {
        // Release pairs with the Acquire load in `phase()`: a reader that sees `Finished` also sees
        // the last `publish`.
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// The CPU's current phase.
    pub fn phase(&self) -> CpuPhase {
        // Acquire pairs with the Release store in `set_phase`.
        CpuPhase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// The CPU's latest published counters.
    pub fn counts(&self) -> LiveCounts {
        // Relaxed: see `publish`; exact once `phase()` has returned `Finished`.
        LiveCounts {
            ios: self.ios.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            mismatches: self.mismatches.load(Ordering::Relaxed),
        }
    }
}

/// State shared by all CPUs of one job: a stop flag and the live counters. Create one per job with
/// [`JobShared::new`] and hand a reference to every CPU.
#[derive(Debug)]
pub struct JobShared {
    stop: AtomicBool,
    /// The job's summed steady-state window met its criterion (`group_reporting`).
    steady_attained: AtomicBool,
    pub(super) live: Box<[CpuLive]>,
    pub(super) detail: Option<DetailOptions>,
    /// The job's `flow_id` group in its wave, with the other jobs of it.
    pub(super) flow: Option<Arc<FlowGroup>>,
    /// fio's `exitall` across a wave: the wave's stop requests, and this job's index in it.
    pub(super) wave_exit: Option<(Arc<WaveExit>, usize)>,
}

/// fio's `exitall` in a wave of several jobs: one stop request per job of the wave, raised by
/// the end of a job whose `exitall_stops` names it and taken up by that job's CPUs at their
/// periodic check (about every 100 ms), never on the I/O path.
#[derive(Debug)]
pub struct WaveExit {
    stop: Box<[AtomicBool]>,
}

impl WaveExit {
    /// The wave's stop requests when any of `plans` (the wave's jobs, in order) stops others
    /// with `exitall`; `None` otherwise.
    pub fn for_wave(plans: &[&JobPlan]) -> Option<Arc<Self>> {
        plans.iter().any(|p| !p.spec.exitall_stops.is_empty()).then(|| {
            Arc::new(Self {
                stop: plans.iter().map(|_| AtomicBool::new(false)).collect(),
            })
        })
    }

    /// Asks job `index` of the wave to stop.
    pub(super) fn request(&self, index: usize) {
        if let Some(flag) = self.stop.get(index) {
            // Relaxed: a hint, as `JobShared::request_stop`.
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Whether job `index` of the wave was asked to stop.
    pub(super) fn requested(&self, index: usize) -> bool {
        self.stop.get(index).is_some_and(|flag| flag.load(Ordering::Relaxed))
    }
}

impl JobShared {
    /// Shared state for a job with `plan.cpus.len()` CPUs.
    pub fn new(plan: &JobPlan) -> Self {
        let live = (0..plan.cpus.len()).map(|_| CpuLive::default()).collect();
        Self {
            stop: AtomicBool::new(false),
            steady_attained: AtomicBool::new(false),
            live,
            detail: None,
            flow: None,
            wave_exit: None,
        }
    }

    /// The job is job `index` of a wave whose jobs stop one another with `exitall`
    /// ([`WaveExit::for_wave`]); `None` leaves it on its own.
    #[must_use]
    pub fn with_wave_exit(mut self, wave: Option<Arc<WaveExit>>, index: usize) -> Self {
        self.wave_exit = wave.map(|w| (w, index));
        self
    }

    /// The jobs of the wave this one stops as it ends ([`JobSpec::exitall_stops`]).
    ///
    /// [`JobSpec::exitall_stops`]: crate::job::JobSpec::exitall_stops
    pub(super) fn stop_wave_jobs(&self, indices: &[u32]) {
        if let Some((wave, _)) = &self.wave_exit {
            for &index in indices {
                wave.request(index as usize);
            }
        }
    }

    /// Takes up a stop another job of the wave requested: every CPU of the job stops.
    pub(super) fn take_wave_stop(&self) {
        if let Some((wave, me)) = &self.wave_exit
            && wave.requested(*me)
        {
            self.request_stop();
        }
    }

    /// The job joins its wave's flow group ([`crate::flow::flow_groups`]); `None` leaves it
    /// unregulated.
    #[must_use]
    pub fn with_flow(mut self, group: Option<Arc<FlowGroup>>) -> Self {
        self.flow = group;
        self
    }

    /// Shared state for a job whose CPUs also measure the detail fio's output needs
    /// ([`crate::detail`]: slat/clat, depths, idle time, interval samples, log windows).
    pub fn with_detail(plan: &JobPlan, options: DetailOptions) -> Self {
        Self {
            detail: Some(options),
            ..Self::new(plan)
        }
    }

    /// The detail options, if the job measures detail.
    pub fn detail(&self) -> Option<DetailOptions> {
        self.detail
    }

    /// Asks every CPU to stop issuing I/O, drain, and return (skipping the verify pass).
    pub fn request_stop(&self) {
        // Relaxed: a hint polled in the loop; the only thing it orders is "stop soon".
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether a stop was requested.
    pub fn stop_requested(&self) -> bool {
        // Relaxed: see `request_stop`.
        self.stop.load(Ordering::Relaxed)
    }

    /// The job's first CPU found the job's summed rates steady: every CPU stops issuing (and,
    /// unlike [`JobShared::request_stop`], still runs its verify pass).
    pub fn set_steady_attained(&self) {
        // Relaxed: a hint polled at each CPU's periodic check, as `request_stop`.
        self.steady_attained.store(true, Ordering::Relaxed);
    }

    /// Whether the job's summed steady state was reached.
    pub fn steady_attained(&self) -> bool {
        // Relaxed: see `set_steady_attained`.
        self.steady_attained.load(Ordering::Relaxed)
    }

    /// Live counters of the CPU at `cpu_index` in the plan.
    pub fn cpu(&self, cpu_index: usize) -> Option<&CpuLive> {
        self.live.get(cpu_index)
    }

    /// Sum of every CPU's live counters.
    pub fn total(&self) -> LiveCounts {
        let mut total = LiveCounts::default();
        for cpu in self.live.iter() {
            total.add(&cpu.counts());
        }
        total
    }

    /// Whether every CPU has finished.
    pub fn all_finished(&self) -> bool {
        self.live.iter().all(|cpu| cpu.phase() == CpuPhase::Finished)
    }

    /// Whether any CPU is in its verify pass.
    pub fn any_verifying(&self) -> bool {
        self.live.iter().any(|cpu| cpu.phase() == CpuPhase::Verifying)
    }
}
