//! Layout -> object tasks: the bytes of a file that live on each OST, per layout component,
//! as the public SwiftLoad code derives them from `llapi_layout_*`.
//!
//! For component `c` with stripe count `n` and stripe size `s`, stripe `i` gives the task
//! `{ost: c.osts[i], start: c.start + i*s, end: min(c.end, size), interval: n*s, stripe_size: s}`;
//! its chunks are `[off, min(off + s, end))` for `off = start, start + interval, ... < end`.
//! Over all components that start at 0 and follow each other, the chunks tile `[0, size)`.

use icicle_core::traits::{LayoutComponent, ObjectLayout, ObjectTask};

/// A layout that cannot be turned into tasks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// A component with stripe size 0.
    #[error("{path}: component {component} has stripe size 0")]
    ZeroStripeSize {
        /// The file.
        path: String,
        /// Component number (0-based).
        component: usize,
    },
    /// A component with no OSTs.
    #[error("{path}: component {component} has no OST objects")]
    NoObjects {
        /// The file.
        path: String,
        /// Component number (0-based).
        component: usize,
    },
    /// Components that do not start at 0 and follow each other without gaps or overlaps.
    #[error("{path}: component {component} starts at {start}, expected {expected}")]
    NotContiguous {
        /// The file.
        path: String,
        /// Component number (0-based).
        component: usize,
        /// Where it starts.
        start: u64,
        /// Where the previous one ended.
        expected: u64,
    },
    /// A component whose extent is empty (`end <= start`).
    #[error("{path}: component {component} has an empty extent [{start}, {end})")]
    EmptyExtent {
        /// The file.
        path: String,
        /// Component number (0-based).
        component: usize,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// The instantiated components end before the file does: bytes with no OST.
    #[error("{path}: components cover {covered} of {size} bytes")]
    Uncovered {
        /// The file.
        path: String,
        /// Bytes covered.
        covered: u64,
        /// The file size.
        size: u64,
    },
    /// Offsets that do not fit in 64 bits.
    #[error("{path}: component {component} overflows 64-bit offsets")]
    Overflow {
        /// The file.
        path: String,
        /// Component number (0-based).
        component: usize,
    },
}

/// Check that `layout`'s components tile `[0, size)`: each has a stripe size and OSTs, the
/// first starts at 0, each starts where the previous ended, and the last reaches the size.
pub fn validate(layout: &ObjectLayout) -> Result<(), LayoutError> {
    let path = || layout.path.clone();
    let mut expected = 0u64;
    for (k, c) in layout.components.iter().enumerate() {
        if c.stripe_size == 0 {
            return Err(LayoutError::ZeroStripeSize { path: path(), component: k });
        }
        if c.osts.is_empty() {
            return Err(LayoutError::NoObjects { path: path(), component: k });
        }
        if c.start != expected {
            return Err(LayoutError::NotContiguous { path: path(), component: k, start: c.start, expected });
        }
        if (c.osts.len() as u64).checked_mul(c.stripe_size).is_none() {
            return Err(LayoutError::Overflow { path: path(), component: k });
        }
        if c.end <= c.start {
            return Err(LayoutError::EmptyExtent { path: path(), component: k, start: c.start, end: c.end });
        }
        expected = c.end;
        if expected >= layout.size {
            return Ok(());
        }
    }
    if expected < layout.size {
        return Err(LayoutError::Uncovered { path: path(), covered: expected, size: layout.size });
    }
    Ok(())
}

/// The tasks of one component (one per stripe), as the catalog's layout lines: `object` is
/// the file's index in the scheduler's object list.
pub fn component_tasks(object: usize, size: u64, c: &LayoutComponent) -> impl Iterator<Item = ObjectTask> + '_ {
    let count = c.osts.len() as u64;
    let interval = count.saturating_mul(c.stripe_size);
    let end = c.end.min(size);
    c.osts.iter().enumerate().map(move |(i, &ost)| ObjectTask {
        object,
        ost,
        start: c.start.saturating_add((i as u64).saturating_mul(c.stripe_size)),
        end,
        interval,
        stripe_size: c.stripe_size,
    })
}

/// All tasks of a file, after [`validate`]. Components that start at or past the end of
/// the file still give their (empty) tasks, as the public code writes them.
pub fn tasks_of(object: usize, layout: &ObjectLayout) -> Result<Vec<ObjectTask>, LayoutError> {
    validate(layout)?;
    let mut out = Vec::new();
    for c in &layout.components {
        out.extend(component_tasks(object, layout.size, c));
        if c.end >= layout.size {
            break;
        }
    }
    Ok(out)
}

/// The chunks `(offset, length)` of a task, in offset order.
pub fn chunks(task: &ObjectTask) -> Chunks {
    Chunks { next: task.start, end: task.end, interval: task.interval.max(1), stripe_size: task.stripe_size }
}

/// Iterator over a task's chunks; see [`chunks`].
#[derive(Debug, Clone)]
pub struct Chunks {
    next: u64,
    end: u64,
    interval: u64,
    stripe_size: u64,
}

impl Iterator for Chunks {
    type Item = (u64, u64);
    fn next(&mut self) -> Option<(u64, u64)> {
        if self.next >= self.end || self.stripe_size == 0 {
            return None;
        }
        let off = self.next;
        let len = self.stripe_size.min(self.end - off);
        self.next = off.saturating_add(self.interval);
        Some((off, len))
    }
}

