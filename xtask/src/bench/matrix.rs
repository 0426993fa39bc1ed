//! Benchmark matrices: a small table of named matrices, their expansion into job points, and the
//! packing of points into boots (several jobs per QEMU boot, one device kind per boot).

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The kernel keeps at most 2048 bytes of command line; stay well below so a boot never loses words.
pub const MAX_CMDLINE_BYTES: usize = 1800;
/// Jobs per boot at most, so one crash loses a bounded share of the run and boot timeouts stay sane.
pub const MAX_JOBS_PER_BOOT: usize = 16;
/// The workload engine's longest job name.
pub const MAX_JOB_NAME: usize = 32;
/// Size of the null device and of the megasas disk image.
pub const DEVICE_SIZE: &str = "1g";
const DEVICE_BYTES: u64 = 1 << 30;
/// Reads per queue depth of the device floor measured before each job on a controller
/// (`megasas.floor=`, `nvme.floor=`).
pub const FLOOR_READS: u32 = 2000;
/// Kernel option of the MegaRAID adaptive interrupt-then-poll mode ([`Completion::Adaptive`]).
pub const MEGASAS_ADAPTIVE_OPTION: &str = "megasas.irq_poll=on";
/// The MegaRAID switch for every other point: the kernel's default with MSI-X is the adaptive
/// mode, so the `irq`, `local`, `remote` and `poll` points turn it off to stay what they say.
pub const MEGASAS_NO_ADAPTIVE_OPTION: &str = "megasas.irq_poll=off";

/// What backs the block device a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// The kernel's null block device `null0` (no hardware): the block layer's own cost.
    Null,
    /// A QEMU `megasas-gen2` controller with one raw disk image: logical drive `md0`.
    MegasasGen2,
    /// A QEMU `megasas` (1078) controller with one raw disk image: logical drive `md0`.
    Megasas,
    /// A QEMU `nvme` controller (64 I/O queue pairs offered, one MSI-X vector each) with one
    /// namespace on a raw disk image: `nvme0n1`, one queue pair and one vector per CPU.
    Nvme,
    /// The emulated MegaRAID Fusion controller (Invader, `cargo xtask qemu-fusion`) with one
    /// logical drive on a raw disk image: `mf0`, one reply queue and MSI-X vector per CPU. Runs
    /// on the Fusion QEMU binary, not the system's.
    Fusion,
}

/// Which QEMU binary a device kind runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QemuBinary {
    /// The system's `qemu-system-x86_64`.
    System,
    /// The QEMU 7.2 with the emulated Fusion controller (`crate::qemufusion`).
    Fusion,
}

impl DeviceKind {
    /// Short name used in file names, the CSV and plots.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::MegasasGen2 => "megasas-gen2",
            Self::Megasas => "megasas",
            Self::Nvme => "nvme",
            Self::Fusion => "fusion",
        }
    }

    /// The kernel's name for the device the jobs use.
    pub const fn device_name(self) -> &'static str {
        match self {
            Self::Null => "null0",
            Self::MegasasGen2 | Self::Megasas => "md0",
            Self::Nvme => "nvme0n1",
            Self::Fusion => "mf0",
        }
    }

    /// Label for tables and plot legends: the device name plus the controller model when that is
    /// not obvious from the name.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Null => "null0",
            Self::MegasasGen2 => "md0 (gen2)",
            Self::Megasas => "md0 (1078)",
            Self::Nvme => "nvme0n1",
            Self::Fusion => "mf0 (Invader)",
        }
    }

    /// Kernel command-line words that create the device.
    pub fn kernel_args(self) -> Vec<String> {
        match self {
            Self::Null => vec![format!("null.size={DEVICE_SIZE}")],
            // The device floor before each job (reads straight to the controller, no block
            // layer), so the summary shows each result as a fraction of it.
            Self::MegasasGen2 | Self::Megasas => vec![format!("megasas.floor={FLOOR_READS}")],
            Self::Nvme => vec![format!("nvme.floor={FLOOR_READS}")],
            // The Fusion driver has no floor measurement; its defaults take one reply queue per CPU.
            Self::Fusion => Vec::new(),
        }
    }

    /// QEMU arguments that attach the device, with `image` as the disk (controller kinds only).
    pub fn qemu_args(self, image: &Path) -> Vec<String> {
        let model = match self {
            Self::Null => return Vec::new(),
            // QEMU's defaults (max_ioqpairs=64, msix_qsize=65) cover every -smp of the matrices:
            // the driver takes one queue pair per CPU.
            Self::Nvme => {
                return vec![
                    "-drive".into(),
                    format!("if=none,id=nvm0,file={},format=raw,cache=unsafe", image.display()),
                    "-device".into(),
                    "nvme,id=nvme0,serial=bench0".into(),
                    "-device".into(),
                    "nvme-ns,drive=nvm0,bus=nvme0,nsid=1".into(),
                ];
            }
            // The emulated controller offers more vectors than the matrices' CPUs; the driver
            // takes one reply queue and vector per CPU.
            Self::Fusion => {
                return vec![
                    "-device".into(),
                    "megasas-fusion,id=fusion0,generation=invader".into(),
                    "-drive".into(),
                    format!("if=none,id=f0,file={},format=raw,cache=unsafe", image.display()),
                    "-device".into(),
                    "scsi-hd,bus=fusion0.0,drive=f0,channel=0,scsi-id=0".into(),
                ];
            }
            Self::MegasasGen2 => "megasas-gen2",
            Self::Megasas => "megasas",
        };
        vec![
            "-device".into(),
            format!("{model},id=hba0"),
            "-drive".into(),
            format!("if=none,id=d0,file={},format=raw,cache=unsafe", image.display()),
            "-device".into(),
            "scsi-hd,bus=hba0.0,drive=d0,scsi-id=0".into(),
        ]
    }

    /// Size of the disk image this kind needs, if any.
    pub const fn image_bytes(self) -> Option<u64> {
        match self {
            Self::Null => None,
            Self::MegasasGen2 | Self::Megasas | Self::Nvme | Self::Fusion => Some(DEVICE_BYTES),
        }
    }

    /// The QEMU binary that has this device.
    pub const fn qemu_binary(self) -> QemuBinary {
        match self {
            Self::Fusion => QemuBinary::Fusion,
            Self::Null | Self::MegasasGen2 | Self::Megasas | Self::Nvme => QemuBinary::System,
        }
    }
}

