//! Checked access to one function's configuration header.

use pci_types::{CommandRegister, ConfigRegionAccess, PciAddress};

use crate::error::{Error, Result};

/// Command register offset (the status register is the upper half of this dword).
pub const COMMAND: u16 = 0x04;
/// Interrupt line (byte 0) / pin (byte 1) dword.
pub const INTERRUPT_LINE: u16 = 0x3C;
/// Status bit 4: the function has a capability list.
pub const STATUS_CAPABILITY_LIST: u16 = 1 << 4;

/// Standard configuration space reached by this crate.
const CONFIG_LIMIT: u16 = 256;

/// One function's configuration space, with checked offsets.
#[derive(Debug)]
pub struct ConfigSpace<'a, A: ConfigRegionAccess + ?Sized> {
    access: &'a A,
    address: PciAddress,
}

impl<'a, A: ConfigRegionAccess + ?Sized> ConfigSpace<'a, A> {
    /// Wraps `address` on `access`.
    pub fn new(access: &'a A, address: PciAddress) -> ConfigSpace<'a, A> {
        ConfigSpace { access, address }
    }

    /// The function's address.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    fn check(offset: u16) -> Result<()> {
        if offset < CONFIG_LIMIT && offset.is_multiple_of(4) {
            Ok(())
        } else {
            Err(Error::ConfigOffset {
                offset,
                limit: CONFIG_LIMIT,
            })
        }
    }

    /// Reads the dword at `offset` (4-aligned, below 256).
    pub fn read32(&self, offset: u16) -> Result<u32> {
        Self::check(offset)?;
        // SAFETY: the offset is aligned and inside standard configuration
        // space, which is what the module's access contract requires.
        Ok(unsafe { self.access.read(self.address, offset) })
    }

    /// Writes the dword at `offset` (4-aligned, below 256).
    pub fn write32(&self, offset: u16, value: u32) -> Result<()> {
        Self::check(offset)?;
        // SAFETY: as in `read32`.
        unsafe { self.access.write(self.address, offset, value) };
        Ok(())
    }

    /// Reads the 16-bit register at `offset` (2-aligned) from its dword.
    pub fn read16(&self, offset: u16) -> Result<u16> {
        if !offset.is_multiple_of(2) {
            return Err(Error::ConfigOffset {
                offset,
                limit: CONFIG_LIMIT,
            });
        }
        let dword = self.read32(offset & !3)?;
        Ok((dword >> ((offset & 2) * 8)) as u16)
    }

    /// Reads the byte at `offset` from its dword.
    pub fn read8(&self, offset: u16) -> Result<u8> {
        let dword = self.read32(offset & !3)?;
        Ok((dword >> ((offset & 3) * 8)) as u8)
    }

    /// Read-modify-writes the 16-bit register at `offset`, keeping the other half of the dword.
    pub fn write16(&self, offset: u16, value: u16) -> Result<()> {
        if !offset.is_multiple_of(2) {
            return Err(Error::ConfigOffset {
                offset,
                limit: CONFIG_LIMIT,
            });
        }
        let dword_offset = offset & !3;
        let shift = (offset & 2) * 8;
        let old = self.read32(dword_offset)?;
        let new = (old & !(0xFFFF << shift)) | (u32::from(value) << shift);
        self.write32(dword_offset, new)
    }

    /// The command register.
    pub fn command(&self) -> Result<CommandRegister> {
        Ok(CommandRegister::from_bits_retain(self.read16(COMMAND)?))
    }

    /// Writes the command register. The status half of the dword is written
    /// as zero: its error bits are write-one-to-clear, so writing back what
    /// was read would clear them behind the caller's back.
    pub fn set_command(&self, command: CommandRegister) -> Result<()> {
        self.write32(COMMAND, u32::from(command.bits()))
    }

    /// The status register.
    pub fn status(&self) -> Result<u16> {
        self.read16(COMMAND + 2)
    }
}
