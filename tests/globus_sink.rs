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

const ENV: [(&str, &str); 3] = [("ICICLE_TEST_GLOBUS_TOKEN", TOKEN), ("ICICLE_TEST_GLOBUS_SECRET", CLIENT_SECRET), ("RUST_LOG", "debug")];

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
    let line = err.lines().find(|l| l.contains("Globus sink closed")).unwrap_or_else(|| panic!("no closing line in\n{err}"));
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
    let sink = token_sink(&emu, INDEX).replace("token_env = \"ICICLE_TEST_GLOBUS_TOKEN\"", &format!("token_file = \"{}\"", token_file.display()));
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
    assert_eq!((s2["deleted"].as_u64(), s2["updated"].as_u64(), s2["delete_batches"].as_u64()), (Some(10), Some(1), Some(1)), "{s2}");
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
    let (code, _, err) = icicle(&["snapshot", "-c", cfg.to_str().unwrap()], &[("ICICLE_TEST_GLOBUS_TOKEN", "not-the-token"), ("RUST_LOG", "debug")]);
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
    std::fs::read_to_string(tmp.join("lfs/changelog.users")).unwrap().trim().strip_prefix("cl1 ").unwrap().parse().unwrap()
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
    let last: u64 = std::fs::read_to_string(&journal).unwrap().lines().last().unwrap().split(' ').next().unwrap().parse().unwrap();
    let mut o = Options::new(INDEX, TOKEN);
    o.fail_task_every = Some(3);
    let emu = Emulator::start(o).unwrap();

    // A refused token: nothing delivered, nothing acknowledged, no checkpoint.
    let cfg = monitor_config(tmp.path(), &root, &journal, &token_sink(&emu, INDEX));
    let (code, _, err) =
        icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &[("ICICLE_TEST_GLOBUS_TOKEN", "wrong-token-value"), ("RUST_LOG", "debug")]);
    assert_ne!(code, 0);
    assert!(err.contains("globus:") && err.contains("HTTP 401"), "{err}");
    assert!(!err.contains("wrong-token-value"), "{err}");
    assert_eq!(cleared(tmp.path()), 0);
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
        // the failed task is the last one.
        let tasks = block_on(Client::new(&emu.url(), TOKEN).task_list(INDEX)).unwrap();
        assert_eq!(tasks.last().unwrap()["state"], "FAILED");
        assert!(failed_runs < 100, "no progress");
        before = now;
    }
    assert!(failed_runs >= 2, "{failed_runs}");
    assert_eq!(cleared(tmp.path()), last);
    // The index is the directory as it is now, and what the file sink saw.
    let got = block_on(Client::new(&emu.url(), TOKEN).scroll_all(INDEX)).unwrap();
    let as_index: BTreeMap<String, Value> = got.iter().map(|(s, c)| (s.clone(), serde_json::json!({ "content": c }))).collect();
    let fresh = walk_snapshot(tmp.path(), &root, "after");
    let (missing, extra, differ) = compare(&as_index, &fresh);
    assert!(missing.is_empty() && extra.is_empty() && differ.is_empty(), "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}");
    let from_file: BTreeMap<String, Value> = icicle_plugins_sinks::read_index(&out).unwrap();
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
    let batches =
        s1["batches"].as_u64().unwrap() + s2["batches"].as_u64().unwrap() + s1["delete_batches"].as_u64().unwrap() + s2["delete_batches"].as_u64().unwrap();
    assert!(batches >= 4, "{s1} {s2}");

    let audit = block_on(icicle_plugins_kafka::produce::consume_all(&kafka(), &audit_topic)).unwrap();
    assert_eq!(audit.len() as u64, batches);
    let tasks = block_on(Client::new(&emu.url(), TOKEN).task_list(INDEX)).unwrap();
    let state: BTreeMap<String, String> =
        tasks.iter().map(|t| (t["task_id"].as_str().unwrap().to_string(), t["state"].as_str().unwrap().to_string())).collect();
    let mut audited = Vec::new();
    let mut kinds = BTreeMap::new();
    for m in &audit {
        let r: Value = serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        *kinds.entry(r["kind"].as_str().unwrap().to_string()).or_insert(0) += 1;
        // The existing audit fields are still there.
        for k in ["sink", "batch", "kind", "count", "bytes", "first_subject", "last_subject", "topic", "offsets", "time"] {
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

// ---- The sink driven directly ----

fn sink_for(emu: &Emulator, f: impl FnOnce(&mut GlobusSinkConfig)) -> GlobusSink {
    std::env::set_var("ICICLE_TEST_GLOBUS_DIRECT_TOKEN", TOKEN);
    std::env::set_var("ICICLE_TEST_GLOBUS_DIRECT_SECRET", CLIENT_SECRET);
    let mut c = GlobusSinkConfig::new(INDEX);
    c.base_url = emu.url();
    c.auth_url = format!("{}/v2/oauth2/token", emu.url());
    c.token_env = Some("ICICLE_TEST_GLOBUS_DIRECT_TOKEN".into());
    c.retry_initial_ms = 5;
    c.retry_max_ms = 20;
    c.task_poll_ms = 5;
    f(&mut c);
    c.connect_with("g", |k, r| ConfigError::InvalidValue { key: k.into(), origin: "test".into(), reason: r }).unwrap()
}

fn batch(subjects: &[&str]) -> DocumentBatch {
    let entries: Vec<Vec<u8>> =
        subjects.iter().map(|s| serde_json::json!({"subject": s, "visible_to": ["public"], "content": {"path": s}}).to_string().into_bytes()).collect();
    DocumentBatch::Ingest(icicle_plugins_globus::sink::entry_batch(entries.iter().map(|e| e.as_slice())))
}

fn client_credentials(c: &mut GlobusSinkConfig) {
    c.token_env = None;
    c.client_id = Some(CLIENT_ID.into());
    c.client_secret_env = Some("ICICLE_TEST_GLOBUS_DIRECT_SECRET".into());
}

#[test]
fn an_expired_token_is_replaced_once_on_401() {
    let mut o = Options::new(INDEX, TOKEN);
    o.client = Some((CLIENT_ID.into(), CLIENT_SECRET.into()));
    let emu = Emulator::start(o).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let mut sink = sink_for(&emu, client_credentials);
    block_on(async {
        sink.deliver(&batch(&["/a"])).await.unwrap();
        let r = sink.receipt().unwrap();
        assert_eq!(r["index_id"], INDEX);
        assert_eq!(r["task_ids"].as_array().unwrap().len(), 1);
        client.expire_tokens().await.unwrap();
        sink.deliver(&batch(&["/b"])).await.unwrap();
        let (_, retries, tasks, fetches) = sink.counts();
        assert_eq!((retries, tasks, fetches), (0, 2, 2));
        assert_eq!(client.stats().await.unwrap()["unauthorized"], 1);
        assert_eq!(client.scroll_all(INDEX).await.unwrap().len(), 2);
    });
}

#[test]
fn a_token_about_to_expire_is_replaced_before_it_does() {
    let mut o = Options::new(INDEX, TOKEN);
    o.client = Some((CLIENT_ID.into(), CLIENT_SECRET.into()));
    o.token_lifetime = std::time::Duration::from_secs(2);
    let emu = Emulator::start(o).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let mut sink = sink_for(&emu, client_credentials);
    block_on(async {
        sink.deliver(&batch(&["/a"])).await.unwrap();
        // Past the emulator's expiry: a sink that kept its token would meet a 401 now.
        tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
        sink.deliver(&batch(&["/b"])).await.unwrap();
        assert!(sink.counts().3 >= 2, "{:?}", sink.counts());
        assert_eq!(client.stats().await.unwrap()["unauthorized"], 0);
    });
}

#[test]
fn connection_errors_are_retried_then_given_up() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let mut sink = sink_for(&emu, |c| {
        c.base_url = format!("http://127.0.0.1:{port}");
        c.max_retries = 3;
    });
    let e = block_on(sink.deliver(&batch(&["/a"]))).unwrap_err().to_string();
    assert!(e.starts_with("g: gave up after 3 retries: ingest of 1 entries"), "{e}");
    assert_eq!(sink.counts().1, 3);
}

#[test]
fn a_failed_task_fails_the_delivery_and_leaves_no_receipt() {
    let mut o = Options::new(INDEX, TOKEN);
    o.fail_task_every = Some(2);
    let emu = Emulator::start(o).unwrap();
    let mut sink = sink_for(&emu, |_| {});
    block_on(async {
        sink.deliver(&batch(&["/a"])).await.unwrap();
        let e = sink.deliver(&DocumentBatch::Delete(vec!["/a".into()])).await.unwrap_err().to_string();
        assert!(e.starts_with("g: task ") && e.contains("FAILED") && e.contains(INDEX), "{e}");
        assert!(sink.receipt().is_none());
        // The delete was not applied: /a is still there.
        assert!(Client::new(&emu.url(), TOKEN).subject(INDEX, "/a").await.unwrap().is_some());
    });
}

#[test]
fn validation_errors_are_permanent_and_transient_ones_give_up_after_max_retries() {
    let mut o = Options::new(INDEX, TOKEN);
    o.fail_every = Some(1);
    let emu = Emulator::start(o).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let mut sink = sink_for(&emu, |c| c.max_retries = 2);
    block_on(async {
        let e = sink.deliver(&batch(&["/a"])).await.unwrap_err().to_string();
        assert!(e.contains("gave up after 2 retries") && e.contains("HTTP 503"), "{e}");
        assert_eq!(client.stats().await.unwrap()["writes"], 3);
    });
    drop(emu);
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let tmp = tempfile::tempdir().unwrap();
    let letters = tmp.path().join("g.dead-letters.jsonl");
    let mut sink = sink_for(&emu, |c| c.dead_letter_file = Some(letters.clone()));
    let long = format!("/{}", "x".repeat(500));
    block_on(async {
        // Refused on its own: set aside as a dead letter, not retried, not a failure.
        sink.deliver(&batch(&[&long])).await.unwrap();
        assert_eq!(client.stats().await.unwrap()["writes"], 1, "a 400 is not retried");
        assert_eq!(sink.counts().1, 0);
        assert_eq!(sink.dead_lettered().len(), 1);
    });
    let letter: Value = serde_json::from_str(std::fs::read_to_string(&letters).unwrap().trim()).unwrap();
    assert_eq!(letter["position"], long.as_str());
    let reason = letter["reason"].as_str().unwrap();
    assert!(reason.contains("HTTP 400 BadRequest.ValidationError") && reason.contains("501 bytes"), "{reason}");
}

/// `n` subjects, `/d/f0000`.., with `bad` inserted at `at`.
fn subjects_with(n: usize, bad: &str, at: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n).map(|i| format!("/d/f{i:04}")).collect();
    v.insert(at, bad.to_string());
    v
}

