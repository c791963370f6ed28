//! `records.visible_to = "posix-read"` (the default) under real Open MPI: on random trees with
//! random directory and file modes, read from a GUFI index, an mmapplypolicy LIST file in byte
//! ranges and a real directory tree (the walk, whose directories are read by whichever rank
//! asks), -np 1, 2 and 4 give every record, primary and aggregate, the `visible_to` one
//! process gives. Seeds are random per run and printed; `ICICLE_TEST_SEED=N` replays one,
//! `ICICLE_MPI_VISIBILITY_SEEDS=K` runs K.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use icicle_testkit::gen::{self, Format, GenFs, GenSpec, Rng};
use serde_json::Value;

mod common;
use common::{entries, mpi_bin, plain_bin};

const FILES: u64 = 3_000;
/// Directory modes, open ones likelier: closed, search-only, group-only, open; the owner keeps
/// rwx so a walk without privileges still reads every directory.
const DIR_MODES: [u32; 12] = [0o755, 0o755, 0o755, 0o775, 0o705, 0o751, 0o750, 0o711, 0o700, 0o2770, 0o755, 0o775];
const FILE_MODES: [u32; 8] = [0o644, 0o600, 0o640, 0o604, 0o755, 0o700, 0o444, 0o000];

/// Run `bin args -c cfg --json --no-progress`; the summary, or a failure with stderr.
fn run(mut cmd: Command, cfg: &Path, what: &str) -> Value {
    let out = cmd
        .args(["snapshot", "-c"])
        .arg(cfg)
        .args(["--json", "--no-progress"])
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .output()
        .expect("mpirun (Open MPI) must be installed");
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn mpirun(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string(), mpi_bin()]);
    c
}

fn plain() -> Command {
    Command::new(plain_bin())
}

/// Every entry's sorted `visible_to`, by subject (any depth below `dir`).
fn visible(dir: &Path) -> BTreeMap<String, Vec<String>> {
    entries(dir)
        .into_iter()
        .map(|(subject, e)| {
            let mut v: Vec<String> =
                e["visible_to"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
            v.sort();
            (subject, v)
        })
        .collect()
}

/// A posix-read pipeline with directory aggregates over `source`, into `t/name`.
fn config(t: &Path, name: &str, source: &str) -> PathBuf {
    let text = format!(
        "[snapshot]\nversion = \"v\"\nsplit_bytes = 20000\nmax_reject_ratio = 1.0\nrejects_file = \"{o}/rejects.jsonl\"\n\
         [records]\nvisible_to = \"posix-read\"\nprincipals = \"{t}/principals.tsv\"\neveryone = \"public\"\n\
         admins = [\"urn:admins\"]\n\
         [aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 4\nreference_time = 1767225600\n\
         [sources.s]\n{source}\n[sinks.files]\ntype = \"file\"\ndir = \"{o}/out\"\n",
        t = t.display(),
        o = t.join(name).display()
    );
    let p = t.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// A generated tree with every directory's (below the top three) and file's mode drawn at
/// random.
fn random_modes(seed: u64) -> GenFs {
    let mut fs = GenFs::generate(&GenSpec::new(FILES, seed));
    let mut rng = Rng::new(seed ^ 0x5eed);
    // The root, `home` and `proj` stay open, so some records are public.
    for d in fs.dirs.iter_mut().skip(3) {
        d.attrs.mode = (d.attrs.mode & !0o7777) | DIR_MODES[rng.below(DIR_MODES.len() as u64) as usize];
    }
    for f in fs.files.iter_mut().filter(|f| f.target.is_none()) {
        f.attrs.mode = (f.attrs.mode & !0o7777) | FILE_MODES[rng.below(FILE_MODES.len() as u64) as usize];
    }
    fs
}

/// The generated directories' modes and owners on the real tree under `tree`.
fn apply_directory_modes(fs: &GenFs, tree: &Path) {
    for d in fs.dirs.iter().rev() {
        let p = tree.join(d.path.trim_start_matches('/'));
        let _ = std::os::unix::fs::lchown(&p, Some(d.attrs.uid), Some(d.attrs.gid));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(d.attrs.mode & 0o7777)).unwrap();
    }
}

/// One process's answers against -np 1, 2, 4 for `source`.
fn same_visibility(t: &Path, seed: u64, name: &str, source: &str) {
    let want = visible(&{
        let cfg = config(t, &format!("{name}-plain"), source);
        run(plain(), &cfg, name);
        t.join(format!("{name}-plain/out"))
    });
    let primary: Vec<&Vec<String>> = want.iter().filter(|(k, _)| !k.contains("dir:")).map(|(_, v)| v).collect();
    let distinct: BTreeSet<&Vec<String>> = primary.iter().copied().collect();
    assert!(distinct.len() >= 3, "seed {seed} {name}: the modes decide nothing ({distinct:?})");
    assert!(primary.iter().any(|v| v.iter().any(|p| p == "public")), "seed {seed} {name}: nothing public");
    assert!(primary.iter().any(|v| v.iter().all(|p| p != "public")), "seed {seed} {name}: everything public");
    for np in [1, 2, 4] {
        let cfg = config(t, &format!("{name}-np{np}"), source);
        let s = run(mpirun(np), &cfg, &format!("seed {seed} {name} -np {np}"));
        assert_eq!(s["ranks"].as_array().map(Vec::len), Some(np), "seed {seed} {name} -np {np}: {s}");
        let got = visible(&t.join(format!("{name}-np{np}/out")));
        assert_eq!(got.len(), want.len(), "seed {seed} {name} -np {np}: entries");
        for (subject, v) in &want {
            assert_eq!(
                got.get(subject),
                Some(v),
                "seed {seed} {name} -np {np}: {subject} (replay with ICICLE_TEST_SEED={seed})"
            );
        }
    }
}

#[test]
fn posix_read_gives_one_process_answers_on_any_number_of_ranks() {
    let first = icicle_core::rng::test_seed();
    let n: u64 = std::env::var("ICICLE_MPI_VISIBILITY_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    for seed in (0..n).map(|i| first + i) {
        eprintln!("seed {seed}");
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let fs = random_modes(seed);
        std::fs::write(t.join("principals.tsv"), fs.principals()).unwrap();
        gen::write(&fs, Format::Gufi, &t.join("gufi"), 0, false).unwrap();
        gen::write(&fs, Format::Mmapplypolicy, &t.join("mm"), 0, false).unwrap();
        gen::write(&fs, Format::Tree, &t.join("walk"), 0, false).unwrap();
        apply_directory_modes(&fs, &t.join("walk/tree"));
        same_visibility(t, seed, "gufi", &format!("type = \"gufi\"\nindex = \"{}/gufi\"", t.display()));
        same_visibility(
            t,
            seed,
            "mm",
            &format!("type = \"mmapplypolicy\"\npaths = [\"{}/mm/list.allfiles\"]", t.display()),
        );
        same_visibility(
            t,
            seed,
            "walk",
            &format!("type = \"walk\"\nroot = \"{}/walk/tree/fs\"\npath_prefix = \"/fs\"", t.display()),
        );
    }
}
