//! The emulator's shared state (indexes, tasks, issued tokens, counters), the task queue and
//! the worker that runs it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::admin::IndexMeta;
use super::config::Options;
use super::entry::Entry;
use super::task::{apply, now_date, Op, Task};

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

/// Everything the emulator holds, behind [`Shared`]'s lock.
pub(super) struct State {
    /// Index id → subject → entries.
    pub(super) indexes: HashMap<String, BTreeMap<String, Vec<Entry>>>,
    /// Index id → its description and roles.
    pub(super) meta: HashMap<String, IndexMeta>,
    /// Every field an index has held (like a mapping, never forgotten).
    pub(super) fields: HashMap<String, BTreeSet<String>>,
    /// Task id → task.
    pub(super) tasks: HashMap<String, Task>,
    /// Task ids in the order received.
    pub(super) order: Vec<String>,
    /// Task ids not yet taken by the worker.
    pub(super) queue: VecDeque<String>,
    /// Access tokens issued by the token endpoint.
    pub(super) issued: HashMap<String, Grant>,
    /// Requests left in the rate limit's bucket.
    pub(super) bucket: f64,
    /// When the bucket was last refilled.
    pub(super) refilled: Instant,
    /// What `/_emulator/stats` reports.
    pub(super) counters: Counters,
    rng: icicle_core::rng::Rng,
}

/// The state shared by the connections and the task worker.
pub(super) struct Shared {
    /// How the emulator behaves.
    pub(super) opts: Options,
    state: Mutex<State>,
    wake: tokio::sync::Notify,
}

impl Shared {
    /// Fresh state for `opts`: its indexes empty, the rate limit's bucket full.
    pub(super) fn new(opts: Options) -> Shared {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7)
            ^ u64::from(std::process::id()) << 40;
        let state = State {
            indexes: opts.indexes.iter().map(|i| (i.clone(), BTreeMap::new())).collect(),
            fields: opts.indexes.iter().map(|i| (i.clone(), BTreeSet::new())).collect(),
            meta: opts.indexes.iter().map(|i| (i.clone(), IndexMeta::configured(i))).collect(),
            tasks: HashMap::new(),
            order: Vec::new(),
            queue: VecDeque::new(),
            issued: HashMap::new(),
            bucket: opts.burst.or(opts.rate_limit).unwrap_or(0.0).max(1.0),
            refilled: Instant::now(),
            counters: Counters::default(),
            rng: icicle_core::rng::Rng::new(seed),
        };
        Shared { opts, state: Mutex::new(state), wake: tokio::sync::Notify::new() }
    }

    /// The state, even if a panicking thread poisoned the lock.
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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

/// The task worker: applies tasks one at a time, in the order received.
pub(super) async fn worker(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut st = shared.lock();
            let id = st.queue.pop_front();
            if let Some(t) = id.as_ref().and_then(|id| st.tasks.get_mut(id)) {
                t.state = "PROGRESS";
            }
            id
        };
        let Some(id) = next else {
            shared.wake.notified().await;
            continue;
        };
        if !shared.opts.task_delay.is_zero() {
            tokio::time::sleep(shared.opts.task_delay).await;
        }
        let mut st = shared.lock();
        let st = &mut *st;
        let Some(task) = st.tasks.get_mut(&id) else { continue };
        let result = if task.fail {
            Err(format!("injected failure (--fail-task-every {})", shared.opts.fail_task_every.unwrap_or(0)))
        } else {
            match (task.op.take(), st.indexes.get_mut(&task.index_id), st.fields.get_mut(&task.index_id)) {
                (Some(op), Some(index), Some(fields)) => apply(index, fields, &op),
                _ => Err("the index no longer exists".into()),
            }
        };
        task.completion_date = Some(now_date());
        match result {
            Ok(()) => task.state = "SUCCESS",
            Err(m) => {
                task.state = "FAILED";
                task.message = Some(m);
                st.counters.tasks_failed += 1;
            }
        }
    }
}

/// Enqueue a task for `index`, returning its id.
pub(super) fn enqueue(shared: &Shared, index: &str, op: Op) -> String {
    let mut st = shared.lock();
    st.counters.tasks_created += 1;
    let n = st.counters.tasks_created;
    let poisoned = match &op {
        Op::Ingest(entries) => {
            entries.iter().any(|e| shared.opts.fail_task_subjects.iter().any(|s| e.subject.contains(s.as_str())))
        }
        Op::Delete(subjects) => {
            subjects.iter().any(|subject| shared.opts.fail_task_subjects.iter().any(|s| subject.contains(s.as_str())))
        }
        _ => false,
    };
    let fail = poisoned || shared.opts.fail_task_every.is_some_and(|k| k > 0 && n.is_multiple_of(k));
    let task_id = st.uuid();
    st.tasks.insert(
        task_id.clone(),
        Task {
            task_id: task_id.clone(),
            index_id: index.to_string(),
            state: "PENDING",
            message: None,
            creation_date: now_date(),
            completion_date: None,
            task_type: op.task_type(),
            op: Some(op),
            fail,
        },
    );
    st.order.push(task_id.clone());
    st.queue.push_back(task_id.clone());
    drop(st);
    shared.wake.notify_one();
    task_id
}
