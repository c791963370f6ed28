//! The emulator's shared state: each index is an `icicle serve` [`Service`] over a directory of
//! its own, with what Globus's cloud adds to it (its description, trial quota and field
//! mapping); the queue of writes not yet applied and the worker that applies them in the order
//! received; issued tokens and counters.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use icicle_plugins_index::api::auth::{PeerPolicy, Tokens};
use icicle_plugins_index::api::tasks::TaskState;
use icicle_plugins_index::api::write::{Write, WriteKind};
use icicle_plugins_index::api::{ApiError, ServeConfig, Service};

use super::admin::IndexMeta;
use super::config::Options;
use super::limits::{content_bytes, over_fields, Content};

/// What an access token allows.
#[derive(Debug, Clone)]
pub(super) struct Grant {
    /// When it stops working (`None`: never).
    pub(super) expires: Option<Instant>,
    /// The Search scopes granted.
    pub(super) scopes: Vec<String>,
    /// The caller's identity URN, which `visible_to` may name.
    pub(super) identity: Option<String>,
    /// No `Authorization` header (queries of public data only).
    pub(super) anonymous: bool,
}

/// What `/_emulator/stats` reports.
#[derive(Default)]
pub(super) struct Counters {
    /// `/v1` requests.
    pub(super) requests: u64,
    /// Requests answered 429.
    pub(super) rate_limited: u64,
    /// Write requests answered with an injected 503.
    pub(super) injected_failures: u64,
    /// Requests answered 401.
    pub(super) unauthorized: u64,
    /// Write requests.
    pub(super) writes: u64,
    /// Tasks enqueued.
    pub(super) tasks_created: u64,
    /// Tasks that ended FAILED.
    pub(super) tasks_failed: u64,
    /// Access tokens issued by the token endpoint.
    pub(super) tokens_issued: u64,
}

/// One index: the product's service over its directory, and the cloud's bookkeeping.
pub(super) struct Index {
    /// `icicle serve`'s service: what answers every search, scroll, lookup and task.
    pub(super) svc: Arc<Service>,
    /// Its description, status and roles.
    pub(super) meta: IndexMeta,
    /// Every field it has held (like a mapping, never forgotten).
    pub(super) fields: BTreeSet<String>,
    /// Content bytes of each subject it holds (what the quota counts).
    pub(super) sizes: HashMap<String, u64>,
}

impl Index {
    /// The content bytes it holds.
    pub(super) fn held(&self) -> u64 {
        self.sizes.values().sum()
    }
}

/// A write accepted and not yet applied.
pub(super) struct Queued {
    /// Its task.
    pub(super) task_id: String,
    /// The index it writes to.
    pub(super) index: String,
    /// The checked write, taken when it is applied.
    pub(super) write: Option<Write>,
    /// End FAILED without applying anything (an injected failure).
    pub(super) fail: bool,
    /// An ingest's content (sizes and fields).
    pub(super) content: Option<Content>,
}

/// Everything the emulator holds, behind [`Shared`]'s lock.
pub(super) struct State {
    /// Index id → index.
    pub(super) indexes: BTreeMap<String, Index>,
    /// Writes in the order received; the first is the one being applied.
    pub(super) queue: VecDeque<Queued>,
    /// Access tokens issued by the token endpoint.
    pub(super) issued: HashMap<String, Grant>,
    /// Requests left in the rate limit's bucket.
    pub(super) bucket: f64,
    /// When the bucket was last refilled.
    pub(super) refilled: Instant,
    /// What `/_emulator/stats` reports.
    pub(super) counters: Counters,
    /// Index directories made so far (each index's is `dir/index-N`).
    made: u64,
    rng: icicle_core::rng::Rng,
}

/// The state shared by the connections and the task worker.
pub(super) struct Shared {
    /// How the emulator behaves.
    pub(super) opts: Options,
    state: Mutex<State>,
    wake: tokio::sync::Notify,
    /// Where the index directories are.
    dir: PathBuf,
    /// The temporary directory holding them, removed last.
    _scratch: Option<Scratch>,
}

