//! Test support: runs a boot's jobs through the real workload engine on a simulated device, so the
//! console text the tests parse is written by the kernel's own report code, not copied by hand.

use std::cell::Cell;
use std::collections::VecDeque;

use workload::{
    Completion as Done, CpuResult, DeviceInfo, IoBackend, IoError, IoOp, JobReport, JobShared, SubmitError, plan_job,
    run_cpu,
};

use super::matrix::BootPlan;

/// A device model: fixed latency plus a deterministic spread, optional failing LBAs.
#[derive(Debug, Clone)]
pub struct SimDevice {
    /// Base latency of every request, ns.
    pub latency_ns: u64,
    /// Requests whose first sector is a multiple of this fail (0: none fail).
    pub fail_every_lba: u64,
}

struct SimBackend {
    clock: Cell<u64>,
    device: SimDevice,
    buffers: Vec<Vec<u8>>,
    in_flight: VecDeque<(u64, usize, Result<(), IoError>)>,
    issued: u64,
}

impl IoBackend for SimBackend {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        &mut self.buffers[slot]
    }

    fn submit(&mut self, slot: usize, _op: IoOp, lba: u64, _sectors: u32) -> Result<(), SubmitError> {
        self.issued += 1;
        // A spread of up to ~3x the base latency, so percentiles differ from the median.
        let spread = (self.issued * 7919) % 97 * self.device.latency_ns / 48;
        let due = self.clock.get() + self.device.latency_ns + spread;
        let fails = self.device.fail_every_lba != 0 && lba.is_multiple_of(self.device.fail_every_lba);
        let result = if fails {
            Err(IoError::Device { status: 3 })
        } else {
            Ok(())
        };
        // Completions come back in due order.
        let at = self.in_flight.partition_point(|(t, _, _)| *t <= due);
        self.in_flight.insert(at, (due, slot, result));
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut [Done]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.in_flight.front() {
                Some(&(due, slot, result)) if due <= self.clock.get() => {
                    self.in_flight.pop_front();
                    out[n] = Done::new(slot, result);
                    n += 1;
                }
                _ => break,
            }
        }
        n
    }

    fn now_ns(&self) -> u64 {
        // Each look at the clock costs 50 ns of simulated CPU time.
        self.clock.set(self.clock.get() + 50);
        self.clock.get()
    }

    fn idle(&mut self, _in_flight: usize) {
        if let Some(&(due, _, _)) = self.in_flight.front() {
            self.clock.set(self.clock.get().max(due));
        }
    }
}

/// The devices the simulated kernel exposes: `md0` allows only 16 requests per CPU, so a deeper
/// queue gets capped as on a real controller; `nvme0n1` allows 128 (the NVMe driver's depth);
/// `mf0` (the Fusion logical drive) 64.
pub fn devices() -> Vec<DeviceInfo> {
    vec![
        DeviceInfo {
            name: "null0".into(),
            sector_size: 512,
            capacity_sectors: 1 << 21,
            max_iodepth: 256,
            max_transfer_bytes: 1 << 20,
        },
        DeviceInfo {
            name: "md0".into(),
            sector_size: 512,
            capacity_sectors: 1 << 21,
            max_iodepth: 16,
            max_transfer_bytes: 1 << 20,
        },
        DeviceInfo {
            name: "nvme0n1".into(),
            sector_size: 512,
            capacity_sectors: 1 << 21,
            max_iodepth: 128,
            max_transfer_bytes: 512 << 10,
        },
        DeviceInfo {
            name: "mf0".into(),
            sector_size: 512,
            capacity_sectors: 1 << 21,
            max_iodepth: 64,
            max_transfer_bytes: 1 << 20,
        },
    ]
}

