//! REQ (Cormode, Karnin, Liberty, Thaler, Veselý, "Relative Error Streaming Quantiles", PODS
//! 2021) with the layout of Apache DataSketches' ReqSketch: a stack of relative compactors,
//! compactor `h` holding values of weight 2^h. A compactor's buffer is cut into a protected half
//! and sections (initially 3 of k values each); a compaction sorts the buffer and halves the
//! values of as many sections as its count of compactions so far has trailing ones, plus one,
//! taken from the end away from the accurate tail: with high-rank accuracy (HRA) the smallest
//! values are compacted and the largest never are, with low-rank accuracy the reverse. Every
//! 2^(sections−1) compactions the section count doubles and the section size shrinks by √2.
//! Which half survives is a coin flip on even-numbered compactions and the opposite of the
//! previous one on odd-numbered ones. Our implementation; the coin comes from a seedable
//! generator whose state is part of the sketch.

use std::any::Any;

use icicle_core::rng::Rng;
use icicle_core::traits::{Sketch, SketchError};

use crate::rank::{self, Stats};
use crate::wire::{self, Reader};
use crate::{check, wrong_type};

/// The default k (section size): relative rank error about 1% (one standard deviation).
pub const DEFAULT_K: u16 = 12;
/// The smallest k and section size.
pub const MIN_K: u16 = 4;
/// The largest k.
pub const MAX_K: u16 = 1024;
const INITIAL_SECTIONS: u8 = 3;
/// Compactors a sketch may have (weights up to 2^63).
const MAX_LEVELS: usize = 64;
const MAGIC: &[u8; 4] = b"iREQ";
const VERSION: u8 = 1;

/// Why `k` cannot configure a REQ sketch, if it cannot.
pub fn check_k(k: u16) -> Result<(), String> {
    if !(MIN_K..=MAX_K).contains(&k) {
        Err(format!("must be in [{MIN_K}, {MAX_K}], got {k}"))
    } else if !k.is_multiple_of(2) {
        Err(format!("must be even, got {k}"))
    } else {
        Ok(())
    }
}

/// `x` rounded to the nearest even integer.
fn nearest_even(x: f32) -> u32 {
    ((x / 2.0).round() as u32) << 1
}

/// One relative compactor (see the module documentation).
#[derive(Debug, Clone)]
struct Compactor {
    items: Vec<f64>,
    sorted: bool,
    /// Compactions so far; its trailing ones choose how many sections the next one halves.
    state: u64,
    /// The section size before rounding (k / √2^doublings).
    section_raw: f32,
    section: u32,
    sections: u8,
    coin: bool,
}

impl Compactor {
    fn new(k: u16) -> Compactor {
        let raw = f32::from(k);
        Compactor {
            items: Vec::new(),
            sorted: true,
            state: 0,
            section_raw: raw,
            section: nearest_even(raw),
            sections: INITIAL_SECTIONS,
            coin: false,
        }
    }

    fn nominal_capacity(&self) -> usize {
        2 * self.section as usize * usize::from(self.sections)
    }

    fn push(&mut self, v: f64, room: usize) {
        rank::push_tight(&mut self.items, v, room);
        self.sorted = self.items.len() < 2;
    }

    fn sort(&mut self) {
        if !self.sorted {
            rank::sort(&mut self.items);
            self.sorted = true;
        }
    }

    /// Merge sorted `values` into the buffer (sorting it first).
    fn merge_sorted_in(&mut self, values: &[f64]) {
        self.sort();
        if !values.is_empty() {
            self.items = rank::merge_sorted(&self.items, values);
        }
    }

    /// Halve the compactable part of the buffer; the survivors (sorted, weight doubled) are
    /// returned.
    fn compact(&mut self, hra: bool, rng: &mut Rng) -> Vec<f64> {
        self.sort();
        let len = self.items.len();
        let halved = (self.state.trailing_ones() + 1).min(u32::from(self.sections)) as usize;
        let mut protected = self.nominal_capacity() / 2 + (usize::from(self.sections) - halved) * self.section as usize;
        if len > protected && (len - protected) % 2 == 1 {
            protected += 1;
        }
        let (start, end) = if hra { (0, len.saturating_sub(protected)) } else { (protected.min(len), len) };
        if end - start < 2 {
            return Vec::new();
        }
        self.coin = if self.state & 1 == 1 { !self.coin } else { rng.bit() };
        let promoted = self.items[start + usize::from(self.coin)..end].iter().step_by(2).copied().collect();
        self.items.drain(start..end);
        self.state = self.state.wrapping_add(1);
        self.add_sections();
        promoted
    }

    /// Double the sections (each √2 smaller) once 2^(sections−1) compactions happened, while
    /// a section keeps at least [`MIN_K`] values. Whether it did.
    fn add_sections(&mut self) -> bool {
        let raw = self.section_raw / std::f32::consts::SQRT_2;
        let due = 1u64.checked_shl(u32::from(self.sections) - 1).is_some_and(|t| self.state >= t);
        match self.sections.checked_mul(2) {
            Some(sections) if due && self.section > u32::from(MIN_K) && nearest_even(raw) >= u32::from(MIN_K) => {
                self.section_raw = raw;
                self.section = nearest_even(raw);
                self.sections = sections;
                true
            }
            _ => false,
        }
    }

