//! Issue #38's must-show, with real Unix users: every answer `icicle serve` gives a user is a
//! subset of what the kernel lets that user read, results, totals and facet counts included.
//!
//! Four accounts and three groups are made with `useradd`/`groupadd` (uids 43001…43004, gids
//! 44001…44003, with supplementary groups; removed at the end unless they existed before). Per
//! seed, a random tree (random modes, owners, groups, ACLs, and symbolic links) is walked by the
//! real binary into an `index` sink under `records.visible_to = "posix-read"`, with a principals
//! file mapping the test ids, and `icicle serve` answers it over a Unix socket and over HTTP with
//! one token per user. The kernel's answer comes from a child running as each user (this test
//! binary again, with the user's uid and groups): `lstat` on the path, `opendir` on its parent
//! and `open` (a link: `readlink`) on the file, which is what the rule's doc says `posix-read`
//! asks. Every answer — the socket peer's and the token's searches, scrolls, `num_subjects`,
//! `get_subject`, `icicle find --as` over the directory, and `icicle find --socket` as the user
//! and `--server --token-file` when the binary has them — must be within the kernel's set (a
//! leak is reported as such), and must equal the rule's answer: the records whose published
//! `visible_to` names one of the user's principals, which in turn equals what
//! `icicle_core::access::can_see` gives for the principals the encoder judges. The rule for a
//! user with known groups is checked against the kernel on the same tree.
//!
//! Needs root (CI runs as root, where not being root fails); skipped otherwise, saying so.
//! Three random seeds a run, each printed; `ICICLE_VISIBILITY_SEED=N` replays one.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{as_user, chain_of, exchange, perm_of, random_tree, set_random_acl, url_encode, Rng};
use icicle_core::access::{can_see, AccessPolicy, Asker, Named, Perm};
use serde_json::{json, Value};

/// A test account.
struct User {
    uid: u32,
    name: &'static str,
    /// Its primary group.
    gid: u32,
    /// Its supplementary groups.
    extra: &'static [u32],
}

impl User {
    /// Primary group first, then the supplementary ones.
    fn groups(&self) -> Vec<u32> {
        std::iter::once(self.gid).chain(self.extra.iter().copied()).collect()
    }
}

const USERS: [User; 4] = [
    User { uid: 43001, name: "icvis-u1", gid: 44001, extra: &[44002] },
    User { uid: 43002, name: "icvis-u2", gid: 44002, extra: &[] },
    User { uid: 43003, name: "icvis-u3", gid: 44003, extra: &[44001, 44002] },
    User { uid: 43004, name: "icvis-u4", gid: 44001, extra: &[44003] },
];
const GROUPS: [(u32, &str); 3] = [(44001, "icvis-g1"), (44002, "icvis-g2"), (44003, "icvis-g3")];
/// A uid with no account, owning nothing, in a group nothing names.
const STRANGER: (u32, u32) = (43999, 44999);
const INDEX: &str = "3b8e7c52-0d1f-4a6e-9c2b-7f4a1e5d8c90";
/// Set in the child this test runs as another user: what it does there.
const CHILD: &str = "ICICLE_VISIBILITY_CHILD";
const CHILD_TEST: &str = "helper_running_as_a_test_user";

fn user_urn(uid: u32) -> String {
    format!("urn:icicle-vis:user:{uid}")
}

fn group_urn(gid: u32) -> String {
    format!("urn:icicle-vis:group:{gid}")
}

/// The principals an asker has: `public`, its user's URN, its groups' URNs.
fn principals_of(uid: Option<u32>, groups: &[u32]) -> BTreeSet<String> {
    let mut p: BTreeSet<String> = groups.iter().map(|g| group_urn(*g)).collect();
    p.extend(uid.map(user_urn));
    p.insert("public".into());
    p
}

// ---------------------------------------------------------------------------------------------
// The accounts.

/// The test accounts, made when missing; those made here are removed when dropped. A lock file
/// keeps two runs of this test on one machine from sharing (and removing) them.
struct Accounts {
    _lock: std::fs::File,
    users: Vec<&'static str>,
    groups: Vec<&'static str>,
}

