//! Kafka transport: a topic as a change stream (consumers, offsets committed after delivery),
//! which the `gpfs` source reads, and the `kafka` sink (index operations to a topic, e.g. on
//! Amazon MSK). rdkafka lives only here.

pub mod client;
pub mod msk;
pub mod produce;
pub mod sink;
pub mod stream;

use icicle_core::registry::{build_component, PluginDescriptor, PluginKind};

inventory::submit! {
    PluginDescriptor {
        kind: PluginKind::Sink,
        name: "kafka",
        description: "index upserts and deletes as JSON messages keyed by subject (idempotent producer; Amazon MSK)",
        example: "[sinks.msk]\ntype = \"kafka\"\ntopic = \"icicle-index\"\nconnection = { bootstrap = \"127.0.0.1:9092\" }\n",
        build: build_component::<sink::KafkaSinkConfig>, check: icicle_core::registry::check_component::<sink::KafkaSinkConfig>,
    }
}
