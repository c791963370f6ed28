//! Ground truth for the local monitor with real kernel events (run as root): a workload runs
//! in a directory while `icicle monitor` watches it (fanotify or inotify) with a file sink;
//! after `--until-idle`, the index the monitor built from nothing (its seed walk, then its
//! updates and deletes) equals a fresh walk snapshot of the directory, 0 differences, over
//! random seeds. Overflow: the monitor is stopped (SIGSTOP) while a burst larger than its queue
//! happens, and still converges through its rescan.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use icicle_plugins_lustre::changelog::{ChangelogRecord, RecordType, CLF_LAST};
use icicle_testkit::lustre::{Kind, Workload};
use serde_json::Value;

/// Whether these tests can run (as root); under CI (`CI` set), not being root is a failure,
/// not a skip.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(
        root || std::env::var_os("CI").is_none(),
        "CI must run the local monitor's tests as root (real fanotify marks)"
    );
    root
}

fn monitor_config(tmp: &Path, backend: &str, batch: usize) -> PathBuf {
    config(
        tmp,
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.local]\ntype = \"{backend}\"\nroot = \"{r}\"\npath_prefix = \"/\"\nstate_dir = \"{t}/state\"\nbatch_size = {batch}\nmax_emit_records = {emit}\nquiet_period_secs = 0.05\nfallback = false\n{store}\
             [sinks.o]\ntype = \"file\"\ndir = \"{t}/out\"\n",
            r = tmp.join("fs").display(),
            t = tmp.display(),
            // Small, so the seed walk and rescans are delivered in several parts.
            emit = 7 + batch % 40,
            // Half the seeds keep the entries in a SQLite file (1 MiB cached), half in memory.
            store = if batch.is_multiple_of(2) { "entries_cache_mb = 1\n" } else { "" },
        ),
    )
}

/// The index the monitor built against a fresh walk: (missing, extra, different).
fn differences(tmp: &Path) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut index = BTreeMap::new();
    apply(&mut index, &tmp.join("out"));
    // The monitor follows file systems mounted below its root.
    let fresh = walk_snapshot_across_mounts(tmp, &tmp.join("fs"), "after");
    assert!(fresh.len() > 10, "the workload left almost nothing: {}", fresh.len());
    compare(&index, &fresh)
}

/// One seed: files that predate monitoring, the monitor, a workload of `kind`, idle, compare.
fn one_seed(backend: &str, kind: Kind, ops: usize, seed: u64) {
    let tmp = test_dir();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    w.preexisting(60).unwrap();
    let mut rng = Rng::new(seed);
    let batch = 1 + rng.below(300) as usize;
    let cfg = monitor_config(tmp.path(), backend, batch);
    let child = start_monitor(tmp.path(), &cfg, 2.0);
    w.run(kind, ops, "/work").unwrap();
    if kind == Kind::Mixed {
        // Changes to objects that existed before monitoring.
        w.run(Kind::Mixed, ops / 2, "/old0").unwrap();
    }
    let ns = w.ns.clone();
    drop(w);
    let report = finish(tmp.path(), child);
    let r = &report["local"];
    assert_eq!(r["backend"], backend, "{r}");
    assert_eq!(r["rejects"], 0, "{r}");
    // The seed walk (over 60 files) is more than one emit: delivered in parts.
    assert!(r["continued"].as_u64().unwrap_or(0) > 0, "{r}");
    let (missing, extra, mut differ) = differences(tmp.path());
    // inotify names paths, never objects: a file changed through one of its names that was
    // then removed or replaced before the monitor compared it changed under its other names
    // with no event naming them (the documented limit; fanotify also reports the object).
    // Only such files may differ, and only with inotify: one of their names was removed
    // (UNLNK) or replaced (RENME over it) while another name remained (not CLF_LAST), or
    // renamed away while they had a second name.
    let mut linked = Vec::new();
    if backend == "inotify" {
        let baseline = std::fs::read_to_string(icicle_testkit::lustre::side(&journal, ".baseline")).unwrap();
        let records: Vec<ChangelogRecord> =
            journal_lines(&journal).iter().map(|l| ChangelogRecord::parse(l).unwrap()).collect();
        let mut names: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for l in baseline.lines() {
            *names.entry(l.split('\t').next().unwrap_or_default().to_string()).or_default() += 1;
        }
        let two_names: std::collections::HashSet<String> = names
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(f, _)| f)
            .chain(records.iter().filter(|r| r.kind == RecordType::Hlink).map(|r| r.target.to_string()))
            .collect();
        let lost_a_name: std::collections::HashSet<String> = records
            .iter()
            .flat_map(|r| {
                let replaced = matches!(r.kind, RecordType::Unlnk | RecordType::Renme)
                    && r.flags & CLF_LAST == 0
                    && !r.target.is_zero();
                let moved_away = if r.kind == RecordType::Renme {
                    r.source.map(|f| f.to_string()).filter(|f| two_names.contains(f))
                } else {
                    None
                };
                replaced.then(|| r.target.to_string()).into_iter().chain(moved_away)
            })
            .collect();
        let excused = |p: &String| ns.by_path.get(p).is_some_and(|fid| lost_a_name.contains(&fid.to_string()));
        let (l, rest): (Vec<String>, Vec<String>) = differ.into_iter().partition(excused);
        (linked, differ) = (l, rest);
    }
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{backend} seed {seed} ({kind:?}, batch {batch}; replay with ICICLE_TEST_SEED={seed}): missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {r}"
    );
    eprintln!(
        "{backend} seed {seed} {kind:?} batch {batch}: 0 differences (inotify: linked files changed through a name removed since: {linked:?}); updates {} deletes {}",
        r["updates"], r["deletes"]
    );
}

