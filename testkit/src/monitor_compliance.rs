//! The change-source compliance check: any [`ChangeSource`] run by the runtime's driver into a
//! sink that fails, or a stop signal, at random deliveries (a failure before the sink took the
//! batch, one after it took it but before the answer, a clean stop), restarted from its
//! checkpoint each time, must leave the index the run without faults leaves. Nothing
//! acknowledged upstream may be missing and nothing deleted may come back.
//!
//! [`ToyMonitor`] is the smallest stream and state that keep the driver's contract (an
//! in-memory changelog, truncated at acknowledgement); `tests/monitor_compliance.rs` runs the check
//! on it and on the inotify monitor (real kernel events).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use icicle_core::batch::{DocumentBatch, EntryBatch};
use icicle_core::error::{IcicleError, Retry, SinkError};
use icicle_core::monitor::{
    BatchCounts, ChangeSource, ChangeState, ChangeStream, DriverSettings, Emit, Monitor, MonitorContext, Polled,
};
use icicle_core::traits::Sink;

/// Subject → entry content (JSON text), as a search index would hold it.
pub type Index = BTreeMap<String, String>;

/// What the sink does at one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Refuse it; the index is unchanged.
    FailBefore,
    /// Take it into the index, then fail (the answer was lost).
    FailAfter,
    /// Take it, then raise the stop signal (SIGTERM after this batch).
    Stop,
}

/// A sink that applies deliveries to a shared [`Index`] and injects `fault` at delivery
/// number `at` (counted from 1).
pub struct IndexSink {
    index: Arc<Mutex<Index>>,
    fault: Option<(usize, Fault)>,
    delivered: usize,
    stop: Option<Arc<tokio::sync::watch::Sender<bool>>>,
}

