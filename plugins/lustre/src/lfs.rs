//! `lfs` subprocess calls: the changelog read as a stream, `changelog_clear`, and a plain run
//! for `fid2path` and `path2fid`.
//!
//! A changelog read never passes an end index to `lfs`. `lfs changelog MDT START END` stops
//! at the first record past END (lustre-release `lustre/utils/lfs.c`, `lfs_changelog()`:
//! `if (endrec && rec->cr_index > endrec) break;`), and a real changelog starts wherever its
//! oldest retained record is (indexes in the millions or billions; everything below the
//! lowest index its users cleared is purged). A ranged read below that start prints nothing
//! and looks the same as a quiet changelog. So a read asks from START on and stops itself
//! after `max` lines (at the end of the record they end in) or at the first record past its
//! end, as `lfs changelog MDT START | head -n N` does (Icicle v0.4.0,
//! `src/icicle/lustre_source.py`).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use std::os::unix::process::CommandExt;

use crate::lfs_records::{read_records, Checks, Records, CHECKS_PER_READ};

/// `lfs` subprocess calls.
#[derive(Debug, Clone, Default)]
pub struct Lfs {
    /// The command and any leading arguments (`["lfs"]`, `["sudo", "lfs"]`).
    pub cmd: Vec<String>,
    /// Several MDTs of one namespace read as one changelog (`crate::dne`): `changelog` and
    /// `clear` then read and clear its sequence, whatever MDT they are given.
    pub merged: Option<std::sync::Arc<std::sync::Mutex<dyn SharedChangelog>>>,
}

/// One changelog made of several, read and cleared in place of one MDT's.
pub trait SharedChangelog: Send + std::fmt::Debug {
    /// Records from `start` on, at most `max` lines, none past `end`, numbered in one sequence.
    fn read(&mut self, start: u64, end: Option<u64>, max: u64) -> Result<ChangelogText, String>;
    /// Clear the sequence up to `to` for `user`.
    fn clear(&mut self, user: &str, to: u64) -> Result<(), String>;
    /// Records purged before they were read since the last call: (MDT, first, last).
    fn take_lost(&mut self) -> Vec<(String, u64, u64)>;
    /// Lines no record's, read from any MDT since the last call.
    fn take_rejected(&mut self) -> Vec<String>;
}

impl Lfs {
    /// The `lfs` command `cmd`, one MDT's changelog at a time.
    pub fn new(cmd: Vec<String>) -> Lfs {
        Lfs { cmd, merged: None }
    }

