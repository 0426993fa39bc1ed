//! Queue and interrupt layout: which CPU uses which I/O queue pair, which MSI-X vector each
//! completion queue signals, and which CPU each vector is aimed at. The kernel builds the block
//! layer's CPU map and the vector affinity from the same [`QueuePlan`], so hardware queue `h`'s
//! interrupt lands on a CPU that submits to `h`.

use alloc::vec::Vec;

use crate::Error;

/// How completions are signalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqMode {
    /// MSI-X with `vectors` table entries granted to the driver (entry 0 is the admin queue's).
    MsiX {
        /// Table entries the kernel can program (at most the capability's table size).
        vectors: u16,
    },
    /// Legacy INTx (MSI-X off): every completion queue on interrupt vector 0.
    Intx,
    /// No interrupts: I/O completion queues are created with IEN = 0 and reaped by polling.
    Poll,
}

/// The layout of I/O queue pairs and interrupt vectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuePlan {
    mode: IrqMode,
    /// CPU -> hardware queue index (I/O queue pair `hwq + 1`).
    cpu_to_hwq: Vec<u16>,
    /// Hardware queue -> interrupt vector (MSI-X table entry, or 0); `None`: a polled queue
    /// (its CQ created with IEN = 0, no vector consumed).
    hwq_vector: Vec<Option<u16>>,
    /// Vector -> CPU it is aimed at.
    vector_cpu: Vec<usize>,
}

impl QueuePlan {
    /// Plans `N = min(ncpus, requested, device_max)` I/O queue pairs, where `device_max` is what
    /// Set Features Number of Queues granted (`min(NSQA, NCQA) + 1`) and `requested` is the
    /// kernel's limit (`nvme.queues=`; `None`: one per CPU). CPUs are spread over the queues in
    /// contiguous groups (blk's `map_queues`). With MSI-X, I/O queue `q` uses vector `q` when the
    /// table is large enough, otherwise the vectors 1.. are shared round-robin (and with a
    /// one-entry table everything shares vector 0).
    pub fn new(ncpus: usize, requested: Option<u16>, device_max: u16, mode: IrqMode) -> Result<Self, Error> {
        Self::with_poll_queues(ncpus, requested, device_max, mode, 0)
    }

    /// [`Self::new`] with the first `poll_queues` hardware queues (those of the first CPUs in the
    /// CPU map) polled (`nvme.poll_queues=`): their CQs are created with IEN = 0 and take no
    /// interrupt vector, and the CPUs that submit to them reap them while they wait. The other
    /// queues get vectors 1.. as in [`Self::new`], numbered among themselves, so the polled
    /// ones consume no MSI-X entry. `poll_queues` at or above the queue count polls every queue
    /// (only the admin vector is left); with [`IrqMode::Poll`] every queue is polled anyway.
    pub fn with_poll_queues(
        ncpus: usize,
        requested: Option<u16>,
        device_max: u16,
        mode: IrqMode,
        poll_queues: u16,
    ) -> Result<Self, Error> {
        if ncpus == 0 || ncpus > usize::from(u16::MAX) {
            return Err(Error::InvalidConfig {
                field: "ncpus",
                value: ncpus as u64,
                accepted: "1..=65535",
            });
        }
        if requested == Some(0) {
            return Err(Error::InvalidConfig {
                field: "nvme.queues",
                value: 0,
                accepted: "at least 1",
            });
        }
        if device_max == 0 {
            return Err(Error::Unsupported {
                what: "number of I/O queues granted",
                value: 0,
            });
        }
        if mode == (IrqMode::MsiX { vectors: 0 }) {
            return Err(Error::InvalidConfig {
                field: "MSI-X vectors",
                value: 0,
                accepted: "at least 1",
            });
        }
        let n = ncpus
            .min(usize::from(requested.unwrap_or(u16::MAX)))
            .min(usize::from(device_max));
        let polled = match mode {
            IrqMode::Poll => n,
            IrqMode::MsiX { .. } | IrqMode::Intx => usize::from(poll_queues).min(n),
        };
        // Queues with an interrupt: hardware queues polled..n, numbered 0.. among themselves.
        let with_irq = n - polled;
        let cpu_to_hwq = blk::map_queues(ncpus, n);
        let hwq_vector: Vec<Option<u16>> = (0..n)
            .map(|hwq| {
                let i = hwq.checked_sub(polled)?;
                Some(match mode {
                    IrqMode::MsiX { vectors } => {
                        let v = usize::from(vectors);
                        if v > with_irq {
                            (i + 1) as u16
                        } else if v >= 2 {
                            (1 + i % (v - 1)) as u16
                        } else {
                            0
                        }
                    }
                    IrqMode::Intx | IrqMode::Poll => 0,
                })
            })
            .collect();
        let nr_vectors = match mode {
            IrqMode::MsiX { vectors } => usize::from(vectors).min(with_irq + 1),
            IrqMode::Intx | IrqMode::Poll => 1,
        };
        let vector_cpu = (0..nr_vectors)
            .map(|v| {
                if v == 0 {
                    return 0;
                }
                // The first CPU of the first queue on this vector.
                let hwq = hwq_vector
                    .iter()
                    .position(|&x| x.is_some_and(|x| usize::from(x) == v))
                    .unwrap_or(0);
                cpu_to_hwq.iter().position(|&h| usize::from(h) == hwq).unwrap_or(0)
            })
            .collect();
        Ok(Self {
            mode,
            cpu_to_hwq,
            hwq_vector,
            vector_cpu,
        })
    }

