//! The Lustre monitor's [`ChangeState`]: the rule table reduces a batch, the directory tree
//! (or FSMonitor-style resolution) turns it into path operations, and each update is stat'ed
//! through the mount at emit.

use std::sync::Arc;

use async_trait::async_trait;
use icicle_core::access::{lstat_dir, ChainCache};
use icicle_core::batch::EntryBatch;
use icicle_core::monitor::{reduce_apply, BatchCounts, ChangeState, Emit};
use icicle_core::record::{FileRecord, Storage};
use icicle_core::traits::{Reducer, StateStore};
use icicle_core::IcicleError;
use icicle_gmeta::{subject_for, Judge, PrimaryEncoder, Published};

use crate::changelog::{ChangelogRecord, Fid};
use crate::config::{LustreConfig, MonitorCounts, Resolution};
use crate::lookahead::Lookahead;
use crate::reducer::{ReduceCounts, Reduction};
use crate::resolve::{fsmonitor_apply, walk_files, Lfs, LfsResolver};
use crate::tree::{DirectoryTree, Ops, PathOp};

/// Paths refused by the path check (for the sampled warning).
static UNPUBLISHABLE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One MDT's directory tree and what applying records to it needs.
pub struct TreeState {
    pub cfg: Arc<LustreConfig>,
    pub lfs: Lfs,
    /// With `mdts`: the merged changelog `lfs` reads (its positions go in the checkpoint).
    pub dne: Option<Arc<std::sync::Mutex<crate::dne::MergedChangelog>>>,
    pub tree: DirectoryTree,
    pub lookahead: Lookahead,
    /// FSMonitor-style resolution's cache (`resolution` other than `tree`).
    pub fsm: Option<lru::LruCache<Fid, String>>,
    pub enc: PrimaryEncoder,
    /// Visibility follows directory permissions.
    pub posix: bool,
    /// What applying counted (reduction, updates, deletes, vanished, withdrawn, batches); the
    /// stream counts the rest.
    pub counts: MonitorCounts,
    /// The next batch re-reads what a killed run may have delivered (see `restore`).
    pub replaying: bool,
    /// With `layout`: files' storage attributes by path, with the (inode, size, ctime) they
    /// were read at.
    pub layouts: Option<lru::LruCache<String, (LayoutKey, Storage)>>,
}

/// What a file's layout was read at (inode, size, ctime seconds and nanoseconds): a change of
/// any part reads it again (a layout changes with `lfs migrate`, which changes ctime, and
/// grows with the file under PFL).
pub type LayoutKey = (u64, u64, i64, i64);

fn layout_key(md: &std::fs::Metadata) -> LayoutKey {
    use std::os::unix::fs::MetadataExt;
    (md.ino(), md.size(), md.ctime(), md.ctime_nsec())
}

/// What a file's read gives the cache: the attributes last known for it (the same inode)
/// with the parts this read answered put in (`layout`/`project`: `None` when not asked,
/// `Some(None)` when `lfs` had no answer for it), kept under `key` only when every asked
/// part answered; else under a key no file has, so the next batch asks again. Returns the
/// entry and whether the read was complete.
fn merge_read(
    prev: Option<&(LayoutKey, Storage)>,
    key: LayoutKey,
    layout: Option<Option<&Storage>>,
    project: Option<Option<u32>>,
) -> ((LayoutKey, Storage), bool) {
    let mut st = prev.filter(|(k, _)| k.0 == key.0).map(|(_, s)| s.clone()).unwrap_or_default();
    if let Some(Some(l)) = layout {
        st = Storage { project_id: st.project_id, ..l.clone() };
    }
    if let Some(Some(id)) = project {
        st.project_id = Some(id);
    }
    let complete = !matches!(layout, Some(None)) && !matches!(project, Some(None));
    let stored = if complete { key } else { (key.0, u64::MAX, i64::MIN, i64::MIN) };
    ((stored, st), complete)
}

