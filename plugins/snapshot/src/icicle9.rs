//! Writing Icicle's 9-column CSV (`type,mode,uid,gid,size,atime,ctime,mtime,path`, no header):
//! the format the `tsv` source reads with `preset = "icicle9"`, and what `icicle preprocess`
//! writes.
//!
//! The path is the last column and is `"`-quoted (inner `"` doubled) when it holds a `,` or a
//! `"`, as the seed's preprocessing and the counting pipeline's shard lines write it; the
//! reader takes everything after the eighth comma, so any other byte passes as it is, tabs
//! and non-ASCII text included. The path is written as the file system's bytes (the record's
//! text through [`icicle_core::name::unescape`]), so the reader, escaping them again, gives
//! the same text. A line break cannot pass: rows are lines (`\n`, and a `\r` before it is
//! dropped), so a name with `\n` or `\r` is refused.

use icicle_core::record::{FileKind, FileRecord};

/// Why a record cannot be written as an icicle9 row.
pub fn unrepresentable(rec: &FileRecord<'_>) -> Option<String> {
    let bytes = icicle_core::name::unescape(rec.path);
    let i = bytes.iter().position(|&b| b == b'\n' || b == b'\r')?;
    Some(format!("path {:?} has a line break at byte {i}: an icicle9 row is one line", rec.path))
}

/// Append `rec` as one icicle9 row, with its `\n`, to `out`. A path with a line break is
/// refused (see [`unrepresentable`]) and nothing is written.
pub fn write_row(rec: &FileRecord<'_>, out: &mut Vec<u8>) -> Result<(), String> {
    if let Some(why) = unrepresentable(rec) {
        return Err(why);
    }
    let a = &rec.attrs;
    out.push(match rec.kind {
        FileKind::File => b'f',
        FileKind::Link => b'l',
        FileKind::Dir => b'd',
    });
    let mut b = itoa::Buffer::new();
    for v in [a.mode as u64, a.uid as u64, a.gid as u64, a.size] {
        out.push(b',');
        out.extend_from_slice(b.format(v).as_bytes());
    }
    for v in [a.atime, a.ctime, a.mtime] {
        out.push(b',');
        out.extend_from_slice(b.format(v).as_bytes());
    }
    out.push(b',');
    let path = icicle_core::name::unescape(rec.path);
    if path.iter().any(|&b| b == b',' || b == b'"') {
        out.push(b'"');
        for part in path.split_inclusive(|&b| b == b'"') {
            out.extend_from_slice(part);
            if part.ends_with(b"\"") {
                out.push(b'"');
            }
        }
        out.push(b'"');
    } else {
        out.extend_from_slice(&path);
    }
    out.push(b'\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tsv::{Layout, Preset, Scratch};
    use icicle_core::Attrs;

    fn rec(path: &str, kind: FileKind, mode: u32) -> FileRecord<'_> {
        FileRecord {
            path,
            kind,
            attrs: Attrs {
                mode,
                uid: 1000,
                gid: 100,
                size: 42,
                atime: -5,
                ctime: 1_700_000_000,
                mtime: 13_569_465_600,
                inode: 0,
            },
            storage: None,
        }
    }

    #[test]
    fn rows_read_back_as_they_were_written() {
        let layout = Layout::preset(Preset::Icicle9);
        let paths = [
            "/fs/plain.txt",
            "/fs/a,b.txt",
            "/fs/\"quoted\"",
            "/fs/\"",
            "/fs/ends with quote\"",
            "/fs/,,\"\",",
            "/fs/tab\there",
            "/fs/ spaces /x ",
            "/fs/résumé/データ \u{2028} 🦀",
            "/fs/'single''",
            "/fs/percent%20",
            "/",
        ];
        for (i, p) in paths.iter().enumerate() {
            let kind = [FileKind::File, FileKind::Link, FileKind::Dir][i % 3];
            let r = rec(p, kind, kind.type_bits() | 0o4755);
            let mut line = Vec::new();
            write_row(&r, &mut line).unwrap();
            assert_eq!(line.iter().filter(|&&c| c == b'\n').count(), 1, "{p}");
            assert_eq!(line.last(), Some(&b'\n'));
            let mut s = Scratch::default();
            let back = layout
                .parse(&line[..line.len() - 1], &mut s)
                .unwrap_or_else(|e| panic!("{p}: {e}: {}", String::from_utf8_lossy(&line)));
            assert_eq!(back, r, "{}", String::from_utf8_lossy(&line));
        }
    }

    #[test]
    fn quoting_follows_the_seed() {
        let mut out = Vec::new();
        write_row(&rec("/a/b c", FileKind::File, 0o100644), &mut out).unwrap();
        write_row(&rec("/a/b,\"c\"", FileKind::Link, 0o120777), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "f,33188,1000,100,42,-5,1700000000,13569465600,/a/b c\nl,41471,1000,100,42,-5,1700000000,13569465600,\"/a/b,\"\"c\"\"\"\n"
        );
    }

    #[test]
    fn line_breaks_are_refused() {
        // Raw, or as a source escapes them (the file system's bytes are what counts).
        for p in ["/a/new\nline", "/a/carriage\r", "/a/\r\n", "/a/new\\x0aline", "/a/cr\\x0d"] {
            let mut out = b"kept".to_vec();
            let e = write_row(&rec(p, FileKind::File, 0o100644), &mut out).unwrap_err();
            assert!(e.contains("line break") && e.contains("icicle9"), "{e}");
            assert_eq!(out, b"kept");
        }
    }
}
