//! Probe glue of the LSI MegaRAID SAS (MFI) driver (`drivers/megasas`):
//! matches QEMU's `megasas` (SAS1078) and `megasas-gen2` (SAS2108), parses
//! the `megasas.*` keys (through `megasas::Options`, the one parser), brings
//! the controller up, sets up its interrupt vectors and registers each
//! logical drive as a block device `mdN`.
//!
//! The `blk::Driver` binding below (`Shared`, `MegasasDriver`, `deliver`)
//! is the part that moves into the driver crate (`megasas::blkdev`).

use crate::arch::console::kprintln;
use crate::arch::memory::DmaBuffer;
use crate::arch::{smp, time};
use crate::dev::block::{self, DeviceFacts, Disk};
use crate::dev::driver::PciDriver;
use crate::dev::interrupts::{self, DeviceIrqs, IrqHandler};
use crate::dev::{cpumap, pci};
use crate::error::Error;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use blk::{
    CompletionPolicy, Driver, HwCtx, IssueToken, QueueConfig, QueueRqError, Rq, Status, TimedOutRq, TimeoutAction,
};
use core::sync::atomic::{AtomicU32, Ordering};
use megasas::{Controller, IoStatus, Model, MsixVectors, Options};
use platform::irq::InterruptMode;
use platform::pci::{DeviceMatch, PciFunction};

/// The driver's entry in the PCI driver table.
pub const DRIVER: PciDriver = PciDriver {
    name: "megasas",
    matches: &[DeviceMatch::id(0x1000, 0x0060), DeviceMatch::id(0x1000, 0x0079)],
    configure,
    probe,
};

/// The `megasas.*` options, parsed once at boot.
static OPTIONS: spin::Once<Options> = spin::Once::new();

/// Parses the driver's command-line words (`megasas.irq=msi`, ...).
fn configure(words: &[&str]) -> Result<(), Error> {
    let line = words.join(" ");
    let options = Options::parse(&line).map_err(|e| Error::Config(format!("{e}")))?;
    OPTIONS.call_once(|| options);
    Ok(())
}

fn options() -> Options {
    OPTIONS.get().copied().unwrap_or_default()
}

struct KernelMmio(platform::mmio::VolatileMmio);

impl megasas::Mmio for KernelMmio {
    fn read32(&self, offset: u32) -> u32 {
        use platform::mmio::Mmio32;
        // A bad offset is a driver bug; all-ones is what a missing register reads as.
        self.0.read32(offset as usize).unwrap_or(u32::MAX)
    }
    fn write32(&self, offset: u32, value: u32) {
        use platform::mmio::Mmio32;
        if let Err(e) = self.0.write32(offset as usize, value) {
            log::error!("megasas: register write at {offset:#x} refused: {e}");
        }
    }
}

struct KernelDma;

// SAFETY: DmaBuffer returns zeroed, physically contiguous, identity-mapped
// memory below 4 GiB (virt == phys) that is never freed once leaked here, so
// it stays valid and owned by the driver for the controller's lifetime.
unsafe impl megasas::Dma for KernelDma {
    fn alloc_zeroed(&self, size: usize, align: usize) -> Result<megasas::DmaRegion, megasas::DmaError> {
        let buf = DmaBuffer::new(size, align.max(4096)).map_err(|_| megasas::DmaError::OutOfMemory { size, align })?;
        let (virt, phys, len) = buf.leak();
        Ok(megasas::DmaRegion { virt, phys, len })
    }
}

struct KernelDelay;

impl megasas::Delay for KernelDelay {
    fn delay_us(&self, us: u32) {
        time::delay_us(u64::from(us));
    }
}

type Ctrl = Controller<KernelMmio, KernelDma, KernelDelay>;

