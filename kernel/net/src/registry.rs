//! The table of network interfaces: each registered NIC gets the next `ethN` name.

use crate::Error;
use crate::config::InterfaceChoice;
use crate::nic::{MacAddress, Nic, PciLocation};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// Brings a NIC found at probe time up (rings, receiver, transmitter) the first time the network
/// is used: a boot that never uses it pays only for finding it.
pub type BringUp = Box<dyn FnOnce() -> Result<Box<dyn Nic>, String> + Send>;

enum State {
    Up(Box<dyn Nic>),
    Pending(BringUp),
    /// The bring-up failed; why, for every later use.
    Failed(String),
}

/// One registered NIC.
pub struct Interface {
    /// `eth0`, `eth1`, ... in registration (probe) order.
    pub name: String,
    /// Where it sits, for a PCI NIC.
    pub pci: Option<PciLocation>,
    mac: MacAddress,
    state: State,
}

impl Interface {
    fn matches(&self, choice: &InterfaceChoice) -> bool {
        match choice {
            InterfaceChoice::Pci(at) => self.pci == Some(*at),
            InterfaceChoice::Mac(mac) => self.mac == *mac,
            InterfaceChoice::Name(name) => self.name == *name,
        }
    }

    /// `eth0 52:54:00:12:34:56 (0000:00:03.0)`.
    pub fn describe(&self) -> String {
        match self.pci {
            Some(at) => format!("{} {} ({at})", self.name, self.mac),
            None => format!("{} {}", self.name, self.mac),
        }
    }

    /// The address the NIC reported when it was found.
    pub fn mac(&self) -> MacAddress {
        self.mac
    }

    /// Whether the NIC has been brought up.
    pub fn is_up(&self) -> bool {
        matches!(self.state, State::Up(_))
    }

    /// The NIC, brought up first if it was registered pending. A failed bring-up is an
    /// [`Error::Device`] now and on every later call (the device is not tried twice).
    pub fn nic(&mut self) -> Result<&mut dyn Nic, Error> {
        self.state = match core::mem::replace(&mut self.state, State::Failed(String::new())) {
            State::Pending(bring_up) => match bring_up() {
                Ok(nic) if nic.mac() == self.mac => State::Up(nic),
                Ok(nic) => State::Failed(format!(
                    "{}: brought up with address {}, found with {}",
                    self.name,
                    nic.mac(),
                    self.mac
                )),
                Err(why) => State::Failed(format!("{}: bring-up failed: {why}", self.name)),
            },
            settled => settled,
        };
        match &mut self.state {
            State::Up(nic) => Ok(&mut **nic),
            State::Failed(why) => Err(Error::Device(why.clone())),
            State::Pending(_) => unreachable!("a pending NIC is brought up above"),
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

    /// Adds a NIC that is up; returns its name.
    pub fn add(&mut self, pci: Option<PciLocation>, nic: Box<dyn Nic>) -> String {
        let mac = nic.mac();
        self.push(pci, mac, State::Up(nic))
    }

    /// Adds a NIC found with address `mac` and not brought up: `bring_up` runs the first time
    /// [`Interface::nic`] is asked for it. Returns its name.
    pub fn add_pending(&mut self, pci: Option<PciLocation>, mac: MacAddress, bring_up: BringUp) -> String {
        self.push(pci, mac, State::Pending(bring_up))
    }

    fn push(&mut self, pci: Option<PciLocation>, mac: MacAddress, state: State) -> String {
        let name = format!("eth{}", self.interfaces.len());
        self.interfaces.push(Interface {
            name: name.clone(),
            pci,
            mac,
            state,
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

    #[test]
    fn a_pending_nic_is_brought_up_once_on_first_use_and_a_failure_stays() {
        use core::sync::atomic::{AtomicU32, Ordering};
        static STARTS: AtomicU32 = AtomicU32::new(0);
        let mut r = Registry::new();
        let (a, _b) = WirePair::new(MacAddress([2, 0, 0, 0, 0, 1]), MacAddress([2, 0, 0, 0, 0, 2]));
        let name = r.add_pending(
            None,
            MacAddress([2, 0, 0, 0, 0, 1]),
            Box::new(move || {
                STARTS.fetch_add(1, Ordering::Relaxed);
                Ok(Box::new(a) as Box<dyn Nic>)
            }),
        );
        assert_eq!(name, "eth0");
        let i = r.choose(None).unwrap();
        assert!(!i.is_up());
        assert_eq!(
            STARTS.load(Ordering::Relaxed),
            0,
            "choosing or naming a NIC does not bring it up"
        );
        assert_eq!(i.describe(), "eth0 02:00:00:00:00:01");
        assert_eq!(i.nic().unwrap().mac(), MacAddress([2, 0, 0, 0, 0, 1]));
        assert!(i.is_up());
        i.nic().unwrap();
        assert_eq!(STARTS.load(Ordering::Relaxed), 1);

        r.add_pending(
            None,
            MacAddress([2, 0, 0, 0, 0, 3]),
            Box::new(|| Err("ring memory".to_string())),
        );
        let c = NetConfig::parse(["net.if=eth1"]).unwrap().interface.unwrap();
        let i = r.choose(Some(&c)).unwrap();
        let e = i.nic().err().unwrap().to_string();
        assert!(e.contains("eth1: bring-up failed: ring memory"), "{e}");
        assert_eq!(i.nic().err().unwrap().to_string(), e, "not tried twice");
        assert!(!i.is_up());

        let (c2, _d) = WirePair::new(MacAddress([2, 0, 0, 0, 0, 9]), MacAddress([2, 0, 0, 0, 0, 8]));
        r.add_pending(
            None,
            MacAddress([2, 0, 0, 0, 0, 4]),
            Box::new(move || Ok(Box::new(c2) as Box<dyn Nic>)),
        );
        let c = NetConfig::parse(["net.if=02:00:00:00:00:04"])
            .unwrap()
            .interface
            .unwrap();
        let e = r.choose(Some(&c)).unwrap().nic().err().unwrap().to_string();
        assert!(
            e.contains("brought up with address 02:00:00:00:00:09, found with 02:00:00:00:00:04"),
            "{e}"
        );
    }
}
