//! Ground truth for the GPFS monitor through a real Kafka-protocol broker (tansu, started by
//! `scripts/test.sh`): the testkit performs the workloads as real file operations, produces
//! the watch-folder events GPFS would publish, and the index built by a snapshot plus the
//! monitor's output must equal a fresh snapshot of the directory — also with several
//! partitions and consumers, with malformed messages in the stream, and with the monitor
//! killed and restarted mid-stream. Plus the Kafka sink, read back from its topic.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;
use icicle_plugins_kafka::produce;
use icicle_testkit::gpfs::{messages, GpfsJournal};
use icicle_testkit::lustre::{Kind, Workload};
use serde_json::Value;

/// The broker: `ICICLE_TEST_KAFKA`, else the one `scripts/services.sh start` runs.
fn topic(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), icicle_core::time::now_epoch())
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn produce_events(events: &Path, skip: usize, topic: &str, partitions: i32, extra: Vec<(String, String)>) -> usize {
    let mut msgs = messages(events, skip).unwrap();
    let n = msgs.len();
    msgs.extend(extra);
    let k = kafka();
    rt().block_on(async {
        produce::create_topic(&k, topic, partitions).await.unwrap();
        produce::produce(&k, topic, msgs).await.unwrap();
    });
    n
}

fn gpfs_config(tmp: &Path, root: &Path, topic: &str, out: &Path, batch: usize, extra: &str) -> PathBuf {
    config(
        tmp,
        "gpfs.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.fset1]\ntype = \"gpfs\"\ntopic = \"{topic}\"\ngroup_id = \"icicle-{topic}\"\nfs_root = \"/gpfs/fs1\"\nmount = \"{r}\"\n\
             batch_size = {batch}\nquiet_period_secs = 0.05\nstate_dir = \"{t}/state\"\nseed_index = \"{t}/before\"\n{extra}\nconnection = {{ bootstrap = \"{k}\" }}\n\
             [sinks.o]\ntype = \"file\"\ndir = \"{o}\"\nfsync = true\n",
            k = kafka(),
            r = root.display(),
            t = tmp.display(),
            o = out.display()
        ),
    )
}

/// Objects before monitoring, a snapshot of them, then the workload with its events.
fn prepare(
    tmp: &Path,
    kind: Kind,
    ops: usize,
    seed: u64,
) -> (PathBuf, PathBuf, std::collections::BTreeMap<String, Value>) {
    let (root, journal, index) = preexisting_fs(tmp, 60, seed);
    let events = tmp.join("events.jsonl");
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.gpfs = Some(GpfsJournal::open(&events, &root, "/gpfs/fs1", true).unwrap());
    w.run(kind, ops, "/work").unwrap();
    if kind == Kind::Mixed {
        w.run(Kind::Mixed, ops / 2, "/old0").unwrap();
    }
    drop(w);
    (root, events, index)
}

fn monitor_drain(cfg: &Path) -> Value {
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    report["fset1"].clone()
}

fn assert_matches_fresh_snapshot(
    tmp: &Path,
    root: &Path,
    mut index: std::collections::BTreeMap<String, Value>,
    out: &Path,
    what: &str,
    report: &Value,
) {
    apply(&mut index, out);
    let fresh = walk_snapshot(tmp, root, "after");
    let (missing, extra, differ) = compare(&index, &fresh);
    let shown: Vec<String> = differ
        .iter()
        .take(5)
        .map(|p| format!("{p}:\n  monitor {}\n  fresh   {}", comparable(&index)[p], comparable(&fresh)[p]))
        .collect();
    assert!(differ.is_empty(), "{what}: differ\n{}", shown.join("\n"));
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{what}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {report}"
    );
}

/// Every record the monitor sent with storage attributes names the fileset and pool the
/// producers wrote for its inode (`pool_of`); most records carry them (those sent only from
/// a walk, with no event of their file read since the start, do not).
fn assert_storage_as_produced(out: &Path, seed: u64) {
    let (mut with, mut without) = (0, 0);
    for e in upserts(out) {
        let c = &e["content"];
        let path = &c["path"];
        let st = &c["storage"];
        if st.is_null() {
            without += 1;
            continue;
        }
        with += 1;
        let inode = c["raw"]["inode"].as_u64().unwrap_or_else(|| panic!("seed {seed}: {path}: no inode"));
        assert_eq!(st["pool"], icicle_testkit::gpfs::pool_of(inode), "seed {seed}: {path}: {st}");
        assert!(matches!(st["fileset"].as_str(), Some("0" | "2")), "seed {seed}: {path}: {st}");
    }
    assert!(with > without, "seed {seed}: {with} records with storage, {without} without");
}