#[test]
fn one_refused_entry_is_isolated_and_the_rest_published() {
    let seed = common::test_seed();
    let mut rng = icicle_core::rng::Rng::new(seed);
    let mut o = Options::new(INDEX, TOKEN);
    o.refuse_subjects = vec!["/poison".into()];
    let emu = Emulator::start(o).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let tmp = tempfile::tempdir().unwrap();
    let letters = tmp.path().join("dl.jsonl");
    let mut sink = sink_for(&emu, |c| c.dead_letter_file = Some(letters.clone()));
    let n = 20 + rng.below(200) as usize;
    let subjects = subjects_with(n, "/poison/x", rng.below(n as u64 + 1) as usize);
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    block_on(async {
        sink.deliver(&batch(&refs)).await.unwrap();
        assert_eq!(sink.dead_lettered().len(), 1);
        let receipt = sink.receipt().unwrap();
        assert!(!receipt["task_ids"].as_array().unwrap().is_empty(), "{receipt}");
        for s in &subjects {
            let present = client.subject(INDEX, s).await.unwrap().is_some();
            assert_eq!(present, s != "/poison/x", "{s} (seed {seed})");
        }
        // Halving finds it in about 2 log2(n) requests, not n.
        let writes = client.stats().await.unwrap()["writes"].as_u64().unwrap();
        assert!(writes <= 2 * (usize::BITS - n.leading_zeros()) as u64 + 2, "{writes} requests for {n} entries");
    });
    let lines = std::fs::read_to_string(&letters).unwrap();
    assert_eq!(lines.lines().count(), 1, "{lines}");
    assert!(lines.contains("/poison/x") && lines.contains("injected refusal"), "{lines}");
}

