//! `lfs` subprocess calls: the changelog read as a stream, `changelog_clear`, and a plain run
//! for `fid2path` and `path2fid`.
//!
//! A changelog read never passes an end index to `lfs`. `lfs changelog MDT START END` stops
//! at the first record past END (lustre-release `lustre/utils/lfs.c`, `lfs_changelog()`:
//! `if (endrec && rec->cr_index > endrec) break;`), and a real changelog starts wherever its
//! oldest retained record is (indexes in the millions or billions; everything below the
//! lowest index its users cleared is purged). A ranged read below that start prints nothing
//! and looks the same as a quiet changelog. So a read asks from START on and stops itself
//! after `max` lines or at the first record past its end, as `lfs changelog MDT START | head
//! -n N` does (Icicle v0.4.0, `src/icicle/lustre_source.py`).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

/// `lfs` subprocess calls.
pub struct Lfs {
    /// The command and any leading arguments (`["lfs"]`, `["sudo", "lfs"]`).
    pub cmd: Vec<String>,
}

/// One changelog read: its text (names escaped, [`icicle_core::name`]) and its line count.
#[derive(Debug, Default)]
pub struct ChangelogText {
    pub text: String,
    pub lines: u64,
}

impl Lfs {
    fn command(&self, args: &[&str]) -> Result<Command, String> {
        let (prog, pre) = self.cmd.split_first().ok_or("empty lfs command")?;
        let mut c = Command::new(prog);
        c.args(pre).args(args);
        Ok(c)
    }

    /// Run one `lfs` command to its end.
    pub(crate) fn run(&self, args: &[&str]) -> Result<std::process::Output, String> {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        self.run_os(&args)
    }

    /// [`Lfs::run`] with arguments that may not be UTF-8 (paths on the mount).
    pub(crate) fn run_os(&self, args: &[&OsStr]) -> Result<std::process::Output, String> {
        let (prog, pre) = self.cmd.split_first().ok_or("empty lfs command")?;
        Command::new(prog).args(pre).args(args).output().map_err(|e| format!("running {prog}: {e}"))
    }

    /// `lfs changelog MDT START`: at most `max` lines, none with an index past `end`. Each line
    /// is escaped on its own ([`icicle_core::name::escape`]): a name that is not UTF-8 keeps
    /// its bytes as `\xhh`.
    pub fn changelog(&self, mdt: &str, start: u64, end: Option<u64>, max: u64) -> Result<ChangelogText, String> {
        let start_text = start.to_string();
        let mut c = self.command(&["changelog", mdt, &start_text])?;
        let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("running {}: {e}", self.cmd[0]))?;
        let stdout = child.stdout.take().ok_or("lfs changelog: no standard output")?;
        let mut reader = BufReader::with_capacity(1 << 16, stdout);
        let mut out = ChangelogText::default();
        let mut line = Vec::with_capacity(256);
        let mut stopped = false;
        let mut failed = None;
        while out.lines < max {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    failed = Some(format!("reading lfs changelog {mdt}: {e}"));
                    break;
                }
            }
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            if end.is_some_and(|e| leading_index(body).is_some_and(|i| i > e)) {
                stopped = true;
                break;
            }
            icicle_core::name::escape_into(body, &mut out.text);
            out.text.push('\n');
            out.lines += 1;
        }
        stopped |= out.lines >= max;
        if stopped || failed.is_some() {
            // What is left is not wanted: lfs ends on the closed pipe or the signal.
            drop(reader);
            let _ = child.kill();
            let _ = child.wait();
            return failed.map_or(Ok(out), Err);
        }
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let mut b = Vec::new();
            let _ = e.read_to_end(&mut b);
            err = String::from_utf8_lossy(&b).trim().to_string();
        }
        let status = child.wait().map_err(|e| format!("waiting for lfs changelog {mdt}: {e}"))?;
        if !status.success() {
            return Err(format!("lfs changelog {mdt} {start}: {err} ({status})"));
        }
        Ok(out)
    }

    /// `lfs changelog_clear MDT USER ENDREC` (inclusive; never called with 0, which clears
    /// every record).
    pub fn clear(&self, mdt: &str, user: &str, endrec: u64) -> Result<(), String> {
        if endrec == 0 {
            return Ok(());
        }
        let out = self.run(&["changelog_clear", mdt, user, &endrec.to_string()])?;
        if !out.status.success() {
            return Err(format!("lfs changelog_clear {mdt} {user} {endrec}: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(())
    }
}

/// The index a changelog line starts with.
fn leading_index(line: &[u8]) -> Option<u64> {
    let n = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
    std::str::from_utf8(&line[..n]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Lfs {
        Lfs { cmd: vec!["sh".into(), "-c".into(), script.into(), "lfs".into()] }
    }

    #[test]
    fn a_read_stops_at_its_count_or_past_its_end() {
        // An lfs that prints records 9345804.. for ever: the read takes what it asked for.
        let lfs = sh("i=9345804; while :; do echo \"$i 01CREAT 02:10:01.749034600 2026.03.16 0x0 t=[0x200000401:0x1:0x0] p=[0x200000007:0x1:0x0] f$i\"; i=$((i+1)); done");
        let got = lfs.changelog("fs0-MDT0000", 0, None, 5).unwrap();
        assert_eq!(got.lines, 5);
        assert!(got.text.starts_with("9345804 01CREAT") && got.text.ends_with("f9345808\n"), "{}", got.text);
        let got = lfs.changelog("fs0-MDT0000", 0, Some(9345805), 100).unwrap();
        assert_eq!(got.lines, 2, "{}", got.text);
    }

    #[test]
    fn names_that_are_not_utf8_are_escaped_and_failures_name_the_error() {
        let lfs = sh(r"printf '7 01CREAT 02:10:01.749034600 2026.03.16 0x0 t=[0x200000401:0x1:0x0] p=[0x200000007:0x1:0x0] caf\351.txt\n'");
        let got = lfs.changelog("fs0-MDT0000", 0, None, 10).unwrap();
        assert!(got.text.ends_with("caf\\xe9.txt\n"), "{}", got.text);
        let lfs = sh("echo 'lfs changelog: Input/output error' >&2; exit 5");
        let err = lfs.changelog("fs0-MDT0000", 3, None, 10).unwrap_err();
        assert!(err.contains("Input/output error"), "{err}");
    }
}
