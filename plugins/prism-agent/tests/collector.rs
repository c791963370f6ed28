//! The node's catalog collector (`icicle-catalogd`) with real hosts under the agent: records
//! handed over at close survive a killed host, a collector killed mid-run leaves the rest to
//! the per-process files, and without one everything is as before.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use icicle_plugins_prism::catalog::Catalog;

const CATALOGD: &str = env!("CARGO_BIN_EXE_icicle-catalogd");

/// A shared catalog directory: the socket's mode, peers of other users, planted names.
#[path = "collector/shared_dir.rs"]
mod shared_dir;

/// The agent library, built here as `tests/agent.rs` does (`cargo test` builds no cdylib for
/// its tests), with the profile and target dir of this test binary.
fn agent() -> PathBuf {
    static SO: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SO.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let target = profile_dir.parent().unwrap();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "icicle-prism-agent", "--lib", "--target-dir"])
            .arg(target)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        assert!(cmd.status().expect("cargo").success(), "building the agent failed");
        let so = profile_dir.join("libcatalog_agent.so");
        assert!(so.is_file(), "{} not built", so.display());
        so
    })
    .clone()
}

/// A scratch dir with `data/` (the root, created), `catalog/` (not created) and the host
/// program compiled from `tests/collector_host.c`.
fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/collector_host.c");
    let host = tmp.path().join("collector_host");
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-pthread", "-o"])
        .arg(&host)
        .arg(&src)
        .status()
        .expect("cc (build-essential) is needed");
    assert!(st.success(), "cc {}", src.display());
    let catalog = tmp.path().join("catalog");
    (tmp, data, catalog, host)
}

/// `collector_host DATA MODE N` under the agent, writing its catalog to `catalog`.
fn host_cmd(host: &Path, data: &Path, catalog: &Path, mode: &str, n: usize) -> Command {
    let mut cmd = Command::new(host);
    cmd.arg(data).arg(mode).arg(n.to_string());
    cmd.env("LD_PRELOAD", agent())
        .env("CATALOG_DIR", catalog)
        .env("ICICLE_CATALOG_ROOT", data)
        .env("ICICLE_CATALOG_LAYOUT", "emulate");
    cmd.env_remove("ICICLE_CATALOG_SOCKET");
    cmd
}

/// `icicle-catalogd run --dir catalog` in the foreground, once it has printed its socket.
struct Collector {
    child: Child,
    dir: PathBuf,
}

impl Collector {
    fn run(dir: &Path) -> Collector {
        let mut child = Command::new(CATALOGD).arg("run").arg("--dir").arg(dir).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), dir.join(".collector.sock").to_str().unwrap());
        Collector { child, dir: dir.to_path_buf() }
    }

    /// `icicle-catalogd stop`, then reap the server.
    fn stop(mut self) {
        catalogd(&["stop", "--dir"], &self.dir);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "{st}");
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `icicle-catalogd ARGS DIR`; returns its stdout.
fn catalogd(args: &[&str], dir: &Path) -> String {
    let out = Command::new(CATALOGD).args(args).arg(dir).output().unwrap();
    assert!(out.status.success(), "icicle-catalogd {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Stops a collector started with `icicle-catalogd start` if a test fails before it does.
struct Started(PathBuf);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = Command::new(CATALOGD).arg("stop").arg("--dir").arg(&self.0).output();
    }
}

/// The names of the catalog files (non-hidden) in `dir`.
fn catalog_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

fn collector_file(dir: &Path) -> PathBuf {
    let names: Vec<String> = catalog_names(dir).into_iter().filter(|n| n.ends_with(".collector.txt")).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    dir.join(&names[0])
}

/// The collector's catalog: its text file and its compact file, whichever exist (it compacts
/// the text after 2 s without a record, and at stop, when the text file goes).
fn merged(dir: &Path) -> Catalog {
    let mut cat = Catalog::default();
    for n in catalog_names(dir).into_iter().filter(|n| n.contains(".collector.")) {
        cat.extend(Catalog::read_file(&dir.join(n)).unwrap());
    }
    cat
}

