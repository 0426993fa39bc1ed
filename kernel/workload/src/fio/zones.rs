//! fio's zones: `zonemode=strided` with `zonesize`, `zonerange` and `zoneskip` (plain devices,
//! fio's meaning); `zonemode=zbd` (zoned block devices) is refused.

use alloc::format;
use alloc::string::ToString;

use super::values::SIZE_FORM;
use super::{Builder, Setting, SizeOrPercent, Target, unsupported};
use crate::error::WorkloadError;
use crate::job::{RwMode, StridedZones};

/// The zone options as written, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct ZoneOptions {
    /// `zonemode=strided` (`none`, fio's default: false).
    strided: bool,
    size: Option<u64>,
    range: Option<u64>,
    skip: u64,
}

impl Builder {
    /// The zone options; `Ok(false)`: not one of them.
    pub(super) fn apply_zones(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        match s.key {
            "zonemode" => {
                self.zones.strided = match s.need()? {
                    "none" => false,
                    "strided" => true,
                    "zbd" => return Err(unsupported(s.job, "zonemode", "zoned devices are not supported")),
                    _ => return Err(s.bad("none, strided or zbd")),
                }
            }
            "zonesize" => self.zones.size = Some(s.size()?),
            "zonerange" => self.zones.range = Some(s.size()?),
            "zoneskip" => {
                self.zones.skip = super::values::size(s.need()?)
                    .ok_or_else(|| s.bad(&format!("{SIZE_FORM} (fio's zone-count form NNNz is not implemented)")))?
            }
            "zonecapacity" => {
                s.size()?;
                self.warn("zonecapacity: for zonemode=zbd only; fio ignores it otherwise, and so does baremq".into());
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Settles the zones once every option is applied: in fio 3.33 `size` (or `io_size`) is the
    /// bytes the job transfers, over zones that stride across the device from `offset` on, so
    /// the region runs to the device's end and the I/O count is `size / bs`.
    pub(super) fn settle_zones(&mut self, job: &str, bs: u64) -> Result<(), WorkloadError> {
        let zones = self.zones;
        if !zones.strided {
            if zones.size.is_some() || zones.range.is_some() || zones.skip != 0 {
                self.warn("zonesize, zonerange, zoneskip: ignored without zonemode=strided, as in fio".into());
            }
            return Ok(());
        }
        let refuse = |why: &str| Err(unsupported(job, "zonemode", why.to_string()));
        let Some(size) = zones.size.filter(|s| *s > 0) else {
            return refuse("zonemode=strided needs zonesize (the bytes of I/O per zone)");
        };
        // fio: zonerange defaults to zonesize.
        let range = zones.range.unwrap_or(size);
        for (name, value) in [("zonesize", size), ("zonerange", range), ("zoneskip", zones.skip)] {
            if !value.is_multiple_of(bs) || (name == "zonerange" && value == 0) {
                return Err(WorkloadError::FioBadValue {
                    job: job.into(),
                    option: name.into(),
                    value: value.to_string(),
                    expected: format!("a whole number of blocks of bs ({bs} bytes), above zero for zonerange"),
                });
            }
        }
        if !matches!(
            self.spec.rw,
            RwMode::Read | RwMode::Write | RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw
        ) {
            return refuse(
                "strided zones are carried out for read, write, randread, randwrite and randrw (fio keeps a position \
                 per direction in rw jobs; trims are not zoned here)",
            );
        }
        if self.spec.bs_mix.is_some()
            || matches!(self.target, Target::Devices(_))
            || self.offset_modifier.is_some()
            || self.spec.align_blocks > 1
            || !self.spec.zones.is_empty()
            || self.spec.skew.is_some()
            || self.loops > 1
            || self.offset_increment > 0
        {
            return refuse(
                "strided zones with variable block sizes, a filename list, an rw offset modifier, blockalign, a \
                 random_distribution other than random, loops or offset_increment are not implemented",
            );
        }
        if self.spec.rw.writes() && (self.verify.is_enabled() || !self.spec.verify_pattern.is_empty()) {
            return refuse("strided zones with verified writes are not implemented (a zone may be written again)");
        }
        let bytes = match (self.io_size, self.size) {
            (Some(bytes), _) | (None, Some(SizeOrPercent::Bytes(bytes))) => Some(bytes),
            (None, Some(SizeOrPercent::Percent(_))) => {
                return refuse("strided zones with a size in percent are not implemented; give bytes");
            }
            (None, None) => None,
        };
        if let Some(bytes) = bytes {
            if !bytes.is_multiple_of(bs) {
                return Err(WorkloadError::FioBadValue {
                    job: job.into(),
                    option: "size".into(),
                    value: bytes.to_string(),
                    expected: format!("a multiple of bs ({bs})"),
                });
            }
            if self.number_ios.is_none() {
                self.number_ios = Some(bytes / bs);
            }
        }
        // The zones stride over the device from offset on: the region runs to its end.
        self.size = None;
        self.io_size = None;
        self.spec.strided_zones = Some(StridedZones {
            size: size / bs,
            range: range / bs,
            skip: zones.skip / bs,
        });
        Ok(())
    }
}
