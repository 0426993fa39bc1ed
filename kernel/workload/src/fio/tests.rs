//! Tests of the fio front-end: four typical fio jobs (those of `tests/fio/`), value mapping, refusals.

use super::*;
use crate::job::{FileService, RwMode};
use crate::plan::{DeviceInfo, plan_job};
use alloc::vec;

const RANDREAD: &str = include_str!("../../../../tests/fio/randread-4k-qd32-nj4.fio");
const MIXED: &str = include_str!("../../../../tests/fio/mixed-70-30.fio");
const SEQ: &str = include_str!("../../../../tests/fio/seq-128k.fio");
const VERIFY: &str = include_str!("../../../../tests/fio/write-verify.fio");

fn nvme() -> DeviceInfo {
    DeviceInfo {
        name: "nvme0n1".into(),
        sector_size: 512,
        capacity_sectors: 2048 * 256, // 256 MiB
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    }
}

fn md0() -> DeviceInfo {
    DeviceInfo {
        name: "md0".into(),
        ..nvme()
    }
}

fn one(text: &str) -> FioJob {
    let run = parse_job_file(text, &[]).unwrap();
    assert_eq!(run.jobs.len(), 1, "{text}");
    run.jobs.into_iter().next().unwrap()
}

fn refused(text: &str) -> (String, String) {
    match parse_job_file(text, &[]) {
        Err(WorkloadError::FioUnsupported { option, reason, .. }) => (option, reason),
        other => panic!("{text:?}: expected a refusal, got {other:?}"),
    }
}

#[test]
fn randread_qd32_nj4_maps_with_fio_meaning() {
    let job = one(RANDREAD);
    assert_eq!(job.name, "randread-4k-qd32");
    assert_eq!(job.numjobs, 4);
    assert_eq!(job.target, Target::Device("nvme0n1".into()));
    assert!(job.report.group_reporting);
    assert_eq!(job.spec.rw, RwMode::RandRead);
    assert_eq!(job.spec.bs, 4096);
    assert_eq!(job.spec.iodepth, 32, "libaio honours iodepth");
    assert_eq!(job.spec.runtime_ns, Some(60_000_000_000));
    assert!(job.spec.is_time_based());
    assert_eq!(job.spec.ramp_ns, 5_000_000_000);
    assert!(job.spec.random_map, "fio's random map is the default");
    assert!(job.spec.stop_on_error, "fio stops at the first error by default");
    assert!(job.warnings.is_empty(), "{:?}", job.warnings);
    let spec = job.to_spec(&[md0(), nvme()], &[0, 1, 2, 3, 4, 5]).unwrap();
    assert_eq!(spec.device.as_deref(), Some("nvme0n1"));
    assert_eq!(
        spec.cpus,
        crate::job::CpuSelection::List(CpuSet::from_cpus(&[0, 1, 2, 3]))
    );
    // Four clones, each over the whole device, each with its own stream.
    let plan = plan_job(&spec, &[md0(), nvme()], &[0, 1, 2, 3, 4, 5]).unwrap();
    assert_eq!(plan.cpus.len(), 4);
    for slice in &plan.cpus {
        assert_eq!((slice.first_block, slice.blocks), (0, (256 << 20) / 4096));
    }
    // Fewer CPUs than clones: two clones on each, by turns.
    assert_eq!(
        job.to_spec(&[nvme()], &[0, 1]).unwrap().cpus,
        crate::job::CpuSelection::Clones(alloc::vec![0, 1, 0, 1])
    );
}

#[test]
fn mixed_70_30_keeps_both_mix_keys_and_norandommap() {
    let job = one(MIXED);
    assert_eq!(job.spec.rw, RwMode::RandRw);
    assert_eq!(job.spec.rwmixread, 70);
    assert_eq!(job.spec.iodepth, 16);
    assert!(!job.spec.random_map, "norandommap");
    assert!(job.seed_from_clock, "randrepeat=0");
    // rwmixwrite after rwmixread: the later one wins, as in fio.
    let later = one("[a]\nrw=randrw\nrwmixread=70\nrwmixwrite=40\nioengine=libaio\ndirect=1\n");
    assert_eq!(later.spec.rwmixread, 60);
}

#[test]
fn seq_128k_is_two_serial_jobs_in_two_groups() {
    let run = parse_job_file(SEQ, &[]).unwrap();
    assert_eq!(run.jobs.len(), 2);
    let (read, write) = (&run.jobs[0], &run.jobs[1]);
    assert_eq!((read.spec.rw, write.spec.rw), (RwMode::Read, RwMode::Write));
    assert_eq!((read.serial_set, write.serial_set), (0, 1));
    assert_eq!((read.group, write.group), (0, 1));
    assert_eq!(read.spec.bs, 128 << 10);
    assert_eq!(read.spec.verify, VerifyMode::None, "verify=0");
    assert_eq!(read.numjobs, 1);
    let spec = read.to_spec(&[nvme()], &[0, 1, 2]).unwrap();
    assert_eq!(
        spec.cpus,
        crate::job::CpuSelection::List(CpuSet::from_cpus(&[0])),
        "numjobs=1 is one CPU, not all of them"
    );
    assert!(run.options.global_options.contains(&("bs".into(), "128k".into())));
    assert_eq!(
        write.options,
        vec![("stonewall".into(), String::new()), ("rw".into(), "write".into())]
    );
}

#[test]
fn write_verify_is_size_bound_random_map_with_verify() {
    let job = one(VERIFY);
    assert_eq!(job.spec.rw, RwMode::RandWrite);
    assert_eq!(job.spec.verify, VerifyMode::Crc32c);
    assert!(job.spec.stop_on_error, "verify_fatal");
    assert!(!job.spec.is_time_based());
    assert!(job.spec.random_map);
    let spec = job.to_spec(&[nvme()], &[0]).unwrap();
    let plan = plan_job(&spec, &[nvme()], &[0]).unwrap();
    assert_eq!(plan.verify, crate::plan::VerifyScheme::Tracked);
    // Every block once: the generator of the single clone is a permutation of the region.
    let mut generator = crate::IoGenerator::new(&plan, 0);
    let mut seen = vec![false; plan.cpus[0].blocks as usize];
    let mut count = 0;
    while let Some((op, block)) = generator.next_io() {
        assert_eq!(op, crate::IoOp::Write);
        assert!(!seen[block as usize], "block {block} twice");
        seen[block as usize] = true;
        count += 1;
    }
    assert_eq!(count, seen.len());
}

