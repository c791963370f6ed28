//! The `kafka` sink (Amazon MSK or any Kafka): every upsert and delete becomes one JSON
//! message keyed by subject (so per-file order holds within a partition), sent by an idempotent
//! producer; a batch counts as delivered only when every message's delivery report is in.
//!
//! Values: `{"op":"upsert","entry":<GMetaEntry>}` and `{"op":"delete","subject":"..."}`; the
//! header `icicle-op` says the same. With `audit_topic`, one record per delivered batch (kind,
//! count, bytes, first and last subject, the partitions and offsets written), written once
//! every sink has the batch, with every sink's receipt (`receipts`: sink id → receipt, e.g.
//! the Globus sink's task ids).

use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use icicle_core::batch::DocumentBatch;
use icicle_core::deadletter::DeadLetters;
use icicle_core::error::{Retry, SinkError};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::traits::Sink;
use icicle_core::ConfigError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer, PurgeConfig};
use rdkafka::util::Timeout;
use serde::Deserialize;

use crate::client::{ConnectionFailure, FailureWatch, KafkaConnection};

/// `[sinks.<id>] type = "kafka"`.
#[derive(Deserialize)]
pub struct KafkaSinkConfig {
    /// The brokers and how to authenticate to them.
    pub connection: KafkaConnection,
    /// The topic index operations go to.
    pub topic: String,
    /// A topic that receives one audit record per delivered batch.
    #[serde(default)]
    pub audit_topic: Option<String>,
    /// How long one batch may wait for its delivery reports.
    #[serde(default = "default_timeout")]
    pub timeout_secs: f64,
    /// Where messages the broker refuses on their own (too large, invalid) go, as JSON lines
    /// with the reason; default `<sink id>.dead-letters.jsonl` in the working directory.
    #[serde(default)]
    pub dead_letter_file: Option<std::path::PathBuf>,
    /// More refused messages than this in one delivery fail it; 0: every refusal fails it.
    #[serde(default = "default_max_dead_letters")]
    pub max_dead_letters: u32,
}

fn default_max_dead_letters() -> u32 {
    100
}

fn default_timeout() -> f64 {
    60.0
}

impl ComponentConfig for KafkaSinkConfig {
    type Component = Box<dyn Sink>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        if self.topic.trim().is_empty() {
            return Err(ctx.invalid("topic", "give the topic index operations go to"));
        }
        // librdkafka's message.timeout.ms is a 32-bit count of milliseconds.
        if !(self.timeout_secs.is_finite() && self.timeout_secs > 0.0 && self.timeout_secs <= 2_147_483.0) {
            return Err(ctx.invalid("timeout_secs", "must be positive and at most 2147483 (about 24 days)"));
        }
        // The client configuration (its secrets read) without a producer: nothing connects.
        self.connection.client_config(ctx)?;
        Ok(())
    }

    fn probe(&self, ctx: &BuildContext<'_>) -> Result<Option<String>, ConfigError> {
        self.connection.probe_topic(&self.topic, |k, r| ctx.invalid(k, r)).map(Some)
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Box<dyn Sink>, ConfigError> {
        self.validate(ctx)?;
        let mut cc = self.connection.client_config(ctx)?;
        // Exactly-once per partition, in order: the idempotent producer (acks=all).
        cc.set("enable.idempotence", "true");
        // `timeout_secs` bounds a batch's delivery: librdkafka's own message timeout (300 s by
        // default) must not outlast it, unless `connection.properties` sets one.
        if cc.get("message.timeout.ms").or_else(|| cc.get("delivery.timeout.ms")).is_none() {
            cc.set("message.timeout.ms", ((self.timeout_secs * 1000.0).ceil() as u64).max(1).to_string());
        }
        cc.set_if_absent("compression.type", "lz4");
        cc.set_if_absent("linger.ms", "5");
        let failure = ConnectionFailure::for_config(&cc);
        let producer: FutureProducer<FailureWatch> = cc
            .create_with_context(FailureWatch {
                failure: failure.clone(),
                component: ctx.id.clone(),
                msk: self.connection.msk_token_provider().map_err(|e| ctx.invalid("connection.aws_msk_iam", e))?,
            })
            .map_err(|e| {
                ctx.invalid(
                    "connection",
                    format!("cannot create a Kafka producer: {}", crate::client::creation_error(&e)),
                )
            })?;
        Ok(Box::new(KafkaSink {
            id: ctx.id.clone(),
            producer,
            failure,
            topic: self.topic,
            audit_topic: self.audit_topic,
            timeout: Duration::from_secs_f64(self.timeout_secs),
            run: run_id(),
            dead: DeadLetters::new(
                self.dead_letter_file
                    .unwrap_or_else(|| std::path::PathBuf::from(format!("{}.dead-letters.jsonl", ctx.id))),
            ),
            max_dead_letters: self.max_dead_letters,
            dead_lettered: Vec::new(),
            batches: 0,
            last: None,
        }))
    }
}

