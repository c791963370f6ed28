//! Deterministic, realistic file-system snapshots: users and groups with skewed ownership,
//! gamma/log-normal sizes with zero-size files, times spread over years (a few in the
//! future), directory width ~20, awkward names (spaces, commas, quotes, `%`, UTF-8) and a
//! few paths longer than Globus's 500-byte subject limit. The same seed gives the same
//! logical file system in every output format.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::Path;

use icicle_core::record::{Attrs, FileKind, OwnedFileRecord, S_IFDIR};

/// The reference "now" of generated snapshots (2026-01-01T00:00:00Z).
pub const NOW_REF: i64 = 1_767_225_600;
const YEAR: i64 = 365 * 86_400;

/// The deterministic random-number generator of the generators.
pub use icicle_core::rng::Rng;

mod formats;
#[cfg(test)]
mod tests;

use formats::{csv_quote, gufi_q, mode_str};
pub use formats::{percent_encode, Format, GUFI_SCHEMA};

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenSpec {
    /// Files and links to generate.
    pub files: u64,
    /// The seed of the random stream.
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
    /// Its absolute path.
    pub path: String,
    /// Its metadata (`size` 0; `inode` stable).
    pub attrs: Attrs,
    /// Index of the parent directory (`usize::MAX` for the root).
    pub parent: usize,
}

/// A generated file or link.
#[derive(Debug, Clone)]
pub struct GenFile {
    /// Index of its directory in [`GenFs::dirs`].
    pub dir: usize,
    /// Its name in that directory.
    pub name: String,
    /// File or link.
    pub kind: FileKind,
    /// Its metadata.
    pub attrs: Attrs,
    /// For links: the target (its length is the link's size).
    pub target: Option<String>,
}

/// A whole generated file system; `files` are grouped by directory, in directory order.
#[derive(Debug, Clone)]
pub struct GenFs {
    /// Directories, each after its parent.
    pub dirs: Vec<GenDir>,
    /// Files and links.
    pub files: Vec<GenFile>,
    /// The uids that own files.
    pub users: Vec<u32>,
    /// The gids that own files.
    pub groups: Vec<u32>,
}

/// `base` + `ext`, now and then with spaces, commas, quotes, `%`, tabs or UTF-8 in it.
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

/// File extensions, drawn uniformly.
const EXTS: [&str; 10] = [".dat", ".h5", ".nc", ".txt", ".log", ".py", ".c", ".tar", ".out", ""];

/// A file's kind, mode, size and link target.
type Body = (FileKind, u32, u64, Option<String>);

/// Zipf(1.1) shares of `n` files among `nusers` users, rounded down, the rest dealt one by one.
fn zipf_counts(n: u64, nusers: usize) -> Vec<u64> {
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
    counts
}

/// A time in the six years before [`NOW_REF`], recent ones likelier.
fn past_time(rng: &mut Rng) -> i64 {
    NOW_REF - (rng.f64().powf(1.5) * 6.0 * YEAR as f64) as i64
}

/// A directory's (atime, ctime, mtime).
fn dir_times(rng: &mut Rng) -> (i64, i64, i64) {
    let m = past_time(rng);
    (m + rng.below(86_400) as i64, m + rng.below(3_600) as i64, m)
}

/// A generation under way: the random stream, the inode counter and what is built so far.
struct Builder<'a> {
    spec: &'a GenSpec,
    rng: Rng,
    /// The last inode number handed out.
    inode: u64,
    users: Vec<u32>,
    groups: Vec<u32>,
    dirs: Vec<GenDir>,
    files: Vec<GenFile>,
}

