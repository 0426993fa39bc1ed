//! A fake virtio network device for host tests: the common configuration's state machine, the
//! device configuration, and both split queues read and written through
//! [`devhal::fake::FakeMemory`] as a device would, with switches for the mistakes a broken
//! device makes.

use crate::regs::{Region, VirtioRegs, common, feature, netcfg, status};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use devhal::fake::FakeMemory;
use spin::Mutex;

/// Bytes of the fake's notification structure; queue `q`'s doorbell is at `q * NOTIFY_MULTIPLIER`.
pub const NOTIFY_LEN: u32 = 8;
pub const NOTIFY_MULTIPLIER: u32 = 4;

#[derive(Default, Clone, Copy)]
struct Queue {
    max_size: u16,
    size: u16,
    enabled: bool,
    desc: u64,
    avail: u64,
    used: u64,
    /// Available entries consumed (free-running).
    next_avail: u16,
    /// Used entries written (free-running).
    used_idx: u16,
}

/// A mistake the fake makes on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mistake {
    /// Adds this much to the next used index it writes.
    UsedIndexJump(u16),
    /// Names this descriptor id in the next used entry.
    UsedId(u32),
    /// Claims this length in the next receive used entry.
    UsedLength(u32),
    /// Clears FEATURES_OK when the driver sets it.
    RefuseFeatures,
}

struct State {
    status: u8,
    offered: u64,
    accepted: u64,
    device_select: u32,
    driver_select: u32,
    queue_select: u16,
    queues: [Queue; 2],
    mac: [u8; 6],
    link_up: bool,
    generation: u8,
    mistake: Option<Mistake>,
    /// Frames the driver transmitted (header stripped), with the header bytes seen.
    sent: Vec<(Vec<u8>, Vec<u8>)>,
    notifications: [u32; 2],
    resets: u32,
}

/// The fake device; clones share it.
#[derive(Clone)]
pub struct FakeVirtioNet {
    memory: Arc<FakeMemory>,
    state: Arc<Mutex<State>>,
}

impl FakeVirtioNet {
    /// A device offering `features` with MAC address `mac`, queues of up to `queue_max` entries.
    pub fn new(memory: Arc<FakeMemory>, features: u64, mac: [u8; 6], queue_max: u16) -> Self {
        let q = Queue {
            max_size: queue_max,
            ..Queue::default()
        };
        Self {
            memory,
            state: Arc::new(Mutex::new(State {
                status: 0,
                offered: features,
                accepted: 0,
                device_select: 0,
                driver_select: 0,
                queue_select: 0,
                queues: [q, q],
                mac,
                link_up: true,
                generation: 0,
                mistake: None,
                sent: Vec::new(),
                notifications: [0; 2],
                resets: 0,
            })),
        }
    }

    /// QEMU's offer, as far as the driver cares: VERSION_1, MAC, STATUS and a few it declines.
    pub fn qemu_like(memory: Arc<FakeMemory>) -> Self {
        let offered = feature::VERSION_1 | feature::NET_MAC | feature::NET_STATUS | (1 << 0) | (1 << 15) | (1 << 17);
        Self::new(memory, offered, [0x52, 0x54, 0, 0x12, 0x34, 0x56], 256)
    }

    pub fn set_mistake(&self, m: Mistake) {
        self.state.lock().mistake = Some(m);
    }

    pub fn set_link(&self, up: bool) {
        let mut s = self.state.lock();
        s.link_up = up;
        s.generation = s.generation.wrapping_add(1);
    }

    pub fn status(&self) -> u8 {
        self.state.lock().status
    }

    pub fn accepted_features(&self) -> u64 {
        self.state.lock().accepted
    }

    pub fn queue_size(&self, q: usize) -> u16 {
        self.state.lock().queues[q].size
    }

    pub fn resets(&self) -> u32 {
        self.state.lock().resets
    }