    /// The interrupt mode.
    pub fn mode(&self) -> IrqMode {
        self.mode
    }
    /// Number of CPUs planned for.
    pub fn ncpus(&self) -> usize {
        self.cpu_to_hwq.len()
    }
    /// Number of I/O queue pairs (= blk hardware queues); pair `hwq + 1` is hardware queue `hwq`.
    pub fn nr_io_queues(&self) -> usize {
        self.hwq_vector.len()
    }
    /// CPU -> hardware queue, one entry per CPU: pass it as blk's `QueueConfig::cpu_map`.
    pub fn cpu_map(&self) -> &[u16] {
        &self.cpu_to_hwq
    }
    /// The hardware queue CPU `cpu` submits to.
    pub fn hwq_of_cpu(&self, cpu: usize) -> Option<usize> {
        self.cpu_to_hwq.get(cpu).map(|&h| usize::from(h))
    }
    /// Interrupt vector (MSI-X table entry) of hardware queue `hwq`'s completion queue; `None`
    /// for a polled queue (or no such queue).
    pub fn vector_of_hwq(&self, hwq: usize) -> Option<u16> {
        self.hwq_vector.get(hwq).copied().flatten()
    }
    /// Whether hardware queue `hwq` is polled: its CQ raises no interrupt (IEN = 0), so the CPUs
    /// that submit to it must reap it while they wait.
    pub fn is_polled(&self, hwq: usize) -> bool {
        self.hwq_vector.get(hwq).is_some_and(Option::is_none)
    }
    /// Whether the queue CPU `cpu` submits to is polled.
    pub fn cpu_polls(&self, cpu: usize) -> bool {
        self.hwq_of_cpu(cpu).is_some_and(|h| self.is_polled(h))
    }
    /// Number of polled hardware queues (the first ones).
    pub fn nr_polled(&self) -> usize {
        self.hwq_vector.iter().filter(|v| v.is_none()).count()
    }
    /// Whether any I/O completion queue raises interrupts (false for [`IrqMode::Poll`] and when
    /// every queue is polled).
    pub fn interrupts_enabled(&self) -> bool {
        self.hwq_vector.iter().any(Option::is_some)
    }
    /// Number of vectors in use, entry 0 (admin) included: program MSI-X entries `0..this`.
    pub fn nr_vectors(&self) -> usize {
        self.vector_cpu.len()
    }
    /// The CPU vector `vector` should be aimed at (a CPU that submits to a queue on it).
    pub fn vector_cpu(&self, vector: usize) -> Option<usize> {
        self.vector_cpu.get(vector).copied()
    }
    /// The hardware queues whose completion queues signal `vector`.
    pub fn hwqs_of_vector(&self, vector: usize) -> impl Iterator<Item = usize> + '_ {
        self.hwq_vector
            .iter()
            .enumerate()
            .filter(move |&(_, &v)| v.is_some_and(|v| usize::from(v) == vector))
            .map(|(h, _)| h)
    }
}

