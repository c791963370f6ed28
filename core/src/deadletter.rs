//! Dead letters: stream records that could not be parsed or applied, kept as JSON lines
//! (`source`, `position`, `raw` or `raw_hex`, `reason`) so the stream goes on without losing
//! them. Each letter is on disk (fsynced) before the position past it is acknowledged.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// An append-only dead-letter file.
pub struct DeadLetters {
    path: PathBuf,
    file: Option<File>,
    written: u64,
    /// Hashes of the records kept, for streams that read a record again until a later one
    /// is acknowledged (bounded: forgotten past 65,536).
    kept: std::collections::HashSet<u64>,
}

impl DeadLetters {
    /// Letters go to `path` (created, with its directory, at the first letter). Letters
    /// already there count as kept, so a restart that reads a record again keeps it once.
    pub fn new(path: PathBuf) -> DeadLetters {
        let mut d = DeadLetters { path, file: None, written: 0, kept: Default::default() };
        if let Ok(text) = std::fs::read_to_string(&d.path) {
            for letter in text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
                let raw = match (letter["raw"].as_str(), letter["raw_hex"].as_str()) {
                    (Some(t), _) => t.as_bytes().to_vec(),
                    (None, Some(h)) => {
                        (0..h.len() / 2).filter_map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok()).collect()
                    }
                    _ => continue,
                };
                d.first_time(letter["position"].as_str().unwrap_or(""), &raw);
            }
        }
        d
    }

    /// Whether the record `raw` at `position` was not kept before (and remember it).
    pub fn first_time(&mut self, position: &str, raw: &[u8]) -> bool {
        if self.kept.len() >= 1 << 16 {
            self.kept.clear();
        }
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(position.as_bytes());
        h.update(&[0]);
        h.update(raw);
        self.kept.insert(h.digest())
    }

    /// Open the file for appending (creating it and its directory, the directory synced so
    /// the file survives a crash). A last line cut short (a write that failed part-way) is
    /// ended first, so the next letter starts a line of its own.
    fn open(&self) -> std::io::Result<File> {
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir)?;
        }
        let existed = self.path.exists();
        let mut f = OpenOptions::new().create(true).append(true).read(true).open(&self.path)?;
        let len = f.metadata()?.len();
        if len > 0 {
            use std::io::{Read, Seek, SeekFrom};
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(len - 1))?;
            f.read_exact(&mut last)?;
            if last[0] != b'\n' {
                f.write_all(b"\n")?;
            }
        }
        if !existed {
            if let Some(dir) = dir {
                File::open(dir)?.sync_all()?;
            }
        }
        Ok(f)
    }

    /// Where the letters go.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Letters written by this process.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Write one letter durably: `source` (component id), `position` (an index, an offset,
    /// `topic/partition@offset`), the raw bytes and the reason.
    pub fn write(&mut self, source: &str, position: &str, raw: &[u8], reason: &str) -> std::io::Result<()> {
        let mut letter = serde_json::json!({"source": source, "position": position, "reason": reason});
        match std::str::from_utf8(raw) {
            Ok(text) => letter["raw"] = text.into(),
            Err(_) => letter["raw_hex"] = raw.iter().map(|b| format!("{b:02x}")).collect::<String>().into(),
        }
        let mut line = serde_json::to_vec(&letter).map_err(std::io::Error::other)?;
        line.push(b'\n');
        if self.file.is_none() {
            self.file = Some(self.open()?);
        }
        let f = self.file.as_mut().ok_or_else(|| std::io::Error::other("dead-letter file not open"))?;
        f.write_all(&line)?;
        f.sync_data()?;
        self.written += 1;
        crate::metrics::Metrics::global().add(&crate::metrics::names::DEAD_LETTERS_TOTAL, &[("source", source)], 1.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_are_json_lines_with_text_or_hex() {
        let tmp = tempfile::tempdir().unwrap();
        let mut d = DeadLetters::new(tmp.path().join("dl/x.jsonl"));
        d.write("mdt0", "5000", b"5000 garbage", "no record type").unwrap();
        d.write("gpfs", "t/0@7", &[0xff, 0x00], "not UTF-8").unwrap();
        let lines: Vec<serde_json::Value> =
            std::fs::read_to_string(d.path()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines[0]["raw"], "5000 garbage");
        assert_eq!(lines[1]["raw_hex"], "ff00");
        assert_eq!((lines[1]["source"].as_str(), lines[1]["position"].as_str()), (Some("gpfs"), Some("t/0@7")));
        assert_eq!(d.written(), 2);
        // Reopened: what is there was kept already.
        let mut again = DeadLetters::new(tmp.path().join("dl/x.jsonl"));
        assert!(!again.first_time("5000", b"5000 garbage") && !again.first_time("t/0@7", &[0xff, 0x00]));
        assert!(again.first_time("t/0@8", &[0xff, 0x00]), "the same bytes elsewhere are another letter");
    }

    #[test]
    fn a_letter_cut_short_does_not_swallow_the_next() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.jsonl");
        // A write that failed part-way (disk full) left half a line.
        std::fs::write(&path, b"{\"source\":\"m\",\"position\":\"1\",\"raw\":\"ab").unwrap();
        let mut d = DeadLetters::new(path.clone());
        d.write("m", "2", b"cd", "bad").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!((last["position"].as_str(), last["raw"].as_str()), (Some("2"), Some("cd")));
        assert_eq!(text.lines().count(), 2);
    }
}