/// Access pattern (the workload's `rw=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
}

impl Rw {
    /// The workload's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::RandRead => "randread",
            Self::RandWrite => "randwrite",
        }
    }

    /// Two letters for job names.
    const fn short(self) -> &'static str {
        match self {
            Self::Read => "sr",
            Self::Write => "sw",
            Self::RandRead => "rr",
            Self::RandWrite => "rw",
        }
    }
}

/// Where completions run (the workload's `completion=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Completion {
    /// In the interrupt handler of the CPU the interrupt landed on.
    Irq,
    /// Deferred, on the CPU that took the interrupt.
    Local,
    /// Sent back to the submitting CPU by IPI.
    Remote,
    /// Polled by the submitting CPU, no interrupts.
    Poll,
    /// `irq` with the device's adaptive interrupt-then-poll mode switched on for the boot
    /// (`megasas.irq_poll=on`): not a job key, so its points get a boot of their own.
    Adaptive,
}

impl Completion {
    /// Every block-layer policy, in table order (the adaptive mode is a device option).
    pub const ALL: [Self; 4] = [Self::Irq, Self::Local, Self::Remote, Self::Poll];

    /// The label in tables, job names, CSV and plots.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Irq => "irq",
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Poll => "poll",
            Self::Adaptive => "adaptive",
        }
    }

    /// The workload's `completion=` value (the kernel reports it back).
    pub const fn job_word(self) -> &'static str {
        match self {
            Self::Adaptive => "irq",
            other => other.as_str(),
        }
    }
}

/// How the block layer quiesces queues (the workload's `quiesce=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quiesce {
    /// Atomic quiesce depth with paired barriers: no lock on the dispatch path.
    LockFree,
    /// A lock around the dispatch path (the behaviour the lock-free design replaces).
    Locked,
    /// The same lock as PREEMPT_RT's sleeping `spinlock_t` (modelled): a contended CPU parks
    /// until woken, then pays a reschedule cost.
    Sleeping,
}

impl Quiesce {
    /// The workload's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LockFree => "lockfree",
            Self::Locked => "locked",
            Self::Sleeping => "sleeping",
        }
    }

    const fn short(self) -> &'static str {
        match self {
            Self::LockFree => "lf",
            Self::Locked => "lk",
            Self::Sleeping => "sl",
        }
    }
}

/// One job of the matrix: everything that identifies a measurement. The runtime is the same for
/// every point of a run and is kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Point {
    /// Device the job runs on.
    pub device: DeviceKind,
    /// Access pattern.
    pub rw: Rw,
    /// Block size in bytes.
    pub bs: u32,
    /// Requests in flight per CPU, as asked (the kernel may cap it; the report says).
    pub iodepth: u32,
    /// Submitting CPUs: CPUs `0..cpus`.
    pub cpus: u32,
    /// Completion policy.
    pub completion: Completion,
    /// Quiesce policy.
    pub quiesce: Quiesce,
}

impl Point {
    /// A short, unique job name (characters the workload accepts).
    pub fn job_name(&self) -> String {
        format!(
            "{}{}-qd{}-c{}-{}-{}",
            self.rw.short(),
            size_word(u64::from(self.bs)),
            self.iodepth,
            self.cpus,
            self.completion.as_str(),
            self.quiesce.short()
        )
    }

