//! Entries and deletes cut into documents bounded in bytes.

use icicle_core::batch::{EntryBatch, GINGEST_HEAD, GINGEST_TAIL};

/// Assembles entries into documents of at most `max_bytes`.
#[derive(Debug)]
pub struct Batcher {
    max_bytes: usize,
    current: EntryBatch,
}

impl Batcher {
    /// A batcher producing documents of at most `max_bytes` bytes.
    pub fn new(max_bytes: usize) -> Batcher {
        Batcher { max_bytes, current: EntryBatch::default() }
    }

    /// Add every entry of `chunk`, returning the documents that filled up.
    /// An entry too large for any document is returned in `oversized`.
    pub fn push_chunk(&mut self, chunk: &EntryBatch, full: &mut Vec<EntryBatch>, oversized: &mut Vec<Vec<u8>>) {
        let overhead = GINGEST_HEAD.len() + GINGEST_TAIL.len();
        for e in chunk.entries() {
            if e.len() + overhead > self.max_bytes {
                oversized.push(e.to_vec());
                continue;
            }
            let sep = usize::from(!self.current.is_empty());
            if self.current.document_bytes() + sep + e.len() > self.max_bytes {
                full.push(std::mem::take(&mut self.current));
            }
            self.current.push(e);
        }
    }

    /// Whether a partial document is pending.
    pub fn has_pending(&self) -> bool {
        !self.current.is_empty()
    }

    /// Take the pending partial document, if any.
    pub fn flush(&mut self) -> Option<EntryBatch> {
        (!self.current.is_empty()).then(|| std::mem::take(&mut self.current))
    }
}

/// Split `subjects` into delete bodies of at most `max_bytes` each.
pub fn delete_batches(subjects: Vec<String>, max_bytes: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut cur_bytes = br#"{"subjects":[]}"#.len();
    for s in subjects {
        let b = serde_json::to_string(&s).map(|j| j.len()).unwrap_or(s.len() + 2) + 1;
        if !cur.is_empty() && cur_bytes + b > max_bytes {
            out.push(std::mem::take(&mut cur));
            cur_bytes = br#"{"subjects":[]}"#.len();
        }
        cur_bytes += b;
        cur.push(s);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use icicle_core::batch::delete_body;

    #[test]
    fn documents_never_exceed_the_limit() {
        let mut chunk = EntryBatch::default();
        for i in 0..1000 {
            chunk.push(format!("{{\"subject\":\"/f{i}\"}}").as_bytes());
        }
        let mut b = Batcher::new(500);
        let (mut full, mut big) = (Vec::new(), Vec::new());
        b.push_chunk(&chunk, &mut full, &mut big);
        full.extend(b.flush());
        assert!(big.is_empty());
        assert_eq!(full.iter().map(|d| d.len()).sum::<usize>(), 1000);
        for d in &full {
            let mut out = Vec::new();
            d.write_gingest(&mut out).unwrap();
            assert_eq!(out.len(), d.document_bytes());
            assert!(out.len() <= 500, "{}", out.len());
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["ingest_data"]["gmeta"].as_array().unwrap().len(), d.len());
        }
    }

    #[test]
    fn oversized_entries_are_reported() {
        let mut chunk = EntryBatch::default();
        chunk.push(&[b'x'; 600]);
        let mut b = Batcher::new(500);
        let (mut full, mut big) = (Vec::new(), Vec::new());
        b.push_chunk(&chunk, &mut full, &mut big);
        assert_eq!(big.len(), 1);
        assert!(b.flush().is_none());
    }

    #[test]
    fn delete_bodies_are_bounded() {
        let subjects: Vec<String> = (0..100).map(|i| format!("/dir/file-{i}")).collect();
        let batches = delete_batches(subjects, 120);
        assert_eq!(batches.iter().map(|b| b.len()).sum::<usize>(), 100);
        for b in &batches {
            assert!(delete_body(b).len() <= 120, "{}", delete_body(b).len());
        }
    }
}
