//! `icicle`: the command-line edge. Builds pipelines from layered configuration and runs them.

#[cfg(all(feature = "index", feature = "prism"))]
mod catalog;
#[cfg(feature = "charts")]
mod chart;
#[cfg(feature = "sketches")]
mod compare;
mod counts;
#[cfg(feature = "index")]
mod find;
mod manual;
#[cfg(feature = "snapshot")]
mod preprocess;
#[cfg(feature = "index")]
mod serve;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use icicle_core::registry;

// Link the plugin crates so their `inventory` registrations are present: each family is a
// Cargo feature (all on by default; see FEATURES). The sinks (file, stdout, blackhole) need
// nothing beyond the core and are always there.
#[cfg(feature = "globus")]
use icicle_plugins_globus as _;
#[cfg(feature = "gpfs")]
use icicle_plugins_gpfs as _;
#[cfg(feature = "index")]
use icicle_plugins_index as _;
#[cfg(feature = "kafka")]
use icicle_plugins_kafka as _;
#[cfg(feature = "local")]
use icicle_plugins_local as _;
#[cfg(feature = "lustre")]
use icicle_plugins_lustre as _;
#[cfg(feature = "prism")]
use icicle_plugins_prism as _;
#[cfg(feature = "s3")]
use icicle_plugins_s3 as _;
use icicle_plugins_sinks as _;
#[cfg(feature = "sketches")]
use icicle_plugins_sketches as _;
#[cfg(feature = "snapshot")]
use icicle_plugins_snapshot as _;

/// The Cargo features (plugin families and front ends) and whether this build has them.
const FEATURES: [(&str, bool); 12] = [
    ("snapshot", cfg!(feature = "snapshot")),
    ("lustre", cfg!(feature = "lustre")),
    ("gpfs", cfg!(feature = "gpfs")),
    ("local", cfg!(feature = "local")),
    ("kafka", cfg!(feature = "kafka")),
    ("globus", cfg!(feature = "globus")),
    ("index", cfg!(feature = "index")),
    ("s3", cfg!(feature = "s3")),
    ("prism", cfg!(feature = "prism")),
    ("sketches", cfg!(feature = "sketches")),
    ("tui", cfg!(feature = "tui")),
    ("charts", cfg!(feature = "charts")),
];

/// The feature each plugin (kind, type) comes with, for the hint when a configuration names
/// one this build left out.
const PLUGIN_FEATURES: [(&str, &str, &str); 20] = [
    ("source", "gufi", "snapshot"),
    ("source", "mmapplypolicy", "snapshot"),
    ("source", "tsv", "snapshot"),
    ("source", "walk", "snapshot"),
    ("source", "lustre", "lustre"),
    ("source", "gpfs", "gpfs"),
    ("source", "fanotify", "local"),
    ("source", "inotify", "local"),
    ("source", "s3", "s3"),
    ("sink", "kafka", "kafka"),
    ("sink", "globus", "globus"),
    ("sink", "index", "index"),
    ("sketch", "ddsketch", "sketches"),
    ("sketch", "exact", "sketches"),
    ("sketch", "hybrid", "sketches"),
    ("sketch", "kll", "sketches"),
    ("sketch", "req", "sketches"),
    ("sketch", "tdigest", "sketches"),
    ("placement", "file", "prism"),
    ("placement", "object", "prism"),
];

/// The error for a part of icicle this build left out, naming the feature to build with.
fn not_built(what: &str, feature: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} needs the `{feature}` feature, and this icicle was built without it: rebuild with `--features {feature}` (or with the default features)"
    )
}

/// For an error naming an unknown plugin type ("unknown sink type `kafka`") whose family this
/// build left out: which feature brings it.
fn feature_hint(message: &str) -> Option<String> {
    let mut rest = message;
    while let Some(at) = rest.find("unknown ") {
        rest = &rest[at + "unknown ".len()..];
        let Some((kind, after)) = rest.split_once(" type `") else { continue };
        let Some((name, _)) = after.split_once('`') else { continue };
        let feature = PLUGIN_FEATURES.iter().find(|(k, n, _)| *k == kind && *n == name).map(|(_, _, f)| *f);
        if let Some(f) = feature.filter(|f| FEATURES.iter().any(|(g, on)| g == f && !on)) {
            return Some(format!("the {kind} `{name}` comes with the `{f}` feature, and this icicle was built without it: rebuild with `--features {f}`"));
        }
    }
    None
}