    /// The job's section on the kernel command line (device and runtime are boot-wide defaults).
    pub fn job_words(&self, name: &str) -> Vec<String> {
        vec![
            format!("job={name}"),
            format!("rw={}", self.rw.as_str()),
            format!("bs={}", size_word(u64::from(self.bs))),
            format!("iodepth={}", self.iodepth),
            format!("cpus={}", cpu_list(self.cpus)),
            format!("completion={}", self.completion.job_word()),
            format!("quiesce={}", self.quiesce.as_str()),
        ]
    }
}

impl Point {
    /// Kernel options the point's boot needs beyond the device's: the adaptive mode's switch
    /// (on for `adaptive` points, off for the others on MegaRAID, whose default is on). An
    /// error for a device without an adaptive mode.
    pub fn boot_options(&self) -> Result<Vec<String>, String> {
        match (self.completion, self.device) {
            (Completion::Adaptive, DeviceKind::MegasasGen2 | DeviceKind::Megasas) => {
                Ok(vec![MEGASAS_ADAPTIVE_OPTION.to_string()])
            }
            (_, DeviceKind::MegasasGen2 | DeviceKind::Megasas) => Ok(vec![MEGASAS_NO_ADAPTIVE_OPTION.to_string()]),
            (Completion::Adaptive, other) => Err(format!(
                "point '{self}': {} has no adaptive completion mode",
                other.label()
            )),
            _ => Ok(Vec::new()),
        }
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} bs={} qd={} cpus={} completion={} quiesce={}",
            self.device.label(),
            self.rw.as_str(),
            size_word(u64::from(self.bs)),
            self.iodepth,
            self.cpus,
            self.completion.as_str(),
            self.quiesce.as_str()
        )
    }
}

/// `4096` -> `4k`, `1048576` -> `1m`, other values in bytes.
pub fn size_word(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "g"), (1 << 20, "m"), (1 << 10, "k")];
    for (unit, suffix) in UNITS {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// The workload's CPU list for CPUs `0..count`.
fn cpu_list(count: u32) -> String {
    match count {
        0 | 1 => "0".into(),
        n => format!("0-{}", n - 1),
    }
}

/// A product of parameter lists; a matrix is the union of its sweeps.
#[derive(Debug, Clone, Copy)]
pub struct Sweep {
    /// Devices.
    pub devices: &'static [DeviceKind],
    /// Access patterns.
    pub rw: &'static [Rw],
    /// Block sizes in bytes.
    pub bs: &'static [u32],
    /// Queue depths per CPU.
    pub iodepth: &'static [u32],
    /// Submitting CPU counts.
    pub cpus: &'static [u32],
    /// Completion policies.
    pub completion: &'static [Completion],
    /// Quiesce policies.
    pub quiesce: &'static [Quiesce],
}

/// The reference configuration of a matrix: plots vary one or two parameters and pin the others
/// to these values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Base {
    /// Access pattern.
    pub rw: Rw,
    /// Block size.
    pub bs: u32,
    /// Queue depth per CPU.
    pub iodepth: u32,
    /// Submitting CPUs.
    pub cpus: u32,
    /// Completion policy.
    pub completion: Completion,
    /// Quiesce policy.
    pub quiesce: Quiesce,
}

/// A named benchmark matrix.
#[derive(Debug, Clone, Copy)]
pub struct Matrix {
    /// Name for `--matrix`.
    pub name: &'static str,
    /// One line for `--list`.
    pub about: &'static str,
    /// CPUs of every boot (`-smp`).
    pub smp: u32,
    /// Memory of every boot (`-m`).
    pub mem: &'static str,
    /// Runtime of each job unless `--runtime` says otherwise.
    pub runtime_ms: u64,
    /// The sweeps whose union is the matrix.
    pub sweeps: &'static [Sweep],
    /// Reference point for the plots.
    pub base: Base,
}

const KB: u32 = 1024;
const QUICK_DEVICES: &[DeviceKind] = &[
    DeviceKind::Null,
    DeviceKind::MegasasGen2,
    DeviceKind::Nvme,
    DeviceKind::Fusion,
];
const FULL_DEVICES: &[DeviceKind] = &[
    DeviceKind::Null,
    DeviceKind::MegasasGen2,
    DeviceKind::Megasas,
    DeviceKind::Nvme,
    DeviceKind::Fusion,
];
const QUIESCE_BOTH: &[Quiesce] = &[Quiesce::LockFree, Quiesce::Locked];