impl Builder<'_> {
    fn next_inode(&mut self) -> u64 {
        self.inode += 1;
        self.inode
    }

    /// Add a directory owned by (uid, gid) with its times drawn; returns its index.
    fn push_dir(
        &mut self,
        path: String,
        (uid, gid): (u32, u32),
        mode: u32,
        (atime, ctime, mtime): (i64, i64, i64),
        parent: usize,
    ) -> usize {
        let inode = self.next_inode();
        self.dirs.push(GenDir {
            path,
            parent,
            attrs: Attrs { uid, gid, mode, atime, ctime, mtime, inode, ..Attrs::default() },
        });
        self.dirs.len() - 1
    }

    /// The root and its `home` and `proj` directories.
    fn top_dirs(&mut self) {
        let times = dir_times(&mut self.rng);
        self.push_dir(self.spec.root.clone(), (0, 0), S_IFDIR | 0o755, times, usize::MAX);
        for (top, gid) in [("home", 0u32), ("proj", 0)] {
            let times = dir_times(&mut self.rng);
            self.push_dir(format!("{}/{top}", self.spec.root), (0, gid), S_IFDIR | 0o755, times, 0);
        }
    }

    /// The `ui`th user's directories: its home, one per 20 files below it and, for the first
    /// user, a chain of long names. Returns their indexes.
    fn user_dirs(&mut self, ui: usize, (uid, gid): (u32, u32), nfiles: u64) -> Range<usize> {
        let ndirs = (nfiles / 20).max(1) as usize;
        let top = if ui % 3 == 2 { 2 } else { 1 };
        let home = if top == 1 {
            format!("{}/home/user{uid}", self.spec.root)
        } else {
            format!("{}/proj/grp{gid}-user{uid}", self.spec.root)
        };
        let times = dir_times(&mut self.rng);
        let first = self.push_dir(home, (uid, gid), S_IFDIR | 0o750, times, top);
        let mut depth = vec![1usize];
        for k in 1..ndirs {
            // Attach to a random earlier directory of this user, preferring shallow ones.
            let mut p = first + self.rng.below(k as u64) as usize;
            if depth[p - first] >= 7 {
                p = first;
            }
            let name = if self.rng.below(200) == 0 {
                name_with_quirks(&mut self.rng, &format!("d{k}"), "")
            } else {
                format!("d{k}")
            };
            let times = dir_times(&mut self.rng);
            let mode = if self.rng.below(10) == 0 { S_IFDIR | 0o2770 } else { S_IFDIR | 0o755 };
            let path = format!("{}/{name}", self.dirs[p].path);
            self.push_dir(path, (uid, gid), mode, times, p);
            depth.push(depth[p - first] + 1);
        }
        if ui == 0 {
            // A chain of long names so some paths exceed 500 bytes.
            let mut p = first;
            for k in 0..5 {
                let name = format!("long-{k}-{}", "x".repeat(110));
                let times = dir_times(&mut self.rng);
                let path = format!("{}/{name}", self.dirs[p].path);
                p = self.push_dir(path, (uid, gid), S_IFDIR | 0o755, times, p);
            }
        }
        first..self.dirs.len()
    }

    /// A user's `nfiles` files in its directories `dirs`, added grouped by directory.
    fn user_files(&mut self, (uid, gid): (u32, u32), nfiles: u64, dirs: Range<usize>) {
        let (first, last) = (dirs.start, dirs.end);
        let mut per_dir: Vec<Vec<GenFile>> = vec![Vec::new(); last - first];
        // Jobs write many files at once: each directory has a burst time and a common
        // file size that a share of its files take (value clusters, as on real systems).
        let bursts: Vec<(i64, u64)> = (first..last)
            .map(|_| {
                let t = past_time(&mut self.rng);
                let size = self.rng.gamma(1.5, 1_048_576.0 / 1.5).round() as u64;
                (t, size)
            })
            .collect();
        for f in 0..nfiles {
            let d = first + self.rng.below((last - first) as u64) as usize;
            let file = self.file(d, &format!("f{uid}-{f}"), (uid, gid), bursts[d - first]);
            per_dir[d - first].push(file);
        }
        for mut v in per_dir {
            // Names must be unique within a directory.
            let mut seen = std::collections::HashSet::new();
            for f in v.iter_mut() {
                while !seen.insert(f.name.clone()) {
                    f.name.push('_');
                }
            }
            self.files.extend(v);
        }
    }

    /// A file or link named after `stem` in directory `d`, usually owned by `owner`, written
    /// at its directory's burst (time, size) or at other times.
    fn file(&mut self, d: usize, stem: &str, owner: (u32, u32), (burst_time, burst_size): (i64, u64)) -> GenFile {
        let in_burst = self.rng.below(100) < 60;
        let same_size = self.rng.below(100) < 30;
        let ext = EXTS[self.rng.below(EXTS.len() as u64) as usize];
        let name = name_with_quirks(&mut self.rng, stem, ext);
        let is_link = self.rng.below(100) < 3;
        let (uid, gid) = if self.rng.below(10) == 0 {
            (
                self.users[self.rng.below(self.users.len() as u64) as usize],
                self.groups[self.rng.below(self.groups.len() as u64) as usize],
            )
        } else {
            owner
        };
        let (atime, ctime, mtime) = self.file_times(in_burst, burst_time);
        let (kind, mode, size, target) = if is_link { self.link() } else { self.regular(same_size, burst_size) };
        GenFile {
            dir: d,
            name,
            kind,
            attrs: Attrs { mode, uid, gid, size, atime, ctime, mtime, inode: self.next_inode() },
            target,
        }
    }

    /// A file's (atime, ctime, mtime): a few in the future, most at its burst or in the past.
    fn file_times(&mut self, in_burst: bool, burst_time: i64) -> (i64, i64, i64) {
        let future = self.rng.below(200) == 0;
        let mtime = if future {
            NOW_REF + self.rng.below(YEAR as u64) as i64
        } else if in_burst {
            burst_time + self.rng.below(600) as i64
        } else {
            past_time(&mut self.rng)
        };
        let ctime = mtime + self.rng.below(if in_burst { 5 } else { 86_400 }) as i64;
        // Half the files were never read after they were written.
        let atime = if self.rng.below(2) == 0 {
            mtime
        } else {
            mtime + (self.rng.f64() * (NOW_REF - mtime).max(0) as f64) as i64
        };
        (atime, ctime, mtime)
    }

    /// A symbolic link: its size is its target's length.
    fn link(&mut self) -> Body {
        let t = if self.rng.below(2) == 0 {
            format!("../target-{}", self.rng.below(1000))
        } else {
            format!("{}/shared/data-{}.h5", self.spec.root, self.rng.below(100))
        };
        (FileKind::Link, 0o120777, t.len() as u64, Some(t))
    }

    /// A regular file: some empty, some of its burst's size, most gamma-sized, a tail log-normal.
    fn regular(&mut self, same_size: bool, burst_size: u64) -> Body {
        let r = self.rng.below(100);
        let size = if r < 4 {
            0
        } else if same_size {
            burst_size
        } else if r < 74 {
            self.rng.gamma(1.5, 16_384.0 / 1.5).round() as u64
        } else {
            ((1_048_576f64).ln() + 2.5 * self.rng.normal()).exp().min((1u64 << 42) as f64) as u64
        };
        let mode = match self.rng.below(100) {
            0..=69 => 0o100644,
            70..=79 => 0o100600,
            80..=93 => 0o100755,
            94..=98 => 0o100664,
            _ => 0o104755,
        };
        (FileKind::File, mode, size, None)
    }
}

