//! `lfs` commands (with retries), and resolution of FIDs to paths through `lfs fid2path` and
//! the mount: the directory tree's resolver, and FSMonitor-style resolution for comparisons.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::changelog::{ChangelogRecord, Fid};
use crate::tree::{Ops, PathOp, Resolver, TreeCounts};

/// Run `op` (an `lfs` call), retrying failures `retries` times with a growing pause.
pub(crate) async fn with_retries<T>(
    what: &str,
    mdt: &str,
    retries: u32,
    mut op: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let mut pause = Duration::from_millis(200);
    let mut attempt = 0;
    loop {
        match tokio::task::block_in_place(&mut op) {
            Ok(v) => return Ok(v),
            Err(e) if attempt < retries => {
                attempt += 1;
                tracing::warn!(message = "lfs call failed; retrying", what, mdt, attempt, retries, pause_secs = pause.as_secs_f64(), error = %e);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(10));
            }
            Err(e) => return Err(format!("{e} (after {attempt} retries)")),
        }
    }
}

/// FSMonitor-style resolution: every record's path from an LRU of FID → path, else
/// `fid2path`; no directory tree, no rename propagation.
pub(crate) fn fsmonitor_apply(
    rec: &ChangelogRecord,
    cache: &mut lru::LruCache<Fid, String>,
    r: &mut LfsResolver<'_>,
    counts: &mut TreeCounts,
    ops: &mut Ops,
) {
    use crate::changelog::RecordType::*;
    let mut resolve = |fid: Fid, cache: &mut lru::LruCache<Fid, String>| -> Option<String> {
        if fid == Fid::ROOT {
            return Some("/".into());
        }
        if let Some(p) = cache.get(&fid) {
            return Some(p.clone());
        }
        counts.fid2path_calls += 1;
        let p = r.fid2path(&fid);
        match &p {
            Some(p) => {
                cache.put(fid, p.clone());
            }
            None => counts.fid2path_failures += 1,
        }
        p
    };
    let child = |p: &str, n: &str| if p == "/" { format!("/{n}") } else { format!("{p}/{n}") };
    match rec.kind {
        Unlnk | Rmdir => {
            let path = cache.pop(&rec.target).or_else(|| match (rec.parent, rec.name.as_deref()) {
                (Some(p), Some(n)) => resolve(p, cache).map(|pp| child(&pp, n)),
                _ => None,
            });
            match path {
                Some(p) if rec.kind == Unlnk => {
                    ops.insert(p, PathOp::Delete);
                }
                Some(_) => {}
                None => counts.unresolved += 1,
            }
        }
        Renme => {
            let (Some(s), Some(sp), Some(sn)) = (rec.source, rec.source_parent, rec.source_name.as_deref()) else {
                return;
            };
            cache.pop(&s);
            let old = resolve(sp, cache).map(|pp| child(&pp, sn));
            let new = resolve(s, cache);
            if let Some(o) = old {
                ops.insert(o, PathOp::Delete);
            }
            match new {
                Some(n) => {
                    ops.insert(n, PathOp::Update);
                }
                None => counts.unresolved += 1,
            }
        }
        Mark | Open | Nopen | Gxatr | Mkdir | Unknown(..) => {}
        _ => match resolve(rec.target, cache) {
            Some(p) => {
                ops.insert(p, PathOp::Update);
            }
            None => counts.unresolved += 1,
        },
    }
}

pub use crate::lfs::Lfs;
pub use crate::lookahead::Lookahead;

/// Resolves through `lfs fid2path <fsname>` and the mounted file system.
pub struct LfsResolver<'a> {
    pub lfs: &'a Lfs,
    pub fsname: &'a str,
    pub mount: &'a Path,
    pub mdt: &'a str,
    pub lookahead: &'a mut Lookahead,
    /// Records per `lfs changelog` call when reading ahead.
    pub chunk: u64,
    /// The first `fid2path` that failed for another reason than the object being gone (EIO,
    /// a timeout, `lfs` missing): the batch is not applied, so nothing is acknowledged.
    pub failure: Option<String>,
}

impl LfsResolver<'_> {
    fn on_mount(&self, path: &str) -> PathBuf {
        icicle_core::name::on(self.mount, path)
    }
}