/// Every matrix `--matrix` accepts; the first is the default.
pub const MATRICES: &[Matrix] = &[
    Matrix {
        name: "quick",
        about: "null0 vs md0 vs nvme0n1 vs mf0 (Fusion), 4k random reads: qd 1/8/32 x 1-2 CPUs, then every completion policy x both quiesce policies at qd 8 on 2 CPUs, then md0's adaptive mode (megasas.irq_poll=on) beside poll at qd 1/32 on 1 CPU",
        smp: 2,
        mem: "512M",
        runtime_ms: 2000,
        sweeps: &[
            Sweep {
                devices: QUICK_DEVICES,
                rw: &[Rw::RandRead],
                bs: &[4 * KB],
                iodepth: &[1, 8, 32],
                cpus: &[1, 2],
                completion: &[Completion::Irq],
                quiesce: &[Quiesce::LockFree],
            },
            Sweep {
                devices: QUICK_DEVICES,
                rw: &[Rw::RandRead],
                bs: &[4 * KB],
                iodepth: &[8],
                cpus: &[2],
                completion: &Completion::ALL,
                quiesce: QUIESCE_BOTH,
            },
            // md0's adaptive interrupt-then-poll mode (a boot of its own) and pure polling, at
            // the depths where the first sweep has irq.
            Sweep {
                devices: &[DeviceKind::MegasasGen2],
                rw: &[Rw::RandRead],
                bs: &[4 * KB],
                iodepth: &[1, 32],
                cpus: &[1],
                completion: &[Completion::Adaptive, Completion::Poll],
                quiesce: &[Quiesce::LockFree],
            },
        ],
        base: Base {
            rw: Rw::RandRead,
            bs: 4 * KB,
            iodepth: 8,
            cpus: 2,
            completion: Completion::Irq,
            quiesce: Quiesce::LockFree,
        },
    },
    Matrix {
        name: "smoke",
        about: "null0 only, two short jobs: checks that the whole pipeline works",
        smp: 2,
        mem: "256M",
        runtime_ms: 500,
        sweeps: &[Sweep {
            devices: &[DeviceKind::Null],
            rw: &[Rw::RandRead],
            bs: &[4 * KB],
            iodepth: &[1, 8],
            cpus: &[2],
            completion: &[Completion::Irq],
            quiesce: &[Quiesce::LockFree],
        }],
        base: Base {
            rw: Rw::RandRead,
            bs: 4 * KB,
            iodepth: 8,
            cpus: 2,
            completion: Completion::Irq,
            quiesce: Quiesce::LockFree,
        },
    },
    Matrix {
        name: "full",
        about: "random reads: bs 4k-128k x qd 1-64 x 1-4 CPUs x every completion and quiesce policy x null0, md0 (gen2 and 1078), nvme0n1, mf0 (Fusion); plus random writes at the base point",
        smp: 4,
        mem: "1G",
        runtime_ms: 2000,
        sweeps: &[
            Sweep {
                devices: FULL_DEVICES,
                rw: &[Rw::RandRead],
                bs: &[4 * KB, 16 * KB, 64 * KB, 128 * KB],
                iodepth: &[1, 4, 16, 64],
                cpus: &[1, 2, 4],
                completion: &Completion::ALL,
                quiesce: QUIESCE_BOTH,
            },
            Sweep {
                devices: FULL_DEVICES,
                rw: &[Rw::RandWrite],
                bs: &[4 * KB],
                iodepth: &[16],
                cpus: &[4],
                completion: &Completion::ALL,
                quiesce: QUIESCE_BOTH,
            },
        ],
        base: Base {
            rw: Rw::RandRead,
            bs: 4 * KB,
            iodepth: 16,
            cpus: 4,
            completion: Completion::Irq,
            quiesce: Quiesce::LockFree,
        },
    },
];

/// The matrix called `name`.
pub fn find(name: &str) -> Result<&'static Matrix, String> {
    MATRICES.iter().find(|m| m.name == name).ok_or_else(|| {
        let names: Vec<&str> = MATRICES.iter().map(|m| m.name).collect();
        format!("no matrix named '{name}' (known: {})", names.join(", "))
    })
}