#[test]
fn runtime_without_time_based_is_a_cap() {
    let job = one("[a]\nrw=randread\nsize=8m\nruntime=30\nioengine=libaio\ndirect=1\n");
    assert!(!job.spec.is_time_based());
    assert!(job.spec.runtime_is_cap);
    let spec = job.to_spec(&[nvme()], &[0]).unwrap();
    let plan = plan_job(&spec, &[nvme()], &[0]).unwrap();
    let mut generator = crate::IoGenerator::new(&plan, 0);
    assert_eq!(
        core::iter::from_fn(|| generator.next_io()).count(),
        2048,
        "size / bs I/Os, as fio"
    );
    assert!(matches!(
        parse_job_file("[a]\ntime_based\n", &[]).unwrap_err(),
        WorkloadError::FioBadValue { option, .. } if option == "time_based"
    ));
}

#[test]
fn io_amounts_loops_number_ios_io_size() {
    let count = |text: &str| {
        let job = one(text);
        let spec = job.to_spec(&[nvme()], &[0]).unwrap();
        let plan = plan_job(&spec, &[nvme()], &[0]).unwrap();
        let mut generator = crate::IoGenerator::new(&plan, 0);
        core::iter::from_fn(|| generator.next_io()).count()
    };
    assert_eq!(count("[a]\nsize=64k\nloops=3\n"), 48);
    assert_eq!(count("[a]\nsize=64k\nnumber_ios=5\n"), 5);
    assert_eq!(count("[a]\nsize=1m\nio_size=64k\n"), 16);
    assert_eq!(count("[a]\nsize=1m\nio_size=64k\nloops=2\n"), 32);
    assert_eq!(count("[a]\nsize=10%\n"), (256 << 20) / 10 / 4096 * 4096 / 4096);
}

#[test]
fn sync_engines_and_the_default_cap_the_depth() {
    for text in [
        "[a]\niodepth=8\n",
        "[a]\nioengine=psync\niodepth=8\n",
        "[a]\nioengine=sync\niodepth=8\n",
    ] {
        let job = one(text);
        assert_eq!(job.spec.iodepth, 1, "{text}");
        assert!(
            job.warnings.iter().any(|w| w.contains("capped at 1")),
            "{:?}",
            job.warnings
        );
    }
    assert_eq!(one("[a]\nioengine=io_uring\niodepth=8\ndirect=1\n").spec.iodepth, 8);
    assert_eq!(refused("[a]\nioengine=rbd\n").0, "ioengine=rbd");
}

#[test]
fn globals_apply_below_and_later_globals_only_to_later_jobs() {
    let run = parse_job_file("[global]\nbs=8k\n[a]\n[global]\nbs=16k\n[b]\nstonewall\n", &[]).unwrap();
    assert_eq!(run.jobs[0].spec.bs, 8192);
    assert_eq!(run.jobs[1].spec.bs, 16384);
}

#[test]
fn command_line_form_parses_like_the_file() {
    let run = parse_command_line(
        "--output-format=json+ --output=res.json --ioengine=libaio --direct=1 --filename=/dev/nvme0n1 \
         --name=r --rw=randread --bs=4KiB --iodepth 32 --numjobs=2 --time_based --runtime=10s --group_reporting"
            .split_whitespace(),
        &[],
    )
    .unwrap();
    assert_eq!(run.options.output_format, OutputFormat::JsonPlus);
    assert_eq!(run.options.output.as_deref(), Some("res.json"));
    let job = &run.jobs[0];
    assert_eq!(
        (job.name.as_str(), job.spec.bs, job.spec.iodepth, job.numjobs),
        ("r", 4096, 32, 2)
    );
    assert_eq!(job.spec.runtime_ns, Some(10_000_000_000));
    assert!(job.report.group_reporting);
}

#[test]
fn overrides_apply_after_each_job() {
    let run = parse_job_file(RANDREAD, &[("runtime", "2s"), ("ramp_time", "0")]).unwrap();
    assert_eq!(run.jobs[0].spec.runtime_ns, Some(2_000_000_000));
    assert_eq!(run.jobs[0].spec.ramp_ns, 0);
}

#[test]
fn jobs_without_stonewall_share_a_wave_and_waves_follow_fio_order() {
    let waves = |text: &str| -> Vec<(String, u32, u32)> {
        parse_job_file(text, &[])
            .unwrap()
            .jobs
            .into_iter()
            .map(|j| (j.name, j.wave, j.group))
            .collect()
    };
    // fio starts a and b together; c waits for both (stonewall).
    assert_eq!(
        waves("[a]\n[b]\n[c]\nstonewall\n"),
        [("a".into(), 0, 0), ("b".into(), 0, 0), ("c".into(), 1, 1)]
    );
    // wait_for the only job of the wave: a new wave, but the same reporting group.
    assert_eq!(
        waves("[a]\n[b]\nwait_for=a\n"),
        [("a".into(), 0, 0), ("b".into(), 1, 0)]
    );
    // new_group: a reporting group, not a barrier.
    assert_eq!(waves("[a]\n[b]\nnew_group\n"), [("a".into(), 0, 0), ("b".into(), 0, 1)]);
    // wait_for one of several running jobs is refused by name.
    assert_eq!(refused("[a]\n[b]\n[c]\nwait_for=a\n").0, "wait_for");
    // wait_for a job of an earlier wave is already satisfied.
    assert_eq!(
        waves("[a]\n[b]\nstonewall\n[c]\nwait_for=a\n"),
        [("a".into(), 0, 0), ("b".into(), 1, 1), ("c".into(), 1, 1)]
    );
    assert!(matches!(
        parse_job_file("[a]\n[b]\nwait_for=zz\n", &[]).unwrap_err(),
        WorkloadError::FioBadValue { option, .. } if option == "wait_for"
    ));
    assert!(matches!(
        parse_job_file("[a]\nwait_for=b\n[b]\n", &[]).unwrap_err(),
        WorkloadError::FioBadValue { option, .. } if option == "wait_for"
    ));
}

