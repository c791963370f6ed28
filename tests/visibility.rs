//! `visible_to` from POSIX permissions: the configuration checks, aggregates, and both
//! monitors: on a tree that predates
//! monitoring (random owners and modes), random `chmod`/`chown` of directories and files and a
//! mixed workload, the index (a snapshot plus the monitor's output) has the same records *and
//! the same visible_to* as a fresh snapshot under the same rule; and the named cases (a home
//! directory closed with `chmod 700`, a private file in a group project) for both rules.
//! Seeds: `ICICLE_PROPERTY_SEED` replays one; otherwise `ICICLE_VISIBILITY_CASES` random
//! seeds (default 16 for Lustre, 6 for GPFS), each printed on failure. Needs root (CI runs as root) for other owners.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use icicle_plugins_kafka::produce;
use icicle_testkit::gen::Rng;
use icicle_testkit::gpfs::{messages, GpfsJournal};
use icicle_testkit::lustre::{Kind, Workload};
use serde_json::Value;

const UIDS: [u32; 3] = [1000, 1001, 1002];
const GIDS: [u32; 3] = [100, 200, 300];
const DIR_MODES: [u32; 8] = [0o755, 0o750, 0o700, 0o711, 0o775, 0o705, 0o770, 0o751];
const FILE_MODES: [u32; 6] = [0o644, 0o640, 0o600, 0o604, 0o444, 0o660];

/// Whether these can run (as root); under CI (`CI` set) not being root fails them instead.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root || std::env::var_os("CI").is_none(),
        "CI must run the visibility tests as root (other owners, real kernel events)"
    );
    if !root {
        eprintln!("skipped: needs root to give files other owners");
    }
    root
}

fn testkit() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit")
}

/// `[records]` for `rule`, with principals for the test users and groups.
fn records(tmp: &Path, rule: &str) -> String {
    let mut p = String::new();
    for u in UIDS {
        p.push_str(&format!("uid\t{u}\turn:u:{u}\n"));
    }
    for g in GIDS {
        p.push_str(&format!("gid\t{g}\turn:g:{g}\n"));
    }
    std::fs::write(tmp.join("principals.tsv"), p).unwrap();
    format!("[records]\nvisible_to = \"{rule}\"\nprincipals = \"{}/principals.tsv\"\neveryone = \"public\"\nadmins = [\"urn:admins\"]\n", tmp.display())
}

/// A walk snapshot of `root` under `rule`, written to `tmp/name`, as an index.
fn snapshot_under(tmp: &Path, root: &Path, name: &str, rule: &str) -> BTreeMap<String, Value> {
    walk_snapshot_with(tmp, root, name, &records(tmp, rule))
}

fn visible(index: &BTreeMap<String, Value>) -> BTreeMap<String, Vec<String>> {
    index
        .iter()
        .map(|(p, e)| {
            let mut v: Vec<String> =
                e["visible_to"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
            v.sort();
            (p.clone(), v)
        })
        .collect()
}

fn entries(root: &Path) -> (Vec<String>, Vec<String>) {
    tree_entries(root)
}

fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> T {
    v[rng.below(v.len() as u64) as usize]
}

/// Owners and modes of a tree that predates monitoring (set directly: no events).
fn shuffle_permissions(root: &Path, rng: &mut Rng) {
    let (dirs, files) = entries(root);
    for (rel, modes) in files.iter().map(|f| (f, &FILE_MODES[..])).chain(dirs.iter().map(|d| (d, &DIR_MODES[..]))) {
        let p = root.join(rel.trim_start_matches('/'));
        std::os::unix::fs::chown(&p, Some(pick(rng, &UIDS)), Some(pick(rng, &GIDS))).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(pick(rng, modes))).unwrap();
    }
}

/// Random `chmod`/`chown` of `n` directories and files, through the workload (so they are
/// journaled and sent as events).
fn change_permissions(w: &mut Workload, root: &Path, rng: &mut Rng, n: usize) {
    let (dirs, files) = entries(root);
    for _ in 0..n {
        let dir = rng.below(2) == 0 && !dirs.is_empty();
        let (path, modes) = if dir || files.is_empty() {
            (dirs[rng.below(dirs.len() as u64) as usize].clone(), &DIR_MODES[..])
        } else {
            (files[rng.below(files.len() as u64) as usize].clone(), &FILE_MODES[..])
        };
        if rng.below(3) == 0 {
            w.chown(&path, pick(rng, &UIDS), pick(rng, &GIDS)).unwrap();
        } else {
            w.chmod(&path, pick(rng, modes)).unwrap();
        }
    }
}