    /// Frames transmitted so far (without their headers), taken.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        self.state.lock().sent.drain(..).map(|(_, f)| f).collect()
    }

    /// Headers of frames transmitted so far.
    pub fn sent_headers(&self) -> Vec<Vec<u8>> {
        self.state.lock().sent.iter().map(|(h, _)| h.clone()).collect()
    }

    /// Doorbells rung per queue.
    pub fn notifications(&self) -> [u32; 2] {
        self.state.lock().notifications
    }

    /// Writes `frame` (after a zero header) into the next receive buffer the driver made
    /// available and completes it; false when the driver has none available.
    pub fn deliver(&self, frame: &[u8]) -> bool {
        let mut s = self.state.lock();
        if s.status & status::DRIVER_OK == 0 {
            return false;
        }
        let Some(id) = self.next_available(&mut s, 0) else {
            return false;
        };
        let q = s.queues[0];
        let desc = q.desc + 16 * u64::from(id);
        let addr = self.memory.read_u64("rx desc addr", desc).unwrap_or(0);
        let cap = self.memory.read_u32("rx desc len", desc + 8).unwrap_or(0) as usize;
        let mut bytes = vec![0u8; crate::NET_HEADER_LEN];
        bytes.extend_from_slice(frame);
        assert!(bytes.len() <= cap, "the fake was handed a {cap}-byte receive buffer");
        self.memory.write("rx buffer", addr, &bytes);
        let mut len = bytes.len() as u32;
        if let Some(Mistake::UsedLength(l)) = s.mistake {
            len = l;
            s.mistake = None;
        }
        self.complete(&mut s, 0, u32::from(id), len);
        true
    }

    fn next_available(&self, s: &mut State, q: usize) -> Option<u16> {
        let queue = s.queues[q];
        if !queue.enabled {
            return None;
        }
        let avail_idx = self.read_u16(queue.avail + 2);
        if avail_idx == queue.next_avail {
            return None;
        }
        let slot = u64::from(queue.next_avail % queue.size);
        let id = self.read_u16(queue.avail + 4 + 2 * slot);
        s.queues[q].next_avail = queue.next_avail.wrapping_add(1);
        Some(id)
    }

    fn complete(&self, s: &mut State, q: usize, mut id: u32, len: u32) {
        let queue = s.queues[q];
        if let Some(Mistake::UsedId(bad)) = s.mistake {
            id = bad;
            s.mistake = None;
        }
        let slot = u64::from(queue.used_idx % queue.size);
        self.memory.write_u32("used id", queue.used + 4 + 8 * slot, id);
        self.memory.write_u32("used len", queue.used + 8 + 8 * slot, len);
        let mut next = queue.used_idx.wrapping_add(1);
        if let Some(Mistake::UsedIndexJump(n)) = s.mistake {
            next = next.wrapping_add(n);
            s.mistake = None;
        }
        s.queues[q].used_idx = next;
        self.memory.write("used idx", queue.used + 2, &next.to_le_bytes());
    }

    fn read_u16(&self, phys: u64) -> u16 {
        let mut b = [0u8; 2];
        self.memory.read("ring", phys, &mut b);
        u16::from_le_bytes(b)
    }

    /// Sends every frame the driver made available on the transmit queue.
    fn transmit(&self, s: &mut State) {
        while let Some(id) = self.next_available(s, 1) {
            let desc = s.queues[1].desc + 16 * u64::from(id);
            let addr = self.memory.read_u64("tx desc addr", desc).unwrap_or(0);
            let len = self.memory.read_u32("tx desc len", desc + 8).unwrap_or(0) as usize;
            let mut bytes = vec![0u8; len];
            self.memory.read("tx buffer", addr, &mut bytes);
            let frame = bytes.split_off(crate::NET_HEADER_LEN.min(bytes.len()));
            s.sent.push((bytes, frame));
            self.complete(s, 1, u32::from(id), 0);
        }
    }

    fn reset(s: &mut State) {
        s.status = 0;
        s.accepted = 0;
        s.resets += 1;
        for q in &mut s.queues {
            *q = Queue {
                max_size: q.max_size,
                ..Queue::default()
            };
        }
    }
}

impl VirtioRegs for FakeVirtioNet {
    fn read8(&self, region: Region, offset: u32) -> u8 {
        let s = self.state.lock();
        match (region, offset) {
            (Region::Common, common::DEVICE_STATUS) => s.status,
            (Region::Common, common::CONFIG_GENERATION) => s.generation,
            (Region::Device, o) if o < 6 => s.mac[o as usize],
            (Region::Isr, 0) => 0,
            _ => 0xff,
        }
    }

