//! Writing a generated file system in each output format: icicle9 and pwalk listings,
//! mmapplypolicy LIST files, a GUFI index (optionally with rollups) and a real tree.

use super::*;

/// Write `fs` in `format` under `out` (plus `principals.tsv`). `rows_per_file` splits
/// text outputs; `rollup` additionally fills GUFI `pentries_rollup` tables.
pub fn write(fs: &GenFs, format: Format, out: &Path, rows_per_file: u64, rollup: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("principals.tsv"), fs.principals())?;
    match format {
        Format::Tsv => write_text(fs, out, "part", "csv", rows_per_file, |w, fs, f| {
            let t = if f.kind == FileKind::Link { "l" } else { "f" };
            writeln!(
                w,
                "{t},{},{},{},{},{},{},{},{}",
                f.attrs.mode,
                f.attrs.uid,
                f.attrs.gid,
                f.attrs.size,
                f.attrs.atime,
                f.attrs.ctime,
                f.attrs.mtime,
                csv_quote(&fs.path(f))
            )
        }),
        Format::Mmapplypolicy => write_mmapplypolicy(fs, out),
        Format::Pwalk => write_pwalk(fs, out),
        Format::Ne2scan => {
            // lester's default `fslist` output (ORNL-TechInt/lester action-fslist.c@a1c1323):
            // the header, then each file with its OST objects (`ost:objid` in hex, last stripe
            // first; none for a link) before the path, then the footer.
            let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("fslist.ne2scan"))?);
            writeln!(
                w,
                "#IDENT#|1.0|1.42.7.wc1|{NOW_REF}|Thu Jan 01 00:00:00 GMT 2026|gen|/dev/mdt0|0|0|0|0|fs|generated"
            )?;
            for f in &fs.files {
                let osts = if f.kind == icicle_core::FileKind::File {
                    let stripes = 1 + f.attrs.inode % 4;
                    (0..stripes)
                        .rev()
                        .map(|k| format!("{}:{:x}", (f.attrs.inode + k) % 8, f.attrs.inode * 4 + k))
                        .collect::<Vec<_>>()
                        .join(",")
                } else {
                    String::new()
                };
                writeln!(
                    w,
                    "{}|{}|{}|{}|{}|{:o}|{}|{}|{osts}|{}",
                    f.attrs.atime,
                    f.attrs.ctime,
                    f.attrs.mtime,
                    f.attrs.uid,
                    f.attrs.gid,
                    f.attrs.mode,
                    f.attrs.size,
                    f.attrs.inode,
                    fs.path(f)
                )?;
            }
            writeln!(w, "#complete#{NOW_REF}")?;
            w.flush()
        }
        Format::Gufi => write_gufi(fs, out, rollup),
        Format::Tree => write_tree(fs, &out.join("tree")),
    }
}

/// `list.allfiles` in the DIRECTORIES_PLUS layout: each directory, then its files.
fn write_mmapplypolicy(fs: &GenFs, out: &Path) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("list.allfiles"))?);
    let mut fi = 0;
    for (di, d) in fs.dirs.iter().enumerate() {
        // DIRECTORIES_PLUS: the directory, then its files.
        writeln!(
            w,
            "{} 1 0 FAu {} proj 0 {} data {} {} {} {} {} 0 {} -- {}",
            d.attrs.inode,
            4096,
            2,
            d.attrs.uid,
            d.attrs.gid,
            mode_str(d.attrs.mode),
            d.attrs.atime,
            d.attrs.ctime,
            d.attrs.mtime,
            percent_encode(&d.path)
        )?;
        while fi < fs.files.len() && fs.files[fi].dir == di {
            let f = &fs.files[fi];
            let kb = f.attrs.size.div_ceil(1024);
            writeln!(
                w,
                "{} {} 0 FAu {} proj {} 1 data {} {} {} {} {} 0 {} -- {}",
                f.attrs.inode,
                f.attrs.inode % 997,
                f.attrs.size,
                kb,
                f.attrs.uid,
                f.attrs.gid,
                mode_str(f.attrs.mode),
                f.attrs.atime,
                f.attrs.ctime,
                f.attrs.mtime,
                percent_encode(&fs.path(f))
            )?;
            fi += 1;
        }
    }
    w.flush()
}

