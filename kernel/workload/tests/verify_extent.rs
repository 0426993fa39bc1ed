//! The verify pass reads exactly what the job wrote: every block it reads was written by a
//! completed write of the job, and every block a completed write left is read back once. Jobs of
//! every shape (direction, block sizes, size, offset, a runtime cap anywhere, loops, `io_size`,
//! numjobs clones, `verify_backlog`, several devices) go through the fio front-end and the engine
//! against the fake backend, on a disk that already holds other jobs' blocks (other seeds and
//! generations, torn headers, noise). The engine never waits with nothing in flight: a stall
//! would end the run with an error (the stall timeout is short here), and the engine's own check
//! of that invariant is a debug assertion these tests run with.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{FakeBackend, FakeDisk, Fault, Order, SECTOR};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use workload::fio::parse_job_file;
use workload::rng::Rng;
use workload::verify::{BlockStamp, HEADER_LEN, stamp_block};
use workload::{
    Completion, CpuResult, DeviceInfo, IoBackend, IoError, IoOp, JobPlan, JobReport, JobShared, SubmitError,
    VerifyMode, VerifyScheme, WorkloadError, plan_job, run_cpu,
};

/// Each device the jobs may use: 4 MiB.
const DEVICE_SECTORS: u64 = 8 * 1024;
/// The fake disk holds every device's joined address space with room to spare.
const DISK_SECTORS: u64 = 4 * DEVICE_SECTORS;
/// A short stall timeout: a job that waits with nothing in flight fails fast.
const STALL_TIMEOUT_NS: u64 = 20_000_000;

fn device(name: &str) -> DeviceInfo {
    DeviceInfo {
        name: name.into(),
        sector_size: SECTOR,
        capacity_sectors: DEVICE_SECTORS,
        max_iodepth: 64,
        max_transfer_bytes: 1 << 20,
    }
}

fn devices() -> Vec<DeviceInfo> {
    vec![device("md0"), device("md1")]
}

/// The first job of `text`, planned through the fio front-end on [`devices`] for `cpus` CPUs.
fn plan_fio(text: &str, cpus: u32) -> Result<JobPlan, WorkloadError> {
    let online: Vec<u32> = (0..cpus).collect();
    let run = parse_job_file(text, &[]).expect("the job file parses");
    let mut spec = run.jobs[0].to_spec(&devices(), &online)?;
    spec.io_timeout_ns = STALL_TIMEOUT_NS;
    plan_job(&spec, &devices(), &online)
}

/// What lies on the disk before the job: zeros, or other jobs' leftovers.
#[derive(Debug, Clone, Copy)]
enum Prior {
    Zeros,
    /// Every block stamped by a job of another seed, at random generations; some headers torn
    /// (half written), some blocks noise.
    Leftovers(u64),
}

/// `job_seed`: the seed of the job about to run (an earlier run of the same job file left them).
fn fill_prior(disk: &FakeDisk, prior: Prior, job_seed: u64) {
    let Prior::Leftovers(seed) = prior else { return };
    let mut rng = Rng::new(seed);
    let mut bytes = disk.bytes.lock().unwrap();
    let block = 4096usize;
    for (index, chunk) in bytes.chunks_exact_mut(block).enumerate() {
        let lba = (index * block / SECTOR as usize) as u64;
        match rng.below(5) {
            0 => {}
            1 => chunk.iter_mut().for_each(|b| *b = rng.below(256) as u8),
            kind => {
                let stamp = BlockStamp {
                    lba,
                    // Sometimes the job's own seed, from an earlier run of the same job file.
                    seed: if kind == 2 { job_seed } else { seed },
                    generation: 1 + rng.below(4) as u32,
                };
                stamp_block(VerifyMode::Crc32c, &[], &stamp, chunk);
                if kind == 4 {
                    // A torn header: the first half of a newer write, the rest old.
                    chunk[HEADER_LEN / 2..HEADER_LEN].fill(0xa5);
                }
            }
        }
    }
}

/// How the fake device behaves in one case.
#[derive(Debug, Clone, Copy)]
struct Device {
    latency_ns: u64,
    jitter_ns: u64,
    shuffled: bool,
    busy_every: u64,
    /// Writes to the job's first block fail (the verify pass must not read it).
    first_write_fails: bool,
}