/// Seeds per backend (`ICICLE_LOCAL_SEEDS`, default 10).
fn seeds() -> u64 {
    std::env::var("ICICLE_LOCAL_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10)
}

fn many_seeds(backend: &str) {
    if !is_root() {
        eprintln!("skipped: needs root (fanotify filesystem marks, lowering inotify limits)");
        return;
    }
    let base = test_seed();
    let kinds = [Kind::Mixed, Kind::EvalOut, Kind::Mixed, Kind::EvalPerf, Kind::Mixed, Kind::Filebench];
    for i in 0..seeds() {
        one_seed(backend, kinds[i as usize % kinds.len()], 300, base + i);
    }
}

#[test]
fn fanotify_index_equals_a_fresh_walk() {
    many_seeds("fanotify");
}

#[test]
fn inotify_index_equals_a_fresh_walk() {
    many_seeds("inotify");
}

/// Restores a sysctl when dropped.
struct Sysctl(PathBuf, String);

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, &self.1);
    }
}

/// The monitor is frozen while `burst` files are created and a workload runs, so its queue
/// overflows; it reports the overflow, rescans, and the index still equals a fresh walk
/// (two seeds).
fn overflow(backend: &str, burst: usize) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let base = test_seed();
    for seed in base..base + 2 {
        overflow_seed(backend, burst, seed);
    }
}

fn overflow_seed(backend: &str, burst: usize, seed: u64) {
    let tmp = test_dir();
    let root = tmp.path().join("fs");
    let mut w = Workload::open(&root, &tmp.path().join("lfs/changelog"), seed).unwrap();
    w.preexisting(60).unwrap();
    let cfg = monitor_config(tmp.path(), backend, 500);
    let guard = (backend == "inotify").then(|| {
        // A tiny queue, for the instance the monitor opens (read at inotify_init), restored after.
        let p = PathBuf::from("/proc/sys/fs/inotify/max_queued_events");
        let old = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, "64").unwrap();
        Sysctl(p, old)
    });
    let child = start_monitor(tmp.path(), &cfg, 3.0);
    drop(guard);
    let pid = child.id() as i32;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::fs::create_dir_all(root.join("burst/deep")).unwrap();
    for i in 0..burst {
        std::fs::write(root.join(format!("burst/deep/f{i}")), b"x").unwrap();
    }
    w.run(Kind::Mixed, 200, "/work").unwrap();
    drop(w);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let report = finish(tmp.path(), child);
    let r = &report["local"];
    let overflows = &r["reader"][backend]["overflows"];
    assert!(overflows.as_u64().unwrap_or(0) >= 1, "no overflow (seed {seed}): {r}");
    assert!(r["rescans"]["overflow"].as_u64().unwrap_or(0) >= 1, "{r}");
    let (missing, extra, differ) = differences(tmp.path());
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{backend} overflow seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {r}"
    );
    eprintln!(
        "{backend} overflow seed {seed}: {overflows} overflows, 0 differences; updates {} deletes {}",
        r["updates"], r["deletes"]
    );
}

