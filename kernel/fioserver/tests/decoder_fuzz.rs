//! Arbitrary bytes, cut into arbitrary chunks, through the decoder and the session: no panic,
//! memory bounded by the limit, every failure a named error, and valid streams decoded the
//! same whatever the cutting.

use fioserver::stats::Eta;
use fioserver::{
    Decoder, Error, FioBox, HEADER_LEN, JobPlan, MAX_FRAGMENT_PAYLOAD, Opcode, ProbeFacts, Refusal, RunResults,
    Session, encode_command,
};
use proptest::prelude::*;

const LIMIT: usize = 4096;

/// Feeds `bytes` in pieces of the given sizes; returns the commands and the first error.
fn feed(d: &mut Decoder, bytes: &[u8], cuts: &[usize]) -> (Vec<fioserver::Command>, Option<Error>) {
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut cuts = cuts.iter().cycle();
    while !rest.is_empty() {
        let n = (*cuts.next().unwrap()).clamp(1, rest.len());
        let mut piece = &rest[..n];
        rest = &rest[n..];
        loop {
            match d.next_command(&mut piece) {
                Ok(Some(c)) => out.push(c),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
            // Bounded memory: never more than the limit held.
            assert!(d.buffered() <= LIMIT);
        }
        assert!(piece.is_empty());
    }
    (out, None)
}

fn opcode() -> impl Strategy<Value = Opcode> {
    (1u16..=22).prop_map(|op| Opcode::from_wire(op).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4000),
                                   cuts in proptest::collection::vec(1usize..64, 1..8)) {
        let mut d = Decoder::new(LIMIT);
        let (_, err) = feed(&mut d, &bytes, &cuts);
        if let Some(e) = err {
            // Named, and printable.
            prop_assert!(!e.to_string().is_empty());
            // Failed for good.
            let mut more: &[u8] = &[0u8; HEADER_LEN];
            prop_assert_eq!(d.next_command(&mut more), Err(e));
        }
    }

    #[test]
    fn valid_streams_decode_the_same_whatever_the_cutting(
        cmds in proptest::collection::vec((opcode(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..3000)), 1..5),
        cuts in proptest::collection::vec(1usize..2000, 1..8),
    ) {
        let mut bytes = Vec::new();
        for (op, tag, payload) in &cmds {
            encode_command(&mut bytes, *op, *tag, payload);
        }
        let mut d = Decoder::new(LIMIT);
        let (got, err) = feed(&mut d, &bytes, &cuts);
        prop_assert_eq!(err, None);
        prop_assert_eq!(got.len(), cmds.len());
        for (c, (op, tag, payload)) in got.iter().zip(&cmds) {
            prop_assert_eq!(c.opcode, *op as u16);
            prop_assert_eq!(c.tag, *tag);
            prop_assert_eq!(&c.payload, payload);
            prop_assert_eq!(c.flags, 0);
        }
        prop_assert!(d.is_idle());
    }

    #[test]
    fn a_flipped_bit_is_caught(payload in proptest::collection::vec(any::<u8>(), 1..MAX_FRAGMENT_PAYLOAD),
                               bit in any::<usize>()) {
        let mut bytes = Vec::new();
        encode_command(&mut bytes, Opcode::Job, 1, &payload);
        let bit = bit % (bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        let mut d = Decoder::new(LIMIT);
        let mut input = &bytes[..];
        // The header CRC covers the length, so no flip leaves the decoder waiting: every one
        // is a named CRC error, never the corrupted command.
        let r = d.next_command(&mut input);
        prop_assert!(
            matches!(r, Err(Error::BadHeaderCrc { .. }) | Err(Error::BadPayloadCrc { .. })),
            "{:?}",
            r
        );
    }

    #[test]
    fn arbitrary_bytes_through_a_session_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(1usize..300, 1..6),
    ) {
        let mut b = NullBox;
        let mut s = Session::with_decoder(Decoder::new(LIMIT));
        let mut rest = &bytes[..];
        let mut cuts = cuts.iter().cycle();
        while !rest.is_empty() {
            let n = (*cuts.next().unwrap()).clamp(1, rest.len());
            match s.on_bytes(&rest[..n], &mut b) {
                Ok(step) if step.done => break,
                Ok(_) => {}
                Err(_) => break,
            }
            rest = &rest[n..];
        }
    }

    #[test]
    fn well_framed_garbage_payloads_through_a_session_never_panic(
        msgs in proptest::collection::vec((opcode(), proptest::collection::vec(any::<u8>(), 0..600)), 1..6),
    ) {
        let mut bytes = Vec::new();
        for (op, payload) in &msgs {
            encode_command(&mut bytes, *op, 0, payload);
        }
        let mut b = NullBox;
        let mut s = Session::with_decoder(Decoder::new(LIMIT));
        let _ = s.on_bytes(&bytes, &mut b);
    }
}

/// A box that accepts everything and finishes at once.
struct NullBox;

impl FioBox for NullBox {
    fn probe(&mut self) -> ProbeFacts {
        ProbeFacts {
            hostname: "n".into(),
            cpus: 1,
            version: "fio-3.33".into(),
        }
    }
    fn command_line(&mut self, _: &[String]) -> Result<(), Refusal> {
        Ok(())
    }
    fn job_file(&mut self, _: &str) -> Result<JobPlan, Refusal> {
        Ok(JobPlan {
            jobs: 1,
            stat_outputs: 1,
        })
    }
    fn run(&mut self) -> Result<(), Refusal> {
        Ok(())
    }
    fn finished(&mut self) -> bool {
        true
    }
    fn eta(&mut self) -> Eta {
        Eta::default()
    }
    fn stop(&mut self) {}
    fn results(&mut self) -> RunResults {
        RunResults {
            jobs: vec![fioserver::JobReport {
                stat: fioserver::stats::ThreadStat::default(),
                options: vec![],
            }],
            groups: vec![fioserver::stats::GroupRunStats::default()],
            global_options: vec![],
            disks: vec![],
            error: 0,
        }
    }
}
