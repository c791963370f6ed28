//! Signal handlers that write files while the agent works, and children forked without exec.

use std::process::Output;

use super::*;

/// How long a run may take before it counts as hung (it is then killed).
const HANG_SECS: &str = "20";

/// `prog` behind `timeout -s KILL 20`.
pub(crate) fn bounded(prog: &Path) -> Command {
    let mut c = Command::new("timeout");
    c.args(["-s", "KILL", HANG_SECS]).arg(prog);
    c
}

/// The run ended by itself (not killed as hung) and succeeded.
pub(crate) fn assert_finished(out: &Output, what: &str) {
    assert_ne!(out.status.code(), Some(137), "{what}: hung (killed after {HANG_SECS} s)");
    assert!(out.status.success(), "{what}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
}

/// Every regular file under `data` (names relative to it) with its size.
pub(crate) fn disk_sizes(data: &Path) -> BTreeMap<String, u64> {
    let mut files = Vec::new();
    regular_files(data, &mut files);
    files
        .iter()
        .map(|p| (p.strip_prefix(data).unwrap().to_string_lossy().into_owned(), std::fs::metadata(p).unwrap().len()))
        .collect()
}

/// Each catalog file's entries (names relative to `data`, sizes) by the pid its name carries
/// (`catalog.<host>.<pid>.txt`); no file has a reject.
pub(crate) fn entries_by_pid(catalog: &Path, data: &Path) -> BTreeMap<u32, Vec<(String, u64)>> {
    let canon = std::fs::canonicalize(data).unwrap();
    let mut out: BTreeMap<u32, Vec<(String, u64)>> = BTreeMap::new();
    for f in catalog_files(catalog) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let pid = name
            .strip_suffix(".txt")
            .and_then(|n| n.rsplit('.').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{name}"));
        let cat = Catalog::read_file(&f).unwrap();
        assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
        let entries = out.entry(pid).or_default();
        for e in &cat.entries {
            let rel = Path::new(&e.path).strip_prefix(&canon).unwrap_or_else(|_| panic!("{} outside the root", e.path));
            entries.push((rel.to_string_lossy().into_owned(), e.size()));
        }
    }
    out
}

/// All entries of the catalog, each path recorded exactly once, as name -> size.
fn recorded_once(catalog: &Path, data: &Path) -> BTreeMap<String, u64> {
    let mut all = BTreeMap::new();
    for (name, size) in entries_by_pid(catalog, data).into_values().flatten() {
        assert!(all.insert(name.clone(), size).is_none(), "{name} recorded twice");
    }
    all
}

#[test]
fn signal_handlers_that_open_and_close_files_never_hang_the_host() {
    const RUNS: usize = 100;
    const PER_THREAD: u64 = 200;
    let tmp = tempfile::tempdir().unwrap();
    let prog =
        cc(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/signal_storm.c"), &tmp.path().join("signal_storm"));
    let mut handler_files = 0;
    for run in 0..RUNS {
        let dir = tmp.path().join(format!("run{run}"));
        let (data, catalog) = (dir.join("data"), dir.join("catalog"));
        std::fs::create_dir_all(&data).unwrap();
        let out = under_agent(bounded(&prog).arg(&data).arg(PER_THREAD.to_string()), &catalog, &data, "emulate")
            .output()
            .unwrap();
        assert_finished(&out, &format!("run {run}"));
        assert_eq!((String::from_utf8_lossy(&out.stdout).as_ref(), out.stderr.len()), ("ok\n", 0), "run {run}");
        let disk = disk_sizes(&data);
        for who in ["m", "t"] {
            for i in 0..PER_THREAD {
                assert_eq!(disk.get(&format!("{who}-{i}.bin")), Some(&(i + 1)), "run {run}");
            }
        }
        // Every file on disk, the main loop's, the writer thread's and the handlers', once each
        // with its size: no call was skipped.
        assert_eq!(recorded_once(&catalog, &data), disk, "run {run}");
        handler_files += disk.keys().filter(|n| n.starts_with("h-")).count();
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(handler_files > 0, "no signal handler wrote a file");
    eprintln!("{RUNS} runs, none hung; {handler_files} files written by signal handlers, all recorded");
}

/// Python with the `fork` start method: a pool of 4 workers writes w-0.bin .. w-19.bin (i+1
/// bytes); the first 4 tasks wait for each other, so every worker writes. Prints the parent's
/// pid, then `name pid` for each file.
const POOL_SCRIPT: &str = r#"import multiprocessing as mp, os, sys

def work(i):
    if i < 4:
        barrier.wait(timeout=15)
    name = "w-%d.bin" % i
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(b"x" * (i + 1))
    return name, os.getpid()

if __name__ == "__main__":
    mp.set_start_method("fork")
    barrier = mp.Barrier(4)
    with mp.Pool(4) as pool:
        done = pool.map(work, range(20), chunksize=1)
    print(os.getpid())
    for name, pid in done:
        print(name, pid)
"#;

#[test]
fn python_multiprocessing_fork_workers_are_recorded_in_their_own_catalog_files() {
    if !Command::new("python3").arg("-c").arg("import multiprocessing").output().is_ok_and(|o| o.status.success()) {
        eprintln!("python3 with multiprocessing not found: skipped");
        return;
    }
    let (tmp, data, catalog) = scratch();
    let script = tmp.path().join("pool.py");
    std::fs::write(&script, POOL_SCRIPT).unwrap();
    let out = under_agent(bounded(Path::new("python3")).arg(&script).arg(&data), &catalog, &data, "emulate")
        .output()
        .unwrap();
    assert_finished(&out, "python3 pool.py");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut lines = stdout.lines();
    let parent: u32 = lines.next().unwrap().parse().unwrap();
    let writer: BTreeMap<String, u32> =
        lines.map(|l| l.split_once(' ').map(|(n, p)| (n.to_string(), p.parse().unwrap())).unwrap()).collect();
    let workers: std::collections::BTreeSet<u32> = writer.values().copied().collect();
    assert_eq!(workers.len(), 4, "{writer:?}");
    assert!(!workers.contains(&parent));

    let want: BTreeMap<String, u64> = (0..20u64).map(|i| (format!("w-{i}.bin"), i + 1)).collect();
    assert_eq!(disk_sizes(&data), want);
    // Each file once, in the catalog file of the worker that wrote it; the parent has none.
    let mut got = BTreeMap::new();
    for (pid, entries) in entries_by_pid(&catalog, &data) {
        for (name, size) in entries {
            assert_eq!(writer.get(&name), Some(&pid), "{name} in the catalog of pid {pid}");
            assert!(got.insert(name.clone(), size).is_none(), "{name} recorded twice");
        }
    }
    assert_eq!(got, want);
}

/// A parent with parent.bin open across three forks: one child writes child.bin, appends to
/// parent.bin through the inherited descriptor and closes it, then `_exit`s; one leaves
/// left-open.bin open and stdio.txt unflushed and calls `exit`; one execs a shell that writes
/// exec.txt. Prints `role pid` for the parent and each child.
const FORKER: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void reap(pid_t c) {
    int st = 0;
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) exit(4);
}
int main(int argc, char **argv) {
    if (argc < 2 || chdir(argv[1]) != 0) return 2;
    int fd = open("parent.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "ab", 2) != 2) return 2;
    pid_t closer = fork();
    if (closer == 0) {
        int g = open("child.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (g < 0 || write(g, "c", 1) != 1 || close(g) != 0) _exit(3);
        if (write(fd, "XY", 2) != 2 || close(fd) != 0) _exit(3);
        _exit(0);
    }
    reap(closer);
    pid_t exiter = fork();
    if (exiter == 0) {
        int g = open("left-open.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        FILE *s = fopen("stdio.txt", "w");
        if (g < 0 || write(g, "12345", 5) != 5 || !s || fputs("buffered\n", s) < 0) exit(3);
        exit(0);
    }
    reap(exiter);
    pid_t execer = fork();
    if (execer == 0) {
        execl("/bin/sh", "sh", "-c", "echo hi > exec.txt", (char *)0);
        _exit(5);
    }
    reap(execer);
    if (write(fd, "cdef", 4) != 4 || close(fd) != 0) return 7;
    printf("parent %d\ncloser %d\nexiter %d\nexecer %d\n", (int)getpid(), (int)closer, (int)exiter, (int)execer);
    return 0;
}
"#;

/// `role pid` lines as a map.
fn roles(stdout: &[u8]) -> BTreeMap<String, u32> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| l.split_once(' ').map(|(r, p)| (r.to_string(), p.parse().unwrap())).unwrap())
        .collect()
}

fn named(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|&(n, s)| (n.to_string(), s)).collect()
}

#[test]
fn a_forked_child_records_what_it_writes_in_its_own_catalog_file() {
    let (tmp, data, catalog) = scratch();
    let prog = compile_c(tmp.path(), "forker", FORKER);
    let out = under_agent(bounded(&prog).arg(&data), &catalog, &data, "emulate").output().unwrap();
    assert_finished(&out, "forker");
    let pid = roles(&out.stdout);
    assert_eq!(pid.len(), 4, "{pid:?}");
    let by_pid = entries_by_pid(&catalog, &data);
    let want: BTreeMap<u32, Vec<(String, u64)>> = [
        // parent.bin once, by the parent, with the bytes the child added: the child does not
        // record a descriptor it inherited, even when it closes it.
        (pid["parent"], named(&[("parent.bin", 8)])),
        (pid["closer"], named(&[("child.bin", 1)])),
        // Recorded at exit(), stdio flushed first.
        (pid["exiter"], named(&[("left-open.bin", 5), ("stdio.txt", 9)])),
        (pid["execer"], named(&[("exec.txt", 3)])),
    ]
    .into_iter()
    .collect();
    let mut sorted = by_pid.clone();
    sorted.values_mut().for_each(|v| v.sort());
    assert_eq!(sorted, want);
    assert_eq!(recorded_once(&catalog, &data), disk_sizes(&data));
}

/// Two threads write files without pause while the main thread forks KIDS children one after
/// another; child k writes k-K.bin (k+1 bytes) and leaves by `_exit` after closing it (odd k)
/// or by `exit` with it still open (even k). Prints `K pid` per child.
const FORK_STORM: &str = r#"#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static const char *dir;
static int stop;
static void *writer(void *arg) {
    long t = (long)arg;
    char p[4200];
    for (int i = 0; !__atomic_load_n(&stop, __ATOMIC_RELAXED); i++) {
        snprintf(p, sizeof p, "%s/t%ld-%d.bin", dir, t, i);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, "tt", 2) != 2 || close(fd) != 0) _exit(9);
    }
    return NULL;
}
int main(int argc, char **argv) {
    if (argc != 3) return 1;
    dir = argv[1];
    int kids = atoi(argv[2]);
    pthread_t th[2];
    for (long t = 0; t < 2; t++)
        if (pthread_create(&th[t], NULL, writer, (void *)t) != 0) return 2;
    for (int k = 0; k < kids; k++) {
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            char p[4200], buf[64];
            snprintf(p, sizeof p, "%s/k-%d.bin", dir, k);
            memset(buf, 'k', sizeof buf);
            int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || write(fd, buf, (size_t)k + 1) != k + 1) _exit(3);
            if (k % 2) {
                if (close(fd) != 0) _exit(3);
                _exit(0);
            }
            exit(0);
        }
        int st = 0;
        if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 4;
        printf("%d %d\n", k, (int)c);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    return 0;
}
"#;

