//! The collector in a shared, group-writable catalog directory: its socket is 0600 whatever the
//! umask, it serves only agents of its own user or root (`SO_PEERCRED`), agents hand nothing
//! to another user's collector, and a name planted for its merged file, log or pid file never
//! makes it write into someone else's file. The tests that need other users run as root and
//! switch users with `setpriv` (skipped, saying so, where that cannot be done).

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

/// Users other than root: a member of the shared directory's group, and another user.
const MEMBER: u32 = 65534;
const OTHER: u32 = 65533;

fn can_switch_users() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success())
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The scratch dir opened to other users: traversable, the root writable by all, the catalog
/// directory created with `mode`; returns a copy of the agent library they can load.
fn open_to_others(tmp: &Path, data: &Path, catalog: &Path, mode: u32) -> PathBuf {
    chmod(tmp, 0o755);
    chmod(data, 0o777);
    std::fs::create_dir_all(catalog).unwrap();
    chmod(catalog, mode);
    let lib = tmp.join("libcatalog_agent.so");
    std::fs::copy(agent(), &lib).unwrap();
    lib
}

/// `collector_host DATA MODE N` under the agent `lib`, run by `setpriv SETPRIV...`.
fn host_as(setpriv: &[String], lib: &Path, host: &Path, data: &Path, catalog: &Path, mode: &str, n: usize) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(setpriv).arg(host).arg(data).arg(mode).arg(n.to_string());
    cmd.env("LD_PRELOAD", lib)
        .env("CATALOG_DIR", catalog)
        .env("ICICLE_CATALOG_ROOT", data)
        .env("ICICLE_CATALOG_LAYOUT", "emulate");
    cmd.env_remove("ICICLE_CATALOG_SOCKET");
    cmd
}

/// `setpriv` arguments to become `uid` (its own group), with `extra` group or capability
/// settings.
fn user(uid: u32, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> =
        ["--reuid", &uid.to_string(), "--regid", &uid.to_string()].iter().map(|s| s.to_string()).collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run_ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{what}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
    out
}

/// A collector started by `cmd` (`run` in the foreground), its stderr in `log`.
fn collector_by(cmd: &mut Command, dir: &Path, log: &Path) -> Collector {
    let mut child = cmd.stdout(Stdio::piped()).stderr(File::create(log).unwrap()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        dir.join(".collector.sock").to_str().unwrap(),
        "{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    Collector { child, dir: dir.to_path_buf() }
}

/// `SIGTERM` to a collector (one `icicle-catalogd stop` will not stop: another user's), then
/// reap it.
fn terminate(mut c: Collector) {
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(c.child.id() as i32, libc::SIGTERM) }, 0);
    assert!(c.child.wait().unwrap().success());
}

/// The entries of the merged file of `dir` (none if it is empty).
fn merged_names(dir: &Path) -> Vec<String> {
    names(&merged(dir))
}

/// The entries of the per-process files of `dir` (all but the merged file).
fn own_file_names(dir: &Path) -> Vec<String> {
    let mut cat = Catalog::default();
    for n in catalog_names(dir).into_iter().filter(|n| !n.contains(".collector.")) {
        cat.extend(Catalog::read_file(&dir.join(n)).unwrap());
    }
    names(&cat)
}

fn parent_and_child(n: usize) -> Vec<String> {
    let mut v = series("child", n);
    v.extend(series("parent", n));
    v.sort();
    v
}

#[test]
fn under_umask_002_the_socket_is_0600_and_a_group_member_hands_it_nothing() {
    let (tmp, data, catalog, host) = scratch();
    // A group-writable shared directory (group 0 is the shared group here).
    let lib = open_to_others(tmp.path(), &data, &catalog, 0o770);
    let log = tmp.path().join("collector.log");
    let collector = collector_by(
        Command::new("sh").arg("-c").arg("umask 002 && exec \"$0\" run --dir \"$1\"").arg(CATALOGD).arg(&catalog),
        &catalog,
        &log,
    );
    let mode = std::fs::symlink_metadata(catalog.join(".collector.sock")).unwrap().mode() & 0o7777;
    if !can_switch_users() {
        assert_eq!(mode, 0o600, "socket mode {mode:o}");
        eprintln!("skipped the group member's part: needs root and setpriv");
        return;
    }
    // A member of the group (not the collector's user) runs a job under the agent.
    let out = run_ok(
        &mut host_as(&user(OTHER, &["--groups", "0"]), &lib, &host, &data, &catalog, "fork", 3),
        "the member's host",
    );
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    collector.stop();
    assert_eq!(merged_names(&catalog), Vec::<String>::new(), "a group member handed records to the collector");
    // Its records are in its own files (its own, owned by it), nothing lost.
    assert_eq!(own_file_names(&catalog), parent_and_child(3));
    for n in catalog_names(&catalog).into_iter().filter(|n| !n.contains(".collector.")) {
        assert_eq!(std::fs::metadata(catalog.join(&n)).unwrap().uid(), OTHER, "{n}");
    }
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
}

