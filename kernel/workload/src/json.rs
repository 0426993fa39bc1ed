//! A minimal streaming JSON writer over [`core::fmt::Write`], without allocation.
//!
//! The writer inserts commas itself; callers only open and close containers and write keys and
//! values. Nesting deeper than [`MAX_DEPTH`] is a caller bug and returns `fmt::Error`.

use core::fmt::{self, Write};

/// Deepest nesting of objects and arrays.
pub const MAX_DEPTH: usize = 16;

/// Writes one JSON value to `out`.
pub struct JsonWriter<'w, W: Write + ?Sized> {
    out: &'w mut W,
    /// For each open container: whether it already has an element (so the next needs a comma).
    has_element: [bool; MAX_DEPTH],
    depth: usize,
    /// Set after a key, so the value that follows gets no comma.
    after_key: bool,
}

impl<W: Write + ?Sized> fmt::Debug for JsonWriter<'_, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonWriter")
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl<'w, W: Write + ?Sized> JsonWriter<'w, W> {
    /// A writer producing one value into `out`.
    pub fn new(out: &'w mut W) -> Self {
        Self {
            out,
            has_element: [false; MAX_DEPTH],
            depth: 0,
            after_key: false,
        }
    }

    fn separate(&mut self) -> fmt::Result {
        if self.after_key {
            self.after_key = false;
            return Ok(());
        }
        if self.depth > 0 {
            let slot = &mut self.has_element[self.depth - 1];
            if *slot {
                self.out.write_char(',')?;
            }
            *slot = true;
        }
        Ok(())
    }

    fn open(&mut self, bracket: char) -> fmt::Result {
        self.separate()?;
        if self.depth == MAX_DEPTH {
            return Err(fmt::Error);
        }
        self.out.write_char(bracket)?;
        self.has_element[self.depth] = false;
        self.depth += 1;
        Ok(())
    }

    fn close(&mut self, bracket: char) -> fmt::Result {
        if self.depth == 0 {
            return Err(fmt::Error);
        }
        self.depth -= 1;
        self.out.write_char(bracket)
    }

    /// Opens an object.
    pub fn begin_object(&mut self) -> fmt::Result {
        self.open('{')
    }

    /// Closes the innermost object.
    pub fn end_object(&mut self) -> fmt::Result {
        self.close('}')
    }

    /// Opens an array.
    pub fn begin_array(&mut self) -> fmt::Result {
        self.open('[')
    }

    /// Closes the innermost array.
    pub fn end_array(&mut self) -> fmt::Result {
        self.close(']')
    }

    /// Writes an object key; the next call writes its value.
    pub fn key(&mut self, key: &str) -> fmt::Result {
        self.separate()?;
        write_escaped(self.out, key)?;
        self.out.write_char(':')?;
        self.after_key = true;
        Ok(())
    }

    /// Writes a string value.
    pub fn string(&mut self, value: &str) -> fmt::Result {
        self.separate()?;
        write_escaped(self.out, value)
    }

    /// Writes a string value produced by a `Display` implementation, escaped as it streams.
    pub fn display(&mut self, value: &dyn fmt::Display) -> fmt::Result {
        self.separate()?;
        self.out.write_char('"')?;
        write!(EscapingWriter { out: self.out }, "{value}")?;
        self.out.write_char('"')
    }

    /// Writes a floating-point figure with six places, as fio prints its doubles (`%f`); a value
    /// that is not finite, which fio would print as `nan` or `inf` (not JSON), is written as 0.
    pub fn float(&mut self, value: f64) -> fmt::Result {
        self.separate()?;
        let value = if value.is_finite() { value } else { 0.0 };
        write!(self.out, "{value:.6}")
    }

    /// Writes an unsigned integer.
    pub fn u64(&mut self, value: u64) -> fmt::Result {
        self.separate()?;
        write!(self.out, "{value}")
    }

    /// Writes `value` millionths as a decimal number with six places (`12.500000`), the way fio
    /// prints its floating-point figures, from integers.
    pub fn micros(&mut self, value: u128) -> fmt::Result {
        self.separate()?;
        write!(self.out, "{}.{:06}", value / 1_000_000, value % 1_000_000)
    }

    /// Writes `json`, which must be one complete JSON value, as it is.
    pub fn raw(&mut self, json: &str) -> fmt::Result {
        self.separate()?;
        self.out.write_str(json)
    }

    /// Writes a boolean.
    pub fn bool(&mut self, value: bool) -> fmt::Result {
        self.separate()?;
        self.out.write_str(if value { "true" } else { "false" })
    }

    /// Writes `null`.
    pub fn null(&mut self) -> fmt::Result {
        self.separate()?;
        self.out.write_str("null")
    }

    /// `key` then a string value.
    pub fn field_str(&mut self, key: &str, value: &str) -> fmt::Result {
        self.key(key)?;
        self.string(value)
    }

    /// `key` then an integer value.
    pub fn field_u64(&mut self, key: &str, value: u64) -> fmt::Result {
        self.key(key)?;
        self.u64(value)
    }

    /// `key` then a [`Self::micros`] value.
    pub fn field_micros(&mut self, key: &str, value: u128) -> fmt::Result {
        self.key(key)?;
        self.micros(value)
    }

    /// `key` then a boolean value.
    pub fn field_bool(&mut self, key: &str, value: bool) -> fmt::Result {
        self.key(key)?;
        self.bool(value)
    }
}

