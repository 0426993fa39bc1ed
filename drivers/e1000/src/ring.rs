//! One descriptor ring with a buffer of its own per descriptor.
//!
//! Descriptor `i` always points at buffer `i` (one descriptor per frame on transmit), so an
//! index names both. Indices are `u16` below the ring's length.

use crate::regs::desc;
use devhal::{Dma, DmaBuf};

pub(crate) struct Ring {
    pub(crate) len: u16,
    descriptors: DmaBuf,
    buffers: DmaBuf,
}

impl Ring {
    /// `len` descriptors (a multiple of 8: the ring's byte length must be a multiple of 128),
    /// each pointing at its `buffer_len`-byte buffer.
    pub(crate) fn new<D: Dma>(dma: &D, len: u16, buffer_len: usize) -> Result<Self, devhal::DmaError> {
        let n = usize::from(len);
        let descriptors = DmaBuf::alloc(dma, desc::LEN * n, 128)?;
        let buffers = DmaBuf::alloc(dma, buffer_len * n, 16)?;
        for i in 0..n {
            descriptors.write_u64(i * desc::LEN + desc::ADDR, buffers.phys_at(i * buffer_len));
        }
        Ok(Self {
            len,
            descriptors,
            buffers,
        })
    }

    pub(crate) fn phys(&self) -> u64 {
        self.descriptors.phys()
    }

    pub(crate) fn byte_len(&self) -> u32 {
        (usize::from(self.len) * desc::LEN) as u32
    }

    pub(crate) fn read_u8(&self, index: u16, field: usize) -> u8 {
        self.descriptors.read_u8(usize::from(index) * desc::LEN + field)
    }

    pub(crate) fn read_u16(&self, index: u16, field: usize) -> u16 {
        self.descriptors.read_u16(usize::from(index) * desc::LEN + field)
    }

    pub(crate) fn write_u8(&self, index: u16, field: usize, value: u8) {
        self.descriptors.write_u8(usize::from(index) * desc::LEN + field, value);
    }

    pub(crate) fn write_u16(&self, index: u16, field: usize, value: u16) {
        self.descriptors
            .write_u16(usize::from(index) * desc::LEN + field, value);
    }

    pub(crate) fn read_buffer(&self, index: u16, buffer_len: usize, into: &mut [u8]) {
        self.buffers.read_bytes(usize::from(index) * buffer_len, into);
    }

    pub(crate) fn write_buffer(&self, index: u16, buffer_len: usize, bytes: &[u8]) {
        self.buffers.write_bytes(usize::from(index) * buffer_len, bytes);
    }

    pub(crate) fn next(&self, index: u16) -> u16 {
        if index + 1 == self.len { 0 } else { index + 1 }
    }

    /// Descriptors from `from` to `to`, going forward around the ring.
    pub(crate) fn distance(&self, from: u16, to: u16) -> u16 {
        if to >= from { to - from } else { self.len - from + to }
    }
}
