//! The one random-number generator of tests, benchmarks and stand-ins (and of retry jitter):
//! SplitMix64 (Steele, Lea, Flood 2014), small and stable, so a seed gives the same numbers on
//! every platform and version. Also the generator of the sketches' compactions (whose state is
//! saved in the sketch's bytes: [`Rng::from_state`], [`Rng::state`]) and of the PRISM
//! augmentation's choices ([`nth`], [`mix64`]): every SplitMix64 in the project is this one.

/// The SplitMix64 increment: 2^64 / φ, odd.
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// A small, stable PRNG (SplitMix64): same seed, same numbers, on every platform and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator. The seed is scrambled first (`seed ^ GOLDEN`), so this is not the
    /// textbook stream from `seed`: for that, or to resume a saved one, use [`Rng::from_state`].
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ GOLDEN)
    }

    /// The generator whose state is exactly `state` (any value, 0 included): the textbook
    /// SplitMix64 stream from `state`, and `Rng::from_state(g.state())` continues where `g` is.
    pub fn from_state(state: u64) -> Rng {
        Rng(state)
    }

    /// The current state, for [`Rng::from_state`] to resume from (e.g. saved with a sketch).
    pub fn state(&self) -> u64 {
        self.0
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix64(self.0)
    }

    /// One fair coin flip: the top bit of the next output.
    pub fn bit(&mut self) -> bool {
        self.next_u64() >> 63 == 1
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

    /// Uniform in `range` (`lo..hi`); `lo` when the range is empty.
    pub fn range(&mut self, range: std::ops::Range<u64>) -> u64 {
        range.start + self.below(range.end.saturating_sub(range.start))
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

/// SplitMix64's output function: a bijective mixer of 64 bits (also a good hash finaliser).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `index`-th output (from 0) of the SplitMix64 stream from state `state`, in constant
/// time: `nth(s, i)` is the `i + 1`-th `Rng::from_state(s).next_u64()`.
pub fn nth(state: u64, index: u64) -> u64 {
    mix64(state.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN)))
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
        assert!((0..1000).all(|_| (3..7).contains(&r.range(3..7))));
        assert_eq!(r.range(5..5), 5);
    }

    #[test]
    fn the_raw_stream_is_the_reference_one_and_resumes() {
        use super::{nth, Rng};
        // The first outputs of SplitMix64 from state 0 (the reference implementation's values).
        let mut g = Rng::from_state(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut resumed = Rng::from_state(g.state());
        assert_eq!(resumed.next_u64(), g.next_u64());
        let mut h = Rng::from_state(12345);
        assert!((0..5).all(|i| nth(12345, i) == h.next_u64()));
        assert_eq!(Rng::new(7), Rng::from_state(7 ^ super::GOLDEN));
    }
}