/// `--tui` is refused before anything runs when the dashboard is not built in.
fn dashboard_built(tui: bool) -> anyhow::Result<()> {
    if tui && !cfg!(feature = "tui") {
        return Err(not_built("--tui", "tui"));
    }
    Ok(())
}

/// The arguments of a command this build left out: taken as they come, so that the command
/// says which feature it needs rather than failing on its arguments.
#[derive(clap::Args, Debug)]
#[allow(dead_code)]
struct NotBuilt {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<std::ffi::OsString>,
}

/// mimalloc: its thread-local free lists make the monitors' many short-lived paths and
/// records a few instructions each (glibc's malloc and free were a tenth of a monitor's
/// instructions), as Vector and Quickwit also replace the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `icicle --version`: the release and the commit it was built from (see build.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("ICICLE_COMMIT"), ")");

/// Searchable, fresh HPC file-system metadata.
#[derive(Parser, Debug)]
#[command(name = "icicle", version = VERSION, about)]
struct Cli {
    /// Configuration file (TOML); repeat to layer several, later ones win.
    #[arg(short, long = "config", global = true)]
    config: Vec<PathBuf>,
    /// Override one key, e.g. `--set snapshot.workers=4` (wins over files and environment).
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    set: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the configured snapshot pipeline (sources → primary records → sinks).
    Snapshot {
        /// Print the summary as JSON on stdout instead of a table on stderr.
        #[arg(long)]
        json: bool,
        /// Never draw a progress bar.
        #[arg(long)]
        no_progress: bool,
        /// Show the live dashboard while the run goes on (log lines without a terminal).
        #[arg(long)]
        tui: bool,
        /// Serve Prometheus `/metrics` and a JSON `/status` on this address (e.g. 127.0.0.1:9898);
        /// overrides `[metrics] addr`.
        #[arg(long)]
        metrics_addr: Option<String>,
        /// Lift the deletion guard for this run (snapshot.max_delete_ratio, max_delete).
        #[arg(long)]
        allow_mass_delete: bool,
    },
    /// Run the configured streaming sources (Lustre changelogs) until stopped.
    Monitor {
        /// Stop once every stream is exhausted and acknowledged (tests, catch-up runs).
        #[arg(long)]
        drain: bool,
        /// Like `--drain`, for live file systems (fanotify, inotify): stop once SECS passed
        /// without a new event and everything read is delivered.
        #[arg(long, value_name = "SECS")]
        until_idle: Option<f64>,
        /// Print the final report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Show the live dashboard (log lines without a terminal).
        #[arg(long)]
        tui: bool,
        /// Serve Prometheus `/metrics` and a JSON `/status` on this address (e.g. 127.0.0.1:9898);
        /// overrides `[metrics] addr`.
        #[arg(long)]
        metrics_addr: Option<String>,
    },
    /// The live dashboard of a running icicle (started with `--metrics-addr`).
    Top {
        /// Its metrics address.
        #[arg(long)]
        connect: String,
        /// Seconds between updates.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// A `sketch-compare` output directory for the sketch view.
        #[arg(long, default_value = "sketch-compare")]
        sketches: PathBuf,
        /// Fetch the status once, print it and exit (exit 1 when it cannot be read).
        #[arg(long)]
        once: bool,
        /// With --once: the status document as JSON on stdout, for scripts.
        #[arg(long, requires = "once")]
        json: bool,
    },
    /// Run every sketch over the configured snapshot and measure value and rank error
    /// against exact quantiles for every user and group (CSV, summary table, PNG chart).
    SketchCompare {
        /// Output directory.
        #[arg(long, default_value = "sketch-compare")]
        out: PathBuf,
        /// Comma-separated sketch types.
        #[arg(long, default_value = "ddsketch,kll,req,tdigest")]
        sketches: String,
        /// Seed the randomized sketches (kll, req): the same seed gives the same
        /// measurements.csv and summary.csv. Without it every run draws new seeds.
        #[arg(long, value_name = "N")]
        seed: Option<u64>,
    },
    /// Read every configured snapshot source into Icicle's 9-column CSV (`icicle9`), in parts
    /// of at most --rows-per-file rows, in a directory or under an S3 prefix.
    Preprocess(#[cfg(feature = "snapshot")] preprocess::Args, #[cfg(not(feature = "snapshot"))] NotBuilt),
    /// The counting pipeline's hand-off: `rebuild` the counts CSV from what `[counting] sinks`
    /// received (a Kafka topic, a file sink's directory).
    Counts(counts::Args),
    /// Find records in an embedded index (`find`-style predicates), as the caller may see them.
    Find(#[cfg(feature = "index")] find::FindArgs, #[cfg(not(feature = "index"))] NotBuilt),
    /// Files, bytes and quantiles per directory, user or group, from the aggregate records
    /// of an embedded index.
    Du(#[cfg(feature = "index")] find::DuArgs, #[cfg(not(feature = "index"))] NotBuilt),
    /// A SwiftLoad catalog from an embedded index (files with their Lustre layouts), for
    /// `swiftload --catalog DIR` without an LD_PRELOAD run.
    Catalog(
        #[cfg(all(feature = "index", feature = "prism"))] catalog::CatalogArgs,
        #[cfg(not(all(feature = "index", feature = "prism")))] NotBuilt,
    ),
    /// Serve the Globus Search API over an embedded index (HTTP on 127.0.0.1, a Unix socket),
    /// answering each caller with the records it may see; holds the index's writer.
    Serve(#[cfg(feature = "index")] serve::ServeArgs, #[cfg(not(feature = "index"))] NotBuilt),
    /// List the registered plugins by kind.
    Plugins {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Inspect the configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print the shell completion script, e.g. `icicle completions bash >
    /// /etc/bash_completion.d/icicle`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one page per command into a directory, e.g.
    /// `icicle man --dir /usr/local/share/man/man1`.
    Man {
        /// Write `icicle.1` and a page per subcommand here instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the merged configuration (defaults < files < environment < --set).
    Show,
    /// Check the configuration without running anything: every key known (the nearest
    /// suggested when not), every `type` a registered plugin, every component's settings
    /// readable. Exits 1 naming each problem, its key and file.
    Check {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Also reach what each component talks to, changing nothing there: Kafka brokers and
        /// the topic, S3 buckets, Globus Search indexes.
        #[arg(long)]
        connect: bool,
    },
}

fn init_logging(level: &str, format: icicle_core::config::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false);
    let _ = match format {
        icicle_core::config::LogFormat::Json => builder.json().with_current_span(false).try_init(),
        // Colours only on a terminal: logs captured by files, pipes and tests stay plain text.
        icicle_core::config::LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
    };
}

/// Serve `/metrics` and `/status` when asked to.
/// Serve the metrics endpoint on `--metrics-addr`, else `[metrics] addr`, if either is set.
fn serve_metrics(
    rt: &tokio::runtime::Runtime,
    flag: Option<&str>,
    cfg: &icicle_core::config::LoadedConfig,
) -> anyhow::Result<()> {
    let (addr, what) = match flag {
        Some(a) => (Some(a), "--metrics-addr".to_string()),
        None => (
            cfg.app.metrics.addr.as_deref(),
            format!("metrics.addr in {}", icicle_core::config::origin_of(&cfg.figment, "metrics.addr")),
        ),
    };
    if let Some(a) = addr {
        let bound = rt.block_on(icicle_core::metrics::serve(a)).with_context(|| format!("{what} = {a}"))?;
        eprintln!("metrics on http://{bound}/metrics and http://{bound}/status");
    }
    Ok(())
}

/// Run `work` with the live dashboard beside it (on a terminal; log lines otherwise). The
/// dashboard only reads the metrics registry, so it never slows the pipeline down. When the
/// dashboard ends before the work (the operator quit, a signal, the terminal went away),
/// `stop` is called and the work is still waited for: a monitor delivers, checkpoints and
/// acknowledges what it read before the process exits.
#[cfg(feature = "tui")]
fn with_dashboard<T: Send>(
    tui: bool,
    what: &str,
    stop: impl FnOnce(),
    work: impl FnOnce() -> T + Send,
) -> anyhow::Result<T> {
    use icicle_tui::session;
    if !tui {
        return Ok(work());
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let h = scope.spawn(|| {
            let r = work();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        });
        let next = || Ok(icicle_core::metrics::Metrics::global().snapshot());
        let finished = || done.load(std::sync::atomic::Ordering::SeqCst);
        let ended = if std::io::stdout().is_terminal() {
            let app = icicle_tui::dashboard::App::new(&format!("this {what}"));
            session::run(app, next, finished, std::time::Duration::from_secs(1))
        } else {
            session::log_lines(next, finished, std::time::Duration::from_secs(10))
        };
        // Whatever ended the dashboard (a failure of its own included), the run is stopped
        // cleanly and waited for: nothing is left running without a way to stop it.
        match &ended {
            Ok(session::Ended::Done) => {}
            Ok(how) => {
                tracing::info!(message = "the dashboard ended before the run; stopping it", how = ?how);
                stop();
            }
            Err(e) => {
                tracing::error!(message = "the dashboard failed; stopping the run", error = %e);
                stop();
            }
        }
        let r = h.join().map_err(|_| anyhow::anyhow!("the {what} panicked"))?;
        ended?;
        Ok(r)
    })
}

/// Without the `tui` feature there is no dashboard: `--tui` was refused by [`dashboard_built`].
#[cfg(not(feature = "tui"))]
fn with_dashboard<T: Send>(
    tui: bool,
    _what: &str,
    _stop: impl FnOnce(),
    work: impl FnOnce() -> T + Send,
) -> anyhow::Result<T> {
    dashboard_built(tui)?;
    Ok(work())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    icicle_core::metrics::Metrics::global().set_build_info(env!("CARGO_PKG_VERSION"), env!("ICICLE_COMMIT"));
    let json = match &cli.command {
        Command::Snapshot { json, .. } | Command::Plugins { json } => *json,
        #[cfg(feature = "snapshot")]
        Command::Preprocess(preprocess::Args { json, .. }) => *json,
        _ => false,
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let mut message = format!("{e:#}");
            if let Some(hint) = feature_hint(&message) {
                message = format!("{message}; {hint}");
            }
            eprintln!("error: {message}");
            if json {
                // Scripts reading stdout get the failure too, not an empty document.
                let _ = print_stdout(&format!("{}\n", serde_json::json!({ "ok": false, "error": message })));
            }
            ExitCode::from(1)
        }
    }
}

/// `icicle config check`: every problem of the configuration, or what was checked.
fn config_check(cli: &Cli, json: bool, connect: bool) -> anyhow::Result<ExitCode> {
    let (checked, problems) = match icicle_core::config::load(&cli.config, &cli.set) {
        Ok(cfg) => icicle_runtime::compose::check_all(&cfg, connect),
        Err(e) => (Vec::new(), vec![e]),
    };
    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    if json {
        print_stdout(&format!(
            "{}\n",
            serde_json::json!({ "ok": problems.is_empty(), "checked": checked, "problems": problems })
        ))?;
    } else if problems.is_empty() {
        let text = if checked.is_empty() {
            "no components".to_string()
        } else if connect {
            format!("\n  {}", checked.join("\n  "))
        } else {
            checked.join(", ")
        };
        print_stdout(&format!("ok: {text}\n"))?;
    } else {
        for p in &problems {
            eprintln!("error: {p}");
        }
    }
    Ok(if problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Write `text` to stdout; a closed pipe (`| head`) is the reader's choice, not a failure.
fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Plugins { json } => plugins(*json),
        Command::Completions { shell } => manual::completions(*shell).map(|()| ExitCode::SUCCESS),
        Command::Man { dir } => manual::man(dir.as_deref()).map(|()| ExitCode::SUCCESS),
        Command::Config { command: ConfigCommand::Show } => {
            let cfg = icicle_core::config::load(&cli.config, &cli.set)?;
            print_stdout(&cfg.to_toml()?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config { command: ConfigCommand::Check { json, connect } } => config_check(&cli, *json, *connect),
        Command::Counts(args) => {
            let cfg = icicle_core::config::load(&cli.config, &cli.set)?;
            init_logging("warn", cfg.app.log.format);
            counts::main(&cfg, args)
        }
        Command::Snapshot { json, no_progress, tui, metrics_addr, allow_mass_delete } => {
            snapshot(&cli, *json, *no_progress, *tui, metrics_addr.clone(), *allow_mass_delete)
        }
        #[cfg(feature = "snapshot")]
        Command::Preprocess(args) => preprocess::main(&cli.config, &cli.set, args),
        #[cfg(not(feature = "snapshot"))]
        Command::Preprocess(_) => Err(not_built("`icicle preprocess`", "snapshot")),
        #[cfg(feature = "index")]
        Command::Find(args) => {
            let cfg = icicle_core::config::load(&cli.config, &cli.set)?;
            init_logging("warn", cfg.app.log.format);
            find::find(&cfg, args)
        }
        #[cfg(feature = "index")]
        Command::Du(args) => {
            let cfg = icicle_core::config::load(&cli.config, &cli.set)?;
            init_logging("warn", cfg.app.log.format);
            find::du(&cfg, args)
        }
        #[cfg(all(feature = "index", feature = "prism"))]
        Command::Catalog(args) => {
            let cfg = icicle_core::config::load(&cli.config, &cli.set)?;
            init_logging("warn", cfg.app.log.format);
            catalog::main(&cfg, args)
        }
        #[cfg(not(all(feature = "index", feature = "prism")))]
        Command::Catalog(_) => Err(not_built("`icicle catalog`", "index,prism")),
        #[cfg(feature = "index")]
        Command::Serve(args) => {
            let cfg = icicle_core::config::load(&cli.config, &cli.set)?;
            init_logging(&cfg.app.log.level, cfg.app.log.format);
            serve::serve(&cfg, args)
        }
        #[cfg(not(feature = "index"))]
        Command::Find(_) | Command::Du(_) | Command::Serve(_) => {
            let name = match &cli.command {
                Command::Find(_) => "find",
                Command::Du(_) => "du",
                _ => "serve",
            };
            Err(not_built(&format!("`icicle {name}`"), "index"))
        }
        #[cfg(feature = "tui")]
        Command::Top { connect, interval, sketches, once, json } => top(connect, *interval, sketches, *once, *json),
        #[cfg(not(feature = "tui"))]
        Command::Top { .. } => Err(not_built("`icicle top`", "tui")),
        Command::Monitor { drain, until_idle, json, tui, metrics_addr } => {
            monitor(&cli, *drain, *until_idle, *json, *tui, metrics_addr.clone())
        }
        #[cfg(feature = "sketches")]
        Command::SketchCompare { out, sketches, seed } => {
            let cfg = icicle_core::config::load(&cli.config, &cli.set)?;
            init_logging(&cfg.app.log.level, cfg.app.log.format);
            let names: Vec<String> =
                sketches.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
            let table = compare::run(&cfg, out, &names, *seed)?;
            print_stdout(&format!("{table}\n"))?;
            let charts = if cfg!(feature = "charts") {
                " and value-vs-rank-error.png and error-distributions.png"
            } else {
                " (no charts: this icicle was built without the `charts` feature)"
            };
            eprintln!("wrote {}/measurements.csv, summary.csv, summary.md, costs.csv{charts}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(not(feature = "sketches"))]
        Command::SketchCompare { .. } => Err(not_built("`icicle sketch-compare`", "sketches")),
    }
}

/// `icicle top`: the dashboard of a running icicle (log lines without a terminal), or its
/// status once.
#[cfg(feature = "tui")]
fn top(connect: &str, interval: f64, sketches: &std::path::Path, once: bool, json: bool) -> anyhow::Result<ExitCode> {
    use icicle_tui::dashboard::{fetch_status, status_line, App};
    use icicle_tui::session;
    let fetch = || fetch_status(connect).map_err(|e| format!("{connect}: {e}"));
    if once {
        let s = fetch().map_err(anyhow::Error::msg)?;
        if json {
            print_stdout(&format!("{}\n", serde_json::to_string_pretty(&s)?))?;
        } else {
            let mut app = App::new(connect);
            app.push(s);
            print_stdout(&format!("{}\n", status_line(&app)))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut app = App::new(connect);
    app.sketches = std::fs::read_to_string(sketches.join("summary.csv")).ok();
    let interval = icicle_core::time::secs(interval.max(0.1));
    let ended = if std::io::stdout().is_terminal() {
        session::run(app, fetch, || false, interval)?
    } else {
        session::log_lines(fetch, || false, interval)?
    };
    tracing::debug!(message = "dashboard ended", how = ?ended);
    Ok(ExitCode::SUCCESS)
}

/// `icicle plugins`: every registered plugin, by kind.
fn plugins(json: bool) -> anyhow::Result<ExitCode> {
    let plugins = registry::plugins();
    let mut text = String::new();
    if json {
        let v: Vec<_> =
            plugins.iter().map(|p| serde_json::json!({"kind": p.kind.as_str(), "type": p.name, "description": p.description, "example": p.example})).collect();
        text = serde_json::to_string_pretty(&v)? + "\n";
    } else {
        let mut last = None;
        for p in plugins {
            if last != Some(p.kind) {
                text.push_str(&format!("{}:\n", p.kind.as_str()));
                last = Some(p.kind);
            }
            text.push_str(&format!("  {:<15} {}\n", p.name, p.description));
        }
        let missing: Vec<&str> = FEATURES.iter().filter(|(_, on)| !on).map(|(f, _)| *f).collect();
        if !missing.is_empty() {
            text.push_str(&format!("built without the features: {}\n", missing.join(", ")));
        }
    }
    print_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `icicle snapshot`: one run of the configured snapshot pipeline.
fn snapshot(
    cli: &Cli,
    json: bool,
    no_progress: bool,
    tui: bool,
    metrics_addr: Option<String>,
    allow_mass_delete: bool,
) -> anyhow::Result<ExitCode> {
    let mut set = cli.set.clone();
    if allow_mass_delete {
        set.push("snapshot.allow_mass_delete=true".into());
    }
    dashboard_built(tui)?;
    let cfg = icicle_core::config::load(&cli.config, &set)?;
    init_logging(&cfg.app.log.level, cfg.app.log.format);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    serve_metrics(&rt, metrics_addr.as_deref(), &cfg)?;
    let progress = std::sync::Arc::new(icicle_tui::TerminalProgress::new(!no_progress && !json && !tui));
    let job = icicle_runtime::compose::snapshot_job(&cfg, progress)?;
    // A snapshot stopped midway commits nothing: the previous manifest stays in force.
    let stop = || std::process::exit(130);
    let summary = with_dashboard(tui, "snapshot", stop, || rt.block_on(icicle_runtime::snapshot::run(job)))?
        .context("snapshot run failed")?;
    if json {
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&summary)?))?;
    } else {
        eprint!("{}", icicle_tui::summary_table(&summary));
    }
    Ok(if summary.reject_threshold_exceeded {
        ExitCode::from(3)
    } else if summary.delete_guard.is_some() {
        ExitCode::from(4)
    } else if summary.withheld_too_long.is_some() {
        ExitCode::from(5)
    } else {
        ExitCode::SUCCESS
    })
}

/// `icicle monitor`: every configured change source until drained or stopped.
fn monitor(
    cli: &Cli,
    drain: bool,
    until_idle: Option<f64>,
    json: bool,
    tui: bool,
    metrics_addr: Option<String>,
) -> anyhow::Result<ExitCode> {
    dashboard_built(tui)?;
    let cfg = icicle_core::config::load(&cli.config, &cli.set)?;
    init_logging(&cfg.app.log.level, cfg.app.log.format);
    let job = icicle_runtime::monitor::supervise::monitor_job(&cfg, drain, until_idle.map(icicle_core::time::secs))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    serve_metrics(&rt, metrics_addr.as_deref(), &cfg)?;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let stop_tx = std::sync::Arc::new(stop_tx);
    let stop_all = {
        let tx = stop_tx.clone();
        move || {
            let _ = tx.send(true);
        }
    };
    if let Some(interval) = icicle_core::service::watchdog_interval() {
        rt.spawn(icicle_core::service::watchdog(interval));
    }
    let reports = with_dashboard(tui, "monitor", stop_all, || {
        rt.block_on(async {
            let signals = icicle_runtime::monitor::supervise::stop_on_signals(stop_tx)
                .context("installing the signal handlers")?;
            icicle_core::service::ready(&format!("monitoring {} source(s)", cfg.app.sources.len()));
            let reports = icicle_runtime::monitor::supervise::run(job, stop).await;
            signals.abort();
            anyhow::Ok(reports?)
        })
    })??;
    let text = serde_json::to_string_pretty(&reports)?;
    if json {
        let _ = writeln!(std::io::stdout(), "{text}");
    } else {
        let _ = writeln!(std::io::stderr(), "{text}");
    }
    Ok(ExitCode::SUCCESS)
}
