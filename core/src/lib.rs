//! icicle core: the record model, the component traits, the plugin registry, layered
//! configuration and Globus Search document encoding; the engines are in `icicle-runtime`.
//!
//! Data flows one way, source → reducer → state → sink; acknowledgements flow back.

pub mod access;
pub mod batch;
pub mod config;
pub mod deadletter;
pub mod durable;
pub mod error;
pub mod gmeta;
pub mod metrics;
pub mod record;
pub mod registry;
pub mod scope;
pub mod secret;
pub mod sent_ahead;
pub mod stream;
pub mod text;
pub mod time;
pub mod traits;

pub use error::{ConfigError, Domain, IcicleError, Retry, SinkError, SourceError};
pub use record::{FileKind, FileRecord, Reject};
pub use traits::{LayoutComponent, ObjectLayout, ObjectTask, Placement, Reducer, Sink, Sketch, Source, StateStore};

/// The next number of a xorshift64 sequence (deterministic test and bench data).
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}