#[test]
fn unsupported_options_are_refused_by_name() {
    for (text, option) in [
        (
            "[a]\nrandom_distribution=zipf:1.2:0.5\n",
            "random_distribution=zipf:1.2:0.5",
        ),
        ("[a]\nbssplit=4k/50:6k/50\n", "bssplit"),
        ("[a]\nbsrange=4k-8k,8k-16k\n", "bsrange"),
        ("[a]\nbs=4k,8k\nnumber_ios=10\n", "number_ios"),
        ("[a]\nbssplit=4k/50:8k/50\nrate=1m\n", "rate"),
        ("[a]\ndirectory=/mnt\n", "directory"),
        ("[a]\ntrim_percentage=10\n", "trim_percentage"),
        ("[a]\nrw=randrw:8\n", "rw=randrw:8"),
        ("[a]\nfilename=/dev/md0:/tmp/x\n", "filename=/dev/md0:/tmp/x"),
        ("[a]\nfile_service_type=zipf:1.2\n", "file_service_type=zipf:1.2"),
        ("[a]\nverify=pattern_hdr\nverify_pattern=0xff\n", "verify=pattern_hdr"),
        ("[a]\nverify=md5\nverify_pattern=0xff\n", "verify_pattern"),
        ("[a]\nverify_backlog_batch=16\n", "verify_backlog_batch"),
        ("[a]\nsync=1\n", "sync"),
        ("[a]\nwrite_barrier=4\n", "write_barrier"),
        ("[a]\nrate=1m\nrate_iops=10\n", "rate_iops"),
        ("[a]\nstartdelay=1-5\n", "startdelay"),
        ("[a]\nrw=randread\nblockalign=512\n", "blockalign"),
        ("[a]\nrw=randrw\nverify=crc32c\ndo_verify=0\n", "do_verify"),
        ("[a]\nwrite_bw_log=x\nlog_avg_msec=50\n", "log_avg_msec"),
        ("[a]\nno_such_option=1\n", "no_such_option"),
    ] {
        assert_eq!(refused(text).0, option, "{text:?}");
    }
    // fio's default log_avg_msec=0 logs every I/O: the console's rows average 500 ms instead.
    let per_io = &parse_job_file("[a]\nwrite_bw_log=x\n", &[]).unwrap().jobs[0];
    assert_eq!(per_io.report.logs.log_avg_msec, 500);
    assert!(
        per_io
            .warnings
            .iter()
            .any(|w| w.starts_with("log_avg_msec=0 (fio's default"))
    );
    // Zero flushes and bsrange with equal ends are fio's defaults in other words.
    assert!(parse_job_file("[a]\nfsync=0\nend_fsync=0\nbsrange=8k-8k\nblockalign=8k\n", &[]).is_ok());
}

#[test]
fn no_ops_are_listed_as_warnings() {
    let job =
        one("[a]\nthread\ninvalidate=1\ngtod_reduce=1\nioengine=libaio\ndirect=1\nfile_service_type=roundrobin\n");
    for key in ["thread", "invalidate", "gtod_reduce", "file_service_type"] {
        assert!(
            job.warnings.iter().any(|w| w.starts_with(key)),
            "{key}: {:?}",
            job.warnings
        );
    }
    let buffered = one("[a]\nioengine=libaio\n");
    assert!(buffered.warnings.iter().any(|w| w.contains("direct=0")));
    let file = one("[a]\nfilename=/tmp/x\nioengine=libaio\ndirect=1\n");
    assert_eq!(file.target, Target::File("/tmp/x".into()));
    assert!(file.warnings.iter().any(|w| w.contains("file")));
}

#[test]
fn devices_resolve_by_dev_path_or_the_only_device() {
    let job = one("[a]\nfilename=/dev/sdb\n");
    assert!(matches!(
        job.to_spec(&[nvme()], &[0]).unwrap_err(),
        WorkloadError::UnknownDevice { device, .. } if device == "/dev/sdb"
    ));
    let default = one("[a]\n");
    assert_eq!(
        default.to_spec(&[nvme()], &[0]).unwrap().device.as_deref(),
        Some("nvme0n1")
    );
    assert!(matches!(
        default.to_spec(&[nvme(), md0()], &[0]).unwrap_err(),
        WorkloadError::MissingDevice { .. }
    ));
}

#[test]
fn numjobs_offset_increment_and_cpus_allowed() {
    let job = one("[a]\nnumjobs=3\nsize=1m\noffset_increment=1m\ncpus_allowed=2-5\nrw=write\nverify=crc32c\n");
    let spec = job.to_spec(&[nvme()], &[0, 1, 2, 3, 4, 5]).unwrap();
    assert_eq!(spec.cpus, crate::job::CpuSelection::List(CpuSet::from_cpus(&[2, 3, 4])));
    let plan = plan_job(&spec, &[nvme()], &[0, 1, 2, 3, 4, 5]).unwrap();
    let firsts: Vec<_> = plan.cpus.iter().map(|s| (s.first_block, s.blocks)).collect();
    assert_eq!(firsts, [(0, 256), (256, 256), (512, 256)]);
    assert_eq!(plan.verify, crate::plan::VerifyScheme::SinglePass);
    // Overlapping clones that write and verify are refused.
    let overlapping = one("[a]\nnumjobs=2\nsize=1m\nrw=randwrite\nverify=crc32c\n");
    let spec = overlapping.to_spec(&[nvme()], &[0, 1]).unwrap();
    assert!(matches!(
        plan_job(&spec, &[nvme()], &[0, 1]).unwrap_err(),
        WorkloadError::ConflictingKeys {
            first: "numjobs",
            second: "verify",
            ..
        }
    ));
}

