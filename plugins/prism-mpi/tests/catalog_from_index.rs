//! swiftload over a catalog taken from an icicle index: files written under the catalog agent,
//! the same tree indexed by `icicle snapshot` (a `walk` with `layout = true`, `lfs getstripe`
//! answered by the testkit's fake `lfs` for files on disk with the agent's emulated layouts),
//! `icicle catalog` writing the catalog from the index, and swiftload reading every byte once
//! with the same placement as from the agent's own catalog.

use std::path::Path;
use std::process::Command;

mod common;
use common::{agent, mpirun, s, summary_of, workspace_bin};

use icicle_plugins_prism::dataset::sequential_checksum;

const LAYOUTS: &str = "pool=113,167,204,10,60,86;stripe_size=256K;pfl=1M:1,4M:2,EOF:3";

/// Index `data` with layouts into `index` (a walk snapshot to an `index` sink).
fn snapshot_with_layouts(tmp: &Path, data: &Path, index: &Path) {
    let testkit = workspace_bin("icicle-testkit");
    let cfg = tmp.join("snapshot.toml");
    std::fs::write(
        &cfg,
        format!(
            "[records]\nvisible_to = [\"public\"]\n[sources.run]\ntype = \"walk\"\nroot = \"{}\"\nlayout = true\nlfs = [\"{}\", \"lfs-files\", \"--layouts\", \"{LAYOUTS}\"]\n[sinks.idx]\ntype = \"index\"\ndir = \"{}\"\n",
            data.display(),
            testkit.display(),
            index.display()
        ),
    )
    .unwrap();
    let out = Command::new(workspace_bin("icicle")).args(["snapshot", "--json", "-c", s(&cfg)]).output().unwrap();
    assert!(out.status.success(), "icicle snapshot: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rejects"], 0, "{v}");
}

fn swiftload(catalog: &Path, data: &Path, loader: &Path) -> serde_json::Value {
    let args = ["--catalog", s(catalog), "--input-dir", s(data), "--policy", "object", "--loader-config", s(loader)];
    summary_of(&mpirun(4, &args), &format!("swiftload --catalog {}", catalog.display()))
}

#[test]
fn swiftload_reads_a_catalog_taken_from_the_index_as_it_reads_the_agents() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = std::fs::canonicalize(tmp.path()).unwrap();
    let data = tmp.join("run");
    let agent_catalog = tmp.join("agent-catalog");
    std::fs::create_dir_all(&data).unwrap();
    // An application writing 14 files of 0.1-5.2 MB (one to three PFL components) under the
    // agent, its layouts emulated.
    let st = Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && i=0; while [ $i -lt 14 ]; do head -c $(( (i * 391 + 100) * 1000 )) /dev/urandom > out.$i; i=$((i+1)); done")
        .arg("sh")
        .arg(&data)
        .env("LD_PRELOAD", agent())
        .env("CATALOG_DIR", &agent_catalog)
        .env("ICICLE_CATALOG_ROOT", &data)
        .env("ICICLE_CATALOG_LAYOUT", "emulate")
        .env("ICICLE_EMULATED_LAYOUT", LAYOUTS)
        .status()
        .unwrap();
    assert!(st.success());
    let mut files: Vec<_> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let (bytes, crc) = sequential_checksum(&files).unwrap();

    let index = tmp.join("index");
    snapshot_with_layouts(&tmp, &data, &index);
    // Every file's layout reached the index: `find -stripe-count` answers from it.
    let icicle = workspace_bin("icicle");
    let find = Command::new(&icicle)
        .args(["find", "--index", s(&index), s(&data), "-type", "f", "-stripe-count", "+0", "--count"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&find.stdout).trim(), "14", "{}", String::from_utf8_lossy(&find.stderr));

    let index_catalog = tmp.join("index-catalog");
    let out = Command::new(&icicle)
        .args(["catalog", "--index", s(&index), "--out", s(&index_catalog), s(&data)])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "icicle catalog: {}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("14 entries (14 files with layouts, 0 links)"), "{said}");

    let loader = tmp.join("loader.toml");
    std::fs::write(
        &loader,
        "[loader]\nper_process_mb_s = 100.0\nmax_processes_per_ost = 8\ndefault_ost_mb_s = 200.0\n[loader.ost_mb_s]\n113 = 100.0\n",
    )
    .unwrap();
    let from_agent = swiftload(&agent_catalog, &data, &loader);
    let from_index = swiftload(&index_catalog, &data, &loader);
    for v in [&from_agent, &from_index] {
        assert_eq!(v["files"], 14, "{v}");
        assert_eq!((v["bytes"].as_u64(), v["crc32"].as_str()), (Some(bytes), Some(format!("{crc:08x}").as_str())));
        assert_eq!(
            (v["exactly_once"].as_bool(), v["errors"].as_u64(), v["rejects"].as_u64()),
            (Some(true), Some(0), Some(0))
        );
    }
    // The same plan: processes per OST, bytes per rank, the caps held.
    for key in ["per_ost_processes", "per_rank_bytes", "caps", "over_cap", "max_processes_on_an_ost"] {
        assert_eq!(from_agent[key], from_index[key], "{key}: agent {from_agent}\nindex {from_index}");
    }
}