impl TreeState {
    /// `path` (relative to the file system) where the file system is mounted.
    fn on_mount(&self, path: &str) -> std::path::PathBuf {
        icicle_core::name::on(&self.cfg.mount, path)
    }

    /// `path` as records name it.
    fn full_path(&self, path: &str) -> String {
        format!("{}{}", self.cfg.path_prefix.trim_end_matches('/'), path)
    }

    /// Reduce `batch` (with `reduction`; `None`: keep every record) and resolve it into path
    /// operations; returns them with what the reduction did.
    fn resolve(
        &mut self,
        batch: &mut Vec<ChangelogRecord>,
        reduction: Option<&mut Reduction>,
    ) -> Result<(Ops, ReduceCounts), IcicleError> {
        let cfg = &self.cfg;
        let mut ops = Ops::default();
        let (tree, fsm) = (&mut self.tree, &mut self.fsm);
        let mut failure = None;
        let rc = tokio::task::block_in_place(|| {
            let mut r = LfsResolver {
                lfs: &self.lfs,
                fsname: &cfg.fsname,
                mount: &cfg.mount,
                mdt: &cfg.mdt,
                lookahead: &mut self.lookahead,
                chunk: cfg.read_size,
                failure: None,
            };
            let rc = match fsm {
                // The tree tells the resolver where the batch begins (the look-ahead moves on).
                None => reduce_apply(reduction, tree, batch, &mut r, &mut ops),
                // No state store: every record resolved by itself, through the cache.
                Some(cache) => {
                    let rc = match reduction {
                        Some(red) => red.reduce(batch),
                        None => {
                            ReduceCounts { input: batch.len() as u64, passed: batch.len() as u64, ..Default::default() }
                        }
                    };
                    tree.begin_batch();
                    r.lookahead.next_batch(batch.first().map(|r| r.index).unwrap_or(0));
                    let naive = cfg.resolution == Resolution::Naive;
                    for rec in batch.iter() {
                        if naive {
                            cache.clear();
                        }
                        fsmonitor_apply(rec, cache, &mut r, &mut tree.counts, &mut ops);
                    }
                    rc
                }
            };
            failure = r.failure.take();
            rc
        });
        match failure {
            None => Ok((ops, rc)),
            // Retried from the checkpoint (the tree in memory may hold part of this batch).
            Some(failure) => Err(IcicleError::Source(icicle_core::SourceError::External(format!(
                "MDT {}: {failure}: the batch is not applied",
                cfg.mdt
            )))),
        }
    }

    /// Encode one batch's operations: stat every update now, skip what vanished. When
    /// visibility follows directory permissions, each record is judged along its
    /// directories as they are now, and a directory whose attributes changed has everything
    /// below it published again.
    fn emit(&mut self, ops: Ops, counts: &mut MonitorCounts) -> Emit {
        let mut chunk = EntryBatch::default();
        let mut deletes = Vec::new();
        let mut chains = ChainCache::new("/");
        let mut changed_dirs = Vec::new();
        let mut files = Vec::with_capacity(ops.len());
        for (path, op) in &ops {
            // The row checks every published record passes, before anything is stat'ed or
            // sent: a name of `..` or with a `/` in a record must not reach outside the mount.
            if let Err(e) = icicle_core::record::check_path(path) {
                counts.rejects += 1;
                if let Some(n) = icicle_core::log_sample::count_to_log(&UNPUBLISHABLE) {
                    tracing::warn!(message = "changelog path refused (the first 20 are logged, then one in 10,000)", path = %path, error = %e, seen = n);
                }
                continue;
            }
            match op {
                PathOp::Delete => {
                    self.tree.unindexed(path);
                    deletes.push(subject_for(&self.full_path(path)).into_owned());
                }
                PathOp::Update => {
                    let Ok(md) = std::fs::symlink_metadata(self.on_mount(path)) else {
                        counts.vanished += 1;
                        self.tree.vanished(path);
                        continue;
                    };
                    if !md.is_dir() {
                        files.push((path, md));
                        continue;
                    }
                    // A directory's attributes changed (a SATTR carries no mode: what is
                    // below was published with permissions that may differ from these).
                    if self.posix {
                        changed_dirs.push(path.clone());
                    } else {
                        counts.vanished += 1;
                        self.tree.vanished(path);
                    }
                }
            }
        }
        let mut again = Vec::new();
        for dir in changed_dirs {
            for rel in walk_files(&self.on_mount(&dir)) {
                let path = if dir == "/" { format!("/{rel}") } else { format!("{dir}/{rel}") };
                if ops.contains_key(&path) {
                    continue;
                }
                if let Ok(md) = std::fs::symlink_metadata(self.on_mount(&path)) {
                    again.push((path, md));
                }
            }
        }
        self.read_layouts(
            files.iter().map(|(p, md)| (p.as_str(), md)).chain(again.iter().map(|(p, md)| (p.as_str(), md))),
            counts,
        );
        for (path, md) in files {
            self.encode_update(path, &md, &mut chains, &mut chunk, &mut deletes, counts);
        }
        for (path, md) in again {
            counts.reevaluated += 1;
            self.encode_update(&path, &md, &mut chains, &mut chunk, &mut deletes, counts);
        }
        counts.deletes += deletes.len() as u64;
        // A restart that replays this batch may resolve other paths (the file system moved
        // on): it must still know that the index may hold these.
        Emit { chunk, deletes, sent: self.tree.take_fresh_sent() }
    }

