//! Every registered snapshot source, sink and sketch through the component compliance
//! harness (`icicle_testkit::compliance`), on empty, good and bad inputs made here.

mod common;

use std::io::Write;
use std::path::Path;

use common::*;
use icicle_core::registry::{plugins, PluginKind};
use icicle_testkit::compliance::{check_sink, check_sketch, check_source};
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

// The binary's plugins, linked so that their registrations are present.
use icicle_plugins_globus as _;
use icicle_plugins_gpfs as _;
use icicle_plugins_kafka as _;
use icicle_plugins_lustre as _;
use icicle_plugins_s3 as _;
use icicle_plugins_sinks as _;
use icicle_plugins_sketches as _;
use icicle_plugins_snapshot as _;

/// A Globus Search index id.
const INDEX: &str = "4d7d1e0a-6b4e-4d1c-9f3a-2c1e5b7a9d00";

/// Change sources: run by the monitor driver, tested by their kill and property tests.
const MONITORS: [&str; 4] = ["fanotify", "gpfs", "inotify", "lustre"];

fn registered(kind: PluginKind) -> Vec<&'static str> {
    let mut v: Vec<_> =
        plugins().into_iter().filter(|p| p.kind == kind && !MONITORS.contains(&p.name)).map(|p| p.name).collect();
    v.sort();
    v
}

/// `fs` written as `format` into `dir` (created).
fn written(fs: &GenFs, format: Format, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    gen::write(fs, format, dir, 1_000, false).unwrap();
}

/// Append a line no parser can take to the first file matching `ext` in `dir`.
fn spoil_first(dir: &Path, ext: &str) {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .collect();
    files.sort();
    let mut f = std::fs::OpenOptions::new().append(true).open(&files[0]).unwrap();
    f.write_all(b"this is not a row of any listing\n").unwrap();
}

fn s3_url() -> String {
    std::env::var("ICICLE_TEST_S3").unwrap_or_else(|_| {
        let f = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/run/s3.addr");
        std::fs::read_to_string(&f)
            .map(|s| s.trim().to_string())
            .expect("no S3 server: run scripts/test.sh (or set ICICLE_TEST_S3)")
    })
}

