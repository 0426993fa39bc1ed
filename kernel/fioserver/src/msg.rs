//! The small messages of fio 3.33's protocol: opcodes, PROBE, JOB, JOBLINE, TEXT, START, STOP,
//! JOB_OPT and the requests a server refuses. Every structure is little endian, with the sizes
//! and offsets of fio's C structures written as constants.

use crate::Error;
use crate::wire::{Fields, put_cstr, put_u16, put_u32, put_u64, text_until_nul};
use alloc::string::String;
use alloc::vec::Vec;

/// fio 3.33's command opcodes (`FIO_NET_CMD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Opcode {
    Quit = 1,
    Exit = 2,
    Job = 3,
    JobLine = 4,
    Text = 5,
    Ts = 6,
    Gs = 7,
    SendEta = 8,
    Eta = 9,
    Probe = 10,
    Start = 11,
    Stop = 12,
    Du = 13,
    ServerStart = 14,
    AddJob = 15,
    Run = 16,
    IoLog = 17,
    UpdateJob = 18,
    LoadFile = 19,
    VTrigger = 20,
    SendFile = 21,
    JobOpt = 22,
}

impl Opcode {
    /// Names a wire opcode, or says it is not one of fio 3.33's.
    pub fn from_wire(op: u16) -> Result<Self, Error> {
        use Opcode::*;
        const ALL: [Opcode; 22] = [
            Quit,
            Exit,
            Job,
            JobLine,
            Text,
            Ts,
            Gs,
            SendEta,
            Eta,
            Probe,
            Start,
            Stop,
            Du,
            ServerStart,
            AddJob,
            Run,
            IoLog,
            UpdateJob,
            LoadFile,
            VTrigger,
            SendFile,
            JobOpt,
        ];
        ALL.iter()
            .copied()
            .find(|o| *o as u16 == op)
            .ok_or(Error::UnknownOpcode(op))
    }
}

/// The client type fio's command-line client sends (`FIO_CLIENT_TYPE_CLI`).
pub const CLIENT_TYPE_CLI: u32 = 1;

/// PROBE flag: the peer can take zlib-compressed logs. This server never sets it, so nothing
/// it sends or receives is compressed.
pub const PROBE_FLAG_ZLIB: u64 = 1 << 0;

/// `struct cmd_client_probe_pdu`: what the client sends with PROBE.
pub const CLIENT_PROBE_LEN: usize = 136;
pub const CLIENT_PROBE_FLAGS: usize = 0;
pub const CLIENT_PROBE_SERVER: usize = 8;
pub const CLIENT_PROBE_SERVER_LEN: usize = 128;

/// The client's PROBE: its flags and the name it used for this server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientProbe {
    pub flags: u64,
    pub server: String,
}

impl ClientProbe {
    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, CLIENT_PROBE_LEN, "PROBE")?;
        Ok(Self {
            flags: f.u64(CLIENT_PROBE_FLAGS)?,
            server: f.cstr(CLIENT_PROBE_SERVER, CLIENT_PROBE_SERVER_LEN)?,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = alloc::vec![0u8; CLIENT_PROBE_LEN];
        put_u64(&mut b, CLIENT_PROBE_FLAGS, self.flags);
        put_cstr(&mut b, CLIENT_PROBE_SERVER, CLIENT_PROBE_SERVER_LEN, &self.server);
        b
    }
}

/// `struct cmd_probe_reply_pdu`: the server's answer to PROBE.
pub const PROBE_REPLY_LEN: usize = 112;
pub const PROBE_REPLY_HOSTNAME: usize = 0;
pub const PROBE_REPLY_HOSTNAME_LEN: usize = 64;
pub const PROBE_REPLY_BIGENDIAN: usize = 64;
pub const PROBE_REPLY_FIO_VERSION: usize = 65;
pub const PROBE_REPLY_FIO_VERSION_LEN: usize = 32;
pub const PROBE_REPLY_OS: usize = 97;
pub const PROBE_REPLY_ARCH: usize = 98;
pub const PROBE_REPLY_BPP: usize = 99;
pub const PROBE_REPLY_CPUS: usize = 100;
pub const PROBE_REPLY_FLAGS: usize = 104;