/// One controller, shared by its logical drives and its interrupt handler.
struct Shared {
    ctrl: Ctrl,
    mode: megasas::IrqMode,
    /// The controller's interrupt vectors, owned for its lifetime.
    irqs: spin::Once<DeviceIrqs>,
    /// Logical drives with the first controller tag of their partition.
    disks: spin::Once<Vec<(&'static Disk<MegasasDriver>, u16)>>,
    tags_per_disk: u16,
    /// Per controller tag: the block-layer issue token of the command posted with it (the
    /// controller echoes only its tag).
    tokens: Box<[AtomicU32]>,
}

/// The `blk` driver of one logical drive.
struct MegasasDriver {
    shared: &'static Shared,
    target: u8,
    /// This drive's block-layer tags map to controller tags `tag_base..tag_base + depth`.
    tag_base: u16,
    /// 512-byte sectors per logical block.
    scale: u32,
    max_segments: usize,
}

fn status_of(st: &IoStatus) -> Status {
    match st {
        IoStatus::Success => Status::Ok,
        IoStatus::Failed(e) => {
            log::warn!("megasas: I/O failed: {e}");
            Status::IoError
        }
    }
}

impl Shared {
    /// Delivers controller completions to the block layer, on CPU `cpu`.
    fn deliver(&self, cpu: usize, tag: u16, st: IoStatus) {
        let Some(disks) = self.disks.get() else { return };
        let Some((disk, _)) = disks
            .iter()
            .find(|(_, base)| tag >= *base && tag < *base + self.tags_per_disk)
        else {
            log::error!("megasas: completion for controller tag {tag}, which no drive owns");
            return;
        };
        let token = IssueToken::from_bits(self.tokens[usize::from(tag)].load(Ordering::Acquire));
        if let Err(e) = disk.queue.complete(cpu, 0, token, status_of(&st)) {
            log::error!(
                "megasas: {}: completion of tag {tag} refused by the block layer: {e}",
                disk.facts.name
            );
        }
    }

    fn reap(&self, cpu: usize) -> usize {
        let mut n = 0;
        for _ in 0..64 {
            let r = self.ctrl.reap(|tag, st| self.deliver(cpu, tag, st));
            n += r.completed as usize;
            if let Some(f) = r.first_fault {
                log::error!("megasas: controller fault in the reply queue: {f}");
            }
            if !r.more_pending {
                break;
            }
        }
        n
    }
}

impl IrqHandler for Shared {
    /// Every vector reaps the one reply queue (QEMU signals only vector 0;
    /// with `megasas.msix_vectors=all` the others are aimed but stay silent).
    fn handle(&self, _vector_index: usize, cpu: usize) {
        let mut more = true;
        let mut rounds = 0;
        while more && rounds < 64 {
            rounds += 1;
            more = match self
                .ctrl
                .handle_interrupt(self.mode, |tag, st| self.deliver(cpu, tag, st))
            {
                Some(r) => {
                    if let Some(f) = r.first_fault {
                        log::error!("megasas: controller fault in the reply queue: {f}");
                    }
                    r.more_pending
                }
                None => false,
            };
        }
    }
}

impl Driver for MegasasDriver {
    type Pdu = ();

    fn queue_rq<'a>(&self, hw: &HwCtx<'a, Self>, rq: Rq<'a, Self>, _last: bool) -> Result<(), QueueRqError<'a, Self>> {
        let op = match rq.op() {
            blk::Op::Read => megasas::IoOp::Read,
            blk::Op::Write => megasas::IoOp::Write,
            blk::Op::Flush => megasas::IoOp::Flush,
            blk::Op::Driver(_) => return Err(QueueRqError::Io(rq, Status::NotSupported)),
        };
        let segs = rq.segments();
        if segs.len() > self.max_segments {
            return Err(QueueRqError::Io(rq, Status::NotSupported));
        }
        let mut sgl = [megasas::Segment { phys: 0, len: 0 }; 32];
        for (d, s) in sgl.iter_mut().zip(segs) {
            *d = megasas::Segment {
                phys: s.phys,
                len: s.len,
            };
        }
        let (lba, blocks) = if op == megasas::IoOp::Flush {
            (0, 0)
        } else {
            (rq.sector() / u64::from(self.scale), rq.nr_sectors() / self.scale)
        };
        let tag = self.tag_base + rq.tag() as u16;
        let nsegs = if op == megasas::IoOp::Flush { 0 } else { segs.len() };
        let req = megasas::IoRequest {
            op,
            target: self.target,
            lba,
            blocks,
            sgl: &sgl[..nsegs],
        };
        // Issue before the doorbell: a completion can arrive on another CPU
        // as soon as the frame is posted, and the block layer accepts it only
        // for an issued request.
        let token = rq.issue();
        // Release pairs with the Acquire in `Shared::deliver`, which runs after the controller
        // replied to the frame posted below.
        self.shared.tokens[usize::from(tag)].store(token.to_bits(), Ordering::Release);
        if let Err(e) = self.shared.ctrl.submit(tag, &req) {
            log::error!("megasas: target {} tag {tag}: not posted: {e}", self.target);
            let _ = hw.complete(token, Status::IoError);
        }
        Ok(())
    }

