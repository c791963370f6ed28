//! Life under a service manager (systemd `Type=notify`, through the `sd-notify` crate):
//! `READY=1` once a run is set up, `STOPPING=1` when it is told to stop, `STATUS=` lines, and
//! `WATCHDOG=1` while no batch has been in hand longer than the watchdog interval. Each is a
//! no-op without `NOTIFY_SOCKET` (not started by systemd).
//!
//! The watchdog judges batches, not polls: a monitor waiting for events (an idle fileset, a
//! quiet topic) is healthy however long it waits, while a batch that neither delivers nor
//! fails (a hung sink call, a file system that stopped answering) stops the pings, and
//! systemd restarts the service after `WatchdogSec`; what was not acknowledged is read again.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sd_notify::NotifyState;

/// Batches in hand, by component, since when.
fn busy_map() -> &'static Mutex<HashMap<String, Instant>> {
    static BUSY: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    BUSY.get_or_init(Default::default)
}

/// Tell the service manager the run is set up (sources open, metrics served).
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Tell the service manager the run is stopping (finishing the batch in hand).
pub fn stopping(status: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status)]);
}

/// A free-form status line (`systemctl status` shows it).
pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(message = "could not notify the service manager", error = %e);
    }
}

/// A batch of `component` is in hand until the guard is dropped.
pub fn busy(component: &str) -> Busy {
    if let Ok(mut m) = busy_map().lock() {
        m.insert(component.to_string(), Instant::now());
    }
    Busy { component: component.to_string() }
}

/// See [`busy`].
pub struct Busy {
    component: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut m) = busy_map().lock() {
            m.remove(&self.component);
        }
    }
}

/// The component whose batch has been in hand longest, if longer than `limit`.
pub fn stuck(limit: Duration) -> Option<(String, Duration)> {
    let m = busy_map().lock().ok()?;
    m.iter().map(|(c, t)| (c.clone(), t.elapsed())).filter(|(_, d)| *d > limit).max_by_key(|(_, d)| *d)
}

/// The watchdog interval systemd asked for (`WatchdogSec=`), if any.
pub fn watchdog_interval() -> Option<Duration> {
    // `WATCHDOG_USEC=0` (set by hand; systemd never does) would ping without pause.
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}

/// Ping the watchdog every half `interval` while no batch is stuck longer than `interval`
/// (run as a task for as long as the run lives).
pub async fn watchdog(interval: Duration) {
    let mut warned = false;
    loop {
        match stuck(interval) {
            None => {
                send(&[NotifyState::Watchdog]);
                warned = false;
            }
            Some((component, for_)) if !warned => {
                tracing::warn!(message = "a batch has been in hand longer than the watchdog interval: no more pings, the service manager will restart the run", component = %component, seconds = for_.as_secs_f64());
                warned = true;
            }
            Some(_) => {}
        }
        tokio::time::sleep(interval / 2).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_in_hand_is_stuck_only_past_the_limit_and_until_done() {
        let guard = busy("test-component");
        assert_eq!(stuck(Duration::from_secs(3600)), None);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(stuck(Duration::from_millis(5)).map(|(c, _)| c), Some("test-component".to_string()));
        drop(guard);
        assert_eq!(stuck(Duration::from_millis(5)).filter(|(c, _)| c == "test-component"), None);
    }
}
