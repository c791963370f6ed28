//! KLL (Karnin, Lang, Liberty, "Optimal Quantile Approximation in Streams", FOCS 2016) with
//! the layout of Apache DataSketches' KLL sketch: a stack of compactors ("levels"), level `h`
//! holding values of weight 2^h, level capacities k·(2/3)^depth floored at m = 8 (the top level
//! has depth 0), lazy compaction (only when the whole sketch is full, the lowest level at or
//! over its capacity), each compaction keeping the odd or the even positions of the sorted level
//! on a coin flip. Our implementation; the coin comes from a seedable generator whose state
//! is part of the sketch, so the same seed and the same values give the same bytes.

use std::any::Any;

use icicle_core::rng::Rng;
use icicle_core::traits::{Sketch, SketchError};

use crate::rank::{self, Stats};
use crate::wire::{self, Reader};
use crate::{check, wrong_type};

/// The default k: normalized rank error about 1.65% (99% confidence).
pub const DEFAULT_K: u16 = 200;
/// The smallest level capacity (m), and so the smallest k.
pub const MIN_K: u16 = M as u16;
const M: usize = 8;
/// Levels a sketch may have: 2^60 and more values fit.
const MAX_LEVELS: usize = 61;
const MAGIC: &[u8; 4] = b"iKLL";
const VERSION: u8 = 1;

/// Why `k` cannot configure a KLL sketch, if it cannot.
pub fn check_k(k: u16) -> Result<(), String> {
    if k < MIN_K {
        Err(format!("must be at least {MIN_K} (the minimum level capacity), got {k}"))
    } else {
        Ok(())
    }
}

/// The capacity of `level` in a sketch of `levels` levels: k·(2/3)^depth rounded, at least m.
fn level_capacity(k: u16, levels: usize, level: usize) -> usize {
    let depth = levels.saturating_sub(level + 1);
    if depth > 30 {
        // k·(2/3)^31 < 1 for every u16 k.
        return M;
    }
    let twice = (u64::from(k) << (depth + 1)) / 3u64.pow(depth as u32);
    (((twice + 1) >> 1) as usize).max(M)
}

/// The capacity of a sketch of `levels` levels.
fn total_capacity(k: u16, levels: usize) -> usize {
    (0..levels).map(|h| level_capacity(k, levels, h)).sum()
}

/// A KLL sketch of `f64` values (see the module documentation).
#[derive(Debug, Clone)]
pub struct Kll {
    k: u16,
    /// Level `h` holds values of weight 2^h; every level above 0 is sorted.
    levels: Vec<Vec<f64>>,
    retained: usize,
    capacity: usize,
    stats: Stats,
    rng: Rng,
}

impl Kll {
    /// An empty sketch with parameter `k` (below [`MIN_K`] acts as [`MIN_K`]) whose
    /// compactions flip coins from `seed`.
    pub fn new(k: u16, seed: u64) -> Kll {
        let k = k.max(MIN_K);
        Kll {
            k,
            levels: vec![Vec::new()],
            retained: 0,
            capacity: total_capacity(k, 1),
            stats: Stats::default(),
            rng: Rng::from_state(seed),
        }
    }

    /// The parameter k.
    pub fn k(&self) -> u16 {
        self.k
    }

    /// Values retained (the sketch's size in values).
    pub fn retained(&self) -> usize {
        self.retained
    }

    /// Add one value to level 0, compacting first when the sketch is full.
    fn push(&mut self, v: f64) {
        if self.retained >= self.capacity {
            self.compact_lowest_full();
        }
        rank::push_tight(&mut self.levels[0], v, self.capacity.saturating_sub(self.retained));
        self.retained += 1;
    }

    /// Compact the lowest level at or over its capacity (one exists when the sketch is full).
    fn compact_lowest_full(&mut self) {
        let levels = self.levels.len();
        let level =
            (0..levels).find(|&h| self.levels[h].len() >= level_capacity(self.k, levels, h)).unwrap_or(levels - 1);
        self.halve(level);
        self.refresh();
    }

