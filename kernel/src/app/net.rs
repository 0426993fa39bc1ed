//! The network bring-up: the `net.*` words, the chosen interface's stack (DHCPv4 or a static
//! address), its console line, and `test=net`.
//!
//! Who polls: the boot CPU, at boot, before any job starts (the bring-up waits for the lease
//! here) and during `test=net`. No CPU polls the stack while boot jobs run, so a measured job
//! never shares its CPU with the network. A box serving fio clients keeps polling on one CPU
//! that runs no job: the boot CPU, or the one `net.cpu=` names ([`polling_cpu`]).

use crate::arch::console::kprintln;
use crate::arch::{exit, time};
use crate::dev::netif;
use alloc::format;
use alloc::string::String;
use net::{Addressing, NetConfig, Nic, Stack};

/// How long the bring-up waits for a DHCP lease.
const DHCP_WAIT_MS: u64 = 10_000;
/// How long `test=net` waits for an echo reply, and how often it asks again.
const PING_WAIT_MS: u64 = 10_000;
const PING_EVERY_MS: u64 = 1_000;
/// Pause between polls while waiting (the NIC is polled, not interrupt-driven).
const POLL_PAUSE_US: u64 = 200;

static CONFIG: spin::Once<NetConfig> = spin::Once::new();

/// Parses the `net.*` words among `words` (once, at boot).
pub fn configure(words: &[&str]) -> Result<(), String> {
    let net_words = words.iter().copied().filter(|w| w.starts_with("net."));
    let config = NetConfig::parse(net_words).map_err(|e| format!("command line: {e}"))?;
    CONFIG.call_once(|| config);
    Ok(())
}

/// The CPU `net.cpu=` names to poll the stack while the box serves, if any.
pub fn polling_cpu() -> Option<u32> {
    CONFIG.get().and_then(|c| c.cpu)
}

fn config() -> NetConfig {
    CONFIG.get().cloned().unwrap_or_default()
}

fn now_ms() -> u64 {
    time::now_ns() / 1_000_000
}

/// Polls `stack` over `nic` until `done` says so or `wait_ms` pass; false on timeout.
fn poll_until(
    stack: &mut Stack,
    nic: &mut dyn Nic,
    wait_ms: u64,
    mut done: impl FnMut(&mut Stack, &mut dyn Nic, u64) -> bool,
) -> Result<bool, String> {
    let start = now_ms();
    loop {
        let now = now_ms();
        stack.poll(nic, now).map_err(|e| format!("{e}"))?;
        if done(stack, nic, now) {
            return Ok(true);
        }
        if now.saturating_sub(start) >= wait_ms {
            return Ok(false);
        }
        time::delay_us(POLL_PAUSE_US);
    }
}

/// What the bring-up ended with.
enum BringUp {
    NoInterface,
    Up(String),
}

/// What runs on the stack once the interface is up (`test=net`'s ping).
type OnceUp<'a> = &'a mut dyn FnMut(&mut Stack, &mut dyn Nic) -> Result<(), String>;

/// Brings the chosen interface up and prints its line; with `then`, runs it on the stack.
fn bring_up(then: Option<OnceUp<'_>>) -> Result<BringUp, String> {
    let config = config();
    netif::with(|registry| {
        if registry.is_empty() {
            return Ok(BringUp::NoInterface);
        }
        let count = registry.len();
        let interface = registry.choose(config.interface.as_ref()).map_err(|e| format!("{e}"))?;
        let described = interface.describe();
        if count > 1 && config.interface.is_none() {
            kprintln!("net: {count} interfaces: {described} is used (net.if= chooses another)");
        }
        let name = interface.name.clone();
        let nic: &mut dyn Nic = interface.nic().map_err(|e| format!("{e}"))?;
        if !Stack::link_up(nic) {
            kprintln!("net: {described}: link down, waiting for it");
        }
        let mut stack = Stack::new(nic, config.addressing, now_ms());
        let wait = match config.addressing {
            Addressing::Dhcp => DHCP_WAIT_MS,
            Addressing::Static(_) => 0,
        };
        let configured = poll_until(&mut stack, nic, wait, |s, n, _| {
            s.configured().is_some() && Stack::link_up(n)
        })?;
        let Some(address) = stack.configured().filter(|_| configured) else {
            return Err(format!(
                "{described}: no DHCP lease within {} s (link {:?})",
                DHCP_WAIT_MS / 1000,
                nic.link()
            ));
        };
        kprintln!("net: {name} {} {address}", nic.mac());
        if let Some(then) = then {
            then(&mut stack, nic)?;
        }
        Ok(BringUp::Up(name))
    })
}

