//! `icicle-mpi snapshot` under real Open MPI (`mpirun --oversubscribe`): on the same inputs
//! (icicle9 listings, a GUFI index, an mmapplypolicy LIST file in byte ranges, objects on the
//! S3 test server), -np 1, 2 and 4 and one plain `icicle snapshot` give the same primary
//! records, the same counts CSV and the same aggregate records, byte for byte; a second
//! versioned run deletes the same subjects on any number of ranks, and a rank that fails ends
//! the run naming the rank.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use icicle_plugins_s3::ObjectStore;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use serde_json::Value;

mod common;
use common::{entries, mpi_bin, plain_bin};

const FILES: u64 = 6_000;
const SEED: u64 = 17;
const CREDS: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")];

/// Run `icicle-mpi snapshot` on `np` ranks; exit status, the summary (rank 0's JSON) and stderr.
fn mpirun(np: usize, cfg: &Path) -> (bool, Value, String) {
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string(), mpi_bin(), "snapshot", "-c"])
        .arg(cfg)
        .args(["--json", "--no-progress"])
        // Containers forbid the cross-memory-attach single copy; copy through shared memory.
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .envs(CREDS)
        .output()
        .expect("mpirun (Open MPI) must be installed");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let summary = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.success(), summary, stderr)
}

fn plain(cfg: &Path) -> Value {
    let out = Command::new(plain_bin())
        .args(["snapshot", "-c"])
        .arg(cfg)
        .args(["--json", "--no-progress"])
        .envs(CREDS)
        .output()
        .unwrap();
    assert!(out.status.success(), "icicle snapshot: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The per-(principal, shard) counts a counting sink received (the end marker's time left
/// out), by subject.
fn shard_counts(dir: &Path) -> BTreeMap<String, Value> {
    let mut all = entries(dir);
    for e in all.values_mut() {
        if let Some(c) = e["content"].as_object_mut() {
            c.remove("finished_at");
        }
    }
    all
}

/// A pipeline over `source` with counting and aggregates (`sketch`), a file sink into `out`.
fn config(t: &Path, name: &str, source: &str, sketch: &str, extra: &str) -> PathBuf {
    let out = t.join(name);
    let text = format!(
        "[snapshot]\nversion = \"gen-{SEED}\"\nsplit_bytes = 40000\nrejects_file = \"{o}/rejects.jsonl\"\n{extra}\n\
         [records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{t}/principals.tsv\"\n\
         [counting]\nenabled = true\ndirectory_max = 3\noutput = \"{o}/counts.csv\"\nsinks = [\"counts\"]\n\
         [aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 3\nreference_time = 1767225600\n\
         dir_visible_to = [\"urn:globus:groups:id:00000000-0000-4000-8000-0000000000ad\"]\n\
         [aggregate.sketch]\ntype = \"{sketch}\"\n[sources.s]\n{source}\n[sinks.files]\ntype = \"file\"\ndir = \"{o}/primary\"\n\
         [sinks.counts]\ntype = \"file\"\ndir = \"{o}/shard-counts\"\n",
        t = t.display(),
        o = out.display()
    );
    let p = t.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// Run `source` one process and on 1, 2 and 4 ranks; everything must agree.
fn same_everywhere(t: &Path, name: &str, source: &str, sketch: &str) {
    let one = config(t, &format!("{name}-plain"), source, sketch, "");
    let s = plain(&one);
    assert_eq!(s["records"], FILES, "{name}: {s}");
    let want = entries(&t.join(format!("{name}-plain/primary")));
    let want_counts = std::fs::read(t.join(format!("{name}-plain/counts.csv"))).unwrap();
    let want_shards = shard_counts(&t.join(format!("{name}-plain/shard-counts")));
    assert!(want_shards.len() > 10, "{name}: {} shard counts", want_shards.len());
    let want_checked = s["pipelines"]["aggregate"]["counts_checked"].clone();
    assert!(want_checked.as_u64() > Some(10), "{name}: {s}");
    assert!(
        want.keys().any(|k| k.starts_with("dir:")),
        "{name}: no aggregates in {:?}",
        want.keys().take(5).collect::<Vec<_>>()
    );
    for np in [1, 2, 4] {
        let cfg = config(t, &format!("{name}-np{np}"), source, sketch, "");
        let (ok, s, err) = mpirun(np, &cfg);
        assert!(ok, "{name} -np {np}: {err}");
        assert_eq!((s["records"].as_u64(), s["rejects"].as_u64()), (Some(FILES), Some(0)), "{name} -np {np}: {s}");
        assert_eq!(s["ranks"].as_array().map(Vec::len), Some(np), "{name} -np {np}: {s}");
        let got = entries(&t.join(format!("{name}-np{np}/primary")));
        assert_eq!(got.len(), want.len(), "{name} -np {np}: entries");
        for (subject, entry) in &want {
            assert_eq!(got.get(subject), Some(entry), "{name} -np {np}: {subject}");
        }
        let counts = std::fs::read(t.join(format!("{name}-np{np}/counts.csv"))).unwrap();
        assert!(counts == want_counts, "{name} -np {np}: the counts CSV differs");
        // The per-shard counts (rank 0 sends them) and the aggregates' check against them.
        assert_eq!(shard_counts(&t.join(format!("{name}-np{np}/shard-counts"))), want_shards, "{name} -np {np}");
        let agg = &s["pipelines"]["aggregate"];
        assert_eq!(agg["counts_checked"], want_checked, "{name} -np {np}: {agg}");
        assert_eq!(agg["counts_mismatched"], 0, "{name} -np {np}: {agg}");
        if np > 1 {
            // Every rank read and delivered: a rank directory per rank.
            let ranks = std::fs::read_dir(t.join(format!("{name}-np{np}/primary"))).unwrap().count();
            assert_eq!(ranks, np, "{name} -np {np}");
        }
    }
}

fn generated(t: &Path) -> GenFs {
    let fs = GenFs::generate(&GenSpec::new(FILES, SEED));
    std::fs::write(t.join("principals.tsv"), fs.principals()).unwrap();
    fs
}

#[test]
fn listings_gufi_and_mmapplypolicy_give_the_same_output_on_any_number_of_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Tsv, &t.join("tsv"), 900, false).unwrap();
    gen::write(&fs, Format::Gufi, &t.join("gufi"), 0, false).unwrap();
    gen::write(&fs, Format::Mmapplypolicy, &t.join("mm"), 0, false).unwrap();
    let tsv = format!("type = \"tsv\"\npaths = [\"{}/tsv/*.csv\"]\npreset = \"icicle9\"", t.display());
    same_everywhere(t, "tsv", &tsv, "ddsketch");
    same_everywhere(t, "tsv-exact", &tsv, "exact");
    same_everywhere(t, "gufi", &format!("type = \"gufi\"\nindex = \"{}/gufi\"", t.display()), "ddsketch");
    same_everywhere(
        t,
        "mm",
        &format!("type = \"mmapplypolicy\"\npaths = [\"{}/mm/list.allfiles\"]", t.display()),
        "ddsketch",
    );
}

/// One listing far below the default `split_bytes` (64 MiB) still spreads over the ranks: the
/// plan is cut into 64 KiB ranges, and the output is one process's.
#[test]
fn a_small_input_spreads_over_the_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Tsv, &t.join("one"), FILES, false).unwrap();
    let size: u64 = std::fs::read_dir(t.join("one"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let tsv = format!("type = \"tsv\"\npaths = [\"{}/one/*.csv\"]\npreset = \"icicle9\"", t.display());
    let default_split = |name: &str| {
        let cfg = config(t, name, &tsv, "ddsketch", "");
        let text = std::fs::read_to_string(&cfg).unwrap().replace("split_bytes = 40000\n", "");
        std::fs::write(&cfg, text).unwrap();
        cfg
    };
    let s = plain(&default_split("small-plain"));
    assert_eq!(s["splits"], 1, "{s}");
    let want = entries(&t.join("small-plain/primary"));
    let (ok, s, err) = mpirun(4, &default_split("small-np4"));
    assert!(ok, "{err}");
    assert_eq!(s["splits"].as_u64(), Some(size.div_ceil(64 << 10)), "{s}");
    let reading = s["ranks"].as_array().unwrap().iter().filter(|r| r["rows"].as_u64() > Some(0)).count();
    assert!(reading >= 2, "one rank read everything: {s}");
    assert_eq!(entries(&t.join("small-np4/primary")), want);
}

#[test]
fn objects_on_s3_give_the_same_output_on_any_number_of_ranks() {
    let Ok(endpoint) = std::env::var("ICICLE_TEST_S3") else {
        panic!("no S3 server: run scripts/test.sh (or set ICICLE_TEST_S3)")
    };
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Tsv, &t.join("tsv"), 900, false).unwrap();
    let store = ObjectStore::connect(&endpoint, "test", "test").unwrap();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let bucket = format!("icicle-mpi-{}-{nanos}", std::process::id());
    store.create_bucket(&bucket).unwrap();
    for e in std::fs::read_dir(t.join("tsv")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "csv") {
            continue;
        }
        store
            .put(&bucket, &format!("snap/{}", p.file_name().unwrap().to_string_lossy()), std::fs::read(&p).unwrap())
            .unwrap();
    }
    let source =
        format!("type = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"snap/\"\nendpoint_url = \"{endpoint}\"\nforce_path_style = true\npreset = \"icicle9\"");
    same_everywhere(t, "s3", &source, "ddsketch");
}