    /// One compaction of `level`: with an odd population its first value stays; the rest,
    /// sorted, keep the odd or the even positions (a coin flip) and move up, weight doubled,
    /// merged into the level above (added when `level` is the top). Returns the values removed.
    fn halve(&mut self, level: usize) -> usize {
        if level + 1 >= self.levels.len() {
            self.levels.push(Vec::new());
        }
        let offset = usize::from(self.rng.bit());
        let (lower, upper) = self.levels.split_at_mut(level + 1);
        let items = &mut lower[level];
        let stays = items.len() % 2;
        if level == 0 {
            rank::sort(&mut items[stays..]);
        }
        let promoted: Vec<f64> = items.get(stays + offset..).unwrap_or(&[]).iter().step_by(2).copied().collect();
        let removed = items.len() - stays - promoted.len();
        items.truncate(stays);
        if level > 0 {
            // Level 0 refills at once and keeps its buffer; the others give theirs back.
            items.shrink_to_fit();
        }
        let above = &mut upper[0];
        *above = if above.is_empty() { promoted } else { rank::merge_sorted(above, &promoted) };
        removed
    }

    fn refresh(&mut self) {
        self.retained = self.levels.iter().map(Vec::len).sum();
        self.capacity = total_capacity(self.k, self.levels.len());
    }

    /// Fold `other` (same k) in: its level-0 values as inserts, then its higher levels merged
    /// level by level and the sketch compressed back under its capacity in one pass from the
    /// bottom (DataSketches' general compress).
    fn merge_levels(&mut self, other: &Kll) {
        for &v in &other.levels[0] {
            self.push(v);
        }
        if other.levels.len() > 1 {
            while self.levels.len() < other.levels.len() {
                self.levels.push(Vec::new());
            }
            for (h, theirs) in other.levels.iter().enumerate().skip(1) {
                if !theirs.is_empty() {
                    self.levels[h] = rank::merge_sorted(&self.levels[h], theirs);
                }
            }
            self.refresh();
            self.compress_all();
        }
    }

    /// Compact, bottom up, every level at or over its capacity while the sketch is over its
    /// capacity; compacting the top level adds a level (and so capacity).
    fn compress_all(&mut self) {
        let mut levels = self.levels.len();
        let mut count = self.retained;
        let mut target = total_capacity(self.k, levels);
        let mut level = 0;
        while level < levels && levels < MAX_LEVELS {
            if count >= target && self.levels[level].len() >= level_capacity(self.k, levels, level) {
                count -= self.halve(level);
                if level + 1 == levels {
                    levels += 1;
                    target += level_capacity(self.k, levels, 0);
                }
            }
            level += 1;
        }
        while self.levels.len() > 1 && self.levels.last().is_some_and(Vec::is_empty) {
            self.levels.pop();
        }
        self.refresh();
    }

    /// Decode bytes produced by [`Sketch::to_bytes`]: every field and invariant checked
    /// (levels above 0 sorted, weights adding up to the count, values within min and max).
    pub fn decode(bytes: &[u8]) -> Result<Kll, SketchError> {
        let mut r = Reader::open(bytes, MAGIC, VERSION)?;
        let k = r.u16()?;
        check_k(k).map_err(|e| wire::bad(format!("k {e}")))?;
        let rng = Rng::from_state(r.u64()?);
        let stats = Stats::decode(&mut r)?;
        let count = usize::from(r.u8()?);
        if !(1..=MAX_LEVELS).contains(&count) {
            return Err(wire::bad(format!("{count} levels")));
        }
        let mut levels = Vec::with_capacity(count);
        let mut weight = 0u64;
        for h in 0..count {
            let items = r.values()?;
            if h > 0 && !rank::is_sorted(&items) {
                return Err(wire::bad(format!("level {h} is not sorted")));
            }
            if !stats.covers(&items) {
                return Err(wire::bad(format!("level {h} holds a value outside the minimum and maximum")));
            }
            let level_weight = (items.len() as u64).checked_mul(1 << h).and_then(|w| w.checked_add(weight));
            weight = level_weight.ok_or_else(|| wire::bad("weights overflow"))?;
            levels.push(items);
        }
        r.finish()?;
        if weight != stats.n {
            return Err(wire::bad(format!("weights add up to {weight}, the count is {}", stats.n)));
        }
        let mut kll = Kll { k, levels, retained: 0, capacity: 0, stats, rng };
        kll.refresh();
        Ok(kll)
    }
}

