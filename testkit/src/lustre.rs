//! An honest Lustre stand-in: workloads that perform real file operations under a directory
//! and journal the changelog records Lustre would write, in exact `lfs changelog` format with
//! synthetic FIDs; and a fake `lfs` serving `changelog`, `changelog_clear`, `fid2path` and
//! `path2fid` from that journal.
//!
//! Files next to the journal: `<journal>.baseline` (objects that existed before monitoring:
//! `FID<TAB>/path<TAB>d|f`) and `<journal>.users` (registered changelog users and the index
//! each cleared: `cl1 0`).

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use icicle_plugins_lustre::changelog::{ChangelogRecord, Fid, RecordType, CLF_LAST};
use icicle_plugins_lustre::namespace::Namespace;

use crate::gen::Rng;

mod dne;
mod fake_lfs;
mod files_lfs;
mod trees;

pub use dne::{journal_of_device, logged_on, mdt_journal, mdt_of, shards, MdtJournals};

pub use fake_lfs::{fake_lfs, layout_of, project_of, purge, OSTS};
pub use files_lfs::files_lfs;

/// The sequence of synthetic FIDs.
pub const FID_SEQ: u64 = 0x2_0000_0401;

/// `<journal><ext>`.
pub fn side(journal: &Path, ext: &str) -> PathBuf {
    let mut s = journal.as_os_str().to_owned();
    s.push(ext);
    PathBuf::from(s)
}

/// Performs operations under `root` and journals their changelog records.
pub struct Workload {
    root: PathBuf,
    journal_path: PathBuf,
    journal: fs::File,
    /// The objects and their paths as the journal (and the baseline) leave them.
    pub ns: Namespace,
    next_index: u64,
    next_oid: u32,
    rng: Rng,
    /// Records written by this workload.
    pub records: u64,
    counter: u64,
    /// Perform the file operations (false: journal only, for benchmark streams).
    pub real: bool,
    /// Also write the GPFS watch-folder events of every record.
    pub gpfs: Option<crate::gpfs::GpfsJournal>,
    /// Write the names of UNLNK and RMDIR records and a rename's old name as paths from the
    /// file system's root, as Amazon FSx for Lustre prints them.
    pub fsx_names: bool,
    /// One changelog per MDT of a DNE namespace ([`Workload::set_mdts`]); None: one MDT.
    pub mdts: Option<MdtJournals>,
}

fn now_parts() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (y, m, day) = icicle_core::time::civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}.{:09} {y:04}.{m:02}.{day:02}", sod / 3600, sod / 60 % 60, sod % 60, d.subsec_nanos())
}

fn split(path: &str) -> (String, String) {
    let (p, n) = path.rsplit_once('/').unwrap_or(("", path));
    (if p.is_empty() { "/".into() } else { p.to_string() }, n.to_string())
}

fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The first index of a new changelog for `seed`: real ones start in the hundreds of
/// thousands to billions (whatever their users cleared was purged); one seed in eight starts
/// at 1, as a new file system's does.
fn first_index(seed: u64) -> u64 {
    let mut r = Rng::new(seed ^ 0x1_dec5);
    if r.below(8) == 0 {
        1
    } else {
        1 + r.below(1 << 36)
    }
}

/// A random element of `v`.
fn pick(rng: &mut Rng, v: &[String]) -> String {
    v[rng.below(v.len() as u64) as usize].clone()
}

/// The workload kinds of the seed, plus `mixed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// create, append, rename, mkdir, move into the directory, remove recursively.
    EvalOut,
    /// create, modify, delete.
    EvalPerf,
    /// a pre-populated tree (width 20, depth ~3.6, gamma sizes), then open-read-close.
    Filebench,
    /// hard links, symlinks, renames over existing targets, deep directory renames,
    /// chmod/chown/truncate, and changes to files that existed before monitoring.
    Mixed,
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        Ok(match s {
            "eval_out" => Kind::EvalOut,
            "eval_perf" => Kind::EvalPerf,
            "filebench" => Kind::Filebench,
            "mixed" => Kind::Mixed,
            _ => return Err(format!("unknown workload `{s}` (eval_out, eval_perf, filebench, mixed)")),
        })
    }
}

