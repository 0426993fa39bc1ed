//! CPU to hardware-queue mapping.

use crate::error::BlkError;
use alloc::vec::Vec;

/// The default map, in the spirit of Linux's `blk_mq_map_queues` (which spreads CPUs evenly
/// over queues in contiguous groups): with at least as many CPUs as queues, queue `q` serves a
/// contiguous run of `ncpus / nr_hw_queues` or one more CPUs; with fewer CPUs than queues,
/// CPU `c` gets queue `c` and the remaining queues serve no CPU.
///
/// Topology (SMT siblings, NUMA nodes) is not known to this crate; the kernel can pass its own
/// map through [`crate::QueueConfig::cpu_map`].
pub fn map_queues(ncpus: usize, nr_hw_queues: usize) -> Vec<u16> {
    if nr_hw_queues == 0 {
        return alloc::vec![0; ncpus];
    }
    (0..ncpus)
        .map(|cpu| {
            if ncpus <= nr_hw_queues {
                cpu as u16
            } else {
                // Integer form of floor(cpu * q / n): contiguous groups whose sizes differ by
                // at most one.
                ((cpu * nr_hw_queues) / ncpus) as u16
            }
        })
        .collect()
}

/// Checks a caller-supplied map: one entry per CPU, each naming an existing queue.
pub fn validate_map(map: &[u16], ncpus: usize, nr_hw_queues: usize) -> Result<(), BlkError> {
    if map.len() != ncpus {
        return Err(BlkError::InvalidConfig {
            field: "cpu_map length",
            value: map.len() as u64,
            accepted: "exactly one entry per cpu (ncpus)",
        });
    }
    for (cpu, &hwq) in map.iter().enumerate() {
        if usize::from(hwq) >= nr_hw_queues {
            return Err(BlkError::BadCpuMap {
                cpu,
                hwq: usize::from(hwq),
                nr_hw_queues,
            });
        }
    }
    Ok(())
}
