//! The Globus Search sink driven directly (no pipeline): token refresh, retries, FAILED
//! tasks, refused entries set aside, pacing.

use super::*;

pub(super) fn sink_for(emu: &Emulator, f: impl FnOnce(&mut GlobusSinkConfig)) -> GlobusSink {
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

pub(super) fn batch(subjects: &[&str]) -> DocumentBatch {
    let entries: Vec<Vec<u8>> = subjects
        .iter()
        .map(|s| {
            serde_json::json!({"subject": s, "visible_to": ["public"], "content": {"path": s}}).to_string().into_bytes()
        })
        .collect();
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
    // Neither sent again nor isolated: the FAILED task fails the delivery, which a later
    // delivery (a monitor's restart) may well get through.
    let mut sink = sink_for(&emu, |c| {
        c.task_retries = 0;
        c.max_dead_letters = 0;
    });
    block_on(async {
        sink.deliver(&batch(&["/a"])).await.unwrap();
        let e = sink.deliver(&DocumentBatch::Delete(vec!["/a".into()])).await.unwrap_err();
        assert!(matches!(e, icicle_core::SinkError::Remote { retry: icicle_core::Retry::WithBackoff, .. }), "{e:?}");
        let e = e.to_string();
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
    // With room for exactly one letter, one bad entry of two is still isolated.
    let mut one = sink_for(&emu, |c| {
        c.dead_letter_file = Some(tmp.path().join("one.jsonl"));
        c.max_dead_letters = 1;
    });
    block_on(one.deliver(&batch(&["/ok", "/poison/y"]))).unwrap();
    assert_eq!(one.dead_lettered(), ["/poison/y"]);
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
    std::fs::write(
        &cfg,
        format!("[monitor]\non_failure = \"restart\"\nrestart_initial_secs = 0.01\nmax_restarts = 5\n{text}"),
    )
    .unwrap();
    let (code, _, err) = icicle(&["monitor", "--drain", "-c", cfg.to_str().unwrap()], &ENV);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("HTTP 404") && err.contains("not restarted"), "{err}");
    assert_eq!(err.matches("source failed; restarting").count(), 0, "{err}");
    assert_eq!(cleared(tmp.path()), registered(tmp.path()));
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
                "[snapshot]\nversion = \"v\"\nrejects_file = \"{t}/rejects.jsonl\"\nstate_dir = \"{t}/state\"\n[records]\nvisible_to = [\"public\"]\n\
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
    // Refused again by the next run: its letter is kept already, but it is still owed (the
    // run after sends it again).
    let mut o = Options::new(INDEX, TOKEN);
    o.refuse_subjects = vec!["/poison/p".into()];
    let emu = Emulator::start(o).unwrap();
    let summary = run(&emu);
    assert_eq!(summary["dead_lettered"], 1, "{summary}");
    assert_eq!(
        std::fs::read_to_string(&letters).unwrap().lines().filter(|l| l.contains("/poison/p")).count(),
        1,
        "kept once"
    );
    drop(emu);
    // The next run (nothing changed on disk, Search now accepts it) sends the dead letter
    // again and only it; the others are unchanged.
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let summary = run(&emu);
    assert_eq!(summary["dead_lettered"], 0, "{summary}");
    assert_eq!(
        (summary["updated"].as_u64(), summary["unchanged"].as_u64(), summary["created"].as_u64()),
        (Some(1), Some(20), Some(0)),
        "{summary}"
    );
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
    for bad in [0.0, -1.0, f64::NAN, 1e-30] {
        let mut c = GlobusSinkConfig::new(INDEX);
        c.token_env = Some("ICICLE_TEST_GLOBUS_DIRECT_TOKEN".into());
        c.max_requests_per_s = Some(bad);
        let e = c
            .connect_with("g", |k, r| ConfigError::InvalidValue { key: k.into(), origin: "test".into(), reason: r })
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_requests_per_s"), "{e}");
    }
}
