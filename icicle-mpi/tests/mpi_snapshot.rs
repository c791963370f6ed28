//! `icicle-mpi snapshot` under real Open MPI (`mpirun --oversubscribe`): on the same inputs
//! (icicle9 listings, a GUFI index, an mmapplypolicy LIST file in byte ranges, objects on the
//! S3 test server), -np 1, 2 and 4 and one plain `icicle snapshot` give the same primary
//! records, the same counts CSV and the same aggregate records, byte for byte; a versioned
//! run is refused, and a rank that fails ends the run naming the rank.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use icicle_plugins_s3::ObjectStore;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use serde_json::Value;

const FILES: u64 = 6_000;
const SEED: u64 = 17;
const CREDS: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")];

fn mpi_bin() -> &'static str {
    env!("CARGO_BIN_EXE_icicle-mpi")
}

/// The plain one-process binary, built beside this one by `cargo test --workspace`.
fn plain_bin() -> PathBuf {
    let p = Path::new(mpi_bin()).with_file_name("icicle");
    assert!(p.exists(), "{} is missing: build the workspace (`cargo test --workspace` does)", p.display());
    p
}

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
    let out = Command::new(plain_bin()).args(["snapshot", "-c"]).arg(cfg).args(["--json", "--no-progress"]).envs(CREDS).output().unwrap();
    assert!(out.status.success(), "icicle snapshot: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every entry of every GIngest document under `dir` (any depth: one directory per rank), by
/// subject; a subject seen twice fails.
fn entries(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().starts_with("ingest-") {
                let doc: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                for entry in doc["ingest_data"]["gmeta"].as_array().unwrap() {
                    let subject = entry["subject"].as_str().unwrap().to_string();
                    assert!(out.insert(subject.clone(), entry.clone()).is_none(), "{subject} delivered twice");
                }
            }
        }
    }
    out
}

/// A pipeline over `source` with counting and aggregates (`sketch`), a file sink into `out`.
fn config(t: &Path, name: &str, source: &str, sketch: &str, extra: &str) -> PathBuf {
    let out = t.join(name);
    let text = format!(
        "[snapshot]\nversion = \"gen-{SEED}\"\nsplit_bytes = 40000\nrejects_file = \"{o}/rejects.jsonl\"\n{extra}\n\
         [records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{t}/principals.tsv\"\n\
         [counting]\nenabled = true\ndirectory_max = 3\noutput = \"{o}/counts.csv\"\n\
         [aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 3\nreference_time = 1767225600\n\
         dir_visible_to = [\"urn:globus:groups:id:00000000-0000-4000-8000-0000000000ad\"]\n\
         [aggregate.sketch]\ntype = \"{sketch}\"\n[sources.s]\n{source}\n[sinks.files]\ntype = \"file\"\ndir = \"{o}/primary\"\n",
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
    assert!(want.keys().any(|k| k.starts_with("dir:")), "{name}: no aggregates in {:?}", want.keys().take(5).collect::<Vec<_>>());
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
    same_everywhere(t, "mm", &format!("type = \"mmapplypolicy\"\npaths = [\"{}/mm/list.allfiles\"]", t.display()), "ddsketch");
}

#[test]
fn objects_on_s3_give_the_same_output_on_any_number_of_ranks() {
    let Ok(endpoint) = std::env::var("ICICLE_TEST_S3") else { panic!("no S3 server: run scripts/test.sh (or set ICICLE_TEST_S3)") };
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
        store.put(&bucket, &format!("snap/{}", p.file_name().unwrap().to_string_lossy()), std::fs::read(&p).unwrap()).unwrap();
    }
    let source =
        format!("type = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"snap/\"\nendpoint_url = \"{endpoint}\"\nforce_path_style = true\npreset = \"icicle9\"");
    same_everywhere(t, "s3", &source, "ddsketch");
}

#[test]
fn a_versioned_run_is_refused_and_a_failing_rank_ends_the_run_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Tsv, &t.join("tsv"), 900, false).unwrap();
    let tsv = format!("type = \"tsv\"\npaths = [\"{}/tsv/*.csv\"]\npreset = \"icicle9\"", t.display());
    let cfg = config(t, "versioned", &tsv, "ddsketch", &format!("state_dir = \"{}/state\"", t.display()));
    let (ok, _, err) = mpirun(2, &cfg);
    assert!(!ok);
    assert!(err.contains("snapshot.state_dir") && err.contains("not supported across MPI ranks"), "{err}");
    // Rank 1's file sink cannot make its directory: the run fails, naming rank 1.
    let cfg = config(t, "failing", &tsv, "ddsketch", "");
    std::fs::create_dir_all(t.join("failing/primary")).unwrap();
    std::fs::write(t.join("failing/primary/rank-1"), b"not a directory").unwrap();
    let (ok, _, err) = mpirun(2, &cfg);
    assert!(!ok, "{err}");
    assert!(err.contains("icicle-mpi: rank 1:") && err.contains("rank-1"), "{err}");
    assert!(!t.join("failing/counts.csv").exists(), "a failed run wrote its counts");
}
