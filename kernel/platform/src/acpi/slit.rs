//! SLIT (System Locality Information Table): relative distances between
//! proximity domains (10 = local).

use alloc::vec::Vec;

use super::tables::{Fields, table_bytes};
use super::{PhysMemory, Sdt};
use crate::error::{Error, Result, TableSignature};

/// Header (36) + the locality count (u64).
const SLIT_FIXED_LEN: u32 = 44;

/// The parsed SLIT: an `localities` x `localities` matrix, row = from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slit {
    pub localities: usize,
    distances: Vec<u8>,
}

impl Slit {
    /// Parses a validated SLIT; the matrix must fit in the table.
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Slit> {
        table.expect(TableSignature::SLIT, SLIT_FIXED_LEN)?;
        let bytes = table_bytes(memory, table)?;
        let fields = Fields::new(TableSignature::SLIT, &bytes);
        let localities = fields.u64(36)?;
        let size_error = Error::SlitSize {
            localities,
            length: table.length,
        };
        // The square must fit the table's body (at most 1 MiB), so both fit a usize.
        let cells = localities
            .checked_mul(localities)
            .filter(|&cells| cells <= u64::from(table.length.saturating_sub(SLIT_FIXED_LEN)))
            .and_then(|cells| usize::try_from(cells).ok())
            .ok_or(size_error.clone())?;
        let localities = usize::try_from(localities).map_err(|_| size_error)?;
        let distances = fields.slice(SLIT_FIXED_LEN as usize, cells)?.to_vec();
        Ok(Slit { localities, distances })
    }

    /// Distance from locality (proximity domain) `from` to `to`, if both are in the matrix.
    pub fn distance(&self, from: u32, to: u32) -> Option<u8> {
        let (from, to) = (usize::try_from(from).ok()?, usize::try_from(to).ok()?);
        if from >= self.localities || to >= self.localities {
            return None;
        }
        // Checked: `localities` is public, so it may no longer match the matrix.
        let cell = from.checked_mul(self.localities)?.checked_add(to)?;
        self.distances.get(cell).copied()
    }

    /// What Linux also requires before trusting a SLIT: every locality is 10
    /// from itself and more than 10 from every other one.
    pub fn is_consistent(&self) -> bool {
        (0..self.localities).all(|from| {
            (0..self.localities).all(|to| {
                let cell = from.checked_mul(self.localities).and_then(|row| row.checked_add(to));
                match cell.and_then(|cell| self.distances.get(cell)) {
                    Some(&d) if from == to => d == 10,
                    Some(&d) => d > 10,
                    None => false,
                }
            })
        })
    }
}