/// Escapes everything written through it as the inside of a JSON string.
struct EscapingWriter<'a, W: Write + ?Sized> {
    out: &'a mut W,
}

impl<W: Write + ?Sized> Write for EscapingWriter<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        escape_into(self.out, text)
    }
}

fn escape_into<W: Write + ?Sized>(out: &mut W, text: &str) -> fmt::Result {
    let mut clean_from = 0;
    for (index, ch) in text.char_indices() {
        let escape: Option<&str> = match ch {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => None,
            _ => continue,
        };
        out.write_str(&text[clean_from..index])?;
        match escape {
            Some(sequence) => out.write_str(sequence)?,
            None => write!(out, "\\u{:04x}", ch as u32)?,
        }
        clean_from = index + ch.len_utf8();
    }
    out.write_str(&text[clean_from..])
}

/// Writes `text` as a quoted JSON string.
pub fn write_escaped<W: Write + ?Sized>(out: &mut W, text: &str) -> fmt::Result {
    out.write_char('"')?;
    escape_into(out, text)?;
    out.write_char('"')
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    #[test]
    fn nested_containers_get_commas_in_the_right_places() {
        let mut text = String::new();
        let mut w = JsonWriter::new(&mut text);
        w.begin_object().unwrap();
        w.field_u64("a", 1).unwrap();
        w.key("list").unwrap();
        w.begin_array().unwrap();
        w.u64(1).unwrap();
        w.begin_object().unwrap();
        w.end_object().unwrap();
        w.begin_array().unwrap();
        w.end_array().unwrap();
        w.null().unwrap();
        w.end_array().unwrap();
        w.field_bool("ok", true).unwrap();
        w.field_str("s", "x").unwrap();
        w.end_object().unwrap();
        assert_eq!(text, r#"{"a":1,"list":[1,{},[],null],"ok":true,"s":"x"}"#);
    }

    #[test]
    fn strings_are_escaped() {
        let mut text = String::new();
        write_escaped(&mut text, "q\"b\\n\nr\rt\t\u{1}\u{7f}é→").unwrap();
        assert_eq!(text, "\"q\\\"b\\\\n\\nr\\rt\\t\\u0001\\u007fé→\"");
        let mut text = String::new();
        let mut w = JsonWriter::new(&mut text);
        w.display(&format_args!("a\"{}", 5)).unwrap();
        assert_eq!(text, "\"a\\\"5\"");
    }

    #[test]
    fn misuse_is_an_error_not_a_panic() {
        let mut text = String::new();
        let mut w = JsonWriter::new(&mut text);
        assert!(w.end_object().is_err());
        for _ in 0..MAX_DEPTH {
            w.begin_array().unwrap();
        }
        assert!(w.begin_array().is_err());
    }
}
