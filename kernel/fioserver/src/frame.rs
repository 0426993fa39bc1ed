//! Commands on the wire: the 24-byte header (`struct fio_net_cmd`), its CRCs, splitting a payload
//! into fragments of at most 1024 bytes, and a streaming decoder that reassembles them.

use crate::crc16::crc16;
use crate::wire::{Fields, put_u16, put_u32, put_u64};
use crate::{Error, Opcode};
use alloc::vec::Vec;

/// The protocol version fio 3.33 speaks (`FIO_SERVER_VER`); fio accepts no other.
pub const SERVER_VERSION: u16 = 97;
/// The largest payload one fragment carries (`FIO_SERVER_MAX_FRAGMENT_PDU`).
pub const MAX_FRAGMENT_PAYLOAD: usize = 1024;
/// Header flag: more fragments of this command follow (`FIO_NET_CMD_F_MORE`).
pub const FLAG_MORE: u32 = 1 << 0;
/// The TCP port fio uses when none is given (`FIO_NET_PORT`).
pub const DEFAULT_PORT: u16 = 8765;

/// Size of the command header.
pub const HEADER_LEN: usize = 24;
/// Field offsets in the header; every field little endian.
pub const HEADER_VERSION: usize = 0;
pub const HEADER_OPCODE: usize = 2;
pub const HEADER_FLAGS: usize = 4;
pub const HEADER_TAG: usize = 8;
pub const HEADER_PDU_LEN: usize = 16;
pub const HEADER_CMD_CRC: usize = 20;
pub const HEADER_PDU_CRC: usize = 22;
/// The header CRC covers every byte before the two CRC fields.
pub const HEADER_CRC_SPAN: usize = HEADER_CMD_CRC;

/// One decoded header, its CRC and version already checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub opcode: u16,
    pub flags: u32,
    pub tag: u64,
    pub pdu_len: u32,
    pub pdu_crc: u16,
}

impl Header {
    /// Checks and decodes the 24 header bytes in fio's order: header CRC, then version, then
    /// the fragment size.
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> Result<Self, Error> {
        let f = Fields::new(bytes, HEADER_LEN, "command header")?;
        let sent = f.u16(HEADER_CMD_CRC)?;
        let computed = crc16(&bytes[..HEADER_CRC_SPAN]);
        if sent != computed {
            return Err(Error::BadHeaderCrc { sent, computed });
        }
        let version = f.u16(HEADER_VERSION)?;
        if version != SERVER_VERSION {
            return Err(Error::VersionMismatch {
                sent: version,
                expected: SERVER_VERSION,
            });
        }
        let pdu_len = f.u32(HEADER_PDU_LEN)?;
        if pdu_len as usize > MAX_FRAGMENT_PAYLOAD {
            return Err(Error::FragmentTooLarge {
                len: pdu_len,
                limit: MAX_FRAGMENT_PAYLOAD as u32,
            });
        }
        Ok(Self {
            opcode: f.u16(HEADER_OPCODE)?,
            flags: f.u32(HEADER_FLAGS)?,
            tag: f.u64(HEADER_TAG)?,
            pdu_len,
            pdu_crc: f.u16(HEADER_PDU_CRC)?,
        })
    }
}

/// Appends one fragment: header with both CRCs, then `payload` (at most 1024 bytes).
fn put_fragment(out: &mut Vec<u8>, opcode: u16, flags: u32, tag: u64, payload: &[u8]) {
    debug_assert!(payload.len() <= MAX_FRAGMENT_PAYLOAD);
    let mut header = [0u8; HEADER_LEN];
    put_u16(&mut header, HEADER_VERSION, SERVER_VERSION);
    put_u16(&mut header, HEADER_OPCODE, opcode);
    put_u32(&mut header, HEADER_FLAGS, flags);
    put_u64(&mut header, HEADER_TAG, tag);
    // Bounded by MAX_FRAGMENT_PAYLOAD, so it fits.
    put_u32(&mut header, HEADER_PDU_LEN, payload.len() as u32);
    let header_crc = crc16(&header[..HEADER_CRC_SPAN]);
    put_u16(&mut header, HEADER_CMD_CRC, header_crc);
    put_u16(&mut header, HEADER_PDU_CRC, crc16(payload));
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

/// Appends the command `opcode` with `payload` to `out`, split as fio splits it: fragments of
/// 1024 bytes, each but the last flagged MORE, all with the same opcode and tag. An empty
/// payload is one bare header.
pub fn encode_command(out: &mut Vec<u8>, opcode: Opcode, tag: u64, payload: &[u8]) {
    let op = opcode as u16;
    if payload.is_empty() {
        put_fragment(out, op, 0, tag, payload);
        return;
    }
    out.reserve(payload.len() + HEADER_LEN * payload.len().div_ceil(MAX_FRAGMENT_PAYLOAD));
    let mut chunks = payload.chunks(MAX_FRAGMENT_PAYLOAD).peekable();
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_some() { FLAG_MORE } else { 0 };
        put_fragment(out, op, flags, tag, chunk);
    }
}