/// Runs job `job_index` of `words` on the simulated device, one backend per CPU: its plan, the
/// CPUs' results and the report the kernel would build from them (before its counters).
fn run_job(
    words: &[String],
    job_index: usize,
    device: &SimDevice,
    online_cpus: &[u32],
) -> (workload::JobPlan, Vec<CpuResult>, JobReport) {
    let specs = workload::parse_jobs(words.iter().map(String::as_str)).expect("the bench writes valid jobs");
    let plan = plan_job(&specs[job_index], &devices(), online_cpus).expect("the job fits the simulated devices");
    let shared = JobShared::new(&plan);
    let results: Vec<CpuResult> = (0..plan.cpus.len())
        .map(|index| {
            let mut backend = SimBackend {
                clock: Cell::new(1_000_000 * (index as u64 + 1)),
                device: device.clone(),
                buffers: vec![vec![0; plan.bs() as usize]; plan.iodepth as usize],
                in_flight: VecDeque::new(),
                issued: 0,
            };
            run_cpu(&plan, index, &mut backend, &shared).expect("the simulated device never stalls")
        })
        .collect();
    let report = JobReport::new(&plan, &results).expect("one result per CPU");
    (plan, results, report)
}

/// Runs one job (by its workload words) and returns the kernel's JSON line.
pub fn job_json_line(words: &[String], job_index: usize, device: &SimDevice, online_cpus: &[u32]) -> String {
    job_json_line_with_floor(words, job_index, device, online_cpus, false)
}

/// [`job_json_line`], with the floor totals the kernel adds when the boot measures the device
/// floor before each job (`megasas.floor=`, `nvme.floor=`): the simulated device's base latency
/// at QD 1, and 32 of those in parallel at QD 32.
fn job_json_line_with_floor(
    words: &[String],
    job_index: usize,
    device: &SimDevice,
    online_cpus: &[u32],
    floor: bool,
) -> String {
    let (plan, results, mut report) = run_job(words, job_index, device, online_cpus);
    let n = plan.cpus.len();
    // Counters as the kernel adds them: values that scale with the work done.
    let irqs: Vec<u64> = results.iter().map(|r| r.ios() / 2).collect();
    report.add_counter("irqs", irqs).expect("one value per CPU");
    report.add_counter("ipis", vec![3; n]).expect("one value per CPU");
    let ios: u64 = results.iter().map(CpuResult::ios).sum();
    let locked = matches!(
        plan.spec.quiesce,
        Some(workload::QuiescePolicy::Locked | workload::QuiescePolicy::Sleeping)
    );
    report.add_total("submitted", ios);
    report.add_total("hot_path_locks", if locked { ios } else { 0 });
    if floor {
        let qd1_iops = 1_000_000_000 / device.latency_ns.max(1);
        report.add_total("floor_qd1_iops", qd1_iops);
        report.add_total("floor_qd1_p50_ns", device.latency_ns);
        report.add_total("floor_qd32_iops", 32 * qd1_iops);
        report.add_total("floor_qd32_p50_ns", device.latency_ns);
    }
    let mut line = String::new();
    report.write_json_line(&mut line).expect("writing to a String");
    line
}

/// The human report (the text a scenario's patterns are matched against) of one job run on the
/// simulated device, with the given job totals added as a driver adds its counters.
#[cfg(test)]
pub fn job_human_report(words: &[String], device: &SimDevice, online_cpus: &[u32], totals: &[(&str, u64)]) -> String {
    let (_, _, mut report) = run_job(words, 0, device, online_cpus);
    for (name, value) in totals {
        report.add_total(name, *value);
    }
    let mut text = String::new();
    report.write_human(&mut text).expect("writing to a String");
    text
}

/// The console of a whole successful boot: noise, one JSON line per job, the SUCCESS line.
pub fn boot_console(boot: &BootPlan, device: &SimDevice) -> String {
    let words = boot.job_words();
    let online: Vec<u32> = (0..boot.smp).collect();
    let floor = boot
        .kernel_args()
        .iter()
        .any(|a| a.starts_with("megasas.floor=") || a.starts_with("nvme.floor="));
    let mut console = String::from("baremq: booting\nplatform: 2 CPUs online\n");
    for (i, job) in boot.jobs.iter().enumerate() {
        console.push_str(&format!(
            "[{}] 0.500s: 1000 IOPS, 4.1 MB/s, 500 ios, 0 errors\n",
            job.name
        ));
        console.push_str(&job_json_line_with_floor(&words, i, device, &online, floor));
    }
    console.push_str("BAREMQ: SUCCESS\n");
    console
}
