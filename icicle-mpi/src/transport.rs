//! [`Cluster`] over MPI: rank 0 keeps the run's split queue and answers the other ranks from
//! a server thread (point-to-point, tagged); the shuffles are `MPI_Alltoallv` and
//! `MPI_Gatherv`. Needs `MPI_THREAD_MULTIPLE` on rank 0 (its server thread and its worker may
//! send at once).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use icicle_core::traits::Split;
use icicle_runtime::snapshot::cluster::{
    decode_split, decode_splits, encode_split, encode_splits, Answer, Cluster, Fields, SplitQueue,
};
use icicle_runtime::snapshot::Progress;

/// A rank asks rank 0 for work (payload: finished flag, spawned splits).
const TAG_ASK: i32 = 11;
/// Rank 0 answers (payload: an [`Answer`]).
const TAG_ANSWER: i32 = 12;

/// Rank 0's side: the queue, the answer waiting for its own worker, and what it has sent.
struct QueueHost {
    queue: Mutex<RootState>,
    answered: Condvar,
    /// Remote ranks told `Done` (the server stops when all are).
    remote_done: AtomicUsize,
    /// Drives the run's progress bar: a split's weight when a rank reports it read.
    progress: Arc<dyn Progress>,
}

struct RootState {
    queue: SplitQueue,
    /// The answer for rank 0's own worker, when it had to wait.
    local: Option<Answer>,
    /// Weights of the splits each rank holds, oldest first.
    in_hand: Vec<std::collections::VecDeque<u64>>,
}

/// The world communicator, shared by rank 0's server thread and its worker.
struct World(SimpleCommunicator);

// SAFETY: MPI is initialised with MPI_THREAD_MULTIPLE (checked in `main` before the cluster is
// made), under which any thread may call MPI on one communicator concurrently.
unsafe impl Send for World {}
// SAFETY: as above.
unsafe impl Sync for World {}

impl std::ops::Deref for World {
    type Target = SimpleCommunicator;
    fn deref(&self) -> &SimpleCommunicator {
        &self.0
    }
}

/// The MPI transport of a distributed snapshot run.
pub struct MpiCluster {
    world: World,
    rank: usize,
    size: usize,
    root: Option<Arc<QueueHost>>,
    server: Mutex<Option<std::thread::JoinHandle<Result<(), String>>>>,
    /// This cluster, for the server thread started when rank 0 has planned.
    me: std::sync::Weak<MpiCluster>,
}

fn encode_answer(a: &Answer) -> Vec<u8> {
    let mut out = Vec::new();
    match a {
        Answer::Work(si, s) => {
            out.push(0);
            encode_split(&mut out, *si, s);
        }
        Answer::Wait => out.push(1),
        Answer::Done => out.push(2),
    }
    out
}

fn decode_answer(buf: &[u8]) -> Result<Answer, String> {
    match buf.first() {
        Some(0) => {
            let (si, s) = decode_split(&mut Fields::new(&buf[1..]))?;
            Ok(Answer::Work(si, s))
        }
        Some(1) => Ok(Answer::Wait),
        Some(2) => Ok(Answer::Done),
        _ => Err("an answer of unknown kind from rank 0".into()),
    }
}

impl MpiCluster {
    /// The transport over `world` (MPI must provide `MPI_THREAD_MULTIPLE`); rank 0's progress
    /// bar is `progress`.
    pub fn new(world: SimpleCommunicator, progress: Arc<dyn Progress>) -> Arc<MpiCluster> {
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let root = (rank == 0).then(|| {
            Arc::new(QueueHost {
                queue: Mutex::new(RootState {
                    queue: SplitQueue::new(size),
                    local: None,
                    in_hand: vec![Default::default(); size],
                }),
                answered: Condvar::new(),
                remote_done: AtomicUsize::new(0),
                progress,
            })
        });
        Arc::new_cyclic(|me| MpiCluster {
            world: World(world),
            rank,
            size,
            root,
            server: Mutex::new(None),
            me: me.clone(),
        })
    }

