//! Every metric icicle records, declared once: its name, help text, kind and label keys.
//! Producers record through these and the dashboard reads by them, so a name cannot drift
//! between the two.

/// How a metric's value behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (exposed with `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// A latency histogram ([`super::LATENCY_BUCKETS`]), exposed as buckets, `_sum` and `_count`.
    Histogram,
}

/// One metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// Its name (counters end in `_total`).
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Its kind.
    pub kind: Kind,
    /// The label keys of its series (small, bounded sets: never users or paths).
    pub labels: &'static [&'static str],
}

/// Processing and delivery time of a batch.
pub const BATCH_DURATION_SECONDS: Metric = Metric {
    name: "icicle_batch_duration_seconds",
    help: "Processing and delivery time of a batch.",
    kind: Kind::Histogram,
    labels: &["component"],
};

/// Processing and delivery time of the last batch.
pub const BATCH_SECONDS: Metric = Metric {
    name: "icicle_batch_seconds",
    help: "Processing and delivery time of the last batch.",
    kind: Kind::Gauge,
    labels: &["component"],
};

/// Records in the last batch.
pub const BATCH_SIZE: Metric =
    Metric { name: "icicle_batch_size", help: "Records in the last batch.", kind: Kind::Gauge, labels: &["component"] };

/// Batches processed and acknowledged.
pub const BATCHES_TOTAL: Metric = Metric {
    name: "icicle_batches_total",
    help: "Batches processed and acknowledged.",
    kind: Kind::Counter,
    labels: &["component"],
};

/// Last changelog index cleared (acknowledged) per MDT.
pub const CHANGELOG_CLEARED: Metric = Metric {
    name: "icicle_changelog_cleared",
    help: "Last changelog index cleared (acknowledged) per MDT.",
    kind: Kind::Gauge,
    labels: &["component", "mdt"],
};

/// Highest changelog index read per MDT.
pub const CHANGELOG_INDEX: Metric = Metric {
    name: "icicle_changelog_index",
    help: "Highest changelog index read per MDT.",
    kind: Kind::Gauge,
    labels: &["component", "mdt"],
};

/// How long one `lfs fid2path` took.
pub const FID2PATH_DURATION_SECONDS: Metric = Metric {
    name: "icicle_fid2path_duration_seconds",
    help: "How long one `lfs fid2path` took.",
    kind: Kind::Histogram,
    labels: &["mdt"],
};

/// Changelog records read but not yet cleared, per MDT.
pub const CHANGELOG_LAG: Metric = Metric {
    name: "icicle_changelog_lag",
    help: "Changelog records read but not yet cleared, per MDT.",
    kind: Kind::Gauge,
    labels: &["component", "mdt"],
};

/// Changelog records purged before they were read, per MDT.
pub const CHANGELOG_LOST_RECORDS_TOTAL: Metric = Metric {
    name: "icicle_changelog_lost_records_total",
    help: "Changelog records purged before they were read, per MDT.",
    kind: Kind::Counter,
    labels: &["component", "mdt"],
};

/// Records that could not be parsed, applied or published, kept in a dead-letter file.
pub const DEAD_LETTERS_TOTAL: Metric = Metric {
    name: "icicle_dead_letters_total",
    help: "Records that could not be parsed, applied or published, kept in a dead-letter file.",
    kind: Kind::Counter,
    labels: &["source"],
};

/// From submission to SUCCESS of the last task.
pub const GLOBUS_LAST_TASK_SECONDS: Metric = Metric {
    name: "icicle_globus_last_task_seconds",
    help: "From submission to SUCCESS of the last task.",
    kind: Kind::Gauge,
    labels: &["sink"],
};

/// Requests sent to the Globus Search API.
pub const GLOBUS_REQUESTS_TOTAL: Metric = Metric {
    name: "icicle_globus_requests_total",
    help: "Requests sent to the Globus Search API.",
    kind: Kind::Counter,
    labels: &["sink", "endpoint"],
};

/// Globus requests retried after a transient failure.
pub const GLOBUS_RETRIES_TOTAL: Metric = Metric {
    name: "icicle_globus_retries_total",
    help: "Globus requests retried after a transient failure.",
    kind: Kind::Counter,
    labels: &["sink", "reason"],
};

