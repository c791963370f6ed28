//! Where a factory's new sketches get their seeds. The `kll` and `req` compactions draw from
//! [`icicle_core::rng::Rng`] (SplitMix64, started with [`Rng::from_state`](icicle_core::rng::Rng::from_state)
//! from the seed), whose state travels in the sketch's bytes.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// The `index`-th seed derived from `seed` (the `index`-th output of SplitMix64 from `seed`).
pub fn derive(seed: u64, index: u64) -> u64 {
    icicle_core::rng::nth(seed, index)
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
    fn derived_seeds_are_the_splitmix_stream_from_the_seed() {
        // The first outputs of SplitMix64 from 0 (the reference implementation's values).
        assert_eq!(derive(0, 0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(derive(0, 1), 0x6E78_9E6A_A1B9_65F4);
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