#[test]
fn the_collector_refuses_agents_of_another_user() {
    if !can_switch_users() {
        eprintln!("skipped: needs root and setpriv to run an agent as another user");
        return;
    }
    let (tmp, data, catalog, host) = scratch();
    let lib = open_to_others(tmp.path(), &data, &catalog, 0o777);
    let log = tmp.path().join("collector.log");
    let collector = collector_by(Command::new(CATALOGD).arg("run").arg("--dir").arg(&catalog), &catalog, &log);
    // Another user that can connect anyway (CAP_DAC_OVERRIDE passes the socket's 0600, as
    // would a socket reached some other way): only the peer check stands in its way.
    let caps = ["--clear-groups", "--inh-caps", "+dac_override", "--ambient-caps", "+dac_override"];
    let other = data.join("other");
    std::fs::create_dir_all(&other).unwrap();
    chmod(&other, 0o777);
    let out =
        run_ok(&mut host_as(&user(OTHER, &caps), &lib, &host, &other, &catalog, "fork", 4), "the other user's host");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // Root's agent is served.
    let mine = data.join("root");
    std::fs::create_dir_all(&mine).unwrap();
    run_ok(host_cmd(&host, &mine, &catalog, "fork", 2).env("LD_PRELOAD", &lib), "root's host");
    collector.stop();
    assert_eq!(merged_names(&catalog), parent_and_child(2), "only root's records are merged");
    assert_eq!(own_file_names(&catalog), parent_and_child(4), "the other user's records, in its own files");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains(&format!("refused a connection from uid {OTHER}")), "{log}");
    // At least one per process (parent and child); a process tries again after 2 s.
    let refused: u64 = log
        .split("; refused ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of refused connections in the log: {log}"));
    assert!(refused >= 2, "{log}");
}

#[test]
fn a_collector_of_another_user_gets_no_records_and_serves_its_own_user_and_root() {
    if !can_switch_users() {
        eprintln!("skipped: needs root and setpriv to run a collector as another user");
        return;
    }
    let (tmp, data, catalog, host) = scratch();
    let lib = open_to_others(tmp.path(), &data, &catalog, 0o777);
    let catalogd = tmp.path().join("icicle-catalogd");
    std::fs::copy(CATALOGD, &catalogd).unwrap();
    let log = tmp.path().join("collector.log");
    // The collector runs as MEMBER (as one planted in a shared directory would).
    let mut cmd = Command::new("setpriv");
    cmd.args(user(MEMBER, &["--clear-groups"])).arg(&catalogd).arg("run").arg("--dir").arg(&catalog);
    let collector = collector_by(&mut cmd, &catalog, &log);
    // Root's agent does not hand it records: they go to root's own files; said once by each
    // process (the child forked before either had said it).
    let out = run_ok(host_cmd(&host, &data, &catalog, "fork", 3).env("LD_PRELOAD", &lib), "root's host");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // Its own user's agent is served.
    let theirs = data.join("member");
    std::fs::create_dir_all(&theirs).unwrap();
    chmod(&theirs, 0o777);
    run_ok(
        &mut host_as(&user(MEMBER, &["--clear-groups"]), &lib, &host, &theirs, &catalog, "fork", 2),
        "the member's host",
    );
    // Root may hand it a record (a raw client: root's agent will not).
    assert_eq!(send_raw(&catalog.join(".collector.sock"), b"\n"), b'K');
    terminate(collector);
    // The compact file the collector left at stop is its user's.
    let compacted = catalog.join(format!("catalog.{}.collector.icat", host_name()));
    assert_eq!(std::fs::metadata(&compacted).unwrap().uid(), MEMBER);
    assert_eq!(
        merged_names(&catalog),
        parent_and_child(2),
        "only the member's own records (and root's raw one) are merged"
    );
    assert_eq!(own_file_names(&catalog), parent_and_child(3), "root's records, in its own files");
    let line = format!(
        "icicle catalog agent: refused the collector at {} (run by uid {MEMBER})",
        catalog.join(".collector.sock").display()
    );
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(err.lines().all(|l| l.starts_with(&line)), "{err}");
}