impl GenFs {
    /// Generate the file system described by `spec`.
    pub fn generate(spec: &GenSpec) -> GenFs {
        let n = spec.files.max(1);
        let nusers = (n / 2_000).clamp(4, 400) as usize;
        let ngroups = (nusers / 5).max(2);
        let users: Vec<u32> = (0..nusers as u32).map(|i| 1000 + i * 7 % 10_000 + i).collect();
        let groups: Vec<u32> = (0..ngroups as u32).map(|i| 100 + i * 3).collect();
        let counts = zipf_counts(n, nusers);
        let mut b = Builder {
            spec,
            rng: Rng::new(spec.seed),
            inode: 2,
            users,
            groups,
            dirs: Vec::new(),
            files: Vec::with_capacity(n as usize),
        };
        b.top_dirs();
        for (ui, &nfiles) in counts.iter().enumerate() {
            let owner = (b.users[ui], b.groups[ui % ngroups]);
            let dirs = b.user_dirs(ui, owner, nfiles);
            b.user_files(owner, nfiles, dirs);
        }
        GenFs { dirs: b.dirs, files: b.files, users: b.users, groups: b.groups }
    }

    /// The absolute path of a file.
    pub fn path(&self, f: &GenFile) -> String {
        format!("{}/{}", self.dirs[f.dir].path, f.name)
    }

