//! One wave of jobs: their devices and policies, the counters read before, the CPUs started and
//! waited for, the drain, and each job's report.

use super::backend::{Share, worker};
use super::*;

/// Traced requests whose raw events a job's `BAREMQ-TRACE:` line carries (the summary uses all).
const TRACE_EXPORT_REQUESTS: usize = 500;

/// The `numa:` lines of a job (only with an SRAT): each CPU's node and its
/// buffers' locality, then one verdict line that a scenario can require.
fn report_buffer_placement(ctx: &JobContext<'_>) {
    let placements: Vec<BufferPlacement> = ctx.placements.iter().filter_map(|p| *p.lock()).collect();
    if placements.is_empty() {
        return;
    }
    let interleave = &ctx.plan.spec.buffer_interleave;
    let nodes: Vec<alloc::string::String> = interleave.iter().map(ToString::to_string).collect();
    let mut line = alloc::format!("numa: job {} buffers:", ctx.plan.spec.name);
    for (i, p) in placements.iter().enumerate() {
        let sep = if i == 0 { " " } else { ", " };
        if !interleave.is_empty() {
            let _ = write!(
                line,
                "{sep}cpu{} nodes {} in turn ({} on their node, {} elsewhere)",
                p.cpu,
                nodes.join(","),
                p.local,
                p.remote
            );
            continue;
        }
        let _ = match p.node {
            Some(node) => write!(
                line,
                "{sep}cpu{} node {node} ({} local, {} remote)",
                p.cpu, p.local, p.remote
            ),
            None => write!(line, "{sep}cpu{} in no SRAT node ({} unplaced)", p.cpu, p.remote),
        };
    }
    kprintln!("{line}");
    let total: usize = placements.iter().map(|p| p.local + p.remote).sum();
    let remote: usize = placements.iter().map(|p| p.remote).sum();
    if !interleave.is_empty() {
        kprintln!(
            "numa: job {}: {} of {total} buffers are on the node numa_mem_policy=interleave:{} gives them, one I/O \
             buffer per node in turn",
            ctx.plan.spec.name,
            total - remote,
            nodes.join(",")
        );
    } else if let Some(node) = ctx.plan.spec.buffer_node {
        // numa_mem_policy=bind:N / prefer:N: "local" above means on that node.
        kprintln!(
            "numa: job {}: {} of {total} buffers are on node {node}, as numa_mem_policy asks",
            ctx.plan.spec.name,
            total - remote
        );
    } else if remote == 0 {
        kprintln!(
            "numa: job {}: all {total} buffers of {} CPUs are on their CPU's node",
            ctx.plan.spec.name,
            placements.len()
        );
    } else {
        kprintln!(
            "numa: job {}: {remote} of {total} buffers are not on their CPU's node ({} node fallbacks since boot)",
            ctx.plan.spec.name,
            crate::arch::memory::node_fallbacks()
        );
    }
}

/// A job's devices: its one device, or its files' devices in order (the first is the plan's
/// `device`).
type Devices = Vec<&'static dyn BlockDevice>;