#[test]
fn inotify_overflow_converges() {
    overflow("inotify", 500);
}

#[test]
fn fanotify_overflow_converges() {
    // Above fanotify's default queue of 16384 events (distinct objects: events on one object merge).
    overflow("fanotify", 17_000);
}

/// A shell script of `ops` random changes among a few names in four directories: writes,
/// removals, renames (over files and directories), symbolic and hard links, subdirectories made,
/// removed and moved, mode and time changes. Each external command is its own process.
fn shell_changes(rng: &mut Rng, ops: usize, hard_links: bool) -> String {
    let mut script = String::from("cd \"$1\" || exit 1\nexec 2>/dev/null\n");
    let name = |rng: &mut Rng, stem: &str, n: u64| format!("d{}/{stem}{}", rng.below(4), rng.below(n));
    for _ in 0..ops {
        let (a, b, sub, to) = (name(rng, "n", 8), name(rng, "n", 8), name(rng, "s", 3), name(rng, "s", 3));
        let line = match rng.below(if hard_links { 12 } else { 11 }) {
            0 | 1 => format!("printf '%{}s' x > {a}", 1 + rng.below(5000)),
            2 => format!("rm -f {a}"),
            3 | 4 => format!("mv -f {a} {b}"),
            5 => format!("ln -sfn n{} {a}", rng.below(8)),
            6 => format!("mkdir -p {sub} && printf x > {sub}/f{}", rng.below(3)),
            7 => format!("rm -rf {sub}"),
            8 => format!("mv -T {sub} {to}"),
            9 => format!("chmod {} {a}", ["600", "644", "755"][rng.below(3) as usize]),
            10 => format!("touch {a}"),
            _ => format!("ln -f {a} {b}"),
        };
        script.push_str(&line);
        script.push('\n');
    }
    script
}

/// Several shells change the same names at once, so the kernel's events of different
/// processes interleave (events of one process merge, those of two never do: a later change
/// can arrive before an earlier one), also on a link whose removal arrives after its re-creation.
/// The index still equals a fresh walk. inotify runs without hard links (its documented limit).
fn many_processes(backend: &str) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let base = test_seed();
    for seed in base..base + seeds().div_ceil(2) {
        let tmp = test_dir();
        let root = tmp.path().join("fs");
        let mut rng = Rng::new(seed);
        std::fs::create_dir_all(root.join("solo")).unwrap();
        for d in 0..4 {
            std::fs::create_dir_all(root.join(format!("d{d}/s0"))).unwrap();
            for n in 0..6 {
                std::fs::write(root.join(format!("d{d}/n{n}")), vec![b'o'; n * 100]).unwrap();
            }
        }
        let cfg = monitor_config(tmp.path(), backend, 1 + rng.below(300) as usize);
        let child = start_monitor(tmp.path(), &cfg, 2.0);
        // Every other seed the monitor is stopped while the shells work: its queue holds all
        // their events, so the kernel merges every change it can.
        let frozen = seed % 2 == 0;
        if frozen {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
        }
        // This process makes a link, another removes it, this one makes it again: the last
        // change joins the first one's queued event, so the removal arrives last.
        std::os::unix::fs::symlink("a", root.join("solo/kept")).unwrap();
        assert!(Command::new("rm").arg(root.join("solo/kept")).status().unwrap().success());
        std::os::unix::fs::symlink("bb", root.join("solo/kept")).unwrap();
        let shells: Vec<_> = (0..3)
            .map(|i| {
                let script = tmp.path().join(format!("shell{i}.sh"));
                std::fs::write(&script, shell_changes(&mut rng, 200, backend == "fanotify")).unwrap();
                Command::new("sh").arg(&script).arg(&root).spawn().unwrap()
            })
            .collect();
        for mut s in shells {
            s.wait().unwrap();
        }
        if frozen {
            // SAFETY: as above.
            unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        }
        let report = finish(tmp.path(), child);
        let r = &report["local"];
        let (missing, extra, differ) = differences(tmp.path());
        assert!(
            missing.is_empty() && extra.is_empty() && differ.is_empty(),
            "{backend} processes seed {seed} (replay with ICICLE_TEST_SEED={seed}): missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {r}"
        );
        eprintln!(
            "{backend} processes seed {seed} (frozen: {frozen}): 0 differences; updates {} deletes {}",
            r["updates"], r["deletes"]
        );
    }
}