#[test]
fn every_snapshot_source_reads_empty_good_and_bad_inputs() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let fs = GenFs::generate(&GenSpec::new(40, seed));
    let check = |name: &str, empty: String, good: String, bad: String| {
        let n = check_source(&empty, &good, &bad).unwrap_or_else(|e| panic!("{name} (seed {seed}): {e}"));
        assert!(n > 0, "{name}");
        name.to_string()
    };
    let mut covered = Vec::new();
    std::fs::create_dir_all(t.join("empty")).unwrap();
    std::fs::write(t.join("empty/none.csv"), b"").unwrap();

    // tsv (icicle9)
    written(&fs, Format::Tsv, &t.join("tsv"));
    std::fs::create_dir_all(t.join("tsv-bad")).unwrap();
    gen::write(&fs, Format::Tsv, &t.join("tsv-bad"), 1_000, false).unwrap();
    spoil_first(&t.join("tsv-bad"), ".csv");
    let tsv = |d: &str| format!("type = \"tsv\"\npaths = [\"{}/{d}/*.csv\"]\npreset = \"icicle9\"\n", t.display());
    covered.push(check("tsv", tsv("empty"), tsv("tsv"), tsv("tsv-bad")));

    // mmapplypolicy
    written(&fs, Format::Mmapplypolicy, &t.join("mm"));
    written(&fs, Format::Mmapplypolicy, &t.join("mm-bad"));
    spoil_first(&t.join("mm-bad"), ".allfiles");
    std::fs::write(t.join("empty/list.allfiles"), b"").unwrap();
    let mm = |d: &str| format!("type = \"mmapplypolicy\"\npaths = [\"{}/{d}/list.allfiles\"]\n", t.display());
    covered.push(check("mmapplypolicy", mm("empty"), mm("mm"), mm("mm-bad")));

    // gufi: an index without databases; one database that is not SQLite
    written(&fs, Format::Gufi, &t.join("gufi"));
    written(&fs, Format::Gufi, &t.join("gufi-bad"));
    std::fs::create_dir_all(t.join("gufi-bad/zz-corrupt")).unwrap();
    std::fs::write(t.join("gufi-bad/zz-corrupt/db.db"), b"not an SQLite database").unwrap();
    std::fs::create_dir_all(t.join("gufi-empty")).unwrap();
    let gufi = |d: &str| format!("type = \"gufi\"\nindex = \"{}/{d}\"\n", t.display());
    covered.push(check("gufi", gufi("gufi-empty"), gufi("gufi"), gufi("gufi-bad")));

    // walk: an empty directory; a file whose mtime lies past 2400 (a name that is not UTF-8
    // is no reject: it is indexed escaped)
    written(&fs, Format::Tree, &t.join("walk"));
    written(&fs, Format::Tree, &t.join("walk-bad"));
    let far = t.join("walk-bad/tree/far-future");
    std::fs::write(&far, b"x").unwrap();
    let year_2500 = filetime::FileTime::from_unix_time(16_725_225_600, 0);
    filetime::set_symlink_file_times(&far, year_2500, year_2500).unwrap();
    std::fs::create_dir_all(t.join("walk-empty")).unwrap();
    let walk = |d: &str| format!("type = \"walk\"\nroot = \"{}/{d}\"\npath_prefix = \"/\"\n", t.display());
    covered.push(check("walk", walk("walk-empty"), walk("walk/tree"), walk("walk-bad/tree")));

    // s3: an empty prefix; an object with a row no parser can take
    let store = icicle_plugins_s3::client::ObjectStore::connect(&s3_url(), "test", "test").unwrap();
    let bucket = format!("compliance-{seed}");
    store.create_bucket(&bucket).unwrap();
    for (prefix, dir) in [("good/", "tsv"), ("bad/", "tsv-bad")] {
        for e in std::fs::read_dir(t.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "csv") {
                continue;
            }
            store
                .put(
                    &bucket,
                    &format!("{prefix}{}", p.file_name().unwrap().to_string_lossy()),
                    std::fs::read(&p).unwrap(),
                )
                .unwrap();
        }
    }
    store.put(&bucket, "empty/none.csv", Vec::new()).unwrap();
    std::fs::write(t.join("s3-secret"), "test\n").unwrap();
    let s3 = |prefix: &str| {
        format!(
            "type = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"{prefix}\"\nendpoint_url = \"{}\"\nforce_path_style = true\naccess_key_id = \"test\"\nsecret_access_key_file = \"{}\"\npreset = \"icicle9\"\n",
            s3_url(),
            t.join("s3-secret").display()
        )
    };
    // (No object at all is a configuration error, by design: an empty listing must never
    // read as "every file was deleted".)
    covered.push(check("s3", s3("empty/"), s3("good/"), s3("bad/")));

    covered.sort();
    assert_eq!(covered, registered(PluginKind::Source), "every snapshot source plugin needs a case here");
}