/// Runs planned jobs at the same time, each on its own CPUs (a fio wave; native jobs come one at
/// a time); returns whether each passed. The kernel counters of each report are read over the
/// whole run, so with several jobs on one device they cover all of them (a line says so).
pub(super) fn run_jobs(
    plans: &[JobPlan],
    detail: Option<workload::DetailOptions>,
    watch: Option<Watch<'_>>,
) -> Result<Vec<(bool, JobReport)>, String> {
    let plan_devs = find_devices(plans)?;
    let policies = apply_policies(plans, &plan_devs);
    if plans.len() > 1 && plans.iter().any(|p| p.spec.trace_every != 0) {
        return Err("trace= is for one job at a time, not for jobs that run at the same time".into());
    }
    // `megasas.floor=` / `nvme.floor=`: what the device allows with no block layer, for the
    // report's fractions (before the counters are read, so the job's figures hold none of it).
    let floors: Vec<_> = plans
        .iter()
        .map(|plan| {
            let job = crate::dev::FloorJob {
                bs: plan.spec.bs,
                iodepth: plan.iodepth,
            };
            crate::dev::floor_before_job(&plan.device.name, percpu::index(), job)
        })
        .collect();
    // After the floor (it runs on this CPU): a single-vector controller's interrupt goes to its
    // jobs' only submitting CPU until the reports are out.
    let _aims = aim_interrupts(plans);
    let ncpu = smp::online();
    let before = Counts::read(&plan_devs, ncpu);
    let trace = Trace::start(plans, &plan_devs, ncpu);
    // fio's `flow`: the wave's jobs with one flow_id share a group.
    let plan_refs: Vec<&JobPlan> = plans.iter().collect();
    let flows = workload::flow::flow_groups(&plan_refs);
    // fio's `exitall` in a wave of several jobs: a job's end stops those its exit_what names.
    let wave_exit = workload::WaveExit::for_wave(&plan_refs);
    let shareds: Vec<JobShared> = plans
        .iter()
        .zip(flows)
        .enumerate()
        .map(|(index, (plan, flow))| {
            match detail {
                Some(options) => JobShared::with_detail(plan, options),
                None => JobShared::new(plan),
            }
            .with_flow(flow)
            .with_wave_exit(wave_exit.clone(), index)
        })
        .collect();
    // Built whole before any address is taken: the workers hold these addresses until they end.
    let contexts = job_contexts(plans, &shareds, &plan_devs, &policies, time::now_ns());
    announce(plans, &policies);
    if let Some(start) = time::first_job_start() {
        kprintln!("{start}");
    }
    run_on_cpus(&contexts, watch)?;
    for ctx in &contexts {
        report_buffer_placement(ctx);
    }
    // A CPU's error (a stall, a bogus completion) is the verdict, before the drain.
    let all_results = collect_results(&contexts)?;
    drain(plans, &plan_devs)?;
    let mut passed = Vec::with_capacity(plans.len());
    for (index, ctx) in contexts.iter().enumerate() {
        let job = JobRun {
            ctx,
            devs: &plan_devs[index],
            quiesce: policies[index].1,
            results: &all_results[index],
            floor: &floors[index],
            index,
        };
        let report = job.report(&before, &trace, ncpu)?;
        passed.push((report.passed(), report));
    }
    Ok(passed)
}

/// Each plan's devices, found by name.
fn find_devices(plans: &[JobPlan]) -> Result<Vec<Devices>, String> {
    let mut plan_devs = Vec::with_capacity(plans.len());
    for plan in plans {
        let mut found = Vec::new();
        for info in plan.devices() {
            found.push(block::find(&info.name).ok_or_else(|| alloc::format!("no device {}", info.name))?);
        }
        plan_devs.push(found);
    }
    Ok(plan_devs)
}

/// Sets each job's completion and quiesce policies on its devices and prints its plan warnings.
fn apply_policies(plans: &[JobPlan], plan_devs: &[Devices]) -> Vec<(CompletionPolicy, QuiesceCheck)> {
    let policies: Vec<(CompletionPolicy, QuiesceCheck)> = plans
        .iter()
        .zip(plan_devs)
        .map(|(plan, devs)| map_policies(plan, devs[0]))
        .collect();
    for ((plan, devs), (completion, quiesce)) in plans.iter().zip(plan_devs).zip(&policies) {
        for dev in devs {
            dev.set_policies(*completion, *quiesce);
        }
        for w in &plan.warnings {
            kprintln!("warning: job {}: {w}", plan.spec.name);
        }
    }
    policies
}

/// The drivers' interrupt aiming for these jobs; dropping the guards aims the vectors back.
fn aim_interrupts(plans: &[JobPlan]) -> Vec<crate::dev::driver::AimGuard> {
    let job_devices: Vec<crate::dev::driver::JobDevices<'_>> = plans
        .iter()
        .map(|plan| crate::dev::driver::JobDevices {
            name: &plan.spec.name,
            devices: plan.devices().iter().map(|d| d.name.as_str()).collect(),
            cpus: plan.cpus.iter().map(|slice| slice.cpu as usize).collect(),
        })
        .collect();
    crate::dev::aim_interrupts_for_jobs(&job_devices)
}