/// Every subject of every delete document under `dir` (any depth), sorted.
fn deleted(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().starts_with("delete-") {
                let doc: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                out.extend(doc["subjects"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()));
            }
        }
    }
    out.sort();
    out
}

/// The second version of the listings: one file gone (half its paths renamed: created), the
/// sizes of another file's records changed (updated), the rest as they were.
fn second_version(t: &Path) -> PathBuf {
    let (a, b) = (t.join("tsv"), t.join("tsv2"));
    std::fs::create_dir_all(&b).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&a)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    for (i, f) in files.iter().enumerate() {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.file_name().unwrap();
        match i {
            1 => {
                // A quoted path gets its suffix inside the quotes.
                let moved: String =
                    text.lines()
                        .step_by(2)
                        .map(|l| {
                            if let Some(q) = l.strip_suffix('"') {
                                format!("{q}.new\"\n")
                            } else {
                                format!("{l}.new\n")
                            }
                        })
                        .collect();
                std::fs::write(b.join("moved.csv"), moved).unwrap();
            }
            2 => {
                let grown: String = text
                    .lines()
                    .map(|l| {
                        let mut cols: Vec<String> = l.splitn(9, ',').map(str::to_string).collect();
                        cols[4] = format!("{}", cols[4].parse::<u64>().unwrap() + 1);
                        format!("{}\n", cols.join(","))
                    })
                    .collect();
                std::fs::write(b.join(name), grown).unwrap();
            }
            _ => {
                std::fs::copy(f, b.join(name)).unwrap();
            }
        }
    }
    b
}