/// Globus Search tasks that ended FAILED.
pub const GLOBUS_TASKS_FAILED_TOTAL: Metric = Metric {
    name: "icicle_globus_tasks_failed_total",
    help: "Globus Search tasks that ended FAILED.",
    kind: Kind::Counter,
    labels: &["sink"],
};

/// Globus Search tasks waited for until SUCCESS.
pub const GLOBUS_TASKS_TOTAL: Metric = Metric {
    name: "icicle_globus_tasks_total",
    help: "Globus Search tasks waited for until SUCCESS.",
    kind: Kind::Counter,
    labels: &["sink"],
};

/// Access tokens fetched with client credentials.
pub const GLOBUS_TOKEN_FETCHES_TOTAL: Metric = Metric {
    name: "icicle_globus_token_fetches_total",
    help: "Access tokens fetched with client credentials.",
    kind: Kind::Counter,
    labels: &["sink"],
};

/// Next offset to read, as committed, per partition.
pub const KAFKA_COMMITTED_OFFSET: Metric = Metric {
    name: "icicle_kafka_committed_offset",
    help: "Next offset to read, as committed, per partition.",
    kind: Kind::Gauge,
    labels: &["component", "topic", "partition"],
};

/// Messages between the consumer's position and the partition's end.
pub const KAFKA_LAG: Metric = Metric {
    name: "icicle_kafka_lag",
    help: "Messages between the consumer's position and the partition's end.",
    kind: Kind::Gauge,
    labels: &["component", "topic", "partition"],
};

/// Messages deleted before the monitor read them (committed offset to first read).
pub const KAFKA_LOST_MESSAGES_TOTAL: Metric = Metric {
    name: "icicle_kafka_lost_messages_total",
    help: "Messages deleted before the monitor read them (committed offset to first read).",
    kind: Kind::Counter,
    labels: &["component"],
};

/// Connections the metrics server failed to accept.
pub const METRICS_ACCEPT_ERRORS_TOTAL: Metric = Metric {
    name: "icicle_metrics_accept_errors_total",
    help: "Connections the metrics server failed to accept.",
    kind: Kind::Counter,
    labels: &[],
};

/// The release and commit of the running binary (value 1).
pub const BUILD_INFO: Metric = Metric {
    name: "icicle_build_info",
    help: "The release and commit of the running binary (value 1).",
    kind: Kind::Gauge,
    labels: &["version", "commit"],
};

/// CPU time of the icicle process, user and system.
pub const PROCESS_CPU_SECONDS_TOTAL: Metric = Metric {
    name: "icicle_process_cpu_seconds_total",
    help: "CPU time of the icicle process, user and system.",
    kind: Kind::Counter,
    labels: &[],
};

/// Open file descriptors of the icicle process.
pub const PROCESS_OPEN_FDS: Metric = Metric {
    name: "icicle_process_open_fds",
    help: "Open file descriptors of the icicle process.",
    kind: Kind::Gauge,
    labels: &[],
};

/// When the icicle process started, seconds since the epoch.
pub const PROCESS_START_TIME_SECONDS: Metric = Metric {
    name: "icicle_process_start_time_seconds",
    help: "When the icicle process started, seconds since the epoch.",
    kind: Kind::Gauge,
    labels: &[],
};

/// Resident memory of the icicle process.
pub const PROCESS_RESIDENT_BYTES: Metric = Metric {
    name: "icicle_process_resident_bytes",
    help: "Resident memory of the icicle process.",
    kind: Kind::Gauge,
    labels: &[],
};

/// Events waiting between the consumers and the reducer.
pub const QUEUE_DEPTH: Metric = Metric {
    name: "icicle_queue_depth",
    help: "Events waiting between the consumers and the reducer.",
    kind: Kind::Gauge,
    labels: &["component"],
};

/// Records dropped by type at ingestion.
pub const RECORDS_FILTERED_TOTAL: Metric = Metric {
    name: "icicle_records_filtered_total",
    help: "Records dropped by type at ingestion.",
    kind: Kind::Counter,
    labels: &["component"],
};

