//! The engine end to end against the fake backend: verification catches corruption, errors land on
//! exactly the affected I/Os, counts balance, time and size bounds hold, and misbehaving backends
//! give errors rather than hangs or panics.

mod common;

use common::{DISK_SECTORS, FakeBackend, FakeDisk, Fault, Order, SECTOR, md0};
use workload::{
    CpuPhase, CpuResult, IoError, IoGenerator, IoOp, JobPlan, JobReport, JobShared, MismatchField, VerifyResult,
    VerifyScheme, WorkloadError, parse_jobs, plan_job, run_cpu, split_successes,
};

fn plan_of(words: &str, online: &[u32]) -> JobPlan {
    let jobs = parse_jobs(words.split_ascii_whitespace()).unwrap();
    plan_job(&jobs[0], &[md0()], online).unwrap()
}

struct Run {
    results: Vec<Result<CpuResult, WorkloadError>>,
    backends: Vec<FakeBackend>,
    shared: JobShared,
}

impl Run {
    fn ok(&self) -> Vec<CpuResult> {
        self.results
            .iter()
            .map(|r| r.clone().expect("CPU run failed"))
            .collect()
    }
}

/// Runs every CPU of `plan` on its own thread with its own fake backend over `disk`.
fn run_job(plan: &JobPlan, disk: &FakeDisk, configure: impl Fn(usize, &mut FakeBackend) + Sync) -> Run {
    let shared = JobShared::new(plan);
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let shared = &shared;
                let configure = &configure;
                scope.spawn(move || {
                    let mut backend = FakeBackend::new(disk, plan.iodepth as usize, plan.bs() as usize);
                    configure(index, &mut backend);
                    let result = run_cpu(plan, index, &mut backend, shared);
                    (result, backend)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (results, backends) = outcomes.into_iter().unzip();
    Run {
        results,
        backends,
        shared,
    }
}

/// Counts that must balance for every CPU of a finished run.
fn assert_balanced(plan: &JobPlan, run: &Run) {
    for (result, backend) in run.ok().iter().zip(&run.backends) {
        let accepted = backend.submits - backend.busy_returned;
        assert!(
            backend.completions <= accepted,
            "more completions than accepted submissions"
        );
        // Every accepted submission is one completed I/O in the engine's counts (nothing is left in
        // flight, and a submission that failed at once counts as a failed I/O).
        assert_eq!(accepted, result.ios() + result.verify.pass_reads, "cpu{}", result.cpu);
        let bs = u64::from(plan.bs());
        assert_eq!(result.read.bytes, (result.read.ios - result.read.errors) * bs);
        assert_eq!(result.write.bytes, (result.write.ios - result.write.errors) * bs);
        assert_eq!(result.read.latency.samples(), result.read.ios - result.read.errors);
        assert_eq!(result.write.latency.samples(), result.write.ios - result.write.errors);
        if plan.spec.verify.is_enabled() {
            let reads = result.read.ios + result.verify.pass_reads;
            let v = &result.verify;
            assert_eq!(
                v.checked + v.unchecked + v.mismatches,
                reads,
                "cpu{}: every read is accounted for",
                result.cpu
            );
        }
        assert!(backend.max_in_flight <= plan.iodepth as usize);
    }
    assert!(run.shared.all_finished());
    let live = run.shared.total();
    let results = run.ok();
    assert_eq!(
        live.ios,
        results.iter().map(|r| r.ios() + r.verify.pass_reads).sum::<u64>()
    );
    assert_eq!(live.errors, results.iter().map(|r| r.errors).sum::<u64>());
}

fn report_of(plan: &JobPlan, run: &Run) -> JobReport {
    JobReport::new(plan, &run.ok()).unwrap()
}

#[test]
fn clean_random_mix_with_verify_passes_in_any_completion_order() {
    for (order, verify) in [
        (Order::Fifo, "crc32c"),
        (Order::Lifo, "pattern"),
        (Order::Shuffled, "crc32c"),
    ] {
        let plan = plan_of(
            &format!("rw=randrw rwmixread=60 bs=4k size=1m iodepth=8 verify={verify}"),
            &[0, 1, 2],
        );
        assert_eq!(plan.verify, VerifyScheme::Tracked);
        let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
        let run = run_job(&plan, &disk, |_, b| {
            b.order = order;
            b.jitter_ns = 50_000;
        });
        assert_balanced(&plan, &run);
        let report = report_of(&plan, &run);
        // Size-bound: one I/O per block of the region in all.
        assert_eq!(report.total.ios, 256, "{order:?}");
        assert_eq!(report.verify.result, VerifyResult::Pass, "{order:?}");
        assert_eq!(report.verify.mismatches, 0);
        assert!(report.verify.checked > 0);
        // The verify pass read back every block written.
        let results = run.ok();
        for result in &results {
            assert!(result.verify.pass_reads > 0);
        }
        assert!(report.passed());
        assert!(
            run.backends.iter().all(|b| b.max_in_flight == 8),
            "iodepth must be reached"
        );
    }
}

#[test]
fn verify_catches_silent_corruption_and_reports_the_block() {
    for (verify, expected_field) in [
        ("crc32c", MismatchField::Checksum),
        ("pattern", MismatchField::Data { byte_offset: 1000 }),
    ] {
        let plan = plan_of(
            &format!("rw=write bs=4k size=256k iodepth=4 verify={verify} cpus=0"),
            &[0],
        );
        assert_eq!(plan.verify, VerifyScheme::SinglePass);
        let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
        let bad_lba = 8 * 17;
        let run = run_job(&plan, &disk, |_, b| {
            b.faults.push(Fault::CorruptAfterWrite {
                lba: bad_lba,
                byte_offset: 1000,
            })
        });
        assert_balanced(&plan, &run);
        let report = report_of(&plan, &run);
        assert_eq!(report.verify.result, VerifyResult::Fail);
        assert_eq!(report.verify.mismatches, 1, "exactly the corrupted block mismatches");
        assert_eq!(report.verify.checked, 63);
        let (cpu, mismatch) = report.verify.first_mismatch.unwrap();
        assert_eq!(cpu, 0);
        assert_eq!(mismatch.lba, bad_lba);
        assert_eq!(mismatch.field, expected_field);
        assert_ne!(mismatch.expected, mismatch.found);
        assert_eq!(report.errors, 0, "a mismatch is not an I/O error");
        assert!(!report.passed());
        let mut text = String::new();
        report.write_human(&mut text).unwrap();
        assert!(
            text.contains(&format!("FIRST MISMATCH (cpu0): verify mismatch at LBA {bad_lba}")),
            "{text}"
        );
        assert!(text.contains("result: FAIL"), "{text}");
    }
}

#[test]
fn lost_and_misdirected_io_are_caught_by_header_fields() {
    // A lost overwrite leaves the previous generation on disk.
    let plan = plan_of(
        "rw=write bs=4k size=64k runtime=5ms iodepth=2 verify=crc32c cpus=0",
        &[0],
    );
    assert_eq!(plan.verify, VerifyScheme::Tracked);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |_, b| {
        b.faults.push(Fault::LoseLaterWrites { lba: 8 * 3 })
    });
    let report = report_of(&plan, &run);
    let (_, mismatch) = report.verify.first_mismatch.expect("a lost write must be detected");
    assert_eq!(
        (mismatch.lba, mismatch.field, mismatch.found),
        (24, MismatchField::Generation, 1)
    );
    assert!(mismatch.expected > 1);

    // A read served from the wrong place has the wrong LBA in its header.
    let plan2 = plan_of("rw=write bs=4k size=64k verify=pattern cpus=0", &[0]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan2, &disk, |_, b| {
        b.faults.push(Fault::MisdirectRead { lba: 40, from_lba: 48 })
    });
    let report = report_of(&plan2, &run);
    let (_, mismatch) = report.verify.first_mismatch.unwrap();
    assert_eq!(
        (mismatch.lba, mismatch.field, mismatch.expected, mismatch.found),
        (40, MismatchField::Lba, 40, 48)
    );
}

/// How many I/Os of `op` the generator of CPU `index` sends to `block` (size-bound jobs).
fn generator_hits(plan: &JobPlan, index: usize, op: IoOp, block: u64) -> u64 {
    let mut generator = IoGenerator::new(plan, index);
    std::iter::from_fn(|| generator.next_io())
        .filter(|&(o, b)| o == op && b == block)
        .count() as u64
}

#[test]
fn errors_are_counted_on_exactly_the_affected_ios() {
    let plan = plan_of(
        "rw=randrw rwmixread=50 bs=4k size=512k iodepth=6 verify=crc32c seed=7",
        &[0, 1],
    );
    // Pick blocks that the generators actually hit, one per CPU.
    let slice0 = plan.cpus[0];
    let slice1 = plan.cpus[1];
    let (block0, block1) = (3, 5);
    let lba = |slice: workload::CpuSlice, block: u64| (slice.first_block + block) * 8;
    let write_failures = generator_hits(&plan, 0, IoOp::Write, block0);
    let read_failures = generator_hits(&plan, 1, IoOp::Read, block1);
    assert!(
        write_failures > 0 && read_failures > 0,
        "pick blocks the generators hit"
    );
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |index, b| {
        b.order = Order::Shuffled;
        if index == 0 {
            b.faults.push(Fault::FailOnCompletion {
                lba: lba(slice0, block0),
                op: IoOp::Write,
                error: IoError::Device { status: 0x2d },
            });
        } else {
            b.faults.push(Fault::FailOnSubmit {
                lba: lba(slice1, block1),
                op: IoOp::Read,
                error: IoError::Timeout,
            });
        }
    });
    assert_balanced(&plan, &run);
    let results = run.ok();
    assert_eq!(results[0].write.errors, write_failures);
    assert_eq!(results[0].read.errors, 0);
    assert_eq!(results[1].read.errors, read_failures);
    assert_eq!(results[1].write.errors, 0);
    // The verify pass does not re-read a block whose last write failed, so CPU 0 has no extra errors;
    // CPU 1's block was written fine, so the verify pass reads it once more, and that read fails too.
    assert_eq!(results[0].errors, write_failures);
    assert_eq!(
        results[0].verify.skipped, 1,
        "the failed block is skipped by the verify pass"
    );
    let pass_errors = results[1].errors - results[1].read.errors - results[1].write.errors;
    assert_eq!(
        pass_errors,
        u64::from(generator_hits(&plan, 1, IoOp::Write, block1) > 0)
    );
    for record in &results[0].error_records {
        assert_eq!(
            (record.op, record.lba, record.result),
            (IoOp::Write, lba(slice0, block0), Err(IoError::Device { status: 0x2d }))
        );
    }
    for record in &results[1].error_records {
        assert_eq!(
            (record.op, record.lba, record.result),
            (IoOp::Read, lba(slice1, block1), Err(IoError::Timeout))
        );
    }
    let report = report_of(&plan, &run);
    assert_eq!(report.errors, results[0].errors + results[1].errors);
    assert_eq!(report.verify.mismatches, 0, "failed I/Os must not look like corruption");
    assert!(!report.passed(), "I/O errors fail the job");
    // The job carried on after the errors: every planned I/O completed.
    assert_eq!(report.total.ios, 128);
}