/// A victim's private file (0600; owned by MEMBER when run as root) beside the catalog.
fn victim(tmp: &Path) -> (PathBuf, Vec<u8>) {
    let v = tmp.join("victim.txt");
    let text = b"the victim's private notes\n".to_vec();
    std::fs::write(&v, &text).unwrap();
    chmod(&v, 0o600);
    if can_switch_users() {
        std::os::unix::fs::chown(&v, Some(MEMBER), Some(MEMBER)).unwrap();
    }
    (v, text)
}

/// `icicle-catalogd ARGS --dir DIR` bounded by 10 s (a collector that serves instead of
/// refusing is killed, and counts as a failure).
fn catalogd_bounded(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("timeout").args(["-s", "KILL", "10"]).arg(CATALOGD).args(args).arg("--dir").arg(dir).output().unwrap()
}

#[test]
fn a_link_planted_for_the_merged_file_stops_the_collector_and_changes_nothing() {
    let (tmp, _data, catalog, _host) = scratch();
    std::fs::create_dir_all(&catalog).unwrap();
    let (victim, text) = victim(tmp.path());
    // A file of the collector's own user: only its second link gives a hard link away.
    let own = tmp.path().join("own.txt");
    std::fs::write(&own, &text).unwrap();
    let merged = catalog.join(format!("catalog.{}.collector.txt", host_name()));
    for (kind, target) in [("is a symbolic link", &victim), ("has 2 links", &own)] {
        let _ = std::fs::remove_file(&merged);
        if target == &victim {
            std::os::unix::fs::symlink(&victim, &merged).unwrap();
        } else {
            std::fs::hard_link(&own, &merged).unwrap();
        }
        let out = catalogd_bounded(&["run"], &catalog);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{kind}: {} {err}", out.status);
        assert!(err.contains(&format!("{} {kind}", merged.display())), "{err}");
        assert_eq!(
            String::from_utf8_lossy(&std::fs::read(target).unwrap()),
            String::from_utf8_lossy(&text),
            "{kind}: the collector wrote to the file linked"
        );
        assert!(!catalog.join(".collector.sock").exists() && !catalog.join(".collector.pid").exists());
    }
}

#[test]
fn a_link_planted_for_the_log_stops_start_and_changes_nothing() {
    let (tmp, _data, catalog, _host) = scratch();
    std::fs::create_dir_all(&catalog).unwrap();
    let (victim, text) = victim(tmp.path());
    std::os::unix::fs::symlink(&victim, catalog.join(".collector.log")).unwrap();
    let _guard = Started(catalog.clone());
    let out = catalogd_bounded(&["start"], &catalog);
    // Stop whatever started before looking at the victim: its last line goes to the log.
    let _ = Command::new(CATALOGD).arg("stop").arg("--dir").arg(&catalog).output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{} {err}", out.status);
    assert!(err.contains("is a symbolic link"), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&std::fs::read(&victim).unwrap()),
        String::from_utf8_lossy(&text),
        "the collector's log went into the victim's file"
    );
}

#[test]
fn a_link_planted_for_the_pid_file_is_not_followed() {
    let (tmp, _data, catalog, _host) = scratch();
    std::fs::create_dir_all(&catalog).unwrap();
    let (victim, text) = victim(tmp.path());
    // The collector's pid is known (and its temporary pid file's name) before it starts.
    let log = tmp.path().join("collector.log");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("echo $$ && read go && exec \"$0\" run --dir \"$1\"")
        .arg(CATALOGD)
        .arg(&catalog)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let pid: u32 = line.trim().parse().unwrap();
    std::os::unix::fs::symlink(&victim, catalog.join(format!(".collector.pid.{pid}"))).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    stdout.read_line(&mut line).unwrap();
    let collector = Collector { child, dir: catalog.clone() };
    assert_eq!(
        line.trim(),
        catalog.join(".collector.sock").to_str().unwrap(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(
        String::from_utf8_lossy(&std::fs::read(&victim).unwrap()),
        String::from_utf8_lossy(&text),
        "the pid file was written through the planted link"
    );
    let pid_file = std::fs::read_to_string(catalog.join(".collector.pid")).unwrap();
    assert_eq!(pid_file.lines().next(), Some(pid.to_string().as_str()));
    collector.stop();
    assert_eq!(std::fs::read(&victim).unwrap(), text);
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: a buffer of the given length.
    assert_eq!(unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) }, 0);
    let end = buf.iter().position(|&b| b == 0).unwrap();
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
