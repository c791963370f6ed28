//! Reduce a batch, then apply each event to the state: the step every monitor's apply shares.

use crate::traits::{ReduceCounts, Reducer, StateStore};

/// Reduce `batch` in place with `reducer` (`None`: keep every event), then apply what is left
/// to `store` as one batch of pending operations in `ops` (begin, each event in stream order,
/// end); returns what the reduction did.
pub fn reduce_apply<E, R, S>(
    reducer: Option<&mut R>,
    store: &mut S,
    batch: &mut Vec<E>,
    env: &mut S::Env<'_>,
    ops: &mut S::Ops,
) -> ReduceCounts
where
    R: Reducer<Event = E> + ?Sized,
    S: StateStore<Event = E> + ?Sized,
{
    let counts = match reducer {
        Some(r) => r.reduce(batch),
        None => ReduceCounts { input: batch.len() as u64, passed: batch.len() as u64, ..Default::default() },
    };
    store.begin_batch();
    for event in batch.iter() {
        store.apply(event, env, ops);
    }
    store.end_batch(env, ops);
    counts
}