#[test]
fn failed_tasks_are_sent_again_and_a_record_that_always_fails_is_set_aside() {
    // Every other task fails once: the documents are sent again and all is published.
    let mut o = Options::new(INDEX, TOKEN);
    o.fail_task_every = Some(2);
    let emu = Emulator::start(o).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let tmp = tempfile::tempdir().unwrap();
    let mut sink = sink_for(&emu, |c| c.dead_letter_file = Some(tmp.path().join("a.jsonl")));
    let subjects: Vec<String> = (0..30).map(|i| format!("/d/f{i:04}")).collect();
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    block_on(async {
        for chunk in refs.chunks(5) {
            sink.deliver(&batch(chunk)).await.unwrap();
        }
        assert_eq!(sink.dead_lettered().len(), 0);
        for s in &subjects {
            assert!(client.subject(INDEX, s).await.unwrap().is_some(), "{s}");
        }
    });
    drop(emu);
    // A task holding one record always fails: after task_retries it is isolated.
    let mut o = Options::new(INDEX, TOKEN);
    o.fail_task_subjects = vec!["/always-fails".into()];
    let emu = Emulator::start(o).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let letters = tmp.path().join("b.jsonl");
    let mut sink = sink_for(&emu, |c| {
        c.dead_letter_file = Some(letters.clone());
        c.task_retries = 1;
    });
    let subjects = subjects_with(12, "/always-fails", 7);
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    block_on(async {
        sink.deliver(&batch(&refs)).await.unwrap();
        assert_eq!(sink.dead_lettered().len(), 1);
        for s in &subjects {
            assert_eq!(client.subject(INDEX, s).await.unwrap().is_some(), s != "/always-fails", "{s}");
        }
    });
    let lines = std::fs::read_to_string(&letters).unwrap();
    assert!(lines.contains("/always-fails") && lines.contains("FAILED"), "{lines}");
}