/// `pwalk.csv`: a header, then each directory and its files.
/// pwalk 3.0.0's CSV (fizwit/filesystem-reporting-tools `fileProcess.c`@d06beed, `printStat`):
/// the `--header` line, each directory's entries and then the directory's own line (post-order:
/// `pw_fcount` its entries, `pw_dirsum` the sum of their sizes; the root at depth -1 with
/// parent inode 0), files with `-1,0`, `st_mode` as `"%07o"`. (pwalk deletes control bytes
/// from names; the generator's tabs are kept, so its ground truth holds for every format.)
fn write_pwalk(fs: &GenFs, out: &Path) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join("pwalk.csv"))?);
    writeln!(w, "inode,parent-inode,directory-depth,\"filename\",\"fileExtension\",UID,GID,st_size,st_dev,st_blocks,st_nlink,\"st_mode\",st_atime,st_mtime,st_ctime,pw_fcount,pw_dirsum")?;
    let mut fi = 0;
    for (di, d) in fs.dirs.iter().enumerate() {
        let pino = if d.parent == usize::MAX { 0 } else { fs.dirs[d.parent].attrs.inode };
        let depth = d.path.matches('/').count() as i64 - 2;
        let (mut count, mut sum) = (0u64, 0u64);
        while fi < fs.files.len() && fs.files[fi].dir == di {
            let f = &fs.files[fi];
            let ext = f.name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
            writeln!(
                w,
                "{},{},{},\"{}\",\"{}\",{},{},{},2049,{},1,\"{:07o}\",{},{},{},-1,0",
                f.attrs.inode,
                d.attrs.inode,
                depth + 1,
                fs.path(f).replace('"', "\"\""),
                ext.replace('"', "\"\""),
                f.attrs.uid,
                f.attrs.gid,
                f.attrs.size,
                f.attrs.size.div_ceil(512),
                f.attrs.mode,
                f.attrs.atime,
                f.attrs.mtime,
                f.attrs.ctime
            )?;
            count += 1;
            sum += f.attrs.size;
            fi += 1;
        }
        writeln!(
            w,
            "{},{},{},\"{}\",\"\",{},{},4096,2049,8,2,\"{:07o}\",{},{},{},{count},{sum}",
            d.attrs.inode,
            pino,
            depth,
            d.path.replace('"', "\"\""),
            d.attrs.uid,
            d.attrs.gid,
            d.attrs.mode,
            d.attrs.atime,
            d.attrs.mtime,
            d.attrs.ctime
        )?;
    }
    w.flush()
}

fn write_text(
    fs: &GenFs,
    out: &Path,
    stem: &str,
    ext: &str,
    rows_per_file: u64,
    row: impl Fn(&mut BufWriter<std::fs::File>, &GenFs, &GenFile) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let rows_per_file = rows_per_file.max(1);
    let mut w: Option<BufWriter<std::fs::File>> = None;
    for (i, f) in fs.files.iter().enumerate() {
        if (i as u64).is_multiple_of(rows_per_file) {
            if let Some(mut old) = w.take() {
                old.flush()?;
            }
            let name = format!("{stem}-{:04}.{ext}", i as u64 / rows_per_file);
            w = Some(BufWriter::with_capacity(1 << 20, std::fs::File::create(out.join(name))?));
        }
        if let Some(w) = w.as_mut() {
            row(w, fs, f)?;
        }
    }
    if let Some(mut w) = w {
        w.flush()?;
    }
    Ok(())
}

/// Where `path` of the generated file system goes under `out`.
fn index_dir(out: &Path, path: &str) -> std::path::PathBuf {
    out.join(path.trim_start_matches('/'))
}

