//! Quantile sketches behind the `Sketch` trait: `ddsketch` (relative value error),
//! `kll`, `req`, `tdigest` (rank error, Apache DataSketches), `exact` (ground truth with a
//! memory cap) and `hybrid` (exact until a threshold, then DDSketch).

use std::any::Any;
use std::sync::{Arc, Mutex};

use datasketches::common::SearchCriteria;
use datasketches::kll::{KllFloat, KllSketch};
use datasketches::req::{RankAccuracy, ReqFloat, ReqSketch};
use datasketches::tdigest::TDigestMut;
use icicle_core::registry::{build_component, BuildContext, ComponentConfig, PluginDescriptor, PluginKind};
use icicle_core::traits::{Sketch, SketchError, SketchFactory};
use icicle_core::ConfigError;
use serde::Deserialize;
use sketches_ddsketch::{Config as DdConfig, DDSketch};

mod exact;

pub use exact::{exact_quantile, Exact, ExactConfig, Hybrid, HybridConfig};

fn wrong_type(ours: &'static str, other: &dyn Sketch) -> SketchError {
    SketchError::WrongType { ours: ours.into(), theirs: other.kind().into() }
}

fn check(v: f64) -> Result<(), SketchError> {
    if v.is_nan() {
        Err(SketchError::NotANumber(v))
    } else {
        Ok(())
    }
}

fn split_sum(bytes: &[u8]) -> Result<(f64, &[u8]), SketchError> {
    if bytes.len() < 8 {
        return Err(SketchError::Decode("truncated".into()));
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    Ok((f64::from_le_bytes(b), &bytes[8..]))
}

// ---------------------------------------------------------------------------------------
// DDSketch

/// `[...sketch] type = "ddsketch"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct DdSketchConfig {
    /// Relative accuracy α.
    pub alpha: f64,
    /// Bin cap (lowest bins collapse beyond it).
    pub max_bins: u32,
    /// Values within ±min_value count as zero (exactly).
    pub min_value: f64,
}

impl Default for DdSketchConfig {
    fn default() -> Self {
        DdSketchConfig { alpha: 0.01, max_bins: 2048, min_value: 1e-9 }
    }
}

/// DDSketch (sketches-ddsketch): every quantile within relative error α of the true value.
#[derive(Clone)]
pub struct DdSketch {
    inner: DDSketch,
    cfg: (f64, u32, f64),
}

impl DdSketch {
    /// An empty sketch.
    pub fn new(cfg: &DdSketchConfig) -> DdSketch {
        DdSketch { inner: DDSketch::new(DdConfig::new(cfg.alpha, cfg.max_bins, cfg.min_value)), cfg: (cfg.alpha, cfg.max_bins, cfg.min_value) }
    }
}

impl Sketch for DdSketch {
    fn kind(&self) -> &'static str {
        "ddsketch"
    }
    fn insert(&mut self, v: f64) -> Result<(), SketchError> {
        check(v)?;
        self.inner.add(v);
        Ok(())
    }
    fn merge(&mut self, other: &dyn Sketch) -> Result<(), SketchError> {
        let o = other.as_any().downcast_ref::<DdSketch>().ok_or_else(|| wrong_type("ddsketch", other))?;
        if o.cfg != self.cfg {
            return Err(SketchError::MismatchedConfig(format!("alpha/max_bins/min_value {:?} vs {:?}", self.cfg, o.cfg)));
        }
        self.inner.merge(&o.inner).map_err(|e| SketchError::MismatchedConfig(e.to_string()))
    }
    fn quantile(&self, q: f64) -> Option<f64> {
        self.inner.quantile(q.clamp(0.0, 1.0)).ok().flatten()
    }
    fn count(&self) -> u64 {
        self.inner.count() as u64
    }
    fn min(&self) -> Option<f64> {
        self.inner.min()
    }
    fn max(&self) -> Option<f64> {
        self.inner.max()
    }
    fn sum(&self) -> f64 {
        self.inner.sum().unwrap_or(0.0)
    }
    fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.inner).unwrap_or_default()
    }
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.inner.length() * 8
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct DdFactory(DdSketchConfig);

