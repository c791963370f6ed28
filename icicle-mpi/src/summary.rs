//! The summary of a distributed run: every rank's snapshot summary combined on rank 0.

use serde_json::{json, Map, Value};

/// Counts that add up over ranks.
const SUMMED: [&str; 21] = [
    "rows",
    "records",
    "directories",
    "rejects",
    "dead_lettered",
    "emitted",
    "splits",
    "batches",
    "bytes",
    "delete_batches",
    "created",
    "updated",
    "unchanged",
    "deleted",
    "deletes_withheld",
    "unreadable_inputs",
    "aggregate_records",
    "aggregates_deleted",
    "aggregate_deletes_withheld",
    "batches_withheld",
    "peak_rss_bytes",
];

/// This process's peak resident memory (`VmHWM`), 0 when unknown.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// CPU seconds (user + system) this process used so far.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes into the struct passed.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn sum(ranks: &[Value], pick: impl Fn(&Value) -> &Value) -> u64 {
    ranks.iter().map(|r| pick(r).as_u64().unwrap_or(0)).sum()
}

/// Rank 0's summary with the counts of every rank added up, the aggregate pipeline's report
/// combined, and one line per rank (`ranks`).
pub fn combine(ranks: &[Value]) -> Value {
    let Some(first) = ranks.first() else { return Value::Null };
    let mut all = first.clone();
    for key in SUMMED {
        all[key] = Value::from(sum(ranks, |r| &r[key]));
    }
    let seconds = ranks.iter().filter_map(|r| r["seconds"].as_f64()).fold(0.0, f64::max);
    all["seconds"] = Value::from(seconds);
    all["rows_per_s"] = Value::from(if seconds > 0.0 { sum(ranks, |r| &r["rows"]) as f64 / seconds } else { 0.0 });
    all["reject_threshold_exceeded"] = Value::from(ranks.iter().any(|r| r["reject_threshold_exceeded"] == true));
    // A versioned run shares every rank's unknown scopes with every rank (each plans its
    // deletes under all of them): rank 0's list and count are the run's.
    if first["versioned"] != true {
        all["unknown_scopes"] = Value::from(
            ranks.iter().flat_map(|r| r["unknown_scopes"].as_array().cloned().unwrap_or_default()).collect::<Vec<_>>(),
        );
        all["unknown_scope_count"] = Value::from(sum(ranks, |r| &r["unknown_scope_count"]));
    }
    if let Some(agg) = all["pipelines"].get_mut("aggregate").and_then(Value::as_object_mut) {
        for key in ["principals", "records", "without_visible_to", "sketch_memory_bytes", "shuffled_bytes"] {
            agg.insert(key.into(), Value::from(sum(ranks, |r| &r["pipelines"]["aggregate"][key])));
        }
        let checked = ranks.iter().any(|r| r["pipelines"]["aggregate"].get("counts_checked").is_some());
        for key in ["counts_checked", "counts_mismatched", "counts_missing"].into_iter().filter(|_| checked) {
            agg.insert(key.into(), Value::from(sum(ranks, |r| &r["pipelines"]["aggregate"][key])));
        }
        let errors: Vec<Value> = ranks
            .iter()
            .flat_map(|r| r["pipelines"]["aggregate"]["errors"].as_array().cloned().unwrap_or_default())
            .collect();
        agg.insert("errors".into(), Value::from(errors));
        if checked {
            let mut wrong: Vec<Value> = ranks
                .iter()
                .flat_map(|r| r["pipelines"]["aggregate"]["counts_mismatches"].as_array().cloned().unwrap_or_default())
                .collect();
            wrong.truncate(20);
            agg.insert("counts_mismatches".into(), Value::from(wrong));
        }
    }
    all["sinks"] = combine_sinks(ranks);
    let per_rank: Vec<Value> = ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({"rank": i, "rows": r["rows"], "emitted": r["emitted"], "splits": r["splits"], "seconds": r["seconds"], "cpu_seconds": r["cpu_seconds"],
                   "peak_rss_bytes": r["peak_rss_bytes"], "aggregate_principals": r["pipelines"]["aggregate"]["principals"],
                   "shuffled_bytes": r["pipelines"]["aggregate"]["shuffled_bytes"]})
        })
        .collect();
    all["ranks"] = Value::from(per_rank);
    all
}

/// Each sink's deliveries over every rank: counts added up, `seconds` the longest rank's, the
/// sink's own numbers added up and its task ids gathered (the last 20).
fn combine_sinks(ranks: &[Value]) -> Value {
    let mut sinks = Map::new();
    for rank in ranks {
        for (name, facts) in rank["sinks"].as_object().into_iter().flatten() {
            let into = sinks.entry(name.clone()).or_insert_with(|| json!({}));
            add_up(into, facts);
        }
    }
    Value::Object(sinks)
}