#[test]
fn run_options_from_native_words_and_readonly() {
    let (options, rest) = split_run_words(&["rw=read", "output-format=json,normal", "output=a.json", "bs=4k"]).unwrap();
    assert_eq!(rest, ["rw=read", "bs=4k"]);
    assert_eq!(options.output_format, OutputFormat::Json);
    assert!(options.normal_too);
    assert_eq!(options.output.as_deref(), Some("a.json"));
    assert!(matches!(
        split_run_words(&["output-format=xml"]).unwrap_err(),
        WorkloadError::FioBadValue { .. }
    ));
    let (option, _) = match parse_command_line(["--readonly", "--name=w", "--rw=write"], &[]) {
        Err(WorkloadError::FioUnsupported { option, reason, .. }) => (option, reason),
        other => panic!("{other:?}"),
    };
    assert_eq!(option, "readonly");
}

#[test]
fn names_with_spaces_keep_their_text() {
    let job = one("[4KiB Random Read QD=1]\ndescription=\"a job\"\n");
    assert_eq!(job.name, "4KiB Random Read QD=1");
    assert_eq!(job.spec.name, "4KiB_Random_Read_QD_1");
    assert_eq!(job.description.as_deref(), Some("a job"));
}

#[test]
fn a_wave_gets_disjoint_cpus_in_job_order() {
    let run = parse_job_file("[a]\nnumjobs=2\n[b]\n[c]\nstonewall\nnumjobs=3\n", &[]).unwrap();
    let waves = run.waves();
    assert_eq!(waves.iter().map(|w| w.len()).collect::<Vec<_>>(), [2, 1]);
    let specs = wave_specs(waves[0], &[nvme()], &[0, 1, 2, 3]).unwrap();
    assert_eq!(clone_cpus(&specs[0]), [0, 1]);
    assert_eq!(clone_cpus(&specs[1]), [2]);
    assert!(
        matches!(specs[0].cpus, crate::job::CpuSelection::List(_)),
        "one clone per CPU: a set"
    );
    // The next wave starts from the first CPU again.
    assert_eq!(
        clone_cpus(&wave_specs(waves[1], &[nvme()], &[0, 1, 2, 3]).unwrap()[0]),
        [0, 1, 2]
    );
}

/// Each clone's CPU, in clone order.
fn clone_cpus(spec: &JobSpec) -> Vec<u32> {
    match &spec.cpus {
        crate::job::CpuSelection::List(set) => set.iter().collect(),
        crate::job::CpuSelection::Clones(cpus) => cpus.clone(),
        crate::job::CpuSelection::All => panic!("fio jobs name their CPUs"),
    }
}

#[test]
fn clones_and_jobs_that_outnumber_the_cpus_share_the_least_loaded_ones() {
    // fio runs any number of clones on any number of CPUs.
    let job = one("[a]\nnumjobs=5\n");
    let spec = job.to_spec(&[nvme()], &[0, 1]).unwrap();
    assert_eq!(clone_cpus(&spec), [0, 1, 0, 1, 0]);
    let plan = crate::plan_job(&spec, &[nvme()], &[0, 1]).unwrap();
    assert_eq!(plan.cpus.iter().map(|s| s.cpu).collect::<Vec<_>>(), [0, 1, 0, 1, 0]);
    // Each clone over the whole region, as fio's clones are, however they share CPUs.
    for slice in &plan.cpus {
        assert_eq!(
            (slice.first_block, slice.blocks),
            (0, plan.region_bytes / u64::from(spec.bs))
        );
    }
    // cpus_allowed bounds where they go.
    let job = one("[a]\nnumjobs=3\ncpus_allowed=1\n");
    assert_eq!(clone_cpus(&job.to_spec(&[nvme()], &[0, 1, 2]).unwrap()), [1, 1, 1]);
    // Jobs of one wave beyond the CPUs: the later ones take the least loaded CPUs.
    let run = parse_job_file("[a]\nnumjobs=2\n[b]\n[c]\nnumjobs=2\n", &[]).unwrap();
    let specs = wave_specs(&run.jobs, &[nvme()], &[0, 1]).unwrap();
    assert_eq!(clone_cpus(&specs[0]), [0, 1]);
    assert_eq!(clone_cpus(&specs[1]), [0]);
    assert_eq!(clone_cpus(&specs[2]), [1, 0]);
    // Overlapping cpus_allowed beside another job: shared, not refused.
    let run = parse_job_file("[a]\ncpus_allowed=0\n[b]\ncpus_allowed=0-1\nnumjobs=2\n", &[]).unwrap();
    let specs = wave_specs(&run.jobs, &[nvme()], &[0, 1, 2]).unwrap();
    assert_eq!(clone_cpus(&specs[1]), [1, 0]);
}

#[test]
fn rates_think_times_and_start_delays_map_to_the_engine() {
    let job = one("[a]\nbs=4k\nrate=4m\n");
    // 4 KiB at 4 MiB/s: one I/O every 1/1024 s per direction.
    assert_eq!(job.spec.io_interval_ns, [976_563, 976_563]);
    assert_eq!(one("[a]\nrate_iops=,250\n").spec.io_interval_ns, [0, 4_000_000]);
    assert_eq!(
        one("[a]\nrate_iops=1000,\nrate_process=linear\n").spec.io_interval_ns,
        [1_000_000, 0]
    );
    let poisson = one("[a]\nrate_iops=500\nrate_process=poisson\n").spec;
    assert!(poisson.rate_poisson);
    assert_eq!(
        poisson.io_interval_ns,
        [2_000_000, 2_000_000],
        "the Poisson mean is the linear interval"
    );
    assert!(
        !one("[a]\nrate_process=poisson\nrate_process=linear\n")
            .spec
            .rate_poisson
    );
    assert!(matches!(
        parse_job_file("[a]\nrate_process=uniform\n", &[]),
        Err(WorkloadError::FioBadValue { option, .. }) if option == "rate_process"
    ));
    let think = one("[a]\nthinktime=250\nthinktime_blocks=8\n");
    assert_eq!(
        (think.spec.think_ns, think.spec.think_blocks),
        (250_000, 8),
        "bare thinktime is microseconds"
    );
    assert!(think.spec.is_paced());
    assert_eq!(one("[a]\nstartdelay=2\n").spec.start_delay_ns, 2_000_000_000);
    assert!(!one("[a]\n").spec.is_paced());
    assert!(matches!(
        parse_job_file("[a]\nthinktime=10\nthinktime_spin=20\n", &[]).unwrap_err(),
        WorkloadError::FioBadValue { option, .. } if option == "thinktime_spin"
    ));
}