/// The per-process catalog files of `dir` (every file but the collector's).
fn own_files(dir: &Path) -> Vec<String> {
    catalog_names(dir).into_iter().filter(|n| !n.contains(".collector.")).collect()
}

/// The file names (relative to the root) of a catalog's entries, checking sizes on the way.
fn names(cat: &Catalog) -> Vec<String> {
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    let mut v: Vec<String> = cat
        .entries
        .iter()
        .map(|e| {
            let name = Path::new(&e.path).file_name().unwrap().to_string_lossy().into_owned();
            let i: u64 = name.rsplit('-').next().unwrap().parse().unwrap();
            assert_eq!(e.size(), i + 1, "{name}");
            name
        })
        .collect();
    v.sort();
    v
}

fn series(prefix: &str, n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    v.sort();
    v
}

#[test]
fn without_a_collector_each_process_keeps_its_own_file() {
    let (_tmp, data, catalog, host) = scratch();
    let out = host_cmd(&host, &data, &catalog, "fork", 5).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = catalog_names(&catalog);
    assert_eq!(files.len(), 2, "parent and child, one file each: {files:?}");
    assert!(!files.iter().any(|f| f.contains("collector")), "{files:?}");
    let cat = Catalog::read_dir(&catalog).unwrap();
    let mut want = series("child", 5);
    want.extend(series("parent", 5));
    want.sort();
    assert_eq!(names(&cat), want);
}

#[test]
fn a_host_killed_after_its_closes_loses_none_of_them() {
    let (_tmp, data, catalog, host) = scratch();
    let _guard = Started(catalog.clone());
    let printed = catalogd(&["start", "--dir"], &catalog);
    assert_eq!(printed.trim(), catalog.join(".collector.sock").to_str().unwrap());
    let pid: i32 =
        std::fs::read_to_string(catalog.join(".collector.pid")).unwrap().lines().next().unwrap().parse().unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    // A second start is refused while the first runs.
    let again = Command::new(CATALOGD).arg("start").arg("--dir").arg(&catalog).output().unwrap();
    assert!(!again.status.success());

    let mut child = host_cmd(&host, &data, &catalog, "kill", 50).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    child.kill().unwrap();
    child.wait().unwrap();
    // Every closed file is in the collector's file already (written before acknowledged);
    // the three still open when the host was killed are not recorded anywhere.
    assert_eq!(names(&merged(&catalog)), series("f", 50));
    assert_eq!(own_files(&catalog), Vec::<String>::new(), "no per-process file");

    let stopped = catalogd(&["stop", "--dir"], &catalog);
    assert!(stopped.contains(&format!("pid {pid}")), "{stopped}");
    // Gone, or a zombie its new parent has yet to reap.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim().chars().next()));
    assert!(matches!(state, None | Some(Some('Z' | 'X'))), "{state:?}");
    assert!(!catalog.join(".collector.pid").exists() && !catalog.join(".collector.sock").exists());
    assert_eq!(names(&Catalog::read_dir(&catalog).unwrap()), series("f", 50));
    // Stopping again finds nothing to stop.
    assert!(catalogd(&["stop", "--dir"], &catalog).contains("no collector"));
}

#[test]
fn forked_children_hand_over_their_own_records() {
    let (_tmp, data, catalog, host) = scratch();
    let collector = Collector::run(&catalog);
    let out = host_cmd(&host, &data, &catalog, "fork", 20).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    collector.stop();
    // At stop the text was compacted into the compact file, the only file left.
    let files = catalog_names(&catalog);
    assert!(files.len() == 1 && files[0].ends_with(".collector.icat"), "{files:?}");
    let mut want = series("child", 20);
    want.extend(series("parent", 20));
    want.sort();
    assert_eq!(names(&merged(&catalog)), want);
}