    fn merged(&self) -> Option<std::sync::MutexGuard<'_, dyn SharedChangelog + 'static>> {
        // A panic while holding it left the numbering as it was: still usable.
        self.merged.as_ref().map(|m| m.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// One changelog read: one record per line (names escaped, [`icicle_core::name`], so a
/// newline in a name reads `\x0a`), whether the read stopped early (the changelog may go on),
/// and lines that are no record's (escaped; `lfs` prints none).
#[derive(Debug, Default)]
pub struct ChangelogText {
    /// The records, one a line.
    pub text: String,
    /// The read stopped at its size limit: the changelog may go on.
    pub more: bool,
    /// Lines that are no record's.
    pub rejected: Vec<String>,
}

impl Lfs {
    fn spawn(&self, args: &[&str]) -> Result<(std::process::Child, std::thread::JoinHandle<Vec<u8>>), String> {
        let (prog, pre) = self.cmd.split_first().ok_or("empty lfs command")?;
        let mut child = Command::new(prog)
            .args(pre)
            .args(args)
            // Its own process group, so a kill reaches `lfs` behind `sudo` too.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running {prog}: {e}"))?;
        // Drained on its own so a chatty lfs never blocks on a full pipe.
        let mut err = child.stderr.take();
        let errors = std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(e) = err.as_mut() {
                let _ = e.read_to_end(&mut b);
            }
            b
        });
        Ok((child, errors))
    }

    /// Run one `lfs` command to its end.
    pub(crate) fn run(&self, args: &[&str]) -> Result<std::process::Output, String> {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        self.run_os(&args)
    }

    /// [`Lfs::run`] with arguments that may not be UTF-8 (paths on the mount).
    pub(crate) fn run_os(&self, args: &[&OsStr]) -> Result<std::process::Output, String> {
        let (prog, pre) = self.cmd.split_first().ok_or("empty lfs command")?;
        Command::new(prog)
            .args(pre)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {prog}: {e}"))
    }

    /// `lfs changelog MDT START`: records from `start` on, none with an index past `end`, and
    /// after `max` lines only the rest of the record they end in. Records span lines when
    /// names hold newlines ([`crate::lfs_records`]).
    pub fn changelog(&self, mdt: &str, start: u64, end: Option<u64>, max: u64) -> Result<ChangelogText, String> {
        if let Some(mut merged) = self.merged() {
            return merged.read(start, end, max);
        }
        let start_text = start.to_string();
        let (mut child, errors) = self.spawn(&["changelog", mdt, &start_text])?;
        let stdout = child.stdout.take().ok_or("lfs changelog: no standard output")?;
        let mut reader = BufReader::with_capacity(1 << 16, stdout);
        let mut checks = Checks::new(CHECKS_PER_READ);
        let mut verify = |j: u64, line: &[u8]| checks.check(j, line, &mut |from| self.first_line(mdt, from));
        let mut next_line = |buf: &mut Vec<u8>| reader.read_until(b'\n', buf);
        let outcome = read_records(&mut next_line, end, max, &mut verify);
        drop(reader);
        let eof = outcome.as_ref().is_ok_and(|r| r.eof);
        if !eof {
            // What is left is not wanted: lfs ends on the closed pipe or the signal.
            kill_group(&mut child);
        }
        let status = child.wait().map_err(|e| format!("waiting for lfs changelog {mdt}: {e}"));
        let err = String::from_utf8_lossy(&errors.join().unwrap_or_default()).trim().to_string();
        let Records { mut split, more, .. } = outcome.map_err(|e| format!("reading lfs changelog {mdt}: {e}"))?;
        if eof {
            let status = status?;
            if !status.success() {
                return Err(format!("lfs changelog {mdt} {start}: {err} ({status})"));
            }
            split.finish(&mut verify).map_err(|e| format!("checking lfs changelog {mdt}: {e}"))?;
        }
        let (text, rejected) = split.into_text();
        Ok(ChangelogText { text, more, rejected })
    }

    /// The first line `lfs changelog MDT INDEX` prints, if any.
    fn first_line(&self, mdt: &str, index: u64) -> Result<Option<Vec<u8>>, String> {
        let index_text = index.to_string();
        let (mut child, errors) = self.spawn(&["changelog", mdt, &index_text])?;
        let stdout = child.stdout.take().ok_or("lfs changelog: no standard output")?;
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        let read = reader.read_until(b'\n', &mut line);
        drop(reader);
        kill_group(&mut child);
        let status = child.wait().map_err(|e| format!("waiting for lfs changelog {mdt} {index}: {e}"))?;
        let err = String::from_utf8_lossy(&errors.join().unwrap_or_default()).trim().to_string();
        match read {
            Ok(0) if !status.success() => Err(format!("lfs changelog {mdt} {index}: {err} ({status})")),
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(line.strip_suffix(b"\n").unwrap_or(&line).to_vec())),
            Err(e) => Err(format!("reading lfs changelog {mdt} {index}: {e}")),
        }
    }

