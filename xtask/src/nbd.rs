//! A small NBD server for scenarios whose disk must answer one read late on
//! its own (`slow_disk =` in a scenario file): the guest's request times out,
//! the driver's recovery runs, and QEMU is never stuck waiting for a monitor
//! command (QEMU's MFI ABORT and controller reset wait, inside the guest's
//! register write, for the backend request to finish; a request held with
//! blkdebug `break` would never finish).
//!
//! Protocol: the fixed newstyle handshake (`NBD_OPT_GO`, `NBD_OPT_INFO`,
//! `NBD_OPT_EXPORT_NAME`, `NBD_OPT_ABORT`; every other option is answered
//! `NBD_REP_ERR_UNSUP`, so QEMU falls back to simple replies), then simple
//! replies to READ, WRITE, FLUSH and DISC on 127.0.0.1. All integers are
//! big-endian. Each connection is served by its own thread; a delayed read is
//! answered by a thread of its own, so the other requests go on meanwhile
//! (replies may come out of order, which NBD allows: they carry the handle).
//!
//! The rule: on each connection (each boot), the first `count` reads (or
//! writes) whose range covers 512-byte sector `sector` are answered `delay`
//! late. A delayed write never reaches the image (a device that gave the
//! command up): the guest must not expect its data afterwards.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
const FLAG_NO_ZEROES: u16 = 1 << 1;
const CLIENT_FLAG_NO_ZEROES: u32 = 1 << 1;

const OPT_EXPORT_NAME: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_INFO: u32 = 6;
const OPT_GO: u32 = 7;

const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_ERR_UNSUP: u32 = (1 << 31) | 1;
const REP_ERR_UNKNOWN: u32 = (1 << 31) | 6;
const INFO_EXPORT: u16 = 0;

const TX_HAS_FLAGS: u16 = 1 << 0;
const TX_SEND_FLUSH: u16 = 1 << 2;

const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;

const EIO: u32 = 5;
const EINVAL: u32 = 22;

/// Largest request accepted (QEMU sends at most 32 MiB).
const MAX_REQUEST: u32 = 32 << 20;

/// Which requests a slow disk answers late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowOp {
    Read,
    Write,
}

/// Which requests answer late, and how late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowRule {
    /// Reads or writes.
    pub op: SlowOp,
    /// 512-byte sector a request must cover to be delayed.
    pub sector: u64,
    /// How late it is answered.
    pub delay: Duration,
    /// How many such requests per connection are delayed.
    pub count: u32,
}

impl SlowRule {
    fn covers(&self, op: SlowOp, offset: u64, len: u32) -> bool {
        let byte = self.sector.saturating_mul(512);
        op == self.op && offset <= byte && byte < offset.saturating_add(u64::from(len))
    }
}

/// A running server; stops (and closes every connection) when dropped.
pub struct NbdServer {
    port: u16,
    stop: Arc<AtomicBool>,
    delayed: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl NbdServer {
    /// Serves `image` as export `name` on 127.0.0.1 (a free port).
    pub fn start(image: &Path, name: &str, rule: SlowRule) -> Result<Self, String> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(image)
            .map_err(|e| format!("nbd: opening {}: {e}", image.display()))?;
        let size = file
            .metadata()
            .map_err(|e| format!("nbd: {}: {e}", image.display()))?
            .len();
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("nbd: binding 127.0.0.1: {e}"))?;
        let port = listener.local_addr().map_err(|e| format!("nbd: {e}"))?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let delayed = Arc::new(AtomicU64::new(0));
        let export = Arc::new(Export {
            name: name.to_string(),
            file,
            size,
            rule,
            delayed: delayed.clone(),
            path: image.to_path_buf(),
        });
        let stop_flag = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop_flag.load(Ordering::Acquire) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let export = export.clone();
                std::thread::spawn(move || {
                    if let Err(e) = serve(conn, &export)
                        && !e.contains("connection closed")
                    {
                        eprintln!("xtask: nbd {}: {e}", export.path.display());
                    }
                });
            }
        });
        Ok(NbdServer {
            port,
            stop,
            delayed,
            thread: Some(thread),
        })
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Requests answered late so far (all connections).
    pub fn delayed(&self) -> u64 {
        self.delayed.load(Ordering::Relaxed)
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        // Release pairs with the Acquire in the accept loop; the connection wakes it up.
        self.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Export {
    name: String,
    file: File,
    size: u64,
    rule: SlowRule,
    delayed: Arc<AtomicU64>,
    path: PathBuf,
}

fn read_exact<const N: usize>(s: &mut TcpStream) -> Result<[u8; N], String> {
    let mut b = [0u8; N];
    s.read_exact(&mut b).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            "connection closed".to_string()
        } else {
            format!("reading: {e}")
        }
    })?;
    Ok(b)
}

