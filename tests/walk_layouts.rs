//! A `walk` with `layout = true`: every regular file's record carries its Lustre layout as
//! `lfs getstripe -v` prints it (here the testkit's fake `lfs` for files on disk, PRISM's
//! emulated layouts), links and directories none; an `lfs` that cannot run leaves the
//! directory's records unknown (a reject; a versioned run deletes nothing of it).

mod common;

use std::path::Path;

use common::*;
use icicle_plugins_prism::layout::{EmulatedLayouts, LayoutProvider};
use serde_json::{json, Value};

const SPEC: &str = "pool=113,167,204,10;stripe_size=256K;pfl=1M:1,EOF:2";

fn walk_config(tmp: &Path, root: &Path, lfs: &str) -> std::path::PathBuf {
    config(
        tmp,
        "walk.toml",
        &format!(
            "[snapshot]\nversion = \"v\"\nstate_dir = \"{t}/state\"\nmax_reject_ratio = 1.0\nrejects_file = \"{t}/rejects.jsonl\"\n\
             [records]\nvisible_to = [\"public\"]\n[sources.w]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/\"\nlayout = true\nlfs = {lfs}\n\
             [sinks.o]\ntype = \"file\"\ndir = \"{t}/out\"\n",
            t = tmp.display(),
            r = root.display(),
        ),
    )
}

/// `storage.layout` as the encoder writes a layout (no `end` when it reaches EOF).
fn layout_json(comps: &[icicle_core::traits::LayoutComponent]) -> Value {
    comps
        .iter()
        .map(|c| {
            let mut v = json!({"start": c.start, "stripe_size": c.stripe_size, "osts": c.osts});
            if c.end != u64::MAX {
                v["end"] = json!(c.end);
            }
            v
        })
        .collect()
}

#[test]
fn a_walk_with_layouts_publishes_each_files_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = std::fs::canonicalize(tmp.path()).unwrap();
    let root = tmp.join("tree");
    std::fs::create_dir_all(root.join("d")).unwrap();
    let files = [("a", 100usize), ("big", 3_000_000), ("d/c", 1_500_000)];
    for (name, size) in files {
        std::fs::write(root.join(name), vec![7u8; size]).unwrap();
    }
    std::os::unix::fs::symlink("a", root.join("l")).unwrap();
    let lfs = format!("[\"{}\", \"lfs-files\", \"--layouts\", \"{SPEC}\"]", testkit_bin().display());
    let (code, s, err) = snapshot(&walk_config(&tmp, &root, &lfs), &[]);
    assert_eq!((code, s["rejects"].as_u64()), (0, Some(0)), "{err}");
    let got = ingested(&tmp.join("out"));
    let layouts = EmulatedLayouts::parse(SPEC).unwrap();
    for (name, size) in files {
        let st = &got[&format!("/{name}")]["content"]["storage"];
        let want = layouts.layout(&root.join(name), size as u64).unwrap();
        assert_eq!(st["layout"], layout_json(&want), "{name}: {st}");
        assert_eq!(st["stripe_count"], want.iter().map(|c| c.osts.len()).max().unwrap(), "{name}");
        assert!(st["fid"].as_str().is_some_and(|f| f.starts_with("[0x")), "{name}: {st}");
    }
    // One component below 1 MiB, two past it.
    assert_eq!(got["/a"]["content"]["storage"]["layout"].as_array().unwrap().len(), 1);
    assert_eq!(got["/big"]["content"]["storage"]["layout"].as_array().unwrap().len(), 2);
    assert!(got["/l"]["content"].get("storage").is_none(), "{}", got["/l"]);

    // An `lfs` that cannot be run: the root's listing is a reject naming it (nothing below
    // is walked), and the versioned run withholds its deletes of what the first published.
    std::fs::remove_dir_all(tmp.join("out")).unwrap();
    let (code, s, err) = snapshot(&walk_config(&tmp, &root, "[\"/nonexistent/lfs\"]"), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((s["rejects"].as_u64(), s["deletes_withheld"].as_u64()), (Some(1), Some(4)), "{s}");
    let rejects = std::fs::read_to_string(tmp.join("rejects.jsonl")).unwrap();
    assert!(rejects.contains("lfs getstripe: running /nonexistent/lfs"), "{rejects}");
    assert_eq!(deleted(&tmp.join("out")), Vec::<String>::new());
}