impl SketchFactory for DdFactory {
    fn kind(&self) -> &'static str {
        "ddsketch"
    }
    fn describe(&self) -> String {
        format!("alpha={} max_bins={}", self.0.alpha, self.0.max_bins)
    }
    fn create(&self) -> Box<dyn Sketch> {
        Box::new(DdSketch::new(&self.0))
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError> {
        let inner: DDSketch = serde_json::from_slice(bytes).map_err(|e| SketchError::Decode(e.to_string()))?;
        Ok(Box::new(DdSketch { inner, cfg: (self.0.alpha, self.0.max_bins, self.0.min_value) }))
    }
}

impl ComponentConfig for DdSketchConfig {
    type Component = Arc<dyn SketchFactory>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(ctx.invalid("alpha", "must be in (0, 1)"));
        }
        Ok(Arc::new(DdFactory(self)))
    }
}

/// The `Sketch` impl shared by the DataSketches rank sketches (KLL, REQ): `$ty` has
/// `inner` (the sketch over `$wrap<f64>`), `sum`, and a `config()` string for merge checks.
macro_rules! rank_sketch {
    ($ty:ident, $name:literal, $wrap:ident) => {
        impl Sketch for $ty {
            fn kind(&self) -> &'static str {
                $name
            }
            fn insert(&mut self, v: f64) -> Result<(), SketchError> {
                self.inner.update($wrap::<f64>::new(v).map_err(|_| SketchError::NotANumber(v))?);
                self.sum += v;
                Ok(())
            }
            fn merge(&mut self, other: &dyn Sketch) -> Result<(), SketchError> {
                let o = other.as_any().downcast_ref::<$ty>().ok_or_else(|| wrong_type($name, other))?;
                if o.config() != self.config() {
                    return Err(SketchError::MismatchedConfig(format!("{} vs {}", self.config(), o.config())));
                }
                self.inner.merge(&o.inner).map_err(|e| SketchError::MismatchedConfig(e.to_string()))?;
                self.sum += o.sum;
                Ok(())
            }
            fn quantile(&self, q: f64) -> Option<f64> {
                self.inner.quantile(q.clamp(0.0, 1.0), SearchCriteria::Inclusive).ok().flatten().map(|v| *v)
            }
            fn count(&self) -> u64 {
                self.inner.n()
            }
            fn min(&self) -> Option<f64> {
                self.inner.min_item().map(|v| **v)
            }
            fn max(&self) -> Option<f64> {
                self.inner.max_item().map(|v| **v)
            }
            fn sum(&self) -> f64 {
                self.sum
            }
            fn to_bytes(&self) -> Vec<u8> {
                let mut out = self.sum.to_le_bytes().to_vec();
                out.extend(self.inner.serialize());
                out
            }
            fn memory_bytes(&self) -> usize {
                std::mem::size_of::<Self>() + self.inner.num_retained() as usize * 8
            }
            fn as_any(&self) -> &dyn Any {
                self
            }
        }
    };
}

// ---------------------------------------------------------------------------------------
// KLL

/// `[...sketch] type = "kll"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct KllConfig {
    pub k: u16,
}

impl Default for KllConfig {
    fn default() -> Self {
        KllConfig { k: 200 }
    }
}

/// KLL (Apache DataSketches): rank error about 1.65% at k = 200.
#[derive(Clone)]
pub struct Kll {
    inner: KllSketch<KllFloat<f64>>,
    sum: f64,
}

impl Kll {
    fn config(&self) -> String {
        format!("k={}", self.inner.k())
    }
}

rank_sketch!(Kll, "kll", KllFloat);

struct KllFactory(KllConfig);

