//! One split virtqueue with a buffer of its own per descriptor.
//!
//! Descriptor `i` always points at buffer `i` (one descriptor per frame, no chains), so a used
//! entry's id names both. The driver tracks which descriptors the device holds: a used entry for
//! any other is a protocol error, and so is a used index that moved past what was made available.

use crate::error::Error;
use crate::regs::{Region, VirtioRegs, common};
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{Ordering, fence};
use devhal::{Dma, DmaBuf};

/// Descriptor flag: the device writes the buffer.
const DESC_F_WRITE: u16 = 2;
/// Available-ring flag: the driver does not want interrupts.
const AVAIL_F_NO_INTERRUPT: u16 = 1;
/// Bytes of one descriptor.
const DESC_LEN: usize = 16;

pub(crate) struct SplitQueue {
    pub(crate) index: u16,
    pub(crate) size: u16,
    desc: DmaBuf,
    avail: DmaBuf,
    used: DmaBuf,
    buffers: DmaBuf,
    pub(crate) buffer_len: usize,
    /// Next free slot of the available ring (free-running, as the device sees `avail.idx`).
    avail_idx: u16,
    /// Used entries consumed so far (free-running).
    last_used: u16,
    /// Descriptors the device holds.
    with_device: Vec<bool>,
    /// Byte offset of this queue's doorbell in the notification structure.
    notify_at: u32,
}

impl SplitQueue {
    /// Sets up queue `index` on the device: size (the device's maximum, capped at `max_size`
    /// and rounded down to a power of two), no interrupt vector, ring addresses, and enables it.
    pub(crate) fn new<R: VirtioRegs, D: Dma>(
        regs: &R,
        dma: &D,
        index: u16,
        max_size: u16,
        buffer_len: usize,
    ) -> Result<Self, Error> {
        regs.write16(Region::Common, common::QUEUE_SELECT, index);
        let offered = regs.read16(Region::Common, common::QUEUE_SIZE);
        if offered < 2 || offered == u16::MAX {
            return Err(Error::QueueUnavailable {
                queue: index,
                size: offered,
            });
        }
        let capped = offered.min(max_size);
        let size = 1u16 << (15 - capped.leading_zeros());
        let n = usize::from(size);
        let desc = DmaBuf::alloc(dma, DESC_LEN * n, 16)?;
        let avail = DmaBuf::alloc(dma, 6 + 2 * n, 2)?;
        let used = DmaBuf::alloc(dma, 6 + 8 * n, 4)?;
        let buffers = DmaBuf::alloc(dma, buffer_len * n, 16)?;
        for i in 0..n {
            let at = i * DESC_LEN;
            desc.write_u64(at, buffers.phys_at(i * buffer_len));
            desc.write_u32(at + 8, buffer_len as u32);
            desc.write_u16(at + 12, 0);
            desc.write_u16(at + 14, 0);
        }
        avail.write_u16(0, AVAIL_F_NO_INTERRUPT);
        let notify_off = regs.read16(Region::Common, common::QUEUE_NOTIFY_OFF);
        let notify_at = u64::from(notify_off) * u64::from(regs.notify_multiplier());
        let region_len = regs.region_len(Region::Notify);
        if notify_at + 2 > u64::from(region_len) {
            return Err(Error::NotifyOutOfRange {
                queue: index,
                offset: notify_at,
                region_len,
            });
        }
        regs.write16(Region::Common, common::QUEUE_SIZE, size);
        regs.write16(Region::Common, common::QUEUE_MSIX_VECTOR, common::NO_VECTOR);
        write64(regs, common::QUEUE_DESC, desc.phys());
        write64(regs, common::QUEUE_DRIVER, avail.phys());
        write64(regs, common::QUEUE_DEVICE, used.phys());
        regs.write16(Region::Common, common::QUEUE_ENABLE, 1);
        Ok(Self {
            index,
            size,
            desc,
            avail,
            used,
            buffers,
            buffer_len,
            avail_idx: 0,
            last_used: 0,
            with_device: vec![false; n],
            notify_at: notify_at as u32,
        })
    }

