//! The sent-ahead journal of a monitor: keys of the paths a batch updates, written durably
//! before the batch is delivered and removed once the checkpoint after it is written. A run
//! killed in between leaves it behind, so the replay knows what the index may already hold.

use std::io::Write;
use std::path::PathBuf;

/// One monitor's journal file.
#[derive(Debug, Clone)]
pub struct SentAhead {
    path: PathBuf,
}

impl SentAhead {
    /// The journal at `path`.
    pub fn new(path: PathBuf) -> SentAhead {
        SentAhead { path }
    }

    /// Where it is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Append `keys` (8 bytes each, little-endian) and fsync, before the delivery that sends them.
    pub fn append(&self, keys: &[u64]) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        f.write_all(&keys.iter().flat_map(|k| k.to_le_bytes()).collect::<Vec<u8>>())?;
        f.sync_all()
    }

    /// What deliveries after the last checkpoint sent (none when the file is absent).
    pub fn read(&self) -> Vec<u64> {
        let data = std::fs::read(&self.path).unwrap_or_default();
        data.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect()
    }

    /// The checkpoint holds what was sent: forget the journal.
    pub fn clear(&self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(message = "could not remove the sent-ahead journal", file = %self.path.display(), error = %e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn appends_read_back_and_clear() {
        let tmp = tempfile::tempdir().unwrap();
        let j = super::SentAhead::new(tmp.path().join("d/x.sent-ahead"));
        assert!(j.read().is_empty());
        j.append(&[1, u64::MAX]).unwrap();
        j.append(&[7]).unwrap();
        assert_eq!(j.read(), vec![1, u64::MAX, 7]);
        j.clear();
        assert!(j.read().is_empty());
    }
}