#[test]
fn a_collector_killed_mid_run_leaves_the_rest_to_the_per_process_file() {
    let (_tmp, data, catalog, host) = scratch();
    let mut collector = Collector::run(&catalog);
    let mut child =
        host_cmd(&host, &data, &catalog, "pause", 30).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "half\n");
    // SIGKILL: no chance to finish; the stale socket stays behind.
    collector.child.kill().unwrap();
    collector.child.wait().unwrap();
    assert!(catalog.join(".collector.sock").exists());
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(names(&merged(&catalog)), series("a", 30));
    let own = own_files(&catalog);
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!(names(&Catalog::read_file(&catalog.join(&own[0])).unwrap()), series("b", 30));
    let mut all = series("a", 30);
    all.extend(series("b", 30));
    all.sort();
    assert_eq!(names(&Catalog::read_dir(&catalog).unwrap()), all);

    // A new collector replaces the stale socket and appends to the same merged file.
    let collector = Collector::run(&catalog);
    let out = host_cmd(&host, &data, &catalog, "fork", 3).output().unwrap();
    assert!(out.status.success());
    collector.stop();
    let mut merged_now = series("a", 30);
    merged_now.extend(series("child", 3));
    merged_now.extend(series("parent", 3));
    merged_now.sort();
    assert_eq!(names(&merged(&catalog)), merged_now);
}

#[test]
fn a_collector_killed_while_threads_write_loses_nothing() {
    let (_tmp, data, catalog, host) = scratch();
    let mut collector = Collector::run(&catalog);
    let n = 300;
    let mut child = host_cmd(&host, &data, &catalog, "threads", n).spawn().unwrap();
    // Kill the collector once some records have reached it, while the threads still write.
    let text = catalog.join(catalog_names(&catalog).into_iter().find(|f| f.ends_with(".collector.txt")).unwrap());
    let t0 = Instant::now();
    while std::fs::metadata(&text).map(|m| m.len()).unwrap_or(0) < 4096 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no record reached the collector");
        std::thread::sleep(Duration::from_millis(2));
    }
    collector.child.kill().unwrap();
    collector.child.wait().unwrap();
    assert!(child.wait().unwrap().success());
    let in_collector = names(&merged(&catalog));
    assert!(!in_collector.is_empty());
    // Every file written is in one file or the other (a record written but not acknowledged
    // in time would be in both: readers keep one entry per path).
    let cat = Catalog::read_dir(&catalog).unwrap();
    let got: BTreeSet<String> = names(&cat).into_iter().collect();
    let want: BTreeSet<String> = (0..4).flat_map(|t| series(&format!("t{t}"), n)).collect();
    assert_eq!(got, want);
    assert!(own_files(&catalog).len() == 1, "{:?}", catalog_names(&catalog));
}

/// The pid of a collector run here.
fn pid_of(c: &Collector) -> i32 {
    c.child.id() as i32
}

#[test]
fn a_hung_collector_never_blocks_the_host_for_long_and_loses_nothing() {
    let (_tmp, data, catalog, host) = scratch();
    let collector = Collector::run(&catalog);
    // SAFETY: stops our own child; continued below.
    assert_eq!(unsafe { libc::kill(pid_of(&collector), libc::SIGSTOP) }, 0);
    let t0 = Instant::now();
    let mut child = host_cmd(&host, &data, &catalog, "fork", 10).spawn().unwrap();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the host hung on a stopped collector");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t0.elapsed();
    assert!(status.success(), "{status}");
    // Each process waits once for the answer (1 s), then writes to its own file for 2 s.
    assert!(took < Duration::from_secs(10), "{took:?}");
    // SAFETY: continues our own child.
    assert_eq!(unsafe { libc::kill(pid_of(&collector), libc::SIGCONT) }, 0);
    collector.stop();
    // The record each process sent first may be in both files (written once the collector
    // went on, never acknowledged); every file is somewhere.
    let got: BTreeSet<String> = names(&Catalog::read_dir(&catalog).unwrap()).into_iter().collect();
    let want: BTreeSet<String> = series("child", 10).into_iter().chain(series("parent", 10)).collect();
    assert_eq!(got, want);
    assert_eq!(catalog_names(&catalog).len(), 3, "{:?}", catalog_names(&catalog));
}

