//! The options of every `cargo xtask` command, read one at a time: `--key value` and fio's
//! `--key=value` are the same option, a flag (`--debug`) takes no value, and other words
//! (a job file, a folder) come back as they are for the command to take as positional.

/// A cursor over a command's option words.
pub struct Options<'a> {
    words: &'a [String],
    next: usize,
    /// The option just returned by [`Options::next`], and the value written after its `=`.
    current: Option<(&'a str, Option<&'a str>)>,
    /// Whether the command took the current option's value.
    value_taken: bool,
}

impl<'a> Options<'a> {
    pub fn new(words: &'a [String]) -> Self {
        Self {
            words,
            next: 0,
            current: None,
            value_taken: false,
        }
    }

    /// The next option's name (`--smp` of both `--smp 4` and `--smp=4`), or the next word that
    /// is not an option. An error when the option before had a `=value` the command did not take:
    /// it is a flag.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<&'a str>, String> {
        self.check_value_taken()?;
        let Some(word) = self.words.get(self.next) else {
            self.current = None;
            return Ok(None);
        };
        self.next += 1;
        self.value_taken = false;
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) if name.starts_with('-') && name.len() > 1 => (name, Some(value)),
            _ => (word.as_str(), None),
        };
        self.current = Some((name, inline));
        Ok(Some(name))
    }

    /// The current option's value: what follows its `=`, else the next word.
    pub fn value(&mut self) -> Result<&'a str, String> {
        let (name, inline) = self.current.ok_or("an option value was asked for before any option")?;
        self.value_taken = true;
        if let Some(value) = inline {
            return Ok(value);
        }
        let value = self
            .words
            .get(self.next)
            .ok_or_else(|| format!("{name} needs a value"))?;
        self.next += 1;
        Ok(value)
    }

    /// The current option's value when it has one: what follows its `=`, or the next word when
    /// `is_value` accepts it (for an option whose value may be left out, as `lab --trace [N]`).
    pub fn optional_value(&mut self, is_value: impl Fn(&str) -> bool) -> Option<&'a str> {
        let (_, inline) = self.current?;
        self.value_taken = true;
        if inline.is_some() {
            return inline;
        }
        let next = self.words.get(self.next).filter(|w| is_value(w))?;
        self.next += 1;
        Some(next)
    }

    /// An error when the last option had a `=value` nobody took. Call after the last option (a
    /// loop over [`Options::next`] does this by itself).
    fn check_value_taken(&self) -> Result<(), String> {
        match self.current {
            Some((name, Some(value))) if !self.value_taken => {
                Err(format!("{name} takes no value (got '{name}={value}')"))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    /// Reads `text` as a command taking `--smp N`, `--device D`, `--override K=V`, `--trace [N]`,
    /// a flag `--debug` and positional words, into a list of what it saw.
    fn read(text: &str) -> Result<Vec<String>, String> {
        let words = words(text);
        let mut options = Options::new(&words);
        let mut seen = Vec::new();
        while let Some(option) = options.next()? {
            seen.push(match option {
                "--smp" | "--device" | "--override" | "--output-format" | "--output" => {
                    format!("{option}:{}", options.value()?)
                }
                "--trace" => format!(
                    "--trace:{}",
                    options.optional_value(|w| !w.starts_with("--")).unwrap_or("default")
                ),
                "--debug" => "--debug".to_string(),
                other if !other.starts_with('-') => format!("positional:{other}"),
                other => return Err(format!("unknown option '{other}'")),
            });
        }
        Ok(seen)
    }

    #[test]
    fn key_value_and_key_space_value_are_the_same_option() {
        let spaced = read("--smp 4 --device nvme --output-format json --output out.json").unwrap();
        let joined = read("--smp=4 --device=nvme --output-format=json --output=out.json").unwrap();
        assert_eq!(spaced, joined);
        assert_eq!(
            joined,
            ["--smp:4", "--device:nvme", "--output-format:json", "--output:out.json"]
        );
    }

    #[test]
    fn the_value_is_everything_after_the_first_equals() {
        assert_eq!(
            read("--override=runtime=2s --override time_based=0").unwrap(),
            ["--override:runtime=2s", "--override:time_based=0"]
        );
        assert_eq!(read("--output=").unwrap(), ["--output:"], "an empty value is a value");
    }

    #[test]
    fn flags_positionals_and_optional_values() {
        assert_eq!(
            read("job.fio --debug a=b --trace --trace 8 --trace=16").unwrap(),
            [
                "positional:job.fio",
                "--debug",
                "positional:a=b",
                "--trace:default",
                "--trace:8",
                "--trace:16"
            ]
        );
    }

    #[test]
    fn mistakes_are_named() {
        assert_eq!(read("--smp").unwrap_err(), "--smp needs a value");
        assert_eq!(
            read("--debug=1").unwrap_err(),
            "--debug takes no value (got '--debug=1')"
        );
        assert_eq!(
            read("--debug=yes --smp 2").unwrap_err(),
            "--debug takes no value (got '--debug=yes')"
        );
        assert_eq!(read("--bogus=1").unwrap_err(), "unknown option '--bogus'");
    }
}
