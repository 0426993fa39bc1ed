//! Probe of the virtio network driver (`drivers/virtio-net`): matches the modern virtio-pci
//! network function (1af4:1041) and the transitional one (1af4:1000, driven through its modern
//! interface), finds the register structures through the function's vendor-specific
//! capabilities (common configuration, notifications, ISR status, device configuration; each a
//! window of a memory BAR, bounds-checked here), turns INTx off (the NIC is polled), brings the
//! device up with `virtio_net::VirtioNet` and registers it with the network room
//! (`dev::netif`) as the next `ethN`.

use crate::arch::console::kprintln;
use crate::arch::memory;
use crate::dev::driver::PciDriver;
use crate::dev::hal::{KernelDelay, KernelDma};
use crate::dev::{netif, pci};
use crate::error::Error;
use alloc::boxed::Box;
use alloc::format;
use platform::pci::{ConfigSpace, DeviceMatch, PciFunction};
use virtio_net::{Region, VirtioRegs};

/// The driver's entry in the PCI driver table.
pub const DRIVER: PciDriver = PciDriver {
    name: "virtio-net",
    matches: &[
        DeviceMatch::id(virtio_net::PCI_VENDOR, virtio_net::PCI_DEVICE_MODERN),
        DeviceMatch::id(virtio_net::PCI_VENDOR, virtio_net::PCI_DEVICE_TRANSITIONAL),
    ],
    configure,
    probe,
    floor_before_job: None,
    aim_for_jobs: None,
};

fn configure(words: &[&str]) -> Result<(), Error> {
    netif::no_words("virtio-net", words)
}

/// `cfg_type` of the virtio-pci capabilities (3 is the ISR status, between them).
const CAP_COMMON: u8 = 1;
const CAP_NOTIFY: u8 = 2;
const CAP_DEVICE: u8 = 4;

/// One register structure: a mapped window of a BAR.
#[derive(Clone, Copy)]
struct Window {
    base: *mut u8,
    len: u32,
}

/// The four structures, read and written with each field's own width.
struct KernelVirtioRegs {
    common: Window,
    notify: Window,
    isr: Window,
    device: Window,
    notify_multiplier: u32,
}

// SAFETY: the windows are uncached device mappings that stay mapped for the kernel's lifetime;
// every access is one volatile load or store, which any CPU may make. The NIC is driven by one
// CPU at a time (the registry's lock).
unsafe impl Send for KernelVirtioRegs {}

impl KernelVirtioRegs {
    fn window(&self, region: Region) -> Window {
        match region {
            Region::Common => self.common,
            Region::Notify => self.notify,
            Region::Isr => self.isr,
            Region::Device => self.device,
        }
    }

    /// The address of a `width`-byte field at `offset`, if inside the structure and aligned.
    fn at(&self, region: Region, offset: u32, width: u32) -> Option<*mut u8> {
        let w = self.window(region);
        let end = offset.checked_add(width)?;
        if end > w.len || !offset.is_multiple_of(width) {
            log::error!(
                "virtio-net: {width}-byte access at {region:?}+{offset:#x} outside its {}-byte window",
                w.len
            );
            return None;
        }
        // SAFETY: offset + width <= len, inside the mapped window.
        Some(unsafe { w.base.add(offset as usize) })
    }
}

macro_rules! access {
    ($read:ident, $write:ident, $t:ty) => {
        fn $read(&self, region: Region, offset: u32) -> $t {
            match self.at(region, offset, size_of::<$t>() as u32) {
                // SAFETY: `at` checked bounds and alignment; the window is mapped uncached.
                Some(p) => unsafe { p.cast::<$t>().read_volatile() },
                None => <$t>::MAX,
            }
        }
        fn $write(&self, region: Region, offset: u32, value: $t) {
            if let Some(p) = self.at(region, offset, size_of::<$t>() as u32) {
                // SAFETY: as for the read.
                unsafe { p.cast::<$t>().write_volatile(value) }
            }
        }
    };
}

impl VirtioRegs for KernelVirtioRegs {
    access!(read8, write8, u8);
    access!(read16, write16, u16);
    access!(read32, write32, u32);