/// A run id: the start time in nanoseconds and the process id, in hex.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{nanos:x}-{:x}", std::process::id())
}

trait SetIfAbsent {
    fn set_if_absent(&mut self, k: &str, v: &str);
}

impl SetIfAbsent for rdkafka::ClientConfig {
    fn set_if_absent(&mut self, k: &str, v: &str) {
        if self.get(k).is_none() {
            self.set(k, v);
        }
    }
}

/// The runtime Kafka sink.
pub struct KafkaSink {
    id: String,
    producer: FutureProducer<FailureWatch>,
    /// Refused credentials or a failed TLS handshake: deliveries fail at once.
    failure: ConnectionFailure,
    topic: String,
    audit_topic: Option<String>,
    timeout: Duration,
    /// This process's run, in audit keys: a compacted audit topic keeps every run's records.
    run: String,
    /// Messages the broker refused on their own.
    dead: DeadLetters,
    max_dead_letters: u32,
    /// Subjects kept as dead letters.
    dead_lettered: Vec<String>,
    batches: u64,
    /// What the last delivery wrote, for its receipt and audit record.
    last: Option<Delivered>,
}

/// One delivered batch, as its audit record describes it.
struct Delivered {
    kind: &'static str,
    count: usize,
    bytes: usize,
    first_subject: Option<String>,
    last_subject: Option<String>,
    offsets: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct SubjectOnly {
    subject: String,
}

/// One message: key (the subject), value, and the `icicle-op` header.
pub type Message = (String, Vec<u8>, &'static str);

/// The messages of one batch.
pub fn messages(batch: &DocumentBatch) -> Result<Vec<Message>, String> {
    let mut out = Vec::with_capacity(batch.len());
    match batch {
        DocumentBatch::Ingest(entries) => {
            for e in entries.entries() {
                let s: SubjectOnly =
                    serde_json::from_slice(e).map_err(|err| format!("entry without a subject: {err}"))?;
                let mut v = Vec::with_capacity(e.len() + 32);
                v.extend_from_slice(br#"{"op":"upsert","entry":"#);
                v.extend_from_slice(e);
                v.push(b'}');
                out.push((s.subject, v, "upsert"));
            }
        }
        DocumentBatch::Delete(subjects) => {
            for s in subjects {
                let v = serde_json::to_vec(&serde_json::json!({"op": "delete", "subject": s}))
                    .map_err(|e| e.to_string())?;
                out.push((s.clone(), v, "delete"));
            }
        }
    }
    Ok(out)
}

impl KafkaSink {
    fn error(&self, reason: String, retry: Retry) -> SinkError {
        SinkError::Remote { sink: self.id.clone(), reason, retry }
    }

    /// The error for refused credentials or a failed TLS handshake: sending again fails the
    /// same way (the password is read once, at start). What is queued is dropped, so nothing
    /// of this delivery goes out later behind the runtime's back.
    fn refused(&self, failure: String) -> SinkError {
        self.producer.purge(PurgeConfig::default().queue().inflight());
        self.error(format!("cannot deliver to `{}`: {failure}", self.topic), Retry::NoRetry)
    }

    /// Wait for `work` unless the connection is refused first.
    async fn unless_refused<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, SinkError> {
        if let Some(f) = self.failure.get() {
            return Err(self.refused(f));
        }
        tokio::select! {
            r = work => Ok(r),
            f = self.failure.wait() => Err(self.refused(f)),
        }
    }

    /// Keep one refused message durably, with the reason.
    fn dead_letter(&mut self, key: &str, value: &[u8], e: &rdkafka::error::KafkaError) -> Result<(), SinkError> {
        let reason = format!("refused by `{}`: {e}", self.topic);
        // Kept once, across deliveries sent again and restarts; marked to resend every time.
        if self.dead.first_time(key, value) {
            self.dead.write(&self.id, key, value, &reason).map_err(|io| SinkError::Io {
                sink: self.id.clone(),
                reason: format!("{}: {io}", self.dead.path().display()),
            })?;
        }
        if !self.dead_lettered.iter().any(|k| k == key) {
            self.dead_lettered.push(key.to_string());
        }
        tracing::warn!(sink = %self.id, subject = key, reason, file = %self.dead.path().display(), "a message was refused on its own; kept as a dead letter");
        Ok(())
    }
}

/// Whether the broker or client refused this message for what it is (sending it again fails
/// the same way), not for a broker or network state.
fn refused_alone(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(C::MessageSizeTooLarge | C::InvalidMessage | C::InvalidMessageSize | C::InvalidRecord)
    )
}

#[async_trait]
impl Sink for KafkaSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        self.last = None;
        let msgs = messages(batch).map_err(|e| self.error(e, Retry::NoRetry))?;
        if msgs.is_empty() {
            return Ok(());
        }
        let bytes: usize = msgs.iter().map(|m| m.1.len()).sum();
        let timeout = Timeout::After(self.timeout);
        let sends = msgs.iter().map(|(key, value, op)| {
            let rec = FutureRecord::to(&self.topic)
                .key(key.as_bytes())
                .payload(value)
                .headers(OwnedHeaders::new().insert(Header { key: "icicle-op", value: Some(*op) }));
            self.producer.send(rec, timeout)
        });
        let results = self.unless_refused(join_all(sends)).await?;
        let mut written: std::collections::BTreeMap<i32, (i64, i64)> = Default::default();
        let mut refused = 0u32;
        for (r, (key, value, op)) in results.into_iter().zip(&msgs) {
            match r {
                Ok(d) => {
                    let e = written.entry(d.partition).or_insert((d.offset, d.offset));
                    e.0 = e.0.min(d.offset);
                    e.1 = e.1.max(d.offset);
                }
                // A refused upsert is sent again by the next run (its subject is marked to
                // resend); a delete is not in any later run, so a refused one fails.
                Err((e, _)) if refused_alone(&e) && *op == "upsert" && refused < self.max_dead_letters => {
                    refused += 1;
                    self.dead_letter(key, value, &e)?;
                }
                // Sending it again fails the same way.
                Err((e, _)) if refused_alone(&e) => {
                    return Err(self.error(
                        format!("delivery to `{}` failed: `{key}` ({op}) refused: {e}", self.topic),
                        Retry::NoRetry,
                    ));
                }
                Err((e, _)) => {
                    return Err(self.error(format!("delivery to `{}` failed: {e}", self.topic), Retry::WithBackoff))
                }
            }
        }
        self.batches += 1;
        let kind = match batch {
            DocumentBatch::Ingest(_) => "ingest",
            DocumentBatch::Delete(_) => "delete",
        };
        self.last = Some(Delivered {
            kind,
            count: msgs.len(),
            bytes,
            first_subject: msgs.first().map(|m| m.0.clone()),
            last_subject: msgs.last().map(|m| m.0.clone()),
            offsets: written
                .iter()
                .map(|(p, (a, b))| serde_json::json!({"partition": p, "first": a, "last": b}))
                .collect(),
        });
        Ok(())
    }