/// Device interrupts per CPU, summed over `devs` (a vector's count is per CPU: each counts on its
/// own CPU only).
fn device_irqs_per_cpu(devs: &[&'static dyn BlockDevice], ncpu: usize) -> Vec<u64> {
    let mut counts = alloc::vec![0u64; ncpu];
    for d in devs {
        for v in d.irq_vectors() {
            if let Some(c) = counts.get_mut(v.cpu) {
                *c += v.count();
            }
        }
    }
    counts
}

/// Completion IPIs received per CPU.
fn completion_ipis_per_cpu(ncpu: usize) -> Vec<u64> {
    (0..ncpu)
        .map(|c| irq::TABLE.count(irq::VECTOR_BLK_COMPLETE, c as u32))
        .collect()
}

/// The kernel's counters before the jobs start; each report holds their growth.
struct Counts {
    /// Per job: device interrupts per CPU over its devices.
    irqs: Vec<Vec<u64>>,
    ipis: Vec<u64>,
    /// Per job, per device: the block layer's counters and the driver's.
    blk: Vec<Vec<blk::CounterSnapshot>>,
    driver: Vec<Vec<Vec<(&'static str, u64)>>>,
    wake_ipis: u64,
    bogus: u64,
}

impl Counts {
    fn read(plan_devs: &[Devices], ncpu: usize) -> Self {
        Self {
            irqs: plan_devs.iter().map(|d| device_irqs_per_cpu(d, ncpu)).collect(),
            ipis: completion_ipis_per_cpu(ncpu),
            blk: plan_devs
                .iter()
                .map(|devs| devs.iter().map(|d| d.counters()).collect())
                .collect(),
            wake_ipis: crate::arch::park::wake_ipis(),
            driver: plan_devs
                .iter()
                .map(|devs| devs.iter().map(|d| d.driver_counters()).collect())
                .collect(),
            bogus: block::done_board().bogus(),
        }
    }
}

/// Stage tracing (`trace=N`, one job at a time): on from the start, collected at the report.
struct Trace {
    every: u32,
    event_ns: u64,
    dev: Option<&'static dyn BlockDevice>,
}

impl Trace {
    fn start(plans: &[JobPlan], plan_devs: &[Devices], ncpu: usize) -> Self {
        let every = plans.first().map_or(0, |p| p.spec.trace_every);
        if every == 0 {
            return Self {
                every,
                event_ns: 0,
                dev: None,
            };
        }
        let event_ns = crate::arch::stagetrace::cost_per_event_ns(ncpu);
        crate::arch::stagetrace::start(every, ncpu);
        plan_devs[0][0].set_stage_trace(true);
        Self {
            every,
            event_ns,
            dev: Some(plan_devs[0][0]),
        }
    }

    /// Stops tracing and returns the events and their summary (none when off).
    fn collect(&self, ncpu: usize) -> (Vec<workload::StageEvent>, Option<workload::StageSummary>) {
        let Some(dev) = self.dev else {
            return (Vec::new(), None);
        };
        dev.set_stage_trace(false);
        crate::arch::stagetrace::stop();
        let (events, dropped) = crate::arch::stagetrace::collect(ncpu);
        let events: Vec<workload::StageEvent> = events
            .into_iter()
            .map(|(cpu, ns, request, stage)| workload::StageEvent {
                cpu,
                ns,
                request,
                stage,
            })
            .collect();
        let mut summary = workload::summarise(&events, self.every, dropped);
        summary.event_cost_ns = self.event_ns;
        (events, Some(summary))
    }
}

/// Each job's context, shared by its CPUs.
fn job_contexts<'a>(
    plans: &'a [JobPlan],
    shareds: &'a [JobShared],
    plan_devs: &[Devices],
    policies: &[(CompletionPolicy, QuiesceCheck)],
    start_ns: u64,
) -> Vec<JobContext<'a>> {
    plans
        .iter()
        .zip(shareds)
        .zip(plan_devs)
        .zip(policies)
        .map(|(((plan, shared), devs), (completion, _))| JobContext {
            plan,
            shared,
            dev: devs[0],
            file_devs: if plan.files.is_empty() {
                Vec::new()
            } else {
                devs.clone()
            },
            file_sent: (0..plan.cpus.len()).map(|_| spin::Mutex::new(Vec::new())).collect(),
            poll: *completion == CompletionPolicy::Poll,
            start_ns,
            results: (0..plan.cpus.len()).map(|_| spin::Mutex::new(None)).collect(),
            placements: (0..plan.cpus.len()).map(|_| spin::Mutex::new(None)).collect(),
        })
        .collect()
}

