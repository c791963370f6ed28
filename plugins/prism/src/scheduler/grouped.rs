//! The grouped form of the object scheduler: McNaughton's wrap-around rule inside groups of
//! OSTs. Wrapping every OST's chunks over every rank evens the ranks out but lets an OST be
//! crossed by more ranks than its limit (an OST of 1.6 ranks' worth can be crossed by three);
//! binding whole processes to OSTs keeps the limits but leaves an OST that got one process
//! reading at one process's speed while its neighbours have two. Grouping takes OSTs in slot
//! order until their chunks divide into a whole number of near-mean shares (within a
//! tolerance), wraps the group over that many ranks, and checks every OST of the group is
//! crossed by no more ranks than its limit: two OSTs of 1.6 shares each make a group of three
//! ranks, each OST crossed by two.

use icicle_core::traits::ObjectTask;

use super::{cut, last_at_or_below};
use crate::tasks;

/// Per rank, the runs (one per OST it crosses) of the grouped wrap of `queues` (per dense OST
/// slot, in slot order) over `processes` ranks, each OST crossed by at most `limits[slot]`
/// ranks; a group closes when its share per rank is within `tolerance` (a fraction) of the
/// mean share (all chunks over all ranks). `None` when the OSTs left at the end cannot be wrapped within
/// their limits over the ranks left. Ranks past the last group stay idle.
pub(crate) fn grouped(
    queues: Vec<Vec<ObjectTask>>,
    limits: &[usize],
    processes: usize,
    tolerance: f64,
) -> Option<Vec<Vec<Vec<ObjectTask>>>> {
    let counts: Vec<u64> = queues.iter().map(|q| q.iter().map(|t| tasks::chunks(t).count() as u64).sum()).collect();
    let n = queues.len();
    let mean = counts.iter().sum::<u64>() as f64 / processes.max(1) as f64;
    let mut groups = Vec::new(); // (first slot, end slot, ranks)
    let (mut d, mut ranks_used) = (0usize, 0usize);
    while d < n {
        let ranks_left = processes.checked_sub(ranks_used).filter(|&r| r > 0)?;
        let (mut e, mut chunks, mut chosen) = (d, 0u64, None);
        while e < n && chosen.is_none() {
            chunks += counts[e];
            e += 1;
            let span = &counts[d..e];
            if e == n {
                // The last group: as many of the ranks left as its limits allow.
                chosen = (1..=ranks_left).rev().find(|&k| fits(span, &limits[d..e], k));
            } else if mean > 0.0 {
                let k = ((chunks as f64 / mean).round() as usize).clamp(1, ranks_left);
                let share = chunks as f64 / k as f64;
                if (share - mean).abs() <= tolerance * mean && fits(span, &limits[d..e], k) {
                    chosen = Some(k);
                }
            }
        }
        let k = chosen?;
        groups.push((d, e, k));
        d = e;
        ranks_used += k;
    }
    let mut out: Vec<Vec<Vec<ObjectTask>>> = vec![Vec::new(); processes];
    let mut queues = queues.into_iter();
    let mut first_rank = 0usize;
    for (d, e, k) in groups {
        let total: u64 = counts[d..e].iter().sum();
        let bound = |i: usize| (i as u128 * total as u128 / k as u128) as u64;
        let mut g = 0u64;
        for &c in &counts[d..e] {
            let q = queues.next().unwrap_or_default();
            for (i, run) in cut(&q, k, g, bound).into_iter().enumerate() {
                if !run.is_empty() {
                    out[first_rank + i].push(run);
                }
            }
            g += c;
        }
        first_rank += k;
    }
    Some(out)
}

/// Whether wrapping OSTs of `counts` chunks (in order) over `k` equal stretches crosses each
/// OST with no more stretches than its limit.
fn fits(counts: &[u64], limits: &[usize], k: usize) -> bool {
    let total: u64 = counts.iter().sum();
    let bound = |i: usize| (i as u128 * total as u128 / k as u128) as u64;
    let mut a = 0u64;
    for (&c, &limit) in counts.iter().zip(limits) {
        if c > 0 {
            let crossing = last_at_or_below(k, &bound, a + c - 1) - last_at_or_below(k, &bound, a) + 1;
            if crossing > limit {
                return false;
            }
        }
        a += c;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(ost: u32, chunks: u64) -> Vec<ObjectTask> {
        const M: u64 = 1 << 20;
        vec![ObjectTask { object: ost as usize, ost, start: 0, end: chunks * M, interval: M, stripe_size: M }]
    }

    #[test]
    fn five_osts_of_eight_chunks_over_eight_ranks_pair_up_within_two_per_ost() {
        // Mean share 5: one OST (8 = 2 x 4) is 20 % off, two (16 = 3 x 5.33) 6.7 %.
        let queues: Vec<_> = (0..5).map(|o| queue(o, 8)).collect();
        let plan = grouped(queues, &[2; 5], 8, 0.1).unwrap();
        let chunks: Vec<u64> =
            plan.iter().map(|runs| runs.iter().flatten().map(|t| tasks::chunks(t).count() as u64).sum()).collect();
        assert_eq!(chunks, vec![5, 5, 6, 5, 5, 6, 4, 4]);
        let mut crossing = [0usize; 5];
        for runs in &plan {
            for run in runs {
                crossing[run[0].ost as usize] += 1;
            }
        }
        assert_eq!(crossing, [2; 5]);
    }

    #[test]
    fn a_last_group_that_cannot_fit_its_limits_leaves_ranks_idle_or_fails() {
        // One OST of 4 chunks, limit 1: one rank reads it, the other stays idle.
        let plan = grouped(vec![queue(0, 4)], &[1], 2, 0.1).unwrap();
        assert_eq!((plan[0].len(), plan[1].len()), (1, 0));
        assert!(fits(&[3, 3], &[1, 2], 2));
        assert!(!fits(&[3, 3], &[1, 1], 3));
        // Two groups of one OST take both ranks: none is left for the third OST.
        assert!(grouped(vec![queue(0, 4), queue(1, 4), queue(2, 4)], &[1; 3], 2, 0.5).is_none());
    }
}
