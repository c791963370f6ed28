//! The catalog agent for real: C programs, shells and Python run under `LD_PRELOAD`, the
//! catalog checked against the files on disk and the layouts the provider gives.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use icicle_core::traits::LayoutComponent;
use icicle_plugins_prism::catalog::{Catalog, CatalogEntry, StatFields};
use icicle_plugins_prism::layout::{write_sidecar, EmulatedLayouts, LayoutProvider};

/// Signal handlers and forked children.
#[path = "agent/concurrency.rs"]
mod concurrency;
/// A catalog directory that is full or cannot be written.
#[path = "agent/failing_dir.rs"]
mod failing_dir;
/// A shared catalog directory where another member plants names; set-user-ID programs.
#[path = "agent/shared_dir.rs"]
mod shared_dir;

const SPEC: &str = "pool=113,167,204,10,60;stripe_size=64K;pfl=128K:1,1M:2,EOF:4";

/// The agent library. `cargo test` does not build a cdylib for its own tests, so it is
/// built here (a no-op when fresh), with the profile and target dir of this test binary.
fn agent() -> PathBuf {
    static SO: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SO.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let target = profile_dir.parent().unwrap();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "icicle-prism-agent", "--lib", "--target-dir"])
            .arg(target)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if release {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("cargo");
        assert!(st.success(), "building the agent failed");
        let so = profile_dir.join("libcatalog_agent.so");
        assert!(so.is_file(), "{} not built", so.display());
        so
    })
    .clone()
}

fn compile_writer(dir: &Path) -> PathBuf {
    cc(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/writer.c"), &dir.join("writer"))
}

/// Compile C source `src` to executable `out`.
fn cc(src: &Path, out: &Path) -> PathBuf {
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-pthread", "-o"])
        .arg(out)
        .arg(src)
        .status()
        .expect("cc (build-essential) is needed");
    assert!(st.success(), "cc {}", src.display());
    out.to_path_buf()
}

/// A scratch directory with `data/` (the tracked root, created) and `catalog/` (not created).
fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let catalog = tmp.path().join("catalog");
    (tmp, data, catalog)
}

/// `cmd` with the agent preloaded, writing to `catalog`, tracking `root`, layouts from `layout`.
fn under_agent<'c>(cmd: &'c mut Command, catalog: &Path, root: &Path, layout: &str) -> &'c mut Command {
    cmd.env("LD_PRELOAD", agent())
        .env("CATALOG_DIR", catalog)
        .env("ICICLE_CATALOG_ROOT", root)
        .env("ICICLE_CATALOG_LAYOUT", layout)
}

fn regular_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            regular_files(&e.path(), out);
        } else if ft.is_file() && !e.file_name().to_string_lossy().starts_with('.') {
            out.push(e.path());
        }
    }
}

fn by_path(cat: &Catalog) -> BTreeMap<String, Vec<&CatalogEntry>> {
    let mut m: BTreeMap<String, Vec<&CatalogEntry>> = BTreeMap::new();
    for e in &cat.entries {
        m.entry(e.path.clone()).or_default().push(e);
    }
    m
}

