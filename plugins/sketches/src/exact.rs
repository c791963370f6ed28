//! `exact` (every value, the ground truth, refusing to grow past a memory cap) and `hybrid`
//! (exact up to a threshold, then DDSketch).

use std::any::Any;
use std::sync::{Arc, Mutex};

use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::traits::{Sketch, SketchError, SketchFactory};
use icicle_core::ConfigError;
use serde::Deserialize;

use crate::{check, wrong_type, DdFactory, DdSketch, DdSketchConfig};

// ---------------------------------------------------------------------------------------
// exact

/// `[...sketch] type = "exact"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ExactConfig {
    /// Refuse to hold more than this many bytes of values (per sketch).
    pub max_bytes: usize,
}

impl Default for ExactConfig {
    fn default() -> Self {
        ExactConfig { max_bytes: 1 << 30 }
    }
}

/// Every value, sorted on demand: the ground truth. Quantile `q` is the value at rank
/// ⌊q·(n−1)⌋, the definition DDSketch uses.
pub struct Exact {
    values: Mutex<(Vec<f64>, bool)>,
    cap: usize,
    sum: f64,
}

impl Exact {
    /// An empty exact sketch holding at most `cap` bytes.
    pub fn new(cap: usize) -> Exact {
        Exact { values: Mutex::new((Vec::new(), true)), cap, sum: 0.0 }
    }

    fn with_sorted<R>(&self, f: impl FnOnce(&[f64]) -> R) -> Option<R> {
        let mut g = self.values.lock().ok()?;
        if !g.1 {
            g.0.sort_by(|a, b| a.total_cmp(b));
            g.1 = true;
        }
        Some(f(&g.0))
    }
}

/// The exact `q`-quantile of sorted `v` (rank ⌊q·(n−1)⌋).
pub fn exact_quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * (sorted.len() as f64 - 1.0)) as usize;
    Some(sorted[rank.min(sorted.len() - 1)])
}

impl Sketch for Exact {
    fn kind(&self) -> &'static str {
        "exact"
    }
    fn insert(&mut self, v: f64) -> Result<(), SketchError> {
        check(v)?;
        let g = self.values.get_mut().map_err(|_| SketchError::Decode("poisoned".into()))?;
        if (g.0.len() + 1) * 8 > self.cap {
            return Err(SketchError::MemoryCap { cap: self.cap });
        }
        g.0.push(v);
        g.1 = false;
        self.sum += v;
        Ok(())
    }
    fn merge(&mut self, other: &dyn Sketch) -> Result<(), SketchError> {
        let o = other.as_any().downcast_ref::<Exact>().ok_or_else(|| wrong_type("exact", other))?;
        let theirs = o.values.lock().map_err(|_| SketchError::Decode("poisoned".into()))?.0.clone();
        let g = self.values.get_mut().map_err(|_| SketchError::Decode("poisoned".into()))?;
        if (g.0.len() + theirs.len()) * 8 > self.cap {
            return Err(SketchError::MemoryCap { cap: self.cap });
        }
        g.0.extend(theirs);
        g.1 = false;
        self.sum += o.sum;
        Ok(())
    }
    fn quantile(&self, q: f64) -> Option<f64> {
        self.with_sorted(|v| exact_quantile(v, q)).flatten()
    }
    fn count(&self) -> u64 {
        self.values.lock().map(|g| g.0.len() as u64).unwrap_or(0)
    }
    fn min(&self) -> Option<f64> {
        self.with_sorted(|v| v.first().copied()).flatten()
    }
    fn max(&self) -> Option<f64> {
        self.with_sorted(|v| v.last().copied()).flatten()
    }
    fn sum(&self) -> f64 {
        self.sum
    }
    fn to_bytes(&self) -> Vec<u8> {
        self.values.lock().map(|g| g.0.iter().flat_map(|v| v.to_le_bytes()).collect()).unwrap_or_default()
    }
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.values.lock().map(|g| g.0.capacity() * 8).unwrap_or(0)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct ExactFactory(ExactConfig);

impl SketchFactory for ExactFactory {
    fn kind(&self) -> &'static str {
        "exact"
    }
    fn describe(&self) -> String {
        format!("max_bytes={}", self.0.max_bytes)
    }
    fn create(&self) -> Box<dyn Sketch> {
        Box::new(Exact::new(self.0.max_bytes))
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError> {
        if !bytes.len().is_multiple_of(8) {
            return Err(SketchError::Decode("length is not a multiple of 8".into()));
        }
        let mut e = Exact::new(self.0.max_bytes);
        for c in bytes.chunks_exact(8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            e.insert(f64::from_le_bytes(b))?;
        }
        Ok(Box::new(e))
    }
}

impl ComponentConfig for ExactConfig {
    type Component = Arc<dyn SketchFactory>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(ExactFactory(self)))
    }
}

// ---------------------------------------------------------------------------------------
// hybrid

/// `[...sketch] type = "hybrid"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct HybridConfig {
    /// Values kept exactly before switching to DDSketch.
    pub threshold: usize,
    /// DDSketch's relative accuracy α, once switched.
    pub alpha: f64,
    /// DDSketch's bin cap, once switched.
    pub max_bins: u32,
}

impl Default for HybridConfig {
    fn default() -> Self {
        HybridConfig { threshold: 256, alpha: 0.01, max_bins: 2048 }
    }
}

/// Exact answers for the many small principals, DDSketch's bounded memory for the big ones.
pub struct Hybrid {
    exact: Option<Exact>,
    dd: Option<DdSketch>,
    cfg: HybridConfig,
}

