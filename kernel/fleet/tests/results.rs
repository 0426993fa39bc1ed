//! A real engine run (an in-memory backend) mapped to fio's results: every figure the client shows
//! is the report's, and the TS survives fio's wire layout.

use fioserver::stats::{CLAT, LAT, SLAT, ThreadStat};
use fleet::results::{EtaMeter, LiveJob, group_stats, run_results, start_plan};
use std::cell::Cell;
use std::collections::VecDeque;
use workload::detail::DetailOptions;
use workload::report::FioJobMeta;
use workload::{
    Completion, DeviceInfo, IoBackend, IoOp, JobReport, JobShared, SubmitError, parse_cmdline, plan_job, run_cpu,
};

const SECTOR: usize = 512;

/// Completes every request at once, 40 us after it was submitted, on a clock that moves 10 us
/// per reading.
struct MemoryBackend {
    disk: Vec<u8>,
    buffers: Vec<Vec<u8>>,
    done: VecDeque<usize>,
    clock: Cell<u64>,
}

impl MemoryBackend {
    fn new(sectors: usize, depth: usize, bs: usize) -> Self {
        Self {
            disk: vec![0; sectors * SECTOR],
            buffers: vec![vec![0; bs]; depth],
            done: VecDeque::new(),
            clock: Cell::new(1_000_000),
        }
    }
}

impl IoBackend for MemoryBackend {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError> {
        let range = lba as usize * SECTOR..(lba as usize + sectors as usize) * SECTOR;
        let len = range.len();
        match op {
            IoOp::Read => self.buffers[slot][..len].copy_from_slice(&self.disk[range]),
            IoOp::Write => self.disk[range].copy_from_slice(&self.buffers[slot][..len]),
            _ => {}
        }
        self.done.push_back(slot);
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        self.clock.set(self.clock.get() + 40_000);
        let mut n = 0;
        while n < out.len()
            && let Some(slot) = self.done.pop_front()
        {
            out[n] = Completion::new(slot, Ok(()));
            n += 1;
        }
        n
    }

    fn now_ns(&self) -> u64 {
        self.clock.set(self.clock.get() + 10_000);
        self.clock.get()
    }
}

fn run(words: &str) -> JobReport {
    let device = [DeviceInfo {
        name: "nvme0n1".into(),
        sector_size: 512,
        capacity_sectors: 16 * 1024,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    }];
    let spec = parse_cmdline(words).unwrap().remove(0);
    let plan = plan_job(&spec, &device, &[0]).unwrap();
    let shared = JobShared::with_detail(&plan, DetailOptions::default());
    let mut backend = MemoryBackend::new(16 * 1024, plan.iodepth as usize, plan.max_io_bytes() as usize);
    let result = run_cpu(&plan, 0, &mut backend, &shared).unwrap();
    JobReport::new(&plan, &[result]).unwrap()
}