/// `getent DB KEY`: the entry's fields, or `None`.
fn getent(db: &str, key: &str) -> Option<Vec<String>> {
    let out = Command::new("getent").args([db, key]).output().expect("getent");
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).lines().next()?.split(':').map(str::to_string).collect())
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e} (the passwd package)"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Accounts {
    fn ensure() -> Accounts {
        let lock = std::fs::File::create(std::env::temp_dir().join("icicle-visibility-users.lock")).unwrap();
        // SAFETY: flock on a descriptor this function owns.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0, "locking the accounts");
        let mut made = Accounts { _lock: lock, users: Vec::new(), groups: Vec::new() };
        for (gid, name) in GROUPS {
            let id = gid.to_string();
            match (getent("group", name), getent("group", &id)) {
                (Some(e), _) => assert_eq!(e[2], id, "group {name} exists with another gid: {e:?}"),
                (None, Some(e)) => panic!("gid {gid} is group {:?} already", e[0]),
                (None, None) => {
                    run("groupadd", &["-g", &id, name]);
                    made.groups.push(name);
                }
            }
        }
        for u in &USERS {
            let (id, gid) = (u.uid.to_string(), u.gid.to_string());
            let extra: Vec<String> = u.extra.iter().map(u32::to_string).collect();
            let extra = extra.join(",");
            match (getent("passwd", u.name), getent("passwd", &id)) {
                (Some(e), _) => {
                    assert_eq!(e[2], id, "user {} exists with another uid: {e:?}", u.name);
                    run("usermod", &["-g", &gid, "-G", &extra, u.name]);
                }
                (None, Some(e)) => panic!("uid {} is user {:?} already", u.uid, e[0]),
                (None, None) => {
                    let mut args = vec!["-u", &id, "-g", &gid, "-M", "-N", "-s", "/usr/sbin/nologin"];
                    if !extra.is_empty() {
                        args.extend(["-G", &extra]);
                    }
                    args.push(u.name);
                    run("useradd", &args);
                    made.users.push(u.name);
                }
            }
            // The account's groups are what serve's getgrouplist and the kernel probe use.
            let out = Command::new("id").args(["-G", u.name]).output().unwrap();
            let got: BTreeSet<u32> =
                String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|g| g.parse().ok()).collect();
            assert_eq!(got, u.groups().into_iter().collect(), "id -G {}", u.name);
        }
        made
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for u in &self.users {
            let _ = Command::new("userdel").arg(u).status();
        }
        for g in &self.groups {
            let _ = Command::new("groupdel").arg(g).status();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Children running as a test user.

/// This test binary again as `uid` (with `groups`), running [`helper_running_as_a_test_user`]
/// for `task` with `input` on its stdin and `envs`; the lines it answers.
fn helper(uid: u32, groups: &[u32], task: &str, envs: &[(&str, &str)], input: &[u8]) -> Vec<String> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(CHILD, task)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    as_user(&mut cmd, uid, groups);
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the helper ({task}) as uid {uid} {groups:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.strip_prefix("@@ ")).map(str::to_string).collect()
}

/// What `posix-read` asks of the kernel for one path, as whoever runs this: the path can be
/// looked up (search on every directory above), its directory read (listed), and the file
/// opened for reading (a link: read).
fn kernel_lets_read(p: &Path) -> bool {
    let Ok(md) = std::fs::symlink_metadata(p) else { return false };
    if std::fs::read_dir(p.parent().unwrap_or(Path::new("/"))).is_err() {
        return false;
    }
    if md.file_type().is_symlink() {
        std::fs::read_link(p).is_ok()
    } else {
        std::fs::File::open(p).is_ok()
    }
}