/// fio's OS codes (index into the client's names; 1 is "Linux").
pub const OS_LINUX: u8 = 1;
/// fio's architecture codes (1 is "x86-64").
pub const ARCH_X86_64: u8 = 1;

/// What a box says about itself in its PROBE reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeReply {
    /// Up to 63 bytes reach the client; it names the server by this in its output.
    pub hostname: String,
    pub big_endian: bool,
    /// Up to 31 bytes, shown as `fio=` by the client.
    pub fio_version: String,
    pub os: u8,
    pub arch: u8,
    /// Bytes per pointer (the client prints `bpp * 8`-bit).
    pub bpp: u8,
    pub cpus: u32,
    pub flags: u64,
}

impl ProbeReply {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = alloc::vec![0u8; PROBE_REPLY_LEN];
        put_cstr(&mut b, PROBE_REPLY_HOSTNAME, PROBE_REPLY_HOSTNAME_LEN, &self.hostname);
        b[PROBE_REPLY_BIGENDIAN] = u8::from(self.big_endian);
        put_cstr(
            &mut b,
            PROBE_REPLY_FIO_VERSION,
            PROBE_REPLY_FIO_VERSION_LEN,
            &self.fio_version,
        );
        b[PROBE_REPLY_OS] = self.os;
        b[PROBE_REPLY_ARCH] = self.arch;
        b[PROBE_REPLY_BPP] = self.bpp;
        put_u32(&mut b, PROBE_REPLY_CPUS, self.cpus);
        put_u64(&mut b, PROBE_REPLY_FLAGS, self.flags);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, PROBE_REPLY_LEN, "PROBE reply")?;
        Ok(Self {
            hostname: f.cstr(PROBE_REPLY_HOSTNAME, PROBE_REPLY_HOSTNAME_LEN)?,
            big_endian: f.u8(PROBE_REPLY_BIGENDIAN)? != 0,
            fio_version: f.cstr(PROBE_REPLY_FIO_VERSION, PROBE_REPLY_FIO_VERSION_LEN)?,
            os: f.u8(PROBE_REPLY_OS)?,
            arch: f.u8(PROBE_REPLY_ARCH)?,
            bpp: f.u8(PROBE_REPLY_BPP)?,
            cpus: f.u32(PROBE_REPLY_CPUS)?,
            flags: f.u64(PROBE_REPLY_FLAGS)?,
        })
    }
}

/// `struct cmd_job_pdu`: a job file's text after an 8-byte head.
pub const JOB_HEAD_LEN: usize = 8;
pub const JOB_BUF_LEN: usize = 0;
pub const JOB_CLIENT_TYPE: usize = 4;

/// JOB: the text of a job file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFile {
    pub client_type: u32,
    /// The text up to the first NUL within `buf_len`: the fio client sends its buffer with
    /// 8 KiB of room past the end of the file.
    pub text: Vec<u8>,
}

impl JobFile {
    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, JOB_HEAD_LEN, "JOB")?;
        let buf_len = f.u32(JOB_BUF_LEN)? as usize;
        let room = payload.len() - JOB_HEAD_LEN;
        if buf_len > room {
            return Err(Error::LengthOutOfRange {
                what: "JOB buf_len",
                len: buf_len,
                limit: room,
            });
        }
        let buf = &payload[JOB_HEAD_LEN..JOB_HEAD_LEN + buf_len];
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(Self {
            client_type: f.u32(JOB_CLIENT_TYPE)?,
            text: buf[..end].to_vec(),
        })
    }

    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        let len = u32::try_from(self.text.len()).map_err(|_| Error::ValueOutOfRange {
            what: "JOB text length",
        })?;
        let mut b = alloc::vec![0u8; JOB_HEAD_LEN];
        put_u32(&mut b, JOB_BUF_LEN, len);
        put_u32(&mut b, JOB_CLIENT_TYPE, self.client_type);
        b.extend_from_slice(&self.text);
        Ok(b)
    }
}