#[test]
fn busy_backends_are_retried_until_every_io_is_done() {
    let plan = plan_of("rw=randwrite bs=4k size=256k iodepth=16 verify=pattern cpus=0", &[0]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |_, b| b.busy_every = 3);
    assert_balanced(&plan, &run);
    assert!(run.backends[0].busy_returned > 10);
    let report = report_of(&plan, &run);
    assert_eq!(report.total.ios, 64);
    assert_eq!(report.errors, 0);
    assert_eq!(report.verify.result, VerifyResult::Pass);
}

#[test]
fn small_slices_never_have_a_block_in_flight_twice() {
    // Two blocks per CPU at iodepth 8: the tracker must serialise I/Os to the same block.
    let plan = plan_of("rw=randrw bs=4k size=16k iodepth=8 runtime=2ms verify=crc32c", &[0, 1]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |_, b| b.order = Order::Shuffled);
    assert_balanced(&plan, &run);
    assert!(run.backends.iter().all(|b| b.max_in_flight <= 2));
    assert_eq!(report_of(&plan, &run).verify.result, VerifyResult::Pass);
}

#[test]
fn time_based_jobs_stop_at_runtime_and_rates_match_counts() {
    let plan = plan_of("rw=randread bs=4k iodepth=4 runtime=50ms", &[0, 1]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |_, b| b.latency_ns = 100_000);
    assert_balanced(&plan, &run);
    let report = report_of(&plan, &run);
    let runtime = 50_000_000;
    assert!(report.runtime_ns >= runtime, "{}", report.runtime_ns);
    // Draining takes at most one latency (plus clock ticks).
    assert!(report.runtime_ns < runtime + 200_000, "{}", report.runtime_ns);
    // 4 in flight at 100 us each: about 40k IOPS per CPU.
    for cpu in &report.per_cpu {
        assert!(
            (38_000..=41_000).contains(&cpu.iops),
            "cpu{} {} IOPS",
            cpu.cpu,
            cpu.iops
        );
    }
    // completed I/Os = IOPS x runtime, within rounding.
    let predicted = u128::from(report.total.iops) * u128::from(report.runtime_ns) / 1_000_000_000;
    assert!(
        predicted.abs_diff(u128::from(report.total.ios)) <= 1,
        "{predicted} vs {}",
        report.total.ios
    );
    assert!(report.total.bw_bytes.abs_diff(report.total.iops * 4096) <= 4096);
    let latency = report.total.latency;
    assert!(
        latency.min >= 100_000 && latency.p50 >= 100_000 && latency.max < 110_000,
        "{latency:?}"
    );
}

