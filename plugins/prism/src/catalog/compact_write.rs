//! Writing the compact form (see [`super::compact`]): two passes over the entries, one to
//! count, one to stream the records, the checksum patched into the header at the end.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use super::compact::*;
use super::compact_check::put_header;
use super::{Catalog, CatalogEntry, CatalogError, CatalogGone, LayoutLine};

/// Write `cat` as a compact catalog at `out`: its [`Catalog::latest`] entries (one per
/// path, in path order) and all its `gone` records. The file is written under a temporary
/// hidden name in the same directory, synced, then renamed into place
/// ([`icicle_core::durable::create`]), so a reader never maps a partial file.
pub fn write_compact(cat: &Catalog, out: &Path) -> Result<CompactCounts, CatalogError> {
    let entries = cat.latest();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CatalogError::Io { path, source }
    };
    let mut w = icicle_core::durable::create(out).map_err(io(out))?;
    let tmp = w.temporary().to_path_buf();
    let counts = encode(&mut w, &tmp, &entries, &cat.gone, cat.superseded as u64)?;
    w.finish(true).map_err(io(&tmp))?.commit(true).map_err(io(out))?;
    Ok(counts)
}

/// Runs of layout lines that the compact form stores as one record: consecutive lines one
/// stripe apart sharing end, interval, stripe size and file size.
fn runs(lines: &[LayoutLine]) -> impl Iterator<Item = (LayoutLine, u32)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let first = *lines.get(i)?;
        let mut n = 1usize;
        while let Some(l) = lines.get(i + n) {
            let prev = lines[i + n - 1];
            let same = l.end == prev.end
                && l.interval == prev.interval
                && l.stripe_size == prev.stripe_size
                && l.file_size == prev.file_size;
            if !same || prev.start.checked_add(prev.stripe_size) != Some(l.start) || n >= u32::MAX as usize {
                break;
            }
            n += 1;
        }
        i += n;
        Some((first, n as u32))
    })
}

fn stat_kind(e: &CatalogEntry) -> u32 {
    match e.stat {
        None => STAT_NONE,
        Some(s) if s == e.lstat => STAT_SAME,
        Some(_) => STAT_OWN,
    }
}

fn check_path(path: &str) -> Result<(), CatalogError> {
    if path.is_empty() || path.contains('\n') || u32::try_from(path.len()).is_err() {
        return Err(CatalogError::Unrepresentable(path.to_string()));
    }
    Ok(())
}

/// The counts of a compact file for these records, after checking that it can hold them.
fn count(entries: &[&CatalogEntry], gone: &[CatalogGone], superseded: u64) -> Result<CompactCounts, CatalogError> {
    let mut c = CompactCounts {
        entries: entries.len() as u64,
        gone: gone.len() as u64,
        superseded,
        ..CompactCounts::default()
    };
    for e in entries {
        check_path(&e.path)?;
        c.strings += e.path.len() as u64;
        c.stats += u64::from(stat_kind(e) == STAT_OWN);
        let invalid = |reason: String| CatalogError::Invalid { path: e.path.clone(), reason };
        let mut runs_here = 0u64;
        for (first, n) in runs(e.layout.as_deref().unwrap_or_default()) {
            check_run(&first, n).map_err(invalid)?;
            runs_here += 1;
            c.osts += u64::from(n);
        }
        if runs_here > u64::from(u32::MAX) {
            return Err(invalid(format!("{runs_here} layout runs (at most 2^32)")));
        }
        c.comps += runs_here;
    }
    for g in gone {
        check_path(&g.path)?;
        c.strings += g.path.len() as u64;
    }
    if c.entries > u64::from(u32::MAX) || c.stats > u64::from(u32::MAX) || c.osts > u64::from(u32::MAX) {
        return Err(CatalogError::Invalid {
            path: String::new(),
            reason: "more than 2^32 entries, stat records or layout lines".into(),
        });
    }
    Ok(c)
}

/// Bytes written (staged in 64 KiB blocks) and their running checksum.
struct Out<'w, W: Write> {
    w: &'w mut W,
    crc: crc32fast::Hasher,
    buf: Vec<u8>,
}