fn seeds(default: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("ICICLE_PROPERTY_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let n: u64 = std::env::var("ICICLE_VISIBILITY_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000_007)
        .unwrap_or(1);
    (0..n).map(|i| base + i).collect()
}

/// A tree that predates monitoring, its snapshot under `rule`, then journaled permission
/// changes around a mixed workload (GPFS events too when `gpfs`). Returns (root, journal,
/// events, index before).
fn scenario(tmp: &Path, seed: u64, rule: &str, gpfs: bool) -> (PathBuf, PathBuf, PathBuf, BTreeMap<String, Value>) {
    let mut rng = Rng::new(seed);
    let (root, journal, _) = preexisting_fs(tmp, 60, seed);
    shuffle_permissions(&root, &mut rng);
    let index = snapshot_under(tmp, &root, "before", rule);
    let events = tmp.join("events.jsonl");
    let mut w = Workload::open(&root, &journal, seed).unwrap();
    if gpfs {
        w.gpfs = Some(GpfsJournal::open(&events, &root, "/gpfs/fs1", true).unwrap());
    }
    change_permissions(&mut w, &root, &mut rng, 30);
    w.run(Kind::Mixed, 150, "/work").unwrap();
    change_permissions(&mut w, &root, &mut rng, 20);
    drop(w);
    (root, journal, events, index)
}

fn lustre_config(tmp: &Path, root: &Path, journal: &Path, out: &Path, rule: &str) -> PathBuf {
    config(
        tmp,
        "lustre.toml",
        &format!(
            "{rec}[sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nuser = \"cl1\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 40\nquiet_period_secs = 0.0\npoll_interval_secs = 0.02\nstate_dir = \"{t}/state\"\n\
             [sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
            rec = records(tmp, rule),
            k = testkit().display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.display(),
            o = out.display()
        ),
    )
}

fn gpfs_config(tmp: &Path, root: &Path, topic: &str, out: &Path, rule: &str) -> PathBuf {
    config(
        tmp,
        "gpfs.toml",
        &format!(
            "{rec}[sources.fset1]\ntype = \"gpfs\"\ntopic = \"{topic}\"\ngroup_id = \"icicle-{topic}\"\nfs_root = \"/gpfs/fs1\"\nmount = \"{r}\"\n\
             batch_size = 40\nquiet_period_secs = 0.05\nstate_dir = \"{t}/state\"\nseed_index = \"{t}/before\"\nconnection = {{ bootstrap = \"{k}\" }}\n\
             [sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
            rec = records(tmp, rule),
            k = kafka(),
            r = root.display(),
            t = tmp.display(),
            o = out.display()
        ),
    )
}

fn drain(cfg: &Path, id: &str) -> Value {
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    report[id].clone()
}

fn produce_all(events: &Path, topic: &str) -> usize {
    let msgs = messages(events, 0).unwrap();
    let n = msgs.len();
    let k = kafka();
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        produce::create_topic(&k, topic, 1).await.unwrap();
        produce::produce(&k, topic, msgs).await.unwrap();
    });
    n
}

/// The index after the monitor's output against a fresh snapshot: records and visible_to.
fn differences(tmp: &Path, root: &Path, mut index: BTreeMap<String, Value>, out: &Path, rule: &str) -> Vec<String> {
    apply(&mut index, out);
    let fresh = snapshot_under(tmp, root, "after", rule);
    let (missing, extra, differ) = compare(&index, &fresh);
    let mut problems: Vec<String> = missing
        .iter()
        .map(|p| format!("missing {p}"))
        .chain(extra.iter().map(|p| format!("extra {p}")))
        .chain(differ.iter().map(|p| format!("metadata differs {p}")))
        .collect();
    let (got, want) = (visible(&index), visible(&fresh));
    for (p, v) in &want {
        if let Some(g) = got.get(p).filter(|g| *g != v) {
            problems.push(format!("visible_to of {p}: index {g:?}, fresh {v:?}"));
        }
    }
    problems
}

