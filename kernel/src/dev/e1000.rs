//! Probe of the Intel legacy-descriptor driver (`drivers/e1000`): matches the 82540EM
//! (8086:100e, QEMU's `e1000`), the 82574L (8086:10d3, QEMU's `e1000e`), the 82576 (8086:10c9)
//! and the I350 (8086:1521); maps BAR 0, turns INTx, MSI and MSI-X off (the NIC is polled),
//! brings the controller up with `e1000::E1000` and registers it with the network room
//! (`dev::netif`) as the next `ethN`.

use crate::arch::console::kprintln;
use crate::dev::driver::PciDriver;
use crate::dev::hal::{KernelDelay, KernelDma, KernelMmio};
use crate::dev::{netif, pci};
use crate::error::Error;
use alloc::boxed::Box;
use alloc::format;
use platform::pci::{DeviceMatch, PciFunction};

/// The driver's entry in the PCI driver table.
pub const DRIVER: PciDriver = PciDriver {
    name: "e1000",
    matches: &[
        DeviceMatch::id(e1000::PCI_VENDOR, e1000::PCI_DEVICE_82540EM),
        DeviceMatch::id(e1000::PCI_VENDOR, e1000::PCI_DEVICE_82574L),
        DeviceMatch::id(e1000::PCI_VENDOR, e1000::PCI_DEVICE_82576),
        DeviceMatch::id(e1000::PCI_VENDOR, e1000::PCI_DEVICE_I350),
    ],
    configure,
    probe,
    floor_before_job: None,
    aim_for_jobs: None,
};

fn configure(words: &[&str]) -> Result<(), Error> {
    netif::no_words("e1000", words)
}

fn probe(function: &'static PciFunction) -> Result<(), Error> {
    let at = function.address;
    let family = e1000::family_of(function.device_id).ok_or_else(|| {
        Error::Device(format!(
            "e1000 ({at}): device id {:04x} is not one the driver knows",
            function.device_id
        ))
    })?;
    pci::claim(function)?;
    let p = pci::get().ok_or(Error::NoPci)?;
    // Polled: no interrupt of any kind, and an INTx line nobody acknowledges must not stay
    // asserted. Firmware may have left MSI or MSI-X on.
    platform::pci::set_intx_disabled(&p.access, at, true)?;
    if let Some(cap) = &function.msi {
        platform::pci::msi_disable(&p.access, at, cap)?;
    }
    if let Some(cap) = &function.msix {
        platform::pci::msix_set_control(&p.access, at, cap, false, true)?;
    }
    let mmio = KernelMmio(pci::bar_mmio(function, 0)?);
    let mac = e1000::identify(&mmio, family, &KernelDelay)
        .map_err(|e| Error::Device(format!("e1000 ({at}): {}: {e}", family.name())))?;
    // Found, not brought up: its DMA engines are off, and it may not touch memory until the
    // network is used.
    pci::set_bus_master(function, false)?;
    let name = netif::register_pci_pending(
        at,
        mac,
        Box::new(move || {
            bring_up(function, family, mmio)
                .map(|nic| Box::new(nic) as Box<dyn net::Nic>)
                .map_err(|e| format!("{e}"))
        }),
    );
    kprintln!(
        "{name}: e1000 {} ({at}) {mac}, found; brought up when the network is used",
        family.name()
    );
    Ok(())
}

/// Resets the NIC and brings it up (rings, receiver, transmitter), the first time the network
/// is used.
fn bring_up(
    function: &'static PciFunction,
    family: e1000::Family,
    mmio: KernelMmio,
) -> Result<e1000::E1000<KernelMmio>, Error> {
    let at = function.address;
    pci::set_bus_master(function, true)?;
    let (device_node, _) = crate::dev::aml::controller_node(function);
    let nic = e1000::E1000::new(mmio, family, &KernelDma::on(device_node), &KernelDelay).map_err(|e| {
        // Whatever the device did, it gets no more memory.
        let _ = pci::set_bus_master(function, false);
        Error::Device(format!("e1000 ({at}): {} bring-up failed: {e}", family.name()))
    })?;
    let (rx, tx) = nic.ring_lens();
    kprintln!(
        "e1000 {} ({at}) {}, link {:?}, rings rx {rx} tx {tx}, polled",
        family.name(),
        net::Nic::mac(&nic),
        net::Nic::link(&nic)
    );
    Ok(nic)
}
