//! What unverified writes carry when the job asks for it, as fio 3.33 makes it:
//! `dedupe_percentage` (that share of the writes repeat an earlier write's content, the rest
//! are unique; `dedupe_mode=repeat` repeats the last unique one, `working_set` one of a set of
//! contents the size of `dedupe_working_set_percentage` of the region, shared by the wave's jobs
//! with `dedupe_global`) and `buffer_compress_percentage` (each `buffer_compress_chunk` of a
//! buffer is random bytes followed by that share of zeros, so it compresses to about the rest).
//!
//! A content is named by a key: the same key fills the same bytes, so a repeat is a repeat on
//! the device, whichever CPU wrote it. Filling costs a pass over the buffer per write: only jobs
//! that ask for it pay (the engine runs them outside its plain shape).

use crate::rng::{Rng, mix64};

/// The job's write-content options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteContent {
    /// `dedupe_percentage`: the share of writes that repeat earlier content (0-100).
    pub dedupe_percent: u8,
    /// `dedupe_mode=working_set` with `dedupe_working_set_percentage`: the repeats come from
    /// this share of the region's blocks (1-100); `None`: `dedupe_mode=repeat`.
    pub working_set_percent: Option<u8>,
    /// `dedupe_global`: the working set is the wave's, not the job's.
    pub global: bool,
    /// `buffer_compress_percentage`: the share of each chunk that is zeros (0-100).
    pub compress_percent: u8,
    /// `buffer_compress_chunk` in bytes (fio's default 512).
    pub compress_chunk: u32,
}

/// One clone's source of write contents.
#[derive(Debug, Clone)]
pub(crate) struct ContentSource {
    content: WriteContent,
    rng: Rng,
    /// Names this clone's unique contents.
    unique_base: u64,
    /// Names the working set's contents (the job's, or the wave's with `dedupe_global`).
    set_base: u64,
    uniques: u64,
    last_unique: Option<u64>,
    working_set: u64,
}

impl ContentSource {
    /// `seed`: the job's; `job`: a hash of its name; `clone`: the clone's index; `blocks`: the
    /// blocks of the clone's region (the working set's measure).
    pub(crate) fn new(content: WriteContent, seed: u64, job: u64, clone: u64, blocks: u64) -> Self {
        let set_base = if content.global { mix64(seed) } else { mix64(seed ^ job) };
        let working_set = content
            .working_set_percent
            .map_or(0, |p| (blocks.saturating_mul(u64::from(p)) / 100).max(1));
        Self {
            content,
            rng: Rng::new(seed ^ mix64(job ^ mix64(clone + 1))),
            unique_base: mix64(seed ^ job ^ mix64(clone.wrapping_add(0x5EED))),
            set_base,
            uniques: 0,
            last_unique: None,
            working_set,
        }
    }

    /// The key of the next write's content.
    pub(crate) fn next_key(&mut self) -> u64 {
        let repeat = self.rng.below(100) < u64::from(self.content.dedupe_percent);
        if repeat {
            if self.working_set > 0 {
                return mix64(self.set_base ^ mix64(self.rng.below(self.working_set)));
            }
            if let Some(key) = self.last_unique {
                return key;
            }
        }
        self.uniques += 1;
        let key = mix64(self.unique_base ^ mix64(self.uniques));
        self.last_unique = Some(key);
        key
    }

    /// Fills `buffer` with the content named `key`.
    pub(crate) fn fill(&self, key: u64, buffer: &mut [u8]) {
        fill_content(&self.content, key, buffer);
    }
}

/// The bytes of content `key`: per chunk, random words for the share that is not compressible,
/// zeros for the rest.
pub fn fill_content(content: &WriteContent, key: u64, buffer: &mut [u8]) {
    let chunk = (content.compress_chunk as usize).max(8);
    for (index, piece) in buffer.chunks_mut(chunk).enumerate() {
        let random = piece.len() * usize::from(100 - content.compress_percent.min(100)) / 100;
        let mut rng = Rng::new(key ^ mix64(index as u64));
        let (noise, zeros) = piece.split_at_mut(random);
        for word in noise.chunks_mut(8) {
            let bytes = rng.next_u64().to_le_bytes();
            word.copy_from_slice(&bytes[..word.len()]);
        }
        zeros.fill(0);
    }
}

/// A hash of a job's name, which keeps two jobs' unique contents apart.
pub(crate) fn job_key(name: &str) -> u64 {
    name.bytes().fold(0x6A09_E667_F3BC_C908, |h, b| mix64(h ^ u64::from(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeSet;
    use alloc::vec;

    fn content(dedupe: u8, working_set: Option<u8>, compress: u8) -> WriteContent {
        WriteContent {
            dedupe_percent: dedupe,
            working_set_percent: working_set,
            global: false,
            compress_percent: compress,
            compress_chunk: 512,
        }
    }

    fn distinct(source: &mut ContentSource, writes: usize) -> usize {
        (0..writes).map(|_| source.next_key()).collect::<BTreeSet<_>>().len()
    }

    #[test]
    fn dedupe_percentage_repeats_that_share_of_the_writes() {
        let mut repeat = ContentSource::new(content(50, None, 0), 1, job_key("j"), 0, 10_000);
        let unique = distinct(&mut repeat, 10_000);
        assert!((4_700..5_300).contains(&unique), "{unique} unique of 10000");
        let mut none = ContentSource::new(content(0, None, 0), 1, job_key("j"), 0, 10_000);
        assert_eq!(distinct(&mut none, 1_000), 1_000);
        let mut all = ContentSource::new(content(100, None, 0), 1, job_key("j"), 0, 10_000);
        assert_eq!(distinct(&mut all, 1_000), 1, "every write repeats the first");
        // working_set: the repeats come from 5% of 10,000 blocks.
        let mut set = ContentSource::new(content(100, Some(5), 0), 1, job_key("j"), 0, 10_000);
        assert_eq!(distinct(&mut set, 50_000), 500);
    }

    #[test]
    fn two_jobs_or_clones_write_different_unique_contents() {
        let mut a = ContentSource::new(content(0, None, 0), 1, job_key("a"), 0, 100);
        let mut b = ContentSource::new(content(0, None, 0), 1, job_key("b"), 0, 100);
        let mut a1 = ContentSource::new(content(0, None, 0), 1, job_key("a"), 1, 100);
        let keys: BTreeSet<u64> = (0..100)
            .flat_map(|_| [a.next_key(), b.next_key(), a1.next_key()])
            .collect();
        assert_eq!(keys.len(), 300);
    }

    #[test]
    fn compressible_chunks_end_in_zeros() {
        let c = content(0, None, 75);
        let mut buffer = vec![0xFFu8; 4096];
        fill_content(&c, 42, &mut buffer);
        for chunk in buffer.chunks(512) {
            assert!(chunk[..128].iter().any(|b| *b != 0));
            assert!(chunk[128..].iter().all(|b| *b == 0));
        }
        let mut again = vec![0u8; 4096];
        fill_content(&c, 42, &mut again);
        assert_eq!(buffer, again, "a key names one content");
    }
}