#[test]
fn a_systematic_refusal_fails_the_delivery_instead_of_dead_lettering_everything() {
    let mut o = Options::new(INDEX, TOKEN);
    o.refuse_subjects = vec!["/".into()];
    let emu = Emulator::start(o).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut sink = sink_for(&emu, |c| {
        c.dead_letter_file = Some(tmp.path().join("dl.jsonl"));
        c.max_dead_letters = 5;
    });
    let subjects: Vec<String> = (0..40).map(|i| format!("/d/f{i:04}")).collect();
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    block_on(async {
        let e = sink.deliver(&batch(&refs)).await.unwrap_err().to_string();
        assert!(e.contains("max_dead_letters") && e.contains("injected refusal"), "{e}");
        assert!(sink.receipt().is_none());
    });
}

#[test]
fn a_monitor_is_not_restarted_after_a_refusal_retrying_cannot_change() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 4).unwrap();
    w.preexisting(10).unwrap();
    w.run(Kind::Filebench, 50, "/fb").unwrap();
    drop(w);
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    // An index that does not exist: 404, the same after any number of restarts.
    let other = "0f5c3a52-7d6e-4a8b-9c1d-000000000000";
    let cfg = monitor_config(tmp.path(), &root, &journal, &token_sink(&emu, other));
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("[monitor]\non_failure = \"restart\"\nrestart_initial_secs = 0.01\nmax_restarts = 5\n{text}")).unwrap();
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &ENV);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("HTTP 404") && err.contains("not restarted"), "{err}");
    assert_eq!(err.matches("source failed; restarting").count(), 0, "{err}");
    assert_eq!(cleared(tmp.path()), 0);
}

#[test]
fn a_document_whose_every_entry_is_refused_fails_the_delivery() {
    // Six entries, every one refused (a service-side cause, not six bad records): the
    // delivery fails and nothing is set aside as if it were the records' fault.
    let mut o = Options::new(INDEX, TOKEN);
    o.refuse_subjects = vec!["/d/".into()];
    let emu = Emulator::start(o).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let letters = tmp.path().join("dl.jsonl");
    let mut sink = sink_for(&emu, |c| c.dead_letter_file = Some(letters.clone()));
    let subjects: Vec<String> = (0..6).map(|i| format!("/d/f{i}")).collect();
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    block_on(async {
        let e = sink.deliver(&batch(&refs)).await.unwrap_err().to_string();
        assert!(e.contains("every entry of a document of 6 was refused"), "{e}");
        assert!(sink.receipt().is_none());
    });
    // What was set aside on the way is kept once, also when the delivery is sent again.
    let first = std::fs::read_to_string(&letters).unwrap_or_default().lines().count();
    block_on(async {
        let _ = sink.deliver(&batch(&refs)).await;
    });
    assert_eq!(std::fs::read_to_string(&letters).unwrap_or_default().lines().count(), first);
}