    /// The ground-truth records (files and links, with their generated inodes), sorted by path.
    pub fn records(&self) -> Vec<OwnedFileRecord> {
        let mut v: Vec<OwnedFileRecord> =
            self.files.iter().map(|f| OwnedFileRecord { path: self.path(f), kind: f.kind, attrs: f.attrs }).collect();
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
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// Write `fs` in `format` under `out` (plus `principals.tsv`). `rows_per_file` splits
/// text outputs; `rollup` additionally fills GUFI `pentries_rollup` tables.
pub fn write(fs: &GenFs, format: Format, out: &Path, rows_per_file: u64, rollup: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("principals.tsv"), fs.principals())?;
    match format {
        Format::Tsv => write_text(fs, out, "part", "csv", rows_per_file, |w, fs, f| {
            let t = if f.kind == FileKind::Link { "l" } else { "f" };
            writeln!(
                w,
                "{t},{},{},{},{},{},{},{},{}",
                f.attrs.mode,
                f.attrs.uid,
                f.attrs.gid,
                f.attrs.size,
                f.attrs.atime,
                f.attrs.ctime,
                f.attrs.mtime,
                csv_quote(&fs.path(f))
            )
        }),
        Format::Mmapplypolicy => write_mmapplypolicy(fs, out),
        Format::Pwalk => write_pwalk(fs, out),
        Format::Ne2scan => {
            // lester's default `fslist` output (ORNL-TechInt/lester action-fslist.c@a1c1323):
            // the header, then each file with its OST objects (`ost:objid` in hex, last stripe
            // first; none for a link) before the path, then the footer.
            let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("fslist.ne2scan"))?);
            writeln!(
                w,
                "#IDENT#|1.0|1.42.7.wc1|{NOW_REF}|Thu Jan 01 00:00:00 GMT 2026|gen|/dev/mdt0|0|0|0|0|fs|generated"
            )?;
            for f in &fs.files {
                let osts = if f.kind == icicle_core::FileKind::File {
                    let stripes = 1 + f.attrs.inode % 4;
                    (0..stripes)
                        .rev()
                        .map(|k| format!("{}:{:x}", (f.attrs.inode + k) % 8, f.attrs.inode * 4 + k))
                        .collect::<Vec<_>>()
                        .join(",")
                } else {
                    String::new()
                };
                writeln!(
                    w,
                    "{}|{}|{}|{}|{}|{:o}|{}|{}|{osts}|{}",
                    f.attrs.atime,
                    f.attrs.ctime,
                    f.attrs.mtime,
                    f.attrs.uid,
                    f.attrs.gid,
                    f.attrs.mode,
                    f.attrs.size,
                    f.attrs.inode,
                    fs.path(f)
                )?;
            }
            writeln!(w, "#complete#{NOW_REF}")?;
            w.flush()
        }
        Format::Gufi => write_gufi(fs, out, rollup),
        Format::Tree => write_tree(fs, &out.join("tree")),
    }
}