fn ground_truth(kind: Kind, ops: usize, partitions: i32, consumers: usize) -> Value {
    let seed = test_seed();
    let tmp = tempfile::tempdir().unwrap();
    let (root, events, index) = prepare(tmp.path(), kind, ops, seed);
    let t = topic(&format!("gt-{kind:?}-{partitions}p").to_lowercase());
    let n = produce_events(&events, 0, &t, partitions, vec![]);
    let out = tmp.path().join("out");
    let cfg = gpfs_config(tmp.path(), &root, &t, &out, 40, &format!("consumers = {consumers}"));
    let r = monitor_drain(&cfg);
    assert_eq!(r["messages"], n as u64, "{r}");
    assert_eq!(r["rejects"], 0, "{r}");
    assert_eq!(r["lost_messages"], 0, "{r}");
    assert_matches_fresh_snapshot(tmp.path(), &root, index, &out, &format!("{kind:?}"), &r);
    assert_storage_as_produced(&out, seed);
    // Every partition was committed to its end.
    let parts: Vec<i32> = (0..partitions).collect();
    let committed = produce::committed(&kafka(), &t, &format!("icicle-{t}"), &parts).unwrap();
    let total: i64 = committed.values().sum();
    assert_eq!(total, n as i64, "committed {committed:?}");
    r
}

#[test]
fn eval_out_ground_truth() {
    ground_truth(Kind::EvalOut, 300, 1, 1);
}

#[test]
fn eval_perf_ground_truth() {
    ground_truth(Kind::EvalPerf, 300, 1, 1);
}

#[test]
fn filebench_ground_truth() {
    ground_truth(Kind::Filebench, 600, 1, 1);
}

#[test]
fn mixed_ground_truth() {
    ground_truth(Kind::Mixed, 400, 1, 1);
}

#[test]
fn four_partitions_two_consumers_ground_truth() {
    // Events are keyed by inode: one object's events stay in order in one partition.
    ground_truth(Kind::Filebench, 600, 4, 2);
}

#[test]
fn renames_over_four_partitions_and_two_consumers_ground_truth() {
    // Directory renames whose descendants' events sit in other partitions: read in no order
    // across them, every operation is checked against the mount.
    let r = ground_truth(Kind::Mixed, 400, 4, 2);
    // The renames were read out of order and the mount corrected what they left.
    assert!(r["state"]["corrected"].as_u64().is_some_and(|n| n > 0), "{r}");
}