/// Add `facts`' numbers into `into` (seconds: the larger), recursively; lists are joined.
fn add_up(into: &mut Value, facts: &Value) {
    let (Some(into), Some(facts)) = (into.as_object_mut(), facts.as_object()) else { return };
    for (k, v) in facts {
        let merged = match (into.get(k), v) {
            (Some(a), Value::Number(b)) if k == "seconds" => {
                Value::from(a.as_f64().unwrap_or(0.0).max(b.as_f64().unwrap_or(0.0)))
            }
            (Some(Value::Number(a)), Value::Number(b)) => match (a.as_u64(), b.as_u64()) {
                (Some(a), Some(b)) => Value::from(a + b),
                _ => Value::from(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0)),
            },
            (Some(Value::Array(a)), Value::Array(b)) => {
                let joined: Vec<Value> = a.iter().chain(b).cloned().collect();
                Value::from(joined[joined.len().saturating_sub(20)..].to_vec())
            }
            (Some(a @ Value::Object(_)), Value::Object(_)) => {
                let mut a = a.clone();
                add_up(&mut a, v);
                a
            }
            _ => v.clone(),
        };
        into.insert(k.clone(), merged);
    }
}

/// A short human-readable summary.
pub fn table(all: &Value) -> String {
    let mut out = String::new();
    let n = |k: &str| all[k].as_u64().unwrap_or(0);
    out.push_str(&format!(
        "{} rows read ({} records, {} directories, {} rejects) in {:.2} s over {} ranks; {} records emitted in {} documents\n",
        n("rows"),
        n("records"),
        n("directories"),
        n("rejects"),
        all["seconds"].as_f64().unwrap_or(0.0),
        all["ranks"].as_array().map_or(0, Vec::len),
        n("emitted"),
        n("batches"),
    ));
    if let Some(p) = all["pipelines"].as_object() {
        let p: &Map<String, Value> = p;
        for (name, report) in p {
            out.push_str(&format!("{name}: {report}\n"));
        }
    }
    for (name, f) in all["sinks"].as_object().into_iter().flatten() {
        out.push_str(&format!(
            "sink {name}: {} documents, {} entries, {:.2} s delivering\n",
            f["documents"],
            f["entries"],
            f["seconds"].as_f64().unwrap_or(0.0)
        ));
    }
    for r in all["ranks"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "rank {}: {} rows, {} splits, {:.2} s, peak RSS {} MiB\n",
            r["rank"],
            r["rows"],
            r["splits"],
            r["seconds"].as_f64().unwrap_or(0.0),
            r["peak_rss_bytes"].as_u64().unwrap_or(0) >> 20
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_and_rank_zero_gives_the_rest() {
        let a = json!({"rows": 3, "emitted": 2, "seconds": 1.0, "pipelines": {"aggregate": {"principals": 2, "records": 2, "sketch": "ddsketch", "errors": ["x"]}}});
        let b = json!({"rows": 5, "emitted": 5, "seconds": 2.0, "pipelines": {"aggregate": {"principals": 3, "records": 1, "sketch": "ddsketch", "errors": []}}});
        let all = combine(&[a, b]);
        assert_eq!((all["rows"].as_u64(), all["emitted"].as_u64()), (Some(8), Some(7)));
        assert_eq!(all["seconds"], 2.0);
        assert_eq!(all["rows_per_s"], 4.0);
        assert_eq!(all["pipelines"]["aggregate"]["principals"], 5);
        assert_eq!(all["pipelines"]["aggregate"]["sketch"], "ddsketch");
        assert_eq!(all["pipelines"]["aggregate"]["errors"], json!(["x"]));
        assert_eq!(all["ranks"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn unknown_scopes_are_added_up_unless_every_rank_holds_them_all() {
        let scope = |p: &str| json!({"scope": p});
        let a = json!({"unknown_scopes": [scope("/a")], "unknown_scope_count": 1});
        let b = json!({"unknown_scopes": [scope("/b")], "unknown_scope_count": 1});
        let all = combine(&[a, b]);
        assert_eq!(
            (all["unknown_scopes"].clone(), all["unknown_scope_count"].as_u64()),
            (json!([scope("/a"), scope("/b")]), Some(2))
        );
        // A versioned run: every rank reports every rank's.
        let both = json!({"versioned": true, "unknown_scopes": [scope("/a"), scope("/b")], "unknown_scope_count": 2});
        let all = combine(&[both.clone(), both]);
        assert_eq!(
            (all["unknown_scopes"].clone(), all["unknown_scope_count"].as_u64()),
            (json!([scope("/a"), scope("/b")]), Some(2))
        );
    }

    #[test]
    fn each_sinks_deliveries_add_up_over_ranks() {
        let rank = |docs: u64, secs: f64, ids: &[&str]| {
            json!({"sinks": {"globus": {"documents": docs, "entries": docs * 10, "seconds": secs,
                   "sink": {"index_id": "i", "tasks_submitted": docs, "waited_for_tasks": true, "last_task_ids": ids}}}})
        };
        let all = combine(&[rank(2, 1.5, &["a", "b"]), rank(3, 0.5, &["c"])]);
        let g = &all["sinks"]["globus"];
        assert_eq!((g["documents"].as_u64(), g["entries"].as_u64()), (Some(5), Some(50)));
        assert_eq!(g["seconds"], 1.5);
        assert_eq!(g["sink"]["tasks_submitted"], 5);
        assert_eq!(g["sink"]["index_id"], "i");
        assert_eq!(g["sink"]["last_task_ids"], json!(["a", "b", "c"]));
        assert!(table(&all).contains("sink globus: 5 documents, 50 entries, 1.50 s delivering"));
    }
}
