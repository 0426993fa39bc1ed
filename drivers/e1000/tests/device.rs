//! The driver against the fake device: bring-up of each family, frames both ways well past the
//! rings' lengths, and every device mistake handled.

use devhal::fake::FakeMemory;
use e1000::fake::{FakeE1000, Mistake};
use e1000::{E1000, Error, Family, ctrl, desc, rctl, reg, tctl};
use net::{LinkState, Nic};
use std::sync::Arc;

struct NoDelay;

impl devhal::Delay for NoDelay {
    fn delay_us(&self, _us: u32) {}
}

const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

fn setup(family: Family) -> (Arc<FakeMemory>, FakeE1000) {
    let memory = FakeMemory::new(0x1000_0000);
    let fake = FakeE1000::new(memory.clone(), family, MAC);
    (memory, fake)
}

fn up(fake: &FakeE1000, memory: &Arc<FakeMemory>, family: Family) -> E1000<FakeE1000> {
    E1000::new(fake.clone(), family, &memory.dma(), &NoDelay).expect("bring-up")
}

fn frame(n: usize, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| (i * 31 + n * 7) as u8).collect();
    f[..6].copy_from_slice(&MAC);
    f
}

fn receive_one(nic: &mut E1000<FakeE1000>) -> Option<Vec<u8>> {
    let mut got = None;
    let arrived = nic.receive(&mut |f| got = Some(f.to_vec())).unwrap();
    assert_eq!(arrived, got.is_some());
    got
}

#[test]
fn bring_up_programs_receiver_transmitter_and_link_for_every_family() {
    for family in [Family::E82540, Family::E82574, Family::Igb] {
        let (memory, fake) = setup(family);
        let nic = up(&fake, &memory, family);
        assert_eq!(fake.resets(), 1, "{family:?}");
        assert_eq!(nic.mac().to_string(), "52:54:00:12:34:56");
        assert_eq!(nic.ring_lens(), (256, 256));
        assert_eq!(fake.register(reg::IMS), 0, "interrupts stay masked");
        let c = fake.register(reg::CTRL);
        assert_ne!(c & ctrl::SLU, 0);
        assert_eq!(c & (ctrl::LRST | ctrl::PHY_RST | ctrl::RST), 0);
        let r = fake.register(reg::RCTL);
        assert_eq!(
            r & (rctl::EN | rctl::BAM | rctl::SECRC),
            rctl::EN | rctl::BAM | rctl::SECRC
        );
        assert_eq!(
            r & (rctl::BSIZE_MASK | rctl::BSEX | rctl::LPE | rctl::UPE | rctl::MPE | rctl::SBP),
            0
        );
        assert_eq!(fake.register(reg::RDLEN), 256 * 16);
        assert_eq!((fake.register(reg::RDH), fake.register(reg::RDT)), (0, 255));
        assert_eq!((fake.register(reg::TDH), fake.register(reg::TDT)), (0, 0));
        let t = fake.register(reg::TCTL);
        assert_eq!(t & (tctl::EN | tctl::PSP), tctl::EN | tctl::PSP);
        assert_eq!(fake.register(reg::TIPG), tctl::TIPG_COPPER);
        assert_ne!(fake.register(reg::RAH0) & reg::RAH_AV, 0);
        if family == Family::Igb {
            assert_ne!(fake.register(reg::RXDCTL) & reg::QUEUE_ENABLE, 0);
            assert_ne!(fake.register(reg::TXDCTL) & reg::QUEUE_ENABLE, 0);
            assert_eq!(fake.register(reg::SRRCTL) & 0x0e00_007f, reg::SRRCTL_BSIZE_2K);
        }
        assert_eq!(nic.link(), LinkState::Up);
        fake.set_link(false);
        assert_eq!(nic.link(), LinkState::Down);
        assert!(memory.violations().is_empty(), "{:?}", memory.violations());
    }
}

