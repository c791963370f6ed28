//! The Globus Search sink against the testkit's Globus Search emulator: the snapshot pipeline's
//! index read back through the public API equals what the file sink writes (client
//! credentials, a low rate limit and injected 503s, every retry counted); versioned deletes
//! reach the index; permanent failures name the sink and the status, and a Lustre monitor
//! acknowledges nothing that was not published; the Kafka audit topic names every Globus
//! task; secrets never reach stderr. Plus the sink driven directly: token refresh on 401,
//! FAILED tasks, validation errors, giving up, and not waiting for tasks.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use icicle_core::batch::DocumentBatch;
use icicle_core::traits::Sink;
use icicle_core::ConfigError;
use icicle_plugins_globus::{GlobusSink, GlobusSinkConfig};
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use icicle_testkit::globus::{block_on, Client, Emulator, Options};
use icicle_testkit::lustre::{Kind, Workload};
use serde_json::Value;

const INDEX: &str = "0f5c3a52-7d6e-4a8b-9c1d-2e3f4a5b6c7d";
const TOKEN: &str = "tok-Zq8vN3pW6xK1yR4t";
const CLIENT_ID: &str = "5b1e0c9a-3f2d-4e6b-8a7c-9d0e1f2a3b4c";
const CLIENT_SECRET: &str = "csec-Hj7Lm2Qp9Ws4Xz6V";

fn testkit() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    assert!(p.exists(), "build icicle-testkit first (cargo build --workspace)");
    p
}

/// The broker: `ICICLE_TEST_KAFKA`, else the one `scripts/services.sh start` runs.
/// A `[sinks.globus]` section for the emulator with a static token from `ICICLE_TEST_GLOBUS_TOKEN`.
fn token_sink(emu: &Emulator, index: &str) -> String {
    format!(
        "[sinks.globus]\ntype = \"globus\"\nindex_id = \"{index}\"\nbase_url = \"{}\"\ntoken_env = \"ICICLE_TEST_GLOBUS_TOKEN\"\nretry_initial_ms = 20\nretry_max_ms = 200\ntask_poll_ms = 10\n",
        emu.url()
    )
}

/// A `[sinks.globus]` section using client credentials, the secret from `ICICLE_TEST_GLOBUS_SECRET`.
fn client_sink(emu: &Emulator) -> String {
    format!(
        "[sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\nbase_url = \"{u}\"\nauth_url = \"{u}/v2/oauth2/token\"\nclient_id = \"{CLIENT_ID}\"\n\
         client_secret_env = \"ICICLE_TEST_GLOBUS_SECRET\"\nretry_initial_ms = 20\nretry_max_ms = 200\ntask_poll_ms = 10\n",
        u = emu.url()
    )
}

const ENV: [(&str, &str); 3] =
    [("ICICLE_TEST_GLOBUS_TOKEN", TOKEN), ("ICICLE_TEST_GLOBUS_SECRET", CLIENT_SECRET), ("RUST_LOG", "debug")];

fn run_snapshot(cfg: &Path) -> (i32, Value, String) {
    let (code, out, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], &ENV);
    assert_no_secrets(&err);
    (code, serde_json::from_str(&out).unwrap_or(Value::Null), err)
}

fn assert_no_secrets(text: &str) {
    for s in [TOKEN, CLIENT_SECRET] {
        assert!(!text.contains(s), "a secret reached the output:\n{text}");
    }
}

/// The `key=value` field of the sink's closing log line.
fn logged(err: &str, key: &str) -> u64 {
    let line =
        err.lines().find(|l| l.contains("Globus sink closed")).unwrap_or_else(|| panic!("no closing line in\n{err}"));
    let at = line.find(&format!(" {key}=")).unwrap_or_else(|| panic!("no {key} in {line}")) + key.len() + 2;
    line[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}

/// A file sink directory's index keyed by subject: (visible_to, content).
fn file_index(dir: &Path) -> BTreeMap<String, (Value, Value)> {
    let mut out = BTreeMap::new();
    for (_, doc) in documents(dir, "ingest-") {
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            out.insert(e["subject"].as_str().unwrap().to_string(), (e["visible_to"].clone(), e["content"].clone()));
        }
    }
    for s in deleted(dir) {
        out.remove(&s);
    }
    out
}