#[test]
fn fanotify_many_processes_converge() {
    many_processes("fanotify");
}

#[test]
fn inotify_many_processes_converge() {
    many_processes("inotify");
}

/// The monitor is SIGKILLed at random points while a workload runs (and restarted, so events
/// are also missed while none runs); the last run rescans against its checkpoint and the index
/// still equals a fresh walk (three seeds).
fn killed(backend: &str) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let base = test_seed();
    for seed in base..base + 3 {
        killed_seed(backend, seed);
    }
}

fn killed_seed(backend: &str, seed: u64) {
    let tmp = test_dir();
    let root = tmp.path().join("fs");
    let mut w = Workload::open(&root, &tmp.path().join("lfs/changelog"), seed).unwrap();
    w.preexisting(60).unwrap();
    let mut rng = Rng::new(seed);
    let cfg = monitor_config(tmp.path(), backend, 1 + rng.below(100) as usize);
    let mut child = start_monitor(tmp.path(), &cfg, 60.0);
    let work = std::thread::spawn(move || {
        for round in 0..12 {
            w.run(Kind::Mixed, 100, if round == 5 { "/old0" } else { "/work" }).unwrap();
            std::thread::sleep(Duration::from_millis(60));
        }
    });
    let mut kills = 0;
    while !work.is_finished() {
        std::thread::sleep(Duration::from_millis(20 + rng.below(200)));
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        if rng.below(3) == 0 {
            std::thread::sleep(Duration::from_millis(rng.below(100)));
        }
        child = start_monitor(tmp.path(), &cfg, 60.0);
    }
    work.join().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let report = finish(tmp.path(), start_monitor(tmp.path(), &cfg, 1.0));
    let r = &report["local"];
    assert!(r["rescans"]["restart"].as_u64().unwrap_or(0) >= 1, "{r}");
    let (missing, extra, differ) = differences(tmp.path());
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "{backend} killed {kills} times, seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {r}"
    );
    eprintln!("{backend} seed {seed}: killed {kills} times, 0 differences");
}

#[test]
fn fanotify_killed_and_restarted_converges() {
    killed("fanotify");
}

#[test]
fn inotify_killed_and_restarted_converges() {
    killed("inotify");
}

/// SIGTERM delivers what was read, checkpoints and reports (exit 0); the next start says it
/// rescans (no position to resume) and converges.
#[test]
fn sigterm_stops_gracefully_and_a_restart_rescans() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let seed = test_seed();
    let tmp = test_dir();
    let root = tmp.path().join("fs");
    let mut w = Workload::open(&root, &tmp.path().join("lfs/changelog"), seed).unwrap();
    w.preexisting(60).unwrap();
    let cfg = monitor_config(tmp.path(), "fanotify", 50);
    let child = start_monitor(tmp.path(), &cfg, 600.0);
    w.run(Kind::Mixed, 200, "/work").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let report = finish(tmp.path(), child);
    assert!(started.elapsed() < Duration::from_secs(10), "SIGTERM took {:?}", started.elapsed());
    assert!(report["local"]["updates"].as_u64().unwrap_or(0) > 0, "{report}");
    assert!(log_of(tmp.path()).contains("stopped by a signal"), "{}", log_of(tmp.path()));
    // The checkpoint names the entries files (written in proportion to what changed).
    let cp: Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("state/local.checkpoint.json")).unwrap()).unwrap();
    let g = cp["entries_log"][0].as_u64().unwrap_or_else(|| panic!("{cp}"));
    assert!(cp.get("entries").is_none(), "{cp}");
    assert!(
        tmp.path().join(format!("state/local.entries-{g}.json")).exists()
            && tmp.path().join(format!("state/local.entries-{g}.log")).exists()
    );
    w.run(Kind::Mixed, 100, "/work").unwrap();
    drop(w);
    let report = finish(tmp.path(), start_monitor(tmp.path(), &cfg, 1.0));
    assert_eq!(report["local"]["rescans"]["restart"], 1, "{report}");
    assert!(log_of(tmp.path()).contains("restarted"), "{}", log_of(tmp.path()));
    let (missing, extra, differ) = differences(tmp.path());
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
}