#[test]
fn a_second_versioned_run_deletes_the_same_subjects_on_any_number_of_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Tsv, &t.join("tsv"), 900, false).unwrap();
    let v2 = second_version(t);
    let source = |dir: &Path| format!("type = \"tsv\"\npaths = [\"{}/*.csv\"]\npreset = \"icicle9\"", dir.display());
    let extra = |name: &str| format!("state_dir = \"{}/{name}-state\"\nmax_delete_ratio = 0.9", t.display());
    // One process: the reference.
    plain(&config(t, "v-plain-1", &source(&t.join("tsv")), "ddsketch", &extra("v-plain")));
    let want_summary = plain(&config(t, "v-plain-2", &source(&v2), "ddsketch", &extra("v-plain")));
    let want = deleted(&t.join("v-plain-2"));
    let want_entries = entries(&t.join("v-plain-2/primary"));
    let counts = |s: &Value| {
        ["created", "updated", "unchanged", "deleted", "emitted", "aggregates_deleted"]
            .map(|k| s[k].as_u64().unwrap_or(u64::MAX))
    };
    assert!(counts(&want_summary)[..4].iter().all(|c| *c > 0), "every kind of change: {want_summary}");
    assert!(!want.is_empty());
    for np in [1, 2, 4] {
        let name = format!("v-np{np}");
        let (ok, s1, err) =
            mpirun(np, &config(t, &format!("{name}-1"), &source(&t.join("tsv")), "ddsketch", &extra(&name)));
        assert!(ok, "-np {np} first run: {err}");
        assert_eq!(s1["created"].as_u64(), Some(FILES), "-np {np}: {s1}");
        let (ok, s2, err) = mpirun(np, &config(t, &format!("{name}-2"), &source(&v2), "ddsketch", &extra(&name)));
        assert!(ok, "-np {np} second run: {err}");
        assert_eq!(counts(&s2), counts(&want_summary), "-np {np}: {s2}");
        assert_eq!(deleted(&t.join(format!("{name}-2"))), want, "-np {np}: the deletes");
        assert_eq!(entries(&t.join(format!("{name}-2/primary"))), want_entries, "-np {np}: what the second run sent");
    }
}

