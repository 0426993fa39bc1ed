//! The one CPU map of a device: which hardware queue each CPU submits to
//! (`blk`'s queue map) and which CPU each interrupt vector is aimed at, so
//! that hardware queue h's interrupt lands on a CPU that submits to h.
//!
//! Both directions come from [`plan`]: the queue map is `blk::map_queues`,
//! and vector `i` (for `i` below the number of hardware queues, vector `i`
//! serves queue `i`) goes where `irq.affinity=` says if that CPU maps to
//! queue `i`, else to the first CPU that does. Vectors beyond the queues
//! (a device asked for more, e.g. every MSI-X table entry) follow the
//! affinity policy alone.
//!
//! Without interrupt remapping a device interrupt reaches only APIC ids up
//! to 255: a vector whose chosen CPU lies above goes to a reachable CPU of
//! the same queue, else to a reachable CPU at all
//! (`platform::cpus::reachable_cpu_for`); its completions then reach the
//! submitting CPUs through the block layer's per-CPU completion lists.

use crate::arch::{percpu, smp};
use crate::error::Error;
use alloc::format;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use platform::irq::AffinityPolicy;

/// The interrupt-affinity policy from `irq.affinity=` (default: spread).
static AFFINITY: spin::Once<AffinityPolicy> = spin::Once::new();

/// Records the policy (at boot, after it was validated against the online CPUs).
pub fn set_affinity(policy: AffinityPolicy) {
    AFFINITY.call_once(|| policy);
}

fn affinity() -> &'static AffinityPolicy {
    AFFINITY.call_once(AffinityPolicy::default)
}

/// Whether some online CPU has an APIC id no device interrupt can reach:
/// then a device's completions should travel to their submitting CPUs
/// (`CompletionPolicy::Remote`) rather than finish where the interrupt landed.
pub fn needs_remote_completion() -> bool {
    (0..smp::online()).any(|c| !platform::cpus::interrupt_reachable(percpu::cpu(c).apic_id.load(Ordering::Relaxed)))
}

/// One device's CPU map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuMap {
    /// Hardware queue of each online CPU (give it to `blk::QueueConfig::cpu_map`).
    pub queue_of_cpu: Vec<u16>,
    /// CPU each interrupt vector is aimed at (give it to `setup_vectors`).
    pub vector_cpus: Vec<usize>,
}

impl CpuMap {
    /// Hardware queue served by vector `index` (vectors beyond the queues
    /// serve none of their own).
    pub fn queue_of_vector(&self, index: usize) -> Option<u16> {
        let queues = self
            .queue_of_cpu
            .iter()
            .copied()
            .max()
            .map_or(0, |q| usize::from(q) + 1);
        (index < queues).then_some(index as u16)
    }
}

/// Plans `nr_hw_queues` hardware queues over the online CPUs and
/// `nr_vectors` interrupt vectors. `vector0_cpu` is a driver's explicit
/// choice for vector 0 (e.g. `megasas.irq_cpu=`), honoured only when that
/// CPU submits to queue 0 (the rule is `AffinityPolicy::cpu_for_queue_vector`,
/// host-tested in `platform`).
pub fn plan(nr_hw_queues: usize, nr_vectors: usize, vector0_cpu: Option<usize>) -> Result<CpuMap, Error> {
    let online = smp::online();
    if nr_hw_queues == 0 {
        return Err(Error::Device("a device needs at least one hardware queue".into()));
    }
    let queue_of_cpu = blk::map_queues(online, nr_hw_queues);
    let apic_ids: Vec<u32> = (0..online)
        .map(|c| percpu::cpu(c).apic_id.load(Ordering::Relaxed))
        .collect();
    let mut vector_cpus = Vec::with_capacity(nr_vectors);
    for index in 0..nr_vectors {
        let index16 = u16::try_from(index).map_err(|_| Error::Device(format!("{nr_vectors} vectors are too many")))?;
        let preferred = match (index, vector0_cpu) {
            (0, Some(cpu)) if cpu >= online => return Err(Error::CpuOffline { cpu, online }),
            (0, Some(cpu)) => Some(cpu as u32),
            _ => None,
        };
        let chosen = affinity().cpu_for_queue_vector(index16, &queue_of_cpu, nr_hw_queues, preferred)? as usize;
        let same_queue: Vec<usize> = (0..online)
            .filter(|&c| queue_of_cpu.get(c) == queue_of_cpu.get(chosen))
            .collect();
        let cpu = platform::cpus::reachable_cpu_for(chosen, &same_queue, &apic_ids, index).ok_or_else(|| {
            Error::Device("no online CPU has an APIC id a device interrupt can reach (255 or below)".into())
        })?;
        if cpu != chosen {
            log::info!(
                "irq: vector {index}: cpu{chosen}'s APIC id {} is above 255; aiming it at cpu{cpu} (completions travel to the submitting CPUs)",
                apic_ids[chosen]
            );
        }
        if let Some(wanted) = preferred.map(|c| c as usize).filter(|&w| w != cpu) {
            log::info!(
                "irq: vector {index} serves hardware queue {index}, which cpu{wanted} does not submit to; aiming it at cpu{cpu}"
            );
        }
        vector_cpus.push(cpu);
    }
    let map = CpuMap {
        queue_of_cpu,
        vector_cpus,
    };
    check(&map, online, &apic_ids)?;
    Ok(map)
}

/// The invariant, checked on every plan: each vector that serves a queue
/// some CPU with a reachable APIC id submits to is aimed at such a CPU.
fn check(map: &CpuMap, online: usize, apic_ids: &[u32]) -> Result<(), Error> {
    for (index, &cpu) in map.vector_cpus.iter().enumerate() {
        let Some(queue) = map.queue_of_vector(index) else {
            continue;
        };
        let served = map
            .queue_of_cpu
            .iter()
            .zip(apic_ids)
            .any(|(&q, &id)| q == queue && platform::cpus::interrupt_reachable(id));
        if served && map.queue_of_cpu.get(cpu) != Some(&queue) {
            return Err(Error::Device(format!(
                "CPU map: vector {index} (hardware queue {queue}) aimed at cpu{cpu}, which submits to another queue ({online} CPUs)"
            )));
        }
    }
    Ok(())
}
