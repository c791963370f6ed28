//! Lustre DNE in the stand-in: one namespace over several MDTs, each MDT with a changelog of
//! its own, written by the rules docs/lustre-monitor.md ("Several MDTs of one file system")
//! derives from lustre-release (c881f8eb, v2_17_57-62):
//! - only the MDD of the MDT that runs an operation logs it, once (`mdd_changelog_store`,
//!   `mdd_changelog_ns_store`, `lustre/mdd/mdd_dir.c`); its FIDs may name objects elsewhere;
//! - a new directory's MKDIR is logged on the directory's MDT, `p=` possibly remote
//!   (`lmv_locate_tgt_create`, `mdt_create`, `mdd_create`); a file is created on its parent's
//!   MDT; UNLNK and RMDIR on the removed object's MDT (`lmv_unlink`, `mdd_unlink`); HLINK on
//!   the new name's parent's MDT (`mdd_link`); data and attribute records on the object's MDT;
//! - a rename is one RENME on the MDT of the replaced target when there is one, else of the
//!   target parent (`lmv_rename`, `mdt_reint_rename`), `s=`/`sp=` possibly remote;
//! - indexes are per MDT (`cr_index = ++mc_index` per device) and a record names no MDT;
//! - a striped directory (`lfs mkdir -c N`) has one MKDIR, for its master object, and a shard
//!   per stripe on its own MDT (none logged); an entry lives in the shard its name hashes to
//!   and is logged on that shard's MDT, with `p=` (and a rename's `sp=`) the shard's FID up to
//!   Lustre 2.15 and the master's from 2.16 (LU-10283, `mdd_changelog_ns_pfid_set`);
//!   `lfs fid2path` of a shard prints the striped directory's path (`mdt_path_current`).
//!
//! An object's MDT is the FID's sequence ([`FID_SEQ`] + the MDT's number), as each MDT
//! allocates FIDs from sequences of its own: "all files (objects) with FIDs from a given
//! sequence are stored on the same server" (`struct lu_fid`, lustre_idl.h), and the FID
//! Location Database maps each sequence range to its MDT (lustre/fld/fld_internal.h, LU-5153). The
//! workload's own journal keeps every record in the order performed (the namespace the fake
//! `lfs` answers `fid2path` from); `<journal>.mdtN` is MDT N's changelog, with its own indexes
//! and its own `.users` and `.purged`. A quarter of the new directories are striped over 2 to
//! N MDTs; `<journal>.shards` lists each shard's FID and its directory's (`SHARD<TAB>MASTER`),
//! which the fake `lfs` answers `fid2path` by; half the seeds print shard FIDs as 2.15 does.
//! The journal itself names the master (the namespace the stand-in keeps).

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use icicle_plugins_lustre::changelog::{ChangelogRecord, Fid, RecordType};

use super::{first_index, side, Workload, FID_SEQ};

/// `<journal>.mdtN`: MDT N's changelog.
pub fn mdt_journal(journal: &Path, mdt: u32) -> PathBuf {
    side(journal, &format!(".mdt{mdt}"))
}

/// The changelog the fake `lfs` reads for device `device` (`fs0-MDT0001`, or `MDT0001`): MDT
/// N's own when the workload writes one per MDT, else the journal itself.
pub fn journal_of_device(journal: &Path, device: &str) -> PathBuf {
    if !mdt_journal(journal, 0).exists() {
        return journal.to_path_buf();
    }
    // Device names end in the MDT's index, four hex digits (`lustre-MDT000a`).
    let n = device.rsplit_once("MDT").and_then(|(_, hex)| u32::from_str_radix(hex, 16).ok()).unwrap_or(0);
    mdt_journal(journal, n)
}

/// The MDT that holds `fid` (MDT 0 for the root and for FIDs of no MDT's sequence).
pub fn mdt_of(fid: &Fid, mdts: u32) -> u32 {
    match fid.seq.checked_sub(FID_SEQ) {
        Some(n) if n < mdts as u64 => n as u32,
        _ => 0,
    }
}

/// The MDT that logs `rec`.
pub fn logged_on(rec: &ChangelogRecord, mdts: u32) -> u32 {
    let parent = rec.parent.unwrap_or_default();
    match rec.kind {
        RecordType::Creat | RecordType::Mknod | RecordType::Slink | RecordType::Hlink => mdt_of(&parent, mdts),
        RecordType::Renme if rec.target.is_zero() => mdt_of(&parent, mdts),
        _ => mdt_of(&rec.target, mdts),
    }
}