#[test]
fn the_snapshot_summary_counts_dead_letters_and_the_next_run_sends_them_again() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("tree");
    std::fs::create_dir_all(root.join("poison")).unwrap();
    for f in 0..20 {
        std::fs::write(root.join(format!("f{f}")), b"x").unwrap();
    }
    std::fs::write(root.join("poison/p"), b"x").unwrap();
    let letters = tmp.path().join("letters.jsonl");
    let run = |emu: &Emulator| {
        let cfg = config(
            tmp.path(),
            "d.toml",
            &format!(
                "[snapshot]\nrejects_file = \"{t}/rejects.jsonl\"\nstate_dir = \"{t}/state\"\n[records]\nvisible_to = [\"public\"]\n\
                 [sources.w]\ntype = \"walk\"\nroot = \"{r}\"\n{g}dead_letter_file = \"{l}\"\n",
                t = tmp.path().display(),
                r = root.display(),
                g = token_sink(emu, INDEX),
                l = letters.display()
            ),
        );
        let (code, summary, err) = run_snapshot(&cfg);
        assert_eq!(code, 0, "{err}");
        summary
    };
    let mut o = Options::new(INDEX, TOKEN);
    o.refuse_subjects = vec!["/poison/p".into()];
    let emu = Emulator::start(o).unwrap();
    let summary = run(&emu);
    assert_eq!(summary["dead_lettered"], 1, "{summary}");
    assert_eq!(summary["emitted"], 21, "{summary}");
    assert!(std::fs::read_to_string(&letters).unwrap().contains("/poison/p"));
    let first = block_on(Client::new(&emu.url(), TOKEN).scroll_all(INDEX)).unwrap();
    assert!(!first.contains_key(&format!("{}", root.join("poison/p").display())));
    drop(emu);
    // The next run (nothing changed on disk, Search now accepts it) sends the dead letter
    // again and only it; the others are unchanged.
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let summary = run(&emu);
    assert_eq!(summary["dead_lettered"], 0, "{summary}");
    assert_eq!((summary["updated"].as_u64(), summary["unchanged"].as_u64(), summary["created"].as_u64()), (Some(1), Some(20), Some(0)), "{summary}");
    let second = block_on(Client::new(&emu.url(), TOKEN).scroll_all(INDEX)).unwrap();
    let primaries: Vec<&String> = second.keys().filter(|k| k.starts_with('/')).collect();
    assert_eq!(primaries, vec![&format!("{}", root.join("poison/p").display())], "{second:?}");
    // And the run after that: nothing to send.
    let summary = run(&emu);
    assert_eq!((summary["updated"].as_u64(), summary["unchanged"].as_u64()), (Some(0), Some(21)), "{summary}");
}

#[test]
fn without_wait_for_tasks_a_delivery_returns_once_the_task_is_accepted() {
    let mut o = Options::new(INDEX, TOKEN);
    o.task_delay = std::time::Duration::from_secs(3600);
    let emu = Emulator::start(o).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let mut sink = sink_for(&emu, |c| c.wait_for_tasks = false);
    block_on(async {
        sink.deliver(&batch(&["/a", "/b"])).await.unwrap();
        let id = sink.receipt().unwrap()["task_ids"][0].as_str().unwrap().to_string();
        let t = client.task(&id).await.unwrap();
        assert!(t["state"] == "PENDING" || t["state"] == "PROGRESS", "{t}");
        assert_eq!(sink.counts().2, 0, "no task was waited for");
    });
}

#[test]
fn max_requests_per_s_paces_every_request_and_bad_rates_are_refused() {
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let mut sink = sink_for(&emu, |c| c.max_requests_per_s = Some(20.0));
    let t0 = std::time::Instant::now();
    block_on(async {
        for i in 0..6 {
            sink.deliver(&batch(&[&format!("/p{i}")])).await.unwrap();
        }
    });
    let (requests, _, tasks, _) = sink.counts();
    assert_eq!(tasks, 6);
    assert!(requests >= 12, "an ingest and at least one task poll each: {requests}");
    // A lower bound only: a slow machine takes longer, never shorter.
    let least = (requests - 1) as f64 / 20.0;
    assert!(t0.elapsed().as_secs_f64() >= least, "{requests} requests in {:?}, under {least} s", t0.elapsed());
    for bad in [0.0, -1.0, f64::NAN] {
        let mut c = GlobusSinkConfig::new(INDEX);
        c.token_env = Some("ICICLE_TEST_GLOBUS_DIRECT_TOKEN".into());
        c.max_requests_per_s = Some(bad);
        let e = c.connect_with("g", |k, r| ConfigError::InvalidValue { key: k.into(), origin: "test".into(), reason: r }).unwrap_err().to_string();
        assert!(e.contains("max_requests_per_s"), "{e}");
    }
}
