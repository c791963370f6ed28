//! Kafka plugins: the `gpfs` change source (IBM Storage Scale `mmwatch` events from Kafka) and
//! the `kafka` sink (index operations to a topic, e.g. on Amazon MSK). rdkafka lives only here.

pub mod client;
pub mod gpfs;
pub mod produce;
pub mod sink;

use icicle_core::registry::{build_change_source, build_sink, PluginDescriptor, PluginKind};

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Source,
        name: "gpfs",
        description: "IBM Storage Scale watch-folder (mmwatch) events from Kafka; offsets committed after delivery",
        example: "[sources.fset1]\ntype = \"gpfs\"\ntopic = \"fset1-topic\"\nfs_root = \"/gpfs/fs1\"\nstate_dir = \"state/fset1\"\nconnection = { bootstrap = \"127.0.0.1:9092\" }\n",
        build: build_change_source::<gpfs::GpfsConfig>,
    }
}

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "kafka",
        description: "index upserts and deletes as JSON messages keyed by subject (idempotent producer; Amazon MSK)",
        example: "[sinks.msk]\ntype = \"kafka\"\ntopic = \"icicle-index\"\nconnection = { bootstrap = \"127.0.0.1:9092\" }\n",
        build: build_sink::<sink::KafkaSinkConfig>,
    }
}