#[test]
fn the_82540em_reads_its_address_from_the_eeprom_when_ral_is_empty() {
    let memory = FakeMemory::new(0x1000_0000);
    let fake = FakeE1000::mac_in_eeprom_only(memory.clone(), [0x52, 0x54, 0, 0xab, 0xcd, 0xef]);
    assert_eq!(fake.register(reg::RAL0), 0);
    let nic = up(&fake, &memory, Family::E82540);
    assert_eq!(nic.mac().to_string(), "52:54:00:ab:cd:ef");
    // Written into RAL/RAH, valid, so the receive filter takes it.
    assert_eq!(fake.register(reg::RAL0), u32::from_le_bytes([0x52, 0x54, 0, 0xab]));
    assert_eq!(fake.register(reg::RAH0), 0xefcd | reg::RAH_AV);

    let fake = FakeE1000::mac_in_eeprom_only(memory.clone(), MAC);
    fake.set_mistake(Mistake::StuckEeprom);
    let e = E1000::new(fake, Family::E82540, &memory.dma(), &NoDelay).err().unwrap();
    assert_eq!(e, Error::EepromTimeout { word: 0 });
}

#[test]
fn an_empty_or_multicast_address_is_refused() {
    let memory = FakeMemory::new(0x1000_0000);
    // Only the 82540EM has the EEPROM fallback: an empty RAL on the 82574L is refused.
    let fake = FakeE1000::mac_in_eeprom_only(memory.clone(), MAC);
    let e = E1000::new(fake.clone(), Family::E82574, &memory.dma(), &NoDelay)
        .err()
        .unwrap();
    assert_eq!(e, Error::BadMac([0; 6]));
    assert_eq!(fake.register(reg::RCTL), 0, "receiver left off");
    let fake = FakeE1000::new(memory.clone(), Family::Igb, [1, 2, 3, 4, 5, 6]);
    let e = E1000::new(fake, Family::Igb, &memory.dma(), &NoDelay).err().unwrap();
    assert_eq!(
        e.to_string(),
        "device MAC address 01:02:03:04:05:06 is not a unicast address"
    );
}

#[test]
fn a_reset_that_never_finishes_fails_bring_up_within_its_bound() {
    let (memory, fake) = setup(Family::E82574);
    fake.set_mistake(Mistake::StuckReset);
    let e = E1000::new(fake.clone(), Family::E82574, &memory.dma(), &NoDelay)
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::ResetTimeout { ctrl, waited_us: 1_000_000 } if ctrl & (1 << 26) != 0),
        "{e:?}"
    );
    assert!(
        e.to_string().starts_with("device reset did not finish: CTRL reads"),
        "{e}"
    );
    assert_eq!(fake.register(reg::RCTL) & rctl::EN, 0);
}

#[test]
fn queue_enable_bits_that_do_not_stick_fail_an_82576_bring_up() {
    let (memory, fake) = setup(Family::Igb);
    fake.set_mistake(Mistake::QueueEnableIgnored);
    let e = E1000::new(fake.clone(), Family::Igb, &memory.dma(), &NoDelay)
        .err()
        .unwrap();
    assert_eq!(e, Error::QueueEnableTimeout { ring: "receive" });
    assert_eq!(fake.register(reg::RCTL), 0);
    assert_eq!(fake.resets(), 2, "bring-up's reset, then the one that quiesces it");
}

#[test]
fn a_thousand_frames_are_transmitted_in_order_with_descriptors_reclaimed() {
    for family in [Family::E82540, Family::E82574, Family::Igb] {
        let (memory, fake) = setup(family);
        let mut nic = up(&fake, &memory, family);
        let mut sent = Vec::new();
        for n in 0..1000 {
            let f = frame(n, 42 + n % 1473);
            nic.transmit(&f).unwrap();
            sent.push(f);
            if n % 7 == 0 {
                nic.poll().unwrap();
            }
        }
        assert_eq!(fake.take_sent(), sent, "{family:?}");
        let cmd = desc::CMD_EOP | desc::CMD_IFCS | desc::CMD_RS;
        assert!(fake.sent_commands().iter().all(|c| *c == cmd));
        assert_eq!(fake.tail_writes()[1], 1001, "one tail write per frame after bring-up's");
        assert!(nic.can_transmit());
        assert_eq!(
            nic.transmit(&[0u8; 1515]),
            Err(net::Error::FrameTooLong { len: 1515, max: 1514 })
        );
        assert!(memory.violations().is_empty(), "{:?}", memory.violations());
    }
}