impl Workload {
    /// Open (or continue) a workload on `root` journaling into `journal`.
    pub fn open(root: &Path, journal: &Path, seed: u64) -> std::io::Result<Workload> {
        fs::create_dir_all(root)?;
        if let Some(p) = journal.parent() {
            fs::create_dir_all(p)?;
        }
        let ns = Namespace::load(&side(journal, ".baseline"), journal)?;
        // A new changelog starts where a real one would be: anywhere (`start_at` to choose).
        let next_index = ns.last_index.map_or_else(|| first_index(seed), |i| i + 1);
        let users = side(journal, ".users");
        if !users.exists() {
            // Registered now: a user's index starts at the changelog's current one.
            fs::write(&users, format!("cl1 {}\n", next_index - 1))?;
        }
        let next_oid = ns.max_oid + 1;
        let file = fs::OpenOptions::new().create(true).append(true).open(journal)?;
        Ok(Workload {
            root: root.to_path_buf(),
            journal_path: journal.to_path_buf(),
            journal: file,
            ns,
            next_index,
            next_oid,
            rng: Rng::new(seed ^ (next_index << 20)),
            records: 0,
            counter: next_index,
            real: true,
            gpfs: None,
            fsx_names: false,
            mdts: None,
        })
    }

    /// Number the records from `index` on (only before the first record); the changelog user
    /// registered just before.
    pub fn start_at(&mut self, index: u64) -> std::io::Result<()> {
        if self.ns.last_index.is_none() && self.records == 0 {
            self.next_index = index.max(1);
            fs::write(side(&self.journal_path, ".users"), format!("cl1 {}\n", self.next_index - 1))?;
        }
        Ok(())
    }

    fn real(&self, path: &str) -> PathBuf {
        icicle_core::name::on(&self.root, path)
    }

    fn mint_on(&mut self, mdt: u32) -> Fid {
        let f = Fid { seq: FID_SEQ + u64::from(mdt), oid: self.next_oid, ver: 0 };
        self.next_oid += 1;
        f
    }

    fn fid(&self, path: &str) -> Fid {
        self.ns.by_path.get(path).copied().unwrap_or_default()
    }

    fn unique(&mut self, stem: &str) -> String {
        self.counter += 1;
        format!("{stem}{}", self.counter)
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        kind: &str,
        flags: u32,
        target: Fid,
        parent: Option<Fid>,
        name: Option<&str>,
        rename: Option<(Fid, Fid, String)>,
        mode: Option<&str>,
    ) -> std::io::Result<()> {
        let jobid = (self.rng.below(3) == 0).then(|| "bench.0".into());
        let rec = ChangelogRecord {
            index: self.next_index,
            kind: RecordType::from_name(kind).unwrap_or(RecordType::Mark),
            time: now_parts().as_str().into(),
            flags,
            target,
            jobid,
            extra_flags: Some(0xf),
            uid_gid: Some((0, 0)),
            nid: Some("0@lo".into()),
            open_mode: mode.map(Into::into),
            xattr: None,
            parent,
            name: name.map(Into::into),
            source: rename.as_ref().map(|r| r.0),
            source_parent: rename.as_ref().map(|r| r.1),
            source_name: rename.map(|r| r.2.into()),
        };
        self.next_index += 1;
        self.records += 1;
        if let Some(g) = self.gpfs.as_mut() {
            g.record(&rec, &self.ns)?;
        }
        let printed = if self.fsx_names { self.fsx_printed(&rec) } else { None };
        self.ns.apply(&rec);
        // The MDT's record, one a line (names escaped); the fake lfs prints its bytes.
        let mut line = printed.as_ref().unwrap_or(&rec).to_line();
        line.push('\n');
        self.journal.write_all(line.as_bytes())?;
        // With several MDTs the journal is the namespace `fid2path` answers from: written
        // first, so no MDT's record is read before the file system shows its operation.
        if let Some(m) = self.mdts.as_mut() {
            m.write(&rec, printed.as_ref().unwrap_or(&rec))?;
        }
        Ok(())
    }

