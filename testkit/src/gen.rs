//! Deterministic, realistic file-system snapshots: users and groups with skewed ownership,
//! gamma/log-normal sizes with zero-size files, times spread over years (a few in the
//! future), directory width ~20, awkward names (spaces, commas, quotes, `%`, UTF-8) and a
//! few paths longer than Globus's 500-byte subject limit. The same seed gives the same
//! logical file system in every output format.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::Path;

use icicle_core::record::{FileKind, OwnedFileRecord, S_IFDIR};

/// The reference "now" of generated snapshots (2026-01-01T00:00:00Z).
pub const NOW_REF: i64 = 1_767_225_600;
const YEAR: i64 = 365 * 86_400;

pub use icicle_core::rng::Rng;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenSpec {
    pub files: u64,
    pub seed: u64,
    /// The file-system root, e.g. `/fs`.
    pub root: String,
}

impl GenSpec {
    /// `files` files under `/fs` with `seed`.
    pub fn new(files: u64, seed: u64) -> GenSpec {
        GenSpec { files, seed, root: "/fs".into() }
    }
}

/// A generated directory.
#[derive(Debug, Clone)]
pub struct GenDir {
    pub path: String,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub atime: i64,
    pub ctime: i64,
    pub mtime: i64,
    /// Stable inode number.
    pub inode: u64,
    /// Index of the parent directory (`usize::MAX` for the root).
    pub parent: usize,
}

/// A generated file or link.
#[derive(Debug, Clone)]
pub struct GenFile {
    pub dir: usize,
    pub name: String,
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub inode: u64,
    /// For links: the target (its length is the link's size).
    pub target: Option<String>,
}

/// A whole generated file system; `files` are grouped by directory, in directory order.
#[derive(Debug, Clone)]
pub struct GenFs {
    pub dirs: Vec<GenDir>,
    pub files: Vec<GenFile>,
    pub users: Vec<u32>,
    pub groups: Vec<u32>,
}

fn name_with_quirks(rng: &mut Rng, base: &str, ext: &str) -> String {
    let r = rng.below(1000);
    match r {
        0..=9 => format!("{base} copy{ext}"),
        10..=14 => format!("{base},v2{ext}"),
        15..=17 => format!("{base} \"draft\"{ext}"),
        18..=20 => format!("{base}%20{ext}"),
        21..=25 => format!("résumé-{base}{ext}"),
        26..=27 => format!("データ-{base}{ext}"),
        28 => format!("{base}\ttab{ext}"),
        29 => format!("{base} | pipe{ext}"),
        30..=31 => format!("{base}'s{ext}"),
        32 => format!("'{base}''{ext}"),
        _ => format!("{base}{ext}"),
    }
}

const EXTS: [&str; 10] = [".dat", ".h5", ".nc", ".txt", ".log", ".py", ".c", ".tar", ".out", ""];

