//! The `fio.server*` words of the kernel command line.
//!
//! | word | meaning |
//! |---|---|
//! | `fio.server=1` (or `on`; `0`/`off`) | after the network bring-up, serve fio's protocol instead of running boot jobs |
//! | `fio.server.port=N` | the TCP port (default 8765, fio's) |
//! | `fio.server.allow=CIDR,...` | client networks served (default: the box's own subnet); others are reset at connect |
//! | `fio.server.writable=DEV,...` | devices a client's job may write, trim or write-verify (default: none) |

use crate::Error;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

/// An IPv4 network: an address and a prefix length (0..=32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: [u8; 4],
    pub prefix: u8,
}

impl Cidr {
    /// `a.b.c.d/n`, or `a.b.c.d` for one address (`/32`).
    pub fn parse(text: &str) -> Option<Self> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, p.parse::<u8>().ok().filter(|p| *p <= 32)?),
            None => (text, 32),
        };
        let mut octets = [0u8; 4];
        let mut parts = addr.split('.');
        for octet in &mut octets {
            let part = parts.next()?;
            // No signs, no empty parts, no leading `+`: plain decimal octets only.
            if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *octet = part.parse().ok()?;
        }
        if parts.next().is_some() {
            return None;
        }
        Some(Self { addr: octets, prefix })
    }

    fn mask(self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }

    /// Whether `addr` lies in this network.
    pub fn contains(self, addr: [u8; 4]) -> bool {
        let mask = self.mask();
        u32::from_be_bytes(self.addr) & mask == u32::from_be_bytes(addr) & mask
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.addr;
        write!(f, "{a}.{b}.{c}.{d}/{}", self.prefix)
    }
}