impl Hybrid {
    fn dd_config(&self) -> DdSketchConfig {
        DdSketchConfig { alpha: self.cfg.alpha, max_bins: self.cfg.max_bins, min_value: 1e-9 }
    }

    fn promote(&mut self) -> Result<&mut DdSketch, SketchError> {
        if self.dd.is_none() {
            let mut dd = DdSketch::new(&self.dd_config());
            if let Some(e) = self.exact.take() {
                let values = e.values.into_inner().map_err(|_| SketchError::Decode("poisoned".into()))?.0;
                for v in values {
                    dd.insert(v)?;
                }
            }
            self.dd = Some(dd);
        }
        self.dd.as_mut().ok_or_else(|| SketchError::Decode("unreachable".into()))
    }

    fn same_config(&self, o: &Hybrid) -> bool {
        (self.cfg.threshold, self.cfg.alpha, self.cfg.max_bins) == (o.cfg.threshold, o.cfg.alpha, o.cfg.max_bins)
    }
}

impl Sketch for Hybrid {
    fn kind(&self) -> &'static str {
        "hybrid"
    }
    fn insert(&mut self, v: f64) -> Result<(), SketchError> {
        check(v)?;
        if let Some(e) = &mut self.exact {
            if (e.count() as usize) < self.cfg.threshold {
                return e.insert(v);
            }
        }
        self.promote()?.insert(v)
    }
    fn merge(&mut self, other: &dyn Sketch) -> Result<(), SketchError> {
        let o = other.as_any().downcast_ref::<Hybrid>().ok_or_else(|| wrong_type("hybrid", other))?;
        if !self.same_config(o) {
            return Err(SketchError::MismatchedConfig(format!(
                "threshold/alpha/max_bins differ ({:?} vs {:?})",
                self.cfg, o.cfg
            )));
        }
        match (&mut self.exact, &o.exact) {
            (Some(mine), Some(theirs)) if (mine.count() + theirs.count()) as usize <= self.cfg.threshold => {
                mine.merge(theirs)
            }
            _ => {
                let dd = self.promote()?;
                if let Some(theirs) = &o.exact {
                    let values = theirs.values.lock().map_err(|_| SketchError::Decode("poisoned".into()))?.0.clone();
                    for v in values {
                        dd.insert(v)?;
                    }
                }
                if let Some(theirs) = &o.dd {
                    dd.merge(theirs)?;
                }
                Ok(())
            }
        }
    }
    fn quantile(&self, q: f64) -> Option<f64> {
        match (&self.exact, &self.dd) {
            (Some(e), _) => e.quantile(q),
            (_, Some(d)) => d.quantile(q),
            _ => None,
        }
    }
    fn count(&self) -> u64 {
        self.exact.as_ref().map(|e| e.count()).or_else(|| self.dd.as_ref().map(|d| d.count())).unwrap_or(0)
    }
    fn min(&self) -> Option<f64> {
        self.exact.as_ref().and_then(|e| e.min()).or_else(|| self.dd.as_ref().and_then(|d| d.min()))
    }
    fn max(&self) -> Option<f64> {
        self.exact.as_ref().and_then(|e| e.max()).or_else(|| self.dd.as_ref().and_then(|d| d.max()))
    }
    fn sum(&self) -> f64 {
        self.exact.as_ref().map(|e| e.sum()).or_else(|| self.dd.as_ref().map(|d| d.sum())).unwrap_or(0.0)
    }
    fn to_bytes(&self) -> Vec<u8> {
        match (&self.exact, &self.dd) {
            (Some(e), _) => [vec![0u8], e.to_bytes()].concat(),
            (_, Some(d)) => [vec![1u8], d.to_bytes()].concat(),
            _ => vec![0u8],
        }
    }
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.exact.as_ref().map(|e| e.memory_bytes()).unwrap_or(0)
            + self.dd.as_ref().map(|d| d.memory_bytes()).unwrap_or(0)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct HybridFactory(HybridConfig);

impl SketchFactory for HybridFactory {
    fn kind(&self) -> &'static str {
        "hybrid"
    }
    fn describe(&self) -> String {
        format!("threshold={} alpha={}", self.0.threshold, self.0.alpha)
    }
    fn create(&self) -> Box<dyn Sketch> {
        Box::new(Hybrid { exact: Some(Exact::new(usize::MAX)), dd: None, cfg: self.0.clone() })
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError> {
        let (tag, rest) = bytes.split_first().ok_or_else(|| SketchError::Decode("empty".into()))?;
        let mut h = Hybrid { exact: None, dd: None, cfg: self.0.clone() };
        match tag {
            0 => {
                let e = ExactFactory(ExactConfig { max_bytes: usize::MAX }).decode(rest)?;
                let mut exact = Exact::new(usize::MAX);
                exact.merge(e.as_ref())?;
                h.exact = Some(exact);
            }
            1 => {
                let d = DdFactory(h.dd_config()).decode(rest)?;
                let dd = d
                    .as_any()
                    .downcast_ref::<DdSketch>()
                    .cloned()
                    .ok_or_else(|| SketchError::Decode("not a ddsketch".into()))?;
                h.dd = Some(dd);
            }
            t => return Err(SketchError::Decode(format!("unknown hybrid tag {t}"))),
        }
        Ok(Box::new(h))
    }
}

impl ComponentConfig for HybridConfig {
    type Component = Arc<dyn SketchFactory>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(ctx.invalid("alpha", "must be in (0, 1)"));
        }
        Ok(())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(HybridFactory(self)))
    }
}