    /// Makes descriptor `id` available with `len` bytes (the device writes them when
    /// `device_writes`); the device sees it at the next [`SplitQueue::notify`].
    pub(crate) fn post(&mut self, id: u16, len: usize, device_writes: bool) {
        let n = usize::from(self.size);
        let i = usize::from(id);
        debug_assert!(i < n && !self.with_device[i] && len <= self.buffer_len);
        let at = i * DESC_LEN;
        self.desc.write_u32(at + 8, len as u32);
        self.desc
            .write_u16(at + 12, if device_writes { DESC_F_WRITE } else { 0 });
        let slot = usize::from(self.avail_idx) % n;
        self.avail.write_u16(4 + 2 * slot, id);
        self.with_device[i] = true;
        self.avail_idx = self.avail_idx.wrapping_add(1);
        // Release: the descriptor and ring entry above are visible to the device before the
        // index that publishes them (pairs with the device's read of avail.idx before it reads
        // the entries).
        fence(Ordering::Release);
        self.avail.write_u16(2, self.avail_idx);
    }

    /// Tells the device the available ring moved.
    pub(crate) fn notify<R: VirtioRegs>(&self, regs: &R) {
        // Full fence: the avail.idx store reaches memory before the doorbell write reaches the
        // device (a store and a later MMIO write; the device reads the index after the doorbell).
        fence(Ordering::SeqCst);
        regs.write16(Region::Notify, self.notify_at, self.index);
    }

    /// The next used entry as (descriptor id, length), after checking that the used index
    /// moved by at most the queue's size and that the device held that descriptor.
    pub(crate) fn take_used(&mut self) -> Result<Option<(u16, u32)>, Error> {
        let now = self.used.read_u16(2);
        let pending = now.wrapping_sub(self.last_used);
        if pending == 0 {
            return Ok(None);
        }
        let in_flight = self.with_device.iter().filter(|h| **h).count();
        if usize::from(pending) > in_flight {
            return Err(Error::UsedIndexJumped {
                queue: self.index,
                last: self.last_used,
                now,
                held: in_flight as u16,
            });
        }
        // Acquire: the entry is read after the index that published it (pairs with the
        // device's write of the entry before used.idx).
        fence(Ordering::Acquire);
        let slot = usize::from(self.last_used) % usize::from(self.size);
        let id = self.used.read_u32(4 + 8 * slot);
        let len = self.used.read_u32(4 + 8 * slot + 4);
        let held = usize::try_from(id)
            .ok()
            .and_then(|i| self.with_device.get(i).copied())
            .unwrap_or(false);
        if !held {
            return Err(Error::UsedBadId { queue: self.index, id });
        }
        self.with_device[id as usize] = false;
        self.last_used = self.last_used.wrapping_add(1);
        Ok(Some((id as u16, len)))
    }

    /// Copies `into.len()` bytes of buffer `id` from `offset`.
    pub(crate) fn read_buffer(&self, id: u16, offset: usize, into: &mut [u8]) {
        self.buffers
            .read_bytes(usize::from(id) * self.buffer_len + offset, into);
    }

    /// Writes `bytes` into buffer `id` at `offset`.
    pub(crate) fn write_buffer(&self, id: u16, offset: usize, bytes: &[u8]) {
        self.buffers
            .write_bytes(usize::from(id) * self.buffer_len + offset, bytes);
    }

    /// Descriptors the device does not hold.
    pub(crate) fn free_ids(&self) -> impl Iterator<Item = u16> + '_ {
        self.with_device
            .iter()
            .enumerate()
            .filter(|(_, held)| !**held)
            .map(|(i, _)| i as u16)
    }
}

/// A 64-bit field of the common configuration, as two 32-bit halves, low first.
fn write64<R: VirtioRegs>(regs: &R, offset: u32, value: u64) {
    regs.write32(Region::Common, offset, value as u32);
    regs.write32(Region::Common, offset + 4, (value >> 32) as u32);
}
