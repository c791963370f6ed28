//! What each part of a document costs tantivy to index: `cargo run --release -p
//! icicle-plugins-index --example schema_cost -- N VARIANT`, where VARIANT is a comma list of
//! parts (`subject`, `subject_fast`, `store`, `numbers`, `path_term`, `path_fast`, `name`,
//! `name_reversed`, `extension`, `parent`, `words`, `visible`, `kind`, `owner_terms`). The documents are
//! synthetic primary records shaped like the `tsv` snapshot's (depth 4–8, names unique per
//! directory); prints CPU microseconds a document, the documents' parse excluded.

use std::time::Instant;

use tantivy::schema::{
    IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STORED, STRING,
};
use tantivy::{Index, IndexWriter, TantivyDocument};

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
    let n: usize = args[1].parse()?;
    let parts: Vec<&str> = args[2].split(',').collect();
    let threads: usize = args.get(3).map_or(Ok(2), |t| t.parse())?;
    let has = |p: &str| parts.contains(&p);
    let mut b = Schema::builder();
    let subject = b.add_text_field("subject", if has("subject_fast") { STRING | FAST } else { STRING });
    let entry = b.add_bytes_field("entry", STORED);
    let path_opts = match (has("path_term"), has("path_fast")) {
        (true, true) => STRING | FAST,
        (true, false) => STRING,
        (false, _) => TextOptions::default() | FAST,
    };
    let path = b.add_text_field("path", path_opts);
    let name = b.add_text_field("name", STRING);
    let name_reversed = b.add_text_field("name_reversed", STRING);
    let extension = b.add_text_field("extension", STRING);
    let parent = b.add_text_field("parent", STRING);
    let visible = b.add_text_field("visible_to", STRING);
    let kind = b.add_text_field("kind", STRING | FAST);
    let record = b.add_text_field("record", STRING);
    let owner_opts: NumericOptions = if has("owner_terms") { (INDEXED | FAST).into() } else { FAST.into() };
    let nums: Vec<_> = ["uid", "gid", "size", "files", "atime", "ctime", "mtime", "mode"]
        .iter()
        .enumerate()
        .map(|(i, n)| b.add_u64_field(n, if i < 2 { owner_opts.clone() } else { NumericOptions::from(FAST) }))
        .collect();
    let words = b.add_text_field(
        "words",
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default().set_tokenizer("default").set_index_option(IndexRecordOption::Basic),
        ),
    );
    let schema = b.build();
    let exts = ["py", "c", "h", "txt", "dat", "out", "log", "json", "nc", "h5"];
    let mut rng = icicle_core::rng::Rng::from_state(1);
    let mut docs: Vec<(String, Vec<u8>, [u64; 8])> = Vec::with_capacity(n);
    let mut i = 0u64;
    while docs.len() < n {
        let depth = 3 + rng.below(5);
        let mut p = format!("/fs/home/user{}", 1000 + rng.below(800));
        for d in 0..depth {
            p.push_str(&format!("/d{d}_{}", rng.below(6)));
        }
        for _ in 0..(1 + rng.below(40)) {
            i += 1;
            let f = format!("{p}/file_{i}.{}", exts[rng.below(10) as usize]);
            let nums = [
                1000 + rng.below(800),
                100 + rng.below(50),
                rng.below(1 << 30),
                1,
                1.7e9 as u64 - rng.below(1 << 27),
                1.7e9 as u64,
                1.7e9 as u64 - rng.below(1 << 26),
                0o100644,
            ];
            let e = format!(
                r#"{{"subject":"{f}","visible_to":["urn:site:u{}","urn:site:g{}"],"content":{{"name":"x","path":"{f}","type":"file","size":{},"uid":{},"gid":{},"mode":"-rw-r--r--","atime":"2024-03-16T02:00:01+00:00","ctime":"2024-03-16T02:00:01+00:00","mtime":"2024-03-16T02:00:01+00:00","version":"v1","raw":{{"mode":100644,"atime":{},"ctime":{},"mtime":{}}}}}}}"#,
                nums[0], nums[1], nums[2], nums[0], nums[1], nums[4], nums[5], nums[6]
            );
            docs.push((f, e.into_bytes(), nums));
        }
    }
    docs.truncate(n);
    let dir = tempfile_dir();
    let index = Index::create_in_dir(&dir, schema)?;
    let mut writer: IndexWriter<TantivyDocument> = index.writer_with_num_threads(threads, 256 << 20)?;
    let (t, cpu0) = (Instant::now(), cpu_seconds());
    for (f, e, v) in &docs {
        let mut doc = TantivyDocument::default();
        if has("subject") {
            doc.add_text(subject, f);
        }
        if has("store") {
            doc.add_bytes(entry, e);
        }
        if has("path_term") || has("path_fast") {
            doc.add_text(path, f);
        }
        let leaf = f.rsplit('/').next().unwrap_or(f);
        if has("name") {
            doc.add_text(name, leaf);
        }
        if has("name_reversed") {
            doc.add_text(name_reversed, leaf.chars().rev().collect::<String>());
        }
        if has("extension") {
            doc.add_text(extension, leaf.rsplit('.').next().unwrap_or(""));
        }
        if has("parent") {
            doc.add_text(parent, &f[..f.rfind('/').unwrap_or(0)]);
        }
        if has("visible") {
            doc.add_text(visible, format!("urn:site:u{}", v[0]));
            doc.add_text(visible, format!("urn:site:g{}", v[1]));
        }
        if has("kind") {
            doc.add_text(kind, "file");
            doc.add_text(record, "file");
        }
        if has("numbers") {
            for (field, v) in nums.iter().zip(v) {
                doc.add_u64(*field, *v);
            }
        }
        if has("words") {
            doc.add_text(words, f);
            doc.add_text(words, "file");
        }
        writer.add_document(doc)?;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    let (secs, cpu) = (t.elapsed().as_secs_f64(), cpu_seconds() - cpu0);
    let bytes: u64 = std::fs::read_dir(&dir)?.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
    println!(
        "{:<60} {n} docs: {secs:.2} s, {cpu:.2} CPU-s, {:.2} µs CPU each, {:.0} B each",
        args[2],
        cpu * 1e6 / n as f64,
        bytes as f64 / n as f64
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("schema-cost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).ok();
    d
}