    fn region_len(&self, region: Region) -> u32 {
        self.window(region).len
    }

    fn notify_multiplier(&self) -> u32 {
        self.notify_multiplier
    }
}

/// The first capability of each type: (BAR, offset, length) checked against the BAR's size and
/// mapped, and the notification multiplier.
fn find_structures(function: &PciFunction) -> Result<KernelVirtioRegs, Error> {
    let p = pci::get().ok_or(Error::NoPci)?;
    let cfg = ConfigSpace::new(&p.access, function.address);
    let at = function.address;
    let mut found: [Option<Window>; 4] = [None; 4];
    let mut multiplier = None;
    for cap in function
        .capabilities
        .iter()
        .filter(|c| c.id == platform::pci::CAP_VENDOR)
    {
        let o = u16::from(cap.offset);
        let cfg_type = (cfg.read32(o)? >> 24) as u8;
        if !(CAP_COMMON..=CAP_DEVICE).contains(&cfg_type) || found[usize::from(cfg_type - 1)].is_some() {
            continue;
        }
        let bar_slot = cfg.read32(o + 4)? as u8;
        let offset = cfg.read32(o + 8)?;
        let length = cfg.read32(o + 12)?;
        let bar = function
            .bar(bar_slot)
            .filter(|b| bar_slot < 6 && b.is_memory() && b.size > 0)
            .ok_or_else(|| {
                Error::Device(format!(
                    "virtio-net ({at}): capability type {cfg_type} names BAR {bar_slot}, which is not a memory BAR"
                ))
            })?;
        if u64::from(offset) + u64::from(length) > bar.size || length == 0 {
            return Err(Error::Device(format!(
                "virtio-net ({at}): capability type {cfg_type}: {length} bytes at {offset:#x} do not fit BAR {bar_slot} of {} bytes",
                bar.size
            )));
        }
        let base = memory::map_mmio(bar.address + u64::from(offset), u64::from(length))?;
        found[usize::from(cfg_type - 1)] = Some(Window { base, len: length });
        if cfg_type == CAP_NOTIFY {
            multiplier = Some(cfg.read32(o + 16)?);
        }
    }
    let names = [
        "common configuration",
        "notification",
        "ISR status",
        "device configuration",
    ];
    let mut windows = [Window {
        base: core::ptr::null_mut(),
        len: 0,
    }; 4];
    for (i, w) in found.iter().enumerate() {
        windows[i] = w.ok_or_else(|| {
            Error::Device(format!(
                "virtio-net ({at}): no {} capability (not a modern virtio-pci device; QEMU: disable-legacy=on or a transitional device with modern on)",
                names[i]
            ))
        })?;
    }
    if windows[0].len < virtio_net::common::LEN {
        return Err(Error::Device(format!(
            "virtio-net ({at}): common configuration of {} bytes, {} expected",
            windows[0].len,
            virtio_net::common::LEN
        )));
    }
    Ok(KernelVirtioRegs {
        common: windows[0],
        notify: windows[1],
        isr: windows[2],
        device: windows[3],
        notify_multiplier: multiplier.unwrap_or(0),
    })
}

fn probe(function: &'static PciFunction) -> Result<(), Error> {
    let at = function.address;
    pci::claim(function)?;
    let p = pci::get().ok_or(Error::NoPci)?;
    // Polled: an INTx line nobody acknowledges must not stay asserted.
    platform::pci::set_intx_disabled(&p.access, at, true)?;
    let regs = find_structures(function)?;
    let (device_node, _) = crate::dev::aml::controller_node(function);
    let nic = virtio_net::VirtioNet::new(regs, &KernelDma::on(device_node), &KernelDelay)
        .map_err(|e| Error::Device(format!("virtio-net ({at}): bring-up failed: {e}")))?;
    let (rxq, txq) = nic.queue_sizes();
    let mac = net::Nic::mac(&nic);
    let link = net::Nic::link(&nic);
    let name = netif::register_pci(at, Box::new(nic));
    kprintln!("{name}: virtio-net ({at}) {mac}, link {link:?}, queues rx {rxq} tx {txq}, polled");
    Ok(())
}
