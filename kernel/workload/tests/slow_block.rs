//! One slow block must not stall its CPU: while one request is held for a long time, a
//! verify job keeps `iodepth - 1` other requests in flight, never puts a second I/O on the held
//! block, and still issues every I/O its generator produced. All times are the fake backend's
//! simulated clock, so the assertions are on counts, not on wall time.

mod common;

use common::{FakeBackend, FakeDisk, Fault};
use workload::{
    CpuResult, DeviceInfo, IoGenerator, IoOp, JobPlan, JobReport, JobShared, VerifyResult, VerifyScheme, parse_jobs,
    plan_job, run_cpu,
};

const SECTOR: u32 = 512;
const DISK_SECTORS: u64 = 16 * 1024;
/// Latency of every request but the held one.
const LATENCY_NS: u64 = 20_000;
const HOLD_NS: u64 = 10_000_000;

fn plan_of(words: &str) -> JobPlan {
    let device = DeviceInfo {
        name: "md0".into(),
        sector_size: SECTOR,
        capacity_sectors: DISK_SECTORS,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    };
    let jobs = parse_jobs(words.split_ascii_whitespace()).unwrap();
    plan_job(&jobs[0], &[device], &[0]).unwrap()
}

fn run(plan: &JobPlan, faults: &[Fault]) -> (CpuResult, FakeBackend) {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(plan);
    let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.bs() as usize);
    backend.latency_ns = LATENCY_NS;
    backend.forbid_same_lba_in_flight = true;
    backend.faults.extend_from_slice(faults);
    let result = run_cpu(plan, 0, &mut backend, &shared).expect("the run must not stall");
    (result, backend)
}

/// Completions of other LBAs strictly inside the held request's lifetime.
fn completions_during_hold(backend: &FakeBackend, held_lba: u64) -> u64 {
    let (from, to) = backend.held.expect("the held request was submitted");
    assert!(to - from == HOLD_NS);
    backend
        .completion_log
        .iter()
        .filter(|&&(at, lba)| at > from && at < to && lba != held_lba)
        .count() as u64
}

/// Completions in the same length of time, from the same start, in a run without the hold.
fn completions_in_window(backend: &FakeBackend, from: u64) -> u64 {
    backend
        .completion_log
        .iter()
        .filter(|&&(at, _)| at > from && at < from + HOLD_NS)
        .count() as u64
}

#[test]
fn a_held_block_does_not_stall_the_other_ios_of_a_random_verify_job() {
    // 64 blocks at iodepth 8: the generator comes back to the held block about every 64 I/Os, so
    // without deferral the CPU waits for it within a few microseconds of the hold starting.
    let plan = plan_of("rw=randrw bs=4k size=256k iodepth=8 runtime=30ms verify=crc32c cpus=0");
    assert_eq!(plan.verify, VerifyScheme::Tracked);
    let held_lba = 5 * 8;
    let (baseline, free) = run(&plan, &[]);
    let (result, held) = run(
        &plan,
        &[Fault::Hold {
            lba: held_lba,
            hold_ns: HOLD_NS,
        }],
    );
    let during_hold = completions_during_hold(&held, held_lba);
    let (hold_start, _) = held.held.unwrap();
    let unhindered = completions_in_window(&free, hold_start);
    eprintln!("random: {during_hold} completions during the hold, {unhindered} without one");
    // 8 slots at 20 us: 4000 completions in 10 ms with nothing held; 7 slots: 3500.
    assert!(unhindered > 3_600, "baseline {unhindered}");
    let ideal = unhindered * 7 / 8;
    assert!(
        during_hold * 100 >= ideal * 95,
        "{during_hold} completions while one block was held, {ideal} expected with one slot held \
         ({unhindered} with none)"
    );
    assert!(
        result.deferred_ios > 0,
        "the generator hit the held block during the hold, so I/Os were deferred"
    );
    // The deferred I/Os to the held block ran after it: every block was verified at the end.
    let report = JobReport::new(&plan, std::slice::from_ref(&result)).unwrap();
    assert_eq!(report.verify.result, VerifyResult::Pass);
    assert_eq!(report.errors, 0);
    assert_eq!(baseline.errors, 0);
}