/// Bytes a task covers.
pub fn task_bytes(task: &ObjectTask) -> u64 {
    chunks(task).map(|(_, l)| l).sum()
}

/// One task per chunk of `task`, in offset order (a file-level reader's view of the same
/// bytes: each chunk still names its OST).
pub fn split_chunks(task: &ObjectTask) -> impl Iterator<Item = ObjectTask> + '_ {
    chunks(task).map(move |(off, len)| ObjectTask { start: off, end: off + len, interval: len.max(1), ..*task })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comp(start: u64, end: u64, ss: u64, osts: &[u32]) -> LayoutComponent {
        LayoutComponent { start, end, stripe_size: ss, osts: osts.to_vec() }
    }

    #[test]
    fn a_pfl_layout_gives_the_public_codes_lines() {
        const M: u64 = 1 << 20;
        let l = ObjectLayout {
            path: "/scratch/f".into(),
            size: 10 * M + 5,
            components: vec![
                comp(0, 4 * M, M, &[113]),
                comp(4 * M, 8 * M, M, &[167, 204]),
                comp(8 * M, u64::MAX, M, &[10, 60, 86, 105]),
            ],
        };
        let t = tasks_of(7, &l).unwrap();
        let got: Vec<_> = t.iter().map(|t| (t.ost, t.start, t.end, t.interval, t.stripe_size)).collect();
        assert_eq!(
            got,
            vec![
                (113, 0, 4 * M, M, M),
                (167, 4 * M, 8 * M, 2 * M, M),
                (204, 5 * M, 8 * M, 2 * M, M),
                (10, 8 * M, 10 * M + 5, 4 * M, M),
                (60, 9 * M, 10 * M + 5, 4 * M, M),
                (86, 10 * M, 10 * M + 5, 4 * M, M),
                (105, 11 * M, 10 * M + 5, 4 * M, M),
            ]
        );
        assert!(t.iter().all(|t| t.object == 7));
        assert_eq!(chunks(&t[1]).collect::<Vec<_>>(), vec![(4 * M, M), (6 * M, M)]);
        assert_eq!(chunks(&t[5]).collect::<Vec<_>>(), vec![(10 * M, 5)]);
        assert_eq!(chunks(&t[6]).count(), 0);
    }

    #[test]
    fn bad_layouts_are_refused_by_name() {
        let mut l = ObjectLayout::plain("/f", 10, 0, vec![1]);
        assert!(matches!(tasks_of(0, &l), Err(LayoutError::ZeroStripeSize { .. })));
        l = ObjectLayout::plain("/f", 10, 4, vec![]);
        assert!(matches!(tasks_of(0, &l), Err(LayoutError::NoObjects { .. })));
        l = ObjectLayout { path: "/f".into(), size: 10, components: vec![comp(0, 4, 4, &[1]), comp(8, 16, 4, &[2])] };
        assert_eq!(tasks_of(0, &l).unwrap_err().to_string(), "/f: component 1 starts at 8, expected 4");
        l = ObjectLayout { path: "/f".into(), size: 10, components: vec![comp(0, 4, 4, &[1])] };
        assert_eq!(tasks_of(0, &l).unwrap_err().to_string(), "/f: components cover 4 of 10 bytes");
        l = ObjectLayout { path: "/f".into(), size: 10, components: vec![comp(0, u64::MAX, u64::MAX, &[1, 2])] };
        assert!(matches!(tasks_of(0, &l), Err(LayoutError::Overflow { .. })));
        // An empty file with no components is fine: nothing to read.
        l = ObjectLayout { path: "/f".into(), size: 0, components: vec![] };
        assert_eq!(tasks_of(0, &l).unwrap(), vec![]);
    }

    /// Property: for random PFL layouts and sizes, the chunks of all tasks tile `[0, size)`
    /// exactly once (every byte covered, none twice), and chunks never cross a task's end.
    #[test]
    fn chunks_of_all_tasks_tile_the_file_exactly_once() {
        let mut rng = icicle_core::rng::Rng::new(0x5eed_9815);
        for case in 0..3000 {
            let ncomp = rng.range(1..5) as usize;
            let mut comps = Vec::new();
            let mut start = 0u64;
            for k in 0..ncomp {
                let ss = [1u64, 3, 4, 7, 16, 64, 100][rng.below(7) as usize];
                let count = rng.range(1..7) as usize;
                let osts: Vec<u32> = (0..count).map(|_| rng.below(300) as u32).collect();
                let end = if k + 1 == ncomp { u64::MAX } else { start + ss * rng.range(1..8) + rng.below(3) };
                comps.push(comp(start, end, ss, &osts));
                start = end;
            }
            let size = rng.below(2000);
            let layout = ObjectLayout { path: format!("/case{case}"), size, components: comps };
            let tasks = tasks_of(case, &layout).unwrap();
            let mut seen = vec![0u8; size as usize];
            for t in &tasks {
                for (off, len) in chunks(t) {
                    assert!(len > 0 && off + len <= t.end.min(size), "case {case}: chunk past its task");
                    for b in off..off + len {
                        seen[b as usize] += 1;
                    }
                }
                assert_eq!(task_bytes(t), split_chunks(t).map(|c| task_bytes(&c)).sum::<u64>());
            }
            assert!(seen.iter().all(|&n| n == 1), "case {case}: {layout:?} not tiled exactly once: {seen:?}");
        }
    }
}
