//! The driver against the fake device: bring-up, frames both ways past the queues' sizes, and
//! every device mistake refused.

use devhal::fake::FakeMemory;
use net::{LinkState, Nic};
use virtio_net::fake::{FakeVirtioNet, Mistake};
use virtio_net::{Error, VirtioNet, feature, status};

struct NoDelay;

impl devhal::Delay for NoDelay {
    fn delay_us(&self, _us: u32) {}
}

fn up(fake: &FakeVirtioNet, memory: &std::sync::Arc<FakeMemory>) -> VirtioNet<FakeVirtioNet> {
    VirtioNet::new(fake.clone(), &memory.dma(), &NoDelay).expect("bring-up")
}

fn setup() -> (std::sync::Arc<FakeMemory>, FakeVirtioNet) {
    let memory = FakeMemory::new(0x1000_0000);
    let fake = FakeVirtioNet::qemu_like(memory.clone());
    (memory, fake)
}

fn frame(n: usize, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| (i * 31 + n * 7) as u8).collect();
    f[..6].copy_from_slice(&[0x52, 0x54, 0, 0x12, 0x34, 0x56]);
    f
}

#[test]
fn bring_up_negotiates_version_1_mac_and_status_only() {
    let (memory, fake) = setup();
    let nic = up(&fake, &memory);
    assert_eq!(
        fake.accepted_features(),
        feature::VERSION_1 | feature::NET_MAC | feature::NET_STATUS
    );
    assert_eq!(
        fake.status(),
        status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK
    );
    assert_eq!(nic.mac().to_string(), "52:54:00:12:34:56");
    assert_eq!(nic.queue_sizes(), (256, 256));
    assert_eq!((fake.queue_size(0), fake.queue_size(1)), (256, 256));
    assert_eq!(nic.link(), LinkState::Up);
    fake.set_link(false);
    assert_eq!(nic.link(), LinkState::Down);
    assert!(memory.violations().is_empty(), "{:?}", memory.violations());
}

#[test]
fn a_queue_size_that_is_not_a_power_of_two_is_rounded_down() {
    let memory = FakeMemory::new(0x1000_0000);
    let offered = feature::VERSION_1 | feature::NET_MAC;
    let fake = FakeVirtioNet::new(memory.clone(), offered, [2, 0, 0, 0, 0, 9], 100);
    let nic = up(&fake, &memory);
    assert_eq!(nic.queue_sizes(), (64, 64));
    // No STATUS feature: the link is not known.
    assert_eq!(nic.link(), LinkState::Unknown);
}

#[test]
fn a_device_without_version_1_or_mac_is_refused_and_marked_failed() {
    let memory = FakeMemory::new(0x1000_0000);
    let fake = FakeVirtioNet::new(memory.clone(), feature::NET_MAC, [2, 0, 0, 0, 0, 1], 256);
    let e = VirtioNet::new(fake.clone(), &memory.dma(), &NoDelay).err().unwrap();
    assert!(matches!(e, Error::MissingFeature { name: "VERSION_1", .. }), "{e}");
    assert_ne!(fake.status() & status::FAILED, 0);
    let fake = FakeVirtioNet::new(memory.clone(), feature::VERSION_1, [2, 0, 0, 0, 0, 1], 256);
    let e = VirtioNet::new(fake.clone(), &memory.dma(), &NoDelay).err().unwrap();
    assert!(matches!(e, Error::MissingFeature { name: "MAC", .. }), "{e}");
}

#[test]
fn refused_features_and_a_multicast_mac_fail_bring_up() {
    let (memory, fake) = setup();
    fake.set_mistake(Mistake::RefuseFeatures);
    let e = VirtioNet::new(fake.clone(), &memory.dma(), &NoDelay).err().unwrap();
    assert!(matches!(e, Error::FeaturesRefused { .. }), "{e}");
    let fake = FakeVirtioNet::new(
        memory.clone(),
        feature::VERSION_1 | feature::NET_MAC,
        [1, 0, 0, 0, 0, 1],
        256,
    );
    let e = VirtioNet::new(fake, &memory.dma(), &NoDelay).err().unwrap();
    assert_eq!(
        e.to_string(),
        "device MAC address 01:00:00:00:00:01 is not a unicast address"
    );
}

