//! Helpers shared by the end-to-end tests: run the real `icicle` binary on generated data.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Run `icicle` with `args`; returns (exit code, stdout, stderr).
pub fn icicle(args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_icicle"));
    cmd.args(args).env_remove("RUST_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run icicle");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Write a config file.
pub fn config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Run a snapshot with `cfg` and return the JSON summary.
pub fn snapshot(cfg: &Path, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["snapshot", "--json", "-c", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, out, err) = icicle(&args, &[]);
    let v = serde_json::from_str(&out).unwrap_or(Value::Null);
    (code, v, err)
}

/// Every GMetaEntry in the `ingest-*.json` documents of a file sink directory, by path.
pub fn ingested(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (_, doc) in documents(dir, "ingest-") {
        assert_eq!(doc["ingest_type"], "GMetaList");
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            let path = e["content"]["path"].as_str().unwrap().to_string();
            assert!(out.insert(path.clone(), e.clone()).is_none(), "duplicate record {path}");
        }
    }
    out
}

/// The documents with `prefix` in a file sink directory, in file-name order, with sizes.
pub fn documents(dir: &Path, prefix: &str) -> Vec<(u64, Value)> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix)).collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (bytes.len() as u64, serde_json::from_slice(&bytes).unwrap())
        })
        .collect()
}

/// The deleted subjects in a file sink directory.
pub fn deleted(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = documents(dir, "delete-")
        .into_iter()
        .flat_map(|(_, d)| d["subjects"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect::<Vec<_>>())
        .collect();
    v.sort();
    v
}