    /// Start rank 0's server thread (when rank 0 has planned: collectives before that, such
    /// as starting a versioned run's manifest, need no server).
    fn start(&self) {
        if self.rank != 0 || self.size == 1 {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        let handle = std::thread::Builder::new().name("icicle-mpi-queue".into()).spawn(move || me.serve());
        match handle {
            Ok(h) => *self.server.lock().unwrap_or_else(|p| p.into_inner()) = Some(h),
            Err(e) => tracing::error!(message = "could not start the split queue's thread", error = %e),
        }
    }

    /// Rank 0: answer asks until every other rank was told `Done`.
    fn serve(&self) -> Result<(), String> {
        let Some(root) = &self.root else { return Ok(()) };
        // A blocking receive would spin a core inside the MPI library the whole run, the core
        // rank 0's worker needs: probe, and sleep a little (at most 1 ms) while nothing came.
        let mut idle = Duration::from_micros(20);
        while root.remote_done.load(Ordering::SeqCst) < self.size - 1 {
            let Some(probed) = self.world.any_process().immediate_matched_probe_with_tag(TAG_ASK) else {
                std::thread::sleep(idle);
                idle = (idle * 2).min(Duration::from_millis(1));
                continue;
            };
            idle = Duration::from_micros(20);
            let (msg, status) = mpi::point_to_point::MatchedReceiveVec::matched_receive_vec::<u8>(probed);
            let from = status.source_rank() as usize;
            if from == 0 {
                continue; // a wake-up from rank 0's own worker
            }
            let (finished, spawned) = match msg.split_first() {
                Some((f, rest)) => (*f == 1, decode_splits(rest).map_err(|e| format!("an ask from rank {from}: {e}"))?),
                None => return Err(format!("an empty ask from rank {from}")),
            };
            self.ask(from, finished, spawned);
        }
        Ok(())
    }

    /// Rank 0: record an ask and send every answer it makes possible.
    fn ask(&self, asker: usize, finished: bool, spawned: Vec<(usize, Split)>) -> Option<Answer> {
        let root = self.root.as_ref()?;
        let mut st = root.queue.lock().unwrap_or_else(|p| p.into_inner());
        if finished {
            if let Some(w) = st.in_hand[asker].pop_front() {
                root.progress.inc(w);
            }
        }
        let (answer, woken) = st.queue.ask(asker, finished, spawned);
        let mut mine = None;
        let mut told_the_last = false;
        for (rank, a) in std::iter::once((asker, answer)).chain(woken) {
            if let Answer::Work(_, s) = &a {
                st.in_hand[rank].push_back(s.weight);
            }
            if a == Answer::Wait {
                continue;
            }
            if rank == 0 {
                st.local = Some(a);
                root.answered.notify_all();
                continue;
            }
            if a == Answer::Done && root.remote_done.fetch_add(1, Ordering::SeqCst) + 2 == self.size {
                told_the_last = true;
            }
            self.world.process_at_rank(rank as i32).send_with_tag(&encode_answer(&a)[..], TAG_ANSWER);
        }
        if asker == 0 {
            mine = st.local.take();
            while mine.is_none() {
                st = root.answered.wait(st).unwrap_or_else(|p| p.into_inner());
                mine = st.local.take();
            }
        }
        drop(st);
        // The server is blocked receiving when rank 0's own ask told the last rank `Done`.
        if asker == 0 && told_the_last {
            self.world.process_at_rank(0).send_with_tag(&[0u8][..], TAG_ASK);
        }
        mine
    }

    /// Wait for rank 0's server (before a collective).
    fn join_server(&self) -> Result<(), String> {
        let handle = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        match handle.map(|h| h.join()) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the split queue's thread panicked".into()),
        }
    }
}

// The collectives are icicle_mpi_comm's (one spare byte per buffer: Open MPI reads an empty
// Rust slice's address, 1, as MPI_IN_PLACE).

impl Cluster for MpiCluster {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn seed(&self, splits: Vec<(usize, Split)>) {
        if let Some(root) = &self.root {
            root.queue.lock().unwrap_or_else(|p| p.into_inner()).queue.extend(splits);
            self.start();
        }
    }

    fn next_split(&self, finished_one: bool, spawned: Vec<(usize, Split)>) -> Option<(usize, Split)> {
        let answer = if self.rank == 0 {
            self.ask(0, finished_one, spawned)?
        } else {
            let mut msg = vec![u8::from(finished_one)];
            msg.extend(encode_splits(&spawned));
            let root = self.world.process_at_rank(0);
            root.send_with_tag(&msg[..], TAG_ASK);
            let (reply, _) = root.receive_vec_with_tag::<u8>(TAG_ANSWER);
            match decode_answer(&reply) {
                Ok(a) => a,
                Err(e) => {
                    tracing::error!(message = "unreadable answer from rank 0", error = %e);
                    self.world.abort(3)
                }
            }
        };
        match answer {
            Answer::Work(si, s) => Some((si, s)),
            Answer::Wait | Answer::Done => None,
        }
    }

    fn exchange(&self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String> {
        self.join_server()?;
        icicle_mpi_comm::exchange(&self.world, out).map_err(|e| e.to_string())
    }

    fn broadcast(&self, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
        self.join_server()?;
        icicle_mpi_comm::broadcast_bytes(&self.world, bytes).map_err(|e| e.to_string())
    }

    fn all_sum(&self, values: &[u64]) -> Result<Vec<u64>, String> {
        self.join_server()?;
        Ok(icicle_mpi_comm::all_sum(&self.world, values))
    }

    fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, String> {
        self.join_server()?;
        icicle_mpi_comm::gather_bytes(&self.world, bytes).map_err(|e| e.to_string())
    }
}
