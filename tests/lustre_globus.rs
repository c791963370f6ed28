//! The `lustre,globus` slice (`cargo install --path . --no-default-features --features
//! lustre,globus`): the Lustre monitor publishes a changelog into Globus Search (the testkit's
//! emulator), and the index is the directory as it is now and what the file sink saw. Needs
//! nothing but the `lustre` and `globus` features (no `walk` snapshot to compare with: the
//! tree is read directly).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::*;
use icicle_testkit::globus::{block_on, Client, Emulator, Options};
use icicle_testkit::lustre::{Kind, Workload};

const INDEX: &str = "6a1d2c3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const TOKEN: &str = "tok-slice-Rr5tY8uI";

fn testkit() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    assert!(p.exists(), "build icicle-testkit first (cargo build -p icicle-testkit)");
    p
}

#[test]
fn the_lustre_monitor_publishes_the_changelog_into_globus_search() {
    let tmp = test_dir();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 5).unwrap();
    w.run(Kind::Filebench, 80, "/fb").unwrap();
    w.run(Kind::EvalPerf, 40, "/work").unwrap();
    drop(w);
    let last = *journal_indexes(&journal).last().unwrap();
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let out = tmp.path().join("out");
    let cfg = config(
        tmp.path(),
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nuser = \"cl1\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 20\nquiet_period_secs = 0.0\npoll_interval_secs = 0.02\nstate_dir = \"{t}/state\"\n\
             [sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\nbase_url = \"{u}\"\ntoken_env = \"ICICLE_TEST_GLOBUS_TOKEN\"\ntask_poll_ms = 10\n\
             [sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n",
            k = testkit().display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.path().display(),
            u = emu.url(),
            o = out.display(),
        ),
    );
    let (code, report, err) =
        icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[("ICICLE_TEST_GLOBUS_TOKEN", TOKEN)]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains(TOKEN), "the token reached stderr:\n{err}");
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert!(report["mdt0"]["batches"].as_u64().unwrap() > 0, "{report}");
    // Everything read was acknowledged to the changelog.
    let users = std::fs::read_to_string(tmp.path().join("lfs/changelog.users")).unwrap();
    assert_eq!(users.trim(), format!("cl1 {last}"));
    // The index holds every file below the mount (directories are not records), and nothing
    // else.
    let got = block_on(Client::new(&emu.url(), TOKEN).scroll_all(INDEX)).unwrap();
    let subjects: BTreeSet<String> = got.keys().cloned().collect();
    let (_, files) = tree_entries(&root);
    let want: BTreeSet<String> = files.into_iter().collect();
    let missing: Vec<_> = want.difference(&subjects).collect();
    let extra: Vec<_> = subjects.difference(&want).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing {missing:?}\nextra {extra:?}");
    // The same documents as the file sink.
    let from_file = icicle_gmeta::replay::read_index(&out).unwrap();
    assert_eq!(from_file.keys().cloned().collect::<BTreeSet<_>>(), subjects);
    for (s, content) in &got {
        assert_eq!(&from_file[s], content, "{s}");
    }
}