/// A temporary directory removed when dropped, waiting out an index writer's merge threads
/// that may still write into it after the writer is dropped (up to 5 s).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        for _ in 0..100 {
            match std::fs::remove_dir_all(&self.0) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                _ => return,
            }
        }
    }
}

impl Shared {
    /// Fresh state for `opts`: its indexes empty (each a new directory), the bucket full.
    pub(super) fn new(opts: Options) -> std::io::Result<Shared> {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7)
            ^ u64::from(std::process::id()) << 40;
        let (dir, scratch) = match &opts.dir {
            Some(d) => (d.clone(), None),
            None => {
                let t = tempfile::Builder::new().prefix("icicle-globus-emulator-").tempdir()?.keep();
                (t.clone(), Some(Scratch(t)))
            }
        };
        let state = State {
            indexes: BTreeMap::new(),
            queue: VecDeque::new(),
            issued: HashMap::new(),
            bucket: opts.burst.or(opts.rate_limit).unwrap_or(0.0).max(1.0),
            refilled: Instant::now(),
            counters: Counters::default(),
            made: 0,
            rng: icicle_core::rng::Rng::new(seed),
        };
        let shared =
            Shared { opts, state: Mutex::new(state), wake: tokio::sync::Notify::new(), dir, _scratch: scratch };
        for id in shared.opts.indexes.clone() {
            shared.add_index(&id, IndexMeta::configured(&id)).map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        Ok(shared)
    }

    /// The state, even if a panicking thread poisoned the lock.
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open a new, empty index `id` in a directory of its own.
    pub(super) fn add_index(&self, id: &str, meta: IndexMeta) -> Result<(), ApiError> {
        let n = {
            let mut st = self.lock();
            st.made += 1;
            st.made
        };
        let svc = Service::open(ServeConfig {
            dir: self.dir.join(format!("index-{n}")),
            index_id: Some(id.to_string()),
            tokens: Tokens::default(),
            peers: PeerPolicy::default(),
            memory_bytes: 15 << 20,
        })
        .map_err(|e| ApiError::new(500, "InternalError", e.to_string()))?;
        let ix = Index { svc: Arc::new(svc), meta, fields: BTreeSet::new(), sizes: HashMap::new() };
        self.lock().indexes.insert(id.to_string(), ix);
        Ok(())
    }

    /// The service of index `id`.
    pub(super) fn service(&self, id: &str) -> Option<Arc<Service>> {
        self.lock().indexes.get(id).map(|ix| ix.svc.clone())
    }
}

impl State {
    fn rand(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// A random version-4 UUID.
    pub(super) fn uuid(&mut self) -> String {
        let (a, b) = (self.rand(), self.rand());
        let hex = format!("{a:016x}{b:016x}");
        format!(
            "{}-{}-4{}-{}{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[13..16],
            ["8", "9", "a", "b"][(b & 3) as usize],
            &hex[17..20],
            &hex[20..32]
        )
    }

    /// A random 48-character access token.
    pub(super) fn token(&mut self) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        (0..48).map(|_| A[(self.rand() % A.len() as u64) as usize] as char).collect()
    }
}

/// Enqueue a checked write to `index` (`content`: an ingest's), returning its task id; the
/// task is PENDING until the worker takes it.
pub(super) fn enqueue(
    shared: &Shared,
    index: &str,
    write: Write,
    content: Option<Content>,
) -> Result<String, ApiError> {
    let mut st = shared.lock();
    let svc = st.indexes.get(index).map(|ix| ix.svc.clone()).ok_or_else(|| no_index(index))?;
    st.counters.tasks_created += 1;
    let n = st.counters.tasks_created;
    let named = write.subjects().iter().any(|s| shared.opts.fail_task_subjects.iter().any(|f| s.contains(f.as_str())));
    let fail = named || shared.opts.fail_task_every.is_some_and(|k| k > 0 && n.is_multiple_of(k));
    let task_id = svc.open_task(write.kind().task_type(), TaskState::Pending)?;
    st.queue.push_back(Queued {
        task_id: task_id.clone(),
        index: index.to_string(),
        write: Some(write),
        fail,
        content,
    });
    drop(st);
    shared.wake.notify_one();
    Ok(task_id)
}

