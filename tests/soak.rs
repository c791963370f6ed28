//! Soak, bounded (a minute or two): a Lustre monitor delivering to a Kafka sink and a Globus
//! sink while hostile clients try to hold 1,000 idle connections on its metrics server (the
//! kernel queues what the server has no slot for, up to its listen backlog; the rest time
//! out) with the process limited to 512 descriptors, its
//! broker is paused and resumed at random, and the Globus emulator lets every Nth task fail
//! (N random). The workload arrives in rounds. At the end every changelog record is cleared,
//! the monitor stops cleanly on SIGTERM, and both indexes (the topic read back, the
//! emulator's) equal a fresh walk of the tree. The seed is printed; `ICICLE_TEST_SEED` replays.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use icicle_plugins_kafka::produce;
use icicle_testkit::gen::Rng;
use icicle_testkit::globus::{block_on, Client, Emulator, Options};
use icicle_testkit::lustre::{Kind, Workload};
use serde_json::Value;

const INDEX: &str = "4a1f0c3e-5b6d-4e7f-8a9b-0c1d2e3f4a5b";
const TOKEN: &str = "tok-soak-Vq2Lm8Zx";
const HOSTILE: usize = 1000;
const OPEN_FILES: u64 = 512;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Try to keep `n` idle connections open to `addr` until `stop`, reopening those the server
/// closed. Returns (connections attempted, most open at once): once the kernel's listen
/// backlog is full, attempts time out, which is the point.
fn hostile_clients(
    addr: String,
    n: usize,
    stop: Arc<AtomicBool>,
    attempts: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<(usize, usize)> {
    std::thread::spawn(move || {
        // SAFETY: getrlimit/setrlimit on this process only.
        unsafe {
            let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_cur = lim.rlim_max.min(8192);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        let mut open: Vec<std::net::TcpStream> = Vec::new();
        let (mut attempted, mut most) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            // Drop the ones the server closed (a read that ends), then top up.
            open.retain(|s| {
                let mut b = [0u8; 1];
                s.set_nonblocking(true).is_ok()
                    && matches!(s.peek(&mut b), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
            });
            let mut failed = 0;
            while open.len() < n && failed < 100 && !stop.load(Ordering::Relaxed) {
                attempted += 1;
                attempts.store(attempted, Ordering::Relaxed);
                match std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_millis(10)) {
                    Ok(s) => open.push(s),
                    Err(_) => failed += 1,
                }
            }
            most = most.max(open.len());
            std::thread::sleep(Duration::from_millis(200));
        }
        (attempted, most)
    })
}

/// The changelog index the fake `lfs` says user `cl1` cleared up to.
fn cleared(journal: &Path) -> u64 {
    let users = std::fs::read_to_string(icicle_testkit::lustre::side(journal, ".users")).unwrap_or_default();
    users.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn a_monitor_under_hostile_clients_a_pausing_broker_and_failing_tasks_delivers_everything() {
    let seed = test_seed();
    let mut rng = Rng::new(seed);
    let tmp = test_dir();
    let t = tmp.path();
    let broker = OwnBroker::start(t);
    let topic = format!("soak-{}", std::process::id());
    rt().block_on(produce::create_topic(&broker.addr, &topic, 1)).unwrap();
    let every = 3 + rng.below(5);
    let emu = Emulator::start(Options { fail_task_every: Some(every), ..Options::new(INDEX, TOKEN) }).unwrap();
    let root = t.join("fs");
    let journal = t.join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.preexisting(40).unwrap();
    std::fs::write(
        icicle_testkit::lustre::side(&journal, ".users"),
        format!("cl1 {}\n", journal_indexes(&journal).last().copied().unwrap_or(0)),
    )
    .unwrap();
    let sinks = format!(
        "[sinks.msk]\ntype = \"kafka\"\ntopic = \"{topic}\"\ntimeout_secs = 3\nconnection = {{ bootstrap = \"{b}\" }}\n\
         [sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\nbase_url = \"{u}\"\ntoken_env = \"ICICLE_TEST_SOAK_TOKEN\"\nretry_initial_ms = 20\nretry_max_ms = 200\ntask_poll_ms = 10\n",
        b = broker.addr,
        u = emu.url()
    );
    // The index starts as a snapshot of the tree, in both sinks.
    let snap = config(
        t,
        "snap.toml",
        &format!(
            "[snapshot]\nversion = \"v\"\n[records]\nvisible_to = [\"public\"]\n[sources.w]\ntype = \"walk\"\nroot = \"{}\"\npath_prefix = \"/\"\n{sinks}",
            root.display()
        ),
    );
    let (code, _, err) =
        icicle(&["snapshot", "--json", "-c", snap.to_str().unwrap()], &[("ICICLE_TEST_SOAK_TOKEN", TOKEN)]);
    assert_eq!(code, 0, "{err}");
    let testkit = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    let cfg = config(
        t,
        "m.toml",
        &format!(
            "[monitor]\non_failure = \"restart\"\nrestart_initial_secs = 0.2\nrestart_max_secs = 2\n[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nuser = \"cl1\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 25\nquiet_period_secs = 0.0\npoll_interval_secs = 0.1\nstate_dir = \"{t}/state\"\n{sinks}",
            k = testkit.display(),
            j = journal.display(),
            r = root.display(),
            t = t.display(),
        ),
    );
    let log = std::fs::File::create(t.join("monitor.log")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_icicle"));
    cmd.args(["monitor", "-c", cfg.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"])
        .env("ICICLE_TEST_SOAK_TOKEN", TOKEN)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: OPEN_FILES, rlim_max: OPEN_FILES };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().unwrap();
    let addr = metrics_addr_in_log(t);
    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(AtomicUsize::new(0));
    let hostile = hostile_clients(addr.clone(), HOSTILE, stop.clone(), attempts.clone());
    let mut most_fds = 0;
    for round in 0..5 {
        w.run(Kind::Mixed, 60, &format!("/round{round}")).unwrap();
        most_fds = most_fds.max(open_fds(child.id()));
        if rng.below(2) == 0 {
            broker.signal(libc::SIGSTOP);
            std::thread::sleep(Duration::from_millis(2000 + rng.below(5000)));
            most_fds = most_fds.max(open_fds(child.id()));
            broker.signal(libc::SIGCONT);
        }
        std::thread::sleep(Duration::from_millis(rng.below(1500)));
    }
    drop(w);
    let last = *journal_indexes(&journal).last().unwrap();
    let waited = Instant::now();
    while cleared(&journal) < last {
        assert!(child.try_wait().unwrap().is_none(), "seed {seed}: the monitor ended: {}", log_of(t));
        assert!(
            waited.elapsed() < Duration::from_secs(600),
            "seed {seed}: cleared {} of {last}: {}",
            cleared(&journal),
            log_of(t)
        );
        most_fds = most_fds.max(open_fds(child.id()));
        std::thread::sleep(Duration::from_millis(200));
    }
    // The hostile clients have made their 1,000 attempts by the end.
    while attempts.load(Ordering::Relaxed) < HOSTILE && waited.elapsed() < Duration::from_secs(600) {
        most_fds = most_fds.max(open_fds(child.id()));
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    let (attempted, most_open) = hostile.join().unwrap();
    // SAFETY: SIGTERM to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let log = log_of(t);
    assert!(status.success(), "seed {seed}: the monitor failed: {log}");
    eprintln!("seed {seed}: {attempted} hostile connections attempted, at most {most_open} open at once; the monitor held at most {most_fds} descriptors");
    assert!(attempted >= HOSTILE, "seed {seed}: only {attempted} hostile connections were attempted");
    assert!(
        most_open > icicle_core::metrics::MAX_CONNECTIONS,
        "seed {seed}: the server was never saturated ({most_open} open)"
    );
    assert!(most_fds < OPEN_FILES as usize / 2, "seed {seed}: the monitor held {most_fds} descriptors");
    assert!(!log.contains("Too many open files"), "seed {seed}: {log}");
    let fresh = walk_snapshot(t, &root, "fresh");
    // Kafka: the snapshot's messages, then the monitor's, last operation per subject.
    let mut kafka_index = BTreeMap::new();
    apply_topic(&mut kafka_index, &rt().block_on(produce::consume_all(&broker.addr, &topic)).unwrap());
    let (missing, extra, differ) = compare(&kafka_index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed} kafka: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
    // Globus Search: the emulator's index.
    let got = block_on(Client::new(&emu.url(), TOKEN).scroll_all(INDEX)).unwrap();
    let globus_index: BTreeMap<String, Value> =
        got.iter().map(|(s, c)| (s.clone(), serde_json::json!({ "content": c }))).collect();
    let (missing, extra, differ) = compare(&globus_index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed} globus (a task in {every} failed): missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
}
