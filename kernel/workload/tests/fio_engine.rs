//! fio jobs through the engine against the fake backend: `ramp_time` is kept out of the figures,
//! a runtime without `time_based` only caps a size-bound job, numjobs clones each cover the whole
//! region once (fio's random map), `rw=rw` walks the region in order with the mix.

mod common;

use common::{DISK_SECTORS, FakeBackend, FakeDisk, SECTOR, fio_plan_of};
use workload::{CpuResult, IoOp, JobPlan, JobReport, JobShared, run_cpu};

fn run(plan: &JobPlan, latency_ns: u64) -> (Vec<CpuResult>, Vec<FakeBackend>) {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(plan);
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let (shared, disk) = (&shared, &disk);
                scope.spawn(move || {
                    let mut backend = FakeBackend::new(disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
                    backend.latency_ns = latency_ns;
                    let result = run_cpu(plan, index, &mut backend, shared).unwrap();
                    (result, backend)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    outcomes.into_iter().unzip()
}

#[test]
fn ramp_time_runs_first_and_is_kept_out_of_the_figures() {
    let plan = fio_plan_of(
        "[r]\nioengine=libaio\ndirect=1\nrw=randread\nbs=4k\niodepth=4\ntime_based\nruntime=50ms\nramp_time=20ms\n",
        &[0],
    );
    let (results, backends) = run(&plan, 100_000);
    let report = JobReport::new(&plan, &results).unwrap();
    // The measured runtime is the runtime alone (within one I/O latency); the ramp came before it.
    assert!(
        (49_800_000..50_300_000).contains(&report.runtime_ns),
        "{}",
        report.runtime_ns
    );
    // 4 in flight at 100 us: about 40k IOPS, measured over the runtime only.
    assert!((38_000..=41_000).contains(&report.total.iops), "{}", report.total.iops);
    // The device did the ramp's I/Os too: about 70 ms worth, of which 50 ms are counted.
    let done = backends[0].completions;
    let counted = results[0].ios();
    assert!(done > counted + 700, "device {done}, counted {counted}");
    assert!((1_900..=2_100).contains(&counted), "{counted}");
}

#[test]
fn runtime_without_time_based_caps_a_size_bound_job() {
    // 2048 blocks at QD1 and 100 us take about 205 ms; a 50 ms runtime stops it early.
    let capped = fio_plan_of("[c]\nrw=randread\nbs=4k\nruntime=50ms\n", &[0]);
    let (results, _) = run(&capped, 100_000);
    let ios = results[0].ios();
    assert!((480..=510).contains(&ios), "{ios} I/Os in 50 ms");
    // With room to finish, it does exactly one pass and stops by itself.
    let finishing = fio_plan_of("[c]\nrw=randread\nbs=4k\nruntime=10s\nsize=1m\n", &[0]);
    let (results, _) = run(&finishing, 100_000);
    assert_eq!(results[0].ios(), 256);
    assert!(results[0].runtime_ns < 30_000_000, "{}", results[0].runtime_ns);
}

#[test]
fn numjobs_clones_each_cover_the_whole_region_once() {
    let plan = fio_plan_of(
        "[n]\nioengine=libaio\nrw=randread\nbs=4k\nsize=512k\niodepth=8\nnumjobs=3\n",
        &[0, 1, 2],
    );
    let (results, backends) = run(&plan, 20_000);
    for (result, backend) in results.iter().zip(&backends) {
        assert_eq!(result.ios(), 128, "cpu{}", result.cpu);
        let mut lbas: Vec<u64> = backend.submit_log.iter().map(|(_, lba)| *lba).collect();
        lbas.sort_unstable();
        let expected: Vec<u64> = (0..128).map(|b| b * 8).collect();
        assert_eq!(lbas, expected, "cpu{}: every block of the region once", result.cpu);
    }
    // Each clone has its own random order.
    assert_ne!(backends[0].submit_log, backends[1].submit_log);
}

#[test]
fn sequential_mix_walks_in_order_with_the_ratio() {
    let plan = fio_plan_of("[m]\nrw=rw\nrwmixread=70\nbs=4k\nsize=4m\n", &[0]);
    let (results, backends) = run(&plan, 10_000);
    let log = &backends[0].submit_log;
    assert_eq!(log.len(), 1024);
    // As fio (a position per direction): the reads walk the region from its start in order, and
    // so do the writes, each on its own.
    for direction in [IoOp::Read, IoOp::Write] {
        let lbas: Vec<u64> = log
            .iter()
            .filter(|(op, _)| *op == direction)
            .map(|(_, lba)| *lba)
            .collect();
        assert!(
            lbas.iter().enumerate().all(|(i, lba)| *lba == i as u64 * 8),
            "{direction:?} in order from the start"
        );
    }
    let reads = log.iter().filter(|(op, _)| *op == IoOp::Read).count();
    assert!((650..=780).contains(&reads), "{reads} reads of 1024 at rwmixread=70");
    assert_eq!(results[0].read.ios as usize, reads);
}

#[test]
fn rate_iops_and_rate_hold_the_pace_per_direction() {
    // QD8 at 20 us could do 400k IOPS; the rate holds it to 1000 I/Os a second.
    let plan = fio_plan_of(
        "[p]\nioengine=libaio\nrw=randread\nbs=4k\niodepth=8\ntime_based\nruntime=100ms\nrate_iops=1000\n",
        &[0],
    );
    let (results, _) = run(&plan, 20_000);
    let ios = results[0].ios();
    assert!((99..=102).contains(&ios), "{ios} I/Os in 100 ms at 1000 IOPS");
    // rate=4m at bs=4k is 1024 I/Os a second, for reads and writes each.
    let plan = fio_plan_of(
        "[p]\nioengine=libaio\nrw=randrw\nbs=4k\niodepth=8\ntime_based\nruntime=100ms\nrate=4m\n",
        &[0],
    );
    let (results, _) = run(&plan, 20_000);
    let (reads, writes) = (results[0].read.ios, results[0].write.ios);
    assert!(
        (40..=104).contains(&reads) && (40..=104).contains(&writes),
        "{reads} reads, {writes} writes"
    );
    assert!((150..=206).contains(&(reads + writes)), "{reads} + {writes}");
}

#[test]
fn rate_process_poisson_spaces_starts_by_exponential_gaps_at_the_same_mean() {
    let text = "[p]\nioengine=libaio\nrw=randread\nbs=4k\niodepth=8\ntime_based\nruntime=500ms\nrate_iops=2000\n";
    let gaps_of = |process: &str| {
        let plan = fio_plan_of(&format!("{text}rate_process={process}\n"), &[0]);
        // Every I/O takes exactly 20 us, far below the 500 us mean gap: completions keep the
        // spacing of the starts.
        let (results, backends) = run(&plan, 20_000);
        let times: Vec<u64> = backends[0].completion_log.iter().map(|(at, _)| *at).collect();
        let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        (results[0].ios(), gaps)
    };
    let (linear_ios, linear_gaps) = gaps_of("linear");
    let (poisson_ios, poisson_gaps) = gaps_of("poisson");
    // Same mean rate: 2000 IOPS for 0.5 s; a Poisson count of 1000 has a deviation of about 32.
    assert!((995..=1005).contains(&linear_ios), "linear: {linear_ios}");
    assert!((880..=1120).contains(&poisson_ios), "poisson: {poisson_ios}");
    let mean = 500_000.0;
    let share = |gaps: &[u64], pred: &dyn Fn(f64) -> bool| {
        gaps.iter().filter(|&&g| pred(g as f64)).count() as f64 / gaps.len() as f64
    };
    // Linear: every gap is the interval. Exponential: P(gap > 2 mean) = e^-2 = 13.5 %,
    // P(gap < mean / 2) = 1 - e^-0.5 = 39.3 %.
    assert_eq!(share(&linear_gaps, &|g| g > 1.5 * mean || g < 0.5 * mean), 0.0);
    let long = share(&poisson_gaps, &|g| g > 2.0 * mean);
    let short = share(&poisson_gaps, &|g| g < 0.5 * mean);
    assert!((0.09..0.18).contains(&long), "{long} of the gaps above 2x the mean");
    assert!((0.33..0.46).contains(&short), "{short} of the gaps below half the mean");
    // The same seed gives the same arrivals (fio's randrepeat).
    assert_eq!(gaps_of("poisson").1, poisson_gaps);
}

#[test]
fn thinktime_waits_for_the_batch_then_thinks() {
    // 64 I/Os in batches of 4 at QD4: each batch takes 100 us, then 1 ms of think time.
    let plan = fio_plan_of(
        "[t]\nioengine=libaio\nrw=randread\nbs=4k\nsize=256k\niodepth=4\nthinktime=1ms\nthinktime_blocks=4\n",
        &[0],
    );
    let (results, backends) = run(&plan, 100_000);
    assert_eq!(results[0].ios(), 64);
    let runtime = results[0].runtime_ns;
    assert!((16_000_000..18_500_000).contains(&runtime), "{runtime} ns");
    // Completions come in groups of four, a think time apart.
    let times: Vec<u64> = backends[0].completion_log.iter().map(|(t, _)| *t).collect();
    let gaps = times.windows(2).filter(|w| w[1] - w[0] >= 1_000_000).count();
    assert_eq!(gaps, 15, "{times:?}");
}

#[test]
fn startdelay_comes_before_the_measured_run() {
    let plan = fio_plan_of(
        "[d]\nioengine=libaio\nrw=read\nbs=4k\nsize=64k\nstartdelay=10ms\n",
        &[0],
    );
    let (results, backends) = run(&plan, 20_000);
    assert_eq!(results[0].ios(), 16);
    // The fake clock starts at 1 ms; the first completion is 10 ms later at least.
    let first = backends[0].completion_log[0].0;
    assert!(first >= 11_000_000, "{first}");
    assert!(results[0].runtime_ns < 1_000_000, "{}", results[0].runtime_ns);
}

#[test]
fn fsync_flushes_after_every_n_writes_and_end_fsync_at_the_end() {
    let plan = fio_plan_of(
        "[f]\nioengine=libaio\nrw=write\nbs=4k\nsize=64k\niodepth=4\nfsync=4\nend_fsync=1\n",
        &[0],
    );
    let (results, backends) = run(&plan, 20_000);
    assert_eq!(results[0].write.ios, 16);
    // A flush after every 4 writes (4 of them), and the end flush.
    assert_eq!(results[0].flush.ios, 5);
    assert_eq!(results[0].flush.errors, 0);
    let log = &backends[0].submit_log;
    let ops: String = log
        .iter()
        .map(|(op, _)| if *op == IoOp::Flush { 'F' } else { 'w' })
        .collect();
    assert_eq!(ops, "wwwwFwwwwFwwwwFwwwwFF");
    // Every submission completed, flushes included.
    assert_eq!(backends[0].completion_log.len(), 21);
    assert!(backends[0].max_in_flight <= 4);
}

#[test]
fn verify_backlog_reads_back_every_n_writes_and_counts_them_as_reads() {
    let plan = fio_plan_of(
        "[b]\nioengine=libaio\nrw=randwrite\nbs=4k\nsize=256k\niodepth=4\nverify=crc32c\nverify_backlog=8\n",
        &[0],
    );
    let (results, backends) = run(&plan, 20_000);
    let result = &results[0];
    assert_eq!(result.write.ios, 64);
    // Every 8 writes are read back while the job runs: 64 reads, all checked, no mismatch.
    assert_eq!(result.read.ios, 64);
    assert_eq!(result.verify.mismatches, 0);
    assert!(result.verify.checked >= 64, "{:?}", result.verify);
    // The reads come during the writes, not only at the end: a read appears before the 20th write.
    let log = &backends[0].submit_log;
    let first_read = log.iter().position(|(op, _)| *op == IoOp::Read).unwrap();
    assert!(first_read < 20, "first read at {first_read}");
    // And each block read back was written before.
    let mut written = std::collections::BTreeSet::new();
    for (op, lba) in log.iter().take(64 + 64) {
        match op {
            IoOp::Write => {
                written.insert(*lba);
            }
            IoOp::Read => assert!(written.contains(lba), "LBA {lba} read back before it was written"),
            IoOp::Flush | IoOp::Trim => {}
        }
    }
}

#[test]
fn zipf_writes_with_verify_hit_hot_blocks_repeatedly_and_check_clean() {
    // 512 blocks, 512 writes at QD8: with zipf:1.2 the hot blocks come back while earlier writes
    // to them are in flight; the engine defers those (never two writes to one LBA at once) and
    // the verify pass finds every block's latest write.
    let plan = fio_plan_of(
        "[z]\nioengine=libaio\nrw=randwrite\nbs=4k\nsize=2m\niodepth=8\nverify=crc32c\nrandom_distribution=zipf:1.2\n",
        &[0],
    );
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(&plan);
    let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.bs() as usize);
    backend.latency_ns = 20_000;
    backend.forbid_same_lba_in_flight = true;
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    assert_eq!(result.write.ios, 512);
    assert_eq!(result.verify.mismatches, 0);
    let mut writes_per_lba = std::collections::BTreeMap::new();
    for (op, lba) in &backend.submit_log {
        if *op == IoOp::Write {
            *writes_per_lba.entry(*lba).or_insert(0u32) += 1;
            assert!(*lba < 512 * 8);
        }
    }
    // No random map: far fewer distinct blocks than writes, and one block written many times.
    assert!(writes_per_lba.len() < 300, "{} distinct blocks", writes_per_lba.len());
    assert!(writes_per_lba.values().any(|&n| n > 50), "{writes_per_lba:?}");
    assert!(
        result.verify.checked as usize >= writes_per_lba.len(),
        "{:?}",
        result.verify
    );
}

#[test]
fn verify_pattern_writes_the_pattern_over_each_block_and_checks_it_on_read_back() {
    let plan = fio_plan_of(
        "[w]\nioengine=libaio\nrw=randwrite\nbs=4k\nsize=256k\niodepth=4\nverify_pattern=0xdeadbeef\"bq\"\n",
        &[0],
    );
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(&plan);
    let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.bs() as usize);
    backend.latency_ns = 20_000;
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    assert_eq!(result.write.ios, 64);
    // The verify pass read every block back and found the pattern.
    assert_eq!(
        (result.verify.checked, result.verify.mismatches),
        (64, 0),
        "{:?}",
        result.verify
    );
    // fio 3.33's layout for verify_pattern alone: the pattern from byte 0, a header over the
    // first bytes (baremq's 48-byte header here).
    let pattern = [0xde, 0xad, 0xbe, 0xef, b'b', b'q'];
    let block = disk.read_block(8 * 17, 4096);
    assert!(
        block.iter().enumerate().skip(48).all(|(i, b)| *b == pattern[i % 6]),
        "block 17 holds the pattern after the header"
    );
    assert_eq!(&block[..8], b"BAREMQv1");
    // A read job with the same pattern checks what is there; one flipped byte is found by offset
    // (continue_on_error=all: fio's default stops at the first mismatch).
    disk.corrupt_byte(8 * 5, 1234);
    let read = fio_plan_of(
        "[r]\nioengine=libaio\nrw=read\nbs=4k\nsize=256k\niodepth=4\nverify_pattern=0xdeadbeef\"bq\"\ncontinue_on_error=all\n",
        &[0],
    );
    let shared = JobShared::new(&read);
    let mut backend = FakeBackend::new(&disk, read.iodepth as usize, read.bs() as usize);
    let result = run_cpu(&read, 0, &mut backend, &shared).unwrap();
    assert_eq!(result.read.ios, 64);
    assert_eq!(
        (result.verify.checked, result.verify.mismatches),
        (63, 1),
        "{:?}",
        result.verify
    );
    let (_, mismatch) = result.verify.first_mismatch.unwrap();
    assert_eq!(mismatch.lba, 40);
    assert_eq!(mismatch.field, workload::MismatchField::Data { byte_offset: 1232 });
}

#[test]
fn verify_pattern_with_verify_equal_pattern_writes_the_bare_pattern() {
    let plan = fio_plan_of(
        "[w]\nioengine=libaio\nrw=write\nbs=4k\nsize=64k\niodepth=2\nverify=pattern\nverify_pattern=0x5a\"!\"\n",
        &[0],
    );
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    let shared = JobShared::new(&plan);
    let mut backend = FakeBackend::new(&disk, plan.iodepth as usize, plan.bs() as usize);
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    assert_eq!(
        (result.write.ios, result.verify.checked, result.verify.mismatches),
        (16, 16, 0)
    );
    for block in 0..16 {
        let data = disk.read_block(8 * block, 4096);
        assert!(
            data.iter().enumerate().all(|(i, b)| *b == [0x5a, b'!'][i % 2]),
            "block {block}"
        );
    }
}

#[test]
fn a_mixed_job_never_writes_back_what_a_read_brought_into_the_slot() {
    // The disk is all zeros; reads fill the slots with zeros. Every block the job writes must
    // still hold non-zero data afterwards (fio's scramble_buffers has the same aim).
    let plan = fio_plan_of(
        "[m]\nioengine=libaio\nrw=randrw\nrwmixread=50\nbs=4k\nsize=1m\niodepth=4\n",
        &[0],
    );
    let (results, backends) = run(&plan, 20_000);
    let writes: Vec<u64> = backends[0]
        .submit_log
        .iter()
        .filter(|(op, _)| *op == IoOp::Write)
        .map(|(_, lba)| *lba)
        .collect();
    assert_eq!(writes.len() as u64, results[0].write.ios);
    assert!(writes.len() > 80, "{} writes of 256", writes.len());
    let disk = &backends[0].disk;
    let zero_blocks = writes
        .iter()
        .filter(|lba| disk.read_block(**lba, 4096).iter().all(|b| *b == 0))
        .count();
    assert_eq!(zero_blocks, 0, "written blocks left all zero");
}
