//! Entries and deletes cut into documents bounded in bytes.

use icicle_core::batch::{DocumentLimit, DocumentSize, EntryBatch, GINGEST_HEAD, GINGEST_TAIL};

/// An upper bound of the bytes the JSON text `json` (as icicle writes it: compact, UTF-8)
/// takes once Python's `json.dumps` writes it again with its defaults (what globus-sdk and the
/// globus CLI send without orjson): one more byte per `,` and `:` (counted inside strings too),
/// non-ASCII characters as `\u` escapes (6 bytes each, 12 beyond the BMP), DEL (0x7f, which
/// icicle writes raw) as `\u007f`, and 2 bytes for an exponent that gains a sign or a digit.
/// One pass over plain byte slices counts the separators and notes whether any byte is
/// DEL or beyond ASCII; only then is a second pass made.
pub fn reserialized_len(json: &[u8]) -> usize {
    let (separators, unusual) = scan(json);
    let escaped = if !unusual {
        0
    } else {
        // Per character: its lead byte stands for the growth from its UTF-8 length.
        json.iter()
            .map(|&b| {
                usize::from(b >= 0xC0) * 4 - usize::from(b >= 0xE0)
                    + usize::from(b >= 0xF0) * 5
                    + usize::from(b == 0x7f) * 5
            })
            .sum()
    };
    json.len() + separators + escaped + 2
}

/// How many `,` and `:` bytes `json` holds, and whether a byte is DEL or above 0x7f: 16
/// bytes a step, counted in byte lanes (the delivery task measures every entry, so this is
/// on the hot path).
fn scan(json: &[u8]) -> (usize, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let mut chunks = json.chunks_exact(16);
        let mut total = 0usize;
        let mut unusual = 0i32;
        // SAFETY: SSE2 is part of the x86_64 baseline; each load reads one 16-byte chunk.
        unsafe {
            let (comma, colon, del, zero) =
                (_mm_set1_epi8(b',' as i8), _mm_set1_epi8(b':' as i8), _mm_set1_epi8(0x7f), _mm_setzero_si128());
            loop {
                // At most 255 steps per lane sum, so no byte lane overflows.
                let mut lanes = zero;
                let mut high = zero;
                let mut steps = 0;
                for c in chunks.by_ref().take(255) {
                    let x = _mm_loadu_si128(c.as_ptr() as *const __m128i);
                    let hit = _mm_or_si128(_mm_cmpeq_epi8(x, comma), _mm_cmpeq_epi8(x, colon));
                    lanes = _mm_sub_epi8(lanes, hit);
                    // The top bit of a byte at or above 0x80, or of DEL's match.
                    high = _mm_or_si128(high, _mm_or_si128(x, _mm_cmpeq_epi8(x, del)));
                    steps += 1;
                }
                unusual |= _mm_movemask_epi8(high);
                let sums = _mm_sad_epu8(lanes, zero);
                total += (_mm_cvtsi128_si64(sums) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums))) as usize;
                if steps < 255 {
                    break;
                }
            }
        }
        let rest = chunks.remainder();
        let rest_unusual = rest.iter().any(|&b| b >= 0x7f);
        (total + rest.iter().filter(|&&b| b == b',' || b == b':').count(), unusual != 0 || rest_unusual)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (json.iter().filter(|&&b| b == b',' || b == b':').count(), json.iter().any(|&b| b >= 0x7f))
    }
}

/// The size of `json` as `limit` counts it.
pub fn measured_len(limit: &DocumentLimit, json: &[u8]) -> usize {
    match limit.size {
        DocumentSize::Compact => json.len(),
        DocumentSize::Sdk => reserialized_len(json),
    }
}

/// Whether `entry` fits a document of its own under `limit`.
pub fn entry_fits(limit: &DocumentLimit, entry: &[u8]) -> bool {
    let envelope = GINGEST_HEAD.len() + GINGEST_TAIL.len();
    // Cheap first: no entry grows past six times its compact size (DEL: 1 byte to 6).
    if limit.size == DocumentSize::Compact || 6 * entry.len() + 8 + 2 * envelope <= limit.max_bytes {
        return entry.len() + envelope <= limit.max_bytes;
    }
    measured_len(limit, entry) + measured_len(limit, GINGEST_HEAD) + measured_len(limit, GINGEST_TAIL)
        <= limit.max_bytes
}

/// The most a document's buffer is given up front (its bound, when smaller).
const PREALLOCATE_MAX: usize = 64 << 20;

