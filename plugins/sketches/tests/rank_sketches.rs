//! Our KLL and REQ sketches: reproducible per seed, within their published error bounds, mergeable,
//! and safe to decode from any bytes.

use std::sync::Arc;

use icicle_core::config::figment_types::{providers::Format, providers::Toml, Figment};
use icicle_core::registry;
use icicle_core::rng::Rng;
use icicle_core::traits::{Sketch, SketchError, SketchFactory};
use icicle_plugins_sketches::{Kll, Req};

/// 0..n (each value its own rank − 1) in an order fixed by `seed`.
fn shuffled(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    let mut v: Vec<f64> = (0..n).map(|i| i as f64).collect();
    for i in (1..n).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
    v
}

fn fill(s: &mut dyn Sketch, values: &[f64]) {
    for &x in values {
        s.insert(x).unwrap();
    }
}

fn factory(toml: &str) -> Arc<dyn SketchFactory> {
    registry::sketch_at(&Figment::from(Toml::string(toml)), "s").unwrap()
}

/// The rank error of estimate `est` of the `q`-quantile of a permutation of 0..n: its true
/// (inclusive) normalized rank is (est + 1) / n.
fn rank_error(est: f64, n: usize, q: f64) -> f64 {
    ((est + 1.0) / n as f64 - q).abs()
}

const PROBES: [f64; 9] = [0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999];

fn quantiles(s: &dyn Sketch) -> Vec<Option<f64>> {
    (1..100).map(|i| s.quantile(f64::from(i) / 100.0)).chain(PROBES.iter().map(|q| s.quantile(*q))).collect()
}

/// KLL k=200 and REQ k=12 (high ranks) made with `seed`.
fn seeded(seed: u64) -> [Box<dyn Sketch>; 2] {
    [Box::new(Kll::new(200, seed)), Box::new(Req::new(12, true, seed))]
}

#[test]
fn the_same_seed_gives_the_same_bytes_and_another_seed_another_sketch() {
    let values = shuffled(100_000, 42);
    let [mut k7, mut r7] = seeded(7);
    let [mut k7b, mut r7b] = seeded(7);
    let [mut k8, mut r8] = seeded(8);
    for s in [&mut k7, &mut r7, &mut k7b, &mut r7b, &mut k8, &mut r8] {
        fill(s.as_mut(), &values);
    }
    for (a, b, other) in [(&k7, &k7b, &k8), (&r7, &r7b, &r8)] {
        assert_eq!(a.to_bytes(), b.to_bytes(), "{}", a.kind());
        assert_eq!(quantiles(a.as_ref()), quantiles(b.as_ref()), "{}", a.kind());
        assert_ne!(a.to_bytes(), other.to_bytes(), "{}", a.kind());
        assert_ne!(quantiles(a.as_ref()), quantiles(other.as_ref()), "{}: another seed, other compactions", a.kind());
    }
    // A decoded sketch carries its generator on: the same inserts give the same bytes again.
    let more = shuffled(30_000, 43);
    for s in [&k7, &r7] {
        let f = registry::default_sketch(s.kind()).unwrap();
        let (mut a, mut b) = (f.decode(&s.to_bytes()).unwrap(), f.decode(&s.to_bytes()).unwrap());
        fill(a.as_mut(), &more);
        fill(b.as_mut(), &more);
        assert_eq!(a.to_bytes(), b.to_bytes(), "{}", s.kind());
    }
}

#[test]
fn the_seed_key_makes_a_factory_reproducible() {
    for toml in ["[s]\ntype = \"kll\"\nseed = 5\n", "[s]\ntype = \"req\"\nrank_accuracy = \"low\"\nseed = 5\n"] {
        let (f, g) = (factory(toml), factory(toml));
        assert!(f.describe().ends_with(" seed=5"), "{}", f.describe());
        let values = shuffled(20_000, 1);
        let made: Vec<Vec<u8>> = [f.create(), f.create(), g.create(), g.create()]
            .into_iter()
            .map(|mut s| {
                fill(s.as_mut(), &values);
                s.to_bytes()
            })
            .collect();
        assert_eq!(made[0], made[2], "{toml}: the first sketches of two factories");
        assert_eq!(made[1], made[3], "{toml}: the second sketches");
        assert_ne!(made[0], made[1], "{toml}: one factory's sketches differ");
    }
    // Without a seed, every sketch draws its own.
    let f = registry::default_sketch("kll").unwrap();
    assert_eq!(f.describe(), "k=200");
    let values = shuffled(20_000, 1);
    let mut a = f.create();
    let mut b = f.create();
    fill(a.as_mut(), &values);
    fill(b.as_mut(), &values);
    assert_ne!(a.to_bytes(), b.to_bytes());
    assert_eq!(registry::default_sketch("req").unwrap().describe(), "k=12 rank_accuracy=high");
}

