//! The engine's plain shape (no verify, no pacing, no detail, no ramp) runs a loop compiled
//! without those features. These tests run the same jobs once in that shape and once
//! with the detail mode on, which leaves the I/O stream and, with a clock that moves only while
//! waiting, every time stamp as they were: everything both report must be equal.

mod common;

use common::{DISK_SECTORS, FakeBackend, FakeDisk, Fault, Order, SECTOR, fio_plan_of, md0};
use workload::{
    CpuResult, DetailOptions, IoError, IoOp, JobPlan, JobShared, LatencyHistogram, LiveCounts, parse_jobs, plan_job,
    run_cpu,
};

fn plan_of(words: &str) -> JobPlan {
    let jobs = parse_jobs(words.split_ascii_whitespace()).unwrap();
    plan_job(&jobs[0], &[md0()], &[0]).unwrap()
}

/// What one run gives: the result, the published live counters and the submissions in order.
type Run = (CpuResult, LiveCounts, Vec<(IoOp, u64)>);

/// One CPU's run over a fresh disk with faults on a few LBAs, busy refusals and shuffled
/// completions; returns the result, the published live counters and the submissions in order.
fn run(plan: &JobPlan, shared: JobShared) -> Run {
    run_reaping(plan, shared, false).0
}

/// [`run`], the backend reporting successes as mask bits (`mask`) or listed; also returns
/// how many it reported as bits.
fn run_reaping(plan: &JobPlan, shared: JobShared, mask: bool) -> (Run, u64) {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
    backend.mask_successes = mask;
    // Time moves only when the engine waits: the detail mode's extra clock reads change nothing.
    backend.tick_ns = 0;
    backend.order = Order::Shuffled;
    backend.max_batch = 3;
    backend.busy_every = 7;
    let first = plan.cpus[0].first_block * u64::from(plan.sectors_per_block);
    let lba = |block: u64| first + block * u64::from(plan.sectors_per_block);
    let quarter = plan.cpus[0].blocks / 4;
    // Failures on completion (a quarter of the blocks) and on submission (an eighth) for every
    // direction, and retried I/Os on another quarter, so that a random mix meets each of them.
    for op in [IoOp::Read, IoOp::Write, IoOp::Trim] {
        backend.faults.push(Fault::FailRange {
            from: lba(0),
            to: lba(quarter),
            op,
            error: IoError::Device { status: 0x2d },
        });
        for block in quarter..quarter + quarter / 2 {
            backend.faults.push(Fault::FailOnSubmit {
                lba: lba(block),
                op,
                error: IoError::Timeout,
            });
        }
    }
    for block in 2 * quarter..3 * quarter {
        backend.faults.push(Fault::Retried {
            lba: lba(block),
            retries: 2,
            result: Ok(()),
        });
    }
    let result = run_cpu(plan, 0, &mut backend, &shared).expect("the run succeeds");
    ((result, shared.total(), backend.submit_log), backend.masked)
}

/// Asserts that two runs of `words` counted the same: per direction the I/Os, bytes, errors
/// and latencies, and the failed and retried I/Os with their records, and the runtime.
fn assert_same_counts(words: &str, a: &CpuResult, b: &CpuResult) {
    for (name, x, y) in [
        ("read", &a.read, &b.read),
        ("write", &a.write, &b.write),
        ("trim", &a.trim, &b.trim),
    ] {
        assert_eq!(
            (x.ios, x.bytes, x.errors),
            (y.ios, y.bytes, y.errors),
            "{words}: {name} counts"
        );
        assert_eq!(x.latency, y.latency, "{words}: {name} latencies");
    }
    assert_eq!(a.errors, b.errors, "{words}");
    assert_eq!(a.retried, b.retried, "{words}");
    assert_eq!(a.error_records, b.error_records, "{words}");
    assert_eq!(a.retried_records, b.retried_records, "{words}");
    assert_eq!(a.runtime_ns, b.runtime_ns, "{words}");
}

