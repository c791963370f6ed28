//! Index document batches: GMetaList ingest documents and subject deletes, bounded in bytes.

use std::io::{self, Write};

/// The GIngest envelope written before the first entry.
pub const GINGEST_HEAD: &[u8] = br#"{"ingest_type":"GMetaList","ingest_data":{"gmeta":["#;
/// The GIngest envelope written after the last entry.
pub const GINGEST_TAIL: &[u8] = b"]}}";

/// Encoded GMetaEntry JSON objects stored back to back, with their end offsets.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EntryBatch {
    buf: Vec<u8>,
    ends: Vec<u32>,
}

impl EntryBatch {
    /// An empty batch with room for `bytes`.
    pub fn with_capacity(bytes: usize) -> EntryBatch {
        EntryBatch { buf: Vec::with_capacity(bytes), ends: Vec::new() }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of entry JSON (without envelope and separators).
    pub fn content_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Size of the GIngest document this batch serializes to.
    pub fn document_bytes(&self) -> usize {
        GINGEST_HEAD.len() + GINGEST_TAIL.len() + self.buf.len() + self.ends.len().saturating_sub(1)
    }

    /// The buffer to encode the next entry into; call [`EntryBatch::commit`] after writing.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Close the entry written into [`EntryBatch::buffer`] since the last commit.
    pub fn commit(&mut self) {
        self.ends.push(self.buf.len() as u32);
    }

    /// Drop bytes written since the last commit (an entry that failed to encode).
    pub fn rollback(&mut self) {
        let keep = self.ends.last().copied().unwrap_or(0) as usize;
        self.buf.truncate(keep);
    }

    /// Encode `rec` as the next entry; when it cannot be encoded nothing is kept and the
    /// reason is returned.
    pub fn encode(&mut self, enc: &mut crate::gmeta::PrimaryEncoder, rec: &crate::record::FileRecord<'_>) -> Result<(), String> {
        match enc.encode(rec, &mut self.buf) {
            Ok(()) => {
                self.commit();
                Ok(())
            }
            Err(e) => {
                self.rollback();
                Err(e)
            }
        }
    }

    /// [`EntryBatch::encode`] with visibility judged by the file's ACL and along `dirs` (the
    /// directories from the top down to the record's parent; `None`: unknown) when the policy
    /// follows permissions.
    pub fn encode_in(
        &mut self,
        enc: &mut crate::gmeta::PrimaryEncoder,
        rec: &crate::record::FileRecord<'_>,
        acl: Option<std::sync::Arc<crate::access::Acl>>,
        dirs: Option<&std::sync::Arc<[crate::access::Perm]>>,
    ) -> Result<(), String> {
        let vis = enc.visible_to_in(rec, acl, dirs)?;
        enc.encode_with(rec, &vis, &mut self.buf);
        self.commit();
        Ok(())
    }

    /// Append a complete entry.
    pub fn push(&mut self, entry: &[u8]) {
        self.buf.extend_from_slice(entry);
        self.commit();
    }

    /// The entries, in order.
    pub fn entries(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0usize;
        self.ends.iter().map(move |&e| {
            let s = &self.buf[start..e as usize];
            start = e as usize;
            s
        })
    }

    /// Write the GIngest (GMetaList) document.
    pub fn write_gingest(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(GINGEST_HEAD)?;
        for (i, e) in self.entries().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            w.write_all(e)?;
        }
        w.write_all(GINGEST_TAIL)
    }

    /// Clear for reuse.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }
}

/// What sinks receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentBatch {
    /// Entries to upsert (one GIngest GMetaList document).
    Ingest(EntryBatch),
    /// Subjects to delete (one `batch_delete_by_subject` body).
    Delete(Vec<String>),
}

impl DocumentBatch {
    /// Number of entries or subjects.
    pub fn len(&self) -> usize {
        match self {
            DocumentBatch::Ingest(b) => b.len(),
            DocumentBatch::Delete(s) => s.len(),
        }
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The size of the request body this batch becomes.
    pub fn document_bytes(&self) -> usize {
        match self {
            DocumentBatch::Ingest(b) => b.document_bytes(),
            DocumentBatch::Delete(s) => delete_body(s).len(),
        }
    }
}

/// The `batch_delete_by_subject` body for `subjects`.
pub fn delete_body(subjects: &[String]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "subjects": subjects })).unwrap_or_default()
}

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
