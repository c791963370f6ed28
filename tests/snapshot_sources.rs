//! Every snapshot source, fed the same generated file system, yields the same primary
//! records, equal to the generator's ground truth.

mod common;

use std::collections::BTreeMap;

use common::*;
use icicle_core::record::{mode_octal_as_int, mode_string, FileKind};
use icicle_core::time::iso8601;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};

const FILES: u64 = 3_000;

fn source_section(format: Format, data: &std::path::Path) -> String {
    let d = data.display();
    match format {
        Format::Tsv => format!("type = \"tsv\"\npaths = [\"{d}/*.csv\"]\npreset = \"icicle9\"\n"),
        Format::Pwalk => format!("type = \"tsv\"\npaths = [\"{d}/pwalk.csv\"]\npreset = \"pwalk\"\n"),
        Format::Ne2scan => format!("type = \"tsv\"\npaths = [\"{d}/fslist.ne2scan\"]\npreset = \"ne2scan\"\n"),
        Format::Mmapplypolicy => format!("type = \"mmapplypolicy\"\npaths = [\"{d}/list.allfiles\"]\n"),
        Format::Gufi => format!("type = \"gufi\"\nindex = \"{d}\"\n"),
        Format::Tree => format!("type = \"walk\"\nroot = \"{d}/tree\"\npath_prefix = \"/\"\n"),
    }
}

#[test]
fn all_sources_yield_the_ground_truth() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(FILES, 42));
    let truth = fs.records();
    let principals: BTreeMap<String, String> = fs
        .principals()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (format!("{}{}", f[0], f[1]), f[2].to_string())
        })
        .collect();
    for format in [Format::Tsv, Format::Pwalk, Format::Ne2scan, Format::Mmapplypolicy, Format::Gufi, Format::Tree] {
        let data = tmp.path().join(format!("{format:?}"));
        // Small text splits so that one file is read by several workers.
        gen::write(&fs, format, &data, 1_000, false).unwrap();
        let out = tmp.path().join(format!("{format:?}-out"));
        let cfg = config(
            tmp.path(),
            &format!("{format:?}.toml"),
            &format!(
                "[snapshot]\nworkers = 3\nsplit_bytes = 65536\nversion = \"gen-42\"\n[records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{}/principals.tsv\"\n[sources.s]\n{}[sinks.out]\ntype = \"file\"\ndir = \"{}\"\n",
                data.display(),
                source_section(format, &data),
                out.display()
            ),
        );
        let (code, summary, err) = snapshot(&cfg, &[]);
        assert_eq!(code, 0, "{format:?}: {err}");
        assert_eq!(summary["records"], FILES, "{format:?}: {summary}");
        assert_eq!(summary["rejects"], 0, "{format:?}: {summary}");
        assert_eq!(summary["rows"].as_u64().unwrap(), FILES + summary["directories"].as_u64().unwrap(), "{format:?}");
        let got = ingested(&out);
        assert_eq!(got.len(), truth.len(), "{format:?}");
        let mut tree_inodes = std::collections::HashSet::new();
        for t in &truth {
            let e = got.get(&t.path).unwrap_or_else(|| panic!("{format:?}: missing {}", t.path));
            let c = &e["content"];
            let subject = e["subject"].as_str().unwrap();
            if t.path.len() > 500 {
                assert!(subject.starts_with("icicle:sha256:"), "{subject}");
            } else {
                assert_eq!(subject, t.path);
            }
            assert_eq!(c["name"], t.path.rsplit('/').next().unwrap(), "{format:?}");
            assert_eq!(c["type"], if t.kind == FileKind::Link { "link" } else { "file" }, "{format:?} {}", t.path);
            assert_eq!(c["size"], t.attrs.size, "{format:?} {}", t.path);
            assert_eq!(c["uid"], t.attrs.uid, "{format:?} {}", t.path);
            assert_eq!(c["gid"], t.attrs.gid, "{format:?} {}", t.path);
            assert_eq!(
                c["mode"],
                String::from_utf8_lossy(&mode_string(t.attrs.mode)).as_ref(),
                "{format:?} {}",
                t.path
            );
            assert_eq!(c["raw"]["mode"], mode_octal_as_int(t.attrs.mode), "{format:?} {}", t.path);
            assert_eq!(c["mtime"], iso8601(t.attrs.mtime), "{format:?} {}", t.path);
            assert_eq!(c["raw"]["mtime"], t.attrs.mtime, "{format:?} {}", t.path);
            assert_eq!(c["raw"]["atime"], t.attrs.atime, "{format:?} {}", t.path);
            assert_eq!(c["atime"], iso8601(t.attrs.atime), "{format:?} {}", t.path);
            if format != Format::Tree {
                // A real tree's ctime is set by the kernel, not by the generator.
                assert_eq!(c["raw"]["ctime"], t.attrs.ctime, "{format:?} {}", t.path);
            }
            if format.has_inode() {
                assert_eq!(c["raw"]["inode"], t.attrs.inode, "{format:?} {}", t.path);
            } else if format == Format::Tree {
                // The kernel's inode, not the generator's: nonzero and one per file.
                let ino = c["raw"]["inode"].as_u64().unwrap_or(0);
                assert!(ino != 0 && tree_inodes.insert(ino), "{format:?} {}: inode {ino}", t.path);
            } else {
                assert!(c["raw"].get("inode").is_none(), "{format:?} {}: {}", t.path, c["raw"]);
            }
            assert_eq!(c["version"], "gen-42");
            let vis: Vec<&str> = e["visible_to"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
            assert_eq!(
                vis,
                vec![
                    principals[&format!("uid{}", t.attrs.uid)].as_str(),
                    principals[&format!("gid{}", t.attrs.gid)].as_str()
                ]
            );
        }
    }
}

