//! The monitor seam: what a change-source plugin implements and what the runtime runs.
//!
//! A plugin implements [`Monitor`]: its [`DriverSettings`] (batching, where its state files
//! live), a fresh [`ChangeState`] (its rules and namespace state), and how to open its
//! [`ChangeStream`] once the state is restored. Every [`Monitor`] is a [`ChangeSource`], the
//! object-safe face the registry builds and the runtime holds as `Arc<dyn ChangeSource>`;
//! opened, it is a [`RunningMonitor`] that hides the stream's event and position types behind
//! one virtual call per batch step (none per event). The runtime's driver takes it from there:
//! read a batch, apply, deliver, checkpoint, acknowledge.

mod context;
mod reduce;
mod running;
pub mod sent_ahead;
mod settings;
mod stream;

pub use context::{MonitorContext, OnGap};
pub use reduce::reduce_apply;
pub use running::{ChangeSource, Monitor, Restored, RunningMonitor};
pub use settings::DriverSettings;
pub use stream::{BatchCounts, ChangeState, ChangeStream, Emit, Polled};
