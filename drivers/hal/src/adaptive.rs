//! Settings of the adaptive interrupt-then-poll completion mode (`megasas.irq_poll=`,
//! `nvme.irq_poll=`): after an interrupt that reaped something, the driver masks the vector and
//! the submitters poll; the window closes (vector unmasked, queue re-reaped) after `idle_ns`
//! without a completion or after `budget` completions. Each driver keeps its own window state.

/// Idle window of `*.irq_poll=on`, µs.
pub const DEFAULT_IDLE_US: u32 = 50;

/// Completions per window before it closes (the next interrupt opens a new one).
pub const DEFAULT_BUDGET: u32 = 64;

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