#[test]
fn a_plain_job_reports_what_the_same_job_reports_with_detail_on() {
    for words in [
        "rw=randrw rwmixread=60 bs=4k size=256k iodepth=8 seed=3",
        "rw=randread bs=4k size=128k iodepth=32 seed=5",
        "rw=write bs=8k size=256k iodepth=1",
        "rw=randtrim bs=4k size=256k iodepth=4 seed=9",
    ] {
        let plan = plan_of(&words.replace("rw=", "cpus=0 rw="));
        let (plain, plain_live, plain_log) = run(&plan, JobShared::new(&plan));
        let (shaped, shaped_live, shaped_log) = run(&plan, JobShared::with_detail(&plan, DetailOptions::default()));
        assert!(!plain_log.is_empty(), "{words}: no I/O");
        assert_eq!(plain_log, shaped_log, "{words}: the same I/Os in the same order");
        assert_same_counts(words, &plain, &shaped);
        // The plain shape sums its live counters from its statistics: the same figures.
        assert_eq!(plain_live, shaped_live, "{words}: live counters");
        assert_eq!(plain_live.ios, plain.ios(), "{words}");
        assert_eq!(
            plain_live.bytes,
            plain.read.bytes + plain.write.bytes + plain.trim.bytes,
            "{words}"
        );
        assert_eq!(plain_live.errors, plain.errors, "{words}");
        assert!(plain.detail.is_none() && shaped.detail.is_some());
    }
}

#[test]
fn a_plain_job_with_variable_block_sizes_reports_what_it_reports_with_detail_on() {
    // A size drawn per I/O (the `Sized` source): every slot records its own length.
    let plan = fio_plan_of(
        "[r]\nrw=randrw\nbssplit=4k/25:16k/75\nsize=2m\niodepth=8\nioengine=libaio\ncpus_allowed=0\n",
        &[0],
    );
    let (plain, plain_live, plain_log) = run(&plan, JobShared::new(&plan));
    let (shaped, shaped_live, shaped_log) = run(&plan, JobShared::with_detail(&plan, DetailOptions::default()));
    assert_eq!(plain_log, shaped_log);
    for (a, b) in [(&plain.read, &shaped.read), (&plain.write, &shaped.write)] {
        assert_eq!((a.ios, a.bytes, a.errors), (b.ios, b.bytes, b.errors));
        assert_eq!(a.latency, b.latency);
    }
    assert_eq!(plain_live, shaped_live);
    assert!(plain.read.bytes + plain.write.bytes > 0);
    assert!(
        plain.write.bytes % 4096 == 0 && plain.write.bytes != plain.write.ios * 4096,
        "sizes other than 4k moved"
    );
}

#[test]
fn the_faults_of_the_comparison_happen() {
    // The comparison above means something only if its faults, refusals and retries happen.
    let plan = plan_of("cpus=0 rw=randrw rwmixread=60 bs=4k size=256k iodepth=8 seed=3");
    let (plain, live, _) = run(&plan, JobShared::new(&plan));
    assert!(plain.read.errors > 0, "a read failed");
    assert!(plain.write.errors > 0, "a write failed");
    let records = &plain.error_records;
    assert!(
        records.iter().any(|r| r.result == Err(IoError::Timeout)),
        "one on submission"
    );
    assert!(
        records
            .iter()
            .any(|r| r.result == Err(IoError::Device { status: 0x2d })),
        "one on completion"
    );
    assert!(plain.retried > 0, "an I/O was retried");
    assert_eq!(live.errors, plain.read.errors + plain.write.errors);
}

