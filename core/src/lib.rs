//! icicle core: the record model, the component traits, the plugin registry, layered
//! configuration and the sinks' document payload; Globus Search encoding is in
//! `icicle-gmeta`, the engines in `icicle-runtime`.
//!
//! Data flows one way, source → reducer → state → sink; acknowledgements flow back.

pub mod access;
pub mod batch;
pub mod config;
pub mod deadletter;
pub mod durable;
pub mod error;
pub mod layout;
pub mod log_sample;
pub mod metrics;
pub mod monitor;
pub mod name;
pub mod policy;
pub mod record;
pub mod registry;
pub mod rng;
pub mod scope;
pub mod secret;
pub mod service;
pub mod suggest;
pub mod text;
pub mod time;
pub mod traits;

pub use error::{ConfigError, Domain, IcicleError, Retry, SinkError, SourceError};
pub use record::{Attrs, FileKind, FileRecord, Reject};
pub use traits::{LayoutComponent, ObjectLayout, ObjectTask, Placement, Reducer, Sink, Sketch, Source, StateStore};