impl GenFs {
    /// Generate the file system described by `spec`.
    pub fn generate(spec: &GenSpec) -> GenFs {
        let mut rng = Rng::new(spec.seed);
        let n = spec.files.max(1);
        let nusers = (n / 2_000).clamp(4, 400) as usize;
        let ngroups = (nusers / 5).max(2);
        let users: Vec<u32> = (0..nusers as u32).map(|i| 1000 + i * 7 % 10_000 + i).collect();
        let groups: Vec<u32> = (0..ngroups as u32).map(|i| 100 + i * 3).collect();
        // Zipf(1.1) shares of the files per user.
        let weights: Vec<f64> = (1..=nusers).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
        let wsum: f64 = weights.iter().sum();
        let mut counts: Vec<u64> = weights.iter().map(|w| (w / wsum * n as f64).floor() as u64).collect();
        let mut assigned: u64 = counts.iter().sum();
        let mut i = 0;
        while assigned < n {
            counts[i % nusers] += 1;
            assigned += 1;
            i += 1;
        }
        let mut inode = 2u64;
        let mut next_inode = || {
            inode += 1;
            inode
        };
        let time_dir = |rng: &mut Rng| {
            let m = NOW_REF - (rng.f64().powf(1.5) * 6.0 * YEAR as f64) as i64;
            (m + rng.below(86_400) as i64, m + rng.below(3_600) as i64, m)
        };
        let mut dirs = Vec::new();
        let (a, c, m) = time_dir(&mut rng);
        dirs.push(GenDir {
            path: spec.root.clone(),
            uid: 0,
            gid: 0,
            mode: S_IFDIR | 0o755,
            atime: a,
            ctime: c,
            mtime: m,
            inode: next_inode(),
            parent: usize::MAX,
        });
        for (top, gid) in [("home", 0u32), ("proj", 0)] {
            let (a, c, m) = time_dir(&mut rng);
            dirs.push(GenDir {
                path: format!("{}/{top}", spec.root),
                uid: 0,
                gid,
                mode: S_IFDIR | 0o755,
                atime: a,
                ctime: c,
                mtime: m,
                inode: next_inode(),
                parent: 0,
            });
        }
        let mut files = Vec::with_capacity(n as usize);
        for (ui, &uid) in users.iter().enumerate() {
            let gid = groups[ui % ngroups];
            let nfiles = counts[ui];
            let ndirs = (nfiles / 20).max(1) as usize;
            let top = if ui % 3 == 2 { 2 } else { 1 };
            let home = if top == 1 { format!("{}/home/user{uid}", spec.root) } else { format!("{}/proj/grp{gid}-user{uid}", spec.root) };
            let first = dirs.len();
            let (a, c, m) = time_dir(&mut rng);
            dirs.push(GenDir { path: home, uid, gid, mode: S_IFDIR | 0o750, atime: a, ctime: c, mtime: m, inode: next_inode(), parent: top });
            let mut depth = vec![1usize];
            for k in 1..ndirs {
                // Attach to a random earlier directory of this user, preferring shallow ones.
                let mut p = first + rng.below(k as u64) as usize;
                if depth[p - first] >= 7 {
                    p = first;
                }
                let name = if rng.below(200) == 0 { name_with_quirks(&mut rng, &format!("d{k}"), "") } else { format!("d{k}") };
                let (a, c, m) = time_dir(&mut rng);
                let mode = if rng.below(10) == 0 { S_IFDIR | 0o2770 } else { S_IFDIR | 0o755 };
                dirs.push(GenDir { path: format!("{}/{name}", dirs[p].path), uid, gid, mode, atime: a, ctime: c, mtime: m, inode: next_inode(), parent: p });
                depth.push(depth[p - first] + 1);
            }
            if ui == 0 {
                // A chain of long names so some paths exceed 500 bytes.
                let mut p = first;
                for k in 0..5 {
                    let name = format!("long-{k}-{}", "x".repeat(110));
                    let (a, c, m) = time_dir(&mut rng);
                    dirs.push(GenDir {
                        path: format!("{}/{name}", dirs[p].path),
                        uid,
                        gid,
                        mode: S_IFDIR | 0o755,
                        atime: a,
                        ctime: c,
                        mtime: m,
                        inode: next_inode(),
                        parent: p,
                    });
                    p = dirs.len() - 1;
                }
            }
            let last = dirs.len();
            let mut per_dir: Vec<Vec<GenFile>> = vec![Vec::new(); last - first];
            // Jobs write many files at once: each directory has a burst time and a common
            // file size that a share of its files take (value clusters, as on real systems).
            let bursts: Vec<(i64, u64)> = (first..last)
                .map(|_| {
                    let t = NOW_REF - (rng.f64().powf(1.5) * 6.0 * YEAR as f64) as i64;
                    let size = rng.gamma(1.5, 1_048_576.0 / 1.5).round() as u64;
                    (t, size)
                })
                .collect();
            for f in 0..nfiles {
                let d = first + rng.below((last - first) as u64) as usize;
                let (burst_time, burst_size) = bursts[d - first];
                let in_burst = rng.below(100) < 60;
                let same_size = rng.below(100) < 30;
                let ext = EXTS[rng.below(EXTS.len() as u64) as usize];
                let name = name_with_quirks(&mut rng, &format!("f{uid}-{f}"), ext);
                let is_link = rng.below(100) < 3;
                let (fuid, fgid) =
                    if rng.below(10) == 0 { (users[rng.below(nusers as u64) as usize], groups[rng.below(ngroups as u64) as usize]) } else { (uid, gid) };
                let future = rng.below(200) == 0;
                let mtime = if future {
                    NOW_REF + rng.below(YEAR as u64) as i64
                } else if in_burst {
                    burst_time + rng.below(600) as i64
                } else {
                    NOW_REF - (rng.f64().powf(1.5) * 6.0 * YEAR as f64) as i64
                };
                let ctime = mtime + rng.below(if in_burst { 5 } else { 86_400 }) as i64;
                // Half the files were never read after they were written.
                let atime = if rng.below(2) == 0 { mtime } else { mtime + (rng.f64() * (NOW_REF - mtime).max(0) as f64) as i64 };
                let (kind, mode, size, target) = if is_link {
                    let t =
                        if rng.below(2) == 0 { format!("../target-{}", rng.below(1000)) } else { format!("{}/shared/data-{}.h5", spec.root, rng.below(100)) };
                    (FileKind::Link, 0o120777, t.len() as u64, Some(t))
                } else {
                    let r = rng.below(100);
                    let size = if r < 4 {
                        0
                    } else if same_size {
                        burst_size
                    } else if r < 74 {
                        rng.gamma(1.5, 16_384.0 / 1.5).round() as u64
                    } else {
                        ((1_048_576f64).ln() + 2.5 * rng.normal()).exp().min((1u64 << 42) as f64) as u64
                    };
                    let mode = match rng.below(100) {
                        0..=69 => 0o100644,
                        70..=79 => 0o100600,
                        80..=93 => 0o100755,
                        94..=98 => 0o100664,
                        _ => 0o104755,
                    };
                    (FileKind::File, mode, size, None)
                };
                per_dir[d - first].push(GenFile { dir: d, name, kind, mode, uid: fuid, gid: fgid, size, atime, ctime, mtime, inode: next_inode(), target });
            }
            for mut v in per_dir {
                // Names must be unique within a directory.
                let mut seen = std::collections::HashSet::new();
                for f in v.iter_mut() {
                    while !seen.insert(f.name.clone()) {
                        f.name.push('_');
                    }
                }
                files.extend(v);
            }
        }
        GenFs { dirs, files, users, groups }
    }

