//! A catalog directory that fills up or cannot be written: reported once, counted, and never
//! a cut-short entry that reads as complete.

use super::concurrency::{assert_finished, bounded, disk_sizes};
use super::*;

/// Writes N files f-NNN.bin (7i+1 bytes) in DIR with open, write and close, checking that
/// close keeps errno; then prints `ok lost=K`, K read from the agent's counter (`none`
/// without the agent).
const MANY_FILES: &str = r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 3) return 1;
    int n = atoi(argv[2]);
    char buf[4096];
    for (int i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/f-%03d.bin", argv[1], i);
        memset(buf, 'a' + i % 26, sizeof buf);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, buf, (size_t)(7 * i + 1)) != 7 * i + 1) return 2;
        errno = EDOM;
        if (close(fd) != 0 || errno != EDOM) return 3;
    }
    const uint64_t *lost = dlsym(RTLD_DEFAULT, "icicle_catalog_agent_lost");
    if (lost)
        printf("ok lost=%llu\n", (unsigned long long)*lost);
    else
        printf("ok lost=none\n");
    return 0;
}
"#;

/// The files under `data` with their contents.
fn contents(data: &Path) -> BTreeMap<String, Vec<u8>> {
    disk_sizes(data).into_keys().map(|n| (n.clone(), std::fs::read(data.join(&n)).unwrap())).collect()
}

/// Runs `many_files DIR n` without the agent in `tmp/plain` and returns the files it wrote:
/// what the host produces on its own.
fn plain_run(tmp: &Path, prog: &Path, n: usize) -> BTreeMap<String, Vec<u8>> {
    let plain = tmp.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let out = Command::new(prog).arg(&plain).arg(n.to_string()).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok lost=none\n");
    let files = contents(&plain);
    assert_eq!(files.len(), n);
    files
}

/// The `K` of `ok lost=K`.
fn lost(stdout: &[u8]) -> usize {
    let s = String::from_utf8_lossy(stdout);
    s.strip_prefix("ok lost=").and_then(|k| k.trim_end().parse().ok()).unwrap_or_else(|| panic!("{s}"))
}

/// The one line the agent prints about `dir`.
fn report(dir: &Path, error: &str, errno: i32) -> String {
    format!(
        "icicle catalog agent: cannot write the catalog in {}: {error} (errno {errno}); records not written are lost and counted in icicle_catalog_agent_lost\n",
        dir.display()
    )
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(Tmpfs(dir.to_path_buf()))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fill the file system under `dir` with a hidden file, then give back `free` bytes.
fn fill_leaving(dir: &Path, free: u64) {
    use std::io::Write;
    let filler = dir.join(".filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = [0u8; 4096];
    let mut len = 0u64;
    while let Ok(n @ 1..) = f.write(&chunk) {
        len += n as u64;
    }
    assert!(len > free, "the file system held only {len} bytes");
    f.set_len(len - free).unwrap();
}

#[test]
fn a_full_catalog_dir_is_reported_once_and_leaves_no_half_entry() {
    const N: usize = 60;
    let (tmp, data, _) = scratch();
    let mnt = tmp.path().join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    let _mounted = match Tmpfs::mount(&mnt, "64k") {
        Ok(m) => m,
        Err(e) => {
            eprintln!("skipped: cannot mount a tmpfs ({e}); the test needs root");
            return;
        }
    };
    // Room for a dozen or so entries of the 60.
    fill_leaving(&mnt, 8192);
    let prog = compile_c(tmp.path(), "many_files", MANY_FILES);
    let out = under_agent(bounded(&prog).arg(&data).arg(N.to_string()), &mnt, &data, "emulate")
        .env("ICICLE_EMULATED_LAYOUT", SPEC)
        .output()
        .unwrap();
    assert_finished(&out, "many_files");
    // Exactly one line on stderr, naming the directory and the errno.
    assert_eq!(String::from_utf8_lossy(&out.stderr), report(&mnt, "No space left on device", 28));
    let lost = lost(&out.stdout);

    // One catalog file, every entry whole: it ends at an `end`, nothing is rejected, and each
    // entry is a file the host wrote, with its metadata on disk.
    let files = catalog_files(&mnt);
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = std::fs::read(&files[0]).unwrap();
    assert!(
        bytes.ends_with(b"\nend\n"),
        "a partial entry at the end: {:?}",
        String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(200)..])
    );
    let cat = Catalog::read_dir(&mnt).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    assert!(!cat.entries.is_empty() && lost > 0, "{} entries, {lost} lost", cat.entries.len());
    assert_eq!(cat.entries.len() + lost, N, "every close is either an entry or counted lost");
    let entries = by_path(&cat);
    assert_eq!(entries.len(), cat.entries.len(), "a path recorded twice");
    for (path, e) in entries {
        let md = std::fs::symlink_metadata(&path).unwrap();
        let st = StatFields::from_metadata(&md);
        let e = e[0];
        assert_eq!(
            (e.lstat.size, e.lstat.mode, e.lstat.ino, e.lstat.nlink),
            (st.size, st.mode, st.ino, st.nlink),
            "{path}"
        );
        assert_eq!(e.layout.as_ref().map(Vec::len), Some(1), "{path}");
    }
    // The host's own results are those of a run without the agent.
    assert_eq!(contents(&data), plain_run(tmp.path(), &prog, N));
}

