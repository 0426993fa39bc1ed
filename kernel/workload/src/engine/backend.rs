//! What the engine needs of the block layer on one CPU ([`IoBackend`]), and what crosses it:
//! an I/O's direction, its failure, a refused submission, completions and reaps.

use core::fmt;

/// Direction of one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Device to memory.
    Read,
    /// Memory to device.
    Write,
    /// Flush the device's volatile write cache (no data; `lba` and `sectors` are 0). Only jobs
    /// with fio's `fsync`/`end_fsync` issue it.
    Flush,
    /// Discard (fio's trim): the block's range, no data moves (`rw=trim`, `randtrim`,
    /// `trimwrite`).
    Trim,
}

impl IoOp {
    /// `read`, `write`, `flush` or `trim`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Trim => "trim",
        }
    }
}

/// Why one I/O failed, as the backend reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoError {
    /// The device completed the request with an error status (driver-specific code).
    Device {
        /// The status code.
        status: u32,
    },
    /// The block layer timed the request out.
    Timeout,
    /// The request was aborted (by an abort command, or at shutdown).
    Aborted,
    /// The controller was reset while the request was in flight, and the driver failed it.
    Reset,
    /// The block layer refused the request (e.g. out of range, queue dying), with its own code.
    Rejected {
        /// The block layer's code.
        code: u32,
    },
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Device { status } => write!(f, "device status {status:#x}"),
            Self::Timeout => f.write_str("timeout"),
            Self::Aborted => f.write_str("aborted"),
            Self::Reset => f.write_str("failed by a controller reset"),
            Self::Rejected { code } => write!(f, "rejected (code {code})"),
        }
    }
}

impl IoError {
    /// A short machine-readable name of the kind: `device`, `timeout`, `aborted`, `reset`, `rejected`.
    pub const fn key(&self) -> &'static str {
        match self {
            Self::Device { .. } => "device",
            Self::Timeout => "timeout",
            Self::Aborted => "aborted",
            Self::Reset => "reset",
            Self::Rejected { .. } => "rejected",
        }
    }
}

/// Why [`IoBackend::submit`] did not start a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// No resources right now (tags, queue slots); the engine retries the same I/O later.
    Busy,
    /// The request failed at once; the engine counts it as an I/O that completed with this error.
    Failed(IoError),
}

/// One finished request, as reported by [`IoBackend::poll_completions`]. Build it with
/// [`Completion::new`] (and [`Completion::with_retries`] when the driver re-issued the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The slot passed to `submit`.
    pub slot: usize,
    /// Its outcome.
    pub result: Result<(), IoError>,
    /// How many times the driver re-issued the request before this outcome (after a timeout and
    /// abort, or a controller reset); 0 when the first attempt gave the outcome. Retried I/Os are
    /// counted and listed in the report whatever their outcome.
    pub retries: u32,
}

impl Completion {
    /// A placeholder for preallocated completion arrays.
    pub const EMPTY: Self = Self::new(usize::MAX, Ok(()));

    /// A request of `slot` finished with `result` on its first attempt.
    pub const fn new(slot: usize, result: Result<(), IoError>) -> Self {
        Self {
            slot,
            result,
            retries: 0,
        }
    }

    /// The same completion, after `retries` re-issues by the driver.
    #[must_use]
    pub const fn with_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }
}

/// What one [`IoBackend::poll_reaped`] found: the common case as a bit mask, the rest listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reaped {
    /// Bit `s` set: slot `s` (below 64) completed successfully on its first attempt, as
    /// `Completion::new(s, Ok(()))` in `out` would say.
    pub succeeded: u64,
    /// How many completions were written to the front of `out` (every other one).
    pub listed: usize,
}

impl Reaped {
    /// The completions found, both kinds.
    pub const fn count(&self) -> usize {
        self.succeeded.count_ones() as usize + self.listed
    }
}

/// Splits a success mask into its `n` lowest slots and the rest, for a backend that hands a
/// reap out in parts (a later [`IoBackend::poll_reaped`] returns the rest): `n` or fewer bits
/// (all of them when `mask` has at most `n`), then what remains. `n` = 0 takes nothing.
pub const fn split_successes(mask: u64, n: usize) -> (u64, u64) {
    let mut rest = mask;
    let mut taken = 0;
    while taken < n && rest != 0 {
        rest &= rest - 1;
        taken += 1;
    }
    (mask & !rest, rest)
}

/// What the engine needs from the block layer on one CPU.
///
/// The engine uses slots `0..iodepth`; a slot has at most one request in flight. Buffers belong to
/// the backend (so it can hand out DMA-able memory) and must stay valid while their slot is in flight.
pub trait IoBackend {
    /// The data buffer of `slot`, at least `bs` bytes long (the engine uses the first `bs` bytes).
    /// The engine fills it before a write and reads it after a read completes; it never touches the
    /// buffer of a slot in flight.
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8];

    /// Starts a request: `sectors` sectors at `lba`, between the device and `slot`'s buffer.
    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError>;

    /// Writes finished requests into `out` and returns how many it wrote (at most `out.len()`;
    /// larger returns are clamped). Requests not reported now must be reported by a later call.
    fn poll_completions(&mut self, out: &mut [Completion]) -> usize;

    /// What [`IoBackend::poll_completions`] reports, with the common case apart: each request
    /// of a slot below 64 that succeeded on its first attempt may come back as a bit of
    /// [`Reaped::succeeded`] instead of a [`Completion`] in `out`; the rest go to `out` as
    /// `poll_completions` writes them (at most `out.len()`; the others by a later call). The
    /// engine reaps through this. The default lists everything; a backend whose completions
    /// arrive as bit maps (the kernel's done board) saves a [`Completion`] written and read
    /// back per I/O.
    fn poll_reaped(&mut self, out: &mut [Completion]) -> Reaped {
        Reaped {
            succeeded: 0,
            listed: self.poll_completions(out),
        }
    }

    /// A monotonic clock in nanoseconds.
    fn now_ns(&self) -> u64;

    /// Called when a poll found nothing to reap; a kernel may pause or wait for an interrupt here.
    /// `in_flight`: the engine's requests submitted and not yet reported by a poll (with 0,
    /// no completion of this CPU's is on its way to wake a waiting CPU). The engine counts them
    /// anyway, so a backend need not count them again per I/O.
    fn idle(&mut self, _in_flight: usize) {}

    /// Called from the loop about every [`PERIODIC_INTERVAL_NS`], with the current clock. The CPU that
    /// also prints progress can write a [`ProgressMeter`](crate::ProgressMeter) line here once a second,
    /// since it is busy in the engine loop itself.
    ///
    /// [`PERIODIC_INTERVAL_NS`]: super::PERIODIC_INTERVAL_NS
    fn periodic(&mut self, _now_ns: u64) {}

    /// Prints one diagnostic line of the engine (no trailing newline), e.g. a failed or retried I/O.
    /// The engine rate-limits these per CPU ([`LOG_BURST`], [`LOG_INTERVAL_NS`]) and says how many it
    /// held back, so a kernel can print them straight to its console. The default drops them (the
    /// job report still lists the I/Os).
    ///
    /// [`LOG_BURST`]: super::LOG_BURST
    /// [`LOG_INTERVAL_NS`]: super::LOG_INTERVAL_NS
    fn log_line(&mut self, _line: fmt::Arguments<'_>) {}
}