#[test]
fn a_socket_elsewhere_is_found_through_icicle_catalog_socket() {
    let (tmp, data, catalog, host) = scratch();
    let socket = tmp.path().join("elsewhere.sock");
    let _guard = Started(catalog.clone());
    let out =
        Command::new(CATALOGD).arg("start").arg("--dir").arg(&catalog).arg("--socket").arg(&socket).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), socket.to_str().unwrap());
    let out = host_cmd(&host, &data, &catalog, "fork", 4).env("ICICLE_CATALOG_SOCKET", &socket).output().unwrap();
    assert!(out.status.success());
    catalogd(&["stop", "--dir"], &catalog);
    assert!(!socket.exists());
    let files = catalog_names(&catalog);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(names(&Catalog::read_dir(&catalog).unwrap()).len(), 8);
}

#[test]
fn renames_through_the_collector_leave_the_final_names_only() {
    let (tmp, data, catalog, _host) = scratch();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let prog = tmp.path().join("rename_writer");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rename_writer.c");
    assert!(Command::new("cc").args(["-O1", "-Wall", "-o"]).arg(&prog).arg(&src).status().unwrap().success());
    std::fs::write(data.join("foreign.txt"), "written before the program ran\n").unwrap();
    let collector = Collector::run(&catalog);
    let mut cmd = Command::new(&prog);
    cmd.arg(&data).arg(&outside).arg("mkstemp");
    cmd.env("LD_PRELOAD", agent())
        .env("CATALOG_DIR", &catalog)
        .env("ICICLE_CATALOG_ROOT", &data)
        .env("ICICLE_CATALOG_LAYOUT", "emulate");
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    collector.stop();
    assert_eq!(catalog_names(&catalog).len(), 1, "{:?}", catalog_names(&catalog));
    let cat = Catalog::read_dir(&catalog).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    let canon = std::fs::canonicalize(&data).unwrap();
    let mut got: Vec<(String, u64)> = cat
        .latest()
        .iter()
        .map(|e| (Path::new(&e.path).strip_prefix(&canon).unwrap().to_string_lossy().into_owned(), e.size()))
        .collect();
    got.sort();
    assert_eq!(got, vec![("out.bin".to_string(), 5000), ("sub/final.dat".to_string(), 1234)]);
    assert_eq!((cat.gone.len(), cat.superseded), (2, 2), "{:?}", cat.gone);
}

/// A raw client: one message on a new connection to `socket`; returns the collector's answer.
fn send_raw(socket: &Path, msg: &[u8]) -> u8 {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: a zeroed sockaddr_un filled within bounds; our own socket, closed at the end.
    unsafe {
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, &s) in addr.sun_path.iter_mut().zip(socket.as_os_str().as_bytes()) {
            *d = s as libc::c_char;
        }
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
        assert!(fd >= 0);
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        assert_eq!(libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len), 0);
        assert_eq!(libc::send(fd, msg.as_ptr().cast(), msg.len(), 0), msg.len() as isize);
        let mut a = [0u8; 1];
        assert_eq!(libc::recv(fd, a.as_mut_ptr().cast(), 1, 0), 1);
        libc::close(fd);
        a[0]
    }
}

#[test]
fn the_collector_refuses_a_record_cut_short() {
    let tmp = tempfile::tempdir().unwrap();
    let catalog = tmp.path().join("catalog");
    let collector = Collector::run(&catalog);
    let socket = catalog.join(".collector.sock");
    assert_eq!(send_raw(&socket, b"lstat\n/x"), b'E');
    assert_eq!(send_raw(&socket, b"\n"), b'K');
    collector.stop();
    assert_eq!(std::fs::read(collector_file(&catalog)).unwrap(), b"\n");
}

/// Whether process `pid` holds a descriptor numbered 900 or above (where the agent moves its
/// connection to the collector).
fn connected(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten().any(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()).is_some_and(|fd| fd >= 900))
        })
        .unwrap_or(false)
}

