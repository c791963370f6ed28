//! icicle's Globus Search document model: how a record becomes a GMetaEntry (subject,
//! `visible_to`, content), and how entries and deletes are cut into documents bounded in
//! bytes. The documents themselves ([`icicle_core::batch::DocumentBatch`]) are the `Sink`
//! seam's payload and live in core, so a sink needs nothing of this crate but its batching.

pub mod documents;
pub mod encoder;
mod iso;
pub mod json;
pub mod publish;
pub mod replay;
pub mod subject;
pub mod visible;

pub use iso::iso_utc;

pub use documents::{delete_batches, entry_fits, measured_len, reserialized_len, Batcher};
pub use encoder::PrimaryEncoder;
pub use json::push_json_str;
pub use publish::{Judge, Published};
pub use subject::{subject_for, HASHED_SUBJECT_PREFIX, MAX_SUBJECT_BYTES};
pub use visible::{aggregate_principals, posix_principals, resolve_posix, subtree_principals};