#[test]
fn malformed_messages_are_rejected_with_their_position_and_the_rest_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, events, index) = prepare(tmp.path(), Kind::EvalPerf, 150, 3);
    let t = topic("bad");
    let bad = vec![("x".to_string(), "not json".to_string()), ("y".to_string(), r#"{"path": "/gpfs/fs1/a", "event": "IN_CREATE"}"#.to_string()), ("z".to_string(), r#"{"inode": 1, "path": "/gpfs/fs1/a", "event": "IN_NONSENSE"}"#.to_string()),
        // A time with a multi-byte character once panicked the parser on every restart.
        ("w".to_string(), r#"{"inode": 7, "path": "/gpfs/fs1/poison", "event": "IN_CREATE", "fileSize": 1, "atime": "2024-03-16T02:00:01+0é00", "ctime": 1700000001, "mtime": 1700000002, "ownerUserId": 1, "ownerGroupId": 1, "permissions": "0644"}"#.to_string())];
    let n = produce_events(&events, 0, &t, 1, bad);
    let out = tmp.path().join("out");
    let cfg = gpfs_config(tmp.path(), &root, &t, &out, 40, "");
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&stdout).unwrap();
    let r = &r["fset1"];
    assert_eq!((r["rejects"].as_u64(), r["dead_letters"].as_u64()), (Some(4), Some(4)), "{r}");
    assert_eq!(r["messages"], n as u64 + 4, "{r}");
    let stream = rt().block_on(produce::consume_all(&kafka(), &t)).unwrap();
    let at = |key: &str| stream.iter().find(|m| m.key.as_deref() == Some(key)).map(|m| m.offset).unwrap();
    for (off, why) in
        [(at("x"), "not a WF_JSON object"), (at("y"), "missing `inode`"), (at("z"), "unknown event `IN_NONSENSE`")]
    {
        assert!(
            err.lines().any(|l| l.contains("rejected event")
                && l.contains("partition=0")
                && l.contains(&format!("offset={off}"))
                && l.contains(why)),
            "offset {off}: {why}\n{err}"
        );
    }
    // Each is kept in the dead-letter file with its position and bytes.
    let letters: Vec<Value> = std::fs::read_to_string(tmp.path().join(format!("state/gpfs-{t}.dead-letters.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let positions: Vec<String> = letters.iter().map(|l| l["position"].as_str().unwrap().to_string()).collect();
    assert_eq!(positions, ["x", "y", "z", "w"].map(|k| format!("{t}/0@{}", at(k))), "{letters:?}");
    assert!(letters[3]["raw"].as_str().unwrap().contains("+0\u{e9}00"), "{}", letters[3]);
    assert_matches_fresh_snapshot(tmp.path(), &root, index, &out, "with rejects", r);
    // The offsets past them were committed: a restart reads nothing again.
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let again: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (again["fset1"]["messages"].as_u64(), again["fset1"]["dead_letters"].as_u64()),
        (Some(0), Some(0)),
        "{again}"
    );
}

#[test]
fn a_consumer_killed_mid_stream_loses_nothing() {
    let seed = test_seed();
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, index) = preexisting_fs(tmp.path(), 40, seed);
    let events = tmp.path().join("events.jsonl");
    let t = topic("kill");
    let out = tmp.path().join("out");
    let cfg = gpfs_config(tmp.path(), &root, &t, &out, 15, "");
    let mut x = Rng::new(seed ^ 1);
    let mut produced = 0usize;
    let rounds = test_kills();
    for round in 0..rounds {
        // More of the workload arrives while the monitor runs; it is killed at a random point.
        let mut w = Workload::open(&root, &journal, seed).unwrap();
        w.gpfs = Some(GpfsJournal::open(&events, &root, "/gpfs/fs1", true).unwrap());
        w.run(if round % 2 == 0 { Kind::Mixed } else { Kind::EvalOut }, 120, "/work").unwrap();
        drop(w);
        produced += produce_events(&events, produced, &t, 1, vec![]);
        run_monitor_then_kill(&cfg, &mut x, 300, 1200);
    }
    let r = monitor_drain(&cfg);
    assert_eq!(r["rejects"], 0, "{r}");
    // Restarting from committed offsets is not mistaken for lost messages.
    assert_eq!(r["lost_messages"], 0, "{r}");
    assert_matches_fresh_snapshot(tmp.path(), &root, index, &out, "after kills", &r);
    let committed = produce::committed(&kafka(), &t, &format!("icicle-{t}"), &[0]).unwrap();
    assert_eq!(committed.get(&0).copied(), Some(produced as i64), "{r}");
}

#[test]
fn the_kafka_sink_publishes_upserts_and_deletes_keyed_by_subject() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, events, _) = prepare(tmp.path(), Kind::Mixed, 100, 5);
    let t = topic("src");
    produce_events(&events, 0, &t, 1, vec![]);
    let index_topic = topic("index");
    let audit_topic = topic("audit");
    let cfg = gpfs_config(tmp.path(), &root, &t, &tmp.path().join("out"), 20, "");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "[sinks.o]",
        &format!(
            "[sinks.msk]\ntype = \"kafka\"\ntopic = \"{index_topic}\"\naudit_topic = \"{audit_topic}\"\nconnection = {{ bootstrap = \"{}\" }}\n[sinks.o]",
            kafka()
        ),
    );
    std::fs::write(&cfg, text).unwrap();
    let r = monitor_drain(&cfg);
    let got = rt().block_on(produce::consume_all(&kafka(), &index_topic)).unwrap();
    // The same operations as the file sink, one message each, keyed by subject.
    let (ups, dels) = (r["updates"].as_u64().unwrap(), r["deletes"].as_u64().unwrap());
    assert!(ups > 0 && dels > 0, "{r}");
    assert_eq!(got.len() as u64, ups + dels, "{r}");
    for m in &got {
        let v: Value = serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        let subject = if v["op"] == "upsert" {
            v["entry"]["subject"].as_str().unwrap().to_string()
        } else {
            v["subject"].as_str().unwrap().to_string()
        };
        assert_eq!(m.key.as_deref(), Some(subject.as_str()));
        assert_eq!(m.op.as_deref(), v["op"].as_str());
    }
    assert_eq!(got.iter().filter(|m| m.op.as_deref() == Some("upsert")).count() as u64, ups);
    let audit = rt().block_on(produce::consume_all(&kafka(), &audit_topic)).unwrap();
    let audited: u64 = audit
        .iter()
        .map(|m| serde_json::from_str::<Value>(m.value.as_deref().unwrap()).unwrap()["count"].as_u64().unwrap())
        .sum();
    assert_eq!(audited, ups + dels);

    // The snapshot pipeline can publish through it too.
    let snap_topic = topic("snap");
    let scfg = config(
        tmp.path(),
        "snap.toml",
        &format!(
            "[snapshot]\nversion = \"v\"\n[records]\nvisible_to = [\"public\"]\n[sources.w]\ntype = \"walk\"\nroot = \"{}\"\npath_prefix = \"/\"\n[sinks.msk]\ntype = \"kafka\"\ntopic = \"{snap_topic}\"\nconnection = {{ bootstrap = \"{}\" }}\n",
            root.display(),
            kafka()
        ),
    );
    let (code, s, err) = snapshot(&scfg, &[]);
    assert_eq!(code, 0, "{err}");
    let got = rt().block_on(produce::consume_all(&kafka(), &snap_topic)).unwrap();
    assert_eq!(got.len() as u64, s["records"].as_u64().unwrap(), "{s}");
}

