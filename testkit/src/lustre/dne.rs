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
//! - indexes are per MDT (`cr_index = ++mc_index` per device) and a record names no MDT.
//!
//! An object's MDT is the FID's sequence ([`FID_SEQ`] + the MDT's number), as each MDT
//! allocates FIDs from sequences of its own (the FLDB maps a sequence to its MDT). The
//! workload's own journal keeps every record in the order performed (the namespace the fake
//! `lfs` answers `fid2path` from); `<journal>.mdtN` is MDT N's changelog, with its own indexes
//! and its own `.users` and `.purged`. Striped directories are not modelled.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use icicle_plugins_lustre::changelog::{ChangelogRecord, Fid, RecordType};

use super::{first_index, side, FID_SEQ};

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

/// The changelogs of several MDTs, each appended with indexes of its own.
pub struct MdtJournals {
    logs: Vec<(fs::File, u64)>,
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
        Ok(MdtJournals { logs })
    }

    /// How many MDTs.
    pub fn count(&self) -> u32 {
        self.logs.len() as u32
    }

    /// Append `rec` (as printed) to the changelog of the MDT that logs `logged` (the record
    /// as performed: the printed one may name paths instead of FIDs), numbered there.
    pub fn write(&mut self, logged: &ChangelogRecord, printed: &ChangelogRecord) -> std::io::Result<()> {
        let n = logged_on(logged, self.count()) as usize;
        let (file, next) = &mut self.logs[n];
        let mut rec = printed.clone();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(mdt: u64, oid: u32) -> Fid {
        Fid { seq: FID_SEQ + mdt, oid, ver: 0 }
    }

    fn rec(kind: RecordType, target: Fid, parent: Option<Fid>) -> ChangelogRecord {
        ChangelogRecord {
            index: 1,
            kind,
            time: "02:46:59.747440330 2026.12.07".into(),
            flags: 0,
            target,
            jobid: None,
            extra_flags: None,
            uid_gid: None,
            nid: None,
            open_mode: None,
            xattr: None,
            parent,
            name: None,
            source: None,
            source_parent: None,
            source_name: None,
        }
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
