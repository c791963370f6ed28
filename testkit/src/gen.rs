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
mod writers;

use formats::{csv_quote, gufi_q, mode_str};
pub use formats::{percent_encode, Format, GUFI_SCHEMA};
pub use writers::write;

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
        let mut v: Vec<OwnedFileRecord> = self
            .files
            .iter()
            .map(|f| OwnedFileRecord { path: self.path(f), kind: f.kind, attrs: f.attrs, storage: None })
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
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}