/// Striped directories' shards, from `<journal>.shards`: shard FID → directory FID.
pub fn shards(journal: &Path) -> HashMap<Fid, Fid> {
    fs::read_to_string(side(journal, ".shards"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (shard, master) = l.split_once('\t')?;
            Some((Fid::parse(shard).ok()?, Fid::parse(master).ok()?))
        })
        .collect()
}

/// The shard of a directory striped over `shards` that holds `name` (a hash of the name; a
/// path's last component).
fn shard_for(shards: &[Fid], name: &str) -> Fid {
    let name = name.rsplit('/').next().unwrap_or(name);
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    shards[(h % shards.len() as u64) as usize]
}

/// The changelogs of several MDTs, each appended with indexes of its own, and the striped
/// directories.
pub struct MdtJournals {
    logs: Vec<(fs::File, u64)>,
    /// Directory FID → its shards.
    striped: HashMap<Fid, Vec<Fid>>,
    /// Print shard FIDs as `p=`/`sp=` (Lustre up to 2.15), else the directory's (2.16).
    shard_pfid: bool,
    shards_file: PathBuf,
}

impl MdtJournals {
    /// Open (or continue) `mdts` changelogs next to `journal`; a new one starts anywhere, as
    /// a real one does, with changelog user `cl1` registered at its start.
    pub fn open(journal: &Path, mdts: u32, seed: u64) -> std::io::Result<MdtJournals> {
        let mut logs = Vec::new();
        for n in 0..mdts {
            let path = mdt_journal(journal, n);
            let last = fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .rev()
                .find_map(|l| l.split(' ').next()?.parse::<u64>().ok());
            let next = match last {
                Some(i) => i + 1,
                None => {
                    let first = first_index(seed ^ (u64::from(n) << 40));
                    fs::write(side(&path, ".users"), format!("cl1 {}\n", first - 1))?;
                    first
                }
            };
            logs.push((fs::OpenOptions::new().create(true).append(true).open(&path)?, next));
        }
        let mut striped: HashMap<Fid, Vec<Fid>> = HashMap::new();
        let mut known: Vec<(Fid, Fid)> = shards(journal).into_iter().collect();
        known.sort_by_key(|(shard, _)| shard.oid);
        for (shard, master) in known {
            striped.entry(master).or_default().push(shard);
        }
        Ok(MdtJournals { logs, striped, shard_pfid: seed.is_multiple_of(2), shards_file: side(journal, ".shards") })
    }

    /// The shard of `dir` that holds `name`, when `dir` is striped.
    pub fn shard(&self, dir: &Fid, name: &str) -> Option<Fid> {
        self.striped.get(dir).map(|s| shard_for(s, name))
    }

    /// The MDT that logs `rec` (as performed: parents the directories, not their shards).
    pub fn logged_on(&self, rec: &ChangelogRecord) -> u32 {
        logged_on(&self.with_shards(rec), self.count())
    }

    /// `rec` with the shards of striped directories as its parents, as the shards' MDTs
    /// log it.
    fn with_shards(&self, rec: &ChangelogRecord) -> ChangelogRecord {
        let mut r = rec.clone();
        if let (Some(p), Some(name)) = (rec.parent, rec.name.as_deref()) {
            r.parent = Some(self.shard(&p, name).unwrap_or(p));
        }
        if let (Some(sp), Some(name)) = (rec.source_parent, rec.source_name.as_deref()) {
            r.source_parent = Some(self.shard(&sp, name).unwrap_or(sp));
        }
        r
    }

    /// How many MDTs.
    pub fn count(&self) -> u32 {
        self.logs.len() as u32
    }

    /// Append `rec` (as printed) to the changelog of the MDT that logs `logged` (the record
    /// as performed: the printed one may name paths instead of FIDs), numbered there.
    pub fn write(&mut self, logged: &ChangelogRecord, printed: &ChangelogRecord) -> std::io::Result<()> {
        let n = self.logged_on(logged) as usize;
        let mut rec = if self.shard_pfid { self.with_shards(printed) } else { printed.clone() };
        let (file, next) = &mut self.logs[n];
        rec.index = *next;
        *next += 1;
        let mut line = rec.to_line();
        line.push('\n');
        file.write_all(line.as_bytes())
    }

    /// Flush every changelog.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.logs.iter_mut().try_for_each(|(f, _)| f.flush())
    }
}

impl Workload {
    /// Spread the namespace over `mdts` MDTs (DNE), each with a changelog of its own next to
    /// the journal (`<journal>.mdtN`): half of the new directories, and of those that predate
    /// monitoring, go to a random MDT (`lfs mkdir -i N`), the rest to their parent's, and a
    /// quarter of the new ones are striped.
    pub fn set_mdts(&mut self, mdts: u32, seed: u64) -> std::io::Result<()> {
        if mdts > 1 {
            self.mdts = Some(MdtJournals::open(&self.journal_path, mdts, seed)?);
        }
        Ok(())
    }

