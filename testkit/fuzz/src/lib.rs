//! Fuzz harnesses: one function per parser, each taking arbitrary bytes and panicking only
//! when an invariant breaks. `fuzz/` runs them under libFuzzer (`cargo fuzz`); the test suite
//! runs them as bounded properties. Invariants: no panic on any input, and for the snapshot
//! sources every non-empty input line is exactly one of record, directory, reject or skipped
//! (a header or comment), whether the input is read whole or in two byte ranges.

use std::cell::RefCell;
use std::path::PathBuf;

use icicle_core::record::{check_path, FileRecord, Reject};
use icicle_core::scope::Scope;
use icicle_core::text::for_each_line;
use icicle_core::traits::{RowSink, Split};
use icicle_core::Attrs;
use icicle_core::Source;
use icicle_plugins_snapshot::mmapplypolicy::MmapplypolicySource;
use icicle_plugins_snapshot::tsv::{Columns, Ending, Layout, ModeFormat, Preset, TsvSource};

/// What a source handed over while reading.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Primary records.
    pub records: u64,
    /// Directory rows.
    pub directories: u64,
    /// Rejects, other than the not-whole reports.
    pub rejects: u64,
    /// Inputs reported as not whole (empty, or a last line without its newline, not read).
    pub not_whole: u64,
}

impl RowSink for Counts {
    fn record(&mut self, rec: &FileRecord<'_>) {
        // What the runtime does next must not panic either.
        let _ = rec.check();
        let _ = rec.name();
        self.records += 1;
    }
    fn directory(&mut self, rec: &FileRecord<'_>) {
        let _ = rec.check();
        self.directories += 1;
    }
    fn reject(&mut self, r: Reject) {
        if let Some(Scope::Exact(p)) = &r.scope {
            assert!(check_path(p).is_ok(), "an exact scope must be a valid path: {p:?}");
        }
        if let Some(p) = &r.placed {
            assert!(
                r.scope == Some(Scope::All) && icicle_core::scope::placeable(p),
                "a placed reject is one scoped to everything, by a well-formed directory: {p:?}"
            );
        }
        if r.incomplete {
            assert!(r.scope == Some(Scope::All), "an input not whole leaves everything unknown: {r:?}");
            self.not_whole += 1;
        } else {
            self.rejects += 1;
        }
    }
    fn progress(&mut self, _: u64) {}
    fn spawn(&mut self, _: Split) {}
}

impl Counts {
    fn rows(&self) -> u64 {
        self.records + self.directories + self.rejects
    }
}

thread_local! {
    static INPUT: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// Write `data` to this thread's scratch input file (sources read files) and return it.
fn scratch_file(data: &[u8]) -> PathBuf {
    INPUT.with(|p| {
        let mut p = p.borrow_mut();
        let path = p.get_or_insert_with(|| {
            let tid =
                format!("{:?}", std::thread::current().id()).chars().filter(char::is_ascii_digit).collect::<String>();
            std::env::temp_dir().join(format!("icicle-fuzz-{}-{tid}.txt", std::process::id()))
        });
        // A failed write is the machine's problem, not an input's: the harness stops.
        std::fs::write(&*path, data).expect("writing the fuzz input");
        path.clone()
    })
}

/// Read `data` with `source` whole, then as two byte ranges split at `cut`, and check the
/// line accounting against `skips`.
fn check_source(source: &dyn Source, data: &[u8], cut: usize, skips: impl Fn(&[u8], u64) -> bool, ending: Ending<'_>) {
    let path = scratch_file(data);
    let len = data.len() as u64;
    let mut whole = Counts::default();
    let split = Split::whole(path.clone(), len);
    if source.read(&split, &mut whole).is_err() {
        // A read error is one reject for the runtime; nothing to count.
        return;
    }
    // A last line without its newline is not read: the input is reported as not whole
    // instead (so is an empty one).
    let cut_short = data.last().is_some_and(|&b| b != b'\n');
    let read = if cut_short { &data[..data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)] } else { data };
    let mut last = Vec::new();
    for_each_line(read, None, |line, _| {
        if !line.is_empty() {
            last = line.to_vec();
        }
    });
    let no_trailer =
        matches!(ending, Ending::Trailer { header, trailer } if data.starts_with(header) && !last.starts_with(trailer));
    let not_whole = cut_short || data.is_empty() || no_trailer;
    assert_eq!(
        whole.not_whole,
        u64::from(not_whole),
        "an input is not whole when empty, cut short or without its trailer: {whole:?}"
    );
    let mut lines = 0u64;
    let mut skipped = 0u64;
    for_each_line(read, None, |line, off| {
        if !line.is_empty() {
            lines += 1;
            if skips(line, off) {
                skipped += 1;
            }
        }
    });
    assert_eq!(
        whole.rows() + skipped,
        lines,
        "every line is a record, a directory, a reject or skipped: {whole:?}, {skipped} skipped"
    );
    if data.is_empty() {
        return;
    }
    let cut = (cut as u64).min(len);
    let mut halves = Counts::default();
    for range in [(0, cut), (cut, len)] {
        let split = Split { range: Some(range), ..Split::whole(path.clone(), range.1 - range.0) };
        source.read(&split, &mut halves).expect("a range of a readable file reads");
    }
    assert_eq!(halves, whole, "two ranges cut at byte {cut} read the same rows as the whole file");
}

