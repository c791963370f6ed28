//! `icicle catalog`: a SwiftLoad catalog taken from an embedded index (or a running `icicle
//! serve`) instead of an LD_PRELOAD run — the seed's "pre-built catalog". Each primary record
//! under the given directories becomes an entry: its metadata as `lstat`/`stat` fields, and,
//! for a regular file, its layout (`storage.layout`, written by a walk or Lustre monitor with
//! `layout = true`) as the layout lines the catalog agent writes. The catalog is written in
//! the compact form swiftload maps directly.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use icicle_core::traits::LayoutComponent;
use icicle_plugins_index::search::Record;
use icicle_plugins_index::Filter;
use icicle_plugins_prism::catalog::compact::write_compact;
use icicle_plugins_prism::{Catalog, CatalogEntry, StatFields};

use crate::find::{mode_bits, Answers, Where};

/// `icicle catalog --out DIR [--index DIR | --server URL] [PATH...]`.
#[derive(clap::Args, Debug)]
pub struct CatalogArgs {
    #[command(flatten)]
    at: Where,
    /// The catalog directory to write (created if missing): `catalog.index.icat` in it, which
    /// `swiftload --catalog DIR` reads.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The directories whose files the catalog holds (default `/`): swiftload's `--input-dir`.
    #[arg(value_name = "PATH")]
    dirs: Vec<String>,
}

