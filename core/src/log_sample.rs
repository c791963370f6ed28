//! Sampled warnings: an input with many of the same problem (a tree of unreadable ACLs, of
//! names that are not UTF-8) logs the first 20, then one in 10,000, with the running number;
//! every one is still counted where it happens.

use std::sync::atomic::{AtomicU64, Ordering};

/// Count one more in `counter`; its number when it is to be logged.
pub fn count_to_log(counter: &AtomicU64) -> Option<u64> {
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    (n <= 20 || n.is_multiple_of(10_000)).then_some(n)
}

#[cfg(test)]
mod tests {
    #[test]
    fn warnings_are_rate_limited_the_first_twenty_then_one_in_ten_thousand() {
        let c = std::sync::atomic::AtomicU64::new(0);
        let logged: Vec<u64> = (1..=50_000).filter_map(|_| super::count_to_log(&c)).collect();
        let mut want: Vec<u64> = (1..=20).collect();
        want.extend([10_000, 20_000, 30_000, 40_000, 50_000]);
        assert_eq!(logged, want);
    }
}
