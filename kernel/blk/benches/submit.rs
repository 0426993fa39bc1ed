//! Submit-to-completion cost with the null driver, per completion policy and quiesce check,
//! for 1..=host-cores threads (each thread plays one CPU).
//!
//! Shape (MegaRAID-like): one host-wide shared tag set, one hardware queue per CPU, the
//! "interrupt" of hardware queue h delivered to CPU (h + 1) % n, so with two or more CPUs every
//! completion arrives on a CPU other than the submitter (what the Remote policy's IPIs are
//! for). The queue is rerun after every completion, as SCSI does; that is where the locked
//! quiesce re-check takes its lock. Under `Poll` each CPU polls its own hardware queue.
//!
//! `cargo bench -p blk`; `BLK_BENCH_REQS` (requests per thread, default 100000),
//! `BLK_BENCH_MAX_THREADS` and `BLK_BENCH_POLICIES` (e.g. `Irq,Poll`) override the defaults.

use blk::{Bio, BlkError, Completion, CompletionPolicy, Platform, Queue, QuiesceCheck};
use nullblk::{NullConfig, NullDriver, NullMode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

/// The kernel's clock (`kernel/src/arch/time.rs`): TSC ticks times a fixed-point ns-per-tick
/// factor, here calibrated against `Instant`. A request's issue reads the clock for its
/// deadline, and `Instant` (a `clock_gettime` call) would cost that read several times what it
/// costs in the kernel.
struct TscClock {
    origin: u64,
    ns_per_tick_fp: u64,
}

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64 (user mode may read the TSC on the hosts
    // this benchmark runs on).
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

impl TscClock {
    #[cfg(target_arch = "x86_64")]
    fn calibrate() -> Self {
        let (t0, c0) = (Instant::now(), rdtsc());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (ns, ticks) = (t0.elapsed().as_nanos() as u64, rdtsc() - c0);
        Self {
            origin: c0,
            ns_per_tick_fp: ((u128::from(ns) << 32) / u128::from(ticks.max(1))) as u64,
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn now_ns(&self) -> u64 {
        let ticks = rdtsc().saturating_sub(self.origin);
        ((u128::from(ticks) * u128::from(self.ns_per_tick_fp)) >> 32) as u64
    }
}

struct BenchPlatform {
    #[cfg(target_arch = "x86_64")]
    clock: TscClock,
    #[cfg(not(target_arch = "x86_64"))]
    start: Instant,
    kick: Vec<Padded<AtomicBool>>,
    /// Requests finished, by submitting CPU.
    ended: Vec<Padded<AtomicU64>>,
}

impl Platform for BenchPlatform {
    fn now_ns(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        return self.clock.now_ns();
        #[cfg(not(target_arch = "x86_64"))]
        return self.start.elapsed().as_nanos() as u64;
    }
    fn send_completion_ipi(&self, cpu: usize) {
        self.kick[cpu].0.store(true, Ordering::Release);
    }
    fn raise_completion_softirq(&self, cpu: usize) {
        self.kick[cpu].0.store(true, Ordering::Release);
    }
    fn end_io(&self, c: &Completion) {
        self.ended[usize::from(c.submit_cpu)].0.fetch_add(1, Ordering::Release);
    }
}

const DEPTH_PER_CPU: u32 = 32;
const BATCH: u64 = 16;

/// CPU time this thread has used, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Result {
    ns_per_req: f64,
    /// CPU time per request, summed over threads: what the code costs, whatever else runs.
    cpu_ns_per_req: f64,
    ipis_per_req: f64,
    locks_per_req: f64,
}

fn run(threads: usize, policy: CompletionPolicy, check: QuiesceCheck, reqs: u64) -> Result {
    let depth = DEPTH_PER_CPU * threads as u32;
    let null = NullConfig::new(1 << 30, NullMode::Deferred);
    let mut cfg = null.queue_config(threads, threads, depth);
    cfg.shared_tags = true;
    cfg.completion = policy;
    cfg.quiesce_check = check;
    cfg.run_queue_on_completion = true;
    let platform = Arc::new(BenchPlatform {
        #[cfg(target_arch = "x86_64")]
        clock: TscClock::calibrate(),
        #[cfg(not(target_arch = "x86_64"))]
        start: Instant::now(),
        kick: (0..threads).map(|_| Padded::default()).collect(),
        ended: (0..threads).map(|_| Padded::default()).collect(),
    });
    let driver = NullDriver::new(null, threads, depth, true);
    let queue = Arc::new(Queue::new(cfg, driver, platform.clone()).expect("bench queue"));
    let go = Arc::new(AtomicBool::new(false));
    let total = reqs * threads as u64;

    let handles: Vec<_> = (0..threads)
        .map(|cpu| {
            let (queue, platform, go) = (queue.clone(), platform.clone(), go.clone());
            std::thread::spawn(move || {
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                let cpu0 = thread_cpu_ns();
                let own_hwq = queue.cpu_to_hwq(cpu).unwrap();
                // The hardware queue whose interrupt vector targets this CPU.
                let irq_hwq = (cpu + threads - 1) % threads;
                let mut submitted = 0u64;
                loop {
                    let ended = platform.ended[cpu].0.load(Ordering::Acquire);
                    while submitted < reqs && submitted - ended < BATCH {
                        let bio = Bio::read((submitted * 8) % (1 << 29), 8, &[], submitted);
                        match queue.submit(cpu, &bio) {
                            Ok(_) => submitted += 1,
                            Err(BlkError::TagsExhausted { .. }) => break,
                            Err(e) => panic!("submit: {e}"),
                        }
                    }
                    if policy == CompletionPolicy::Poll {
                        queue.poll(cpu, own_hwq).unwrap();
                    } else {
                        queue.driver().fire_interrupt(&queue, cpu, irq_hwq);
                    }
                    if platform.kick[cpu].0.swap(false, Ordering::AcqRel) {
                        queue.run_completions(cpu);
                    }
                    let all: u64 = platform.ended.iter().map(|e| e.0.load(Ordering::Relaxed)).sum();
                    if all == total {
                        break;
                    }
                }
                thread_cpu_ns() - cpu0
            })
        })
        .collect();
    let t0 = Instant::now();
    go.store(true, Ordering::Release);
    let cpu_ns: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let elapsed = t0.elapsed().as_nanos() as f64;
    let c = queue.counters();
    assert_eq!(c.completed, total);
    Result {
        // Wall time per request per CPU: constant if the design scales perfectly.
        ns_per_req: elapsed / reqs as f64,
        cpu_ns_per_req: cpu_ns as f64 / total as f64,
        ipis_per_req: c.ipis as f64 / total as f64,
        locks_per_req: c.hot_path_locks as f64 / total as f64,
    }
}

fn median(mut v: Vec<Result>) -> Result {
    v.sort_by(|a, b| a.cpu_ns_per_req.total_cmp(&b.cpu_ns_per_req));
    v.swap_remove(v.len() / 2)
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs benches with `--bench`-less args; keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max_threads = env("BLK_BENCH_MAX_THREADS", cores as u64) as usize;
    let reqs = if quick { 2_000 } else { env("BLK_BENCH_REQS", 100_000) };
    // Warm up caches, the allocator and the CPU clock.
    run(1, CompletionPolicy::Irq, QuiesceCheck::LockFree, reqs / 4);
    println!("blk null-driver submit-to-completion, {reqs} requests per thread, host cores: {cores}");
    println!(
        "{:>7}  {:<7}  {:>15}  {:>13}  {:>15}  {:>13}  {:>8}  {:>9}  {:>14}",
        "threads",
        "policy",
        "lock-free ns/rq",
        "locked ns/rq",
        "lock-free cpu",
        "locked cpu",
        "locked/lf",
        "IPIs/rq",
        "locks/rq (lkd)"
    );
    // `BLK_BENCH_POLICIES=Irq,Poll` runs only those policies (for profiling one path).
    let only = std::env::var("BLK_BENCH_POLICIES").ok();
    for threads in 1..=max_threads.max(1) {
        for policy in CompletionPolicy::ALL {
            if only
                .as_deref()
                .is_some_and(|o| !o.split(',').any(|p| p == format!("{policy:?}")))
            {
                continue;
            }
            // Median of three, interleaving the two variants so drift hits both alike.
            let mut lfs = Vec::new();
            let mut lks = Vec::new();
            for _ in 0..3 {
                lfs.push(run(threads, policy, QuiesceCheck::LockFree, reqs));
                lks.push(run(threads, policy, QuiesceCheck::Locked, reqs));
            }
            let (lf, lk) = (median(lfs), median(lks));
            assert_eq!(lf.locks_per_req, 0.0, "lock-free configuration took a lock");
            println!(
                "{:>7}  {:<7}  {:>15.1}  {:>13.1}  {:>15.1}  {:>13.1}  {:>8.2}x  {:>9.3}  {:>14.2}",
                threads,
                format!("{policy:?}"),
                lf.ns_per_req,
                lk.ns_per_req,
                lf.cpu_ns_per_req,
                lk.cpu_ns_per_req,
                lk.cpu_ns_per_req / lf.cpu_ns_per_req,
                lf.ipis_per_req,
                lk.locks_per_req
            );
        }
    }
}