    /// `rec` as FSx for Lustre prints it: the name of an UNLNK or RMDIR and a rename's old name
    /// as a path from the root (`/cl8/b.txt`); None when it prints the record as it is.
    fn fsx_printed(&self, rec: &ChangelogRecord) -> Option<ChangelogRecord> {
        let full =
            |parent: Option<Fid>, name: Option<&str>| -> Option<String> { Some(join(self.ns.path(&parent?)?, name?)) };
        let mut r = rec.clone();
        match rec.kind {
            RecordType::Unlnk | RecordType::Rmdir => r.name = Some(full(rec.parent, rec.name.as_deref())?.into()),
            RecordType::Renme => r.source_name = Some(full(rec.source_parent, rec.source_name.as_deref())?.into()),
            _ => return None,
        }
        Some(r)
    }

    /// Objects created before monitoring: real files and directories in the baseline only
    /// (every ninth file has a second name, a hard link).
    pub fn preexisting(&mut self, files: usize) -> std::io::Result<()> {
        let mut lines = String::new();
        let mut dirs = vec!["/".to_string()];
        for i in 0..files.div_ceil(10).max(1) {
            let parent = dirs[self.rng.below(dirs.len() as u64) as usize].clone();
            let path = join(&parent, &format!("old{i}"));
            if self.real {
                fs::create_dir_all(self.real(&path))?;
            }
            let pf = self.fid(&parent);
            let mdt = self.directory_mdt(&pf, &path);
            let fid = self.mint_on(mdt);
            self.ns.add(fid, path.clone(), true);
            lines.push_str(&format!("{fid}\t{path}\td\n"));
            dirs.push(path);
        }
        for i in 0..files {
            let parent = dirs[1 + self.rng.below(dirs.len() as u64 - 1) as usize].clone();
            let path = join(&parent, &format!("pre {i}.dat"));
            let n = self.rng.below(5000) as usize;
            if self.real {
                fs::write(self.real(&path), vec![b'x'; n])?;
            }
            let pf = self.fid(&parent);
            let fid = self.mint_in(&pf, &path);
            self.ns.add(fid, path.clone(), false);
            lines.push_str(&format!("{fid}\t{path}\tf\n"));
            if i % 9 == 4 {
                // Some old files have a second name (a hard link, maybe in another directory).
                let other = dirs[1 + self.rng.below(dirs.len() as u64 - 1) as usize].clone();
                let link = join(&other, &format!("pre {i} link.dat"));
                if self.real {
                    fs::hard_link(self.real(&path), self.real(&link))?;
                }
                self.ns.add(fid, link.clone(), false);
                lines.push_str(&format!("{fid}\t{link}\tf\n"));
            }
        }
        let mut f = fs::OpenOptions::new().create(true).append(true).open(side(&self.journal_path, ".baseline"))?;
        f.write_all(lines.as_bytes())
    }

    // ----- operations: the real thing, then its records -----

    /// Create and write a file.
    pub fn create(&mut self, path: &str, bytes: usize) -> std::io::Result<()> {
        let (parent, name) = split(path);
        if self.real {
            fs::write(self.real(path), vec![b'd'; bytes])?;
        }
        let pf = self.fid(&parent);
        let fid = self.mint_in(&pf, &name);
        self.record("CREAT", 0, fid, Some(pf), Some(&name), None, None)?;
        self.record("OPEN", 0x24a, fid, Some(pf), None, None, Some("-w-"))?;
        self.record("CLOSE", 0x242, fid, None, None, None, None)
    }

    /// Append to a file.
    pub fn append(&mut self, path: &str, bytes: usize) -> std::io::Result<()> {
        if self.real {
            let mut f = fs::OpenOptions::new().append(true).open(self.real(path))?;
            f.write_all(&vec![b'a'; bytes])?;
        }
        let fid = self.fid(path);
        self.record("OPEN", 0x24a, fid, None, None, None, Some("-w-"))?;
        self.record("CLOSE", 0x242, fid, None, None, None, None)
    }

    /// Open, read and close a file.
    pub fn read(&mut self, path: &str) -> std::io::Result<()> {
        if self.real {
            let _ = fs::read(self.real(path))?;
        }
        let fid = self.fid(path);
        self.record("OPEN", 0x0, fid, None, None, None, Some("r--"))?;
        self.record("CLOSE", 0x0, fid, None, None, None, None)
    }