    /// Fold `other` (same weight) in: the union of their compaction histories, then the values.
    fn merge(&mut self, other: &Compactor) {
        self.state |= other.state;
        while self.add_sections() {}
        if other.sorted {
            self.merge_sorted_in(&other.items);
        } else {
            let mut theirs = other.items.clone();
            rank::sort(&mut theirs);
            self.merge_sorted_in(&theirs);
        }
    }
}

/// A REQ sketch of `f64` values (see the module documentation).
#[derive(Debug, Clone)]
pub struct Req {
    k: u16,
    hra: bool,
    compactors: Vec<Compactor>,
    retained: usize,
    nominal: usize,
    stats: Stats,
    rng: Rng,
}

impl Req {
    /// An empty sketch with section size `k` (made even and within [`MIN_K`]..=[`MAX_K`]),
    /// accurate at high ranks when `hra`, at low ranks otherwise, flipping coins from `seed`.
    pub fn new(k: u16, hra: bool, seed: u64) -> Req {
        let k = k.clamp(MIN_K, MAX_K) & !1;
        let mut r = Req {
            k,
            hra,
            compactors: Vec::new(),
            retained: 0,
            nominal: 0,
            stats: Stats::default(),
            rng: Rng::from_state(seed),
        };
        r.grow();
        r
    }

    /// The section size k.
    pub fn k(&self) -> u16 {
        self.k
    }

    /// Whether the sketch is accurate at high ranks (else at low ranks).
    pub fn high_rank_accuracy(&self) -> bool {
        self.hra
    }

    /// Values retained (the sketch's size in values).
    pub fn retained(&self) -> usize {
        self.retained
    }

    fn grow(&mut self) {
        self.compactors.push(Compactor::new(self.k));
        self.refresh();
    }

    fn refresh(&mut self) {
        self.retained = self.compactors.iter().map(|c| c.items.len()).sum();
        self.nominal = self.compactors.iter().map(Compactor::nominal_capacity).sum();
    }

    /// Compact, bottom up, every compactor at or over its nominal capacity, its survivors
    /// merged into the next one (added at the top when needed).
    fn compress(&mut self) {
        let mut h = 0;
        while h < self.compactors.len() {
            if self.compactors[h].items.len() >= self.compactors[h].nominal_capacity() {
                if h + 1 == self.compactors.len() {
                    if self.compactors.len() >= MAX_LEVELS {
                        break;
                    }
                    self.grow();
                }
                let promoted = self.compactors[h].compact(self.hra, &mut self.rng);
                if h > 0 {
                    // Compactor 0 refills at once and keeps its buffer; the others give theirs back.
                    self.compactors[h].items.shrink_to_fit();
                }
                self.compactors[h + 1].merge_sorted_in(&promoted);
                self.refresh();
            }
            h += 1;
        }
    }

    fn parameters(&self) -> String {
        format!("k={} rank_accuracy={}", self.k, if self.hra { "high" } else { "low" })
    }

    /// Decode bytes produced by [`Sketch::to_bytes`]: every field and invariant checked
    /// (section geometry, compactors above 0 sorted, weights adding up to the count, values
    /// within min and max).
    pub fn decode(bytes: &[u8]) -> Result<Req, SketchError> {
        let mut r = Reader::open(bytes, MAGIC, VERSION)?;
        let k = r.u16()?;
        check_k(k).map_err(|e| wire::bad(format!("k {e}")))?;
        let hra = match r.u8()? {
            0 => false,
            1 => true,
            other => return Err(wire::bad(format!("rank accuracy {other}"))),
        };
        let rng = Rng::from_state(r.u64()?);
        let stats = Stats::decode(&mut r)?;
        let count = usize::from(r.u8()?);
        if !(1..=MAX_LEVELS).contains(&count) {
            return Err(wire::bad(format!("{count} compactors")));
        }
        let mut compactors = Vec::with_capacity(count);
        let mut weight = 0u64;
        for h in 0..count {
            let c = decode_compactor(&mut r, k, h, &stats)?;
            let level_weight = (c.items.len() as u64).checked_mul(1 << h).and_then(|w| w.checked_add(weight));
            weight = level_weight.ok_or_else(|| wire::bad("weights overflow"))?;
            compactors.push(c);
        }
        r.finish()?;
        if weight != stats.n {
            return Err(wire::bad(format!("weights add up to {weight}, the count is {}", stats.n)));
        }
        let mut req = Req { k, hra, compactors, retained: 0, nominal: 0, stats, rng };
        req.refresh();
        Ok(req)
    }
}

