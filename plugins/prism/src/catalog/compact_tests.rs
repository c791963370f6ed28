//! The compact form and the loader: round trips over random catalogs (many seeds), corrupt
//! and truncated files (errors, never panics), exact counts of a synthetic catalog.
//!
//! Seeds are random per run and printed on failure; `ICICLE_PROPERTY_SEED=N` replays one,
//! `ICICLE_PROPERTY_CASES` sets how many run.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use icicle_core::rng::Rng;
use icicle_core::traits::LayoutComponent;

use super::compact::{encode, write_compact, CompactCatalog};
use super::synth::{write_synthetic, SynthSpec};
use super::*;

/// The seeds of one run: one given, or `cases` from a random start.
fn seeds(salt: u64, default_cases: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("ICICLE_PROPERTY_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let cases: u64 = std::env::var("ICICLE_PROPERTY_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default_cases);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    let first = (nanos ^ salt) % 1_000_000_000;
    (first..first + cases).collect()
}

/// Run `case` for every seed; a failure (or panic) names the seed to replay.
fn for_seeds(salt: u64, cases: u64, case: fn(u64) -> Result<(), String>) {
    let mut failures = Vec::new();
    let all = seeds(salt, cases);
    for &seed in &all {
        match std::panic::catch_unwind(|| case(seed)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("seed {seed}: {e}")),
            Err(p) => failures.push(format!(
                "seed {seed}: panicked: {:?}",
                p.downcast_ref::<String>().map(String::as_str).or(p.downcast_ref::<&str>().copied())
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed (replay one with ICICLE_PROPERTY_SEED=N):\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn random_stat(rng: &mut Rng) -> StatFields {
    let modes = [0o100644, 0o100600, 0o040755, 0o120777, 0o060660];
    let big = |rng: &mut Rng| if rng.below(4) == 0 { rng.next_u64() } else { rng.below(1 << 20) };
    StatFields {
        dev: 1 + rng.below(2),
        ino: 1 + rng.below(6),
        mode: modes[rng.below(modes.len() as u64) as usize],
        nlink: big(rng),
        uid: rng.next_u64() as u32,
        gid: rng.below(1000) as u32,
        rdev: big(rng),
        size: big(rng),
        blksize: 4096,
        blocks: big(rng),
        atime: rng.next_u64() as i64,
        mtime: rng.below(4) as i64 - 1,
        ctime: rng.below(4) as i64 - 1,
    }
}

/// Valid layout lines: a real layout's (runs) or loose lines the text format accepts.
fn random_lines(rng: &mut Rng, size: u64) -> Vec<LayoutLine> {
    if rng.below(2) == 0 {
        let ss = 1 + rng.below(3) * 1024;
        let comps = vec![
            LayoutComponent {
                start: 0,
                end: 4 * ss,
                stripe_size: ss,
                osts: (0..1 + rng.below(3)).map(|_| rng.below(5000) as u32).collect(),
            },
            LayoutComponent {
                start: 4 * ss,
                end: u64::MAX,
                stripe_size: ss,
                osts: (0..1 + rng.below(4)).map(|_| rng.below(5000) as u32).collect(),
            },
        ];
        let st = StatFields { size, ..StatFields::default() };
        return CatalogEntry::new("/x", st, None, Some(&comps)).layout.unwrap_or_default();
    }
    (0..rng.below(6))
        .map(|_| {
            let stripe_size = 1 + rng.below(1 << 20);
            let interval = stripe_size * (1 + rng.below(8));
            let file_size = rng.below(1 << 30);
            let end = if rng.below(2) == 0 { file_size } else { rng.below(file_size + 1) };
            let start = if end == file_size { rng.below(file_size + 2) } else { rng.below(end + 1) };
            LayoutLine { ost: rng.next_u64() as u32, start, end, interval, stripe_size, file_size }
        })
        .collect()
}

const NAMES: [&str; 6] = ["/d/a", "/d/b c", "/d/é 日本", "/scratch/run/out.0", "/x y/z", "/d/a.tmp"];

fn random_entry(rng: &mut Rng) -> CatalogEntry {
    let path = NAMES[rng.below(NAMES.len() as u64) as usize].to_string();
    let lstat = random_stat(rng);
    let stat = match rng.below(3) {
        0 => None,
        1 => Some(lstat),
        _ => Some(StatFields { size: rng.below(1 << 30), ..random_stat(rng) }),
    };
    let layout = (rng.below(4) != 0).then(|| random_lines(rng, stat.unwrap_or(lstat).size));
    CatalogEntry { path, lstat, stat, layout }
}

/// A random catalog directory of 1-3 text files with entries and `gone` records.
fn random_dir(rng: &mut Rng, dir: &Path) -> Result<(), String> {
    for f in 0..1 + rng.below(3) {
        let mut text = String::new();
        let mut written: Vec<CatalogEntry> = Vec::new();
        for _ in 0..rng.below(40) {
            if rng.below(5) == 0 {
                let mut stat = written.last().map_or_else(|| random_stat(rng), |e| e.lstat);
                stat.ctime += rng.below(3) as i64 - 1;
                let path = written.last().map_or("/d/a".to_string(), |e| e.path.clone());
                CatalogGone { path, stat }.write_to(&mut text).map_err(|e| e.to_string())?;
            } else {
                let e = random_entry(rng);
                e.write_to(&mut text).map_err(|e| e.to_string())?;
                written.push(e);
            }
        }
        std::fs::write(dir.join(format!("catalog.h.{f}.txt")), text).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn compact_bytes(entries: &[&CatalogEntry], gone: &[CatalogGone]) -> Result<Vec<u8>, String> {
    let mut c = Cursor::new(Vec::new());
    encode(&mut c, Path::new("mem"), entries, gone, 0).map_err(|e| e.to_string())?;
    Ok(c.into_inner())
}

fn round_trip(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let text_dir = tmp.path().join("text");
    std::fs::create_dir_all(&text_dir).map_err(|e| e.to_string())?;
    random_dir(&mut rng, &text_dir)?;
    let orig = Catalog::read_dir(&text_dir).map_err(|e| e.to_string())?;
    check(orig.rejects.is_empty(), || format!("rejects in generated text: {:?}", orig.rejects))?;
    let latest: Vec<CatalogEntry> = orig.latest().into_iter().cloned().collect();

    // text -> compact (a file, mapped) -> entries, layouts, and back to text.
    let icat = tmp.path().join("compact").join("catalog.all.icat");
    std::fs::create_dir_all(icat.parent().unwrap_or(tmp.path())).map_err(|e| e.to_string())?;
    write_compact(&orig, &icat).map_err(|e| e.to_string())?;
    let c = CompactCatalog::open(&icat).map_err(|e| e.to_string())?;
    check(c.is_latest(), || "not flagged latest".into())?;
    let back: Vec<CatalogEntry> = c.entries().map(|e| e.to_entry()).collect();
    check(back == latest, || format!("compact entries differ:\n{back:?}\n{latest:?}"))?;
    for (e, l) in c.entries().zip(&latest) {
        check(e.object_layout() == l.object_layout() && e.size() == l.size(), || {
            format!("layout of {} differs", l.path)
        })?;
    }
    check(c.to_catalog().gone == orig.gone, || "gone records differ".into())?;
    let mut text = Vec::new();
    c.write_text(&mut text).map_err(|e| e.to_string())?;
    let again = Catalog::parse(Path::new("again"), &text);
    check(again.rejects.is_empty() && again.entries == latest && again.gone == orig.gone, || {
        format!("compact -> text differs: {:?}", again.rejects)
    })?;
    let again_latest: Vec<CatalogEntry> = again.latest().into_iter().cloned().collect();
    check(again_latest == latest, || "latest of compact -> text differs".into())?;

    // The loader on text, on the compact file, and on a mix of text and compact files
    // (per-file conversions) gives what read_dir + latest gives.
    for dir in [&text_dir, &tmp.path().join("compact")] {
        let l = load_dir(dir).map_err(|e| e.to_string())?;
        check(l.to_entries() == latest, || format!("load_dir({}) differs", dir.display()))?;
    }
    let mixed = tmp.path().join("mixed");
    std::fs::create_dir_all(&mixed).map_err(|e| e.to_string())?;
    for (k, p) in catalog_files(&text_dir).map_err(|e| e.to_string())?.iter().enumerate() {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if k % 2 == 0 {
            write_compact(&Catalog::read_file(p).map_err(|e| e.to_string())?, &mixed.join(format!("{name}.icat")))
                .map_err(|e| e.to_string())?;
        } else {
            std::fs::copy(p, mixed.join(name)).map_err(|e| e.to_string())?;
        }
    }
    let want = Catalog::read_dir(&mixed).map_err(|e| e.to_string())?;
    let want_latest: Vec<CatalogEntry> = want.latest().into_iter().cloned().collect();
    let l = load_dir(&mixed).map_err(|e| e.to_string())?;
    check(l.to_entries() == want_latest, || "load_dir(mixed) differs from read_dir(mixed).latest()".into())?;
    check((l.superseded, l.gone, l.files) == (want.superseded, want.gone.len(), want.files), || {
        "mixed counts differ".into()
    })?;
    Ok(())
}

#[test]
fn text_compact_text_round_trips_over_random_catalogs() {
    for_seeds(0xC0DE, 64, round_trip);
}

/// A compact file of a random catalog, for the corruption tests.
fn sample_compact(rng: &mut Rng) -> Result<Vec<u8>, String> {
    let mut cat = Catalog::default();
    for _ in 0..1 + rng.below(30) {
        cat.entries.push(random_entry(rng));
    }
    cat.gone.push(CatalogGone { path: "/d/gone".into(), stat: random_stat(rng) });
    compact_bytes(&cat.latest(), &cat.gone)
}

/// Every accessor on every entry (what a reader would touch): must not panic.
fn touch_everything(c: &CompactCatalog) -> usize {
    let mut n = 0;
    for e in c.entries() {
        n += e.path().len() + e.lines().count() + e.object_layout().map_or(0, |l| l.components.len());
        let _ = (e.to_entry(), e.size(), e.stat());
    }
    let _ = c.to_catalog();
    let _ = c.write_text(&mut Vec::new());
    n
}

fn corruption(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let good = sample_compact(&mut rng)?;
    let name = Path::new("/cat/catalog.h.icat");
    let c = CompactCatalog::from_bytes(name, good.clone()).map_err(|e| e.to_string())?;
    touch_everything(&c);
    // Truncated anywhere: an error naming the file.
    for _ in 0..20 {
        let cut = rng.below(good.len() as u64) as usize;
        match CompactCatalog::from_bytes(name, good[..cut].to_vec()) {
            Ok(_) => return Err(format!("truncated to {cut} of {} bytes: accepted", good.len())),
            Err(e) => check(e.to_string().starts_with("/cat/catalog.h.icat: "), || {
                format!("error does not name the file: {e}")
            })?,
        }
    }
    // One byte changed: the checksum (or the header check) catches it.
    for _ in 0..40 {
        let mut b = good.clone();
        let at = rng.below(b.len() as u64) as usize;
        b[at] ^= 1 + rng.below(255) as u8;
        check(CompactCatalog::from_bytes(name, b).is_err(), || format!("byte {at} changed: accepted"))?;
    }
    // Changed bytes with the checksum recomputed (a writer's bug, not a disk's): an error or
    // a catalog whose every accessor still works, never a panic or an out-of-bounds read.
    for _ in 0..60 {
        let mut b = good.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(b.len() as u64) as usize;
            b[at] = rng.next_u64() as u8;
        }
        if rng.below(4) == 0 {
            b.truncate(rng.below(b.len() as u64 + 1) as usize);
        }
        let crc = super::compact_check::checksum(&b);
        if let Some(slot) = b.get_mut(80..84) {
            slot.copy_from_slice(&crc.to_le_bytes());
        }
        if let Ok(c) = CompactCatalog::from_bytes(name, b) {
            touch_everything(&c);
        }
    }
    Ok(())
}

#[test]
fn corrupt_or_truncated_compact_files_are_errors_never_panics() {
    for_seeds(0xBAD, 200, corruption);
}

#[test]
fn corrupt_compact_files_on_disk_name_the_file_and_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cat = Catalog::default();
    cat.entries.push(CatalogEntry::new(
        "/d/f",
        StatFields { mode: 0o100644, size: 10, ..StatFields::default() },
        None,
        Some(&[]),
    ));
    let p = tmp.path().join("catalog.x.icat");
    write_compact(&cat, &p).unwrap();
    assert_eq!(load_dir(tmp.path()).unwrap().len(), 1);
    assert_eq!(Catalog::read_dir(tmp.path()).unwrap().entries.len(), 1);
    let len = std::fs::metadata(&p).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(len - 3).unwrap();
    drop(f);
    for err in [
        load_dir(tmp.path()).unwrap_err(),
        Catalog::read_dir(tmp.path()).unwrap_err(),
        CompactCatalog::open(&p).unwrap_err(),
    ] {
        let msg = err.to_string();
        assert!(msg.contains("catalog.x.icat") && msg.contains("truncated"), "{msg}");
    }
    std::fs::write(&p, b"ICICLCAT").unwrap();
    let msg = CompactCatalog::open(&p).unwrap_err().to_string();
    assert!(msg.contains("catalog.x.icat: truncated: 8 bytes"), "{msg}");
    // A compact file cannot hold what its reader would reject.
    let bad = CatalogEntry {
        layout: Some(vec![LayoutLine { ost: 1, start: 0, end: 5, interval: 3, stripe_size: 2, file_size: 10 }]),
        ..cat.entries[0].clone()
    };
    let err = compact_bytes(&[&bad], &[]).unwrap_err();
    assert!(err.contains("/d/f") && err.contains("interval 3"), "{err}");
}

fn synthetic_counts(files: usize, n: usize, seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("text");
    let s = write_synthetic(&text, &SynthSpec::new(n, files, seed)).unwrap();
    assert_eq!(s.entries, n);
    assert!(s.gone > 0 && s.records > n, "{s:?}");
    let cat = Catalog::read_dir(&text).unwrap();
    assert!(cat.rejects.is_empty(), "{:?}", cat.rejects);
    assert_eq!(
        (cat.entries.len(), cat.gone.len(), cat.superseded, cat.files),
        (s.records - s.superseded, s.gone, s.superseded, files)
    );
    assert_eq!(cat.latest().len(), n);
    let loaded = load_dir(&text).unwrap();
    assert_eq!((loaded.len(), loaded.gone, loaded.superseded, loaded.files), (n, s.gone, s.superseded, files));
    let one = tmp.path().join("one");
    std::fs::create_dir_all(&one).unwrap();
    let counts = write_compact(&cat, &one.join("catalog.all.icat")).unwrap();
    assert_eq!((counts.entries, counts.gone, counts.superseded), (n as u64, s.gone as u64, s.superseded as u64));
    let loaded = load_dir(&one).unwrap();
    assert_eq!((loaded.len(), loaded.files, loaded.iter().count()), (n, 1, n));
    let total: u64 = loaded.iter().map(|e| e.size()).sum();
    assert_eq!(total, cat.latest().iter().map(|e| e.size()).sum::<u64>());
    // Per-file conversions: merged by the loader to the same entries.
    let per: PathBuf = tmp.path().join("per");
    std::fs::create_dir_all(&per).unwrap();
    for p in catalog_files(&text).unwrap() {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        write_compact(&Catalog::read_file(&p).unwrap(), &per.join(format!("{name}.icat"))).unwrap();
    }
    let merged = load_dir(&per).unwrap();
    assert_eq!((merged.len(), merged.superseded), (n, s.superseded));
    let paths: Vec<&str> = merged.iter().map(|e| e.path()).collect();
    assert!(paths.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(paths, loaded.iter().map(|e| e.path()).collect::<Vec<_>>());
}

#[test]
fn a_synthetic_catalog_loads_exactly_its_entries_in_every_form() {
    synthetic_counts(4, 5_000, 11);
    synthetic_counts(1, 1_200, 12);
}

fn stat_lines(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    for _ in 0..200 {
        let mut st = random_stat(&mut rng);
        st.atime = rng.next_u64() as i64;
        st.mtime = if rng.below(8) == 0 { i64::MIN } else { -(rng.below(1000) as i64) };
        let mut line = String::new();
        st.write(&mut line);
        let line = line.trim_end().to_string();
        check(parse::parse_stat_canonical(&line) == Some(st), || format!("canonical `{line}` not read back"))?;
        // Variants the writer never makes: the fast path must give what the general one gives.
        let mut b = line.clone().into_bytes();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(b.len() as u64) as usize;
            b[at] = b"0123456789;: +-x"[rng.below(16) as usize];
        }
        let variant = String::from_utf8_lossy(&b).into_owned();
        for l in [
            variant,
            line.replace("; ", ";"),
            format!("{line};"),
            line.replace("st_ino", "st_inode"),
            format!(" {line}"),
        ] {
            check(StatFields::parse(&l) == StatFields::parse_general(&l), || {
                format!("`{l}`: fast and general parsers differ")
            })?;
        }
    }
    Ok(())
}

#[test]
fn the_fast_stat_parser_agrees_with_the_general_one() {
    for_seeds(0x57A7, 32, stat_lines);
}