#[test]
fn invalid_parameters_name_their_key() {
    for toml in ["[s]\ntype = \"kll\"\nk = 7\n", "[s]\ntype = \"req\"\nk = 13\n", "[s]\ntype = \"req\"\nk = 2000\n"] {
        let err = registry::sketch_at(&Figment::from(Toml::string(toml)), "s")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("s.k"), "{toml}: {err}");
    }
    let err = registry::sketch_at(&Figment::from(Toml::string("[s]\ntype = \"kll\"\nseed = -1\n")), "s").err();
    assert!(err.is_some(), "a negative seed is refused");
}

/// KLL's published bound at k = 200 is a normalized rank error of about 1.65% (99% confidence);
/// 2.5% everywhere over 20 seeds cannot flake.
#[test]
fn kll_stays_within_its_rank_error_bound() {
    let mut worst = 0.0f64;
    for seed in 0..20u64 {
        let n = 100_000 + seed as usize * 47_000;
        let values = shuffled(n, 1000 + seed);
        let mut s = Kll::new(200, seed);
        fill(&mut s, &values);
        for q in [0.01, 0.1, 0.5, 0.9, 0.99] {
            let err = rank_error(s.quantile(q).unwrap(), n, q);
            assert!(err < 0.025, "seed {seed}, n {n}, q {q}: rank error {err}");
            worst = worst.max(err);
        }
        assert!(s.retained() < 1000, "seed {seed}: {} values retained", s.retained());
    }
    eprintln!("kll k=200: worst rank error {worst:.5}");
}

/// REQ's error relative to the distance from the accurate end: DataSketches' relative standard
/// error at k = 12 is √(0.0512/3)/12 ≈ 1.1% of (1 − r) for high ranks (of r for low); 5% (4.6
/// standard errors) over 20 seeds cannot flake.
#[test]
fn req_stays_within_its_relative_error_bound_at_its_accurate_tail() {
    let mut worst = [0.0f64; 2];
    for seed in 0..20u64 {
        let n = 100_000 + seed as usize * 47_000;
        let values = shuffled(n, 2000 + seed);
        for (i, hra) in [true, false].into_iter().enumerate() {
            let mut s = Req::new(12, hra, seed);
            fill(&mut s, &values);
            for tail in [0.1, 0.01, 0.001] {
                let q = if hra { 1.0 - tail } else { tail };
                let err = rank_error(s.quantile(q).unwrap(), n, q) / tail;
                assert!(err < 0.05, "seed {seed}, n {n}, hra {hra}, q {q}: relative rank error {err}");
                worst[i] = worst[i].max(err);
            }
            let mid = rank_error(s.quantile(0.5).unwrap(), n, 0.5);
            assert!(mid < 0.05, "seed {seed}, hra {hra}: rank error {mid} at the median");
        }
    }
    eprintln!("req k=12: worst relative rank error {:.5} (high ranks), {:.5} (low ranks)", worst[0], worst[1]);
}

#[test]
fn merged_halves_answer_like_one_sketch_over_everything() {
    let n = 200_000;
    let values = shuffled(n, 3);
    let (left, right) = values.split_at(n / 2);
    type Make = fn(u64) -> Box<dyn Sketch>;
    let kinds: [(&str, Make); 3] = [
        ("kll", |seed| Box::new(Kll::new(200, seed))),
        ("req high", |seed| Box::new(Req::new(12, true, seed))),
        ("req low", |seed| Box::new(Req::new(12, false, seed))),
    ];
    for (name, make) in kinds {
        let mut whole = make(1);
        fill(whole.as_mut(), &values);
        let (mut a, mut b) = (make(2), make(3));
        fill(a.as_mut(), left);
        fill(b.as_mut(), right);
        let f = registry::default_sketch(a.kind()).unwrap();
        let b = f.decode(&b.to_bytes()).unwrap();
        a.merge(b.as_ref()).unwrap();
        assert_eq!(a.count(), n as u64, "{name}");
        assert_eq!((a.min(), a.max()), (Some(0.0), Some((n - 1) as f64)), "{name}");
        assert_eq!(a.sum(), whole.sum(), "{name}");
        assert_eq!(a.sum(), (n * (n - 1) / 2) as f64, "{name}");
        for s in [&whole, &a] {
            for q in [0.01, 0.1, 0.5, 0.9, 0.99] {
                let err = rank_error(s.quantile(q).unwrap(), n, q);
                let bound = match name {
                    "kll" => 0.025,
                    // REQ: relative to the distance from its accurate end, else additive.
                    "req high" if q > 0.5 => 0.05 * (1.0 - q),
                    "req low" if q < 0.5 => 0.05 * q,
                    _ => 0.05,
                };
                assert!(err < bound, "{name} q={q}: rank error {err} (bound {bound})");
            }
        }
    }
}

