//! fio 3.33's client/server protocol, as the server side of `fio --server`: the command framing
//! with its CRC-16 and fragments, the messages with fio's byte layouts, and a session state
//! machine that answers the unmodified `fio --client`. No transport: bytes in, bytes out.
//!
//! fio's protocol has no authentication and no encryption: anyone who can reach the port can
//! run jobs. Serve it only on a network you trust.

#![no_std]

extern crate alloc;

mod crc16;
mod error;
mod frame;
mod msg;
mod session;
pub mod stats;
mod wire;

pub use crc16::crc16;
pub use error::Error;
pub use frame::{
    Command, DEFAULT_MAX_COMMAND, DEFAULT_PORT, Decoder, FLAG_MORE, HEADER_CMD_CRC, HEADER_CRC_SPAN, HEADER_FLAGS,
    HEADER_LEN, HEADER_OPCODE, HEADER_PDU_CRC, HEADER_PDU_LEN, HEADER_TAG, HEADER_VERSION, Header,
    MAX_FRAGMENT_PAYLOAD, SERVER_VERSION, encode_command,
};
pub use msg::*;
pub use session::{FioBox, JobPlan, JobReport, ProbeFacts, REFUSED_ERROR, Refusal, RunResults, Session, State, Step};
