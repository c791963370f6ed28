//! Tasks as Search reports them (<https://docs.globus.org/api/search/reference/get_task/>): the
//! Task document of each write, remembered in memory (the last [`MAX_TASKS`]). `icicle serve`
//! records a task once its write is committed, so it is `SUCCESS` when first seen; a front end
//! that applies writes later (the testkit's emulator, with its queue and injected failures)
//! opens a task `PENDING` and moves it on with [`Service::update_task`].

use std::collections::{HashMap, VecDeque};

use serde_json::{json, Value};

use super::{ApiError, Service};

/// The most tasks remembered (oldest forgotten first).
pub const MAX_TASKS: usize = 10_000;
/// The most tasks `GET /v1/task_list/<id>` lists (newest first).
pub const MAX_TASK_LIST: usize = 1000;

/// Where a task is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// Received, not started.
    Pending,
    /// Being applied.
    Progress,
    /// Applied.
    Success,
    /// Not applied, and why.
    Failed(String),
}

impl TaskState {
    fn name(&self) -> &'static str {
        match self {
            TaskState::Pending => "PENDING",
            TaskState::Progress => "PROGRESS",
            TaskState::Success => "SUCCESS",
            TaskState::Failed(_) => "FAILED",
        }
    }

    fn description(&self) -> &'static str {
        match self {
            TaskState::Pending => "Task pending",
            TaskState::Progress => "Task in progress",
            TaskState::Success => "Task succeeded",
            TaskState::Failed(_) => "Task failed",
        }
    }

    fn finished(&self) -> bool {
        matches!(self, TaskState::Success | TaskState::Failed(_))
    }
}

/// The tasks of a service's life, by id and in the order received.
#[derive(Default)]
pub(super) struct Tasks {
    order: VecDeque<String>,
    by_id: HashMap<String, Value>,
}

impl Tasks {
    /// The Task document of `id`.
    pub(super) fn get(&self, id: &str) -> Option<&Value> {
        self.by_id.get(id)
    }

    /// The most recent [`MAX_TASK_LIST`] tasks, newest first.
    pub(super) fn list(&self) -> Vec<Value> {
        self.order.iter().rev().take(MAX_TASK_LIST).filter_map(|t| self.by_id.get(t).cloned()).collect()
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff`, as Search writes task dates.
pub fn now_date() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (y, m, day) = icicle_core::time::civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, d.subsec_micros())
}

/// Put `state` into a Task document.
fn set_state(doc: &mut Value, state: &TaskState) {
    doc["state"] = json!(state.name());
    doc["state_description"] = json!(state.description());
    doc["message"] = match state {
        TaskState::Failed(m) => json!(m),
        _ => Value::Null,
    };
    if state.finished() {
        doc["completion_date"] = json!(now_date());
    }
}

impl Service {
    /// Record a new task of `task_type` (`INGEST`, `DELETE_BY_SUBJECT`, ...) in `state`; its id.
    pub fn open_task(&self, task_type: &str, state: TaskState) -> Result<String, ApiError> {
        let id = super::uuid4();
        let mut doc = json!({"task_id": id, "task_type": task_type, "index_id": self.index_id, "creation_date": now_date(),
                             "completion_date": null, "additional_details": null});
        set_state(&mut doc, &state);
        let mut t = self.tasks.lock().map_err(|_| super::poisoned())?;
        t.order.push_back(id.clone());
        t.by_id.insert(id.clone(), doc);
        while t.order.len() > MAX_TASKS {
            if let Some(old) = t.order.pop_front() {
                t.by_id.remove(&old);
            }
        }
        Ok(id)
    }

    /// Move the task `id` to `state` (a finished one gets its completion date); a task already
    /// forgotten is left so.
    pub fn update_task(&self, id: &str, state: TaskState) -> Result<(), ApiError> {
        let mut t = self.tasks.lock().map_err(|_| super::poisoned())?;
        if let Some(doc) = t.by_id.get_mut(id) {
            set_state(doc, &state);
        }
        Ok(())
    }

    /// Whether this service remembers the task `id`.
    pub fn has_task(&self, id: &str) -> bool {
        self.tasks.lock().is_ok_and(|t| t.get(id).is_some())
    }
}
