//! The OST contention model, two ways: a deterministic simulation of a plan (used by tests
//! and the benchmark's model figures) and a real-time throttle the MPI reader applies to
//! every chunk (all OSTs are one local disk here, so contention has to be emulated).
//!
//! The model: OST `o` serves at most `B(o)` MB/s in total, shared by the processes reading
//! from it; one process pulls at most `p` MB/s. A chunk of `n` bytes on `o` reserves
//! `n/B(o)` seconds of the OST after whatever is already reserved, and completes no earlier
//! than that nor earlier than `n/p` after it was asked for (a token bucket per OST, queueing
//! in arrival order). The throttle keeps that clock in shared memory in real time; the
//! simulation runs the same rule on a virtual clock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use icicle_core::traits::ObjectTask;

use crate::loader::Loader;
use crate::scheduler::OstIndex;
use crate::tasks;

const MB: f64 = 1_000_000.0;

/// The simulated outcome of a plan.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Simulated {
    /// Seconds until the last process finishes.
    pub seconds: f64,
    /// Bytes read.
    pub bytes: u64,
}

impl Simulated {
    /// Aggregate MB/s.
    pub fn mb_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / MB / self.seconds
        } else {
            0.0
        }
    }
}

/// Simulate `plan` (per rank, tasks in read order; each rank reads one chunk at a time)
/// under the model whose speeds are `model`'s (per-OST MB/s, per-process MB/s), with the
/// same rule as the real-time [`OstClock`]: a chunk of `n` bytes asked for at `t` on OST `o`
/// occupies `o` for `n/B(o)` from `max(t, o free)` and completes at
/// `max(that end, t + n/p)`; requests are served in time order (ties: lower rank first).
pub fn simulate(plan: &[Vec<ObjectTask>], model: &Loader) -> Simulated {
    simulate_readers(plan, model).0
}

/// [`simulate`], and per OST the most ranks that were reading it at once (a rank reads an
/// OST from the moment it asks for a chunk there until that chunk completes).
pub fn simulate_readers(plan: &[Vec<ObjectTask>], model: &Loader) -> (Simulated, BTreeMap<u32, u32>) {
    let chunks: Vec<Vec<(u32, f64)>> = plan
        .iter()
        .map(|ts| ts.iter().flat_map(|t| tasks::chunks(t).map(move |(_, l)| (t.ost, l as f64))).collect())
        .collect();
    let bytes: u64 = plan.iter().flatten().map(tasks::task_bytes).sum();
    let p = model.per_process_mb_s() * MB;
    let mut next = vec![0usize; chunks.len()];
    let mut ready = vec![0.0f64; chunks.len()];
    // Per OST: when it is next free, the completion times of the reads on it, the peak.
    let mut osts: HashMap<u32, (f64, BinaryHeap<Reverse<u64>>, u32)> = HashMap::new();
    // Ranks with chunks left, earliest ready first (ties: the lower rank). Times are never
    // negative, and non-negative f64s order as their bit patterns do.
    let mut queue: BinaryHeap<Reverse<(u64, usize)>> =
        (0..chunks.len()).filter(|&r| !chunks[r].is_empty()).map(|r| Reverse((0f64.to_bits(), r))).collect();
    while let Some(Reverse((bits, r))) = queue.pop() {
        let t = f64::from_bits(bits);
        let (o, n) = chunks[r][next[r]];
        next[r] += 1;
        let (free, reading, peak) = osts.entry(o).or_insert_with(|| (0.0, BinaryHeap::new(), 0));
        let end = free.max(t) + n / (model.ost_mb_s(o) * MB);
        *free = end;
        ready[r] = end.max(t + n / p);
        // Requests come in time order: reads done by `t` no longer count.
        while reading.peek().is_some_and(|Reverse(done)| *done <= bits) {
            reading.pop();
        }
        reading.push(Reverse(ready[r].to_bits()));
        *peak = (*peak).max(reading.len() as u32);
        if next[r] < chunks[r].len() {
            queue.push(Reverse((ready[r].to_bits(), r)));
        }
    }
    let peaks = osts.into_iter().map(|(o, (_, _, peak))| (o, peak)).collect();
    (Simulated { seconds: ready.iter().copied().fold(0.0, f64::max), bytes }, peaks)
}

/// OSTs that `plan`, simulated under `loader`'s model, has read by more ranks at once than
/// the loader's limit: (OST, most readers at once, limit).
pub fn over_limits(plan: &[Vec<ObjectTask>], loader: &Loader) -> Vec<(u32, u32, u32)> {
    over(&simulate_readers(plan, loader).1, loader)
}

/// The OSTs of `peaks` (most readers at once) over `loader`'s limit: (OST, readers, limit).
pub fn over(peaks: &BTreeMap<u32, u32>, loader: &Loader) -> Vec<(u32, u32, u32)> {
    peaks
        .iter()
        .filter(|(&o, &n)| n > loader.max_processes(o))
        .map(|(&o, &n)| (o, n, loader.max_processes(o)))
        .collect()
}

/// A per-OST clock shared by every process of a run (a small file mapped by all of them):
/// the real-time contention emulator.
pub struct OstClock {
    map: memmap2::MmapMut,
    slots: usize,
}

impl OstClock {
    /// Create (or reset) the clock file for `slots` OSTs.
    pub fn create(path: &Path, slots: usize) -> std::io::Result<OstClock> {
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        f.set_len((slots.max(1) * 8) as u64)?;
        OstClock::open(path, slots)
    }

