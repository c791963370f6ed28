//! A monitor whose Kafka sink lost its broker for a while heals by itself: a broker of its
//! own (tansu, started for this test) is paused with SIGSTOP past the sink's delivery
//! timeout and resumed; with `on_failure = "restart"` the monitor restarts with a new sink
//! (the old idempotent producer is fenced for good) and delivers everything: the topic, read
//! back, holds an index equal to a fresh snapshot, and every changelog record is cleared.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use icicle_plugins_kafka::produce;
use icicle_testkit::lustre::{Kind, Workload};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Wait until the monitor serving metrics at `addr` has cleared changelog record `last`.
fn wait_cleared(addr: &str, last: u64, what: &str) {
    let t = Instant::now();
    loop {
        if let Ok(s) = icicle_tui::dashboard::fetch_status(addr) {
            if s.get("icicle_changelog_cleared", &[("component", "mdt0"), ("mdt", "fs0-MDT0000")]) == Some(last as f64)
            {
                return;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(300), "{what}: record {last} never cleared");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_paused_broker_is_survived_by_restarting_with_a_new_sink() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let broker = OwnBroker::start(t);
    let (root, journal, index) = preexisting_fs(t, 30, seed);
    let topic = format!("recovery-{}", std::process::id());
    rt().block_on(produce::create_topic(&broker.addr, &topic, 1)).unwrap();
    let testkit = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    let cfg = config(
        t,
        "m.toml",
        &format!(
            "[monitor]\non_failure = \"restart\"\nrestart_initial_secs = 0.5\nrestart_max_secs = 2\n[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 20\nquiet_period_secs = 0.0\npoll_interval_secs = 0.1\nstate_dir = \"{t}/state\"\n\
             [sinks.msk]\ntype = \"kafka\"\ntopic = \"{topic}\"\ntimeout_secs = 3\nconnection = {{ bootstrap = \"{b}\" }}\n",
            k = testkit.display(),
            j = journal.display(),
            r = root.display(),
            t = t.display(),
            b = broker.addr,
        ),
    );
    let log = std::fs::File::create(t.join("monitor.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "-c", cfg.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr = metrics_addr_in_log(t);
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.run(Kind::Mixed, 80, "/before").unwrap();
    wait_cleared(&addr, *journal_indexes(&journal).last().unwrap(), "before the pause");
    // Paused past the sink's delivery timeout while records keep coming.
    broker.signal(libc::SIGSTOP);
    w.run(Kind::Mixed, 80, "/during").unwrap();
    std::thread::sleep(Duration::from_secs(15));
    broker.signal(libc::SIGCONT);
    w.run(Kind::Mixed, 80, "/after").unwrap();
    drop(w);
    wait_cleared(&addr, *journal_indexes(&journal).last().unwrap(), "after the pause");
    // SAFETY: SIGTERM to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let log = log_of(t);
    assert!(status.success(), "the monitor failed: {log}");
    assert!(
        log.contains("sinks built afresh for the restart"),
        "the pause never failed a delivery (nothing tested): {log}"
    );
    let messages = rt().block_on(produce::consume_all(&broker.addr, &topic)).unwrap();
    let mut got = index;
    apply_topic(&mut got, &messages);
    let fresh = walk_snapshot(t, &root, "fresh");
    let (missing, extra, differ) = compare(&got, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\n{log}"
    );
}