    /// The absolute path of a file.
    pub fn path(&self, f: &GenFile) -> String {
        format!("{}/{}", self.dirs[f.dir].path, f.name)
    }

    /// The ground-truth records (files and links, with their generated inodes), sorted by path.
    pub fn records(&self) -> Vec<OwnedFileRecord> {
        let mut v: Vec<OwnedFileRecord> = self
            .files
            .iter()
            .map(|f| OwnedFileRecord {
                path: self.path(f),
                kind: f.kind,
                mode: f.mode,
                uid: f.uid,
                gid: f.gid,
                size: f.size,
                atime: f.atime,
                ctime: f.ctime,
                mtime: f.mtime,
                inode: f.inode,
            })
            .collect();
        v.sort();
        v
    }

    /// The principals file mapping every uid and gid to a Globus URN.
    pub fn principals(&self) -> String {
        let mut s = String::from("# uid|gid  ID  principal URN\n");
        for &u in &self.users {
            let _ = writeln!(s, "uid {u} urn:globus:auth:identity:{}", fake_uuid(u as u64));
        }
        for &g in &self.groups {
            let _ = writeln!(s, "gid {g} urn:globus:groups:id:{}", fake_uuid(0x1000_0000 + g as u64));
        }
        s
    }
}

/// A deterministic UUID-shaped string.
pub fn fake_uuid(x: u64) -> String {
    let mut r = Rng::new(x);
    let (a, b) = (r.next_u64(), r.next_u64());
    format!("{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}", a >> 32, (a >> 16) & 0xffff, a & 0xfff, b >> 52, b & 0xffff_ffff_ffff)
}