#[test]
fn write_then_verify_in_a_later_boot() {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    // "Boot 1": write the region once with two CPUs.
    let writer = plan_of("rw=write bs=8k offset=64k size=2m iodepth=8 verify=crc32c", &[0, 1]);
    let run1 = run_job(&writer, &disk, |_, _| {});
    assert_balanced(&writer, &run1);
    assert_eq!(report_of(&writer, &run1).verify.result, VerifyResult::Pass);

    // "Boot 2": new backends, another CPU count and pattern, same seed: everything checks.
    let reader = plan_of(
        "rw=randread bs=8k offset=64k size=2m iodepth=3 verify=crc32c",
        &[0, 1, 2],
    );
    assert_eq!(
        reader.verify,
        VerifyScheme::ReadOnly(workload::ExpectedGeneration::Exact(1))
    );
    let run2 = run_job(&reader, &disk, |_, b| b.order = Order::Shuffled);
    assert_balanced(&reader, &run2);
    let r2 = report_of(&reader, &run2);
    assert_eq!(r2.verify.result, VerifyResult::Pass);
    assert_eq!(r2.verify.checked, 256);
    assert_eq!(r2.total.ios, 256);

    // The wrong seed, the wrong generation, or the wrong mode fail on the first block read.
    for (words, field) in [
        ("verify=crc32c seed=1", MismatchField::Seed),
        ("verify=crc32c verify_generation=2", MismatchField::Generation),
        ("verify=pattern", MismatchField::Kind),
    ] {
        let bad = plan_of(
            &format!("rw=read bs=8k offset=64k size=2m iodepth=3 cpus=0 {words}"),
            &[0],
        );
        let r = report_of(&bad, &run_job(&bad, &disk, |_, _| {}));
        assert_eq!(r.verify.result, VerifyResult::Fail, "{words}");
        assert_eq!(r.verify.mismatches, 256, "{words}");
        assert_eq!(r.verify.first_mismatch.unwrap().1.field, field, "{words}");
        assert_eq!(
            r.verify.first_mismatch.unwrap().1.lba,
            128,
            "{words}: first block of the region"
        );
    }

    // Reading a region that was never written fails on the magic.
    let blank = plan_of("rw=read bs=8k offset=4m size=64k verify=crc32c cpus=0", &[0]);
    let r = report_of(&blank, &run_job(&blank, &disk, |_, _| {}));
    assert_eq!(r.verify.first_mismatch.unwrap().1.field, MismatchField::Magic);
}