/// SIGTERM while the first seed is delivered in parts: nothing is checkpointed (the parts not
/// delivered would be recorded as done); published files deleted or changed before the next
/// start are deleted or published again (the journal names what the first run published,
/// though no checkpoint came), and the index equals a fresh walk.
#[test]
fn a_stop_in_the_middle_of_the_seed_converges() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tmp = test_dir();
    let t = tmp.path();
    let root = t.join("fs");
    for d in 0..100 {
        std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
        for f in 0..120 {
            std::fs::write(root.join(format!("d{d}/f{f}")), b"x").unwrap();
        }
    }
    // 17 records per part: about 700 parts.
    let cfg = monitor_config(t, "fanotify", 50);
    let child = spawn_monitor(t, &cfg, 600.0);
    let started = Instant::now();
    while std::fs::read_dir(t.join("out")).map_or(0, |d| d.count()) < 3 {
        assert!(started.elapsed() < Duration::from_secs(60), "nothing delivered: {}", log_of(t));
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    finish(t, child);
    assert!(log_of(t).contains("not checkpointed"), "{}", log_of(t));
    assert!(!t.join("state/local.checkpoint.json").exists(), "{}", log_of(t));
    let published = published(t);
    let mut touched = 0;
    for d in 0..100 {
        for f in 0..120 {
            let rel = format!("d{d}/f{f}");
            if published.contains(&format!("/{rel}\"")) && (d + f) % 3 == 0 {
                if f % 2 == 0 {
                    std::fs::remove_file(root.join(&rel)).unwrap();
                } else {
                    std::fs::write(root.join(&rel), b"changed").unwrap();
                }
                touched += 1;
            }
        }
    }
    assert!(touched > 0, "no published file to delete or change");
    let report = finish(t, start_monitor(t, &cfg, 1.0));
    let (missing, extra, differ) = differences(t);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {report}"
    );
}

/// Without CAP_SYS_ADMIN (an unprivileged user), `type = "fanotify"` falls back to inotify,
/// says so, and still converges.
#[test]
fn fanotify_falls_back_to_inotify_without_privileges() {
    // The user `nobody`, no capabilities.
    falls_back(
        &["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"],
        "FAN_MARK_FILESYSTEM",
    );
}

/// Root with CAP_SYS_ADMIN (fanotify marks) but not CAP_DAC_READ_SEARCH (`open_by_handle_at`):
/// refused at open, not left marking and resolving no event.
#[test]
fn fanotify_falls_back_to_inotify_when_handles_cannot_be_resolved() {
    falls_back(&["--inh-caps=-dac_read_search", "--bounding-set=-dac_read_search"], "CAP_DAC_READ_SEARCH");
}