    /// `lfs changelog_clear MDT USER ENDREC` (inclusive; never called with 0, which clears
    /// every record).
    pub fn clear(&self, mdt: &str, user: &str, endrec: u64) -> Result<(), String> {
        if endrec == 0 {
            return Ok(());
        }
        if let Some(mut merged) = self.merged() {
            return merged.clear(user, endrec);
        }
        let out = self.run(&["changelog_clear", mdt, user, &endrec.to_string()])?;
        if !out.status.success() {
            return Err(format!(
                "lfs changelog_clear {mdt} {user} {endrec}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }
}

/// Files a `getstripe` or `project` call names at most.
pub use icicle_core::layout::GETSTRIPE_FILES;

impl Lfs {
    /// `lfs getstripe -v FILE...`: each file's storage attributes (FID, pool, stripe count,
    /// OSTs, layout), by the path as given ([`icicle_core::layout::getstripe_files`]).
    pub fn getstripe(
        &self,
        files: &[&std::path::Path],
    ) -> Result<(Vec<(std::path::PathBuf, icicle_core::record::Storage)>, u64), String> {
        icicle_core::layout::getstripe_files(&self.cmd, files)
    }
}

impl Lfs {
    /// `lfs project -d FILE...`: each file's project ID, by the path as given. `lfs` prints
    /// `%5u %c %s` (the ID, `P` when it is inherited by new files, the path: lustre-release
    /// `lustre/utils/lfs_project.c`, `project_list_one`); a file it could not read is missing
    /// from the answer and counted in the second value, as are paths holding a newline.
    pub fn project_ids(&self, files: &[&std::path::Path]) -> Result<(Vec<(std::path::PathBuf, u32)>, u64), String> {
        use std::os::unix::ffi::OsStrExt;
        let asked: Vec<&[u8]> =
            files.iter().map(|f| f.as_os_str().as_bytes()).filter(|f| !f.contains(&b'\n')).collect();
        let mut failed = (files.len() - asked.len()) as u64;
        let mut got = Vec::with_capacity(asked.len());
        for chunk in asked.chunks(GETSTRIPE_FILES) {
            let wanted: std::collections::HashSet<&[u8]> = chunk.iter().copied().collect();
            let mut args: Vec<&OsStr> = vec![OsStr::new("project"), OsStr::new("-d")];
            args.extend(chunk.iter().map(|b| OsStr::from_bytes(b)));
            let out = self.run_os(&args)?;
            let before = got.len();
            for line in out.stdout.split(|&b| b == b'\n') {
                let trimmed = line.trim_ascii_start();
                let digits = trimmed.iter().take_while(|b| b.is_ascii_digit()).count();
                let (id, rest) = trimmed.split_at(digits);
                // ` P /path` or ` - /path`.
                let path = match rest {
                    [b' ', b'P' | b'-', b' ', path @ ..] => path,
                    _ => continue,
                };
                let id = std::str::from_utf8(id).ok().and_then(|d| d.parse::<u32>().ok());
                if let (Some(id), true) = (id, wanted.contains(path)) {
                    got.push((std::path::PathBuf::from(OsStr::from_bytes(path)), id));
                }
            }
            failed += chunk.len().saturating_sub(got.len() - before) as u64;
        }
        Ok((got, failed))
    }
}

/// Kill a child spawned in its own process group, and everything in that group.
fn kill_group(child: &mut std::process::Child) {
    if let Ok(pgid) = i32::try_from(child.id()) {
        // SAFETY: killpg only sends a signal; the group is the child's own (`process_group(0)`).
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Lfs {
        Lfs::new(vec!["sh".into(), "-c".into(), script.into(), "lfs".into()])
    }

    #[test]
    fn a_read_stops_at_its_count_or_past_its_end() {
        // An lfs that prints records from 9345804 (or START, if later) for ever.
        let lfs = sh("i=$3; [ \"$i\" -lt 9345804 ] && i=9345804; while :; do echo \"$i 01CREAT 02:10:01.749034600 2026.03.16 0x0 t=[0x200000401:0x1:0x0] p=[0x200000007:0x1:0x0] f$i\"; i=$((i+1)); done");
        let got = lfs.changelog("fs0-MDT0000", 0, None, 5).unwrap();
        assert_eq!((got.text.lines().count(), got.more), (5, true));
        assert!(got.text.starts_with("9345804 01CREAT") && got.text.ends_with("f9345808\n"), "{}", got.text);
        let got = lfs.changelog("fs0-MDT0000", 0, Some(9345805), 100).unwrap();
        assert_eq!((got.text.lines().count(), got.more), (2, false), "{}", got.text);
    }

    #[test]
    fn a_record_forged_in_the_last_name_is_checked_with_lfs() {
        // Record 8's name is `x`, a newline, and a line shaped like record 2^64-1.
        let r7 = "7 01CREAT 02:10:01.749034600 2026.03.16 0x0 t=[0x200000401:0x7:0x0] p=[0x200000007:0x1:0x0] a";
        let r8 = "8 01CREAT 02:10:01.749034601 2026.03.16 0x0 t=[0x200000401:0x8:0x0] p=[0x200000007:0x1:0x0] x";
        let forged = "18446744073709551615 01CREAT 02:10:01.1 2026.03.16 0x0 t=[0x1:0x2:0x0] p=[0x1:0x1:0x0] y";
        let lfs = sh(&format!(
            "case $3 in [0-7]) printf '%s\\n' '{r7}' '{r8}' '{forged}';; 8) printf '%s\\n' '{r8}' '{forged}';; esac"
        ));
        let got = lfs.changelog("fs0-MDT0000", 0, None, 100).unwrap();
        assert_eq!(got.text, format!("{r7}\n{r8}\\x0a{forged}\n"));
        assert_eq!((got.text.lines().count(), got.more), (2, false));
    }

    #[test]
    fn project_ids_and_layouts_of_several_files_in_one_call() {
        use std::path::Path;
        // `lfs project -d`'s `%5u %c %s` lines; a file lfs could not read is left out.
        let lfs =
            sh("printf '%5u %c %s\\n' 1001 P /m/a 7 - '/m/b c'; echo \"lfs: failed to stat '/m/gone'\" >&2; exit 2");
        let (got, failed) = lfs.project_ids(&[Path::new("/m/a"), Path::new("/m/b c"), Path::new("/m/gone")]).unwrap();
        assert_eq!(got, vec![(Path::new("/m/a").to_path_buf(), 1001), (Path::new("/m/b c").to_path_buf(), 7)]);
        assert_eq!(failed, 1);
        let lfs = sh("printf '%s\\n' /m/a 'lmm_stripe_count:  1' 'lmm_stripe_size:   1048576' 'lmm_fid:           [0x200000401:0x1:0x0]' '\tobdidx\t\t objid\t\t objid\t\t group' '\t     5\t             9\t          0x9\t             0' ''");
        let (got, failed) = lfs.getstripe(&[Path::new("/m/a"), Path::new("/m/x\ny")]).unwrap();
        assert_eq!(failed, 1, "a name with a newline is not asked");
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].1.fid.as_deref(), got[0].1.osts.as_slice()), (Some("[0x200000401:0x1:0x0]"), &[5][..]));
    }

    #[test]
    fn names_that_are_not_utf8_are_escaped_and_failures_name_the_error() {
        let lfs = sh(
            r"printf '7 01CREAT 02:10:01.749034600 2026.03.16 0x0 t=[0x200000401:0x1:0x0] p=[0x200000007:0x1:0x0] caf\351.txt\n'",
        );
        let got = lfs.changelog("fs0-MDT0000", 0, None, 10).unwrap();
        assert!(got.text.ends_with("caf\\xe9.txt\n"), "{}", got.text);
        let lfs = sh("echo 'lfs changelog: Input/output error' >&2; exit 5");
        let err = lfs.changelog("fs0-MDT0000", 3, None, 10).unwrap_err();
        assert!(err.contains("Input/output error"), "{err}");
    }
}