/// The emulator's index keyed by subject: (visible_to, content), through the dump endpoint.
fn emulator_index(emu: &Emulator) -> BTreeMap<String, (Value, Value)> {
    let dump = block_on(Client::new(&emu.url(), TOKEN).dump(INDEX)).unwrap();
    dump.into_iter()
        .map(|(s, entries)| {
            let e = entries.as_array().unwrap();
            assert_eq!(e.len(), 1, "{s}: {entries}");
            (s, (e[0]["visible_to"].clone(), e[0]["content"].clone()))
        })
        .collect()
}

#[test]
fn snapshot_index_equals_the_file_sink_with_client_credentials_rate_limit_and_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(1_200, 11));
    let data = tmp.path().join("tsv");
    gen::write(&fs, Format::Tsv, &data, 400, false).unwrap();
    let mut o = Options::new(INDEX, TOKEN);
    o.client = Some((CLIENT_ID.into(), CLIENT_SECRET.into()));
    o.rate_limit = Some(5.0);
    o.burst = Some(3.0);
    o.fail_every = Some(3);
    let emu = Emulator::start(o).unwrap();
    let out = tmp.path().join("out");
    let cfg = config(
        tmp.path(),
        "g.toml",
        &format!(
            "[snapshot]\nversion = \"v1\"\nmax_batch_bytes = 120000\nrejects_file = \"{t}/rejects.jsonl\"\n[records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{d}/principals.tsv\"\n\
             [sources.s]\ntype = \"tsv\"\npaths = [\"{d}/*.csv\"]\npreset = \"icicle9\"\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n{g}",
            d = data.display(),
            o = out.display(),
            t = tmp.path().display(),
            g = client_sink(&emu)
        ),
    );
    let (code, summary, err) = run_snapshot(&cfg);
    assert_eq!(code, 0, "{err}");
    assert_eq!(summary["records"].as_u64(), Some(fs.files.len() as u64), "{summary}");
    assert!(summary["batches"].as_u64().unwrap() >= 5, "{summary}");
    let stats = block_on(Client::new(&emu.url(), TOKEN).stats()).unwrap();
    // Every 429 and 503 the emulator answered was retried, and the sink counted each.
    let (limited, injected) = (stats["rate_limited"].as_u64().unwrap(), stats["injected_failures"].as_u64().unwrap());
    assert!(limited > 0 && injected > 0, "{stats}");
    assert_eq!(logged(&err, "retries"), limited + injected, "{stats}\n{err}");
    assert_eq!(logged(&err, "token_fetches"), 1);
    assert_eq!(stats["tokens_issued"], 1);
    assert_eq!(logged(&err, "tasks"), stats["tasks_created"].as_u64().unwrap());
    assert_eq!(stats["tasks_created"].as_u64(), summary["batches"].as_u64());
    // Read back through the public API: exactly the file sink's subjects and contents.
    let want = file_index(&out);
    assert_eq!(want.len(), fs.files.len());
    let scrolled = block_on(Client::new(&emu.url(), TOKEN).scroll_all(INDEX)).unwrap();
    assert_eq!(scrolled.len(), fs.files.len());
    let want_content: BTreeMap<String, Value> = want.iter().map(|(s, (_, c))| (s.clone(), c.clone())).collect();
    assert!(scrolled == want_content, "the index differs from the file sink's documents");
    // ... and the same visible_to (the emulator's dump shows it).
    assert!(emulator_index(&emu) == want);
    assert!(want.keys().any(|s| s.starts_with("icicle:sha256:")), "the generator's long paths give hashed subjects");
}

