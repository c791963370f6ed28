//! The one random-number generator of tests, benchmarks and stand-ins (and of retry jitter):
//! SplitMix64, small and stable, so a seed gives the same numbers on every platform and version.

/// A small, stable PRNG (SplitMix64): same seed, same numbers, on every platform and version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.f64().max(1e-300);
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Gamma(shape, scale) by Marsaglia–Tsang.
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if shape < 1.0 {
            let u = self.f64().max(1e-300);
            return self.gamma(shape + 1.0, scale) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.f64();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * scale;
            }
        }
    }
}

/// A seed for an in-crate randomised test: `ICICLE_TEST_SEED=N` replays one; otherwise random
/// per run, printed so a failure names it.
pub fn test_seed() -> u64 {
    let seed = std::env::var("ICICLE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (d.subsec_nanos() as u64 ^ d.as_secs()) % 1_000_000
    });
    eprintln!("test seed {seed} (replay with ICICLE_TEST_SEED={seed})");
    seed
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sequence_is_stable_and_bounded() {
        let mut r = super::Rng::new(7);
        let first: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut again = super::Rng::new(7);
        assert_eq!(first, (0..3).map(|_| again.next_u64()).collect::<Vec<_>>());
        assert_ne!(first[0], first[1]);
        assert!((0..1000).all(|_| r.below(10) < 10 && (0.0..1.0).contains(&r.f64())));
        assert_eq!(r.below(0), 0);
    }
}
