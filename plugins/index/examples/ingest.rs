//! Index the GMetaEntry records of a `file` sink's output directory and print the CPU time the
//! indexing took (the parse of the documents excluded): `cargo run --release -p
//! icicle-plugins-index --example ingest -- OUT_DIR INDEX_DIR [THREADS] [MEMORY_MB]`.

use std::time::Instant;

use icicle_plugins_index::schema::document;
use icicle_plugins_index::Store;

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (out, dir) = (&args[1], std::path::PathBuf::from(&args[2]));
    let threads = args.get(3).map_or(Ok(2), |t| t.parse())?;
    let memory_mb: usize = args.get(4).map_or(Ok(256), |t| t.parse())?;
    let mut entries: Vec<Vec<u8>> = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(out)?.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    names.sort();
    for p in names.iter().filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ingest-"))) {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p)?)?;
        for e in v["ingest_data"]["gmeta"].as_array().into_iter().flatten() {
            entries.push(serde_json::to_vec(e)?);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open_or_create(&dir)?;
    let writer = store.writer(threads, memory_mb << 20)?;
    let (t, cpu0) = (Instant::now(), cpu_seconds());
    for e in &entries {
        writer.add_document(document(&store.fields, e)?.doc)?;
    }
    let mut writer = writer;
    writer.commit()?;
    writer.wait_merging_threads()?;
    let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_seconds() - cpu0);
    println!(
        "{} entries: {secs:.2} s, {cpu:.2} CPU-s, {:.0} per CPU-s, {:.1} µs CPU each",
        entries.len(),
        entries.len() as f64 / cpu,
        cpu * 1e6 / entries.len() as f64
    );
    let reader = store.index.reader()?;
    let searcher = reader.searcher();
    for (field, entry) in store.index.schema().fields() {
        if !entry.is_indexed() {
            continue;
        }
        let mut terms = 0;
        for seg in searcher.segment_readers() {
            terms += seg.inverted_index(field)?.terms().num_terms();
        }
        println!("{:>14}: {terms} terms", entry.name());
    }
    Ok(())
}
