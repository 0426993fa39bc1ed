//! A fake Intel NIC for host tests: the registers the driver touches (reset, EEPROM reads,
//! receive address, link, queue enables) and both legacy descriptor rings, read and written
//! through [`devhal::fake::FakeMemory`] as the device would, with switches for the mistakes a
//! broken device makes.

use crate::regs::{Family, ctrl, desc, eerd, rctl, reg, tctl};
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use devhal::fake::FakeMemory;
use spin::Mutex;

/// A mistake the fake makes on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mistake {
    /// CTRL.RST never clears.
    StuckReset,
    /// The EEPROM read never finishes.
    StuckEeprom,
    /// The next receive descriptor claims this length.
    ReceiveLength(u16),
    /// The next received frame's descriptor lacks EOP (and nothing follows it in that frame).
    MissingEop,
    /// The next received frame carries these error bits.
    ReceiveErrors(u8),
    /// RDH reads this value from now on.
    ReceiveHead(u32),
    /// TDH reads this value from now on.
    TransmitHead(u32),
    /// The queue-enable bits of the 82576/I350 never stick.
    QueueEnableIgnored,
    /// Every register reads all ones (the device fell off the bus).
    Gone,
}

struct State {
    family: Family,
    regs: BTreeMap<u32, u32>,
    /// The address the device loads into RAL/RAH at reset, or only keeps in its EEPROM.
    mac: [u8; 6],
    mac_in_eeprom_only: bool,
    link_connected: bool,
    mistake: Option<Mistake>,
    /// Frames transmitted, with the command byte of their descriptor.
    sent: Vec<(u8, Vec<u8>)>,
    resets: u32,
    tail_writes: [u32; 2],
}

/// The fake device; clones share it.
#[derive(Clone)]
pub struct FakeE1000 {
    memory: Arc<FakeMemory>,
    state: Arc<Mutex<State>>,
}

impl FakeE1000 {
    /// A device of `family` whose RAL/RAH hold `mac` after reset.
    pub fn new(memory: Arc<FakeMemory>, family: Family, mac: [u8; 6]) -> Self {
        let fake = Self {
            memory,
            state: Arc::new(Mutex::new(State {
                family,
                regs: BTreeMap::new(),
                mac,
                mac_in_eeprom_only: false,
                link_connected: true,
                mistake: None,
                sent: Vec::new(),
                resets: 0,
                tail_writes: [0; 2],
            })),
        };
        Self::power_on(&mut fake.state.lock());
        fake
    }

    /// An 82540EM whose RAL/RAH read zero: the address is only in the EEPROM.
    pub fn mac_in_eeprom_only(memory: Arc<FakeMemory>, mac: [u8; 6]) -> Self {
        let fake = Self::new(memory, Family::E82540, mac);
        {
            let mut s = fake.state.lock();
            s.mac_in_eeprom_only = true;
            Self::power_on(&mut s);
        }
        fake
    }

    pub fn set_mistake(&self, m: Mistake) {
        self.state.lock().mistake = Some(m);
    }

    pub fn set_link(&self, connected: bool) {
        let mut s = self.state.lock();
        s.link_connected = connected;
        Self::update_link(&mut s);
    }

    /// The value the driver last left in a register.
    pub fn register(&self, offset: u32) -> u32 {
        self.state.lock().regs.get(&offset).copied().unwrap_or(0)
    }

    pub fn resets(&self) -> u32 {
        self.state.lock().resets
    }

    /// Tail writes so far (receive, transmit).
    pub fn tail_writes(&self) -> [u32; 2] {
        self.state.lock().tail_writes
    }

