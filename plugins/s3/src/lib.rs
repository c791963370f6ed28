//! The `s3` snapshot source: delimited listings (Icicle's preprocessed `icicle9` CSV, pwalk,
//! ne2scan, or any column map, parsed exactly as the `tsv` source parses local files) read
//! from the objects under a bucket prefix. `plan` lists the prefix (ListObjectsV2, paginated)
//! into one split per object and cuts objects larger than `split_bytes` into byte ranges;
//! `read` fetches a split with (ranged) GETs pinned to the listed ETag and hands each line
//! that starts in its range to the layout. Requests are retried by the SDK (standard mode:
//! throttling, 5xx and connection errors); a body that breaks off is resumed at the next byte.
//!
//! aws-sdk-s3 lives only in this crate. [`Uploader`] writes objects row by row for
//! `icicle preprocess` (PutObject, or a multipart upload above a threshold), and
//! [`ObjectStore`] is a small blocking client (create buckets, upload, read and delete
//! objects) for tests and tools.

#![warn(missing_docs)]

pub mod client;
pub mod config;
pub mod error;
pub mod lines;
pub mod source;
pub mod upload;

pub use client::ObjectStore;
pub use config::S3Config;
pub use error::S3Error;
pub use source::S3Source;
pub use upload::{ObjectUpload, UploadConfig, Uploaded, Uploader};

use icicle_core::registry::{build_component, PluginDescriptor, PluginKind};

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "s3",
        description: "delimited listings (icicle9, pwalk, ne2scan or a column map) in S3 objects; big objects read in byte ranges",
        example: "[sources.listing]\ntype = \"s3\"\nbucket = \"icicle-snapshots\"\nprefix = \"fs1/2026-11-30/\"\nkeys = \"*.csv\"\npreset = \"icicle9\"\n",
        build: build_component::<S3Config>,
        check: icicle_core::registry::check_component::<S3Config>,
    }
}