#[test]
fn a_ring_the_device_does_not_drain_fills_and_refuses_more() {
    let (memory, fake) = setup(Family::E82574);
    let mut nic = up(&fake, &memory, Family::E82574);
    // The transmitter off: the device takes no descriptor.
    let t = fake.register(reg::TCTL);
    devhal::Mmio::write32(&fake, reg::TCTL, t & !tctl::EN);
    for n in 0..255 {
        nic.transmit(&frame(n, 60)).unwrap();
    }
    assert!(!nic.can_transmit());
    assert_eq!(nic.transmit(&frame(0, 60)), Err(net::Error::TransmitFull));
    assert_eq!(nic.poll(), Ok(0));
    devhal::Mmio::write32(&fake, reg::TCTL, t);
    devhal::Mmio::write32(&fake, reg::TDT, fake.register(reg::TDT));
    assert_eq!(nic.poll(), Ok(255));
    assert!(nic.can_transmit());
    assert_eq!(fake.take_sent().len(), 255);
}

#[test]
fn a_thousand_frames_are_received_in_order_and_descriptors_go_back_to_the_device() {
    for family in [Family::E82540, Family::E82574, Family::Igb] {
        let (memory, fake) = setup(family);
        let mut nic = up(&fake, &memory, family);
        let mut expected = Vec::new();
        let mut got = Vec::new();
        for round in 0..10 {
            // 100 per round, fewer than the 255 descriptors the device owns.
            for n in 0..100 {
                let f = frame(round * 100 + n, 14 + (round * 100 + n) % 1501);
                assert!(fake.deliver(&f), "{family:?}: round {round} frame {n}: no descriptor");
                expected.push(f);
            }
            nic.poll().unwrap();
            while let Some(f) = receive_one(&mut nic) {
                got.push(f);
            }
        }
        assert_eq!(got.len(), 1000);
        assert!(got == expected, "{family:?}: frames differ");
        assert_eq!(
            (nic.runts, nic.oversize, nic.fragmented, nic.receive_errors),
            (0, 0, 0, 0)
        );
        assert!(memory.violations().is_empty(), "{:?}", memory.violations());
    }
}

#[test]
fn a_full_receive_ring_holds_frames_until_the_driver_gives_descriptors_back() {
    let (memory, fake) = setup(Family::E82540);
    let mut nic = up(&fake, &memory, Family::E82540);
    for n in 0..255 {
        assert!(fake.deliver(&frame(n, 60)));
    }
    assert!(!fake.deliver(&frame(255, 60)), "the device owns 255 of 256 descriptors");
    assert_eq!(receive_one(&mut nic), Some(frame(0, 60)));
    assert!(fake.deliver(&frame(255, 60)));
    for n in 1..=255 {
        assert_eq!(receive_one(&mut nic), Some(frame(n, 60)));
    }
    assert_eq!(receive_one(&mut nic), None);
}

#[test]
fn a_frame_spanning_descriptors_is_dropped_whole_and_the_next_is_received() {
    let (memory, fake) = setup(Family::E82574);
    let mut nic = up(&fake, &memory, Family::E82574);
    assert!(fake.deliver_in_pieces(&frame(1, 1400), 512));
    assert!(fake.deliver(&frame(2, 100)));
    assert_eq!(receive_one(&mut nic), Some(frame(2, 100)));
    assert_eq!(nic.fragmented, 1);
    // Every descriptor went back: the device can fill the whole ring again.
    for n in 0..255 {
        assert!(fake.deliver(&frame(n, 60)), "descriptor {n}");
    }
}

#[test]
fn a_descriptor_without_eop_drops_everything_up_to_the_next_eop() {
    let (memory, fake) = setup(Family::E82540);
    let mut nic = up(&fake, &memory, Family::E82540);
    fake.set_mistake(Mistake::MissingEop);
    assert!(fake.deliver(&frame(1, 100)));
    assert_eq!(receive_one(&mut nic), None);
    // The next descriptor ends the broken frame: it is dropped too; the one after arrives.
    assert!(fake.deliver(&frame(2, 100)));
    assert!(fake.deliver(&frame(3, 100)));
    assert_eq!(receive_one(&mut nic), Some(frame(3, 100)));
    assert_eq!(nic.fragmented, 1);
    assert!(nic.failure().is_none());
}