/// Brings the chosen interface up (as at boot, with its console line) and hands its stack and
/// NIC to `serve`, which keeps them as long as it runs (the fio server). Err when there is no
/// interface, no address, or `serve` fails.
pub fn serve_on_interface(serve: &mut dyn FnMut(&mut Stack, &mut dyn Nic) -> Result<(), String>) -> Result<(), String> {
    match bring_up(Some(serve))? {
        BringUp::NoInterface => Err("no network interface (QEMU: cargo xtask run --net virtio)".into()),
        BringUp::Up(_) => Ok(()),
    }
}

/// At boot, after the probes: brings the interface up when `net.*` words configure it. A
/// failure (no lease) is reported and the boot goes on: the network is not what a storage job
/// measures. Without such words a NIC is only named: waiting for a DHCP lease would delay every
/// job's first I/O for nothing (QEMU's machines carry a NIC unless told not to).
pub fn bring_up_at_boot() {
    if !config().addressed {
        netif::with(|registry| {
            if let Ok(interface) = registry.choose(None) {
                kprintln!(
                    "net: {}: not brought up (nothing in this boot uses the network; net.dhcp=on or net.ip= \
                     brings it up at boot)",
                    interface.describe()
                );
            }
        });
        return;
    }
    match bring_up(None) {
        Ok(_) => {}
        Err(e) => kprintln!("net: not configured: {e}"),
    }
}

/// `test=net`: brings the interface up, pings the gateway, and ends the run: success only when
/// the gateway answered; no NIC is SKIPPED (a failure exit: a run without a NIC proves nothing).
pub fn test() -> ! {
    kprintln!("selftest: net");
    let mut ping = |stack: &mut Stack, nic: &mut dyn Nic| -> Result<(), String> {
        let gateway = stack
            .configured()
            .and_then(|c| c.gateway)
            .ok_or_else(|| String::from("no gateway to ping (net.gw= or a DHCP router)"))?;
        let start = now_ms();
        let mut seq = 0u16;
        let mut last_sent = 0;
        let mut reply = None;
        let answered = poll_until(stack, nic, PING_WAIT_MS, |s, _, now| {
            if seq == 0 || now.saturating_sub(last_sent) >= PING_EVERY_MS {
                seq += 1;
                last_sent = now;
                if let Err(e) = s.send_ping(gateway, seq) {
                    kprintln!("net: ping {gateway}: {e}");
                }
            }
            reply = s.ping_reply();
            reply.is_some()
        })?;
        match reply.filter(|_| answered) {
            Some(r) => {
                kprintln!(
                    "net: ping {gateway}: echo reply from {} seq {} after {} ms ({} request(s) sent)",
                    r.from,
                    r.seq,
                    now_ms().saturating_sub(start),
                    seq
                );
                let c = stack.counters();
                kprintln!("net: frames in {} out {}", c.frames_in, c.frames_out);
                Ok(())
            }
            None => Err(format!(
                "ping {gateway}: no echo reply within {} s ({seq} request(s) sent)",
                PING_WAIT_MS / 1000
            )),
        }
    };
    match bring_up(Some(&mut ping)) {
        Ok(BringUp::NoInterface) => {
            kprintln!("net: SKIPPED: no network interface (QEMU: cargo xtask run --net virtio)");
            exit::failure(format_args!("test=net: SKIPPED: no network interface"))
        }
        Ok(BringUp::Up(name)) => {
            kprintln!("net: {name}: PASSED");
            exit::success()
        }
        Err(e) => exit::failure(format_args!("test=net: {e}")),
    }
}
