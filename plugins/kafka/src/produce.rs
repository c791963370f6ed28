//! Small producer and admin helpers for the testkit and the benchmarks. Each takes the
//! broker's address (PLAINTEXT), or, in its `_with` form, connection settings as a component
//! takes them (e.g. SASL_SSL with SCRAM).

use std::time::Duration;

use icicle_core::ConfigError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;

use crate::client::KafkaConnection;

/// A configuration with only `bootstrap.servers`.
fn plain(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

/// The client configuration of `connection`.
fn configured(connection: &KafkaConnection) -> Result<ClientConfig, String> {
    connection
        .client_config_with(|key, reason| ConfigError::InvalidValue {
            key: key.into(),
            origin: "the connection settings".into(),
            reason,
        })
        .map_err(|e| e.to_string())
}

/// Create `topic` with `partitions` partitions (an existing topic is fine).
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), String> {
    create_topic_on(&plain(bootstrap), topic, partitions).await
}

/// [`create_topic`] with these connection settings.
pub async fn create_topic_with(connection: &KafkaConnection, topic: &str, partitions: i32) -> Result<(), String> {
    create_topic_on(&configured(connection)?, topic, partitions).await
}

async fn create_topic_on(base: &ClientConfig, topic: &str, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = base.create().map_err(|e| e.to_string())?;
    let res = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .map_err(|e| format!("creating `{topic}`: {e}"))?;
    for r in res {
        match r {
            Ok(_) => {}
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => return Err(format!("creating `{t}`: {e}")),
        }
    }
    Ok(())
}

/// Produce `(key, value)` messages to `topic` (partitioned by key) and wait for every
/// delivery report; returns how many were delivered.
pub async fn produce(
    bootstrap: &str,
    topic: &str,
    messages: impl IntoIterator<Item = (String, String)>,
) -> Result<u64, String> {
    produce_on(&plain(bootstrap), topic, messages).await
}

/// [`produce`] with these connection settings.
pub async fn produce_with(
    connection: &KafkaConnection,
    topic: &str,
    messages: impl IntoIterator<Item = (String, String)>,
) -> Result<u64, String> {
    produce_on(&configured(connection)?, topic, messages).await
}

async fn produce_on(
    base: &ClientConfig,
    topic: &str,
    messages: impl IntoIterator<Item = (String, String)>,
) -> Result<u64, String> {
    let producer: FutureProducer = base
        .clone()
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("partitioner", "murmur2_random")
        .create()
        .map_err(|e| e.to_string())?;
    let mut pending = Vec::new();
    let mut n = 0u64;
    for (k, v) in messages {
        let p = producer.clone();
        let topic = topic.to_string();
        pending.push(tokio::spawn(async move {
            p.send(
                FutureRecord::to(&topic).key(k.as_bytes()).payload(v.as_bytes()),
                Timeout::After(Duration::from_secs(60)),
            )
            .await
            .map(|_| ())
            .map_err(|(e, _)| e.to_string())
        }));
        if pending.len() >= 10_000 {
            for h in pending.drain(..) {
                h.await.map_err(|e| e.to_string())??;
                n += 1;
            }
        }
    }
    for h in pending {
        h.await.map_err(|e| e.to_string())??;
        n += 1;
    }
    Ok(n)
}

/// Produce message values (any bytes, no key) to `topic` one after the other, each awaited
/// before the next: their order is kept on a one-partition topic.
pub async fn produce_bytes(
    bootstrap: &str,
    topic: &str,
    values: impl IntoIterator<Item = Vec<u8>>,
) -> Result<u64, String> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .map_err(|e| e.to_string())?;
    let mut n = 0u64;
    for v in values {
        producer
            .send(FutureRecord::<(), [u8]>::to(topic).payload(&v[..]), Timeout::After(Duration::from_secs(60)))
            .await
            .map_err(|(e, _)| e.to_string())?;
        n += 1;
    }
    Ok(n)
}

/// One consumed message: partition, offset, key, value, and the `icicle-op` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// The key as text (lossy UTF-8); None when the message has none.
    pub key: Option<String>,
    /// The value as text (lossy UTF-8); None when the message has none.
    pub value: Option<String>,
    /// The `icicle-op` header (`upsert` or `delete`); None when absent.
    pub op: Option<String>,
}

/// Read `topic` from the beginning to its current end (every partition), without committing.
pub async fn consume_all(bootstrap: &str, topic: &str) -> Result<Vec<Consumed>, String> {
    consume_all_on(&plain(bootstrap), topic).await
}

/// [`consume_all`] with these connection settings.
pub async fn consume_all_with(connection: &KafkaConnection, topic: &str) -> Result<Vec<Consumed>, String> {
    consume_all_on(&configured(connection)?, topic).await
}

async fn consume_all_on(base: &ClientConfig, topic: &str) -> Result<Vec<Consumed>, String> {
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::message::{Headers, Message};
    let c: StreamConsumer = base
        .clone()
        .set("group.id", format!("icicle-read-{}-{}", std::process::id(), icicle_core::time::now_epoch()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "true")
        .create()
        .map_err(|e| e.to_string())?;
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(30)).map_err(|e| e.to_string())?;
    let parts: Vec<i32> = md.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for &p in &parts {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).map_err(|e| e.to_string())?;
    }
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let mut done = std::collections::HashSet::new();
    let mut out = Vec::new();
    while done.len() < parts.len() {
        match tokio::time::timeout(Duration::from_secs(30), c.recv()).await {
            Err(_) => return Err(format!("no end of `{topic}` within 30 s")),
            Ok(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                done.insert(p);
            }
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(m)) => {
                let op = m.headers().and_then(|h| {
                    h.iter()
                        .find(|x| x.key == "icicle-op")
                        .and_then(|x| x.value.map(|v| String::from_utf8_lossy(v).into_owned()))
                });
                out.push(Consumed {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    value: m.payload().map(|v| String::from_utf8_lossy(v).into_owned()),
                    op,
                });
            }
        }
    }
    Ok(out)
}

/// The group's committed offset (next to read) per partition of `topic`.
pub fn committed(
    bootstrap: &str,
    topic: &str,
    group: &str,
    partitions: &[i32],
) -> Result<std::collections::BTreeMap<i32, i64>, String> {
    committed_on(&plain(bootstrap), topic, group, partitions)
}

/// [`committed`] with these connection settings.
pub fn committed_with(
    connection: &KafkaConnection,
    topic: &str,
    group: &str,
    partitions: &[i32],
) -> Result<std::collections::BTreeMap<i32, i64>, String> {
    committed_on(&configured(connection)?, topic, group, partitions)
}

fn committed_on(
    base: &ClientConfig,
    topic: &str,
    group: &str,
    partitions: &[i32],
) -> Result<std::collections::BTreeMap<i32, i64>, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer =
        base.clone().set("group.id", group).set("enable.auto.commit", "false").create().map_err(|e| e.to_string())?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(30)).map_err(|e| e.to_string())?;
    Ok(got
        .elements()
        .iter()
        .filter_map(|e| if let rdkafka::Offset::Offset(o) = e.offset() { Some((e.partition(), o)) } else { None })
        .collect())
}