/// `list.allfiles` in the DIRECTORIES_PLUS layout: each directory, then its files.
fn write_mmapplypolicy(fs: &GenFs, out: &Path) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("list.allfiles"))?);
    let mut fi = 0;
    for (di, d) in fs.dirs.iter().enumerate() {
        // DIRECTORIES_PLUS: the directory, then its files.
        writeln!(
            w,
            "{} 1 0 FAu {} proj 0 {} data {} {} {} {} {} 0 {} -- {}",
            d.attrs.inode,
            4096,
            2,
            d.attrs.uid,
            d.attrs.gid,
            mode_str(d.attrs.mode),
            d.attrs.atime,
            d.attrs.ctime,
            d.attrs.mtime,
            percent_encode(&d.path)
        )?;
        while fi < fs.files.len() && fs.files[fi].dir == di {
            let f = &fs.files[fi];
            let kb = f.attrs.size.div_ceil(1024);
            writeln!(
                w,
                "{} {} 0 FAu {} proj {} 1 data {} {} {} {} {} 0 {} -- {}",
                f.attrs.inode,
                f.attrs.inode % 997,
                f.attrs.size,
                kb,
                f.attrs.uid,
                f.attrs.gid,
                mode_str(f.attrs.mode),
                f.attrs.atime,
                f.attrs.ctime,
                f.attrs.mtime,
                percent_encode(&fs.path(f))
            )?;
            fi += 1;
        }
    }
    w.flush()
}

/// `pwalk.csv`: a header, then each directory and its files.
/// pwalk 3.0.0's CSV (fizwit/filesystem-reporting-tools `fileProcess.c`@d06beed, `printStat`):
/// the `--header` line, each directory's entries and then the directory's own line (post-order:
/// `pw_fcount` its entries, `pw_dirsum` the sum of their sizes; the root at depth -1 with
/// parent inode 0), files with `-1,0`, `st_mode` as `"%07o"`. (pwalk deletes control bytes
/// from names; the generator's tabs are kept, so its ground truth holds for every format.)
fn write_pwalk(fs: &GenFs, out: &Path) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("pwalk.csv"))?);
    writeln!(w, "inode,parent-inode,directory-depth,\"filename\",\"fileExtension\",UID,GID,st_size,st_dev,st_blocks,st_nlink,\"st_mode\",st_atime,st_mtime,st_ctime,pw_fcount,pw_dirsum")?;
    let mut fi = 0;
    for (di, d) in fs.dirs.iter().enumerate() {
        let pino = if d.parent == usize::MAX { 0 } else { fs.dirs[d.parent].attrs.inode };
        let depth = d.path.matches('/').count() as i64 - 2;
        let (mut count, mut sum) = (0u64, 0u64);
        while fi < fs.files.len() && fs.files[fi].dir == di {
            let f = &fs.files[fi];
            let ext = f.name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
            writeln!(
                w,
                "{},{},{},\"{}\",\"{}\",{},{},{},2049,{},1,\"{:07o}\",{},{},{},-1,0",
                f.attrs.inode,
                d.attrs.inode,
                depth + 1,
                fs.path(f).replace('"', "\"\""),
                ext.replace('"', "\"\""),
                f.attrs.uid,
                f.attrs.gid,
                f.attrs.size,
                f.attrs.size.div_ceil(512),
                f.attrs.mode,
                f.attrs.atime,
                f.attrs.mtime,
                f.attrs.ctime
            )?;
            count += 1;
            sum += f.attrs.size;
            fi += 1;
        }
        writeln!(
            w,
            "{},{},{},\"{}\",\"\",{},{},4096,2049,8,2,\"{:07o}\",{},{},{},{count},{sum}",
            d.attrs.inode,
            pino,
            depth,
            d.path.replace('"', "\"\""),
            d.attrs.uid,
            d.attrs.gid,
            d.attrs.mode,
            d.attrs.atime,
            d.attrs.mtime,
            d.attrs.ctime
        )?;
    }
    w.flush()
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

/// Where `path` of the generated file system goes under `out`.
fn index_dir(out: &Path, path: &str) -> std::path::PathBuf {
    out.join(path.trim_start_matches('/'))
}