impl SketchFactory for KllFactory {
    fn kind(&self) -> &'static str {
        "kll"
    }
    fn describe(&self) -> String {
        format!("k={}", self.0.k)
    }
    fn create(&self) -> Box<dyn Sketch> {
        // The configuration was validated when the factory was built.
        let inner = KllSketch::new(self.0.k).unwrap_or_default();
        Box::new(Kll { inner, sum: 0.0 })
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError> {
        let (sum, rest) = split_sum(bytes)?;
        let inner = KllSketch::deserialize(rest).map_err(|e| SketchError::Decode(e.to_string()))?;
        Ok(Box::new(Kll { inner, sum }))
    }
}

impl ComponentConfig for KllConfig {
    type Component = Arc<dyn SketchFactory>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        KllSketch::<KllFloat<f64>>::new(self.k).map_err(|e| ctx.invalid("k", e.to_string()))?;
        Ok(Arc::new(KllFactory(self)))
    }
}

// ---------------------------------------------------------------------------------------
// REQ

/// `[...sketch] type = "req"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ReqConfig {
    pub k: u16,
    /// `high` (accurate near rank 1) or `low`.
    pub rank_accuracy: Tail,
}

/// Which tail a REQ sketch is most accurate at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tail {
    /// Near rank 1 (the large values).
    #[default]
    High,
    /// Near rank 0.
    Low,
}

impl std::fmt::Display for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tail::High => "high",
            Tail::Low => "low",
        })
    }
}

impl Default for ReqConfig {
    fn default() -> Self {
        ReqConfig { k: 12, rank_accuracy: Tail::High }
    }
}

/// REQ (Apache DataSketches): relative rank error, most accurate at one tail.
#[derive(Clone)]
pub struct Req {
    inner: ReqSketch<ReqFloat<f64>>,
    sum: f64,
}

impl Req {
    fn config(&self) -> String {
        format!("k={} rank_accuracy={:?}", self.inner.k(), self.inner.rank_accuracy())
    }
}

rank_sketch!(Req, "req", ReqFloat);

struct ReqFactory(ReqConfig, RankAccuracy);

impl SketchFactory for ReqFactory {
    fn kind(&self) -> &'static str {
        "req"
    }
    fn describe(&self) -> String {
        format!("k={} rank_accuracy={}", self.0.k, self.0.rank_accuracy)
    }
    fn create(&self) -> Box<dyn Sketch> {
        let inner = ReqSketch::new(self.0.k, self.1).unwrap_or_default();
        Box::new(Req { inner, sum: 0.0 })
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError> {
        let (sum, rest) = split_sum(bytes)?;
        let inner = ReqSketch::deserialize(rest).map_err(|e| SketchError::Decode(e.to_string()))?;
        Ok(Box::new(Req { inner, sum }))
    }
}

impl ComponentConfig for ReqConfig {
    type Component = Arc<dyn SketchFactory>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        let acc = match self.rank_accuracy {
            Tail::High => RankAccuracy::HighRank,
            Tail::Low => RankAccuracy::LowRank,
        };
        ReqSketch::<ReqFloat<f64>>::new(self.k, acc).map_err(|e| ctx.invalid("k", e.to_string()))?;
        Ok(Arc::new(ReqFactory(self, acc)))
    }
}

// ---------------------------------------------------------------------------------------
// t-digest

/// `[...sketch] type = "tdigest"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct TDigestConfig {
    pub k: u16,
}

impl Default for TDigestConfig {
    fn default() -> Self {
        TDigestConfig { k: 100 }
    }
}

/// t-digest (Apache DataSketches): accurate tails, compressed middle.
pub struct TDigest {
    inner: Mutex<TDigestMut>,
    k: u16,
    count: u64,
    sum: f64,
}

