//! What every driver that puts a controller's drives on the block layer does alike: the request
//! identity it carries in a controller cookie ([`pack_cookie`]), a drive's size in the block
//! layer's 512-byte sectors, one `blk::Queue` per drive ([`host_with_drive_queues`]), and the
//! block-layer batch a reap ends its completions in ([`ReapBatch`]).

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;

use blk::{BlkError, CompletionBatch, Driver, IssueToken, Platform, Queue, QueueConfig, Status};

/// Packs a block-layer request's identity into a controller cookie:
/// `drive << 48 | hwq << 32 | IssueToken::to_bits()`, the one place that maps a controller
/// completion back to its request.
pub const fn pack_cookie(drive: u16, hwq: u16, token: IssueToken) -> u64 {
    ((drive as u64) << 48) | ((hwq as u64) << 32) | token.to_bits() as u64
}

/// The inverse of [`pack_cookie`]: (drive, hwq, token).
pub const fn unpack_cookie(cookie: u64) -> (u16, u16, IssueToken) {
    (
        (cookie >> 48) as u16,
        (cookie >> 32) as u16,
        IssueToken::from_bits(cookie as u32),
    )
}

/// A drive of `blocks` blocks of `block_size` bytes in the block layer's 512-byte sectors:
/// (sectors per block, capacity in sectors). `None` when the capacity does not fit in 64 bits
/// (firmware-supplied values: the caller names it in its own error).
pub fn drive_sectors(blocks: u64, block_size: u32) -> Option<(u32, u64)> {
    let scale = block_size / 512;
    Some((scale, blocks.checked_mul(u64::from(scale))?))
}

/// The host `H` of a controller's drives, built around one queue per drive: `driver(host,
/// index, facts)` makes drive `index`'s driver (in drive order) from what the caller kept about
/// it, with a weak handle to the host being built (a driver delivers other drives' completions
/// through it); `host(queues)` then makes the host. Fails with the first configuration the block
/// layer refuses (the half-built host is dropped).
pub fn host_with_drive_queues<H, D: Driver, F>(
    configs: Vec<(QueueConfig, F)>,
    platform: &Arc<dyn Platform>,
    mut driver: impl FnMut(&Weak<H>, u16, F) -> D,
    host: impl FnOnce(Vec<Queue<D>>) -> H,
) -> Result<Arc<H>, BlkError> {
    let mut error = None;
    let built = Arc::new_cyclic(|weak| {
        let mut queues = Vec::with_capacity(configs.len());
        for (index, (qc, facts)) in configs.into_iter().enumerate() {
            // Drive counts come from a 256-entry LD list, so the index fits.
            match Queue::new(qc, driver(weak, index as u16, facts), platform.clone()) {
                Ok(q) => queues.push(q),
                Err(e) => {
                    error = Some(e);
                    queues.clear();
                    break;
                }
            }
        }
        host(queues)
    });
    match error {
        Some(e) => Err(e),
        None => Ok(built),
    }
}

/// One reap's open block-layer completion batch ([`Queue::completion_batch`]): completions of
/// one drive's hardware queue in a row share it; a completion for another drive or queue drops
/// it, which runs its queue's rerun check, and opens its own. The reaper drops it
/// after letting go of its reply queue: the last rerun check may dispatch, and post.
pub struct ReapBatch<'a, D: Driver> {
    open: Option<(u16, u16, CompletionBatch<'a, D>)>,
}

impl<D: Driver> Default for ReapBatch<'_, D> {
    fn default() -> Self {
        Self { open: None }
    }
}

impl<'a, D: Driver> ReapBatch<'a, D> {
    /// Completes issue `token` on drive `drive`'s hardware queue `hwq` with `status` through
    /// the batch (`queues`: one per drive). `None` when no batch opens for them (no such drive,
    /// or a queue the block layer refuses): the caller delivers it unbatched, which reports why.
    #[inline(always)]
    pub fn complete(
        &mut self,
        queues: &'a [Queue<D>],
        cpu: usize,
        drive: u16,
        hwq: u16,
        token: IssueToken,
        status: Status,
    ) -> Option<Result<(), BlkError>> {
        if !matches!(&self.open, Some((d, h, _)) if *d == drive && *h == hwq) {
            self.open = None;
            let batch = queues
                .get(usize::from(drive))?
                .completion_batch(cpu, usize::from(hwq))
                .ok()?;
            self.open = Some((drive, hwq, batch));
        }
        let (_, _, batch) = self.open.as_mut()?;
        Some(batch.complete(token, status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_round_trips_and_keeps_fields_apart() {
        let token = IssueToken::from_bits(0xDEAD_BEEF);
        let c = pack_cookie(0x1234, 0x5678, token);
        assert_eq!(c, 0x1234_5678_DEAD_BEEF);
        let (drive, hwq, back) = unpack_cookie(c);
        assert_eq!((drive, hwq, back.to_bits()), (0x1234, 0x5678, 0xDEAD_BEEF));
        assert_eq!(
            unpack_cookie(pack_cookie(u16::MAX, 0, IssueToken::from_bits(0))).0,
            u16::MAX
        );
    }

    #[test]
    fn drive_sectors_scales_and_refuses_overflow() {
        assert_eq!(drive_sectors(1000, 512), Some((1, 1000)));
        assert_eq!(drive_sectors(1000, 4096), Some((8, 8000)));
        assert_eq!(drive_sectors(u64::MAX / 8 + 1, 4096), None);
        assert_eq!(drive_sectors(u64::MAX, 512), Some((1, u64::MAX)));
    }
}
