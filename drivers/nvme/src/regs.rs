//! Controller registers (BAR0) and their fields (NVMe base spec 1.4 §3.1; QEMU 7.2's `hw/nvme/ctrl.c`).

use crate::Error;

/// Controller Capabilities (64-bit).
pub const CAP: u32 = 0x00;
/// Version.
pub const VS: u32 = 0x08;
/// Interrupt Mask Set (INTx only).
pub const INTMS: u32 = 0x0C;
/// Interrupt Mask Clear (INTx only).
pub const INTMC: u32 = 0x10;
/// Controller Configuration.
pub const CC: u32 = 0x14;
/// Controller Status.
pub const CSTS: u32 = 0x1C;
/// Admin Queue Attributes.
pub const AQA: u32 = 0x24;
/// Admin Submission Queue base (64-bit).
pub const ASQ: u32 = 0x28;
/// Admin Completion Queue base (64-bit).
pub const ACQ: u32 = 0x30;
/// First doorbell.
pub const DOORBELL_BASE: u32 = 0x1000;

/// Memory page size the driver uses (CC.MPS = 0).
pub const PAGE_SIZE: usize = 4096;
/// Submission queue entry size (IOSQES = 6).
pub const SQE_SIZE: usize = 64;
/// Completion queue entry size (IOCQES = 4).
pub const CQE_SIZE: usize = 16;

/// Decoded CAP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum entries per queue (MQES is 0's based).
    pub fn max_queue_entries(self) -> u32 {
        (self.0 & 0xFFFF) as u32 + 1
    }
    /// Contiguous Queues Required.
    pub fn contiguous_required(self) -> bool {
        self.0 & (1 << 16) != 0
    }
    /// Timeout for RDY transitions in milliseconds (TO is in 500 ms units). A TO of 0 is read
    /// as 500 ms so that a device reporting 0 still gets a bounded, non-zero wait.
    pub fn timeout_ms(self) -> u64 {
        ((self.0 >> 24) & 0xFF).max(1) * 500
    }
    /// Doorbell stride in bytes (4 << DSTRD).
    pub fn doorbell_stride(self) -> u64 {
        4u64 << ((self.0 >> 32) & 0xF)
    }
    /// Whether the NVM command set is supported (CSS bit 0).
    pub fn supports_nvm(self) -> bool {
        (self.0 >> 37) & 1 != 0
    }
    /// Minimum memory page size, as a shift (12 = 4 KiB).
    pub fn mps_min_shift(self) -> u32 {
        12 + ((self.0 >> 48) & 0xF) as u32
    }
    /// Maximum memory page size, as a shift.
    pub fn mps_max_shift(self) -> u32 {
        12 + ((self.0 >> 52) & 0xF) as u32
    }

    /// Checks that the driver can run this controller (NVM command set, 4 KiB pages, queues of
    /// at least two entries).
    pub fn validate(self) -> Result<(), Error> {
        if self.0 == u64::MAX {
            return Err(Error::DeviceGone);
        }
        if !self.supports_nvm() {
            return Err(Error::Unsupported {
                what: "CAP.CSS (no NVM command set)",
                value: self.0,
            });
        }
        if self.mps_min_shift() > 12 || self.mps_max_shift() < 12 {
            return Err(Error::Unsupported {
                what: "CAP.MPSMIN/MPSMAX (4 KiB pages not allowed)",
                value: self.0,
            });
        }
        if self.max_queue_entries() < 2 {
            return Err(Error::Unsupported {
                what: "CAP.MQES (queues of one entry)",
                value: self.0,
            });
        }
        Ok(())
    }

    /// Byte offset of the doorbell of queue `qid` (`completion`: the CQ head doorbell, else the
    /// SQ tail doorbell). None when it does not fit a 32-bit BAR offset.
    pub fn doorbell(self, qid: u16, completion: bool) -> Option<u32> {
        let index = 2 * u64::from(qid) + u64::from(completion);
        let off = u64::from(DOORBELL_BASE).checked_add(index.checked_mul(self.doorbell_stride())?)?;
        u32::try_from(off).ok()
    }
}

/// CC.EN.
pub const CC_EN: u32 = 1;
/// CC.SHN = normal shutdown (bits 15:14 = 01b).
pub const CC_SHN_NORMAL: u32 = 1 << 14;

/// The CC value that enables the controller: EN, CSS = NVM (000b), MPS = 4 KiB (0), arbitration
/// round robin, no shutdown, IOSQES = 6 (64 bytes), IOCQES = 4 (16 bytes). QEMU 7.2 sets CFS for
/// any other entry sizes.
pub const CC_ENABLE: u32 = CC_EN | (6 << 16) | (4 << 20);

/// Decoded CSTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Csts(pub u32);

impl Csts {
    /// Ready.
    pub fn ready(self) -> bool {
        self.0 & 1 != 0
    }
    /// Controller Fatal Status.
    pub fn fatal(self) -> bool {
        self.0 & 2 != 0
    }
    /// Shutdown status (0 normal, 1 occurring, 2 complete).
    pub fn shutdown_status(self) -> u32 {
        (self.0 >> 2) & 3
    }
    /// All ones: the device does not answer.
    pub fn gone(self) -> bool {
        self.0 == u32::MAX
    }
}

/// AQA value for admin queues of `sq_entries` / `cq_entries` entries (both 0's based fields).
pub fn aqa(sq_entries: u32, cq_entries: u32) -> u32 {
    ((cq_entries - 1) & 0xFFF) << 16 | ((sq_entries - 1) & 0xFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_cap_decodes() {
        let cap = Cap(0x0040_1820_0F01_07FF);
        assert_eq!(cap.max_queue_entries(), 2048);
        assert!(cap.contiguous_required());
        assert_eq!(cap.timeout_ms(), 7500);
        assert_eq!(cap.doorbell_stride(), 4);
        assert!(cap.supports_nvm());
        assert_eq!(cap.mps_min_shift(), 12);
        assert_eq!(cap.mps_max_shift(), 16);
        assert_eq!(cap.validate(), Ok(()));
        assert_eq!(cap.doorbell(0, false), Some(0x1000));
        assert_eq!(cap.doorbell(0, true), Some(0x1004));
        assert_eq!(cap.doorbell(3, false), Some(0x1018));
        assert_eq!(cap.doorbell(3, true), Some(0x101C));
        assert_eq!(CC_ENABLE, 0x0046_0001);
        assert_eq!(aqa(64, 256), 0x00FF_003F);
    }

    #[test]
    fn unusable_caps_are_refused() {
        assert_eq!(Cap(u64::MAX).validate(), Err(Error::DeviceGone));
        assert!(matches!(
            Cap(0x0040_1820_0F01_07FF & !(1 << 37)).validate(),
            Err(Error::Unsupported { .. })
        ));
        // MPSMIN = 8 KiB.
        assert!(matches!(
            Cap(0x0041_1820_0F01_07FF).validate(),
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            Cap(0x0040_1820_0F01_0000).validate(),
            Err(Error::Unsupported { .. })
        ));
        // A stride so large the doorbell of a high queue leaves a 32-bit offset.
        let wide = Cap(0x0040_102F_0F01_07FF);
        assert_eq!(wide.doorbell_stride(), 4 << 15);
        assert_eq!(wide.doorbell(65535, true), None);
        assert_eq!(Cap(0x0040_1820_0001_07FF).timeout_ms(), 500);
    }
}
