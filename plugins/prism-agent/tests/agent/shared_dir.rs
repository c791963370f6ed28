//! A shared, group-writable catalog directory where another member plants names: the agent
//! never writes through a symbolic link, into a hard link or into another user's file at its
//! catalog name (it takes a fresh name and says so), and a set-user-ID program takes none of
//! its settings from the environment (`secure_getenv`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Output, Stdio};
use std::time::SystemTime;

use super::concurrency::{assert_finished, bounded};
use super::*;

/// Files per half of a `shared_writer` run.
const N: usize = 5;
/// Users other than the test's (the tests that need them run as root).
const MEMBER: u32 = 65534;
const OTHER: u32 = 65533;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a buffer of the given length.
    assert_eq!(unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) }, 0);
    let end = buf.iter().position(|&b| b == 0).unwrap();
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A scratch dir with the root `data/`, a shared catalog directory `catalog/` (mode 0777, as
/// a project directory every member writes), a victim's private file `victim/private.txt`
/// (mode 0600, owned by another member when the test runs as root) and `shared_writer`.
struct Shared {
    tmp: tempfile::TempDir,
    data: PathBuf,
    catalog: PathBuf,
    victim: PathBuf,
    prog: PathBuf,
}

const SECRET: &[u8] = b"the victim's private notes\n";

fn shared() -> Shared {
    let (tmp, data, catalog) = scratch();
    std::fs::create_dir_all(&catalog).unwrap();
    std::fs::set_permissions(&catalog, std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim = tmp.path().join("victim/private.txt");
    std::fs::create_dir_all(victim.parent().unwrap()).unwrap();
    std::fs::write(&victim, SECRET).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&victim, Some(MEMBER), Some(MEMBER)).unwrap();
    }
    let prog =
        cc(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shared_writer.c"), &tmp.path().join("shared_writer"));
    Shared { tmp, data, catalog, victim, prog }
}

impl Shared {
    /// The catalog file name the agent uses for `pid`.
    fn usual(&self, pid: u32) -> PathBuf {
        self.catalog.join(format!("catalog.{}.{pid}.txt", host_name()))
    }

    /// Runs `shared_writer DATA N` under the agent: `plant(pid)` once its pid is known and
    /// before it writes anything, `midway(pid)` between its two halves.
    fn run(&self, plant: impl FnOnce(u32), midway: impl FnOnce(u32)) -> Output {
        let mut child =
            under_agent(bounded(&self.prog).arg(&self.data).arg(N.to_string()), &self.catalog, &self.data, "emulate")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let pid: u32 =
            line.trim().strip_prefix("pid ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
        plant(pid);
        stdin.write_all(b"go\n").unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "half\n");
        midway(pid);
        stdin.write_all(b"go\n").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let mut out = child.wait_with_output().unwrap();
        out.stdout = rest.into_bytes();
        assert_finished(&out, "shared_writer");
        out
    }

    /// The victim's file is exactly as it was: its bytes and its modification time.
    fn victim_state(&self) -> (String, SystemTime) {
        file_state(&self.victim)
    }
}

/// A file's text and modification time.
fn file_state(p: &Path) -> (String, SystemTime) {
    (
        String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned(),
        std::fs::metadata(p).unwrap().modified().unwrap(),
    )
}

/// Every file the writer made (`a-*` and `b-*`), as names.
fn all_written() -> Vec<String> {
    let mut v: Vec<String> = ["a", "b"].iter().flat_map(|p| (0..N).map(move |i| format!("{p}-{i}"))).collect();
    v.sort();
    v
}

/// The names (relative to the root) of the entries of the catalog file `f`, which has no reject.
fn entry_names(f: &Path) -> Vec<String> {
    let cat = Catalog::read_file(f).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    let mut v: Vec<String> =
        cat.entries.iter().map(|e| Path::new(&e.path).file_name().unwrap().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// The one regular catalog file of `pid` in `catalog` other than its usual name: a fresh name,
/// `catalog.<host>.<pid>.<16 hex digits>.txt`.
fn fresh_file(s: &Shared, pid: u32) -> PathBuf {
    let prefix = format!("catalog.{}.{pid}.", host_name());
    let fresh: Vec<PathBuf> = std::fs::read_dir(&s.catalog)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != &s.usual(pid) && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
        .collect();
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    let name = fresh[0].file_name().unwrap().to_string_lossy().into_owned();
    let hex = name.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".txt")).unwrap_or_else(|| panic!("{name}"));
    assert!(hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    fresh[0].clone()
}

/// The run succeeded with nothing lost and one refusal, reported in one line naming the usual
/// catalog file and `why`.
fn assert_one_refusal(s: &Shared, pid: u32, out: &Output, why: &str) {
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok lost=0 refused=1\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let want = format!("icicle catalog agent: refused {} ({why}): this process's catalog is ", s.usual(pid).display());
    assert!(err.starts_with(&want), "{err}\nwanted {want}");
}

#[test]
fn a_symlink_planted_at_the_catalog_name_is_not_followed() {
    let s = shared();
    let before = s.victim_state();
    let mut planted = 0;
    let out = s.run(
        |pid| {
            std::os::unix::fs::symlink(&s.victim, s.usual(pid)).unwrap();
            planted = pid;
        },
        |_| {},
    );
    assert_eq!(s.victim_state(), before, "the agent wrote through the planted link");
    assert_one_refusal(&s, planted, &out, "a symbolic link");
    assert_eq!(std::fs::read_link(s.usual(planted)).unwrap(), s.victim);
    assert_eq!(entry_names(&fresh_file(&s, planted)), all_written());
}

#[test]
fn a_dangling_symlink_planted_at_the_catalog_name_creates_nothing() {
    let s = shared();
    let target = s.victim.with_file_name("created-by-the-agent");
    let mut planted = 0;
    let out = s.run(
        |pid| {
            std::os::unix::fs::symlink(&target, s.usual(pid)).unwrap();
            planted = pid;
        },
        |_| {},
    );
    assert!(std::fs::symlink_metadata(&target).is_err(), "the agent created {}", target.display());
    assert_one_refusal(&s, planted, &out, "a symbolic link");
    assert_eq!(entry_names(&fresh_file(&s, planted)), all_written());
}

#[test]
fn a_hard_link_planted_at_the_catalog_name_is_not_written() {
    let s = shared();
    // The victim's file belongs to the agent's own user here (the owner check passes): only
    // its second link gives it away.
    let own = s.victim.with_file_name("own.txt");
    std::fs::write(&own, SECRET).unwrap();
    let before = file_state(&own);
    let mut planted = 0;
    let out = s.run(
        |pid| {
            std::fs::hard_link(&own, s.usual(pid)).unwrap();
            planted = pid;
        },
        |_| {},
    );
    assert_eq!(file_state(&own), before, "the agent wrote into the hard-linked file");
    assert_one_refusal(&s, planted, &out, "a file with 2 links");
    assert_eq!(entry_names(&fresh_file(&s, planted)), all_written());
}

#[test]
fn another_members_file_at_the_catalog_name_is_not_written() {
    if !is_root() {
        eprintln!("skipped: needs root to make a file of another user");
        return;
    }
    let s = shared();
    const PLANTED: &[u8] = b"planted by another member, readable and writable by all\n";
    let mut planted = 0;
    let out = s.run(
        |pid| {
            std::fs::write(s.usual(pid), PLANTED).unwrap();
            std::fs::set_permissions(s.usual(pid), std::fs::Permissions::from_mode(0o666)).unwrap();
            std::os::unix::fs::chown(s.usual(pid), Some(MEMBER), Some(MEMBER)).unwrap();
            planted = pid;
        },
        |_| {},
    );
    assert_eq!(
        String::from_utf8_lossy(&std::fs::read(s.usual(planted)).unwrap()),
        String::from_utf8_lossy(PLANTED),
        "the agent appended to another user's file"
    );
    assert_one_refusal(&s, planted, &out, &format!("owned by uid {MEMBER}"));
    assert_eq!(entry_names(&fresh_file(&s, planted)), all_written());
}

#[test]
fn a_catalog_file_swapped_for_a_symlink_mid_run_is_not_followed() {
    let s = shared();
    let before = s.victim_state();
    let stolen = s.catalog.join(".moved-away");
    let mut planted = 0;
    let out = s.run(
        |pid| planted = pid,
        |pid| {
            // The first half is in the usual file: moved away, a link put in its place.
            std::fs::rename(s.usual(pid), &stolen).unwrap();
            std::os::unix::fs::symlink(&s.victim, s.usual(pid)).unwrap();
        },
    );
    assert_eq!(s.victim_state(), before, "the agent wrote through the link swapped in");
    assert_one_refusal(&s, planted, &out, "a symbolic link");
    let first: Vec<String> = (0..N).map(|i| format!("a-{i}")).collect();
    let second: Vec<String> = (0..N).map(|i| format!("b-{i}")).collect();
    assert_eq!(entry_names(&stolen), first);
    assert_eq!(entry_names(&fresh_file(&s, planted)), second);
}

#[test]
fn a_catalog_file_of_its_own_from_an_earlier_run_is_appended_to() {
    // Not a planted name: an earlier process of the same user with the same pid. Unchanged
    // behaviour: appended to, nothing refused, nothing printed.
    let s = shared();
    let mut planted = 0;
    let out = s.run(
        |pid| {
            std::fs::write(s.usual(pid), "").unwrap();
            planted = pid;
        },
        |_| {},
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok lost=0 refused=0\n");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(catalog_files(&s.catalog), vec![s.usual(planted)]);
    assert_eq!(entry_names(&s.usual(planted)), all_written());
}

/// `setpriv` with the given arguments in front of `prog`.
fn setpriv(args: &[&str], prog: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args(args).arg(prog);
    c
}

fn have_setpriv() -> bool {
    Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn a_set_user_id_program_takes_no_setting_from_the_environment() {
    if !is_root() || !have_setpriv() {
        eprintln!("skipped: needs root and setpriv (to run a set-user-ID program as another user)");
        return;
    }
    let s = shared();
    std::fs::set_permissions(s.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&s.data, std::fs::Permissions::from_mode(0o777)).unwrap();
    // LD_PRELOAD is ignored for set-user-ID programs; the agent is linked in instead, as a
    // site-wide preload (/etc/ld.so.preload) would load it.
    let lib = s.tmp.path().join("libcatalog_agent.so");
    std::fs::copy(agent(), &lib).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/collector_host.c");
    let host = s.tmp.path().join("suid_host");
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-pthread", "-o"])
        .arg(&host)
        .arg(&src)
        .arg("-Wl,--no-as-needed")
        .arg(&lib)
        .status()
        .unwrap();
    assert!(st.success());
    // The `lfs` command the environment names: it leaves a mark when it runs.
    let mark = s.catalog.join("lfs-ran");
    let lfs = s.tmp.path().join("evil-lfs");
    std::fs::write(&lfs, format!("#!/bin/sh\ntouch '{}'\nexit 1\n", mark.display())).unwrap();
    std::fs::set_permissions(&lfs, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |case: &str| {
        let data = s.data.join(case);
        std::fs::create_dir_all(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
        let out = setpriv(&["--reuid", &OTHER.to_string(), "--regid", &OTHER.to_string(), "--clear-groups"], &host)
            .arg(&data)
            .arg("fork")
            .arg("3")
            .env("CATALOG_DIR", &s.catalog)
            .env("ICICLE_CATALOG_ROOT", &s.data)
            .env("ICICLE_CATALOG_LAYOUT", "lfs")
            .env("ICICLE_CATALOG_LFS", &lfs)
            .output()
            .unwrap();
        assert!(out.status.success(), "{case}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
        assert!(out.stderr.is_empty(), "{case}: {}", String::from_utf8_lossy(&out.stderr));
        let owner = std::fs::metadata(data.join("parent-0")).unwrap().uid();
        (owner, catalog_files(&s.catalog).len(), mark.exists())
    };
    // Control: the same program, not set-user-ID, takes the settings (the agent is loaded).
    assert_eq!(run("plain"), (OTHER, 2, true));
    std::fs::remove_file(&mark).unwrap();
    for f in catalog_files(&s.catalog) {
        std::fs::remove_file(f).unwrap();
    }
    std::os::unix::fs::chown(&host, Some(MEMBER), Some(MEMBER)).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let (owner, catalogs, ran) = run("setuid");
    if owner != MEMBER {
        eprintln!("skipped: the set-user-ID bit took no effect here (a nosuid mount?)");
        return;
    }
    // Set-user-ID: the host ran unharmed, but no catalog went where the environment said and
    // the command it named never ran with the program's privileges.
    assert_eq!(
        (catalogs, ran),
        (0, false),
        "the set-user-ID program took CATALOG_DIR / ICICLE_CATALOG_LFS from the environment"
    );
}
