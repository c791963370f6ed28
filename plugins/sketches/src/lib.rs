//! Quantile sketches behind the `Sketch` trait: `ddsketch` (relative value error), `kll` and
//! `req` (rank error; our implementations of the published algorithms, seedable), `tdigest`
//! (rank error, Apache DataSketches), `exact` (ground truth with a memory cap) and `hybrid`
//! (exact until a threshold, then DDSketch).

use std::any::Any;
use std::sync::{Arc, Mutex};

use datasketches::tdigest::TDigestMut;
use icicle_core::registry::{build_component, BuildContext, ComponentConfig, PluginDescriptor, PluginKind};
use icicle_core::traits::{Sketch, SketchError, SketchFactory};
use icicle_core::ConfigError;
use serde::Deserialize;
use sketches_ddsketch::{Config as DdConfig, DDSketch};

mod exact;
pub mod kll;
mod rank;
pub mod req;
mod rng;
mod wire;

pub use exact::{exact_quantile, Exact, ExactConfig, Hybrid, HybridConfig};
pub use kll::Kll;
pub use req::Req;
use rng::Seeds;

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
        DdSketch {
            inner: DDSketch::new(DdConfig::new(cfg.alpha, cfg.max_bins, cfg.min_value)),
            cfg: (cfg.alpha, cfg.max_bins, cfg.min_value),
        }
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
            return Err(SketchError::MismatchedConfig(format!(
                "alpha/max_bins/min_value {:?} vs {:?}",
                self.cfg, o.cfg
            )));
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

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(ctx.invalid("alpha", "must be in (0, 1)"));
        }
        Ok(())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(DdFactory(self)))
    }
}

// ---------------------------------------------------------------------------------------
// KLL

/// `[...sketch] type = "kll"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct KllConfig {
    /// Level capacity parameter: rank error about 1.65% at 200, shrinking as 1/k.
    pub k: u16,
    /// Seed of the compactions' coin flips: sketches made by this factory get seeds derived
    /// from it and their creation order. Without it, each sketch's seed comes from the OS.
    pub seed: Option<u64>,
}

impl Default for KllConfig {
    fn default() -> Self {
        KllConfig { k: kll::DEFAULT_K, seed: None }
    }
}

struct KllFactory {
    cfg: KllConfig,
    seeds: Seeds,
}

impl SketchFactory for KllFactory {
    fn kind(&self) -> &'static str {
        "kll"
    }
    fn describe(&self) -> String {
        match self.cfg.seed {
            Some(seed) => format!("k={} seed={seed}", self.cfg.k),
            None => format!("k={}", self.cfg.k),
        }
    }
    fn create(&self) -> Box<dyn Sketch> {
        self.create_seeded(self.seeds.next())
    }
    fn create_seeded(&self, seed: u64) -> Box<dyn Sketch> {
        Box::new(Kll::new(self.cfg.k, seed))
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError> {
        Ok(Box::new(Kll::decode(bytes)?))
    }
}

impl ComponentConfig for KllConfig {
    type Component = Arc<dyn SketchFactory>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        kll::check_k(self.k).map_err(|e| ctx.invalid("k", e))
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(KllFactory { seeds: Seeds::new(self.seed), cfg: self }))
    }
}

// ---------------------------------------------------------------------------------------
// REQ

/// `[...sketch] type = "req"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ReqConfig {
    /// Section size (even, 4..=1024): relative rank error shrinking as 1/k.
    pub k: u16,
    /// `high` (accurate near rank 1) or `low`.
    pub rank_accuracy: Tail,
    /// Seed of the compactions' coin flips, as for `kll`.
    pub seed: Option<u64>,
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
        ReqConfig { k: req::DEFAULT_K, rank_accuracy: Tail::High, seed: None }
    }
}

struct ReqFactory {
    cfg: ReqConfig,
    seeds: Seeds,
}

impl SketchFactory for ReqFactory {
    fn kind(&self) -> &'static str {
        "req"
    }
    fn describe(&self) -> String {
        match self.cfg.seed {
            Some(seed) => format!("k={} rank_accuracy={} seed={seed}", self.cfg.k, self.cfg.rank_accuracy),
            None => format!("k={} rank_accuracy={}", self.cfg.k, self.cfg.rank_accuracy),
        }
    }
    fn create(&self) -> Box<dyn Sketch> {
        self.create_seeded(self.seeds.next())
    }
    fn create_seeded(&self, seed: u64) -> Box<dyn Sketch> {
        Box::new(Req::new(self.cfg.k, self.cfg.rank_accuracy == Tail::High, seed))
    }
    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Sketch>, SketchError> {
        Ok(Box::new(Req::decode(bytes)?))
    }
}

impl ComponentConfig for ReqConfig {
    type Component = Arc<dyn SketchFactory>;

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        req::check_k(self.k).map_err(|e| ctx.invalid("k", e))
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(ReqFactory { seeds: Seeds::new(self.seed), cfg: self }))
    }
}

// ---------------------------------------------------------------------------------------
// t-digest

/// `[...sketch] type = "tdigest"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct TDigestConfig {
    /// Compression (at least 10): more centroids and smaller error as it grows.
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

    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        TDigestMut::new(self.k).map(|_| ()).map_err(|e| ctx.invalid("k", e.to_string()))
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn SketchFactory>, ConfigError> {
        self.validate(ctx)?;
        Ok(Arc::new(TDigestFactory(self)))
    }
}

inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "ddsketch", description: "DDSketch: every quantile within relative value error alpha (default 0.01)", example: "[aggregate.sketch]\ntype = \"ddsketch\"\nalpha = 0.01\nmax_bins = 2048\n", build: build_component::<DdSketchConfig>, check: icicle_core::registry::check_component::<DdSketchConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "kll", description: "KLL: normalized rank error ~1.65% at k=200; optional `seed` for reproducible compactions", example: "[aggregate.sketch]\ntype = \"kll\"\nk = 200\n", build: build_component::<KllConfig>, check: icicle_core::registry::check_component::<KllConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "req", description: "REQ: relative rank error, accurate at the high (or low) tail; optional `seed`", example: "[aggregate.sketch]\ntype = \"req\"\nk = 12\nrank_accuracy = \"high\"\n", build: build_component::<ReqConfig>, check: icicle_core::registry::check_component::<ReqConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "tdigest", description: "t-digest (Apache DataSketches): accurate tails, compressed middle", example: "[aggregate.sketch]\ntype = \"tdigest\"\nk = 100\n", build: build_component::<TDigestConfig>, check: icicle_core::registry::check_component::<TDigestConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "exact", description: "every value (ground truth); refuses to grow past max_bytes", example: "[aggregate.sketch]\ntype = \"exact\"\nmax_bytes = 1073741824\n", build: build_component::<ExactConfig>, check: icicle_core::registry::check_component::<ExactConfig> }
}
inventory::submit! {
    PluginDescriptor { kind: PluginKind::Sketch, name: "hybrid", description: "exact up to `threshold` values, then DDSketch: exact answers for small principals, bounded memory", example: "[aggregate.sketch]\ntype = \"hybrid\"\nthreshold = 256\nalpha = 0.01\n", build: build_component::<HybridConfig>, check: icicle_core::registry::check_component::<HybridConfig> }
}

#[cfg(test)]
mod tests;