impl Sketch for TDigest {
    fn kind(&self) -> &'static str {
        "tdigest"
    }
    fn insert(&mut self, v: f64) -> Result<(), SketchError> {
        check(v)?;
        if let Ok(t) = self.inner.get_mut() {
            t.update(v);
        }
        self.count += 1;
        self.sum += v;
        Ok(())
    }
    fn merge(&mut self, other: &dyn Sketch) -> Result<(), SketchError> {
        let o = other.as_any().downcast_ref::<TDigest>().ok_or_else(|| wrong_type("tdigest", other))?;
        if o.k != self.k {
            return Err(SketchError::MismatchedConfig(format!("k {} vs {}", self.k, o.k)));
        }
        let theirs = o.inner.lock().map_err(|_| SketchError::Decode("poisoned".into()))?.clone();
        self.inner.get_mut().map_err(|_| SketchError::Decode("poisoned".into()))?.merge(&theirs);
        self.count += o.count;
        self.sum += o.sum;
        Ok(())
    }
    fn quantile(&self, q: f64) -> Option<f64> {
        self.inner.lock().ok()?.quantile(q.clamp(0.0, 1.0)).ok().flatten()
    }
    fn count(&self) -> u64 {
        self.count
    }
    fn min(&self) -> Option<f64> {
        self.inner.lock().ok()?.min_value()
    }
    fn max(&self) -> Option<f64> {
        self.inner.lock().ok()?.max_value()
    }
    fn sum(&self) -> f64 {
        self.sum
    }
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.sum.to_le_bytes().to_vec();
        out.extend(self.count.to_le_bytes());
        if let Ok(mut t) = self.inner.lock() {
            out.extend(t.serialize());
        }
        out
    }
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.inner.lock().map(|t| t.estimated_size()).unwrap_or(0)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct TDigestFactory(TDigestConfig);

impl SketchFactory for TDigestFactory {
    fn kind(&self) -> &'static str {
        "tdigest"
    }
    fn describe(&self) -> String {
        format!("k={}", self.0.k)
    }
    fn create(&self) -> Box<dyn Sketch> {
        let inner = TDigestMut::new(self.0.k).unwrap_or_default();
        Box::new(TDigest { inner: Mutex::new(inner), k: self.0.k, count: 0, sum: 0.0 })
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError> {
        let (sum, rest) = split_sum(bytes)?;
        let (count, rest) = split_sum(rest)?;
        let inner = TDigestMut::deserialize(rest).map_err(|e| SketchError::Decode(e.to_string()))?;
        Ok(Box::new(TDigest { inner: Mutex::new(inner), k: self.0.k, count: count.to_bits(), sum }))
    }
}

impl ComponentConfig for TDigestConfig {
    type Component = Arc<dyn SketchFactory>;

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        TDigestMut::new(self.k).map_err(|e| ctx.invalid("k", e.to_string()))?;
        Ok(Arc::new(TDigestFactory(self)))
    }
}

inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "ddsketch", description: "DDSketch: every quantile within relative value error alpha (default 0.01)", example: "[aggregate.sketch]\ntype = \"ddsketch\"\nalpha = 0.01\nmax_bins = 2048\n", build: build_component::<DdSketchConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "kll", description: "KLL (Apache DataSketches): normalized rank error ~1.65% at k=200", example: "[aggregate.sketch]\ntype = \"kll\"\nk = 200\n", build: build_component::<KllConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "req", description: "REQ (Apache DataSketches): relative rank error, accurate at the high (or low) tail", example: "[aggregate.sketch]\ntype = \"req\"\nk = 12\nrank_accuracy = \"high\"\n", build: build_component::<ReqConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "tdigest", description: "t-digest (Apache DataSketches): accurate tails, compressed middle", example: "[aggregate.sketch]\ntype = \"tdigest\"\nk = 100\n", build: build_component::<TDigestConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "exact", description: "every value (ground truth); refuses to grow past max_bytes", example: "[aggregate.sketch]\ntype = \"exact\"\nmax_bytes = 1073741824\n", build: build_component::<ExactConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "hybrid", description: "exact up to `threshold` values, then DDSketch: exact answers for small principals, bounded memory", example: "[aggregate.sketch]\ntype = \"hybrid\"\nthreshold = 256\nalpha = 0.01\n", build: build_component::<HybridConfig> }
}

#[cfg(test)]
mod tests;
