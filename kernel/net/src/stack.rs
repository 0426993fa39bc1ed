//! The TCP/IP stack: smoltcp's interface and sockets over a [`Nic`], with DHCPv4 or a static
//! address, ICMP echo, and TCP connections.
//!
//! The stack owns no NIC: each call that moves frames borrows the interface's NIC, so the kernel
//! keeps NICs in its registry and decides which CPU polls (never one running a measured job).

use crate::Error;
use crate::config::{Addressing, StaticAddress};
use crate::nic::{LinkState, Nic};
use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::socket::{dhcpv4, icmp, tcp};
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, HardwareAddress, Icmpv4Packet, Icmpv4Repr, IpAddress, IpCidr, Ipv4Address, Ipv4Cidr,
};

pub use smoltcp::socket::tcp::State as TcpState;

/// Bytes of each TCP socket's receive and of its transmit buffer.
const TCP_BUFFER: usize = 64 * 1024;
/// ICMP packets each direction of the echo socket holds.
const ICMP_PACKETS: usize = 8;
/// The identifier of the stack's echo requests.
const ECHO_IDENT: u16 = 0x6271;
/// Bytes of an echo request's payload: the sequence number repeated.
const ECHO_PAYLOAD: usize = 32;
/// First local port of outgoing TCP connections.
const FIRST_EPHEMERAL_PORT: u16 = 49152;

/// Where the interface's address came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressSource {
    Dhcp,
    Static,
}

/// The interface's address as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Configured {
    pub cidr: Ipv4Cidr,
    pub gateway: Option<Ipv4Address>,
    pub source: AddressSource,
}

impl core::fmt::Display for Configured {
    /// `10.0.2.15/24 gw 10.0.2.2 (dhcp)`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.cidr)?;
        match self.gateway {
            Some(g) => write!(f, " gw {g}")?,
            None => write!(f, " no gateway")?,
        }
        match self.source {
            AddressSource::Dhcp => write!(f, " (dhcp)"),
            AddressSource::Static => write!(f, " (static)"),
        }
    }
}

/// An echo reply to one of [`Stack::send_ping`]'s requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingReply {
    pub from: Ipv4Address,
    pub seq: u16,
}

/// What the stack counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackCounters {
    pub frames_in: u64,
    pub frames_out: u64,
    /// Frames the stack built that the NIC refused (ring full, too long).
    pub transmit_refused: u64,
    /// Echo replies whose payload was not the one sent (dropped).
    pub bad_echo_replies: u64,
}

/// A TCP connection or listener of the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpHandle(SocketHandle);

/// One interface's stack.
pub struct Stack {
    iface: Interface,
    sockets: SocketSet<'static>,
    dhcp: Option<SocketHandle>,
    echo: Option<SocketHandle>,
    configured: Option<Configured>,
    counters: StackCounters,
    next_port: u16,
    /// The first failure of the NIC, kept until [`Stack::poll`] reports it.
    nic_error: Option<Error>,
}

impl Stack {
    /// A stack on `nic` with `addressing`: a static address at once, or a DHCP client that
    /// configures the address when [`Stack::poll`] sees the lease.
    pub fn new(nic: &mut dyn Nic, addressing: Addressing, now_ms: u64) -> Self {
        let mac = EthernetAddress(nic.mac().0);
        let config = Config::new(HardwareAddress::Ethernet(mac));
        let mut counters = StackCounters::default();
        let mut nic_error = None;
        let iface = Interface::new(
            config,
            &mut NicDevice {
                nic,
                counters: &mut counters,
                error: &mut nic_error,
            },
            instant(now_ms),
        );
        let mut stack = Self {
            iface,
            sockets: SocketSet::new(vec![]),
            dhcp: None,
            echo: None,
            configured: None,
            counters,
            next_port: FIRST_EPHEMERAL_PORT,
            nic_error,
        };
        match addressing {
            Addressing::Dhcp => {
                stack.dhcp = Some(stack.sockets.add(dhcpv4::Socket::new()));
            }
            Addressing::Static(StaticAddress { cidr, gateway }) => {
                stack.set_address(cidr, gateway, AddressSource::Static);
            }
        }
        stack
    }

    fn set_address(&mut self, cidr: Ipv4Cidr, gateway: Option<Ipv4Address>, source: AddressSource) {
        self.iface.update_ip_addrs(|addrs| {
            addrs.clear();
            // Capacity is at least one address.
            let _ = addrs.push(IpCidr::Ipv4(cidr));
        });
        let routes = self.iface.routes_mut();
        routes.remove_default_ipv4_route();
        if let Some(g) = gateway {
            // Only fails when the route table is full, and it was just emptied of its default.
            let _ = routes.add_default_ipv4_route(g);
        }
        self.configured = Some(Configured { cidr, gateway, source });
    }

