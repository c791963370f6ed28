//! Matches read from the index's columns, in path order, without the stored entries: what
//! `icicle find` prints (`-print`, `-ls`, `-printf`) is all in the columns, so an answer of
//! millions of records takes 16 bytes a match (its path's ordinal and its document), not the
//! entries themselves.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tantivy::columnar::{Column, StrColumn};
use tantivy::query::EnableScoring;
use tantivy::{DocId, SegmentReader};

use crate::search::{query, Filter, Reader, Visibility};
use crate::store::IndexError;

/// A primary record as the columns hold it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Row {
    /// Its path.
    pub path: String,
    /// `file` or `link`.
    pub kind: String,
    /// Bytes.
    pub size: u64,
    /// Owner uid.
    pub uid: u64,
    /// Group gid.
    pub gid: u64,
    /// Mode bits (`st_mode`).
    pub mode: u64,
    /// Seconds since the epoch.
    pub atime: i64,
    /// Seconds since the epoch.
    pub ctime: i64,
    /// Seconds since the epoch.
    pub mtime: i64,
}

/// One segment's matches, sorted by path ordinal (the segment's path order), and its columns.
struct Segment {
    hits: Vec<(u64, DocId)>,
    at: usize,
    path: StrColumn,
    kind: Option<StrColumn>,
    numbers: [Column<u64>; 4],
    times: [Column<i64>; 3],
}

impl Segment {
    fn open(seg: &SegmentReader, hits: Vec<(u64, DocId)>, path: StrColumn) -> tantivy::Result<Segment> {
        let ff = seg.fast_fields();
        Ok(Segment {
            hits,
            at: 0,
            path,
            kind: ff.str("kind")?,
            numbers: [ff.u64("size")?, ff.u64("uid")?, ff.u64("gid")?, ff.u64("mode")?],
            times: [ff.i64("atime")?, ff.i64("ctime")?, ff.i64("mtime")?],
        })
    }

    /// The path of the current match.
    fn path(&self) -> String {
        let mut s = String::new();
        if let Some((ord, _)) = self.hits.get(self.at) {
            let _ = self.path.ord_to_str(*ord, &mut s);
        }
        s
    }

    fn row(&self, path: String) -> Row {
        let doc = self.hits[self.at].1;
        let mut kind = String::new();
        if let Some(k) = &self.kind {
            if let Some(o) = k.term_ords(doc).next() {
                let _ = k.ord_to_str(o, &mut kind);
            }
        }
        let n = |i: usize| self.numbers[i].first(doc).unwrap_or(0);
        let t = |i: usize| self.times[i].first(doc).unwrap_or(0);
        Row { path, kind, size: n(0), uid: n(1), gid: n(2), mode: n(3), atime: t(0), ctime: t(1), mtime: t(2) }
    }
}

impl Reader {
    /// The records matching `filter` for `who`, in path order (the first `limit` when given),
    /// each handed to `each` as its columns hold it; returns how many. Records without a path
    /// (user and group aggregates) are left out.
    pub fn rows(
        &self,
        filter: &Filter,
        who: &Visibility,
        limit: Option<usize>,
        mut each: impl FnMut(&Row),
    ) -> Result<u64, IndexError> {
        let engine = |e: tantivy::TantivyError| IndexError::engine(self.dir(), e);
        let q = query(self.fields(), filter, who)?;
        let searcher = self.searcher();
        let weight = q.weight(EnableScoring::disabled_from_searcher(&searcher)).map_err(engine)?;
        let mut segments = Vec::new();
        for seg in searcher.segment_readers() {
            let Some(path) = seg.fast_fields().str("path").map_err(engine)? else { continue };
            let alive = seg.alive_bitset();
            // With a limit, only the first `limit` in path order are kept (a bounded heap).
            let mut first: BinaryHeap<(u64, DocId)> = BinaryHeap::new();
            let mut hits: Vec<(u64, DocId)> = Vec::new();
            weight
                .for_each_no_score(seg, &mut |docs: &[DocId]| {
                    for &d in docs {
                        if !alive.is_none_or(|a| a.is_alive(d)) {
                            continue;
                        }
                        let Some(o) = path.term_ords(d).next() else { continue };
                        match limit {
                            None => hits.push((o, d)),
                            Some(n) if first.len() < n => first.push((o, d)),
                            Some(_) => {
                                if first.peek().is_some_and(|top| (o, d) < *top) {
                                    first.pop();
                                    first.push((o, d));
                                }
                            }
                        }
                    }
                })
                .map_err(engine)?;
            if limit.is_some() {
                hits = first.into_vec();
            }
            hits.sort_unstable();
            if !hits.is_empty() {
                segments.push(Segment::open(seg, hits, path).map_err(engine)?);
            }
        }
        // The segments merged by path: the smallest current path first.
        let mut heap: BinaryHeap<Reverse<(String, usize)>> =
            segments.iter().enumerate().map(|(i, s)| Reverse((s.path(), i))).collect();
        let mut n = 0u64;
        while let Some(Reverse((path, i))) = heap.pop() {
            if limit.is_some_and(|l| n >= l as u64) {
                break;
            }
            let s = &mut segments[i];
            each(&s.row(path));
            n += 1;
            s.at += 1;
            if s.at < s.hits.len() {
                heap.push(Reverse((s.path(), i)));
            }
        }
        Ok(n)
    }
}
