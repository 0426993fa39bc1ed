//! Runs workload jobs from the command line on the block devices: each
//! submitting CPU runs the workload engine's loop over its own backend (no
//! shared lock), the first CPU prints progress once a second, and each job
//! ends with the fio-like report and one `BAREMQ-JSON:` line.

use crate::arch::console::kprintln;
use crate::arch::memory::DmaBuffer;
use crate::arch::{idle, irq, percpu, smp, time};
use crate::dev::block::{self, BlockDevice, MAX_SLOTS_PER_CPU};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use blk::{BlkError, CompletionPolicy, QuiesceCheck, Segment, Status};
use core::fmt::Write;
use done::{Taken, for_each_bit};
use workload::{
    Completion, CpuResult, DeviceInfo, IoBackend, IoError, IoOp, JobPlan, JobReport, JobShared, ProgressMeter, Reaped,
    SubmitError, WorkloadError, split_successes,
};

mod backend;
mod files;
mod run;

use backend::KernelBackend;
use run::run_jobs;

struct JobContext<'a> {
    plan: &'a JobPlan,
    shared: &'a JobShared,
    dev: &'static dyn BlockDevice,
    /// A job over a `filename` list: its files' devices, in order (empty otherwise).
    file_devs: Vec<&'static dyn BlockDevice>,
    /// Per CPU, the requests sent to each file's device (reads, writes, trims, flushes).
    file_sent: Vec<spin::Mutex<Vec<[u64; 4]>>>,
    poll: bool,
    start_ns: u64,
    results: Vec<spin::Mutex<Option<Result<CpuResult, WorkloadError>>>>,
    /// Where each CPU's buffers landed (with an SRAT), for the `numa:` lines.
    placements: Vec<spin::Mutex<Option<BufferPlacement>>>,
}

/// One submitting CPU's NUMA node and how many of its DMA buffers lie wholly
/// in that node's SRAT memory ranges (checked from their physical addresses,
/// independently of how the allocator chose them).
#[derive(Debug, Clone, Copy)]
struct BufferPlacement {
    cpu: usize,
    node: Option<u32>,
    local: usize,
    remote: usize,
}

fn device_info(d: &dyn BlockDevice) -> DeviceInfo {
    let f = d.facts();
    DeviceInfo {
        name: f.name.clone(),
        sector_size: f.sector_size,
        capacity_sectors: f.capacity_sectors,
        max_iodepth: f.max_inflight.clamp(1, MAX_SLOTS_PER_CPU as u32),
        max_transfer_bytes: f.max_transfer_bytes,
    }
}

/// The one mapping between the workload's completion policies (what a job
/// names) and the block layer's (what a queue runs). Both directions use it.
const COMPLETION_POLICIES: [(workload::CompletionPolicy, CompletionPolicy); 4] = [
    (workload::CompletionPolicy::Irq, CompletionPolicy::Irq),
    (workload::CompletionPolicy::Local, CompletionPolicy::Local),
    (workload::CompletionPolicy::Remote, CompletionPolicy::Remote),
    (workload::CompletionPolicy::Poll, CompletionPolicy::Poll),
];
const QUIESCE_POLICIES: [(workload::QuiescePolicy, QuiesceCheck); 3] = [
    (workload::QuiescePolicy::LockFree, QuiesceCheck::LockFree),
    (workload::QuiescePolicy::Locked, QuiesceCheck::Locked),
    (workload::QuiescePolicy::Sleeping, QuiesceCheck::Sleeping),
];

/// `table`'s right side for `left`. Both tables list every variant of both
/// enums, so a miss is a kernel bug.
fn to_right<L: PartialEq + Copy, R: Copy>(table: &[(L, R)], left: L) -> R {
    table
        .iter()
        .find(|(l, _)| *l == left)
        .map(|(_, r)| *r)
        .expect("every policy is listed")
}

/// `table`'s left side for `right`.
fn to_left<L: Copy, R: PartialEq + Copy>(table: &[(L, R)], right: R) -> L {
    table
        .iter()
        .find(|(_, r)| *r == right)
        .map(|(l, _)| *l)
        .expect("every policy is listed")
}