/// No differences, or a failure naming the seed that replays it (`KEEP` set: the test's
/// directory is copied to /tmp/visibility-keep first).
fn assert_converged(tmp: &Path, what: &str, seed: u64, rule: &str, problems: &[String], report: &Value) {
    if !problems.is_empty() && std::env::var("KEEP").is_ok() {
        let _ = std::fs::remove_dir_all("/tmp/visibility-keep");
        let _ = std::process::Command::new("cp").arg("-a").arg(tmp).arg("/tmp/visibility-keep").status();
    }
    let shown: Vec<&String> = problems.iter().take(8).collect();
    assert!(
        problems.is_empty(),
        "{what} seed {seed} (ICICLE_PROPERTY_SEED={seed} replays) {rule}: {} differences, e.g. {shown:#?}\nreport {report}",
        problems.len()
    );
}

fn property(gpfs: bool) {
    if !is_root() {
        return;
    }
    // The GPFS cases wait for a consumer group each (seconds): fewer by default.
    for seed in seeds(if gpfs { 6 } else { 16 }) {
        for rule in ["posix-read", "posix"] {
            let tmp = tempfile::tempdir().unwrap();
            let (root, journal, events, index) = scenario(tmp.path(), seed, rule, gpfs);
            let out = tmp.path().join("out");
            let report = if gpfs {
                let topic = format!("vis-{}-{seed}-{rule}", std::process::id());
                let n = produce_all(&events, &topic);
                let r = drain(&gpfs_config(tmp.path(), &root, &topic, &out, rule), "fset1");
                assert_eq!(r["messages"], n as u64, "seed {seed}: {r}");
                r
            } else {
                drain(&lustre_config(tmp.path(), &root, &journal, &out, rule), "mdt0")
            };
            assert_eq!(report["rejects"], 0, "seed {seed} {rule}: {report}");
            let problems = differences(tmp.path(), &root, index, &out, rule);
            assert_converged(tmp.path(), if gpfs { "gpfs" } else { "lustre" }, seed, rule, &problems, &report);
        }
    }
}

#[test]
fn lustre_visible_to_follows_permission_changes_on_an_existing_tree() {
    property(false);
}

#[test]
fn gpfs_visible_to_follows_permission_changes_on_an_existing_tree() {
    property(true);
}

/// Random ACLs on (or removed from) `n` directories below `root`, or on the root itself.
fn change_acls(root: &Path, rng: &mut Rng, n: usize) {
    let (dirs, _) = entries(root);
    for _ in 0..n {
        let p = match rng.below(dirs.len() as u64 + 1) as usize {
            0 => root.to_path_buf(),
            i => root.join(dirs[i - 1].trim_start_matches('/')),
        };
        if rng.below(4) == 0 {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: both strings are NUL-terminated. No ACL there is fine.
            unsafe { libc::removexattr(c.as_ptr(), c"system.posix_acl_access".as_ptr()) };
        } else {
            set_random_acl(&p, rng, &UIDS, &GIDS);
        }
    }
}

/// The local monitor (`backend`) on a tree that predates it, with random owners, modes and
/// ACLs, while permissions, ACLs (the root's too) and a mixed workload change: the index it
/// builds from nothing has the same records and visible_to as a fresh snapshot.
fn local_property(backend: &str) {
    if !is_root() {
        return;
    }
    for seed in seeds(4) {
        let rule = if seed % 2 == 0 { "posix" } else { "posix-read" };
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let mut rng = Rng::new(seed);
        let (root, journal, _) = preexisting_fs(t, 60, seed);
        shuffle_permissions(&root, &mut rng);
        change_acls(&root, &mut rng, 8);
        let out = t.join("out");
        let cfg = config(
            t,
            "local.toml",
            &format!(
                "{rec}[sources.local]\ntype = \"{backend}\"\nroot = \"{r}\"\npath_prefix = \"/\"\nstate_dir = \"{t}/state\"\nbatch_size = {b}\nquiet_period_secs = 0.05\nfallback = false\n\
                 [sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
                rec = records(t, rule),
                r = root.display(),
                t = t.display(),
                b = 1 + rng.below(100),
                o = out.display(),
            ),
        );
        let child = start_monitor(t, &cfg, 2.0);
        let mut w = Workload::open(&root, &journal, seed).unwrap();
        change_permissions(&mut w, &root, &mut rng, 20);
        change_acls(&root, &mut rng, 10);
        w.run(Kind::Mixed, 150, "/work").unwrap();
        change_permissions(&mut w, &root, &mut rng, 10);
        change_acls(&root, &mut rng, 10);
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(pick(&mut rng, &DIR_MODES))).unwrap();
        drop(w);
        let report = finish(t, child);
        assert_eq!(report["local"]["rejects"], 0, "seed {seed} {rule}: {report}");
        let problems = differences(t, &root, BTreeMap::new(), &out, rule);
        assert_converged(t, backend, seed, rule, &problems, &report);
    }
}