impl Device {
    /// Every I/O takes `latency_ns`, in order, never refused, never failed.
    fn steady(latency_ns: u64) -> Self {
        Self {
            latency_ns,
            jitter_ns: 0,
            shuffled: false,
            busy_every: 0,
            first_write_fails: false,
        }
    }
}

struct Outcome {
    results: Vec<Result<CpuResult, WorkloadError>>,
    backends: Vec<FakeBackend>,
}

fn run(plan: &JobPlan, prior: Prior, dev: Device) -> Outcome {
    let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
    fill_prior(&disk, prior, plan.spec.seed);
    let shared = JobShared::new(plan);
    let first_lba = plan.region_start_sector();
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.cpus.len())
            .map(|index| {
                let (shared, disk) = (&shared, &disk);
                scope.spawn(move || {
                    let mut backend = FakeBackend::new(disk, plan.iodepth as usize, plan.max_io_bytes() as usize);
                    backend.latency_ns = dev.latency_ns;
                    backend.jitter_ns = dev.jitter_ns;
                    backend.busy_every = dev.busy_every;
                    backend.forbid_same_lba_in_flight = true;
                    if dev.shuffled {
                        backend.order = Order::Shuffled;
                    }
                    if dev.first_write_fails {
                        backend.faults.push(Fault::FailOnCompletion {
                            lba: first_lba,
                            op: IoOp::Write,
                            error: IoError::Timeout,
                        });
                    }
                    let result = run_cpu(plan, index, &mut backend, shared);
                    (result, backend)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (results, backends) = outcomes.into_iter().unzip();
    Outcome { results, backends }
}

/// Checks one CPU: the verify pass read each block a completed write left exactly once, and
/// nothing else; nothing was reported corrupt.
fn check_cpu(plan: &JobPlan, result: &CpuResult, backend: &FakeBackend, dev: Device) -> Result<(), String> {
    let spb = u64::from(plan.sectors_per_block);
    let failed_lba = dev.first_write_fails.then(|| plan.region_start_sector());
    // The submissions in order; the verify pass's reads are the last `pass_reads` of them.
    let log: Vec<(IoOp, u64, u32)> = backend
        .submit_log
        .iter()
        .zip(&backend.submit_sectors)
        .map(|(&(op, lba), &sectors)| (op, lba, sectors))
        .collect();
    let pass_reads = result.verify.pass_reads as usize;
    if pass_reads > log.len() {
        return Err(format!("{pass_reads} pass reads but {} submissions", log.len()));
    }
    let (main, pass) = log.split_at(log.len() - pass_reads);
    // Every block whose last write completed, by its first sector; a failed write makes its
    // block's content unknown, which the pass must not read.
    let mut written: BTreeMap<u64, bool> = BTreeMap::new();
    for &(op, lba, sectors) in main {
        if op == IoOp::Write {
            for unit in 0..u64::from(sectors) / spb {
                let block = lba + unit * spb;
                written.insert(block, Some(lba) != failed_lba);
            }
        }
    }
    let expected: BTreeSet<u64> = written.iter().filter(|(_, ok)| **ok).map(|(lba, _)| *lba).collect();
    let mut read = BTreeSet::new();
    for &(op, lba, sectors) in pass {
        if op != IoOp::Read || u64::from(sectors) != spb {
            return Err(format!(
                "the verify pass issued {op:?} of {sectors} sectors at LBA {lba}"
            ));
        }
        if !read.insert(lba) {
            return Err(format!("the verify pass read LBA {lba} twice"));
        }
    }
    if let Some(extra) = read.difference(&expected).next() {
        return Err(format!(
            "the verify pass read LBA {extra}, which no completed write of the job left ({} pass reads, {} blocks written)",
            read.len(),
            expected.len()
        ));
    }
    if let Some(missed) = expected.difference(&read).next() {
        return Err(format!(
            "the verify pass did not read LBA {missed}, which the job wrote"
        ));
    }
    if result.verify.mismatches != 0 {
        return Err(format!(
            "{} mismatches: {:?}",
            result.verify.mismatches, result.verify.first_mismatch
        ));
    }
    Ok(())
}

/// One job shape.
#[derive(Debug, Clone)]
struct Shape {
    rw: &'static str,
    bs_kib: u64,
    /// `bssplit` of 4k and 8k (sequential writes only).
    mixed_sizes: bool,
    size_blocks: u64,
    offset_blocks: u64,
    iodepth: u32,
    runtime_us: Option<u64>,
    loops: u32,
    /// `io_size` as a percentage of `size` (sequential writes: at most 100).
    io_size_percent: Option<u64>,
    numjobs: u32,
    backlog: u32,
    two_devices: bool,
}

impl Shape {
    fn job_file(&self) -> String {
        let bs = self.bs_kib * 1024;
        let size = self.size_blocks * bs;
        let mut text = format!(
            "[j]\nrw={}\nbs={}\nsize={}\noffset={}\niodepth={}\nverify=crc32c\ndo_verify=1\n",
            self.rw,
            bs,
            size,
            self.offset_blocks * bs,
            self.iodepth
        );
        text += if self.two_devices {
            "filename=/dev/md0:/dev/md1\n"
        } else {
            "filename=/dev/md0\n"
        };
        if self.mixed_sizes {
            text += "bssplit=4k/50:8k/50\n";
        }
        if let Some(us) = self.runtime_us {
            text += &format!("runtime={us}us\n");
        }
        if self.loops > 1 {
            text += &format!("loops={}\n", self.loops);
        }
        if let Some(percent) = self.io_size_percent {
            text += &format!("io_size={}\n", (size * percent / 100).max(bs) / bs * bs);
        }
        if self.numjobs > 1 {
            text += &format!("numjobs={}\noffset_increment={size}\n", self.numjobs);
        }
        if self.backlog > 0 {
            text += &format!("verify_backlog={}\n", self.backlog);
        }
        text
    }
}

fn shapes() -> impl Strategy<Value = Shape> {
    (
        prop::sample::select(vec!["write", "randwrite", "readwrite", "randrw"]),
        prop::sample::select(vec![4u64, 8]),
        any::<bool>(),
        (8u64..=160, 0u64..=24, 1u32..=8),
        prop::option::of(20u64..=8_000),
        (1u32..=3, prop::option::of(10u64..=100)),
        (1u32..=3, prop::sample::select(vec![0u32, 1, 4, 32]), any::<bool>()),
    )
        .prop_map(
            |(
                rw,
                bs_kib,
                mixed,
                (size_blocks, offset_blocks, iodepth),
                runtime_us,
                (loops, io_size),
                (numjobs, backlog, two),
            )| {
                let sequential_write = rw == "write";
                let mixed_sizes = mixed && sequential_write && bs_kib == 4 && backlog == 0;
                let two_devices = two && !mixed_sizes;
                Shape {
                    rw,
                    bs_kib,
                    mixed_sizes,
                    // fio splits `size` evenly between the files.
                    size_blocks: if two_devices {
                        size_blocks.next_multiple_of(2)
                    } else {
                        size_blocks
                    },
                    offset_blocks,
                    iodepth,
                    runtime_us,
                    // Variable sizes verify a single write pass only.
                    loops: if mixed_sizes { 1 } else { loops },
                    io_size_percent: io_size,
                    numjobs,
                    backlog,
                    two_devices,
                }
            },
        )
}

fn devices_of() -> impl Strategy<Value = Device> {
    (
        prop::sample::select(vec![2_000u64, 20_000, 100_000]),
        prop::sample::select(vec![0u64, 50_000]),
        any::<bool>(),
        prop::sample::select(vec![0u64, 7]),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(latency_ns, jitter_ns, shuffled, busy_every, first_write_fails)| Device {
                latency_ns,
                jitter_ns,
                shuffled,
                busy_every,
                first_write_fails,
            },
        )
}

fn priors() -> impl Strategy<Value = Prior> {
    prop_oneof![Just(Prior::Zeros), any::<u64>().prop_map(Prior::Leftovers)]
}

/// Runs `shape` and checks every CPU; a shape the planner refuses is skipped (`Ok(false)`).
fn check_shape(shape: &Shape, prior: Prior, dev: Device) -> Result<bool, String> {
    let mut text = shape.job_file();
    if dev.first_write_fails {
        // fio stops a job at its first error, and a stopped job has no verify pass.
        text += "continue_on_error=all\n";
    }
    let plan = match plan_fio(&text, shape.numjobs) {
        Ok(plan) => plan,
        Err(_) => return Ok(false),
    };
    if !plan.verify.has_verify_pass() {
        return Err(format!(
            "a writing verify job planned without a verify pass: {:?}",
            plan.verify
        ));
    }
    let outcome = run(&plan, prior, dev);
    let mut results = Vec::new();
    for (index, (result, backend)) in outcome.results.iter().zip(&outcome.backends).enumerate() {
        let result = result.as_ref().map_err(|e| format!("cpu{index}: {e}\n{text}"))?;
        if result.verify.pass_skipped {
            return Err(format!("cpu{index}: verify pass skipped\n{text}"));
        }
        check_cpu(&plan, result, backend, dev).map_err(|e| format!("cpu{index}: {e}\n{text}"))?;
        results.push(result.clone());
    }
    let report = JobReport::new(&plan, &results).map_err(|e| e.to_string())?;
    if report.verify.mismatches != 0 {
        return Err(format!(
            "the report counts {} mismatches\n{text}",
            report.verify.mismatches
        ));
    }
    Ok(true)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn the_verify_pass_reads_exactly_the_completed_writes(shape in shapes(), prior in priors(), dev in devices_of()) {
        check_shape(&shape, prior, dev).map_err(TestCaseError::fail)?;
    }
}

/// The planner takes most generated shapes: the property is not vacuous.
#[test]
fn most_generated_shapes_are_planned_and_run() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (shapes(), priors(), devices_of());
    let mut ran = 0;
    let mut single_pass = 0;
    let total = 200;
    for _ in 0..total {
        let (shape, prior, dev) = strategy.new_tree(&mut runner).unwrap().current();
        if plan_fio(&shape.job_file(), shape.numjobs).is_ok_and(|p| p.verify == VerifyScheme::SinglePass) {
            single_pass += 1;
        }
        if check_shape(&shape, prior, dev).unwrap() {
            ran += 1;
        }
    }
    assert!(ran * 10 >= total * 9, "only {ran} of {total} shapes were planned");
    assert!(
        single_pass * 10 >= total,
        "only {single_pass} of {total} shapes were a single write pass"
    );
}

/// fio's own job as the report found it: a sequential write capped by its runtime reads back
/// the blocks it wrote and not the one after them.
#[test]
fn a_runtime_capped_sequential_write_verifies_what_it_wrote() {
    let shape = Shape {
        rw: "write",
        bs_kib: 4,
        mixed_sizes: false,
        size_blocks: 160,
        offset_blocks: 0,
        iodepth: 1,
        // 160 writes at 20 us take 3.2 ms: the cap ends the job a third of the way.
        runtime_us: Some(1_000),
        loops: 1,
        io_size_percent: None,
        numjobs: 1,
        backlog: 0,
        two_devices: false,
    };
    let dev = Device::steady(20_000);
    let plan = plan_fio(&shape.job_file(), 1).unwrap();
    assert_eq!(plan.verify, VerifyScheme::SinglePass);
    let outcome = run(&plan, Prior::Zeros, dev);
    let result = outcome.results[0].as_ref().unwrap();
    assert!((20..100).contains(&result.write.ios), "{} writes", result.write.ios);
    assert_eq!(result.verify.pass_reads, result.write.ios);
    assert_eq!((result.verify.checked, result.verify.mismatches), (result.write.ios, 0));
    check_cpu(&plan, result, &outcome.backends[0], dev).unwrap();
}

/// `io_size` below `size`: the single write pass writes the first blocks only, and the verify
/// pass reads those.
#[test]
fn an_io_size_below_size_verifies_the_blocks_it_wrote() {
    let plan = plan_fio(
        "[j]\nrw=write\nbs=4k\nsize=512k\nio_size=128k\nverify=crc32c\nfilename=/dev/md0\n",
        1,
    )
    .unwrap();
    assert_eq!(plan.verify, VerifyScheme::SinglePass);
    let dev = Device::steady(2_000);
    let outcome = run(&plan, Prior::Leftovers(7), dev);
    let result = outcome.results[0].as_ref().unwrap();
    assert_eq!(
        (result.write.ios, result.verify.pass_reads, result.verify.checked),
        (32, 32, 32)
    );
    check_cpu(&plan, result, &outcome.backends[0], dev).unwrap();
}

/// A runtime that ends the main phase while backlog reads are due must not leave them to the
/// verify pass, which would never issue them and would wait with nothing in flight. Each runtime
/// here ends the main phase at another point of the backlog's cycle.
#[test]
fn a_runtime_that_ends_the_main_phase_mid_backlog_does_not_stall() {
    for runtime_us in (100..=2_000).step_by(37) {
        let text = format!(
            "[foo]\nbs=4k\nverify=crc32c\nrw=readwrite\ndirect=1\nsize=512k\ndo_verify=1\nverify_backlog=1\n\
             runtime={runtime_us}us\nfilename=/dev/md0\n"
        );
        let plan = plan_fio(&text, 1).unwrap();
        let dev = Device::steady(20_000);
        let outcome = run(&plan, Prior::Leftovers(runtime_us), dev);
        let result = outcome.results[0]
            .as_ref()
            .unwrap_or_else(|e| panic!("runtime {runtime_us} us: {e}"));
        assert!(result.verify.pass_reads > 0 || result.write.ios == 0);
        check_cpu(&plan, result, &outcome.backends[0], dev).unwrap_or_else(|e| panic!("runtime {runtime_us} us: {e}"));
    }
}

/// The fake backend, with a client that goes away: the job's stop is requested at the
/// `stop_at`th submission (in the main phase or in the verify pass).
struct StoppingBackend<'a> {
    inner: FakeBackend,
    shared: &'a JobShared,
    stop_at: u64,
}

impl IoBackend for StoppingBackend<'_> {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        self.inner.slot_buffer(slot)
    }

    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError> {
        if self.inner.submits + 1 == self.stop_at {
            self.shared.request_stop();
        }
        self.inner.submit(slot, op, lba, sectors)
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        self.inner.poll_completions(out)
    }

    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }

    fn idle(&mut self, in_flight: usize) {
        self.inner.idle(in_flight);
    }
}