/// The monitor run under `setpriv` with `privileges` uses inotify, logs why (`reason`), and
/// converges.
fn falls_back(privileges: &[&str], reason: &str) {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: needs root and setpriv");
        return;
    }
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = t.join("fs");
    let mut w = Workload::open(&root, &t.join("lfs/changelog"), seed).unwrap();
    w.preexisting(30).unwrap();
    let cfg = std::fs::read_to_string(monitor_config(t, "fanotify", 50))
        .unwrap()
        .replace("fallback = false", "fallback = true");
    let cfg = config(t, "fallback.toml", &cfg);
    for d in ["state", "out"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    // The user `nobody` owns the output and state, and may read (not write) the tree.
    let chown =
        Command::new("chown").args(["-R", "65534:65534"]).arg(t.join("state")).arg(t.join("out")).status().unwrap();
    assert!(chown.success());
    let log = std::fs::File::create(t.join("monitor.log")).unwrap();
    let child = Command::new("setpriv")
        .args(privileges)
        .arg(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "--json", "--until-idle", "2", "-c", cfg.to_str().unwrap()])
        .env("RUST_LOG", monitor_log_filter())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let ready = t.join("state/local.checkpoint.json");
    let started = Instant::now();
    while !ready.exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "{}", log_of(t));
        std::thread::sleep(Duration::from_millis(20));
    }
    // Root works in the tree; the monitor only reads it.
    w.run(Kind::EvalOut, 200, "/work").unwrap();
    drop(w);
    let report = finish(t, child);
    assert_eq!(report["local"]["backend"], "inotify", "{report}");
    let logged = log_of(t);
    assert!(logged.contains("fanotify not available; using inotify") && logged.contains(reason), "{logged}");
    let (missing, extra, differ) = differences(t);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
}

/// Names that are not UTF-8 (a file, a directory and what is below it, a rename onto such a
/// name, some before monitoring and some during it) are indexed under their escaped text
/// (icicle_core::name), the same subjects the `walk` snapshot source gives them: the index
/// equals a fresh snapshot, these names included.
fn not_utf8(backend: &str) {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tmp = test_dir();
    let t = tmp.path();
    let fs = t.join("fs");
    let bad = |s: &[u8]| fs.join(OsStr::from_bytes(s));
    std::fs::create_dir_all(bad(b"old\xff/sub")).unwrap();
    std::fs::write(bad(b"old\xff/sub/f"), b"1").unwrap();
    std::fs::write(bad(b"caf\xe9.txt"), b"1").unwrap();
    std::fs::write(fs.join("plain.txt"), b"1").unwrap();
    std::fs::write(fs.join("renamed-away.txt"), b"1").unwrap();
    let cfg = monitor_config(t, backend, 20);
    let child = start_monitor(t, &cfg, 1.5);
    std::fs::create_dir_all(bad(b"new\xfe/deep")).unwrap();
    std::fs::write(bad(b"new\xfe/deep/g"), b"2").unwrap();
    std::fs::write(bad(b"x\xc3"), b"2").unwrap();
    std::fs::write(fs.join("later.txt"), b"2").unwrap();
    std::fs::write(bad(b"old\xff/sub/f"), b"22").unwrap();
    std::fs::rename(fs.join("renamed-away.txt"), bad(b"away\xfa")).unwrap();
    let report = finish(t, child);
    let r = &report["local"];
    assert_eq!(r["rejects"], 0, "{r}");
    let mut index = BTreeMap::new();
    apply(&mut index, &t.join("out"));
    let fresh = walk_snapshot(t, &fs, "after");
    let want =
        ["/away\\xfa", "/caf\\xe9.txt", "/later.txt", "/new\\xfe/deep/g", "/old\\xff/sub/f", "/plain.txt", "/x\\xc3"];
    assert_eq!(index.keys().collect::<Vec<_>>(), want, "{r}");
    let (missing, extra, differ) = compare(&index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
}

#[test]
fn fanotify_indexes_names_that_are_not_utf8_escaped() {
    not_utf8("fanotify");
}

#[test]
fn inotify_indexes_names_that_are_not_utf8_escaped() {
    not_utf8("inotify");
}

/// Unmounts when dropped.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        // Already unmounted by the test, perhaps.
        let _ = Command::new("umount").arg("-l").arg(&self.0).stderr(Stdio::null()).status();
    }
}

fn mount_tmpfs(at: &Path) -> Mounted {
    let ok = Command::new("mount").args(["-t", "tmpfs", "icicle-test"]).arg(at).status().is_ok_and(|s| s.success());
    assert!(ok, "mount -t tmpfs at {}", at.display());
    Mounted(at.to_path_buf())
}

/// Everything the monitor wrote to its file sink so far.
fn published(t: &Path) -> String {
    std::fs::read_dir(t.join("out"))
        .map(|d| d.flatten().map(|e| std::fs::read_to_string(e.path()).unwrap_or_default()).collect())
        .unwrap_or_default()
}