#[test]
fn a_c_program_under_ld_preload_gets_a_catalog_matching_the_disk() {
    let (tmp, data, catalog) = scratch();
    let writer = compile_writer(tmp.path());
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(data.join("sub")).unwrap();
    // An explicit layout for one file (the emulation's `lfs setstripe`), set before writing.
    const K: u64 = 1024;
    let explicit = vec![
        LayoutComponent { start: 0, end: 1024 * K, stripe_size: 512 * K, osts: vec![300] },
        LayoutComponent { start: 1024 * K, end: u64::MAX, stripe_size: 512 * K, osts: vec![301, 302] },
    ];
    write_sidecar(&data.join("sub/created.bin"), &explicit).unwrap();
    let out = under_agent(Command::new(&writer).arg(&data).arg(&outside), &catalog, &data, "emulate")
        .env("ICICLE_EMULATED_LAYOUT", SPEC)
        .output()
        .unwrap();
    assert!(out.status.success(), "writer failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");

    let files: Vec<_> =
        std::fs::read_dir(&catalog).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(files.len(), 1, "one catalog file per process: {files:?}");
    assert!(files[0].starts_with("catalog.") && files[0].ends_with(".txt"));
    let cat = Catalog::read_dir(&catalog).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);

    // Ground truth: every regular file the writer made under the root, once each.
    let mut truth = Vec::new();
    regular_files(&data, &mut truth);
    truth.sort();
    let names: Vec<String> =
        truth.iter().map(|p| p.strip_prefix(&data).unwrap().to_string_lossy().into_owned()).collect();
    let mut expected_names =
        vec!["errno.bin", "left-open.bin", "readonly.bin", "rel.bin", "sub/at.bin", "sub/created.bin", "twice.bin"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
    for t in 0..4 {
        for i in 0..5 {
            expected_names.push(format!("threads/t{t}-{i}.bin"));
        }
    }
    expected_names.sort();
    assert_eq!(names, expected_names);
    let entries = by_path(&cat);
    let canon = std::fs::canonicalize(&data).unwrap();
    let provider = EmulatedLayouts::parse(SPEC).unwrap();
    assert_eq!(entries.len(), truth.len(), "{:?}", entries.keys().collect::<Vec<_>>());
    for p in &truth {
        let key = canon.join(p.strip_prefix(&data).unwrap()).to_string_lossy().into_owned();
        let e = entries.get(&key).unwrap_or_else(|| panic!("{key} not in the catalog"));
        assert_eq!(e.len(), 1, "{key} recorded {} times", e.len());
        let e = e[0];
        let md = std::fs::symlink_metadata(p).unwrap();
        let st = StatFields::from_metadata(&md);
        assert_eq!(
            (e.lstat.size, e.lstat.mode, e.lstat.ino, e.lstat.uid, e.lstat.nlink),
            (st.size, st.mode, st.ino, st.uid, st.nlink),
            "{key}"
        );
        assert_eq!(e.stat.map(|s| (s.size, s.mode)), Some((md.size(), md.mode())));
        let comps = provider.layout(Path::new(&key), md.size()).unwrap();
        let want = CatalogEntry::new(key.clone(), st, Some(st), Some(&comps));
        assert_eq!(e.layout, want.layout, "{key}");
    }
    // Sizes and modes the program chose.
    let get = |n: &str| entries[&canon.join(n).to_string_lossy().into_owned()][0];
    assert_eq!(get("rel.bin").lstat.size, 5000);
    assert_eq!(get("rel.bin").lstat.mode & 0o777, 0o640 & !umask());
    assert_eq!(get("sub/at.bin").lstat.size, 70000);
    assert_eq!(get("threads/t3-4.bin").lstat.size, 3000 + 4 * 37 + 1);
    assert_eq!(get("left-open.bin").lstat.size, 123);
    // The explicit layout, line by line: `<path> <ost> <start> <end> <interval> <stripe> <size>`.
    let created = get("sub/created.bin");
    let size = 3 * 1024 * K + 1;
    let lines: Vec<_> = created
        .layout
        .as_ref()
        .unwrap()
        .iter()
        .map(|l| (l.ost, l.start, l.end, l.interval, l.stripe_size, l.file_size))
        .collect();
    assert_eq!(
        lines,
        vec![
            (300, 0, 1024 * K, 512 * K, 512 * K, size),
            (301, 1024 * K, size, 1024 * K, 512 * K, size),
            (302, 1536 * K, size, 1024 * K, 512 * K, size)
        ]
    );
    // A 5000-byte file: only the first PFL component is instantiated.
    assert_eq!(get("rel.bin").layout.as_ref().unwrap().len(), 1);
    assert_eq!(get("sub/at.bin").layout.as_ref().unwrap().len(), 1);
    assert!(!cat.entries.iter().any(|e| e.path.contains("outside")));
}

fn umask() -> u32 {
    // SAFETY: umask is process-wide; set it back at once.
    unsafe {
        let m = libc_umask(0o022);
        libc_umask(m);
        m
    }
}

extern "C" {
    #[link_name = "umask"]
    fn libc_umask(mask: u32) -> u32;
}

