//! `icicle preprocess`: generated pwalk, GUFI and mmapplypolicy snapshots (and a real tree with
//! awkward names) turned into icicle9 parts give, read back with `preset = "icicle9"`, the
//! records a snapshot of the originals gives (`visible_to` under a permission rule included;
//! icicle9 carries no inode); parts hold exactly `--rows-per-file` rows; paths with commas,
//! quotes, spaces, tabs and UTF-8 round-trip and paths with line breaks are rejected, counted
//! and named; and parts uploaded to S3 (moto; one of them a multipart upload) read back with
//! the `s3` source give the local result.
//!
//! The S3 server is `ICICLE_TEST_S3` (an `http://host:port` URL), else the one
//! `bash scripts/services.sh start` runs (`.tools/run/s3.addr`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use icicle_plugins_s3::ObjectStore;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use serde_json::Value;

const CREDS: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")];

/// `[records]` under a permission rule: `visible_to` depends on every directory above a file,
/// so it shows that directory rows are carried too.
fn records_section(tmp: &Path) -> String {
    format!("[records]\nvisible_to = \"posix-read\"\nprincipals = \"{}/principals.tsv\"\neveryone = \"public\"\nadmins = [\"urn:admins\"]\n", tmp.display())
}

/// A config reading `source` (a `[sources.s]` body) into a file sink at `tmp/<name>-out`.
fn snapshot_config(tmp: &Path, name: &str, source: &str, records: &str) -> PathBuf {
    let out = tmp.join(format!("{name}-out"));
    let _ = std::fs::remove_dir_all(&out);
    config(
        tmp,
        &format!("{name}.toml"),
        &format!(
            "[snapshot]\nworkers = 3\nsplit_bytes = 65536\nversion = \"v1\"\nmax_reject_ratio = 1.0\nrejects_file = \"{t}/{name}-rejects.jsonl\"\n{records}[sources.s]\n{source}[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n",
            t = tmp.display(),
            o = out.display()
        ),
    )
}

/// Snapshot `source`: the summary and every entry by path.
fn snapshot_of(
    tmp: &Path,
    name: &str,
    source: &str,
    records: &str,
    envs: &[(&str, &str)],
) -> (Value, BTreeMap<String, Value>) {
    let cfg = snapshot_config(tmp, name, source, records);
    let (code, out, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], envs);
    assert_eq!(code, 0, "{name}: {err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    (s, ingested(&tmp.join(format!("{name}-out"))))
}

/// Run `icicle preprocess` with the config of `name` (from [`snapshot_config`]).
fn preprocess(tmp: &Path, name: &str, args: &[&str], envs: &[(&str, &str)]) -> (i32, Value, String) {
    let cfg = tmp.join(format!("{name}.toml"));
    let mut all = vec!["preprocess", "--json", "-c", cfg.to_str().unwrap()];
    all.extend_from_slice(args);
    let (code, out, err) = icicle(&all, envs);
    (code, serde_json::from_str(&out).unwrap_or(Value::Null), err)
}

/// Entries as icicle9 can carry them: without `content.raw.inode` or `content.storage`.
fn without_inode(index: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut out = index.clone();
    for e in out.values_mut() {
        if let Some(raw) = e["content"]["raw"].as_object_mut() {
            raw.remove("inode");
        }
        // Nor columns for where a file is kept (nersc18 listings name a fileset).
        if let Some(c) = e["content"].as_object_mut() {
            c.remove("storage");
        }
    }
    out
}

/// Paths that differ between two indexes (at most 5), for messages.
fn differences(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> Vec<String> {
    let mut v: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k:?}: {:?} vs {:?}", a.get(k), b.get(k)))
        .collect();
    v.dedup();
    v.truncate(5);
    v
}

/// The part files in `dir` with their rows, in name order; no temporaries may be left.
fn parts_in(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.starts_with("part-") && name.ends_with(".csv"), "unexpected file {name}");
            let text = std::fs::read(&p).unwrap();
            assert!(text.is_empty() || text.ends_with(b"\n"), "{name} does not end a line");
            (name, text.iter().filter(|&&c| c == b'\n').count() as u64)
        })
        .collect();
    v.sort();
    v
}

