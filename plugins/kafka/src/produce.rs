//! Small producer and admin helpers for the testkit and the benchmarks.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::ClientConfig;

/// Create `topic` with `partitions` partitions (an existing topic is fine).
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", bootstrap).create().map_err(|e| e.to_string())?;
    let res = admin
        .create_topics(&[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))))
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
pub async fn produce(bootstrap: &str, topic: &str, messages: impl IntoIterator<Item = (String, String)>) -> Result<u64, String> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
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
        pending.push(tokio::spawn(async move { p.send(FutureRecord::to(&topic).key(k.as_bytes()).payload(v.as_bytes()), Timeout::After(Duration::from_secs(60))).await.map(|_| ()).map_err(|(e, _)| e.to_string()) }));
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