/// `struct cmd_line_pdu` (4 bytes: lines, client_type), then per argument a
/// `struct cmd_single_line_pdu` (u16 length including the NUL, then the text).
pub const JOBLINE_HEAD_LEN: usize = 4;
pub const JOBLINE_LINES: usize = 0;
pub const JOBLINE_CLIENT_TYPE: usize = 2;

/// JOBLINE: the client's command-line arguments meant for the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLine {
    pub client_type: u16,
    pub args: Vec<String>,
}

impl JobLine {
    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, JOBLINE_HEAD_LEN, "JOBLINE")?;
        let lines = usize::from(f.u16(JOBLINE_LINES)?);
        // Every argument takes at least its 2-byte length: a count the payload cannot hold is
        // refused before anything is allocated for it.
        let most = (payload.len() - JOBLINE_HEAD_LEN) / 2;
        if lines > most {
            return Err(Error::LengthOutOfRange {
                what: "JOBLINE lines",
                len: lines,
                limit: most,
            });
        }
        let mut args = Vec::with_capacity(lines);
        let mut off = JOBLINE_HEAD_LEN;
        for _ in 0..lines {
            let len = usize::from(f.u16(off)?);
            let start = off + 2;
            let room = payload.len() - start.min(payload.len());
            if len > room {
                return Err(Error::LengthOutOfRange {
                    what: "JOBLINE argument",
                    len,
                    limit: room,
                });
            }
            args.push(text_until_nul(&payload[start..start + len]));
            off = start + len;
        }
        Ok(Self {
            client_type: f.u16(JOBLINE_CLIENT_TYPE)?,
            args,
        })
    }

    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        let lines = u16::try_from(self.args.len()).map_err(|_| Error::ValueOutOfRange { what: "JOBLINE lines" })?;
        let mut b = alloc::vec![0u8; JOBLINE_HEAD_LEN];
        put_u16(&mut b, JOBLINE_LINES, lines);
        put_u16(&mut b, JOBLINE_CLIENT_TYPE, self.client_type);
        for a in &self.args {
            let len = u16::try_from(a.len() + 1).map_err(|_| Error::ValueOutOfRange {
                what: "JOBLINE argument",
            })?;
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(a.as_bytes());
            b.push(0);
        }
        Ok(b)
    }
}

/// `struct cmd_text_pdu`: a log line, after a 24-byte head.
pub const TEXT_HEAD_LEN: usize = 24;
pub const TEXT_LEVEL: usize = 0;
pub const TEXT_BUF_LEN: usize = 4;
pub const TEXT_LOG_SEC: usize = 8;
pub const TEXT_LOG_USEC: usize = 16;

/// fio's log levels (`FIO_LOG_*`).
pub const LOG_DEBUG: u32 = 0;
pub const LOG_INFO: u32 = 1;
pub const LOG_ERR: u32 = 2;

/// TEXT: a line for the client to print (it prints every level to its output, prefixed with
/// `<hostname> `).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Text {
    pub level: u32,
    pub log_sec: u64,
    pub log_usec: u64,
    pub text: String,
}

impl Text {
    /// `buf_len` is exactly the text's length: the client writes a NUL at `buf[buf_len]`, in the
    /// one spare byte it allocates past the payload.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        let len = u32::try_from(self.text.len()).map_err(|_| Error::ValueOutOfRange { what: "TEXT length" })?;
        let mut b = alloc::vec![0u8; TEXT_HEAD_LEN];
        put_u32(&mut b, TEXT_LEVEL, self.level);
        put_u32(&mut b, TEXT_BUF_LEN, len);
        put_u64(&mut b, TEXT_LOG_SEC, self.log_sec);
        put_u64(&mut b, TEXT_LOG_USEC, self.log_usec);
        b.extend_from_slice(self.text.as_bytes());
        Ok(b)
    }

    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, TEXT_HEAD_LEN, "TEXT")?;
        let len = f.u32(TEXT_BUF_LEN)? as usize;
        let room = payload.len() - TEXT_HEAD_LEN;
        if len > room {
            return Err(Error::LengthOutOfRange {
                what: "TEXT buf_len",
                len,
                limit: room,
            });
        }
        Ok(Self {
            level: f.u32(TEXT_LEVEL)?,
            log_sec: f.u64(TEXT_LOG_SEC)?,
            log_usec: f.u64(TEXT_LOG_USEC)?,
            text: text_until_nul(&payload[TEXT_HEAD_LEN..TEXT_HEAD_LEN + len]),
        })
    }
}

