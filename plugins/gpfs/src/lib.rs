//! GPFS (IBM Storage Scale) watch-folder events: parsing `WF_JSON` messages, and the state
//! that reduces them to index operations. The Kafka consumers that feed it live in
//! `icicle-plugins-kafka` (which keeps rdkafka out of everything else).

pub mod event;
pub mod evict;
pub mod scan;
pub mod state;

pub use event::{EventKind, GpfsEvent, Meta};
pub use state::{GpfsState, IgnoredEvents, Op, Ops};
