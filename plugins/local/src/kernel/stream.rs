//! The local monitor's [`ChangeStream`]: the first event is a rescan of the root (the seed walk,
//! or the restart rescan: there is no position to resume), then what the backend reads. The
//! kernel keeps no position, so acknowledging is only bookkeeping. With `--until-idle SECS` (or
//! `--drain`, after the quiet period) the stream ends after that long without an event under the
//! root.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use icicle_core::monitor::{ChangeStream, Polled};
use icicle_core::IcicleError;

use crate::event::{LocalEvent, RescanReason};
use crate::kernel::fanotify::{Fanotify, FanotifyCounts};
use crate::kernel::inotify_backend::{InotifyCounts, InotifyWatch};
use crate::kernel::mounts::MOUNT_CHECK;

/// The open kernel interface.
pub enum Reader {
    /// A fanotify group.
    Fanotify(Box<Fanotify>),
    /// An inotify instance.
    Inotify(Box<InotifyWatch>),
}

/// What the readers counted, for the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReaderCounts {
    /// The fanotify reader's counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fanotify: Option<FanotifyCounts>,
    /// The inotify reader's counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inotify: Option<InotifyCounts>,
}

/// The change stream of one root.
pub struct LocalStream {
    reader: Reader,
    /// Events found while opening (watches that could not be added) and the first rescan.
    queued: Vec<LocalEvent>,
    idle: Option<Duration>,
    last_event: Instant,
    read: u64,
    acked: u64,
    counts: ReaderCounts,
}

impl LocalStream {
    /// A stream over `reader` whose first event rescans the root for `why`; `queued` holds what
    /// opening the reader found. `idle`: end after this long without events.
    pub fn new(reader: Reader, why: RescanReason, queued: Vec<LocalEvent>, idle: Option<Duration>) -> LocalStream {
        let mut q = vec![LocalEvent::Rescan(String::new(), why)];
        q.extend(queued);
        LocalStream {
            reader,
            queued: q,
            idle,
            last_event: Instant::now(),
            read: 0,
            acked: 0,
            counts: ReaderCounts::default(),
        }
    }

    fn read_now(&mut self, out: &mut Vec<LocalEvent>) -> Result<usize, IcicleError> {
        let before = out.len();
        match &mut self.reader {
            Reader::Fanotify(f) => {
                f.read(out)?;
                self.counts.fanotify = Some(f.parser.counts.clone());
            }
            Reader::Inotify(i) => {
                i.read(out)?;
                self.counts.inotify = Some(i.counts.clone());
            }
        }
        Ok(out.len() - before)
    }

    async fn readable(&self) -> Result<(), IcicleError> {
        match &self.reader {
            Reader::Fanotify(f) => f.readable().await?,
            Reader::Inotify(i) => i.readable().await?,
        }
        Ok(())
    }
}

#[async_trait]
impl ChangeStream for LocalStream {
    type Event = LocalEvent;
    type Position = u64;
    type Counts = ReaderCounts;

    async fn poll(
        &mut self,
        out: &mut Vec<LocalEvent>,
        wait: Option<Duration>,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Polled, IcicleError> {
        if !self.queued.is_empty() {
            self.read += self.queued.len() as u64;
            out.append(&mut self.queued);
            self.last_event = Instant::now();
            return Ok(Polled::New);
        }
        let deadline = match (wait, self.idle) {
            (w, Some(idle)) => {
                let left = idle.saturating_sub(self.last_event.elapsed());
                Some(w.map_or(left, |w| w.min(left)))
            }
            (w, None) => w,
        };
        // Events outside the root (a filesystem mark sees the whole file system) are read and
        // dropped without ending the wait: only events under the root make a poll `New`.
        let started = Instant::now();
        loop {
            let n = self.read_now(out)?;
            if n > 0 {
                self.read += n as u64;
                self.last_event = Instant::now();
                return Ok(Polled::New);
            }
            let left = deadline.map(|d| d.saturating_sub(started.elapsed()));
            if left == Some(Duration::ZERO) || *stop.borrow() {
                break;
            }
            // Still queued (only events outside the root so far): read on, do not wait for
            // a readiness edge that already came.
            let more = match &self.reader {
                Reader::Fanotify(f) => f.more,
                Reader::Inotify(i) => i.more,
            };
            if more {
                tokio::task::yield_now().await;
                continue;
            }
            // Both backends read the mounts below the root again every MOUNT_CHECK, idle or not.
            let left = Some(left.map_or(MOUNT_CHECK, |l| l.min(MOUNT_CHECK)));
            let ready = async {
                match left {
                    Some(d) => tokio::time::timeout(d, self.readable()).await.unwrap_or(Ok(())),
                    None => self.readable().await,
                }
            };
            tokio::select! {
                r = ready => r?,
                _ = stop.changed() => break,
            }
        }
        if self.idle.is_some_and(|idle| self.last_event.elapsed() >= idle) {
            return Ok(Polled::End);
        }
        Ok(Polled::Idle)
    }

    fn position(&self, batch: &[LocalEvent], _rest_empty: bool) -> Option<u64> {
        (!batch.is_empty() || self.read > self.acked).then_some(self.read)
    }

    fn counts(&self) -> ReaderCounts {
        self.counts.clone()
    }

    async fn truncate(&mut self, to: &u64) -> Result<(), IcicleError> {
        self.acked = self.acked.max(*to);
        Ok(())
    }
}