#[test]
fn runts_oversize_frames_and_flagged_errors_are_dropped_and_counted() {
    let (memory, fake) = setup(Family::Igb);
    let mut nic = up(&fake, &memory, Family::Igb);
    assert!(fake.deliver(&[0u8; 10]));
    assert!(fake.deliver(&frame(1, 1518)));
    fake.set_mistake(Mistake::ReceiveErrors(1));
    assert!(fake.deliver(&frame(2, 200)));
    // Checksum-error bits alone do not drop a frame.
    fake.set_mistake(Mistake::ReceiveErrors(0x60));
    assert!(fake.deliver(&frame(3, 200)));
    assert_eq!(receive_one(&mut nic), Some(frame(3, 200)));
    assert_eq!((nic.runts, nic.oversize, nic.receive_errors), (1, 1, 1));
}

#[test]
fn a_length_past_the_buffer_stops_the_nic_with_the_reason() {
    let (memory, fake) = setup(Family::E82574);
    let mut nic = up(&fake, &memory, Family::E82574);
    fake.set_mistake(Mistake::ReceiveLength(4000));
    assert!(fake.deliver(&frame(1, 100)));
    let e = nic.receive(&mut |_| panic!("no frame")).unwrap_err();
    assert_eq!(
        e,
        net::Error::Device(
            "e1000 (82574L): receive descriptor 0 claims 4000 bytes, more than its 2048-byte buffer; device disabled and reset"
                .into()
        )
    );
    assert_eq!(
        nic.failure(),
        Some(&Error::BadLength {
            index: 0,
            len: 4000,
            max: 2048
        })
    );
    assert_eq!(fake.resets(), 2);
    assert_eq!(fake.register(reg::RCTL) & rctl::EN, 0);
    // Every later call fails, naming the first reason.
    let later = nic.transmit(&frame(2, 60)).unwrap_err();
    assert!(
        later.to_string().contains("stopped by an earlier device failure"),
        "{later}"
    );
    assert!(later.to_string().contains("4000 bytes"), "{later}");
    assert!(nic.poll().is_err());
    assert!(!nic.can_transmit());
}

#[test]
fn head_registers_outside_the_ring_stop_the_nic() {
    let (memory, fake) = setup(Family::E82540);
    let mut nic = up(&fake, &memory, Family::E82540);
    fake.set_mistake(Mistake::ReceiveHead(256));
    let e = nic.poll().unwrap_err();
    assert!(e.to_string().contains("receive head register reads 256"), "{e}");

    let (memory, fake) = setup(Family::E82540);
    let mut nic = up(&fake, &memory, Family::E82540);
    nic.transmit(&frame(0, 60)).unwrap();
    nic.transmit(&frame(1, 60)).unwrap();
    // Two frames in flight from descriptor 0: a head of 5 is past the tail.
    fake.set_mistake(Mistake::TransmitHead(5));
    let e = nic.poll().unwrap_err();
    assert!(
        matches!(
            nic.failure(),
            Some(Error::HeadOutOfRange {
                ring: "transmit",
                head: 5,
                ..
            })
        ),
        "{e}"
    );
}

#[test]
fn a_device_gone_from_the_bus_stops_the_nic() {
    let (memory, fake) = setup(Family::Igb);
    let mut nic = up(&fake, &memory, Family::Igb);
    fake.set_mistake(Mistake::Gone);
    assert_eq!(nic.link(), LinkState::Down);
    let e = nic.poll().unwrap_err();
    assert!(e.to_string().contains("gone from the bus"), "{e}");
    assert_eq!(nic.failure(), Some(&Error::DeviceGone));
}

#[test]
fn ids_map_to_families() {
    assert_eq!(e1000::family_of(0x100e), Some(Family::E82540));
    assert_eq!(e1000::family_of(0x10d3), Some(Family::E82574));
    assert_eq!(e1000::family_of(0x10c9), Some(Family::Igb));
    assert_eq!(e1000::family_of(0x1521), Some(Family::Igb));
    assert_eq!(e1000::family_of(0x1000), None);
}

