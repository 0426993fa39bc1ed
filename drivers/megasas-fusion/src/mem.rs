//! Control structures in DMA memory below 4 GiB (the driver never relies on 64-bit control
//! addressing, which not every generation has).

use devhal::{Dma, DmaBuf, DmaError};

use crate::Error;

/// Allocates `len` zeroed bytes aligned to `align`, wholly below 4 GiB; `what` names the
/// structure in the error.
pub(crate) fn alloc_low<A: Dma + ?Sized>(
    dma: &A,
    what: &'static str,
    len: usize,
    align: usize,
) -> Result<DmaBuf, Error> {
    DmaBuf::alloc_below_4g(dma, len, align).map_err(|e| match e {
        DmaError::Above4G { phys, len } => Error::DmaAbove4G { what, phys, len },
        other => Error::Dma(other),
    })
}
