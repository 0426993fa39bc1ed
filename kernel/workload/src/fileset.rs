//! fio's several files per job (`filename=a:b`, one device each here): which file each I/O goes
//! to (`file_service_type`), and each file's own stream of blocks.
//!
//! As in fio 3.33 (`io_u.c`, `__get_next_file`), every file keeps its own position (sequential
//! jobs) or random map, and the job picks a file per I/O:
//!
//! * `roundrobin:N` (the default, N = 1): N I/Os on a file, then the next file in the list;
//! * `sequential`: a file's every I/O, then the next file;
//! * `random:N`: N I/Os on a file drawn uniformly, then another draw.
//!
//! A file is done once it has had one I/O per block of its region (its pass): a sequential job
//! at the region's end, a random job with the random map once every block came. Random jobs
//! without the map (`norandommap`, skewed or zoned draws) and time-based jobs have no pass: their
//! files are never done, as in fio (which starts such a file over). Done files are skipped; when
//! every file is done and a size-bound job still has I/Os left (`loops`, `io_size` above the
//! region), all files start a new pass, as fio's next loop does. The job's I/O count is the
//! planner's, for all files together: fio's `size` (split between the files), `io_size` or
//! `number_ios`, times `loops`.
//!
//! The blocks handed out are the CPU's slice blocks of [`JobPlan::files`]: file `f`'s block `k`
//! is `files[f].first_block + k`.

use alloc::vec::Vec;

use crate::engine::IoOp;
use crate::generator::IoGenerator;
use crate::job::FileService;
use crate::plan::JobPlan;
use crate::rng::{Rng, mix64};

/// Marks a file with no pass (never done).
const NO_PASS: u64 = u64::MAX;

/// The I/O stream of one CPU of a job over several files.
#[derive(Debug, Clone)]
pub struct FileSetGenerator {
    files: Vec<FileStream>,
    service: FileService,
    /// The file of the last I/O (starts at the last file, so the first pick is file 0).
    current: usize,
    /// I/Os left on `current` before the service picks again.
    left_on_current: u32,
    /// Files not done in this pass.
    busy_files: usize,
    /// `random:N`'s draws.
    rng: Rng,
    /// I/Os left of a size-bound job (`None`: time-based).
    remaining: Option<u64>,
}

#[derive(Debug, Clone)]
struct FileStream {
    generator: IoGenerator,
    /// The file's first block in the CPU's slice.
    first_block: u64,
    /// I/Os per pass ([`NO_PASS`]: never done).
    pass: u64,
    /// I/Os left in this pass.
    left_in_pass: u64,
}

impl FileSetGenerator {
    /// The stream of CPU `cpu_index` (an index into `plan.cpus`) of a job with `plan.files`.
    pub fn new(plan: &JobPlan, cpu_index: usize) -> Self {
        let spec = &plan.spec;
        let mapped_random = spec.random_map && spec.zones.is_empty() && spec.skew.is_none();
        let has_pass = !spec.is_time_based() && (!spec.rw.is_random() || mapped_random);
        let files: Vec<FileStream> = (0..plan.files.len())
            .map(|index| {
                let file = &plan.files[index];
                let pass = if has_pass { file.blocks } else { NO_PASS };
                FileStream {
                    generator: IoGenerator::for_file(plan, cpu_index, index),
                    first_block: file.first_block,
                    pass,
                    left_in_pass: pass,
                }
            })
            .collect();
        let total_blocks: u64 = plan.files.iter().map(|f| f.blocks).sum();
        Self {
            current: files.len().saturating_sub(1),
            busy_files: files.len(),
            files,
            service: spec.file_service,
            left_on_current: 0,
            rng: Rng::new(spec.seed ^ mix64(cpu_index as u64 + 1) ^ 0x6669_6c65),
            remaining: if spec.is_time_based() {
                None
            } else {
                Some(spec.ios_per_cpu.unwrap_or(total_blocks))
            },
        }
    }

    /// The file of the next I/O, by the service type, among those not done.
    fn pick(&mut self) {
        let count = self.files.len();
        let (next, run) = match self.service {
            FileService::RoundRobin(n) => (self.next_busy_after(self.current), n),
            FileService::Sequential => (self.next_busy_after(self.current), u32::MAX),
            FileService::Random(n) => loop {
                // fio draws again while it lands on a done file: uniform among the busy ones.
                let drawn = self.rng.below(count as u64) as usize;
                if self.files[drawn].left_in_pass != 0 {
                    break (drawn, n);
                }
            },
        };
        self.current = next;
        self.left_on_current = run;
    }

    /// The first file after `index` (wrapping) that is not done; there is one.
    fn next_busy_after(&self, index: usize) -> usize {
        let count = self.files.len();
        (1..=count)
            .map(|step| (index + step) % count)
            .find(|&i| self.files[i].left_in_pass != 0)
            .unwrap_or(index)
    }

    /// The next I/O as `(operation, block of the CPU's slice)`, or `None` once a size-bound job
    /// has issued all of its I/Os.
    pub fn next_io(&mut self) -> Option<(IoOp, u64)> {
        if let Some(remaining) = &mut self.remaining {
            if *remaining == 0 {
                return None;
            }
            *remaining -= 1;
        }
        if self.busy_files == 0 {
            // Every file is done: the next pass (fio's next loop).
            for file in &mut self.files {
                file.left_in_pass = file.pass;
            }
            self.busy_files = self.files.len();
        }
        if self.left_on_current == 0 || self.files[self.current].left_in_pass == 0 {
            self.pick();
        }
        if self.service != FileService::Sequential {
            // `sequential` turns last until the file is done, however long.
            self.left_on_current -= 1;
        }
        let file = &mut self.files[self.current];
        // A file's own stream has no end (`IoGenerator::for_file`).
        let (op, block) = file.generator.next_io()?;
        if file.pass != NO_PASS {
            file.left_in_pass -= 1;
            if file.left_in_pass == 0 {
                self.busy_files -= 1;
            }
        }
        Some((op, file.first_block + block))
    }
}
