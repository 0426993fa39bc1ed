//! Real concurrency: one thread per simulated CPU submits to its namespace queues and handles
//! the interrupts aimed at it, while a device thread completes commands in random order.

mod common;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use blk::{Bio, Completion, Platform, Segment, Status};
use common::{Buf, Rng, pattern};
use nvme::blkdev::{Host, HostConfig};
use nvme::fake::{FakeCompletion, FakeConfig, FakeNamespace, FakeNvme};
use nvme::{Config, IrqMode, QueuePlan};

#[derive(Default)]
struct CountingPlatform {
    done_by_cpu: Vec<AtomicU64>,
    all: Mutex<Vec<Completion>>,
}

impl Platform for CountingPlatform {
    fn now_ns(&self) -> u64 {
        0
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, c: &Completion) {
        self.done_by_cpu[usize::from(c.submit_cpu)].fetch_add(1, Ordering::Relaxed);
        self.all.lock().unwrap().push(*c);
    }
}

#[test]
fn four_cpu_threads_and_a_device_thread() {
    const NCPUS: usize = 4;
    const ROUNDS: usize = 150;
    const BATCH: usize = 8;
    let mut cfg = FakeConfig::new(4);
    cfg.completion = FakeCompletion::Deferred;
    cfg.namespaces = vec![
        FakeNamespace {
            nsid: 1,
            lba_size: 512,
            blocks: 16384,
        },
        FakeNamespace {
            nsid: 2,
            lba_size: 4096,
            blocks: 2048,
        },
    ];
    let fake = FakeNvme::new(cfg);
    let ctrl = common::controller(
        &fake,
        Config {
            requested_io_queues: NCPUS as u16,
            ..Config::default()
        },
    )
    .unwrap();
    let plan = QueuePlan::new(NCPUS, None, ctrl.max_io_queues(), IrqMode::MsiX { vectors: 5 }).unwrap();
    let platform = Arc::new(CountingPlatform {
        done_by_cpu: (0..NCPUS).map(|_| AtomicU64::new(0)).collect(),
        all: Mutex::new(Vec::new()),
    });
    let host = Host::new(ctrl, plan, HostConfig::default(), |_, _| -> Arc<dyn Platform> {
        platform.clone()
    })
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));

    let device = {
        let fake = fake.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut rng = Rng(0xD15C);
            while !stop.load(Ordering::Relaxed) {
                let n = 1 + rng.below(6) as usize;
                if fake.complete_pending(n, |c| rng.below(c as u64) as usize) == 0 {
                    thread::yield_now();
                }
            }
        })
    };

    let workers: Vec<_> = (0..NCPUS)
        .map(|cpu| {
            let host = host.clone();
            let fake = fake.clone();
            let platform = platform.clone();
            thread::spawn(move || {
                let mut rng = Rng(0x1000 + cpu as u64);
                let plan = host.plan().clone();
                let my_vectors: Vec<u16> = (1..plan.nr_vectors())
                    .filter(|&v| plan.vector_cpu(v) == Some(cpu))
                    .map(|v| v as u16)
                    .collect();
                let wbufs: Vec<Buf> = (0..BATCH).map(|_| Buf::new(&fake, 16384)).collect();
                let rbufs: Vec<Buf> = (0..BATCH).map(|_| Buf::new(&fake, 16384)).collect();
                let mut expected_done = 0u64;
                let wait = |target: u64| {
                    let mut spins = 0u64;
                    while platform.done_by_cpu[cpu].load(Ordering::Relaxed) < target {
                        for &v in &my_vectors {
                            if fake.take_vector(v) > 0 {
                                host.handle_vector(usize::from(v), cpu);
                            }
                        }
                        spins += 1;
                        assert!(spins < 50_000_000, "cpu {cpu} waits forever");
                        thread::yield_now();
                    }
                };
                for round in 0..ROUNDS {
                    let ns = rng.below(2) as usize;
                    // Each CPU owns a disjoint 256 KiB slice of each namespace.
                    let base = cpu * 256 * 1024;
                    let mut spots = Vec::new();
                    for (i, b) in wbufs.iter().enumerate() {
                        let off = base + i * 32 * 1024 + (rng.below(4) as usize) * 4096;
                        let len = 4096 * (1 + rng.below(4) as usize);
                        pattern(&mut b.bytes()[..len], (cpu * 100_000 + round * 100 + i) as u64);
                        let seg = [Segment::new(b.phys, len as u32)];
                        let bio = Bio::write((off / 512) as u64, (len / 512) as u32, &seg, 0);
                        host.queue(ns).unwrap().submit(cpu, &bio).unwrap();
                        spots.push((off, len));
                    }
                    expected_done += BATCH as u64;
                    wait(expected_done);
                    for (i, b) in rbufs.iter().enumerate() {
                        let (off, len) = spots[i];
                        b.bytes()[..len].fill(0);
                        let seg = [Segment::new(b.phys, len as u32)];
                        let bio = Bio::read((off / 512) as u64, (len / 512) as u32, &seg, 0);
                        host.queue(ns).unwrap().submit(cpu, &bio).unwrap();
                    }
                    expected_done += BATCH as u64;
                    wait(expected_done);
                    for i in 0..BATCH {
                        let len = spots[i].1;
                        assert!(
                            rbufs[i].bytes()[..len] == wbufs[i].bytes()[..len],
                            "cpu {cpu} round {round} request {i}: data mismatch"
                        );
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    device.join().unwrap();

    let all = platform.all.lock().unwrap();
    assert_eq!(all.len(), NCPUS * ROUNDS * BATCH * 2);
    for c in all.iter() {
        assert_eq!(c.status, Status::Ok);
        assert_eq!(c.complete_cpu, c.submit_cpu, "completed on the submitter's vector CPU");
    }
    let report = host.report();
    assert_eq!(report.controller.bogus_cqes, 0);
    assert_eq!(report.refused_by_blk, 0);
    let per_cpu = (ROUNDS * BATCH * 2) as u64;
    assert_eq!(report.per_vector, vec![0, per_cpu, per_cpu, per_cpu, per_cpu]);
    assert!(fake.memory().violations().is_empty());
}