#[test]
fn children_forked_while_other_threads_hold_the_agents_locks_record_their_files() {
    const RUNS: usize = 10;
    const KIDS: u64 = 30;
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_c(tmp.path(), "fork_storm", FORK_STORM);
    for run in 0..RUNS {
        let dir = tmp.path().join(format!("run{run}"));
        let (data, catalog) = (dir.join("data"), dir.join("catalog"));
        std::fs::create_dir_all(&data).unwrap();
        let out =
            under_agent(bounded(&prog).arg(&data).arg(KIDS.to_string()), &catalog, &data, "emulate").output().unwrap();
        assert_finished(&out, &format!("run {run}"));
        let kid = roles(&out.stdout);
        assert_eq!(kid.len(), KIDS as usize, "run {run}");
        for (pid, entries) in entries_by_pid(&catalog, &data) {
            let own: Vec<&(String, u64)> = entries.iter().filter(|(n, _)| n.starts_with("k-")).collect();
            match kid.iter().find(|(_, &p)| p == pid) {
                // A child's file holds its own file only.
                Some((k, _)) => {
                    assert_eq!(entries, vec![(format!("k-{k}.bin"), k.parse::<u64>().unwrap() + 1)], "run {run}")
                }
                // The parent's holds the threads' files only.
                None => assert!(own.is_empty(), "run {run}: {own:?} in the parent's catalog"),
            }
        }
        let disk = disk_sizes(&data);
        assert_eq!(disk.keys().filter(|n| n.starts_with("k-")).count(), KIDS as usize);
        assert_eq!(recorded_once(&catalog, &data), disk, "run {run}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