#[test]
fn stop_on_error_stops_every_cpu_and_skips_the_verify_pass() {
    let plan = plan_of(
        "rw=randwrite bs=4k size=2m iodepth=4 verify=crc32c stop_on_error=1",
        &[0, 1],
    );
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    // Fail every write in CPU 0's slice at its first block hit.
    let first_block = {
        let mut generator = IoGenerator::new(&plan, 0);
        generator.next_io().unwrap().1
    };
    let run = run_job(&plan, &disk, |index, b| {
        if index == 0 {
            b.faults.push(Fault::FailOnCompletion {
                lba: first_block * 8,
                op: IoOp::Write,
                error: IoError::Aborted,
            });
        }
    });
    assert_balanced(&plan, &run);
    let report = report_of(&plan, &run);
    assert!(report.stopped_early);
    assert!(report.verify.pass_skipped);
    assert!(
        report.total.ios < 512,
        "the job must stop before finishing: {}",
        report.total.ios
    );
    assert_eq!(report.errors, 1);
    assert!(!report.passed());
}

#[test]
fn external_stop_request_drains_and_returns() {
    let plan = plan_of("rw=randread bs=4k iodepth=4 runtime=60s cpus=0", &[0]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(&plan);
    let mut backend = FakeBackend::new(&disk, 4, 4096);
    shared.request_stop();
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    assert!(result.stopped_early);
    assert!(result.ios() <= 4);
    assert_eq!(shared.cpu(0).unwrap().phase(), CpuPhase::Finished);
}

#[test]
fn a_backend_that_never_completes_times_out() {
    let plan = plan_of("rw=read bs=4k size=64k iodepth=2 io_timeout=10ms cpus=0", &[0]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |_, b| b.hang = true);
    match &run.results[0] {
        Err(WorkloadError::Stalled {
            cpu: 0,
            in_flight: 2,
            waited_ns,
            limit_ns: 10_000_000,
        }) => assert!(*waited_ns > 10_000_000),
        other => panic!("expected a stall, got {other:?}"),
    }
    assert!(run.shared.all_finished(), "a failed CPU still reports itself finished");
}

#[test]
fn bogus_completions_and_short_buffers_are_errors() {
    let plan = plan_of("rw=read bs=4k size=64k iodepth=2 cpus=0", &[0]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run1 = run_job(&plan, &disk, |_, b| b.bogus_slot_on_poll = Some((1, 7)));
    assert!(
        matches!(
            run1.results[0],
            Err(WorkloadError::BogusCompletion {
                slot: 7,
                reason: "is out of range",
                ..
            })
        ),
        "{:?}",
        run1.results[0]
    );
    // One block, two slots: only slot 0 is ever used, so a completion for slot 1 is not in flight.
    let one_io = plan_of("rw=read bs=4k size=4k iodepth=2 cpus=0", &[0]);
    let run2 = run_job(&one_io, &disk, |_, b| b.bogus_slot_on_poll = Some((1, 1)));
    assert!(
        matches!(
            run2.results[0],
            Err(WorkloadError::BogusCompletion {
                slot: 1,
                reason: "is not in flight",
                ..
            })
        ),
        "{:?}",
        run2.results[0]
    );
    let shared = JobShared::new(&plan);
    let mut short = FakeBackend::new(&disk, 2, 1024);
    assert_eq!(
        run_cpu(&plan, 0, &mut short, &shared).unwrap_err(),
        WorkloadError::BufferTooSmall {
            slot: 0,
            len: 1024,
            needed: 4096
        }
    );
    assert_eq!(
        run_cpu(&plan, 3, &mut short, &shared).unwrap_err(),
        WorkloadError::CpuIndexOutOfRange { index: 3, cpus: 1 }
    );
}

#[test]
fn iodepth_cap_is_reported_and_obeyed() {
    let plan = plan_of("rw=randread bs=4k size=1m iodepth=500 cpus=0", &[0]);
    assert_eq!(plan.iodepth, 64);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |_, _| {});
    assert_eq!(run.backends[0].max_in_flight, 64);
    let report = report_of(&plan, &run);
    let mut text = String::new();
    report.write_human(&mut text).unwrap();
    assert!(text.contains("iodepth=64 (asked 500)"), "{text}");
    assert!(
        text.contains("warning: job \"job0\": iodepth=500 is above the limit of \"md0\"; capped to 64"),
        "{text}"
    );
}

#[test]
fn periodic_hook_runs_about_every_100ms() {
    let plan = plan_of("rw=randread bs=4k iodepth=2 runtime=1s cpus=0", &[0]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |_, b| b.latency_ns = 1_000_000);
    let calls = &run.backends[0].periodic_calls;
    assert!((10..=12).contains(&calls.len()), "{} calls in a 1 s job", calls.len());
    for pair in calls.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((100_000_000..102_000_000).contains(&gap), "gap {gap}");
    }
}

