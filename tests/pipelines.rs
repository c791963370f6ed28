//! The counting and aggregate pipelines, run with the primary records in one invocation,
//! checked against statistics computed independently from the generated ground truth.

mod common;

use std::collections::BTreeMap;

use common::*;
use icicle_core::record::OwnedFileRecord;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

const REF: i64 = 1_767_225_600;

fn parent_parts(path: &str) -> Vec<&str> {
    let parent = &path[..path.rfind('/').unwrap()];
    parent.split('/').filter(|c| !c.is_empty()).collect()
}

fn prefix(parts: &[&str], level: usize) -> String {
    format!("/{}", parts[..level].join("/"))
}

fn run_all(
    tmp: &std::path::Path,
    sketch: &str,
    files: u64,
) -> (Vec<OwnedFileRecord>, serde_json::Value, std::path::PathBuf) {
    let fs = GenFs::generate(&GenSpec::new(files, 77));
    let data = tmp.join("tsv");
    gen::write(&fs, Format::Tsv, &data, 1_000, false).unwrap();
    let out = tmp.join(format!("out-{sketch}"));
    let cfg = config(
        tmp,
        &format!("{sketch}.toml"),
        &format!(
            "[snapshot]\nworkers = 2\nsplit_bytes = 50000\nversion = \"v1\"\n\
             [records]\nprincipals = \"{d}/principals.tsv\"\n\
             [counting]\nenabled = true\ndirectory_max = 3\noutput = \"{t}/counts-{sketch}.csv\"\n\
             [aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 3\nreference_time = {REF}\ndir_visible_to = [\"urn:globus:groups:id:admins\"]\n\
             [aggregate.sketch]\ntype = \"{sketch}\"\n\
             [sources.s]\ntype = \"tsv\"\npaths = [\"{d}/*.csv\"]\npreset = \"icicle9\"\n\
             [sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n",
            d = data.display(),
            t = tmp.display(),
            o = out.display()
        ),
    );
    let (code, summary, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    (fs.records(), summary, out)
}

#[test]
fn counting_matches_independent_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let (truth, summary, _) = run_all(tmp.path(), "ddsketch", 3_000);
    let csv = std::fs::read_to_string(tmp.path().join("counts-ddsketch.csv")).unwrap();
    let mut got: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let (rest, rec) = line.rsplit_once(',').unwrap();
        let (p, c) = rest.rsplit_once(',').unwrap();
        got.insert(p.trim_matches('"').to_string(), (c.parse().unwrap(), rec.parse().unwrap()));
    }
    let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in &truth {
        for k in [format!("u{}", r.attrs.uid), format!("g{}", r.attrs.gid)] {
            let e = want.entry(k).or_default();
            e.0 += 1;
            e.1 += 1;
        }
        let parts = parent_parts(&r.path);
        let depth = parts.len().min(3);
        want.entry(prefix(&parts, depth)).or_default().0 += 1;
        for level in 0..=depth {
            want.entry(prefix(&parts, level)).or_default().1 += 1;
        }
    }
    assert_eq!(got, want);
    assert_eq!(summary["pipelines"]["counting"]["principals"].as_u64().unwrap() as usize, want.len());
}

fn exact_q(sorted: &[i64], q: f64) -> i64 {
    sorted[(q * (sorted.len() as f64 - 1.0)) as usize]
}

fn aggregates(out: &std::path::Path) -> BTreeMap<String, serde_json::Value> {
    let mut m = BTreeMap::new();
    for (_, doc) in documents(out, "ingest-") {
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            if e["content"]["principal"].is_string() {
                m.insert(e["subject"].as_str().unwrap().to_string(), e.clone());
            }
        }
    }
    m
}

fn principals_of(r: &OwnedFileRecord) -> Vec<String> {
    let parts = parent_parts(&r.path);
    let mut v = vec![format!("user:{}", r.attrs.uid), format!("group:{}", r.attrs.gid)];
    for level in 1..=parts.len().min(3) {
        v.push(format!("dir:{}", prefix(&parts, level)));
    }
    v
}