/// Assembles entries into documents within a [`DocumentLimit`].
#[derive(Debug)]
pub struct Batcher {
    limit: DocumentLimit,
    current: EntryBatch,
    /// The current document's size as the limit counts it.
    current_size: usize,
}

impl Batcher {
    /// A batcher producing documents of at most `max_bytes` compact bytes.
    pub fn new(max_bytes: usize) -> Batcher {
        Batcher::within(DocumentLimit::compact(max_bytes))
    }

    /// A batcher producing documents within `limit`.
    pub fn within(limit: DocumentLimit) -> Batcher {
        Batcher { limit, current: EntryBatch::default(), current_size: 0 }
    }

    /// Add every entry of `chunk`, returning the documents that filled up.
    /// An entry too large for any document is returned in `oversized`.
    pub fn push_chunk(&mut self, chunk: &EntryBatch, full: &mut Vec<EntryBatch>, oversized: &mut Vec<Vec<u8>>) {
        let limit = self.limit;
        let envelope = measured_len(&limit, GINGEST_HEAD) + measured_len(&limit, GINGEST_TAIL);
        // `,` between entries, `, ` once re-serialised.
        let sep = if limit.size == DocumentSize::Sdk { 2 } else { 1 };
        for e in chunk.entries() {
            let size = measured_len(&limit, e);
            if size + envelope > limit.max_bytes {
                oversized.push(e.to_vec());
                continue;
            }
            if self.current.is_empty() {
                self.current = self.fresh();
                self.current_size = envelope;
            } else if self.current_size + sep + size > limit.max_bytes {
                let next = self.fresh();
                full.push(std::mem::replace(&mut self.current, next));
                self.current_size = envelope;
            } else {
                self.current_size += sep;
            }
            self.current.push(e);
            self.current_size += size;
        }
    }

    /// An empty document with room for as many entry bytes as the bound allows (never more
    /// than the bound in compact bytes), so that filling it copies every entry once.
    fn fresh(&self) -> EntryBatch {
        EntryBatch::with_capacity(self.limit.max_bytes.min(PREALLOCATE_MAX))
    }

    /// Whether a partial document is pending.
    pub fn has_pending(&self) -> bool {
        !self.current.is_empty()
    }

    /// Take the pending partial document, if any.
    pub fn flush(&mut self) -> Option<EntryBatch> {
        (!self.current.is_empty()).then(|| std::mem::take(&mut self.current))
    }
}