#[test]
fn a_catalog_dir_that_cannot_be_created_is_reported_once_and_changes_nothing() {
    const N: usize = 12;
    let (tmp, data, _) = scratch();
    // A regular file where the catalog directory's parent should be.
    let blocker = tmp.path().join("blocker");
    std::fs::write(&blocker, "not a directory").unwrap();
    let catalog = blocker.join("catalog");
    let prog = compile_c(tmp.path(), "many_files", MANY_FILES);
    let out = under_agent(bounded(&prog).arg(&data).arg(N.to_string()), &catalog, &data, "emulate").output().unwrap();
    assert_finished(&out, "many_files");
    assert_eq!(String::from_utf8_lossy(&out.stderr), report(&catalog, "Not a directory", 20));
    assert_eq!(lost(&out.stdout), N);
    assert_eq!(std::fs::read_to_string(&blocker).unwrap(), "not a directory");
    assert_eq!(contents(&data), plain_run(tmp.path(), &prog, N));
}

#[test]
fn a_catalog_cut_anywhere_reads_as_its_whole_entries_and_at_most_one_reject() {
    let (tmp, data, catalog) = scratch();
    let prog = compile_c(tmp.path(), "many_files", MANY_FILES);
    let out = under_agent(bounded(&prog).arg(&data).arg("4"), &catalog, &data, "emulate")
        .env("ICICLE_EMULATED_LAYOUT", SPEC)
        .output()
        .unwrap();
    assert_finished(&out, "many_files");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok lost=0\n");
    let files = catalog_files(&catalog);
    let bytes = std::fs::read(&files[0]).unwrap();
    let full = Catalog::parse(&files[0], &bytes);
    assert_eq!((full.entries.len(), full.rejects.len()), (4, 0));
    // Where each entry ends: just after its `end` line's newline.
    let ends: Vec<usize> =
        (4..=bytes.len()).filter(|&p| &bytes[p - 4..p] == b"end\n" && (p == 4 || bytes[p - 5] == b'\n')).collect();
    assert_eq!(ends.len(), 4);
    // What a reader finds in a file cut at any byte (a write cut short by a full disk): the
    // entries before the cut, whole; a cut inside an entry is one reject naming the file and
    // the cut's last line; an entry is complete once its `end` is there, newline or not.
    for cut in 0..=bytes.len() {
        let text = &bytes[..cut];
        let cat = Catalog::parse(&files[0], text);
        let whole = ends.iter().filter(|&&e| e - 1 <= cut).count();
        assert_eq!(cat.entries, full.entries[..whole], "cut at {cut}");
        let at_boundary = cut == 0 || ends.iter().any(|&e| cut == e || cut == e - 1);
        if at_boundary {
            assert!(cat.rejects.is_empty(), "cut at {cut}: {:?}", cat.rejects);
        } else {
            let last_line = String::from_utf8_lossy(text).lines().count();
            assert_eq!(cat.rejects.len(), 1, "cut at {cut}: {:?}", cat.rejects);
            assert_eq!(
                (&cat.rejects[0].file, cat.rejects[0].line),
                (&files[0], last_line),
                "cut at {cut}: {}",
                cat.rejects[0]
            );
        }
    }
}