#[test]
fn a_versioned_second_run_deletes_the_removed_files_from_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("tree");
    for d in 0..4 {
        std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
        for f in 0..10 {
            std::fs::write(root.join(format!("d{d}/f{f}.txt")), vec![b'x'; d * 10 + f]).unwrap();
        }
    }
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let out = tmp.path().join("out");
    let sink = token_sink(&emu, INDEX)
        .replace("token_env = \"ICICLE_TEST_GLOBUS_TOKEN\"", &format!("token_file = \"{}\"", token_file.display()));
    let cfg = config(
        tmp.path(),
        "v.toml",
        &format!(
            "[snapshot]\nstate_dir = \"{t}/state\"\nrejects_file = \"{t}/rejects.jsonl\"\nmax_delete_ratio = 1.0\n[records]\nvisible_to = [\"public\"]\n\
             [sources.w]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/proj\"\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n{sink}",
            t = tmp.path().display(),
            r = root.display(),
            o = out.display()
        ),
    );
    let (code, s1, err) = run_snapshot(&cfg);
    assert_eq!(code, 0, "{err}");
    assert_eq!(s1["records"], 40);
    let client = Client::new(&emu.url(), TOKEN);
    assert_eq!(block_on(client.scroll_all(INDEX)).unwrap().len(), 40);
    // Remove ten files, change one.
    for f in 0..10 {
        std::fs::remove_file(root.join(format!("d2/f{f}.txt"))).unwrap();
    }
    std::fs::write(root.join("d0/f0.txt"), b"now longer").unwrap();
    let (code, s2, err) = run_snapshot(&cfg);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (s2["deleted"].as_u64(), s2["updated"].as_u64(), s2["delete_batches"].as_u64()),
        (Some(10), Some(1), Some(1)),
        "{s2}"
    );
    let got = block_on(client.scroll_all(INDEX)).unwrap();
    assert_eq!(got.len(), 30);
    for f in 0..10 {
        let subject = format!("/proj/d2/f{f}.txt");
        assert!(!got.contains_key(&subject));
        assert!(block_on(client.subject(INDEX, &subject)).unwrap().is_none(), "{subject} still answers");
    }
    assert_eq!(got["/proj/d0/f0.txt"]["size"], 10);
    let want: BTreeMap<String, Value> = file_index(&out).into_iter().map(|(s, (_, c))| (s, c)).collect();
    assert!(got == want, "the index differs from the file sink's documents");
    // The delete went out as one batch_delete_by_subject task.
    let tasks = block_on(client.task_list(INDEX)).unwrap();
    assert_eq!(tasks.len() as u64, s1["batches"].as_u64().unwrap() + s2["batches"].as_u64().unwrap() + 1);
    assert!(tasks.iter().all(|t| t["state"] == "SUCCESS"));
}

#[test]
fn permanent_failures_name_the_sink_and_the_status() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("tree");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a"), b"a").unwrap();
    let mut o = Options::new(INDEX, TOKEN);
    o.client = Some((CLIENT_ID.into(), "another-secret".into()));
    let emu = Emulator::start(o).unwrap();
    let base = format!(
        "[snapshot]\nrejects_file = \"{}/rejects.jsonl\"\n[records]\nvisible_to = [\"public\"]\n[sources.w]\ntype = \"walk\"\nroot = \"{}\"\n",
        tmp.path().display(),
        root.display()
    );
    // An index that does not exist.
    let other = "0f5c3a52-7d6e-4a8b-9c1d-000000000000";
    let cfg = config(tmp.path(), "a.toml", &format!("{base}{}", token_sink(&emu, other)));
    let (code, _, err) = run_snapshot(&cfg);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("globus:") && err.contains("HTTP 404") && err.contains(other), "{err}");
    // Said once: the error line does not repeat its cause.
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("no error line: {err}"));
    assert_eq!(line.matches("HTTP 404").count(), 1, "{line}");
    // A token the service refuses.
    let cfg = config(tmp.path(), "b.toml", &format!("{base}{}", token_sink(&emu, INDEX)));
    let (code, _, err) = icicle(
        &["snapshot", "-c", cfg.to_str().unwrap()],
        &[("ICICLE_TEST_GLOBUS_TOKEN", "not-the-token"), ("RUST_LOG", "debug")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("globus:") && err.contains("HTTP 401"), "{err}");
    assert!(!err.contains("not-the-token"), "{err}");
    // Client credentials Globus Auth refuses (the emulator knows another secret).
    let cfg = config(tmp.path(), "c.toml", &format!("{base}{}", client_sink(&emu)));
    let (code, _, err) = run_snapshot(&cfg);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("globus:") && err.contains("HTTP 401: invalid_client") && err.contains(CLIENT_ID), "{err}");
    // A missing secret names the key and the variable.
    let (code, _, err) = icicle(&["snapshot", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("sinks.globus.client_secret_env") && err.contains("ICICLE_TEST_GLOBUS_SECRET"), "{err}");
    // Nothing was ingested.
    let stats = block_on(Client::new(&emu.url(), TOKEN).stats()).unwrap();
    assert_eq!(stats["tasks_created"], 0, "{stats}");
}

fn monitor_config(tmp: &Path, root: &Path, journal: &Path, sinks: &str) -> PathBuf {
    config(
        tmp,
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nuser = \"cl1\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 15\nquiet_period_secs = 0.0\npoll_interval_secs = 0.02\nread_size = 300\nstate_dir = \"{t}/state\"\n{sinks}",
            k = testkit().display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.display(),
        ),
    )
}

