//! What a change source is given to run, and what it does about a gap in its stream.

use crate::traits::NamedSinks;

/// What a monitor does when records or messages were purged before it read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnGap {
    /// Log and count them, and go on.
    #[default]
    Warn,
    /// Stop the monitor with the range.
    Fail,
}

/// What a streaming (monitor) source is given to run.
#[derive(Clone)]
pub struct MonitorContext {
    /// The configured sinks, shared by every monitored MDT or topic.
    pub sinks: std::sync::Arc<tokio::sync::Mutex<NamedSinks>>,
    /// How primary records are built (the snapshot pipeline's schema).
    pub policy: std::sync::Arc<crate::policy::RecordPolicy>,
    /// The bound of every document delivered.
    pub document_limit: crate::batch::DocumentLimit,
    /// Stop once the stream is exhausted (instead of polling forever).
    pub drain: bool,
    /// Stop after this long without a new event (`--until-idle`; streams with no end of their
    /// own, such as fanotify, use it; `None`: only `drain` decides).
    pub until_idle: Option<std::time::Duration>,
    /// The component id.
    pub name: String,
    /// Becomes true on SIGTERM or SIGINT: deliver the batch in hand, checkpoint, acknowledge
    /// and return the report (no new records are read).
    pub stop: tokio::sync::watch::Receiver<bool>,
}

impl MonitorContext {
    /// A context for tests (feature `test-util`): `sinks`, records visible to `public`, the
    /// default document bound, draining, named `test`; the stop signal never fires.
    #[cfg(any(test, feature = "test-util"))]
    pub fn for_test(sinks: NamedSinks) -> MonitorContext {
        let (tx, stop) = tokio::sync::watch::channel(false);
        // The sender is leaked so the receiver never sees it closed.
        std::mem::forget(tx);
        MonitorContext {
            sinks: std::sync::Arc::new(tokio::sync::Mutex::new(sinks)),
            policy: std::sync::Arc::new(crate::policy::RecordPolicy {
                visible_to: vec![crate::policy::VisibleTo::Public],
                ..Default::default()
            }),
            document_limit: crate::config::SnapshotSettings::default().document_limit(),
            drain: true,
            until_idle: None,
            name: "test".into(),
            stop,
        }
    }
}
