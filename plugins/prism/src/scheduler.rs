//! Placement policies: the object scheduler (I/O processes bound to OSTs, as the public
//! SwiftLoad code does, with real OST indices and the loader's cap) and the file-level
//! baseline (whole files dealt round-robin).

use std::collections::BTreeMap;

use icicle_core::traits::{ObjectLayout, ObjectTask, Placement};

use crate::loader::Loader;
use crate::tasks;

mod grouped;

/// The OSTs a set of tasks touches, mapped densely: real indices (113, 204, ...) to
/// `0..n` in ascending order. The public code indexed arrays of 24 by the real index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OstIndex {
    osts: Vec<u32>,
}

impl OstIndex {
    /// The distinct OSTs of `tasks`.
    pub fn of(tasks: &[ObjectTask]) -> OstIndex {
        let mut osts: Vec<u32> = tasks.iter().map(|t| t.ost).collect();
        osts.sort_unstable();
        osts.dedup();
        OstIndex { osts }
    }

    /// Number of distinct OSTs.
    pub fn len(&self) -> usize {
        self.osts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.osts.is_empty()
    }

    /// The dense slot of a real OST index.
    pub fn slot(&self, ost: u32) -> Option<usize> {
        self.osts.binary_search(&ost).ok()
    }

    /// The real OST index of a slot.
    pub fn ost(&self, slot: usize) -> u32 {
        self.osts[slot]
    }

    /// The real indices in slot order.
    pub fn osts(&self) -> &[u32] {
        &self.osts
    }
}

/// The object-level scheduler.
///
/// With `n` distinct OSTs (densely numbered `d = 0..n` in ascending index order) and `w`
/// processes, an OST's "limit" being the loader's `max_processes(ost)` (one without a loader):
/// - `n >= w`: each OST's tasks are cut into runs of about a quarter of a rank's share of the
///   bytes (at most its limit of runs), and the runs are dealt longest first (by the loader's
///   model: bytes over what the OST's processes pull), each to the least loaded rank not yet
///   reading that OST (ties: the lower rank). Without a loader every OST is one run.
/// - `n < w`: each OST gets one process, then the others go one at a time to the OST that
///   would finish last (its bytes over `min(k × per-process, OST speed)`; bytes per process
///   without a loader), while under its limit (any left over stay idle). Ranks are numbered
///   slot by slot (`k*n + d` when nothing is capped, as in the public code). An OST's tasks
///   are cut into runs of consecutive chunks so each of its processes has work (the public
///   code dealt whole tasks round-robin, which leaves processes idle when an OST has fewer
///   tasks than processes).
///
/// A rank holding several runs takes their tasks in turn (one from each). With a loader,
/// [`ObjectScheduler::plan`] (what [`Placement::place`] returns) also models that plan's
/// alternatives within the limits and keeps the fastest.
#[derive(Debug, Clone, Default)]
pub struct ObjectScheduler {
    /// The loader configuration; `None`: no model, no limit but one process per OST when
    /// OSTs outnumber ranks.
    pub loader: Option<Loader>,
}

/// How [`ObjectScheduler::assign_as`] shapes a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Fewer OSTs than ranks: processes bound to OSTs by the bytes they hold; else runs dealt.
    Bound,
    /// Runs of each OST dealt to the least loaded ranks ([`ObjectScheduler::deal`]'s rule).
    Dealt,
    /// Equal stretches of the OSTs' chunks in slot order (McNaughton's wrap-around rule).
    Wrapped,
    /// [`Form::Wrapped`]'s stretches, each rank reading its stretch in order rather than its
    /// OSTs in turn: the ranks sharing an OST read it at different times (McNaughton's
    /// schedule), so an OST of one process's worth can be shared without two readers at once.
    Sequenced,
}

/// The file-level baseline: file `k` (in object order) goes to rank `k % w` and is read
/// front to back, chunk by chunk, whatever OSTs its chunks are on.
#[derive(Debug, Clone, Copy, Default)]
pub struct FileScheduler;

impl ObjectScheduler {
    /// A scheduler capped by `loader`.
    pub fn new(loader: Option<Loader>) -> ObjectScheduler {
        ObjectScheduler { loader }
    }