impl Resolver for LfsResolver<'_> {
    fn fid2path(&mut self, fid: &Fid) -> Option<String> {
        self.fid2path_all(fid).into_iter().next()
    }

    fn fid2path_all(&mut self, fid: &Fid) -> Vec<String> {
        // The answer may include renames appended since the last read-ahead.
        self.lookahead.stale = true;
        let asked = std::time::Instant::now();
        let answer = self.lfs.run(&["fid2path", self.fsname, &fid.to_string()]);
        icicle_core::metrics::Metrics::global().observe(
            &icicle_core::metrics::names::FID2PATH_DURATION_SECONDS,
            &[("mdt", self.mdt)],
            asked.elapsed().as_secs_f64(),
        );
        let out = match answer {
            Ok(out) => out,
            Err(e) => {
                self.failure.get_or_insert(e);
                return Vec::new();
            }
        };
        if !out.status.success() {
            // ENOENT (or ESTALE): the object is gone. Anything else is no answer at all.
            let err = String::from_utf8_lossy(&out.stderr);
            let gone = matches!(out.status.code(), Some(2 | 116))
                || err.contains("No such file or directory")
                || err.contains("Stale file handle");
            if !gone {
                self.failure
                    .get_or_insert_with(|| format!("lfs fid2path {fid} failed ({}): {}", out.status, err.trim()));
            }
            return Vec::new();
        }
        // One line per hard link; with an fsname, each relative to the root without a
        // leading slash. A name may end in spaces: only the line end is cut. Bytes that are
        // not UTF-8 are escaped as every source escapes them (icicle_core::name).
        out.stdout
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !l.is_empty())
            .map(icicle_core::name::escape)
            .map(|l| if l == "/" || l.is_empty() { "/".to_string() } else { format!("/{}", l.trim_start_matches('/')) })
            .collect()
    }

    fn is_dir(&mut self, path: &str) -> bool {
        self.kind(path).unwrap_or(false)
    }

    fn kind(&mut self, path: &str) -> Option<bool> {
        std::fs::symlink_metadata(self.on_mount(path)).ok().map(|m| m.is_dir())
    }

    fn walk(&mut self, path: &str) -> Vec<String> {
        // What the walk finds may include records appended since the last read-ahead.
        self.lookahead.stale = true;
        walk_files(&self.on_mount(path))
    }

    fn future_renames(&mut self, after: u64, name: &str) -> Vec<crate::lookahead::FutureRename> {
        self.read_ahead();
        self.lookahead.named(name, after)
    }

    fn path2fid(&mut self, path: &str) -> Option<Fid> {
        let full = self.on_mount(path);
        let out = self.lfs.run_os(&["path2fid".as_ref(), full.as_os_str()]).ok()?;
        if !out.status.success() {
            return None;
        }
        Fid::parse(String::from_utf8_lossy(&out.stdout).trim()).ok()
    }

    fn future_namings(&mut self, after: u64, name: &str) -> Vec<crate::lookahead::FutureNaming> {
        self.read_ahead();
        self.lookahead.namings(name, after)
    }

    fn future_place(&mut self, after: u64, fid: &Fid) -> Option<crate::lookahead::FuturePlace> {
        self.read_leavings();
        self.lookahead.place_of(fid, after)
    }

    fn read_position(&mut self) -> u64 {
        self.read_ahead();
        self.lookahead.read_upto
    }

    fn dir_by_later_records(&mut self, after: u64, fid: &Fid) -> bool {
        self.read_leavings();
        self.lookahead.is_dir(fid, after)
    }

    fn renamed_over_later(&mut self, after: u64, fid: &Fid) -> Option<Fid> {
        self.read_leavings();
        self.lookahead.renamed_over_by(fid, after)
    }

    fn batch_begins(&mut self, first: u64) {
        self.lookahead.next_batch(first);
    }
}

impl LfsResolver<'_> {
    /// Read ahead, keeping the records that take names away: the first time, those already
    /// read ahead and not applied are read again for them.
    fn read_leavings(&mut self) {
        if !self.lookahead.keeps_leavings() {
            self.lookahead.keep_leavings(true);
            let (mut start, end) = (self.lookahead.applied_before().max(1), self.lookahead.read_upto);
            let chunk = self.chunk.max(1);
            // `chunk` lines a call from where the last one ended (the changelog may start
            // far past `start`, or have gaps).
            while start <= end {
                match self.changelog(start, Some(end), chunk) {
                    Ok(t) => {
                        self.lookahead.add_leavings(&t.text);
                        let last =
                            crate::changelog::lines(t.text.trim_end()).last().and_then(crate::changelog::leading_index);
                        match last {
                            Some(l) if t.more && l >= start => start = l + 1,
                            _ => break,
                        }
                    }
                    Err(e) => {
                        self.lookahead.keep_leavings(false);
                        self.failure.get_or_insert_with(|| {
                            format!("lfs changelog {} (reading {start}..{end} again) failed: {e}", self.mdt)
                        });
                        return;
                    }
                }
            }
        }
        self.read_ahead();
    }

    /// `lfs changelog` from record `start` on: at most `max` lines, none past `end`; tried
    /// three times 200 ms apart (this runs inside a batch; the stream's own reads retry
    /// longer).
    fn changelog(&self, start: u64, end: Option<u64>, max: u64) -> Result<crate::lfs::ChangelogText, String> {
        let mut answer = self.lfs.changelog(self.mdt, start, end, max);
        for _ in 0..2 {
            if answer.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            answer = self.lfs.changelog(self.mdt, start, end, max);
        }
        answer
    }

    /// Read what was appended since the last read, once after each `fid2path` answer or walk:
    /// the answer reflects every operation made before it, and each of those has its record
    /// by now (Lustre writes a record with its operation). A read made before that answer
    /// could miss some. Read `chunk` records a call, from wherever the changelog goes on
    /// (records purged meanwhile are skipped, as the stream skips them).
    fn read_ahead(&mut self) {
        if !self.lookahead.stale {
            return;
        }
        self.lookahead.stale = false;
        let chunk = self.chunk.max(1);
        loop {
            let start = self.lookahead.read_upto + 1;
            let got = match self.changelog(start, None, chunk) {
                Ok(got) => got,
                Err(e) => {
                    // Paths and the rename log rely on what is read ahead: without it the
                    // batch is not applied (nothing delivered or acknowledged).
                    self.lookahead.stale = true;
                    self.failure.get_or_insert_with(|| {
                        format!("lfs changelog {} (reading ahead from {start}) failed: {e}", self.mdt)
                    });
                    break;
                }
            };
            let last = crate::changelog::lines(got.text.trim_end()).last().and_then(crate::changelog::leading_index);
            self.lookahead.push_text(&got.text, last);
            if !got.more || last.is_none_or(|l| l < start) {
                break;
            }
        }
    }
}