fn write_gufi(fs: &GenFs, out: &Path, rollup: bool) -> std::io::Result<()> {
    let io = |e: rusqlite::Error| std::io::Error::other(e.to_string());
    // GUFI places an empty db.db in the index parent: its template, every table, no rows.
    rusqlite::Connection::open(out.join("db.db")).map_err(io)?.execute_batch(GUFI_SCHEMA).map_err(io)?;
    let mut by_dir: Vec<Vec<&GenFile>> = vec![Vec::new(); fs.dirs.len()];
    for f in &fs.files {
        by_dir[f.dir].push(f);
    }
    // Rolled-up directories: each user's top directory holds its whole subtree in pentries_rollup.
    let mut rolled: Vec<Option<usize>> = vec![None; fs.dirs.len()];
    if rollup {
        for (i, d) in fs.dirs.iter().enumerate() {
            if d.parent != usize::MAX
                && fs.dirs[d.parent].parent != usize::MAX
                && fs.dirs[fs.dirs[d.parent].parent].parent == usize::MAX
            {
                rolled[i] = Some(i);
            } else if d.parent != usize::MAX {
                rolled[i] = rolled[d.parent];
            }
        }
    }
    let mut rollup_rows: Vec<Vec<(&GenFile, u64)>> = vec![Vec::new(); fs.dirs.len()];
    for (i, files) in by_dir.iter().enumerate() {
        if let Some(top) = rolled[i] {
            if top != i {
                rollup_rows[top].extend(files.iter().map(|f| (*f, fs.dirs[i].attrs.inode)));
            }
        }
    }
    for (i, d) in fs.dirs.iter().enumerate() {
        let dir = index_dir(out, &d.path);
        std::fs::create_dir_all(&dir)?;
        // SQLite refuses paths of 512+ bytes: build deep databases under a short name.
        let target = dir.join("db.db");
        let deep = target.as_os_str().len() >= 500;
        let build_at = if deep {
            std::env::temp_dir().join(format!("icicle-gen-{}-{i}.db", std::process::id()))
        } else {
            target.clone()
        };
        let mut conn = rusqlite::Connection::open(&build_at).map_err(io)?;
        conn.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;").map_err(io)?;
        conn.execute_batch(GUFI_SCHEMA).map_err(io)?;
        let tx = conn.transaction().map_err(io)?;
        {
            let mut ins = tx
                .prepare("INSERT INTO entries(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,linkname,xattr_names,crtime) VALUES (?1,?2,?3,?4,1,?5,?6,?7,4096,?8,?9,?10,?11,?12,NULL,0)")
                .map_err(io)?;
            for f in &by_dir[i] {
                let t = if f.kind == FileKind::Link { "l" } else { "f" };
                let link = gufi_q(f.target.as_deref().unwrap_or_default());
                ins.execute(rusqlite::params![
                    gufi_q(&f.name),
                    t,
                    f.attrs.inode.to_string(),
                    f.attrs.mode,
                    f.attrs.uid,
                    f.attrs.gid,
                    f.attrs.size as i64,
                    f.attrs.size.div_ceil(512) as i64,
                    f.attrs.atime,
                    f.attrs.mtime,
                    f.attrs.ctime,
                    link
                ])
                .map_err(io)?;
            }
            let mut rins = tx
                .prepare("INSERT INTO pentries_rollup(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,linkname,pinode,ppinode) VALUES (?1,?2,?3,?4,1,?5,?6,?7,4096,0,?8,?9,?10,'',?11,'0')")
                .map_err(io)?;
            for (f, pinode) in &rollup_rows[i] {
                let t = if f.kind == FileKind::Link { "l" } else { "f" };
                rins.execute(rusqlite::params![
                    gufi_q(&f.name),
                    t,
                    f.attrs.inode.to_string(),
                    f.attrs.mode,
                    f.attrs.uid,
                    f.attrs.gid,
                    f.attrs.size as i64,
                    f.attrs.atime,
                    f.attrs.mtime,
                    f.attrs.ctime,
                    pinode.to_string()
                ])
                .map_err(io)?;
            }
            let files = &by_dir[i];
            let totfiles = files.iter().filter(|f| f.kind == FileKind::File).count() as i64;
            let totlinks = files.len() as i64 - totfiles;
            let totsize: i64 = files.iter().map(|f| f.attrs.size as i64).sum();
            let pinode =
                if d.parent == usize::MAX { "0".to_string() } else { fs.dirs[d.parent].attrs.inode.to_string() };
            let name = gufi_q(d.path.rsplit('/').next().unwrap_or(""));
            let isrolledup = i64::from(rolled[i] == Some(i));
            tx.execute(
                "INSERT INTO summary(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,totfiles,totlinks,totsize,depth,rectype,pinode,isroot,canrollup,isrolledup) VALUES (?1,'d',?2,?3,2,?4,?5,4096,4096,8,?6,?7,?8,?9,?10,?11,?12,0,?13,1,0,?14)",
                rusqlite::params![name, d.attrs.inode.to_string(), d.attrs.mode, d.attrs.uid, d.attrs.gid, d.attrs.atime, d.attrs.mtime, d.attrs.ctime, totfiles, totlinks, totsize, d.path.matches('/').count() as i64, pinode, isrolledup],
            )
            .map_err(io)?;
            // gufi_rollup copies each rolled-up subdirectory's summary into the top one, named
            // `<top's stored name>/<sub's stored name>` joined in SQL (so still escaped).
            if rolled[i] == Some(i) {
                for (_, sub) in fs.dirs.iter().enumerate().filter(|(j, _)| *j != i && rolled[*j] == Some(i)) {
                    let rel = sub.path.strip_prefix(&d.path).unwrap_or(&sub.path).trim_start_matches('/');
                    let sub_name = format!("{name}/{}", rel.split('/').map(gufi_q).collect::<Vec<_>>().join("/"));
                    tx.execute(
                        "INSERT INTO summary(name,type,inode,mode,nlink,uid,gid,size,blksize,blocks,atime,mtime,ctime,totfiles,totlinks,totsize,depth,rectype,pinode,isroot,canrollup,isrolledup) VALUES (?1,'d',?2,?3,2,?4,?5,4096,4096,8,?6,?7,?8,0,0,0,?9,0,?10,0,1,1)",
                        rusqlite::params![sub_name, sub.attrs.inode.to_string(), sub.attrs.mode, sub.attrs.uid, sub.attrs.gid, sub.attrs.atime, sub.attrs.mtime, sub.attrs.ctime, sub.path.matches('/').count() as i64, fs.dirs[sub.parent].attrs.inode.to_string()],
                    )
                    .map_err(io)?;
                }
            }
        }
        tx.commit().map_err(io)?;
        drop(conn);
        if deep {
            std::fs::copy(&build_at, &target)?;
            std::fs::remove_file(&build_at)?;
        }
    }
    Ok(())
}

fn write_tree(fs: &GenFs, out: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for d in &fs.dirs {
        std::fs::create_dir_all(index_dir(out, &d.path))?;
    }
    for f in &fs.files {
        let p = index_dir(out, &fs.path(f));
        match &f.target {
            Some(t) => std::os::unix::fs::symlink(t, &p)?,
            None => {
                let file = std::fs::File::create(&p)?;
                file.set_len(f.attrs.size)?;
                drop(file);
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.attrs.mode & 0o7777))?;
            }
        }
        // Owners need privileges; without them the tree keeps the caller's ids.
        let _ = std::os::unix::fs::lchown(&p, Some(f.attrs.uid), Some(f.attrs.gid));
        if f.target.is_none() && f.attrs.mode & 0o6000 != 0 {
            // chown clears set-id bits: restore them.
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(f.attrs.mode & 0o7777))?;
        }
        let at = filetime::FileTime::from_unix_time(f.attrs.atime, 0);
        let mt = filetime::FileTime::from_unix_time(f.attrs.mtime, 0);
        filetime::set_symlink_file_times(&p, at, mt)?;
    }
    Ok(())
}