impl Matrix {
    /// Every point of the matrix, without duplicates, grouped by device in the order the sweeps
    /// name them, a device's points that need boot options (adaptive) after its others.
    pub fn points(&self) -> Vec<Point> {
        let mut seen = HashSet::new();
        let mut points = Vec::new();
        for sweep in self.sweeps {
            for &device in sweep.devices {
                for &rw in sweep.rw {
                    for &bs in sweep.bs {
                        for &cpus in sweep.cpus {
                            for &iodepth in sweep.iodepth {
                                for &completion in sweep.completion {
                                    for &quiesce in sweep.quiesce {
                                        let point = Point {
                                            device,
                                            rw,
                                            bs,
                                            iodepth,
                                            cpus,
                                            completion,
                                            quiesce,
                                        };
                                        if seen.insert(point) {
                                            points.push(point);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        let mut device_order: Vec<DeviceKind> = Vec::new();
        for p in &points {
            if !device_order.contains(&p.device) {
                device_order.push(p.device);
            }
        }
        // A stable sort keeps each device's points in sweep order.
        points.sort_by_key(|p| {
            (
                device_order.iter().position(|d| *d == p.device),
                p.completion == Completion::Adaptive,
            )
        });
        points
    }

    /// Packs the points into boots: one device kind and one set of boot options
    /// ([`Point::boot_options`]) per boot, at most [`MAX_JOBS_PER_BOOT`] jobs, and a command
    /// line of at most [`MAX_CMDLINE_BYTES`].
    pub fn boots(&self, runtime_ms: u64) -> Result<Vec<BootPlan>, String> {
        let mut boots: Vec<BootPlan> = Vec::new();
        for point in self.points() {
            if point.cpus == 0 || point.cpus > self.smp {
                return Err(format!(
                    "matrix '{}': point '{point}' wants {} CPUs but boots have {}",
                    self.name, point.cpus, self.smp
                ));
            }
            let name = point.job_name();
            if name.len() > MAX_JOB_NAME {
                return Err(format!("job name '{name}' is longer than {MAX_JOB_NAME} characters"));
            }
            let options = point.boot_options()?;
            let fits = boots.last().is_some_and(|b| {
                b.device == point.device
                    && b.options == options
                    && b.jobs.len() < MAX_JOBS_PER_BOOT
                    && b.cmdline_len() + 1 + words_len(&point.job_words(&name)) <= MAX_CMDLINE_BYTES
            });
            if !fits {
                let boot = BootPlan {
                    index: boots.len(),
                    device: point.device,
                    smp: self.smp,
                    mem: self.mem.to_string(),
                    runtime_ms,
                    options,
                    defaults: Vec::new(),
                    jobs: Vec::new(),
                };
                if boot.cmdline_len() + 1 + words_len(&point.job_words(&name)) > MAX_CMDLINE_BYTES {
                    return Err(format!("job '{name}' alone does not fit on a kernel command line"));
                }
                boots.push(boot);
            }
            let boot = boots.last_mut().expect("a boot was just ensured");
            boot.jobs.push(PlannedJob { name, point });
        }
        Ok(boots)
    }
}

fn words_len(words: &[String]) -> usize {
    words.iter().map(String::len).sum::<usize>() + words.len().saturating_sub(1)
}

/// One job of a boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedJob {
    /// Its `job=` name, unique within the boot.
    pub name: String,
    /// What it measures.
    pub point: Point,
}

/// One QEMU boot: a device, a machine size, and the jobs it runs in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootPlan {
    /// Position in the run, from 0.
    pub index: usize,
    /// The device every job uses.
    pub device: DeviceKind,
    /// `-smp`.
    pub smp: u32,
    /// `-m`.
    pub mem: String,
    /// Runtime of each job.
    pub runtime_ms: u64,
    /// More kernel options for this boot only, after the device's (e.g. `megasas.irq_poll=on`
    /// for the lab's adaptive-completion boot).
    pub options: Vec<String>,
    /// More boot-wide job defaults (e.g. `trace=64` from `cargo xtask lab --trace`); they stay
    /// within the command line's margin (the kernel keeps 2048 bytes).
    pub defaults: Vec<String>,
    /// The jobs, in run order.
    pub jobs: Vec<PlannedJob>,
}

impl BootPlan {
    /// The workload words only: boot-wide defaults, then one section per job.
    pub fn job_words(&self) -> Vec<String> {
        let mut words = vec![
            format!("device={}", self.device.device_name()),
            format!("runtime={}ms", self.runtime_ms),
        ];
        words.extend(self.defaults.iter().cloned());
        for job in &self.jobs {
            words.extend(job.point.job_words(&job.name));
        }
        words
    }

    /// The whole kernel command line: device options, then the jobs.
    pub fn kernel_args(&self) -> Vec<String> {
        let mut words = self.device.kernel_args();
        words.extend(self.options.iter().cloned());
        words.extend(self.job_words());
        words
    }

    fn cmdline_len(&self) -> usize {
        words_len(&self.kernel_args())
    }

    /// Seconds to wait for the boot: a generous allowance for booting under TCG plus three times
    /// the jobs' runtime and a margin per job.
    pub fn timeout_s(&self) -> u64 {
        let jobs = self.jobs.len() as u64;
        120 + jobs * (3 * self.runtime_ms.div_ceil(1000) + 10)
    }

    /// Log file name under `target/bench/logs/` for pass `repeat` (from 0) over the matrix.
    pub fn log_name(&self, repeat: u32) -> String {
        format!("r{repeat}-boot-{:02}-{}.log", self.index, self.device.key())
    }
}

/// Parses `--runtime`: `500ms`, `2s`, `1m`, or bare seconds. Returns milliseconds (at least 1).
pub fn parse_runtime_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("--runtime '{text}': use a duration such as 500ms, 2s or 1m (at least 1ms, at most 1h)");
    let (digits, unit_ms) = if let Some(d) = text.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = text.strip_suffix('s') {
        (d, 1000)
    } else if let Some(d) = text.strip_suffix('m') {
        (d, 60_000)
    } else {
        (text, 1000)
    };
    let value: u64 = digits.parse().map_err(|_| bad())?;
    let ms = value.checked_mul(unit_ms).ok_or_else(bad)?;
    if ms == 0 || ms > 3_600_000 {
        return Err(bad());
    }
    Ok(ms)
}

/// Human form of a duration in milliseconds, in the workload's syntax.
pub fn runtime_word(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point_of(spec: &workload::JobSpec, boot: &BootPlan) -> Point {
        let device = boot.device;
        let rw = match spec.rw {
            workload::RwMode::Read => Rw::Read,
            workload::RwMode::Write => Rw::Write,
            workload::RwMode::RandRead => Rw::RandRead,
            workload::RwMode::RandWrite => Rw::RandWrite,
            other => panic!("the matrix never asks for {other:?}"),
        };
        let cpus = match &spec.cpus {
            workload::CpuSelection::List(set) => {
                let listed: Vec<u32> = (0..64).filter(|&c| set.contains(c)).collect();
                assert_eq!(listed, (0..listed.len() as u32).collect::<Vec<_>>(), "CPUs 0..n");
                listed.len() as u32
            }
            workload::CpuSelection::All | workload::CpuSelection::Clones(_) => {
                panic!("the matrix always names its CPUs, one clone each")
            }
        };
        let adaptive = boot.options.iter().any(|o| o == MEGASAS_ADAPTIVE_OPTION);
        let completion = match spec.completion.expect("always explicit") {
            workload::CompletionPolicy::Irq if adaptive => Completion::Adaptive,
            workload::CompletionPolicy::Irq => Completion::Irq,
            workload::CompletionPolicy::Local => Completion::Local,
            workload::CompletionPolicy::Remote => Completion::Remote,
            workload::CompletionPolicy::Poll => Completion::Poll,
        };
        let quiesce = match spec.quiesce.expect("always explicit") {
            workload::QuiescePolicy::LockFree => Quiesce::LockFree,
            workload::QuiescePolicy::Locked => Quiesce::Locked,
            workload::QuiescePolicy::Sleeping => Quiesce::Sleeping,
        };
        assert_eq!(spec.device.as_deref(), Some(device.device_name()));
        Point {
            device,
            rw,
            bs: spec.bs,
            iodepth: spec.iodepth,
            cpus,
            completion,
            quiesce,
        }
    }

    #[test]
    fn points_have_no_duplicates_and_cover_every_sweep() {
        for matrix in MATRICES {
            let points = matrix.points();
            let unique: HashSet<_> = points.iter().collect();
            assert_eq!(unique.len(), points.len(), "{}: duplicate points", matrix.name);
            for sweep in matrix.sweeps {
                let product = sweep.devices.len()
                    * sweep.rw.len()
                    * sweep.bs.len()
                    * sweep.iodepth.len()
                    * sweep.cpus.len()
                    * sweep.completion.len()
                    * sweep.quiesce.len();
                let covered = points
                    .iter()
                    .filter(|p| {
                        sweep.devices.contains(&p.device)
                            && sweep.rw.contains(&p.rw)
                            && sweep.bs.contains(&p.bs)
                            && sweep.iodepth.contains(&p.iodepth)
                            && sweep.cpus.contains(&p.cpus)
                            && sweep.completion.contains(&p.completion)
                            && sweep.quiesce.contains(&p.quiesce)
                    })
                    .count();
                assert_eq!(covered, product, "{}: a sweep is not fully covered", matrix.name);
            }
        }
    }

    #[test]
    fn quick_matrix_is_the_union_of_its_sweeps() {
        let quick = find("quick").unwrap();
        // 4 devices x (3 qd x 2 cpus) + 4 devices x (4 policies x 2 quiesce), sharing the
        // (qd 8, 2 CPUs, irq, lockfree) point on each device, + md0 adaptive and poll at qd 1
        // and 32 on 1 CPU.
        assert_eq!(quick.points().len(), 4 * 6 + 4 * 8 - 4 + 4);
        let devices: Vec<DeviceKind> = quick.points().iter().map(|p| p.device).collect();
        let switches = devices.windows(2).filter(|w| w[0] != w[1]).count();
        assert_eq!(switches, 3, "points are grouped by device: {devices:?}");
        assert_eq!(devices.iter().filter(|d| **d == DeviceKind::Fusion).count(), 6 + 8 - 1);
        // md0's adaptive points come last among md0's, beside an irq and a poll point each.
        let md: Vec<Point> = quick
            .points()
            .into_iter()
            .filter(|p| p.device == DeviceKind::MegasasGen2)
            .collect();
        let adaptive: Vec<u32> = md
            .iter()
            .filter(|p| p.completion == Completion::Adaptive)
            .map(|p| p.iodepth)
            .collect();
        assert_eq!(adaptive, [1, 32]);
        assert!(md[md.len() - 2..].iter().all(|p| p.completion == Completion::Adaptive));
        for qd in [1, 32] {
            for completion in [Completion::Irq, Completion::Poll, Completion::Adaptive] {
                let same = |p: &&Point| {
                    p.iodepth == qd && p.cpus == 1 && p.completion == completion && p.quiesce == Quiesce::LockFree
                };
                assert_eq!(md.iter().filter(same).count(), 1, "qd {qd} {completion:?}");
            }
        }
    }

    #[test]
    fn adaptive_points_get_a_boot_of_their_own_with_the_devices_switch() {
        let boots = find("quick").unwrap().boots(2000).unwrap();
        let adaptive: Vec<&BootPlan> = boots
            .iter()
            .filter(|b| b.jobs.iter().any(|j| j.point.completion == Completion::Adaptive))
            .collect();
        assert_eq!(adaptive.len(), 1);
        let boot = adaptive[0];
        assert_eq!(boot.device, DeviceKind::MegasasGen2);
        assert!(boot.jobs.iter().all(|j| j.point.completion == Completion::Adaptive));
        assert_eq!(boot.options, [MEGASAS_ADAPTIVE_OPTION]);
        let args = boot.kernel_args();
        assert!(args.contains(&MEGASAS_ADAPTIVE_OPTION.to_string()), "{args:?}");
        // The kernel runs them as completion=irq; the name says adaptive.
        assert!(args.contains(&"completion=irq".to_string()), "{args:?}");
        assert!(!args.iter().any(|a| a == "completion=adaptive"), "{args:?}");
        assert!(boot.jobs.iter().all(|j| j.name.contains("-adaptive-")));
        // Every other boot runs without the adaptive mode: MegaRAID boots turn it off.
        for b in boots.iter().filter(|b| b.index != boot.index) {
            assert!(!b.kernel_args().contains(&MEGASAS_ADAPTIVE_OPTION.to_string()));
            match b.device {
                DeviceKind::MegasasGen2 | DeviceKind::Megasas => {
                    assert_eq!(b.options, [MEGASAS_NO_ADAPTIVE_OPTION], "boot {}", b.index)
                }
                _ => assert!(b.options.is_empty(), "boot {}", b.index),
            }
        }
        // A device without an adaptive mode is refused by name.
        let mut nvme = boot.jobs[0].point;
        nvme.device = DeviceKind::Nvme;
        let err = nvme.boot_options().unwrap_err();
        assert!(err.contains("nvme0n1 has no adaptive completion mode"), "{err}");
    }

    #[test]
    fn boots_hold_every_point_once_one_device_each_and_fit_the_command_line() {
        for matrix in MATRICES {
            let boots = matrix.boots(matrix.runtime_ms).unwrap();
            let mut seen = Vec::new();
            for (i, boot) in boots.iter().enumerate() {
                assert_eq!(boot.index, i);
                assert!(!boot.jobs.is_empty() && boot.jobs.len() <= MAX_JOBS_PER_BOOT);
                assert!(boot.kernel_args().join(" ").len() <= MAX_CMDLINE_BYTES);
                assert!(boot.jobs.iter().all(|j| j.point.device == boot.device));
                let names: HashSet<&str> = boot.jobs.iter().map(|j| j.name.as_str()).collect();
                assert_eq!(names.len(), boot.jobs.len(), "job names are unique in a boot");
                seen.extend(boot.jobs.iter().map(|j| j.point));
            }
            assert_eq!(
                seen,
                matrix.points(),
                "{}: boots keep every point, in order",
                matrix.name
            );
        }
        // The quick matrix needs one boot per device, plus md0's adaptive boot.
        let quick: Vec<DeviceKind> = find("quick")
            .unwrap()
            .boots(2000)
            .unwrap()
            .iter()
            .map(|b| b.device)
            .collect();
        assert_eq!(
            quick,
            [
                DeviceKind::Null,
                DeviceKind::MegasasGen2,
                DeviceKind::MegasasGen2,
                DeviceKind::Nvme,
                DeviceKind::Fusion
            ]
        );
    }

    #[test]
    fn job_words_parse_with_the_workload_parser_into_the_same_points() {
        for matrix in MATRICES {
            for boot in matrix.boots(1500).unwrap() {
                let specs = workload::parse_jobs(boot.job_words().iter().map(String::as_str))
                    .unwrap_or_else(|e| panic!("{}: boot {} does not parse: {e}", matrix.name, boot.index));
                assert_eq!(specs.len(), boot.jobs.len());
                for (spec, job) in specs.iter().zip(&boot.jobs) {
                    assert_eq!(spec.name, job.name);
                    assert_eq!(spec.runtime_ns, Some(1_500_000_000));
                    assert_eq!(point_of(spec, &boot), job.point);
                }
            }
        }
    }

    #[test]
    fn devices_bring_their_kernel_and_qemu_arguments() {
        let quick = find("quick").unwrap().boots(2000).unwrap();
        assert_eq!(quick[0].kernel_args()[0], "null.size=1g");
        assert_eq!(quick[1].kernel_args()[0], format!("megasas.floor={FLOOR_READS}"));
        assert_eq!(quick[1].kernel_args()[1], MEGASAS_NO_ADAPTIVE_OPTION);
        assert!(quick[1].kernel_args()[2].starts_with("device=md0"));
        // Every controller measures its floor before each job; the null device has none.
        let nvme = quick.iter().find(|b| b.device == DeviceKind::Nvme).unwrap();
        assert_eq!(nvme.kernel_args()[0], format!("nvme.floor={FLOOR_READS}"));
        assert!(nvme.kernel_args()[1].starts_with("device=nvme0n1"));
        assert!(!quick[0].kernel_args().iter().any(|a| a.contains(".floor=")));
        let qemu = DeviceKind::MegasasGen2.qemu_args(Path::new("/tmp/d.raw"));
        assert_eq!(qemu[1], "megasas-gen2,id=hba0");
        assert_eq!(qemu[3], "if=none,id=d0,file=/tmp/d.raw,format=raw,cache=unsafe");
        assert_eq!(qemu[5], "scsi-hd,bus=hba0.0,drive=d0,scsi-id=0");
        assert_eq!(DeviceKind::Megasas.qemu_args(Path::new("x"))[1], "megasas,id=hba0");
        assert!(DeviceKind::Null.qemu_args(Path::new("x")).is_empty());
        // The Fusion logical drive: no floor or MegaRAID MFI switch, the emulated Invader on its
        // own QEMU binary, in the quick and full matrices.
        let fusion = quick.iter().find(|b| b.device == DeviceKind::Fusion).unwrap();
        assert_eq!(fusion.kernel_args()[0], "device=mf0");
        assert!(!fusion.kernel_args().iter().any(|a| a.starts_with("megasas.")));
        assert_eq!(
            DeviceKind::Fusion.qemu_args(Path::new("/tmp/f.raw")),
            [
                "-device",
                "megasas-fusion,id=fusion0,generation=invader",
                "-drive",
                "if=none,id=f0,file=/tmp/f.raw,format=raw,cache=unsafe",
                "-device",
                "scsi-hd,bus=fusion0.0,drive=f0,channel=0,scsi-id=0"
            ]
        );
        assert_eq!(DeviceKind::Fusion.qemu_binary(), QemuBinary::Fusion);
        for other in [
            DeviceKind::Null,
            DeviceKind::MegasasGen2,
            DeviceKind::Megasas,
            DeviceKind::Nvme,
        ] {
            assert_eq!(other.qemu_binary(), QemuBinary::System);
        }
        let full = find("full").unwrap().points();
        assert!(
            full.iter()
                .any(|p| p.device == DeviceKind::Fusion && p.rw == Rw::RandWrite)
        );
    }

    #[test]
    fn runtime_parsing() {
        assert_eq!(parse_runtime_ms("500ms"), Ok(500));
        assert_eq!(parse_runtime_ms("2s"), Ok(2000));
        assert_eq!(parse_runtime_ms("3"), Ok(3000));
        assert_eq!(parse_runtime_ms("1m"), Ok(60_000));
        for bad in ["", "0s", "2h", "-1s", "1.5s", "61m", "99999999999999999999s"] {
            let err = parse_runtime_ms(bad).unwrap_err();
            assert!(err.contains(&format!("'{bad}'")), "{err}");
        }
        assert_eq!(runtime_word(2000), "2s");
        assert_eq!(runtime_word(1500), "1500ms");
        assert_eq!(size_word(4096), "4k");
        assert_eq!(size_word(128 << 10), "128k");
        assert_eq!(size_word(1 << 20), "1m");
        assert_eq!(size_word(1536), "1536");
    }

    #[test]
    fn unknown_matrix_names_the_known_ones() {
        let err = find("nope").unwrap_err();
        assert!(
            err.contains("'nope'") && err.contains("quick") && err.contains("full"),
            "{err}"
        );
    }
}
