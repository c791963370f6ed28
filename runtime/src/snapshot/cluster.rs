//! A snapshot run spread over several processes (MPI ranks): what the runtime needs from the
//! transport ([`Cluster`]), the byte codec of the messages it moves, and the rank-0 split
//! queue that hands out work as ranks ask for it ([`SplitQueue`]). The transport itself lives
//! in the `icicle-mpi` crate, so nothing else links MPI.

use std::collections::VecDeque;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use icicle_core::scope::Scope;
use icicle_core::traits::Split;

/// The ranks of a distributed run, as the snapshot runtime uses them. Collective calls must
/// be made by every rank in the same order.
pub trait Cluster: Send + Sync {
    /// This process's rank, 0-based.
    fn rank(&self) -> usize;
    /// How many ranks take part.
    fn size(&self) -> usize;
    /// Rank 0 only, before any rank asks for work: the planned splits (source index, split).
    fn seed(&self, splits: Vec<(usize, Split)>);
    /// The next split for this rank (blocking), after `finished_one` (the previous split, if
    /// any, was read and spawned `spawned`); `None` once every rank is out of work. A rank
    /// reads with one worker thread, so calls never overlap.
    fn next_split(&self, finished_one: bool, spawned: Vec<(usize, Split)>) -> Option<(usize, Split)>;
    /// Collective all-to-all: `out[r]` goes to rank `r`; returns what each rank sent here.
    fn exchange(&self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String>;
    /// Collective gather: every rank's `bytes` at rank 0 (in rank order), `None` elsewhere.
    fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, String>;
    /// Collective: rank 0's `bytes` on every rank (the others pass anything).
    fn broadcast(&self, bytes: Vec<u8>) -> Result<Vec<u8>, String>;
    /// Collective: the element-wise sums of every rank's `values` (same length everywhere).
    fn all_sum(&self, values: &[u64]) -> Result<Vec<u64>, String>;
}

/// The rank that owns a path hash (a manifest line) in a shuffle over `size` ranks.
pub fn hash_owner(hash: u128, size: usize) -> usize {
    (hash % size.max(1) as u128) as usize
}

/// The rank that owns `key` in a shuffle over `size` ranks (stable across runs and ranks).
pub fn owner(key: &str, size: usize) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % size.max(1) as u64) as usize
}

/// Append `bytes` with a u32 length prefix.
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A reader over length-prefixed fields, failing with the offset on truncation.
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    /// Read fields from `buf`.
    pub fn new(buf: &'a [u8]) -> Fields<'a> {
        Fields { buf, pos: 0 }
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The next `n` raw bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| format!("message truncated at byte {}", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next little-endian u64.
    pub fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| "short u64".to_string())?))
    }

    /// The next length-prefixed field.
    pub fn bytes(&mut self) -> Result<&'a [u8], String> {
        let b = self.take(4)?;
        let n = u32::from_le_bytes(b.try_into().map_err(|_| "short length".to_string())?) as usize;
        self.take(n)
    }

    /// The next length-prefixed UTF-8 field.
    pub fn str(&mut self) -> Result<&'a str, String> {
        let at = self.pos;
        std::str::from_utf8(self.bytes()?).map_err(|e| format!("field at byte {at}: {e}"))
    }
}

/// Append one split (with its source index).
pub fn encode_split(out: &mut Vec<u8>, source: usize, s: &Split) {
    out.extend_from_slice(&(source as u64).to_le_bytes());
    put_bytes(out, s.name.as_bytes());
    put_bytes(out, s.path.as_os_str().as_bytes());
    let (has, a, b) = s.range.map_or((0u64, 0, 0), |(a, b)| (1, a, b));
    for v in [has, a, b, s.weight] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let (tag, text) = match &s.scope {
        None => (0u64, ""),
        Some(Scope::All) => (1, ""),
        Some(Scope::Subtree(p)) => (2, p.as_str()),
        Some(Scope::Children(p)) => (3, p.as_str()),
        Some(Scope::Exact(p)) => (4, p.as_str()),
    };
    out.extend_from_slice(&tag.to_le_bytes());
    put_bytes(out, text.as_bytes());
    out.extend_from_slice(&u64::from(s.version.is_some()).to_le_bytes());
    put_bytes(out, s.version.as_deref().unwrap_or("").as_bytes());
}

/// Read one split written by [`encode_split`].
pub fn decode_split(f: &mut Fields<'_>) -> Result<(usize, Split), String> {
    let source = f.u64()? as usize;
    let name = f.str()?.to_string();
    let path = PathBuf::from(std::ffi::OsString::from_vec(f.bytes()?.to_vec()));
    let (has, a, b, weight) = (f.u64()?, f.u64()?, f.u64()?, f.u64()?);
    let tag = f.u64()?;
    let text = f.str()?.to_string();
    let scope = match tag {
        0 => None,
        1 => Some(Scope::All),
        2 => Some(Scope::Subtree(text)),
        3 => Some(Scope::Children(text)),
        4 => Some(Scope::Exact(text)),
        t => return Err(format!("unknown scope tag {t}")),
    };
    let has_version = f.u64()?;
    let version = f.str()?.to_string();
    Ok((
        source,
        Split {
            name,
            path,
            range: (has == 1).then_some((a, b)),
            weight,
            scope,
            version: (has_version == 1).then_some(version),
        },
    ))
}

