//! The local monitor's entries on disk, written in proportion to what changed: per generation a
//! base file with every row (`<stem>.entries-<G>.json`) and a log of the rows changed since,
//! one JSON line per path, appended after every batch (`<stem>.entries-<G>.log`). The
//! checkpoint names the generation and how many bytes of its log it covers; the log is fsync'ed
//! before the checkpoint is written, and bytes past that length (a batch not checkpointed) are
//! cut off at restore. When the log has grown past the base, the next batch starts a new
//! generation; a generation's files are removed once a checkpoint names a newer one.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use crate::store::names::Name;
use crate::LocalError;

/// One entry: inode, size, mtime, ctime, directory, mode, uid, gid, ACL digest (see
/// `print::Print`).
pub type Fields = (u64, u64, i64, i64, bool, u32, u32, u32, u64);

/// Fields as read: an older release wrote them without the ACL digest.
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub enum FieldsRead {
    Now(Fields),
    Before(u64, u64, i64, i64, bool, u32, u32, u32),
}

impl From<FieldsRead> for Fields {
    fn from(f: FieldsRead) -> Fields {
        match f {
            FieldsRead::Now(f) => f,
            FieldsRead::Before(ino, size, mtime, ctime, dir, mode, uid, gid) => {
                (ino, size, mtime, ctime, dir, mode, uid, gid, 0)
            }
        }
    }
}

/// What a new generation of the entries files is written from: every row in path order.
pub trait EntriesView {
    /// Rows held.
    fn count(&self) -> usize;
    /// Every row, in path order, to `f`.
    fn each(&self, f: &mut dyn FnMut(&str, Fields) -> std::io::Result<()>) -> std::io::Result<()>;
}

impl<P: Copy + Into<Fields>> EntriesView for BTreeMap<Name, P> {
    fn count(&self) -> usize {
        self.len()
    }

    fn each(&self, f: &mut dyn FnMut(&str, Fields) -> std::io::Result<()>) -> std::io::Result<()> {
        self.iter().try_for_each(|(k, v)| f(k, (*v).into()))
    }
}

/// Reads a base file's JSON array row by row into a callback (no copy of every row at once).
struct Rows<'f>(&'f mut dyn FnMut(String, Option<Fields>), u64);

impl<'de> serde::de::Visitor<'de> for Rows<'_> {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of [path, fields] rows")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<u64, A::Error> {
        while let Some((path, fields)) = seq.next_element::<(String, FieldsRead)>()? {
            (self.0)(path, Some(fields.into()));
            self.1 += 1;
        }
        Ok(self.1)
    }
}

/// A log line: the path and its fields, or `null` when the path left the index.
type Line = (String, Option<FieldsRead>);

/// Log rows at least, before a generation is compacted (however small its base).
const MIN_LOG_ROWS: u64 = 10_000;

fn io(what: String) -> impl FnOnce(std::io::Error) -> LocalError {
    move |source| LocalError::Io { what, source }
}

/// The entries' files of one monitor.
pub struct EntriesLog {
    dir: PathBuf,
    stem: String,
    /// The generation being appended to (0: none yet; the first batch starts one).
    generation: u64,
    /// The generation the last checkpoint names (0: none): kept until a checkpoint names a
    /// newer one, however many generations an emit delivered in parts starts meanwhile.
    checkpointed: u64,
    log: Option<File>,
    log_bytes: u64,
    base_rows: u64,
    log_rows: u64,
}

impl EntriesLog {
    /// No generation yet, for files `dir/<stem>.entries-*`.
    pub fn new(dir: &Path, stem: &str) -> EntriesLog {
        EntriesLog {
            dir: dir.to_path_buf(),
            stem: stem.to_string(),
            generation: 0,
            checkpointed: 0,
            log: None,
            log_bytes: 0,
            base_rows: 0,
            log_rows: 0,
        }
    }

    fn base_path(&self, g: u64) -> PathBuf {
        self.dir.join(format!("{}.entries-{g}.json", self.stem))
    }

    fn log_path(&self, g: u64) -> PathBuf {
        self.dir.join(format!("{}.entries-{g}.log", self.stem))
    }

