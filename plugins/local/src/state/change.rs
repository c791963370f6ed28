//! The local state as the monitor driver sees it: restore, apply, checkpoint, counts.

use async_trait::async_trait;
use icicle_core::monitor::{BatchCounts, ChangeState, Emit};
use icicle_core::traits::StateStore;
use icicle_core::IcicleError;

use super::{Checkpoint, LocalState, Row};
use crate::event::LocalEvent;
use crate::kernel::stream::ReaderCounts;
use crate::state::work::Work;
use crate::store::entries_log::{EntriesView, FieldsRead};
use crate::store::print::print_of;
use crate::LocalError;

/// The state as a batch's events apply to it: each puts the paths it names on the work list
/// (the pending operations), compared with the file system once the batch is applied.
impl StateStore for LocalState {
    type Event = LocalEvent;
    type Env<'e> = ();
    type Ops = Work;

    fn begin_batch(&mut self) {
        self.entries.begin();
        self.root_there = crate::kernel::mounts::root_identity(&self.root).is_some();
    }

    fn apply(&mut self, ev: &LocalEvent, _env: &mut (), work: &mut Work) {
        tracing::trace!(message = "event", event = ?ev);
        match ev {
            LocalEvent::Changed(p) => work.push(p.as_str().into()),
            LocalEvent::Directory(p) => {
                work.push(p.as_str().into());
                work.directories.insert(p.clone());
            }
            LocalEvent::Rescan(d, why) => self.rescan(d, *why, work),
            LocalEvent::Object(ino) => {
                for n in self.entries.names_of(*ino) {
                    work.push(n);
                }
            }
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn approx_bytes(&self) -> usize {
        self.entries.approx_bytes()
    }
}

#[async_trait]
impl ChangeState for LocalState {
    type Event = LocalEvent;
    type Position = u64;
    type Report = LocalReport;
    type StreamCounts = ReaderCounts;

    async fn restore(
        &mut self,
        checkpoint: Option<Vec<u8>>,
        _sent_ahead: Vec<u64>,
    ) -> Result<Option<u64>, IcicleError> {
        let Some(bytes) = checkpoint else {
            // Killed before its first checkpoint, a run may have published part of its seed.
            self.carry_journal()?;
            return Ok(None);
        };
        let cp: Checkpoint = serde_json::from_slice(&bytes).map_err(|e| LocalError::Checkpoint(e.to_string()))?;
        if cp.root != icicle_core::name::from_os(&self.root) {
            return Err(
                LocalError::Checkpoint(format!("it is of root {}, not {}", cp.root, self.root.display())).into()
            );
        }
        for r in cp.entries {
            let (rel, fields) = match r {
                Row::Now(rel, f) => (rel, f),
                Row::Before(rel, ino, size, mtime, ctime, dir, mode, uid, gid) => {
                    (rel, FieldsRead::Before(ino, size, mtime, ctime, dir, mode, uid, gid).into())
                }
            };
            self.insert(rel.into(), print_of(fields));
        }
        if let Some((generation, log_bytes)) = cp.entries_log {
            let log = self
                .log
                .as_mut()
                .ok_or_else(|| LocalError::Checkpoint("it names entries files, and this state keeps none".into()))?;
            let entries = &mut self.entries;
            entries.begin();
            log.restore(generation, log_bytes, &mut |rel, fields| entries.load(rel, fields))?;
            entries.commit();
            if let Some(e) = self.entries.take_error() {
                return Err(e.into());
            }
        }
        self.root_access = cp.root_access;
        // As on disk already.
        self.changed.clear();
        self.restored = true;
        self.carry_journal()?;
        Ok(None)
    }

    async fn apply(&mut self, batch: Vec<LocalEvent>) -> Result<Emit, IcicleError> {
        Ok(self.apply_events(batch)?)
    }

    fn more(&self) -> bool {
        self.pending.is_some()
    }

    fn checkpoint(&self, _at: &u64) -> Result<Vec<u8>, IcicleError> {
        let root = icicle_core::name::from_os(&self.root).into_owned();
        let cp = match self.log.as_ref().filter(|l| l.position().0 > 0) {
            Some(log) => {
                log.sync()?;
                Checkpoint {
                    root,
                    entries: Vec::new(),
                    entries_log: Some(log.position()),
                    root_access: self.root_access.clone(),
                }
            }
            // No entries files (or none written yet): every entry inline.
            None => {
                let mut entries = Vec::with_capacity(self.entries.len());
                self.entries
                    .each(&mut |k, f| {
                        entries.push(Row::Now(k.to_string(), f));
                        Ok(())
                    })
                    .map_err(|e| LocalError::Checkpoint(e.to_string()))?;
                Checkpoint { root, entries, entries_log: None, root_access: self.root_access.clone() }
            }
        };
        Ok(serde_json::to_vec(&cp).map_err(|e| LocalError::Checkpoint(e.to_string()))?)
    }

    fn batch_counts(&self, _reader: &ReaderCounts) -> BatchCounts {
        let c = &self.counts;
        BatchCounts {
            records_in: c.events,
            filtered: 0,
            rejects: c.rejects,
            outcomes: vec![
                ("coalesced", c.reduce.coalesced),
                ("compared", c.compared),
                ("unchanged", c.unchanged),
                ("reevaluated", c.reevaluated),
                ("unreadable", c.unreadable),
            ],
            updates: c.updates,
            deletes: c.deletes,
            batches: c.batches,
            state_entries: self.entries.len(),
            state_bytes: self.entries.approx_bytes(),
            state_counts: c.rescans.iter().map(|(k, v)| (crate::event::rescan_label(k), *v)).collect(),
        }
    }

    fn report(&self, reader: &ReaderCounts) -> LocalReport {
        let (backend, reader) = match self.opened {
            Some(b) => (Some(b), Some(reader.clone())),
            None => (None, None),
        };
        LocalReport { counts: self.counts.clone(), backend, reader }
    }
}

/// The final report of a local monitor: the state's counters, the backend and the readers'.
#[derive(serde::Serialize)]
pub struct LocalReport {
    /// The state's counters.
    #[serde(flatten)]
    pub counts: super::LocalCounts,
    /// The kernel interface that reported the changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<crate::config::Backend>,
    /// What the readers counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reader: Option<ReaderCounts>,
}