#[test]
fn successes_reported_as_a_mask_count_as_the_same_successes_listed() {
    // `IoBackend::poll_reaped`: the kernel's backend hands first-attempt successes over as
    // bits of a mask; the engine must count them exactly as listed completions, in
    // the plain shape and in the general one (detail, verify), with failures and retries
    // listed beside them in the same reaps.
    for words in [
        "rw=randrw rwmixread=60 bs=4k size=256k iodepth=8 seed=3",
        "rw=randread bs=4k size=128k iodepth=32 seed=5",
        "rw=write bs=8k size=256k iodepth=1",
        "rw=randtrim bs=4k size=256k iodepth=4 seed=9",
        "rw=randrw bs=4k size=256k iodepth=8 verify=crc32c seed=11",
    ] {
        let plan = plan_of(&words.replace("rw=", "cpus=0 rw="));
        for detail in [false, true] {
            let shared = || {
                if detail {
                    JobShared::with_detail(&plan, DetailOptions::default())
                } else {
                    JobShared::new(&plan)
                }
            };
            let (listed, _) = run_reaping(&plan, shared(), false);
            let ((masked, masked_live, masked_log), bits) = run_reaping(&plan, shared(), true);
            assert!(bits > 0, "{words}: successes went as mask bits");
            assert_eq!(listed.2, masked_log, "{words}: the same I/Os in the same order");
            assert_eq!(listed.1, masked_live, "{words}: live counters");
            let (a, b) = (&listed.0, &masked);
            assert_same_counts(words, a, b);
            assert_eq!(a.verify, b.verify, "{words}: verify");
            if detail {
                let (x, y) = (a.detail.as_ref().unwrap(), b.detail.as_ref().unwrap());
                assert_eq!(x.completions_per_reap, y.completions_per_reap, "{words}: reap sizes");
            }
        }
    }
}

#[test]
fn latencies_counted_in_runs_are_each_io_s_latency() {
    // Above iodepth 1 the engine records a reap's successes of one direction and one latency
    // together (`LatencyHistogram::record_n`). With a clock that moves only while the
    // engine waits, an I/O's latency is exactly its completion clock minus its submission
    // clock, which the fake logs: recorded one by one, they must give the same histograms.
    for words in [
        "rw=randrw rwmixread=50 bs=4k size=512k iodepth=16 seed=21",
        "rw=randread bs=4k size=256k iodepth=32 seed=22",
        "rw=randrw rwmixread=70 bs=4k size=256k iodepth=1 seed=23",
    ] {
        let plan = plan_of(&words.replace("rw=", "cpus=0 rw="));
        for detail in [false, true] {
            let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
            let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
            backend.tick_ns = 0;
            // A few nanoseconds of jitter: runs of equal latencies, broken now and then.
            backend.jitter_ns = 3;
            backend.order = Order::Shuffled;
            backend.max_batch = 5;
            backend.busy_every = 11;
            backend.mask_successes = true;
            backend.faults.push(Fault::FailRange {
                from: 0,
                to: 64,
                op: IoOp::Read,
                error: IoError::Device { status: 2 },
            });
            let shared = if detail {
                JobShared::with_detail(&plan, DetailOptions::default())
            } else {
                JobShared::new(&plan)
            };
            let result = run_cpu(&plan, 0, &mut backend, &shared).expect("the run succeeds");
            let (mut read, mut write) = (LatencyHistogram::new(), LatencyHistogram::new());
            for &(op, latency) in &backend.latency_log {
                match op {
                    IoOp::Read => read.record(latency),
                    _ => write.record(latency),
                }
            }
            assert!(read.samples() > 0, "{words}: reads succeeded");
            assert!(result.read.errors > 0, "{words}: and some failed");
            assert_eq!(result.read.latency, read, "{words} (detail {detail}): read latencies");
            assert_eq!(
                result.write.latency, write,
                "{words} (detail {detail}): write latencies"
            );
            // Counted in the same runs: the I/Os and their bytes (4k each).
            assert_eq!(result.read.ios - result.read.errors, read.samples(), "{words}");
            assert_eq!(result.read.bytes, read.samples() * 4096, "{words}");
            assert_eq!(result.write.bytes, write.samples() * 4096, "{words}");
            let distinct: std::collections::BTreeSet<u64> = backend.latency_log.iter().map(|l| l.1).collect();
            assert!(distinct.len() > 1, "{words}: latencies differ between runs");
        }
    }
}
