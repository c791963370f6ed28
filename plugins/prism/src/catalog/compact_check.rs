//! Validation of a compact catalog before any access: header, length, checksum, and every
//! offset, count and layout rule of every record. Returns a reason, never panics.

use super::compact::*;
use super::LayoutLine;

/// Header field offsets.
const AT_VERSION: usize = 8;
const AT_FLAGS: usize = 12;
const AT_COUNTS: usize = 16;
const AT_FILE_LEN: usize = 72;

/// The counts a header holds.
pub(super) fn header_counts(b: &[u8]) -> CompactCounts {
    let c = |k: usize| u64_at(b, AT_COUNTS + 8 * k);
    CompactCounts { entries: c(0), stats: c(1), gone: c(2), comps: c(3), osts: c(4), strings: c(5), superseded: c(6) }
}

/// Write the counts into a header.
pub(super) fn put_header(h: &mut [u8; HEADER], c: &CompactCounts, flags: u32, file_len: u64) {
    h[..8].copy_from_slice(&MAGIC);
    h[AT_VERSION..AT_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
    h[AT_FLAGS..AT_FLAGS + 4].copy_from_slice(&flags.to_le_bytes());
    for (k, v) in [c.entries, c.stats, c.gone, c.comps, c.osts, c.strings, c.superseded].iter().enumerate() {
        h[AT_COUNTS + 8 * k..AT_COUNTS + 8 * k + 8].copy_from_slice(&v.to_le_bytes());
    }
    h[AT_FILE_LEN..AT_FILE_LEN + 8].copy_from_slice(&file_len.to_le_bytes());
}

/// The CRC-32 a file's header should hold: of bytes [0, 80) then [96, end).
pub(super) fn checksum(b: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(b.get(..CHECKSUM_AT).unwrap_or_default());
    h.update(b.get(HEADER..).unwrap_or_default());
    h.finalize()
}

/// Whether any byte of `b` is a newline (eight bytes at a time).
fn has_newline(b: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) ^ (LO * u64::from(b'\n'));
        if x.wrapping_sub(LO) & !x & HI != 0 {
            return true;
        }
    }
    words.remainder().contains(&b'\n')
}

/// Check the header and the whole file; the counts, flags and sections on success.
pub(super) fn validate(b: &[u8]) -> Result<(CompactCounts, u32, Sections), String> {
    if b.len() < HEADER {
        return Err(format!("truncated: {} bytes, the header alone is {HEADER}", b.len()));
    }
    if !is_compact(b) {
        return Err("not a compact catalog (no `ICICLCAT` magic)".into());
    }
    let version = u32_at(b, AT_VERSION);
    if version != VERSION {
        return Err(format!("format version {version}, this reader knows {VERSION}"));
    }
    let flags = u32_at(b, AT_FLAGS);
    if flags & !FLAG_LATEST != 0 {
        return Err(format!("unknown header flags {flags:#x}"));
    }
    let counts = header_counts(b);
    let file_len = u64_at(b, AT_FILE_LEN);
    if file_len != b.len() as u64 {
        return Err(if (b.len() as u64) < file_len {
            format!("truncated: {} of the {file_len} bytes the header gives", b.len())
        } else {
            format!("{} bytes after the {file_len} the header gives", b.len() as u64 - file_len)
        });
    }
    let sec = Sections::of(&counts).ok_or("the header's counts overflow")?;
    if sec.end != b.len() {
        return Err(format!("the header's counts make {} bytes, the file has {}", sec.end, b.len()));
    }
    if u32_at(b, CHECKSUM_AT + 4) != 0 || u64_at(b, CHECKSUM_AT + 8) != 0 {
        return Err("reserved header bytes are not zero".into());
    }
    let (want, got) = (u32_at(b, CHECKSUM_AT), checksum(b));
    if want != got {
        return Err(format!("checksum mismatch: the header says {want:#010x}, the content gives {got:#010x}"));
    }
    if counts.entries > u64::from(u32::MAX) || counts.stats > u64::from(u32::MAX) || counts.osts > u64::from(u32::MAX) {
        return Err("more than 2^32 entries, stat records or layout lines".into());
    }
    let strings = std::str::from_utf8(&b[sec.strings..]).map_err(|e| format!("string table: {e}"))?;
    if has_newline(strings.as_bytes()) {
        return Err("string table holds a newline".into());
    }
    let ctx = Ctx { b, sec, counts, strings };
    for s in 0..counts.stats as usize {
        ctx.stat_pad(sec.stats + s * STAT).map_err(|e| format!("stat record {s}: {e}"))?;
    }
    let latest = flags & FLAG_LATEST != 0;
    let mut prev: Option<&str> = None;
    for i in 0..counts.entries as usize {
        let path = ctx.entry(sec.entries + i * ENTRY).map_err(|e| format!("entry {i}: {e}"))?;
        if latest && prev.is_some_and(|p| p >= path) {
            return Err(format!(
                "entry {i}: `{}` is not after the previous path (the header says sorted, one per path)",
                super::clip(path)
            ));
        }
        prev = Some(path);
    }
    for g in 0..counts.gone as usize {
        let at = sec.gone + g * GONE;
        ctx.path(u64_at(b, at), u32_at(b, at + 8)).map_err(|e| format!("gone record {g}: {e}"))?;
        if u32_at(b, at + 12) != 0 {
            return Err(format!("gone record {g}: padding is not zero"));
        }
        ctx.stat_pad(at + 16).map_err(|e| format!("gone record {g}: {e}"))?;
    }
    Ok((counts, flags, sec))
}