#[test]
fn an_ingestion_filter_drops_access_events_before_parsing() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, events, index) = prepare(tmp.path(), Kind::Filebench, 600, 4);
    let text = std::fs::read_to_string(&events).unwrap();
    // The producers' own shapes (spaces after `:` or not): read as JSON.
    let event_of = |l: &str| {
        serde_json::from_str::<Value>(l).ok().and_then(|v| v["event"].as_str().map(str::to_string)).unwrap_or_default()
    };
    let accesses = text.lines().filter(|l| event_of(l) == "IN_ACCESS").count() as u64;
    let nested = text.lines().filter(|l| event_of(l) == "IN_MODIFY IN_ISDIR").count();
    assert!(accesses > 0 && nested > 0, "the stand-in sends reads' IN_ACCESS and parents' IN_MODIFY");
    let t = topic("filter");
    let n = produce_events(&events, 0, &t, 1, vec![]);
    let out = tmp.path().join("out");
    let cfg = gpfs_config(tmp.path(), &root, &t, &out, 40, "filter = [\"IN_ACCESS\"]");
    let r = monitor_drain(&cfg);
    assert_eq!(r["messages"], n as u64, "{r}");
    assert_eq!(r["filtered"], accesses, "{r}");
    assert_eq!(r["rejects"], 0, "{r}");
    // Only atimes are missing, and the ground truth does not compare them.
    assert_matches_fresh_snapshot(tmp.path(), &root, index, &out, "filtered", &r);
    let committed = produce::committed(&kafka(), &t, &format!("icicle-{t}"), &[0]).unwrap();
    assert_eq!(committed.values().sum::<i64>(), n as i64, "filtered messages are committed too");
    // Creates, removals and moves cannot be filtered.
    let bad = gpfs_config(tmp.path(), &root, &t, &out, 40, "filter = [\"IN_CREATE\"]");
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", bad.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("filter")
            && err.contains("IN_CREATE")
            && err.contains("IN_ACCESS, IN_ATTRIB, IN_MODIFY, IN_CLOSE_WRITE"),
        "{err}"
    );
}