/// The block-layer policies a job runs with: its own, else the device's current ones.
fn map_policies(plan: &JobPlan, dev: &dyn BlockDevice) -> (CompletionPolicy, QuiesceCheck) {
    let (cur_c, cur_q) = dev.policies();
    (
        plan.spec
            .completion
            .map_or(cur_c, |p| to_right(&COMPLETION_POLICIES, p)),
        plan.spec.quiesce.map_or(cur_q, |p| to_right(&QUIESCE_POLICIES, p)),
    )
}

/// Prints fio's output of a run (`--output-format`, the logs) from its jobs' reports: the
/// `BAREMQ-FIO-JSON:` line (json, json+) or fio's text report (normal), then the `BAREMQ-LOG:`
/// rows. `metas[i]` describes `reports[i]` (job options as written, fio's group).
pub fn print_fio_output(options: &workload::FioOutputOptions, reports: &[JobReport], metas: &[workload::FioJobMeta]) {
    let jobs: Vec<workload::FioJob<'_>> = reports
        .iter()
        .zip(metas)
        .map(|(report, meta)| workload::FioJob { report, meta })
        .collect();
    let mut text = String::new();
    let written = match options.output_format {
        workload::FioOutputFormat::Normal => workload::report::write_fio_text(&mut text, options, &jobs),
        _ => workload::report::write_fio_json_line(&mut text, options, &jobs),
    };
    let logs = workload::report::write_log_lines(&mut text, options, &jobs);
    if written.is_err() || logs.is_err() {
        kprintln!("fio output: formatting failed");
        return;
    }
    crate::arch::console::print(format_args!("{text}"));
}

/// Prepares the boot CPU for running jobs: it takes interrupts from here on
/// (its jobs need them), so the watchdog watches it too.
pub fn prepare() {
    x86_64::instructions::interrupts::enable();
    crate::arch::watchdog::watch_this_cpu();
}

/// The block devices as the workload engine sees them; an error when there is none.
pub fn devices() -> Result<Vec<DeviceInfo>, String> {
    let infos: Vec<DeviceInfo> = block::devices().iter().map(|d| device_info(*d)).collect();
    if infos.is_empty() {
        return Err(
            "jobs were given but there is no block device (add a controller and disk, or null.size=SIZE)".into(),
        );
    }
    Ok(infos)
}

/// The online CPUs, in order.
pub fn online_cpus() -> Vec<u32> {
    (0..smp::online() as u32).collect()
}

/// The NUMA node of CPU `cpu` (by its APIC id, from the SRAT); `None` without an SRAT.
pub fn node_of_cpu(cpu: u32) -> Option<u32> {
    let apic_id = percpu::cpu(cpu as usize)
        .apic_id
        .load(core::sync::atomic::Ordering::Relaxed);
    crate::arch::firmware::get().node_of_apic_id(apic_id)
}

/// Parses and runs the jobs in `words`. Returns Err with a message on a bad
/// job or a run that could not complete; Ok(false) when a job failed.
pub fn run(words: &[&str]) -> Result<bool, String> {
    prepare();
    let specs = workload::parse_jobs(words.iter().copied()).map_err(|e| e.to_string())?;
    if specs.is_empty() {
        return Ok(true);
    }
    let infos = devices()?;
    let online = online_cpus();
    let mut all_passed = true;
    for spec in &specs {
        all_passed &= run_specs(core::slice::from_ref(spec), &infos, &online, None)?
            .iter()
            .all(|(p, _)| *p);
    }
    print_interrupts();
    Ok(all_passed)
}

/// The interrupts each CPU took since boot, as `/proc/interrupts` shows them, after a run.
pub fn print_interrupts() {
    kprintln!("interrupts per CPU since boot (like /proc/interrupts):");
    kprintln!("{}", irq::TABLE.display(smp::online()));
}

/// What the running CPU does while other CPUs run a wave's jobs (the fio server polls the
/// network): called again and again until they end, with each job's shared state in the order
/// of the specs (to read live counters or request a stop). It paces itself.
pub type Watch<'a> = &'a mut dyn FnMut(&[&JobShared]);