fn icicle9_source(dir: &Path) -> String {
    format!("type = \"tsv\"\npaths = [\"{}/*.csv\"]\npreset = \"icicle9\"\n", dir.display())
}

#[test]
fn pwalk_gufi_and_mmapplypolicy_snapshots_round_trip_through_icicle9() {
    let tmp = test_dir();
    let t = tmp.path();
    let seed = test_seed();
    let files = 3_000u64;
    let fs = GenFs::generate(&GenSpec::new(files, seed));
    std::fs::write(t.join("principals.tsv"), fs.principals()).unwrap();
    let records = records_section(t);
    for (format, source) in [
        (Format::Pwalk, "type = \"tsv\"\npaths = [\"{d}/pwalk.csv\"]\npreset = \"pwalk\"\n"),
        (Format::Gufi, "type = \"gufi\"\nindex = \"{d}\"\n"),
        (Format::Mmapplypolicy, "type = \"mmapplypolicy\"\npaths = [\"{d}/list.allfiles\"]\n"),
    ] {
        let name = format!("{format:?}").to_lowercase();
        let data = t.join(&name);
        gen::write(&fs, format, &data, 0, false).unwrap();
        let source = source.replace("{d}", &data.display().to_string());
        let (orig, original) = snapshot_of(t, &name, &source, &records, &[]);
        assert_eq!(orig["records"].as_u64().unwrap() + orig["rejects"].as_u64().unwrap(), files, "{name}: {orig}");
        let dirs = orig["directories"].as_u64().unwrap();
        assert!(dirs > 100, "{name}: the source lists its directories: {orig}");
        assert!(
            original.values().all(|e| e["content"]["raw"]["inode"].as_u64().is_some()),
            "{name}: the source has inodes"
        );

        let parts = t.join(format!("{name}-parts"));
        let (code, s, err) = preprocess(t, &name, &["--out", parts.to_str().unwrap(), "--rows-per-file", "700"], &[]);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(
            (s["records"].as_u64(), s["directories"].as_u64(), s["rejects"].as_u64()),
            (Some(files), Some(dirs), Some(0)),
            "{name}: {s}"
        );
        let written = files + dirs;
        assert_eq!(s["written"], written, "{name}: {s}");
        let on_disk = parts_in(&parts);
        assert!(on_disk.iter().all(|(_, rows)| (1..=700).contains(rows)), "{name}: {on_disk:?}");
        assert_eq!(on_disk.iter().map(|(_, r)| r).sum::<u64>(), written, "{name}");
        // Each of the 3 workers leaves at most one part short.
        let full = written.div_ceil(700);
        assert!((full..=full + 2).contains(&(on_disk.len() as u64)), "{name}: {} parts", on_disk.len());
        let names: Vec<String> = (0..on_disk.len()).map(|i| format!("part-{i:05}.csv")).collect();
        assert_eq!(on_disk.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), names, "{name}: numbered without gaps");
        let reported: Vec<(String, u64)> = s["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap().to_string(), p["rows"].as_u64().unwrap()))
            .collect();
        assert_eq!(reported, on_disk, "{name}");

        let (again, back) = snapshot_of(t, &format!("{name}-icicle9"), &icicle9_source(&parts), &records, &[]);
        assert_eq!(
            (again["directories"].as_u64(), again["rejects"].as_u64()),
            (Some(dirs), orig["rejects"].as_u64()),
            "{name}: {again}"
        );
        assert!(
            back.values().all(|e| e["content"]["raw"].get("inode").is_none()),
            "{name}: icicle9 has no inode column"
        );
        let want = without_inode(&original);
        assert_eq!(back.len(), want.len(), "{name}");
        assert!(back == want, "{name}: {:?}", differences(&back, &want));
    }
}