/// The events of `topic` past the group's committed offsets (every partition), and how many
/// messages the commits cover.
fn uncommitted(topic: &str, partitions: i32) -> (Vec<Value>, usize) {
    let parts: Vec<i32> = (0..partitions).collect();
    let committed = produce::committed(&kafka(), topic, &format!("icicle-{topic}"), &parts).unwrap();
    let all = rt().block_on(produce::consume_all(&kafka(), topic)).unwrap();
    let at = |p: i32| committed.get(&p).copied().unwrap_or(0).max(0);
    let pending = all
        .iter()
        .filter(|m| m.offset >= at(m.partition))
        .filter_map(|m| m.value.as_deref().and_then(|v| serde_json::from_str::<Value>(v).ok()))
        .collect();
    (pending, parts.iter().map(|p| at(*p) as usize).sum())
}

/// What the group's commits promise, on the index delivered so far (no final drain): a file
/// no uncommitted event (`pending_events`) names (by its path, a directory above it, or
/// another hard link of its inode) is indexed exactly as the file system has it, and no
/// indexed name is gone unless an uncommitted event names it or a directory above it.
fn assert_committed_is_delivered(
    pending_events: &[Value],
    index: &std::collections::BTreeMap<String, Value>,
    fresh: &std::collections::BTreeMap<String, Value>,
    what: &str,
) {
    // Producers write a directory's path with a trailing slash: the index names it without.
    let pending: Vec<String> = pending_events
        .iter()
        .filter_map(|v| v["path"].as_str().and_then(|p| p.strip_prefix("/gpfs/fs1")))
        .map(|p| icicle_core::name::normalise(p).into_owned())
        .collect();
    let inode = |v: &Value| v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok()));
    let pending_inodes: std::collections::HashSet<u64> =
        pending_events.iter().filter_map(|v| inode(&v["inode"])).collect();
    let named = |p: &str| {
        pending.iter().any(|e| e == p || p.starts_with(&format!("{e}/")))
            || fresh
                .get(p)
                .and_then(|e| inode(&e["content"]["raw"]["inode"]))
                .is_some_and(|i| pending_inodes.contains(&i))
    };
    let (got, want) = (comparable(index), comparable(fresh));
    for (p, w) in &want {
        if !named(p) {
            assert_eq!(
                got.get(p),
                Some(w),
                "{what}: {p} (no event after the commits names it) is not delivered as it is"
            );
        }
    }
    for p in got.keys() {
        assert!(
            want.contains_key(p) || named(p),
            "{what}: {p} is gone, no event after the commits names it, and it is still indexed"
        );
    }
}

/// Kill a monitor at random points of a growing stream over `partitions` partitions read by
/// `consumers` consumers: whatever was committed was delivered, and a last drain matches a
/// fresh walk.
fn kill_points(partitions: i32, consumers: usize, name: &str) {
    let seed = test_seed() ^ 0xc0;
    let tmp = test_dir();
    let (root, journal, index) = preexisting_fs(tmp.path(), 40, seed);
    let events = tmp.path().join("events.jsonl");
    let t = topic(name);
    let out = tmp.path().join("out");
    // One event per batch (a commit each): reading takes long enough to be killed inside.
    let cfg = gpfs_config(tmp.path(), &root, &t, &out, 1, &format!("consumers = {consumers}"));
    let mut x = Rng::new(seed ^ 9);
    let (mut produced, mut inside) = (0usize, 0);
    for round in 0..3 {
        // More of the workload arrives, then a monitor runs and is killed at a random point:
        // joining the group again takes several seconds (the killed member must time out).
        let mut w = Workload::open(&root, &journal, seed).unwrap();
        w.gpfs = Some(GpfsJournal::open(&events, &root, "/gpfs/fs1", true).unwrap());
        w.run(
            if round % 2 == 0 { Kind::Mixed } else { Kind::EvalOut },
            400,
            if round == 1 { "/old0" } else { "/work" },
        )
        .unwrap();
        drop(w);
        produced += produce_events(&events, produced, &t, partitions, vec![]);
        let fresh = walk_snapshot(tmp.path(), &root, &format!("fresh-{round}"));
        run_monitor_then_kill(&cfg, &mut x, 7000, 7000);
        let (pending, committed) = uncommitted(&t, partitions);
        inside += usize::from(committed > 0 && committed < produced);
        eprintln!("round {round}: committed {committed} of {produced}");
        let mut delivered = index.clone();
        apply(&mut delivered, &out);
        assert_committed_is_delivered(
            &pending,
            &delivered,
            &fresh,
            &format!("round {round}, committed {committed} of {produced}"),
        );
    }
    let r = monitor_drain(&cfg);
    assert_matches_fresh_snapshot(tmp.path(), &root, index, &out, "after the kills", &r);
    eprintln!("kill points inside the stream: {inside} of 3");
}

