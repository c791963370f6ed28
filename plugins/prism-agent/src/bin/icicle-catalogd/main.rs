//! `icicle-catalogd`: the node's catalog collector. Catalog agents (`libcatalog_agent.so`)
//! hand it each record as one message over a Unix socket; it appends them to one merged
//! catalog file, `CATALOG_DIR/catalog.<host>.collector.txt`, and acknowledges each once written.
//! After `--compact-idle-secs` (2) without a record, and at stop, it compacts that text into
//! `catalog.<host>.collector.icat`, which readers map in place (see `compact.rs`).
//!
//! ```text
//! icicle-catalogd start --dir CATALOG_DIR [--socket PATH]   # in the background; prints the socket
//! icicle-catalogd stop --dir CATALOG_DIR                    # SIGTERM, waits until flushed and gone
//! icicle-catalogd run --dir CATALOG_DIR [--socket PATH]     # in the foreground (Ctrl-C stops it)
//! ```
//!
//! `--dir` defaults to `$CATALOG_DIR`; the socket to `CATALOG_DIR/.collector.sock` (agents find
//! it there, or through `ICICLE_CATALOG_SOCKET`). The pid file is `CATALOG_DIR/.collector.pid`,
//! the background server's stderr `CATALOG_DIR/.collector.log` (hidden names: catalog readers
//! skip them).
//!
//! Safe in a shared, group-writable catalog directory: the socket has mode 0600 and only
//! agents of the collector's own user (or root) are served (`SO_PEERCRED`); the merged file,
//! the log and the pid file are never opened through a symbolic link or as another user's
//! file (the collector refuses to start instead).

mod compact;
mod files;
mod server;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

/// How long `stop` waits for the server to finish.
const STOP_WAIT: Duration = Duration::from_secs(60);

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "icicle-catalogd",
    version,
    about = "The node's catalog collector: catalog agents' records into one merged catalog file"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve in the background, once listening (prints the socket path).
    Start(Where),
    /// Stop the running collector (SIGTERM) and wait until it has written everything and gone.
    Stop(Where),
    /// Serve in the foreground until SIGTERM, SIGINT or SIGHUP (prints the socket path).
    Run(Where),
}

/// Where the collector works.
#[derive(clap::Args, Debug)]
struct Where {
    /// The catalog directory [default: $CATALOG_DIR].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The socket agents write to [default: CATALOG_DIR/.collector.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Compact the merged catalog into `catalog.<host>.collector.icat` after this many
    /// seconds without a record, once its text is an eighth of the compact file's size (and
    /// always at stop); 0: only at stop.
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    compact_idle_secs: f64,
}

/// A command's directory and socket, resolved.
struct Opts {
    dir: PathBuf,
    socket: PathBuf,
    compact_idle: Option<Duration>,
}

impl Where {
    fn resolve(self) -> Result<Opts, String> {
        let dir = self
            .dir
            .or_else(|| std::env::var_os("CATALOG_DIR").filter(|d| !d.is_empty()).map(PathBuf::from))
            .ok_or("no catalog directory (--dir or CATALOG_DIR)")?;
        let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let socket = match self.socket {
            Some(s) => std::path::absolute(&s).map_err(|e| format!("{}: {e}", s.display()))?,
            None => dir.join(".collector.sock"),
        };
        let compact_idle = match self.compact_idle_secs {
            s if s > 0.0 => Some(Duration::try_from_secs_f64(s).map_err(|e| format!("--compact-idle-secs {s}: {e}"))?),
            0.0 => None,
            s => return Err(format!("--compact-idle-secs {s}: want 0 or more seconds")),
        };
        Ok(Opts { dir, socket, compact_idle })
    }
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Cmd::Run(w) => w.resolve().and_then(|o| run(&o)),
        Cmd::Start(w) => w.resolve().and_then(|o| start(&o)),
        Cmd::Stop(w) => w.resolve().and_then(|o| stop(&o.dir)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("icicle-catalogd: {e}");
            ExitCode::FAILURE
        }
    }
}

fn pid_file(dir: &Path) -> PathBuf {
    dir.join(".collector.pid")
}

fn host_name() -> String {
    let mut host = [0u8; 256];
    // SAFETY: a buffer of the given length.
    if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } != 0 {
        return "localhost".into();
    }
    let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
    String::from_utf8_lossy(&host[..end]).into_owned()
}

