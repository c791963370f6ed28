//! The common sketch contract, checked for every sketch type.

use super::*;
use icicle_core::registry::default_sketch;

/// Deterministic values: a mix of zeros, small and heavy-tailed values, and negatives
/// (future timestamps become negative ages).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = icicle_core::rng::Rng::new(seed);
    (0..n)
        .map(|i| {
            let u = rng.f64();
            match i % 10 {
                0 => 0.0,
                1 => -(u * 1e6).floor(),
                _ => (u * 30.0).exp().floor(),
            }
        })
        .collect()
}

fn all() -> Vec<Arc<dyn SketchFactory>> {
    ["ddsketch", "kll", "req", "tdigest", "exact", "hybrid"].iter().map(|n| default_sketch(n).unwrap()).collect()
}

fn rank_of(sorted: &[f64], v: f64) -> f64 {
    let lt = sorted.partition_point(|x| *x < v);
    let le = sorted.partition_point(|x| *x <= v);
    (lt + le) as f64 / 2.0 / sorted.len() as f64
}

const QS: [f64; 8] = [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0];

#[test]
fn merging_shards_equals_inserting_everything() {
    let v = values(20_000, 1);
    let mut sorted = v.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    for f in all() {
        let mut whole = f.create();
        for &x in &v {
            whole.insert(x).unwrap();
        }
        let mut merged = f.create();
        for shard in v.chunks(997) {
            let mut s = f.create();
            for &x in shard {
                s.insert(x).unwrap();
            }
            // Through bytes, as shards travel between workers.
            let s = f.decode(&s.to_bytes()).unwrap();
            merged.merge(s.as_ref()).unwrap();
        }
        assert_eq!(merged.count(), v.len() as u64, "{}", f.kind());
        assert_eq!(merged.min(), Some(sorted[0]), "{}", f.kind());
        assert_eq!(merged.max(), Some(sorted[sorted.len() - 1]), "{}", f.kind());
        let exact_sum: f64 = v.iter().sum();
        assert!((merged.sum() - exact_sum).abs() <= exact_sum.abs() * 1e-9, "{}", f.kind());
        for q in QS {
            let (a, b) = (whole.quantile(q).unwrap(), merged.quantile(q).unwrap());
            match f.kind() {
                // Deterministic bins / exact values: identical answers.
                "ddsketch" | "exact" | "hybrid" => assert_eq!(a, b, "{} q={q}", f.kind()),
                // Randomized compaction: both within the rank bound of the truth.
                _ => {
                    for est in [a, b] {
                        let err = (rank_of(&sorted, est) - q).abs();
                        assert!(err < 0.05, "{} q={q}: rank error {err}", f.kind());
                    }
                }
            }
        }
    }
}

#[test]
fn ddsketch_and_exact_meet_their_value_guarantees() {
    let v = values(50_000, 2);
    let mut sorted = v.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    for name in ["ddsketch", "exact", "hybrid"] {
        let f = default_sketch(name).unwrap();
        let mut s = f.create();
        for &x in &v {
            s.insert(x).unwrap();
        }
        for q in QS {
            let truth = exact::exact_quantile(&sorted, q).unwrap();
            let est = s.quantile(q).unwrap();
            let rel = if truth == 0.0 { est.abs() } else { ((est - truth) / truth).abs() };
            let bound = if name == "exact" { 0.0 } else { 0.0100001 };
            assert!(rel <= bound, "{name} q={q}: {est} vs {truth}");
        }
    }
}

mod exact {
    pub use crate::exact_quantile;
}

#[test]
fn mismatched_configurations_and_types_refuse_to_merge() {
    let a = default_sketch("ddsketch").unwrap().create();
    let figment = figment_with("[s]\ntype = \"ddsketch\"\nalpha = 0.02\n");
    let mut b = icicle_core::registry::sketch_at(&figment, "s").unwrap().create();
    assert!(matches!(b.merge(a.as_ref()), Err(SketchError::MismatchedConfig(_))));
    let kll100 =
        icicle_core::registry::sketch_at(&figment_with("[s]\ntype = \"kll\"\nk = 100\n"), "s").unwrap().create();
    let mut kll200 = default_sketch("kll").unwrap().create();
    assert!(matches!(kll200.merge(kll100.as_ref()), Err(SketchError::MismatchedConfig(_))));
    assert!(matches!(kll200.merge(a.as_ref()), Err(SketchError::WrongType { .. })));
}

fn figment_with(toml: &str) -> figment_reexport::Figment {
    use figment_reexport::providers::{Format, Toml};
    figment_reexport::Figment::from(Toml::string(toml))
}

mod figment_reexport {
    pub use icicle_core::config::figment_types::*;
}

#[test]
fn exact_refuses_to_exceed_its_cap() {
    let f = icicle_core::registry::sketch_at(&figment_with("[s]\ntype = \"exact\"\nmax_bytes = 80\n"), "s").unwrap();
    let mut s = f.create();
    for i in 0..10 {
        s.insert(i as f64).unwrap();
    }
    assert_eq!(s.insert(10.0), Err(SketchError::MemoryCap { cap: 80 }));
    assert_eq!(s.count(), 10);
}

#[test]
fn not_a_number_is_an_error_and_empty_sketches_answer_none() {
    for f in all() {
        let mut s = f.create();
        assert!(s.quantile(0.5).is_none(), "{}", f.kind());
        assert!(s.insert(f64::NAN).is_err(), "{}", f.kind());
        assert_eq!(s.count(), 0, "{}", f.kind());
        assert!(s.memory_bytes() > 0);
    }
}

#[test]
fn hybrid_is_exact_below_its_threshold() {
    let f = default_sketch("hybrid").unwrap();
    let mut s = f.create();
    for x in [5.0, 1.0, 3.0] {
        s.insert(x).unwrap();
    }
    assert_eq!(s.quantile(0.5), Some(3.0));
    let big = f.create();
    let mut big = big;
    for i in 0..10_000 {
        big.insert(i as f64 + 1.0).unwrap();
    }
    s.merge(big.as_ref()).unwrap();
    assert_eq!(s.count(), 10_003);
    let p50 = s.quantile(0.5).unwrap();
    assert!((p50 - 5000.0).abs() / 5000.0 < 0.011, "{p50}");
}