/// What a primary record's entry says of the file.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Content {
    path: String,
    #[serde(rename = "type")]
    kind: String,
    size: u64,
    uid: u32,
    gid: u32,
    raw: Raw,
    storage: Option<StorageOut>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Raw {
    mode: u64,
    atime: i64,
    ctime: i64,
    mtime: i64,
    inode: u64,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct StorageOut {
    layout: Vec<ComponentOut>,
}

/// One component of `storage.layout`; no `end` means to the end of the file.
#[derive(serde::Deserialize)]
struct ComponentOut {
    start: u64,
    end: Option<u64>,
    stripe_size: u64,
    osts: Vec<u32>,
}

/// How the index's entries became catalog entries.
#[derive(Default)]
struct Tally {
    files: u64,
    links: u64,
    without_layout: u64,
    special: u64,
    unrepresentable: u64,
    unreadable: u64,
}

/// The catalog entry of one stored GMetaEntry, or why there is none.
fn entry_of(bytes: &[u8], tally: &mut Tally) -> Option<CatalogEntry> {
    #[derive(serde::Deserialize)]
    struct E {
        content: Content,
    }
    let Ok(E { content: c }) = serde_json::from_slice::<E>(bytes) else {
        tally.unreadable += 1;
        return None;
    };
    // Escaped names (bytes that are not UTF-8) cannot be held by the catalog's text paths.
    let path = match std::str::from_utf8(&icicle_core::name::unescape(&c.path)) {
        Ok(p) if !p.is_empty() && !p.contains('\n') => p.to_string(),
        _ => {
            tally.unrepresentable += 1;
            return None;
        }
    };
    let link = c.kind == "link";
    let mut mode = u32::try_from(mode_bits(c.raw.mode)).unwrap_or(0);
    if mode & libc::S_IFMT == 0 {
        mode |= if link { libc::S_IFLNK } else { libc::S_IFREG };
    }
    let fields = StatFields {
        ino: c.raw.inode,
        mode,
        nlink: 1,
        uid: c.uid,
        gid: c.gid,
        size: c.size,
        blksize: 4096,
        blocks: c.size.div_ceil(512),
        atime: c.raw.atime,
        mtime: c.raw.mtime,
        ctime: c.raw.ctime,
        ..StatFields::default()
    };
    if link {
        tally.links += 1;
        return Some(CatalogEntry::new(path, fields, None, None));
    }
    let layout: Vec<LayoutComponent> = c
        .storage
        .unwrap_or_default()
        .layout
        .into_iter()
        .map(|k| LayoutComponent {
            start: k.start,
            end: k.end.unwrap_or(u64::MAX),
            stripe_size: k.stripe_size,
            osts: k.osts,
        })
        .collect();
    if !fields.is_regular() {
        tally.special += 1;
        return None;
    }
    if layout.is_empty() || layout.iter().any(|k| k.stripe_size == 0 || k.osts.is_empty()) {
        tally.without_layout += 1;
        return None;
    }
    tally.files += 1;
    Some(CatalogEntry::new(path, fields, Some(fields), Some(layout.as_slice())))
}

/// The directories to read, normalised, without those below another of them (a path under
/// two of the directories given is one entry, read once).
fn outermost(dirs: &[String]) -> anyhow::Result<Vec<String>> {
    let mut all = Vec::with_capacity(dirs.len());
    for dir in dirs {
        if !dir.starts_with('/') {
            bail!("{dir:?}: the index holds absolute paths; give the directory as one");
        }
        all.push(icicle_core::name::normalise(dir).into_owned());
    }
    let below = |d: &str, a: &str| d != a && (a == "/" || d.strip_prefix(a).is_some_and(|r| r.starts_with('/')));
    let kept: std::collections::BTreeSet<String> =
        all.iter().filter(|d| !all.iter().any(|a| below(d, a))).cloned().collect();
    Ok(kept.into_iter().collect())
}

/// `icicle catalog`.
pub fn main(cfg: &icicle_core::config::LoadedConfig, args: &CatalogArgs) -> anyhow::Result<ExitCode> {
    let answers = Answers::open(cfg, &args.at)?;
    let dirs = if args.dirs.is_empty() { vec!["/".to_string()] } else { args.dirs.clone() };
    let mut tally = Tally::default();
    let mut catalog = Catalog::default();
    for dir in outermost(&dirs)? {
        let filter = Filter { record: Some(Record::File), under: (dir != "/").then_some(dir), ..Filter::default() };
        answers.entries(&filter, None, |bytes| catalog.entries.extend(entry_of(bytes, &mut tally)))?;
    }
    if tally.files == 0 {
        bail!(
            "no regular file with a layout under {} in {} ({} without one: index them with `layout = true` on the walk or Lustre source)",
            dirs.join(", "),
            answers.source(),
            tally.without_layout
        );
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("--out {}", args.out.display()))?;
    let out = args.out.join("catalog.index.icat");
    let counts = write_compact(&catalog, &out).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "{}: {} entries ({} files with layouts, {} links) from {}",
        out.display(),
        counts.entries,
        tally.files,
        tally.links,
        answers.source()
    );
    for (n, what) in [
        (tally.without_layout, "regular files without a layout in the index (not in the catalog)"),
        (tally.special, "special files (FIFOs, sockets, devices: nothing to read)"),
        (tally.unrepresentable, "paths the catalog cannot hold (not UTF-8, or a newline)"),
        (tally.unreadable, "entries that are not primary records"),
    ] {
        if n > 0 {
            eprintln!("icicle catalog: {n} {what}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(content: &str) -> String {
        format!(r#"{{"subject":"s","visible_to":["public"],"content":{content}}}"#)
    }

    #[test]
    fn records_become_entries_with_their_layout_lines() {
        let mut t = Tally::default();
        let file = entry(
            r#"{"path":"/l/a","type":"file","size":5242880,"uid":7,"gid":8,"raw":{"mode":100644,"atime":1,"ctime":3,"mtime":2,"inode":77},"storage":{"osts":[86,105],"layout":[{"start":0,"end":4194304,"stripe_size":1048576,"osts":[86]},{"start":4194304,"stripe_size":1048576,"osts":[105,231]}]}}"#,
        );
        let e = entry_of(file.as_bytes(), &mut t).unwrap();
        assert_eq!((e.path.as_str(), e.lstat.ino, e.lstat.mode, e.lstat.size), ("/l/a", 77, 0o100644, 5_242_880));
        assert_eq!((e.lstat.uid, e.lstat.gid, e.lstat.atime, e.lstat.mtime, e.lstat.ctime), (7, 8, 1, 2, 3));
        // Four 1 MiB stripes on OST 86, then the last MiB on 105 (231 holds nothing yet).
        let lines: Vec<(u32, u64, u64)> = e.layout.unwrap().iter().map(|l| (l.ost, l.start, l.end)).collect();
        assert_eq!(lines, vec![(86, 0, 4_194_304), (105, 4_194_304, 5_242_880), (231, 5_242_880, 5_242_880)]);
        // A link: no stat, no layout. A file without a layout, a non-UTF-8 name and a
        // document that is not a record are counted, not written.
        let link = entry(r#"{"path":"/l/k","type":"link","size":3,"raw":{"mode":120777}}"#);
        let e = entry_of(link.as_bytes(), &mut t).unwrap();
        assert_eq!((e.stat, e.layout), (None, None));
        assert!(entry_of(entry(r#"{"path":"/l/b","type":"file","size":1,"raw":{"mode":644}}"#).as_bytes(), &mut t)
            .is_none());
        let odd = entry(
            r#"{"path":"/l/\\xff","type":"file","raw":{"mode":100644},"storage":{"layout":[{"start":0,"stripe_size":1,"osts":[1]}]}}"#,
        );
        assert!(entry_of(odd.as_bytes(), &mut t).is_none());
        assert!(entry_of(b"[]", &mut t).is_none());
        // A FIFO is recorded as a file by its type bits only: nothing to read.
        assert!(entry_of(entry(r#"{"path":"/l/p","type":"file","raw":{"mode":10644}}"#).as_bytes(), &mut t).is_none());
        assert_eq!(
            (t.files, t.links, t.without_layout, t.unrepresentable, t.unreadable, t.special),
            (1, 1, 1, 1, 1, 1)
        );
    }

    #[test]
    fn directories_below_another_given_are_read_once() {
        let d = |v: &[&str]| outermost(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        assert_eq!(d(&["/a/b/", "/a", "/ab", "//a//c"]), vec!["/a", "/ab"]);
        assert_eq!(d(&["/x", "/"]), vec!["/"]);
        assert!(outermost(&["rel".to_string()]).is_err());
    }
}
