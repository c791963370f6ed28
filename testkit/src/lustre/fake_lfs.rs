//! The fake `lfs`: `changelog`, `changelog_clear`, `fid2path`, `path2fid` and `getstripe -v`
//! answered from a workload journal, as a real MDT and `lfs` answer them.
//!
//! What it keeps of the real producer (lustre-release `lustre/utils/lfs.c`, `lfs_changelog()`;
//! `lustre/mdd/mdd_device.c`, the changelog purge):
//! - a changelog holds only a retained range: records up to the lowest index every
//!   registered user cleared are purged, and so are records up to `<journal>.purged` (what
//!   garbage collection of an idle user, or an administrator, purged); the journal itself may
//!   start at any index (a real one starts in the millions or billions);
//! - `changelog MDT START [END]` prints MDT's retained records (its own changelog when the
//!   workload spreads the namespace over several MDTs) from START on and stops at the
//!   first record past END (`if (endrec && rec->cr_index > endrec) break;`), so a range below
//!   the retained start prints nothing;
//! - records are printed as bytes: a name that is not UTF-8, or holds a newline, reaches the
//!   reader as it is (the journal holds one record a line, names escaped);
//! - `fid2path` prints one line per hard link (for a striped directory's shard, the
//!   directory's), relative to the root without a leading slash when given an fsname,
//!   `<mount>/<path>` when given the mount;
//! - `getstripe -v PATH...` prints each file's name, then its layout as
//!   `llapi_lov_dump_user_lmm` does (lustre-release `lustre/utils/liblustreapi.c`: `lmm_fid`,
//!   `lmm_pool` when the layout has one, the `obdidx` table, a blank line); a file that is
//!   gone is an error on stderr and the exit status, the others are printed. The layout is
//!   [`layout_of`] the file's FID, so it follows the file through renames;
//! - `project -d PATH...` prints `%5u %c %s` per file (lustre-release
//!   `lustre/utils/lfs_project.c`, `project_list_one`), the ID [`project_of`] its FID.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use icicle_plugins_lustre::changelog::Fid;
use icicle_plugins_lustre::namespace::Namespace;

use super::side;