/// Output formats of `gen-snapshot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// GUFI index: `db.db` per directory (entries + summary).
    Gufi,
    /// GPFS `mmapplypolicy` LIST file, NERSC 18-column layout, `ESCAPE '%'`.
    Mmapplypolicy,
    /// Icicle's 9-column CSV.
    Tsv,
    /// pwalk CSV with header (directories included).
    Pwalk,
    /// lester ne2scan.
    Ne2scan,
    /// A real directory tree under `tree/` (sparse files, real owners, modes and times).
    Tree,
}

impl Format {
    /// Whether the format carries the generated inode numbers (icicle9 has none; a real
    /// `tree` gets the kernel's).
    pub fn has_inode(self) -> bool {
        !matches!(self, Format::Tsv | Format::Tree)
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        Ok(match s {
            "gufi" => Format::Gufi,
            "mmapplypolicy" => Format::Mmapplypolicy,
            "tsv" => Format::Tsv,
            "pwalk" => Format::Pwalk,
            "ne2scan" => Format::Ne2scan,
            "tree" => Format::Tree,
            _ => return Err(format!("unknown format `{s}` (gufi, mmapplypolicy, tsv, pwalk, ne2scan, tree)")),
        })
    }
}

fn csv_quote(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(',') || s.contains('"') {
        std::borrow::Cow::Owned(format!("\"{}\"", s.replace('"', "\"\"")))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Percent-encode everything except RFC 3986 unreserved characters (mmapplypolicy `ESCAPE '%'`).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn mode_str(m: u32) -> String {
    String::from_utf8_lossy(&icicle_core::record::mode_string(m)).into_owned()
}

/// Write `fs` in `format` under `out` (plus `principals.tsv`). `rows_per_file` splits
/// text outputs; `rollup` additionally fills GUFI `pentries_rollup` tables.
pub fn write(fs: &GenFs, format: Format, out: &Path, rows_per_file: u64, rollup: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("principals.tsv"), fs.principals())?;
    match format {
        Format::Tsv => write_text(fs, out, "part", "csv", rows_per_file, |w, fs, f| {
            let t = if f.kind == FileKind::Link { "l" } else { "f" };
            writeln!(w, "{t},{},{},{},{},{},{},{},{}", f.mode, f.uid, f.gid, f.size, f.atime, f.ctime, f.mtime, csv_quote(&fs.path(f)))
        }),
        Format::Mmapplypolicy => {
            let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("list.allfiles"))?);
            let mut fi = 0;
            for (di, d) in fs.dirs.iter().enumerate() {
                // DIRECTORIES_PLUS: the directory, then its files.
                writeln!(
                    w,
                    "{} 1 0 FAu {} proj 0 {} data {} {} {} {} {} 0 {} -- {}",
                    d.inode,
                    4096,
                    2,
                    d.uid,
                    d.gid,
                    mode_str(d.mode),
                    d.atime,
                    d.ctime,
                    d.mtime,
                    percent_encode(&d.path)
                )?;
                while fi < fs.files.len() && fs.files[fi].dir == di {
                    let f = &fs.files[fi];
                    let kb = f.size.div_ceil(1024);
                    writeln!(
                        w,
                        "{} {} 0 FAu {} proj {} 1 data {} {} {} {} {} 0 {} -- {}",
                        f.inode,
                        f.inode % 997,
                        f.size,
                        kb,
                        f.uid,
                        f.gid,
                        mode_str(f.mode),
                        f.atime,
                        f.ctime,
                        f.mtime,
                        percent_encode(&fs.path(f))
                    )?;
                    fi += 1;
                }
            }
            w.flush()
        }
        Format::Pwalk => {
            let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("pwalk.csv"))?);
            writeln!(w, "inode,parent-inode,directory-depth,\"filename\",\"fileExtension\",UID,GID,st_size,st_dev,st_blocks,st_nlink,\"st_mode\",st_atime,st_mtime,st_ctime,pw_fcount,pw_dirsum")?;
            let mut fi = 0;
            for (di, d) in fs.dirs.iter().enumerate() {
                let pino = if d.parent == usize::MAX { 0 } else { fs.dirs[d.parent].inode };
                let depth = d.path.matches('/').count() as i64 - 2;
                writeln!(
                    w,
                    "{},{},{},\"{}\",\"\",{},{},4096,2049,8,2,\"{:o}\",{},{},{},0,0",
                    d.inode,
                    pino,
                    depth,
                    d.path.replace('"', "\"\""),
                    d.uid,
                    d.gid,
                    d.mode,
                    d.atime,
                    d.mtime,
                    d.ctime
                )?;
                while fi < fs.files.len() && fs.files[fi].dir == di {
                    let f = &fs.files[fi];
                    let ext = f.name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
                    writeln!(
                        w,
                        "{},{},{},\"{}\",\"{}\",{},{},{},2049,{},1,\"{:o}\",{},{},{},-1,-1",
                        f.inode,
                        d.inode,
                        depth + 1,
                        fs.path(f).replace('"', "\"\""),
                        ext.replace('"', "\"\""),
                        f.uid,
                        f.gid,
                        f.size,
                        f.size.div_ceil(512),
                        f.mode,
                        f.atime,
                        f.mtime,
                        f.ctime
                    )?;
                    fi += 1;
                }
            }
            w.flush()
        }
        Format::Ne2scan => {
            let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("fslist.ne2scan"))?);
            writeln!(w, "#IDENT#|1.0|1.47.0|{NOW_REF}|Thu Jan  1 00:00:00 2026|gen|/dev/mdt0|0|0|0|0|fs|generated")?;
            for f in &fs.files {
                writeln!(w, "{}|{}|{}|{}|{}|{:o}|{}|{}|{}", f.atime, f.ctime, f.mtime, f.uid, f.gid, f.mode, f.size, f.inode, fs.path(f))?;
            }
            writeln!(w, "#complete#{NOW_REF}")?;
            w.flush()
        }
        Format::Gufi => write_gufi(fs, out, rollup),
        Format::Tree => write_tree(fs, &out.join("tree")),
    }
}