    /// Seconds `bytes` take on OST slot `d` with `k` processes, as the loader's model
    /// estimates them (bytes per process without a loader).
    fn load(&self, index: &OstIndex, d: usize, bytes: u64, k: usize) -> f64 {
        let k = k.max(1) as f64;
        match &self.loader {
            Some(l) => bytes as f64 / (k * l.per_process_mb_s()).min(l.ost_mb_s(index.ost(d))).max(1e-9),
            None => bytes as f64 / k,
        }
    }

    /// Processes per dense OST slot for `processes` ranks (see the type's rules).
    pub fn bounds(&self, index: &OstIndex, bytes_per_slot: &[u64], processes: usize) -> Vec<usize> {
        let (n, w) = (index.len(), processes);
        if n == 0 || w == 0 {
            return vec![0; n];
        }
        if n >= w {
            return vec![1; n];
        }
        let cap = |d: usize| self.loader.as_ref().map_or(usize::MAX, |l| l.max_processes(index.ost(d)) as usize);
        let mut bound = vec![1usize; n];
        let mut left = w - n;
        while left > 0 {
            // The OST that would finish last, among those under their cap; ties: the lower slot.
            let best = (0..n).filter(|&d| bound[d] < cap(d)).max_by(|&a, &b| {
                let (x, y) = (
                    self.load(index, a, bytes_per_slot[a], bound[a]),
                    self.load(index, b, bytes_per_slot[b], bound[b]),
                );
                x.total_cmp(&y).then(b.cmp(&a))
            });
            match best {
                Some(d) => {
                    bound[d] += 1;
                    left -= 1;
                }
                None => break,
            }
        }
        bound
    }