#[test]
fn a_shell_redirect_is_recorded_and_layouts_can_come_from_lfs_getstripe() {
    let (tmp, data, catalog) = scratch();
    // A stand-in `lfs` printing captured `lfs getstripe` output for a plain 2-stripe layout.
    let lfs = tmp.path().join("lfs");
    std::fs::write(
        &lfs,
        "#!/bin/sh\n[ \"$1\" = getstripe ] || exit 1\nprintf '%s\\n' \"$2\" 'lmm_stripe_count:  2' 'lmm_stripe_size:   1048576' 'lmm_pattern:       raid0' 'lmm_layout_gen:    0' 'lmm_stripe_offset: 113' '\tobdidx\t\t objid\t\t objid\t\t group' '\t   113\t       1091894\t     0x10a936\t             0' '\t   204\t       1091895\t     0x10a937\t             0'\n",
    )
    .unwrap();
    std::fs::set_permissions(&lfs, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg("cd \"$1\" && echo hello > viash.txt && cat viash.txt && cat viash.txt > /dev/null")
        .arg("sh")
        .arg(&data);
    let out = under_agent(&mut sh, &catalog, &data, "lfs").env("ICICLE_CATALOG_LFS", &lfs).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    let cat = Catalog::read_dir(&catalog).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    assert_eq!(cat.entries.len(), 1, "{:?}", cat.entries);
    let e = &cat.entries[0];
    assert!(e.path.ends_with("/data/viash.txt"));
    assert_eq!(e.lstat.size, 6);
    let lines: Vec<_> = e.layout.as_ref().unwrap().iter().map(|l| (l.ost, l.start, l.end, l.interval)).collect();
    assert_eq!(lines, vec![(113, 0, 6, 2 << 20), (204, 1 << 20, 6, 2 << 20)]);

    // Without CATALOG_DIR the agent only passes calls through: no catalog file anywhere it
    // could go (the working directory, the written file's directory, the temp dir, the old
    // CATALOG_DIR) and nothing printed.
    let quiet = tmp.path().join("quiet");
    let cwd = tmp.path().join("cwd");
    std::fs::create_dir_all(&quiet).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let before = catalog_files(tmp.path());
    let out = Command::new("sh")
        .arg("-c")
        .arg("echo x > \"$1/f\" && echo y > g")
        .arg("sh")
        .arg(&quiet)
        .current_dir(&cwd)
        .env("LD_PRELOAD", agent())
        .env_remove("CATALOG_DIR")
        .env("ICICLE_CATALOG_ROOT", tmp.path())
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(catalog_files(tmp.path()), before);
    assert_eq!(before.len(), 1, "{before:?}");
    let names = |d: &Path| {
        std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect::<Vec<_>>()
    };
    assert_eq!((names(&quiet), names(&cwd)), (vec!["f".to_string()], vec!["g".to_string()]));
}

/// Every `catalog.*` file under `dir`.
fn catalog_files(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    regular_files(dir, &mut all);
    all.retain(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("catalog.")));
    all.sort();
    all
}

/// Compile a small C program from `src` into `dir/name`.
fn compile_c(dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    cc(&c, &dir.join(name))
}

