//! Random offsets: `random_distribution` (skewed or zoned), the seed (`randrepeat`,
//! `randseed`) and `norandommap`.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::values;
use super::{Builder, Setting, unsupported};
use crate::error::WorkloadError;

impl Builder {
    /// The options of random offsets; `Ok(false)`: not one of them.
    pub(super) fn apply_random(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let job = s.job;
        let key = s.key;
        match key {
            "random_distribution" => {
                let v = s.need()?;
                self.spec.skew = None;
                self.spec.zones = Vec::new();
                if let Some(zones) = v.strip_prefix("zoned:").or_else(|| v.strip_prefix("zoned_abs:")) {
                    self.spec.zones =
                        parse_zones(zones, v.starts_with("zoned_abs:")).map_err(|expected| s.bad(&expected))?;
                } else if v != "random" {
                    let (name, parameter) = v.split_once(':').unwrap_or((v, ""));
                    if parameter.contains(':') {
                        return Err(unsupported(
                            job,
                            &format!("random_distribution={v}"),
                            "a centre (the second parameter) is not implemented",
                        ));
                    }
                    self.spec.skew = Some(parse_skew(name, parameter).ok_or_else(|| {
                        s.bad("random, zipf:THETA (THETA > 0), pareto:H (0 < H < 1), normal[:DEV%] or gauss[:DEV%], zoned:... or zoned_abs:...")
                    })?);
                }
            }
            "randrepeat" | "rand_repeatable" => self.randrepeat = s.flag()?,
            "randseed" => self.randseed = Some(values::integer(s.need()?).ok_or_else(|| s.bad("an integer"))?),
            "norandommap" => self.norandommap = s.flag()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The skewed `random_distribution` `name:parameter` (parameter in thousandths), or `None` when
/// the name or the parameter is not one fio takes.
fn parse_skew(name: &str, parameter: &str) -> Option<crate::skew::Skew> {
    use crate::skew::Skew;
    let milli = |text: &str| -> Option<u32> {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        if fraction.len() > 3
            || !fraction.bytes().all(|b| b.is_ascii_digit())
            || (whole.is_empty() && fraction.is_empty())
        {
            return None;
        }
        let whole: u32 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
        let fraction: u32 = if fraction.is_empty() {
            0
        } else {
            fraction.parse::<u32>().ok()? * 10u32.pow(3 - fraction.len() as u32)
        };
        whole.checked_mul(1000)?.checked_add(fraction)
    };
    match name {
        "zipf" => Some(Skew::Zipf {
            theta_milli: milli(parameter).filter(|&t| (1..=100_000).contains(&t))?,
        }),
        "pareto" => Some(Skew::Pareto {
            h_milli: milli(parameter).filter(|&h| (1..1000).contains(&h))?,
        }),
        "normal" | "gauss" => Some(Skew::Normal {
            dev_milli: if parameter.is_empty() {
                0
            } else {
                milli(parameter).filter(|&d| d <= 100_000)?
            },
        }),
        _ => None,
    }
}

/// `A/R:A/R...` of `random_distribution=zoned:` (R a percent) or `zoned_abs:` (R a size), with
/// fio 3.33's rules: the access percents add up to 100; for `zoned` the region percents add up to
/// at most 100 (the rest of the region is not accessed), and a region left empty (`20/`) gets an
/// equal share of what the others leave.
fn parse_zones(text: &str, absolute: bool) -> Result<Vec<crate::job::AccessZone>, String> {
    use crate::job::{AccessZone, ZoneLength};
    let form = if absolute {
        "zoned_abs:ACCESS%/SIZE:..., e.g. zoned_abs:60/1g:40/7g, access percents adding up to 100"
    } else {
        "zoned:ACCESS%/REGION%:..., e.g. zoned:60/10:30/20:10/70 or zoned:50/5:30/15:20/, access percents adding \
         up to 100, region percents to at most 100 (an empty one shares what the others leave)"
    };
    if text.contains(',') {
        return Err(alloc::format!("{form} (zones per direction are not implemented)"));
    }
    let mut zones = Vec::new();
    let (mut access, mut region, mut missing) = (0u64, 0u64, 0u64);
    for part in text.split(':') {
        let (a, r) = part.split_once('/').ok_or_else(|| form.to_string())?;
        let a = values::integer(a)
            .filter(|a| *a <= 100)
            .ok_or_else(|| form.to_string())?;
        let length = if absolute {
            ZoneLength::Bytes(values::size(r).ok_or_else(|| form.to_string())?)
        } else if r.trim().is_empty() {
            missing += 1;
            // Filled in below, once the given ones are known.
            ZoneLength::Percent(u8::MAX)
        } else {
            let r = values::integer(r)
                .filter(|r| *r <= 100)
                .ok_or_else(|| form.to_string())?;
            region += r;
            ZoneLength::Percent(r as u8)
        };
        access += a;
        zones.push(AccessZone {
            access_percent: a as u8,
            length,
        });
    }
    if access != 100 || region > 100 {
        return Err(form.to_string());
    }
    if let Some(share) = (100 - region).checked_div(missing) {
        let share = share as u8;
        for zone in &mut zones {
            if zone.length == ZoneLength::Percent(u8::MAX) {
                zone.length = ZoneLength::Percent(share);
            }
        }
    }
    Ok(zones)
}