fn read_vec(s: &mut TcpStream, len: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; len];
    s.read_exact(&mut v).map_err(|e| format!("reading {len} bytes: {e}"))?;
    Ok(v)
}

fn send(s: &mut TcpStream, bytes: &[u8]) -> Result<(), String> {
    s.write_all(bytes).map_err(|e| format!("writing: {e}"))
}

fn option_reply(s: &mut TcpStream, option: u32, kind: u32, data: &[u8]) -> Result<(), String> {
    let mut m = Vec::with_capacity(20 + data.len());
    m.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    m.extend_from_slice(&option.to_be_bytes());
    m.extend_from_slice(&kind.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    send(s, &m)
}

/// The handshake; returns Ok(true) when transmission starts, Ok(false) when the client aborted.
fn handshake(s: &mut TcpStream, export: &Export) -> Result<bool, String> {
    let mut hello = Vec::new();
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    send(s, &hello)?;
    let client_flags = u32::from_be_bytes(read_exact::<4>(s)?);
    let no_zeroes = client_flags & CLIENT_FLAG_NO_ZEROES != 0;
    let tx_flags = TX_HAS_FLAGS | TX_SEND_FLUSH;
    loop {
        let magic = u64::from_be_bytes(read_exact::<8>(s)?);
        if magic != IHAVEOPT {
            return Err(format!("option magic {magic:#x}, expected IHAVEOPT"));
        }
        let option = u32::from_be_bytes(read_exact::<4>(s)?);
        let len = u32::from_be_bytes(read_exact::<4>(s)?);
        if len > 4096 {
            return Err(format!("option {option} with {len} bytes of data"));
        }
        let data = read_vec(s, len as usize)?;
        match option {
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&data);
                if !name.is_empty() && name != export.name {
                    return Err(format!("export '{name}' requested; serving '{}'", export.name));
                }
                let mut m = Vec::new();
                m.extend_from_slice(&export.size.to_be_bytes());
                m.extend_from_slice(&tx_flags.to_be_bytes());
                if !no_zeroes {
                    m.extend_from_slice(&[0u8; 124]);
                }
                send(s, &m)?;
                return Ok(true);
            }
            OPT_GO | OPT_INFO => {
                let name_len = data
                    .get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .ok_or("NBD_OPT_GO without a name length")?;
                let name = data
                    .get(4..4 + name_len)
                    .map(String::from_utf8_lossy)
                    .ok_or("NBD_OPT_GO name longer than its data")?;
                if !name.is_empty() && name != export.name {
                    option_reply(s, option, REP_ERR_UNKNOWN, b"no such export")?;
                    continue;
                }
                let mut info = Vec::new();
                info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
                info.extend_from_slice(&export.size.to_be_bytes());
                info.extend_from_slice(&tx_flags.to_be_bytes());
                option_reply(s, option, REP_INFO, &info)?;
                option_reply(s, option, REP_ACK, &[])?;
                if option == OPT_GO {
                    return Ok(true);
                }
            }
            OPT_ABORT => {
                let _ = option_reply(s, option, REP_ACK, &[]);
                return Ok(false);
            }
            _ => option_reply(s, option, REP_ERR_UNSUP, &[])?,
        }
    }
}

fn simple_reply(out: &Mutex<TcpStream>, error: u32, handle: u64, data: &[u8]) -> Result<(), String> {
    let mut m = Vec::with_capacity(16 + data.len());
    m.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    m.extend_from_slice(&error.to_be_bytes());
    m.extend_from_slice(&handle.to_be_bytes());
    m.extend_from_slice(data);
    let mut s = out.lock().map_err(|_| "reply lock poisoned")?;
    send(&mut s, &m)
}

/// Answers from a thread of its own after the rule's delay, so the connection goes on meanwhile.
fn reply_late(export: &Export, out: &Arc<Mutex<TcpStream>>, error: u32, handle: u64, data: Vec<u8>) {
    export.delayed.fetch_add(1, Ordering::Relaxed);
    let (out, delay) = (out.clone(), export.rule.delay);
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let _ = simple_reply(&out, error, handle, &data);
    });
}

