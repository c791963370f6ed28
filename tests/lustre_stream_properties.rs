//! The Lustre monitor's changelog stream against the fake `lfs`'s retained ranges, over many
//! random seeds: every changelog starts at a random index (the stand-in's default), records
//! are appended in rounds, and between the monitor's runs a random range past what it cleared
//! is purged (garbage collection of an idle user). After each `icicle monitor --drain`: the
//! purged range is reported exactly (`lost_ranges`, `lost_records`) once a record past it can
//! be read (a changelog purged to its end looks quiet: the loss shows with the next record),
//! every record after it is read, and `changelog_clear` reached the last record. Records
//! purged before the first run are not this monitor's to miss (it has no checkpoint: it starts
//! wherever the changelog is).
//!
//! `ICICLE_PROPERTY_SEED=N` replays one seed; `ICICLE_PROPERTY_CASES` sets how many run
//! (default 50, from a random first seed printed with any failure).

mod common;

use std::path::Path;

use common::*;
use icicle_testkit::gen::Rng;
use icicle_testkit::lustre::{purge, side, Kind, Workload};
use serde_json::Value;

fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("ICICLE_PROPERTY_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let cases: u64 = std::env::var("ICICLE_PROPERTY_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(50);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    let first = (nanos ^ 0x57ea) % 1_000_000_000;
    (first..first + cases).collect()
}

fn indexes(journal: &Path) -> Vec<u64> {
    std::fs::read(journal)
        .unwrap_or_default()
        .split(|&b| b == b'\n')
        .filter_map(|l| std::str::from_utf8(l.split(|&b| b == b' ').next()?).ok()?.parse().ok())
        .collect()
}

fn cleared(journal: &Path) -> u64 {
    std::fs::read_to_string(side(journal, ".users")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn case(seed: u64) -> Result<String, String> {
    let tmp = test_dir();
    let t = tmp.path();
    let (root, journal) = (t.join("fs"), t.join("lfs/changelog"));
    let mut rng = Rng::new(seed ^ 0x9e3);
    let read_size = 1 + rng.below(400);
    let batch = 1 + rng.below(300);
    let out = t.join("out");
    let testkit = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    let cfg = config(
        t,
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = {batch}\nquiet_period_secs = 0.0\npoll_interval_secs = 0.01\nread_size = {read_size}\nstate_dir = \"{t}/state\"\n\
             [sinks.o]\ntype = \"blackhole\"\n",
            k = testkit.display(),
            j = journal.display(),
            r = root.display(),
            t = t.display(),
        ),
    );
    let rounds = 2 + rng.below(3);
    let mut ran = false;
    let mut purged = 0u64;
    let mut story = Vec::new();
    for round in 0..rounds {
        let mut w = Workload::open(&root, &journal, seed ^ round).map_err(|e| e.to_string())?;
        w.real = false;
        let kind = [Kind::EvalPerf, Kind::Mixed, Kind::EvalOut][rng.below(3) as usize];
        w.run(kind, 20 + rng.below(180) as usize, "/work").map_err(|e| e.to_string())?;
        drop(w);
        let all = indexes(&journal);
        let before = cleared(&journal);
        // A random purge past what was cleared, now and then all of it.
        if rng.below(2) == 0 {
            let unread: Vec<u64> = all.iter().copied().filter(|i| *i > before).collect();
            purged = purged.max(unread[rng.below(unread.len() as u64) as usize]);
            purge(&journal, purged).map_err(|e| e.to_string())?;
        }
        // What a monitor with a checkpoint misses (the first run has none), seen once a record
        // past the purge is there to read: a changelog purged to its end looks quiet (an MDT
        // says nothing else to a client), and the loss shows with the next record written.
        let kept_from = before.max(purged) + 1;
        let shows = all.iter().any(|i| *i >= kept_from);
        let lost = if ran && purged > before && shows { vec![[before + 1, purged]] } else { Vec::new() };
        let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
        if code != 0 {
            return Err(format!("round {round}: exit {code}: {err}"));
        }
        ran |= shows;
        let report: Value = serde_json::from_str(&stdout).map_err(|e| format!("{e}: {stdout}"))?;
        let r = &report["mdt0"];
        let got_lost: Vec<[u64; 2]> = serde_json::from_value(r["lost_ranges"].clone()).unwrap_or_default();
        let want_records = if shows { all.iter().filter(|i| **i >= kept_from).count() as u64 } else { 0 };
        let last = *all.last().unwrap_or(&0);
        story.push(format!("round {round}: cleared {before}, kept from {kept_from}, last {last}, lost {got_lost:?}"));
        if got_lost != lost || r["lost_records"].as_u64() != Some(lost.iter().map(|[a, b]| b - a + 1).sum()) {
            return Err(format!(
                "round {round}: lost {got_lost:?}, expected {lost:?}; {}; report {r}",
                story.join("; ")
            ));
        }
        if r["records"].as_u64() != Some(want_records) {
            return Err(format!(
                "round {round}: read {} records, expected {want_records}; {}; report {r}",
                r["records"],
                story.join("; ")
            ));
        }
        let want_cleared = if shows { last } else { before };
        if cleared(&journal) != want_cleared {
            return Err(format!(
                "round {round}: cleared {}, expected {want_cleared}; {}",
                cleared(&journal),
                story.join("; ")
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(format!("seed {seed}: read {read_size} a call; {}", story.join("; ")))
}

#[test]
fn purged_ranges_are_reported_exactly_and_every_retained_record_is_read() {
    let mut failures = Vec::new();
    let all = seeds();
    for &seed in &all {
        if let Err(e) = case(seed) {
            failures.push(format!("seed {seed} (ICICLE_PROPERTY_SEED={seed} replays): {e}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} seeds failed:\n{}", failures.len(), all.len(), failures.join("\n"));
}