fn write_gufi(fs: &GenFs, out: &Path, rollup: bool) -> std::io::Result<()> {
    let io = |e: rusqlite::Error| std::io::Error::other(e.to_string());
    // GUFI places an empty db.db in the index parent: its template, every table, no rows.
    rusqlite::Connection::open(out.join("db.db")).map_err(io)?.execute_batch(GUFI_SCHEMA).map_err(io)?;
    let mut by_dir: Vec<Vec<&GenFile>> = vec![Vec::new(); fs.dirs.len()];
    for f in &fs.files {
        by_dir[f.dir].push(f);
    }
    // Rolled-up directories: each user's top directory holds its whole subtree in pentries_rollup.
    let mut rolled: Vec<Option<usize>> = vec![None; fs.dirs.len()];
    if rollup {
        for (i, d) in fs.dirs.iter().enumerate() {
            if d.parent != usize::MAX
                && fs.dirs[d.parent].parent != usize::MAX
                && fs.dirs[fs.dirs[d.parent].parent].parent == usize::MAX
            {
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
                rollup_rows[top].extend(files.iter().map(|f| (*f, fs.dirs[i].attrs.inode)));
            }
        }
    }
    for (i, d) in fs.dirs.iter().enumerate() {
        let dir = index_dir(out, &d.path);
        std::fs::create_dir_all(&dir)?;
        // SQLite refuses paths of 512+ bytes: build deep databases under a short name.
        let target = dir.join("db.db");
        let deep = target.as_os_str().len() >= 500;
        let build_at = if deep {
            std::env::temp_dir().join(format!("icicle-gen-{}-{i}.db", std::process::id()))
        } else {
            target.clone()
        };
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
                    f.attrs.inode.to_string(),
                    f.attrs.mode,
                    f.attrs.uid,
                    f.attrs.gid,
                    f.attrs.size as i64,
                    f.attrs.size.div_ceil(512) as i64,
                    f.attrs.atime,
                    f.attrs.mtime,
                    f.attrs.ctime,
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
                    f.attrs.inode.to_string(),
                    f.attrs.mode,
                    f.attrs.uid,
                    f.attrs.gid,
                    f.attrs.size as i64,
                    f.attrs.atime,
                    f.attrs.mtime,
                    f.attrs.ctime,
                    pinode.to_string()
                ])
                .map_err(io)?;
            }
            let files = &by_dir[i];
            let totfiles = files.iter().filter(|f| f.kind == FileKind::File).count() as i64;
            let totlinks = files.len() as i64 - totfiles;
            let totsize: i64 = files.iter().map(|f| f.attrs.size as i64).sum();
            let pinode =
                if d.parent == usize::MAX { "0".to_string() } else { fs.dirs[d.parent].attrs.inode.to_string() };
            let name = gufi_q(d.path.rsplit('/').next().unwrap_or(""));
            let isrolledup = i64::from(rolled[i] == Some(i));
            tx.execute(
                "INSERT INTO summary(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,totfiles,totlinks,totsize,depth,rectype,pinode,isroot,canrollup,isrolledup) VALUES (?1,'d',?2,?3,2,?4,?5,4096,4096,8,?6,?7,?8,?9,?10,?11,?12,0,?13,1,0,?14)",
                rusqlite::params![name, d.attrs.inode.to_string(), d.attrs.mode, d.attrs.uid, d.attrs.gid, d.attrs.atime, d.attrs.mtime, d.attrs.ctime, totfiles, totlinks, totsize, d.path.matches('/').count() as i64, pinode, isrolledup],
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
                        rusqlite::params![sub_name, sub.attrs.inode.to_string(), sub.attrs.mode, sub.attrs.uid, sub.attrs.gid, sub.attrs.atime, sub.attrs.mtime, sub.attrs.ctime, sub.path.matches('/').count() as i64, fs.dirs[sub.parent].attrs.inode.to_string()],
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
                file.set_len(f.attrs.size)?;
                drop(file);
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.attrs.mode & 0o7777))?;
            }
        }
        // Owners need privileges; without them the tree keeps the caller's ids.
        let _ = std::os::unix::fs::lchown(&p, Some(f.attrs.uid), Some(f.attrs.gid));
        if f.target.is_none() && f.attrs.mode & 0o6000 != 0 {
            // chown clears set-id bits: restore them.
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.attrs.mode & 0o7777))?;
        }
        let at = filetime::FileTime::from_unix_time(f.attrs.atime, 0);
        let mt = filetime::FileTime::from_unix_time(f.attrs.mtime, 0);
        filetime::set_symlink_file_times(&p, at, mt)?;
    }
    Ok(())
}
