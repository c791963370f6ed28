//! A topic as a [`ChangeStream`]: consumers (explicit partitions or a consumer group), each on
//! its own task, into one queue; the end of every partition is seen when draining; offsets
//! are committed (truncated) only for what was delivered; a partition whose first message is
//! past the committed offset and below the low watermark lost messages (reported).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use icicle_core::monitor::OnGap;
use icicle_core::monitor::{ChangeStream, Polled};
use icicle_core::{ConfigError, IcicleError};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::client::{ConnectionFailure, KafkaConnection};

/// Where a consumer group without a committed offset starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// The oldest message the topic keeps.
    #[default]
    Earliest,
    /// Only messages produced from now on.
    Latest,
}

impl Start {
    /// librdkafka's `auto.offset.reset` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Start::Earliest => "earliest",
            Start::Latest => "latest",
        }
    }
}

/// What a topic stream reads and how.
#[derive(Clone)]
pub struct TopicSettings {
    /// The brokers and how to authenticate to them.
    pub connection: KafkaConnection,
    /// The topic read.
    pub topic: String,
    /// The consumer group (offsets are committed under it).
    pub group_id: String,
    /// Consumer tasks; in group mode they share the topic's partitions.
    pub consumers: usize,
    /// Exactly these partitions (round-robin over the consumers) instead of the group's.
    pub partitions: Option<Vec<i32>>,
    /// Where the group starts when it has no committed offset.
    pub start: Start,
    /// What a range of lost messages does: log and go on, or stop the stream.
    pub on_gap: OnGap,
    /// What a lost range misses, for the error text ("watch-folder events", ...).
    pub what: &'static str,
}

/// One message as read.
pub struct TopicMessage {
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// The message value (empty when it has none).
    pub payload: Vec<u8>,
}

/// Next offsets to read, per partition.
pub type Offsets = BTreeMap<i32, i64>;

/// Counters of a topic stream.
#[derive(Debug, Default, Clone)]
pub struct TopicCounts {
    /// Messages read.
    pub messages: u64,
    /// Messages between the committed offset and the first one read (deleted unread).
    pub lost_messages: u64,
    /// Offset commits that succeeded (one per consumer and acknowledgement).
    pub commits: u64,
    /// Next offset to read, per partition, as committed.
    pub committed: Offsets,
    /// When the first message came (connecting and joining the group excluded).
    pub first: Option<Instant>,
}

/// Client callbacks: reaching the end of a partition is news for draining, not an error;
/// refused credentials and failed TLS handshakes are kept for the stream to fail on (see
/// [`ConnectionFailure`]); librdkafka's statistics give the consumer lag per partition.
pub struct QuietEof {
    component: String,
    failure: ConnectionFailure,
    msk: Option<Arc<crate::msk::MskTokenProvider>>,
}