#[test]
fn flush_options_map_to_the_engine() {
    assert_eq!(one("[a]\nfsync=32\n").spec.flush_every_writes, 32);
    assert_eq!(one("[a]\nfdatasync=8\n").spec.flush_every_writes, 8);
    assert!(one("[a]\nend_fsync=1\n").spec.end_flush);
    assert!(one("[a]\nfsync_on_close\n").spec.end_flush);
    assert!(
        !one("[a]\nend_fsync=1\nend_fsync=0\n").spec.end_flush,
        "the later value wins"
    );
    let none = one("[a]\nfsync=0\nend_fsync=0\n").spec;
    assert_eq!(
        (none.flush_every_writes, none.end_flush, none.is_paced()),
        (0, false, false)
    );
}

#[test]
fn values_may_be_expressions_with_the_machines_figures() {
    let env = FioEnv {
        ncpus: 4,
        mb_memory: 512,
        pagesize: 4096,
    };
    let run = parse_job_file_on(
        "[a]\nnumjobs=$ncpus\nsize=10*$mb_memory*1k\nbs=$pagesize*2\n",
        &[],
        Some(&env),
    )
    .unwrap();
    let job = &run.jobs[0];
    assert_eq!((job.numjobs, job.spec.bs), (4, 8192));
    assert_eq!(job.spec.size, Some(10 * 512 * 1024));
    // Text values are not evaluated; $ keywords without the machine's figures are refused.
    assert_eq!(
        one("[a]\ndescription=4*4 (x)\n").description.as_deref(),
        Some("4*4 (x)")
    );
    assert!(matches!(
        parse_job_file("[a]\nnumjobs=$ncpus\n", &[]).unwrap_err(),
        WorkloadError::FioBadValue { option, .. } if option == "numjobs"
    ));
    assert!(matches!(
        parse_job_file_on("[a]\nsize=2*(3\n", &[], Some(&env)).unwrap_err(),
        WorkloadError::FioBadValue { option, .. } if option == "size"
    ));
}

#[test]
fn exitall_on_error_across_a_wave_and_empty_files_are_refused() {
    assert_eq!(
        refused("[global]\nexitall_on_error=1\n[a]\n[b]\n").0,
        "exitall_on_error"
    );
    // One job per wave: nothing else to stop.
    assert!(parse_job_file("[a]\nexitall\n[b]\nstonewall\n", &[]).is_ok());
    assert!(parse_job_file("[a]\nexitall=0\n[b]\n", &[]).is_ok());
    assert!(matches!(
        parse_job_file("[global]\nbs=4k\n", &[]).unwrap_err(),
        WorkloadError::FioSyntax { .. }
    ));
}

#[test]
fn skewed_distributions() {
    use crate::skew::Skew;
    let zipf = one("[a]\nrw=randread\nrandom_distribution=zipf:1.2\n");
    assert_eq!(zipf.spec.skew, Some(Skew::Zipf { theta_milli: 1200 }));
    assert!(zipf.spec.zones.is_empty());
    assert!(
        zipf.warnings
            .iter()
            .any(|w| w.contains("random_distribution=zipf:1.200") && w.contains("no random map")),
        "{:?}",
        zipf.warnings
    );
    assert!(zipf.to_spec(&[nvme()], &[0]).is_ok());
    let quiet = one("[a]\nrw=randread\nnorandommap\nrandom_distribution=pareto:0.2\n");
    assert_eq!(quiet.spec.skew, Some(Skew::Pareto { h_milli: 200 }));
    assert!(!quiet.warnings.iter().any(|w| w.contains("pareto")));
    assert_eq!(
        one("[a]\nrandom_distribution=normal\n").spec.skew,
        Some(Skew::Normal { dev_milli: 0 })
    );
    assert_eq!(
        one("[a]\nrandom_distribution=gauss:5.5\n").spec.skew,
        Some(Skew::Normal { dev_milli: 5500 })
    );
    // The last setting wins: back to uniform.
    let back = one("[a]\nrandom_distribution=zipf:1.2\nrandom_distribution=random\n");
    assert_eq!(back.spec.skew, None);
    for bad in [
        "zipf",
        "zipf:0",
        "zipf:x",
        "zipf:1.2345",
        "pareto:1",
        "pareto:0",
        "normal:101",
        "lognormal:1",
    ] {
        assert_bad_distribution(bad);
    }
}

/// `random_distribution=bad` is refused as a bad value.
fn assert_bad_distribution(bad: &str) {
    assert!(
        matches!(
            parse_job_file(&alloc::format!("[a]\nrandom_distribution={bad}\n"), &[]).unwrap_err(),
            WorkloadError::FioBadValue { .. }
        ),
        "{bad}"
    );
}