#[test]
fn aggregates_with_the_exact_sketch_equal_the_ground_truth() {
    let tmp = tempfile::tempdir().unwrap();
    let (truth, summary, out) = run_all(tmp.path(), "exact", 2_000);
    // One invocation produced primary records as well.
    assert_eq!(summary["records"], 2_000);
    assert_eq!(ingested_primary(&out), 2_000);
    let got = aggregates(&out);
    let mut groups: BTreeMap<String, Vec<&OwnedFileRecord>> = BTreeMap::new();
    for r in &truth {
        for p in principals_of(r) {
            groups.entry(p).or_default().push(r);
        }
    }
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), groups.keys().cloned().collect::<Vec<_>>());
    assert_eq!(summary["aggregate_records"].as_u64().unwrap() as usize, groups.len());
    for (p, rs) in &groups {
        let c = &got[p]["content"];
        assert_eq!(c["file_count"], rs.len(), "{p}");
        let mut sizes: Vec<i64> = rs.iter().map(|r| r.attrs.size as i64).collect();
        sizes.sort();
        assert_eq!(c["size"]["total"], sizes.iter().sum::<i64>(), "{p}");
        assert_eq!(c["size"]["min"], sizes[0], "{p}");
        assert_eq!(c["size"]["max"], *sizes.last().unwrap(), "{p}");
        for (q, name) in [(0.1, "p10"), (0.25, "p25"), (0.5, "p50"), (0.75, "p75"), (0.9, "p90"), (0.99, "p99")] {
            assert_eq!(c["size"][name], exact_q(&sizes, q), "{p} size {name}");
            let mut ages: Vec<i64> = rs.iter().map(|r| REF - r.attrs.mtime).collect();
            ages.sort();
            let want = REF - exact_q(&ages, 1.0 - q);
            assert_eq!(c["raw"]["mtime"][name], want, "{p} mtime {name}");
            assert_eq!(c["mtime"][name], icicle_core::time::iso8601(want), "{p} mtime {name}");
        }
        assert_eq!(c["raw"]["atime"]["min"], rs.iter().map(|r| r.attrs.atime).min().unwrap(), "{p}");
        assert_eq!(c["raw"]["ctime"]["max"], rs.iter().map(|r| r.attrs.ctime).max().unwrap(), "{p}");
        let vis = got[p]["visible_to"].as_array().unwrap();
        assert_eq!(vis.len(), 1, "{p}: {vis:?}");
        if p.starts_with("dir:") {
            assert_eq!(vis[0], "urn:globus:groups:id:admins");
        }
    }
}

fn ingested_primary(out: &std::path::Path) -> usize {
    documents(out, "ingest-")
        .iter()
        .map(|(_, d)| {
            d["ingest_data"]["gmeta"].as_array().unwrap().iter().filter(|e| e["content"]["path"].is_string()).count()
        })
        .sum()
}

#[test]
fn ddsketch_aggregates_are_within_one_percent() {
    let tmp = tempfile::tempdir().unwrap();
    let (truth, summary, out) = run_all(tmp.path(), "ddsketch", 3_000);
    let got = aggregates(&out);
    let mut groups: BTreeMap<String, Vec<&OwnedFileRecord>> = BTreeMap::new();
    for r in &truth {
        for p in principals_of(r) {
            groups.entry(p).or_default().push(r);
        }
    }
    for (p, rs) in &groups {
        let c = &got[p]["content"];
        let mut sizes: Vec<i64> = rs.iter().map(|r| r.attrs.size as i64).collect();
        sizes.sort();
        let mut ages: Vec<i64> = rs.iter().map(|r| REF - r.attrs.atime).collect();
        ages.sort();
        for (q, name) in [(0.1, "p10"), (0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
            let (want, est) = (exact_q(&sizes, q) as f64, c["size"][name].as_f64().unwrap());
            assert!((est - want).abs() <= want * 0.0101 + 0.5, "{p} size {name}: {est} vs {want}");
            let want_age = exact_q(&ages, 1.0 - q) as f64;
            let est_age = (REF - c["raw"]["atime"][name].as_i64().unwrap()) as f64;
            assert!(
                (est_age - want_age).abs() <= want_age.abs() * 0.0101 + 0.5,
                "{p} atime {name}: age {est_age} vs {want_age}"
            );
        }
    }
    assert!(summary["pipelines"]["aggregate"]["sketch_memory_bytes"].as_u64().unwrap() > 0);
}