    /// Frames transmitted so far, taken.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        self.state.lock().sent.drain(..).map(|(_, f)| f).collect()
    }

    /// Command bytes of the transmit descriptors seen so far.
    pub fn sent_commands(&self) -> Vec<u8> {
        self.state.lock().sent.iter().map(|(c, _)| *c).collect()
    }

    /// Receives `frame` into the next descriptor the driver gave the device (one descriptor,
    /// EOP set); false when the receiver is off or the device owns no descriptor.
    pub fn deliver(&self, frame: &[u8]) -> bool {
        self.deliver_in_pieces(frame, crate::BUFFER_LEN)
    }

    /// Receives `frame` split over descriptors of `piece` bytes, EOP on the last only (what the
    /// device does with a frame longer than one buffer); false, with nothing written, when the
    /// receiver is off or too few descriptors are free.
    pub fn deliver_in_pieces(&self, frame: &[u8], piece: usize) -> bool {
        let mut s = self.state.lock();
        let r = |s: &State, o: u32| s.regs.get(&o).copied().unwrap_or(0);
        if r(&s, reg::RCTL) & rctl::EN == 0 || s.mistake == Some(Mistake::Gone) {
            return false;
        }
        if s.family == Family::Igb && r(&s, reg::RXDCTL) & reg::QUEUE_ENABLE == 0 {
            return false;
        }
        let ring_len = r(&s, reg::RDLEN) / desc::LEN as u32;
        let base = u64::from(r(&s, reg::RDBAH)) << 32 | u64::from(r(&s, reg::RDBAL));
        let pieces: Vec<&[u8]> = if frame.is_empty() {
            vec![frame]
        } else {
            frame.chunks(piece).collect()
        };
        let mut head = r(&s, reg::RDH);
        let tail = r(&s, reg::RDT);
        let free = if tail >= head {
            tail - head
        } else {
            ring_len - head + tail
        };
        if ring_len == 0 || (free as usize) < pieces.len() {
            return false;
        }
        let buffer_len = match s.family {
            Family::Igb => (r(&s, reg::SRRCTL) & 0x7f) as usize * 1024,
            _ => {
                let c = r(&s, reg::RCTL);
                assert_eq!(
                    c & (rctl::BSIZE_MASK | rctl::BSEX),
                    0,
                    "the fake only models 2048-byte buffers"
                );
                2048
            }
        };
        let mistake = s.mistake.take_if(|m| {
            matches!(
                m,
                Mistake::ReceiveLength(_) | Mistake::MissingEop | Mistake::ReceiveErrors(_)
            )
        });
        let count = pieces.len();
        for (n, bytes) in pieces.into_iter().enumerate() {
            let d = base + u64::from(head) * desc::LEN as u64;
            let addr = self.memory.read_u64("rx desc addr", d).unwrap_or(0);
            assert!(
                bytes.len() <= buffer_len,
                "the fake was handed a {buffer_len}-byte receive buffer"
            );
            self.memory.write("rx buffer", addr, bytes);
            let mut len = bytes.len() as u16;
            let mut status = desc::DD;
            let mut errors = 0;
            if n + 1 == count {
                status |= desc::EOP;
                match mistake {
                    Some(Mistake::ReceiveLength(l)) => len = l,
                    Some(Mistake::MissingEop) => status &= !desc::EOP,
                    Some(Mistake::ReceiveErrors(e)) => errors = e,
                    _ => {}
                }
            }
            self.memory
                .write("rx desc length", d + desc::LENGTH as u64, &len.to_le_bytes());
            self.memory
                .write("rx desc errors", d + desc::RX_ERRORS as u64, &[errors]);
            self.memory
                .write("rx desc status", d + desc::RX_STATUS as u64, &[status]);
            head = (head + 1) % ring_len;
        }
        s.regs.insert(reg::RDH, head);
        true
    }

    fn power_on(s: &mut State) {
        s.regs.clear();
        // Reset masks every interrupt; the link comes up once the driver sets SLU.
        if !s.mac_in_eeprom_only {
            let m = s.mac;
            s.regs.insert(reg::RAL0, u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
            s.regs
                .insert(reg::RAH0, u32::from(u16::from_le_bytes([m[4], m[5]])) | reg::RAH_AV);
        }
        s.regs.insert(reg::CTRL, ctrl::LRST);
        if s.family == Family::Igb {
            s.regs.insert(reg::SRRCTL, reg::SRRCTL_BSIZE_2K);
        }
    }

    fn update_link(s: &mut State) {
        let up = s.link_connected && s.regs.get(&reg::CTRL).is_some_and(|c| c & ctrl::SLU != 0);
        let st = s.regs.entry(reg::STATUS).or_insert(0);
        *st = if up {
            *st | reg::STATUS_LU
        } else {
            *st & !reg::STATUS_LU
        };
    }

    /// Sends every frame between TDH and TDT, writing DD back into each descriptor.
    fn transmit(&self, s: &mut State) {
        let r = |s: &State, o: u32| s.regs.get(&o).copied().unwrap_or(0);
        if r(s, reg::TCTL) & tctl::EN == 0 {
            return;
        }
        if s.family == Family::Igb && r(s, reg::TXDCTL) & reg::QUEUE_ENABLE == 0 {
            return;
        }
        let ring_len = r(s, reg::TDLEN) / desc::LEN as u32;
        let base = u64::from(r(s, reg::TDBAH)) << 32 | u64::from(r(s, reg::TDBAL));
        let tail = r(s, reg::TDT);
        let mut head = r(s, reg::TDH);
        assert!(tail < ring_len, "TDT {tail} outside the {ring_len}-descriptor ring");
        while head != tail {
            let d = base + u64::from(head) * desc::LEN as u64;
            let addr = self.memory.read_u64("tx desc addr", d).unwrap_or(0);
            let mut b = [0u8; 4];
            self.memory.read("tx desc", d + desc::LENGTH as u64, &mut b);
            let len = usize::from(u16::from_le_bytes([b[0], b[1]]));
            let cmd = b[3];
            let mut bytes = vec![0u8; len];
            self.memory.read("tx buffer", addr, &mut bytes);
            s.sent.push((cmd, bytes));
            if cmd & desc::CMD_RS != 0 {
                self.memory
                    .write("tx desc status", d + desc::TX_STATUS as u64, &[desc::DD]);
            }
            head = (head + 1) % ring_len;
        }
        s.regs.insert(reg::TDH, head);
    }
}