fn write_text(
    fs: &GenFs,
    out: &Path,
    stem: &str,
    ext: &str,
    rows_per_file: u64,
    row: impl Fn(&mut BufWriter<std::fs::File>, &GenFs, &GenFile) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let rows_per_file = rows_per_file.max(1);
    let mut w: Option<BufWriter<std::fs::File>> = None;
    for (i, f) in fs.files.iter().enumerate() {
        if (i as u64).is_multiple_of(rows_per_file) {
            if let Some(mut old) = w.take() {
                old.flush()?;
            }
            let name = format!("{stem}-{:04}.{ext}", i as u64 / rows_per_file);
            w = Some(BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join(name))?));
        }
        if let Some(w) = w.as_mut() {
            row(w, fs, f)?;
        }
    }
    if let Some(mut w) = w {
        w.flush()?;
    }
    Ok(())
}

/// GUFI's `entries` and `summary` schema (formats.md §1.2), plus `pentries_rollup`.
pub const GUFI_SCHEMA: &str = "
CREATE TABLE entries(name TEXT, type TEXT, inode TEXT, mode INT64, nlink INT64, uid INT64, gid INT64, size INT64, blksize INT64, blocks INT64, atime INT64, mtime INT64, ctime INT64, linkname TEXT, xattr_names BLOB, crtime INT64, ossint1 INT64, ossint2 INT64, ossint3 INT64, ossint4 INT64, osstext1 TEXT, osstext2 TEXT);
CREATE TABLE summary(name TEXT, type TEXT, inode TEXT, mode INT64, nlink INT64, uid INT64, gid INT64, size INT64, blksize INT64, blocks INT64, atime INT64, mtime INT64, ctime INT64, linkname TEXT, xattr_names BLOB, crtime INT64, totfiles INT64, totlinks INT64, minuid INT64, maxuid INT64, mingid INT64, maxgid INT64, minsize INT64, maxsize INT64, totzero INT64, totltk INT64, totmtk INT64, totltm INT64, totmtm INT64, totmtg INT64, totmtt INT64, totsize INT64, minctime INT64, maxctime INT64, totctime INT64, minmtime INT64, maxmtime INT64, totmtime INT64, minatime INT64, maxatime INT64, totatime INT64, minblocks INT64, maxblocks INT64, totblocks INT16, totxattr INT64, depth INT64, mincrtime INT64, maxcrtime INT64, totcrtime INT64, minossint1 INT64, maxossint1 INT64, totossint1 INT64, minossint2 INT64, maxossint2 INT64, totossint2 INT64, minossint3 INT64, maxossint3 INT64, totossint3 INT64, minossint4 INT64, maxossint4 INT64, totossint4 INT64, rectype INT64, pinode TEXT, isroot INT64, canrollup INT64, isrolledup INT64);
CREATE TABLE pentries_rollup(name TEXT, type TEXT, inode TEXT, mode INT64, nlink INT64, uid INT64, gid INT64, size INT64, blksize INT64, blocks INT64, atime INT64, mtime INT64, ctime INT64, linkname TEXT, xattr_names BLOB, crtime INT64, ossint1 INT64, ossint2 INT64, ossint3 INT64, ossint4 INT64, osstext1 TEXT, osstext2 TEXT, pinode TEXT, ppinode TEXT);
";

