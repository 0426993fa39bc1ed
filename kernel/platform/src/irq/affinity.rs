//! Which CPU each of a device's vectors targets, and `irq.affinity=`.
//!
//! Accepted values (the word after `irq.affinity=` on the command line):
//! * `spread` (the default): vector index `i` goes to CPU `i mod n`, n the
//!   number of online CPUs, like Linux managed interrupts spread a device's
//!   queues;
//! * `cpu:N`: every vector to CPU N;
//! * `I:C[,I:C...]`: vector index I to CPU C; indices not listed are spread.
//!
//! Numbers are plain decimal. CPU numbers are checked against the online
//! count when the policy is applied ([`AffinityPolicy::validate`]), since
//! the command line is parsed before the CPUs are up.

use core::fmt;

use crate::error::{Error, Result, Token};

/// Pairs accepted in the `I:C,...` form.
pub const MAX_AFFINITY_PAIRS: usize = 64;

const KEY: &str = "irq.affinity=";

/// How a device's vectors are spread over CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once from the command line and kept; boxing would need the heap that early"
)]
pub enum AffinityPolicy {
    /// Vector index i -> CPU i mod n.
    #[default]
    Spread,
    /// Every vector to this CPU.
    SingleCpu(u32),
    /// Listed (vector index, CPU) pairs, others spread. Indices are unique.
    Explicit(heapless::Vec<(u16, u32), MAX_AFFINITY_PAIRS>),
}

fn parse_error(token: &str, reason: &'static str) -> Error {
    Error::AffinityParse {
        token: Token::new(token),
        reason,
    }
}

/// Plain decimal (no sign, no spaces), fitting `u32`.
fn parse_decimal(text: &str, token: &str, what: &'static str) -> Result<u32> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(parse_error(token, what));
    }
    text.parse::<u32>().map_err(|_| parse_error(token, "number too large"))
}

impl AffinityPolicy {
    /// Parses the value of `irq.affinity=`.
    pub fn parse(value: &str) -> Result<AffinityPolicy> {
        if value.is_empty() {
            return Err(parse_error(value, "empty value"));
        }
        if value == "spread" {
            return Ok(AffinityPolicy::Spread);
        }
        if let Some(cpu) = value.strip_prefix("cpu:") {
            return Ok(AffinityPolicy::SingleCpu(parse_decimal(
                cpu,
                value,
                "CPU number must be decimal",
            )?));
        }
        if !value.contains(':') {
            return Err(parse_error(value, "unknown form"));
        }
        let mut pairs: heapless::Vec<(u16, u32), MAX_AFFINITY_PAIRS> = heapless::Vec::new();
        for item in value.split(',') {
            if item.is_empty() {
                return Err(parse_error(value, "empty item (stray comma)"));
            }
            let Some((index, cpu)) = item.split_once(':') else {
                return Err(parse_error(item, "expected vector-index:cpu"));
            };
            let index = parse_decimal(index, item, "vector index must be decimal")?;
            let index = u16::try_from(index)
                .ok()
                .filter(|&index| index < 2048)
                .ok_or_else(|| parse_error(item, "vector index must be below 2048 (the MSI-X maximum)"))?;
            let cpu = parse_decimal(cpu, item, "CPU number must be decimal")?;
            if pairs.iter().any(|&(known, _)| known == index) {
                return Err(parse_error(item, "vector index given twice"));
            }
            pairs.push((index, cpu)).map_err(|_| Error::AffinityCapacity {
                capacity: MAX_AFFINITY_PAIRS,
            })?;
        }
        Ok(AffinityPolicy::Explicit(pairs))
    }

    /// Finds `irq.affinity=` among the whitespace-separated words of a
    /// kernel command line: `Ok(None)` if absent, an error if malformed or
    /// given twice.
    pub fn from_cmdline(cmdline: &str) -> Result<Option<AffinityPolicy>> {
        let mut found = None;
        for word in cmdline.split_ascii_whitespace() {
            if let Some(value) = word.strip_prefix(KEY) {
                if found.is_some() {
                    return Err(parse_error(word, "irq.affinity given twice"));
                }
                found = Some(AffinityPolicy::parse(value)?);
            }
        }
        Ok(found)
    }

    /// Checks every named CPU is below `online_cpus` (and that there is a CPU).
    pub fn validate(&self, online_cpus: u32) -> Result<()> {
        let check = |cpu: u32| {
            if cpu < online_cpus {
                Ok(())
            } else {
                Err(Error::CpuOutOfRange {
                    cpu,
                    limit: online_cpus,
                })
            }
        };
        check(0)?;
        match self {
            AffinityPolicy::Spread => Ok(()),
            AffinityPolicy::SingleCpu(cpu) => check(*cpu),
            AffinityPolicy::Explicit(pairs) => pairs.iter().try_for_each(|&(_, cpu)| check(cpu)),
        }
    }

    /// The CPU for vector index `index` of a device, with `online_cpus` CPUs.
    pub fn cpu_for(&self, index: u16, online_cpus: u32) -> Result<u32> {
        self.validate(online_cpus)?;
        let spread = u32::from(index) % online_cpus;
        Ok(match self {
            AffinityPolicy::Spread => spread,
            AffinityPolicy::SingleCpu(cpu) => *cpu,
            AffinityPolicy::Explicit(pairs) => pairs
                .iter()
                .find(|&&(known, _)| known == index)
                .map_or(spread, |&(_, cpu)| cpu),
        })
    }
}

/// Where a vector of a multi-queue device goes, given the CPU to queue map.
///
/// Vector `i` serves hardware queue `i` when `i < nr_hw_queues`, so its
/// interrupt must land on a CPU that submits to queue `i`. The policy's CPU
/// (or `preferred`, a driver's own choice such as `megasas.irq_cpu`) is kept
/// when it submits to that queue; otherwise the first CPU that does is
/// used. A vector beyond the queues, or one whose queue no CPU submits to
/// (more queues than CPUs), follows the policy (or `preferred`) alone.
/// `queue_of_cpu` has one entry per online CPU.
impl AffinityPolicy {
    /// The CPU for vector `index` (see the type-level comment above).
    pub fn cpu_for_queue_vector(
        &self,
        index: u16,
        queue_of_cpu: &[u16],
        nr_hw_queues: usize,
        preferred: Option<u32>,
    ) -> Result<u32> {
        let online = u32::try_from(queue_of_cpu.len()).unwrap_or(u32::MAX);
        let wanted = match preferred {
            Some(cpu) if cpu >= online => return Err(Error::CpuOutOfRange { cpu, limit: online }),
            Some(cpu) => cpu,
            None => self.cpu_for(index, online)?,
        };
        if usize::from(index) >= nr_hw_queues {
            return Ok(wanted);
        }
        let serves = |cpu: u32| queue_of_cpu.get(cpu as usize) == Some(&index);
        if serves(wanted) {
            return Ok(wanted);
        }
        Ok((0..online).find(|&cpu| serves(cpu)).unwrap_or(wanted))
    }
}

impl fmt::Display for AffinityPolicy {
    /// The canonical `irq.affinity=` value (parses back to the same policy).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AffinityPolicy::Spread => write!(f, "spread"),
            AffinityPolicy::SingleCpu(cpu) => write!(f, "cpu:{cpu}"),
            AffinityPolicy::Explicit(pairs) => {
                for (position, (index, cpu)) in pairs.iter().enumerate() {
                    if position > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{index}:{cpu}")?;
                }
                Ok(())
            }
        }
    }
}