#[test]
fn a_column_map_can_name_the_inode_column() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(500, 4));
    let data = tmp.path().join("ne2scan");
    // lester's default output: the OST objects are column 8, the path column 9.
    gen::write(&fs, Format::Ne2scan, &data, 0, false).unwrap();
    let out = tmp.path().join("out");
    let cfg = config(
        tmp.path(),
        "c.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n[sources.s]\ntype = \"tsv\"\npaths = [\"{}/fslist.ne2scan\"]\ndelimiter = \"|\"\n\
             columns = {{ atime = 0, ctime = 1, mtime = 2, uid = 3, gid = 4, mode = 5, size = 6, inode = 7, path = 9 }}\n\
             mode_format = \"octal\"\npath_last = true\nquoted = false\ncomment = \"#\"\n[sinks.out]\ntype = \"file\"\ndir = \"{}\"\n",
            data.display(),
            out.display()
        ),
    );
    let (code, summary, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((summary["records"].as_u64(), summary["rejects"].as_u64()), (Some(500), Some(0)), "{summary}");
    let got = ingested(&out);
    for t in fs.records() {
        assert_eq!(got[&t.path]["content"]["raw"]["inode"], t.attrs.inode, "{}", t.path);
    }
}

#[test]
fn rolled_up_gufi_index_is_not_double_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = GenFs::generate(&GenSpec::new(1_500, 3));
    let data = tmp.path().join("gufi");
    gen::write(&fs, Format::Gufi, &data, 0, true).unwrap();
    let rolled: i64 = std::fs::read_dir(data.join("fs/home"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| rusqlite_count(&e.path().join("db.db")))
        .sum();
    assert!(rolled > 0, "the generator should have filled pentries_rollup");
    let out = tmp.path().join("out");
    let cfg = config(
        tmp.path(),
        "g.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n[sources.g]\ntype = \"gufi\"\nindex = \"{}\"\n[sinks.out]\ntype = \"file\"\ndir = \"{}\"\n",
            data.display(),
            out.display()
        ),
    );
    let (code, summary, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(summary["records"], 1_500);
    let got = ingested(&out);
    let want: Vec<String> = fs.records().into_iter().map(|r| r.path).collect();
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), want);
}

fn rusqlite_count(db: &std::path::Path) -> i64 {
    let out = std::process::Command::new("sqlite3").arg(db).arg("SELECT count(*) FROM pentries_rollup").output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(0),
        // Without the sqlite3 CLI, trust the generator.
        _ => 1,
    }
}
