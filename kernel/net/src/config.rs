//! The `net.*` words of the kernel command line.
//!
//! | word | meaning |
//! |---|---|
//! | `net.dhcp=on\|off` | DHCPv4 (the default when no `net.ip=` is given) |
//! | `net.ip=A.B.C.D/N` | a static address with its prefix length (1-32); DHCP is then off |
//! | `net.gw=A.B.C.D` | the static default gateway (inside `net.ip`'s subnet); needs `net.ip=` |
//! | `net.if=BB:DD.F`, `SSSS:BB:DD.F`, `xx:xx:xx:xx:xx:xx` or `ethN` | the NIC to use when there are several |
//! | `net.cpu=N` | the CPU that polls the stack while the box serves (default: the boot CPU); it runs no job |

use crate::Error;
use crate::nic::{MacAddress, PciLocation};
use alloc::string::{String, ToString};
use smoltcp::wire::{Ipv4Address, Ipv4Cidr};

/// The keys, as an unknown-key error lists them.
pub const ACCEPTED_KEYS: &str = "net.dhcp=on|off, net.ip=A.B.C.D/N, net.gw=A.B.C.D, net.if=BB:DD.F|MAC|ethN, net.cpu=N";

/// Above any CPU index a box has (x2APIC ids are 32 bits; kernel indices are far fewer).
const MAX_CPU_INDEX: u32 = 1 << 16;

/// A static address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticAddress {
    pub cidr: Ipv4Cidr,
    pub gateway: Option<Ipv4Address>,
}

/// How the interface gets its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    Dhcp,
    Static(StaticAddress),
}

/// Which NIC `net.if=` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterfaceChoice {
    Pci(PciLocation),
    Mac(MacAddress),
    Name(String),
}

/// The parsed `net.*` words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfig {
    pub addressing: Addressing,
    /// `None`: the first interface.
    pub interface: Option<InterfaceChoice>,
    /// The CPU (kernel index) that polls the stack; `None`: the boot CPU. Whether it is online
    /// is for the kernel to check.
    pub cpu: Option<u32>,
    /// The words say how to address an interface (`net.dhcp`, `net.ip`, `net.gw` or `net.if`
    /// given): the boot brings it up even when nothing else uses the network.
    pub addressed: bool,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            addressing: Addressing::Dhcp,
            interface: None,
            cpu: None,
            addressed: false,
        }
    }
}

impl NetConfig {
    /// Parses every `net.*` word (possibly none), in any order. A word that is not `net.KEY=VALUE`
    /// with a known key, a key given twice, a bad value, or words that contradict each other
    /// (`net.ip=` with `net.dhcp=on`, `net.gw=` without `net.ip=`, a gateway outside the
    /// subnet, `net.dhcp=off` with no address) are errors that name the word.
    pub fn parse<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<Self, Error> {
        let mut dhcp: Option<bool> = None;
        let mut ip: Option<Ipv4Cidr> = None;
        let mut gw: Option<Ipv4Address> = None;
        let mut interface: Option<InterfaceChoice> = None;
        let mut cpu: Option<u32> = None;
        for word in words {
            let unknown = || Error::UnknownKey { word: word.to_string() };
            let (key, value) = word.split_once('=').ok_or_else(unknown)?;
            let bad = |expected| Error::BadValue {
                word: word.to_string(),
                expected,
            };
            match key {
                "net.dhcp" => {
                    once(&dhcp, "net.dhcp")?;
                    dhcp = Some(match value {
                        "on" | "1" => true,
                        "off" | "0" => false,
                        _ => return Err(bad("on or off")),
                    });
                }
                "net.ip" => {
                    once(&ip, "net.ip")?;
                    ip = Some(parse_cidr(value).ok_or_else(|| {
                        bad("an IPv4 address with its prefix length, A.B.C.D/N with N from 1 to 32, not the subnet's own or broadcast address")
                    })?);
                }
                "net.gw" => {
                    once(&gw, "net.gw")?;
                    gw = Some(
                        parse_ipv4(value)
                            .filter(|a| !a.is_unspecified() && !a.is_broadcast() && !a.is_multicast())
                            .ok_or_else(|| bad("an IPv4 unicast address A.B.C.D"))?,
                    );
                }
                "net.if" => {
                    once(&interface, "net.if")?;
                    interface = Some(
                        parse_choice(value)
                            .ok_or_else(|| bad("a PCI address BB:DD.F (or SSSS:BB:DD.F), a MAC address xx:xx:xx:xx:xx:xx, or an interface name ethN"))?,
                    );
                }
                "net.cpu" => {
                    once(&cpu, "net.cpu")?;
                    cpu = Some(
                        value
                            .parse()
                            .ok()
                            .filter(|c| *c < MAX_CPU_INDEX)
                            .ok_or_else(|| bad("a CPU index, a decimal number from 0"))?,
                    );
                }
                _ => return Err(unknown()),
            }
        }
        let addressing = match (dhcp, ip) {
            (Some(true), Some(_)) => {
                return Err(Error::Conflict {
                    why: "net.ip= is a static address: it cannot be used with net.dhcp=on",
                });
            }
            (Some(false), None) => {
                return Err(Error::Conflict {
                    why: "net.dhcp=off needs a static address: net.ip=A.B.C.D/N (and net.gw=A.B.C.D)",
                });
            }
            (_, Some(cidr)) => {
                if let Some(g) = gw
                    && (!cidr.contains_addr(&g) || g == cidr.address())
                {
                    return Err(Error::Conflict {
                        why: "net.gw= must be another address inside net.ip='s subnet",
                    });
                }
                Addressing::Static(StaticAddress { cidr, gateway: gw })
            }
            (_, None) => {
                if gw.is_some() {
                    return Err(Error::Conflict {
                        why: "net.gw= needs a static address net.ip=A.B.C.D/N (DHCP brings its own gateway)",
                    });
                }
                Addressing::Dhcp
            }
        };
        Ok(Self {
            addressed: dhcp.is_some() || ip.is_some() || gw.is_some() || interface.is_some(),
            addressing,
            interface,
            cpu,
        })
    }
}