/// The tsv source: the first byte picks a preset or a column map, the second where to cut.
pub fn tsv(data: &[u8]) {
    let [pick, cut, rest @ ..] = data else { return };
    let layout = match pick % 6 {
        0 => Layout::preset(Preset::Icicle9),
        1 => Layout::preset(Preset::Pwalk),
        2 => Layout::preset(Preset::Ne2scan),
        k => {
            let cols = Columns {
                kind: None,
                mode: 0,
                uid: 1,
                gid: 2,
                size: 3,
                atime: 4,
                ctime: 5,
                mtime: 6,
                path: 7,
                inode: (k == 4).then_some(8).filter(|_| pick & 0x80 == 0),
            };
            let path_last = cols.inode.is_none() && pick & 0x40 != 0;
            let mode = [ModeFormat::Decimal, ModeFormat::Octal, ModeFormat::Symbolic][(*pick as usize >> 3) % 3];
            Layout::custom(if k == 5 { b'\t' } else { b'|' }, cols, mode, path_last, pick & 0x20 != 0, pick & 0x10 != 0)
        }
    };
    let skips = {
        let l = layout.clone();
        move |line: &[u8], off: u64| l.skips(line, off)
    };
    let ending = layout.ending();
    let source = TsvSource::new(vec![], layout, 1 << 20);
    check_source(&source, rest, *cut as usize * rest.len() / 256, skips, ending);
}

/// The mmapplypolicy source (nersc18 layout, escaped or not).
pub fn mmapplypolicy(data: &[u8]) {
    let [pick, cut, rest @ ..] = data else { return };
    let source = MmapplypolicySource::nersc18(vec![], pick & 1 == 0);
    check_source(
        &source,
        rest,
        *cut as usize * rest.len() / 256,
        icicle_plugins_snapshot::mmapplypolicy::is_message,
        Ending::Newline,
    );
}

/// The first eight bytes of `b`, zero-padded.
fn word(b: &[u8]) -> [u8; 8] {
    let mut w = [0u8; 8];
    let n = b.len().min(8);
    w[..n].copy_from_slice(&b[..n]);
    w
}

/// GUFI row decoding: a row of ten values whose types and contents come from `data`.
pub fn gufi_row(data: &[u8]) {
    use rusqlite::types::Value;
    let mut values: Vec<Value> = Vec::with_capacity(10);
    let mut rest = data;
    for _ in 0..10 {
        let [tag, len, tail @ ..] = rest else { break };
        let n = (*len as usize).min(tail.len());
        let (bytes, after) = tail.split_at(n);
        rest = after;
        values.push(match tag % 5 {
            0 => Value::Null,
            1 => Value::Integer(i64::from_le_bytes(word(bytes))),
            2 => Value::Real(f64::from_le_bytes(word(bytes))),
            3 => Value::Text(String::from_utf8_lossy(bytes).into_owned()),
            _ => Value::Blob(bytes.to_vec()),
        });
    }
    values.resize(10, Value::Null);
    let Ok(conn) = rusqlite::Connection::open_in_memory() else {
        return;
    };
    let cols = icicle_plugins_snapshot::gufi::COLUMNS;
    if conn.execute_batch(&format!("CREATE TABLE entries({cols})")).is_err() {
        return;
    }
    let ok = conn.execute(
        "INSERT INTO entries VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        rusqlite::params_from_iter(values.iter()),
    );
    if ok.is_err() {
        return;
    }
    let Ok(mut st) = conn.prepare(&format!("SELECT {cols} FROM entries")) else {
        return;
    };
    let Ok(mut rows) = st.query([]) else { return };
    while let Ok(Some(row)) = rows.next() {
        let mut path = String::new();
        if let Ok(rec) = icicle_plugins_snapshot::gufi::parse_row(row, "/d", &mut path) {
            let name = rec.path.strip_prefix("/d/").expect("entries are named inside their directory");
            assert!(!name.is_empty() && !name.contains('/'), "{:?}", rec.path);
            let _ = rec.check();
        }
    }
}