#[test]
fn parts_hold_exactly_rows_per_file_rows() {
    let tmp = test_dir();
    let t = tmp.path();
    let seed = test_seed();
    let fs = GenFs::generate(&GenSpec::new(2_345, seed));
    gen::write(&fs, Format::Tsv, &t.join("tsv"), 1_000, false).unwrap();
    let source = icicle9_source(&t.join("tsv"));
    let cfg = snapshot_config(t, "one", &source, "[records]\nvisible_to = [\"public\"]\n");
    // One worker: every part but the last is full.
    let text = std::fs::read_to_string(&cfg).unwrap().replace("workers = 3", "workers = 1");
    std::fs::write(&cfg, text).unwrap();
    for (rows_per_file, want) in [
        (500u64, vec![500, 500, 500, 500, 345]),
        (2_345, vec![2_345]),
        (1_000_000, vec![2_345]),
        (1_172, vec![1_172, 1_172, 1]),
    ] {
        let out = t.join(format!("parts-{rows_per_file}"));
        let (code, s, err) =
            preprocess(t, "one", &["--out", out.to_str().unwrap(), "--rows-per-file", &rows_per_file.to_string()], &[]);
        assert_eq!(code, 0, "{err}");
        let got = parts_in(&out);
        let names: Vec<String> = (0..want.len()).map(|i| format!("part-{i:05}.csv")).collect();
        assert_eq!(
            got,
            names.into_iter().zip(want.iter().copied()).collect::<Vec<_>>(),
            "--rows-per-file {rows_per_file}"
        );
        assert_eq!(
            (s["files"].as_u64(), s["written"].as_u64(), s["rows"].as_u64()),
            (Some(want.len() as u64), Some(2_345), Some(2_345)),
            "{s}"
        );
    }
    // The parts of an earlier run are never mixed with a new run's.
    let out = t.join("parts-500");
    let (code, _, err) = preprocess(t, "one", &["--out", out.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already holds parts (part-00000.csv)"), "{err}");
    let (code, _, err) =
        preprocess(t, "one", &["--out", t.join("zero").to_str().unwrap(), "--rows-per-file", "0"], &[]);
    assert!(code == 1 && err.contains("--rows-per-file must be at least 1"), "{err}");
    let (code, _, err) =
        preprocess(t, "one", &["--out", t.join("x").to_str().unwrap(), "--endpoint-url", "http://127.0.0.1:1"], &[]);
    assert!(code == 1 && err.contains("--endpoint-url is for s3:// outputs"), "{err}");
}

#[test]
fn awkward_paths_round_trip_and_line_breaks_are_escaped_then_refused_by_icicle9() {
    let tmp = test_dir();
    let t = tmp.path();
    let tree = t.join("tree");
    let awkward = [
        "a,b.txt",
        "q\"uote.txt",
        "\"leading-quote",
        "trailing-quote\"",
        ",,\"\",",
        " spaces  around ",
        "tab\there",
        "résumé データ 🦀",
        "line\u{2028}separator",
        "percent%0A",
        "dir,with \"quotes\"/inner, \"file\".txt",
        "dir,with \"quotes\"/plain",
    ];
    let broken = ["new\nline.txt", "carriage\rreturn", "dir,with \"quotes\"/trailing-newline\n"];
    for name in awkward.iter().chain(broken.iter()) {
        let p = tree.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, name.as_bytes()).unwrap();
    }
    let source = format!("type = \"walk\"\nroot = \"{}\"\npath_prefix = \"/\"\n", tree.display());
    let records = "[records]\nvisible_to = [\"public\"]\n";
    let (orig, original) = snapshot_of(t, "walk", &source, records, &[]);
    // The root and `dir,with "quotes"` are directories. Names with line breaks are indexed,
    // escaped (icicle_core::name); an icicle9 row cannot hold them.
    assert_eq!(
        (orig["records"].as_u64(), orig["directories"].as_u64(), orig["rejects"].as_u64()),
        (Some(awkward.len() as u64 + 3), Some(2), Some(0)),
        "{orig}"
    );
    for escaped in ["/new\\x0aline.txt", "/carriage\\x0dreturn", "/dir,with \"quotes\"/trailing-newline\\x0a"] {
        assert!(original.contains_key(escaped), "{escaped}: {:?}", original.keys());
    }
    let original: std::collections::BTreeMap<String, Value> =
        original.into_iter().filter(|(k, _)| !k.contains("\\x0")).collect();

    let parts = t.join("walk-parts");
    let (code, s, err) = preprocess(t, "walk", &["--out", parts.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    // Under the default reject ratio (1%) the same run exits 3.
    let strict = t.join("walk-strict");
    let (code3, s3, err3) =
        preprocess(t, "walk", &["--out", strict.to_str().unwrap(), "--set", "snapshot.max_reject_ratio=0.01"], &[]);
    assert_eq!(code3, 3, "{err3}");
    assert_eq!(s3["reject_threshold_exceeded"], true, "{s3}");
    for s in [&s, &s3] {
        assert_eq!(
            (
                s["rows"].as_u64(),
                s["records"].as_u64(),
                s["directories"].as_u64(),
                s["rejects"].as_u64(),
                s["written"].as_u64()
            ),
            (
                Some(awkward.len() as u64 + 2 + 3),
                Some(awkward.len() as u64),
                Some(2),
                Some(3),
                Some(awkward.len() as u64 + 2)
            ),
            "{s}"
        );
    }
    let rejects: Vec<Value> = std::fs::read_to_string(t.join("walk-rejects.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rejects.len(), 3, "{rejects:?}");
    for b in ["new\\\\x0aline.txt", "carriage\\\\x0dreturn", "trailing-newline\\\\x0a"] {
        let r = rejects
            .iter()
            .find(|r| r["reason"].as_str().unwrap().contains(b))
            .unwrap_or_else(|| panic!("no reject for {b}: {rejects:?}"));
        let reason = r["reason"].as_str().unwrap();
        assert!(reason.contains("line break") && reason.contains("icicle9"), "{reason}");
    }
    // The seed's quoting: only paths with a comma or a quote are quoted, quotes doubled.
    let all: String =
        std::fs::read_dir(&parts).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    assert!(all.contains(",\"/dir,with \"\"quotes\"\"/inner, \"\"file\"\".txt\"\n"), "{all}");
    assert!(all.contains(",/tab\there\n") && all.contains(",/ spaces  around \n"), "{all}");

    let (again, back) = snapshot_of(t, "walk-icicle9", &icicle9_source(&parts), records, &[]);
    assert_eq!(
        (again["records"].as_u64(), again["directories"].as_u64(), again["rejects"].as_u64()),
        (Some(awkward.len() as u64), Some(2), Some(0)),
        "{again}"
    );
    let want = without_inode(&original);
    assert!(back == want, "{:?}", differences(&back, &want));
    for name in awkward {
        assert!(back.contains_key(&format!("/{name}")), "{name:?}");
    }
}

/// The S3 server's URL.
fn s3() -> String {
    if let Ok(u) = std::env::var("ICICLE_TEST_S3") {
        return u;
    }
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/run/s3.addr");
    std::fs::read_to_string(&f)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| panic!("no S3 server: run the tests with scripts/test.sh, or `bash scripts/services.sh start` first (or set ICICLE_TEST_S3)"))
}

#[test]
fn parts_uploaded_to_s3_read_back_as_the_local_parts() {
    let tmp = test_dir();
    let t = tmp.path();
    let seed = test_seed();
    // About 6.5 MB of rows: the first part (55,000 rows) exceeds S3's 5 MiB smallest part.
    let files = 60_000u64;
    let fs = GenFs::generate(&GenSpec::new(files, seed));
    std::fs::write(t.join("principals.tsv"), fs.principals()).unwrap();
    gen::write(&fs, Format::Pwalk, &t.join("pwalk"), 0, false).unwrap();
    let records = records_section(t);
    let source = format!("type = \"tsv\"\npaths = [\"{}/pwalk/pwalk.csv\"]\npreset = \"pwalk\"\n", t.display());
    let cfg = snapshot_config(t, "pwalk", &source, &records);
    let text = std::fs::read_to_string(&cfg).unwrap().replace("workers = 3", "workers = 1");
    std::fs::write(&cfg, text).unwrap();
    let local = t.join("local");
    let (code, ls, err) = preprocess(t, "pwalk", &["--out", local.to_str().unwrap(), "--rows-per-file", "55000"], &[]);
    assert_eq!(code, 0, "{err}");

    let store = ObjectStore::connect(&s3(), "test", "test").unwrap();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let bucket = format!("icicle-preprocess-{}-{nanos}", std::process::id());
    store.create_bucket(&bucket).unwrap();
    let url = format!("s3://{bucket}/fs1/2026-11-30");
    let endpoint = s3();
    let s3_args = [
        "--endpoint-url",
        endpoint.as_str(),
        "--force-path-style",
        "--rows-per-file",
        "55000",
        "--multipart-threshold",
        "1048576",
        "--part-bytes",
        "5242880",
    ];
    let mut args = vec!["--out", url.as_str()];
    args.extend_from_slice(&s3_args);
    let (code, s, err) = preprocess(t, "pwalk", &args, &CREDS);
    assert_eq!(code, 0, "{err}");
    let dirs = ls["directories"].as_u64().unwrap();
    assert_eq!(
        (s["records"].as_u64(), s["directories"].as_u64(), s["files"].as_u64()),
        (Some(files), Some(dirs), Some(2)),
        "{s}"
    );
    let parts = s["parts"].as_array().unwrap();
    assert_eq!(parts[0]["location"], format!("s3://{bucket}/fs1/2026-11-30/part-00000.csv"));
    assert_eq!(
        (parts[0]["rows"].as_u64(), parts[1]["rows"].as_u64()),
        (Some(55_000), Some(files + dirs - 55_000)),
        "{s}"
    );
    assert!(parts[0]["bytes"].as_u64().unwrap() > 5 << 20, "{s}");
    // The big part went in two pieces (5 MiB and the rest), the small one (< 1 MiB) in one PutObject.
    assert_eq!(
        (parts[0]["upload_parts"].as_u64(), parts[1]["upload_parts"].as_u64(), s["multipart_uploads"].as_u64()),
        (Some(2), Some(0), Some(1)),
        "{s}"
    );
    for (i, p) in parts.iter().enumerate() {
        let name = format!("part-{i:05}.csv");
        let (body, etag) = store.get(&bucket, &format!("fs1/2026-11-30/{name}")).unwrap();
        assert_eq!(body, std::fs::read(local.join(&name)).unwrap(), "{name}: the object is the local part");
        assert_eq!(body.len() as u64, p["bytes"].as_u64().unwrap());
        let etag = etag.unwrap_or_default();
        assert_eq!(etag.trim_matches('"').ends_with("-2"), i == 0, "{name}: ETag {etag}");
    }

    let (_, from_local) = snapshot_of(t, "local-icicle9", &icicle9_source(&local), &records, &[]);
    let s3_source = format!(
        "type = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"fs1/2026-11-30/\"\nkeys = \"*.csv\"\nendpoint_url = \"{endpoint}\"\nforce_path_style = true\npreset = \"icicle9\"\nsplit_bytes = 1000000\n"
    );
    let (again, from_s3) = snapshot_of(t, "s3-icicle9", &s3_source, &records, &CREDS);
    assert_eq!(
        (again["records"].as_u64(), again["directories"].as_u64()),
        (Some(files - again["rejects"].as_u64().unwrap()), Some(dirs)),
        "{again}"
    );
    assert_eq!(from_s3.len(), from_local.len());
    assert!(from_s3 == from_local, "{:?}", differences(&from_s3, &from_local));

    // A second run does not mix its parts with these; settings are checked before any request.
    let (code, _, err) = preprocess(t, "pwalk", &args, &CREDS);
    assert!(code == 1 && err.contains("already holds parts (fs1/2026-11-30/part-00000.csv)"), "{err}");
    let other = format!("s3://{bucket}/elsewhere");
    let small =
        ["--out", other.as_str(), "--endpoint-url", endpoint.as_str(), "--force-path-style", "--part-bytes", "1000"];
    let (code, _, err) = preprocess(t, "pwalk", &small, &CREDS);
    assert!(code == 1 && err.contains("--part-bytes") && err.contains("5242880"), "{err}");
}

#[test]
fn an_unfinished_multipart_upload_is_aborted_and_a_missing_bucket_is_named() {
    use icicle_plugins_s3::{UploadConfig, Uploader};
    let tmp = test_dir();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "test\n").unwrap();
    let store = ObjectStore::connect(&s3(), "test", "test").unwrap();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let bucket = format!("icicle-upload-{}-{nanos}", std::process::id());
    store.create_bucket(&bucket).unwrap();
    let mut c = UploadConfig::for_url(&format!("s3://{bucket}/p/")).unwrap();
    (c.endpoint_url, c.force_path_style, c.access_key_id, c.secret_access_key_file) =
        (Some(s3()), true, Some("test".into()), Some(secret));
    (c.multipart_threshold, c.part_bytes, c.max_attempts) = (1000, 5 << 20, 1);
    let invalid =
        |k: &str, r: String| icicle_core::ConfigError::InvalidValue { key: k.into(), origin: "test".into(), reason: r };
    let up = Uploader::new(&c, invalid).unwrap();
    assert_eq!(up.url("part-00000.csv"), format!("s3://{bucket}/p/part-00000.csv"));
    // Past the threshold but within one part: a multipart upload of one part.
    let mut small = up.object("small.csv");
    small.write(&[b'x'; 2000]).unwrap();
    let done = small.finish().unwrap();
    assert_eq!((done.key.as_str(), done.bytes, done.parts), ("p/small.csv", 2000, 1));
    let (body, etag) = store.get(&bucket, "p/small.csv").unwrap();
    assert!(body == vec![b'x'; 2000] && etag.as_deref().unwrap_or("").trim_matches('"').ends_with("-1"), "{etag:?}");
    // One full part sent, then dropped unfinished (a failed run): the upload is aborted.
    let mut big = up.object("big.csv");
    big.write(&vec![b'y'; (5 << 20) + 10]).unwrap();
    assert_eq!(store.unfinished_uploads(&bucket).unwrap(), vec!["p/big.csv".to_string()]);
    drop(big);
    assert!(store.unfinished_uploads(&bucket).unwrap().is_empty());
    assert_eq!(store.keys(&bucket, "p/").unwrap(), vec!["p/small.csv".to_string()]);

    c.bucket = format!("{bucket}-missing");
    let up = Uploader::new(&c, invalid).unwrap();
    let e = up.existing("part-").unwrap_err().to_string();
    assert!(e.contains(&format!("s3://{bucket}-missing/p/part-")) && e.contains("NoSuchBucket"), "{e}");
    c.part_bytes = 1 << 20;
    let e = Uploader::new(&c, invalid).unwrap_err().to_string();
    assert!(e.contains("part_bytes") && e.contains("5242880"), "{e}");
}

#[test]
fn an_input_that_cannot_be_read_makes_the_run_exit_3() {
    let tmp = test_dir();
    let t = tmp.path();
    let seed = test_seed();
    let fs = GenFs::generate(&GenSpec::new(300, seed));
    let data = t.join("gufi");
    gen::write(&fs, Format::Gufi, &data, 0, false).unwrap();
    // One directory lost its database: its entries cannot be read.
    let lost = data.join("fs/home/db.db");
    std::fs::remove_file(&lost).unwrap();
    snapshot_config(
        t,
        "gufi",
        &format!("type = \"gufi\"\nindex = \"{}\"\n", data.display()),
        "[records]\nvisible_to = [\"public\"]\n",
    );
    let parts = t.join("parts");
    let (code, s, err) = preprocess(t, "gufi", &["--out", parts.to_str().unwrap()], &[]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(
        (s["rejects"].as_u64(), s["unreadable_inputs"].as_u64(), s["reject_threshold_exceeded"].as_bool()),
        (Some(1), Some(1), Some(false)),
        "{s}"
    );
    assert_eq!(s["rows"].as_u64().unwrap(), s["written"].as_u64().unwrap() + 1, "{s}");
    let rejects = std::fs::read_to_string(t.join("gufi-rejects.jsonl")).unwrap();
    assert!(rejects.contains(&lost.display().to_string()) && rejects.contains("missing db.db"), "{rejects}");
    let (_, _, text) = icicle(
        &["preprocess", "-c", t.join("gufi.toml").to_str().unwrap(), "--out", t.join("again").to_str().unwrap()],
        &[],
    );
    assert!(text.contains("INCOMPLETE: inputs could not be read"), "{text}");
}