    /// Make a directory.
    pub fn mkdir(&mut self, path: &str) -> std::io::Result<()> {
        let (parent, name) = split(path);
        if self.real {
            fs::create_dir(self.real(path))?;
        }
        let pf = self.fid(&parent);
        let fid = self.new_directory(&pf, &name)?;
        self.record("MKDIR", 0, fid, Some(pf), Some(&name), None, None)
    }

    /// Remove a file or link.
    pub fn unlink(&mut self, path: &str) -> std::io::Result<()> {
        let (parent, name) = split(path);
        let fid = self.fid(path);
        let links = self.ns.by_fid.get(&fid).map_or(1, |o| o.paths.len());
        if self.real {
            fs::remove_file(self.real(path))?;
        }
        let pf = self.fid(&parent);
        self.record("UNLNK", if links <= 1 { CLF_LAST } else { 0 }, fid, Some(pf), Some(&name), None, None)
    }

    /// Remove an empty directory.
    pub fn rmdir(&mut self, path: &str) -> std::io::Result<()> {
        let (parent, name) = split(path);
        let fid = self.fid(path);
        if self.real {
            fs::remove_dir(self.real(path))?;
        }
        let pf = self.fid(&parent);
        self.record("RMDIR", CLF_LAST, fid, Some(pf), Some(&name), None, None)
    }

    /// Remove a directory tree, deepest first.
    pub fn remove_tree(&mut self, path: &str) -> std::io::Result<()> {
        let prefix = format!("{path}/");
        let mut below: Vec<String> = self.ns.by_path.keys().filter(|p| p.starts_with(&prefix)).cloned().collect();
        below.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
        for p in below {
            let is_dir = self.ns.by_path.get(&p).and_then(|f| self.ns.by_fid.get(f)).is_some_and(|o| o.is_dir);
            if is_dir {
                self.rmdir(&p)?;
            } else {
                self.unlink(&p)?;
            }
        }
        self.rmdir(path)
    }

    /// Rename (over an existing target when there is one).
    pub fn rename(&mut self, from: &str, to: &str) -> std::io::Result<()> {
        let (sp, sname) = split(from);
        let (p, name) = split(to);
        let src = self.fid(from);
        let over = self.ns.by_path.get(to).copied().unwrap_or_default();
        if over == src {
            // Two links to the same file: rename(2) does nothing, and Lustre records nothing.
            return if self.real { fs::rename(self.real(from), self.real(to)) } else { Ok(()) };
        }
        let last = !over.is_zero() && self.ns.by_fid.get(&over).is_some_and(|o| o.paths.len() <= 1);
        if self.real {
            fs::rename(self.real(from), self.real(to))?;
        }
        let (pf, spf) = (self.fid(&p), self.fid(&sp));
        self.record(
            "RENME",
            if last { CLF_LAST } else { 0 },
            over,
            Some(pf),
            Some(&name),
            Some((src, spf, sname)),
            None,
        )
    }

    /// A hard link.
    pub fn hardlink(&mut self, existing: &str, new: &str) -> std::io::Result<()> {
        let (p, name) = split(new);
        if self.real {
            fs::hard_link(self.real(existing), self.real(new))?;
        }
        let (fid, pf) = (self.fid(existing), self.fid(&p));
        self.record("HLINK", 0, fid, Some(pf), Some(&name), None, None)
    }

    /// A symbolic link.
    pub fn symlink(&mut self, target: &str, new: &str) -> std::io::Result<()> {
        let (p, name) = split(new);
        if self.real {
            std::os::unix::fs::symlink(target, self.real(new))?;
        }
        let pf = self.fid(&p);
        let fid = self.mint_in(&pf, &name);
        self.record("SLINK", 0, fid, Some(pf), Some(&name), None, None)
    }

    /// chmod.
    pub fn chmod(&mut self, path: &str, mode: u32) -> std::io::Result<()> {
        if self.real {
            fs::set_permissions(self.real(path), fs::Permissions::from_mode(mode))?;
        }
        let fid = self.fid(path);
        self.record("SATTR", 0x14, fid, None, None, None, None)
    }

    /// chown (needs privileges; without them it changes nothing and journals nothing).
    pub fn chown(&mut self, path: &str, uid: u32, gid: u32) -> std::io::Result<()> {
        if self.real && std::os::unix::fs::lchown(self.real(path), Some(uid), Some(gid)).is_err() {
            return Ok(());
        }
        let fid = self.fid(path);
        self.record("SATTR", 0x64, fid, None, None, None, None)
    }