    /// With at least as many OSTs as ranks: each OST's tasks cut into as many runs as it
    /// needs to fit a rank's share of the bytes (at most its process limit), and the runs
    /// dealt longest first, each to the least loaded rank not reading that OST yet (ties: the
    /// lower rank). Returns per rank its runs.
    fn deal(
        &self,
        index: &OstIndex,
        queues: Vec<Vec<ObjectTask>>,
        bytes: &[u64],
        processes: usize,
    ) -> Vec<Vec<Vec<ObjectTask>>> {
        // Without a loader nothing says an OST serves two processes faster than one.
        let cap = |d: usize| self.loader.as_ref().map_or(1, |l| l.max_processes(index.ost(d)) as usize);
        // Runs of about a quarter of a rank's share, so that dealing them evens the ranks out.
        let target = bytes.iter().sum::<u64>().div_ceil(4 * processes.max(1) as u64).max(1);
        let mut runs: Vec<(usize, f64, Vec<ObjectTask>)> = Vec::new();
        for (d, q) in queues.into_iter().enumerate() {
            let m = (bytes[d].div_ceil(target) as usize).clamp(1, cap(d).max(1));
            for run in share(&q, m) {
                let b: u64 = run.iter().map(tasks::task_bytes).sum();
                // A run shares its OST with the OST's other runs.
                runs.push((d, self.load(index, d, b * m as u64, m), run));
            }
        }
        runs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut load = vec![0.0f64; processes];
        let mut reading: Vec<Vec<usize>> = vec![Vec::new(); processes];
        let mut out: Vec<Vec<Vec<ObjectTask>>> = vec![Vec::new(); processes];
        for (d, t, run) in runs {
            let least = |free_only: bool| {
                (0..processes)
                    .filter(|&r| !free_only || !reading[r].contains(&d))
                    .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)))
            };
            let r = least(true).or_else(|| least(false)).unwrap_or(0);
            load[r] += t;
            reading[r].push(d);
            out[r].push(run);
        }
        out
    }

    /// The OSTs' tasks in slot order as one stream of chunks, rank `r` reading the `r`-th of
    /// `processes` equal stretches (McNaughton's wrap-around rule): every rank the same
    /// number of chunks, an OST shared by the ranks whose stretches cross it.
    fn wrap(queues: Vec<Vec<ObjectTask>>, processes: usize) -> Vec<Vec<Vec<ObjectTask>>> {
        let counts: Vec<u64> = queues.iter().map(|q| q.iter().map(|t| tasks::chunks(t).count() as u64).sum()).collect();
        let total: u64 = counts.iter().sum();
        let bound = |i: usize| (i as u128 * total as u128 / processes.max(1) as u128) as u64;
        let mut out: Vec<Vec<Vec<ObjectTask>>> = vec![Vec::new(); processes];
        let mut g = 0u64;
        for (q, c) in queues.into_iter().zip(counts) {
            for (r, run) in cut(&q, processes, g, bound).into_iter().enumerate() {
                if !run.is_empty() {
                    out[r].push(run);
                }
            }
            g += c;
        }
        out
    }

    /// Assign tasks to `processes` ranks.
    pub fn assign(&self, all: &[ObjectTask], processes: usize) -> Vec<Vec<ObjectTask>> {
        self.assign_as(all, processes, Form::Bound)
    }

    /// The grouped form ([`grouped`]'s rule): OSTs in slot order grouped until their chunks
    /// divide into whole shares within `tolerance` of the mean, each group wrapped over its
    /// own ranks with every OST crossed by no more ranks than the loader's limit (one without
    /// a loader). `None` when the OSTs cannot be grouped so within `processes` ranks.
    pub fn assign_grouped(&self, all: &[ObjectTask], processes: usize, tolerance: f64) -> Option<Vec<Vec<ObjectTask>>> {
        let (index, queues) = queues_of(all);
        if index.is_empty() || processes == 0 {
            return Some(vec![Vec::new(); processes]);
        }
        let limits: Vec<usize> = (0..index.len())
            .map(|d| self.loader.as_ref().map_or(1, |l| l.max_processes(index.ost(d)) as usize))
            .collect();
        let runs = grouped::grouped(queues, &limits, processes, tolerance)?;
        Some(runs.into_iter().map(interleave).collect())
    }

    /// Assign tasks to `processes` ranks in the given [`Form`].
    pub fn assign_as(&self, all: &[ObjectTask], processes: usize, form: Form) -> Vec<Vec<ObjectTask>> {
        let mut out = vec![Vec::new(); processes];
        let (index, queues) = queues_of(all);
        let n = index.len();
        if n == 0 || processes == 0 {
            return out;
        }
        let bytes: Vec<u64> = queues.iter().map(|q| q.iter().map(tasks::task_bytes).sum()).collect();
        let bound = self.bounds(&index, &bytes, processes);
        // Per rank: the queues (one per owned OST) it takes from in turn.
        let mut rank_queues: Vec<Vec<Vec<ObjectTask>>> = vec![Vec::new(); processes];
        if matches!(form, Form::Wrapped | Form::Sequenced) {
            rank_queues = Self::wrap(queues, processes);
        } else if n >= processes || form == Form::Dealt {
            rank_queues = self.deal(&index, queues, &bytes, processes);
        } else {
            let mut ranks_of: Vec<Vec<usize>> = vec![Vec::new(); n];
            let mut next = 0;
            for k in 0..bound.iter().copied().max().unwrap_or(0) {
                for d in 0..n {
                    if k < bound[d] {
                        ranks_of[d].push(next);
                        next += 1;
                    }
                }
            }
            for (d, q) in queues.into_iter().enumerate() {
                let ranks = &ranks_of[d];
                for (i, mine) in share(&q, ranks.len()).into_iter().enumerate() {
                    rank_queues[ranks[i]].push(mine);
                }
            }
        }
        for (r, qs) in rank_queues.into_iter().enumerate() {
            out[r] = if form == Form::Sequenced { qs.concat() } else { interleave(qs) };
        }
        out
    }
}

/// The distinct OSTs of `all` and their tasks per dense slot, in task order.
fn queues_of(all: &[ObjectTask]) -> (OstIndex, Vec<Vec<ObjectTask>>) {
    let index = OstIndex::of(all);
    let mut queues: Vec<Vec<ObjectTask>> = vec![Vec::new(); index.len()];
    for t in all {
        if let Some(d) = index.slot(t.ost) {
            queues[d].push(*t);
        }
    }
    (index, queues)
}