/// Not a test of its own: the child [`helper`] starts as a test user. Without its variable set
/// it does nothing. `probe`: paths (NUL-separated) on stdin, one `1`/`0` each as
/// [`kernel_lets_read`] answers. `socket`: one request (`{"method", "path", "body"}`) to the
/// Unix socket `ICICLE_VISIBILITY_SOCKET`; its status and body.
#[test]
fn helper_running_as_a_test_user() {
    let Ok(task) = std::env::var(CHILD) else { return };
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).unwrap();
    match task.as_str() {
        "probe" => {
            let answers: String = input
                .split(|b| *b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| if kernel_lets_read(Path::new(OsStr::from_bytes(p))) { '1' } else { '0' })
                .collect();
            println!("@@ {answers}");
        }
        "socket" => {
            let req: Value = serde_json::from_slice(&input).unwrap();
            let socket = std::env::var("ICICLE_VISIBILITY_SOCKET").unwrap();
            let stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
            let body = (!req["body"].is_null()).then_some(&req["body"]);
            let (status, body) =
                exchange(stream, req["method"].as_str().unwrap(), req["path"].as_str().unwrap(), None, body);
            println!("@@ {}", json!({"status": status, "body": body}));
        }
        other => panic!("unknown helper task {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// icicle serve and HTTP.

/// A running `icicle serve`; stopped (SIGTERM, then waited for) when dropped.
struct Serve {
    child: Child,
    addr: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Serve {
    fn start(index: &Path, socket: &Path, tokens: &Path, cfg: &Path) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_icicle"))
            .args(["serve", "--index", index.to_str().unwrap(), "--listen", "127.0.0.1:0", "--index-id", INDEX])
            .args(["--socket", socket.to_str().unwrap(), "--tokens", tokens.to_str().unwrap()])
            .args(["-c", cfg.to_str().unwrap()])
            .env_remove("RUST_LOG")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (mut addr, mut unix) = (None, false);
        for line in lines.by_ref() {
            let line = line.unwrap();
            log.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(at) = line.find("at http://") {
                addr = Some(line[at + "at http://".len()..].trim().to_string());
            }
            unix |= line.contains("at unix:");
            if addr.is_some() && unix {
                break;
            }
        }
        let Some(addr) = addr.filter(|_| unix) else { panic!("icicle serve did not start:\n{}", log.lock().unwrap()) };
        let keep = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                keep.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Serve { child, addr, log }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        if !status.success() && !std::thread::panicking() {
            panic!("icicle serve exited with {status}:\n{}", self.log.lock().unwrap());
        }
    }
}

/// How a question reaches serve: over HTTP with a token (or none), or over the socket as a
/// user (a child with that uid and groups).
#[derive(Clone, Copy)]
enum Via<'a> {
    Http { addr: &'a str, token: Option<&'a str> },
    Socket { path: &'a Path, uid: u32, groups: &'a [u32] },
}

impl Via<'_> {
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        match *self {
            Via::Http { addr, token } => {
                exchange(std::net::TcpStream::connect(addr).unwrap(), method, path, token, body)
            }
            Via::Socket { path: socket, uid, groups } => {
                let req = json!({"method": method, "path": path, "body": body});
                let envs = [("ICICLE_VISIBILITY_SOCKET", socket.to_str().unwrap())];
                let lines = helper(uid, groups, "socket", &envs, req.to_string().as_bytes());
                let v: Value = serde_json::from_str(lines.first().expect("the helper's answer")).unwrap();
                (v["status"].as_u64().unwrap_or(0) as u16, v["body"].clone())
            }
        }
    }

    fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (code, v) = self.request(method, path, body);
        assert_eq!(code, 200, "{method} {path} {body:?}: {v}");
        v
    }
}

/// One answer: the records it names, and what it counts (total, facet buckets by (facet,
/// value)) where it counts.
#[derive(Default)]
struct Answer {
    paths: Option<BTreeSet<String>>,
    total: Option<u64>,
    facets: Option<BTreeMap<(String, String), u64>>,
}