/// Plans and runs jobs at the same time (one job, or a fio wave): Ok(whether each passed, and
/// its report), or Err when one cannot be planned or run. `detail`: also measure what fio's
/// output needs (`workload::detail`).
pub fn run_specs(
    specs: &[workload::JobSpec],
    infos: &[DeviceInfo],
    online: &[u32],
    detail: Option<workload::DetailOptions>,
) -> Result<Vec<(bool, JobReport)>, String> {
    run_specs_watched(specs, infos, online, detail, None)
}

/// [`run_specs`] with `watch` running on this CPU while the jobs run (this CPU must run none of
/// them); `None` is [`run_specs`].
pub fn run_specs_watched(
    specs: &[workload::JobSpec],
    infos: &[DeviceInfo],
    online: &[u32],
    detail: Option<workload::DetailOptions>,
    watch: Option<Watch<'_>>,
) -> Result<Vec<(bool, JobReport)>, String> {
    let mut plans = Vec::with_capacity(specs.len());
    let mut need = 0u64;
    for spec in specs {
        // A job may name its device by a stable alias (`disks::names`); the planner knows the
        // primary names.
        let mut spec = spec.clone();
        if let Some(name) = &spec.device {
            let d = block::find(name).ok_or_else(|| {
                alloc::format!(
                    "job {:?}: no device named {name:?} (available: {})",
                    spec.name,
                    block::names_and_aliases()
                )
            })?;
            spec.device = Some(d.facts().name.clone());
        }
        for file in &mut spec.files {
            if let Some(d) = block::find(&file.device) {
                file.device = d.facts().name.clone();
            }
        }
        let mut plan = workload::plan_job(&spec, infos, online).map_err(|e| e.to_string())?;
        let dev = block::find(&plan.device.name).ok_or_else(|| alloc::format!("no device {}", plan.device.name))?;
        for info in plan.devices() {
            let each = block::find(&info.name).ok_or_else(|| alloc::format!("no device {}", info.name))?;
            if plan.spec.rw.trims() && each.max_discard_sectors() == 0 {
                return Err(alloc::format!(
                    "job {}: rw={} needs discard (trim), and device {} ({}) has no discard command",
                    plan.spec.name,
                    plan.spec.rw.as_str(),
                    info.name,
                    each.facts().model
                ));
            }
            if plan.spec.rw.writes() || plan.spec.rw.trims() {
                // A trim destroys data as a write does.
                super::safety::check_before_writes(&plan.spec.name, each, plan.spec.destroy)?;
            }
        }
        // Record the policies in force, so the report names them rather than "default".
        let (c, q) = map_policies(&plan, dev);
        plan.spec.completion = Some(to_left(&COMPLETION_POLICIES, c));
        plan.spec.quiesce = Some(to_left(&QUIESCE_POLICIES, q));
        // Every submitting CPU gets iodepth DMA buffers of the largest I/O's bytes: refuse jobs
        // that cannot fit instead of failing half-way through their allocations.
        let job_need =
            u64::from(plan.iodepth) * u64::from(plan.max_io_bytes()).next_multiple_of(4096) * plan.cpus.len() as u64;
        need += job_need;
        let free = crate::arch::memory::free_bytes();
        if need > free / 2 {
            return Err(alloc::format!(
                "job {}: needs {} MiB of DMA buffers (iodepth {} x bs {} x {} CPUs{}); only {} MiB of memory is free",
                plan.spec.name,
                job_need >> 20,
                plan.iodepth,
                plan.max_io_bytes(),
                plan.cpus.len(),
                if specs.len() > 1 {
                    ", beside the jobs running with it"
                } else {
                    ""
                },
                free >> 20
            ));
        }
        plans.push(plan);
    }
    let passed = run_jobs(&plans, detail, watch)?;
    for (plan, (ok, _)) in plans.iter().zip(&passed) {
        kprintln!("job {}: {}", plan.spec.name, if *ok { "PASSED" } else { "FAILED" });
    }
    Ok(passed)
}