/// Share one OST's tasks among `b` processes: the OST's chunks, in task order, cut into `b`
/// consecutive runs of near-equal chunk counts (`floor(i*C/b)..floor((i+1)*C/b)`); each
/// run is made of valid tasks (pieces of the originals).
fn share(q: &[ObjectTask], b: usize) -> Vec<Vec<ObjectTask>> {
    if b == 0 {
        return Vec::new();
    }
    let total: u64 = q.iter().map(|t| tasks::chunks(t).count() as u64).sum();
    cut(q, b, 0, |i| (i as u128 * total as u128 / b as u128) as u64)
}

/// Cut `q` (whose first chunk is chunk `first` of a longer run) into `b` runs: run `i` holds
/// the chunks from `bound(i)` up to `bound(i + 1)` (`bound` non-decreasing, `bound(0) <=
/// first`, `bound(b)` past the last chunk).
fn cut(q: &[ObjectTask], b: usize, first: u64, bound: impl Fn(usize) -> u64) -> Vec<Vec<ObjectTask>> {
    let mut out = vec![Vec::new(); b];
    if b == 0 {
        return out;
    }
    let counts: Vec<u64> = q.iter().map(|t| tasks::chunks(t).count() as u64).collect();
    let mut g = first; // global index of the task's first chunk
    for (t, &m) in q.iter().zip(&counts) {
        let mut k = 0u64; // chunks of t handed out
        while k < m {
            // The process whose run holds global chunk g + k, and where that run ends.
            let i = last_at_or_below(b, &bound, g + k);
            let run_end = bound(i + 1).min(g + m);
            let take = run_end - (g + k);
            out[i].push(piece(t, k, take));
            k += take;
        }
        g += m;
    }
    out
}

/// The last `i < b` with `bound(i) <= x` (`bound` non-decreasing, `bound(0) <= x`), by
/// bisection.
fn last_at_or_below(b: usize, bound: &impl Fn(usize) -> u64, x: u64) -> usize {
    let (mut lo, mut hi) = (0usize, b.max(1));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if bound(mid) <= x {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Chunks `from..from+count` of task `t`, as a task.
fn piece(t: &ObjectTask, from: u64, count: u64) -> ObjectTask {
    let start = t.start + from * t.interval;
    let last = start + (count.saturating_sub(1)) * t.interval;
    ObjectTask { start, end: (last + t.stripe_size).min(t.end), ..*t }
}

fn interleave(mut qs: Vec<Vec<ObjectTask>>) -> Vec<ObjectTask> {
    let total = qs.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    for q in &mut qs {
        q.reverse();
    }
    while out.len() < total {
        for q in &mut qs {
            if let Some(t) = q.pop() {
                out.push(t);
            }
        }
    }
    out
}

impl FileScheduler {
    /// Assign tasks to `processes` ranks, whole files round-robin, each read front to back.
    pub fn assign(&self, all: &[ObjectTask], processes: usize) -> Vec<Vec<ObjectTask>> {
        let mut out = vec![Vec::new(); processes];
        if processes == 0 {
            return out;
        }
        let mut by_file: BTreeMap<usize, Vec<ObjectTask>> = BTreeMap::new();
        for t in all {
            by_file.entry(t.object).or_default().extend(tasks::split_chunks(t));
        }
        for (k, (_, mut chunks)) in by_file.into_iter().enumerate() {
            chunks.sort_by_key(|c| c.start);
            out[k % processes].extend(chunks);
        }
        out
    }
}

/// The tasks of every object with a valid layout; invalid ones are logged and skipped.
pub fn expand(objects: &[ObjectLayout]) -> Vec<ObjectTask> {
    let mut all = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        match tasks::tasks_of(i, o) {
            Ok(t) => all.extend(t),
            Err(e) => tracing::warn!(error = %e, "layout skipped"),
        }
    }
    all
}

impl ObjectScheduler {
    /// The plan for `all` over `processes` ranks: processes bound to OSTs ([`Self::assign`]),
    /// unless the loader's model ([`crate::contention::simulate`]) says reading whole files
    /// ([`FileScheduler`]) finishes sooner, as it can when every OST serves several processes
    /// at full speed and files outnumber ranks (a process then draws on every OST). Without
    /// a loader there is no model: always bound to OSTs.
    pub fn plan(&self, all: &[ObjectTask], processes: usize) -> Vec<Vec<ObjectTask>> {
        let bound = self.assign(all, processes);
        let Some(model) = &self.loader else { return bound };
        // The candidates that never have more readers at once on an OST than the loader's
        // limit, by the model's time; the first wins a tie.
        let mut best = (crate::contention::simulate(&bound, model).seconds, bound, "bound");
        let mut candidates = vec![
            (self.assign_as(all, processes, Form::Wrapped), "wrapped"),
            (self.assign_as(all, processes, Form::Sequenced), "sequenced"),
        ];
        if OstIndex::of(all).len() < processes {
            candidates.push((self.assign_as(all, processes, Form::Dealt), "dealt"));
        }
        // A share within a tolerance of the mean closes a group; which one groups best
        // depends on how the OSTs' shares fall, so the model tries a few.
        for tolerance in [0.02, 0.05, 0.1, 0.2] {
            if let Some(plan) = self.assign_grouped(all, processes, tolerance) {
                candidates.push((plan, "grouped"));
            }
        }
        candidates.push((FileScheduler.assign(all, processes), "whole files"));
        for (plan, name) in candidates {
            let (simulated, readers) = crate::contention::simulate_readers(&plan, model);
            if !crate::contention::over(&readers, model).is_empty() {
                continue;
            }
            let seconds = simulated.seconds;
            if seconds < best.0 {
                best = (seconds, plan, name);
            }
        }
        tracing::debug!(message = "placement chosen by the loader's model", plan = best.2, seconds = best.0);
        best.1
    }
}

impl Placement for ObjectScheduler {
    fn name(&self) -> &str {
        "object"
    }
    fn place(&self, objects: &[ObjectLayout], processes: usize) -> Vec<Vec<ObjectTask>> {
        self.plan(&expand(objects), processes)
    }
}

impl Placement for FileScheduler {
    fn name(&self) -> &str {
        "file"
    }
    fn place(&self, objects: &[ObjectLayout], processes: usize) -> Vec<Vec<ObjectTask>> {
        self.assign(&expand(objects), processes)
    }
}

/// What an assignment does to the OSTs and ranks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanStats {
    /// Bytes in all tasks.
    pub bytes: u64,
    /// Bytes per rank.
    pub per_rank_bytes: Vec<u64>,
    /// Per OST index: how many ranks read from it.
    pub per_ost_processes: BTreeMap<u32, u32>,
    /// The largest of `per_ost_processes`.
    pub max_processes_on_an_ost: u32,
}