    /// Map an existing clock file of `slots` OSTs.
    pub fn open(path: &Path, slots: usize) -> std::io::Result<OstClock> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        if f.metadata()?.len() < (slots.max(1) * 8) as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: clock file too short for {slots} OSTs", path.display()),
            ));
        }
        // SAFETY: the file is ours, sized above, and only ever accessed through atomics.
        let map = unsafe { memmap2::MmapMut::map_mut(&f)? };
        Ok(OstClock { map, slots })
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.slots, "OST slot {i} out of range");
        // SAFETY: 8-byte aligned (page-aligned map), in bounds (checked), shared memory
        // accessed only atomically.
        unsafe { &*(self.map.as_ptr().add(i * 8) as *const AtomicU64) }
    }

    /// Reserve the OST in `slot` (speed `ost_mb_s`) for `bytes` read by a process that pulls
    /// `proc_mb_s`; returns the monotonic-clock nanosecond at which the read completes.
    pub fn reserve(&self, slot: usize, bytes: u64, ost_mb_s: f64, proc_mb_s: f64) -> u64 {
        let now = monotonic_ns();
        let busy = (bytes as f64 / (ost_mb_s * MB) * 1e9) as u64;
        let own = (bytes as f64 / (proc_mb_s * MB) * 1e9) as u64;
        let cell = self.slot(slot);
        let mut cur = cell.load(Ordering::Acquire);
        loop {
            let start = cur.max(now);
            let done = start + busy;
            match cell.compare_exchange_weak(cur, done, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return done.max(now + own),
                Err(seen) => cur = seen,
            }
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (one clock for every process of the machine).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleep until monotonic nanosecond `t`.
pub fn sleep_until(t: u64) {
    let now = monotonic_ns();
    if t > now {
        std::thread::sleep(std::time::Duration::from_nanos(t - now));
    }
}

/// The emulator a reader uses: the shared clock, the OST slots and the model's speeds.
pub struct Throttle {
    clock: OstClock,
    index: OstIndex,
    model: Loader,
}

impl Throttle {
    /// A throttle over `clock` for the OSTs of `index`.
    pub fn new(clock: OstClock, index: OstIndex, model: Loader) -> Throttle {
        Throttle { clock, index, model }
    }

    /// Ask the model for `bytes` from `ost` now: the monotonic nanosecond at which the
    /// read completes. Reserve before the real read and [`sleep_until`] the answer after it,
    /// so the real read overlaps the emulated service time.
    pub fn reserve(&self, ost: u32, bytes: u64) -> u64 {
        match self.index.slot(ost) {
            Some(slot) => self.clock.reserve(slot, bytes, self.model.ost_mb_s(ost), self.model.per_process_mb_s()),
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::{FileScheduler, ObjectScheduler};
    use icicle_core::traits::{ObjectLayout, Placement};

    #[test]
    fn the_simulation_shares_an_ost_and_caps_a_process() {
        const M: u64 = 1_000_000;
        let model = Loader::uniform(100.0, 50.0, 8);
        let t = |ost, n| ObjectTask { object: 0, ost, start: 0, end: n, interval: n, stripe_size: n };
        // One reader: 100 MB at 50 MB/s.
        assert_eq!(simulate(&[vec![t(1, 100 * M)]], &model).seconds, 2.0);
        // Two readers on one OST get 50 each: still 2 s; four get 25 each: 4 s.
        assert_eq!(simulate(&[vec![t(1, 100 * M)], vec![t(1, 100 * M)]], &model).seconds, 2.0);
        let four = vec![vec![t(1, 100 * M)]; 4];
        assert_eq!(simulate(&four, &model).seconds, 4.0);
        // Four readers on four OSTs: 2 s, 200 MB/s.
        let spread: Vec<_> = (0..4).map(|o| vec![t(o, 100 * M)]).collect();
        let s = simulate(&spread, &model);
        assert_eq!((s.seconds, s.bytes, s.mb_s()), (2.0, 400 * M, 200.0));
    }

    #[test]
    fn object_placement_beats_file_placement_under_contention() {
        // 48 files of 4-16 MiB, each striped over 4 of 8 OSTs from a random start; 8
        // processes; an OST serves one process's worth (loader cap 1).
        const M: u64 = 1 << 20;
        let pool = [113u32, 167, 204, 10, 60, 86, 105, 231];
        let mut rng = icicle_core::rng::Rng::new(2025);
        let objs: Vec<ObjectLayout> = (0..48)
            .map(|i| {
                let s = rng.below(8) as usize;
                ObjectLayout::plain(
                    format!("/d/{i}"),
                    rng.range(4..17) * M,
                    M,
                    (0..4).map(|k| pool[(s + k) % 8]).collect(),
                )
            })
            .collect();
        let model = Loader::uniform(100.0, 100.0, 8);
        let obj = simulate(&ObjectScheduler::new(Some(model.clone())).place(&objs, 8), &model);
        let file = simulate(&FileScheduler.place(&objs, 8), &model);
        assert_eq!(obj.bytes, file.bytes);
        assert!(obj.seconds * 1.2 < file.seconds, "object {obj:?} vs file {file:?}");
    }

    #[test]
    fn the_clock_queues_readers_of_one_ost_in_arrival_order() {
        let tmp = tempfile::tempdir().unwrap();
        let c = OstClock::create(&tmp.path().join("clock"), 2).unwrap();
        let other = OstClock::open(&tmp.path().join("clock"), 2).unwrap();
        // 1 MB on an OST of 1000 MB/s takes 1 ms of it; a process of 1 MB/s needs 1 s.
        let a = c.reserve(0, 1_000_000, 1000.0, 1e9);
        let b = other.reserve(0, 1_000_000, 1000.0, 1e9);
        assert!(b >= a + 1_000_000, "the second reservation queues behind the first: {a} {b}");
        let own = c.reserve(1, 1_000_000, 1000.0, 1.0);
        assert!(own >= monotonic_ns() + 900_000_000);
        assert!(OstClock::open(&tmp.path().join("clock"), 3).is_err());
    }
}