#[test]
fn a_rank_killed_before_the_commit_leaves_the_previous_manifest_in_force() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Tsv, &t.join("tsv"), 900, false).unwrap();
    let v2 = second_version(t);
    let source = |dir: &Path| format!("type = \"tsv\"\npaths = [\"{}/*.csv\"]\npreset = \"icicle9\"", dir.display());
    let extra = format!("state_dir = \"{}/state\"\nmax_delete_ratio = 0.9", t.display());
    let (ok, _, err) = mpirun(2, &config(t, "k-1", &source(&t.join("tsv")), "ddsketch", &extra));
    assert!(ok, "{err}");
    let current = std::fs::read_to_string(t.join("state/CURRENT")).unwrap();
    // Rank 1 dies after delivering its deletes, before the commit.
    let cfg = config(t, "k-2", &source(&v2), "ddsketch", &extra);
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2", mpi_bin(), "snapshot", "-c"])
        .arg(&cfg)
        .args(["--json", "--no-progress"])
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("ICICLE_FAULT", "deletes-delivered")
        .env("ICICLE_FAULT_RANK", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        std::fs::read_to_string(t.join("state/CURRENT")).unwrap(),
        current,
        "the previous manifest stays current"
    );
    // The next run finishes the job: the same deletes as one process would owe.
    let (ok, s, err) = mpirun(2, &config(t, "k-3", &source(&v2), "ddsketch", &extra));
    assert!(ok, "{err}");
    assert!(s["deleted"].as_u64().unwrap() > 0, "{s}");
    assert_ne!(std::fs::read_to_string(t.join("state/CURRENT")).unwrap(), current);
}

#[test]
fn a_failing_rank_ends_the_run_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Tsv, &t.join("tsv"), 900, false).unwrap();
    let tsv = format!("type = \"tsv\"\npaths = [\"{}/tsv/*.csv\"]\npreset = \"icicle9\"", t.display());
    // Rank 1's file sink cannot make its directory: the run fails, naming rank 1.
    let cfg = config(t, "failing", &tsv, "ddsketch", "");
    std::fs::create_dir_all(t.join("failing/primary")).unwrap();
    std::fs::write(t.join("failing/primary/rank-1"), b"not a directory").unwrap();
    let (ok, _, err) = mpirun(2, &cfg);
    assert!(!ok, "{err}");
    assert!(err.contains("icicle-mpi: rank 1:") && err.contains("rank-1"), "{err}");
    assert!(!t.join("failing/counts.csv").exists(), "a failed run wrote its counts");
}

/// `--help` and `--version` answer (exit 0), without `mpirun`.
#[test]
fn answers_help_and_version() {
    for flag in ["--help", "--version"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_icicle-mpi")).arg(flag).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("icicle-mpi"), "{flag}: {text}");
    }
}
