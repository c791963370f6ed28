//! Helpers shared by the end-to-end tests: run the real `icicle` binary on generated data.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use icicle_core::rng::Rng;
use serde_json::Value;

/// Run `icicle` with `args`; returns (exit code, stdout, stderr).
pub fn icicle(args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_icicle"));
    cmd.args(args).env_remove("RUST_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run icicle");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Write a config file.
pub fn config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Run a snapshot with `cfg` and return the JSON summary.
pub fn snapshot(cfg: &Path, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["snapshot", "--json", "-c", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, out, err) = icicle(&args, &[]);
    let v = serde_json::from_str(&out).unwrap_or(Value::Null);
    (code, v, err)
}

/// Every GMetaEntry in the `ingest-*.json` documents of a file sink directory, by path.
pub fn ingested(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (_, doc) in documents(dir, "ingest-") {
        assert_eq!(doc["ingest_type"], "GMetaList");
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            let path = e["content"]["path"].as_str().unwrap().to_string();
            assert!(out.insert(path.clone(), e.clone()).is_none(), "duplicate record {path}");
        }
    }
    out
}

/// The documents with `prefix` in a file sink directory, in file-name order, with sizes.
pub fn documents(dir: &Path, prefix: &str) -> Vec<(u64, Value)> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (bytes.len() as u64, serde_json::from_slice(&bytes).unwrap())
        })
        .collect()
}

/// A changelog journal's lines as the monitor reads them (bytes escaped: a name may not be
/// UTF-8).
pub fn journal_lines(journal: &Path) -> Vec<String> {
    std::fs::read_to_string(journal).unwrap().lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

/// The indexes of a changelog journal's records, in order.
pub fn journal_indexes(journal: &Path) -> Vec<u64> {
    journal_lines(journal).iter().filter_map(|l| l.split(' ').next()?.parse().ok()).collect()
}

/// `icicle monitor --drain --json -c CFG`: its report, or why it failed.
pub fn drain_report(cfg: &Path) -> Result<Value, String> {
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", &cfg.to_string_lossy()], &[]);
    if code != 0 {
        return Err(format!("monitor exited {code}: {err}"));
    }
    serde_json::from_str(&stdout).map_err(|e| format!("report: {e}: {stdout}"))
}

/// The JSON documents a file sink wrote to `dir` (ingests and deletes), in the order written.
pub fn sent_documents(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "json"));
    files.sort_by_key(|p| p.file_name().unwrap().to_string_lossy().split('-').nth(1).unwrap_or("").to_string());
    files.into_iter().map(|f| serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap()).collect()
}

/// The committed manifest directory of a versioned run's `state_dir` (the one `CURRENT` names).
pub fn current_manifest(state: &Path) -> PathBuf {
    let name = std::fs::read_to_string(state.join("CURRENT")).expect("a committed manifest");
    state.join(name.trim())
}