fn index_dir(out: &Path, path: &str) -> std::path::PathBuf {
    out.join(path.trim_start_matches('/'))
}

/// A name as `gufi_dir2index` stores it: `sqlite3_mprintf("%q")` doubles every `'`, and the
/// result is bound as it is.
fn gufi_q(name: &str) -> String {
    name.replace('\'', "''")
}

fn write_gufi(fs: &GenFs, out: &Path, rollup: bool) -> std::io::Result<()> {
    let io = |e: rusqlite::Error| std::io::Error::other(e.to_string());
    // GUFI places an empty db.db in the index parent.
    rusqlite::Connection::open(out.join("db.db")).map_err(io)?;
    let mut by_dir: Vec<Vec<&GenFile>> = vec![Vec::new(); fs.dirs.len()];
    for f in &fs.files {
        by_dir[f.dir].push(f);
    }
    // Rolled-up directories: each user's top directory holds its whole subtree in pentries_rollup.
    let mut rolled: Vec<Option<usize>> = vec![None; fs.dirs.len()];
    if rollup {
        for (i, d) in fs.dirs.iter().enumerate() {
            if d.parent != usize::MAX && fs.dirs[d.parent].parent != usize::MAX && fs.dirs[fs.dirs[d.parent].parent].parent == usize::MAX {
                rolled[i] = Some(i);
            } else if d.parent != usize::MAX {
                rolled[i] = rolled[d.parent];
            }
        }
    }
    let mut rollup_rows: Vec<Vec<(&GenFile, u64)>> = vec![Vec::new(); fs.dirs.len()];
    for (i, files) in by_dir.iter().enumerate() {
        if let Some(top) = rolled[i] {
            if top != i {
                rollup_rows[top].extend(files.iter().map(|f| (*f, fs.dirs[i].inode)));
            }
        }
    }
    for (i, d) in fs.dirs.iter().enumerate() {
        let dir = index_dir(out, &d.path);
        std::fs::create_dir_all(&dir)?;
        // SQLite refuses paths of 512+ bytes: build deep databases under a short name.
        let target = dir.join("db.db");
        let deep = target.as_os_str().len() >= 500;
        let build_at = if deep { std::env::temp_dir().join(format!("icicle-gen-{}-{i}.db", std::process::id())) } else { target.clone() };
        let mut conn = rusqlite::Connection::open(&build_at).map_err(io)?;
        conn.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;").map_err(io)?;
        conn.execute_batch(GUFI_SCHEMA).map_err(io)?;
        let tx = conn.transaction().map_err(io)?;
        {
            let mut ins = tx
                .prepare("INSERT INTO entries(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,linkname,xattr_names,crtime) VALUES (?1,?2,?3,?4,1,?5,?6,?7,4096,?8,?9,?10,?11,?12,NULL,0)")
                .map_err(io)?;
            for f in &by_dir[i] {
                let t = if f.kind == FileKind::Link { "l" } else { "f" };
                let link = gufi_q(f.target.as_deref().unwrap_or_default());
                ins.execute(rusqlite::params![
                    gufi_q(&f.name),
                    t,
                    f.inode.to_string(),
                    f.mode,
                    f.uid,
                    f.gid,
                    f.size as i64,
                    f.size.div_ceil(512) as i64,
                    f.atime,
                    f.mtime,
                    f.ctime,
                    link
                ])
                .map_err(io)?;
            }
            let mut rins = tx
                .prepare("INSERT INTO pentries_rollup(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,linkname,pinode,ppinode) VALUES (?1,?2,?3,?4,1,?5,?6,?7,4096,0,?8,?9,?10,'',?11,'0')")
                .map_err(io)?;
            for (f, pinode) in &rollup_rows[i] {
                let t = if f.kind == FileKind::Link { "l" } else { "f" };
                rins.execute(rusqlite::params![
                    gufi_q(&f.name),
                    t,
                    f.inode.to_string(),
                    f.mode,
                    f.uid,
                    f.gid,
                    f.size as i64,
                    f.atime,
                    f.mtime,
                    f.ctime,
                    pinode.to_string()
                ])
                .map_err(io)?;
            }
            let files = &by_dir[i];
            let totfiles = files.iter().filter(|f| f.kind == FileKind::File).count() as i64;
            let totlinks = files.len() as i64 - totfiles;
            let totsize: i64 = files.iter().map(|f| f.size as i64).sum();
            let pinode = if d.parent == usize::MAX { "0".to_string() } else { fs.dirs[d.parent].inode.to_string() };
            let name = gufi_q(d.path.rsplit('/').next().unwrap_or(""));
            let isrolledup = i64::from(rolled[i] == Some(i));
            tx.execute(
                "INSERT INTO summary(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,totfiles,totlinks,totsize,depth,rectype,pinode,isroot,canrollup,isrolledup) VALUES (?1,'d',?2,?3,2,?4,?5,4096,4096,8,?6,?7,?8,?9,?10,?11,?12,0,?13,1,0,?14)",
                rusqlite::params![name, d.inode.to_string(), d.mode, d.uid, d.gid, d.atime, d.mtime, d.ctime, totfiles, totlinks, totsize, d.path.matches('/').count() as i64, pinode, isrolledup],
            )
            .map_err(io)?;
            // gufi_rollup copies each rolled-up subdirectory's summary into the top one, named
            // `<top's stored name>/<sub's stored name>` joined in SQL (so still escaped).
            if rolled[i] == Some(i) {
                for (_, sub) in fs.dirs.iter().enumerate().filter(|(j, _)| *j != i && rolled[*j] == Some(i)) {
                    let rel = sub.path.strip_prefix(&d.path).unwrap_or(&sub.path).trim_start_matches('/');
                    let sub_name = format!("{name}/{}", rel.split('/').map(gufi_q).collect::<Vec<_>>().join("/"));
                    tx.execute(
                        "INSERT INTO summary(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,totfiles,totlinks,totsize,depth,rectype,pinode,isroot,canrollup,isrolledup) VALUES (?1,'d',?2,?3,2,?4,?5,4096,4096,8,?6,?7,?8,0,0,0,?9,0,?10,0,1,1)",
                        rusqlite::params![sub_name, sub.inode.to_string(), sub.mode, sub.uid, sub.gid, sub.atime, sub.mtime, sub.ctime, sub.path.matches('/').count() as i64, fs.dirs[sub.parent].inode.to_string()],
                    )
                    .map_err(io)?;
                }
            }
        }
        tx.commit().map_err(io)?;
        drop(conn);
        if deep {
            std::fs::copy(&build_at, &target)?;
            std::fs::remove_file(&build_at)?;
        }
    }
    Ok(())
}

