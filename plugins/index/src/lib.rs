//! icicle's embedded search index: the `index` sink keeps the records a snapshot or a monitor
//! publishes (the same GMetaEntry upserts and subject deletes the `globus` sink sends) in a
//! [tantivy](https://github.com/quickwit-oss/tantivy) index on local disk, and [`search`]
//! answers `icicle find` and `icicle du` from it, for the principals who ask; [`api`] serves the
//! Globus Search HTTP API over it (`icicle serve`), and
//! [`remote`] asks a running server the same questions.

pub mod api;
pub mod remote;
pub mod rows;
pub mod schema;
pub mod search;
pub mod served;
pub mod sink;
pub mod store;
pub mod upsert;

pub use search::{Filter, Reader, Visibility};
pub use sink::{IndexSink, IndexSinkConfig};
pub use store::{IndexError, Store};

use icicle_core::registry::{build_component, PluginDescriptor, PluginKind};

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "index",
        description: "an embedded search index (tantivy) on local disk, read back by `icicle find` and `icicle du`",
        example: "[sinks.index]\ntype = \"index\"\ndir = \"index/\"\nmemory_mb = 128\nthreads = 2\n",
        build: build_component::<IndexSinkConfig>, check: icicle_core::registry::check_component::<IndexSinkConfig>,
    }
}