/// `struct cmd_start_pdu`: sent after a job file is accepted.
pub const START_LEN: usize = 8;
pub const START_JOBS: usize = 0;
pub const START_STAT_OUTPUTS: usize = 4;

/// START: how many jobs the accepted job file made, and how many TS reports will follow
/// (jobs, or groups under `group_reporting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    pub jobs: u32,
    pub stat_outputs: u32,
}

impl Start {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = alloc::vec![0u8; START_LEN];
        put_u32(&mut b, START_JOBS, self.jobs);
        put_u32(&mut b, START_STAT_OUTPUTS, self.stat_outputs);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, START_LEN, "START")?;
        Ok(Self {
            jobs: f.u32(START_JOBS)?,
            stat_outputs: f.u32(START_STAT_OUTPUTS)?,
        })
    }
}

/// `struct cmd_end_pdu`: STOP's payload, the run's exit value and signal.
pub const STOP_LEN: usize = 8;
pub const STOP_ERROR: usize = 0;
pub const STOP_SIGNAL: usize = 4;

/// STOP: the run is over; a non-zero `error` makes the client print
/// `client <host>: exited with error N` and exit with failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stop {
    pub error: u32,
    pub signal: u32,
}

impl Stop {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = alloc::vec![0u8; STOP_LEN];
        put_u32(&mut b, STOP_ERROR, self.error);
        put_u32(&mut b, STOP_SIGNAL, self.signal);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, STOP_LEN, "STOP")?;
        Ok(Self {
            error: f.u32(STOP_ERROR)?,
            signal: f.u32(STOP_SIGNAL)?,
        })
    }
}

/// `struct cmd_job_option`: one option of a job (or of the global section), for the client's
/// JSON `job options`.
pub const JOB_OPT_LEN: usize = 200;
pub const JOB_OPT_GLOBAL: usize = 0;
pub const JOB_OPT_TRUNCATED: usize = 2;
pub const JOB_OPT_GROUPID: usize = 4;
pub const JOB_OPT_NAME: usize = 8;
pub const JOB_OPT_NAME_LEN: usize = 64;
pub const JOB_OPT_VALUE: usize = 72;
pub const JOB_OPT_VALUE_LEN: usize = 128;

/// JOB_OPT: `job` is the index of the TS report it belongs to (fio calls the field groupid),
/// or `None` for the global section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOption {
    pub job: Option<u32>,
    pub name: String,
    pub value: String,
    /// Set on decode when the sender had to cut the name or value.
    pub truncated: bool,
}

impl JobOption {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = alloc::vec![0u8; JOB_OPT_LEN];
        put_u16(&mut b, JOB_OPT_GLOBAL, u16::from(self.job.is_none()));
        put_u32(&mut b, JOB_OPT_GROUPID, self.job.unwrap_or(0));
        let cut_name = put_cstr(&mut b, JOB_OPT_NAME, JOB_OPT_NAME_LEN, &self.name);
        let cut_value = put_cstr(&mut b, JOB_OPT_VALUE, JOB_OPT_VALUE_LEN, &self.value);
        put_u16(
            &mut b,
            JOB_OPT_TRUNCATED,
            u16::from(self.truncated || cut_name || cut_value),
        );
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, JOB_OPT_LEN, "JOB_OPT")?;
        let global = f.u16(JOB_OPT_GLOBAL)? != 0;
        Ok(Self {
            job: if global { None } else { Some(f.u32(JOB_OPT_GROUPID)?) },
            name: f.cstr(JOB_OPT_NAME, JOB_OPT_NAME_LEN)?,
            value: f.cstr(JOB_OPT_VALUE, JOB_OPT_VALUE_LEN)?,
            truncated: f.u16(JOB_OPT_TRUNCATED)? != 0,
        })
    }
}