/// Split `subjects` into delete bodies within `limit` each.
pub fn delete_batches(subjects: Vec<String>, limit: DocumentLimit) -> Vec<Vec<String>> {
    let empty = measured_len(&limit, br#"{"subjects":[]}"#);
    let sep = if limit.size == DocumentSize::Sdk { 2 } else { 1 };
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut cur_bytes = empty;
    for s in subjects {
        let json = serde_json::to_string(&s).unwrap_or_else(|_| format!("{s:?}"));
        let b = measured_len(&limit, json.as_bytes()) + sep;
        if !cur.is_empty() && cur_bytes + b > limit.max_bytes {
            out.push(std::mem::take(&mut cur));
            cur_bytes = empty;
        }
        cur_bytes += b;
        cur.push(s);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use icicle_core::batch::delete_body;

    #[test]
    fn documents_never_exceed_the_limit() {
        let mut chunk = EntryBatch::default();
        for i in 0..1000 {
            chunk.push(format!("{{\"subject\":\"/f{i}\"}}").as_bytes());
        }
        let mut b = Batcher::new(500);
        let (mut full, mut big) = (Vec::new(), Vec::new());
        b.push_chunk(&chunk, &mut full, &mut big);
        full.extend(b.flush());
        assert!(big.is_empty());
        assert_eq!(full.iter().map(|d| d.len()).sum::<usize>(), 1000);
        for d in &full {
            let mut out = Vec::new();
            d.write_gingest(&mut out).unwrap();
            assert_eq!(out.len(), d.document_bytes());
            assert!(out.len() <= 500, "{}", out.len());
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["ingest_data"]["gmeta"].as_array().unwrap().len(), d.len());
        }
    }

    #[test]
    fn oversized_entries_are_reported() {
        let mut chunk = EntryBatch::default();
        chunk.push(&[b'x'; 600]);
        let mut b = Batcher::new(500);
        let (mut full, mut big) = (Vec::new(), Vec::new());
        b.push_chunk(&chunk, &mut full, &mut big);
        assert_eq!(big.len(), 1);
        assert!(b.flush().is_none());
    }

    #[test]
    fn delete_bodies_are_bounded() {
        let subjects: Vec<String> = (0..100).map(|i| format!("/dir/file-{i}")).collect();
        let batches = delete_batches(subjects, DocumentLimit::compact(120));
        assert_eq!(batches.iter().map(|b| b.len()).sum::<usize>(), 100);
        for b in &batches {
            assert!(delete_body(b).len() <= 120, "{}", delete_body(b).len());
        }
    }

    /// The exact length of `v` as Python's `json.dumps(v)` writes it (defaults).
    fn python_len(v: &serde_json::Value) -> usize {
        use serde_json::Value;
        let string = |s: &str| {
            2 + s
                .chars()
                .map(|c| match c {
                    '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
                    c if (c as u32) < 0x20 || c == '\u{7f}' => 6,
                    c if (c as u32) < 0x80 => 1,
                    c if (c as u32) < 0x10000 => 6,
                    _ => 12,
                })
                .sum::<usize>()
        };
        match v {
            Value::String(s) => string(s),
            Value::Array(a) => 2 + a.iter().map(python_len).sum::<usize>() + 2 * a.len().saturating_sub(1),
            Value::Object(o) => {
                2 + o.iter().map(|(k, v)| string(k) + 2 + python_len(v)).sum::<usize>() + 2 * o.len().saturating_sub(1)
            }
            other => other.to_string().len(),
        }
    }

    #[test]
    fn separators_are_counted_at_every_length() {
        let mut rng = icicle_core::rng::Rng::new(0x5eed_0002);
        for len in (0..300usize).chain([4_079, 4_080, 4_081, 8_200, 70_000]) {
            let b: Vec<u8> = (0..len).map(|_| b"a,:\"x"[rng.below(5) as usize]).collect();
            assert_eq!(scan(&b), (b.iter().filter(|&&c| c == b',' || c == b':').count(), false), "{len}");
            for odd in [0x7f, 0x80, 0xc3, 0xff] {
                for at in [0, len / 2, len.saturating_sub(1)] {
                    let mut b = b.clone();
                    if at < len {
                        b[at] = odd;
                        assert!(scan(&b).1, "{len} {at} {odd:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_reserialized_length_bounds_what_python_writes() {
        let mut rng = icicle_core::rng::Rng::new(0x5eed_0001);
        let words = ["a", "résumé", "データ", "😀", "x,y", "k:v", "\"q\"", "tab\t", "\u{1}", "/p/q", "del\u{7f}"];
        for _ in 0..2_000 {
            let n = 1 + rng.below(6) as usize;
            let mut m = serde_json::Map::new();
            for k in 0..n {
                let w = words[rng.below(words.len() as u64) as usize];
                let v = match rng.below(3) {
                    0 => serde_json::json!(w),
                    1 => serde_json::json!(rng.below(1 << 40)),
                    _ => serde_json::json!([w, {"n": w, "t": rng.below(10)}]),
                };
                m.insert(format!("{w}{k}"), v);
            }
            let v = serde_json::Value::Object(m);
            let compact = serde_json::to_vec(&v).unwrap();
            let want = python_len(&v);
            let got = reserialized_len(&compact);
            assert!(got >= want, "{} -> python {want}, estimate {got}", String::from_utf8_lossy(&compact));
        }
    }

    #[test]
    fn sdk_documents_stay_within_the_limit_once_reserialized() {
        let mut chunk = EntryBatch::default();
        for i in 0..500 {
            chunk.push(
                format!(
                    "{{\"subject\":\"/データ/f{i}\",\"visible_to\":[\"public\"],\"content\":{{\"t\":\"12:00:00\"}}}}"
                )
                .as_bytes(),
            );
        }
        let limit = DocumentLimit { max_bytes: 2_000, size: DocumentSize::Sdk };
        let mut b = Batcher::within(limit);
        let (mut full, mut big) = (Vec::new(), Vec::new());
        b.push_chunk(&chunk, &mut full, &mut big);
        full.extend(b.flush());
        assert!(big.is_empty());
        assert_eq!(full.iter().map(|d| d.len()).sum::<usize>(), 500);
        for (i, d) in full.iter().enumerate() {
            let mut out = Vec::new();
            d.write_gingest(&mut out).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert!(python_len(&v) <= 2_000, "{}", python_len(&v));
            if i + 1 < full.len() {
                assert!(python_len(&v) > 1_600, "documents are filled: {}", python_len(&v));
            }
        }
    }
}
