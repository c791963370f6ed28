//! A dashboard session: the draw loop on a terminal, log lines without one, and how either
//! ends. The operator quits, the watched run finishes, a termination signal comes (SIGTERM,
//! SIGINT), or the terminal goes away (a killed tmux, a dropped SSH session: SIGHUP, a write
//! or read that fails, stdout no longer a terminal). A lost terminal ends the session at once
//! instead of spinning on a dead descriptor.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event};
use icicle_core::metrics::MetricsSnapshot;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::SigId;

use crate::dashboard::{action_for, render, App};

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The operator quit (`q`).
    Quit,
    /// What it watched finished.
    Done,
    /// SIGTERM or SIGINT.
    Signal,
    /// The terminal went away (SIGHUP, EIO, end of input).
    TerminalLost,
}

/// Termination signals noted as flags while a session runs. Other handlers of the same
/// signals (the monitor's graceful stop) still run: the registrations chain.
struct Signals {
    stop: Arc<AtomicBool>,
    hangup: Arc<AtomicBool>,
    ids: Vec<SigId>,
}

impl Signals {
    fn register() -> std::io::Result<Signals> {
        let (stop, hangup) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let ids = vec![
            signal_hook::flag::register(SIGTERM, stop.clone())?,
            signal_hook::flag::register(SIGINT, stop.clone())?,
            signal_hook::flag::register(SIGHUP, hangup.clone())?,
        ];
        Ok(Signals { stop, hangup, ids })
    }

    /// How the session ends, if a signal says so.
    fn ended(&self) -> Option<Ended> {
        if self.hangup.load(Ordering::SeqCst) {
            Some(Ended::TerminalLost)
        } else if self.stop.load(Ordering::SeqCst) {
            Some(Ended::Signal)
        } else {
            None
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// What the terminal's input says.
enum Input {
    /// Bytes are waiting.
    Ready,
    /// Nothing came in the time given.
    Idle,
    /// The terminal hung up (or failed): nothing will come again.
    HungUp,
}

/// The descriptor crossterm reads keys from: stdin when it is a terminal, else `/dev/tty`.
struct TerminalInput {
    tty: Option<std::fs::File>,
}

impl TerminalInput {
    fn open() -> std::io::Result<TerminalInput> {
        let tty = if std::io::stdin().is_terminal() { None } else { Some(std::fs::File::open("/dev/tty")?) };
        Ok(TerminalInput { tty })
    }

    /// Wait up to `wait` for input.
    fn wait(&self, wait: Duration) -> Input {
        use std::os::fd::AsRawFd;
        let fd = self.tty.as_ref().map_or(libc::STDIN_FILENO, |f| f.as_raw_fd());
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, borrowed for the call only.
        let n = unsafe { libc::poll(&mut p, 1, wait.as_millis().min(i32::MAX as u128) as i32) };
        if n < 0 {
            return if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                Input::Idle
            } else {
                Input::HungUp
            };
        }
        if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            Input::HungUp
        } else if p.revents & libc::POLLIN != 0 {
            Input::Ready
        } else {
            Input::Idle
        }
    }
}

/// Run the dashboard on this terminal until it ends; `next` is polled every `interval`
/// (an `Err` marks the source disconnected, with its reason, until data comes again).
pub fn run(
    mut app: App,
    mut next: impl FnMut() -> Result<MetricsSnapshot, String>,
    mut done: impl FnMut() -> bool,
    interval: Duration,
) -> std::io::Result<Ended> {
    let signals = Signals::register()?;
    let input = TerminalInput::open()?;
    let mut terminal = ratatui::try_init()?;
    let mut last = Instant::now() - interval;
    let ended = loop {
        if let Some(e) = signals.ended() {
            break e;
        }
        if last.elapsed() >= interval {
            last = Instant::now();
            match next() {
                Ok(s) => app.push(s),
                Err(reason) => app.disconnected(reason),
            }
        }
        // After a hangup the descriptor fails every terminal request: stdout stops being one.
        if !std::io::stdout().is_terminal() || terminal.draw(|f| render(f, &app)).is_err() {
            break Ended::TerminalLost;
        }
        // crossterm's reader spins on a hung-up terminal (every read returns 0 bytes): it is
        // asked only when the terminal itself says it has not hung up. It is asked when idle
        // too: a resize (SIGWINCH) waits in its queue, and read together with the next key it
        // would take that key's wake-up (its reader is edge-triggered), leaving the key unread
        // until another one comes.
        match input.wait(Duration::from_millis(100)) {
            Input::HungUp => break Ended::TerminalLost,
            Input::Idle | Input::Ready => loop {
                match event::poll(Duration::ZERO) {
                    Ok(false) => break,
                    Ok(true) => match event::read() {
                        Ok(Event::Key(k)) => {
                            if let Some(a) = action_for(&k) {
                                app.apply(a);
                            }
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    },
                    Err(_) => break,
                }
            },
        }
        if app.quit {
            break Ended::Quit;
        }
        if done() {
            break Ended::Done;
        }
    };
    // A SIGHUP sent by hand leaves the terminal working: it is restored like any other end.
    if ended == Ended::TerminalLost && !std::io::stdout().is_terminal() {
        // Writes to a hung-up terminal fail (and `eprintln!` panics on that): the rest of the
        // run (a monitor's final checkpoint, its report, the logs) writes to /dev/null instead.
        detach_lost_terminal();
        drop(terminal);
    } else {
        drop(terminal);
        ratatui::try_restore()?;
    }
    Ok(ended)
}

/// Point stdin, stdout and stderr at /dev/null where they are a terminal that hung up (a
/// terminal request on it fails with EIO); files and pipes are left alone.
pub fn detach_lost_terminal() {
    use std::os::fd::AsRawFd;
    let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else { return };
    for fd in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: termios is plain data filled by the call; fd and null are open descriptors.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut t) != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EIO) {
                libc::dup2(null.as_raw_fd(), fd);
            }
        }
    }
}

/// Without a terminal: the same facts as log lines on stderr (every `interval`) until `done`
/// or a termination signal; a source that cannot be read is reported, not skipped.
pub fn log_lines(
    mut next: impl FnMut() -> Result<MetricsSnapshot, String>,
    mut done: impl FnMut() -> bool,
    interval: Duration,
) -> std::io::Result<Ended> {
    let signals = Signals::register()?;
    let mut app = App::new("log");
    app.keep = 2;
    let mut last: Option<Instant> = None;
    loop {
        if let Some(e) = signals.ended() {
            return Ok(e);
        }
        if done() {
            return Ok(Ended::Done);
        }
        if last.is_none_or(|t| t.elapsed() >= interval) {
            last = Some(Instant::now());
            match next() {
                // A log line that cannot be written (a closed pipe) is dropped, not fatal.
                Ok(s) => {
                    app.push(s);
                    let _ = writeln!(std::io::stderr(), "{}", crate::dashboard::status_line(&app));
                }
                Err(reason) => {
                    let _ = writeln!(std::io::stderr(), "status: disconnected: {reason}");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