/// One whole command, its fragments joined and the MORE flag cleared (as fio clears it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The raw opcode: [`Opcode::from_wire`] names it.
    pub opcode: u16,
    pub flags: u32,
    pub tag: u64,
    pub payload: Vec<u8>,
}

/// The decoder's default limit on one reassembled command: room for a job file of a few
/// hundred KiB (the fio client adds 8 KiB to every job file it sends).
pub const DEFAULT_MAX_COMMAND: usize = 1 << 20;

/// Where the decoder is inside the byte stream.
#[derive(Clone, Copy, Debug)]
enum Stage {
    /// Collecting a header; `have` bytes of it so far.
    Header { have: usize },
    /// Collecting a fragment's payload of `len` bytes that starts at `start` in the buffer.
    Payload { header: Header, start: usize, len: usize },
}

/// Turns a stream of bytes, cut anywhere, into whole commands. Every length is checked before
/// any memory is taken for it, so the decoder never holds more than its limit plus one
/// fragment. After an error the stream is out of step for good: the decoder stays failed and
/// the connection should be closed, as fio closes it.
#[derive(Debug)]
pub struct Decoder {
    max_command: usize,
    header: [u8; HEADER_LEN],
    stage: Stage,
    /// The command being reassembled: its first header, and the payload so far.
    first: Option<Header>,
    payload: Vec<u8>,
    failed: Option<Error>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_COMMAND)
    }
}

impl Decoder {
    /// A decoder that refuses reassembled commands over `max_command` payload bytes.
    pub fn new(max_command: usize) -> Self {
        Self {
            max_command,
            header: [0; HEADER_LEN],
            stage: Stage::Header { have: 0 },
            first: None,
            payload: Vec::new(),
            failed: None,
        }
    }

    /// Whether the decoder is between commands (no partial header or fragment held).
    pub fn is_idle(&self) -> bool {
        matches!(self.stage, Stage::Header { have: 0 }) && self.first.is_none()
    }

    /// Bytes held for the command in progress.
    pub fn buffered(&self) -> usize {
        self.payload.len()
    }

