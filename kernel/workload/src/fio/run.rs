//! Options of the whole run (`--output-format`, `--output`, `--readonly`), from the command
//! line, native words or a job file's `[global]` sections.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::syntax::Entry;
use super::unsupported;
use super::values::{self, BOOL_FORM};
use crate::error::WorkloadError;

/// Which document the run prints (fio's `--output-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// fio's human text (baremq's report).
    #[default]
    Normal,
    /// fio's JSON document.
    Json,
    /// fio's JSON document with latency histogram bins.
    JsonPlus,
}

/// Options of the whole run that the OUTPUT side consumes (the fio-shaped JSON document and the
/// files xtask writes), parsed here from `--output-format=` / `--output=` / `--readonly`
/// command-line words, from native `output-format=` / `output=` words ([`split_run_words`]) and
/// from a job file's `[global]` sections:
///
/// * `output_format`: the richest JSON asked for (`json+` over `json`), or `Normal`;
///   `normal_too` when a list such as `--output-format=json,normal` also asks for the text.
/// * `output`: the name of the output document (`--output=FILE`), which xtask writes on the
///   host; the kernel only echoes it.
/// * `readonly`: every job that writes is refused (fio's `--readonly`).
/// * `global_options`: the `[global]` entries as written (fio's `"global options"`).
///
/// Per-job report options (`percentile_list`, `*_percentiles`, logs, `group_reporting`) are in
/// [`FioJob::report`](super::FioJob::report).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FioRunOptions {
    /// The JSON flavour asked for, or `Normal`.
    pub output_format: OutputFormat,
    /// Whether the normal text was asked for too (`json,normal`).
    pub normal_too: bool,
    /// `--output=FILE`.
    pub output: Option<String>,
    /// `--readonly`.
    pub readonly: bool,
    /// `[global]` entries as written: key and value (`""` for a bare key).
    pub global_options: Vec<(String, String)>,
}

/// Takes the native `output-format=` and `output=` words out of native job words, returning the
/// run options they set and the other words (for [`parse_jobs`](crate::parse_jobs)).
pub fn split_run_words<'a>(words: &[&'a str]) -> Result<(FioRunOptions, Vec<&'a str>), WorkloadError> {
    let mut options = FioRunOptions::default();
    let mut rest = Vec::new();
    for (index, word) in words.iter().enumerate() {
        match word.split_once('=') {
            Some((key @ ("output-format" | "output"), value)) => {
                let entry = Entry {
                    key: key.to_string(),
                    value: Some(value.to_string()),
                    at: format!("word {}", index + 1),
                };
                apply_run_option(&mut options, &entry)?;
            }
            _ => rest.push(*word),
        }
    }
    Ok((options, rest))
}

pub(super) fn apply_run_option(options: &mut FioRunOptions, entry: &Entry) -> Result<(), WorkloadError> {
    let value = entry.value.as_deref().unwrap_or("");
    let bad = |expected: &str| WorkloadError::FioBadValue {
        job: "run".into(),
        option: entry.key.clone(),
        value: value.to_string(),
        expected: expected.to_string(),
    };
    match entry.key.as_str() {
        "output-format" => {
            let mut format = OutputFormat::Normal;
            let mut normal = false;
            for part in value.split(',') {
                match part.trim() {
                    "normal" => normal = true,
                    "json" if format != OutputFormat::JsonPlus => format = OutputFormat::Json,
                    "json" => {}
                    "json+" => format = OutputFormat::JsonPlus,
                    "terse" => {
                        return Err(unsupported("run", "output-format=terse", "use json, json+ or normal"));
                    }
                    _ => return Err(bad("normal, json, json+, or a comma list of them")),
                }
            }
            options.output_format = format;
            options.normal_too = normal && format != OutputFormat::Normal;
        }
        "output" => {
            let valid = !value.is_empty()
                && value.len() <= 128
                && value.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
            if !valid {
                return Err(bad("a file name of at most 128 printable characters"));
            }
            options.output = Some(value.to_string());
        }
        "readonly" => {
            options.readonly = match entry.value.as_deref() {
                None => true,
                Some(v) => values::boolean(v).ok_or_else(|| bad(BOOL_FORM))?,
            }
        }
        // Progress display options: baremq prints its own progress line.
        "eta" | "eta-newline" | "eta-interval" => {}
        other => {
            return Err(unsupported(
                "run",
                other,
                "only --output-format, --output, --readonly and --eta* are run options baremq takes",
            ));
        }
    }
    Ok(())
}