#[test]
fn a_single_pass_write_that_failed_is_skipped_by_the_verify_pass_not_a_mismatch() {
    // rw=write writes each block once (single-pass verify). The write of LBA 24 fails and its
    // data never reaches the disk (a timed-out or aborted write): the verify pass must not
    // expect it, or the disk's old contents would be reported as corruption: it skips the block,
    // as a tracked job skips a block whose last write failed.
    let plan = plan_of("rw=write bs=4k size=64k iodepth=4 verify=crc32c cpus=0", &[0]);
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let run = run_job(&plan, &disk, |_, b| {
        b.faults.push(Fault::FailOnCompletion {
            lba: 24,
            op: IoOp::Write,
            error: IoError::Timeout,
        })
    });
    assert_balanced(&plan, &run);
    let results = run.ok();
    assert_eq!((results[0].write.errors, results[0].errors), (1, 1));
    let verify = results[0].verify;
    assert_eq!(
        (
            verify.checked,
            verify.unchecked,
            verify.skipped,
            verify.mismatches,
            verify.pass_reads
        ),
        (15, 0, 1, 0, 15)
    );
    let report = report_of(&plan, &run);
    assert_eq!(
        report.verify.mismatches, 0,
        "a failed write must not look like corruption"
    );
    assert!(report.verify.first_mismatch.is_none());
    assert!(!report.passed(), "the I/O error fails the job");
}

