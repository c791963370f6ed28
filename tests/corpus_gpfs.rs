//! Every GPFS sample of the corpus (testkit/corpus/gpfs) through the real code path: the
//! messages produced in order into a topic of the real broker (tansu, `scripts/test.sh`),
//! `icicle monitor --drain` reading it (from a `seed_index` snapshot when the case has old
//! files), delivering to the file sink. Each case's index operations, and the metadata of its
//! updates, must be exactly those its `@expect` lines name; every message is committed.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use icicle_plugins_kafka::produce;
use icicle_testkit::corpus::{self, Case, Expect};
use serde_json::Value;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// The snapshot index of the case's `@seed` files (a file-sink directory), or None.
fn seed_index(case: &Case, t: &Path) -> Option<std::path::PathBuf> {
    let seeds: Vec<&str> = case.directive("seed").collect();
    if seeds.is_empty() {
        return None;
    }
    // type,mode,uid,gid,size,atime,ctime,mtime,inode,path
    let mut csv = String::new();
    for s in seeds {
        let (rest, mode) = s.rsplit_once(' ').unwrap();
        let (path, inode) = rest.rsplit_once(' ').unwrap();
        let mode = u32::from_str_radix(mode, 8).unwrap();
        csv.push_str(&format!("f,{mode},0,0,1,1,1,1,{inode},{path}\n"));
    }
    std::fs::write(t.join("seed.csv"), csv).unwrap();
    let dir = t.join("seed");
    let cfg = config(
        t,
        "seed.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n[sources.l]\ntype = \"tsv\"\npaths = [\"{}/seed.csv\"]\ndelimiter = \",\"\npath_last = true\nquoted = false\n\
             columns = {{ type = 0, mode = 1, uid = 2, gid = 3, size = 4, atime = 5, ctime = 6, mtime = 7, inode = 8, path = 9 }}\n[sinks.o]\ntype = \"file\"\ndir = \"{}\"\n",
            t.display(),
            dir.display()
        ),
    );
    let (code, s, err) = snapshot(&cfg, &[]);
    assert_eq!((code, s["rejects"].as_u64()), (0, Some(0)), "{}: seed snapshot: {err} {s}", case.name);
    Some(dir)
}

fn run_case(case: &Case, n: usize) -> Result<(), String> {
    let tmp = test_dir();
    let t = tmp.path();
    let topic = format!("corpus-{n}-{}-{}", std::process::id(), icicle_core::time::now_epoch());
    // In order, bytes as they are (a message that is not UTF-8 too).
    let k = kafka();
    rt().block_on(async {
        produce::create_topic(&k, &topic, 1).await?;
        produce::produce_bytes(&k, &topic, case.data.clone()).await.map(|_| ())
    })
    .map_err(|e| format!("producing: {e}"))?;
    let seed = seed_index(case, t)
        .map(|d| format!("seed_index = \"{}\"\n", d.display()))
        .unwrap_or_else(|| "unseeded = true\n".into());
    let fs_root = case.directive("fs_root").next().unwrap_or("");
    let out = t.join("out");
    let cfg = config(
        t,
        "gpfs.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.fset1]\ntype = \"gpfs\"\ntopic = \"{topic}\"\ngroup_id = \"icicle-{topic}\"\nfs_root = \"{fs_root}\"\n\
             batch_size = 100\nquiet_period_secs = 0.05\nstate_dir = \"{t}/state\"\n{seed}connection = {{ bootstrap = \"{k}\" }}\n\
             [sinks.o]\ntype = \"file\"\ndir = \"{o}\"\n",
            t = t.display(),
            o = out.display()
        ),
    );
    let report = drain_report(&cfg)?;
    let r = &report["fset1"];
    let mut updates: BTreeMap<String, Value> = BTreeMap::new();
    let mut deletes = std::collections::BTreeSet::new();
    for doc in sent_documents(&out) {
        match doc["subjects"].as_array() {
            Some(subjects) => deletes.extend(subjects.iter().filter_map(|s| s.as_str().map(str::to_string))),
            None => {
                for e in doc["ingest_data"]["gmeta"].as_array().into_iter().flatten() {
                    updates.insert(e["subject"].as_str().unwrap_or("").to_string(), e["content"].clone());
                }
            }
        }
    }
    let mut want_updates = BTreeMap::new();
    let mut want_deletes = std::collections::BTreeSet::new();
    for e in &case.expect {
        match e {
            Expect::Update(p, attrs) => {
                want_updates.insert(p.clone(), attrs.clone());
            }
            Expect::Delete(p) => {
                want_deletes.insert(p.clone());
            }
            _ => {}
        }
    }
    let sent: Vec<&String> = updates.keys().collect();
    if sent != want_updates.keys().collect::<Vec<_>>() || deletes != want_deletes {
        return Err(format!(
            "sent updates {sent:?} deletes {deletes:?}, expected updates {:?} deletes {want_deletes:?}; report {r}",
            want_updates.keys()
        ));
    }
    for (path, attrs) in &want_updates {
        let c = &updates[path];
        for (k, v) in attrs {
            let got = match k.as_str() {
                "mode" => c["raw"]["mode"].to_string(),
                "atime" | "ctime" | "mtime" => c["raw"][k.as_str()].to_string(),
                other => c[other].to_string(),
            };
            if &got != v {
                return Err(format!("{path}: {k} is {got}, expected {v}: {c}"));
            }
        }
    }
    let rejects = case.expect.iter().find_map(|e| if let Expect::Reject(n) = e { Some(*n) } else { None }).unwrap_or(0);
    if r["rejects"].as_u64() != Some(rejects) {
        return Err(format!("{} rejects, expected {rejects}; report {r}", r["rejects"]));
    }
    let committed = produce::committed(&k, &topic, &format!("icicle-{topic}"), &[0]).map_err(|e| e.to_string())?;
    if committed.values().sum::<i64>() != case.data.len() as i64 {
        return Err(format!("committed {committed:?} of {} messages", case.data.len()));
    }
    Ok(())
}

#[test]
fn every_gpfs_sample_means_what_its_case_says() {
    let files = corpus::files("gpfs");
    assert!(!files.is_empty(), "no GPFS corpus");
    let (mut failures, mut n) = (Vec::new(), 0);
    for f in files {
        for case in corpus::load(&f).unwrap_or_else(|e| panic!("{e}")) {
            n += 1;
            if let Err(e) = run_case(&case, n) {
                failures.push(format!("{} ({}): {e}", case.name, case.at));
            }
        }
    }
    assert!(n >= 12, "{n} cases");
    assert!(failures.is_empty(), "{} of {n} cases failed:\n{}", failures.len(), failures.join("\n"));
}