#[test]
fn exit_does_not_wait_for_a_thread_that_holds_stdin() {
    let (tmp, data, catalog) = scratch();
    // A host whose reader thread sits in getline (holding stdin's lock) while main exits with
    // a file still open: a flush of every stream at exit would wait for stdin forever.
    let prog = compile_c(
        tmp.path(),
        "stdin_reader",
        r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *reader(void *a) { char *l = NULL; size_t n = 0; (void)a; getline(&l, &n, stdin); return NULL; }
int main(int argc, char **argv) {
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (argc < 2 || fd < 0 || write(fd, "abc", 3) != 3) return 2;
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    usleep(200000);
    printf("bye\n");
    exit(0);
}
"#,
    );
    let mut child = under_agent(
        Command::new("timeout").arg("20").arg(&prog).arg(data.join("open.bin")),
        &catalog,
        &data,
        "emulate",
    )
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // Keep stdin open (and empty) until the program has exited.
    let stdin = child.stdin.take();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    assert!(out.status.success(), "{} {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "bye\n");
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let cat = Catalog::read_dir(&catalog).unwrap();
    assert_eq!(cat.entries.len(), 1, "{:?}", cat.entries);
    assert_eq!(cat.entries[0].size(), 3);
}

/// `tests/stdio_writer.c` built as a hardened program is (`-O2 -D_FORTIFY_SOURCE=2`).
fn compile_fortified(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stdio_writer.c");
    let out = dir.join("stdio_writer");
    let st = Command::new("cc")
        .args(["-O2", "-Wall", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc (build-essential) is needed");
    assert!(st.success(), "cc {}", src.display());
    out
}

/// The dynamic symbols `exe` imports (`nm -D --undefined-only`), without their versions.
fn imports(exe: &Path) -> std::collections::BTreeSet<String> {
    let out = Command::new("nm").args(["-D", "--undefined-only"]).arg(exe).output().expect("nm (binutils) is needed");
    assert!(out.status.success(), "nm {}", exe.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .collect()
}

/// Runs `stdio_writer DATA CASE` under the agent in a fresh scratch directory whose root holds
/// `append.txt`, `input.txt`, `fort.bin` and `fort64.bin` beforehand (written here, not through
/// the agent); returns the scratch dir, the root, the program's imports and the catalog.
fn run_stdio_writer(case: &str) -> (tempfile::TempDir, PathBuf, std::collections::BTreeSet<String>, Catalog) {
    let (tmp, data, catalog) = scratch();
    let prog = compile_fortified(tmp.path());
    for (name, text) in [
        ("append.txt", "old\n"),
        ("input.txt", "input data\n"),
        ("fort.bin", "stale, to be truncated\n"),
        ("fort64.bin", "stale\n"),
    ] {
        std::fs::write(data.join(name), text).unwrap();
    }
    let out = under_agent(Command::new(&prog).arg(&data).arg(case), &catalog, &data, "emulate")
        .env("ICICLE_EMULATED_LAYOUT", SPEC)
        .output()
        .unwrap();
    assert!(out.status.success(), "stdio_writer {case}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let cat = Catalog::read_dir(&catalog).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    let imports = imports(&prog);
    (tmp, data, imports, cat)
}

/// The catalog holds exactly one entry for every regular file under `data` but `not_recorded`,
/// with the metadata on disk and the provider's layout for the size on disk; returns each
/// file's name (relative to `data`) and recorded size.
fn assert_catalog_is_the_disk(data: &Path, cat: &Catalog, not_recorded: &[&str]) -> BTreeMap<String, u64> {
    let canon = std::fs::canonicalize(data).unwrap();
    let provider = EmulatedLayouts::parse(SPEC).unwrap();
    let mut truth = Vec::new();
    regular_files(data, &mut truth);
    truth.retain(|p| !not_recorded.iter().any(|n| p.strip_prefix(data).unwrap() == Path::new(n)));
    let entries = by_path(cat);
    let mut sizes = BTreeMap::new();
    for p in &truth {
        let name = p.strip_prefix(data).unwrap().to_string_lossy().into_owned();
        let key = canon.join(&name).to_string_lossy().into_owned();
        let e = entries
            .get(&key)
            .unwrap_or_else(|| panic!("{key} not in the catalog: {:?}", entries.keys().collect::<Vec<_>>()));
        assert_eq!(e.len(), 1, "{key} recorded {} times", e.len());
        let e = e[0];
        let md = std::fs::symlink_metadata(p).unwrap();
        let st = StatFields::from_metadata(&md);
        assert_eq!(
            (e.lstat.size, e.lstat.mode, e.lstat.ino, e.lstat.uid, e.lstat.nlink),
            (st.size, st.mode, st.ino, st.uid, st.nlink),
            "{key}"
        );
        assert_eq!(e.stat.map(|s| (s.size, s.mode)), Some((md.size(), md.mode())), "{key}");
        let comps = provider.layout(Path::new(&key), md.size()).unwrap();
        assert_eq!(e.layout, CatalogEntry::new(key.clone(), st, Some(st), Some(&comps)).layout, "{key}");
        sizes.insert(name, e.size());
    }
    assert_eq!(entries.len(), truth.len(), "entries for files not expected: {:?}", entries.keys().collect::<Vec<_>>());
    sizes
}

#[test]
fn files_written_through_stdio_are_recorded_at_fclose_with_their_final_sizes() {
    let (_tmp, data, imports, cat) = run_stdio_writer("stdio");
    for sym in ["fopen", "fopen64", "freopen", "fclose", "fdopen"] {
        assert!(imports.contains(sym), "stdio_writer does not import {sym}: {imports:?}");
    }
    // input.txt was only read (fopen "r"): not recorded; the fort files are not opened.
    let sizes = assert_catalog_is_the_disk(&data, &cat, &["input.txt", "fort.bin", "fort64.bin"]);
    let want: BTreeMap<String, u64> = [
        // fwrite'd, its tail still in the buffer when fclose was called.
        ("stdio.bin", 10_007),
        // fopen "a" onto the 4-byte file written before the program ran.
        ("append.txt", 13),
        // freopen finished first.txt and wrote second.txt through the same FILE.
        ("first.txt", 4),
        ("second.txt", 8),
        ("plus64.txt", 3),
        // open + fdopen, closed by fclose.
        ("fdopen.txt", 11),
        // never fclosed: flushed at exit before it was recorded.
        ("left-open.txt", 15),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), s))
    .collect();
    assert_eq!(sizes, want);
}

#[test]
fn a_fortified_openat_through_openat_2_is_recorded() {
    let (_tmp, data, imports, cat) = run_stdio_writer("fortify");
    // The hardened build calls the fortified entry points, never plain openat.
    assert!(imports.contains("__openat_2") && imports.contains("__openat64_2"), "{imports:?}");
    assert!(!imports.contains("openat") && !imports.contains("openat64"), "{imports:?}");
    // The files written before the program ran and not opened again are not in the catalog.
    let sizes = assert_catalog_is_the_disk(&data, &cat, &["input.txt", "append.txt"]);
    assert_eq!(sizes, BTreeMap::from([("fort.bin".to_string(), 777), ("fort64.bin".to_string(), 1234)]));
}

#[test]
fn files_made_by_the_mkstemp_family_are_recorded() {
    let (_tmp, data, imports, cat) = run_stdio_writer("mkstemp");
    for sym in ["mkstemp", "mkostemp", "mkstemps", "mkostemps", "mkstemp64"] {
        assert!(imports.contains(sym), "stdio_writer does not import {sym}: {imports:?}");
    }
    let sizes = assert_catalog_is_the_disk(&data, &cat, &["input.txt", "append.txt", "fort.bin", "fort64.bin"]);
    // One file per call, named from its template: prefix, six random characters, suffix.
    let got: Vec<(String, u64)> = sizes
        .iter()
        .map(|(n, &s)| {
            let (prefix, rest) = n.split_once('-').unwrap_or_else(|| panic!("{n}"));
            assert_eq!(rest.len(), 6 + if prefix.ends_with('s') { 4 } else { 0 }, "{n}");
            (prefix.to_string(), s)
        })
        .collect();
    let want: Vec<(String, u64)> = [("tmp", 100), ("tmp64", 500), ("tmpo", 200), ("tmpos", 400), ("tmps", 300)]
        .into_iter()
        .map(|(p, s)| (p.to_string(), s))
        .collect();
    assert_eq!(got, want);
}

/// Runs `rename_writer DATA OUTSIDE CASE` under the agent in a fresh scratch directory whose
/// root holds `foreign.txt` (written here, not through the agent); returns the scratch dir,
/// the root, the directory outside it and the catalog (read with no rejects).
fn run_rename_writer(case: &str) -> (tempfile::TempDir, PathBuf, PathBuf, Catalog) {
    let (tmp, data, catalog) = scratch();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let prog =
        cc(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rename_writer.c"), &tmp.path().join("rename_writer"));
    std::fs::write(data.join("foreign.txt"), "written before the program ran\n").unwrap();
    let out = under_agent(Command::new(&prog).arg(&data).arg(&outside).arg(case), &catalog, &data, "emulate")
        .env("ICICLE_EMULATED_LAYOUT", SPEC)
        .output()
        .unwrap();
    assert!(out.status.success(), "rename_writer {case}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let cat = Catalog::read_dir(&catalog).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    (tmp, data, outside, cat)
}

/// What swiftload checks of each entry the reader keeps (`Catalog::latest`): the file exists
/// with the catalogued size.
fn assert_latest_is_readable(cat: &Catalog) {
    for e in cat.latest() {
        let md = std::fs::metadata(&e.path).unwrap_or_else(|err| panic!("{}: {err} (a swiftload reject)", e.path));
        assert_eq!(md.len(), e.size(), "{}: size differs (a swiftload reject)", e.path);
    }
}

fn sizes(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|&(n, s)| (n.to_string(), s)).collect()
}

#[test]
fn a_temporary_renamed_after_close_is_catalogued_under_its_final_name_only() {
    let (_tmp, data, _outside, cat) = run_rename_writer("mkstemp");
    // Exactly the files on disk (the temporaries are gone), with their layouts.
    let got = assert_catalog_is_the_disk(&data, &cat, &["foreign.txt"]);
    assert_eq!(got, sizes(&[("out.bin", 5000), ("sub/final.dat", 1234)]));
    assert_eq!((cat.gone.len(), cat.superseded), (2, 2), "{:?}", cat.gone);
    assert_latest_is_readable(&cat);
}

#[test]
fn a_file_renamed_while_open_is_recorded_under_its_new_name() {
    let (_tmp, data, _outside, cat) = run_rename_writer("open");
    let got = assert_catalog_is_the_disk(&data, &cat, &["foreign.txt"]);
    // a.bin renamed then written on; b.bin recorded once before (its entry superseded); a
    // stdio stream renamed before its fclose.
    assert_eq!(got, sizes(&[("b2.bin", 150), ("renamed-open.bin", 4000), ("s-final.txt", 12)]));
    assert_eq!(cat.superseded, 1);
    assert_latest_is_readable(&cat);
}

#[test]
fn a_rename_over_a_recorded_file_supersedes_its_entry() {
    let (_tmp, data, _outside, cat) = run_rename_writer("over");
    let got = assert_catalog_is_the_disk(&data, &cat, &[]);
    // The old final.bin (9000 bytes) and target.bin (700 bytes) are replaced.
    assert_eq!(got, sizes(&[("final.bin", 2000), ("target.bin", 31)]));
    assert_latest_is_readable(&cat);
}

#[test]
fn renameat2_noreplace_that_fails_changes_nothing_and_exchange_swaps_names() {
    // The program checks that the failed RENAME_NOREPLACE (EEXIST) wrote nothing.
    let (_tmp, data, _outside, cat) = run_rename_writer("at2");
    let got = assert_catalog_is_the_disk(&data, &cat, &["foreign.txt"]);
    // a.bin (100) -> c.bin; c.bin and b.bin (200) exchanged; b.bin -> sub/moved.bin by renameat.
    assert_eq!(got, sizes(&[("c.bin", 200), ("sub/moved.bin", 100)]));
    assert_latest_is_readable(&cat);
}

#[test]
fn a_directory_rename_moves_the_files_below_it_and_a_rename_out_of_the_root_drops_one() {
    let (_tmp, data, outside, cat) = run_rename_writer("dir");
    let got = assert_catalog_is_the_disk(&data, &cat, &["foreign.txt"]);
    // d/x, d/y recorded and d/z open when d became e; e/x then moved out of the root.
    assert_eq!(got, sizes(&[("e/y", 20), ("e/z", 35)]));
    assert_eq!(std::fs::metadata(outside.join("x")).unwrap().len(), 10);
    assert_latest_is_readable(&cat);
}

#[test]
fn sed_in_place_leaves_the_final_name_only() {
    if !Command::new("sed").arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("sed not found: skipped");
        return;
    }
    let (_tmp, data, catalog) = scratch();
    // The shell records f.txt; sed (its own process and catalog file, unless the shell execs
    // it) writes a temporary beside it and renames it over f.txt.
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg("cd \"$1\" && printf 'hello world, hello\\n' > f.txt && sed -i 's/hello/goodbye/g' f.txt")
        .arg("sh")
        .arg(&data);
    let out = under_agent(&mut sh, &catalog, &data, "emulate").env("ICICLE_EMULATED_LAYOUT", SPEC).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(data.join("f.txt")).unwrap(), "goodbye world, goodbye\n");
    let cat = Catalog::read_dir(&catalog).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    let got = assert_catalog_is_the_disk(&data, &cat, &[]);
    assert_eq!(got, sizes(&[("f.txt", 23)]));
    assert_latest_is_readable(&cat);
}
