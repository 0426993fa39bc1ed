//! Host-side cost of the driver path, fake device included: 4 KiB reads through a real
//! `blk::Queue`, `queue_rq` (SQE + PRPs + doorbell), the fake executing the command and posting
//! the entry, and `Host::handle_vector` draining and completing it; plus the PRP builder alone.
//! Prints figures; asserts nothing about speed.
//!
//! `cargo bench -p nvme`; `NVME_BENCH_REQS` (default 200000) overrides the request count.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use blk::{Bio, Completion, Platform, Segment};
use nvme::blkdev::{Host, HostConfig};
use nvme::fake::{FakeCompletion, FakeConfig, FakeNvme};
use nvme::{Config, Controller, IrqMode, QueuePlan, prp};

#[derive(Default)]
struct CountPlatform {
    ended: AtomicU64,
}

impl Platform for CountPlatform {
    fn now_ns(&self) -> u64 {
        0
    }
    fn send_completion_ipi(&self, _cpu: usize) {}
    fn raise_completion_softirq(&self, _cpu: usize) {}
    fn end_io(&self, _c: &Completion) {
        self.ended.fetch_add(1, Ordering::Relaxed);
    }
}

fn run(qd: usize, reqs: usize) -> f64 {
    let mut cfg = FakeConfig::new(1);
    cfg.completion = FakeCompletion::Deferred;
    let fake = FakeNvme::new(cfg);
    let ctrl = Controller::new(
        fake.mmio(),
        fake.dma(),
        fake.delay(),
        Config {
            requested_io_queues: 1,
            ..Config::default()
        },
    )
    .unwrap();
    let plan = QueuePlan::new(1, None, ctrl.max_io_queues(), IrqMode::MsiX { vectors: 2 }).unwrap();
    let platform = Arc::new(CountPlatform::default());
    let host = Host::new(ctrl, plan, HostConfig::default(), |_, _| -> Arc<dyn Platform> {
        platform.clone()
    })
    .unwrap();
    let bufs: Vec<u64> = (0..qd)
        .map(|_| fake.memory().alloc_zeroed(4096, 4096).unwrap().phys)
        .collect();
    let q = host.queue(0).unwrap();
    let start = Instant::now();
    let mut done = 0;
    let mut sector = 0u64;
    while done < reqs {
        for &b in &bufs {
            let seg = [Segment::new(b, 4096)];
            q.submit(0, &Bio::read(sector % 131064, 8, &seg, 0)).unwrap();
            sector += 8;
        }
        fake.complete_pending(qd, |_| 0);
        fake.take_messages();
        host.handle_vector(1, 0);
        done += qd;
    }
    let ns = start.elapsed().as_nanos() as f64 / done as f64;
    assert_eq!(platform.ended.load(Ordering::Relaxed) as usize, done);
    ns
}

fn main() {
    let reqs: usize = std::env::var("NVME_BENCH_REQS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    for qd in [1usize, 8, 32] {
        let ns = run(qd, reqs);
        println!("4 KiB read, QD{qd:<2}: {ns:>7.0} ns per request (submit, fake device, interrupt drain, end)");
    }
    let mut list = vec![0u64; 512];
    let segs: Vec<(u64, u32)> = vec![(0x1_0000_0200, 512 * 1024 - 512)];
    let n = 200_000;
    let start = Instant::now();
    let mut sink = 0u64;
    for _ in 0..n {
        let p = prp::build(&segs, 512 * 1024 - 512, 512 * 1024, &mut list, 0x9000_0000).unwrap();
        sink = sink.wrapping_add(p.prp2 ^ list[127]);
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    std::hint::black_box(sink);
    println!("PRP list for 512 KiB at offset 0x200 (128 entries): {ns:.0} ns");
}