#[test]
fn a_stopped_collector_first_writes_and_answers_the_records_queued() {
    let (_tmp, data, catalog, host) = scratch();
    let mut collector = Collector::run(&catalog);
    let cpid = pid_of(&collector);
    // SAFETY: stops our own child; continued below.
    assert_eq!(unsafe { libc::kill(cpid, libc::SIGSTOP) }, 0);
    // The host's first record waits for its answer (20 s allowed) on a connection the stopped
    // collector has not even accepted yet.
    let mut child = host_cmd(&host, &data, &catalog, "kill", 3)
        .env("ICICLE_CATALOG_TIMEOUT_MS", "20000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !connected(child.id()) {
        assert!(t0.elapsed() < Duration::from_secs(15), "the host never connected");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: signals to our own child.
    unsafe {
        assert_eq!(libc::kill(cpid, libc::SIGTERM), 0);
        assert_eq!(libc::kill(cpid, libc::SIGCONT), 0);
    }
    // The queued record is written and answered; the next ones find the collector gone.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(collector.child.wait().unwrap().success());
    assert!(!catalog.join(".collector.pid").exists() && !catalog.join(".collector.sock").exists());
    assert_eq!(names(&merged(&catalog)), series("f", 1));
    assert_eq!(names(&Catalog::read_dir(&catalog).unwrap()), series("f", 3));
}

/// CPU seconds (user + system) process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // After the `)`: state is field 3, utime 14, stime 15 (1-based in proc(5)).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn a_collector_out_of_descriptors_neither_spins_nor_loses_records() {
    let (_tmp, data, catalog, host) = scratch();
    // 16 descriptors (hard limit too): room for a few connections only.
    let mut server = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 16 && exec \"$0\" run --dir \"$1\"")
        .arg(CATALOGD)
        .arg(&catalog)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.ends_with(".collector.sock\n"), "{line}");
    let collector = Collector { child: server, dir: catalog.clone() };
    // Hosts that keep their connections (they wait to be killed), more than fit.
    let mut hosts: Vec<(PathBuf, Child)> = (0..20)
        .map(|k| {
            let d = data.join(format!("h{k}"));
            std::fs::create_dir_all(&d).unwrap();
            let child = host_cmd(&host, &d, &catalog, "kill", 2)
                .env("ICICLE_CATALOG_ROOT", &data)
                .env("ICICLE_CATALOG_TIMEOUT_MS", "300")
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            (d, child)
        })
        .collect();
    let mut want = BTreeSet::new();
    // Every host is ready (its records handed over or in its file) before any is killed.
    for (d, child) in &mut hosts {
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        let d = std::fs::canonicalize(d).unwrap();
        want.extend((0..2).map(|i| d.join(format!("f-{i}")).to_string_lossy().into_owned()));
    }
    // The connections that did not fit wait in the backlog while the hosts hold theirs: the
    // collector must wait for descriptors, not retry `accept` in a loop.
    let cpu0 = cpu_seconds(collector.child.id());
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(collector.child.id()) - cpu0;
    for (_, child) in &mut hosts {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert!(cpu < 0.3 * wall, "the collector spun: {cpu:.2} s CPU in {wall:.2} s");
    collector.stop();
    let cat = Catalog::read_dir(&catalog).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    let got: BTreeSet<String> = cat.entries.iter().map(|e| e.path.clone()).collect();
    assert_eq!(got, want);
    let files = catalog_names(&catalog);
    assert!(files.len() > 1, "some hosts fell back to their own files: {files:?}");
}

/// `--help` and `--version` answer (exit 0), as for every binary of the project.
#[test]
fn the_collector_answers_help_and_version() {
    for flag in ["--help", "--version"] {
        let out = Command::new(CATALOGD).arg(flag).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("icicle-catalogd"), "{flag}: {text}");
    }
    // A bad command line is refused with the usage.
    let out = Command::new(CATALOGD).arg("serve").output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Usage"));
}

