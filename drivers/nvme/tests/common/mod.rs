//! Shared rig for the host tests: the fake controller, a `Host`, a recording blk platform, DMA
//! buffers and a deterministic RNG.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use blk::{Completion, Platform};
use nvme::blkdev::{Host, HostConfig};
use nvme::fake::{FakeConfig, FakeDelay, FakeMmio, FakeNamespace, FakeNvme};
use nvme::{Config, Controller, IrqMode, QueuePlan};

pub type FakeHost = Host<FakeMmio, nvme::fake::FakeDma, FakeDelay>;
pub type FakeController = Controller<FakeMmio, nvme::fake::FakeDma, FakeDelay>;

/// A blk platform that records every end_io and every IPI / softirq request.
#[derive(Default)]
pub struct TestPlatform {
    pub now: AtomicU64,
    pub done: Mutex<Vec<Completion>>,
    pub kicks: Mutex<Vec<usize>>,
}

impl Platform for TestPlatform {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
    fn send_completion_ipi(&self, cpu: usize) {
        self.kicks.lock().unwrap().push(cpu);
    }
    fn raise_completion_softirq(&self, cpu: usize) {
        self.kicks.lock().unwrap().push(cpu);
    }
    fn end_io(&self, c: &Completion) {
        self.done.lock().unwrap().push(*c);
    }
}

impl TestPlatform {
    pub fn take_done(&self) -> Vec<Completion> {
        std::mem::take(&mut *self.done.lock().unwrap())
    }
    pub fn advance(&self, ns: u64) {
        self.now.fetch_add(ns, Ordering::Relaxed);
    }
}

pub fn controller(fake: &Arc<FakeNvme>, cfg: Config) -> Result<FakeController, nvme::Error> {
    Controller::new(fake.mmio(), fake.dma(), fake.delay(), cfg)
}

pub struct Rig {
    pub fake: Arc<FakeNvme>,
    pub host: FakeHost,
    pub platform: Arc<TestPlatform>,
    pub ncpus: usize,
}

impl Rig {
    pub fn new(fcfg: FakeConfig, ncpus: usize, mode: IrqMode, hcfg: HostConfig) -> Self {
        Self::with_config(fcfg, ncpus, mode, hcfg, Config::default())
    }

    pub fn with_config(fcfg: FakeConfig, ncpus: usize, mode: IrqMode, hcfg: HostConfig, cfg: Config) -> Self {
        Self::with_poll_queues(fcfg, ncpus, mode, 0, hcfg, cfg)
    }

    /// A rig whose first `poll_queues` I/O queue pairs are polled (`nvme.poll_queues=`).
    pub fn with_poll_queues(
        fcfg: FakeConfig,
        ncpus: usize,
        mode: IrqMode,
        poll_queues: u16,
        hcfg: HostConfig,
        mut cfg: Config,
    ) -> Self {
        let fake = FakeNvme::new(fcfg);
        cfg.requested_io_queues = cfg.requested_io_queues.min(ncpus as u16);
        let ctrl = controller(&fake, cfg).expect("bring-up");
        let plan = QueuePlan::with_poll_queues(ncpus, None, ctrl.max_io_queues(), mode, poll_queues).expect("plan");
        let platform = Arc::new(TestPlatform::default());
        let host = Host::new(ctrl, plan, hcfg, |_, _| -> Arc<dyn Platform> { platform.clone() }).expect("host");
        Self {
            fake,
            host,
            platform,
            ncpus,
        }
    }

    /// Delivers every recorded interrupt to the CPU its vector is aimed at; returns the
    /// completions handled. `per_vector_cpu` records (vector, cpu) pairs.
    pub fn deliver_interrupts(&self) -> usize {
        let mut n = 0;
        // Handling may post commands (retries) that signal again: loop until quiet.
        loop {
            let msgs = self.fake.take_messages();
            if msgs.is_empty() {
                return n;
            }
            for v in msgs {
                let cpu = self.host.plan().vector_cpu(usize::from(v)).expect("vector in plan");
                n += self.host.handle_vector(usize::from(v), cpu);
            }
        }
    }

    /// Each CPU whose queue is polled reaps it, as a waiting CPU does; returns the completions.
    pub fn poll_polled_cpus(&self) -> usize {
        let plan = self.host.plan();
        (0..self.ncpus)
            .filter(|&cpu| plan.cpu_polls(cpu))
            .map(|cpu| self.host.poll(plan.hwq_of_cpu(cpu).expect("cpu in plan"), cpu))
            .sum()
    }

    /// Runs blk's completion lists for CPUs that were kicked (IPI/softirq policies).
    pub fn run_kicked(&self) {
        let kicks: Vec<usize> = std::mem::take(&mut *self.platform.kicks.lock().unwrap());
        for cpu in kicks {
            for q in self.host.queues() {
                q.run_completions(cpu);
            }
        }
    }

    pub fn assert_no_violations(&self) {
        let v = self.fake.memory().violations();
        assert!(v.is_empty(), "DMA violations: {v:?}");
    }
}

/// A DMA buffer in the fake's address space.
pub struct Buf {
    pub phys: u64,
    pub virt: *mut u8,
    pub len: usize,
}

impl Buf {
    pub fn new(fake: &FakeNvme, len: usize) -> Self {
        let r = fake.memory().alloc_zeroed(len, 4096).expect("test buffer");
        Self {
            phys: r.phys,
            virt: r.virt.as_ptr(),
            len,
        }
    }
    #[allow(clippy::mut_from_ref)] // test-only view of DMA memory the fake owns
    pub fn bytes(&self) -> &mut [u8] {
        // SAFETY: the region is `len` bytes, alive as long as the fake's memory; tests access
        // it only while the device does not own it.
        unsafe { std::slice::from_raw_parts_mut(self.virt, self.len) }
    }
}

/// xorshift64*.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Fills `buf` with a pattern derived from `seed`.
pub fn pattern(buf: &mut [u8], seed: u64) {
    let mut r = Rng(seed | 1);
    for chunk in buf.chunks_mut(8) {
        let v = r.next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Namespace 1: 4 MiB of 512-byte blocks; namespace 2: 4 MiB of 4096-byte blocks.
pub fn two_namespaces() -> Vec<FakeNamespace> {
    vec![
        FakeNamespace {
            nsid: 1,
            lba_size: 512,
            blocks: 8192,
        },
        FakeNamespace {
            nsid: 2,
            lba_size: 4096,
            blocks: 1024,
        },
    ]
}