/// A stop (a client that goes away, or another CPU's error) at any point of the main phase or
/// of the verify pass ends the job at once: nothing waits, nothing is reported corrupt, and the
/// verify pass reads only blocks the job wrote.
#[test]
fn a_stop_at_any_point_ends_the_job_without_a_stall_or_a_false_mismatch() {
    for (text, total) in [
        (
            "[s]\nrw=write\nbs=4k\nsize=256k\niodepth=4\nverify=crc32c\nverify_backlog=4\nfilename=/dev/md0\n",
            64 + 64 + 64,
        ),
        (
            "[t]\nrw=randrw\nbs=4k\nsize=256k\niodepth=4\nverify=crc32c\nverify_backlog=1\nfilename=/dev/md0\n",
            64 + 64 + 64,
        ),
    ] {
        let plan = plan_fio(text, 1).unwrap();
        for stop_at in 1..=total {
            let disk = FakeDisk::new(SECTOR, DISK_SECTORS);
            fill_prior(&disk, Prior::Leftovers(stop_at), plan.spec.seed);
            let shared = JobShared::new(&plan);
            let mut backend = StoppingBackend {
                inner: FakeBackend::new(&disk, plan.iodepth as usize, plan.max_io_bytes() as usize),
                shared: &shared,
                stop_at,
            };
            backend.inner.forbid_same_lba_in_flight = true;
            let result = run_cpu(&plan, 0, &mut backend, &shared)
                .unwrap_or_else(|e| panic!("{text}stop at submission {stop_at}: {e}"));
            assert_eq!(result.verify.mismatches, 0, "{text}stop at submission {stop_at}");
            if backend.inner.submits >= stop_at {
                assert!(result.stopped_early, "{text}stop at submission {stop_at}");
            }
            let dev = Device::steady(backend.inner.latency_ns);
            if !result.verify.pass_skipped {
                // A pass stopped part of the way read a part of the written blocks, each once.
                let check = check_cpu(&plan, &result, &backend.inner, dev);
                if let Err(message) = check
                    && !(result.stopped_early && message.contains("did not read"))
                {
                    panic!("{text}stop at submission {stop_at}: {message}");
                }
            }
        }
    }
}
