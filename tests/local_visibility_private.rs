//! The local monitor under `visible_to = "posix-read"` where files can become ones no mapped
//! principal may see (only some owners and groups mapped, no `everyone`, no admins): on a tree
//! with random owners, modes and hard links, while directories and files are chmod'ed and
//! chown'ed, linked and changed (real kernel events), every run finishes, its log stays
//! bounded, and the index it builds equals a fresh walk's, records and `visible_to` alike:
//! a record that became private is withdrawn, never left visible to whoever saw it before.
//! Seeds: `ICICLE_PROPERTY_SEED` replays one; otherwise `ICICLE_PRIVATE_CASES` random seeds
//! per backend (default 6; the figure was run with 50). Needs root.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use icicle_testkit::gen::Rng;
use icicle_testkit::lustre::{Kind, Workload};
use serde_json::Value;

const UIDS: [u32; 3] = [1000, 1001, 1002];
const GIDS: [u32; 3] = [100, 200, 2003];
const DIR_MODES: [u32; 8] = [0o755, 0o750, 0o700, 0o711, 0o775, 0o705, 0o770, 0o751];
const FILE_MODES: [u32; 6] = [0o644, 0o640, 0o600, 0o060, 0o444, 0o660];
/// The most a finished run may log: a loop logs tens of MB a second.
const LOG_BOUND: u64 = 4 << 20;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(root || std::env::var_os("CI").is_none(), "CI must run the local monitor's tests as root");
    root
}

fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("ICICLE_PROPERTY_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let n: u64 = std::env::var("ICICLE_PRIVATE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000_007)
        .unwrap_or(1);
    (0..n).map(|i| base + i).collect()
}

/// `[records]`: only uid 1001 and gid 200 mapped; nobody stands for "everyone".
fn records(t: &Path) -> String {
    std::fs::write(t.join("principals.tsv"), "uid\t1001\turn:u:1001\ngid\t200\turn:g:200\n").unwrap();
    format!("[records]\nvisible_to = \"posix-read\"\nprincipals = \"{}/principals.tsv\"\n", t.display())
}

fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> T {
    v[rng.below(v.len() as u64) as usize]
}

/// `n` random owner and mode changes of directories and files, and hard links of files into
/// other directories.
fn churn(root: &Path, rng: &mut Rng, n: usize) {
    let (dirs, files) = tree_entries(root);
    for i in 0..n {
        let dir = rng.below(2) == 0 && !dirs.is_empty();
        let (rel, modes) = if dir || files.is_empty() {
            (pick_str(rng, &dirs), &DIR_MODES[..])
        } else {
            (pick_str(rng, &files), &FILE_MODES[..])
        };
        let Some(rel) = rel else { continue };
        let p = icicle_core::name::on(root, &rel);
        match rng.below(4) {
            0 => {
                let _ = std::os::unix::fs::chown(&p, Some(pick(rng, &UIDS)), Some(pick(rng, &GIDS)));
            }
            1 if !files.is_empty() && !dirs.is_empty() => {
                if let (Some(f), Some(d)) = (pick_str(rng, &files), pick_str(rng, &dirs)) {
                    let _ = std::fs::hard_link(
                        icicle_core::name::on(root, &f),
                        icicle_core::name::on(root, &d).join(format!("link{i}-{}", rng.below(1000))),
                    );
                }
            }
            _ => {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(pick(rng, modes)));
            }
        }
    }
}

fn pick_str(rng: &mut Rng, v: &[String]) -> Option<String> {
    (!v.is_empty()).then(|| v[rng.below(v.len() as u64) as usize].clone())
}

/// The monitor's report, once it has finished by itself (`--until-idle`); a run still going
/// after `LIMIT` is killed and fails the test: it never settled.
fn finish_or_fail(t: &Path, mut child: std::process::Child, seed: u64) -> Value {
    const LIMIT: Duration = Duration::from_secs(600);
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            let log = log_of(t);
            panic!(
                "seed {seed}: the monitor never finished; log ({} bytes) ends {}",
                log.len(),
                &log[log.len().saturating_sub(2000)..]
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    finish(t, child)
}

fn visible(index: &BTreeMap<String, Value>) -> BTreeMap<String, Vec<String>> {
    index
        .iter()
        .map(|(p, e)| {
            let mut v: Vec<String> = e["visible_to"]
                .as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            v.sort();
            (p.clone(), v)
        })
        .collect()
}

fn one_seed(backend: &str, seed: u64) {
    let tmp = test_dir();
    let t = tmp.path();
    let mut rng = Rng::new(seed);
    let (root, journal, _) = preexisting_fs(t, 50, seed);
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    churn(&root, &mut rng, 60);
    let out = t.join("out");
    let cfg = config(
        t,
        "local.toml",
        &format!(
            "{rec}[sources.local]\ntype = \"{backend}\"\nroot = \"{r}\"\npath_prefix = \"/\"\nstate_dir = \"{t}/state\"\nbatch_size = {b}\nquiet_period_secs = 0.05\nfallback = false\n\
             [sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
            rec = records(t),
            r = root.display(),
            t = t.display(),
            b = 1 + rng.below(100),
            o = out.display(),
        ),
    );
    let child = start_monitor(t, &cfg, 2.0);
    churn(&root, &mut rng, 30);
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.run(Kind::Mixed, 100, "/work").unwrap();
    drop(w);
    churn(&root, &mut rng, 30);
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(pick(&mut rng, &DIR_MODES))).unwrap();
    let report = finish_or_fail(t, child, seed);
    eprintln!(
        "{backend} seed {seed}: {} withdrawn, {} updates, {} deletes",
        report["local"]["withdrawn"], report["local"]["updates"], report["local"]["deletes"]
    );
    let log_bytes = std::fs::metadata(t.join("monitor.log")).map(|m| m.len()).unwrap_or(0);
    assert!(
        log_bytes < LOG_BOUND,
        "{backend} seed {seed} (ICICLE_PROPERTY_SEED={seed}): the log grew to {log_bytes} bytes"
    );
    let mut index = BTreeMap::new();
    apply(&mut index, &out);
    let fresh = walk_snapshot_with(t, &root, "fresh", &records(t));
    let (missing, extra, differ) = compare(&index, &fresh);
    let (got, want) = (visible(&index), visible(&fresh));
    let wider: Vec<&String> =
        got.keys().filter(|p| want.get(*p).is_none_or(|w| got[*p].iter().any(|g| !w.contains(g)))).collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty() && wider.is_empty() && got == want,
        "{backend} seed {seed} (ICICLE_PROPERTY_SEED={seed} replays): missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nvisible wider than a fresh walk says {wider:?}\nreport {report}"
    );
}

fn property(backend: &str) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    for seed in seeds() {
        one_seed(backend, seed);
    }
}

#[test]
fn fanotify_withdraws_what_nobody_may_see_and_always_finishes() {
    property("fanotify");
}

#[test]
fn inotify_withdraws_what_nobody_may_see_and_always_finishes() {
    property("inotify");
}
