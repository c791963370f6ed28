//! The change-source compliance check (`icicle_testkit::monitor_compliance`): a source run by
//! the runtime's driver, with a sink failing before or after it takes a batch and stop signals
//! at random deliveries, restarted from its checkpoint each time, leaves the index a run
//! without faults leaves. Run on the toy monitor (the driver's contract alone) and on the
//! inotify monitor (real kernel events, the tree changed while the monitor is down).

use std::path::Path;
use std::sync::{Arc, Mutex};

use icicle_core::monitor::ChangeSource;
use icicle_core::registry::{Built, PluginKind};
use icicle_testkit::monitor_compliance::{
    first_difference, run_with_faults, toy_log, Index, ToyChange, ToyLog, ToyMonitor,
};

use icicle_plugins_local as _;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn the_toy_monitor_through_faults_leaves_the_index_of_its_changelog() {
    let base = icicle_core::rng::test_seed();
    let rt = runtime();
    for seed in base..base + 50 {
        let tmp = tempfile::tempdir().unwrap();
        let (records, want) = toy_log(seed, 80);
        // The producer writes while the monitor is down: half the log at first, the rest
        // between the faulty runs.
        let log = Arc::new(Mutex::new(ToyLog {
            records: records[..40].to_vec(),
            cleared: 0,
            read_size: 1 + (seed % 5) as usize,
        }));
        let rest: Vec<ToyChange> = records[40..].to_vec();
        let make =
            || Arc::new(ToyMonitor { log: log.clone(), state_dir: tmp.path().to_path_buf() }) as Arc<dyn ChangeSource>;
        let mut between = |i: usize| {
            let mut l = log.lock().unwrap();
            let (from, to) = (i * 5, ((i + 1) * 5).min(rest.len()));
            if from < to {
                l.records.extend_from_slice(&rest[from..to]);
            }
        };
        // Eight faulty runs append the other forty records, five after each.
        let got = rt.block_on(run_with_faults(&make, seed, 8, &mut between));
        if let Some(d) = first_difference(&want, &got) {
            panic!("seed {seed}: {d}");
        }
        assert_eq!(log.lock().unwrap().cleared, records.len() as u64, "seed {seed}: everything read is acknowledged");
    }
}

/// The index a clean run of `make()`'s source leaves on an empty index (the state it resumes
/// from decides what it sends).
async fn final_index(make: &dyn Fn() -> Arc<dyn ChangeSource>) -> Index {
    run_with_faults(make, 0, 0, &mut |_| {}).await
}

fn inotify(root: &Path, state: &Path) -> Arc<dyn ChangeSource> {
    let body = format!(
        "type = \"inotify\"\nroot = \"{}\"\nstate_dir = \"{}\"\nbatch_size = 4\nmax_emit_records = 3\nquiet_period_secs = 0.2\n",
        root.display(),
        state.display()
    );
    match icicle_testkit::compliance::build(PluginKind::Source, "sources.w", &body).unwrap() {
        Built::Monitor(m) => m,
        _ => panic!("inotify is not a change source"),
    }
}

/// One random change to the tree under `root`.
fn mutate(root: &Path, rng: &mut icicle_core::rng::Rng) {
    let names: Vec<_> = walk(root);
    let pick = |rng: &mut icicle_core::rng::Rng| names.get(rng.below(names.len().max(1) as u64) as usize).cloned();
    match rng.below(4) {
        0 => {
            let d = root.join(format!("d{}", rng.below(4)));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(format!("n{}", rng.below(1000))), vec![b'x'; rng.below(5000) as usize]).unwrap();
        }
        1 => {
            if let Some(p) = pick(rng) {
                let _ = std::fs::remove_file(p);
            }
        }
        2 => {
            if let Some(p) = pick(rng) {
                let _ = std::fs::rename(&p, root.join(format!("moved{}", rng.below(1000))));
            }
        }
        _ => {
            if let Some(p) = pick(rng) {
                let _ = std::fs::write(p, vec![b'y'; rng.below(9000) as usize]);
            }
        }
    }
}

fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_inotify_monitor_through_faults_leaves_the_index_of_a_fresh_run() {
    let base = icicle_core::rng::test_seed();
    let rt = runtime();
    for seed in base..base + 3 {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let mut rng = icicle_core::rng::Rng::new(seed);
        // Some files first, then random changes (which may remove them all).
        for i in 0..20 {
            std::fs::create_dir_all(root.join(format!("d{}", i % 4))).unwrap();
            std::fs::write(root.join(format!("d{}/first{i}", i % 4)), vec![b'z'; i * 100]).unwrap();
        }
        for _ in 0..30 {
            mutate(&root, &mut rng);
        }
        let state = tmp.path().join("state");
        let make = || inotify(&root, &state);
        let mut between = |_: usize| {
            for _ in 0..5 {
                mutate(&root, &mut rng);
            }
        };
        let got = rt.block_on(run_with_faults(&make, seed, 6, &mut between));
        let fresh = tmp.path().join("fresh-state");
        let want = rt.block_on(final_index(&|| inotify(&root, &fresh)));
        let files = walk(&root).len();
        assert_eq!(want.len(), files, "seed {seed}: the fresh run indexed {} of {files} files", want.len());
        if let Some(d) = first_difference(&want, &got) {
            panic!("seed {seed}: {d}");
        }
    }
}
