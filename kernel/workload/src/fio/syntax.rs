//! fio's two job syntaxes, read into [`Section`]s of raw `key[=value]` entries (no meaning yet).
//!
//! * **Job files** (fio's "classic ini file"): `[name]` starts a section, `[global]` a global one
//!   whose entries apply to the job sections below it (there may be several); a `;` or `#`
//!   anywhere on a line starts a comment that runs to the end of the line (fio's
//!   `strip_blank_end` cuts the line at the first of either, with or without blanks before it, in
//!   values too), so a line that starts with one is a comment line; `key=value` with optional
//!   blanks around `=`; a bare `key` sets a flag (`time_based`). `include` and `${VAR}` are
//!   refused. Command-line words have no comments (fio does not cut them).
//! * **Command lines**: `--key=value`, `-key=value`, `--key value`, bare `--flag`; `--name=NAME`
//!   starts a job; words before the first `--name` are global. fio's run options
//!   ([`RUN_OPTIONS`]: `--output-format`, `--output`, `--readonly`, ...) are kept apart.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::error::WorkloadError;

/// One `key[=value]` as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key, lower-cased as fio matches keys case-insensitively.
    pub key: String,
    /// The value; `None` for a bare key.
    pub value: Option<String>,
    /// Where it was written (`line 3`, `word 2`), for messages.
    pub at: String,
}

/// A `[global]` or job section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The section name (`global` for global sections).
    pub name: String,
    /// Whether this is a `[global]` section (or the words before the first `--name`).
    pub global: bool,
    /// The entries in order.
    pub entries: Vec<Entry>,
}

/// fio command-line options that are about the run, not a job.
pub const RUN_OPTIONS: [&str; 9] = [
    "output-format",
    "output",
    "readonly",
    "eta",
    "eta-newline",
    "eta-interval",
    "status-interval",
    "minimal",
    "terse-version",
];

/// Options that take no value on fio's command line (`--time_based`), so the next word is not theirs.
const FLAGS: [&str; 12] = [
    "time_based",
    "group_reporting",
    "norandommap",
    "stonewall",
    "wait_for_previous",
    "new_group",
    "thread",
    "refill_buffers",
    "readonly",
    "minimal",
    "scramble_buffers",
    "exitall",
];

fn syntax(at: &str, detail: String) -> WorkloadError {
    WorkloadError::FioSyntax {
        at: at.to_string(),
        detail,
    }
}

fn checked_key(key: &str, at: &str) -> Result<String, WorkloadError> {
    let key = key.trim();
    if key.is_empty() {
        return Err(syntax(at, "an option has no name".into()));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(syntax(at, format!("{key:?} is not an option name")));
    }
    Ok(key.to_ascii_lowercase())
}

fn checked_value(key: &str, value: &str, at: &str) -> Result<String, WorkloadError> {
    let value = value.trim();
    if value.contains("${") {
        return Err(WorkloadError::FioUnsupported {
            job: at.to_string(),
            option: format!("{key}={value}"),
            reason: "fio's ${VAR} takes the value from the environment, which a kernel has not; write the value \
                     ($ncpus, $mb_memory and $pagesize are known)"
                .into(),
        });
    }
    Ok(value.to_string())
}

/// A job-file line without its comment and the blanks around what is left: fio cuts a line at
/// its first `;` or `#`, wherever it is (`numjobs=4\t; four clones` is `numjobs=4`,
/// `bs=4k#x` is `bs=4k`).
pub fn without_comment(line: &str) -> &str {
    let end = line.find([';', '#']).unwrap_or(line.len());
    line[..end].trim()
}