#[test]
fn decoding_truncated_or_random_bytes_is_an_error_never_a_panic() {
    let mut rng = Rng::new(99);
    for f in ["kll", "req"].map(|k| registry::default_sketch(k).unwrap()) {
        let mut s = f.create_seeded(1);
        fill(s.as_mut(), &shuffled(10_000, 4));
        let bytes = s.to_bytes();
        assert_eq!(f.decode(&bytes).unwrap().to_bytes(), bytes, "{}: round trip", f.kind());
        assert_eq!(f.decode(&f.create().to_bytes()).unwrap().count(), 0, "{}: empty", f.kind());
        for len in 0..bytes.len() {
            assert!(
                matches!(f.decode(&bytes[..len]), Err(SketchError::Decode(_))),
                "{}: {len} of {} bytes",
                f.kind(),
                bytes.len()
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(f.decode(&longer), Err(SketchError::Decode(_))), "{}: a trailing byte", f.kind());
        for _ in 0..2000 {
            let len = rng.below(300) as usize;
            let mut noise: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            assert!(matches!(f.decode(&noise), Err(SketchError::Decode(_))), "{}: noise", f.kind());
            // The right header before the noise.
            noise.splice(0..0, bytes[..5].iter().copied());
            let _ = f.decode(&noise);
        }
        // Damaged images: refused, or a sketch that still works.
        for _ in 0..3000 {
            let mut damaged = bytes.clone();
            for _ in 0..=rng.below(3) {
                let at = rng.below(damaged.len() as u64) as usize;
                damaged[at] ^= 1 << rng.below(8);
            }
            if let Ok(mut d) = f.decode(&damaged) {
                fill(d.as_mut(), &shuffled(3_000, 5));
                let _ = (d.quantile(0.5), d.to_bytes(), d.memory_bytes());
                let mut fresh = f.create();
                let _ = fresh.merge(d.as_ref());
            }
        }
    }
}

/// A structural check against Apache DataSketches (the `datasketches` crate): how many values
/// are retained depends only on the counts, never on the coins, so ours must match theirs
/// exactly after any number of inserts and after merges.
#[test]
fn the_sizes_match_apache_datasketches() {
    use datasketches::kll::{KllFloat, KllSketch};
    use datasketches::req::{RankAccuracy, ReqFloat, ReqSketch};
    let kll = |n: usize, sign: f64| {
        let (mut ours, mut theirs) = (Kll::new(200, n as u64), KllSketch::<KllFloat<f64>>::new(200).unwrap());
        for i in 0..n {
            ours.insert(sign * i as f64).unwrap();
            theirs.update(KllFloat::<f64>::new(sign * i as f64).unwrap());
        }
        (ours, theirs)
    };
    let req = |n: usize, sign: f64, hra: bool| {
        let acc = if hra { RankAccuracy::HighRank } else { RankAccuracy::LowRank };
        let (mut ours, mut theirs) = (Req::new(12, hra, n as u64), ReqSketch::<ReqFloat<f64>>::new(12, acc).unwrap());
        for i in 0..n {
            ours.insert(sign * i as f64).unwrap();
            theirs.update(ReqFloat::<f64>::new(sign * i as f64).unwrap());
        }
        (ours, theirs)
    };
    for (n1, n2) in [(0, 1), (7, 5000), (1000, 1000), (600, 1200), (20_000, 70_000), (150_000, 3000), (77, 300_000)] {
        let ((mut a, mut b), (c, d)) = (kll(n1, 1.0), kll(n2, -1.0));
        assert_eq!(a.retained(), b.num_retained(), "kll {n1}");
        a.merge(&c).unwrap();
        b.merge(&d).unwrap();
        assert_eq!(a.retained(), b.num_retained(), "kll {n1} + {n2}");
        for hra in [true, false] {
            let ((mut a, mut b), (c, d)) = (req(n1, 1.0, hra), req(n2, -1.0, hra));
            assert_eq!(a.retained(), b.num_retained() as usize, "req hra={hra} {n1}");
            a.merge(&c).unwrap();
            b.merge(&d).unwrap();
            assert_eq!(a.retained(), b.num_retained() as usize, "req hra={hra} {n1} + {n2}");
        }
    }
}