#[test]
fn a_held_block_does_not_stall_a_wrapping_sequential_verify_job_and_every_block_is_covered() {
    // A time-based sequential write with verify wraps, so it tracks generations per block.
    let plan = plan_of("rw=write bs=4k size=64k iodepth=4 runtime=30ms verify=pattern cpus=0");
    assert_eq!(plan.verify, VerifyScheme::Tracked);
    let held_lba = 3 * 8;
    let (_, free) = run(&plan, &[]);
    let (result, held) = run(
        &plan,
        &[Fault::Hold {
            lba: held_lba,
            hold_ns: HOLD_NS,
        }],
    );
    let during_hold = completions_during_hold(&held, held_lba);
    let (hold_start, _) = held.held.unwrap();
    let ideal = completions_in_window(&free, hold_start) * 3 / 4;
    eprintln!("sequential: {during_hold} completions during the hold, {ideal} ideal");
    assert!(
        during_hold * 100 >= ideal * 95,
        "{during_hold} completions while one block was held, {ideal} expected"
    );
    // Sequential order is kept for everything but the held block, and every block of the slice is
    // written in every lap: no block is skipped.
    let written: Vec<u64> = held
        .submit_log
        .iter()
        .filter(|(op, _)| *op == IoOp::Write)
        .map(|&(_, lba)| lba / 8)
        .collect();
    for block in 0..16 {
        let count = written.iter().filter(|&&b| b == block).count();
        assert!(count >= 2, "block {block} written {count} times");
    }
    assert!(result.deferred_ios > 0);
    let report = JobReport::new(&plan, &[result]).unwrap();
    assert_eq!(report.verify.result, VerifyResult::Pass);
}

#[test]
fn deferral_loses_no_io_of_a_size_bound_job() {
    // Size-bound random job: exactly the generator's I/Os are issued, each once, whatever the hold
    // reorders. 16 blocks, iodepth 8: blocks are often busy even without a hold.
    let plan = plan_of("rw=randrw bs=4k size=64k iodepth=8 verify=crc32c cpus=0 seed=11");
    let held_lba = 2 * 8;
    let (result, held) = run(
        &plan,
        &[Fault::Hold {
            lba: held_lba,
            hold_ns: HOLD_NS,
        }],
    );
    let mut generator = IoGenerator::new(&plan, 0);
    let mut expected: Vec<(IoOp, u64)> = std::iter::from_fn(|| generator.next_io())
        .map(|(op, block)| (op, block * 8))
        .collect();
    let main_phase = result.ios() as usize;
    let mut issued = held.submit_log[..main_phase].to_vec();
    assert_eq!(issued.len(), expected.len());
    let key = |io: &(IoOp, u64)| (io.1, io.0 == IoOp::Write);
    expected.sort_by_key(key);
    issued.sort_by_key(key);
    assert_eq!(issued, expected, "every generated I/O issued exactly once");
    assert!(result.deferred_ios > 0);
    assert_eq!(result.errors, 0);
    assert_eq!(result.verify.mismatches, 0);
}

#[test]
fn a_block_held_longer_than_the_queue_lasts_does_not_stall_a_time_based_job() {
    // 16 blocks, 20 us per request, one held for 100 ms: the generator hits the held block about
    // 1,000 times during the hold, far more than the deferral queue holds. A time-based job then
    // drops those I/Os (as if it had drawn another block) and keeps the other slots busy.
    let plan = plan_of("rw=randrw bs=4k size=64k iodepth=4 runtime=150ms verify=crc32c cpus=0");
    let held_lba = 6 * 8;
    let hold_ns = 100_000_000;
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(&plan);
    let mut backend = FakeBackend::new(&disk, 4, 4096);
    backend.latency_ns = LATENCY_NS;
    backend.forbid_same_lba_in_flight = true;
    backend.faults.push(Fault::Hold { lba: held_lba, hold_ns });
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    let (from, to) = backend.held.unwrap();
    let during_hold = backend
        .completion_log
        .iter()
        .filter(|&&(at, lba)| at > from && at < to && lba != held_lba)
        .count() as u64;
    // Three free slots at 20 us: 15,000 in 100 ms.
    let ideal = 3 * hold_ns / LATENCY_NS;
    eprintln!("long hold: {during_hold} completions during the hold, ideal {ideal}");
    assert!(during_hold * 100 >= ideal * 90, "{during_hold} of {ideal}");
    assert!(result.deferred_ios >= workload::MIN_DEFERRED as u64);
    assert!(result.dropped_busy_ios > 0);
    let report = JobReport::new(&plan, &[result]).unwrap();
    assert_eq!(report.verify.result, VerifyResult::Pass);
    let mut text = String::new();
    report.write_human(&mut text).unwrap();
    assert!(
        text.contains("dropped for a block in flight with the queue full"),
        "{text}"
    );
}

#[test]
fn a_full_deferral_queue_waits_instead_of_growing() {
    // Two blocks per CPU and iodepth 8: the generator keeps producing I/Os for busy blocks. The
    // engine must wait (not spin or allocate) once its deferral queue is full, and still finish.
    let plan = plan_of("rw=randrw bs=4k size=8k iodepth=8 runtime=5ms verify=crc32c cpus=0");
    let (result, backend) = run(&plan, &[]);
    assert!(backend.max_in_flight <= 2);
    assert!(result.ios() > 100);
    let report = JobReport::new(&plan, &[result]).unwrap();
    assert_eq!(report.verify.result, VerifyResult::Pass);
}