    /// Consumes bytes from the front of `input` until one command is whole (returned) or the
    /// input runs out (`None`, everything consumed and kept).
    pub fn next_command(&mut self, input: &mut &[u8]) -> Result<Option<Command>, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.step(input);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
            self.payload = Vec::new();
        }
        result
    }

    fn step(&mut self, input: &mut &[u8]) -> Result<Option<Command>, Error> {
        loop {
            match self.stage {
                Stage::Header { have } => {
                    let take = (HEADER_LEN - have).min(input.len());
                    self.header[have..have + take].copy_from_slice(&input[..take]);
                    *input = &input[take..];
                    if have + take < HEADER_LEN {
                        self.stage = Stage::Header { have: have + take };
                        return Ok(None);
                    }
                    let header = Header::parse(&self.header)?;
                    Opcode::from_wire(header.opcode)?;
                    let start = self.begin_fragment(&header)?;
                    self.stage = Stage::Payload {
                        header,
                        start,
                        len: header.pdu_len as usize,
                    };
                }
                Stage::Payload { header, start, len } => {
                    let have = self.payload.len() - start;
                    let take = (len - have).min(input.len());
                    self.payload.extend_from_slice(&input[..take]);
                    *input = &input[take..];
                    if have + take < len {
                        return Ok(None);
                    }
                    let computed = crc16(&self.payload[start..]);
                    if computed != header.pdu_crc {
                        return Err(Error::BadPayloadCrc {
                            opcode: header.opcode,
                            sent: header.pdu_crc,
                            computed,
                        });
                    }
                    self.stage = Stage::Header { have: 0 };
                    // As in fio, an empty fragment ends the command even if flagged MORE.
                    if header.flags & FLAG_MORE == 0 || len == 0 {
                        let first = self.first.take().unwrap_or(header);
                        return Ok(Some(Command {
                            opcode: first.opcode,
                            flags: first.flags & !FLAG_MORE,
                            tag: first.tag,
                            payload: core::mem::take(&mut self.payload),
                        }));
                    }
                    if self.first.is_none() {
                        self.first = Some(header);
                    }
                }
            }
        }
    }

    /// Checks a new fragment against the command it continues and the size limit, and makes
    /// room for its payload; returns where that payload starts.
    fn begin_fragment(&mut self, header: &Header) -> Result<usize, Error> {
        if let Some(first) = &self.first {
            if first.opcode != header.opcode {
                return Err(Error::FragmentOpcodeMismatch {
                    first: first.opcode,
                    next: header.opcode,
                });
            }
            if first.tag != header.tag {
                return Err(Error::FragmentTagMismatch {
                    first: first.tag,
                    next: header.tag,
                });
            }
        }
        let start = self.payload.len();
        let total = start + header.pdu_len as usize;
        if total > self.max_command {
            return Err(Error::CommandTooLarge {
                len: total,
                limit: self.max_command,
            });
        }
        self.payload.reserve(header.pdu_len as usize);
        Ok(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn decode_all(bytes: &[u8]) -> Result<Vec<Command>, Error> {
        let mut d = Decoder::default();
        let mut input = bytes;
        let mut out = Vec::new();
        while let Some(c) = d.next_command(&mut input)? {
            out.push(c);
        }
        assert!(input.is_empty());
        Ok(out)
    }

    #[test]
    fn header_golden_bytes() {
        let mut out = Vec::new();
        encode_command(&mut out, Opcode::Run, 0x1122_3344_5566_7788, &[]);
        let mut expected = vec![
            97, 0, // version
            16, 0, // RUN
            0, 0, 0, 0, // flags
            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // tag
            0, 0, 0, 0, // pdu_len
        ];
        let crc = crc16(&expected);
        expected.extend_from_slice(&crc.to_le_bytes());
        expected.extend_from_slice(&[0, 0]); // CRC of the empty payload
        assert_eq!(out, expected);
        assert_eq!(HEADER_CMD_CRC, 20);
        assert_eq!(HEADER_PDU_CRC, 22);
        assert_eq!(HEADER_TAG, 8);
        assert_eq!(HEADER_PDU_LEN, 16);
    }

    #[test]
    fn payload_crc_is_in_the_header() {
        let mut out = Vec::new();
        encode_command(&mut out, Opcode::Text, 5, b"hello");
        assert_eq!(u16::from_le_bytes([out[22], out[23]]), crc16(b"hello"));
        assert_eq!(&out[24..], b"hello");
    }

    #[test]
    fn large_payloads_split_at_1024_with_more_flags() {
        let payload: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        encode_command(&mut out, Opcode::Ts, 9, &payload);
        assert_eq!(out.len(), 2500 + 3 * HEADER_LEN);
        let lens: Vec<u32> = [0, 1048, 2096]
            .iter()
            .map(|&o| u32::from_le_bytes(out[o + 16..o + 20].try_into().unwrap()))
            .collect();
        assert_eq!(lens, [1024, 1024, 452]);
        let flags: Vec<u32> = [0, 1048, 2096]
            .iter()
            .map(|&o| u32::from_le_bytes(out[o + 4..o + 8].try_into().unwrap()))
            .collect();
        assert_eq!(flags, [FLAG_MORE, FLAG_MORE, 0]);
        let cmds = decode_all(&out).unwrap();
        assert_eq!(cmds.len(), 1);
        assert_eq!(cmds[0].payload, payload);
        assert_eq!(cmds[0].tag, 9);
        assert_eq!(cmds[0].flags, 0);
    }

    #[test]
    fn byte_at_a_time_decodes_the_same() {
        let mut out = Vec::new();
        encode_command(&mut out, Opcode::Probe, 1, &[7; 136]);
        encode_command(&mut out, Opcode::Job, 2, &[b'x'; 3000]);
        let mut d = Decoder::default();
        let mut got = Vec::new();
        for b in &out {
            let mut one: &[u8] = core::slice::from_ref(b);
            if let Some(c) = d.next_command(&mut one).unwrap() {
                got.push(c);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].payload.len(), 3000);
        assert!(d.is_idle());
    }

    #[test]
    fn bad_header_crc_is_named() {
        let mut out = Vec::new();
        encode_command(&mut out, Opcode::Run, 0, &[]);
        out[20] ^= 1;
        assert!(matches!(decode_all(&out), Err(Error::BadHeaderCrc { .. })));
    }

    #[test]
    fn bad_payload_crc_is_named() {
        let mut out = Vec::new();
        encode_command(&mut out, Opcode::Job, 0, b"[job]\n");
        let last = out.len() - 1;
        out[last] ^= 0x40;
        assert!(matches!(decode_all(&out), Err(Error::BadPayloadCrc { opcode: 3, .. })));
    }

    /// A header with the given fields and correct CRCs for `payload`.
    fn raw(version: u16, opcode: u16, flags: u32, tag: u64, pdu_len: u32, payload: &[u8]) -> Vec<u8> {
        let mut h = [0u8; HEADER_LEN];
        put_u16(&mut h, 0, version);
        put_u16(&mut h, 2, opcode);
        put_u32(&mut h, 4, flags);
        put_u64(&mut h, 8, tag);
        put_u32(&mut h, 16, pdu_len);
        let c = crc16(&h[..20]);
        put_u16(&mut h, 20, c);
        put_u16(&mut h, 22, crc16(payload));
        let mut v = h.to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn other_versions_are_refused() {
        let bytes = raw(96, 10, 0, 0, 0, &[]);
        assert_eq!(
            decode_all(&bytes),
            Err(Error::VersionMismatch { sent: 96, expected: 97 })
        );
    }

    #[test]
    fn oversized_fragment_is_refused_before_reading_it() {
        let bytes = raw(97, 3, 0, 0, 1025, &[]);
        assert!(matches!(
            decode_all(&bytes),
            Err(Error::FragmentTooLarge { len: 1025, .. })
        ));
    }

    #[test]
    fn unknown_opcode_is_named() {
        assert_eq!(decode_all(&raw(97, 23, 0, 0, 0, &[])), Err(Error::UnknownOpcode(23)));
        assert_eq!(decode_all(&raw(97, 0, 0, 0, 0, &[])), Err(Error::UnknownOpcode(0)));
    }

    #[test]
    fn fragments_must_agree() {
        let mut bytes = raw(97, 3, FLAG_MORE, 1, 4, b"abcd");
        bytes.extend(raw(97, 5, 0, 1, 4, b"efgh"));
        assert_eq!(
            decode_all(&bytes),
            Err(Error::FragmentOpcodeMismatch { first: 3, next: 5 })
        );
        let mut bytes = raw(97, 3, FLAG_MORE, 1, 4, b"abcd");
        bytes.extend(raw(97, 3, 0, 2, 4, b"efgh"));
        assert_eq!(
            decode_all(&bytes),
            Err(Error::FragmentTagMismatch { first: 1, next: 2 })
        );
    }

    #[test]
    fn reassembly_stops_at_the_limit() {
        let mut d = Decoder::new(2048);
        let mut bytes = Vec::new();
        for _ in 0..3 {
            bytes.extend(raw(97, 3, FLAG_MORE, 0, 1024, &[1; 1024]));
        }
        let mut input = &bytes[..];
        assert_eq!(
            d.next_command(&mut input),
            Err(Error::CommandTooLarge { len: 3072, limit: 2048 })
        );
        // The decoder stays failed.
        let mut more: &[u8] = &[0; 4];
        assert!(d.next_command(&mut more).is_err());
    }

    #[test]
    fn empty_fragment_ends_the_command_as_in_fio() {
        let mut bytes = raw(97, 3, FLAG_MORE, 0, 2, b"ab");
        bytes.extend(raw(97, 3, FLAG_MORE, 0, 0, &[]));
        let cmds = decode_all(&bytes).unwrap();
        assert_eq!(cmds[0].payload, b"ab");
    }

    #[test]
    fn partial_input_is_kept_not_lost() {
        let mut out = Vec::new();
        encode_command(&mut out, Opcode::Text, 3, b"abc");
        let mut d = Decoder::default();
        let mut first = &out[..10];
        assert_eq!(d.next_command(&mut first), Ok(None));
        assert!(!d.is_idle());
        let mut rest = &out[10..];
        let c = d.next_command(&mut rest).unwrap().unwrap();
        assert_eq!(c.payload, b"abc");
    }
}