#[test]
fn fanotify_visible_to_follows_permission_and_acl_changes_on_an_existing_tree() {
    local_property("fanotify");
}

#[test]
fn inotify_visible_to_follows_permission_and_acl_changes_on_an_existing_tree() {
    local_property("inotify");
}

/// alice's home (`0755`, then `chmod 700`) with a `0644` and a `0600` file; a `0600` and a
/// `0640` file in a `0750` group project. Returns the visible_to of each file after each phase.
fn named_cases(gpfs: bool, rule: &str) -> Vec<BTreeMap<String, Vec<String>>> {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let events = tmp.path().join("events.jsonl");
    let mut w = Workload::open(&root, &journal, 1).unwrap();
    if gpfs {
        w.gpfs = Some(GpfsJournal::open(&events, &root, "/gpfs/fs1", true).unwrap());
    }
    for (dir, uid, gid, mode) in
        [("/home", 0, 0, 0o755), ("/home/alice", 1000, 100, 0o755), ("/proj", 1000, 200, 0o750)]
    {
        w.mkdir(dir).unwrap();
        w.chown(dir, uid, gid).unwrap();
        w.chmod(dir, mode).unwrap();
    }
    for (file, gid, mode) in [
        ("/home/alice/open", 100, 0o644),
        ("/home/alice/private", 100, 0o600),
        ("/proj/secret", 200, 0o600),
        ("/proj/shared", 200, 0o640),
    ] {
        w.create(file, 10).unwrap();
        w.chown(file, 1000, gid).unwrap();
        w.chmod(file, mode).unwrap();
    }
    drop(w);
    // The index starts empty: everything above came through the monitor.
    std::fs::create_dir_all(tmp.path().join("before")).unwrap();
    let topic = format!("vis-named-{}-{}-{rule}", std::process::id(), gpfs);
    let out = tmp.path().join("out");
    let cfg = if gpfs {
        gpfs_config(tmp.path(), &root, &topic, &out, rule)
    } else {
        lustre_config(tmp.path(), &root, &journal, &out, rule)
    };
    let id = if gpfs { "fset1" } else { "mdt0" };
    let mut index = BTreeMap::new();
    let mut phases = Vec::new();
    let mut produced = 0;
    for phase in 0..2 {
        if phase == 1 {
            let mut w = Workload::open(&root, &journal, 1).unwrap();
            if gpfs {
                w.gpfs = Some(GpfsJournal::open(&events, &root, "/gpfs/fs1", true).unwrap());
            }
            w.chmod("/home/alice", 0o700).unwrap();
        }
        if gpfs {
            let msgs = messages(&events, produced).unwrap();
            produced += msgs.len();
            let k = kafka();
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
                produce::create_topic(&k, &topic, 1).await.unwrap();
                produce::produce(&k, &topic, msgs).await.unwrap();
            });
        }
        let r = drain(&cfg, id);
        assert_eq!(r["rejects"], 0, "{r}");
        apply(&mut index, &out);
        phases.push(visible(&index));
    }
    phases
}