/// Encode a list of splits.
pub fn encode_splits(splits: &[(usize, Split)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(splits.len() as u64).to_le_bytes());
    for (si, s) in splits {
        encode_split(&mut out, *si, s);
    }
    out
}

/// Decode a list of splits.
pub fn decode_splits(buf: &[u8]) -> Result<Vec<(usize, Split)>, String> {
    let mut f = Fields::new(buf);
    let n = f.u64()?;
    (0..n).map(|_| decode_split(&mut f)).collect()
}

/// What rank 0 answers a rank that asks for work.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// Read this split.
    Work(usize, Split),
    /// Nothing now: splits being read elsewhere may spawn more; ask again when told.
    Wait,
    /// Every rank is out of work.
    Done,
}

/// Rank 0's queue of splits for the whole run: hands out splits in order, takes back the ones
/// a read spawned, and ends the run when the queue is empty and no split is being read
/// anywhere (a split in hand may still spawn more).
#[derive(Default)]
pub struct SplitQueue {
    items: VecDeque<(usize, Split)>,
    /// Splits handed out and not yet reported back, per asker.
    active: Vec<usize>,
    /// Askers told to wait, in order.
    waiting: VecDeque<usize>,
}

impl SplitQueue {
    /// A queue for `askers` askers (ranks, or threads of ranks).
    pub fn new(askers: usize) -> SplitQueue {
        SplitQueue { items: VecDeque::new(), active: vec![0; askers], waiting: VecDeque::new() }
    }

    /// Add planned splits.
    pub fn extend(&mut self, splits: impl IntoIterator<Item = (usize, Split)>) {
        self.items.extend(splits);
    }

    /// `asker` finished its previous split (if it had one), which spawned `spawned`; what it
    /// reads next. Askers that were told to wait and can now be answered are returned too.
    pub fn ask(
        &mut self,
        asker: usize,
        had_split: bool,
        spawned: Vec<(usize, Split)>,
    ) -> (Answer, Vec<(usize, Answer)>) {
        if had_split {
            self.active[asker] = self.active[asker].saturating_sub(1);
        }
        self.items.extend(spawned);
        let answer = self.answer(asker);
        let mut woken = Vec::new();
        if answer != Answer::Wait {
            while let Some(w) = self.waiting.front().copied() {
                match self.answer(w) {
                    Answer::Wait => break,
                    a => {
                        self.waiting.pop_front();
                        woken.push((w, a));
                    }
                }
            }
        } else {
            self.waiting.push_back(asker);
        }
        (answer, woken)
    }

    fn answer(&mut self, asker: usize) -> Answer {
        if let Some((si, s)) = self.items.pop_front() {
            self.active[asker] += 1;
            return Answer::Work(si, s);
        }
        if self.active.iter().all(|a| *a == 0) {
            Answer::Done
        } else {
            Answer::Wait
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(name: &str) -> Split {
        Split {
            name: name.into(),
            path: PathBuf::from(name),
            range: Some((3, 9)),
            weight: 6,
            scope: Some(Scope::Subtree(name.into())),
            version: Some(format!("9 \"{name}\"")),
        }
    }

    #[test]
    fn splits_round_trip_through_bytes_and_truncation_is_an_error() {
        let mut odd = Split::whole(PathBuf::from(std::ffi::OsString::from_vec(b"/a/\xff\xfe".to_vec())), 1);
        odd.scope = Some(Scope::Exact("/x".into()));
        let all = vec![(0, split("/a")), (2, odd), (1, Split::whole("/b".into(), 7))];
        let bytes = encode_splits(&all);
        assert_eq!(decode_splits(&bytes).unwrap(), all);
        for cut in [0, 5, bytes.len() - 1] {
            assert!(decode_splits(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn the_queue_ends_only_when_nothing_is_queued_or_in_hand() {
        let mut q = SplitQueue::new(2);
        q.extend([(0, split("/a"))]);
        let (a, _) = q.ask(0, false, vec![]);
        assert_eq!(a, Answer::Work(0, split("/a")));
        // Asker 1 must wait: /a may spawn more.
        assert_eq!(q.ask(1, false, vec![]), (Answer::Wait, vec![]));
        // /a spawned /b: asker 0 takes it; asker 1 still waits (/b may spawn).
        let (a, woken) = q.ask(0, true, vec![(0, split("/b"))]);
        assert_eq!((a, woken), (Answer::Work(0, split("/b")), vec![]));
        // /b spawned /c and /d: asker 0 takes /c, and asker 1 is woken with /d.
        let (a, woken) = q.ask(0, true, vec![(0, split("/c")), (0, split("/d"))]);
        assert_eq!(a, Answer::Work(0, split("/c")));
        assert_eq!(woken, vec![(1, Answer::Work(0, split("/d")))]);
        // /c done, /d still in hand: wait; then /d done: both are done.
        assert_eq!(q.ask(0, true, vec![]), (Answer::Wait, vec![]));
        assert_eq!(q.ask(1, true, vec![]), (Answer::Done, vec![(0, Answer::Done)]));
    }
}
