//! A spool of ingest documents on local disk: a versioned run that may delete holds its
//! documents here until the reject ceiling and the deletion guard have passed, so a run that
//! fails them delivers nothing at all. Memory stays bounded by one document.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use icicle_core::batch::{DocumentBatch, EntryBatch};
use icicle_core::error::IcicleError;
use icicle_core::traits::NamedSinks;

use crate::deliver::deliver_all;

/// Documents written in order, read back in the same order.
pub struct Spool {
    path: PathBuf,
    out: BufWriter<File>,
    documents: u64,
}

fn le32(v: usize) -> std::io::Result<[u8; 4]> {
    u32::try_from(v).map(u32::to_le_bytes).map_err(|_| std::io::Error::other("a spooled document over 4 GiB"))
}

impl Spool {
    /// A new, empty spool file `dir/spool.bin` (one left by a run that died is replaced).
    pub fn create(dir: &Path) -> std::io::Result<Spool> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("spool.bin");
        let out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
        Ok(Spool { path, out, documents: 0 })
    }

    /// Append one document: entry count, entry end offsets, then the entry bytes.
    pub fn push(&mut self, doc: &EntryBatch) -> std::io::Result<()> {
        let ends: Vec<u32> = doc
            .entries()
            .scan(0u32, |end, e| {
                *end += e.len() as u32;
                Some(*end)
            })
            .collect();
        self.out.write_all(&le32(ends.len())?)?;
        for e in &ends {
            self.out.write_all(&e.to_le_bytes())?;
        }
        for e in doc.entries() {
            self.out.write_all(e)?;
        }
        self.documents += 1;
        Ok(())
    }

    /// Documents spooled so far.
    pub fn len(&self) -> u64 {
        self.documents
    }

    /// Stop writing; the documents can now be read back.
    pub fn finish(mut self) -> std::io::Result<SpoolReader> {
        self.out.flush()?;
        let file = File::open(&self.path)?;
        Ok(SpoolReader { path: self.path, input: BufReader::with_capacity(1 << 20, file), left: self.documents })
    }
}

/// Reads a finished spool; the file is removed when the reader is dropped.
pub struct SpoolReader {
    path: PathBuf,
    input: BufReader<File>,
    left: u64,
}

impl SpoolReader {
    /// The next document, or `None` after the last.
    pub fn next_document(&mut self) -> std::io::Result<Option<EntryBatch>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let mut word = [0u8; 4];
        self.input.read_exact(&mut word)?;
        let n = u32::from_le_bytes(word) as usize;
        let mut ends = Vec::with_capacity(n);
        for _ in 0..n {
            self.input.read_exact(&mut word)?;
            ends.push(u32::from_le_bytes(word) as usize);
        }
        let mut buf = vec![0u8; ends.last().copied().unwrap_or(0)];
        self.input.read_exact(&mut buf)?;
        let mut doc = EntryBatch::with_capacity(buf.len());
        let mut start = 0;
        for end in ends {
            let entry = buf.get(start..end).ok_or_else(|| std::io::Error::other("a corrupt spool"))?;
            doc.push(entry);
            start = end;
        }
        Ok(Some(doc))
    }
}

impl Drop for SpoolReader {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where a run's ingest documents go: straight to the sinks, or into a [`Spool`] until the
/// run's checks (reject ceiling, deletion guard) have passed.
pub struct Outbox {
    spool: Option<Spool>,
}

impl Outbox {
    /// Deliver at once.
    pub fn direct() -> Outbox {
        Outbox { spool: None }
    }

    /// Hold documents in `dir` until [`Outbox::release`].
    pub fn held(dir: &Path) -> std::io::Result<Outbox> {
        Ok(Outbox { spool: Some(Spool::create(dir)?) })
    }

    /// Send one document (or hold it).
    pub async fn send(&mut self, sinks: &mut NamedSinks, doc: EntryBatch) -> Result<(), IcicleError> {
        match &mut self.spool {
            Some(s) => s.push(&doc).map_err(|e| IcicleError::Internal(format!("spooling a document: {e}"))),
            None => deliver_all(sinks, &DocumentBatch::Ingest(doc)).await.map_err(Into::into),
        }
    }