/// A JSON value as a facet key: strings as they are, numbers as written.
fn key(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// `q: *` with `terms` facets on the owner uid and the type, every result on one page.
fn searched(via: Via<'_>) -> Answer {
    let body = json!({"q": "*", "limit": 10_000, "facets": [
        {"name": "uid", "field_name": "uid", "size": 1000},
        {"name": "type", "field_name": "type", "size": 1000}]});
    let v = via.ok("POST", &format!("/v1/index/{INDEX}/search"), Some(&body));
    let paths = v["gmeta"].as_array().unwrap().iter().map(|g| g["subject"].as_str().unwrap().to_string()).collect();
    let mut facets = BTreeMap::new();
    for f in v["facet_results"].as_array().unwrap() {
        for b in f["buckets"].as_array().unwrap() {
            facets.insert((key(&f["name"]), key(&b["value"])), b["count"].as_u64().unwrap());
        }
    }
    Answer { paths: Some(paths), total: v["total"].as_u64(), facets: Some(facets) }
}

/// Every subject a scroll returns, a few at a time.
fn scrolled(via: Via<'_>) -> Answer {
    let (mut paths, mut marker) = (BTreeSet::new(), Value::Null);
    loop {
        let body = json!({"q": "*", "limit": 23, "marker": marker});
        let page = via.ok("POST", &format!("/v1/index/{INDEX}/scroll"), Some(&body));
        for g in page["gmeta"].as_array().unwrap() {
            assert!(paths.insert(g["subject"].as_str().unwrap().to_string()), "a subject twice in a scroll: {g}");
        }
        if page["has_next_page"] != true {
            return Answer { paths: Some(paths), ..Answer::default() };
        }
        marker = page["marker"].clone();
    }
}

/// The index's description: `num_subjects` as the caller may see them.
fn described(via: Via<'_>) -> Answer {
    let v = via.ok("GET", &format!("/v1/index/{INDEX}"), None);
    Answer { total: v["num_subjects"].as_u64(), ..Answer::default() }
}

/// `get_subject` for a few records the caller may not see (each must be 404) and one it may
/// (200): the paths answered, and those of the asked that it may see.
fn fetched(via: Via<'_>, visible: &BTreeSet<String>, all: &BTreeSet<String>) -> (Answer, BTreeSet<String>) {
    let mut paths = BTreeSet::new();
    let hidden = all.iter().filter(|p| !visible.contains(*p)).take(3);
    let shown = visible.iter().take(1);
    for p in hidden.chain(shown.clone()) {
        let (code, v) = via.request("GET", &format!("/v1/index/{INDEX}/subject?subject={}", url_encode(p)), None);
        match code {
            200 => {
                paths.insert(v["subject"].as_str().unwrap_or(p).to_string());
            }
            404 => {}
            _ => panic!("get_subject {p}: {code} {v}"),
        }
    }
    (Answer { paths: Some(paths), ..Answer::default() }, shown.cloned().collect())
}

/// `icicle find ARGS` (run as `ids` when given); its lines.
fn find(args: &[&str], ids: Option<(u32, &[u32])>, dir: &Path) -> Vec<String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_icicle"));
    cmd.arg("find").args(args).env_remove("RUST_LOG").env_remove("ICICLE_TOKEN").current_dir(dir);
    if let Some((uid, groups)) = ids {
        as_user(&mut cmd, uid, groups);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "icicle find {args:?} as {ids:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

/// `icicle find ARGS ROOT` and `icicle find ARGS --count ROOT`.
fn found(args: &[&str], root: &str, ids: Option<(u32, &[u32])>, dir: &Path) -> Answer {
    let listed: Vec<&str> = args.iter().copied().chain([root]).collect();
    let counted: Vec<&str> = args.iter().copied().chain(["--count", root]).collect();
    let count = find(&counted, ids, dir);
    Answer {
        paths: Some(find(&listed, ids, dir).into_iter().collect()),
        total: Some(count.first().and_then(|c| c.trim().parse().ok()).unwrap_or_else(|| panic!("--count: {count:?}"))),
        facets: None,
    }
}

// ---------------------------------------------------------------------------------------------
// The tree and what the rule says of it.

/// One record of the tree: its path, its permissions from `/` and from the walk's root, its
/// published `visible_to` and content.
struct Entry {
    path: String,
    /// Directories from `/` to the parent (what the kernel walks).
    chain: Vec<Perm>,
    /// Directories from the walk's root to the parent (what the snapshot judged).
    below_root: Vec<Perm>,
    perm: Perm,
    visible_to: BTreeSet<String>,
    uid: String,
    kind: String,
}

impl Entry {
    /// What the index should show to someone with `uid`'s and `groups`' principals: the rule's
    /// answer for each principal the encoder judges (owners and groups along the path and those
    /// ACLs there name, `Identity` and `Group`; `public`, `Everyone`).
    fn rule_for_index(&self, uid: Option<u32>, groups: &[u32]) -> bool {
        let (mut uids, mut gids) = (Vec::new(), Vec::new());
        for p in self.below_root.iter().chain([&self.perm]) {
            uids.push(p.uid);
            gids.push(p.gid);
            for n in p.acl.iter().flat_map(|a| a.named()) {
                match n {
                    Named::User(u) => uids.push(u),
                    Named::Group(g) => gids.push(g),
                }
            }
        }
        let sees = |who: &Asker<'_>| can_see(AccessPolicy::PosixRead, &self.below_root, &self.perm, who);
        uid.is_some_and(|u| uids.contains(&u) && sees(&Asker::Identity(u)))
            || groups.iter().any(|g| gids.contains(g) && sees(&Asker::Group(*g)))
            || sees(&Asker::Everyone)
    }

    /// The permissions along the path, for messages.
    fn why(&self) -> String {
        let show = |p: &Perm| {
            format!("{:o} {}:{}{}", p.mode & 0o7777, p.uid, p.gid, if p.acl.is_some() { " +acl" } else { "" })
        };
        let dirs: Vec<String> = self.below_root.iter().map(show).collect();
        format!(
            "{} (directories from the root: [{}], itself {}; visible_to {:?})",
            self.path,
            dirs.join(", "),
            show(&self.perm),
            self.visible_to
        )
    }
}

/// Per (facet, value), how many of `paths` have it.
fn facet_counts(entries: &BTreeMap<String, Entry>, paths: &BTreeSet<String>) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for p in paths {
        let e = &entries[p];
        *out.entry(("uid".to_string(), e.uid.clone())).or_default() += 1;
        *out.entry(("type".to_string(), e.kind.clone())).or_default() += 1;
    }
    out
}

/// Checks one answer to `who`: within what the kernel lets them read (`kernel`), counts and
/// facets too, else a leak; then equal to the rule's answer (`want`).
struct Judge<'a> {
    seed: u64,
    entries: &'a BTreeMap<String, Entry>,
    failures: Vec<String>,
}

