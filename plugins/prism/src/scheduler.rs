//! Placement policies: the object scheduler (I/O processes bound to OSTs, as the public
//! SwiftLoad code does, with real OST indices and the loader's cap) and the file-level
//! baseline (whole files dealt round-robin).

use std::collections::BTreeMap;

use icicle_core::traits::{ObjectLayout, ObjectTask, Placement};

use crate::loader::Loader;
use crate::tasks;

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
/// processes:
/// - `n >= w`: OST `d` belongs to rank `d % w` (each rank owns `ceil(n/w)` OSTs; one process
///   per OST).
/// - `n < w`: OST `d` gets `w/n + (d < w%n)` processes, capped by the loader's
///   `max_processes(ost)`; processes freed by the cap go, one at a time, to the OST with the
///   most bytes per process still under its cap (any left over stay idle). Ranks are
///   numbered slot by slot (`k*n + d` when nothing is capped, as in the public code).
///   An OST's tasks are cut into runs of consecutive chunks so each of its processes has
///   work, and each run goes to the process of that OST with the fewest bytes so far
///   (the public code dealt whole tasks round-robin, which leaves processes idle when an OST
///   has fewer tasks than processes).
///
/// A rank owning several OSTs takes their tasks in turn (one from each queue).
#[derive(Debug, Clone, Default)]
pub struct ObjectScheduler {
    /// The loader configuration; `None`: no cap beyond the even split.
    pub loader: Option<Loader>,
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
        let mut bound: Vec<usize> = (0..n).map(|d| (w / n + usize::from(d < w % n)).min(cap(d))).collect();
        let mut left = w - bound.iter().sum::<usize>();
        while left > 0 {
            let best = (0..n).filter(|&d| bound[d] < cap(d)).max_by(|&a, &b| {
                // bytes[a]/bound[a] vs bytes[b]/bound[b], exactly; ties go to the lower slot.
                let (x, y) =
                    (bytes_per_slot[a] as u128 * bound[b] as u128, bytes_per_slot[b] as u128 * bound[a] as u128);
                x.cmp(&y).then(b.cmp(&a))
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

    /// Assign tasks to `processes` ranks.
    pub fn assign(&self, all: &[ObjectTask], processes: usize) -> Vec<Vec<ObjectTask>> {
        let mut out = vec![Vec::new(); processes];
        let index = OstIndex::of(all);
        let n = index.len();
        if n == 0 || processes == 0 {
            return out;
        }
        let mut queues: Vec<Vec<ObjectTask>> = vec![Vec::new(); n];
        for t in all {
            if let Some(d) = index.slot(t.ost) {
                queues[d].push(*t);
            }
        }
        let bytes: Vec<u64> = queues.iter().map(|q| q.iter().map(tasks::task_bytes).sum()).collect();
        let bound = self.bounds(&index, &bytes, processes);
        // Per rank: the queues (one per owned OST) it takes from in turn.
        let mut rank_queues: Vec<Vec<Vec<ObjectTask>>> = vec![Vec::new(); processes];
        if n >= processes {
            for (d, q) in queues.into_iter().enumerate() {
                rank_queues[d % processes].push(q);
            }
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
            out[r] = interleave(qs);
        }
        out
    }
}

/// Share one OST's tasks among `b` processes: the OST's chunks, in task order, cut into `b`
/// consecutive runs of near-equal chunk counts (`floor(i*C/b)..floor((i+1)*C/b)`); each
/// run is made of valid tasks (pieces of the originals).
fn share(q: &[ObjectTask], b: usize) -> Vec<Vec<ObjectTask>> {
    let mut out = vec![Vec::new(); b];
    if b == 0 {
        return out;
    }
    let counts: Vec<u64> = q.iter().map(|t| tasks::chunks(t).count() as u64).collect();
    let total: u64 = counts.iter().sum();
    let bound = |i: usize| (i as u128 * total as u128 / b as u128) as u64;
    let mut g = 0u64; // global index of the task's first chunk
    for (t, &m) in q.iter().zip(&counts) {
        let mut k = 0u64; // chunks of t handed out
        while k < m {
            // The process whose run holds global chunk g + k, and where that run ends.
            let i = (0..b).rfind(|&i| bound(i) <= g + k).unwrap_or(0);
            let run_end = bound(i + 1).min(g + m);
            let take = run_end - (g + k);
            out[i].push(piece(t, k, take));
            k += take;
        }
        g += m;
    }
    out
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

impl Placement for ObjectScheduler {
    fn name(&self) -> &str {
        "object"
    }
    fn place(&self, objects: &[ObjectLayout], processes: usize) -> Vec<Vec<ObjectTask>> {
        self.assign(&expand(objects), processes)
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
        // Dense slots: 10->0, 60->1, 86->2, 105->3, 113->4, 167->5, 204->6; rank = slot % 3.
        let owner = |o: u32| plan.iter().position(|ts| ts.iter().any(|t| t.ost == o)).unwrap();
        assert_eq!([10, 60, 86, 105, 113, 167, 204].map(owner), [0, 1, 2, 0, 1, 2, 0]);
        let st = PlanStats::of(&plan);
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
        // Freed processes go to the OST with the most bytes per process still under its cap.
        let cfg = "[loader]\nper_process_mb_s = 100.0\n[loader.ost_mb_s]\n1 = 500.0\n2 = 100.0\n3 = 300.0\n4 = 800.0\n";
        let mixed = crate::loader::LoaderConfig::from_toml("l".as_ref(), cfg).unwrap().check("l".as_ref()).unwrap();
        let b = ObjectScheduler::new(Some(mixed.clone())).bounds(&OstIndex { osts: vec![1, 2, 3] }, &[100, 10, 50], 9);
        assert_eq!(b, vec![5, 1, 3]);
        // Between two OSTs under their caps, the one with more bytes per process wins.
        let b = ObjectScheduler::new(Some(mixed)).bounds(&OstIndex { osts: vec![2, 3, 4] }, &[10, 10, 90], 9);
        assert_eq!(b, vec![1, 3, 5]);
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
            let st = PlanStats::of(&ObjectScheduler::new(Some(loader.clone())).place(&objs, w));
            assert!(st.over_cap(&loader).is_empty(), "case {case}: {st:?}");
        }
    }
}
