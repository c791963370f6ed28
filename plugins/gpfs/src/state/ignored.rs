//! The reducer of GPFS events: drops what means nothing for the index.

use icicle_core::traits::{ReduceCounts, Reducer};

use super::Position;
use crate::event::{EventKind, GpfsEvent};

/// Drops the events that mean nothing for the index (IN_OPEN, IN_CLOSE_NOWRITE, ...); the
/// other GPFS rules (coalescing, create/remove cancellation, rename pairing) need the state
/// and live in [`GpfsState`](super::GpfsState).
#[derive(Debug, Default, Clone, Copy)]
pub struct IgnoredEvents;

impl Reducer for IgnoredEvents {
    type Event = (GpfsEvent, Position);

    fn reduce(&mut self, batch: &mut Vec<(GpfsEvent, Position)>) -> ReduceCounts {
        let input = batch.len() as u64;
        batch.retain(|(e, _)| e.kind != EventKind::Ignored);
        let passed = batch.len() as u64;
        ReduceCounts { input, passed, ignored: input - passed, ..Default::default() }
    }
}