struct Ctx<'a> {
    b: &'a [u8],
    sec: Sections,
    counts: CompactCounts,
    strings: &'a str,
}

impl<'a> Ctx<'a> {
    fn stat_pad(&self, at: usize) -> Result<(), String> {
        match u32_at(self.b, at + 92) {
            0 => Ok(()),
            _ => Err("stat padding is not zero".into()),
        }
    }

    fn path(&self, off: u64, len: u32) -> Result<&'a str, String> {
        let n = self.strings.len();
        if len == 0 {
            return Err("empty path".into());
        }
        let range =
            usize::try_from(off).ok().and_then(|o| Some(o..o.checked_add(len as usize)?)).filter(|r| r.end <= n);
        let Some(range) = range else {
            return Err(format!("path at {off} (+{len}) is outside the string table ({n} bytes)"));
        };
        self.strings.get(range).ok_or_else(|| format!("path at {off} (+{len}) splits a UTF-8 character"))
    }

    /// Check the entry record at `at`; its path on success.
    fn entry(&self, at: usize) -> Result<&'a str, String> {
        let b = self.b;
        let path = self.path(u64_at(b, at), u32_at(b, at + 8))?;
        let flags = u32_at(b, at + 12);
        if flags & !(STAT_MASK | HAS_LAYOUT) != 0 || flags & STAT_MASK > STAT_OWN {
            return Err(format!("`{}`: unknown flags {flags:#x}", super::clip(path)));
        }
        let stat_idx = u32_at(b, at + 28);
        let stat_ok =
            if flags & STAT_MASK == STAT_OWN { u64::from(stat_idx) < self.counts.stats } else { stat_idx == 0 };
        if !stat_ok {
            return Err(format!("`{}`: stat record {stat_idx} of {}", super::clip(path), self.counts.stats));
        }
        self.stat_pad(at + 32)?;
        let (first, count) = (u64_at(b, at + 16), u32_at(b, at + 24));
        if flags & HAS_LAYOUT == 0 {
            if first != 0 || count != 0 {
                return Err(format!("`{}`: layout runs on an entry without a layout", super::clip(path)));
            }
            return Ok(path);
        }
        if first.checked_add(u64::from(count)).is_none_or(|end| end > self.counts.comps) {
            return Err(format!(
                "`{}`: layout runs {first} (+{count}) past the {} there are",
                super::clip(path),
                self.counts.comps
            ));
        }
        for k in 0..count as usize {
            let c = self.sec.comps + (first as usize + k) * COMP;
            self.run(c).map_err(|e| format!("`{}`: layout run {k}: {e}", super::clip(path)))?;
        }
        Ok(path)
    }

    fn run(&self, c: usize) -> Result<(), String> {
        let b = self.b;
        let (ost_first, n) = (u32_at(b, c + 40), u32_at(b, c + 44));
        if n == 0 {
            return Err("no lines".into());
        }
        if u64::from(ost_first) + u64::from(n) > self.counts.osts {
            return Err(format!("OSTs {ost_first} (+{n}) past the {} there are", self.counts.osts));
        }
        let first = LayoutLine {
            ost: 0,
            start: u64_at(b, c),
            end: u64_at(b, c + 8),
            interval: u64_at(b, c + 16),
            stripe_size: u64_at(b, c + 24),
            file_size: u64_at(b, c + 32),
        };
        check_run(&first, n)
    }
}