#[test]
fn frames_are_transmitted_in_order_well_past_the_queue_size() {
    let (memory, fake) = setup();
    let mut nic = up(&fake, &memory);
    let mut sent = Vec::new();
    for n in 0..1000 {
        let f = frame(n, 60 + n % 1455);
        nic.transmit(&f).unwrap();
        sent.push(f);
        nic.poll().unwrap();
    }
    assert_eq!(fake.take_sent(), sent);
    assert!(fake.sent_headers().iter().all(|h| h == &[0u8; 12]));
    assert!(nic.can_transmit());
    assert_eq!(
        nic.transmit(&[0u8; 1515]),
        Err(net::Error::FrameTooLong { len: 1515, max: 1514 })
    );
    assert!(memory.violations().is_empty(), "{:?}", memory.violations());
}

#[test]
fn frames_are_received_in_order_and_buffers_go_back_to_the_device() {
    let (memory, fake) = setup();
    let mut nic = up(&fake, &memory);
    let mut got = Vec::new();
    for round in 0..5 {
        let frames: Vec<Vec<u8>> = (0..200).map(|n| frame(round * 200 + n, 14 + n * 7)).collect();
        for f in &frames {
            assert!(fake.deliver(f), "no receive buffer available");
        }
        let mut received = Vec::new();
        while nic.receive(&mut |b| received.push(b.to_vec())).unwrap() {}
        assert_eq!(received, frames);
        got.extend(received);
    }
    assert_eq!(got.len(), 1000);
    // A frame too short for an Ethernet header is dropped and its buffer reposted.
    assert!(fake.deliver(&[1, 2, 3]));
    assert!(!nic.receive(&mut |_| panic!("a runt was delivered")).unwrap());
    assert_eq!(nic.runts, 1);
    assert!(memory.violations().is_empty(), "{:?}", memory.violations());
}

fn broken_by(m: Mistake, rx: bool) -> String {
    let (memory, fake) = setup();
    let mut nic = up(&fake, &memory);
    fake.set_mistake(m);
    let e = if rx {
        assert!(fake.deliver(&frame(1, 60)));
        nic.receive(&mut |_| panic!("a frame from a broken device was delivered"))
            .unwrap_err()
    } else {
        nic.transmit(&frame(1, 60)).unwrap();
        nic.poll().unwrap_err()
    };
    // The device was reset (it gives every buffer back) and the NIC stays stopped.
    assert_eq!(fake.status(), 0);
    assert!(nic.failure().is_some());
    assert!(!nic.can_transmit());
    let again = nic.transmit(&frame(2, 60)).unwrap_err().to_string();
    assert!(again.contains("stopped by an earlier device failure"), "{again}");
    e.to_string()
}

#[test]
fn a_used_index_past_what_the_device_holds_stops_the_nic() {
    let e = broken_by(Mistake::UsedIndexJump(5), false);
    assert_eq!(
        e,
        "virtio-net: queue 1: used index went from 0 to 6, past the 1 buffer(s) the device held; device reset and stopped"
    );
    let e = broken_by(Mistake::UsedIndexJump(300), true);
    assert!(e.contains("queue 0: used index went from 0 to 301"), "{e}");
}

#[test]
fn a_used_id_the_device_does_not_hold_stops_the_nic() {
    let e = broken_by(Mistake::UsedId(7), false);
    assert!(
        e.contains("queue 1: used entry names descriptor 7, which the device does not hold"),
        "{e}"
    );
    let e = broken_by(Mistake::UsedId(4096), true);
    assert!(e.contains("queue 0: used entry names descriptor 4096"), "{e}");
}

#[test]
fn a_receive_length_past_the_buffer_stops_the_nic() {
    let e = broken_by(Mistake::UsedLength(1527), true);
    assert!(e.contains("claims 1527 bytes (a header to 1526 bytes expected)"), "{e}");
}

#[test]
fn the_stack_gets_a_ping_answered_through_the_driver() {
    // The stack's side over the real driver, its peer over the fake's frames: an ARP request
    // and an echo request leave through the transmit queue; the peer's answers come back
    // through the receive queue.
    use net::{Addressing, Ipv4Address, Ipv4Cidr, Stack, StaticAddress};
    let (memory, fake) = setup();
    let mut nic = up(&fake, &memory);
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
        // The fake's transmitted frames go onto the wire towards the peer, and back.
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