fn v(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn assert_named_cases(gpfs: bool) {
    if !is_root() {
        return;
    }
    let (alice, users, proj, admins) = ("urn:u:1000", "urn:g:100", "urn:g:200", "urn:admins");
    for rule in ["posix-read", "posix"] {
        let phases = named_cases(gpfs, rule);
        let (open, closed) = (&phases[0], &phases[1]);
        let read = rule == "posix-read";
        assert_eq!(open["/home/alice/open"], v(&[alice, users, "public", admins]), "{rule}");
        let private = if read { v(&[alice, admins]) } else { v(&[alice, users, "public", admins]) };
        assert_eq!(open["/home/alice/private"], private, "{rule}: a 0600 file in an open home");
        // A 0600 file in a 0750 project is never public; the group may list it (posix), not read it.
        let secret = if read { v(&[alice, admins]) } else { v(&[alice, proj, admins]) };
        assert_eq!(open["/proj/secret"], secret, "{rule}: a 0600 file in a 0750 project");
        assert_eq!(open["/proj/shared"], v(&[alice, proj, admins]), "{rule}: a 0640 file in a 0750 project");
        // chmod 700 of the home hides both files from the group and from everyone.
        for f in ["/home/alice/open", "/home/alice/private"] {
            assert_eq!(closed[f], v(&[alice, admins]), "{rule}: {f} after chmod 700 /home/alice");
        }
        assert_eq!(closed["/proj/secret"], secret, "{rule}: untouched");
    }
}

#[test]
fn lustre_named_cases_home_closed_and_private_project_file() {
    assert_named_cases(false);
}

#[test]
fn gpfs_named_cases_home_closed_and_private_project_file() {
    assert_named_cases(true);
}

#[test]
fn snapshot_named_cases_home_closed_and_private_project_file() {
    if !is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    for (dir, uid, gid, mode) in [("home", 0, 0, 0o755), ("home/alice", 1000, 100, 0o700), ("proj", 1000, 200, 0o750)] {
        let p = root.join(dir);
        std::fs::create_dir_all(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    for (file, gid, mode) in
        [("home/alice/open", 100, 0o644), ("home/alice/private", 100, 0o600), ("proj/secret", 200, 0o600)]
    {
        let p = root.join(file);
        std::fs::write(&p, b"x").unwrap();
        std::os::unix::fs::chown(&p, Some(1000), Some(gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let (alice, proj, admins) = ("urn:u:1000", "urn:g:200", "urn:admins");
    for rule in ["posix-read", "posix"] {
        let vis = visible(&snapshot_under(tmp.path(), &root, &format!("snap-{rule}"), rule));
        assert_eq!(vis["/home/alice/open"], v(&[alice, admins]), "{rule}: alice's group is kept out by 0700");
        assert_eq!(vis["/home/alice/private"], v(&[alice, admins]), "{rule}");
        let secret = if rule == "posix" { v(&[alice, proj, admins]) } else { v(&[alice, admins]) };
        assert_eq!(vis["/proj/secret"], secret, "{rule}: never public with `public` allowed");
    }
}

#[test]
fn rules_and_principals_are_checked_at_start_up() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    std::fs::create_dir_all(&root).unwrap();
    let run = |name: &str, records: &str| {
        let cfg = config(
            tmp.path(),
            name,
            &format!(
                "[records]\n{records}\n[sources.w]\ntype = \"walk\"\nroot = \"{}\"\n[sinks.o]\ntype = \"file\"\ndir = \"{}/out\"\n",
                root.display(),
                tmp.path().display()
            ),
        );
        snapshot(&cfg, &[])
    };
    for (name, records, key, says) in [
        ("rule.toml", "visible_to = \"posx\"", "records.visible_to", "posix-read"),
        ("admins.toml", "admins = [\"admins\"]", "records.admins[0]", "urn:"),
        ("everyone.toml", "everyone = \"all\"", "records.everyone", "public"),
        ("fallback.toml", "fallback = [\"public\"]", "records.fallback", "widen"),
        ("unknown.toml", "unknown_directories = \"open\"", "unknown_directories", "owner-only"),
    ] {
        let (code, _, err) = run(name, records);
        assert_ne!(code, 0, "{name}");
        assert!(err.contains(key) && err.contains(says) && err.contains(name), "{name}: {err}");
    }
    let (code, _, err) = run(
        "ok.toml",
        "visible_to = \"posix\"\neveryone = \"urn:globus:groups:id:all-users\"\nadmins = [\"urn:admins\"]",
    );
    assert_eq!(code, 0, "{err}");
}

#[test]
fn aggregates_follow_the_rule() {
    if !is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    for (dir, uid, gid, mode) in
        [("home", 0, 0, 0o755), ("home/alice", 1000, 100, 0o700), ("proj", 1000, 200, 0o750), ("pub", 1001, 300, 0o755)]
    {
        let p = root.join(dir);
        std::fs::create_dir_all(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (file, uid, gid) in [("home/alice/a", 1000, 100), ("proj/b", 1000, 200), ("pub/c", 1001, 300)] {
        std::fs::write(root.join(file), b"x").unwrap();
        std::os::unix::fs::chown(root.join(file), Some(uid), Some(gid)).unwrap();
    }
    let out = tmp.path().join("out");
    let cfg = config(
        tmp.path(),
        "agg.toml",
        &format!(
            "[snapshot]\nversion = \"v\"\n{rec}[aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 2\nreference_time = 1767225600\n\
             [sources.w]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/\"\n[sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
            rec = records(tmp.path(), "posix-read"),
            r = root.display(),
            o = out.display()
        ),
    );
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, doc) in documents(&out, "ingest-") {
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            if let Some(p) = e["content"]["principal"].as_str() {
                let mut vis: Vec<String> =
                    e["visible_to"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
                vis.sort();
                got.insert(p.to_string(), vis);
            }
        }
    }
    let (alice, bob, admins) = ("urn:u:1000", "urn:u:1001", "urn:admins");
    assert_eq!(got["user:1000"], v(&[alice, admins]), "{s}");
    assert_eq!(got["group:200"], v(&["urn:g:200", admins]));
    // A directory's record: whoever may see the directory itself (read on it, search above).
    assert_eq!(got["dir:/home/alice"], v(&[alice, admins]), "0700: not the group, not public");
    assert_eq!(got["dir:/proj"], v(&[alice, "urn:g:200", admins]), "0750: the group, not public");
    assert_eq!(got["dir:/pub"], v(&[bob, "urn:g:300", "public", admins]), "0755");
    // /home is 0755, but its statistics cover /home/alice (0700): only those who may list
    // every directory below it see them.
    assert_eq!(got["dir:/home"], v(&[admins]), "not public: alice's files are counted there");
}

#[test]
fn a_versioned_run_republishes_what_a_directory_chmod_hid() {
    if !is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let home = root.join("home/alice");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&home, Some(1000), Some(100)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    for f in ["a", "b", "c"] {
        std::fs::write(home.join(f), b"x").unwrap();
        std::os::unix::fs::chown(home.join(f), Some(1000), Some(100)).unwrap();
        std::fs::set_permissions(home.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::write(root.join("home/other"), b"x").unwrap();
    let run = |n: u32| {
        let out = tmp.path().join(format!("out{n}"));
        let cfg = config(
            tmp.path(),
            "versioned.toml",
            &format!(
                "[snapshot]\nversion = \"v{n}\"\nstate_dir = \"{t}/state\"\nmax_delete_ratio = 1.0\n{rec}[sources.w]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/\"\n[sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
                t = tmp.path().display(),
                rec = records(tmp.path(), "posix-read"),
                r = root.display(),
                o = out.display()
            ),
        );
        let (code, s, err) = snapshot(&cfg, &[]);
        assert_eq!(code, 0, "{err}");
        (s, visible(&ingested(&out)))
    };
    let (s1, v1) = run(1);
    assert_eq!(s1["created"], 4, "{s1}");
    assert_eq!(v1["/home/alice/a"], v(&["urn:u:1000", "urn:g:100", "public", "urn:admins"]));
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (s2, v2) = run(2);
    // Only the three files below the directory changed: their visible_to.
    assert_eq!((s2["updated"].as_u64(), s2["unchanged"].as_u64()), (Some(3), Some(1)), "{s2}");
    for f in ["a", "b", "c"] {
        assert_eq!(v2[&format!("/home/alice/{f}")], v(&["urn:u:1000", "urn:admins"]), "{f}");
    }
}

#[test]
fn a_record_nobody_mapped_may_see_is_withdrawn_naming_its_owner_never_widened() {
    if !is_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let private = root.join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    // An unmapped owner's 0700 directory: nobody mapped may see what is in it.
    std::os::unix::fs::chown(&private, Some(4242), Some(4243)).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(private.join("f"), b"x").unwrap();
    std::os::unix::fs::chown(private.join("f"), Some(4242), Some(4243)).unwrap();
    std::fs::write(root.join("open"), b"x").unwrap();
    let records = records(tmp.path(), "posix-read").replace("admins = [\"urn:admins\"]\n", "");
    let cfg = config(
        tmp.path(),
        "nobody.toml",
        &format!(
            "[snapshot]\nversion = \"v\"\nmax_reject_ratio = 1.0\nrejects_file = \"{t}/rejects.jsonl\"\n{records}[sources.w]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/\"\n[sinks.o]\ntype = \"file\"\ndir = \"{t}/out\"\n",
            t = tmp.path().display(),
            r = root.display()
        ),
    );
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (s["records"].as_u64(), s["rejects"].as_u64(), s["withdrawn"].as_u64()),
        (Some(1), Some(0), Some(1)),
        "{s}"
    );
    // Withdrawn (not indexed, and deleted where it was), the warning naming its owner.
    assert!(err.contains("/private/f") && err.contains("uid 4242") && err.contains("gid 4243"), "{err}");
    let got = visible(&ingested(&tmp.path().join("out")));
    assert_eq!(got.keys().collect::<Vec<_>>(), vec!["/open"], "never widened to anyone");
    assert_eq!(got["/open"], v(&["public"]));
}