impl IndexSink {
    fn apply(&self, batch: &DocumentBatch) -> Result<(), SinkError> {
        let bad = |reason: String| SinkError::Io { sink: "index".into(), reason };
        let mut index = self.index.lock().map_err(|_| bad("poisoned".into()))?;
        match batch {
            DocumentBatch::Ingest(entries) => {
                for e in entries.entries() {
                    let v: serde_json::Value = serde_json::from_slice(e).map_err(|e| bad(e.to_string()))?;
                    let subject = v["subject"].as_str().ok_or_else(|| bad("an entry without a subject".into()))?;
                    index.insert(subject.to_string(), v["content"].to_string());
                }
            }
            DocumentBatch::Delete(subjects) => {
                for s in subjects {
                    index.remove(s);
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for IndexSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        self.delivered += 1;
        let fault = self.fault.filter(|(at, _)| *at == self.delivered).map(|(_, f)| f);
        let injected =
            || SinkError::Remote { sink: "index".into(), reason: "injected failure".into(), retry: Retry::WithBackoff };
        if fault == Some(Fault::FailBefore) {
            return Err(injected());
        }
        self.apply(batch)?;
        match fault {
            Some(Fault::FailAfter) => Err(injected()),
            Some(Fault::Stop) => {
                if let Some(s) = &self.stop {
                    let _ = s.send(true);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// One run of `source` into `index` with `fault` injected at delivery `at` (none: `None`).
/// Returns whether the run ended without an error.
pub async fn run_once(source: &dyn ChangeSource, index: &Arc<Mutex<Index>>, fault: Option<(usize, Fault)>) -> bool {
    let (tx, stop) = tokio::sync::watch::channel(false);
    let tx = Arc::new(tx);
    let sink = IndexSink { index: index.clone(), fault, delivered: 0, stop: Some(tx.clone()) };
    let mut ctx = MonitorContext::for_test(vec![("index".to_string(), Box::new(sink) as Box<dyn Sink>)]);
    ctx.stop = stop;
    icicle_runtime::monitor::driver::run(source, &ctx).await.is_ok()
}

/// Run `make()`'s source with faults drawn from `seed` until a run ends cleanly with no fault
/// (at most `attempts` faulty runs; `between(i)` is called after faulty run `i`, e.g. to change
/// the input while the source is down); returns the index it leaves.
pub async fn run_with_faults(
    make: &dyn Fn() -> Arc<dyn ChangeSource>,
    seed: u64,
    attempts: usize,
    between: &mut dyn FnMut(usize),
) -> Index {
    let mut rng = icicle_core::rng::Rng::new(seed);
    let index = Arc::new(Mutex::new(Index::new()));
    for i in 0..attempts {
        let fault = match rng.below(3) {
            0 => Fault::FailBefore,
            1 => Fault::FailAfter,
            _ => Fault::Stop,
        };
        let at = 1 + rng.below(4) as usize;
        run_once(make().as_ref(), &index, Some((at, fault))).await;
        between(i);
    }
    while !run_once(make().as_ref(), &index, None).await {}
    let out = index.lock().map(|i| i.clone()).unwrap_or_default();
    out
}

/// The first difference between two indexes, for a failure message.
pub fn first_difference(want: &Index, got: &Index) -> Option<String> {
    for (k, v) in want {
        match got.get(k) {
            None => return Some(format!("{k} is missing")),
            Some(g) if g != v => return Some(format!("{k} is {g}, not {v}")),
            _ => {}
        }
    }
    got.keys().find(|k| !want.contains_key(*k)).map(|k| format!("{k} should not be there"))
}

/// One change of the toy changelog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToyChange {
    /// The named file was written (its version).
    Write(String, u64),
    /// The named file was removed.
    Remove(String),
}

/// The toy changelog: records indexed from 1, those up to `cleared` acknowledged.
#[derive(Debug, Default)]
pub struct ToyLog {
    /// Every record, index = position + 1.
    pub records: Vec<ToyChange>,
    /// The last acknowledged index.
    pub cleared: u64,
    /// The most records one read returns.
    pub read_size: usize,
}

/// A change source over a [`ToyLog`]: the stream reads after the checkpoint's index and
/// acknowledges by clearing; the state is each file's version.
pub struct ToyMonitor {
    /// The shared changelog.
    pub log: Arc<Mutex<ToyLog>>,
    /// Where its state files live.
    pub state_dir: std::path::PathBuf,
}

/// The toy stream: a read cursor over the log.
pub struct ToyStream {
    log: Arc<Mutex<ToyLog>>,
    next: u64,
}

/// The toy state: each file's version.
#[derive(Default)]
pub struct ToyState {
    files: BTreeMap<String, u64>,
    updates: u64,
    deletes: u64,
}

#[async_trait]
impl Monitor for ToyMonitor {
    type Stream = ToyStream;
    type State = ToyState;

    fn settings(&self, _ctx: &MonitorContext) -> DriverSettings {
        DriverSettings::in_state_dir(3, 0.0, &self.state_dir, "toy", "toy log".into())
    }

    fn state(&self, _ctx: &MonitorContext, _settings: &DriverSettings) -> Result<ToyState, IcicleError> {
        Ok(ToyState::default())
    }

    async fn open(
        &self,
        _ctx: &MonitorContext,
        _state: &mut ToyState,
        resume: Option<u64>,
    ) -> Result<ToyStream, IcicleError> {
        let cleared = self.log.lock().map(|l| l.cleared).unwrap_or(0);
        Ok(ToyStream { log: self.log.clone(), next: resume.unwrap_or(0).max(cleared) + 1 })
    }
}

#[async_trait]
impl ChangeStream for ToyStream {
    type Event = (u64, ToyChange);
    type Position = u64;
    type Counts = ();

    async fn poll(
        &mut self,
        out: &mut Vec<(u64, ToyChange)>,
        _wait: Option<std::time::Duration>,
        _stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Polled, IcicleError> {
        let log = self.log.lock().map_err(|_| IcicleError::Internal("poisoned".into()))?;
        let from = (self.next - 1) as usize;
        let to = (from + log.read_size.max(1)).min(log.records.len());
        if from >= to {
            return Ok(Polled::End);
        }
        for (i, c) in log.records[from..to].iter().enumerate() {
            out.push(((from + i + 1) as u64, c.clone()));
        }
        self.next = to as u64 + 1;
        Ok(Polled::New)
    }

    fn position(&self, batch: &[(u64, ToyChange)], _rest_empty: bool) -> Option<u64> {
        batch.last().map(|(i, _)| *i)
    }

    fn counts(&self) {}

    async fn truncate(&mut self, to: &u64) -> Result<(), IcicleError> {
        let mut log = self.log.lock().map_err(|_| IcicleError::Internal("poisoned".into()))?;
        if *to >= self.next {
            return Err(IcicleError::Internal(format!("acknowledged {to}, past what was read ({})", self.next - 1)));
        }
        log.cleared = log.cleared.max(*to);
        Ok(())
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ToyCheckpoint {
    files: BTreeMap<String, u64>,
    index: u64,
}

#[async_trait]
impl ChangeState for ToyState {
    type Event = (u64, ToyChange);
    type Position = u64;
    type Report = BTreeMap<String, u64>;
    type StreamCounts = ();

    async fn restore(
        &mut self,
        checkpoint: Option<Vec<u8>>,
        _sent_ahead: Vec<u64>,
    ) -> Result<Option<u64>, IcicleError> {
        let Some(bytes) = checkpoint else { return Ok(None) };
        let cp: ToyCheckpoint = serde_json::from_slice(&bytes).map_err(|e| IcicleError::Internal(e.to_string()))?;
        self.files = cp.files;
        Ok(Some(cp.index))
    }

    /// The last change of each name in the batch wins, as a state's pending operations do.
    async fn apply(&mut self, batch: Vec<(u64, ToyChange)>) -> Result<Emit, IcicleError> {
        let mut last: BTreeMap<String, Option<u64>> = BTreeMap::new();
        for (_, c) in batch {
            match c {
                ToyChange::Write(name, v) => {
                    self.files.insert(name.clone(), v);
                    last.insert(name, Some(v));
                }
                ToyChange::Remove(name) => {
                    self.files.remove(&name);
                    last.insert(name, None);
                }
            }
        }
        let mut emit = Emit { chunk: EntryBatch::default(), deletes: Vec::new(), sent: Vec::new() };
        for (name, v) in last {
            match v {
                Some(v) => {
                    emit.chunk
                        .push(serde_json::json!({"subject": name, "content": {"version": v}}).to_string().as_bytes());
                    self.updates += 1;
                }
                None => {
                    emit.deletes.push(name);
                    self.deletes += 1;
                }
            }
        }
        Ok(emit)
    }

    fn checkpoint(&self, at: &u64) -> Result<Vec<u8>, IcicleError> {
        serde_json::to_vec(&ToyCheckpoint { files: self.files.clone(), index: *at })
            .map_err(|e| IcicleError::Internal(e.to_string()))
    }

    fn batch_counts(&self, _stream: &()) -> BatchCounts {
        BatchCounts {
            records_in: 0,
            filtered: 0,
            rejects: 0,
            outcomes: Vec::new(),
            updates: self.updates,
            deletes: self.deletes,
            batches: 0,
            state_entries: self.files.len(),
            state_bytes: 0,
            state_counts: Vec::new(),
        }
    }

    fn report(&self, _stream: &()) -> BTreeMap<String, u64> {
        self.files.clone()
    }
}

/// A random toy changelog of `n` records over a few names, from `seed`, and the index it
/// describes.
pub fn toy_log(seed: u64, n: usize) -> (Vec<ToyChange>, Index) {
    let mut rng = icicle_core::rng::Rng::new(seed);
    let mut records = Vec::with_capacity(n);
    let mut index = Index::new();
    for v in 0..n as u64 {
        let name = format!("/toy/f{}", rng.below(12));
        if rng.below(4) == 0 {
            index.remove(&name);
            records.push(ToyChange::Remove(name));
        } else {
            index.insert(name.clone(), serde_json::json!({"version": v}).to_string());
            records.push(ToyChange::Write(name, v));
        }
    }
    (records, index)
}