    /// The checks passed: deliver what was held, in order.
    pub async fn release(self, sinks: &mut NamedSinks) -> Result<(), IcicleError> {
        let Some(spool) = self.spool else {
            return Ok(());
        };
        let io = |e: std::io::Error| IcicleError::Internal(format!("reading the spool: {e}"));
        let mut reader = spool.finish().map_err(io)?;
        while let Some(doc) = reader.next_document().map_err(io)? {
            deliver_all(sinks, &DocumentBatch::Ingest(doc)).await?;
        }
        Ok(())
    }

    /// Across ranks: deliver what was held, in order, leaving out the first `send.len()`
    /// entries (this rank's primary records) whose flag is false (unchanged since the previous
    /// run), re-cut into documents within `limit`.
    pub async fn release_filtered(
        self,
        sinks: &mut NamedSinks,
        limit: icicle_core::batch::DocumentLimit,
        send: &[bool],
    ) -> Result<(), IcicleError> {
        self.release_where(sinks, limit, |i, _| send.get(i).copied().unwrap_or(true)).await
    }

    /// Deliver what was held, in order, leaving out the entries whose subject is in `left_out`,
    /// re-cut into documents within `limit`.
    pub async fn release_without(
        self,
        sinks: &mut NamedSinks,
        limit: icicle_core::batch::DocumentLimit,
        left_out: &std::collections::HashSet<String>,
    ) -> Result<(), IcicleError> {
        if left_out.is_empty() {
            return self.release(sinks).await;
        }
        self.release_where(sinks, limit, |_, entry| {
            super::deletes::entry_subject(entry).map_or(true, |s| !left_out.contains(&s))
        })
        .await
    }

    /// Deliver what was held, in order, keeping the entries (numbered from 0) that `keep`
    /// accepts, re-cut into documents within `limit`.
    async fn release_where(
        self,
        sinks: &mut NamedSinks,
        limit: icicle_core::batch::DocumentLimit,
        mut keep: impl FnMut(usize, &[u8]) -> bool,
    ) -> Result<(), IcicleError> {
        let Some(spool) = self.spool else {
            return Ok(());
        };
        let io = |e: std::io::Error| IcicleError::Internal(format!("reading the spool: {e}"));
        let mut reader = spool.finish().map_err(io)?;
        let mut batcher = icicle_gmeta::Batcher::within(limit);
        let (mut full, mut oversized) = (Vec::new(), Vec::new());
        let mut i = 0usize;
        while let Some(doc) = reader.next_document().map_err(io)? {
            let mut kept = EntryBatch::default();
            for entry in doc.entries() {
                if keep(i, entry) {
                    kept.push(entry);
                }
                i += 1;
            }
            batcher.push_chunk(&kept, &mut full, &mut oversized);
            for d in full.drain(..) {
                deliver_all(sinks, &DocumentBatch::Ingest(d)).await?;
            }
        }
        if let Some(d) = batcher.flush() {
            deliver_all(sinks, &DocumentBatch::Ingest(d)).await?;
        }
        if !oversized.is_empty() {
            return Err(IcicleError::Internal(format!("{} spooled entries no longer fit a document", oversized.len())));
        }
        Ok(())
    }

    /// A check failed: drop what was held; returns how many documents were never delivered.
    pub fn discard(self) -> u64 {
        let Some(spool) = self.spool else { return 0 };
        let n = spool.len();
        // Reading it back removes the file.
        drop(spool.finish());
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_come_back_in_order_and_the_file_goes() {
        let tmp = tempfile::tempdir().unwrap();
        let mut spool = Spool::create(tmp.path()).unwrap();
        let docs: Vec<EntryBatch> = (0..5)
            .map(|d| {
                let mut b = EntryBatch::default();
                for i in 0..d * 3 {
                    b.push(format!("{{\"subject\":\"/d{d}/f{i}\"}}").as_bytes());
                }
                b
            })
            .collect();
        for d in &docs {
            spool.push(d).unwrap();
        }
        assert_eq!(spool.len(), 5);
        let mut r = spool.finish().unwrap();
        let mut back = Vec::new();
        while let Some(d) = r.next_document().unwrap() {
            back.push(d);
        }
        assert_eq!(back, docs);
        drop(r);
        assert!(!tmp.path().join("spool.bin").exists());
    }
}