impl Sketch for Kll {
    fn kind(&self) -> &'static str {
        "kll"
    }
    fn insert(&mut self, v: f64) -> Result<(), SketchError> {
        check(v)?;
        self.push(v);
        self.stats.add(v);
        Ok(())
    }
    fn merge(&mut self, other: &dyn Sketch) -> Result<(), SketchError> {
        let o = other.as_any().downcast_ref::<Kll>().ok_or_else(|| wrong_type("kll", other))?;
        if o.k != self.k {
            return Err(SketchError::MismatchedConfig(format!("k={} vs k={}", self.k, o.k)));
        }
        if o.stats.n > 0 {
            self.merge_levels(o);
            self.stats.merge(&o.stats);
        }
        Ok(())
    }
    fn quantile(&self, q: f64) -> Option<f64> {
        let weighted =
            self.levels.iter().enumerate().flat_map(|(h, l)| l.iter().map(move |v| (*v, 1u64 << h))).collect();
        rank::quantile(weighted, &self.stats, q)
    }
    fn count(&self) -> u64 {
        self.stats.n
    }
    fn min(&self) -> Option<f64> {
        self.stats.min()
    }
    fn max(&self) -> Option<f64> {
        self.stats.max()
    }
    fn sum(&self) -> f64 {
        self.stats.sum
    }
    /// `iKLL`, version 1, k (u16), the generator's state (u64), count, sum, min, max, the
    /// number of levels (u8), then per level its length (u32) and values; little-endian.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.levels.len() * 4 + self.retained * 8);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.k.to_le_bytes());
        out.extend_from_slice(&self.rng.state().to_le_bytes());
        self.stats.encode(&mut out);
        out.push(self.levels.len() as u8);
        for level in &self.levels {
            wire::put_values(&mut out, level);
        }
        out
    }
    fn memory_bytes(&self) -> usize {
        let slots: usize = self.levels.iter().map(Vec::capacity).sum();
        std::mem::size_of::<Self>() + self.levels.capacity() * std::mem::size_of::<Vec<f64>>() + slots * 8
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_capacities_follow_two_thirds_down_to_m() {
        assert_eq!(level_capacity(200, 1, 0), 200);
        assert_eq!(level_capacity(200, 2, 0), 133);
        assert_eq!(level_capacity(200, 3, 0), 89);
        assert_eq!(level_capacity(200, 20, 0), M);
        assert_eq!(level_capacity(u16::MAX, 61, 0), M);
        assert_eq!(total_capacity(8, 3), 24);
    }

    #[test]
    fn the_sketch_stays_within_its_capacity_and_keeps_every_weight() {
        let mut s = Kll::new(DEFAULT_K, 1);
        for i in 0..100_000u32 {
            s.insert(f64::from(i * 7919 % 100_000)).unwrap();
            assert!(s.retained <= s.capacity);
        }
        let weight: u64 = s.levels.iter().enumerate().map(|(h, l)| (l.len() as u64) << h).sum();
        assert_eq!(weight, 100_000);
        assert!(s.levels.iter().skip(1).all(|l| rank::is_sorted(l)));
        assert!(s.retained < 3 * usize::from(DEFAULT_K) + 8 * s.levels.len());
    }
}