impl PlanStats {
    /// The stats of `plan`.
    pub fn of(plan: &[Vec<ObjectTask>]) -> PlanStats {
        let mut per_ost: BTreeMap<u32, u32> = BTreeMap::new();
        let mut per_rank_bytes = Vec::with_capacity(plan.len());
        for tasks in plan {
            let mut osts: Vec<u32> = tasks.iter().filter(|t| tasks::task_bytes(t) > 0).map(|t| t.ost).collect();
            osts.sort_unstable();
            osts.dedup();
            for o in osts {
                *per_ost.entry(o).or_default() += 1;
            }
            per_rank_bytes.push(tasks.iter().map(tasks::task_bytes).sum());
        }
        PlanStats {
            bytes: per_rank_bytes.iter().sum(),
            max_processes_on_an_ost: per_ost.values().copied().max().unwrap_or(0),
            per_ost_processes: per_ost,
            per_rank_bytes,
        }
    }

    /// OSTs whose process count exceeds the loader's cap: (OST, processes, cap).
    pub fn over_cap(&self, loader: &Loader) -> Vec<(u32, u32, u32)> {
        self.per_ost_processes
            .iter()
            .filter(|(&o, &n)| n > loader.max_processes(o))
            .map(|(&o, &n)| (o, n, loader.max_processes(o)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use icicle_core::traits::LayoutComponent;

    const M: u64 = 1 << 20;

    fn files(osts: &[&[u32]], size: u64) -> Vec<ObjectLayout> {
        osts.iter().enumerate().map(|(i, o)| ObjectLayout::plain(format!("/f{i}"), size, M, o.to_vec())).collect()
    }

    /// Every byte of every object in exactly one task of one rank.
    fn assert_tiles(objects: &[ObjectLayout], plan: &[Vec<ObjectTask>]) {
        let mut seen: Vec<Vec<u8>> = objects.iter().map(|o| vec![0u8; (o.size / 1024) as usize]).collect();
        for t in plan.iter().flatten() {
            for (off, len) in tasks::chunks(t) {
                assert!(off % 1024 == 0 && len % 1024 == 0);
                for k in off / 1024..(off + len) / 1024 {
                    seen[t.object][k as usize] += 1;
                }
            }
        }
        assert!(seen.iter().flatten().all(|&n| n == 1));
    }

    #[test]
    fn fewer_processes_than_osts_each_rank_owns_osts_and_real_indices_never_overflow() {
        // Real, sparse indices well past 24: the public code indexed arrays of 24 with them.
        let objs = files(&[&[113, 204], &[167, 10], &[60, 86], &[105, 113]], 8 * M);
        let plan = ObjectScheduler::default().place(&objs, 3);
        assert_tiles(&objs, &plan);
        // The heaviest OST first (113: 8 MiB), then the others in slot order (10, 60, 86,
        // 105, 167, 204: 4 MiB each), each to the least loaded rank.
        let owner = |o: u32| plan.iter().position(|ts| ts.iter().any(|t| t.ost == o)).unwrap();
        assert_eq!([10, 60, 86, 105, 113, 167, 204].map(owner), [1, 2, 1, 2, 0, 0, 1]);
        let st = PlanStats::of(&plan);
        assert_eq!(st.per_rank_bytes, vec![12 * M, 12 * M, 8 * M]);
        assert_eq!(st.max_processes_on_an_ost, 1);
        assert_eq!(st.per_ost_processes.len(), 7);
        assert_eq!(st.bytes, 32 * M);
    }

    #[test]
    fn more_processes_than_osts_bind_several_per_ost_and_respect_the_loader_cap() {
        let objs = files(&[&[113], &[204], &[113], &[204], &[113]], 16 * M);
        // 7 processes, 2 OSTs: 113 (slot 0) gets 4, 204 (slot 1) gets 3; ranks k*2+d.
        let plan = ObjectScheduler::default().place(&objs, 7);
        assert_tiles(&objs, &plan);
        let st = PlanStats::of(&plan);
        assert_eq!(st.per_ost_processes, BTreeMap::from([(113, 4), (204, 3)]));
        assert_eq!(st.per_rank_bytes, vec![12 * M, 10 * M, 12 * M, 11 * M, 12 * M, 11 * M, 12 * M]);
        assert!(plan[0].iter().all(|t| t.ost == 113) && plan[1].iter().all(|t| t.ost == 204));
        // Loader: 113 serves 200 MB/s, 204 serves 100, a process 100: caps 2 and 1.
        let cfg = "[loader]\nper_process_mb_s = 100.0\n[loader.ost_mb_s]\n113 = 200.0\n204 = 100.0\n";
        let loader = crate::loader::LoaderConfig::from_toml("l".as_ref(), cfg).unwrap().check("l".as_ref()).unwrap();
        let plan = ObjectScheduler::new(Some(loader.clone())).place(&objs, 7);
        assert_tiles(&objs, &plan);
        let st = PlanStats::of(&plan);
        assert_eq!(st.per_ost_processes, BTreeMap::from([(113, 2), (204, 1)]));
        assert!(st.over_cap(&loader).is_empty());
        assert_eq!(st.per_rank_bytes.iter().filter(|&&b| b > 0).count(), 3);
        // One process each, then one at a time to the OST that would finish last, under its cap.
        let cfg = "[loader]\nper_process_mb_s = 100.0\n[loader.ost_mb_s]\n1 = 500.0\n2 = 100.0\n3 = 300.0\n4 = 800.0\n";
        let mixed = crate::loader::LoaderConfig::from_toml("l".as_ref(), cfg).unwrap().check("l".as_ref()).unwrap();
        let b = ObjectScheduler::new(Some(mixed.clone())).bounds(&OstIndex { osts: vec![1, 2, 3] }, &[100, 10, 50], 9);
        assert_eq!(b, vec![5, 1, 3]);
        // Each process goes to the OST that would finish last (its bytes over what its
        // processes pull, at most the OST's speed): OST 4's 90 take seven before OST 3's 10
        // need a second.
        let b = ObjectScheduler::new(Some(mixed)).bounds(&OstIndex { osts: vec![2, 3, 4] }, &[10, 10, 90], 9);
        assert_eq!(b, vec![1, 1, 7]);
    }

    #[test]
    fn one_big_single_stripe_file_is_shared_by_all_its_processes() {
        let objs = files(&[&[204]], 10 * M + 7);
        let plan = ObjectScheduler::default().place(&objs, 3);
        assert_tiles_bytes(&objs, &plan);
        assert_eq!(PlanStats::of(&plan).per_rank_bytes, vec![3 * M, 4 * M, 3 * M + 7]);
    }

    fn assert_tiles_bytes(objects: &[ObjectLayout], plan: &[Vec<ObjectTask>]) {
        let mut seen: Vec<Vec<u8>> = objects.iter().map(|o| vec![0u8; o.size as usize]).collect();
        for t in plan.iter().flatten() {
            for (off, len) in tasks::chunks(t) {
                for b in &mut seen[t.object][off as usize..(off + len) as usize] {
                    *b += 1;
                }
            }
        }
        assert!(seen.iter().flatten().all(|&n| n == 1));
    }

    #[test]
    fn the_file_policy_reads_whole_files_front_to_back() {
        let objs = vec![
            ObjectLayout {
                path: "/pfl".into(),
                size: 6 * M + 3,
                components: vec![
                    LayoutComponent { start: 0, end: 2 * M, stripe_size: M, osts: vec![7] },
                    LayoutComponent { start: 2 * M, end: u64::MAX, stripe_size: M, osts: vec![300, 9] },
                ],
            },
            ObjectLayout::plain("/b", 3 * M, M, vec![9]),
            ObjectLayout::plain("/c", M, M, vec![300]),
        ];
        let plan = FileScheduler.place(&objs, 2);
        assert_tiles_bytes(&objs, &plan);
        let r0: Vec<_> = plan[0].iter().map(|t| (t.object, t.ost, t.start, t.end)).collect();
        assert_eq!(
            r0,
            vec![
                (0, 7, 0, M),
                (0, 7, M, 2 * M),
                (0, 300, 2 * M, 3 * M),
                (0, 9, 3 * M, 4 * M),
                (0, 300, 4 * M, 5 * M),
                (0, 9, 5 * M, 6 * M),
                (0, 300, 6 * M, 6 * M + 3),
                (2, 300, 0, M)
            ]
        );
        assert!(plan[1].iter().all(|t| t.object == 1));
        assert_eq!(PlanStats::of(&plan).per_ost_processes, BTreeMap::from([(7, 1), (9, 2), (300, 1)]));
    }

    #[test]
    fn random_layouts_are_tiled_by_both_policies_and_caps_hold() {
        let mut rng = icicle_core::rng::Rng::new(99);
        for case in 0..200 {
            let pool: Vec<u32> = (0..rng.range(1..12) as usize).map(|_| rng.below(400) as u32).collect();
            let objs: Vec<ObjectLayout> = (0..rng.range(1..10) as usize)
                .map(|i| {
                    let c = rng.range(1..pool.len().min(4) as u64 + 1) as usize;
                    let s = rng.below(pool.len() as u64) as usize;
                    let osts = (0..c).map(|k| pool[(s + k) % pool.len()]).collect();
                    ObjectLayout::plain(format!("/r{i}"), rng.below(40) * 1024, 4096, osts)
                })
                .collect();
            let w = rng.range(1..20) as usize;
            let loader = Loader::uniform(rng.f64() * 500.0 + 50.0, 100.0, rng.range(1..5) as u32);
            for plan in [
                ObjectScheduler::new(Some(loader.clone())).place(&objs, w),
                ObjectScheduler::default().place(&objs, w),
                FileScheduler.place(&objs, w),
            ] {
                assert_eq!(plan.len(), w, "case {case}");
                assert_tiles_bytes(&objs, &plan);
            }
            let plan = ObjectScheduler::new(Some(loader.clone())).place(&objs, w);
            let over = crate::contention::over_limits(&plan, &loader);
            assert!(over.is_empty(), "case {case}: {over:?}");
        }
    }
}