/// A GUFI `db.db` as bytes, read from its pages as the `gufi` source reads it: no input
/// panics or loops, and every row it accepts is a name inside its directory.
pub fn gufi_db(data: &[u8]) {
    if let Ok(rows) = icicle_plugins_snapshot::gufi::read_pages(data.to_vec()) {
        for path in rows.into_iter().flatten() {
            let name = path.strip_prefix("/d").expect("rows are inside their directory");
            assert!(name.is_empty() || (name.starts_with('/') && !name[1..].contains('/')), "{path:?}");
        }
    }
}

/// A small GUFI-shaped database (512-byte pages, so a few pages, one value on overflow pages),
/// as bytes: the `gufi_db` seed.
fn gufi_db_seed() -> Vec<u8> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("icicle-fuzz-seed-{}-{n}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let made = rusqlite::Connection::open(&path).and_then(|c| {
        c.execute_batch(
            "PRAGMA page_size = 512; PRAGMA journal_mode = OFF;
             CREATE TABLE entries(name TEXT, type TEXT, inode TEXT, mode INT64, uid INT64, gid INT64, size INT64, atime INT64, mtime INT64, ctime INT64, linkname TEXT);
             CREATE TABLE summary(name TEXT, type TEXT, inode TEXT, mode INT64, uid INT64, gid INT64, size INT64, atime INT64, mtime INT64, ctime INT64, isroot INT64);
             INSERT INTO entries VALUES ('a.txt', 'f', '12', 33188, 1000, 100, 42, 1, 2, 3, ''), ('it''''s', 'f', '13', 33188, 1000, 100, 7, 1, 2, 3, ''),
               ('ln', 'l', '14', 41471, 1000, 100, 5, 1, 2, 3, printf('%.900c', 'x')), ('neg', 'f', '15', 33188, -1, 100, 1, 1, 2, 3, '');
             INSERT INTO summary VALUES ('d', 'd', '11', 16877, 1000, 100, 4096, 1, 2, 3, 1);",
        )
    });
    let bytes = made.ok().and_then(|_| std::fs::read(&path).ok()).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    bytes
}

/// Lustre changelog lines (`lfs changelog` output): parse, and a parsed record prints a line
/// that parses to the same record.
pub fn lustre_changelog(data: &[u8]) {
    use icicle_plugins_lustre::changelog::{line_type_bit, lines, ChangelogRecord};
    // As the stream reads lfs's output: each line's bytes escaped (names may not be UTF-8).
    let mut text = String::new();
    for line in data.split(|&b| b == b'\n') {
        icicle_core::name::escape_into(line, &mut text);
        text.push('\n');
    }
    for line in lines(&text) {
        if let Some(rec) = ChangelogRecord::parse(line).ok().filter(|r| r.parent.is_some()) {
            // A name after `p=` never holds `/` once read (FSx's paths are cut to their last
            // name).
            for n in [&rec.name, &rec.source_name].into_iter().flatten() {
                assert!(!n.contains('/'), "{line:?}: name {n:?}");
            }
        }
    }
    let text = String::from_utf8_lossy(data);
    for line in lines(&text) {
        let _ = line_type_bit(line.as_bytes());
        if let Ok(rec) = ChangelogRecord::parse(line) {
            let printed = rec.to_line();
            let again = ChangelogRecord::parse(&printed)
                .unwrap_or_else(|e| panic!("a printed record parses: {e}: {line:?} printed {printed:?}"));
            // A `\r` ending the printed text is a line ending to the parser (found by
            // fuzzing: a name ending in `\r` does not survive printing).
            if !printed.ends_with('\r') {
                assert_eq!(again.to_line(), printed);
            }
        }
    }
    let _ = icicle_plugins_lustre::changelog::rename_lines(&text).count();
    lfs_output(data);
}

/// `data` as `lfs changelog` output (names may hold newlines): records come out with strictly
/// increasing indexes, and the lines before them and the records, unescaped, are exactly a
/// prefix of the output's lines.
fn lfs_output(data: &[u8]) {
    let max = 1 + u64::from(data.first().copied().unwrap_or(0) % 16);
    let (records, loose, _) =
        icicle_plugins_lustre::lfs_records::split_output(data, None, max).unwrap_or_else(|e| panic!("{e}"));
    let indexes: Vec<u64> = records.iter().filter_map(|r| r.split(' ').next()?.parse().ok()).collect();
    assert_eq!(indexes.len(), records.len(), "every record starts with an index: {records:?}");
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "indexes increase: {indexes:?}");
    let mut taken = Vec::new();
    for r in loose.iter().chain(&records) {
        taken.extend_from_slice(&icicle_core::name::unescape(r));
        taken.push(b'\n');
    }
    let mut whole = data.to_vec();
    if !whole.is_empty() && !whole.ends_with(b"\n") {
        whole.push(b'\n');
    }
    assert!(whole.starts_with(&taken), "what was read is the output's start");
}

/// GPFS watch-folder JSON events: where both the structural parser and the slow (serde_json)
/// path accept a message, with and without an ingestion filter, they read the same event.
/// (The structural parser is lenient about members it does not read: fuzzing found it
/// accepts a message whose last, unknown member is not valid JSON; and a duplicated key is
/// read first-wins by one parser and last-wins by the other.)
pub fn gpfs_event(data: &[u8]) {
    use icicle_plugins_gpfs::event::{filter_mask, GpfsEvent};
    let _ = GpfsEvent::parse(data);
    let mask = filter_mask(&["IN_ACCESS".to_string(), "IN_OPEN".to_string()]).unwrap_or(0);
    // A key given twice means what each parser makes of it (the structural one stops at the
    // first `event`, serde_json keeps the last): no agreement to check (found by fuzzing).
    let text = String::from_utf8_lossy(data);
    let keys = [
        "inode",
        "path",
        "event",
        "cookie",
        "fileSize",
        "ownerUserId",
        "ownerGroupId",
        "permissions",
        "atime",
        "ctime",
        "mtime",
    ];
    if keys.iter().any(|k| text.matches(&format!("\"{k}\"")).count() > 1) {
        return;
    }
    for m in [0, mask] {
        if let (Some(Ok(fast)), Ok(slow)) = GpfsEvent::parse_both_ways(data, m) {
            assert_eq!(fast, slow, "the structural and the slow parser disagree (mask {m:#x}): {text:?}");
        }
    }
}

/// ISO 8601, Storage Scale (`2024-03-13_16:44:58.423+0800`), SQL (`2018-05-22 23:01:39.7`)
/// and epoch times: a parsed time prints as a time that parses to itself, in every shape the
/// producers write (a Storage Scale time with its node's offset is the same instant).
pub fn time(data: &[u8]) {
    use icicle_core::time::{iso8601, parse_iso8601};
    let text = String::from_utf8_lossy(data);
    if let Some(t) = parse_iso8601(&text) {
        if (-62_135_596_800..=253_402_300_799).contains(&t) {
            assert_eq!(parse_iso8601(&iso8601(t)), Some(t), "{text:?}");
            let off = (data.len() as i32 % 27 - 13) * 60 + data.first().map_or(0, |b| (*b % 4) as i32 * 15);
            let scale = scale_time(t, off);
            assert_eq!(parse_iso8601(&scale), Some(t), "{text:?} as {scale:?}");
        }
    }
    let _ = icicle_plugins_snapshot::show::parse_time(data, "t");
    let _ = icicle_plugins_snapshot::fields::parse_i64(data, "t");
    let _ = icicle_plugins_snapshot::fields::parse_inode(data, "t");
    let _ = icicle_plugins_snapshot::fields::parse_octal(data, "t");
    let _ = icicle_core::record::parse_mode_string(&text);
}

/// `secs` as Storage Scale writes event times: `YYYY-MM-DD_HH:MM:SS.mmm±HHMM` in the node's
/// offset (`offset_min` minutes east of UTC).
fn scale_time(secs: i64, offset_min: i32) -> String {
    let local = secs + offset_min as i64 * 60;
    let (y, m, d) = icicle_core::time::civil_from_days(local.div_euclid(86_400));
    let sod = local.rem_euclid(86_400);
    let (sign, off) = if offset_min < 0 { ('-', -offset_min) } else { ('+', offset_min) };
    format!(
        "{y:04}-{m:02}-{d:02}_{:02}:{:02}:{:02}.123{sign}{:02}{:02}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        off / 60,
        off % 60
    )
}

/// File names as bytes: the escape of `icicle_core::name` gives them back exactly, leaves
/// every plain name as it is, never writes a control character, commutes with joining by
/// `/`; normalising a path twice changes nothing more; no path check panics.
pub fn name(data: &[u8]) {
    use icicle_core::name::{byte_len, escape, is_plain, leaf, normalise, unescape};
    let text = escape(data);
    assert_eq!(unescape(&text), data, "{data:?} -> {text:?}");
    assert_eq!(is_plain(data), text.as_bytes() == data, "{data:?}");
    assert!(!text.chars().any(|c| c.is_control() && c != '\t'), "{text:?}");
    assert_eq!(byte_len(&text), data.len());
    let joined = [data, b"/", data].concat();
    assert_eq!(escape(&joined), format!("{text}/{text}"), "{data:?}");
    let path = format!("/{text}");
    let once = normalise(&path).into_owned();
    assert_eq!(normalise(&once), once.as_str());
    let _ = icicle_core::record::check_path(&once);
    let _ = leaf(&text);
    // Text that was never an escape's output still decodes to some bytes.
    let lossy = String::from_utf8_lossy(data);
    let _ = unescape(&lossy);
}

/// The PRISM catalog: parse; every good entry prints text that parses to one entry again.
pub fn prism_catalog(data: &[u8]) {
    use icicle_plugins_prism::Catalog;
    let cat = Catalog::parse(std::path::Path::new("fuzz.catalog"), data);
    let _ = cat.latest();
    for e in &cat.entries {
        if let Ok(text) = e.to_text() {
            let again = Catalog::parse(std::path::Path::new("again"), text.as_bytes());
            assert_eq!(again.entries.len(), 1, "{text:?}");
        }
    }
}

/// A harness: arbitrary bytes in, a panic only when an invariant breaks.
pub type Harness = fn(&[u8]);

/// Every harness by name (the fuzz targets and the properties use these names).
pub const TARGETS: [(&str, Harness); 9] = [
    ("tsv", tsv),
    ("mmapplypolicy", mmapplypolicy),
    ("gufi_row", gufi_row),
    ("gufi_db", gufi_db),
    ("lustre_changelog", lustre_changelog),
    ("gpfs_event", gpfs_event),
    ("time", time),
    ("name", name),
    ("prism_catalog", prism_catalog),
];

/// Valid inputs for each harness, the starting points of fuzzing and of the properties (the
/// committed `fuzz/seeds/<name>/` holds the same, written by the properties' test).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    let with = |head: &[u8], text: &str| [head, text.as_bytes()].concat();
    match name {
        "tsv" => vec![
            with(&[0, 128], "f,33188,1000,100,42,1,2,3,/a/b\nl,41471,0,0,7,1,2,3,\"/x/li,nk \"\"q\"\"\"\nd,16877,0,0,4096,1,2,3,/x\n"),
            with(&[1, 90], "inode,parent-inode,directory-depth,\"filename\",\"fileExtension\",UID,GID,st_size,st_dev,st_blocks,st_nlink,\"st_mode\",st_atime,st_mtime,st_ctime,pw_fcount,pw_dirsum\n12,11,1,\"/home/u/a,b.txt\",\"txt\",1000,100,42,2049,8,1,\"100644\",10,30,20,-1,-1\n11,2,0,\"/home/u\",\"\",1000,100,4096,2049,8,3,\"40755\",10,30,20,2,4096\n"),
            with(&[2, 40], "# fslist\n10|20|30|1000|100|100644|5|77|/p/a|b link\n10|20|30|1000|100|40755|4096|78|/p\n"),
            with(&[3, 60], "33188|1000|100|42|1|2|3|/c/d\n16877|0|0|4096|1|2|3|/c\n"),
            with(&[0x0c, 60], "100644|1000|100|42|1|2|3|/c/e\n"),
            with(&[0x54, 100], "-rw-r--r--|1000|100|42|1|2|3|/c/f|g\n"),
        ],
        "mmapplypolicy" => vec![with(
            &[0, 100],
            "37390 999490048 0 FAu 1234 proj 2 1 data 1000 100 -rw-r--r-- 10 20 0 30 -- %2Fprojectb%2Fa%20b%25.txt\n5 1 0 FAu 4096 proj 4 2 data 0 0 drwxr-sr-x 1 2 0 3 -- %2Fprojectb%2Fd\n",
        )],
        "gufi_row" => {
            let mut row = Vec::new();
            let int = |v: i64| [&[1u8, 8][..], &v.to_le_bytes()].concat();
            let txt = |s: &str| [&[3u8, s.len() as u8][..], s.as_bytes()].concat();
            for part in [txt("it''s.txt"), txt("f"), int(33188), int(1000), int(100), int(42), int(1), int(2), int(3), txt("18446744073709551615")] {
                row.extend(part);
            }
            vec![row]
        }
        "gufi_db" => vec![gufi_db_seed()],
        "lustre_changelog" => vec![concat!(
            "12 01CREAT 14:03:01.123456789 2024.03.16 0x0 t=[0x200000401:0x1:0x0] ef=0xf u=1000:1000 nid=192.168.1.1@tcp p=[0x200000007:0x1:0x0] file.txt\n",
            "13 08RENME 14:03:02.123456789 2024.03.16 0x1 t=[0:0x0:0x0] ef=0xf u=1000:1000 nid=0@lo p=[0x200000007:0x1:0x0] new.txt s=[0x200000401:0x1:0x0] sp=[0x200000007:0x1:0x0] file.txt\n",
            "14 06UNLNK 14:03:03.000000001 2024.03.16 0x1 t=[0x200000401:0x1:0x0] j=cp.1000 ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] new.txt\n",
            "15 02MKDIR 14:03:04.5 2024.03.16 0x0 t=[0x200000401:0x2:0x0] p=[0x200000007:0x1:0x0] dir\n",
            "16 11CLOSE 14:03:05.000000000 2024.03.16 0x42 t=[0x200000401:0x3:0x0] ef=0xf u=1:1 nid=0@lo m=w\n",
            "17 14SATTR 14:03:06.000000000 2024.03.16 0x14 t=[0x200000401:0x3:0x0] ef=0xf u=1:1 nid=0@lo\n",
        )
        .as_bytes()
        .to_vec(),
        // Real shapes (testkit/corpus/lustre): lfs 2.16's ef=0x13, the padded `10OPEN  `, a
        // pre-2.10 `%06d` fraction, FSx's full-path names, a name that is not UTF-8.
        [
            &b"7 10OPEN  12:50:50.996306004 2025.06.02 0x4a t=[0x200000bd1:0x5:0x0] ef=0x17 u=0:0 nid=172.31.38.176@tcp m=-w- p=[0x200000bd1:0x4:0x0]\n"[..],
            b"327303 19ATIME 12:49:23.43229006 2016.03.24 0x1 t=[0x200000402:0xd9fe:0x0] j=cat.0\n",
            b"12967 06UNLNK 05:55:21.970213014 2026.10.09 0x1 t=[0x200000403:0x1929:0x0] ef=0xf u=0:0 nid=172.31.39.207@tcp p=[0x200000403:0x1928:0x0] /cl8/b.txt\n",
            b"12964 08RENME 05:55:20.112233445 2026.10.09 0x0 t=[0:0x0:0x0] ef=0xf u=0:0 nid=172.31.39.207@tcp p=[0x200000403:0x1928:0x0] b.txt s=[0x200000403:0x1929:0x0] sp=[0x200000403:0x1928:0x0] /cl8/a.txt\n",
            b"80 01CREAT 09:00:00.000000001 2025.06.02 0x0 t=[0x200000bd1:0x70:0x0] j=VM Thread.1000 ef=0x13 u=0:0 nid=172.31.38.176@tcp p=[0x200000007:0x1:0x0] caf\xe9.txt\n",
        ]
        .concat()],
        "gpfs_event" => vec![
            br#"{"WF_JSON":"0.0.1","wd":1,"cookie":"0","mask":"0x100","event":"IN_CREATE","path":"/gpfs/fs1/file.txt","clusterName":"c","nodeName":"n","nfsClientIp":"","fsName":"fs1","inode":"12345","filesetID":"0","linkCount":"1","openFlags":"0","poolName":"system","fileSize":"1024","ownerUserId":"1000","ownerGroupId":"1000","atime":"2024-03-16T02:00:01+00:00","ctime":"2024-03-16T02:00:01+00:00","mtime":"2024-03-16T02:00:01+00:00","eventTime":"2024-03-16T02:00:01+00:00","clientUserId":"1000","clientGroupId":"1000","processId":"1","permissions":"0644","acls":null,"xattrs":null,"subEvent":"NONE"}"#.to_vec(),
            br#"{"inode": 12345, "path": "/gpfs/fs1/file.txt", "event": "IN_MODIFY", "fileSize": 1024, "atime": 1700000000, "ctime": 1700000001, "mtime": 1700000002, "ownerUserId": 1000, "ownerGroupId": 1000, "permissions": "0644"}"#.to_vec(),
            br#"{"event":"IN_MOVED_FROM IN_ISDIR","cookie":"77","path":"/gpfs/fs1/d","inode":"9","permissions":"0755","ownerUserId":"0","ownerGroupId":"0","fileSize":"4096","atime":"2024-03-16T02:00:01.5+01:00","ctime":"2024-03-16T02:00:01Z","mtime":"2024-03-16T02:00:01-02:30"}"#.to_vec(),
            // Real producers' shapes (testkit/corpus/gpfs): IBM's WF_JSON 0.0.1 and CPFS's TE_JSON.
            br#"{"WF_JSON": "0.0.1", "wd":"1","cookie":"0","event": "IN_CLOSE_WRITE","path": "/gpfs/fs0/some-folder/some-file", "clusterName": "gpfs-test-cluster", "nodeName": "node1", "nfsClientIp": "", "fsName": "fs0", "inode": "82380", "fileSetID": "0", "linkCount": "1", "openFlags": "32769", "poolName": "system", "fileSize": "13", "ownerUserId": "100", "ownerGroupId": "100", "atime": "2020-08-03_09:06:26-0700", "ctime": "2020-08-03_09:06:26-0700", "mtime": "2020-08-03_09:06:26-0700", "eventTime": "2020-08-03_09:06:36-0700", "clientUserId": "100", "clientGroupId": "100", "processId": "10391", "permissions": "200100644", "acls": null, "xattrs": null, "subEvent": "NONE" }"#.to_vec(),
            br#"{"cookie":"1","fileSetID":"2","linkCount":"1","ctime":"2024-03-13_16:44:58.423+0800","mask":"0x200","nfsIp":"","inode":"892323","fileSize":"8187382","xattrs":"","TE_JSON":"0.0.3","ownerUserId":"0","atime":"2024-03-13_16:44:58.073+0800","wd":"1","event":"IN_DELETE","permissions":"200100600","path":"/cpfe/x/file_0.txt/","ownerGroupId":"0","mtime":"2024-03-13_16:44:58.423+0800"}"#.to_vec(),
        ],
        "time" => ["2024-03-16T02:00:01+01:00", "1970-01-01T00:00:00Z", "2000-02-29 23:59:60.999-05:30", "-17", "2024-03-13_16:44:58.423+0800", "2020-08-03_09:06:26-0700", "2018-05-22 23:01:39.727768"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect(),
        "name" => vec![b"caf\xe9.txt".to_vec(), b"a\\x41\\\\b".to_vec(), b"line\nbreak\x7f\xc2\x85".to_vec(), "r\u{e9}sum\u{e9} \u{1f980}".as_bytes().to_vec(), b"\xe2\x82/\xff\\".to_vec()],
        "prism_catalog" => {
            let rec = FileRecord { path: "/lustre/a b.dat", kind: icicle_core::FileKind::File, attrs: Attrs { mode: 0o100644, uid: 1, gid: 2, size: 4 << 20, atime: 1, ctime: 2, mtime: 3, inode: 9 }, storage: None };
            let layout = [icicle_core::traits::LayoutComponent { start: 0, end: u64::MAX, stripe_size: 1 << 20, osts: vec![3, 1, 2] }];
            let mut text = icicle_plugins_prism::CatalogEntry::from_record(&rec, None).to_text().unwrap_or_default();
            text.push_str(&icicle_plugins_prism::CatalogEntry::from_record(&FileRecord { path: "/lustre/b", ..rec }, Some(&layout)).to_text().unwrap_or_default());
            vec![text.into_bytes()]
        }
        _ => Vec::new(),
    }
}