#[test]
fn split_successes_hands_out_the_lowest_slots_first() {
    assert_eq!(split_successes(0, 8), (0, 0));
    assert_eq!(split_successes(0b1011_0110, 0), (0, 0b1011_0110));
    assert_eq!(split_successes(0b1011_0110, 2), (0b0000_0110, 0b1011_0000));
    assert_eq!(split_successes(0b1011_0110, 5), (0b1011_0110, 0));
    assert_eq!(split_successes(u64::MAX, 64), (u64::MAX, 0));
    assert_eq!(split_successes(u64::MAX, 63), (u64::MAX >> 1, 1 << 63));
    let mut rng = workload::rng::Rng::new(0x5eed);
    for _ in 0..10_000 {
        let mask = rng.next_u64() & rng.next_u64();
        let n = (rng.next_u64() % 66) as usize;
        let (now, rest) = split_successes(mask, n);
        assert_eq!(now | rest, mask, "{mask:#x} at {n}: nothing lost");
        assert_eq!(now & rest, 0, "{mask:#x} at {n}: nothing twice");
        assert_eq!(
            now.count_ones() as usize,
            n.min(mask.count_ones() as usize),
            "{mask:#x} at {n}"
        );
        if now != 0 && rest != 0 {
            assert!(
                63 - now.leading_zeros() < rest.trailing_zeros(),
                "{mask:#x} at {n}: lowest first"
            );
        }
    }
}

#[test]
fn a_reap_handed_out_in_parts_refills_early_and_loses_nothing() {
    // On NVMe the kernel's backend hands a reap's successes out in parts (its first 8, then
    // the rest: docs/bench.md "Refill within a reap"); this fake holds back all but a few on
    // every reap, the stricter case. The engine refills the slots freed so far before it sees
    // the rest, and must still complete, count and verify every I/O once.
    for (order, refill) in [(Order::Fifo, 1), (Order::Shuffled, 3), (Order::Lifo, 5)] {
        let plan = plan_of("rw=randrw rwmixread=60 bs=4k size=1m iodepth=16 verify=crc32c", &[0, 1]);
        assert_eq!(plan.verify, VerifyScheme::Tracked);
        let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
        let run = run_job(&plan, &disk, |_, b| {
            b.order = order;
            // A clock that moves only while the engine waits: a burst completes together, so
            // a poll finds more than a refill point's worth.
            b.tick_ns = 0;
            b.mask_successes = true;
            b.refill_after = refill;
            b.forbid_same_lba_in_flight = true;
        });
        assert_balanced(&plan, &run);
        let report = report_of(&plan, &run);
        assert_eq!(report.total.ios, 256, "{order:?} {refill}: one I/O per block");
        assert_eq!(report.verify.result, VerifyResult::Pass, "{order:?} {refill}");
        assert_eq!(report.verify.mismatches, 0);
        assert!(report.verify.checked > 0);
        assert!(report.passed());
        let early: u64 = run.backends.iter().map(|b| b.submits_while_held).sum();
        assert!(early > 0, "{order:?} {refill}: refilled before the rest of a reap");
        for backend in &run.backends {
            assert_eq!(backend.max_in_flight, 16, "{order:?} {refill}: iodepth reached");
        }
    }
}