fn no_index(index: &str) -> ApiError {
    ApiError::new(404, "NotFound.NoSuchIndex", format!("There is no search index named \"{index}\""))
}

/// The task worker: applies writes one at a time, in the order received, through the
/// product's [`Service::apply`]; a task fails instead when injected or when it would take its
/// index past the fields limit.
pub(super) async fn worker(shared: Arc<Shared>) {
    loop {
        let front = {
            let st = shared.lock();
            st.queue.front().and_then(|q| Some((q.task_id.clone(), st.indexes.get(&q.index)?.svc.clone())))
        };
        let Some((task_id, svc)) = front else {
            shared.wake.notified().await;
            continue;
        };
        let _ = svc.update_task(&task_id, TaskState::Progress);
        if !shared.opts.task_delay.is_zero() {
            tokio::time::sleep(shared.opts.task_delay).await;
        }
        let Some((mut q, refused)) = take(&shared) else { continue };
        let result = match (refused, q.write.take()) {
            (Some(why), _) => Err(why),
            (None, None) => Err("the task lost its write".to_string()),
            (None, Some(write)) => {
                let kind = write.kind();
                let svc2 = svc.clone();
                let applied = tokio::task::spawn_blocking(move || svc2.apply(write)).await;
                let r = match applied {
                    Ok(r) => r.map_err(|e| e.message),
                    Err(e) => Err(format!("the write's thread: {e}")),
                };
                // What a query deleted, or a failed commit, is read back from the index.
                if kind == WriteKind::DeleteByQuery || r.is_err() {
                    resize(&shared, &q.index, &svc);
                }
                r
            }
        };
        let state = match result {
            Ok(()) => TaskState::Success,
            Err(m) => {
                shared.lock().counters.tasks_failed += 1;
                TaskState::Failed(m)
            }
        };
        let _ = svc.update_task(&task_id, state);
    }
}

/// Take the first queued write off the queue, with why its task fails without applying
/// anything (injected, or over the index's fields); else count its content as the index's.
fn take(shared: &Shared) -> Option<(Queued, Option<String>)> {
    let mut st = shared.lock();
    let q = st.queue.pop_front()?;
    if q.fail {
        let k = shared.opts.fail_task_every.unwrap_or(0);
        return Some((q, Some(format!("injected failure (--fail-task-every {k})"))));
    }
    let Some(ix) = st.indexes.get_mut(&q.index) else { return Some((q, Some("the index no longer exists".into()))) };
    if let Some(c) = &q.content {
        if let Some(why) = over_fields(&ix.fields, &c.fields) {
            return Some((q, Some(why)));
        }
        ix.fields.extend(c.fields.iter().cloned());
        for (s, n) in &c.sizes {
            ix.sizes.insert(s.clone(), *n);
        }
    }
    if let Some(w) = &q.write {
        if matches!(w.kind(), WriteKind::DeleteBySubject | WriteKind::DeleteSubject | WriteKind::DeleteEntry) {
            for s in w.subjects() {
                ix.sizes.remove(s);
            }
        }
    }
    Some((q, None))
}

/// Count the content bytes of `index` again from what its service holds.
fn resize(shared: &Shared, index: &str, svc: &Service) {
    let mut sizes = HashMap::new();
    let mut after: Option<String> = None;
    while let Ok(page) = svc.stored_entries(after.as_deref(), 1000) {
        for e in &page {
            sizes.insert(e["subject"].as_str().unwrap_or_default().to_string(), content_bytes(&e["content"]));
        }
        match page.last() {
            Some(e) if page.len() == 1000 => after = e["subject"].as_str().map(str::to_string),
            _ => break,
        }
    }
    if let Some(ix) = shared.lock().indexes.get_mut(index) {
        ix.sizes = sizes;
    }
}
