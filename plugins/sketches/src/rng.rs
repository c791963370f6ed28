//! The randomness of the `kll` and `req` compactions: a SplitMix64 generator per sketch whose
//! state travels in the sketch's bytes, and where a factory's new sketches get their seeds.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// The SplitMix64 increment (2^64 / φ).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator, the same numbers for the same seed
/// on every platform and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed` (any value, 0 included).
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The current state: `SplitMix64::new(g.state())` continues where `g` is.
    pub fn state(&self) -> u64 {
        self.state
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix64(self.state)
    }

    /// One fair coin flip.
    pub fn bit(&mut self) -> bool {
        self.next_u64() >> 63 == 1
    }
}

/// SplitMix64's output function: a bijective mixer of 64 bits.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `index`-th seed derived from `seed` (the `index`-th output of SplitMix64 from `seed`).
pub fn derive(seed: u64, index: u64) -> u64 {
    mix64(seed.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// A seed nobody chose: std's randomly keyed hasher (keys from the operating system) over a
/// process-wide counter, so two calls never share a seed.
pub fn os_seed() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// Where a factory's new sketches get their seeds: derived from the configured `seed` and the
/// number of sketches created before (deterministic for the same creation order), or from the
/// operating system when no seed is configured.
#[derive(Debug)]
pub struct Seeds {
    base: Option<u64>,
    created: AtomicU64,
}

impl Seeds {
    /// Seeds derived from `base`, or from the operating system when `None`.
    pub fn new(base: Option<u64>) -> Seeds {
        Seeds { base, created: AtomicU64::new(0) }
    }

    /// The seed of the next sketch.
    pub fn next(&self) -> u64 {
        let index = self.created.fetch_add(1, Ordering::Relaxed);
        match self.base {
            Some(seed) => derive(seed, index),
            None => os_seed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_stable_and_resumable() {
        // The first outputs of SplitMix64 from 0 (the reference implementation's values).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut resumed = SplitMix64::new(g.state());
        assert_eq!(resumed.next_u64(), g.next_u64());
        assert_eq!(derive(0, 0), SplitMix64::new(0).next_u64());
    }

    #[test]
    fn seeds_follow_the_configuration() {
        let (a, b) = (Seeds::new(Some(5)), Seeds::new(Some(5)));
        let first = a.next();
        assert_eq!(first, b.next());
        assert_ne!(first, a.next());
        let os = Seeds::new(None);
        assert_ne!(os.next(), os.next());
    }
}
