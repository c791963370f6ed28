//! What our two rank sketches (`kll`, `req`) share: the exact count, minimum, maximum and sum,
//! the merge of sorted runs, and the quantile of weighted retained items.

use std::cmp::Ordering;

use crate::wire::{self, Reader};
use icicle_core::traits::SketchError;

/// The exact summary kept next to the retained items.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Values inserted (merged sketches' included).
    pub n: u64,
    /// The smallest value (+∞ when empty).
    pub min: f64,
    /// The largest value (−∞ when empty).
    pub max: f64,
    /// The sum of the values.
    pub sum: f64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats { n: 0, min: f64::INFINITY, max: f64::NEG_INFINITY, sum: 0.0 }
    }
}

impl Stats {
    /// Count one value (not NaN).
    pub fn add(&mut self, v: f64) {
        self.n = self.n.saturating_add(1);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
    }

    /// Count another sketch's values.
    pub fn merge(&mut self, o: &Stats) {
        self.n = self.n.saturating_add(o.n);
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
    }

    /// The minimum, `None` when empty.
    pub fn min(&self) -> Option<f64> {
        (self.n > 0).then_some(self.min)
    }

    /// The maximum, `None` when empty.
    pub fn max(&self) -> Option<f64> {
        (self.n > 0).then_some(self.max)
    }

    /// Append `n`, `sum`, `min` and `max`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for field in [self.n.to_le_bytes(), self.sum.to_le_bytes(), self.min.to_le_bytes(), self.max.to_le_bytes()] {
            out.extend_from_slice(&field);
        }
    }

    /// Read what [`Stats::encode`] wrote; a non-empty summary needs `min ≤ max`.
    pub fn decode(r: &mut Reader<'_>) -> Result<Stats, SketchError> {
        let s = Stats { n: r.u64()?, sum: r.f64()?, min: r.f64()?, max: r.f64()? };
        if s.n > 0 && (s.min.is_nan() || s.max.is_nan() || s.min > s.max) {
            return Err(wire::bad("minimum above maximum"));
        }
        Ok(s)
    }

    /// Whether every value of `retained` lies within the minimum and maximum.
    pub fn covers(&self, retained: &[f64]) -> bool {
        retained.iter().all(|v| *v >= self.min && *v <= self.max)
    }
}

/// Push `v` onto `buf`, growing it by half (not double) when full and never past `room` more
/// values (what fits before the next compaction), so a buffer holds little slack.
pub fn push_tight(buf: &mut Vec<f64>, v: f64, room: usize) {
    if buf.len() == buf.capacity() {
        buf.reserve_exact((buf.len() / 2).max(8).min(room.max(1)));
    }
    buf.push(v);
}

/// `a` and `b` (each sorted) merged into one sorted run.
pub fn merge_sorted(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if b[j] < a[i] {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// Sort `v` ascending. Retained values are never NaN (inserts and decoding refuse it), so
/// the plain float comparison is a total order here, and faster than `total_cmp`.
pub fn sort(v: &mut [f64]) {
    v.sort_unstable_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
}

/// Whether `v` is in ascending order.
pub fn is_sorted(v: &[f64]) -> bool {
    v.windows(2).all(|w| w[0] <= w[1])
}

/// The `q`-quantile of `items` (value, weight), with DataSketches' inclusive criterion: the
/// smallest retained value whose cumulative weight reaches ⌈q·W⌉. `q = 0` is the exact minimum
/// and `q = 1` the exact maximum; `None` when empty or `q` is NaN.
pub fn quantile(mut items: Vec<(f64, u64)>, stats: &Stats, q: f64) -> Option<f64> {
    if stats.n == 0 || items.is_empty() || q.is_nan() {
        return None;
    }
    if q <= 0.0 {
        return stats.min();
    }
    if q >= 1.0 {
        return stats.max();
    }
    items.sort_unstable_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal));
    let total: u128 = items.iter().map(|(_, w)| u128::from(*w)).sum();
    let target = (q * total as f64).ceil().max(1.0) as u128;
    let mut cumulative = 0u128;
    for (v, w) in &items {
        cumulative += u128::from(*w);
        if cumulative >= target {
            return Some(*v);
        }
    }
    items.last().map(|(v, _)| *v)
}