impl Judge<'_> {
    fn check(&mut self, who: &str, via: &str, a: &Answer, kernel: &BTreeSet<String>, want: &BTreeSet<String>) {
        let seed = self.seed;
        let leaks: Vec<&String> = a.paths.iter().flat_map(|p| p.difference(kernel)).collect();
        if let Some(first) = leaks.first() {
            let why = self.entries.get(*first).map_or_else(|| first.to_string(), Entry::why);
            self.failures.push(format!(
                "LEAK seed {seed}: {who} via {via}: {} records the kernel does not let them read, e.g. {why}",
                leaks.len()
            ));
        }
        if let Some(t) = a.total.filter(|t| *t > kernel.len() as u64) {
            self.failures.push(format!(
                "LEAK seed {seed}: {who} via {via}: total {t}, the kernel lets them read {}",
                kernel.len()
            ));
        }
        if let Some(f) = &a.facets {
            let may = facet_counts(self.entries, kernel);
            for (k, n) in f {
                let m = may.get(k).copied().unwrap_or(0);
                if *n > m {
                    self.failures.push(format!(
                        "LEAK seed {seed}: {who} via {via}: facet {k:?} counts {n}, the kernel lets them read {m}"
                    ));
                }
            }
        }
        if let Some(paths) = a.paths.as_ref().filter(|p| *p != want) {
            let extra: Vec<String> = paths.difference(want).take(3).map(|p| self.why(p)).collect();
            let missing: Vec<String> = want.difference(paths).take(3).map(|p| self.why(p)).collect();
            self.failures.push(format!(
                "seed {seed}: {who} via {via}: {} records, the rule's answer is {} (extra {extra:?}, missing {missing:?})",
                paths.len(),
                want.len()
            ));
        }
        if let Some(t) = a.total.filter(|t| *t != want.len() as u64) {
            self.failures
                .push(format!("seed {seed}: {who} via {via}: total {t}, the rule's answer has {}", want.len()));
        }
        let counts = facet_counts(self.entries, want);
        if let Some(f) = a.facets.as_ref().filter(|f| **f != counts) {
            self.failures
                .push(format!("seed {seed}: {who} via {via}: facets {f:?}, the rule's answer counts {counts:?}"));
        }
    }

    fn why(&self, p: &str) -> String {
        self.entries.get(p).map_or_else(|| p.to_string(), Entry::why)
    }
}

