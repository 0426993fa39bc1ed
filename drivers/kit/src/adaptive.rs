//! Settings of the adaptive interrupt-then-poll completion mode (`megasas.irq_poll=`,
//! `nvme.irq_poll=`): after an interrupt that reaped something, the driver masks the vector and
//! the submitters poll; the window closes (vector unmasked, queue re-reaped) after `idle_ns`
//! without a completion or after `budget` completions. Each driver keeps its own window state;
//! the settings and the counters are shared.

use core::sync::atomic::{AtomicU64, Ordering};

/// Idle window of `*.irq_poll=on`, µs.
pub const DEFAULT_IDLE_US: u32 = 50;

/// Completions per window before it closes (the next interrupt opens a new one).
pub const DEFAULT_BUDGET: u32 = 64;

/// The largest transfer a window is opened for, in bytes. Polling pays when the next completion
/// is due within the window; a larger transfer keeps the device busy longer than that (128 KiB
/// over one 12 Gb/s SAS lane takes about 100 µs), so the CPU would spin for nothing, and under
/// emulation the spinning vCPU takes the host time the device model needs to move the data. An
/// interrupt while the last transfer submitted was larger opens no window.
pub const MAX_POLLED_TRANSFER_BYTES: u32 = 32 * 1024;

/// Interrupt-then-poll settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveConfig {
    /// Close a window after this long without a completion, ns.
    pub idle_ns: u64,
    /// Close a window after this many completions, so one window never holds the vector masked
    /// for good.
    pub budget: u32,
}

impl AdaptiveConfig {
    /// The default budget with an idle window of `idle_us` µs.
    pub const fn with_idle_us(idle_us: u32) -> Self {
        Self {
            idle_ns: idle_us as u64 * 1000,
            budget: DEFAULT_BUDGET,
        }
    }
}

impl Default for AdaptiveConfig {
    /// 50 µs idle (above one 4k read's device latency under QEMU, so QD 1 keeps polling), 64
    /// completions.
    fn default() -> Self {
        Self::with_idle_us(DEFAULT_IDLE_US)
    }
}

/// Counters of the adaptive mode (a snapshot; a driver with several windows sums them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdaptiveCounters {
    /// Windows opened (vector masked after an interrupt that reaped something).
    pub windows: u64,
    /// Completions reaped by polling while a window was open.
    pub polled: u64,
    /// Windows closed because their budget was spent.
    pub budget_closes: u64,
    /// Completions found by the re-reap right after an unmask (they landed between the last
    /// poll and the unmask).
    pub unmask_catches: u64,
    /// Interrupts that opened no window because the last transfer submitted was over
    /// [`MAX_POLLED_TRANSFER_BYTES`].
    pub large_transfer_skips: u64,
}

/// The live counters of one window: statistics any CPU bumps (Relaxed; they order nothing).
#[derive(Debug, Default)]
pub struct WindowCounters {
    /// See [`AdaptiveCounters::windows`].
    pub windows: AtomicU64,
    /// See [`AdaptiveCounters::polled`].
    pub polled: AtomicU64,
    /// See [`AdaptiveCounters::budget_closes`].
    pub budget_closes: AtomicU64,
    /// See [`AdaptiveCounters::unmask_catches`].
    pub unmask_catches: AtomicU64,
    /// See [`AdaptiveCounters::large_transfer_skips`].
    pub large_transfer_skips: AtomicU64,
}

impl WindowCounters {
    /// Adds this window's counts to `total`.
    pub fn add_to(&self, total: &mut AdaptiveCounters) {
        total.windows += self.windows.load(Ordering::Relaxed);
        total.polled += self.polled.load(Ordering::Relaxed);
        total.budget_closes += self.budget_closes.load(Ordering::Relaxed);
        total.unmask_catches += self.unmask_catches.load(Ordering::Relaxed);
        total.large_transfer_skips += self.large_transfer_skips.load(Ordering::Relaxed);
    }

    /// This window's counts.
    pub fn snapshot(&self) -> AdaptiveCounters {
        let mut c = AdaptiveCounters::default();
        self.add_to(&mut c);
        c
    }
}