/// `<journal>.users` as (user, cleared index).
fn read_users(journal: &Path) -> Vec<(String, u64)> {
    fs::read_to_string(side(journal, ".users"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

/// Purge every record up to `upto` (inclusive), as changelog garbage collection does: the
/// records are gone whatever the users cleared.
pub fn purge(journal: &Path, upto: u64) -> std::io::Result<()> {
    let now = purged_upto(journal);
    fs::write(side(journal, ".purged"), format!("{}\n", now.max(upto)))
}

fn purged_upto(journal: &Path) -> u64 {
    fs::read_to_string(side(journal, ".purged")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// The journal's complete lines (a writer may be appending the last one right now).
fn complete_lines(journal: &Path) -> Vec<u8> {
    let mut data = fs::read(journal).unwrap_or_default();
    let keep = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    data.truncate(keep);
    data
}

/// A journal line (one record, names escaped) as lfs prints it: the names' bytes, newlines
/// included. A line that is not UTF-8 (a test's poison) is printed as it is.
fn record_bytes(line: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match std::str::from_utf8(line) {
        Ok(text) => icicle_core::name::unescape(text),
        Err(_) => line.into(),
    }
}

fn leading_index(line: &[u8]) -> Option<u64> {
    let n = line.iter().position(|&b| b == b' ')?;
    std::str::from_utf8(&line[..n]).ok()?.parse().ok()
}

/// `changelog MDT [START [END]]`: the retained records from START on, up to END.
fn changelog(journal: &Path, rest: &[&OsStr]) -> (i32, Vec<u8>, String) {
    let num = |i: usize| rest.get(i).and_then(|s| s.to_str()).and_then(|s| s.parse::<u64>().ok());
    let (start, end) = (num(0).unwrap_or(0), num(1).filter(|e| *e > 0));
    // Records cleared by every user, or purged, are gone.
    let cleared = read_users(journal).iter().map(|(_, c)| *c).min().unwrap_or(0);
    let first_kept = cleared.max(purged_upto(journal)) + 1;
    let data = complete_lines(journal);
    let mut out = Vec::new();
    for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let Some(idx) = leading_index(line) else { continue };
        if idx < first_kept || idx < start {
            continue;
        }
        if end.is_some_and(|e| idx > e) {
            break;
        }
        out.extend_from_slice(&record_bytes(line));
        out.push(b'\n');
    }
    (0, out, String::new())
}

/// `changelog_clear MDT USER ENDREC`: inclusive; 0 clears every record. As lfs 2.10–2.17.0
/// answer (lustre/utils/lfs.c `lfs_changelog_clear`, lustre/mdd/mdd_device.c
/// `mdd_changelog_clear`): an ENDREC past the last record, or below what the user already
/// cleared, is EINVAL ("record out of range"); an unknown user ENOENT.
fn changelog_clear(journal: &Path, user: &str, endrec: &str) -> (i32, Vec<u8>, String) {
    let Ok(endrec) = endrec.parse::<u64>() else {
        return (22, Vec::new(), format!("changelog_clear: bad endrec '{endrec}'\n"));
    };
    let last = complete_lines(journal).split(|&b| b == b'\n').rev().find_map(leading_index).unwrap_or(0);
    let mut users = read_users(journal);
    let Some(u) = users.iter_mut().find(|(n, _)| n == user) else {
        return (2, Vec::new(), format!("changelog_clear: no changelog user: {user}\n"));
    };
    if endrec > last || (endrec != 0 && endrec < u.1) {
        return (22, Vec::new(), format!("changelog_clear: record out of range: {endrec}\n"));
    }
    u.1 = u.1.max(if endrec == 0 { last } else { endrec });
    let text: String = users.iter().map(|(n, c)| format!("{n} {c}\n")).collect();
    // Replaced whole (not fsync'ed: a stand-in's bookkeeping, rewritten on every clear).
    let staged =
        icicle_core::durable::stage(&side(journal, ".users"), false, |w| std::io::Write::write_all(w, text.as_bytes()));
    if staged.and_then(|s| s.commit(false)).is_err() {
        return (5, Vec::new(), "lfs changelog_clear: I/O error\n".into());
    }
    (0, Vec::new(), String::new())
}

/// `fid2path ROOT FID`: one line per link, names as bytes.
fn fid2path(journal: &Path, mount: Option<&Path>, root: &OsStr, fid: &str) -> (i32, Vec<u8>, String) {
    let Ok(f) = Fid::parse(fid) else { return (22, Vec::new(), format!("lfs fid2path: invalid FID '{fid}'\n")) };
    let ns = Namespace::load(&side(journal, ".baseline"), journal).unwrap_or_default();
    // A striped directory's shard: the directory's path (`mdt_path_current`).
    let f = super::shards(journal).get(&f).copied().unwrap_or(f);
    let paths = ns.by_fid.get(&f).map(|o| o.paths.clone()).unwrap_or_default();
    if paths.is_empty() {
        return (2, Vec::new(), format!("lfs fid2path: cannot find '{fid}': No such file or directory\n"));
    }
    let root_b = root.as_bytes();
    let is_mount = mount.is_some_and(|m| Path::new(root) == m) || root_b.starts_with(b"/");
    let mut out = Vec::new();
    for p in &paths {
        let rel = icicle_core::name::unescape(p.trim_start_matches('/'));
        match (is_mount, rel.is_empty()) {
            (false, true) => out.push(b'/'),
            (false, false) => out.extend_from_slice(&rel),
            (true, _) => {
                out.extend_from_slice(root_b.strip_suffix(b"/").unwrap_or(root_b));
                out.push(b'/');
                out.extend_from_slice(&rel);
            }
        }
        out.push(b'\n');
    }
    (0, out, String::new())
}

/// `path2fid PATH`.
fn path2fid(journal: &Path, mount: Option<&Path>, path: &OsStr) -> (i32, Vec<u8>, String) {
    let ns = Namespace::load(&side(journal, ".baseline"), journal).unwrap_or_default();
    let p = Path::new(path);
    let text = icicle_core::name::from_os(p).into_owned();
    let rel = match mount.map(|m| p.strip_prefix(m)) {
        Some(Ok(r)) => format!("/{}", icicle_core::name::from_os(r)),
        _ => text.clone(),
    };
    let rel = icicle_core::name::normalise(&rel).into_owned();
    match ns.by_path.get(&rel) {
        Some(f) => (0, format!("{f}\n").into_bytes(), String::new()),
        None => (2, Vec::new(), format!("lfs path2fid: can't get fid for {}: No such file or directory\n", text)),
    }
}

/// OST indexes files are striped over (sparse, as on a real file system).
pub const OSTS: [u32; 8] = [0, 3, 5, 17, 22, 40, 41, 63];

/// The stand-in's layout of the file `fid`: (pool, stripe size, OSTs), 1 to 4 stripes picked
/// from [`OSTS`] by the FID; one file in three is in pool `flash`.
pub fn layout_of(fid: &Fid) -> (Option<&'static str>, u64, Vec<u32>) {
    let h = (u64::from(fid.oid)).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ fid.seq.rotate_left(17);
    let count = 1 + (h >> 60) as usize % 4;
    let first = (h >> 8) as usize % OSTS.len();
    let osts = (0..count).map(|k| OSTS[(first + k * 3) % OSTS.len()]).collect();
    let pool = (h >> 32).is_multiple_of(3).then_some("flash");
    (pool, 1 << 20, osts)
}

/// The stand-in's project ID of the file `fid`: 0 (none) for one file in three, else 1001
/// or 1002.
pub fn project_of(fid: &Fid) -> u32 {
    [0, 1001, 1002][(fid.oid % 3) as usize]
}

/// The FID of `path` (on the mount, or relative to the file system) in `ns`.
fn fid_at<'n>(ns: &'n Namespace, mount: Option<&Path>, p: &Path) -> Option<&'n Fid> {
    let rel = match mount.map(|m| p.strip_prefix(m)) {
        Some(Ok(r)) => format!("/{}", icicle_core::name::from_os(r)),
        _ => icicle_core::name::from_os(p).into_owned(),
    };
    ns.by_path.get(&*icicle_core::name::normalise(&rel))
}

/// `project -d PATH...`.
fn project(journal: &Path, mount: Option<&Path>, paths: &[&OsStr]) -> (i32, Vec<u8>, String) {
    let ns = Namespace::load(&side(journal, ".baseline"), journal).unwrap_or_default();
    let (mut out, mut err, mut code) = (Vec::new(), String::new(), 0);
    for path in paths {
        let p = Path::new(path);
        match fid_at(&ns, mount, p) {
            Some(fid) => {
                out.extend_from_slice(format!("{:5} - ", project_of(fid)).as_bytes());
                out.extend_from_slice(path.as_bytes());
                out.push(b'\n');
            }
            None => {
                err.push_str(&format!("lfs: failed to stat '{}': No such file or directory\n", p.display()));
                code = 2;
            }
        }
    }
    (code, out, err)
}

/// `getstripe -v PATH...`.
fn getstripe(journal: &Path, mount: Option<&Path>, paths: &[&OsStr]) -> (i32, Vec<u8>, String) {
    let ns = Namespace::load(&side(journal, ".baseline"), journal).unwrap_or_default();
    let (mut out, mut err, mut code) = (Vec::new(), String::new(), 0);
    for path in paths {
        let p = Path::new(path);
        let Some(fid) = fid_at(&ns, mount, p) else {
            err.push_str(&format!("lfs getstripe: cannot open '{}': No such file or directory (2)\n", p.display()));
            code = 2;
            continue;
        };
        let (pool, size, osts) = layout_of(fid);
        out.extend_from_slice(path.as_bytes());
        let mut t = format!(
            "\nlmm_magic:         0x0BD{}0BD0\nlmm_seq:           {:#x}\nlmm_object_id:     {:#x}\nlmm_fid:           {fid}\nlmm_stripe_count:  {}\nlmm_stripe_size:   {size}\nlmm_pattern:       raid0\nlmm_layout_gen:    0\nlmm_stripe_offset: {}\n",
            // LOV_USER_MAGIC_V3 (with a pool name) or _V1 (lustre_user.h).
            if pool.is_some() { 3 } else { 1 },
            fid.seq,
            fid.oid,
            osts.len(),
            osts[0],
        );
        if let Some(pool) = pool {
            t.push_str(&format!("lmm_pool:          {pool}\n"));
        }
        t.push_str("\tobdidx\t\t objid\t\t objid\t\t group\n");
        for (k, o) in osts.iter().enumerate() {
            let objid = u64::from(fid.oid) * 4 + k as u64;
            t.push_str(&format!(
                "\t{o:6}\t{objid:14}\t{objid:#14x}\t{:#14x}\n",
                0x2_8000_0400u64 + u64::from(*o) * 0x4_0000
            ));
        }
        t.push('\n');
        out.extend_from_slice(t.as_bytes());
    }
    (code, out, err)
}

/// Run one fake `lfs` command; returns (exit code, stdout, stderr).
pub fn fake_lfs(journal: &Path, mount: Option<&Path>, delay_ms: u64, args: &[OsString]) -> (i32, Vec<u8>, String) {
    let a: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
    let text = |i: usize| a.get(i).and_then(|s| s.to_str()).unwrap_or("");
    match (text(0), a.len()) {
        ("changelog", n) if n >= 2 => changelog(&super::journal_of_device(journal, text(1)), &a[2..]),
        ("changelog_clear", 4) => changelog_clear(&super::journal_of_device(journal, text(1)), text(2), text(3)),
        ("fid2path", 3) => {
            std::thread::sleep(std::time::Duration::from_millis(delay_ms));
            fid2path(journal, mount, a[1], text(2))
        }
        ("path2fid", 2) => path2fid(journal, mount, a[1]),
        ("getstripe", n) if n >= 3 && text(1) == "-v" => getstripe(journal, mount, &a[2..]),
        ("project", n) if n >= 3 && text(1) == "-d" => project(journal, mount, &a[2..]),
        _ => (
            22,
            Vec::new(),
            format!(
                "lfs: unsupported command: {}\n",
                args.iter().map(|s| s.to_string_lossy()).collect::<Vec<_>>().join(" ")
            ),
        ),
    }
}
