//! The backend of a job over a `filename` list (fio's several files per job, one device each):
//! the engine addresses the files' regions as one joined space (`workload::plan` module
//! `files`), and this backend routes each request to its device. A job on one device never
//! comes here, so its [`KernelBackend`] path is unchanged.
//!
//! Completions need no routing: every device ends a request on the submitting CPU's done
//! board, keyed by the engine's slot, whatever the device.

use super::{JobContext, KernelBackend};
use crate::dev::block::BlockDevice;
use alloc::vec::Vec;
use core::fmt;
use workload::{Completion, CpuResult, FileRoute, IoBackend, IoOp, Reaped, SubmitError, WorkloadError, route_file};

/// Runs CPU `index`'s share of a job over a `filename` list through `backend` (set up on the
/// first file's device, which it is again afterwards), and records the requests each device got.
pub(super) fn run_cpu_over_files(
    ctx: &JobContext<'_>,
    index: usize,
    backend: &mut KernelBackend<'_>,
) -> Result<CpuResult, WorkloadError> {
    let devices = ctx.file_devs.iter().map(|d| FileDevice::new(*d)).collect();
    let mut files = FileSetBackend::new(backend, devices, ctx.plan.file_routes(index));
    let result = workload::run_cpu(ctx.plan, index, &mut files, ctx.shared);
    *ctx.file_sent[index].lock() = files.files.iter().map(|f| f.sent).collect();
    files.switch_to(0);
    result
}

/// One file's device as this CPU drives it.
struct FileDevice {
    dev: &'static dyn BlockDevice,
    /// Block-layer (512-byte) sectors per device sector.
    scale: u64,
    /// Deferred submissions not yet rung on this device (kept here while another is current).
    uncommitted: bool,
    /// Requests sent: reads, writes, trims, flushes.
    sent: [u64; 4],
}

impl FileDevice {
    fn new(dev: &'static dyn BlockDevice) -> Self {
        Self {
            dev,
            scale: u64::from(dev.facts().sector_size / 512),
            uncommitted: false,
            sent: [0; 4],
        }
    }
}

/// A [`KernelBackend`] whose device changes with the request's file.
struct FileSetBackend<'b, 'a> {
    /// Drives the current file's device (its `dev`, `scale` and doorbell flag are that file's).
    inner: &'b mut KernelBackend<'a>,
    files: Vec<FileDevice>,
    routes: Vec<FileRoute>,
    current: usize,
}

impl<'b, 'a> FileSetBackend<'b, 'a> {
    /// `inner` is set up on the first file's device; `routes` are this CPU's.
    fn new(inner: &'b mut KernelBackend<'a>, files: Vec<FileDevice>, routes: Vec<FileRoute>) -> Self {
        Self {
            inner,
            files,
            routes,
            current: 0,
        }
    }

    /// Makes `file` the one `inner` drives, keeping the other's unrung doorbell with it.
    fn switch_to(&mut self, file: usize) {
        self.files[self.current].uncommitted = self.inner.uncommitted;
        self.current = file;
        let next = &self.files[file];
        self.inner.drive(next.dev, next.scale);
        self.inner.uncommitted = next.uncommitted;
    }

    /// Rings and, where completions are polled, polls the devices other than the current one
    /// (`inner` does the current one).
    fn service_others(&mut self) {
        let cpu = self.inner.cpu;
        for (index, file) in self.files.iter_mut().enumerate() {
            if index == self.current {
                continue;
            }
            if file.uncommitted {
                file.uncommitted = false;
                file.dev.commit(cpu);
            }
            if self.inner.poll || file.dev.polling_window(cpu) {
                file.dev.poll(cpu);
            }
        }
    }
}

impl IoBackend for FileSetBackend<'_, '_> {
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8] {
        self.inner.slot_buffer(slot)
    }

    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError> {
        // A flush has no address: it goes to the file of the I/Os before it (fio's fsync=N
        // flushes the file it wrote).
        let (file, lba) = if op == IoOp::Flush {
            (self.current, lba)
        } else {
            route_file(&self.routes, lba)
        };
        if file != self.current {
            self.switch_to(file);
        }
        let outcome = self.inner.submit(slot, op, lba, sectors);
        if outcome.is_ok() {
            let kind = match op {
                IoOp::Read => 0,
                IoOp::Write => 1,
                IoOp::Trim => 2,
                IoOp::Flush => 3,
            };
            self.files[file].sent[kind] += 1;
        }
        outcome
    }

    fn poll_completions(&mut self, out: &mut [Completion]) -> usize {
        self.service_others();
        self.inner.poll_completions(out)
    }

    fn poll_reaped(&mut self, out: &mut [Completion]) -> Reaped {
        self.service_others();
        self.inner.poll_reaped(out)
    }

    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }

    fn idle(&mut self, in_flight: usize) {
        self.service_others();
        self.inner.idle(in_flight);
    }

    fn periodic(&mut self, now_ns: u64) {
        if now_ns >= self.inner.next_tick_ns {
            let cpu = self.inner.cpu;
            for (index, file) in self.files.iter().enumerate() {
                if index != self.current {
                    file.dev.make_progress(cpu);
                    file.dev.tick(cpu);
                }
            }
        }
        self.inner.periodic(now_ns);
    }

    fn log_line(&mut self, line: fmt::Arguments<'_>) {
        self.inner.log_line(line);
    }
}