/// The deleted subjects in a file sink directory.
pub fn deleted(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = documents(dir, "delete-")
        .into_iter()
        .flat_map(|(_, d)| {
            d["subjects"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect::<Vec<_>>()
        })
        .collect();
    v.sort();
    v
}

/// A `walk` snapshot of `root` (paths relative to it) through a file sink, as an index.
pub fn walk_snapshot(tmp: &Path, root: &Path, name: &str) -> BTreeMap<String, Value> {
    walk_snapshot_with(tmp, root, name, "[records]\nvisible_to = [\"public\"]\n")
}

/// [`walk_snapshot`] with its own `[records]` section.
pub fn walk_snapshot_with(tmp: &Path, root: &Path, name: &str, records: &str) -> BTreeMap<String, Value> {
    walk_snapshot_rejecting(tmp, root, name, records, 0)
}

/// [`walk_snapshot`] that enters file systems mounted below `root` (`xdev = false`), as the
/// local monitor does.
pub fn walk_snapshot_across_mounts(tmp: &Path, root: &Path, name: &str) -> BTreeMap<String, Value> {
    walk_snapshot_of(tmp, root, name, "[records]\nvisible_to = [\"public\"]\n", 0, "xdev = false\n")
}

/// [`walk_snapshot_with`] that must reject exactly `allowed_rejects` entries.
pub fn walk_snapshot_rejecting(
    tmp: &Path,
    root: &Path,
    name: &str,
    records: &str,
    allowed_rejects: u64,
) -> BTreeMap<String, Value> {
    walk_snapshot_of(tmp, root, name, records, allowed_rejects, "")
}

fn walk_snapshot_of(
    tmp: &Path,
    root: &Path,
    name: &str,
    records: &str,
    allowed_rejects: u64,
    walk: &str,
) -> BTreeMap<String, Value> {
    let out = tmp.join(name);
    let _ = std::fs::remove_dir_all(&out);
    let cfg = config(
        tmp,
        &format!("{name}.toml"),
        &format!(
            "[snapshot]\nversion = \"v\"\nrejects_file = \"{t}/{name}-rejects.jsonl\"\n{records}[sources.w]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/\"\n{walk}[sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
            t = tmp.display(),
            r = root.display(),
            o = out.display()
        ),
    );
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(s["rejects"].as_u64(), Some(allowed_rejects), "{s}");
    ingested(&out)
}

/// Apply a file sink's documents, in their sequence order, to `index`.
pub fn apply(index: &mut BTreeMap<String, Value>, dir: &Path) {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "json"));
    files.sort_by_key(|p| p.file_name().unwrap().to_string_lossy().split('-').nth(1).unwrap_or("").to_string());
    for f in files {
        let doc: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        if let Some(subjects) = doc["subjects"].as_array() {
            for s in subjects {
                remove_subject(index, s.as_str().unwrap());
            }
        } else {
            for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
                index.insert(e["content"]["path"].as_str().unwrap().to_string(), e.clone());
            }
        }
    }
}

/// Every upsert in the documents of a `file` sink's directory, in the order sent.
pub fn upserts(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "json"));
    files.sort_by_key(|p| p.file_name().unwrap().to_string_lossy().split('-').nth(1).unwrap_or("").to_string());
    let mut out = Vec::new();
    for f in files {
        let doc: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        out.extend(doc["ingest_data"]["gmeta"].as_array().into_iter().flatten().cloned());
    }
    out
}

/// Remove the record a delete names: the index is keyed by path, and a path too long for a
/// subject is sent under its hash (`icicle_gmeta::subject_for`).
fn remove_subject(index: &mut BTreeMap<String, Value>, subject: &str) {
    if subject.starts_with(icicle_gmeta::HASHED_SUBJECT_PREFIX) {
        index.retain(|_, e| e["subject"] != subject);
    } else {
        index.remove(subject);
    }
}

/// What must agree between an index and a fresh snapshot, by path: every field but atime.
pub fn comparable(index: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    // atime is not journaled (ATIME is outside Lustre's default changelog mask).
    index
        .iter()
        .map(|(p, e)| {
            let c = &e["content"];
            (
                p.clone(),
                serde_json::json!([c["type"], c["size"], c["uid"], c["gid"], c["mode"], c["mtime"], c["ctime"]]),
            )
        })
        .collect()
}

/// Paths missing from, extra in, and different in the index compared with the fresh snapshot.
pub fn compare(
    index: &BTreeMap<String, Value>,
    fresh: &BTreeMap<String, Value>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (got, want) = (comparable(index), comparable(fresh));
    let missing = want.keys().filter(|k| !got.contains_key(*k)).cloned().collect();
    let extra = got.keys().filter(|k| !want.contains_key(*k)).cloned().collect();
    let differ = want.keys().filter(|k| got.get(*k).is_some_and(|g| g != &want[*k])).cloned().collect();
    (missing, extra, differ)
}

/// A test's scratch directory; `ICICLE_TEST_KEEP=1` keeps it (its path is printed).
pub fn test_dir() -> tempfile::TempDir {
    let keep = std::env::var("ICICLE_TEST_KEEP").is_ok();
    let dir = tempfile::Builder::new().disable_cleanup(keep).tempdir().unwrap();
    if keep {
        eprintln!("kept: {}", dir.path().display());
    }
    dir
}

/// The workload seed: random in every run (printed, so a failing test's output names it);
/// `ICICLE_TEST_SEED=N` replays one.
pub fn test_seed() -> u64 {
    let seed = std::env::var("ICICLE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64 ^ d.as_secs())
            .unwrap_or(7);
        nanos % 1_000_000
    });
    eprintln!("workload seed {seed} (replay with ICICLE_TEST_SEED={seed})");
    seed
}

