//! icicle runtime: the snapshot engine ([`snapshot`]: plan, read, encode, deliver, version,
//! with the counting and aggregate pipelines that run beside its read), the monitor driver
//! ([`monitor`]), delivery to sinks shared by both ([`deliver`]), fault injection for the
//! crash tests ([`fault`]), and the composition of configured components into a runnable
//! job ([`compose`]).

pub mod compose;
pub mod deliver;
pub mod fault;
pub mod monitor;
pub mod snapshot;