#[test]
fn the_stack_gets_a_ping_answered_through_the_driver() {
    // The stack's side over the real driver, its peer over the fake's frames: an ARP request
    // and an echo request leave through the transmit ring; the peer's answers come back through
    // the receive ring.
    use net::{Addressing, Ipv4Address, Ipv4Cidr, Stack, StaticAddress};
    let (memory, fake) = setup(Family::E82574);
    let mut nic = up(&fake, &memory, Family::E82574);
    let (mut peer_nic, mut wire_end) =
        net::fake::WirePair::new(net::MacAddress([2, 0, 0, 0, 0, 2]), net::MacAddress([2, 0, 0, 0, 0, 3]));
    let at = |last| {
        Addressing::Static(StaticAddress {
            cidr: Ipv4Cidr::new(Ipv4Address::new(192, 168, 7, last), 24),
            gateway: None,
        })
    };
    let mut stack = Stack::new(&mut nic, at(1), 0);
    let mut peer = Stack::new(&mut peer_nic, at(2), 0);
    stack.send_ping(Ipv4Address::new(192, 168, 7, 2), 1).unwrap();
    let mut reply = None;
    for now in 1..200 {
        stack.poll(&mut nic, now).unwrap();
        for f in fake.take_sent() {
            wire_end.transmit(&f).unwrap();
        }
        peer.poll(&mut peer_nic, now).unwrap();
        while wire_end.receive(&mut |f| assert!(fake.deliver(f))).unwrap() {}
        reply = reply.or_else(|| stack.ping_reply());
    }
    let reply = reply.expect("no echo reply");
    assert_eq!((reply.from, reply.seq), (Ipv4Address::new(192, 168, 7, 2), 1));
    assert!(memory.violations().is_empty(), "{:?}", memory.violations());
}

#[test]
fn a_resetting_controller_is_left_alone_a_millisecond_before_ctrl_is_read() {
    struct Counting(std::cell::Cell<u64>);
    impl devhal::Delay for Counting {
        fn delay_us(&self, us: u32) {
            self.0.set(self.0.get() + u64::from(us));
        }
    }
    let (memory, fake) = setup(Family::E82540);
    let waited = Counting(std::cell::Cell::new(0));
    E1000::new(fake, Family::E82540, &memory.dma(), &waited).unwrap();
    // The fake finishes its reset at once: the settle time is the only wait.
    assert_eq!(waited.0.get(), 1_000);
}

#[test]
fn dma_memory_running_out_fails_bring_up_with_the_allocation_named() {
    let (memory, fake) = setup(Family::E82540);
    // Room for the receive ring and its buffers, not for the transmit buffers.
    memory.set_limit(Some(0x1000_0000 + 0x10_0000));
    let e = E1000::new(fake.clone(), Family::E82540, &memory.dma(), &NoDelay)
        .err()
        .unwrap();
    assert_eq!(
        e,
        Error::Dma(devhal::DmaError::OutOfMemory {
            size: 256 * 2048,
            align: 16
        })
    );
    assert_eq!(fake.register(reg::RCTL) & rctl::EN, 0, "receiver never turned on");
    assert_eq!(fake.register(reg::TCTL) & tctl::EN, 0);
}

#[test]
fn identify_names_the_nic_and_stops_it_without_a_reset_or_rings() {
    for family in [Family::E82540, Family::E82574, Family::Igb] {
        let (memory, fake) = setup(family);
        // Firmware (a PXE ROM) may leave the NIC receiving and transmitting.
        devhal::Mmio::write32(&fake, reg::RCTL, rctl::EN);
        devhal::Mmio::write32(&fake, reg::TCTL, tctl::EN);
        let mac = e1000::identify(&fake, family, &NoDelay).expect("identify");
        assert_eq!(mac.0, MAC, "{family:?}");
        assert_eq!(fake.register(reg::RCTL), 0, "{family:?}: receiver off");
        assert_eq!(fake.register(reg::TCTL), 0, "{family:?}: transmitter off");
        assert_eq!(fake.resets(), 0, "{family:?}: not reset");
        assert_eq!(fake.tail_writes(), [0, 0], "{family:?}: no ring given to the device");
        // The bring-up later finds the same address.
        assert_eq!(up(&fake, &memory, family).mac().0, MAC);
    }
    let memory = FakeMemory::new(0x1000_0000);
    let fake = FakeE1000::mac_in_eeprom_only(memory, MAC);
    fake.set_mistake(Mistake::StuckEeprom);
    assert_eq!(
        e1000::identify(&fake, Family::E82540, &NoDelay),
        Err(Error::EepromTimeout { word: 0 })
    );
}