/// `files` objects that predate monitoring under `tmp/fs` (journal `tmp/lfs/changelog`), and
/// the index a snapshot of them gives (written to `tmp/before`): where every monitor test
/// starts. Returns (root, journal, index).
pub fn preexisting_fs(tmp: &Path, files: usize, seed: u64) -> (PathBuf, PathBuf, BTreeMap<String, Value>) {
    let root = tmp.join("fs");
    let journal = tmp.join("lfs/changelog");
    let mut w = icicle_testkit::lustre::Workload::open(&root, &journal, seed).unwrap();
    w.preexisting(files).unwrap();
    drop(w);
    let index = walk_snapshot(tmp, &root, "before");
    (root, journal, index)
}

/// How many times the crash tests kill the monitor (`ICICLE_TEST_KILLS`, default 6).
pub fn test_kills() -> u32 {
    std::env::var("ICICLE_TEST_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(6)
}

/// Start `icicle monitor -c cfg`, let it work for `min_ms` plus a random part of `spread_ms`
/// (from `rng`), then SIGKILL it: no chance to clean up.
pub fn run_monitor_then_kill(cfg: &Path, rng: &mut Rng, min_ms: u64, spread_ms: u64) {
    // `ICICLE_TEST_MONITOR_LOG=FILE` appends each run's log there (with `RUST_LOG`).
    let stderr = match std::env::var("ICICLE_TEST_MONITOR_LOG") {
        Ok(f) => std::fs::OpenOptions::new().create(true).append(true).open(f).unwrap().into(),
        Err(_) => std::process::Stdio::null(),
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "-c", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(min_ms + rng.below(spread_ms)));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The Kafka broker: `ICICLE_TEST_KAFKA`, else the one `scripts/services.sh start` runs.
pub fn kafka() -> String {
    if let Ok(k) = std::env::var("ICICLE_TEST_KAFKA") {
        return k;
    }
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/run/kafka.addr");
    std::fs::read_to_string(&f).map(|s| s.trim().to_string()).unwrap_or_else(|_| {
        panic!("no Kafka broker: run the tests with scripts/test.sh (or scripts/services.sh start)")
    })
}

/// The monitor's `RUST_LOG` (`ICICLE_TEST_MONITOR_RUST_LOG`, e.g.
/// `icicle_plugins_local=trace,info` to trace every event and compare).
pub fn monitor_log_filter() -> String {
    std::env::var("ICICLE_TEST_MONITOR_RUST_LOG").unwrap_or_else(|_| "info".into())
}

/// Start `icicle monitor --until-idle IDLE` on the local monitor `cfg` (state in `tmp/state`,
/// log in `tmp/monitor.log`); wait until its seed walk is delivered.
pub fn start_monitor(tmp: &Path, cfg: &Path, idle: f64) -> Child {
    let child = spawn_monitor(tmp, cfg, idle);
    let ready = tmp.join("state/local.checkpoint.json");
    let started = Instant::now();
    while !ready.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the monitor never checkpointed its seed walk: {}",
            log_of(tmp)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Start `icicle monitor --until-idle IDLE` on `cfg` (log in `tmp/monitor.log`), not waiting.
pub fn spawn_monitor(tmp: &Path, cfg: &Path, idle: f64) -> Child {
    let log = std::fs::File::create(tmp.join("monitor.log")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "--json", "--until-idle", &idle.to_string(), "-c", cfg.to_str().unwrap()])
        .env("RUST_LOG", monitor_log_filter())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("run icicle")
}

/// The monitor's log (`tmp/monitor.log`), empty when there is none.
pub fn log_of(tmp: &Path) -> String {
    std::fs::read_to_string(tmp.join("monitor.log")).unwrap_or_default()
}

/// Wait for the monitor to exit on its own (idle); its JSON report.
pub fn finish(tmp: &Path, child: Child) -> Value {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "monitor failed: {}", log_of(tmp));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("report: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Give `p` a random POSIX access ACL (some of `uids` and `gids` named, a mask), written as
/// the kernel's xattr; the kernel sets the mode's group bits to the mask.
pub fn set_random_acl(p: &Path, rng: &mut Rng, uids: &[u32], gids: &[u32]) {
    use std::os::unix::fs::MetadataExt;
    let mode = std::fs::symlink_metadata(p).unwrap().mode();
    let bits = |rng: &mut Rng| rng.below(8) as u16;
    let mut entries: Vec<(u16, u16, u32)> = vec![(0x01, ((mode >> 6) & 7) as u16, u32::MAX)];
    for &u in uids {
        if rng.below(3) == 0 {
            entries.push((0x02, bits(rng), u));
        }
    }
    entries.push((0x04, bits(rng), u32::MAX));
    for &g in gids {
        if rng.below(3) == 0 {
            entries.push((0x08, bits(rng), g));
        }
    }
    entries.push((0x10, bits(rng), u32::MAX));
    entries.push((0x20, (mode & 7) as u16, u32::MAX));
    let mut xattr = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        xattr.extend_from_slice(&tag.to_le_bytes());
        xattr.extend_from_slice(&perm.to_le_bytes());
        xattr.extend_from_slice(&id.to_le_bytes());
    }
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated strings and a buffer of the length passed.
    let r = unsafe {
        libc::setxattr(c.as_ptr(), c"system.posix_acl_access".as_ptr(), xattr.as_ptr().cast(), xattr.len(), 0)
    };
    assert_eq!(r, 0, "setxattr {}: {}", p.display(), std::io::Error::last_os_error());
}

/// A Kafka-protocol broker (tansu) of one test's own, under `dir/services`, stopped when
/// dropped: one a test may pause (SIGSTOP) without touching the shared one.
pub struct OwnBroker {
    run: std::path::PathBuf,
    /// Its `host:port`.
    pub addr: String,
    pid: i32,
}

impl OwnBroker {
    /// Start one (`scripts/services.sh start kafka` with its own run directory).
    pub fn start(dir: &Path) -> OwnBroker {
        let run = dir.join("services");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new("bash")
            .arg(repo.join("scripts/services.sh"))
            .args(["start", "kafka"])
            .env("ICICLE_SERVICES_RUN", &run)
            .current_dir(repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "starting a broker: {}", String::from_utf8_lossy(&out.stderr));
        let addr = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("KAFKA=").map(str::to_string))
            .expect("KAFKA=host:port");
        let pid = std::fs::read_to_string(run.join("kafka.pid")).unwrap().trim().parse().unwrap();
        OwnBroker { run, addr, pid }
    }

    /// Send it `sig` (SIGSTOP, SIGCONT).
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the broker's own pid.
        unsafe { libc::kill(self.pid, sig) };
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let _ = Command::new("bash")
            .arg(repo.join("scripts/services.sh"))
            .args(["stop", "kafka"])
            .env("ICICLE_SERVICES_RUN", &self.run)
            .current_dir(repo)
            .status();
    }
}