    fn clear_address(&mut self) {
        self.iface.update_ip_addrs(|addrs| addrs.clear());
        self.iface.routes_mut().remove_default_ipv4_route();
        self.configured = None;
    }

    /// Moves frames both ways and runs timers: lets the NIC reclaim its rings, feeds every
    /// received frame to the stack, sends what the sockets queued, and applies a DHCP lease
    /// (or its loss). Returns whether the address changed; a NIC failure is an error.
    pub fn poll(&mut self, nic: &mut dyn Nic, now_ms: u64) -> Result<bool, Error> {
        nic.poll()?;
        let mut device = NicDevice {
            nic,
            counters: &mut self.counters,
            error: &mut self.nic_error,
        };
        self.iface.poll(instant(now_ms), &mut device, &mut self.sockets);
        if let Some(e) = self.nic_error.take() {
            return Err(e);
        }
        let Some(handle) = self.dhcp else { return Ok(false) };
        let lease = match self.sockets.get_mut::<dhcpv4::Socket>(handle).poll() {
            None => None,
            Some(dhcpv4::Event::Configured(lease)) => Some(Some((lease.address, lease.router))),
            Some(dhcpv4::Event::Deconfigured) => Some(None),
        };
        match lease {
            None => Ok(false),
            Some(Some((address, router))) => {
                self.set_address(address, router, AddressSource::Dhcp);
                Ok(true)
            }
            Some(None) => {
                self.clear_address();
                Ok(true)
            }
        }
    }

    /// Milliseconds until the stack next needs a poll when no frame arrives (`None`: only when
    /// one does).
    pub fn poll_delay_ms(&mut self, now_ms: u64) -> Option<u64> {
        self.iface
            .poll_delay(instant(now_ms), &self.sockets)
            .map(|d| d.total_millis())
    }

    /// The address, once configured.
    pub fn configured(&self) -> Option<Configured> {
        self.configured
    }

    pub fn counters(&self) -> StackCounters {
        self.counters
    }

    /// Link state as the NIC reports it, `Unknown` read as up.
    pub fn link_up(nic: &dyn Nic) -> bool {
        nic.link() != LinkState::Down
    }

    /// Queues an ICMP echo request to `target` with sequence number `seq` (sent by the next
    /// [`Stack::poll`]).
    pub fn send_ping(&mut self, target: Ipv4Address, seq: u16) -> Result<(), Error> {
        let handle = match self.echo {
            Some(h) => h,
            None => {
                let buffer = || {
                    icmp::PacketBuffer::new(
                        vec![icmp::PacketMetadata::EMPTY; ICMP_PACKETS],
                        vec![0u8; ICMP_PACKETS * (ECHO_PAYLOAD + 64)],
                    )
                };
                let mut socket = icmp::Socket::new(buffer(), buffer());
                socket
                    .bind(icmp::Endpoint::Ident(ECHO_IDENT))
                    .map_err(|e| Error::Socket {
                        what: "ICMP echo socket",
                        why: e.to_string(),
                    })?;
                let h = self.sockets.add(socket);
                self.echo = Some(h);
                h
            }
        };
        let payload = echo_payload(seq);
        let repr = Icmpv4Repr::EchoRequest {
            ident: ECHO_IDENT,
            seq_no: seq,
            data: &payload,
        };
        let socket = self.sockets.get_mut::<icmp::Socket>(handle);
        let bytes = socket
            .send(repr.buffer_len(), IpAddress::Ipv4(target))
            .map_err(|e| Error::Socket {
                what: "ICMP echo request",
                why: e.to_string(),
            })?;
        let mut packet = Icmpv4Packet::new_unchecked(bytes);
        repr.emit(&mut packet, &ChecksumCapabilities::default());
        Ok(())
    }

    /// The next echo reply that matches a request of [`Stack::send_ping`] (identifier, and the
    /// payload for its sequence number); other ICMP packets are dropped.
    pub fn ping_reply(&mut self) -> Option<PingReply> {
        let handle = self.echo?;
        let caps = ChecksumCapabilities::default();
        let socket = self.sockets.get_mut::<icmp::Socket>(handle);
        while socket.can_recv() {
            let Ok((bytes, from)) = socket.recv() else { break };
            let IpAddress::Ipv4(from) = from;
            let Ok(packet) = Icmpv4Packet::new_checked(bytes) else {
                continue;
            };
            let Ok(repr) = Icmpv4Repr::parse(&packet, &caps) else {
                continue;
            };
            if let Icmpv4Repr::EchoReply { ident, seq_no, data } = repr
                && ident == ECHO_IDENT
            {
                if data == echo_payload(seq_no) {
                    return Some(PingReply { from, seq: seq_no });
                }
                self.counters.bad_echo_replies += 1;
            }
        }
        None
    }

