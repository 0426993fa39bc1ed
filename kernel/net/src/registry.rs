//! The table of network interfaces: each registered NIC gets the next `ethN` name.

use crate::Error;
use crate::config::InterfaceChoice;
use crate::nic::{Nic, PciLocation};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// One registered NIC.
pub struct Interface {
    /// `eth0`, `eth1`, ... in registration (probe) order.
    pub name: String,
    /// Where it sits, for a PCI NIC.
    pub pci: Option<PciLocation>,
    /// The driver's NIC.
    pub nic: Box<dyn Nic>,
}

impl Interface {
    fn matches(&self, choice: &InterfaceChoice) -> bool {
        match choice {
            InterfaceChoice::Pci(at) => self.pci == Some(*at),
            InterfaceChoice::Mac(mac) => self.nic.mac() == *mac,
            InterfaceChoice::Name(name) => self.name == *name,
        }
    }

    /// `eth0 52:54:00:12:34:56 (0000:00:03.0)`.
    pub fn describe(&self) -> String {
        match self.pci {
            Some(at) => format!("{} {} ({at})", self.name, self.nic.mac()),
            None => format!("{} {}", self.name, self.nic.mac()),
        }
    }
}

/// Every NIC the probes found.
#[derive(Default)]
pub struct Registry {
    interfaces: Vec<Interface>,
}

impl Registry {
    pub const fn new() -> Self {
        Self { interfaces: Vec::new() }
    }

    /// Adds a NIC; returns its name.
    pub fn add(&mut self, pci: Option<PciLocation>, nic: Box<dyn Nic>) -> String {
        let name = format!("eth{}", self.interfaces.len());
        self.interfaces.push(Interface {
            name: name.clone(),
            pci,
            nic,
        });
        name
    }

    pub fn len(&self) -> usize {
        self.interfaces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.interfaces.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Interface> {
        self.interfaces.iter()
    }

    /// The interface `choice` names, or the first one when there is no choice.
    pub fn choose(&mut self, choice: Option<&InterfaceChoice>) -> Result<&mut Interface, Error> {
        if self.interfaces.is_empty() {
            return Err(Error::NoInterface);
        }
        let Some(choice) = choice else {
            return Ok(&mut self.interfaces[0]);
        };
        match self.interfaces.iter().position(|i| i.matches(choice)) {
            Some(i) => Ok(&mut self.interfaces[i]),
            None => Err(Error::NoSuchInterface {
                wanted: match choice {
                    InterfaceChoice::Pci(at) => format!("{at}"),
                    InterfaceChoice::Mac(mac) => format!("{mac}"),
                    InterfaceChoice::Name(n) => n.clone(),
                },
                available: self
                    .interfaces
                    .iter()
                    .map(Interface::describe)
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NetConfig;
    use crate::fake::WirePair;
    use crate::nic::MacAddress;
    use alloc::string::ToString;

    #[test]
    fn interfaces_are_named_in_order_and_chosen_by_pci_mac_or_name() {
        let mut r = Registry::new();
        assert_eq!(r.choose(None).err(), Some(Error::NoInterface));
        let (a, b) = WirePair::new(MacAddress([2, 0, 0, 0, 0, 1]), MacAddress([2, 0, 0, 0, 0, 2]));
        let at = |device| PciLocation {
            segment: 0,
            bus: 0,
            device,
            function: 0,
        };
        assert_eq!(r.add(Some(at(3)), Box::new(a)), "eth0");
        assert_eq!(r.add(Some(at(4)), Box::new(b)), "eth1");
        assert_eq!(r.choose(None).unwrap().name, "eth0");
        let pick = |r: &mut Registry, w: &str| {
            let c = NetConfig::parse([w]).unwrap().interface.unwrap();
            r.choose(Some(&c)).map(|i| i.name.clone())
        };
        assert_eq!(pick(&mut r, "net.if=00:04.0").unwrap(), "eth1");
        assert_eq!(pick(&mut r, "net.if=02:00:00:00:00:01").unwrap(), "eth0");
        assert_eq!(pick(&mut r, "net.if=eth1").unwrap(), "eth1");
        let e = pick(&mut r, "net.if=00:05.0").unwrap_err().to_string();
        assert_eq!(
            e,
            "net.if=0000:00:05.0: no such interface (there are: eth0 02:00:00:00:00:01 (0000:00:03.0), eth1 02:00:00:00:00:02 (0000:00:04.0))"
        );
    }
}