impl<W: Write> Out<'_, W> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= 1 << 16 {
            self.drain()?;
        }
        Ok(())
    }

    fn drain(&mut self) -> std::io::Result<()> {
        self.crc.update(&self.buf);
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// Encode the records into `w` (`name` is used in errors): `entries` in the order given
/// (the header says "one per path, sorted" when they are in strictly increasing path
/// order), then the `gone` records. Returns the header's counts.
pub fn encode<W: Write + Seek>(
    w: &mut W,
    name: &Path,
    entries: &[&CatalogEntry],
    gone: &[CatalogGone],
    superseded: u64,
) -> Result<CompactCounts, CatalogError> {
    let c = count(entries, gone, superseded)?;
    let sec = Sections::of(&c)
        .ok_or_else(|| CatalogError::Invalid { path: String::new(), reason: "the catalog is too large".into() })?;
    let sorted = entries.windows(2).all(|p| p[0].path < p[1].path);
    let mut header = [0u8; HEADER];
    put_header(&mut header, &c, if sorted { FLAG_LATEST } else { 0 }, sec.end as u64);
    let io = |source| CatalogError::Io { path: name.to_path_buf(), source };
    let start = w.stream_position().map_err(io)?;
    let mut out = Out { w, crc: crc32fast::Hasher::new(), buf: Vec::with_capacity(1 << 17) };
    out.crc.update(&header[..CHECKSUM_AT]);
    out.w.write_all(&header).map_err(io)?;
    write_body(&mut out, entries, gone).map_err(io)?;
    out.drain().map_err(io)?;
    let crc = out.crc.finalize();
    w.seek(SeekFrom::Start(start + CHECKSUM_AT as u64)).map_err(io)?;
    w.write_all(&crc.to_le_bytes()).map_err(io)?;
    w.seek(SeekFrom::Start(start + sec.end as u64)).map_err(io)?;
    w.flush().map_err(io)?;
    Ok(c)
}

fn write_body<W: Write>(out: &mut Out<'_, W>, entries: &[&CatalogEntry], gone: &[CatalogGone]) -> std::io::Result<()> {
    let (mut path_off, mut comp_first, mut stat_idx) = (0u64, 0u64, 0u32);
    for e in entries {
        let kind = stat_kind(e);
        let comps = runs(e.layout.as_deref().unwrap_or_default()).count() as u32;
        let mut rec = [0u8; ENTRY];
        rec[0..8].copy_from_slice(&path_off.to_le_bytes());
        rec[8..12].copy_from_slice(&(e.path.len() as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(kind | if e.layout.is_some() { HAS_LAYOUT } else { 0 }).to_le_bytes());
        if e.layout.is_some() {
            rec[16..24].copy_from_slice(&comp_first.to_le_bytes());
            rec[24..28].copy_from_slice(&comps.to_le_bytes());
        }
        if kind == STAT_OWN {
            rec[28..32].copy_from_slice(&stat_idx.to_le_bytes());
            stat_idx += 1;
        }
        rec[32..].copy_from_slice(&stat_bytes(&e.lstat));
        out.put(&rec)?;
        path_off += e.path.len() as u64;
        comp_first += u64::from(comps);
    }
    for e in entries.iter().filter(|e| stat_kind(e) == STAT_OWN) {
        out.put(&stat_bytes(&e.stat.unwrap_or(e.lstat)))?;
    }
    for g in gone {
        let mut rec = [0u8; GONE];
        rec[0..8].copy_from_slice(&path_off.to_le_bytes());
        rec[8..12].copy_from_slice(&(g.path.len() as u32).to_le_bytes());
        rec[16..].copy_from_slice(&stat_bytes(&g.stat));
        out.put(&rec)?;
        path_off += g.path.len() as u64;
    }
    let mut ost_first = 0u32;
    for e in entries {
        for (l, n) in runs(e.layout.as_deref().unwrap_or_default()) {
            let mut rec = [0u8; COMP];
            for (k, w) in [l.start, l.end, l.interval, l.stripe_size, l.file_size].iter().enumerate() {
                rec[k * 8..k * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            rec[40..44].copy_from_slice(&ost_first.to_le_bytes());
            rec[44..48].copy_from_slice(&n.to_le_bytes());
            out.put(&rec)?;
            ost_first = ost_first.wrapping_add(n);
        }
    }
    for e in entries {
        for l in e.layout.iter().flatten() {
            out.put(&l.ost.to_le_bytes())?;
        }
    }
    for p in entries.iter().map(|e| e.path.as_str()).chain(gone.iter().map(|g| g.path.as_str())) {
        out.put(p.as_bytes())?;
    }
    Ok(())
}