#[test]
fn every_sink_acknowledges_only_durable_deliveries_and_closes_twice() {
    let tmp = test_dir();
    let t = tmp.path();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut covered = Vec::new();

    // file: documents are files in `dir` once delivered; a file where the directory should be.
    let out = t.join("file-out");
    let count = || {
        std::fs::read_dir(&out)
            .map(|d| d.filter(|e| e.as_ref().is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.'))).count())
            .unwrap_or(0)
    };
    std::fs::write(t.join("not-a-dir"), b"").unwrap();
    rt.block_on(check_sink(
        &format!("type = \"file\"\ndir = \"{}\"\nfsync = true\n", out.display()),
        Some(&format!("type = \"file\"\ndir = \"{}/sub\"\n", t.join("not-a-dir").display())),
        Some(&count),
    ))
    .unwrap_or_else(|e| panic!("file: {e}"));
    covered.push("file");

    // stdout and blackhole: nothing to observe but the answers.
    rt.block_on(check_sink("type = \"stdout\"\n", None, None)).unwrap_or_else(|e| panic!("stdout: {e}"));
    covered.push("stdout");
    rt.block_on(check_sink("type = \"blackhole\"\n", None, None)).unwrap_or_else(|e| panic!("blackhole: {e}"));
    covered.push("blackhole");

    // globus: the Search emulator; tasks counted there. Broken: a port nobody listens on.
    let emu = icicle_testkit::globus::Emulator::start(icicle_testkit::globus::Options::new(INDEX, "tok")).unwrap();
    std::fs::write(t.join("token"), "tok\n").unwrap();
    let globus = |url: &str| {
        format!(
            "type = \"globus\"\nindex_id = \"{INDEX}\"\nbase_url = \"{url}\"\ntoken_file = \"{}\"\nretry_initial_ms = 10\nretry_max_ms = 20\nmax_retries = 1\ntask_poll_ms = 10\n",
            t.join("token").display()
        )
    };
    let url = emu.url();
    let tasks = || {
        on_thread(|| {
            let c = icicle_testkit::globus::Client::new(&url, "tok");
            tokio::runtime::Runtime::new().unwrap().block_on(c.task_list(INDEX)).map(|t| t.len()).unwrap_or(0)
        })
    };
    rt.block_on(check_sink(&globus(&emu.url()), Some(&globus("http://127.0.0.1:9")), Some(&tasks)))
        .unwrap_or_else(|e| panic!("globus: {e}"));
    covered.push("globus");

    // index: the operations its last commit holds (the opstamp grows with every add and
    // delete). Broken: a file where the directory should be.
    let ix = t.join("index-out");
    let committed =
        || icicle_plugins_index::Store::open(&ix).map_or(0, |s| s.index.load_metas().map_or(0, |m| m.opstamp as usize));
    rt.block_on(check_sink(
        &format!("type = \"index\"\ndir = \"{}\"\nthreads = 1\nmemory_mb = 15\n", ix.display()),
        Some(&format!("type = \"index\"\ndir = \"{}/sub\"\n", t.join("not-a-dir").display())),
        Some(&committed),
    ))
    .unwrap_or_else(|e| panic!("index: {e}"));
    covered.push("index");

    // kafka: the broker; messages on the topic. Broken: nothing listening.
    let bootstrap = kafka();
    let topic = format!("compliance-{}", test_seed());
    rt.block_on(icicle_plugins_kafka::produce::create_topic(&bootstrap, &topic, 1)).unwrap();
    let messages = || rt_messages(&bootstrap, &topic);
    rt.block_on(check_sink(
        &format!("type = \"kafka\"\ntopic = \"{topic}\"\nconnection = {{ bootstrap = \"{bootstrap}\" }}\n"),
        Some(&format!(
            "type = \"kafka\"\ntopic = \"{topic}\"\ntimeout_secs = 2\nconnection = {{ bootstrap = \"127.0.0.1:9\" }}\n"
        )),
        Some(&messages),
    ))
    .unwrap_or_else(|e| panic!("kafka: {e}"));
    covered.push("kafka");

    covered.sort();
    assert_eq!(covered, registered(PluginKind::Sink), "every sink plugin needs a case here");
}

/// `f` on a thread of its own (the durability probes are called inside the sink's runtime).
fn on_thread(f: impl FnOnce() -> usize + Send) -> usize {
    std::thread::scope(|s| s.spawn(f).join().unwrap())
}

/// Messages on `topic` now.
fn rt_messages(bootstrap: &str, topic: &str) -> usize {
    on_thread(|| {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(icicle_plugins_kafka::produce::consume_all(bootstrap, topic))
            .map(|m| m.len())
            .unwrap_or(0)
    })
}

#[test]
fn every_sketch_follows_the_sketch_contract() {
    let names = registered(PluginKind::Sketch);
    assert!(names.len() >= 4, "{names:?}");
    for name in names {
        check_sketch(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn the_kafka_sink_gives_up_after_its_own_timeout() {
    // Nothing listens on port 9: only the delivery timeout ends the wait. `timeout_secs = 2`
    // must be what decides, not librdkafka's 300 s default message timeout.
    let mut sink = icicle_testkit::compliance::sink(
        "type = \"kafka\"\ntopic = \"t\"\ntimeout_secs = 2\nconnection = { bootstrap = \"127.0.0.1:9\" }\n",
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = std::time::Instant::now();
    let r = rt.block_on(sink.deliver(&icicle_core::batch::DocumentBatch::Delete(vec!["/x".into()])));
    let took = started.elapsed();
    assert!(r.is_err(), "a delivery to nowhere said Ok");
    assert!(took < std::time::Duration::from_secs(150), "waited {took:?}: the 300 s default decided");
}

#[test]
fn the_kafka_sink_sets_aside_a_message_the_broker_refuses_and_delivers_the_rest() {
    let bootstrap = kafka();
    let topic = format!("dead-letters-{}", test_seed());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(icicle_plugins_kafka::produce::create_topic(&bootstrap, &topic, 1)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let letters = tmp.path().join("dl.jsonl");
    // The client refuses messages over 2,000 bytes: one entry is far larger.
    let mut sink = icicle_testkit::compliance::sink(&format!(
        "type = \"kafka\"\ntopic = \"{topic}\"\ndead_letter_file = \"{}\"\nconnection = {{ bootstrap = \"{bootstrap}\", properties = {{ \"message.max.bytes\" = \"2000\" }} }}\n",
        letters.display()
    ))
    .unwrap();
    let mut batch = icicle_core::batch::EntryBatch::default();
    for i in 0..6 {
        let pad = if i == 3 { "x".repeat(5_000) } else { String::new() };
        batch.push(format!(r#"{{"subject":"/f{i}","visible_to":["public"],"content":{{"pad":"{pad}"}}}}"#).as_bytes());
    }
    rt.block_on(sink.deliver(&icicle_core::batch::DocumentBatch::Ingest(batch))).unwrap();
    assert_eq!(sink.dead_lettered().len(), 1);
    let got = rt.block_on(icicle_plugins_kafka::produce::consume_all(&bootstrap, &topic)).unwrap();
    let keys: Vec<&str> = got.iter().filter_map(|m| m.key.as_deref()).collect();
    assert_eq!(keys, ["/f0", "/f1", "/f2", "/f4", "/f5"]);
    let letter: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&letters).unwrap().trim()).unwrap();
    assert_eq!(letter["position"], "/f3");
    assert!(letter["reason"].as_str().unwrap().contains("too large"), "{letter}");
    // The same batch again (a delivery retried): the letter is kept once, still owed.
    let mut again = icicle_core::batch::EntryBatch::default();
    again.push(
        format!(r#"{{"subject":"/f3","visible_to":["public"],"content":{{"pad":"{}"}}}}"#, "x".repeat(5_000))
            .as_bytes(),
    );
    rt.block_on(sink.deliver(&icicle_core::batch::DocumentBatch::Ingest(again))).unwrap();
    assert_eq!(sink.dead_lettered(), ["/f3"]);
    assert_eq!(std::fs::read_to_string(&letters).unwrap().lines().count(), 1);
    // A refused delete is never set aside (no later run would send it again): the delivery
    // fails, and retrying cannot help.
    let huge = format!("/{}", "d".repeat(5_000));
    let e = rt.block_on(sink.deliver(&icicle_core::batch::DocumentBatch::Delete(vec![huge]))).unwrap_err();
    assert!(e.to_string().contains("(delete) refused"), "{e}");
    assert!(matches!(e, icicle_core::SinkError::Remote { retry: icicle_core::error::Retry::NoRetry, .. }), "{e:?}");
}