/// Under systemd (`Type=notify`): READY=1 once listening, STOPPING=1 on SIGTERM.
#[test]
fn the_collector_tells_systemd_when_it_is_ready_and_stopping() {
    let tmp = tempfile::tempdir().unwrap();
    let sock_path = tmp.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut child = Command::new(CATALOGD)
        .args(["run", "--dir"])
        .arg(tmp.path().join("catalog"))
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut seen: Vec<String> = Vec::new();
    let mut buf = [0u8; 4096];
    let mut recv = |seen: &mut Vec<String>| {
        let n = sock.recv(&mut buf).expect("a notification");
        seen.extend(String::from_utf8_lossy(&buf[..n]).lines().map(String::from));
    };
    while !seen.iter().any(|l| l == "READY=1") {
        recv(&mut seen);
    }
    assert!(seen.iter().any(|l| l.starts_with("STATUS=collecting into ")), "{seen:?}");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    while !seen.iter().any(|l| l == "STOPPING=1") {
        recv(&mut seen);
    }
    assert!(child.wait().unwrap().success());
}

/// The text of the collector of `dir`, and its compact file.
fn collector_files(dir: &Path) -> (PathBuf, PathBuf) {
    let text = dir.join(catalog_names(dir).into_iter().find(|f| f.ends_with(".collector.txt")).unwrap());
    (text.clone(), text.with_extension("icat"))
}

/// Wait until the collector of `dir` has compacted: its compact file holds `n` entries and
/// its text is empty.
fn wait_compacted(dir: &Path, n: usize) {
    let (text, icat) = collector_files(dir);
    let t0 = Instant::now();
    loop {
        let compacted = icat.exists()
            && std::fs::metadata(&text).is_ok_and(|m| m.len() == 0)
            && icicle_plugins_prism::catalog::CompactCatalog::open(&icat).is_ok_and(|c| c.len() == n);
        if compacted {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never compacted to {n} entries");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_collector_compacts_when_idle_and_at_stop_and_keeps_every_record() {
    let (_tmp, data, catalog, host) = scratch();
    let mut child = Command::new(CATALOGD)
        .args(["run", "--compact-idle-secs", "0.3", "--dir"])
        .arg(&catalog)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut String::new()).unwrap();
    let collector = Collector { child, dir: catalog.clone() };
    let out = host_cmd(&host, &data, &catalog, "fork", 10).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Idle: compacted, the text emptied; a reader maps the compact file alone.
    wait_compacted(&catalog, 20);
    let loaded = icicle_plugins_prism::catalog::load_dir(&catalog).unwrap();
    assert_eq!(loaded.len(), 20);
    // More records while it runs: appended to the emptied text, compacted with the earlier ones.
    let out = host_cmd(&host, &data, &catalog, "threads", 2).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_compacted(&catalog, 20 + 8);
    // A text small beside the compact file waits for more (or for the stop): idle compactions
    // rewrite the compact file only once the text is an eighth of its size.
    let out = host_cmd(&host, &data, &catalog, "threads", 30).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_compacted(&catalog, 20 + 120);
    let (text, icat) = collector_files(&catalog);
    let out = host_cmd(&host, &data, &catalog, "fork", 1).output().unwrap();
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(1500));
    let (t, c) = (std::fs::metadata(&text).unwrap().len(), std::fs::metadata(&icat).unwrap().len());
    assert!(t > 0 && t * 8 < c, "two records beside {c} compact bytes: the text has {t} bytes");
    collector.stop();
    // At stop: the text went, the compact file holds everything, one entry per path.
    let files = catalog_names(&catalog);
    assert!(files.len() == 1 && files[0].ends_with(".collector.icat"), "{files:?}");
    let mut want = series("child", 10);
    want.extend(series("parent", 10));
    for t in 0..4 {
        want.extend(series(&format!("t{t}"), 30));
    }
    want.sort();
    assert_eq!(names(&merged(&catalog)), want);
    // A new collector merges its records into the same compact file at its stop.
    let collector = Collector::run(&catalog);
    let out = host_cmd(&host, &data, &catalog, "fork", 2).output().unwrap();
    assert!(out.status.success());
    collector.stop();
    let got: BTreeSet<String> = names(&merged(&catalog)).into_iter().collect();
    assert_eq!(got.len(), 140, "child-0/1 and parent-0/1 were written again: {got:?}");
    assert_eq!(catalog_names(&catalog).len(), 1, "{:?}", catalog_names(&catalog));
}