fn cleared(tmp: &Path) -> u64 {
    std::fs::read_to_string(tmp.join("lfs/changelog.users"))
        .unwrap()
        .trim()
        .strip_prefix("cl1 ")
        .unwrap()
        .parse()
        .unwrap()
}

/// The index the changelog user registered at (the one before the journal's first record):
/// what `cleared` shows while nothing was acknowledged.
fn registered(tmp: &Path) -> u64 {
    journal_indexes(&tmp.join("lfs/changelog"))[0] - 1
}

#[test]
fn the_lustre_monitor_acknowledges_only_what_globus_published() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 3).unwrap();
    w.run(Kind::Filebench, 100, "/fb").unwrap();
    w.run(Kind::EvalPerf, 60, "/work").unwrap();
    drop(w);
    let last = *journal_indexes(&journal).last().unwrap();
    let mut o = Options::new(INDEX, TOKEN);
    o.fail_task_every = Some(3);
    let emu = Emulator::start(o).unwrap();

    // A refused token: nothing delivered, nothing acknowledged, no checkpoint.
    let cfg = monitor_config(tmp.path(), &root, &journal, &token_sink(&emu, INDEX));
    let (code, _, err) = icicle(
        &["monitor", "--drain", "-c", cfg.to_str().unwrap()],
        &[("ICICLE_TEST_GLOBUS_TOKEN", "wrong-token-value"), ("RUST_LOG", "debug")],
    );
    assert_ne!(code, 0);
    assert!(err.contains("globus:") && err.contains("HTTP 401"), "{err}");
    assert!(!err.contains("wrong-token-value"), "{err}");
    assert_eq!(cleared(tmp.path()), registered(tmp.path()));
    assert!(!tmp.path().join("state/fs0-MDT0000.checkpoint.json").exists());

    // Every third task FAILS, and the sink neither sends it again nor isolates records: each
    // run stops at one, having acknowledged exactly the batches before it; runs go on until
    // everything is published.
    let out = tmp.path().join("out");
    let strict = format!("{}task_retries = 0\nmax_dead_letters = 0\n", token_sink(&emu, INDEX));
    let sinks = format!("{strict}[sinks.out]\ntype = \"file\"\ndir = \"{}\"\n", out.display());
    let cfg = monitor_config(tmp.path(), &root, &journal, &sinks);
    let mut failed_runs = 0;
    let mut before = 0;
    loop {
        let (code, _, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &ENV);
        assert_no_secrets(&err);
        let now = cleared(tmp.path());
        if code == 0 {
            break;
        }
        failed_runs += 1;
        assert!(err.contains("globus:") && err.contains("FAILED") && err.contains("injected failure"), "{err}");
        // Every batch is at most two tasks (an ingest and a delete) and only every third task
        // fails, so each run publishes and acknowledges at least one batch before it stops.
        assert!(now > before && now < last, "cleared {now} of {last} (before: {before})");
        // Nothing past the failed batch: every acknowledged record's batch was published, and
        // the failed task is the last one (the task list is newest first).
        let tasks = block_on(Client::new(&emu.url(), TOKEN).task_list(INDEX)).unwrap();
        assert_eq!(tasks.first().unwrap()["state"], "FAILED");
        assert!(failed_runs < 100, "no progress");
        before = now;
    }
    assert!(failed_runs >= 2, "{failed_runs}");
    assert_eq!(cleared(tmp.path()), last);
    // The index is the directory as it is now, and what the file sink saw.
    let got = block_on(Client::new(&emu.url(), TOKEN).scroll_all(INDEX)).unwrap();
    let as_index: BTreeMap<String, Value> =
        got.iter().map(|(s, c)| (s.clone(), serde_json::json!({ "content": c }))).collect();
    let fresh = walk_snapshot(tmp.path(), &root, "after");
    let (missing, extra, differ) = compare(&as_index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
    let from_file: BTreeMap<String, Value> = icicle_gmeta::replay::read_index(&out).unwrap();
    assert_eq!(got.len(), from_file.len());
}