/// The first job of a fio job file, its clones on CPUs 0 and 1 (each over its own in-memory
/// disk, at the same time), with the parsed run.
fn run_clones(job_file: &str) -> (workload::fio::FioRun, JobReport) {
    let device = [DeviceInfo {
        name: "nvme0n1".into(),
        sector_size: 512,
        capacity_sectors: 16 * 1024,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    }];
    let run = workload::fio::parse_job_file(job_file, &[]).unwrap();
    let spec = run.jobs[0].to_spec(&device, &[0, 1]).unwrap();
    let plan = plan_job(&spec, &device, &[0, 1]).unwrap();
    let shared = JobShared::with_detail(&plan, DetailOptions::default());
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let (plan, shared) = (&plan, &shared);
                scope.spawn(move || {
                    let mut backend =
                        MemoryBackend::new(16 * 1024, plan.iodepth as usize, plan.max_io_bytes() as usize);
                    run_cpu(plan, index, &mut backend, shared).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let report = JobReport::new(&plan, &results).unwrap();
    (run, report)
}

fn meta(group: u32) -> FioJobMeta {
    FioJobMeta {
        job_options: vec![("rw".into(), "randrw".into())],
        groupid: group,
    }
}

#[test]
fn a_report_becomes_fio_figures_that_survive_the_wire() {
    let report = run("job=mix rw=randrw bs=4k iodepth=4 cpus=0 size=2m verify=crc32c");
    assert!(report.read.ios > 0 && report.write.ios > 0);
    let results = run_results(
        &[(report.clone(), meta(0))],
        &[("ioengine".into(), "libaio".into())],
        &[],
        true,
    );
    assert_eq!(results.error, 0);
    assert_eq!(results.jobs.len(), 1);
    assert_eq!(
        results.global_options,
        vec![("ioengine".to_string(), "libaio".to_string())]
    );
    let ts = &results.jobs[0].stat;
    assert_eq!(results.jobs[0].options, meta(0).job_options);
    assert_eq!(ts.name, "mix");
    assert_eq!(ts.thread_number, 1);
    assert_eq!(ts.error, 0);
    let runtime_ms = report.runtime_ns / 1_000_000;
    assert!(runtime_ms > 0);
    assert_eq!(ts.total_run_time_ms, runtime_ms);
    for (d, summary, lat) in [
        (&ts.dirs[0], &report.read, &report.read_latency),
        (&ts.dirs[1], &report.write, &report.write_latency),
    ] {
        assert_eq!(d.total_ios, summary.ios);
        assert_eq!(d.io_bytes, summary.bytes);
        assert_eq!(d.runtime_ms, runtime_ms);
        assert_eq!(d.lat.samples, lat.samples());
        assert_eq!(d.lat.min, lat.min());
        assert_eq!(d.lat.max, lat.max());
        assert!((d.lat.mean - lat.sum() as f64 / lat.samples() as f64).abs() < 1e-6);
        assert_eq!(d.plat[LAT].iter().sum::<u64>(), lat.samples());
        assert_eq!(
            d.plat[CLAT].iter().sum::<u64>(),
            lat.samples(),
            "detail mode measured clat"
        );
        assert_eq!(d.plat[SLAT].iter().sum::<u64>(), lat.samples());
        assert_eq!(d.slat.samples, d.clat.samples);
    }
    assert_eq!(ts.dirs[2].total_ios, 0);
    assert_eq!(ts.dirs[2].runtime_ms, 0, "no trims: no trim runtime, as fio");
    let classes: u64 = ts.io_u_lat_n.iter().chain(&ts.io_u_lat_u).chain(&ts.io_u_lat_m).sum();
    assert_eq!(classes, report.read.ios + report.write.ios);
    // Depth shares over the job's I/Os (fio's denominator), the verify reads' submissions included
    // in the engine's counts.
    let ios = report.read.ios + report.write.ios;
    let mapped: u64 = ts.io_u_map.iter().sum();
    assert!(mapped <= ios && mapped + 7 >= ios, "{mapped} of {ios}");
    assert!(ts.total_submit >= ios);
    assert_eq!(ts.percentile_list.len(), 17, "fio's default list");
    assert_eq!(ts.latency_depth, 4);
    // The group: this one job.
    let g = &results.groups[0];
    assert_eq!(g.io_bytes[0], report.read.bytes);
    assert_eq!(g.io_bytes[1], report.write.bytes);
    assert_eq!(g.max_run_ms[0], runtime_ms);
    assert_eq!(g.agg_bw[1], report.write.bytes * 1000 / runtime_ms);
    // The disk.
    assert_eq!(results.disks.len(), 1);
    assert_eq!(results.disks[0].name, "nvme0n1");
    assert_eq!(results.disks[0].ios, [report.read.ios, report.write.ios]);
    // Through fio's TS layout and back.
    let wire = ts.encode_ts(g).unwrap();
    let (back, group) = ThreadStat::decode_ts(&wire).unwrap();
    assert_eq!(back.dirs[0].total_ios, report.read.ios);
    assert_eq!(back.dirs[1].io_bytes, report.write.bytes);
    assert_eq!(back.dirs[1].plat[LAT], ts.dirs[1].plat[LAT]);
    assert_eq!(group.io_bytes, g.io_bytes);
}

#[test]
fn a_failed_run_and_groups_of_several_jobs() {
    let a = run("job=a rw=randread bs=4k iodepth=2 cpus=0 size=1m");
    let b = run("job=b rw=read bs=8k iodepth=1 cpus=0 size=1m");
    let c = run("job=c rw=write bs=4k iodepth=1 cpus=0 size=512k");
    let results = run_results(
        &[(a.clone(), meta(0)), (b.clone(), meta(0)), (c.clone(), meta(1))],
        &[],
        &[50_000_000],
        false,
    );
    assert_eq!(results.error, 1, "a failed job fails the run");
    assert_eq!(results.jobs[0].stat.percentile_list, vec![50.0]);
    assert_eq!(results.groups.len(), 2);
    let g0 = &results.groups[0];
    assert_eq!(g0.io_bytes[0], a.read.bytes + b.read.bytes);
    let (ra, rb) = (a.runtime_ns / 1_000_000, b.runtime_ns / 1_000_000);
    assert_eq!(g0.max_run_ms[0], ra.max(rb));
    assert_eq!(g0.min_run_ms[0], ra.min(rb));
    assert_eq!(g0.io_bytes[1], 0);
    assert_eq!(results.groups[1].io_bytes[1], c.write.bytes);
    // Groups come from the TS group ids, gaps included.
    let mut lone = results.jobs[2].stat.clone();
    lone.groupid = 3;
    assert_eq!(group_stats([&lone].into_iter()).len(), 4);
}

#[test]
fn clones_without_group_reporting_are_a_ts_each_and_start_announces_them() {
    let job = "[global]\nrw=randread\nbs=4k\niodepth=2\n[pair]\nsize=512k\nnumjobs=2\n[after]\nstonewall\nsize=256k\n";
    let (run, report) = run_clones(job);
    assert_eq!(report.clones.len(), 2);
    let after = run_results(&[(report.clone(), meta(0))], &[], &[], true);
    assert_eq!(after.jobs.len(), 2, "one TS per clone");
    for (index, (entry, clone)) in after.jobs.iter().zip(&report.clones).enumerate() {
        let ts = &entry.stat;
        assert_eq!(ts.name, "pair");
        assert_eq!(ts.thread_number, index as u32 + 1);
        assert_eq!(ts.members, 1);
        assert_eq!(ts.groupid, 0);
        // 512 KiB per clone: 128 reads of 4 KiB, each clone's own.
        assert_eq!(ts.dirs[0].total_ios, 128);
        assert_eq!(ts.dirs[0].total_ios, clone.read.ios);
        assert_eq!(ts.dirs[0].lat.samples, clone.read_latency.samples());
        assert_eq!(ts.total_run_time_ms, clone.runtime_ns / 1_000_000);
    }
    // The group sums the clones; the device counts the job once.
    assert_eq!(after.groups[0].io_bytes[0], report.read.bytes);
    assert_eq!(after.disks[0].ios[0], 256);
    // fio's START: two threads and one TS each, then the second job's.
    let plan = start_plan(&run);
    assert_eq!((plan.jobs, plan.stat_outputs), (3, 3));

    let grouped = job.replace("[global]\n", "[global]\ngroup_reporting\n");
    let (run, report) = run_clones(&grouped);
    assert!(report.clones.is_empty());
    let merged = run_results(&[(report.clone(), meta(0))], &[], &[], true);
    assert_eq!(merged.jobs.len(), 1, "group_reporting: one TS for the clones");
    assert_eq!(merged.jobs[0].stat.members, 2);
    assert_eq!(merged.jobs[0].stat.dirs[0].total_ios, 256);
    let plan = start_plan(&run);
    assert_eq!((plan.jobs, plan.stat_outputs), (3, 2));
}

#[test]
fn eta_rates_come_from_the_counters_between_readings() {
    let mut meter = EtaMeter::new(1_000_000_000);
    let job = |running, bytes, ios| LiveJob {
        running,
        writes_only: true,
        bytes,
        ios,
        runtime_ns: Some(10_000_000_000),
    };
    let e = meter.eta(2_000_000_000, &[job(true, 1 << 20, 256), job(false, 0, 0)]);
    assert_eq!(e.nr_running, 1);
    assert_eq!(e.nr_threads, 2);
    assert_eq!(e.run_str, "R_");
    assert_eq!(e.rate, [0, 1024, 0], "1 MiB in 1 s is 1024 KiB/s, shown as writes");
    assert_eq!(e.iops[1], 256);
    assert_eq!(e.elapsed_sec, 1);
    assert_eq!(e.eta_sec, 9);
    let e = meter.eta(2_500_000_000, &[job(true, 3 << 20, 256), job(false, 0, 0)]);
    assert_eq!(e.rate[1], 4096, "2 MiB in the last 0.5 s");
    assert_eq!(e.iops[1], 0);
    let e = meter.eta(3_000_000_000, &[job(false, 3 << 20, 256)]);
    assert_eq!((e.nr_running, e.rate, e.eta_sec), (0, [0, 0, 0], 0));
}