/// The index a Kafka sink's messages build on top of `index` (last operation per subject wins).
#[cfg(feature = "kafka")]
pub fn apply_topic(index: &mut BTreeMap<String, Value>, messages: &[icicle_plugins_kafka::produce::Consumed]) {
    for m in messages {
        let v: Value = serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        if v["op"] == "upsert" {
            index.insert(v["entry"]["content"]["path"].as_str().unwrap().to_string(), v["entry"].clone());
        } else {
            remove_subject(index, v["subject"].as_str().unwrap());
        }
    }
}

/// The address a monitor logging to `tmp/monitor.log` serves its metrics on (waits for the
/// line, at most 60 s).
pub fn metrics_addr_in_log(tmp: &Path) -> String {
    let started = Instant::now();
    loop {
        if let Some(a) = log_of(tmp)
            .lines()
            .find_map(|l| l.split("metrics on http://").nth(1).map(|r| r.split('/').next().unwrap_or("").to_string()))
        {
            return a;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no metrics address: {}", log_of(tmp));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every directory and regular file below `root` (not `root` itself), as `/`-rooted paths
/// relative to it (escaped), sorted per directory.
pub fn tree_entries(root: &Path) -> (Vec<String>, Vec<String>) {
    let (mut dirs, mut files) = (Vec::new(), Vec::new());
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut rd: Vec<PathBuf> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().path()).collect();
        rd.sort();
        for p in rd {
            let rel = format!("/{}", icicle_core::name::from_os(p.strip_prefix(root).unwrap()));
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                dirs.push(rel);
                stack.push(p);
            } else if md.is_file() {
                files.push(rel);
            }
        }
    }
    (dirs, files)
}

/// The permission-relevant part of `p` (not following a link): mode, owners, access ACL.
pub fn perm_of(p: &Path) -> icicle_core::access::Perm {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    icicle_core::access::Perm {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        acl: icicle_core::access::Acl::read(p).map(std::sync::Arc::new),
    }
}

