//! GPFS (IBM Storage Scale) watch-folder events: parsing `WF_JSON` messages, the state that
//! reduces them to index operations, and the `gpfs` change source that reads them from Kafka
//! (through `icicle-plugins-kafka`'s topic stream).

pub mod event;
pub mod evict;
pub mod scan;
pub mod source;
pub mod state;

pub use event::{EventKind, GpfsEvent, Meta, StorageId};
pub use state::{GpfsState, IgnoredEvents, Op, Ops};

use icicle_core::registry::{build_component, PluginDescriptor, PluginKind};

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "gpfs",
        description: "IBM Storage Scale watch-folder (mmwatch) events from Kafka; offsets committed after delivery",
        example: "[sources.fset1]\ntype = \"gpfs\"\ntopic = \"fset1-topic\"\nfs_root = \"/gpfs/fs1\"\nstate_dir = \"state/fset1\"\nseed_index = \"out/fset1-snapshot\"\nconnection = { bootstrap = \"127.0.0.1:9092\" }\n",
        build: build_component::<source::GpfsConfig>, check: icicle_core::registry::check_component::<source::GpfsConfig>,
    }
}