/// What the `fio.server*` words asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub enabled: bool,
    pub port: u16,
    /// Client networks served; `None`: the box's own subnet.
    pub allow: Option<Vec<Cidr>>,
    /// Block device names (or aliases) a client's job may write to.
    pub writable: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            port: fioserver::DEFAULT_PORT,
            allow: None,
            writable: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Parses the `fio.server*` words among `words` (other words are ignored).
    pub fn parse<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<Self, Error> {
        let mut config = Self::default();
        let mut seen: Vec<&'static str> = Vec::new();
        let mut options_given: Option<&'static str> = None;
        for word in words {
            let (key, value) = word.split_once('=').unwrap_or((word, ""));
            if key != "fio.server" && !key.starts_with("fio.server.") {
                continue;
            }
            let key: &'static str = match key {
                "fio.server" => "fio.server",
                "fio.server.port" => "fio.server.port",
                "fio.server.allow" => "fio.server.allow",
                "fio.server.writable" => "fio.server.writable",
                _ => return Err(Error::UnknownWord { word: word.to_string() }),
            };
            if seen.contains(&key) {
                return Err(Error::Duplicate { key });
            }
            seen.push(key);
            let bad = |expected| Error::BadValue {
                key,
                value: value.to_string(),
                expected,
            };
            match key {
                "fio.server" => {
                    config.enabled = match value {
                        "1" | "on" => true,
                        "0" | "off" => false,
                        _ => return Err(bad("1, on, 0 or off")),
                    }
                }
                "fio.server.port" => {
                    options_given.get_or_insert(key);
                    config.port = value
                        .parse::<u16>()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| bad("a TCP port from 1 to 65535"))?;
                }
                "fio.server.allow" => {
                    options_given.get_or_insert(key);
                    let mut list = Vec::new();
                    for item in value.split(',') {
                        list.push(Cidr::parse(item).ok_or_else(|| {
                            bad("IPv4 networks a.b.c.d/n (or addresses) separated by commas, e.g. 10.0.2.0/24")
                        })?);
                    }
                    config.allow = Some(list);
                }
                _ => {
                    options_given.get_or_insert(key);
                    for name in value.split(',') {
                        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
                            return Err(bad("block device names separated by commas, e.g. nvme0n1,md0"));
                        }
                        config.writable.push(name.to_string());
                    }
                }
            }
        }
        if let Some(key) = options_given
            && !config.enabled
        {
            return Err(Error::OptionWithoutServer { key });
        }
        Ok(config)
    }

    /// Whether a client at `peer` is served, the box itself being on `own` (its address and
    /// subnet).
    pub fn allows(&self, own: Cidr, peer: [u8; 4]) -> bool {
        match &self.allow {
            Some(list) => list.iter().any(|c| c.contains(peer)),
            None => own.contains(peer),
        }
    }

    /// The allow-list as the console shows it.
    pub fn describe_allow(&self, own: Cidr) -> String {
        match &self.allow {
            Some(list) => list.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            None => {
                let network = Cidr {
                    addr: (u32::from_be_bytes(own.addr) & own.mask()).to_be_bytes(),
                    prefix: own.prefix,
                };
                alloc::format!("{network} (the box's subnet)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn parse(line: &str) -> Result<ServerConfig, Error> {
        ServerConfig::parse(line.split_whitespace())
    }

    #[test]
    fn defaults_are_off_port_8765_own_subnet_nothing_writable() {
        let c = parse("net.ip=10.0.0.2/24 log=info").unwrap();
        assert_eq!(c, ServerConfig::default());
        assert!(!c.enabled);
        assert_eq!(c.port, 8765);
        let on = parse("fio.server=1").unwrap();
        assert!(on.enabled && on.allow.is_none() && on.writable.is_empty());
    }

    #[test]
    fn every_word_parses() {
        let c = parse("fio.server=on fio.server.port=9000 fio.server.allow=10.0.2.0/24,192.168.7.9 fio.server.writable=nvme0n1,md0")
            .unwrap();
        assert!(c.enabled);
        assert_eq!(c.port, 9000);
        assert_eq!(
            c.allow,
            Some(vec![
                Cidr {
                    addr: [10, 0, 2, 0],
                    prefix: 24
                },
                Cidr {
                    addr: [192, 168, 7, 9],
                    prefix: 32
                }
            ])
        );
        assert_eq!(c.writable, vec!["nvme0n1".to_string(), "md0".to_string()]);
    }

    #[test]
    fn bad_words_are_refused_naming_them() {
        for (line, want) in [
            ("fio.server=yes", "fio.server=\"yes\": expected 1, on, 0 or off"),
            (
                "fio.server=1 fio.server.port=0",
                "fio.server.port=\"0\": expected a TCP port",
            ),
            ("fio.server=1 fio.server.port=65536", "fio.server.port=\"65536\""),
            (
                "fio.server=1 fio.server.allow=10.0.2.0/33",
                "fio.server.allow=\"10.0.2.0/33\"",
            ),
            ("fio.server=1 fio.server.allow=10.0.2/24", "expected IPv4 networks"),
            (
                "fio.server=1 fio.server.allow=10.0.2.0/24,",
                "fio.server.allow=\"10.0.2.0/24,\"",
            ),
            ("fio.server=1 fio.server.allow=10.0.2.256", "expected IPv4"),
            ("fio.server=1 fio.server.allow=+1.0.2.1", "expected IPv4"),
            (
                "fio.server=1 fio.server.writable=",
                "fio.server.writable=\"\": expected block device names",
            ),
            (
                "fio.server=1 fio.server.writable=md0,,nvme0n1",
                "expected block device names",
            ),
            (
                "fio.server=1 fio.server.bogus=1",
                "\"fio.server.bogus=1\": not a fio.server word",
            ),
            ("fio.server=1 fio.server=0", "fio.server given twice"),
            ("fio.server.port=9000", "fio.server.port without fio.server=1"),
            (
                "fio.server=0 fio.server.writable=md0",
                "fio.server.writable without fio.server=1",
            ),
        ] {
            let e = parse(line).expect_err(line).to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn allow_list_and_own_subnet() {
        let own = Cidr::parse("10.0.2.15/24").unwrap();
        let c = parse("fio.server=1").unwrap();
        assert!(c.allows(own, [10, 0, 2, 2]));
        assert!(!c.allows(own, [10, 0, 3, 2]));
        assert_eq!(c.describe_allow(own), "10.0.2.0/24 (the box's subnet)");
        let c = parse("fio.server=1 fio.server.allow=192.168.0.0/16,10.0.3.7").unwrap();
        assert!(!c.allows(own, [10, 0, 2, 2]), "the list replaces the own subnet");
        assert!(c.allows(own, [192, 168, 200, 1]));
        assert!(c.allows(own, [10, 0, 3, 7]));
        assert!(!c.allows(own, [10, 0, 3, 8]));
        assert_eq!(c.describe_allow(own), "192.168.0.0/16,10.0.3.7/32");
        let any = parse("fio.server=1 fio.server.allow=0.0.0.0/0").unwrap();
        assert!(any.allows(own, [8, 8, 8, 8]));
    }
}
