//! Verification and errors: `verify`, `verify_pattern`, `do_verify`, `verify_backlog`,
//! `verify_fatal` and `continue_on_error`.

use alloc::format;
use alloc::string::ToString;

use super::values;
use super::{Builder, Setting, pattern, unsupported};
use crate::error::WorkloadError;
use crate::job::VerifyMode;

impl Builder {
    /// The options of verification and errors; `Ok(false)`: not one of them.
    pub(super) fn apply_verify(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let job = s.job;
        let key = s.key;
        match key {
            "verify" => {
                let v = s.need()?;
                self.verify = match v {
                    "0" | "none" => VerifyMode::None,
                    "crc32c" | "crc32c-intel" => VerifyMode::Crc32c,
                    "md5" | "crc64" | "crc32" | "crc16" | "crc7" | "xxhash" | "sha1" | "sha256" | "sha512"
                    | "sha3-224" | "sha3-256" | "sha3-384" | "sha3-512" | "meta" => VerifyMode::Crc32c,
                    "pattern" => VerifyMode::FioPattern,
                    "pattern_hdr" | "null" => {
                        return Err(unsupported(
                            job,
                            &format!("verify={v}"),
                            "baremq verifies with fio's plain pattern (verify=pattern) or its own header and CRC32C \
                             (verify=crc32c)",
                        ));
                    }
                    _ => {
                        return Err(
                            s.bad("0, crc32c, crc32c-intel, md5, crc64, crc32, crc16, crc7, xxhash, sha*, meta")
                        );
                    }
                };
                self.verify_name = v.to_string();
            }
            "verify_pattern" => {
                self.spec.verify_pattern =
                    pattern::parse(s.need()?).map_err(|why| s.bad(&format!("{} ({why})", pattern::PATTERN_FORM)))?
            }
            "do_verify" => self.do_verify = s.flag()?,
            "verify_interval" => self.verify_interval = Some(s.size()?),
            "verify_backlog" => {
                self.spec.verify_backlog = values::integer(s.need()?)
                    .filter(|n| *n <= 1 << 20)
                    .ok_or_else(|| s.bad("a number of blocks from 0 (off) to 1048576"))?
                    as u32
            }
            "verify_fatal" => self.verify_fatal = s.flag()?,
            "verify_dump" => {
                if s.flag()? {
                    self.warn(
                        "verify_dump: accepted: fio writes a failed block and the expected one to files; baremq has \
                         no file system, and its report names the first mismatch instead (its LBA, the field that \
                         differs, the value expected and the value found)"
                            .into(),
                    );
                }
            }
            "continue_on_error" => {
                use crate::job::ErrorClass::{Read, Verify, Write};
                self.continue_on_error = match s.need()? {
                    "none" | "0" => 0,
                    "read" => Read as u8,
                    "write" => Write as u8,
                    "io" => Read as u8 | Write as u8,
                    "verify" => Verify as u8,
                    "all" | "1" => crate::job::ErrorClass::ALL,
                    _ => return Err(s.bad("none, read, write, io, verify or all (or 0, 1)")),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}
