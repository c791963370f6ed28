//! The counting pipeline's hand-off as the seed runs it: its per-(principal, shard) counts go
//! to the sinks of `[counting] sinks` (a real Kafka-protocol broker; a file sink) and equal an
//! independent recount in Python (`zlib.crc32` of each 9-column row, as the seed shards);
//! `icicle counts rebuild` turns them into the pipeline's own CSV byte for byte; the aggregate
//! pipeline checks its file counts against the counts, in the same run and in a separate run
//! from the rebuilt file, with the same records either way.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use icicle_plugins_kafka::produce;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use serde_json::Value;

/// Counts per `principal#shard` of the icicle9 CSVs under `dir`, recounted by Python.
const RECOUNT: &str = r#"
import csv, glob, io, json, sys, zlib
counts = {}
def bump(k):
    counts[k] = counts.get(k, 0) + 1
for name in sorted(glob.glob(sys.argv[1] + "/*.csv")):
    with open(name, "rb") as f:
        for raw in f.read().split(b"\n"):
            if not raw:
                continue
            shard = zlib.crc32(raw) % 64
            row = next(csv.reader(io.StringIO(raw.decode("utf-8"))))
            parts = [p for p in row[8].split("/")[:-1] if p]
            depth = min(len(parts), int(sys.argv[2]))
            d = "/" + "/".join(parts[:depth])
            for p in ("u" + row[2], "g" + row[3], d):
                bump("%s#%d" % (p, shard))
json.dump(counts, sys.stdout)
"#;