    fn tcp_socket() -> tcp::Socket<'static> {
        tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0u8; TCP_BUFFER]),
            tcp::SocketBuffer::new(vec![0u8; TCP_BUFFER]),
        )
    }

    /// A listener on TCP `port`; it becomes the connection when a peer connects.
    pub fn tcp_listen(&mut self, port: u16) -> Result<TcpHandle, Error> {
        let mut socket = Self::tcp_socket();
        socket.listen(port).map_err(|e| Error::Socket {
            what: "TCP listen",
            why: format!("port {port}: {e}"),
        })?;
        Ok(TcpHandle(self.sockets.add(socket)))
    }

    /// Starts a TCP connection to `remote:port` from the next local port.
    pub fn tcp_connect(&mut self, remote: Ipv4Address, port: u16) -> Result<TcpHandle, Error> {
        let local = self.next_port;
        self.next_port = if local == u16::MAX {
            FIRST_EPHEMERAL_PORT
        } else {
            local + 1
        };
        let mut socket = Self::tcp_socket();
        socket
            .connect(self.iface.context(), (IpAddress::Ipv4(remote), port), local)
            .map_err(|e| Error::Socket {
                what: "TCP connect",
                why: format!("{remote}:{port}: {e}"),
            })?;
        Ok(TcpHandle(self.sockets.add(socket)))
    }

    pub fn tcp_state(&self, h: TcpHandle) -> TcpState {
        self.sockets.get::<tcp::Socket>(h.0).state()
    }

    /// Queues what fits of `data`; returns how many bytes were taken.
    pub fn tcp_send(&mut self, h: TcpHandle, data: &[u8]) -> Result<usize, Error> {
        self.sockets
            .get_mut::<tcp::Socket>(h.0)
            .send_slice(data)
            .map_err(|e| Error::Socket {
                what: "TCP send",
                why: e.to_string(),
            })
    }

    /// Takes what arrived, up to `into.len()` bytes; 0 when nothing is there yet.
    pub fn tcp_recv(&mut self, h: TcpHandle, into: &mut [u8]) -> Result<usize, Error> {
        let socket = self.sockets.get_mut::<tcp::Socket>(h.0);
        if !socket.can_recv() {
            return Ok(0);
        }
        socket.recv_slice(into).map_err(|e| Error::Socket {
            what: "TCP receive",
            why: e.to_string(),
        })
    }

    /// Closes the sending half (FIN once the queued bytes are out).
    pub fn tcp_close(&mut self, h: TcpHandle) {
        self.sockets.get_mut::<tcp::Socket>(h.0).close();
    }

    /// The peer's address and port of a connection (`None` while listening or closed).
    pub fn tcp_remote(&self, h: TcpHandle) -> Option<(Ipv4Address, u16)> {
        let endpoint = self.sockets.get::<tcp::Socket>(h.0).remote_endpoint()?;
        match endpoint.addr {
            IpAddress::Ipv4(a) => Some((a, endpoint.port)),
        }
    }

    /// Whether every queued byte of the connection was sent and acknowledged.
    pub fn tcp_sent_all(&self, h: TcpHandle) -> bool {
        self.sockets.get::<tcp::Socket>(h.0).send_queue() == 0
    }

    /// Drops the connection at once (RST), discarding what is queued.
    pub fn tcp_abort(&mut self, h: TcpHandle) {
        self.sockets.get_mut::<tcp::Socket>(h.0).abort();
    }

    /// Gives the socket's memory back; the handle must not be used again.
    pub fn tcp_release(&mut self, h: TcpHandle) {
        self.sockets.remove(h.0);
    }
}

fn instant(ms: u64) -> Instant {
    Instant::from_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

fn echo_payload(seq: u16) -> [u8; ECHO_PAYLOAD] {
    let mut p = [0u8; ECHO_PAYLOAD];
    for (i, b) in p.iter_mut().enumerate() {
        *b = seq.to_be_bytes()[i % 2] ^ (i as u8);
    }
    p
}

/// smoltcp's device over the contract: a received frame is copied out of the driver's buffer
/// into the token (the buffer goes back to the device at once); a transmitted one is built in a
/// scratch buffer and copied into the driver's ring.
struct NicDevice<'a> {
    nic: &'a mut dyn Nic,
    counters: &'a mut StackCounters,
    error: &'a mut Option<Error>,
}