#[test]
fn the_kafka_audit_names_every_globus_task() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("tree");
    for d in 0..3 {
        std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
        for f in 0..30 {
            std::fs::write(root.join(format!("d{d}/f{f}")), b"x").unwrap();
        }
    }
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let stamp = format!("{}-{}", std::process::id(), icicle_core::time::now_epoch());
    let (index_topic, audit_topic) = (format!("globus-index-{stamp}"), format!("globus-audit-{stamp}"));
    let cfg = config(
        tmp.path(),
        "k.toml",
        &format!(
            "[snapshot]\nstate_dir = \"{t}/state\"\nrejects_file = \"{t}/rejects.jsonl\"\nmax_delete_ratio = 1.0\nmax_batch_bytes = 8000\n[records]\nvisible_to = [\"public\"]\n\
             [sources.w]\ntype = \"walk\"\nroot = \"{r}\"\n{g}\
             [sinks.msk]\ntype = \"kafka\"\ntopic = \"{index_topic}\"\naudit_topic = \"{audit_topic}\"\nconnection = {{ bootstrap = \"{k}\" }}\n",
            t = tmp.path().display(),
            r = root.display(),
            g = token_sink(&emu, INDEX),
            k = kafka()
        ),
    );
    let (code, s1, err) = run_snapshot(&cfg);
    assert_eq!(code, 0, "{err}");
    for f in 0..30 {
        std::fs::remove_file(root.join(format!("d1/f{f}"))).unwrap();
    }
    let (code, s2, err) = run_snapshot(&cfg);
    assert_eq!(code, 0, "{err}");
    assert_eq!(s2["deleted"], 30);
    let batches = s1["batches"].as_u64().unwrap()
        + s2["batches"].as_u64().unwrap()
        + s1["delete_batches"].as_u64().unwrap()
        + s2["delete_batches"].as_u64().unwrap();
    assert!(batches >= 4, "{s1} {s2}");

    let audit = block_on(icicle_plugins_kafka::produce::consume_all(&kafka(), &audit_topic)).unwrap();
    assert_eq!(audit.len() as u64, batches);
    let tasks = block_on(Client::new(&emu.url(), TOKEN).task_list(INDEX)).unwrap();
    let state: BTreeMap<String, String> = tasks
        .iter()
        .map(|t| (t["task_id"].as_str().unwrap().to_string(), t["state"].as_str().unwrap().to_string()))
        .collect();
    let mut audited = Vec::new();
    let mut kinds = BTreeMap::new();
    for m in &audit {
        let r: Value = serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        *kinds.entry(r["kind"].as_str().unwrap().to_string()).or_insert(0) += 1;
        // The existing audit fields are still there.
        for k in
            ["sink", "batch", "kind", "count", "bytes", "first_subject", "last_subject", "topic", "offsets", "time"]
        {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
        let g = &r["receipts"]["globus"];
        assert_eq!(g["index_id"], INDEX, "{r}");
        let ids = g["task_ids"].as_array().unwrap();
        assert!(!ids.is_empty(), "{r}");
        for id in ids {
            let id = id.as_str().unwrap();
            assert_eq!(state.get(id).map(String::as_str), Some("SUCCESS"), "{id} in {r}");
            audited.push(id.to_string());
        }
        assert_eq!(r["receipts"]["msk"]["topic"], index_topic.as_str(), "{r}");
        assert_eq!(r["receipts"]["msk"]["offsets"], r["offsets"], "{r}");
    }
    assert_eq!(kinds.get("delete"), Some(&1));
    // Keys stay unique across the two runs (a compacted audit topic keeps both runs).
    let keys: std::collections::BTreeSet<&str> = audit.iter().map(|m| m.key.as_deref().unwrap()).collect();
    assert_eq!(keys.len(), audit.len(), "{keys:?}");
    // Every task the sink created was audited, once.
    audited.sort();
    assert_eq!(audited, state.keys().cloned().collect::<Vec<_>>());
}

#[path = "globus_sink/direct.rs"]
mod direct;
#[path = "globus_sink/recovery.rs"]
mod recovery;

/// A snapshot into the emulator whose tasks take `task_delay_ms` each: the config, the
/// generated tree, the emulator.
fn slow_tasks(tmp: &Path, task_delay_ms: u64) -> (PathBuf, GenFs, Emulator) {
    let fs = GenFs::generate(&GenSpec::new(1_200, 12));
    std::fs::create_dir_all(tmp).unwrap();
    let data = tmp.join("tsv");
    gen::write(&fs, Format::Tsv, &data, 400, false).unwrap();
    let mut o = Options::new(INDEX, TOKEN);
    o.task_delay = std::time::Duration::from_millis(task_delay_ms);
    let emu = Emulator::start(o).unwrap();
    let cfg = config(
        tmp,
        "slow.toml",
        &format!(
            "[snapshot]\nmax_batch_bytes = 120000\n[records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{d}/principals.tsv\"\n\
             [sources.s]\ntype = \"tsv\"\npaths = [\"{d}/*.csv\"]\npreset = \"icicle9\"\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n{g}",
            d = data.display(),
            o = tmp.join("out").display(),
            g = token_sink(&emu, INDEX)
        ),
    );
    (cfg, fs, emu)
}

