//! fio's variable block sizes through the engine against the fake backend: `bssplit`, unequal
//! `bsrange` and `bs=R,W` draw a size per I/O; a random-map pass still covers every block of the
//! region exactly once (an I/O is cut at the first block the pass already covered, as fio's map
//! does); a size-bound job moves exactly `size` bytes; the report counts bytes, not I/Os x bs;
//! verify stamps and checks every block of an I/O on its own.

mod common;

use common::{DISK_SECTORS, FakeBackend, FakeDisk, SECTOR, fio_plan_of, md0};
use workload::fio::parse_job_file;
use workload::{CpuResult, IoOp, JobPlan, JobReport, JobShared, WorkloadError, plan_job, run_cpu};

fn run(plan: &JobPlan) -> (Vec<CpuResult>, Vec<FakeBackend>) {
    run_on(plan, &FakeDisk::new(SECTOR, DISK_SECTORS))
}

fn run_on(plan: &JobPlan, disk: &FakeDisk) -> (Vec<CpuResult>, Vec<FakeBackend>) {
    let shared = JobShared::new(plan);
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let shared = &shared;
                scope.spawn(move || {
                    let mut backend = FakeBackend::new(disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
                    let result = run_cpu(plan, index, &mut backend, shared).unwrap();
                    (result, backend)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    outcomes.into_iter().unzip()
}

/// Every submitted I/O as (op, first byte, bytes), all CPUs together.
fn ios(backends: &[FakeBackend]) -> Vec<(IoOp, u64, u64)> {
    backends
        .iter()
        .flat_map(|b| {
            b.submit_log
                .iter()
                .zip(&b.submit_sectors)
                .map(|(&(op, lba), &sectors)| (op, lba * u64::from(SECTOR), u64::from(sectors) * u64::from(SECTOR)))
        })
        .collect()
}

/// How many I/Os covered each `unit`-byte block of `[0, region)`.
fn coverage(ios: &[(IoOp, u64, u64)], unit: u64, region: u64) -> Vec<u32> {
    let mut hits = vec![0u32; (region / unit) as usize];
    for &(_, start, len) in ios {
        assert_eq!(
            (start % unit, len % unit),
            (0, 0),
            "I/O at {start} of {len} bytes is not unit-aligned"
        );
        assert!(
            len > 0 && start + len <= region,
            "I/O at {start} of {len} bytes leaves the region"
        );
        for block in start / unit..(start + len) / unit {
            hits[block as usize] += 1;
        }
    }
    hits
}

#[test]
fn bssplit_random_pass_covers_every_block_once_with_the_split_sizes() {
    let plan = fio_plan_of(
        "[r]\nrw=randwrite\nbssplit=4k/25:16k/75\nsize=2m\niodepth=8\nioengine=libaio\n",
        &[0],
    );
    assert_eq!((plan.bs(), plan.max_io_bytes()), (4096, 16384));
    let (results, backends) = run(&plan);
    let ios = ios(&backends);
    let hits = coverage(&ios, 4096, 2 << 20);
    assert!(
        hits.iter().all(|&h| h == 1),
        "a block covered other than once: {hits:?}"
    );
    // Sizes are the split's, or a 16k draw cut short at a covered block (a multiple of 4k below it).
    assert!(ios.iter().all(|&(op, _, len)| op == IoOp::Write && len <= 16384));
    let full = ios.iter().filter(|io| io.2 == 16384).count();
    // 75% of draws are 16k, but late in a pass the free runs are short and cut most of them (fio's
    // map does the same): still a good part of the I/Os, and over half of the bytes, are whole 16k.
    assert!(full * 4 >= ios.len(), "{full} of {} I/Os are 16k", ios.len());
    assert!(full as u64 * 16384 * 2 >= 2 << 20, "{full} whole 16k I/Os");
    assert!(ios.iter().any(|io| io.2 == 4096));
    let report = JobReport::new(&plan, &results).unwrap();
    assert_eq!(report.write.bytes, 2 << 20, "the report counts bytes moved");
    assert_eq!(report.write.ios, ios.len() as u64);
    assert_eq!(report.read.ios, 0);
    // The reports name the sizes (in fio's bssplit form, bytes), bs being their unit.
    let mut human = String::new();
    report.write_human(&mut human).unwrap();
    assert!(
        human.contains(" bs=4096 sizes=4096/25:16384/75,4096/25:16384/75 "),
        "{human}"
    );
}

#[test]
fn bssplit_shares_follow_the_percentages_without_a_map() {
    // norandommap: no cuts but at the region's end, so the sizes show the split itself.
    let plan = fio_plan_of(
        "[r]\nrw=randread\nbssplit=4k/10:64k/50:32k/40\nnorandommap\nsize=8m\nio_size=64m\niodepth=4\nioengine=libaio\n",
        &[0],
    );
    let (results, backends) = run(&plan);
    let ios = ios(&backends);
    let share = |len| ios.iter().filter(|io| io.2 == len).count() as f64 / ios.len() as f64;
    let (s4, s32, s64) = (share(4096), share(32768), share(65536));
    assert!((0.07..0.13).contains(&s4), "4k share {s4}");
    assert!((0.36..0.44).contains(&s32), "32k share {s32}");
    assert!((0.46..0.54).contains(&s64), "64k share {s64}");
    // io_size counts bytes: 64 MiB moved, whatever the sizes.
    let bytes: u64 = ios.iter().map(|io| io.2).sum();
    assert_eq!(bytes, 64 << 20);
    let report = JobReport::new(&plan, &results).unwrap();
    assert_eq!((report.read.bytes, report.read.ios), (64 << 20, ios.len() as u64));
}

#[test]
fn bsrange_sequential_walks_the_region_in_order_with_sizes_in_the_range() {
    let plan = fio_plan_of("[s]\nrw=write\nbsrange=4k-32k\nsize=1m\nioengine=libaio\n", &[0]);
    let (_, backends) = run(&plan);
    let ios = ios(&backends);
    let mut next = 0;
    for &(_, start, len) in &ios {
        assert_eq!(start, next, "sequential I/Os follow each other");
        assert!((4096..=32768).contains(&len) && len % 4096 == 0, "size {len}");
        next = start + len;
    }
    assert_eq!(next, 1 << 20, "the job ends exactly at size");
    // A uniform draw of 1..=8 units: both ends come up.
    assert!(ios.iter().any(|io| io.2 == 4096) && ios.iter().any(|io| io.2 == 32768));
    let distinct: std::collections::BTreeSet<u64> = ios.iter().map(|io| io.2).collect();
    assert!(distinct.len() >= 6, "sizes drawn: {distinct:?}");
}

#[test]
fn bs_per_direction_gives_reads_and_writes_their_own_sizes() {
    let plan = fio_plan_of(
        "[m]\nrw=randrw\nbs=4k,16k\nnorandommap\nsize=4m\nio_size=8m\niodepth=4\nioengine=libaio\n",
        &[0, 1],
    );
    let (results, backends) = run(&plan);
    let ios = ios(&backends);
    let reads: Vec<_> = ios.iter().filter(|io| io.0 == IoOp::Read).collect();
    let writes: Vec<_> = ios.iter().filter(|io| io.0 == IoOp::Write).collect();
    assert!(reads.iter().all(|io| io.2 == 4096));
    // A write drawn within 16k of a slice's end is cut there.
    let whole_writes = writes.iter().filter(|io| io.2 == 16384).count();
    assert!(
        whole_writes + 4 >= writes.len(),
        "{whole_writes} of {} writes are 16k",
        writes.len()
    );
    let report = JobReport::new(&plan, &results).unwrap();
    let read_bytes: u64 = reads.iter().map(|io| io.2).sum();
    let write_bytes: u64 = writes.iter().map(|io| io.2).sum();
    assert_eq!((report.read.bytes, report.write.bytes), (read_bytes, write_bytes));
    assert_eq!(read_bytes + write_bytes, 8 << 20);
    // rwmixread 50: about as many reads as writes, so about four times the bytes written.
    let read_share = reads.len() as f64 / ios.len() as f64;
    assert!((0.45..0.55).contains(&read_share), "read share {read_share}");
}

#[test]
fn time_based_random_map_restarts_its_pass_once_every_block_is_covered() {
    let plan = fio_plan_of(
        "[t]\nrw=randread\nbssplit=4k/50:8k/50\nsize=256k\ntime_based\nruntime=20ms\nioengine=libaio\n",
        &[0],
    );
    let (_, backends) = run(&plan);
    let ios = ios(&backends);
    // Walk the I/Os in order: within one pass no block comes twice, and a pass ends with all 64.
    let mut seen = [false; 64];
    let mut passes = 0;
    for &(_, start, len) in &ios {
        for block in start / 4096..(start + len) / 4096 {
            assert!(!seen[block as usize], "block {block} twice in pass {passes}");
            seen[block as usize] = true;
        }
        if seen.iter().all(|&s| s) {
            passes += 1;
            seen.fill(false);
        }
    }
    assert!(passes >= 3, "only {passes} whole passes in {} I/Os", ios.len());
}

#[test]
fn verify_with_variable_sizes_stamps_every_block_and_a_read_job_checks_each() {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    // A sequential write with sizes from 4k to 32k: its verify pass reads the 256 blocks back.
    let write = fio_plan_of(
        "[w]\nrw=write\nbsrange=4k-32k\nsize=1m\nverify=crc32c\niodepth=4\nioengine=libaio\n",
        &[0],
    );
    let (results, backends) = run_on(&write, &disk);
    let writes: Vec<_> = ios(&backends).into_iter().filter(|io| io.0 == IoOp::Write).collect();
    assert!(writes.iter().any(|io| io.2 > 4096), "the writes are of several blocks");
    let verify = &results[0].verify;
    assert_eq!((verify.checked, verify.mismatches), (256, 0));
    // A read job with other sizes checks every block of each read against its own stamp.
    let read = fio_plan_of(
        "[r]\nrw=randread\nbssplit=4k/20:8k/40:64k/40\nsize=1m\nverify=crc32c\ncontinue_on_error=all\niodepth=4\nioengine=libaio\n",
        &[0],
    );
    let (results, _) = run_on(&read, &disk);
    assert_eq!((results[0].verify.checked, results[0].verify.mismatches), (256, 0));
    // One corrupted byte inside a block in the middle of some I/O: exactly that block mismatches
    // (continue_on_error=all: the job reads on).
    disk.bytes.lock().unwrap()[100 * 4096 + 1000] ^= 0xff;
    let (results, _) = run_on(&read, &disk);
    let verify = &results[0].verify;
    assert_eq!((verify.checked, verify.mismatches), (255, 1));
    let (_, mismatch) = verify.first_mismatch.as_ref().unwrap();
    assert_eq!(mismatch.lba, 100 * 8, "{mismatch:?}");
}

#[test]
fn verify_of_random_writes_the_backlog_and_trims_are_refused_with_variable_sizes() {
    for (text, option) in [
        (
            "[w]\nrw=randwrite\nbssplit=4k/50:8k/50\nsize=1m\nverify=crc32c\n",
            "verify",
        ),
        ("[w]\nrw=randrw\nbs=4k,8k\nsize=1m\nverify=crc32c\n", "verify"),
        (
            "[w]\nrw=write\nbssplit=4k/50:8k/50\nsize=1m\nverify=crc32c\nverify_backlog=8\n",
            "verify_backlog",
        ),
        ("[t]\nrw=randtrim\nbssplit=4k/50:8k/50\nsize=1m\n", "bssplit"),
        ("[t]\nrw=trimwrite\nbsrange=4k-16k\nsize=1m\n", "bssplit"),
    ] {
        let run = parse_job_file(text, &[]).unwrap();
        let spec = run.jobs[0].to_spec(&[md0()], &[0]).unwrap();
        match plan_job(&spec, &[md0()], &[0]) {
            Err(WorkloadError::FioUnsupported { option: o, reason, .. }) => {
                assert_eq!(o, option, "{text:?}: {reason}");
                assert!(reason.contains("variable block sizes"), "{reason}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
}