/// A tmpfs mounted below the root before the start, and one mounted while the monitor runs over
/// a directory that held a file (found in the mount table: fanotify marks it, inotify watches
/// it; its directory rescanned), report their changes like the root's; after the second is
/// unmounted again, the index equals a fresh walk across what is left.
fn mounts_below_the_root(backend: &str) {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let root = t.join("fs");
    let mut w = Workload::open(&root, &t.join("lfs/changelog"), seed).unwrap();
    w.preexisting(30).unwrap();
    w.mkdir("/early").unwrap();
    w.mkdir("/late").unwrap();
    std::fs::write(root.join("late/hidden-by-the-mount.txt"), b"1").unwrap();
    let _early = mount_tmpfs(&root.join("early"));
    w.run(Kind::Filebench, 60, "/early/before").unwrap();
    let cfg = monitor_config(t, backend, 50);
    let child = start_monitor(t, &cfg, 4.0);
    w.run(Kind::EvalOut, 120, "/early/work").unwrap();
    w.run(Kind::Filebench, 60, "/early/fb").unwrap();
    let late = mount_tmpfs(&root.join("late"));
    std::fs::write(root.join("late/right-after-mount.txt"), b"2").unwrap();
    // The mount is found (within the monitor's check period); what follows is reported by
    // events on the newly marked file system, not by a rescan.
    let started = Instant::now();
    while !log_of(t).contains("a mount below the root came or went") {
        assert!(started.elapsed() < Duration::from_secs(60), "the new mount was never found: {}", log_of(t));
        std::thread::sleep(Duration::from_millis(50));
    }
    w.run(Kind::Filebench, 120, "/late/work").unwrap();
    drop(w);
    // The monitor lags behind the workload: let it publish what is on the mount first.
    while !published(t).contains("/late/work/") {
        assert!(started.elapsed() < Duration::from_secs(60), "nothing under /late/work was published: {}", log_of(t));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Unmounted while the monitor runs (it keeps no descriptor on it, so this succeeds): the
    // directory is rescanned and what was indexed on that file system is deleted.
    let unmounted = Command::new("umount").arg(root.join("late")).status().is_ok_and(|s| s.success());
    assert!(unmounted, "umount {}: busy? {}", root.join("late").display(), log_of(t));
    while log_of(t).matches("a mount below the root came or went").count() < 2 {
        assert!(started.elapsed() < Duration::from_secs(60), "the unmount was never noticed: {}", log_of(t));
        std::thread::sleep(Duration::from_millis(50));
    }
    let report = finish(t, child);
    let r = &report["local"];
    if backend == "fanotify" {
        assert_eq!(r["reader"]["fanotify"]["marked_file_systems"], 3, "{r}");
        assert_eq!(r["reader"]["fanotify"]["unmarked_mounts"], 0, "{r}");
    }
    assert!(r["rescans"]["mount"].as_u64().unwrap_or(0) >= 2, "{r}");
    let (missing, extra, differ) = differences(t);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}\nreport {r}"
    );
    let mut index = BTreeMap::new();
    apply(&mut index, &t.join("out"));
    for p in ["/early/before/", "/early/fb/", "/late/hidden-by-the-mount.txt"] {
        assert!(index.keys().any(|k: &String| k.starts_with(p)), "nothing indexed under {p}: {r}");
    }
    // Hidden by the mount (deleted), back after the unmount (published again).
    assert!(deleted(&t.join("out")).iter().any(|d| d == "/late/hidden-by-the-mount.txt"), "{r}");
    // Published while mounted, deleted after.
    let published = published(t);
    for p in ["/late/right-after-mount.txt", "/late/work/"] {
        assert!(published.contains(p) && !index.keys().any(|k: &String| k.starts_with(p)), "{p}: {r}");
    }
    drop(late);
}

#[test]
fn fanotify_reports_file_systems_mounted_below_the_root() {
    mounts_below_the_root("fanotify");
}

#[test]
fn inotify_reports_file_systems_mounted_below_the_root() {
    mounts_below_the_root("inotify");
}
