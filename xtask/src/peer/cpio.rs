//! A writer of cpio "newc" archives (the format Linux unpacks as an initramfs): directories,
//! regular files, symbolic links and character devices, owned by root, with time 0 so that the
//! same inputs give the same bytes. Device nodes are plain header fields here, so building an
//! initramfs needs neither root nor the `cpio` program.

/// Mode bits of the entry kinds.
pub const DIR: u32 = 0o040_000;
pub const FILE: u32 = 0o100_000;
pub const SYMLINK: u32 = 0o120_000;
pub const CHAR_DEV: u32 = 0o020_000;

/// The name of the entry that ends an archive.
const TRAILER: &str = "TRAILER!!!";

/// An archive being written; [`Archive::finish`] adds the trailer and returns the bytes.
#[derive(Debug, Default)]
pub struct Archive {
    bytes: Vec<u8>,
    next_inode: u32,
}

impl Archive {
    pub fn new() -> Archive {
        Archive::with_first_inode(1)
    }

    /// An archive whose inode numbers start at `inode`: one appended to another archive keeps
    /// clear of its numbers.
    pub fn with_first_inode(inode: u32) -> Archive {
        Archive {
            bytes: Vec::new(),
            next_inode: inode,
        }
    }

    /// A member of any kind, `mode` with its kind bits (such as `0o100_644`).
    pub fn member(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.entry(name, mode, data, (0, 0));
    }

    /// A directory (`perm` such as 0o755).
    pub fn dir(&mut self, name: &str, perm: u32) {
        self.entry(name, DIR | perm, &[], (0, 0));
    }

    /// A regular file.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, FILE | perm, data, (0, 0));
    }

    /// A symbolic link to `target`.
    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, SYMLINK | 0o777, target.as_bytes(), (0, 0));
    }

    /// A character device node `major:minor`.
    pub fn char_dev(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, CHAR_DEV | perm, &[], (major, minor));
    }

    /// The archive with its trailer, padded to 4 bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.write(TRAILER, 0, &[], (0, 0), 0);
        self.bytes
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        let inode = self.next_inode;
        self.next_inode += 1;
        self.write(name, mode, data, rdev, inode);
    }

    fn write(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32), inode: u32) {
        let nlink = if mode & 0o170_000 == DIR { 2 } else { 1 };
        // magic, then 13 fields of 8 hex digits: ino mode uid gid nlink mtime filesize devmajor
        // devminor rdevmajor rdevminor namesize check.
        let fields = [
            inode,
            mode,
            0,
            0,
            nlink,
            0,
            u32::try_from(data.len()).expect("a cpio member is under 4 GiB"),
            0,
            0,
            rdev.0,
            rdev.1,
            u32::try_from(name.len() + 1).expect("a short name"),
            0,
        ];
        self.bytes.extend_from_slice(b"070701");
        for f in fields {
            self.bytes.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }
}

/// One member read back by [`parse`]: name, mode, data, (rdev major, minor).
#[cfg(test)]
pub type Member = (String, u32, Vec<u8>, (u32, u32));

/// Reads an uncompressed newc archive back (tests only): every member before the trailer.
#[cfg(test)]
pub fn parse(mut bytes: &[u8]) -> Result<Vec<Member>, String> {
    let mut out = Vec::new();
    let align = |n: usize| n.div_ceil(4) * 4;
    loop {
        if bytes.len() < 110 || &bytes[..6] != b"070701" {
            return Err("not a newc header".into());
        }
        let field =
            |i: usize| u32::from_str_radix(std::str::from_utf8(&bytes[6 + 8 * i..14 + 8 * i]).unwrap(), 16).unwrap();
        let (mode, size, rdev, namesize) = (field(1), field(6) as usize, (field(9), field(10)), field(11) as usize);
        let name = std::str::from_utf8(&bytes[110..110 + namesize - 1])
            .map_err(|e| e.to_string())?
            .to_string();
        let data_at = align(110 + namesize);
        let data = bytes[data_at..data_at + size].to_vec();
        bytes = &bytes[align(data_at + size)..];
        if name == TRAILER {
            return Ok(out);
        }
        out.push((name, mode, data, rdev));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_names_and_data_are_padded_to_four_bytes() {
        let mut a = Archive::new();
        a.file("init", 0o755, b"#!/bin/sh\n");
        let bytes = a.finish();
        assert!(bytes.starts_with(b"070701"));
        let field =
            |n: usize| u32::from_str_radix(std::str::from_utf8(&bytes[6 + 8 * n..14 + 8 * n]).unwrap(), 16).unwrap();
        assert_eq!(field(0), 1, "inode");
        assert_eq!(field(1), 0o100_755, "mode");
        assert_eq!(field(4), 1, "nlink");
        assert_eq!(field(5), 0, "mtime: reproducible");
        assert_eq!(field(6), 10, "file size");
        assert_eq!(field(11), 5, "name size with its NUL");
        assert_eq!(&bytes[110..115], b"init\0");
        // 110 + 5 = 115, padded to 116, then the data.
        assert_eq!(&bytes[116..126], b"#!/bin/sh\n");
        assert_eq!(bytes.len() % 4, 0);
        assert!(bytes.windows(10).any(|w| w == b"TRAILER!!!"));
    }

    #[test]
    fn every_kind_reads_back() {
        let mut a = Archive::new();
        a.dir("dev", 0o755);
        a.char_dev("dev/console", 0o600, 5, 1);
        a.symlink("bin/sh", "busybox");
        a.file("bin/busybox", 0o755, &[1, 2, 3]);
        let members = parse(&a.finish()).unwrap();
        assert_eq!(
            members,
            vec![
                ("dev".into(), DIR | 0o755, vec![], (0, 0)),
                ("dev/console".into(), CHAR_DEV | 0o600, vec![], (5, 1)),
                ("bin/sh".into(), SYMLINK | 0o777, b"busybox".to_vec(), (0, 0)),
                ("bin/busybox".into(), FILE | 0o755, vec![1, 2, 3], (0, 0)),
            ]
        );
    }

    #[test]
    fn the_same_members_give_the_same_bytes() {
        let build = || {
            let mut a = Archive::new();
            a.dir("tmp", 0o1777);
            a.file("x", 0o644, b"abc");
            a.finish()
        };
        assert_eq!(build(), build());
    }
}