fn once<T>(slot: &Option<T>, key: &'static str) -> Result<(), Error> {
    match slot {
        Some(_) => Err(Error::DuplicateKey { key }),
        None => Ok(()),
    }
}

/// Dotted quad, four decimal octets without leading `+` or spaces.
fn parse_ipv4(text: &str) -> Option<Ipv4Address> {
    let mut octets = [0u8; 4];
    let mut parts = text.split('.');
    for o in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *o = part.parse().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(Ipv4Address::from(octets))
}

/// `A.B.C.D/N`: a unicast host address (not the subnet's network or broadcast address when the
/// subnet has them, i.e. N <= 30).
fn parse_cidr(text: &str) -> Option<Ipv4Cidr> {
    let (addr, prefix) = text.split_once('/')?;
    let addr = parse_ipv4(addr)?;
    if prefix.is_empty() || prefix.len() > 2 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u8 = prefix.parse().ok()?;
    if !(1..=32).contains(&prefix) || addr.is_unspecified() || addr.is_multicast() || addr.is_broadcast() {
        return None;
    }
    let cidr = Ipv4Cidr::new(addr, prefix);
    if prefix <= 30 && (Some(addr) == cidr.broadcast() || addr == cidr.network().address()) {
        return None;
    }
    Some(cidr)
}

fn hex_u8(text: &str, max: u8) -> Option<u8> {
    if text.is_empty() || text.len() > 2 {
        return None;
    }
    u8::from_str_radix(text, 16).ok().filter(|v| *v <= max)
}

