//! What the icicle-mpi tests share: the binaries and the entries a file sink wrote.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// `icicle-mpi`.
pub fn mpi_bin() -> &'static str {
    env!("CARGO_BIN_EXE_icicle-mpi")
}

/// The plain one-process binary, built beside this one by `cargo test --workspace`.
pub fn plain_bin() -> PathBuf {
    let p = Path::new(mpi_bin()).with_file_name("icicle");
    assert!(p.exists(), "{} is missing: build the workspace (`cargo test --workspace` does)", p.display());
    p
}

/// Every entry of every GIngest document under `dir` (any depth: one directory per rank), by
/// subject; a subject seen twice fails.
pub fn entries(dir: &Path) -> BTreeMap<String, Value> {
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