struct RxToken(Vec<u8>);

struct TxToken<'a> {
    nic: &'a mut dyn Nic,
    counters: &'a mut StackCounters,
    error: &'a mut Option<Error>,
}

impl phy::RxToken for RxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(&self.0)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut frame = vec![0u8; len];
        let r = f(&mut frame);
        match self.nic.transmit(&frame) {
            Ok(()) => self.counters.frames_out += 1,
            Err(Error::TransmitFull) | Err(Error::FrameTooLong { .. }) => self.counters.transmit_refused += 1,
            Err(e) => {
                self.counters.transmit_refused += 1;
                self.error.get_or_insert(e);
            }
        }
        r
    }
}

impl Device for NicDevice<'_> {
    type RxToken<'a>
        = RxToken
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a>
    where
        Self: 'a;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if self.error.is_some() {
            return None;
        }
        let mut frame = None;
        match self.nic.receive(&mut |bytes| frame = Some(bytes.to_vec())) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                self.error.get_or_insert(e);
                return None;
            }
        }
        self.counters.frames_in += 1;
        Some((
            RxToken(frame?),
            TxToken {
                nic: &mut *self.nic,
                counters: &mut *self.counters,
                error: &mut *self.error,
            },
        ))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        if self.error.is_some() || !self.nic.can_transmit() {
            return None;
        }
        Some(TxToken {
            nic: &mut *self.nic,
            counters: &mut *self.counters,
            error: &mut *self.error,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.nic.max_frame();
        caps.max_burst_size = Some(1);
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::WirePair;
    use crate::nic::MacAddress;

    fn static_at(last: u8, gw: Option<u8>) -> Addressing {
        Addressing::Static(StaticAddress {
            cidr: Ipv4Cidr::new(Ipv4Address::new(10, 9, 0, last), 24),
            gateway: gw.map(|g| Ipv4Address::new(10, 9, 0, g)),
        })
    }

    #[test]
    fn tcp_between_two_stacks_over_a_wire_carries_bytes_both_ways() {
        let (mut nic_a, mut nic_b) = WirePair::new(MacAddress([2, 0, 0, 0, 0, 0xa]), MacAddress([2, 0, 0, 0, 0, 0xb]));
        let mut a = Stack::new(&mut nic_a, static_at(1, None), 0);
        let mut b = Stack::new(&mut nic_b, static_at(2, Some(1)), 0);
        assert_eq!(b.configured().unwrap().to_string(), "10.9.0.2/24 gw 10.9.0.1 (static)");
        let server = a.tcp_listen(7000).unwrap();
        let client = b.tcp_connect(Ipv4Address::new(10, 9, 0, 1), 7000).unwrap();
        // Larger than one socket buffer each way, so the windows have to open and close.
        let upload: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let download: Vec<u8> = (0..150_000u32).map(|i| (i * 13 + 5) as u8).collect();
        let (mut sent_up, mut sent_down) = (0, 0);
        let (mut got_up, mut got_down) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 4096];
        let mut now = 0;
        while (got_up.len() < upload.len() || got_down.len() < download.len()) && now < 60_000 {
            now += 1;
            a.poll(&mut nic_a, now).unwrap();
            b.poll(&mut nic_b, now).unwrap();
            if b.tcp_state(client) == TcpState::Established && sent_up < upload.len() {
                sent_up += b.tcp_send(client, &upload[sent_up..]).unwrap();
            }
            if a.tcp_state(server) == TcpState::Established && sent_down < download.len() {
                sent_down += a.tcp_send(server, &download[sent_down..]).unwrap();
            }
            loop {
                let n = a.tcp_recv(server, &mut buf).unwrap();
                got_up.extend_from_slice(&buf[..n]);
                if n == 0 {
                    break;
                }
            }
            loop {
                let n = b.tcp_recv(client, &mut buf).unwrap();
                got_down.extend_from_slice(&buf[..n]);
                if n == 0 {
                    break;
                }
            }
        }
        assert!(
            got_up == upload,
            "upload: {} of {} bytes, or corrupted",
            got_up.len(),
            upload.len()
        );
        assert!(
            got_down == download,
            "download: {} of {} bytes",
            got_down.len(),
            download.len()
        );
        // Both closed: the connection ends on both sides.
        a.tcp_close(server);
        b.tcp_close(client);
        for _ in 0..100 {
            now += 1;
            a.poll(&mut nic_a, now).unwrap();
            b.poll(&mut nic_b, now).unwrap();
        }
        assert!(matches!(b.tcp_state(client), TcpState::TimeWait | TcpState::Closed));
        assert!(a.counters().frames_in > 100 && b.counters().frames_out > 100);
        assert_eq!(a.counters().transmit_refused + b.counters().transmit_refused, 0);
    }

    #[test]
    fn a_connection_names_its_peer_and_an_abort_resets_it() {
        let (mut nic_a, mut nic_b) = WirePair::new(MacAddress([2, 0, 0, 0, 0, 0xa]), MacAddress([2, 0, 0, 0, 0, 0xb]));
        let mut a = Stack::new(&mut nic_a, static_at(1, None), 0);
        let mut b = Stack::new(&mut nic_b, static_at(2, None), 0);
        let server = a.tcp_listen(7001).unwrap();
        assert_eq!(a.tcp_remote(server), None, "a listener has no peer");
        let client = b.tcp_connect(Ipv4Address::new(10, 9, 0, 1), 7001).unwrap();
        let mut now = 0;
        while a.tcp_state(server) != TcpState::Established && now < 1000 {
            now += 1;
            a.poll(&mut nic_a, now).unwrap();
            b.poll(&mut nic_b, now).unwrap();
        }
        assert_eq!(
            a.tcp_remote(server),
            Some((Ipv4Address::new(10, 9, 0, 2), FIRST_EPHEMERAL_PORT))
        );
        assert!(a.tcp_sent_all(server));
        a.tcp_send(server, b"hello").unwrap();
        assert!(!a.tcp_sent_all(server), "queued bytes are not sent yet");
        a.tcp_abort(server);
        for _ in 0..50 {
            now += 1;
            a.poll(&mut nic_a, now).unwrap();
            b.poll(&mut nic_b, now).unwrap();
        }
        assert_eq!(b.tcp_state(client), TcpState::Closed, "the peer saw the reset");
        a.tcp_release(server);
        // The port can be listened on again.
        a.tcp_listen(7001).unwrap();
    }

    #[test]
    fn ping_is_answered_by_the_other_stack_and_only_on_the_subnet() {
        let (mut nic_a, mut nic_b) = WirePair::new(MacAddress([2, 0, 0, 0, 0, 0xa]), MacAddress([2, 0, 0, 0, 0, 0xb]));
        let mut a = Stack::new(&mut nic_a, static_at(1, None), 0);
        let mut b = Stack::new(&mut nic_b, static_at(2, None), 0);
        a.send_ping(Ipv4Address::new(10, 9, 0, 2), 5).unwrap();
        let mut reply = None;
        for now in 1..100 {
            a.poll(&mut nic_a, now).unwrap();
            b.poll(&mut nic_b, now).unwrap();
            reply = reply.or_else(|| a.ping_reply());
        }
        assert_eq!(
            reply,
            Some(PingReply {
                from: Ipv4Address::new(10, 9, 0, 2),
                seq: 5
            })
        );
        // Nobody answers for an address that is not there.
        a.send_ping(Ipv4Address::new(10, 9, 0, 3), 6).unwrap();
        for now in 100..3000 {
            a.poll(&mut nic_a, now).unwrap();
            b.poll(&mut nic_b, now).unwrap();
            assert_eq!(a.ping_reply(), None);
        }
    }

    /// A NIC whose driver found its device broken: the stack reports the failure.
    struct BrokenNic;

    impl Nic for BrokenNic {
        fn mac(&self) -> crate::MacAddress {
            MacAddress([2, 0, 0, 0, 0, 1])
        }
        fn link(&self) -> LinkState {
            LinkState::Up
        }
        fn max_frame(&self) -> usize {
            crate::ETHERNET_MAX_FRAME
        }
        fn poll(&mut self) -> Result<usize, Error> {
            Ok(0)
        }
        fn receive(&mut self, _frame: &mut dyn FnMut(&[u8])) -> Result<bool, Error> {
            Err(Error::Device("used ring index jumped".into()))
        }
        fn can_transmit(&self) -> bool {
            true
        }
        fn transmit(&mut self, _frame: &[u8]) -> Result<(), Error> {
            Ok(())
        }
    }

    #[test]
    fn a_nic_failure_is_reported_by_poll() {
        let mut nic = BrokenNic;
        let mut s = Stack::new(&mut nic, Addressing::Dhcp, 0);
        assert_eq!(s.poll(&mut nic, 1), Err(Error::Device("used ring index jumped".into())));
        assert_eq!(s.configured(), None);
    }
}