    fn dead_lettered(&self) -> &[String] {
        &self.dead_lettered
    }

    fn receipt(&self) -> Option<serde_json::Value> {
        self.last.as_ref().map(|d| serde_json::json!({"topic": self.topic, "offsets": d.offsets}))
    }

    /// The audit record goes out once every sink has the batch, so it carries every sink's
    /// receipt (e.g. the Globus sink's task ids).
    async fn delivered(
        &mut self,
        _batch: &DocumentBatch,
        receipts: &[(String, serde_json::Value)],
    ) -> Result<(), SinkError> {
        let (Some(audit), Some(d)) = (&self.audit_topic, self.last.take()) else {
            return Ok(());
        };
        let rec = serde_json::json!({
            "sink": self.id, "run": self.run, "batch": self.batches, "kind": d.kind, "count": d.count, "bytes": d.bytes,
            "first_subject": d.first_subject, "last_subject": d.last_subject,
            "topic": self.topic, "offsets": d.offsets,
            "receipts": receipts.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<serde_json::Map<String, serde_json::Value>>(),
            "time": icicle_core::time::iso8601(icicle_core::time::now_epoch()),
        })
        .to_string();
        let key = format!("{}-{}-{}", self.id, self.run, self.batches);
        self.unless_refused(self.producer.send(
            FutureRecord::to(audit.as_str()).key(key.as_bytes()).payload(rec.as_bytes()),
            Timeout::After(self.timeout),
        ))
        .await?
        .map_err(|(e, _)| self.error(format!("audit record to `{audit}` failed: {e}"), Retry::WithBackoff))?;
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if let Some(f) = self.failure.get() {
            return Err(self.refused(f));
        }
        let p = self.producer.clone();
        let t = self.timeout;
        tokio::task::spawn_blocking(move || p.flush(Timeout::After(t)))
            .await
            .map_err(|e| self.error(e.to_string(), Retry::NoRetry))?
            .map_err(|e| self.error(format!("flush: {e}"), Retry::WithBackoff))
    }
}
