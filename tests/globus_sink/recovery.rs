//! What the Globus sink heals by itself and what it fails at once: FAILED delete tasks are
//! sent again (bounded by `task_retries`, then a subject that always fails is dead-lettered),
//! a monitor under `on_failure = "restart"` is restarted after a FAILED task it could not
//! heal, and a request that cannot even be built (a token with a newline) fails at once
//! without echoing the token.

use super::*;

/// `icicle-testkit globus-search` as its own process (the operator's recipe), stopped when
/// dropped.
struct EmulatorProcess {
    child: std::process::Child,
    url: String,
}

impl EmulatorProcess {
    fn spawn(extra: &[&str]) -> EmulatorProcess {
        let mut child = std::process::Command::new(testkit())
            .args(["globus-search", "--listen", "127.0.0.1:0", "--index", INDEX, "--token", TOKEN])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_string();
        EmulatorProcess { child, url }
    }

    fn client(&self) -> Client {
        Client::new(&self.url, TOKEN)
    }
}

impl Drop for EmulatorProcess {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// A `[sinks.globus]` section for an emulator at `url`, plus `extra` lines.
fn sink_at(url: &str, extra: &str) -> String {
    format!(
        "[sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\nbase_url = \"{url}\"\ntoken_env = \"ICICLE_TEST_GLOBUS_TOKEN\"\nretry_initial_ms = 20\nretry_max_ms = 200\ntask_poll_ms = 10\n{extra}"
    )
}

/// A Lustre workload with creates, then renames and unlinks of what earlier batches created
/// (so the monitor sends deletes), and the changelog's last index.
fn workload(tmp: &Path) -> (PathBuf, PathBuf, u64) {
    let root = tmp.join("fs");
    let journal = tmp.join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 5).unwrap();
    w.preexisting(20).unwrap();
    w.run(Kind::Filebench, 120, "/fb").unwrap();
    w.run(Kind::Mixed, 300, "/mx").unwrap();
    drop(w);
    let last = *journal_indexes(&journal).last().unwrap();
    (root, journal, last)
}

/// `icicle monitor --drain --json` with `on_failure = "restart"`: (exit code, report, stderr).
fn monitor_with_restarts(tmp: &Path, root: &Path, journal: &Path, sinks: &str) -> (i32, Value, String) {
    let cfg = monitor_config(tmp, root, journal, sinks);
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("[monitor]\non_failure = \"restart\"\nrestart_initial_secs = 0.02\nrestart_max_secs = 0.2\nmax_restarts = 200\n{text}"))
        .unwrap();
    let (code, out, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &ENV);
    assert_no_secrets(&err);
    (code, serde_json::from_str(&out).unwrap_or(Value::Null), err)
}

/// The index equals a fresh walk of the tree: every create, update and delete applied.
fn assert_index_is_the_tree(client: &Client, tmp: &Path, root: &Path) {
    let got = block_on(client.scroll_all(INDEX)).unwrap();
    let as_index: BTreeMap<String, Value> =
        got.iter().map(|(s, c)| (s.clone(), serde_json::json!({ "content": c }))).collect();
    let fresh = walk_snapshot(tmp, root, "fresh");
    assert!(!fresh.is_empty());
    let (missing, extra, differ) = compare(&as_index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
}

/// The emulator's tasks by type and state: ((type, state), count).
fn task_states(client: &Client) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for t in block_on(client.task_list(INDEX)).unwrap() {
        *out.entry((t["task_type"].as_str().unwrap().to_string(), t["state"].as_str().unwrap().to_string()))
            .or_insert(0) += 1;
    }
    out
}