    /// With `layout` or `project`: read the layouts and project IDs of the regular files among
    /// `files` (paths relative to the file system) that are not known at their inode, size
    /// and ctime, in calls of many files each.
    fn read_layouts<'p>(
        &mut self,
        files: impl Iterator<Item = (&'p str, &'p std::fs::Metadata)>,
        counts: &mut MonitorCounts,
    ) {
        let Some(cache) = self.layouts.as_mut() else { return };
        let mut ask: Vec<(String, LayoutKey)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (path, md) in files.filter(|(_, md)| md.is_file()) {
            let key = layout_key(md);
            if cache.get(path).is_none_or(|(k, _)| *k != key) && seen.insert(path) {
                ask.push((path.to_string(), key));
            }
        }
        if ask.is_empty() {
            return;
        }
        let on_mount: Vec<std::path::PathBuf> = ask.iter().map(|(p, _)| self.on_mount(p)).collect();
        let names: Vec<&std::path::Path> = on_mount.iter().map(std::path::PathBuf::as_path).collect();
        counts.layouts_read += ask.len() as u64;
        let (lfs, cfg) = (&self.lfs, &self.cfg);
        let warn = |what: &str, e: &str| {
            tracing::warn!(message = "lfs failed: files keep the attributes last read", what, mdt = %cfg.mdt, error = %e);
        };
        let layouts: Option<std::collections::HashMap<std::path::PathBuf, Storage>> =
            cfg.layout.then(|| match tokio::task::block_in_place(|| lfs.getstripe(&names)) {
                Ok((got, _)) => got.into_iter().collect(),
                Err(e) => {
                    warn("getstripe", &e);
                    Default::default()
                }
            });
        let projects: Option<std::collections::HashMap<std::path::PathBuf, u32>> =
            cfg.project.then(|| match tokio::task::block_in_place(|| lfs.project_ids(&names)) {
                Ok((got, _)) => got.into_iter().collect(),
                Err(e) => {
                    warn("project", &e);
                    Default::default()
                }
            });
        let cache = self.layouts.as_mut().expect("checked above");
        for ((path, key), name) in ask.into_iter().zip(on_mount) {
            let layout = layouts.as_ref().map(|m| m.get(&name));
            let project = projects.as_ref().map(|m| m.get(&name).copied());
            let (kept, complete) = merge_read(cache.peek(&path), key, layout, project);
            counts.layouts_failed += u64::from(!complete);
            cache.put(path, kept);
            if cache.len() > cfg.layout_cache.max(1) {
                cache.pop_lru();
            }
        }
    }

    /// Encode the update of file `path` (metadata `md`) into `chunk`; one that cannot be
    /// published (no mapped principal may see it as it is now) is withdrawn: a delete.
    fn encode_update(
        &mut self,
        path: &str,
        md: &std::fs::Metadata,
        chains: &mut ChainCache,
        chunk: &mut EntryBatch,
        deletes: &mut Vec<String>,
        counts: &mut MonitorCounts,
    ) {
        let full = self.full_path(path);
        // The attributes last read for this file (this inode), even if the last read failed:
        // an upsert without them would erase them from the index.
        let inode = layout_key(md).0;
        let storage = self
            .layouts
            .as_mut()
            .and_then(|c| c.get(path))
            .filter(|(k, s)| k.0 == inode && !s.is_empty())
            .map(|(_, s)| s.clone());
        let rec = FileRecord { storage: storage.as_ref(), ..FileRecord::from_metadata(&full, md) };
        let file = self.posix.then(|| self.on_mount(path));
        let mount = &self.cfg.mount;
        let mut lookup = |d: &str| lstat_dir(&icicle_core::name::on(mount, d));
        let judge = file.as_deref().map(|file| Judge { chains, path, lookup: &mut lookup, acl_at: Some(file) });
        match self.enc.publish(chunk, deletes, &rec, judge) {
            Published::Sent => {
                counts.updates += 1;
                self.tree.indexed(path);
            }
            Published::Withdrawn => {
                counts.withdrawn += 1;
                self.tree.unindexed(path);
            }
        }
    }
}