/// `struct cmd_load_file_pdu`: the name of a job file on the server's own disk
/// (`--remote-config`). The head is 4 bytes (name_len, client_type), then the name.
pub const LOAD_FILE_HEAD_LEN: usize = 4;

/// `struct cmd_vtrigger_pdu`: a command to run after a verify-state dump. Head: u16 length.
pub const VTRIGGER_HEAD_LEN: usize = 2;

/// `struct cmd_sendfile_reply`: the client's answer with a file the server asked for.
pub const SENDFILE_REPLY_HEAD_LEN: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    #[test]
    fn opcodes_are_fio_3_33s() {
        assert_eq!(Opcode::from_wire(10), Ok(Opcode::Probe));
        assert_eq!(Opcode::from_wire(22), Ok(Opcode::JobOpt));
        assert_eq!(Opcode::Run as u16, 16);
        assert_eq!(Opcode::ServerStart as u16, 14);
        assert_eq!(Opcode::VTrigger as u16, 20);
        assert_eq!(Opcode::from_wire(23), Err(Error::UnknownOpcode(23)));
        for op in 1..=22 {
            assert_eq!(Opcode::from_wire(op).unwrap() as u16, op);
        }
    }

    #[test]
    fn probe_reply_golden_layout() {
        let p = ProbeReply {
            hostname: "box-1".to_string(),
            big_endian: false,
            fio_version: "fio-3.33".to_string(),
            os: OS_LINUX,
            arch: ARCH_X86_64,
            bpp: 8,
            cpus: 0x0102_0304,
            flags: 0,
        };
        let b = p.encode();
        assert_eq!(b.len(), PROBE_REPLY_LEN);
        assert_eq!(&b[0..6], b"box-1\0");
        assert_eq!(b[64], 0);
        assert_eq!(&b[65..74], b"fio-3.33\0");
        assert_eq!((b[97], b[98], b[99]), (1, 1, 8));
        // cpus is 4-aligned after the three code bytes.
        assert_eq!((PROBE_REPLY_CPUS, PROBE_REPLY_FLAGS), (100, 104));
        assert_eq!(&b[100..104], &[4, 3, 2, 1]);
        assert_eq!(&b[104..112], &[0; 8]);
        assert_eq!(ProbeReply::decode(&b).unwrap(), p);
    }

    #[test]
    fn long_hostname_is_cut_with_a_nul() {
        let p = ProbeReply {
            hostname: "h".repeat(100),
            big_endian: false,
            fio_version: "v".repeat(40),
            os: 1,
            arch: 1,
            bpp: 8,
            cpus: 1,
            flags: 0,
        };
        let b = p.encode();
        assert_eq!(b[63], 0);
        assert_eq!(b[96], 0);
        let back = ProbeReply::decode(&b).unwrap();
        assert_eq!(back.hostname.len(), 63);
        assert_eq!(back.fio_version.len(), 31);
    }

    #[test]
    fn client_probe_golden_layout() {
        let mut b = vec![0u8; CLIENT_PROBE_LEN];
        b[0] = 1; // zlib
        b[8..17].copy_from_slice(b"127.0.0.1");
        let p = ClientProbe::decode(&b).unwrap();
        assert_eq!(
            p,
            ClientProbe {
                flags: PROBE_FLAG_ZLIB,
                server: "127.0.0.1".to_string()
            }
        );
        assert_eq!(p.encode(), b);
        assert!(matches!(
            ClientProbe::decode(&b[..135]),
            Err(Error::Truncated { need: 136, .. })
        ));
    }

    #[test]
    fn job_file_golden_layout_and_slack() {
        let mut b = vec![0u8; 8];
        b[0..4].copy_from_slice(&20u32.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(b"[a]\nrw=read\n");
        b.extend_from_slice(&[0; 8]); // the client's slack after the text
        let j = JobFile::decode(&b).unwrap();
        assert_eq!(j.text, b"[a]\nrw=read\n");
        assert_eq!(j.client_type, CLIENT_TYPE_CLI);
        b[0..4].copy_from_slice(&21u32.to_le_bytes());
        assert_eq!(
            JobFile::decode(&b),
            Err(Error::LengthOutOfRange {
                what: "JOB buf_len",
                len: 21,
                limit: 20
            })
        );
        let enc = JobFile {
            client_type: 1,
            text: b"x=1".to_vec(),
        }
        .encode()
        .unwrap();
        assert_eq!(enc, [3, 0, 0, 0, 1, 0, 0, 0, b'x', b'=', b'1']);
    }

    #[test]
    fn jobline_golden_layout() {
        let l = JobLine {
            client_type: 1,
            args: vec!["fio".to_string(), "--bs=4k".to_string()],
        };
        let b = l.encode().unwrap();
        let mut expected = vec![2, 0, 1, 0, 4, 0];
        expected.extend_from_slice(b"fio\0");
        expected.extend_from_slice(&[8, 0]);
        expected.extend_from_slice(b"--bs=4k\0");
        assert_eq!(b, expected);
        assert_eq!(JobLine::decode(&b).unwrap(), l);
    }

    #[test]
    fn jobline_counts_are_checked() {
        // 1000 lines claimed in a 6-byte payload.
        let b = [0xE8, 0x03, 1, 0, 0, 0];
        assert!(matches!(
            JobLine::decode(&b),
            Err(Error::LengthOutOfRange {
                what: "JOBLINE lines",
                ..
            })
        ));
        // One line whose length runs past the payload.
        let b = [1, 0, 1, 0, 9, 0, b'a', 0];
        assert!(matches!(
            JobLine::decode(&b),
            Err(Error::LengthOutOfRange {
                what: "JOBLINE argument",
                len: 9,
                limit: 2
            })
        ));
    }

    #[test]
    fn text_golden_layout() {
        let t = Text {
            level: LOG_ERR,
            log_sec: 7,
            log_usec: 9,
            text: "no\n".to_string(),
        };
        let b = t.encode().unwrap();
        assert_eq!(&b[0..4], &[2, 0, 0, 0]);
        assert_eq!(&b[4..8], &[3, 0, 0, 0]);
        assert_eq!(&b[8..16], &7u64.to_le_bytes());
        assert_eq!(&b[16..24], &9u64.to_le_bytes());
        assert_eq!(&b[24..], b"no\n");
        assert_eq!(Text::decode(&b).unwrap(), t);
        let mut bad = b.clone();
        bad[4] = 4;
        assert!(matches!(Text::decode(&bad), Err(Error::LengthOutOfRange { .. })));
    }

    #[test]
    fn start_stop_golden_layouts() {
        assert_eq!(
            Start {
                jobs: 2,
                stat_outputs: 3
            }
            .encode(),
            [2, 0, 0, 0, 3, 0, 0, 0]
        );
        assert_eq!(Stop { error: 22, signal: 0 }.encode(), [22, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            Stop::decode(&[1, 0, 0, 0, 9, 0, 0, 0]).unwrap(),
            Stop { error: 1, signal: 9 }
        );
        assert_eq!(
            Start::decode(&[5, 0, 0, 0, 5, 0, 0, 0]).unwrap(),
            Start {
                jobs: 5,
                stat_outputs: 5
            }
        );
    }

    #[test]
    fn job_option_golden_layout() {
        let o = JobOption {
            job: Some(1),
            name: "rw".to_string(),
            value: "read".to_string(),
            truncated: false,
        };
        let b = o.encode();
        assert_eq!(b.len(), 200);
        assert_eq!(&b[0..8], &[0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(&b[8..11], b"rw\0");
        assert_eq!(&b[72..77], b"read\0");
        assert_eq!(JobOption::decode(&b).unwrap(), o);
        let g = JobOption {
            job: None,
            name: "n".repeat(70),
            value: String::new(),
            truncated: false,
        };
        let b = g.encode();
        assert_eq!(&b[0..4], &[1, 0, 1, 0]);
        assert!(JobOption::decode(&b).unwrap().truncated);
    }
}
