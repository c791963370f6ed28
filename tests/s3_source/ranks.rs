//! Across MPI ranks every rank reads the version of an object rank 0 listed.

use super::*;

/// Rank 0 plans byte ranges of an object; it grows before another rank lists it. That rank
/// reads the version rank 0 listed (its ranges stop at the old size) or fails the split: it
/// never reads the new version through the old ranges, losing the lines past them.
#[test]
fn another_rank_reads_the_version_rank_0_listed_or_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "test\n").unwrap();
    let store = store();
    let bucket = fresh_bucket(&store, "icicle-ranks");
    let rows = |n: usize| -> Vec<u8> {
        (0..n).map(|i| format!("f,33188,1,1,1,1,1,1,/r{i:03}\n")).collect::<String>().into_bytes()
    };
    store.put(&bucket, "big.csv", rows(20)).unwrap();
    let toml = format!(
        "[sources.s]\ntype = \"s3\"\nbucket = \"{bucket}\"\nendpoint_url = \"{}\"\nforce_path_style = true\naccess_key_id = \"test\"\nsecret_access_key_file = \"{}\"\npreset = \"icicle9\"\nmax_attempts = 2\nsplit_bytes = 200\n",
        s3(),
        secret.display()
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rank0 = build_source(&toml);
    let splits = rt.block_on(rank0.plan()).unwrap();
    assert!(splits.len() > 2 && splits.iter().all(|s| s.version.is_some()), "{splits:?}");
    // Rank 1 plans too (it keeps its own listing), after the object grew.
    store.put(&bucket, "big.csv", rows(40)).unwrap();
    let rank1 = build_source(&toml);
    rt.block_on(rank1.plan()).unwrap();
    let mut got = Rows::default();
    for s in &splits {
        let e = rank1.read(s, &mut got).unwrap_err().to_string();
        assert!(e.contains("PreconditionFailed (HTTP 412)") && e.contains("changed after it was listed"), "{e}");
    }
    assert!(got.records.is_empty(), "{:?}", got.records);
}