#[async_trait]
impl ChangeState for TreeState {
    type Event = ChangelogRecord;
    type Position = u64;
    type Report = MonitorCounts;
    type StreamCounts = MonitorCounts;

    /// The directory tree as of the last cleared index; a checkpoint that cannot be parsed is
    /// logged and the tree starts empty (it resolves what it meets through fid2path).
    async fn restore(&mut self, checkpoint: Option<Vec<u8>>, sent_ahead: Vec<u64>) -> Result<Option<u64>, IcicleError> {
        let parsed = checkpoint.and_then(|bytes| match serde_json::from_slice::<crate::tree::Checkpoint>(&bytes) {
            Ok(cp) => Some(cp),
            Err(e) => {
                tracing::warn!(message = "ignoring an unreadable checkpoint", mdt = %self.cfg.mdt, error = %e);
                None
            }
        });
        let cleared = parsed.as_ref().map(|cp| cp.index);
        if let Some(merged) = &self.dne {
            let mut merged = merged.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match parsed.as_ref().map(|cp| (cp.index, cp.mdts.as_deref())) {
                Some((at, Some(positions))) => merged.restore(at, positions),
                Some((_, None)) => {
                    return Err(IcicleError::Source(icicle_core::SourceError::External(format!(
                        "{}: the checkpoint in {} was written for one MDT, and `mdts` reads several as one \
                         sequence: give this source another state_dir (or mdt name) to start it anew",
                        self.cfg.mdt,
                        self.cfg.state_dir.display()
                    ))))
                }
                None => {}
            }
        } else if parsed.as_ref().is_some_and(|cp| cp.mdts.is_some()) {
            return Err(IcicleError::Source(icicle_core::SourceError::External(format!(
                "{}: the checkpoint in {} was written for several MDTs read as one (`mdts`): \
                 give this source another state_dir (or mdt name) to start it anew",
                self.cfg.mdt,
                self.cfg.state_dir.display()
            ))));
        }
        if let Some(cp) = parsed {
            self.tree = DirectoryTree::restore(cp, self.cfg.lru_capacity);
        }
        self.lookahead = Lookahead::new(cleared.unwrap_or(0));
        self.tree.dir_attributes = self.posix;
        self.tree.striped = self.cfg.mdts.len() > 1;
        // A kill between delivery and checkpoint: the first batch reads those records again
        // (from the same cleared index, as many), and must not cancel a create the index may
        // hold already against its unlink (the tree's own cancellation knows those paths).
        self.replaying = !sent_ahead.is_empty();
        self.tree.maybe_sent(sent_ahead);
        Ok(cleared)
    }