fn recount(data: &Path, directory_max: usize) -> BTreeMap<String, u64> {
    let out = Command::new(python())
        .args(["-c", RECOUNT])
        .arg(data)
        .arg(directory_max.to_string())
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The counts entries as `principal#shard` → count, and the end marker's content.
fn shard_counts(entries: &[Value], version: &str) -> (BTreeMap<String, u64>, Value) {
    let mut counts = BTreeMap::new();
    let mut end = Value::Null;
    for e in entries {
        let c = &e["content"];
        assert_eq!(c["version"], version, "{e}");
        assert!(e["subject"].as_str().unwrap().starts_with(&format!("{version}/")), "{e}");
        if c["end"] == true {
            end = c.clone();
            continue;
        }
        let key = format!("{}#{}", c["principal"].as_str().unwrap(), c["shard"]);
        assert!(counts.insert(key, c["count"].as_u64().unwrap()).is_none(), "{e}");
    }
    (counts, end)
}

fn entries_in(dir: &Path) -> Vec<Value> {
    documents(dir, "ingest-")
        .into_iter()
        .flat_map(|(_, d)| d["ingest_data"]["gmeta"].as_array().unwrap().clone())
        .collect()
}

/// Aggregate entries (`user:`, `group:`, `dir:` subjects) by subject.
fn aggregates(dir: &Path) -> BTreeMap<String, Value> {
    entries_in(dir)
        .into_iter()
        .filter(|e| e["content"]["principal"].is_string() && e["content"]["file_count"].is_u64())
        .map(|e| (e["subject"].as_str().unwrap().to_string(), e))
        .collect()
}

/// A pipeline over the listings in `data` with counting (counts also to `counts_sink`) and
/// aggregates, records to a file sink in `out`.
fn pipeline(
    t: &Path,
    name: &str,
    data: &Path,
    version: &str,
    counting: &str,
    counts_sink: &str,
    aggregate: &str,
) -> std::path::PathBuf {
    config(
        t,
        &format!("{name}.toml"),
        &format!(
            "[snapshot]\nworkers = 2\nsplit_bytes = 40000\nversion = \"{version}\"\n\
             [records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{d}/principals.tsv\"\n\
             {counting}\n\
             [aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 3\nreference_time = 1767225600\n\
             dir_visible_to = [\"urn:globus:groups:id:admins\"]\n{aggregate}\n\
             [sources.s]\ntype = \"tsv\"\npaths = [\"{d}/*.csv\"]\npreset = \"icicle9\"\n\
             [sinks.out]\ntype = \"file\"\ndir = \"{t}/{name}-out\"\n{counts_sink}",
            d = data.display(),
            t = t.display(),
        ),
    )
}

fn generated(t: &Path, seed: u64) -> std::path::PathBuf {
    let fs = GenFs::generate(&GenSpec::new(5_000, seed));
    let data = t.join("tsv");
    gen::write(&fs, Format::Tsv, &data, 1_000, false).unwrap();
    data
}

#[test]
fn counts_reach_a_file_sink_rebuild_to_the_csv_and_check_the_aggregates() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let data = generated(t, seed);
    let counting = format!(
        "[counting]\nenabled = true\ndirectory_max = 3\noutput = \"{}/counts.csv\"\nsinks = [\"counts\"]",
        t.display()
    );
    let sink = format!("[sinks.counts]\ntype = \"file\"\ndir = \"{}/counts-out\"\n", t.display());
    let cfg = pipeline(t, "one", &data, "v1", &counting, &sink, "");
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "seed {seed}: {err}");

    // The counts sink has the counts and nothing else; the records' sink has no counts.
    let entries = entries_in(&t.join("counts-out"));
    let (counts, end) = shard_counts(&entries, "v1");
    assert_eq!(counts, recount(&data, 3), "seed {seed}: the counts differ from Python's recount");
    assert_eq!(end["messages"].as_u64(), Some(counts.len() as u64));
    assert_eq!(s["pipelines"]["counting"]["messages"].as_u64(), Some(entries.len() as u64 - 1), "{s}");
    assert!(entries_in(&t.join("one-out")).iter().all(|e| e["content"]["shard"].is_null()));

    // In the same run, the aggregates were checked against the counting pipeline's counts.
    let agg = &s["pipelines"]["aggregate"];
    assert_eq!(agg["counts_from"], "the counting pipeline", "{agg}");
    let checked = agg["counts_checked"].as_u64().unwrap();
    assert!(checked > 10, "{agg}");
    assert_eq!(agg["counts_mismatched"], 0, "{agg}");

    // The rebuilt CSV is the pipeline's own.
    let rebuilt = t.join("rebuilt.csv");
    let (code, out, err) =
        icicle(&["counts", "rebuild", "-c", cfg.to_str().unwrap(), "--out", rebuilt.to_str().unwrap(), "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["version"], "v1");
    assert_eq!(std::fs::read(&rebuilt).unwrap(), std::fs::read(t.join("counts.csv")).unwrap());

    // A separate aggregate run from the rebuilt file: the same records, the same check.
    let from_file = format!("counts = \"{}\"", rebuilt.display());
    let cfg2 = pipeline(t, "two", &data, "v1", "", "", &from_file);
    let (code, s2, err) = snapshot(&cfg2, &[]);
    assert_eq!(code, 0, "{err}");
    let agg2 = &s2["pipelines"]["aggregate"];
    assert_eq!(
        (agg2["counts_checked"].as_u64(), agg2["counts_mismatched"].as_u64()),
        (Some(checked), Some(0)),
        "{agg2}"
    );
    assert_eq!(aggregates(&t.join("two-out")), aggregates(&t.join("one-out")));

    // A wrong count is found and named.
    let text = std::fs::read_to_string(&rebuilt).unwrap();
    let line = text.lines().find(|l| l.starts_with('u')).unwrap().to_string();
    let (p, n) = line.rsplit_once(',').unwrap();
    let wrong = format!("{p},{}", n.parse::<u64>().unwrap() + 1);
    std::fs::write(&rebuilt, text.replace(&line, &wrong)).unwrap();
    let (code, s3, err) = snapshot(&pipeline(t, "three", &data, "v1", "", "", &from_file), &[]);
    assert_eq!(code, 0, "{err}");
    let agg3 = &s3["pipelines"]["aggregate"];
    assert_eq!(agg3["counts_mismatched"], 1, "{agg3}");
    let user = format!("user:{}", &p[1..p.find(',').unwrap()]);
    assert_eq!(agg3["counts_mismatches"][0]["principal"], user.as_str(), "{agg3}");

    // A counted group the aggregate never saw (a line added to the counts) is named too.
    std::fs::write(&rebuilt, format!("{text}g4242424,3,3\n")).unwrap();
    let (code, s4, err) = snapshot(&pipeline(t, "four", &data, "v1", "", "", &from_file), &[]);
    assert_eq!(code, 0, "{err}");
    let agg4 = &s4["pipelines"]["aggregate"];
    assert_eq!((agg4["counts_mismatched"].as_u64(), agg4["counts_missing"].as_u64()), (Some(1), Some(1)), "{agg4}");
    assert_eq!(agg4["counts_mismatches"][0]["principal"], "group:4242424", "{agg4}");

    // Configuration mistakes name the key.
    let bad = pipeline(t, "bad", &data, "v1", &counting.replace("[\"counts\"]", "[\"nowhere\"]"), &sink, "");
    let (code, _, err) = snapshot(&bad, &[]);
    assert_ne!(code, 0);
    assert!(err.contains("counting.sinks") && err.contains("nowhere"), "{err}");
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn counts_through_the_broker_equal_a_python_recount_and_rebuild_per_version() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let data = generated(t, seed);
    let broker = kafka();
    let topic = format!("counts-{}-{seed}", std::process::id());
    rt().block_on(produce::create_topic(&broker, &topic, 3)).unwrap();
    let counting = |out: &str| {
        format!("[counting]\nenabled = true\ndirectory_max = 2\noutput = \"{}/{out}\"\nsinks = [\"msk\"]", t.display())
    };
    let sink =
        format!("[sinks.msk]\ntype = \"kafka\"\ntopic = \"{topic}\"\nconnection = {{ bootstrap = \"{broker}\" }}\n");
    let cfg1 = pipeline(t, "k1", &data, "run-1", &counting("counts-1.csv"), &sink, "");
    let (code, _, err) = snapshot(&cfg1, &[]);
    assert_eq!(code, 0, "seed {seed}: {err}");
    // The second run sees a listing fewer.
    let mut parts: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    parts.sort();
    std::fs::remove_file(&parts[0]).unwrap();
    let cfg2 = pipeline(t, "k2", &data, "run-2", &counting("counts-2.csv"), &sink, "");
    let (code, _, err) = snapshot(&cfg2, &[]);
    assert_eq!(code, 0, "seed {seed}: {err}");

    let messages = rt().block_on(produce::consume_all(&broker, &topic)).unwrap();
    let entries: Vec<Value> = messages
        .iter()
        .map(|m| serde_json::from_str::<Value>(m.value.as_deref().unwrap()).unwrap()["entry"].clone())
        .collect();
    let second: Vec<Value> = entries.iter().filter(|e| e["content"]["version"] == "run-2").cloned().collect();
    let (counts, end) = shard_counts(&second, "run-2");
    assert_eq!(counts, recount(&data, 2), "seed {seed}: the topic's counts differ from Python's recount");
    assert_eq!(end["messages"].as_u64(), Some(counts.len() as u64));

    // By default the last finished run; --version picks another.
    for (args, want) in [(vec![], "counts-2.csv"), (vec!["--version", "run-1"], "counts-1.csv")] {
        let out = t.join(format!("rebuilt-{want}"));
        let mut a = vec!["counts", "rebuild", "-c", cfg2.to_str().unwrap(), "--out", out.to_str().unwrap()];
        a.extend(args);
        let (code, _, err) = icicle(&a, &[]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(t.join(want)).unwrap(), "{want}");
    }
    let (code, _, err) = icicle(&["counts", "rebuild", "-c", cfg2.to_str().unwrap(), "--version", "run-9"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("run-9") && err.contains("no end marker"), "{err}");
}