    /// Print striped directories' shard FIDs as entries' parents (Lustre up to 2.15), or the
    /// directories' own (2.16 on); by default half the seeds do each.
    pub fn set_shard_pfid(&mut self, shards: bool) {
        if let Some(m) = self.mdts.as_mut() {
            m.shard_pfid = shards;
        }
    }

    /// The MDT a new directory `name` under `parent` goes to.
    pub(super) fn directory_mdt(&mut self, parent: &Fid, name: &str) -> u32 {
        let Some(m) = self.mdts.as_ref() else { return 0 };
        let (n, home) = (m.count(), m.shard(parent, name).unwrap_or(*parent));
        if self.rng.below(2) == 0 {
            self.rng.below(u64::from(n)) as u32
        } else {
            mdt_of(&home, n)
        }
    }

    /// A new FID for `name` in `parent`: on the MDT of the directory (or of its shard) that
    /// holds it, as files live there.
    pub(super) fn mint_in(&mut self, parent: &Fid, name: &str) -> Fid {
        let mdt = self.mdts.as_ref().map_or(0, |m| mdt_of(&m.shard(parent, name).unwrap_or(*parent), m.count()));
        self.mint_on(mdt)
    }

    /// A new directory `name` in `parent`: its FID, its shards minted and listed when it is
    /// striped.
    pub(super) fn new_directory(&mut self, parent: &Fid, name: &str) -> std::io::Result<Fid> {
        let mdt = self.directory_mdt(parent, name);
        let fid = self.mint_on(mdt);
        let Some(n) = self.mdts.as_ref().map(MdtJournals::count) else { return Ok(fid) };
        if self.rng.below(4) != 0 {
            return Ok(fid);
        }
        let stripes = 2 + self.rng.below(u64::from(n) - 1) as u32;
        let shards: Vec<Fid> = (0..stripes).map(|i| self.mint_on((mdt + i) % n)).collect();
        let lines: String = shards.iter().map(|s| format!("{s}\t{fid}\n")).collect();
        if let Some(m) = self.mdts.as_mut() {
            fs::OpenOptions::new().create(true).append(true).open(&m.shards_file)?.write_all(lines.as_bytes())?;
            m.striped.insert(fid, shards);
        }
        Ok(fid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(mdt: u64, oid: u32) -> Fid {
        Fid { seq: FID_SEQ + mdt, oid, ver: 0 }
    }

    fn rec(kind: RecordType, target: Fid, parent: Option<Fid>) -> ChangelogRecord {
        ChangelogRecord { kind, target, parent, ..ChangelogRecord::empty() }
    }

    #[test]
    fn each_record_is_logged_on_the_mdt_that_runs_its_operation() {
        let (on0, on1, dir1) = (fid(0, 5), fid(1, 6), fid(1, 7));
        // A file is created on its parent's MDT; a directory's MKDIR on its own MDT.
        assert_eq!(logged_on(&rec(RecordType::Creat, on0, Some(dir1)), 2), 1);
        assert_eq!(logged_on(&rec(RecordType::Mkdir, on1, Some(fid(0, 1))), 2), 1);
        assert_eq!(logged_on(&rec(RecordType::Unlnk, on0, Some(dir1)), 2), 0);
        assert_eq!(logged_on(&rec(RecordType::Close, on1, None), 2), 1);
        // A rename: the replaced target's MDT, else the target parent's.
        assert_eq!(logged_on(&rec(RecordType::Renme, Fid::default(), Some(dir1)), 2), 1);
        assert_eq!(logged_on(&rec(RecordType::Renme, on0, Some(dir1)), 2), 0);
        // The root and FIDs of no MDT's sequence are MDT 0's; so is everything with one MDT.
        assert_eq!(mdt_of(&Fid { seq: 0x2_0000_0007, oid: 1, ver: 0 }, 4), 0);
        assert_eq!(mdt_of(&fid(3, 1), 2), 0);
    }

    #[test]
    fn the_fake_lfs_reads_a_device_s_own_changelog() {
        let tmp = tempfile::tempdir().unwrap();
        let journal = tmp.path().join("changelog");
        assert_eq!(journal_of_device(&journal, "fs0-MDT0001"), journal);
        let logs = MdtJournals::open(&journal, 11, 1).unwrap();
        assert_eq!(logs.count(), 11);
        assert_eq!(journal_of_device(&journal, "fs0-MDT000a"), mdt_journal(&journal, 10));
        assert_eq!(journal_of_device(&journal, "lustre-MDT0000"), mdt_journal(&journal, 0));
    }
}