#[test]
fn failed_delete_tasks_are_sent_again_and_the_monitor_converges_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, last) = workload(tmp.path());
    let emu = EmulatorProcess::spawn(&["--fail-task-every", "5"]);
    let letters = tmp.path().join("letters.jsonl");
    let sinks = sink_at(&emu.url, &format!("dead_letter_file = \"{}\"\n", letters.display()));
    let (code, report, err) = monitor_with_restarts(tmp.path(), &root, &journal, &sinks);
    assert_eq!(code, 0, "{err}");
    // The sink healed every FAILED task itself: no restart, nothing set aside.
    assert_eq!(report["mdt0"]["restarts"], 0, "{report}");
    assert_eq!(err.matches("source failed").count(), 0, "{err}");
    assert!(!letters.exists(), "{}", std::fs::read_to_string(&letters).unwrap_or_default());
    assert_eq!(cleared(tmp.path()), last);
    let states = task_states(&emu.client());
    let failed_deletes = states.get(&("DELETE_BY_SUBJECT".into(), "FAILED".into())).copied().unwrap_or(0);
    assert!(failed_deletes > 0, "no delete task FAILED, nothing tested: {states:?}");
    // Each FAILED task was followed by a successful one for the same document.
    let logged = err.matches("Globus task FAILED; sending its document again").count() as u64;
    assert_eq!(logged, states.iter().filter(|((_, s), _)| s == "FAILED").map(|(_, n)| n).sum::<u64>(), "{states:?}");
    assert_index_is_the_tree(&emu.client(), tmp.path(), &root);
}

#[test]
fn a_failed_task_the_sink_may_not_retry_restarts_the_monitor_which_then_converges() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, journal, last) = workload(tmp.path());
    // An even period: a batch is an ingest and a delete task, and a restart sends the batch
    // again from its ingest, so after the first failure an odd period would only ever hit
    // ingest tasks.
    let emu = EmulatorProcess::spawn(&["--fail-task-every", "4"]);
    // No second try inside the sink and no isolation: every FAILED task fails the delivery.
    let sinks = sink_at(&emu.url, "task_retries = 0\nmax_dead_letters = 0\n");
    let (code, report, err) = monitor_with_restarts(tmp.path(), &root, &journal, &sinks);
    assert_eq!(code, 0, "{err}");
    let states = task_states(&emu.client());
    let failed: u64 = states.iter().filter(|((_, s), _)| s == "FAILED").map(|(_, n)| n).sum();
    assert!(
        states.contains_key(&("DELETE_BY_SUBJECT".into(), "FAILED".into())),
        "no delete task FAILED, nothing tested: {states:?}"
    );
    // Every FAILED task cost one restart, and nothing else did.
    assert_eq!(report["mdt0"]["restarts"].as_u64(), Some(failed), "{report}\n{states:?}");
    assert_eq!(err.matches("source failed; restarting").count() as u64, failed, "{err}");
    assert_eq!(err.matches("not restarted").count(), 0, "{err}");
    assert_eq!(cleared(tmp.path()), last);
    assert_index_is_the_tree(&emu.client(), tmp.path(), &root);
}

#[test]
fn a_subject_whose_delete_always_fails_is_dead_lettered_and_the_rest_deleted() {
    let mut o = Options::new(INDEX, TOKEN);
    o.fail_task_subjects = vec!["/stuck/".into()];
    let emu = Emulator::start(o).unwrap();
    let client = Client::new(&emu.url(), TOKEN);
    let tmp = tempfile::tempdir().unwrap();
    let letters = tmp.path().join("letters.jsonl");
    let mut sink = direct::sink_for(&emu, |c| {
        c.dead_letter_file = Some(letters.clone());
        c.task_retries = 1;
    });
    let subjects: Vec<String> = (0..12).map(|i| format!("/d/f{i:02}")).collect();
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    let mut deletes = subjects.clone();
    deletes.insert(5, "/stuck/x".into());
    block_on(async {
        sink.deliver(&direct::batch(&refs)).await.unwrap();
        sink.deliver(&DocumentBatch::Delete(deletes.clone())).await.unwrap();
        assert_eq!(sink.dead_lettered(), ["/stuck/x"]);
        assert!(client.scroll_all(INDEX).await.unwrap().is_empty(), "every other delete was applied");
    });
    let text = std::fs::read_to_string(&letters).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["source"], "g");
    assert_eq!(lines[0]["position"], "/stuck/x");
    // The letter is the request to send again: a batch_delete_by_subject body.
    assert_eq!(lines[0]["raw"], r#"{"subjects":["/stuck/x"]}"#);
    let reason = lines[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("delete not applied: task ")
            && reason.ends_with(&format!("on index {INDEX} FAILED: injected failure (--fail-task-every 0)")),
        "{reason}"
    );
    // Each piece holding it (13, 6, 3, 2 and 1 subjects) was tried 1 + task_retries times.
    let stats = block_on(client.stats()).unwrap();
    assert_eq!(stats["tasks_failed"].as_u64(), Some(5 * 2), "{stats}");
}