/// Every file and link below `dir` (relative paths, sorted); directories are descended.
pub(crate) fn walk_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let name = icicle_core::name::escape(e.file_name().as_encoded_bytes()).into_owned();
            let r = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push((e.path(), r)),
                Ok(_) => out.push(r),
                Err(_) => {}
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Resolver;

    #[test]
    fn fid2path_answers_keep_trailing_spaces_and_escape_what_is_not_utf8() {
        // A stand-in `lfs` that answers three links: a directory named `d ` (with a space),
        // one under it, and one that is not UTF-8 (escaped as every source escapes it).
        let lfs = Lfs::new(vec!["sh".into(), "-c".into(), r"printf 'd \nd /f\r\nbad\377\n'".into(), "lfs".into()]);
        let mut lookahead = Lookahead::new(0);
        let mut r = LfsResolver {
            lfs: &lfs,
            fsname: "fs0",
            mount: Path::new("/nonexistent"),
            mdt: "fs0-MDT0000",
            lookahead: &mut lookahead,
            chunk: 1,
            failure: None,
        };
        let fid = Fid { seq: 0x200000401, oid: 5, ver: 0 };
        assert_eq!(r.fid2path_all(&fid), ["/d ", "/d /f", "/bad\\xff"]);
        assert_eq!(r.failure, None);
    }

    #[test]
    fn a_fid2path_that_fails_for_another_reason_than_a_gone_object_is_a_failure() {
        let fid = Fid { seq: 0x200000401, oid: 5, ver: 0 };
        let answer = |script: &str| {
            let lfs = Lfs::new(vec!["sh".into(), "-c".into(), script.into(), "lfs".into()]);
            let mut lookahead = Lookahead::new(0);
            let mut r = LfsResolver {
                lfs: &lfs,
                fsname: "fs0",
                mount: Path::new("/nonexistent"),
                mdt: "fs0-MDT0000",
                lookahead: &mut lookahead,
                chunk: 1,
                failure: None,
            };
            let paths = r.fid2path_all(&fid);
            (paths, r.failure)
        };
        let (paths, failure) = answer("echo \"lfs fid2path: cannot find '$3': No such file or directory\" >&2; exit 2");
        assert!(paths.is_empty() && failure.is_none(), "gone: {failure:?}");
        let (paths, failure) = answer("echo 'lfs fid2path: error on FID: Input/output error' >&2; exit 5");
        assert!(paths.is_empty());
        assert!(failure.as_deref().is_some_and(|f| f.contains("Input/output error")), "{failure:?}");
        let lfs = Lfs::new(vec!["/nonexistent/lfs".into()]);
        let mut lookahead = Lookahead::new(0);
        let mut r = LfsResolver {
            lfs: &lfs,
            fsname: "fs0",
            mount: Path::new("/nonexistent"),
            mdt: "fs0-MDT0000",
            lookahead: &mut lookahead,
            chunk: 1,
            failure: None,
        };
        assert!(r.fid2path_all(&fid).is_empty() && r.failure.is_some(), "lfs missing");
    }

    #[test]
    fn a_read_ahead_that_fails_fails_the_batch() {
        let lfs = Lfs::new(vec![
            "sh".into(),
            "-c".into(),
            "echo 'lfs changelog: Input/output error' >&2; exit 5".into(),
            "lfs".into(),
        ]);
        let mut lookahead = Lookahead::new(7);
        let mut r = LfsResolver {
            lfs: &lfs,
            fsname: "fs0",
            mount: Path::new("/nonexistent"),
            mdt: "fs0-MDT0000",
            lookahead: &mut lookahead,
            chunk: 1,
            failure: None,
        };
        r.read_position();
        assert!(r.failure.as_deref().is_some_and(|f| f.contains("reading ahead from 8")), "{:?}", r.failure);
        assert!(r.lookahead.stale, "read again next time");
        // Reading again for a gone object's place fails the same way and keeps nothing half
        // built (built again next time).
        r.failure = None;
        assert_eq!(r.future_place(7, &Fid { seq: 0x200000401, oid: 2, ver: 0 }), None);
        assert!(r.failure.is_some() && !r.lookahead.keeps_leavings());
    }
}