/// The directories from `/` down to `file`'s parent, as the kernel walks them.
pub fn chain_of(file: &Path) -> Vec<icicle_core::access::Perm> {
    let mut dirs: Vec<PathBuf> = file.ancestors().skip(1).map(Path::to_path_buf).collect();
    dirs.reverse();
    dirs.iter().map(|d| perm_of(d)).collect()
}

/// A random tree under `root` (which stays as it is): `files / 15` directories and `files`
/// one-byte files, each owned by one of `uids` and `gids` with a random mode (directories'
/// modes set last, deepest first, so building did not need them); one object in `acl_one_in`
/// gets a random ACL naming some of them (0: none). Returns the files. Needs root.
pub fn random_tree(
    root: &Path,
    rng: &mut Rng,
    files: usize,
    uids: &[u32],
    gids: &[u32],
    acl_one_in: u64,
) -> Vec<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let pick = |rng: &mut Rng, v: &[u32]| v[rng.below(v.len() as u64) as usize];
    let modes = [0o700, 0o750, 0o755, 0o711, 0o705, 0o770, 0o775, 0o751, 0o500, 0o055, 0o005, 0o000];
    let fmodes = [0o600, 0o640, 0o644, 0o604, 0o400, 0o440, 0o444, 0o060, 0o006, 0o000, 0o666];
    let mut dirs = vec![root.to_path_buf()];
    for i in 0..files / 15 {
        let parent = dirs[rng.below(dirs.len() as u64) as usize].clone();
        let d = parent.join(format!("d{i}"));
        std::fs::create_dir(&d).unwrap();
        dirs.push(d);
    }
    let mut out = Vec::new();
    for i in 0..files {
        let d = &dirs[rng.below(dirs.len() as u64) as usize];
        let f = d.join(format!("f{i}"));
        std::fs::write(&f, b"x").unwrap();
        std::os::unix::fs::chown(&f, Some(pick(rng, uids)), Some(pick(rng, gids))).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(fmodes[rng.below(fmodes.len() as u64) as usize]))
            .unwrap();
        out.push(f);
    }
    for d in dirs.iter().skip(1).rev() {
        std::os::unix::fs::chown(d, Some(pick(rng, uids)), Some(pick(rng, gids))).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(modes[rng.below(modes.len() as u64) as usize]))
            .unwrap();
    }
    if acl_one_in > 0 {
        for p in dirs.iter().skip(1).chain(&out) {
            if rng.below(acl_one_in) == 0 {
                set_random_acl(p, rng, uids, gids);
            }
        }
    }
    out
}

/// Stop `child` with SIGTERM (so it can clean up: the Globus emulator removes its temporary
/// index directories) and wait for it; SIGKILL after 10 s.
pub fn terminate(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid, which `wait` has not reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// One HTTP/1.1 request over `stream` (`Connection: close`); (status, JSON body).
pub fn exchange(
    mut stream: impl std::io::Read + std::io::Write,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let rest =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(rest) } else { rest.to_string() };
    (status, serde_json::from_str(&rest).unwrap_or(Value::Null))
}

/// The body of a chunked HTTP/1.1 answer.
pub fn dechunk(s: &str) -> String {
    let (mut out, mut rest) = (String::new(), s);
    while let Some((len, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

/// Percent-encoding for a query parameter.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_./".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Make `cmd` run as `uid` with exactly `groups` (the first its primary group).
pub fn as_user(cmd: &mut Command, uid: u32, groups: &[u32]) {
    let gs: Vec<libc::gid_t> = groups.to_vec();
    let primary = groups.first().copied().unwrap_or(uid);
    // Groups, then the group, then the user (setgroups is refused once the uid is dropped).
    // SAFETY: only system calls between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            if libc::setgroups(gs.len(), gs.as_ptr()) != 0
                || libc::setresgid(primary, primary, primary) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The `icicle-testkit` binary built beside `icicle` (its fake `lfs`, workloads, producers).
pub fn testkit_bin() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit")
}

/// The Python with the tests' packages (prometheus_client, globus-sdk): `ICICLE_TEST_PYTHON`
/// (the virtualenv scripts/test.sh makes under .tools), else `python3`.
pub fn python() -> String {
    std::env::var("ICICLE_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}