    async fn apply(&mut self, mut batch: Vec<ChangelogRecord>) -> Result<Emit, IcicleError> {
        // After a restart that may replay delivered records, the first batch keeps create and
        // unlink pairs (see `restore`).
        let mut reduction =
            self.cfg.reduction.then(|| Reduction { keeping_pairs: std::mem::take(&mut self.replaying) });
        let (ops, rc) = self.resolve(&mut batch, reduction.as_mut())?;
        let mut counts = std::mem::take(&mut self.counts);
        counts.reduce.add(&rc);
        let emit = self.emit(ops, &mut counts);
        counts.batches += 1;
        self.counts = counts;
        Ok(emit)
    }

    fn checkpoint(&self, at: &u64) -> Result<Vec<u8>, IcicleError> {
        let mut cp = self.tree.checkpoint(*at);
        if let Some(merged) = &self.dne {
            cp.mdts = Some(merged.lock().unwrap_or_else(std::sync::PoisonError::into_inner).positions(*at));
        }
        serde_json::to_vec(&cp).map_err(|e| IcicleError::Internal(format!("encoding the checkpoint: {e}")))
    }

    fn batch_counts(&self, stream: &MonitorCounts) -> BatchCounts {
        let c = self.counts.merged(stream);
        let (r, t) = (&c.reduce, &self.tree.counts);
        BatchCounts {
            records_in: c.records,
            filtered: c.filtered,
            rejects: c.rejects,
            outcomes: vec![
                ("passed", r.passed),
                ("coalesced", r.coalesced),
                ("cancelled", r.cancelled),
                ("ignored", r.ignored),
            ],
            updates: c.updates,
            deletes: c.deletes,
            batches: c.batches,
            state_entries: self.tree.len(),
            state_bytes: self.tree.approx_bytes(),
            state_counts: vec![
                ("evictions", t.evictions),
                ("fid2path_calls", t.fid2path_calls),
                ("fid2path_failures", t.fid2path_failures),
                ("vanished", c.vanished),
                ("lost_records", c.lost_records),
                ("layouts_read", c.layouts_read),
                ("layouts_failed", c.layouts_failed),
            ],
        }
    }

    fn report(&self, stream: &MonitorCounts) -> MonitorCounts {
        let mut c = self.counts.merged(stream);
        c.tree = self.tree.counts;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_that_fails_keeps_what_was_known_and_asks_again() {
        let key = (7, 100, 5, 0);
        let st =
            Storage { fid: Some("[0x1:0x2:0x0]".into()), osts: vec![3], project_id: Some(9), ..Storage::default() };
        let prev = (key, st.clone());
        let new = Storage { fid: Some("[0x1:0x2:0x0]".into()), osts: vec![4, 5], ..Storage::default() };
        let bigger = (7, 200, 6, 0);
        // Both parts answered: the new layout, the new project, the new key.
        let ((k, s), ok) = merge_read(Some(&prev), bigger, Some(Some(&new)), Some(Some(11)));
        assert!(ok);
        assert_eq!((k, s.osts, s.project_id), (bigger, vec![4, 5], Some(11)));
        // The project read failed: the new layout, the project known before, asked again.
        let ((k, s), ok) = merge_read(Some(&prev), bigger, Some(Some(&new)), Some(None));
        assert!(!ok);
        assert_eq!((s.osts.as_slice(), s.project_id), (&[4, 5][..], Some(9)));
        assert_ne!(k, bigger);
        // Nothing answered: what was known stays.
        let ((_, s), ok) = merge_read(Some(&prev), bigger, Some(None), Some(None));
        assert!(!ok);
        assert_eq!(s, st);
        // Another file at the path (another inode): nothing of the old one carries over.
        let ((_, s), _) = merge_read(Some(&prev), (8, 1, 1, 0), Some(None), None);
        assert!(s.is_empty());
        // Only the layout asked.
        let ((k, s), ok) = merge_read(None, key, Some(Some(&new)), None);
        assert!(ok && k == key && s.project_id.is_none());
    }
}