/// The seeds: `ICICLE_VISIBILITY_SEED`, else three random ones.
fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("ICICLE_VISIBILITY_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| (d.as_nanos() as u64) % 1_000_000_007)
        .unwrap_or(1);
    vec![base, base + 1, base + 2]
}

#[test]
fn every_answer_to_a_real_user_is_within_what_the_kernel_lets_them_read() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs the tests as root: this one needs it");
        eprintln!("skipped: needs root to make accounts, to build trees owned by them and to ask as them");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_icicle")).args(["find", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let remote_find = help.contains("--socket") && help.contains("--token-file");
    if !remote_find {
        eprintln!("this icicle find has no --socket/--server: those paths are not asked");
    }
    let accounts = Accounts::ensure();
    for seed in seeds() {
        eprintln!("seed {seed} (ICICLE_VISIBILITY_SEED={seed} replays it)");
        one_seed(seed, remote_find);
    }
    drop(accounts);
}

fn one_seed(seed: u64, remote_find: bool) {
    let tmp = common::test_dir();
    let t = tmp.path();
    // Every test user must reach the tree, the socket and `find`'s working directory.
    std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = t.join("tree");
    std::fs::create_dir(&root).unwrap();
    let root = std::fs::canonicalize(&root).unwrap();
    let mut rng = Rng::new(seed);
    let uids: Vec<u32> = USERS.iter().map(|u| u.uid).collect();
    let gids: Vec<u32> = GROUPS.iter().map(|g| g.0).collect();
    let pick = |rng: &mut Rng, v: &[u32]| v[rng.below(v.len() as u64) as usize];
    let n = 60 + rng.below(91) as usize;
    let mut paths = random_tree(&root, &mut rng, n, &uids, &gids, 4);
    // Half the directories opened to others (an ACL's mask and other entry follow the mode),
    // so that some records are everyone's and most users see some.
    let dirs: BTreeSet<PathBuf> =
        paths.iter().flat_map(|f| f.ancestors().skip(1).take_while(|d| *d != root).map(Path::to_path_buf)).collect();
    for d in &dirs {
        if rng.below(2) == 0 {
            let open = [0o755, 0o775, 0o751, 0o711, 0o705];
            let mode = open[rng.below(open.len() as u64) as usize];
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
    // Links beside one file in six, owned by test users: their records are seen by whoever
    // may list their directory.
    for (i, f) in paths.clone().iter().enumerate() {
        if rng.below(6) == 0 {
            let l = f.with_file_name(format!("l{i}"));
            std::os::unix::fs::symlink(f.file_name().unwrap(), &l).unwrap();
            std::os::unix::fs::lchown(&l, Some(pick(&mut rng, &uids)), Some(pick(&mut rng, &gids))).unwrap();
            paths.push(l);
        }
    }
    // The root: a random owner and group, a mode that lets some through, sometimes an ACL.
    std::os::unix::fs::chown(&root, Some(pick(&mut rng, &uids)), Some(pick(&mut rng, &gids))).unwrap();
    let modes = [0o755, 0o755, 0o751, 0o711, 0o775, 0o705, 0o750, 0o770];
    let mode = modes[rng.below(modes.len() as u64) as usize];
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(mode)).unwrap();
    if rng.below(4) == 0 {
        set_random_acl(&root, &mut rng, &uids, &gids);
    }

    // The principals, one token a user, the snapshot's and serve's configurations.
    let mut principals = String::from("# test accounts\n");
    for u in &uids {
        principals.push_str(&format!("uid\t{u}\t{}\n", user_urn(*u)));
    }
    for g in &gids {
        principals.push_str(&format!("gid\t{g}\t{}\n", group_urn(*g)));
    }
    std::fs::write(t.join("principals.tsv"), principals).unwrap();
    let token = |u: &User| format!("icicle-vis-{}-{seed}", u.uid);
    let mut tokens = String::from("# TOKEN\tidentity\tgroups\n");
    for u in &USERS {
        let groups: Vec<String> = u.groups().into_iter().map(group_urn).collect();
        tokens.push_str(&format!("{}\t{}\t{}\n", token(u), user_urn(u.uid), groups.join(",")));
        let f = t.join(format!("token-{}", u.uid));
        std::fs::write(&f, format!("{}\n", token(u))).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let tokens_file = t.join("tokens.tsv");
    std::fs::write(&tokens_file, tokens).unwrap();
    std::fs::set_permissions(&tokens_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let records = format!(
        "[records]\nvisible_to = \"posix-read\"\nprincipals = \"{t}/principals.tsv\"\neveryone = \"public\"\nadmins = [\"urn:icicle-vis:admins\"]\n",
        t = t.display()
    );
    let cfg = common::config(
        t,
        "snapshot.toml",
        &format!(
            "[snapshot]\nrejects_file = \"{t}/rejects.jsonl\"\n{records}[sources.w]\ntype = \"walk\"\nroot = \"{r}\"\n\
             [sinks.out]\ntype = \"file\"\ndir = \"{t}/out\"\n[sinks.idx]\ntype = \"index\"\ndir = \"{t}/index\"\n",
            t = t.display(),
            r = root.display()
        ),
    );
    let (code, summary, err) = common::snapshot(&cfg, &["--no-progress"]);
    assert_eq!(code, 0, "seed {seed}: {err}");
    assert_eq!(summary["rejects"].as_u64(), Some(0), "seed {seed}: {summary}");
    let published = common::ingested(&t.join("out"));
    let mut entries = BTreeMap::new();
    for p in &paths {
        let path = p.to_str().unwrap().to_string();
        let e = published.get(&path).unwrap_or_else(|| panic!("seed {seed}: no record for {path}"));
        let below_root: Vec<Perm> = {
            let mut d: Vec<Perm> = p.ancestors().skip(1).take_while(|d| d.starts_with(&root)).map(perm_of).collect();
            d.reverse();
            d
        };
        entries.insert(
            path.clone(),
            Entry {
                path,
                chain: chain_of(p),
                below_root,
                perm: perm_of(p),
                visible_to: e["visible_to"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect(),
                uid: key(&e["content"]["uid"]),
                kind: key(&e["content"]["type"]),
            },
        );
    }
    assert_eq!(published.len(), entries.len(), "seed {seed}: records beside the tree's entries");
    let all: BTreeSet<String> = entries.keys().cloned().collect();

    // The kernel's answer for each user, and for a uid with no account in no test group.
    let mut input = Vec::new();
    for p in entries.keys() {
        input.extend_from_slice(p.as_bytes());
        input.push(0);
    }
    let kernel = |uid: u32, groups: &[u32]| -> BTreeSet<String> {
        let line = helper(uid, groups, "probe", &[], &input).into_iter().next().expect("the probe's answer");
        assert_eq!(line.len(), entries.len(), "seed {seed}: the probe as uid {uid}");
        entries.keys().zip(line.chars()).filter(|(_, c)| *c == '1').map(|(p, _)| p.clone()).collect()
    };

    let serve_cfg = common::config(t, "serve.toml", &records);
    let socket = t.join("serve.sock");
    let s = Serve::start(&t.join("index"), &socket, &tokens_file, &serve_cfg);
    let index = t.join("index");
    let root_str = root.to_str().unwrap();
    let mut judge = Judge { seed, entries: &entries, failures: Vec::new() };
    let mut stats = Vec::new();
    let (mut sees_some, mut hides_some) = (false, false);
    let mut anyone = all.clone();
    for u in &USERS {
        let groups = u.groups();
        let may = kernel(u.uid, &groups);
        anyone.retain(|p| may.contains(p));
        // The rule for this user with its groups is the kernel's answer (the rule is exact).
        let rule_user: BTreeSet<String> = entries
            .values()
            .filter(|e| {
                can_see(AccessPolicy::PosixRead, &e.chain, &e.perm, &Asker::User { uid: u.uid, groups: &groups })
            })
            .map(|e| e.path.clone())
            .collect();
        if rule_user != may {
            let differ: Vec<String> = rule_user.symmetric_difference(&may).take(3).map(|p| entries[p].why()).collect();
            judge
                .failures
                .push(format!("seed {seed}: the rule for {} disagrees with the kernel on {differ:?}", u.name));
        }
        // What the index should answer: the records whose visible_to names one of its
        // principals; the same as the rule's answer for the principals the encoder judges.
        let mine = principals_of(Some(u.uid), &groups);
        let want: BTreeSet<String> =
            entries.values().filter(|e| !e.visible_to.is_disjoint(&mine)).map(|e| e.path.clone()).collect();
        let rule: BTreeSet<String> =
            entries.values().filter(|e| e.rule_for_index(Some(u.uid), &groups)).map(|e| e.path.clone()).collect();
        if rule != want {
            let differ: Vec<String> = rule.symmetric_difference(&want).take(3).map(|p| entries[p].why()).collect();
            judge
                .failures
                .push(format!("seed {seed}: {}'s published visible_to differs from can_see on {differ:?}", u.name));
        }
        let who = format!("{} (uid {}, groups {groups:?})", u.name, u.uid);
        let tok = token(u);
        let vias = [
            ("the socket", Via::Socket { path: &socket, uid: u.uid, groups: &groups }),
            ("HTTP with its token", Via::Http { addr: &s.addr, token: Some(&tok) }),
        ];
        for (name, via) in vias {
            judge.check(&who, &format!("{name}: search"), &searched(via), &may, &want);
            judge.check(&who, &format!("{name}: scroll"), &scrolled(via), &may, &want);
            judge.check(&who, &format!("{name}: index num_subjects"), &described(via), &may, &want);
            let (a, shown) = fetched(via, &want, &all);
            judge.check(&who, &format!("{name}: get_subject"), &a, &may, &shown);
        }
        let index_args = ["-c", serve_cfg.to_str().unwrap(), "--index", index.to_str().unwrap(), "--as", u.name];
        judge.check(&who, "icicle find --as (the directory)", &found(&index_args, root_str, None, t), &may, &want);
        if remote_find {
            let a = found(&["--socket", socket.to_str().unwrap()], root_str, Some((u.uid, &groups)), t);
            judge.check(&who, "icicle find --socket as the user", &a, &may, &want);
            let url = format!("http://{}", s.addr);
            let tf = t.join(format!("token-{}", u.uid));
            let a = found(&["--server", &url, "--token-file", tf.to_str().unwrap()], root_str, None, t);
            judge.check(&who, "icicle find --server --token-file", &a, &may, &want);
        }
        sees_some |= !want.is_empty();
        hides_some |= want.len() < all.len();
        stats.push(format!("{}: index {} / kernel {} of {}", u.name, want.len(), may.len(), all.len()));
    }
    // No token, and a socket peer with no account: public, within what every user may read.
    let stranger = kernel(STRANGER.0, &[STRANGER.1]);
    anyone.retain(|p| stranger.contains(p));
    let public: BTreeSet<String> =
        entries.values().filter(|e| e.visible_to.contains("public")).map(|e| e.path.clone()).collect();
    let rule: BTreeSet<String> =
        entries.values().filter(|e| e.rule_for_index(None, &[])).map(|e| e.path.clone()).collect();
    if rule != public {
        let differ: Vec<String> = rule.symmetric_difference(&public).take(3).map(|p| entries[p].why()).collect();
        judge.failures.push(format!("seed {seed}: public in visible_to differs from can_see(Everyone) on {differ:?}"));
    }
    let anonymous = Via::Http { addr: &s.addr, token: None };
    judge.check("no token", "HTTP: search", &searched(anonymous), &anyone, &public);
    judge.check("no token", "HTTP: scroll", &scrolled(anonymous), &anyone, &public);
    let peer = Via::Socket { path: &socket, uid: STRANGER.0, groups: &[STRANGER.1] };
    judge.check("uid 43999 (no account)", "the socket: search", &searched(peer), &anyone, &public);
    stats.push(format!("public: {} / every user {}", public.len(), anyone.len()));
    drop(s);

    let failures = std::mem::take(&mut judge.failures);
    let shown: Vec<&String> = failures.iter().take(15).collect();
    assert!(
        failures.is_empty(),
        "seed {seed} (ICICLE_VISIBILITY_SEED={seed} replays it): {} failures, e.g.\n{shown:#?}",
        failures.len()
    );
    // Not vacuous: someone sees something, and the index hides something from someone.
    assert!(sees_some && hides_some, "seed {seed}: a tree that shows nothing or everything: {stats:?}");
    eprintln!("seed {seed}: {} records (root mode {mode:o}): {}", all.len(), stats.join("; "));
}