/// Records or events read by a source.
pub const RECORDS_IN_TOTAL: Metric = Metric {
    name: "icicle_records_in_total",
    help: "Records or events read by a source.",
    kind: Kind::Counter,
    labels: &["component"],
};

/// Index operations emitted.
pub const RECORDS_OUT_TOTAL: Metric = Metric {
    name: "icicle_records_out_total",
    help: "Index operations emitted.",
    kind: Kind::Counter,
    labels: &["component", "op"],
};

/// Reduction outcomes.
pub const REDUCE_TOTAL: Metric = Metric {
    name: "icicle_reduce_total",
    help: "Reduction outcomes.",
    kind: Kind::Counter,
    labels: &["component", "outcome"],
};

/// Input that could not be used (reported with its position).
pub const REJECTS_TOTAL: Metric = Metric {
    name: "icicle_rejects_total",
    help: "Input that could not be used (reported with its position).",
    kind: Kind::Counter,
    labels: &["component"],
};

/// Documents a sink delivered durably.
pub const SINK_BATCHES_TOTAL: Metric = Metric {
    name: "icicle_sink_batches_total",
    help: "Documents a sink delivered durably.",
    kind: Kind::Counter,
    labels: &["sink", "kind"],
};

/// Bytes of documents delivered.
pub const SINK_BYTES_TOTAL: Metric = Metric {
    name: "icicle_sink_bytes_total",
    help: "Bytes of documents delivered.",
    kind: Kind::Counter,
    labels: &["sink", "kind"],
};

/// How long a delivery took, until durable.
pub const SINK_DELIVERY_DURATION_SECONDS: Metric = Metric {
    name: "icicle_sink_delivery_duration_seconds",
    help: "How long a delivery took, until durable.",
    kind: Kind::Histogram,
    labels: &["sink"],
};

/// Entries (upserts) or subjects (deletes) delivered.
pub const SINK_ENTRIES_TOTAL: Metric = Metric {
    name: "icicle_sink_entries_total",
    help: "Entries (upserts) or subjects (deletes) delivered.",
    kind: Kind::Counter,
    labels: &["sink", "kind"],
};

/// Deliveries a sink failed.
pub const SINK_ERRORS_TOTAL: Metric = Metric {
    name: "icicle_sink_errors_total",
    help: "Deliveries a sink failed.",
    kind: Kind::Counter,
    labels: &["sink", "kind"],
};

/// How long the last delivery took.
pub const SINK_LAST_DELIVERY_SECONDS: Metric = Metric {
    name: "icicle_sink_last_delivery_seconds",
    help: "How long the last delivery took.",
    kind: Kind::Gauge,
    labels: &["sink"],
};

/// Estimated seconds left (-1: unknown).
pub const SNAPSHOT_ETA_SECONDS: Metric = Metric {
    name: "icicle_snapshot_eta_seconds",
    help: "Estimated seconds left (-1: unknown).",
    kind: Kind::Gauge,
    labels: &[],
};

/// Snapshot inputs (files, byte ranges, databases, directories) read.
pub const SNAPSHOT_INPUTS_DONE: Metric = Metric {
    name: "icicle_snapshot_inputs_done",
    help: "Snapshot inputs (files, byte ranges, databases, directories) read.",
    kind: Kind::Gauge,
    labels: &[],
};

/// Snapshot inputs planned or discovered so far.
pub const SNAPSHOT_INPUTS_PLANNED: Metric = Metric {
    name: "icicle_snapshot_inputs_planned",
    help: "Snapshot inputs planned or discovered so far.",
    kind: Kind::Gauge,
    labels: &[],
};

/// Rows read by a snapshot source.
pub const SNAPSHOT_ROWS_TOTAL: Metric = Metric {
    name: "icicle_snapshot_rows_total",
    help: "Rows read by a snapshot source.",
    kind: Kind::Counter,
    labels: &["source"],
};

/// Snapshot work done: bytes of text inputs, one per database or directory.
pub const SNAPSHOT_WORK_DONE_UNITS: Metric = Metric {
    name: "icicle_snapshot_work_done_units",
    help: "Snapshot work done: bytes of text inputs, one per database or directory.",
    kind: Kind::Gauge,
    labels: &[],
};