#[test]
fn zoned_distributions() {
    use crate::job::{AccessZone, ZoneLength};
    let job = one("[a]\nrw=randread\nrandom_distribution=zoned:60/10:30/20:10/70\n");
    assert_eq!(
        job.spec.zones,
        [
            AccessZone {
                access_percent: 60,
                length: ZoneLength::Percent(10)
            },
            AccessZone {
                access_percent: 30,
                length: ZoneLength::Percent(20)
            },
            AccessZone {
                access_percent: 10,
                length: ZoneLength::Percent(70)
            },
        ]
    );
    assert!(job.warnings.iter().any(|w| w.contains("zoned")));
    let abs = one("[a]\nrw=randread\nnorandommap\nrandom_distribution=zoned_abs:60/1m:40/3m\n");
    assert_eq!(abs.spec.zones[1].length, ZoneLength::Bytes(3 << 20));
    assert!(abs.to_spec(&[nvme()], &[0]).is_ok());
    let too_big = one("[a]\nsize=2m\nrandom_distribution=zoned_abs:60/1m:40/3m\n");
    assert!(matches!(
        too_big.to_spec(&[nvme()], &[0]).unwrap_err(),
        WorkloadError::FioBadValue { option, .. } if option == "random_distribution"
    ));
    // fio 3.33's examples/rand-zones.fio: the empty region takes what the others leave (80%).
    let rest = one("[a]\nrw=randread\nrandom_distribution=zoned:50/5:30/15:20/\n");
    let lengths: Vec<_> = rest.spec.zones.iter().map(|z| (z.access_percent, z.length)).collect();
    assert_eq!(
        lengths,
        [
            (50, ZoneLength::Percent(5)),
            (30, ZoneLength::Percent(15)),
            (20, ZoneLength::Percent(80))
        ]
    );
    // Regions adding up to less than 100: fio leaves the rest of the region alone.
    let part = one("[a]\nrw=randread\nrandom_distribution=zoned:50/10:50/10\n");
    assert_eq!(part.spec.zones[1].length, ZoneLength::Percent(10));
    // Two empty regions share the whole region.
    let halves = one("[a]\nrw=randread\nrandom_distribution=zoned:50/:50/\n");
    assert_eq!(halves.spec.zones[0].length, ZoneLength::Percent(50));
    for bad in [
        "zoned:60/60:40/50",
        "zoned:60/10:30/20",
        "zoned:60/50:30/50",
        "zoned:x/10",
        "zoned:r:60/10,w:100/100",
        "zoned_abs:50/1m",
    ] {
        assert_bad_distribution(bad);
    }
}

#[test]
fn boot_modules_are_job_files_by_string_or_first_line() {
    assert!(is_job_file_module("/work/tests/fio/seq-128k.fio fio", b""));
    assert!(is_job_file_module("fio", b"anything"));
    assert!(is_job_file_module("/boot/JOB.FIO", b""));
    assert!(
        !is_job_file_module("/boot/initrd.img", b"[a]\n"),
        "a string that says otherwise wins"
    );
    assert!(!is_job_file_module("x.fio.bak", b""));
    assert!(is_job_file_module("", b"; comment\n\n  # more\n[global]\nbs=4k\n"));
    assert!(!is_job_file_module("", b"\x7fELF..."));
    assert!(!is_job_file_module("", b""));
}