/// One line per job (device, CPUs, depth, policies), and one naming jobs that run together.
fn announce(plans: &[JobPlan], policies: &[(CompletionPolicy, QuiesceCheck)]) {
    for (plan, (completion, quiesce)) in plans.iter().zip(policies) {
        let cpus: Vec<u32> = plan.cpus.iter().map(|s| s.cpu).collect();
        let set = workload::values::CpuSet::from_cpus(&cpus);
        let distinct = set.len() as usize;
        kprintln!(
            "job {}: {} on {} ({}: {}), iodepth {} per {}, completion={} quiesce={}",
            plan.spec.name,
            plan.spec.rw.as_str(),
            plan.devices()
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(":"),
            if distinct == cpus.len() {
                alloc::format!("{} CPUs", cpus.len())
            } else {
                // Clones that share CPUs (by turns).
                alloc::format!("{} clones on {distinct} CPUs", cpus.len())
            },
            // A list for a few CPUs, ranges (`0-127`) for many.
            if cpus.len() <= platform::irq::MAX_LISTING_COLUMNS {
                alloc::format!("{cpus:?}")
            } else {
                alloc::format!("{set}")
            },
            plan.iodepth,
            if distinct == cpus.len() { "CPU" } else { "clone" },
            to_left(&COMPLETION_POLICIES, *completion).as_str(),
            to_left(&QUIESCE_POLICIES, *quiesce).as_str(),
        );
    }
    // Contexts per CPU: more than one where clones or jobs outnumber the CPUs.
    let mut per_cpu: alloc::collections::BTreeMap<u32, Vec<String>> = alloc::collections::BTreeMap::new();
    for plan in plans {
        for (clone, slice) in plan.cpus.iter().enumerate() {
            let name = if plan.cpus.len() > 1 {
                alloc::format!("{}#{clone}", plan.spec.name)
            } else {
                plan.spec.name.clone()
            };
            per_cpu.entry(slice.cpu).or_default().push(name);
        }
    }
    if per_cpu.values().any(|names| names.len() > 1) {
        for (cpu, names) in &per_cpu {
            kprintln!(
                "cpu{cpu}: {} job context(s) by turns: {}",
                names.len(),
                names.join(", ")
            );
        }
    }
    if plans.len() > 1 {
        kprintln!(
            "jobs {}: running at the same time; each report's kernel counters cover all of them",
            plans
                .iter()
                .map(|p| p.spec.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// Each CPU's shares, in CPU order: every job's share on the CPU with its window of the CPU's
/// done-board slots (one after the other, each starting a 64-slot word). A CPU with more
/// shares than its slots hold is refused by name.
fn shares_by_cpu(contexts: &[JobContext<'_>]) -> Result<alloc::collections::BTreeMap<u32, Vec<Share>>, String> {
    let mut by_cpu: alloc::collections::BTreeMap<u32, Vec<Share>> = alloc::collections::BTreeMap::new();
    for ctx in contexts {
        let addr = ctx as *const JobContext<'_> as usize;
        for (index, slice) in ctx.plan.cpus.iter().enumerate() {
            let shares = by_cpu.entry(slice.cpu).or_default();
            let first_slot = shares
                .last()
                .map_or(0, |s: &Share| (s.first_slot + s.slots).next_multiple_of(64));
            shares.push(Share {
                ctx: addr,
                index,
                first_slot,
                slots: ctx.plan.iodepth as usize,
            });
        }
    }
    let board = block::done_board().slots_per_cpu();
    for (cpu, shares) in &by_cpu {
        let needed = shares.last().map_or(0, |s| s.first_slot + s.slots);
        if needed > board {
            return Err(alloc::format!(
                "cpu{cpu} would run {} job contexts needing {needed} completion slots (each context's iodepth, \
                 rounded up to 64); a CPU has {board}: use fewer clones per CPU or a lower iodepth",
                shares.len()
            ));
        }
    }
    Ok(by_cpu)
}

/// Stops the jobs whose CPUs were already started (`waits`) when the run cannot go on, and
/// waits for those CPUs: nothing of the jobs is left running.
fn stop_started(contexts: &[JobContext<'_>], waits: Vec<(usize, u64)>) {
    for ctx in contexts {
        ctx.shared.request_stop();
    }
    for (cpu, t) in waits {
        smp::wait_done(cpu, t);
    }
}

/// Starts every CPU's shares on it (this CPU's run here), several on one CPU by turns, and
/// waits for all of them.
fn run_on_cpus(contexts: &[JobContext<'_>], watch: Option<Watch<'_>>) -> Result<(), String> {
    let me = percpu::index() as u32;
    let by_cpu = shares_by_cpu(contexts)?;
    let mut waits = Vec::new();
    let mut mine = None;
    for (&cpu, shares) in &by_cpu {
        let addr = shares as *const Vec<Share> as usize;
        if cpu == me {
            mine = Some(addr);
        } else {
            match smp::run_on(cpu as usize, worker, addr) {
                Some(t) => waits.push((cpu as usize, t)),
                None => {
                    stop_started(contexts, waits);
                    return Err(alloc::format!("cpu{cpu} is offline or busy"));
                }
            }
        }
    }
    x86_64::instructions::interrupts::enable();
    if let Some(addr) = mine {
        if watch.is_some() {
            // The watcher (the network) needs this CPU while the others run: its caller keeps
            // jobs off it, so this is a placement bug, caught before any I/O of this CPU.
            stop_started(contexts, waits);
            return Err(alloc::format!(
                "cpu{me} keeps the network running and cannot run a job as well"
            ));
        }
        worker(addr);
    }
    if let Some(watch) = watch {
        let shareds: Vec<&JobShared> = contexts.iter().map(|ctx| ctx.shared).collect();
        while !waits.iter().all(|&(cpu, t)| smp::is_done(cpu, t)) {
            watch(&shareds);
        }
    }
    for (cpu, t) in waits {
        smp::wait_done(cpu, t);
    }
    Ok(())
}

/// Every CPU's result, per job; the first CPU that failed is the error.
fn collect_results(contexts: &[JobContext<'_>]) -> Result<Vec<Vec<CpuResult>>, String> {
    let mut all_results = Vec::with_capacity(contexts.len());
    for ctx in contexts {
        let plan = ctx.plan;
        let mut results = Vec::with_capacity(plan.cpus.len());
        for (i, r) in ctx.results.iter().enumerate() {
            match r.lock().take() {
                Some(Ok(res)) => results.push(res),
                Some(Err(e)) => return Err(alloc::format!("job {}: cpu{}: {e}", plan.spec.name, plan.cpus[i].cpu)),
                None => {
                    return Err(alloc::format!(
                        "job {}: cpu{} returned no result",
                        plan.spec.name,
                        plan.cpus[i].cpu
                    ));
                }
            }
        }
        all_results.push(results);
    }
    Ok(all_results)
}

/// Drain: nothing of these jobs may still be in flight when the next starts.
fn drain(plans: &[JobPlan], plan_devs: &[Devices]) -> Result<(), String> {
    let me = percpu::index();
    let deadline = time::now_ns() + 5_000_000_000;
    for (plan, devs) in plans.iter().zip(plan_devs) {
        for dev in devs {
            while dev.in_flight() > 0 && time::now_ns() < deadline {
                dev.make_progress(me);
                core::hint::spin_loop();
            }
            if dev.in_flight() > 0 {
                return Err(alloc::format!(
                    "job {}: {} request(s) still in flight on {} 5 s after every CPU finished: the device stopped \
                     completing",
                    plan.spec.name,
                    dev.in_flight(),
                    dev.facts().name
                ));
            }
        }
    }
    Ok(())
}

/// One finished job, for its report.
struct JobRun<'a> {
    ctx: &'a JobContext<'a>,
    devs: &'a [&'static dyn BlockDevice],
    quiesce: QuiesceCheck,
    results: &'a [CpuResult],
    floor: &'a [(&'static str, u64)],
    /// The job's place in the wave (its line in [`Counts`]).
    index: usize,
}

impl JobRun<'_> {
    /// Builds, prints and returns the job's report: the engine's figures, the kernel's counters'
    /// growth since `before`, the floor, the trace; the human report, then one `BAREMQ-JSON:` line.
    fn report(&self, before: &Counts, trace: &Trace, ncpu: usize) -> Result<JobReport, String> {
        let plan = self.ctx.plan;
        let (trace_events, trace_summary) = trace.collect(ncpu);
        let mut report = JobReport::new(plan, self.results).map_err(|e| e.to_string())?;
        if let Some(summary) = trace_summary {
            report.set_stages(summary);
        }
        self.add_counters(&mut report, before, ncpu)?;
        report_file_requests(self.ctx, &mut report);
        let flushes: u64 = self.results.iter().map(|r| r.flush.ios).sum();
        if flushes > 0 {
            report.add_total("flushes", flushes);
            report.add_total("flush_errors", self.results.iter().map(|r| r.flush.errors).sum());
        }
        for (name, value) in self.floor.iter().copied() {
            report.add_total(name, value);
        }
        let mut text = String::new();
        let _ = report.write_human(&mut text);
        if self.quiesce != QuiesceCheck::LockFree {
            let delta = |field| self.blk_delta(before, field);
            kprintln!(
                "job {}: queue lock ({}): acquisitions={} contended={} parks={} wakeups={} wake_ipis={}",
                plan.spec.name,
                to_left(&QUIESCE_POLICIES, self.quiesce).as_str(),
                delta(|c| c.hot_path_locks),
                delta(|c| c.lock_contended),
                delta(|c| c.lock_sleeps),
                delta(|c| c.lock_wakeups),
                crate::arch::park::wake_ipis() - before.wake_ipis,
            );
        }
        crate::arch::console::print(format_args!("{text}"));
        let mut json = String::new();
        let _ = report.write_json_line(&mut json);
        crate::arch::console::print(format_args!("{json}\n"));
        if trace.every != 0 {
            // The raw samples, for `cargo xtask lab --trace` (Chrome / Perfetto trace).
            // At most TRACE_EXPORT_REQUESTS whole timelines: a console line, not a dump.
            let exported = workload::stages::first_requests(&trace_events, TRACE_EXPORT_REQUESTS);
            let line = workload::stages::trace_line(&plan.spec.name, trace.every, &exported);
            crate::arch::console::print(format_args!("{line}"));
        }
        crate::arch::exit::note_job(&report.plan.spec.name, report.total.iops, report.errors);
        Ok(report)
    }

    /// A block-layer counter's growth over the job's devices.
    fn blk_delta(&self, before: &Counts, field: fn(&blk::CounterSnapshot) -> u64) -> u64 {
        self.devs
            .iter()
            .zip(&before.blk[self.index])
            .map(|(d, before)| field(&d.counters()) - field(before))
            .sum()
    }

    /// The kernel's counters in the report: interrupts and IPIs per CPU, the block layer's and
    /// the driver's totals.
    fn add_counters(&self, report: &mut JobReport, before: &Counts, ncpu: usize) -> Result<(), String> {
        let plan = self.ctx.plan;
        let irqs_before = &before.irqs[self.index];
        let per_plan_cpu = |after: Vec<u64>, before: &[u64]| -> Vec<u64> {
            plan.cpus
                .iter()
                .map(|s| after[s.cpu as usize] - before[s.cpu as usize])
                .collect()
        };
        let irqs_after = device_irqs_per_cpu(self.devs, ncpu);
        let all_irqs: u64 = irqs_after.iter().zip(irqs_before).map(|(a, b)| a - b).sum();
        report
            .add_counter("device_irqs", per_plan_cpu(irqs_after, irqs_before))
            .map_err(|e| e.to_string())?;
        report
            .add_counter(
                "completion_ipis",
                per_plan_cpu(completion_ipis_per_cpu(ncpu), &before.ipis),
            )
            .map_err(|e| e.to_string())?;
        let delta = |field| self.blk_delta(before, field);
        let totals = [
            ("device_irqs_all_cpus", all_irqs),
            ("submitted", delta(|c| c.submitted)),
            // Reads and writes above the device's transfer or segment limit, split by blk (each
            // part counts in `submitted` and `completed`).
            ("split_bios", delta(|c| c.split_bios)),
            ("completed", delta(|c| c.completed)),
            ("requeued", delta(|c| c.requeued)),
            ("completions_inline", delta(|c| c.completions_inline)),
            ("completions_irq", delta(|c| c.completions_irq)),
            ("completions_local", delta(|c| c.completions_local)),
            ("completions_remote", delta(|c| c.completions_remote)),
            ("completions_poll", delta(|c| c.completions_poll)),
            ("ipis", delta(|c| c.ipis)),
            ("softirqs", delta(|c| c.softirqs)),
            ("hot_path_locks", delta(|c| c.hot_path_locks)),
            // The queue lock's contention (quiesce=locked/sleeping): acquisitions that
            // found it taken, parks in `wait_for_wake`, wake-ups sent by unlocks.
            ("lock_contended", delta(|c| c.lock_contended)),
            ("lock_sleeps", delta(|c| c.lock_sleeps)),
            ("lock_wakeups", delta(|c| c.lock_wakeups)),
            (
                "lock_wakeup_ipis_sent",
                crate::arch::park::wake_ipis() - before.wake_ipis,
            ),
            ("timeouts", delta(|c| c.timeouts)),
            ("spurious_completions", delta(|c| c.spurious_completions)),
            ("bogus_cookies", block::done_board().bogus() - before.bogus),
        ];
        let bogus = block::done_board().bogus() - before.bogus;
        if bogus > 0 {
            // The block layer delivers to the board without a call back; the board counted
            // each one (a cookie that is no slot of the job, or a slot completed twice).
            log::error!("{bogus} completion(s) refused by the done board (a slot out of range or already done)");
        }
        for (name, value) in totals {
            report.add_total(name, value);
        }
        for (dev, driver_before) in self.devs.iter().zip(&before.driver[self.index]) {
            for ((name, after), (_, driver_before)) in dev.driver_counters().into_iter().zip(driver_before.clone()) {
                if self.devs.len() == 1 {
                    report.add_total(name, after - driver_before);
                } else {
                    report.add_total(&alloc::format!("{}_{name}", dev.facts().name), after - driver_before);
                }
            }
        }
        Ok(())
    }
}

/// A job over a `filename` list: prints the requests it sent to each file's device and adds
/// them to the report's totals (`file_DEVICE_reads`, ..._writes, ..._trims, ..._flushes), which
/// the fio document carries under its `baremq` key. They count what the job sent, its ramp and
/// verify pass included.
fn report_file_requests(ctx: &JobContext<'_>, report: &mut JobReport) {
    if ctx.file_devs.is_empty() {
        return;
    }
    let mut sums = alloc::vec![[0u64; 4]; ctx.file_devs.len()];
    for cpu in &ctx.file_sent {
        for (sum, sent) in sums.iter_mut().zip(cpu.lock().iter()) {
            for (s, n) in sum.iter_mut().zip(sent) {
                *s += n;
            }
        }
    }
    for (dev, [reads, writes, trims, flushes]) in ctx.file_devs.iter().zip(sums) {
        let name = &dev.facts().name;
        kprintln!(
            "job {}: file /dev/{name}: {reads} reads, {writes} writes, {trims} trims, {flushes} flushes",
            ctx.plan.spec.name
        );
        for (kind, value) in [
            ("reads", reads),
            ("writes", writes),
            ("trims", trims),
            ("flushes", flushes),
        ] {
            report.add_total(&alloc::format!("file_{name}_{kind}"), value);
        }
    }
}