    /// truncate.
    pub fn truncate(&mut self, path: &str, size: u64) -> std::io::Result<()> {
        if self.real {
            fs::OpenOptions::new().write(true).open(self.real(path))?.set_len(size)?;
        }
        let fid = self.fid(path);
        self.record("TRUNC", 0xe, fid, None, None, None, None)
    }

    fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .ns
            .by_path
            .iter()
            .filter(|(_, f)| self.ns.by_fid.get(f).is_some_and(|o| !o.is_dir))
            .map(|(p, _)| p.clone())
            .collect();
        v.sort();
        if self.real {
            v.retain(|p| fs::symlink_metadata(self.real(p)).map(|m| m.is_file()).unwrap_or(false));
        }
        v
    }

    fn dirs(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .ns
            .by_path
            .iter()
            .filter(|(_, f)| self.ns.by_fid.get(f).is_some_and(|o| o.is_dir))
            .map(|(p, _)| p.clone())
            .collect();
        v.sort();
        v
    }

    /// Run `ops` operations of `kind` under `base` (created if missing).
    pub fn run(&mut self, kind: Kind, ops: usize, base: &str) -> std::io::Result<()> {
        if !self.ns.by_path.contains_key(base) {
            self.mkdir(base)?;
        }
        match kind {
            Kind::EvalOut => self.eval_out(ops, base)?,
            Kind::EvalPerf => self.eval_perf(ops, base)?,
            Kind::Filebench => self.filebench(ops, base)?,
            Kind::Mixed => self.mixed(ops, base)?,
        }
        if let Some(m) = self.mdts.as_mut() {
            m.flush()?;
        }
        self.journal.flush()
    }

    /// [`Kind::EvalOut`], in rounds of six operations.
    fn eval_out(&mut self, ops: usize, base: &str) -> std::io::Result<()> {
        for _ in 0..ops.div_ceil(6) {
            let f = join(base, &self.unique("out-"));
            self.create(&f, 100)?;
            self.append(&f, 50)?;
            let g = format!("{f}.renamed");
            self.rename(&f, &g)?;
            let d = join(base, &self.unique("dir-"));
            self.mkdir(&d)?;
            let inside = join(&d, "moved file");
            self.rename(&g, &inside)?;
            self.remove_tree(&d)?;
        }
        Ok(())
    }

    /// [`Kind::EvalPerf`], in rounds of three operations.
    fn eval_perf(&mut self, ops: usize, base: &str) -> std::io::Result<()> {
        for _ in 0..ops.div_ceil(3) {
            let f = join(base, &self.unique("perf-"));
            self.create(&f, 64)?;
            self.append(&f, 64)?;
            self.unlink(&f)?;
        }
        Ok(())
    }

    /// [`Kind::Filebench`].
    fn filebench(&mut self, ops: usize, base: &str) -> std::io::Result<()> {
        // Pre-populate (width 20, mean depth ~3.6), then open-read-close.
        let nfiles = (ops / 4).max(20);
        let mut dirs = vec![base.to_string()];
        let ndirs = (nfiles / 20).max(1);
        for i in 0..ndirs {
            let parent = dirs[self.rng.below(dirs.len() as u64) as usize].clone();
            let d = join(&parent, &format!("fb{i}"));
            self.mkdir(&d)?;
            dirs.push(d);
        }
        let mut files = Vec::new();
        for i in 0..nfiles {
            let d = dirs[self.rng.below(dirs.len() as u64) as usize].clone();
            let f = join(&d, &format!("file{i}"));
            let size = self.rng.gamma(1.5, 16_384.0 / 1.5) as usize;
            self.create(&f, size.min(1 << 20))?;
            files.push(f);
        }
        for _ in 0..ops.saturating_sub(nfiles * 3) / 2 {
            let f = files[self.rng.below(files.len() as u64) as usize].clone();
            self.read(&f)?;
        }
        Ok(())
    }

    /// [`Kind::Mixed`]: `ops` operations, each drawn against the current files and directories.
    fn mixed(&mut self, ops: usize, base: &str) -> std::io::Result<()> {
        let mut done = 0;
        while done < ops {
            let files = self.files();
            let dirs = self.dirs();
            let choice = self.rng.below(14);
            self.mixed_op(choice, base, &files, &dirs)?;
            done += 1;
        }
        Ok(())
    }

    /// Operation `choice` (0..14) of a mixed workload on `files` and `dirs`; one that does not
    /// apply to them does nothing.
    fn mixed_op(&mut self, choice: u64, base: &str, files: &[String], dirs: &[String]) -> std::io::Result<()> {
        match choice {
            0 | 1 => {
                let d = pick(&mut self.rng, dirs);
                // Now and then a Latin-1 name (not UTF-8: `café`), as text the way every
                // source writes it; GPFS events have no known way to carry one.
                let stem = if self.gpfs.is_none() && self.rng.below(5) == 0 { "caf\\xe9 " } else { "m file " };
                let f = join(&d, &self.unique(stem));
                let n = 10 + self.rng.below(3000) as usize;
                self.create(&f, n)
            }
            2 => {
                let d = pick(&mut self.rng, dirs);
                let n = join(&d, &self.unique("mdir"));
                self.mkdir(&n)
            }
            3 if !files.is_empty() => {
                let f = pick(&mut self.rng, files);
                self.append(&f, 100)
            }
            4 if !files.is_empty() => {
                let f = pick(&mut self.rng, files);
                let m = [0o600, 0o640, 0o755, 0o644][self.rng.below(4) as usize];
                self.chmod(&f, m)
            }
            5 if !files.is_empty() => {
                let f = pick(&mut self.rng, files);
                let (u, g) = (1000 + self.rng.below(3) as u32, 100 + self.rng.below(2) as u32);
                self.chown(&f, u, g)
            }
            6 if !files.is_empty() => {
                let f = pick(&mut self.rng, files);
                let n = self.rng.below(100);
                self.truncate(&f, n)
            }
            7 if !files.is_empty() => {
                let f = pick(&mut self.rng, files);
                self.unlink(&f)
            }
            8 if !files.is_empty() => {
                // Rename to a new name in another directory.
                let f = pick(&mut self.rng, files);
                let d = pick(&mut self.rng, dirs);
                let to = join(&d, &self.unique("moved "));
                self.rename(&f, &to)
            }
            9 if files.len() >= 2 => {
                // Rename over an existing file.
                let a = pick(&mut self.rng, files);
                let b = pick(&mut self.rng, files);
                if a != b {
                    self.rename(&a, &b)
                } else {
                    Ok(())
                }
            }
            10 if !files.is_empty() => {
                let f = pick(&mut self.rng, files);
                let d = pick(&mut self.rng, dirs);
                let to = join(&d, &self.unique("hard "));
                self.hardlink(&f, &to)
            }
            11 => {
                let d = pick(&mut self.rng, dirs);
                let to = join(&d, &self.unique("sym "));
                self.symlink("../somewhere/else", &to)
            }
            12 if dirs.len() > 2 => {
                // Rename a directory (with everything below it) into another one.
                let d = pick(&mut self.rng, dirs);
                let to_parent = pick(&mut self.rng, dirs);
                if d == "/" || d == base || to_parent.starts_with(&format!("{d}/")) || to_parent == d {
                    Ok(())
                } else {
                    let to = join(&to_parent, &self.unique("rdir "));
                    self.rename(&d, &to)
                }
            }
            13 if !files.is_empty() => {
                let f = pick(&mut self.rng, files);
                self.read(&f)
            }
            _ => Ok(()),
        }
    }
}

impl Workload {
    /// Write `<journal>.fidmap`: every object's current path as `lfs fid2path <fsname>`
    /// prints it (`FID<TAB>relative/path`), for benchmarks that answer fid2path from a map.
    pub fn write_fid_map(&self) -> std::io::Result<()> {
        let mut lines: Vec<String> = self
            .ns
            .by_fid
            .iter()
            .filter_map(|(f, o)| {
                o.paths.first().map(|p| format!("{f}\t{}\n", if p == "/" { "/" } else { p.trim_start_matches('/') }))
            })
            .collect();
        lines.sort();
        fs::write(side(&self.journal_path, ".fidmap"), lines.concat())
    }
}