fn write_tree(fs: &GenFs, out: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for d in &fs.dirs {
        std::fs::create_dir_all(index_dir(out, &d.path))?;
    }
    for f in &fs.files {
        let p = index_dir(out, &fs.path(f));
        match &f.target {
            Some(t) => std::os::unix::fs::symlink(t, &p)?,
            None => {
                let file = std::fs::File::create(&p)?;
                file.set_len(f.size)?;
                drop(file);
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.mode & 0o7777))?;
            }
        }
        // Owners need privileges; without them the tree keeps the caller's ids.
        let _ = std::os::unix::fs::lchown(&p, Some(f.uid), Some(f.gid));
        if f.target.is_none() && f.mode & 0o6000 != 0 {
            // chown clears set-id bits: restore them.
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.mode & 0o7777))?;
        }
        let at = filetime::FileTime::from_unix_time(f.atime, 0);
        let mt = filetime::FileTime::from_unix_time(f.mtime, 0);
        filetime::set_symlink_file_times(&p, at, mt)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_fs() {
        let a = GenFs::generate(&GenSpec::new(5_000, 7)).records();
        let b = GenFs::generate(&GenSpec::new(5_000, 7)).records();
        assert_eq!(a, b);
        assert_eq!(a.len(), 5_000);
        let c = GenFs::generate(&GenSpec::new(5_000, 8)).records();
        assert_ne!(a, c);
    }

    #[test]
    fn realistic_shape() {
        let fs = GenFs::generate(&GenSpec::new(20_000, 1));
        let recs = fs.records();
        let zero = recs.iter().filter(|r| r.size == 0 && r.kind == FileKind::File).count();
        let links = recs.iter().filter(|r| r.kind == FileKind::Link).count();
        let long = recs.iter().filter(|r| r.path.len() > 500).count();
        let future = recs.iter().filter(|r| r.mtime > NOW_REF).count();
        assert!(zero > 200 && zero < 1500, "{zero}");
        assert!(links > 300 && links < 1000, "{links}");
        assert!(long > 0, "no long paths");
        assert!(future > 20, "{future}");
        let uniq: std::collections::HashSet<_> = recs.iter().map(|r| &r.path).collect();
        assert_eq!(uniq.len(), recs.len(), "paths must be unique");
        let inodes: std::collections::HashSet<u64> = recs.iter().map(|r| r.inode).chain(fs.dirs.iter().map(|d| d.inode)).collect();
        assert_eq!(inodes.len(), recs.len() + fs.dirs.len(), "inodes must be unique (no hard links)");
        assert!(!inodes.contains(&0));
        let width = fs.files.len() as f64 / fs.dirs.len() as f64;
        assert!((10.0..=25.0).contains(&width), "{width}");
    }
}