/// One line for the device report: `2 I/O queue pair(s), MSI-X: q1 v1 cpu0, q2 v2 cpu2; cpu->queue 1 1 2 2`.
impl core::fmt::Display for QueuePlan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mode = match self.mode {
            IrqMode::MsiX { .. } => "MSI-X",
            IrqMode::Intx => "INTx",
            IrqMode::Poll => "polled",
        };
        write!(f, "{} I/O queue pair(s), {mode}:", self.nr_io_queues())?;
        for (hwq, &v) in self.hwq_vector.iter().enumerate() {
            let sep = if hwq == 0 { "" } else { "," };
            match v {
                Some(v) => {
                    let cpu = self.vector_cpu.get(usize::from(v)).copied().unwrap_or(0);
                    write!(f, "{sep} q{} v{v} cpu{cpu}", hwq + 1)?;
                }
                None if self.mode == IrqMode::Poll => write!(f, "{sep} q{}", hwq + 1)?,
                None => write!(f, "{sep} q{} polled", hwq + 1)?,
            }
        }
        write!(f, "; cpu->queue")?;
        for &h in &self.cpu_to_hwq {
            write!(f, " {}", h + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn one_queue_and_vector_per_cpu() {
        for ncpus in [1usize, 2, 4, 8] {
            let p = QueuePlan::new(ncpus, None, 64, IrqMode::MsiX { vectors: 65 }).unwrap();
            assert_eq!(p.nr_io_queues(), ncpus);
            assert_eq!(p.nr_vectors(), ncpus + 1);
            for cpu in 0..ncpus {
                let hwq = p.hwq_of_cpu(cpu).unwrap();
                assert_eq!(hwq, cpu);
                let v = usize::from(p.vector_of_hwq(hwq).unwrap());
                assert_eq!(v, cpu + 1);
                assert_eq!(p.vector_cpu(v), Some(cpu));
                assert_eq!(p.hwqs_of_vector(v).collect::<Vec<_>>(), vec![hwq]);
            }
            assert_eq!(p.vector_cpu(0), Some(0));
            assert_eq!(p.hwqs_of_vector(0).count(), 0);
        }
    }

    #[test]
    fn fewer_queues_than_cpus_groups_cpus() {
        // QEMU max_ioqpairs=2 with 4 CPUs.
        let p = QueuePlan::new(4, None, 2, IrqMode::MsiX { vectors: 3 }).unwrap();
        assert_eq!(p.nr_io_queues(), 2);
        assert_eq!(p.cpu_map(), &[0, 0, 1, 1]);
        assert_eq!(p.vector_of_hwq(1), Some(2));
        assert_eq!(
            alloc::format!("{p}"),
            "2 I/O queue pair(s), MSI-X: q1 v1 cpu0, q2 v2 cpu2; cpu->queue 1 1 2 2"
        );
        // Each vector is aimed at a CPU that submits to its queue.
        for v in 1..p.nr_vectors() {
            let cpu = p.vector_cpu(v).unwrap();
            let hwq = p.hwq_of_cpu(cpu).unwrap();
            assert_eq!(usize::from(p.vector_of_hwq(hwq).unwrap()), v);
        }
        // The kernel's own limit and the device's grant both cap N.
        assert_eq!(QueuePlan::new(8, Some(3), 64, IrqMode::Intx).unwrap().nr_io_queues(), 3);
        assert_eq!(QueuePlan::new(8, None, 5, IrqMode::Poll).unwrap().nr_io_queues(), 5);
    }

    #[test]
    fn short_msix_table_shares_vectors() {
        // QEMU's `-device nvme,max_ioqpairs=8,msix_qsize=4`.
        let p = QueuePlan::new(8, None, 8, IrqMode::MsiX { vectors: 4 }).unwrap();
        assert_eq!(p.nr_vectors(), 4);
        let vs: Vec<u16> = (0..8).map(|h| p.vector_of_hwq(h).unwrap()).collect();
        assert_eq!(vs, vec![1, 2, 3, 1, 2, 3, 1, 2]);
        assert!(vs.iter().all(|&v| v < 4));
        assert_eq!(p.hwqs_of_vector(1).collect::<Vec<_>>(), vec![0, 3, 6]);
        // One entry: everything on vector 0.
        let one = QueuePlan::new(4, None, 4, IrqMode::MsiX { vectors: 1 }).unwrap();
        assert_eq!(one.nr_vectors(), 1);
        assert_eq!(one.hwqs_of_vector(0).count(), 4);
    }

    #[test]
    fn intx_and_poll() {
        let intx = QueuePlan::new(4, None, 64, IrqMode::Intx).unwrap();
        assert_eq!(intx.nr_vectors(), 1);
        assert!(intx.interrupts_enabled());
        assert_eq!(intx.hwqs_of_vector(0).count(), 4);
        let poll = QueuePlan::new(4, None, 64, IrqMode::Poll).unwrap();
        assert!(!poll.interrupts_enabled());
        assert_eq!(poll.hwqs_of_vector(0).count(), 0);
        assert!(QueuePlan::new(0, None, 4, IrqMode::Poll).is_err());
        assert!(QueuePlan::new(4, Some(0), 4, IrqMode::Poll).is_err());
        assert!(QueuePlan::new(4, None, 0, IrqMode::Poll).is_err());
        assert!(QueuePlan::new(4, None, 4, IrqMode::MsiX { vectors: 0 }).is_err());
    }

    #[test]
    fn poll_queues_take_no_vector() {
        // 4 CPUs, 2 polled: queues 1-2 (cpus 0-1) polled, queues 3-4 on vectors 1-2.
        let p = QueuePlan::with_poll_queues(4, None, 64, IrqMode::MsiX { vectors: 65 }, 2).unwrap();
        assert_eq!(p.nr_io_queues(), 4);
        assert_eq!(p.nr_polled(), 2);
        assert_eq!(p.nr_vectors(), 3);
        assert!(p.interrupts_enabled());
        assert_eq!(
            (0..4).map(|h| p.vector_of_hwq(h)).collect::<Vec<_>>(),
            vec![None, None, Some(1), Some(2)]
        );
        assert_eq!(
            (0..4).map(|c| p.cpu_polls(c)).collect::<Vec<_>>(),
            vec![true, true, false, false]
        );
        assert_eq!(p.vector_cpu(1), Some(2));
        assert_eq!(p.vector_cpu(2), Some(3));
        assert_eq!(p.hwqs_of_vector(1).collect::<Vec<_>>(), vec![2]);
        assert_eq!(p.hwqs_of_vector(0).count(), 0);
        assert_eq!(
            alloc::format!("{p}"),
            "4 I/O queue pair(s), MSI-X: q1 polled, q2 polled, q3 v1 cpu2, q4 v2 cpu3; cpu->queue 1 2 3 4"
        );
        // At or above the queue count: every queue polled, only the admin vector left.
        for n in [4u16, 5, 65534] {
            let all = QueuePlan::with_poll_queues(4, None, 64, IrqMode::MsiX { vectors: 65 }, n).unwrap();
            assert_eq!((all.nr_polled(), all.nr_vectors()), (4, 1));
            assert!(!all.interrupts_enabled());
            assert!((0..4).all(|c| all.cpu_polls(c)));
        }
        // 0 is the plain plan.
        assert_eq!(
            QueuePlan::with_poll_queues(4, None, 64, IrqMode::MsiX { vectors: 65 }, 0).unwrap(),
            QueuePlan::new(4, None, 64, IrqMode::MsiX { vectors: 65 }).unwrap()
        );
        // Queues shared by CPU groups: a polled queue is polled by each CPU of its group.
        let grouped = QueuePlan::with_poll_queues(4, Some(2), 64, IrqMode::MsiX { vectors: 3 }, 1).unwrap();
        assert_eq!(grouped.cpu_map(), &[0, 0, 1, 1]);
        assert_eq!(
            (0..4).map(|c| grouped.cpu_polls(c)).collect::<Vec<_>>(),
            vec![true, true, false, false]
        );
        assert_eq!(grouped.vector_of_hwq(1), Some(1));
        assert_eq!(grouped.vector_cpu(1), Some(2));
        // A short table is shared among the interrupt queues only.
        let short = QueuePlan::with_poll_queues(8, None, 8, IrqMode::MsiX { vectors: 4 }, 2).unwrap();
        assert_eq!(
            (0..8).map(|h| short.vector_of_hwq(h)).collect::<Vec<_>>(),
            vec![None, None, Some(1), Some(2), Some(3), Some(1), Some(2), Some(3)]
        );
        // INTx: the interrupt queues on the line, the polled ones on nothing.
        let intx = QueuePlan::with_poll_queues(2, None, 64, IrqMode::Intx, 1).unwrap();
        assert_eq!((intx.vector_of_hwq(0), intx.vector_of_hwq(1)), (None, Some(0)));
        assert_eq!(intx.hwqs_of_vector(0).collect::<Vec<_>>(), vec![1]);
        // nvme.irq=poll polls everything whatever the count.
        let poll = QueuePlan::with_poll_queues(4, None, 64, IrqMode::Poll, 1).unwrap();
        assert_eq!(poll.nr_polled(), 4);
    }
}