/// Reads a fio job file.
pub fn job_file(text: &str) -> Result<Vec<Section>, WorkloadError> {
    let mut sections: Vec<Section> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let at = format!("line {}", index + 1);
        let line = without_comment(raw);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest
                .strip_suffix(']')
                .ok_or_else(|| syntax(&at, format!("section header {line:?} has no closing ]")))?
                .trim();
            if name.is_empty() {
                return Err(syntax(&at, "a section has an empty name".into()));
            }
            sections.push(Section {
                name: name.to_string(),
                global: name == "global",
                entries: Vec::new(),
            });
            continue;
        }
        if line.starts_with("include ") || line == "include" {
            return Err(WorkloadError::FioUnsupported {
                job: at,
                option: "include".into(),
                reason: "job files cannot include other files here; give each file as its own boot module".into(),
            });
        }
        let section = sections
            .last_mut()
            .ok_or_else(|| syntax(&at, format!("{line:?} comes before the first [section]")))?;
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (checked_key(k, &at)?, Some(checked_value(k.trim(), v, &at)?)),
            None => (checked_key(line, &at)?, None),
        };
        section.entries.push(Entry { key, value, at });
    }
    Ok(sections)
}

/// A fio command line: its run options and its sections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// Entries of [`RUN_OPTIONS`], in order.
    pub run: Vec<Entry>,
    /// The global section (words before the first `--name`), then one section per `--name`.
    pub sections: Vec<Section>,
}