#[test]
fn every_kill_point_has_delivered_what_it_committed() {
    kill_points(1, 1, "ack");
}

#[test]
fn every_kill_point_over_four_partitions_has_delivered_what_it_committed() {
    kill_points(4, 2, "ack-4p");
}

#[test]
fn a_bounded_state_evicts_files_and_still_matches_a_fresh_snapshot() {
    let seed = test_seed() ^ 0x1e0;
    let tmp = tempfile::tempdir().unwrap();
    let (root, events, index) = prepare(tmp.path(), Kind::Mixed, 400, seed);
    let t = topic("lru");
    let n = produce_events(&events, 0, &t, 1, vec![]);
    let out = tmp.path().join("out");
    let cfg = gpfs_config(tmp.path(), &root, &t, &out, 40, "lru_capacity = 12");
    let r = monitor_drain(&cfg);
    assert_eq!(r["messages"], n as u64, "{r}");
    assert!(r["state"]["evicted"].as_u64().unwrap_or(0) > 0, "the cap evicted files: {r}");
    assert_matches_fresh_snapshot(tmp.path(), &root, index, &out, "lru_capacity = 12", &r);
    // Without a mount, evicted files below a renamed directory could not be found.
    let no_mount = std::fs::read_to_string(&cfg)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("mount ="))
        .collect::<Vec<_>>()
        .join("\n");
    let bad = config(tmp.path(), "bad.toml", &no_mount);
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", bad.to_str().unwrap()], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("lru_capacity") && err.contains("mount") && err.contains("bad.toml"), "{err}");
}

/// A stream that ends with a file moved out of the fileset (an IN_MOVED_FROM whose pair never
/// comes): `--drain` deletes it and commits past it, so the next drain reads nothing again.
#[test]
fn a_drain_ending_on_a_move_out_deletes_it_and_commits_past_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, events, index) = prepare(tmp.path(), Kind::EvalPerf, 80, 11);
    let fresh = walk_snapshot(tmp.path(), &root, "before-move");
    let moved = fresh
        .keys()
        .find(|p| std::fs::symlink_metadata(root.join(&p[1..])).is_ok_and(|m| m.is_file()))
        .expect("a file")
        .clone();
    let inode = std::fs::metadata(root.join(&moved[1..])).unwrap().ino();
    std::fs::rename(root.join(&moved[1..]), tmp.path().join("elsewhere")).unwrap();
    let out_of_fileset = format!(
        r#"{{"inode": {inode}, "path": "/gpfs/fs1{moved}", "event": "IN_MOVED_FROM", "cookie": 424242, "fileSize": 1, "atime": 1700000000, "ctime": 1700000001, "mtime": 1700000002, "ownerUserId": 0, "ownerGroupId": 0, "permissions": "0644"}}"#
    );
    let t = topic("moved-out");
    let n = produce_events(&events, 0, &t, 1, vec![(inode.to_string(), out_of_fileset)]);
    let out = tmp.path().join("out");
    let cfg = gpfs_config(tmp.path(), &root, &t, &out, 40, "");
    let r = monitor_drain(&cfg);
    assert_eq!((r["state"]["moved_out"].as_u64(), r["rejects"].as_u64()), (Some(1), Some(0)), "{r}");
    assert_matches_fresh_snapshot(tmp.path(), &root, index, &out, "moved out", &r);
    let committed = produce::committed(&kafka(), &t, &format!("icicle-{t}"), &[0]).unwrap();
    assert_eq!(committed.get(&0).copied(), Some(n as i64 + 1), "committed past the settled half: {r}");
    let again = monitor_drain(&cfg);
    assert_eq!(again["messages"], 0, "{again}");
}