impl devhal::Mmio for FakeE1000 {
    fn read32(&self, offset: u32) -> u32 {
        let mut s = self.state.lock();
        match (s.mistake, offset) {
            (Some(Mistake::Gone), _) => return u32::MAX,
            (Some(Mistake::ReceiveHead(h)), reg::RDH) => return h,
            (Some(Mistake::TransmitHead(h)), reg::TDH) => return h,
            _ => {}
        }
        let v = s.regs.get(&offset).copied().unwrap_or(0);
        if offset == reg::ICR {
            s.regs.insert(reg::ICR, 0);
        }
        v
    }

    fn write32(&self, offset: u32, value: u32) {
        let mut s = self.state.lock();
        match offset {
            reg::CTRL if value & ctrl::RST != 0 => {
                s.resets += 1;
                Self::power_on(&mut s);
                if s.mistake == Some(Mistake::StuckReset) {
                    s.regs.insert(reg::CTRL, value);
                }
                Self::update_link(&mut s);
            }
            reg::CTRL => {
                s.regs.insert(reg::CTRL, value);
                Self::update_link(&mut s);
            }
            reg::STATUS | reg::ICR => {}
            reg::IMC => {
                let ims = s.regs.get(&reg::IMS).copied().unwrap_or(0);
                s.regs.insert(reg::IMS, ims & !value);
            }
            reg::EERD => {
                let word = (value >> eerd::ADDR_SHIFT) & 0xff;
                let v = if value & eerd::START == 0 || s.mistake == Some(Mistake::StuckEeprom) {
                    value & !eerd::DONE
                } else if word < 3 {
                    let m = s.mac;
                    let data = u16::from_le_bytes([m[2 * word as usize], m[2 * word as usize + 1]]);
                    (value & 0xffff & !eerd::START) | eerd::DONE | (u32::from(data) << eerd::DATA_SHIFT)
                } else {
                    (value & 0xffff & !eerd::START) | eerd::DONE | (0xffff << eerd::DATA_SHIFT)
                };
                s.regs.insert(reg::EERD, v);
            }
            reg::RDBAL | reg::TDBAL => {
                assert_eq!(value % 16, 0, "ring base {value:#x} not 16-byte aligned");
                s.regs.insert(offset, value);
            }
            reg::RDLEN | reg::TDLEN => {
                assert!(
                    value > 0 && value.is_multiple_of(128),
                    "ring length {value} not a multiple of 128"
                );
                s.regs.insert(offset, value);
            }
            reg::RXDCTL | reg::TXDCTL => {
                let v = if s.mistake == Some(Mistake::QueueEnableIgnored) || s.family != Family::Igb {
                    value & !reg::QUEUE_ENABLE
                } else {
                    value
                };
                s.regs.insert(offset, v);
            }
            reg::RDT => {
                let ring_len = s.regs.get(&reg::RDLEN).copied().unwrap_or(0) / desc::LEN as u32;
                assert!(ring_len == 0 || value < ring_len, "RDT {value} outside the ring");
                s.tail_writes[0] += 1;
                s.regs.insert(offset, value);
            }
            reg::TDT => {
                s.tail_writes[1] += 1;
                s.regs.insert(offset, value);
                self.transmit(&mut s);
            }
            _ => {
                s.regs.insert(offset, value);
            }
        }
    }
}