/// Reads fio command-line words (the words after the kernel command line's `--`).
pub fn command_line<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<CommandLine, WorkloadError> {
    let words: Vec<&str> = words.into_iter().collect();
    let mut out = CommandLine {
        run: Vec::new(),
        sections: alloc::vec![Section {
            name: "global".into(),
            global: true,
            entries: Vec::new(),
        }],
    };
    let mut index = 0;
    while index < words.len() {
        let word = words[index];
        let at = format!("word {}", index + 1);
        index += 1;
        let Some(option) = word.strip_prefix("--").or_else(|| word.strip_prefix('-')) else {
            return Err(WorkloadError::FioUnsupported {
                job: at,
                option: word.to_string(),
                reason: "a word without a leading - would be a job file name to fio; job files come as boot \
                         modules (cargo xtask run --fio FILE), options as --key=value"
                    .into(),
            });
        };
        let (key, value) = match option.split_once('=') {
            Some((k, v)) => (checked_key(k, &at)?, Some(checked_value(k, v, &at)?)),
            None => {
                let key = checked_key(option, &at)?;
                // `--key value`: the next word is the value unless the option is a flag or the
                // next word is an option itself.
                let takes_next =
                    !FLAGS.contains(&key.as_str()) && words.get(index).is_some_and(|next| !next.starts_with('-'));
                if takes_next {
                    let value = checked_value(&key, words[index], &at)?;
                    index += 1;
                    (key, Some(value))
                } else {
                    (key, None)
                }
            }
        };
        let entry = Entry {
            key: key.clone(),
            value: value.clone(),
            at,
        };
        if RUN_OPTIONS.contains(&key.as_str()) {
            out.run.push(entry);
        } else if key == "name" {
            let name = value
                .filter(|v| !v.is_empty())
                .ok_or_else(|| syntax(&entry.at, "--name needs a job name (--name=NAME)".into()))?;
            out.sections.push(Section {
                name,
                global: false,
                entries: alloc::vec![entry],
            });
        } else {
            // Unwrap: the global section is always there.
            out.sections.last_mut().expect("global section").entries.push(entry);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(section: &Section) -> Vec<(String, Option<String>)> {
        section
            .entries
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect()
    }

    #[test]
    fn ini_sections_comments_blanks_and_bare_keys() {
        let text = "; a comment\n# another\n\n[global]\nbs = 4k\n  time_based\n[job one]\nRW=randread\n\
                    iodepth=32\n[global]\nsize=1m\n[two]\nrw=write\n";
        let sections = job_file(text).unwrap();
        assert_eq!(sections.len(), 4);
        assert!(sections[0].global && !sections[1].global && sections[2].global);
        assert_eq!(sections[1].name, "job one");
        assert_eq!(
            keys(&sections[0]),
            [("bs".into(), Some("4k".into())), ("time_based".into(), None)]
        );
        assert_eq!(keys(&sections[1])[0], ("rw".into(), Some("randread".into())));
        assert_eq!(sections[1].entries[1].at, "line 9");
    }

    #[test]
    fn inline_comments_end_where_fio_cuts_the_line() {
        // fio 3.33's examples write `size=102404k ; 100Mb+4k` and `rw=write # read/write/...`;
        // its parser cuts at the first `;` or `#` with or without a blank before it.
        let text = "[global] ; defaults\nnumjobs=4\t; 4 simultaneous threads\nbs = 4k# block\n\
                    [job] # the job\nrw=write # read/write/randread ; more\nsize=102404k ; 100Mb+4k\n\
                    time_based;bare flag\nverify_pattern=0xab;cd\n   ;indented comment\n\t# tab comment\n";
        let sections = job_file(text).unwrap();
        assert_eq!(sections.len(), 2);
        assert_eq!(sections[0].name, "global");
        assert_eq!(sections[1].name, "job");
        assert_eq!(
            keys(&sections[0]),
            [("numjobs".into(), Some("4".into())), ("bs".into(), Some("4k".into()))]
        );
        assert_eq!(
            keys(&sections[1]),
            [
                ("rw".into(), Some("write".into())),
                ("size".into(), Some("102404k".into())),
                ("time_based".into(), None),
                ("verify_pattern".into(), Some("0xab".into())),
            ]
        );
        assert_eq!(without_comment("  key=value  "), "key=value");
        assert_eq!(without_comment("key=a#b;c"), "key=a");
        assert_eq!(without_comment("key=a;b#c"), "key=a");
        assert_eq!(without_comment("; all comment"), "");
    }

    #[test]
    fn command_line_words_keep_comment_characters() {
        // fio hands command-line values to the option parser as they are.
        let cl = command_line(["--name=a", "--description=x;y#z"]).unwrap();
        assert_eq!(keys(&cl.sections[1])[1], ("description".into(), Some("x;y#z".into())));
    }

    #[test]
    fn ini_errors_name_the_line() {
        for (text, line) in [
            ("bs=4k\n[a]\n", "line 1"),
            ("[a\nbs=4k\n", "line 1"),
            ("[a]\n=4k\n", "line 2"),
            ("[a]\nb s=4k\n", "line 2"),
        ] {
            match job_file(text).unwrap_err() {
                WorkloadError::FioSyntax { at, .. } => assert_eq!(at, line, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert!(matches!(
            job_file("[a]\ninclude other.fio\n").unwrap_err(),
            WorkloadError::FioUnsupported { option, .. } if option == "include"
        ));
        assert!(matches!(
            job_file("[a]\nsize=${SIZE}\n").unwrap_err(),
            WorkloadError::FioUnsupported { .. }
        ));
        assert!(
            job_file("[a]\nnumjobs=$ncpus\n").is_ok(),
            "fio's keywords are expanded later"
        );
    }

    #[test]
    fn command_line_forms() {
        let words = "--output-format=json -direct=1 --ioengine libaio --time_based --runtime 5 \
                     --name=a --rw=randread --name b -bs=8k --group_reporting --output=out.json";
        let cl = command_line(words.split_whitespace()).unwrap();
        assert_eq!(
            cl.run
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_deref()))
                .collect::<Vec<_>>(),
            [("output-format", Some("json")), ("output", Some("out.json"))]
        );
        assert_eq!(cl.sections.len(), 3);
        assert_eq!(
            keys(&cl.sections[0]),
            [
                ("direct".into(), Some("1".into())),
                ("ioengine".into(), Some("libaio".into())),
                ("time_based".into(), None),
                ("runtime".into(), Some("5".into())),
            ]
        );
        assert_eq!(cl.sections[1].name, "a");
        assert_eq!(cl.sections[2].name, "b");
        assert_eq!(
            keys(&cl.sections[2]),
            [
                ("name".into(), Some("b".into())),
                ("bs".into(), Some("8k".into())),
                ("group_reporting".into(), None),
            ]
        );
    }

    #[test]
    fn command_line_refuses_file_names_and_empty_names() {
        assert!(matches!(
            command_line(["job.fio"]).unwrap_err(),
            WorkloadError::FioUnsupported { option, .. } if option == "job.fio"
        ));
        assert!(matches!(
            command_line(["--name"]).unwrap_err(),
            WorkloadError::FioSyntax { .. }
        ));
    }
}