fn serve(mut s: TcpStream, export: &Export) -> Result<(), String> {
    let _ = s.set_nodelay(true);
    if !handshake(&mut s, export)? {
        return Ok(());
    }
    // Replies go through one lock (a delayed read replies from its own thread).
    let out = Arc::new(Mutex::new(s.try_clone().map_err(|e| format!("{e}"))?));
    let mut delayed_here = 0u32;
    loop {
        let hdr = read_exact::<28>(&mut s)?;
        let magic = u32::from_be_bytes(hdr[0..4].try_into().expect("4 bytes"));
        if magic != REQUEST_MAGIC {
            return Err(format!("request magic {magic:#x}"));
        }
        let kind = u16::from_be_bytes(hdr[6..8].try_into().expect("2 bytes"));
        let handle = u64::from_be_bytes(hdr[8..16].try_into().expect("8 bytes"));
        let offset = u64::from_be_bytes(hdr[16..24].try_into().expect("8 bytes"));
        let len = u32::from_be_bytes(hdr[24..28].try_into().expect("4 bytes"));
        let in_range = len <= MAX_REQUEST && offset.checked_add(u64::from(len)).is_some_and(|end| end <= export.size);
        match kind {
            CMD_READ => {
                if !in_range {
                    simple_reply(&out, EINVAL, handle, &[])?;
                    continue;
                }
                let mut data = vec![0u8; len as usize];
                let error = match export.file.read_exact_at(&mut data, offset) {
                    Ok(()) => 0,
                    Err(_) => EIO,
                };
                if error != 0 {
                    data.clear();
                }
                if export.rule.covers(SlowOp::Read, offset, len) && delayed_here < export.rule.count {
                    delayed_here += 1;
                    reply_late(export, &out, error, handle, data);
                } else {
                    simple_reply(&out, error, handle, &data)?;
                }
            }
            CMD_WRITE => {
                if len > MAX_REQUEST {
                    return Err(format!("write of {len} bytes"));
                }
                let data = read_vec(&mut s, len as usize)?;
                if in_range && export.rule.covers(SlowOp::Write, offset, len) && delayed_here < export.rule.count {
                    // Dropped, and answered late (with success: the guest gives up on it first).
                    delayed_here += 1;
                    reply_late(export, &out, 0, handle, Vec::new());
                    continue;
                }
                let error = if !in_range {
                    EINVAL
                } else if export.file.write_all_at(&data, offset).is_ok() {
                    0
                } else {
                    EIO
                };
                simple_reply(&out, error, handle, &[])?;
            }
            CMD_FLUSH => {
                let error = if export.file.sync_data().is_ok() { 0 } else { EIO };
                simple_reply(&out, error, handle, &[])?;
            }
            CMD_DISC => {
                let _ = s.shutdown(Shutdown::Both);
                return Ok(());
            }
            _ => simple_reply(&out, EINVAL, handle, &[])?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn client_go(s: &mut TcpStream, name: &str) -> u64 {
        let hello = read_exact::<18>(s).unwrap();
        assert_eq!(u64::from_be_bytes(hello[0..8].try_into().unwrap()), NBDMAGIC);
        assert_eq!(u64::from_be_bytes(hello[8..16].try_into().unwrap()), IHAVEOPT);
        s.write_all(&(1u32 | CLIENT_FLAG_NO_ZEROES).to_be_bytes()).unwrap();
        // An option the server does not know first: it must answer ERR_UNSUP and go on.
        let mut m = Vec::new();
        m.extend_from_slice(&IHAVEOPT.to_be_bytes());
        m.extend_from_slice(&8u32.to_be_bytes()); // NBD_OPT_STRUCTURED_REPLY
        m.extend_from_slice(&0u32.to_be_bytes());
        s.write_all(&m).unwrap();
        let r = read_exact::<20>(s).unwrap();
        assert_eq!(u32::from_be_bytes(r[12..16].try_into().unwrap()), REP_ERR_UNSUP);
        let mut m = Vec::new();
        m.extend_from_slice(&IHAVEOPT.to_be_bytes());
        m.extend_from_slice(&OPT_GO.to_be_bytes());
        m.extend_from_slice(&(4 + name.len() as u32 + 2).to_be_bytes());
        m.extend_from_slice(&(name.len() as u32).to_be_bytes());
        m.extend_from_slice(name.as_bytes());
        m.extend_from_slice(&0u16.to_be_bytes());
        s.write_all(&m).unwrap();
        let r = read_exact::<20>(s).unwrap();
        assert_eq!(u32::from_be_bytes(r[12..16].try_into().unwrap()), REP_INFO);
        let info = read_exact::<12>(s).unwrap();
        let size = u64::from_be_bytes(info[2..10].try_into().unwrap());
        let r = read_exact::<20>(s).unwrap();
        assert_eq!(u32::from_be_bytes(r[12..16].try_into().unwrap()), REP_ACK);
        size
    }

    fn request(s: &mut TcpStream, kind: u16, handle: u64, offset: u64, len: u32, data: &[u8]) {
        let mut m = Vec::new();
        m.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        m.extend_from_slice(&0u16.to_be_bytes());
        m.extend_from_slice(&kind.to_be_bytes());
        m.extend_from_slice(&handle.to_be_bytes());
        m.extend_from_slice(&offset.to_be_bytes());
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(data);
        s.write_all(&m).unwrap();
    }

    fn reply(s: &mut TcpStream, data_len: usize) -> (u32, u64, Vec<u8>) {
        let r = read_exact::<16>(s).unwrap();
        assert_eq!(u32::from_be_bytes(r[0..4].try_into().unwrap()), SIMPLE_REPLY_MAGIC);
        let error = u32::from_be_bytes(r[4..8].try_into().unwrap());
        let handle = u64::from_be_bytes(r[8..16].try_into().unwrap());
        let data = if error == 0 {
            read_vec(s, data_len).unwrap()
        } else {
            Vec::new()
        };
        (error, handle, data)
    }

    #[test]
    fn serves_reads_and_writes_and_answers_the_covering_read_late_out_of_order() {
        let dir = std::env::temp_dir().join(format!("baremq-nbd-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("d.img");
        std::fs::write(&image, vec![0u8; 1 << 20]).unwrap();
        let rule = SlowRule {
            op: SlowOp::Read,
            sector: 16,
            delay: Duration::from_millis(400),
            count: 1,
        };
        let server = NbdServer::start(&image, "d0", rule).unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        assert_eq!(client_go(&mut s, "d0"), 1 << 20);
        // Write sector 16's 4 KiB block, read it back: the read covering sector 16 is late, and a
        // read sent after it is answered first.
        request(&mut s, CMD_WRITE, 1, 8192, 4096, &[0xAB; 4096]);
        assert_eq!(reply(&mut s, 0).0, 0);
        let t0 = Instant::now();
        request(&mut s, CMD_READ, 2, 8192, 4096, &[]);
        request(&mut s, CMD_READ, 3, 0, 512, &[]);
        let (e, h, d) = reply(&mut s, 512);
        // Handle 3 answered before handle 2: the other read did not wait behind the late one
        // (the order proves it; a wall-clock bound would flake on a loaded machine).
        assert_eq!((e, h, d.len()), (0, 3, 512));
        let (e, h, d) = reply(&mut s, 4096);
        assert_eq!((e, h), (0, 2));
        assert!(d.iter().all(|&b| b == 0xAB));
        assert!(
            t0.elapsed() >= Duration::from_millis(400),
            "the covering read was not delayed"
        );
        // Only the first covering read is late.
        request(&mut s, CMD_READ, 4, 8192, 4096, &[]);
        assert_eq!(reply(&mut s, 4096).1, 4);
        assert_eq!(server.delayed(), 1);
        // Beyond the end: EINVAL, and the connection goes on.
        request(&mut s, CMD_READ, 5, (1 << 20) - 512, 1024, &[]);
        assert_eq!(reply(&mut s, 0).0, EINVAL);
        request(&mut s, CMD_FLUSH, 6, 0, 0, &[]);
        assert_eq!(reply(&mut s, 0), (0, 6, Vec::new()));
        request(&mut s, CMD_DISC, 7, 0, 0, &[]);
        drop(server);
        assert_eq!(std::fs::read(&image).unwrap()[8192..12288], [0xAB; 4096]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_covering_write_is_dropped_and_answered_late() {
        let dir = std::env::temp_dir().join(format!("baremq-nbd-wtest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("d.img");
        std::fs::write(&image, vec![0u8; 64 << 10]).unwrap();
        let rule = SlowRule {
            op: SlowOp::Write,
            sector: 8,
            delay: Duration::from_millis(400),
            count: 1,
        };
        let server = NbdServer::start(&image, "w", rule).unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        assert_eq!(client_go(&mut s, "w"), 64 << 10);
        // A read covering sector 8 is not delayed by a write rule.
        let t0 = Instant::now();
        request(&mut s, CMD_READ, 1, 4096, 4096, &[]);
        assert_eq!(reply(&mut s, 4096).1, 1);
        assert_eq!(server.delayed(), 0);
        request(&mut s, CMD_WRITE, 2, 4096, 4096, &[0x5A; 4096]);
        request(&mut s, CMD_WRITE, 3, 0, 512, &[0x11; 512]);
        assert_eq!(reply(&mut s, 0), (0, 3, Vec::new()));
        assert_eq!(reply(&mut s, 0), (0, 2, Vec::new()));
        assert!(t0.elapsed() >= Duration::from_millis(400));
        assert_eq!(server.delayed(), 1);
        // Only the first covering write is delayed (and dropped); the next one lands.
        request(&mut s, CMD_WRITE, 4, 4096, 512, &[0x77; 512]);
        assert_eq!(reply(&mut s, 0), (0, 4, Vec::new()));
        request(&mut s, CMD_DISC, 5, 0, 0, &[]);
        drop(server);
        let bytes = std::fs::read(&image).unwrap();
        assert_eq!(bytes[..512], [0x11; 512]);
        assert_eq!(bytes[4096..4608], [0x77; 512]);
        assert_eq!(
            bytes[4608..8192],
            [0; 3584],
            "the delayed write never reached the image"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
