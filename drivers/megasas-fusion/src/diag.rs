//! The first-boot diagnostic: every step of bring-up with the firmware state, the scratch pads
//! and the limits, so one boot on unknown hardware gives an actionable report even when it fails.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use devhal::Mmio;
use megasas::ControllerInfo;

use crate::controller::{Limits, LogicalDrive, read_reg};
use crate::error::{Error, Sp0};
use crate::regs::{self, Generation};

/// One bring-up step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// What happened.
    pub name: &'static str,
    /// Microseconds waited since bring-up started (the deadline's clock).
    pub waited_us: u64,
    /// SP0-SP3 right after the step.
    pub scratch_pads: [u32; 4],
    /// Doorbell register (bit 0: command in progress).
    pub doorbell: u32,
    /// Details.
    pub detail: String,
}

/// Everything bring-up saw. Print it with `{}`.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Generation the probe assumed (from the PCI id).
    pub generation: Option<Generation>,
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Limits, once read.
    pub limits: Option<Limits>,
    /// Controller information, once read.
    pub info: Option<ControllerInfo>,
    /// Logical drives, once found.
    pub drives: Vec<LogicalDrive>,
    /// The error bring-up stopped with, if any.
    pub error: Option<Error>,
}

/// How many steps a report keeps (the READY wait logs one per state change).
const MAX_STEPS: usize = 256;

impl Report {
    /// An empty report.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a step with the scratch pads read now, and logs it.
    pub(crate) fn step<M: Mmio>(
        &mut self,
        mmio: &M,
        g: Generation,
        waited_us: u64,
        name: &'static str,
        detail: String,
    ) {
        let sp = [
            read_reg(mmio, g, regs::SP0),
            read_reg(mmio, g, regs::SP1),
            read_reg(mmio, g, regs::SP2),
            read_reg(mmio, g, regs::SP3),
        ];
        let s = Step {
            name,
            waited_us,
            scratch_pads: sp,
            doorbell: mmio.read32(regs::DOORBELL),
            detail,
        };
        log::info!("megasas-fusion: {s}");
        if self.steps.len() < MAX_STEPS {
            self.steps.push(s);
        }
    }

    pub(crate) fn fail(&mut self, what: &'static str, e: &Error) {
        log::error!("megasas-fusion: {what} failed: {e}");
        self.error = Some(e.clone());
    }

    /// Whether bring-up succeeded.
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.steps.iter().any(|s| s.name == "bring-up complete")
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>9} us] {}: {} SP1 0x{:08X} SP2 0x{:08X} SP3 0x{:08X} doorbell 0x{:08X}",
            self.waited_us,
            self.name,
            Sp0(self.scratch_pads[0]),
            self.scratch_pads[1],
            self.scratch_pads[2],
            self.scratch_pads[3],
            self.doorbell
        )?;
        if !self.detail.is_empty() {
            write!(f, " | {}", self.detail)?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "=== megasas-fusion first-boot report ===")?;
        match self.generation {
            Some(g) => writeln!(f, "generation: {g}")?,
            None => writeln!(f, "generation: unknown")?,
        }
        for s in &self.steps {
            writeln!(f, "{s}")?;
        }
        if let Some(l) = &self.limits {
            writeln!(f, "limits: {l:?}")?;
        }
        if let Some(i) = &self.info {
            writeln!(f, "controller: {i}")?;
        }
        for d in &self.drives {
            writeln!(
                f,
                "LD target {}: {} blocks of {} bytes (state {})",
                d.target, d.blocks, d.block_size, d.state
            )?;
        }
        match &self.error {
            Some(e) => writeln!(f, "RESULT: FAILED: {e}")?,
            None if self.succeeded() => writeln!(f, "RESULT: OK")?,
            None => writeln!(f, "RESULT: incomplete")?,
        }
        write!(f, "=== end of report ===")
    }
}