/// The server in the foreground: listens, writes the pid file, prints the socket path (one
/// line: `start` waits for it), serves until `SIGTERM`/`SIGINT`/`SIGHUP`, then finishes and
/// removes the pid file last.
fn run(o: &Opts) -> Result<(), String> {
    std::fs::create_dir_all(&o.dir).map_err(|e| format!("{}: {e}", o.dir.display()))?;
    let out = o.dir.join(format!("catalog.{}.collector.txt", host_name()));
    let mut server = server::Server::bind(&out, &o.socket, o.compact_idle)?;
    let pid = pid_file(&o.dir);
    let tmp = o.dir.join(format!(".collector.pid.{}", std::process::id()));
    // A new file (never through a link planted at the predictable name), renamed over the pid
    // file (rename(2) replaces a link there; it does not follow it).
    files::write_new(&tmp, &format!("{}\n{}\n", std::process::id(), o.socket.display()))?;
    std::fs::rename(&tmp, &pid).map_err(|e| format!("{}: {e}", pid.display()))?;
    println!("{}", o.socket.display());
    // Under systemd (`Type=notify`; nothing without NOTIFY_SOCKET): listening, pid file written.
    let status = format!("STATUS=collecting into {}", out.display());
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Custom(&status)]);
    let served = server.serve();
    let refused = match server.refused {
        0 => String::new(),
        n => format!("; refused {n} connections from other users"),
    };
    eprintln!("icicle-catalogd: stopped after {} records into {}{refused}", server.records, out.display());
    let _ = std::fs::remove_file(&pid);
    served
}

/// `run` in the background (its own session, stdin and stdout closed, stderr to the log),
/// once it listens: prints the socket path.
fn start(o: &Opts) -> Result<(), String> {
    if let Some(pid) = running(&o.dir)? {
        return Err(format!("a collector already runs for {} (pid {pid})", o.dir.display()));
    }
    std::fs::create_dir_all(&o.dir).map_err(|e| format!("{}: {e}", o.dir.display()))?;
    let log_path = o.dir.join(".collector.log");
    let log = files::append_own(&log_path)?;
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("run").arg("--dir").arg(&o.dir).arg("--socket").arg(&o.socket);
    cmd.arg("--compact-idle-secs").arg(o.compact_idle.map_or(0.0, |d| d.as_secs_f64()).to_string());
    // The collector itself is not catalogued.
    cmd.env_remove("LD_PRELOAD").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
    // SAFETY: setsid is async-signal-safe; it detaches the server from the caller's terminal.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::setsid();
            Ok(())
        })
    };
    let mut child = cmd.spawn().map_err(|e| format!("starting the server: {e}"))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    if line.trim().is_empty() {
        let status = child.wait().map_err(|e| e.to_string())?;
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let last = log.lines().last().unwrap_or("");
        return Err(format!("the server did not start ({status}): {last}"));
    }
    print!("{line}");
    Ok(())
}

/// The pid of the collector serving `dir`, when its pid file names a live `icicle-catalogd`;
/// an error when the pid file is a link or another user's file (never trusted).
fn running(dir: &Path) -> Result<Option<i32>, String> {
    let Some(text) = files::read_own(&pid_file(dir))? else { return Ok(None) };
    let Some(pid) = text.lines().next().and_then(|l| l.trim().parse::<i32>().ok()).filter(|&p| p > 0) else {
        return Ok(None);
    };
    let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else { return Ok(None) };
    Ok((comm.trim() == "icicle-catalogd" && !zombie(pid)).then_some(pid))
}

/// Whether `pid` has exited but not been reaped (its parent, a test, has yet to wait).
fn zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    // `pid (comm) S ...`: the state follows the last `)`.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_none_or(|s| s == "Z" || s == "X")
}

/// Stop the collector of `dir`: `SIGTERM`, then wait until it has removed its pid file (after
/// its last sync) and exited.
fn stop(dir: &Path) -> Result<(), String> {
    let Some(pid) = running(dir)? else {
        let stale = pid_file(dir);
        if stale.exists() {
            let _ = std::fs::remove_file(&stale);
            println!("no collector was running for {} (stale pid file removed)", dir.display());
        } else {
            println!("no collector running for {}", dir.display());
        }
        return Ok(());
    };
    // SAFETY: a signal to the process the pid file names, checked to be icicle-catalogd.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(format!("kill {pid}: {}", std::io::Error::last_os_error()));
    }
    let t0 = Instant::now();
    while pid_file(dir).exists() || !zombie(pid) {
        if t0.elapsed() > STOP_WAIT {
            return Err(format!("the collector (pid {pid}) did not stop within {} s", STOP_WAIT.as_secs()));
        }
        if !Path::new(&format!("/proc/{pid}")).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("stopped the collector (pid {pid})");
    Ok(())
}