    fn read16(&self, region: Region, offset: u32) -> u16 {
        let s = self.state.lock();
        let q = s.queues.get(usize::from(s.queue_select)).copied();
        match (region, offset) {
            (Region::Common, common::NUM_QUEUES) => 2,
            (Region::Common, common::QUEUE_SIZE) => q.map_or(0, |q| if q.size != 0 { q.size } else { q.max_size }),
            (Region::Common, common::QUEUE_NOTIFY_OFF) => s.queue_select,
            (Region::Device, netcfg::STATUS) => u16::from(s.link_up),
            _ => 0xffff,
        }
    }

    fn read32(&self, region: Region, offset: u32) -> u32 {
        let s = self.state.lock();
        match (region, offset) {
            (Region::Common, common::DEVICE_FEATURE) => (s.offered >> (32 * s.device_select.min(1))) as u32,
            _ => u32::MAX,
        }
    }

    fn write8(&self, region: Region, offset: u32, value: u8) {
        let mut s = self.state.lock();
        if (region, offset) != (Region::Common, common::DEVICE_STATUS) {
            panic!("fake virtio-net: unexpected 8-bit write at {region:?}+{offset:#x}");
        }
        if value == 0 {
            Self::reset(&mut s);
            return;
        }
        let mut value = value;
        if value & status::FEATURES_OK != 0 && s.status & status::FEATURES_OK == 0 {
            let ok = s.mistake != Some(Mistake::RefuseFeatures) && s.accepted & !s.offered == 0;
            if !ok {
                value &= !status::FEATURES_OK;
            }
        }
        s.status = value;
    }

    fn write16(&self, region: Region, offset: u32, value: u16) {
        let mut s = self.state.lock();
        match region {
            Region::Notify => {
                assert!(offset + 2 <= NOTIFY_LEN && offset.is_multiple_of(NOTIFY_MULTIPLIER));
                let q = usize::from(value);
                assert_eq!(
                    offset / NOTIFY_MULTIPLIER,
                    u32::from(value),
                    "doorbell of another queue"
                );
                s.notifications[q] += 1;
                if q == 1 && s.status & status::DRIVER_OK != 0 {
                    self.transmit(&mut s);
                }
            }
            Region::Common => {
                let sel = usize::from(s.queue_select);
                match offset {
                    common::QUEUE_SELECT => s.queue_select = value,
                    common::QUEUE_SIZE => {
                        assert!(value <= s.queues[sel].max_size && value.is_power_of_two());
                        s.queues[sel].size = value;
                    }
                    common::QUEUE_ENABLE => s.queues[sel].enabled = value == 1,
                    common::QUEUE_MSIX_VECTOR | common::CONFIG_MSIX_VECTOR => {}
                    _ => panic!("fake virtio-net: unexpected 16-bit write at {offset:#x}"),
                }
            }
            _ => panic!("fake virtio-net: unexpected 16-bit write at {region:?}+{offset:#x}"),
        }
    }

    fn write32(&self, region: Region, offset: u32, value: u32) {
        let mut s = self.state.lock();
        assert_eq!(region, Region::Common, "32-bit write outside the common configuration");
        let sel = usize::from(s.queue_select);
        let set_half = |field: &mut u64, high: bool| {
            *field = if high {
                (*field & 0xffff_ffff) | (u64::from(value) << 32)
            } else {
                (*field & !0xffff_ffff) | u64::from(value)
            };
        };
        match offset {
            common::DEVICE_FEATURE_SELECT => s.device_select = value,
            common::DRIVER_FEATURE_SELECT => s.driver_select = value,
            common::DRIVER_FEATURE => {
                let high = s.driver_select == 1;
                set_half(&mut s.accepted, high);
            }
            o if (common::QUEUE_DESC..common::LEN).contains(&o) => {
                let high = o % 8 == 4;
                let q = &mut s.queues[sel];
                match o & !7 {
                    common::QUEUE_DESC => set_half(&mut q.desc, high),
                    common::QUEUE_DRIVER => set_half(&mut q.avail, high),
                    _ => set_half(&mut q.used, high),
                }
            }
            _ => panic!("fake virtio-net: unexpected 32-bit write at {offset:#x}"),
        }
    }

    fn region_len(&self, region: Region) -> u32 {
        match region {
            Region::Common => common::LEN,
            Region::Notify => NOTIFY_LEN,
            Region::Isr => 1,
            Region::Device => 8,
        }
    }

    fn notify_multiplier(&self) -> u32 {
        NOTIFY_MULTIPLIER
    }
}
