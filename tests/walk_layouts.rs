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

/// A versioned walk of `root` into `<tmp>/out`; `layout = true` with `lfs` when it is given.
fn walk_config(tmp: &Path, root: &Path, lfs: Option<&str>) -> std::path::PathBuf {
    let layout = lfs.map(|l| format!("layout = true\nlfs = {l}\n")).unwrap_or_default();
    config(
        tmp,
        "walk.toml",
        &format!(
            "[snapshot]\nversion = \"v\"\nstate_dir = \"{t}/state\"\nmax_reject_ratio = 1.0\nrejects_file = \"{t}/rejects.jsonl\"\n\
             [records]\nvisible_to = [\"public\"]\n[sources.w]\ntype = \"walk\"\nroot = \"{r}\"\npath_prefix = \"/\"\n{layout}\
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
    // A first versioned run without layouts, then one with them: every regular file is sent
    // again (its storage is part of what a run compares), the link and directories not.
    let (code, s, err) = snapshot(&walk_config(&tmp, &root, None), &[]);
    assert_eq!((code, s["created"].as_u64()), (0, Some(4)), "{err}");
    std::fs::remove_dir_all(tmp.join("out")).unwrap();
    let lfs = format!("[\"{}\", \"lfs-files\", \"--layouts\", \"{SPEC}\"]", testkit_bin().display());
    let (code, s, err) = snapshot(&walk_config(&tmp, &root, Some(&lfs)), &[]);
    assert_eq!((code, s["rejects"].as_u64(), s["updated"].as_u64()), (0, Some(0), Some(3)), "{err}\n{s}");
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
    assert!(!got.contains_key("/l"), "the link is unchanged: {got:?}");

    // An `lfs` that cannot be run, or that fails for no file in particular (`sudo` refusing):
    // the root's listing is a reject naming it (nothing below is walked), the versioned run
    // withholds its deletes, and no record is sent without the layout it had.
    for (lfs, says) in [
        ("[\"/nonexistent/lfs\"]", "lfs getstripe: running /nonexistent/lfs"),
        ("[\"sh\", \"-c\", \"echo sudo: a password is required >&2; exit 1\", \"lfs\"]", "a password is required"),
    ] {
        let _ = std::fs::remove_dir_all(tmp.join("out"));
        std::fs::write(root.join("a"), vec![8u8; 100]).unwrap();
        let (code, s, err) = snapshot(&walk_config(&tmp, &root, Some(lfs)), &[]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            (s["rejects"].as_u64(), s["deletes_withheld"].as_u64(), s["records"].as_u64()),
            (Some(1), Some(4), Some(0)),
            "{s}"
        );
        let rejects = std::fs::read_to_string(tmp.join("rejects.jsonl")).unwrap();
        assert!(rejects.contains(says), "{rejects}");
        assert_eq!(deleted(&tmp.join("out")), Vec::<String>::new());
    }
}