    /// What a checkpoint records: (generation, log bytes covered).
    pub fn position(&self) -> (u64, u64) {
        (self.generation, self.log_bytes)
    }

    /// The next record writes every entry into a new generation (the entries changed too
    /// many to name).
    pub fn whole(&mut self) {
        self.log = None;
    }

    /// The last checkpoint names the current generation (the batch after it has begun).
    pub fn checkpointed(&mut self) {
        self.checkpointed = self.generation;
    }

    /// Make the log durable up to [`EntriesLog::position`] (before a checkpoint names it).
    pub fn sync(&self) -> Result<(), LocalError> {
        match &self.log {
            Some(f) => f.sync_data().map_err(io(format!("fsync {}", self.log_path(self.generation).display()))),
            None => Ok(()),
        }
    }

    /// The rows of generation `g`'s base, then those of the first `log_bytes` of its log (a
    /// `None`: the path left the index), to `apply` in that order; the log is cut back to
    /// that length and appended to from there.
    pub fn restore(
        &mut self,
        g: u64,
        log_bytes: u64,
        apply: &mut dyn FnMut(String, Option<Fields>),
    ) -> Result<(), LocalError> {
        let base = self.base_path(g);
        let file = File::open(&base).map_err(io(format!("reading {}", base.display())))?;
        let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(file));
        let rows = serde::Deserializer::deserialize_seq(&mut de, Rows(apply, 0)).and_then(|n| de.end().map(|()| n));
        self.base_rows = rows.map_err(|e| LocalError::Checkpoint(format!("{}: {e}", base.display())))?;
        let log_path = self.log_path(g);
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(io(format!("opening {}", log_path.display())))?;
        let mut read = std::io::BufReader::new(&log);
        let (mut at, mut line, mut rows) = (0u64, Vec::new(), 0u64);
        while at < log_bytes {
            line.clear();
            let n = read.read_until(b'\n', &mut line).map_err(io(format!("reading {}", log_path.display())))?;
            if n == 0 || at + n as u64 > log_bytes {
                return Err(LocalError::Checkpoint(format!(
                    "{}: shorter than the {log_bytes} bytes the checkpoint covers",
                    log_path.display()
                )));
            }
            let (path, fields): Line = serde_json::from_slice(&line)
                .map_err(|e| LocalError::Checkpoint(format!("{} at byte {at}: {e}", log_path.display())))?;
            apply(path, fields.map(Into::into));
            at += n as u64;
            rows += 1;
        }
        drop(read);
        log.set_len(log_bytes).map_err(io(format!("cutting {} back", log_path.display())))?;
        let mut log = log;
        std::io::Seek::seek(&mut log, std::io::SeekFrom::Start(log_bytes))
            .map_err(io(format!("seeking {}", log_path.display())))?;
        (self.generation, self.checkpointed, self.log, self.log_bytes, self.log_rows) =
            (g, g, Some(log), log_bytes, rows);
        Ok(())
    }

    /// Record one batch: the `changed` paths' rows (none: a removal), or, when the log outgrew
    /// its base (or there is none), a new generation of every entry `entries` holds. Removes
    /// the generations neither current nor named by the last checkpoint.
    pub fn record<'a>(
        &mut self,
        changed: impl ExactSizeIterator<Item = (&'a str, Option<Fields>)>,
        entries: &impl EntriesView,
    ) -> Result<(), LocalError> {
        self.remove_older();
        if self.log.is_none() || self.log_rows + changed.len() as u64 > self.base_rows.max(MIN_LOG_ROWS) {
            return self.start_generation(entries);
        }
        let mut buf = Vec::with_capacity(changed.len() * 96);
        let rows = changed.len() as u64;
        for line in changed {
            serde_json::to_writer(&mut buf, &line).map_err(|e| LocalError::Checkpoint(e.to_string()))?;
            buf.push(b'\n');
        }
        let path = self.log_path(self.generation);
        if let Some(f) = self.log.as_mut() {
            if let Err(e) = f.write_all(&buf) {
                // Perhaps written in part: the next batch starts a new generation.
                self.log = None;
                return Err(io(format!("appending to {}", path.display()))(e));
            }
        }
        (self.log_bytes, self.log_rows) = (self.log_bytes + buf.len() as u64, self.log_rows + rows);
        Ok(())
    }

    /// Every entry into the base of a new generation, with an empty log.
    fn start_generation(&mut self, entries: &impl EntriesView) -> Result<(), LocalError> {
        let g = self.generation + 1;
        if self.generation == 0 {
            self.remove_older();
        }
        let base = self.base_path(g);
        // Streamed row by row: a copy of every entry at once would be the state's peak.
        let rows = |w: &mut std::io::BufWriter<&File>| -> std::io::Result<()> {
            w.write_all(b"[")?;
            let mut first = true;
            entries.each(&mut |k, v| {
                if !std::mem::take(&mut first) {
                    w.write_all(b",")?;
                }
                serde_json::to_writer(&mut *w, &(k, v)).map_err(std::io::Error::other)
            })?;
            w.write_all(b"]")
        };
        icicle_core::durable::stage(&base, true, rows)
            .and_then(|s| s.commit(true))
            .map_err(io(format!("writing {}", base.display())))?;
        let log_path = self.log_path(g);
        let log = File::create(&log_path).map_err(io(format!("creating {}", log_path.display())))?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io(format!("fsync {}", self.dir.display())))?;
        (self.generation, self.log, self.log_bytes, self.base_rows, self.log_rows) =
            (g, Some(log), 0, entries.count() as u64, 0);
        Ok(())
    }

    /// Remove the files of every generation but the current one and the one the last
    /// checkpoint names (with none yet, what is there was left by an earlier state).
    fn remove_older(&self) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return };
        let prefix = format!("{}.entries-", self.stem);
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else { continue };
            let g =
                rest.strip_suffix(".json").or_else(|| rest.strip_suffix(".log")).and_then(|n| n.parse::<u64>().ok());
            if g.is_some_and(|g| g != self.generation && g != self.checkpointed) {
                if let Err(err) = std::fs::remove_file(e.path()) {
                    tracing::warn!(message = "could not remove an old generation of the entries", path = %e.path().display(), error = %err);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(n: u64) -> Fields {
        (n, n * 10, n as i64, n as i64, n.is_multiple_of(3), 0o644, 0, 0, n % 2)
    }

    /// What `restore` applies, as a map.
    fn restored(log: &mut EntriesLog, g: u64, bytes: u64) -> Result<BTreeMap<String, Fields>, LocalError> {
        let mut m = BTreeMap::new();
        log.restore(g, bytes, &mut |k, f| match f {
            Some(f) => {
                m.insert(k, f);
            }
            None => {
                m.remove(&k);
            }
        })?;
        Ok(m)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    /// Random batches of changes, each recorded and "checkpointed"; a restore at any
    /// checkpoint gives the entries as they were then, whatever was appended after it.
    #[test]
    fn a_restore_gives_the_entries_of_the_checkpoint_it_names() {
        let seed = std::env::var("ICICLE_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| icicle_core::rng::Rng::new(std::process::id() as u64).next_u64());
        eprintln!("seed {seed} (ICICLE_TEST_SEED replays)");
        let mut rng = icicle_core::rng::Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        let mut log = EntriesLog::new(dir.path(), "m");
        let mut entries: BTreeMap<Name, Fields> = BTreeMap::new();
        let mut generations = std::collections::BTreeSet::new();
        for batch in 0..300 {
            let mut changed = std::collections::HashSet::new();
            for _ in 0..rng.below(400) {
                let k: Name = format!("d{}/f{}", rng.below(20), rng.below(3000)).into();
                if rng.below(4) == 0 {
                    entries.remove(&k);
                } else {
                    entries.insert(k.clone(), f(rng.below(1_000_000)));
                }
                changed.insert(k);
            }
            log.record(changed.iter().map(|k| (&**k, entries.get(k).copied())), &entries).unwrap();
            log.sync().unwrap();
            let (g, bytes) = log.position();
            generations.insert(g);
            log.checkpointed();
            // Not checkpointed: a batch appended past the position.
            let mut after = entries.clone();
            let extra: Vec<Name> = (0..5).map(|i| format!("after/{batch}/{i}").into()).collect();
            for k in &extra {
                after.insert(k.clone(), f(1));
            }
            let mut probe = EntriesLog::new(dir.path(), "m");
            if batch % 37 == 0 {
                log.record(extra.iter().map(|k| (&**k, after.get(k).copied())), &after).unwrap();
                let want: BTreeMap<String, Fields> = entries.iter().map(|(k, v)| (k.to_string(), *v)).collect();
                assert_eq!(restored(&mut probe, g, bytes).unwrap(), want, "seed {seed} batch {batch}");
                // Cut back: the restored log continues from the checkpoint's length.
                assert_eq!(std::fs::metadata(dir.path().join(format!("m.entries-{g}.log"))).unwrap().len(), bytes);
                log = probe;
            }
        }
        assert!(generations.len() > 2, "generations {generations:?} (seed {seed})");
        // Only the current generation's files are kept.
        let (g, _) = log.position();
        log.record(std::iter::empty(), &entries).unwrap();
        assert_eq!(names(dir.path()), [format!("m.entries-{g}.json"), format!("m.entries-{g}.log")]);
    }

    /// An emit delivered in parts records once per part, and may start new generations before
    /// its checkpoint: the generation the last checkpoint names stays until one names a newer.
    #[test]
    fn the_checkpointed_generation_outlives_the_parts_of_an_emit() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EntriesLog::new(dir.path(), "m");
        let mut entries: BTreeMap<Name, Fields> = (0..10u64).map(|i| (Name::from(format!("a{i}")), f(i))).collect();
        log.record(std::iter::empty(), &entries).unwrap();
        log.sync().unwrap();
        let (g, bytes) = log.position();
        log.checkpointed();
        let want: BTreeMap<String, Fields> = entries.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        // Parts that outgrow the log: new generations start before the checkpoint.
        for part in 0..3 {
            let changed: Vec<Name> = (0..MIN_LOG_ROWS + 1).map(|i| Name::from(format!("p{part}/{i}"))).collect();
            for k in &changed {
                entries.insert(k.clone(), f(part));
            }
            log.record(changed.iter().map(|k| (&**k, entries.get(k).copied())), &entries).unwrap();
        }
        assert!(log.position().0 >= g + 2, "generations started: {}", log.position().0 - g);
        // A stop before the emit's checkpoint: the restart restores the checkpoint's generation.
        assert_eq!(restored(&mut EntriesLog::new(dir.path(), "m"), g, bytes).unwrap(), want);
        log.checkpointed();
        log.record(std::iter::empty(), &entries).unwrap();
        let g = log.position().0;
        assert_eq!(names(dir.path()), [format!("m.entries-{g}.json"), format!("m.entries-{g}.log")]);
    }

    #[test]
    fn entries_an_older_release_wrote_without_the_acl_digest_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.entries-3.json"),
            r#"[["a",[1,10,1,1,false,420,0,0]],["d",[2,0,2,2,true,16877,0,0,7]]]"#,
        )
        .unwrap();
        let line = "[\"b\",[3,30,3,3,false,420,5,6]]\n";
        std::fs::write(dir.path().join("m.entries-3.log"), line).unwrap();
        let got = restored(&mut EntriesLog::new(dir.path(), "m"), 3, line.len() as u64).unwrap();
        let want: BTreeMap<String, Fields> = [
            ("a".to_string(), (1, 10, 1, 1, false, 420, 0, 0, 0)),
            ("b".to_string(), (3, 30, 3, 3, false, 420, 5, 6, 0)),
            ("d".to_string(), (2, 0, 2, 2, true, 16877, 0, 0, 7)),
        ]
        .into();
        assert_eq!(got, want);
    }

    #[test]
    fn a_log_shorter_than_the_checkpoint_says_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EntriesLog::new(dir.path(), "m");
        let entries: BTreeMap<Name, Fields> = [("a".into(), f(1))].into();
        log.record(std::iter::empty(), &entries).unwrap();
        let e = restored(&mut EntriesLog::new(dir.path(), "m"), 1, 10).unwrap_err().to_string();
        assert!(e.contains("m.entries-1.log") && e.contains("shorter"), "{e}");
    }
}