/// One compactor of an image: state, raw section size (f32), sections, coin, values.
fn decode_compactor(r: &mut Reader<'_>, k: u16, h: usize, stats: &Stats) -> Result<Compactor, SketchError> {
    let state = r.u64()?;
    let section_raw = f32::from_bits(r.u32()?);
    let sections = r.u8()?;
    let coin = match r.u8()? {
        0 => false,
        1 => true,
        other => return Err(wire::bad(format!("compactor {h}: coin {other}"))),
    };
    if !(section_raw.is_finite() && section_raw <= f32::from(k) && nearest_even(section_raw) >= u32::from(MIN_K)) {
        return Err(wire::bad(format!("compactor {h}: section size {section_raw}")));
    }
    if sections % INITIAL_SECTIONS != 0 || !(sections / INITIAL_SECTIONS).is_power_of_two() {
        return Err(wire::bad(format!("compactor {h}: {sections} sections")));
    }
    let items = r.values()?;
    let sorted = rank::is_sorted(&items);
    if h > 0 && !sorted {
        return Err(wire::bad(format!("compactor {h} is not sorted")));
    }
    if !stats.covers(&items) {
        return Err(wire::bad(format!("compactor {h} holds a value outside the minimum and maximum")));
    }
    Ok(Compactor { items, sorted, state, section_raw, section: nearest_even(section_raw), sections, coin })
}

impl Sketch for Req {
    fn kind(&self) -> &'static str {
        "req"
    }
    fn insert(&mut self, v: f64) -> Result<(), SketchError> {
        check(v)?;
        self.compactors[0].push(v, self.nominal.saturating_sub(self.retained));
        self.retained += 1;
        self.stats.add(v);
        if self.retained >= self.nominal {
            self.compress();
        }
        Ok(())
    }
    fn merge(&mut self, other: &dyn Sketch) -> Result<(), SketchError> {
        let o = other.as_any().downcast_ref::<Req>().ok_or_else(|| wrong_type("req", other))?;
        if (o.k, o.hra) != (self.k, self.hra) {
            return Err(SketchError::MismatchedConfig(format!("{} vs {}", self.parameters(), o.parameters())));
        }
        if o.stats.n == 0 {
            return Ok(());
        }
        while self.compactors.len() < o.compactors.len() {
            self.grow();
        }
        for (mine, theirs) in self.compactors.iter_mut().zip(&o.compactors) {
            mine.merge(theirs);
        }
        self.stats.merge(&o.stats);
        self.refresh();
        if self.retained >= self.nominal {
            self.compress();
        }
        Ok(())
    }
    fn quantile(&self, q: f64) -> Option<f64> {
        let weighted = self
            .compactors
            .iter()
            .enumerate()
            .flat_map(|(h, c)| c.items.iter().map(move |v| (*v, 1u64 << h)))
            .collect();
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
    /// `iREQ`, version 1, k (u16), rank accuracy (u8: 1 high, 0 low), the generator's state
    /// (u64), count, sum, min, max, the number of compactors (u8), then per compactor its
    /// state (u64), raw section size (f32), sections (u8), coin (u8), length (u32) and values.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.compactors.len() * 18 + self.retained * 8);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.k.to_le_bytes());
        out.push(u8::from(self.hra));
        out.extend_from_slice(&self.rng.state().to_le_bytes());
        self.stats.encode(&mut out);
        out.push(self.compactors.len() as u8);
        for c in &self.compactors {
            out.extend_from_slice(&c.state.to_le_bytes());
            out.extend_from_slice(&c.section_raw.to_bits().to_le_bytes());
            out.push(c.sections);
            out.push(u8::from(c.coin));
            wire::put_values(&mut out, &c.items);
        }
        out
    }
    fn memory_bytes(&self) -> usize {
        let slots: usize = self.compactors.iter().map(|c| c.items.capacity()).sum();
        std::mem::size_of::<Self>() + self.compactors.capacity() * std::mem::size_of::<Compactor>() + slots * 8
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_double_and_shrink_on_schedule() {
        let mut c = Compactor::new(12);
        assert_eq!((c.section, c.sections, c.nominal_capacity()), (12, 3, 72));
        c.state = 4;
        assert!(c.add_sections());
        assert_eq!((c.section, c.sections), (8, 6));
        assert!(!c.add_sections(), "the next doubling waits for 2^5 compactions");
    }

    #[test]
    fn the_accurate_tail_is_never_compacted() {
        for hra in [true, false] {
            let mut s = Req::new(DEFAULT_K, hra, 3);
            for i in 0..50_000u32 {
                s.insert(f64::from(i * 7919 % 50_000)).unwrap();
            }
            // The 36 most extreme values on the accurate side stay in compactor 0, exactly.
            let mut bottom = s.compactors[0].items.clone();
            bottom.sort_unstable_by(f64::total_cmp);
            let extreme: Vec<f64> =
                if hra { (49_964..50_000).map(f64::from).collect() } else { (0..36).map(f64::from).collect() };
            assert!(extreme.iter().all(|v| bottom.contains(v)), "hra={hra}");
            let weight: u64 = s.compactors.iter().enumerate().map(|(h, c)| (c.items.len() as u64) << h).sum();
            assert_eq!(weight, 50_000);
        }
    }
}