impl rdkafka::ClientContext for QuietEof {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        crate::client::oauth_token(self.msk.as_deref(), &self.component)
    }

    fn stats(&self, stats: rdkafka::Statistics) {
        let m = icicle_core::metrics::Metrics::global();
        for (topic, t) in &stats.topics {
            for (p, part) in &t.partitions {
                if *p < 0 || part.consumer_lag < 0 {
                    continue;
                }
                let ps = p.to_string();
                m.set(
                    &icicle_core::metrics::names::KAFKA_LAG,
                    &[("component", &self.component), ("topic", topic), ("partition", &ps)],
                    part.consumer_lag as f64,
                );
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(error, KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF);
        self.failure.record_and_log(&self.component, &error, reason, !eof);
    }
}

impl rdkafka::consumer::ConsumerContext for QuietEof {}

enum Msg {
    Event { consumer: usize, message: TopicMessage },
    Eof { partition: i32 },
    Failed(String),
}

type Client = Arc<StreamConsumer<QuietEof>>;

/// A topic read by one or more consumers into one queue.
pub struct TopicStream {
    settings: TopicSettings,
    component: String,
    drain: bool,
    rx: mpsc::Receiver<Msg>,
    consumers: Vec<Client>,
    /// The partitions to see the end of (drain).
    all_partitions: HashSet<i32>,
    at_end: HashSet<i32>,
    /// Which consumer reads each partition (commits go through it).
    owner: HashMap<i32, usize>,
    /// Partitions whose first message of this run was checked against the committed offset.
    checked: HashSet<i32>,
    /// The next offset after every message read, per partition: what acknowledging all that
    /// was read reaches.
    read: Offsets,
    failures: u32,
    /// Refused credentials or a failed TLS handshake, reported by any consumer.
    failure: ConnectionFailure,
    counts: TopicCounts,
}

fn external(reason: String) -> IcicleError {
    IcicleError::Source(icicle_core::SourceError::External(reason))
}

/// Messages of one poll beyond the first, at most (the rest wait in the queue).
const POLL_MORE: usize = 1024;

impl TopicStream {
    /// How many partitions this stream reads (the topic's, or the ones configured).
    pub fn partition_count(&self) -> usize {
        self.all_partitions.len()
    }

    /// Create the consumers and start reading; with `drain`, the end of each partition is
    /// reported so the stream can end.
    pub async fn connect(settings: TopicSettings, component: &str, drain: bool) -> Result<TopicStream, IcicleError> {
        let (tx, rx) = mpsc::channel::<Msg>(8192);
        let cc = consumer_config(&settings, drain, component)?;
        let failure = ConnectionFailure::for_config(&cc);
        let msk = settings.connection.msk_token_provider().map_err(external)?;
        let mut consumers: Vec<Client> = Vec::new();
        for i in 0..settings.consumers {
            let c: Client = Arc::new(
                cc.create_with_context(QuietEof {
                    component: component.to_string(),
                    failure: failure.clone(),
                    msk: msk.clone(),
                })
                .map_err(|e| {
                    external(format!("cannot create a Kafka consumer: {}", crate::client::creation_error(&e)))
                })?,
            );
            match &settings.partitions {
                Some(parts) => {
                    let mut tpl = TopicPartitionList::new();
                    for &p in parts.iter().filter(|&&p| p as usize % settings.consumers == i) {
                        tpl.add_partition_offset(&settings.topic, p, Offset::Stored)
                            .map_err(|e| external(e.to_string()))?;
                    }
                    if tpl.count() == 0 {
                        continue;
                    }
                    c.assign(&tpl)
                        .map_err(|e| external(format!("assigning partitions of `{}`: {e}", settings.topic)))?;
                }
                None => c
                    .subscribe(&[&settings.topic])
                    .map_err(|e| external(format!("subscribing to `{}`: {e}", settings.topic)))?,
            }
            consumers.push(c.clone());
            let tx = tx.clone();
            let idx = consumers.len() - 1;
            tokio::spawn(async move {
                loop {
                    let msg = match c.recv().await {
                        Ok(m) => Msg::Event {
                            consumer: idx,
                            message: TopicMessage {
                                partition: m.partition(),
                                offset: m.offset(),
                                payload: m.payload().unwrap_or_default().to_vec(),
                            },
                        },
                        Err(KafkaError::PartitionEOF(p)) => Msg::Eof { partition: p },
                        Err(e) => Msg::Failed(e.to_string()),
                    };
                    if tx.send(msg).await.is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let all_partitions: HashSet<i32> = match &settings.partitions {
            Some(p) => p.iter().copied().collect(),
            None => {
                let c = consumers.first().cloned().ok_or_else(|| external("no consumer".into()))?;
                let topic = settings.topic.clone();
                // Refused credentials fail at once, not after the metadata request's 30 s; the
                // request is asked in short rounds so that its thread, which the runtime waits
                // for when the process ends, stops soon after too.
                let f = failure.clone();
                let fetch = move || {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    loop {
                        match c.fetch_metadata(Some(&topic), Duration::from_millis(500)) {
                            Err(e)
                                if e.rdkafka_error_code()
                                    == Some(rdkafka::types::RDKafkaErrorCode::OperationTimedOut)
                                    && Instant::now() < deadline
                                    && f.get().is_none() => {}
                            r => return r,
                        }
                    }
                };
                let md = tokio::select! {
                    md = tokio::task::spawn_blocking(fetch) => md
                        .map_err(|e| external(e.to_string()))?
                        .map_err(|e| external(format!("metadata of `{}`: {e}", settings.topic)))?,
                    f = failure.wait() => return Err(refused(&settings.topic, f)),
                };
                md.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect()
            }
        };
        Ok(TopicStream {
            settings,
            component: component.to_string(),
            drain,
            rx,
            consumers,
            all_partitions,
            at_end: HashSet::new(),
            owner: HashMap::new(),
            checked: HashSet::new(),
            read: Offsets::new(),
            failures: 0,
            failure,
            counts: TopicCounts::default(),
        })
    }

    /// Take one queued item; returns whether it was a message (pushed onto `out`).
    async fn take(&mut self, msg: Msg, out: &mut Vec<TopicMessage>) -> Result<bool, IcicleError> {
        match msg {
            Msg::Event { consumer, message } => {
                let p = message.partition;
                if self.checked.insert(p) {
                    self.check_gap(consumer, p, message.offset).await?;
                }
                self.at_end.remove(&p);
                self.owner.insert(p, consumer);
                let next = self.read.entry(p).or_insert(message.offset + 1);
                *next = (*next).max(message.offset + 1);
                let c = &mut self.counts;
                c.first.get_or_insert_with(Instant::now);
                c.messages += 1;
                out.push(message);
                Ok(true)
            }
            Msg::Eof { partition } => {
                self.at_end.insert(partition);
                Ok(false)
            }
            Msg::Failed(e) => {
                if let Some(f) = self.failure.get() {
                    return Err(refused(&self.settings.topic, f));
                }
                self.failures += 1;
                tracing::warn!(message = "Kafka consumer error", topic = %self.settings.topic, error = %e);
                if self.failures > 100 {
                    return Err(external(format!("reading `{}`: {e}", self.settings.topic)));
                }
                Ok(false)
            }
        }
    }

    /// The first message of `partition` read in this run is at `offset`: if the group's
    /// committed offset is below it and below the partition's first kept offset (the low
    /// watermark), the messages between were never read (see [`lost_range`]).
    async fn check_gap(&mut self, consumer: usize, partition: i32, offset: i64) -> Result<(), IcicleError> {
        let s = &self.settings;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&s.topic, partition);
        let c = self.consumers[consumer].clone();
        let committed = tokio::task::spawn_blocking(move || c.committed_offsets(tpl, Duration::from_secs(30)))
            .await
            .map_err(|e| external(e.to_string()))?;
        let committed = match committed {
            Ok(tpl) => tpl.find_partition(&s.topic, partition).and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            }),
            Err(e) => {
                tracing::warn!(message = "cannot read the committed offset; no gap check", topic = %s.topic, partition, error = %e);
                None
            }
        };
        let Some(c) = committed.filter(|c| offset > *c) else { return Ok(()) };
        // Skipped offsets can also be transaction markers or aborted records: only a committed
        // offset below the low watermark means messages were lost.
        let (c2, topic) = (self.consumers[consumer].clone(), s.topic.clone());
        let low = match tokio::task::spawn_blocking(move || {
            c2.fetch_watermarks(&topic, partition, Duration::from_secs(30))
        })
        .await
        .map_err(|e| external(e.to_string()))?
        {
            Ok((low, _)) => low,
            Err(e) => {
                tracing::warn!(message = "cannot read the partition's watermarks; no gap check", topic = %s.topic, partition, error = %e);
                return Ok(());
            }
        };
        let Some((first, last)) = lost_range(c, low, offset) else { return Ok(()) };
        let n = (last - first + 1) as u64;
        self.counts.lost_messages += n;
        let lost = self.counts.lost_messages;
        icicle_core::metrics::Metrics::global().set_counter(
            &icicle_core::metrics::names::KAFKA_LOST_MESSAGES_TOTAL,
            &[("component", self.component.as_str())],
            lost as f64,
        );
        let why = format!(
            "offsets {first}..={last} of `{}` partition {partition} were never read: the committed offset {first} was no longer in the topic \
             (retention deleted messages up to {low}) and the consumer started at `{}` instead; \
             the index misses their changes until a snapshot run re-indexes the {}",
            s.topic,
            s.start.as_str(),
            s.what
        );
        if s.on_gap == OnGap::Fail {
            return Err(external(format!("{why}; stopping (on_gap = \"fail\")")));
        }
        tracing::error!(message = "lost messages", topic = %s.topic, partition, first, last, messages = n, detail = %why);
        Ok(())
    }
}

/// The stream's error for refused credentials or a failed TLS handshake.
fn refused(topic: &str, failure: String) -> IcicleError {
    external(format!("cannot read `{topic}`: {failure}"))
}

/// The configuration of a consumer of `settings.topic` that commits only when told to.
fn consumer_config(settings: &TopicSettings, eof: bool, component: &str) -> Result<rdkafka::ClientConfig, IcicleError> {
    let mut cc = settings
        .connection
        .client_config_with(|k, r| ConfigError::InvalidValue {
            key: format!("connection.{k}"),
            origin: format!("the `{component}` source"),
            reason: r,
        })
        .map_err(IcicleError::Config)?;
    cc.set("group.id", &settings.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", settings.start.as_str())
        .set("enable.partition.eof", if eof { "true" } else { "false" });
    // Defaults that can be overridden in `connection.properties`: a short session so a
    // killed consumer's partitions move on quickly (and groups form fast), and fetches
    // that return as soon as a little data is there.
    for (k, v) in [
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "1000"),
        ("fetch.wait.max.ms", "100"),
        ("statistics.interval.ms", "1000"),
    ] {
        if cc.get(k).is_none() {
            cc.set(k, v);
        }
    }
    Ok(cc)
}

/// Offsets lost unread. A committed offset below the low watermark no longer exists, so the
/// consumer was reset (to `start`): everything from it to the first offset read was skipped
/// (with `start = "latest"`, kept messages too). Otherwise skipped offsets are transaction
/// markers or aborted records, and nothing is lost.
fn lost_range(committed: i64, low_watermark: i64, first_read: i64) -> Option<(i64, i64)> {
    (committed >= 0 && low_watermark > committed && first_read > committed).then(|| (committed, first_read - 1))
}

#[async_trait]
impl ChangeStream for TopicStream {
    type Event = TopicMessage;
    type Position = Offsets;
    type Counts = TopicCounts;

    async fn poll(
        &mut self,
        out: &mut Vec<TopicMessage>,
        wait: Option<Duration>,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Polled, IcicleError> {
        let failure = self.failure.clone();
        loop {
            let got = match wait {
                None => tokio::select! {
                    m = self.rx.recv() => m,
                    f = failure.wait() => return Err(refused(&self.settings.topic, f)),
                    _ = stop.changed() => return Ok(Polled::Idle),
                },
                Some(w) => match tokio::time::timeout(w, async {
                    tokio::select! {
                        m = self.rx.recv() => Ok(m),
                        f = failure.wait() => Err(f),
                    }
                })
                .await
                {
                    Ok(Ok(m)) => m,
                    Ok(Err(f)) => return Err(refused(&self.settings.topic, f)),
                    Err(_) => {
                        let ended = self.drain && self.all_partitions.iter().all(|p| self.at_end.contains(p));
                        return Ok(if ended { Polled::End } else { Polled::Idle });
                    }
                },
            };
            let Some(msg) = got else { return Ok(Polled::End) };
            if self.take(msg, out).await? {
                // What else is queued already, up to a bound.
                for _ in 0..POLL_MORE {
                    let Ok(msg) = self.rx.try_recv() else { break };
                    self.take(msg, out).await?;
                }
                icicle_core::metrics::Metrics::global().set(
                    &icicle_core::metrics::names::QUEUE_DEPTH,
                    &[("component", &self.component)],
                    self.rx.len() as f64,
                );
                return Ok(Polled::New);
            }
        }
    }

    fn position(&self, batch: &[TopicMessage], _rest_empty: bool) -> Option<Offsets> {
        let mut next = Offsets::new();
        for m in batch {
            let e = next.entry(m.partition).or_insert(m.offset + 1);
            *e = (*e).max(m.offset + 1);
        }
        (!next.is_empty()).then_some(next)
    }

    fn read_position(&self) -> Option<Offsets> {
        (!self.read.is_empty()).then(|| self.read.clone())
    }

    fn counts(&self) -> TopicCounts {
        self.counts.clone()
    }

    async fn truncate(&mut self, to: &Offsets) -> Result<(), IcicleError> {
        let counts = &mut self.counts;
        let mut by_consumer: BTreeMap<usize, TopicPartitionList> = BTreeMap::new();
        for (&p, &o) in to {
            if counts.committed.get(&p).is_some_and(|&c| c >= o) {
                continue;
            }
            let Some(&c) = self.owner.get(&p) else { continue };
            by_consumer
                .entry(c)
                .or_default()
                .add_partition_offset(&self.settings.topic, p, Offset::Offset(o))
                .map_err(|e| external(e.to_string()))?;
        }
        for (c, tpl) in by_consumer {
            match self.consumers[c].commit(&tpl, CommitMode::Sync) {
                Ok(()) => {
                    counts.commits += 1;
                    for e in tpl.elements() {
                        if let Offset::Offset(o) = e.offset() {
                            counts.committed.insert(e.partition(), o);
                        }
                    }
                }
                // A rebalance moved the partition: its messages will be read again (upserts
                // and deletes are idempotent), nothing is lost.
                Err(e) => tracing::warn!(message = "offset commit failed", topic = %self.settings.topic, error = %e),
            }
        }
        let m = icicle_core::metrics::Metrics::global();
        for (p, o) in &counts.committed {
            let ps = p.to_string();
            m.set(
                &icicle_core::metrics::names::KAFKA_COMMITTED_OFFSET,
                &[("component", &self.component), ("topic", &self.settings.topic), ("partition", &ps)],
                *o as f64,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod gap_tests {
    #[test]
    fn only_offsets_below_the_low_watermark_are_lost() {
        // Retention deleted 10..=39; the first message read is 40.
        assert_eq!(super::lost_range(10, 40, 40), Some((10, 39)));
        // ... and with `start = "latest"` the reset also skipped the kept 40..=99.
        assert_eq!(super::lost_range(10, 40, 100), Some((10, 99)));
        // Skipped offsets that still exist (transaction markers, aborted records): nothing lost.
        assert_eq!(super::lost_range(10, 0, 40), None);
        assert_eq!(super::lost_range(10, 10, 12), None);
        // Reading from the committed offset: nothing lost.
        assert_eq!(super::lost_range(10, 5, 10), None);
        assert_eq!(super::lost_range(-1, 40, 40), None);
    }
}