fn parse_choice(text: &str) -> Option<InterfaceChoice> {
    if let Some(n) = text.strip_prefix("eth") {
        return (!n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()))
            .then(|| InterfaceChoice::Name(text.to_string()));
    }
    let parts: alloc::vec::Vec<&str> = text.split(':').collect();
    if parts.len() == 6 {
        let mut mac = [0u8; 6];
        for (m, p) in mac.iter_mut().zip(&parts) {
            if p.len() != 2 {
                return None;
            }
            *m = hex_u8(p, 0xff)?;
        }
        return Some(InterfaceChoice::Mac(MacAddress(mac)));
    }
    let (segment, bus, devfn) = match parts.as_slice() {
        [bus, devfn] => (0, *bus, *devfn),
        [segment, bus, devfn] if segment.len() == 4 => (u16::from_str_radix(segment, 16).ok()?, *bus, *devfn),
        _ => return None,
    };
    let (device, function) = devfn.split_once('.')?;
    if function.len() != 1 {
        return None;
    }
    Some(InterfaceChoice::Pci(PciLocation {
        segment,
        bus: hex_u8(bus, 0xff)?,
        device: hex_u8(device, 0x1f)?,
        function: function.parse().ok().filter(|f| *f <= 7)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn parse(line: &str) -> Result<NetConfig, Error> {
        NetConfig::parse(line.split_whitespace())
    }

    fn message(line: &str) -> String {
        parse(line).unwrap_err().to_string()
    }

    #[test]
    fn addressing_words_ask_for_the_interface_at_boot() {
        assert!(!parse("").unwrap().addressed);
        assert!(!parse("net.cpu=1").unwrap().addressed, "net.cpu places the poller only");
        for words in ["net.dhcp=on", "net.ip=10.1.2.3/24", "net.if=eth1"] {
            assert!(parse(words).unwrap().addressed, "{words}");
        }
    }

    #[test]
    fn the_polling_cpu_is_a_cpu_index_given_once() {
        assert_eq!(parse("").unwrap().cpu, None);
        assert_eq!(parse("net.cpu=3").unwrap().cpu, Some(3));
        assert_eq!(parse("net.ip=10.1.2.3/24 net.cpu=0").unwrap().cpu, Some(0));
        for bad in ["net.cpu=", "net.cpu=-1", "net.cpu=x", "net.cpu=1.5", "net.cpu=65536"] {
            assert!(message(bad).contains("a CPU index"), "{bad}: {}", message(bad));
        }
        assert!(message("net.cpu=1 net.cpu=2").contains("net.cpu"));
    }

    #[test]
    fn no_words_is_dhcp_on_the_first_interface() {
        assert_eq!(parse("").unwrap(), NetConfig::default());
        assert_eq!(parse("net.dhcp=on").unwrap().addressing, Addressing::Dhcp);
    }

    #[test]
    fn static_address_and_gateway() {
        let c = parse("net.ip=10.1.2.3/24 net.gw=10.1.2.1").unwrap();
        assert_eq!(
            c.addressing,
            Addressing::Static(StaticAddress {
                cidr: Ipv4Cidr::new(Ipv4Address::new(10, 1, 2, 3), 24),
                gateway: Some(Ipv4Address::new(10, 1, 2, 1)),
            })
        );
        let c = parse("net.dhcp=off net.ip=10.0.2.15/24").unwrap();
        assert!(matches!(
            c.addressing,
            Addressing::Static(StaticAddress { gateway: None, .. })
        ));
        // A /31 or /32 has no network or broadcast address of its own.
        assert!(parse("net.ip=10.0.0.0/31").is_ok());
        assert!(parse("net.ip=10.0.0.7/32").is_ok());
    }

    #[test]
    fn bad_addresses_are_refused_naming_the_word() {
        for word in [
            "net.ip=10.0.2.15",
            "net.ip=10.0.2.15/33",
            "net.ip=10.0.2.15/0",
            "net.ip=10.0.2/24",
            "net.ip=10.0.2.256/24",
            "net.ip=10.0.2.15.1/24",
            "net.ip=a.b.c.d/24",
            "net.ip=10.0.2.0/24",
            "net.ip=10.0.2.255/24",
            "net.ip=0.0.0.0/8",
            "net.ip=224.0.0.1/4",
            "net.ip=+1.0.2.15/24",
            "net.ip=/24",
            "net.ip=",
        ] {
            let m = message(word);
            assert!(m.starts_with(word) && m.contains("A.B.C.D/N"), "{word}: {m}");
        }
        let m = message("net.ip=10.0.2.15/24 net.gw=10.0.2");
        assert!(m.contains("net.gw=10.0.2: expected an IPv4 unicast address"), "{m}");
        assert!(message("net.gw=255.255.255.255 net.ip=10.0.2.15/24").contains("unicast"));
    }

    #[test]
    fn contradictions_are_refused() {
        assert!(message("net.ip=10.0.2.15/24 net.dhcp=on").contains("cannot be used with net.dhcp=on"));
        assert!(message("net.dhcp=off").contains("net.dhcp=off needs a static address"));
        assert!(message("net.gw=10.0.2.2").contains("net.gw= needs a static address"));
        assert!(message("net.ip=10.0.2.15/24 net.gw=10.0.3.2").contains("inside net.ip='s subnet"));
        assert!(message("net.ip=10.0.2.15/24 net.gw=10.0.2.15").contains("another address"));
    }

    #[test]
    fn unknown_duplicate_and_malformed_words() {
        let m = message("net.mtu=9000");
        assert!(
            m.starts_with("net.mtu=9000: unknown network key") && m.contains("net.gw="),
            "{m}"
        );
        assert!(message("net.ip").contains("unknown network key"));
        assert_eq!(message("net.dhcp=on net.dhcp=on"), "net.dhcp given twice");
        assert!(message("net.dhcp=yes").contains("net.dhcp=yes: expected on or off"));
    }

    #[test]
    fn interface_choices() {
        let pick = |w: &str| parse(w).unwrap().interface.unwrap();
        assert_eq!(
            pick("net.if=00:03.0"),
            InterfaceChoice::Pci(PciLocation {
                segment: 0,
                bus: 0,
                device: 3,
                function: 0
            })
        );
        assert_eq!(
            pick("net.if=0001:2a:1f.7"),
            InterfaceChoice::Pci(PciLocation {
                segment: 1,
                bus: 0x2a,
                device: 0x1f,
                function: 7
            })
        );
        assert_eq!(
            pick("net.if=52:54:00:12:34:56"),
            InterfaceChoice::Mac(MacAddress([0x52, 0x54, 0, 0x12, 0x34, 0x56]))
        );
        assert_eq!(pick("net.if=eth1"), InterfaceChoice::Name("eth1".into()));
        for bad in [
            "net.if=00:20.0",
            "net.if=00:03.8",
            "net.if=52:54:00:12:34",
            "net.if=52:54:00:12:34:5g",
            "net.if=eth",
            "net.if=wlan0",
            "net.if=",
        ] {
            assert!(message(bad).contains("expected a PCI address"), "{bad}");
        }
        let all = vec!["net.if=eth0", "net.dhcp=on"];
        assert!(NetConfig::parse(all).is_ok());
    }
}