#[test]
fn verify_pattern_takes_fio_forms_and_means_verify_pattern() {
    // Alone it turns verify on with a header (fio 3.33's VERIFY_PATTERN); verify=pattern is the
    // plain pattern (VERIFY_PATTERN_NO_HDR).
    let job = one("[a]\nrw=randwrite\nbs=4k\nverify_pattern=0xdeadbeef\n");
    assert_eq!(job.spec.verify, VerifyMode::FioPatternHeader);
    assert_eq!(job.spec.verify_pattern, [0xde, 0xad, 0xbe, 0xef]);
    assert!(job.warnings.iter().all(|w| !w.contains("verify")), "{:?}", job.warnings);
    let job = one("[a]\nrw=write\nverify=pattern\nverify_pattern=\"baremq\"66\n");
    assert_eq!(job.spec.verify, VerifyMode::FioPattern);
    assert_eq!(job.spec.verify_pattern, b"baremqB");
    assert_eq!(
        one("[a]\nrw=write\nverify_pattern=-1024\n").spec.verify_pattern,
        [0, 0xfc, 0xff, 0xff]
    );
    // verify=0 keeps verify off; the pattern is dropped.
    let off = one("[a]\nrw=write\nverify=0\nverify_pattern=0xff\n");
    assert_eq!(off.spec.verify, VerifyMode::None);
    assert!(off.spec.verify_pattern.is_empty());
    // verify=pattern needs the bytes; bad patterns say what was wrong.
    assert!(matches!(
        parse_job_file("[a]\nrw=write\nverify=pattern\n", &[]),
        Err(WorkloadError::FioBadValue { option, .. }) if option == "verify"
    ));
    for bad in ["%o", "'f'", "0xgg", "\"open"] {
        let text = alloc::format!("[a]\nrw=write\nverify_pattern={bad}\n");
        match parse_job_file(&text, &[]) {
            Err(WorkloadError::FioBadValue { option, expected, .. }) => {
                assert_eq!(option, "verify_pattern");
                assert!(expected.contains('('), "{bad}: {expected}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn block_size_grammar_follows_fio() {
    use crate::job::{BlockSizeMix, SizeChoice};
    let fixed = |units, percent| SizeChoice {
        min_units: units,
        max_units: units,
        percent,
    };
    // fio's HOWTO example of `bssplit`: sorted by ascending share (fio's lookup order), unit the smallest size,
    // the same list for both directions.
    let job = one("[a]\nbssplit=4k/10:64k/50:32k/40\n");
    assert_eq!(job.spec.bs, 4096);
    let both = vec![fixed(1, 10), fixed(8, 40), fixed(16, 50)];
    assert_eq!(
        job.spec.bs_mix,
        Some(BlockSizeMix {
            directions: [both.clone(), both]
        })
    );
    // Blank (or zero) shares split what the others leave, by integer division as fio does.
    let job = one("[a]\nbssplit=8k/40:16k:32k/0\n");
    assert_eq!(job.spec.bs, 8192);
    assert_eq!(
        job.spec.bs_mix.unwrap().directions[0],
        vec![fixed(2, 30), fixed(4, 30), fixed(1, 40)]
    );
    // One blank entry alone takes everything: a fixed size, not a mix.
    let job = one("[a]\nbssplit=16k\n");
    assert_eq!((job.spec.bs, job.spec.bs_mix), (16384, None));
    // Per direction: read list, write list (a trim list is checked and has nothing to apply to).
    let job = one("[a]\nrw=randrw\nbssplit=4k/50:8k/50,64k,4k\n");
    let mix = job.spec.bs_mix.unwrap();
    assert_eq!(mix.directions, [vec![fixed(1, 50), fixed(2, 50)], vec![fixed(16, 100)]]);
    assert_eq!(mix.max_units(), 16);
    // bsrange: a uniform draw of whole units from the minimum; it takes over bs, bssplit over both.
    let job = one("[a]\nbs=8k\nbsrange=4k-64k\n");
    let range = SizeChoice {
        min_units: 1,
        max_units: 16,
        percent: 100,
    };
    assert_eq!(
        (job.spec.bs, job.spec.bs_mix.unwrap().directions[1].clone()),
        (4096, vec![range])
    );
    let job = one("[a]\nbssplit=4k/50:8k/50\nbsrange=4k-64k\n");
    assert_eq!(job.spec.bs_mix.unwrap().max_units(), 2);
    // Reversed ends are swapped, as fio does; equal ends are one size.
    assert_eq!(one("[a]\nbsrange=16k-4k\n").spec.bs_mix.unwrap().max_units(), 4);
    // bs=R,W: each direction its own size; ",W" leaves reads at fio's 4k default.
    let job = one("[a]\nrw=randrw\nbs=4k,16k\n");
    assert_eq!(
        job.spec.bs_mix.unwrap().directions,
        [vec![fixed(1, 100)], vec![fixed(4, 100)]]
    );
    let job = one("[a]\nbs=,8k\n");
    assert_eq!(
        job.spec.bs_mix.unwrap().directions,
        [vec![fixed(1, 100)], vec![fixed(2, 100)]]
    );
    assert_eq!(one("[a]\nbs=8k,8k,8k\n").spec.bs_mix, None);
    // blockalign is the unit (offsets are multiples of it) or a whole multiple of it.
    assert!(parse_job_file("[a]\nbssplit=4k/50:8k/50\nblockalign=4k\n", &[]).is_ok());
    assert!(parse_job_file("[a]\nrw=randread\nbssplit=4k/50:8k/50\nblockalign=16k\n", &[]).is_ok());
    // Bad values name the option and the form.
    for (text, option) in [
        ("[a]\nbssplit=4k/60:8k/50\n", "bssplit"),
        ("[a]\nbssplit=4k/x\n", "bssplit"),
        ("[a]\nbssplit=\n", "bssplit"),
        ("[a]\nbssplit=4q/50:8k/50\n", "bssplit"),
        ("[a]\nbsrange=4k\n", "bsrange"),
        ("[a]\nbs=4k,0\n", "bs"),
    ] {
        assert!(
            matches!(parse_job_file(text, &[]).unwrap_err(), WorkloadError::FioBadValue { option: o, .. } if o == option),
            "{text:?}"
        );
    }
}

#[test]
fn a_size_draw_walks_the_shares_in_order() {
    let job = one("[a]\nbssplit=4k/10:64k/50:32k/40\n");
    let mix = job.spec.bs_mix.unwrap();
    // Cumulative shares 10 (4k), 50 (32k), 100 (64k).
    assert_eq!(
        [0, 9, 10, 49, 50, 99].map(|p| mix.draw_units(0, p, 0)),
        [1, 1, 8, 8, 16, 16]
    );
    // Shares adding up to less than 100 leave the rest to the last entry, as fio's lookup does.
    let mix = one("[a]\nbssplit=4k/10:8k/20\n").spec.bs_mix.unwrap();
    assert_eq!(mix.draw_units(1, 95, 0), 2);
    let range = one("[a]\nbsrange=4k-16k\n").spec.bs_mix.unwrap();
    assert_eq!([0, 1, 2, 3, 4].map(|r| range.draw_units(0, 0, r)), [1, 2, 3, 4, 1]);
}

#[test]
fn a_device_list_is_one_job_over_its_devices() {
    let job = one("[a]\nfilename=/dev/nvme0n1:/dev/md0\n");
    assert_eq!(job.target, Target::Devices(vec!["nvme0n1".into(), "md0".into()]));
    assert_eq!(job.spec.file_service, FileService::RoundRobin(1), "fio's default");
    // fio's escaped colon is part of one name, not a list.
    assert_eq!(one("[a]\nfilename=/dev/a\\:b\n").target, Target::Device("a:b".into()));
    assert_eq!(
        one("[a]\nfilename=/dev/x\\:1:/dev/y\n").target,
        Target::Devices(vec!["x:1".into(), "y".into()])
    );
    // A list names devices: baremq has no file system for paths.
    let (option, reason) = refused("[a]\nfilename=/dev/md0:data.bin\n");
    assert_eq!(option, "filename=/dev/md0:data.bin");
    assert!(
        reason.contains("\"data.bin\" in a file list is not a device"),
        "{reason}"
    );
}

#[test]
fn file_service_type_takes_fio_forms() {
    let service = |value: &str| {
        one(&format!("[a]\nfilename=/dev/a:/dev/b\nfile_service_type={value}\n"))
            .spec
            .file_service
    };
    assert_eq!(service("roundrobin"), FileService::RoundRobin(1));
    assert_eq!(service("roundrobin:4"), FileService::RoundRobin(4));
    assert_eq!(service("sequential"), FileService::Sequential);
    assert_eq!(service("random"), FileService::Random(1));
    assert_eq!(service("random:8"), FileService::Random(8));
    for bad in ["roundrobin:0", "random:x", "circular"] {
        let err = parse_job_file(&format!("[a]\nfile_service_type={bad}\n"), &[]).unwrap_err();
        assert!(
            matches!(&err, WorkloadError::FioBadValue { option, .. } if option == "file_service_type"),
            "{bad}: {err:?}"
        );
    }
    for skewed in ["zipf", "pareto:0.3", "normal", "gauss"] {
        let (option, reason) = refused(&format!("[a]\nfile_service_type={skewed}\n"));
        assert_eq!(option, format!("file_service_type={skewed}"));
        assert!(reason.contains("skewed file choice is not implemented"), "{reason}");
    }
    // With one device there is nothing to switch between: accepted, and said so.
    let single = one("[a]\nfilename=/dev/md0\nfile_service_type=random\n");
    assert!(
        single.warnings.iter().any(|w| w.contains("no file to switch to")),
        "{:?}",
        single.warnings
    );
}

fn nvme1() -> DeviceInfo {
    DeviceInfo {
        name: "nvme1n1".into(),
        capacity_sectors: 2048 * 128, // 128 MiB
        ..nvme()
    }
}

#[test]
fn files_get_fio_regions() {
    let devices = [nvme(), nvme1()];
    let files = |text: &str| {
        let spec = one(text).to_spec(&devices, &[0, 1]).unwrap();
        spec.files
            .iter()
            .map(|f| (f.device.clone(), f.offset, f.size))
            .collect::<Vec<_>>()
    };
    let list = "[a]\nfilename=/dev/nvme0n1:/dev/nvme1n1\n";
    // size is the job's, split between its files (fio's setup_files: size / nr_files each).
    assert_eq!(
        files(&format!("{list}size=64m\n")),
        [("nvme0n1".into(), 0, 32 << 20), ("nvme1n1".into(), 0, 32 << 20)]
    );
    // filesize is each file's (fio's file_size_low), not split.
    assert_eq!(
        files(&format!("{list}filesize=16m\n")),
        [("nvme0n1".into(), 0, 16 << 20), ("nvme1n1".into(), 0, 16 << 20)]
    );
    // No size: each file from the offset to its end.
    assert_eq!(
        files(&format!("{list}offset=1m\n")),
        [
            ("nvme0n1".into(), 1 << 20, 255 << 20),
            ("nvme1n1".into(), 1 << 20, 127 << 20)
        ]
    );
    // Percentages are of each device.
    assert_eq!(
        files(&format!("{list}offset=50%\nsize=10%\n")),
        [
            // offset: capacity / 100 * 50 rounded down to bs, as for one device; size: 10% of
            // what lies past it.
            (
                "nvme0n1".into(),
                134_213_632,
                (268_435_456 - 134_213_632) / 100 * 10 / 4096 * 4096
            ),
            (
                "nvme1n1".into(),
                67_104_768,
                (134_217_728 - 67_104_768) / 100 * 10 / 4096 * 4096
            )
        ]
    );
    // A size-bound job does one I/O per block of all its files; io_size and loops count for
    // the whole job.
    let spec = one(&format!("{list}size=64m\nloops=2\n"))
        .to_spec(&devices, &[0])
        .unwrap();
    assert_eq!(spec.ios_per_cpu, Some(2 * 16384));
    let spec = one(&format!("{list}size=64m\nio_size=8m\n"))
        .to_spec(&devices, &[0])
        .unwrap();
    assert_eq!(spec.ios_per_cpu, Some(2048));
    // A share that is no whole number of blocks is refused, naming the split.
    let err = one(&format!("{list}size=12k\n")).to_spec(&devices, &[0]).unwrap_err();
    assert!(
        matches!(&err, WorkloadError::FioBadValue { option, expected, .. }
            if option == "size" && expected.contains("a multiple of 8192 (2 x bs 4096)")),
        "{err:?}"
    );
    let err = one("[a]\nfilename=/dev/nvme0n1:/dev/sdz\n")
        .to_spec(&devices, &[0])
        .unwrap_err();
    assert!(
        matches!(&err, WorkloadError::UnknownDevice { device, .. } if device == "/dev/sdz"),
        "{err:?}"
    );
}

#[test]
fn exitall_in_a_wave_stops_the_jobs_its_exit_what_names() {
    // Wave 0: slow (group 0, exit_what=stonewall) beside fast (its own group); wave 1: a, b, c
    // in one group, a with exit_what=all, b with the default (group); d (group 2) is later.
    let text = "[global]\nexitall\nsize=1m\n[slow]\nexit_what=stonewall\n[fast]\nnew_group\n\
                [a]\nstonewall\nnew_group\nexit_what=all\n[b]\n[c]\nexit_what=group\n[d]\nstonewall\nnew_group\n";
    let run = parse_job_file(text, &[]).unwrap();
    let stops = |name: &str| {
        let job = run.jobs.iter().find(|j| j.name == name).unwrap();
        assert!(job.spec.exitall, "{name}");
        job.spec.exitall_stops.clone()
    };
    assert_eq!(stops("slow"), [1], "stonewall: every job running beside it");
    assert_eq!(
        stops("fast"),
        Vec::<u32>::new(),
        "group: none of its group runs beside it"
    );
    assert_eq!(stops("a"), [1, 2]);
    assert_eq!(stops("b"), [0, 2], "its group: a and c");
    assert_eq!(stops("c"), [0, 1]);
    // a's exit_what=all keeps every later job from starting (fio), d included.
    assert!(run.jobs.iter().all(|j| j.name != "d"));
    assert!(
        run.notes.iter().any(|n| n.contains("\"d\" does not run")),
        "{:?}",
        run.notes
    );
    // exitall_on_error across a wave stays refused by name.
    let error = parse_job_file("[a]\nexitall_on_error\n[b]\n", &[]).unwrap_err();
    assert!(error.to_string().contains("exitall_on_error"), "{error}");
}

#[test]
fn verify_dump_is_accepted_with_a_line_saying_what_the_report_gives_instead() {
    let job = one("[v]\nrw=write\nverify=crc32c\nverify_dump=1\n");
    assert!(
        job.warnings.iter().any(|w| w.starts_with("verify_dump: accepted")),
        "{:?}",
        job.warnings
    );
    assert!(
        !one("[v]\nverify_dump=0\n")
            .warnings
            .iter()
            .any(|w| w.contains("verify_dump"))
    );
}
