//! What sinks receive: GMetaList ingest documents (encoded entries back to back) and subject
//! deletes. Encoding records into entries and bounding documents in bytes is `icicle-gmeta`'s.

use std::io::{self, Write};

/// How a document's bytes are counted against its bound (`snapshot.document_size`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DocumentSize {
    /// As Python's `json.dumps` writes the document again (globus-sdk and the globus CLI
    /// without orjson): `", "` and `": "` separators, non-ASCII as `\u` escapes. A document
    /// within the bound stays within it when a stock tool ingests it.
    #[default]
    Sdk,
    /// The compact bytes icicle writes (most entries per document when only icicle's own
    /// sinks send them).
    Compact,
}

/// A document bound: at most `max_bytes`, counted as `size` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocumentLimit {
    /// The largest document, envelope included, in bytes.
    pub max_bytes: usize,
    /// How its bytes are counted.
    pub size: DocumentSize,
}

impl DocumentLimit {
    /// At most `max_bytes` compact bytes.
    pub fn compact(max_bytes: usize) -> DocumentLimit {
        DocumentLimit { max_bytes, size: DocumentSize::Compact }
    }
}

/// The GIngest envelope written before the first entry.
pub const GINGEST_HEAD: &[u8] = br#"{"ingest_type":"GMetaList","ingest_data":{"gmeta":["#;
/// The GIngest envelope written after the last entry.
pub const GINGEST_TAIL: &[u8] = b"]}}";

/// Encoded GMetaEntry JSON objects stored back to back, with their end offsets.
///
/// The buffers of large batches are kept when a batch is dropped (up to [`SPARE_BYTES`] in
/// the process) and handed to the next [`EntryBatch::with_capacity`] of about their size: a
/// snapshot makes and drops its chunks and documents at a steady rate, and reusing their
/// memory spares faulting in (and zeroing) fresh pages for every one of them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EntryBatch {
    buf: Vec<u8>,
    ends: Vec<u32>,
}

/// Buffers smaller than this are left to the allocator.
const SPARE_MIN: usize = 64 << 10;
/// The most buffer capacity kept for reuse, in bytes.
pub const SPARE_BYTES: usize = 24 << 20;

/// Emptied buffers of dropped batches.
static SPARE: std::sync::Mutex<Vec<(Vec<u8>, Vec<u32>)>> = std::sync::Mutex::new(Vec::new());

impl Drop for EntryBatch {
    fn drop(&mut self) {
        let cap = self.buf.capacity();
        if cap < SPARE_MIN {
            return;
        }
        // Never wait: a buffer that cannot be kept at once is freed.
        let Ok(mut spare) = SPARE.try_lock() else { return };
        if spare.iter().map(|(b, _)| b.capacity()).sum::<usize>() + cap <= SPARE_BYTES {
            self.buf.clear();
            self.ends.clear();
            spare.push((std::mem::take(&mut self.buf), std::mem::take(&mut self.ends)));
        }
    }
}

impl EntryBatch {
    /// An empty batch with room for `bytes` (a kept buffer of at least that and at most twice
    /// that capacity, when there is one).
    pub fn with_capacity(bytes: usize) -> EntryBatch {
        if bytes >= SPARE_MIN {
            if let Ok(mut spare) = SPARE.lock() {
                if let Some(i) = spare.iter().position(|(b, _)| b.capacity() >= bytes && b.capacity() / 2 <= bytes) {
                    let (buf, ends) = spare.swap_remove(i);
                    return EntryBatch { buf, ends };
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_buffers_come_back_empty_and_the_kept_bytes_are_bounded() {
        for round in 0..4 {
            let batches: Vec<EntryBatch> = (0..40)
                .map(|i| {
                    let mut b = EntryBatch::with_capacity(SPARE_MIN << (i % 3));
                    assert!(b.is_empty() && b.content_bytes() == 0 && b.entries().next().is_none(), "round {round}");
                    b.push(format!("{{\"subject\":\"/r{round}/{i}\"}}").as_bytes());
                    b
                })
                .collect();
            assert!(batches
                .iter()
                .enumerate()
                .all(|(i, b)| b.entries().eq([format!("{{\"subject\":\"/r{round}/{i}\"}}").as_bytes()])));
            drop(batches);
            let kept: usize = SPARE.lock().unwrap().iter().map(|(b, _)| b.capacity()).sum();
            assert!(kept <= SPARE_BYTES, "{kept}");
        }
        // A small request is not handed a large buffer.
        assert!(EntryBatch::with_capacity(SPARE_MIN).buf.capacity() < 2 * SPARE_MIN + 1);
    }
}
