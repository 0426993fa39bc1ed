//! The kernel's side of the driver contract (`devhal`): register windows through volatile
//! pointers, DMA memory from the frame allocator on a chosen NUMA node, and waits on the TSC.
//! Every driver gets these same three types; a driver's probe file only says which node its
//! memory should come from.

use crate::arch::memory::DmaBuffer;
use crate::arch::time;
use core::sync::atomic::{AtomicU32, Ordering};
use devhal::{DmaError, DmaRegion};

/// A register window (a BAR mapped uncached by `pci::claim`), accessed through volatile pointers.
pub(crate) struct KernelMmio(pub(crate) platform::mmio::VolatileMmio);

impl devhal::Mmio for KernelMmio {
    fn read32(&self, offset: u32) -> u32 {
        use platform::mmio::Mmio32;
        // A bad offset is a driver bug; all-ones is what a missing register reads as.
        self.0.read32(offset as usize).unwrap_or(u32::MAX)
    }

    fn write32(&self, offset: u32, value: u32) {
        use platform::mmio::Mmio32;
        if let Err(e) = self.0.write32(offset as usize, value) {
            log::error!("device register write at {offset:#x} refused: {e}");
        }
    }
}

/// Where a controller's allocations landed, for the probe's report: those on the node asked
/// for, and all of them.
#[derive(Default)]
pub(crate) struct Placement {
    pub(crate) on_node: AtomicU32,
    pub(crate) all: AtomicU32,
}

/// DMA memory: the kernel's contiguous, identity-mapped pages, never freed (a controller keeps
/// its memory for the kernel's lifetime).
pub(crate) struct KernelDma {
    /// Node for memory no one CPU owns (admin queues, frames, identify buffers), and for a CPU's
    /// memory when that CPU's node is unknown: the controller's (`aml::controller_node`).
    pub(crate) device_node: Option<u32>,
    /// Counts allocations for the probe's NUMA line, when the probe asks.
    pub(crate) placement: Option<&'static Placement>,
}

impl KernelDma {
    /// Memory from `device_node` (and a CPU's own node for its queues).
    pub(crate) fn on(device_node: Option<u32>) -> Self {
        Self {
            device_node,
            placement: None,
        }
    }
}

// SAFETY: DmaBuffer returns zeroed, physically contiguous, identity-mapped memory (virt ==
// phys) that is never freed once leaked here, so it stays valid and owned by the driver for the
// controller's lifetime.
unsafe impl devhal::Dma for KernelDma {
    fn alloc_zeroed(&self, size: usize, align: usize) -> Result<DmaRegion, DmaError> {
        self.alloc_zeroed_for_cpu(size, align, None)
    }

    /// From the NUMA node of the queue's CPU, else the controller's node (any memory when there
    /// is no SRAT or the node has no room).
    fn alloc_zeroed_for_cpu(&self, size: usize, align: usize, cpu: Option<usize>) -> Result<DmaRegion, DmaError> {
        let node = cpu.and_then(node_of_cpu).or(self.device_node);
        let buf = DmaBuffer::on_node(size, align.max(4096), node).map_err(|_| DmaError::OutOfMemory { size, align })?;
        if let Some(placement) = self.placement {
            if node.is_some() && crate::arch::firmware::get().node_of_address(buf.phys()) == node {
                placement.on_node.fetch_add(1, Ordering::Relaxed);
            }
            placement.all.fetch_add(1, Ordering::Relaxed);
        }
        let (virt, phys, len) = buf.leak();
        Ok(DmaRegion { virt, phys, len })
    }
}

/// The SRAT node of kernel CPU `index`.
pub(crate) fn node_of_cpu(index: usize) -> Option<u32> {
    let apic_id = crate::arch::percpu::cpu(index).apic_id.load(Ordering::Relaxed);
    crate::arch::firmware::get().node_of_apic_id(apic_id)
}

/// Bounded waits on the kernel's clock.
pub(crate) struct KernelDelay;

impl devhal::Delay for KernelDelay {
    fn delay_us(&self, us: u32) {
        time::delay_us(u64::from(us));
    }
}