    fn timeout(&self, rq: &mut TimedOutRq<'_, Self>) -> TimeoutAction {
        // A request that times out may mean the firmware died: say so if it did.
        if let Err(e) = self.shared.ctrl.check_firmware() {
            log::error!("megasas: controller firmware is not operational: {e}");
        }
        log::error!(
            "megasas: target {} block-layer tag {} (sector {}) timed out; no abort support: failing it",
            self.target,
            rq.tag(),
            rq.sector()
        );
        TimeoutAction::Done(Status::Timeout)
    }

    fn poll(&self, hw: &HwCtx<'_, Self>) -> usize {
        self.shared.reap(hw.cpu())
    }
}

fn mode_to_platform(m: megasas::IrqMode) -> Option<InterruptMode> {
    match m {
        megasas::IrqMode::Msix => Some(InterruptMode::MsiX),
        megasas::IrqMode::Msi => Some(InterruptMode::Msi),
        megasas::IrqMode::Intx => Some(InterruptMode::Intx),
        megasas::IrqMode::Polled => None,
    }
}

static NEXT_DRIVE: spin::Mutex<usize> = spin::Mutex::new(0);

fn probe_one(function: &'static PciFunction, model: Model, opts: &Options) -> Result<(), Error> {
    pci::claim(function)?;
    let mmio = KernelMmio(pci::bar_mmio(function, model.mmio_bar())?);
    let mut config = megasas::Config::default();
    if let Some(depth) = opts.queue_depth {
        config.max_tags = depth;
    }
    let ctrl = Controller::new(model, mmio, KernelDma, KernelDelay, config)
        .map_err(|e| Error::Device(format!("megasas {}: bring-up failed: {e}", function.address)))?;
    let info = ctrl.info();
    kprintln!(
        "megasas {}: {:?} \"{}\" firmware {} package {}, {} commands (using {} in flight), {} SGEs, max transfer {} KiB",
        function.address,
        model,
        info.product,
        info.firmware,
        info.package,
        info.max_cmds,
        ctrl.max_inflight(),
        ctrl.max_segments(),
        ctrl.max_transfer_bytes() / 1024
    );
    // The highest tag is kept for admin commands (discovery).
    let admin_tag = ctrl.max_inflight() - 1;
    let drives = ctrl
        .discover(admin_tag)
        .map_err(|e| Error::Device(format!("megasas {}: discovery failed: {e}", function.address)))?;
    let requested = opts.irq;
    let (mode, fell_back) = megasas::choose_irq_mode(requested, function.msix.is_some(), function.msi.is_some());
    if fell_back {
        log::warn!(
            "megasas {}: requested interrupt mode unavailable; using {mode:?}",
            function.address
        );
    }
    let ndrives = drives.len().max(1) as u16;
    let tags_per_disk = (admin_tag / ndrives).max(1);
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        ctrl,
        mode,
        irqs: spin::Once::new(),
        disks: spin::Once::new(),
        tags_per_disk,
        tokens: (0..=admin_tag).map(|_| AtomicU32::new(0)).collect(),
    }));
    let online = smp::online();
    // One reply queue: one hardware queue. Vector 0 is the one the controller
    // signals; more can be asked for (megasas.msix_vectors) and are aimed by
    // the same CPU map.
    let nvectors = match (opts.msix_vectors, &function.msix) {
        (None, _) => 1,
        (Some(MsixVectors::Count(n)), _) => usize::from(n),
        (Some(MsixVectors::All), Some(msix)) => usize::from(msix.table_size),
        (Some(MsixVectors::All), None) => 1,
    };
    let map = cpumap::plan(1, nvectors, opts.irq_cpu.map(|c| c as usize))?;
    match mode_to_platform(mode) {
        Some(m) => {
            let handler: &'static dyn IrqHandler = shared;
            let handlers = alloc::vec![handler; map.vector_cpus.len()];
            let irqs = interrupts::setup_vectors(function, Some(m), &map.vector_cpus, "megasas", &handlers)?;
            shared.irqs.call_once(|| irqs);
        }
        None => {
            // Polled: keep INTx quiet at the PCI level; the ring still needs the
            // controller's own interrupt enabled to advance (QEMU).
            let p = pci::get().ok_or(Error::NoPci)?;
            platform::pci::set_intx_disabled(&p.access, function.address, true)?;
        }
    }
    shared
        .ctrl
        .enable_interrupts()
        .map_err(|e| Error::Device(format!("megasas {}: enabling interrupts: {e}", function.address)))?;
    let irq_text = match shared.irqs.get() {
        Some(i) => i.describe(),
        None => String::from("polled (no interrupts)"),
    };
    let irq_vectors = shared.irqs.get().map(DeviceIrqs::idt_vectors).unwrap_or_default();
    kprintln!("megasas {}: interrupts: {}", function.address, irq_text);
    let mut disks = Vec::new();
    for (i, d) in drives.iter().enumerate() {
        let name = {
            let mut n = NEXT_DRIVE.lock();
            let name = format!("md{}", *n);
            *n += 1;
            name
        };
        let scale = d.block_size / 512;
        let capacity_512 = d.blocks * u64::from(scale);
        let max_segments = usize::from(shared.ctrl.max_segments()).min(32);
        let max_transfer = (shared.ctrl.max_transfer_bytes().min(1 << 20)) as u32;
        let mut qc = QueueConfig::new(online, 1, u32::from(tags_per_disk), capacity_512);
        qc.cpu_map = Some(map.queue_of_cpu.clone());
        qc.shared_tags = true;
        qc.logical_block_size = d.block_size;
        qc.max_segments = max_segments;
        qc.completion = CompletionPolicy::Irq;
        let driver = MegasasDriver {
            shared,
            target: d.target,
            tag_base: i as u16 * tags_per_disk,
            scale,
            max_segments,
        };
        let facts = DeviceFacts {
            name: name.clone(),
            model: format!("MegaRAID {:?} target {} ({})", model, d.target, function.address),
            sector_size: d.block_size,
            capacity_sectors: d.blocks,
            max_inflight: u32::from(tags_per_disk),
            max_transfer_bytes: max_transfer,
            irq_vectors: irq_vectors.clone(),
        };
        let disk = Disk::new(facts, qc, driver, format!("interrupts: {irq_text}"))
            .map_err(|e| Error::Device(format!("{name}: {e}")))?;
        let disk: &'static Disk<MegasasDriver> = Box::leak(Box::new(disk));
        block::register(disk);
        disks.push((disk, i as u16 * tags_per_disk));
    }
    shared.disks.call_once(|| disks);
    Ok(())
}

fn probe(function: &'static PciFunction) -> Result<(), Error> {
    let model = Model::from_pci_id(function.vendor_id, function.device_id)
        .ok_or_else(|| Error::Device(format!("megasas: {} is not a supported model", function.address)))?;
    probe_one(function, model, &options())
}