#[test]
fn a_token_that_cannot_be_sent_fails_at_once_and_is_not_echoed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("tree");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a"), b"a").unwrap();
    let emu = EmulatorProcess::spawn(&[]);
    let cfg = config(
        tmp.path(),
        "n.toml",
        &format!(
            "[snapshot]\nrejects_file = \"{}/rejects.jsonl\"\n[records]\nvisible_to = [\"public\"]\n[sources.w]\ntype = \"walk\"\nroot = \"{}\"\n{}",
            tmp.path().display(),
            root.display(),
            sink_at(&emu.url, "")
        ),
    );
    let token = "tok-Zq8vN3pW\n6xK1yR4t";
    let t0 = std::time::Instant::now();
    let (code, out, err) = icicle(
        &["snapshot", "--json", "-c", cfg.to_str().unwrap()],
        &[("ICICLE_TEST_GLOBUS_TOKEN", token), ("RUST_LOG", "debug")],
    );
    assert_eq!(code, 1, "{err}");
    let want = format!(
        "error: invalid value for `sinks.globus.token_env` in file {}: the token in environment variable `ICICLE_TEST_GLOBUS_TOKEN` holds a newline or another control character: not a bearer token an HTTP request can carry (the token is not shown)",
        cfg.display()
    );
    assert_eq!(err.lines().last(), Some(want.as_str()), "{err}");
    assert!(!err.contains("tok-Zq8vN3pW") && !err.contains("6xK1yR4t") && !out.contains("tok-Zq8vN3pW"), "{err}");
    assert_eq!(err.matches("retrying").count(), 0, "{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["ok"], false);
    // Nothing was sent, and no time was spent backing off.
    let stats = block_on(emu.client().stats()).unwrap();
    assert_eq!((stats["requests"].as_u64(), stats["writes"].as_u64()), (Some(0), Some(0)), "{stats}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// A delete the sink dead-letters in a versioned run is owed, not forgotten: the run keeps
/// its subject in the new manifest, and the next run finds it gone again and sends the delete
/// again (here it fails again; the other deletes were applied once).
#[test]
fn a_dead_lettered_delete_is_sent_again_by_the_next_versioned_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let root = t.join("fs");
    std::fs::create_dir_all(root.join("stuck")).unwrap();
    std::fs::create_dir_all(root.join("plain")).unwrap();
    std::fs::write(root.join("stuck/x"), b"x").unwrap();
    for i in 0..30 {
        std::fs::write(root.join(format!("plain/f{i}")), b"y").unwrap();
    }
    let emu =
        Emulator::start(Options { fail_task_subjects: vec!["/stuck/".into()], ..Options::new(INDEX, TOKEN) }).unwrap();
    let cfg = config(
        t,
        "snap.toml",
        &format!(
            "[snapshot]\nversion = \"v\"\nstate_dir = \"{t}/state\"\nrejects_file = \"{t}/rejects.jsonl\"\nmax_delete_ratio = 1.0\n[records]\nvisible_to = [\"public\"]\n\
             [sources.w]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/\"\n{sink}",
            t = t.display(),
            r = root.display(),
            sink = sink_at(&emu.url(), &format!("task_retries = 1\ndead_letter_file = \"{}/dead.jsonl\"\n", t.display()))
        ),
    );
    // Indexing /stuck/x fails too: set aside, then sent again by the next run (resend).
    let (code, s, err) = run_snapshot(&cfg);
    assert_eq!(code, 0, "{err}");
    assert_eq!(s["dead_lettered"], 1, "{s}");
    std::fs::remove_file(root.join("stuck/x")).unwrap();
    std::fs::remove_file(root.join("plain/f0")).unwrap();
    for run in 2..=3 {
        let (code, s, err) = run_snapshot(&cfg);
        assert_eq!(code, 0, "run {run}: {err}");
        // Run 2 deletes both; run 3 only the one still owed.
        let want = if run == 2 { 2 } else { 1 };
        assert_eq!((s["deleted"].as_u64(), s["dead_lettered"].as_u64()), (Some(want), Some(1)), "run {run}: {s}");
    }
    let index = block_on(emu_client(&emu).scroll_all(INDEX)).unwrap();
    assert!(
        !index.contains_key("/plain/f0") && index.contains_key("/plain/f1"),
        "{:?}",
        index.keys().collect::<Vec<_>>()
    );
}

fn emu_client(emu: &Emulator) -> Client {
    Client::new(&emu.url(), TOKEN)
}