/// Snapshot work planned (same units).
pub const SNAPSHOT_WORK_PLANNED_UNITS: Metric = Metric {
    name: "icicle_snapshot_work_planned_units",
    help: "Snapshot work planned (same units).",
    kind: Kind::Gauge,
    labels: &[],
};

/// Restarts of a monitor source after a failure.
pub const SOURCE_RESTARTS_TOTAL: Metric = Metric {
    name: "icicle_source_restarts_total",
    help: "Restarts of a monitor source after a failure.",
    kind: Kind::Counter,
    labels: &["component"],
};

/// Approximate heap bytes of the monitor's state.
pub const STATE_BYTES: Metric = Metric {
    name: "icicle_state_bytes",
    help: "Approximate heap bytes of the monitor's state.",
    kind: Kind::Gauge,
    labels: &["component"],
};

/// Objects held by the monitor's state.
pub const STATE_ENTRIES: Metric = Metric {
    name: "icicle_state_entries",
    help: "Objects held by the monitor's state.",
    kind: Kind::Gauge,
    labels: &["component"],
};

/// State events (evictions, fid2path calls, ...).
pub const STATE_EVENTS_TOTAL: Metric = Metric {
    name: "icicle_state_events_total",
    help: "State events (evictions, fid2path calls, ...).",
    kind: Kind::Counter,
    labels: &["component", "event"],
};

/// Every metric, for listing and checks.
pub const ALL: &[Metric] = &[
    BATCH_DURATION_SECONDS,
    BATCH_SECONDS,
    BATCH_SIZE,
    BATCHES_TOTAL,
    BUILD_INFO,
    CHANGELOG_CLEARED,
    CHANGELOG_INDEX,
    CHANGELOG_LAG,
    CHANGELOG_LOST_RECORDS_TOTAL,
    DEAD_LETTERS_TOTAL,
    FID2PATH_DURATION_SECONDS,
    GLOBUS_LAST_TASK_SECONDS,
    GLOBUS_REQUESTS_TOTAL,
    GLOBUS_RETRIES_TOTAL,
    GLOBUS_TASKS_FAILED_TOTAL,
    GLOBUS_TASKS_TOTAL,
    GLOBUS_TOKEN_FETCHES_TOTAL,
    KAFKA_COMMITTED_OFFSET,
    KAFKA_LAG,
    KAFKA_LOST_MESSAGES_TOTAL,
    METRICS_ACCEPT_ERRORS_TOTAL,
    PROCESS_CPU_SECONDS_TOTAL,
    PROCESS_OPEN_FDS,
    PROCESS_RESIDENT_BYTES,
    PROCESS_START_TIME_SECONDS,
    QUEUE_DEPTH,
    RECORDS_FILTERED_TOTAL,
    RECORDS_IN_TOTAL,
    RECORDS_OUT_TOTAL,
    REDUCE_TOTAL,
    REJECTS_TOTAL,
    SINK_BATCHES_TOTAL,
    SINK_BYTES_TOTAL,
    SINK_DELIVERY_DURATION_SECONDS,
    SINK_ENTRIES_TOTAL,
    SINK_ERRORS_TOTAL,
    SINK_LAST_DELIVERY_SECONDS,
    SNAPSHOT_ETA_SECONDS,
    SNAPSHOT_INPUTS_DONE,
    SNAPSHOT_INPUTS_PLANNED,
    SNAPSHOT_ROWS_TOTAL,
    SNAPSHOT_WORK_DONE_UNITS,
    SNAPSHOT_WORK_PLANNED_UNITS,
    SOURCE_RESTARTS_TOTAL,
    STATE_BYTES,
    STATE_ENTRIES,
    STATE_EVENTS_TOTAL,
];

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_unique_and_counters_end_in_total() {
        let mut names: Vec<&str> = super::ALL.iter().map(|m| m.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), super::ALL.len());
        for m in super::ALL {
            assert_eq!(m.kind == super::Kind::Counter, m.name.ends_with("_total"), "{}", m.name);
            assert!(m.help.ends_with('.'), "{}", m.name);
        }
    }
}