/// While the sinks deliver after the reading is over, the run says so (a line without a
/// terminal, the bar's message on one), and the summary tells what each sink delivered: the
/// Globus sink's documents, requests and tasks, as the emulator counted them.
#[test]
fn progress_and_summary_cover_delivery_to_globus() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, fs, emu) = slow_tasks(tmp.path(), 300);
    let (code, out, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], &ENV[..1]);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let stats = block_on(Client::new(&emu.url(), TOKEN).stats()).unwrap();
    let docs = summary["batches"].as_u64().unwrap();
    assert!(docs >= 5, "{summary}");
    // Without a terminal: a line once reading is over and a document is in flight.
    assert!(
        err.lines().any(|l| l.starts_with("reading done; delivering: globus ") && l.contains("(one in flight)")),
        "{err}"
    );
    let g = &summary["sinks"]["globus"];
    assert_eq!(g["documents"].as_u64(), Some(docs), "{summary}");
    assert_eq!(g["entries"].as_u64(), Some(fs.files.len() as u64), "{summary}");
    assert_eq!(g["sink"]["tasks_submitted"], stats["tasks_created"], "{summary}\n{stats}");
    assert_eq!(g["sink"]["tasks_succeeded"], stats["tasks_created"], "{summary}\n{stats}");
    assert_eq!(g["sink"]["index_id"], INDEX);
    // Every task id named is one the emulator knows, finished.
    let ids = g["sink"]["last_task_ids"].as_array().unwrap();
    assert_eq!(ids.len() as u64, docs.min(20));
    for id in ids {
        let t = block_on(Client::new(&emu.url(), TOKEN).task(id.as_str().unwrap())).unwrap();
        assert_eq!(t["state"], "SUCCESS", "{t}");
    }
    // Each task took at least its delay: the time delivering says so.
    assert!(g["seconds"].as_f64().unwrap() >= 0.3 * docs as f64, "{summary}");
    assert_eq!(summary["sinks"]["out"]["documents"].as_u64(), Some(docs), "{summary}");
    assert_eq!(summary["sinks"]["out"]["entries"].as_u64(), Some(fs.files.len() as u64), "{summary}");

    // The table names each sink with its facts.
    let (cfg2, _, _emu2) = slow_tasks(&tmp.path().join("table"), 0);
    let (code, _, err) = icicle(&["snapshot", "-c", cfg2.to_str().unwrap()], &ENV[..1]);
    assert_eq!(code, 0, "{err}");
    let line =
        err.lines().find(|l| l.starts_with("sink ") && l.contains("globus: ")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains(&format!("globus: {docs} documents (0 of deletes), {} entries", fs.files.len())), "{line}");
    assert!(line.contains(&format!("tasks submitted {docs}")), "{line}");
}

/// On a terminal the bar turns into "reading done; delivering: ..." while the sinks deliver.
#[test]
fn the_progress_bar_says_it_is_delivering() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, _, _emu) = slow_tasks(tmp.path(), 500);
    let sock = format!("icicle-progress-{}", std::process::id());
    let tmux = |args: &[&str]| std::process::Command::new("tmux").arg("-L").arg(&sock).args(args).output().unwrap();
    let cmd = format!(
        "ICICLE_TEST_GLOBUS_TOKEN={TOKEN} {} snapshot -c {}; sleep 600",
        env!("CARGO_BIN_EXE_icicle"),
        cfg.display()
    );
    let st = tmux(&["new-session", "-d", "-s", "run", "-x", "160", "-y", "30", &cmd]);
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let started = std::time::Instant::now();
    let screen = loop {
        let screen = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "run"]).stdout).into_owned();
        // The first frame may show only the first sink (it delivers first): wait for both.
        if (screen.contains("reading done; delivering: globus") && screen.contains(", out "))
            || screen.contains("rows read")
        {
            break screen;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(120), "{screen}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = tmux(&["kill-server"]);
    assert!(screen.contains("reading done; delivering: globus") && screen.contains(", out "), "{screen}");
}
