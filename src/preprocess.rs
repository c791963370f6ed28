//! `icicle preprocess`: every configured snapshot source read into Icicle's 9-column CSV
//! (`icicle9`, the seed's preprocessed format), in parts of at most `--rows-per-file` rows
//! named `part-00000.csv`, `part-00001.csv`, ... in a local directory or under an S3 prefix.
//!
//! Worker threads read splits as the snapshot runtime's do (a walk's subdirectories are
//! queued as they are found); each writes its own parts, numbered from one shared counter
//! when their first row arrives. A local part is written to a hidden temporary beside it,
//! fsynced and renamed; an S3 part is one PutObject or a completed multipart upload: a part
//! is there whole under its name or not at all. Rows are checked as a snapshot checks them
//! (a row a snapshot would reject is rejected here, with the same reason), so a snapshot of
//! the parts gives the records a snapshot of the sources gives, less what icicle9 cannot
//! carry (inode numbers, ACLs).

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use anyhow::Context;
use icicle_core::config::LoadedConfig;
use icicle_core::durable::{self, Staging};
use icicle_core::record::{FileRecord, Reject};
use icicle_core::scope::Scope;
use icicle_core::traits::{RowSink, Source, Split};
#[cfg(feature = "s3")]
use icicle_plugins_s3::{ObjectUpload, UploadConfig, Uploader};
use icicle_plugins_snapshot::icicle9;
use icicle_runtime::snapshot::rejects::RejectLog;
use icicle_runtime::snapshot::Progress;
#[cfg(not(feature = "s3"))]
use no_s3::{ObjectUpload, Uploader};

/// `icicle preprocess` options.
#[derive(clap::Args, Debug)]
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub struct Args {
    /// Where the parts go: a local directory, or `s3://bucket/prefix`.
    #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
    pub out: String,
    /// Rows in one part at most.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows_per_file: u64,
    /// Print the summary as JSON on stdout instead of lines on stderr.
    #[arg(long)]
    pub json: bool,
    /// Never draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// S3 output: a non-AWS endpoint, `http(s)://host:port` (as the s3 source's `endpoint_url`).
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// S3 output: the region requests are signed for.
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// S3 output: `endpoint/bucket/key` URLs (MinIO, moto).
    #[arg(long)]
    pub force_path_style: bool,
    /// S3 output: an access key id (else the AWS default chain: the environment, `~/.aws`
    /// profiles, web identity, ECS and instance roles).
    #[arg(long)]
    pub access_key_id: Option<String>,
    /// S3 output: the `~/.aws` profile the default chain reads (else `AWS_PROFILE`, `default`).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// S3 output: the environment variable holding the secret access key.
    #[arg(long, value_name = "VAR")]
    pub secret_access_key_env: Option<String>,
    /// S3 output: the file holding the secret access key (first line).
    #[arg(long, value_name = "FILE")]
    pub secret_access_key_file: Option<PathBuf>,
    /// S3 output: parts larger than this many bytes are multipart uploads.
    #[arg(long, default_value_t = 16 << 20, value_name = "BYTES")]
    pub multipart_threshold: u64,
    /// S3 output: the size of each uploaded piece of a multipart upload (5 MiB to 5 GiB).
    #[arg(long, default_value_t = 16 << 20, value_name = "BYTES")]
    pub part_bytes: u64,
}

/// One part written.
#[derive(Debug, Clone)]
pub struct PartFile {
    /// `part-00000.csv`.
    pub name: String,
    /// Where it is (a path or `s3://bucket/key`).
    pub location: String,
    /// Rows in it.
    pub rows: u64,
    /// Its size.
    pub bytes: u64,
    /// Pieces of its multipart upload (0: a local file or one PutObject).
    pub upload_parts: u32,
}

/// What a run did. `rows = records + directories + rejects`; `written = records + directories`.
#[derive(Debug, Default)]
pub struct Summary {
    /// `--out`.
    pub out: String,
    /// Rows the sources read.
    pub rows: u64,
    /// File and link rows written.
    pub records: u64,
    /// Directory rows written.
    pub directories: u64,
    /// Rows written.
    pub written: u64,
    /// Rows and inputs rejected (by the sources or by the record checks).
    pub rejects: u64,
    /// Of the rejects, inputs (files, objects, databases, directories) that could not be read.
    pub unreadable_inputs: u64,
    /// `snapshot.max_rejects` or `snapshot.max_reject_ratio` was exceeded.
    pub reject_threshold_exceeded: bool,
    /// Where the rejects were written, when there were any.
    pub rejects_file: Option<PathBuf>,
    /// Parts written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Parts sent as multipart uploads.
    pub multipart_uploads: u64,
    /// Splits read (planned and discovered).
    pub splits: u64,
    /// Worker threads.
    pub workers: usize,
    /// Wall time.
    pub seconds: f64,
    /// Rows read a second.
    pub rows_per_s: f64,
    /// Every part, in name order.
    pub parts: Vec<PartFile>,
}

/// Where parts go.
enum Output {
    Local(PathBuf),
    S3(Arc<Uploader>),
}

/// A part being written.
enum PartWriter {
    /// A hidden temporary until it is complete; removed if dropped unfinished.
    Local(Staging),
    S3(ObjectUpload),
}

impl Output {
    fn open(&self, name: &str) -> Result<PartWriter, String> {
        match self {
            Output::Local(dir) => {
                let path = dir.join(name);
                let part =
                    durable::create(&path).map_err(|e| format!("creating a temporary for {}: {e}", path.display()))?;
                Ok(PartWriter::Local(part))
            }
            Output::S3(up) => Ok(PartWriter::S3(up.object(name))),
        }
    }

    fn location(&self, name: &str) -> String {
        match self {
            Output::Local(dir) => dir.join(name).display().to_string(),
            Output::S3(up) => up.url(name),
        }
    }
}

impl PartWriter {
    fn write(&mut self, data: &[u8]) -> Result<(), String> {
        match self {
            PartWriter::Local(p) => p.write_all(data).map_err(|e| format!("writing {}: {e}", p.temporary().display())),
            PartWriter::S3(u) => u.write(data).map_err(|e| e.to_string()),
        }
    }

    /// Make the part visible under its name; returns the pieces of its multipart upload.
    fn finish(self) -> Result<u32, String> {
        match self {
            PartWriter::Local(p) => {
                let tmp = p.temporary().to_path_buf();
                let staged = p.finish(true).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
                // The directory is fsync'ed once, after the last part (`run`).
                staged.commit(false).map(|()| 0).map_err(|e| format!("renaming {} into place: {e}", tmp.display()))
            }
            PartWriter::S3(u) => u.finish().map(|u| u.parts).map_err(|e| e.to_string()),
        }
    }
}

/// The queue of splits, shared by the workers.
struct Shared {
    queue: Mutex<(VecDeque<(usize, Split)>, usize)>,
    ready: Condvar,
    cancel: AtomicBool,
    next_part: AtomicU64,
    output: Output,
    rows_per_file: u64,
    rejects: RejectLog,
    progress: Arc<dyn Progress>,
}

impl Shared {
    fn pop(&self) -> Option<(usize, Split)> {
        let mut q = self.queue.lock().ok()?;
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(item) = q.0.pop_front() {
                q.1 += 1;
                return Some(item);
            }
            if q.1 == 0 {
                return None;
            }
            q = self.ready.wait(q).ok()?;
        }
    }

    fn done(&self, spawned: Vec<Split>, source: usize) {
        if let Ok(mut q) = self.queue.lock() {
            q.1 -= 1;
            q.0.extend(spawned.into_iter().map(|s| (source, s)));
        }
        self.ready.notify_all();
    }

    fn stop(&self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.ready.notify_all();
    }
}

#[derive(Default)]
struct Counts {
    rows: u64,
    records: u64,
    directories: u64,
    splits: u64,
}

/// One worker thread's state: the part it is writing and what it has done.
struct Worker<'a> {
    shared: &'a Shared,
    input: String,
    line: Vec<u8>,
    /// The open part: its name, writer, rows and bytes.
    part: Option<(String, PartWriter, u64, u64)>,
    parts: Vec<PartFile>,
    counts: Counts,
    spawned: Vec<Split>,
    error: Option<String>,
}

impl Worker<'_> {
    fn row(&mut self, rec: &FileRecord<'_>) {
        // Normalised as the snapshot runtime normalises every source's paths.
        if let std::borrow::Cow::Owned(path) = icicle_core::name::normalise(rec.path) {
            return self.row(&FileRecord { path: &path, ..*rec });
        }
        self.counts.rows += 1;
        let line = &mut self.line;
        line.clear();
        if let Err(reason) = rec.check().and_then(|()| icicle9::write_row(rec, line)) {
            // As the snapshot runtime rejects it (the same reason and scope).
            let scope = Some(Scope::Exact(rec.path.to_string()));
            self.shared.rejects.push(Reject::row(&self.input, format!("{:?}: {reason}", rec.path), scope));
            return;
        }
        if rec.kind == icicle_core::record::FileKind::Dir {
            self.counts.directories += 1;
        } else {
            self.counts.records += 1;
        }
        if self.error.is_none() {
            if let Err(e) = self.emit() {
                self.error = Some(e);
                self.shared.stop();
            }
        }
    }

    /// Write the row in `line` to the open part (opening one first), closing it when full.
    fn emit(&mut self) -> Result<(), String> {
        if self.part.is_none() {
            let seq = self.shared.next_part.fetch_add(1, Ordering::Relaxed);
            let name = format!("part-{seq:05}.csv");
            let w = self.shared.output.open(&name)?;
            self.part = Some((name, w, 0, 0));
        }
        let Some((_, w, rows, bytes)) = &mut self.part else { return Ok(()) };
        w.write(&self.line)?;
        *rows += 1;
        *bytes += self.line.len() as u64;
        if *rows >= self.shared.rows_per_file {
            self.close()?;
        }
        Ok(())
    }

    /// Finish the open part, if any.
    fn close(&mut self) -> Result<(), String> {
        let Some((name, w, rows, bytes)) = self.part.take() else { return Ok(()) };
        let upload_parts = w.finish()?;
        let location = self.shared.output.location(&name);
        tracing::debug!(message = "part written", part = %location, rows, bytes);
        self.parts.push(PartFile { name, location, rows, bytes, upload_parts });
        Ok(())
    }
}

impl RowSink for Worker<'_> {
    fn record(&mut self, rec: &FileRecord<'_>) {
        self.row(rec)
    }
    fn directory(&mut self, rec: &FileRecord<'_>) {
        self.row(rec)
    }
    fn reject(&mut self, reject: Reject) {
        self.counts.rows += 1;
        self.shared.rejects.push(reject);
    }
    fn progress(&mut self, units: u64) {
        self.shared.progress.inc(units);
    }
    fn spawn(&mut self, split: Split) {
        self.spawned.push(split);
    }
}

/// What a worker thread hands back.
type WorkerResult = (Counts, Vec<PartFile>, Option<String>);

fn work(shared: &Shared, sources: &[Arc<dyn Source>]) -> WorkerResult {
    let mut w = Worker {
        shared,
        input: String::new(),
        line: Vec::new(),
        part: None,
        parts: Vec::new(),
        counts: Counts::default(),
        spawned: Vec::new(),
        error: None,
    };
    while let Some((si, split)) = shared.pop() {
        w.input = split.name.clone();
        w.counts.splits += 1;
        if let Err(e) = sources[si].read(&split, &mut w) {
            w.counts.rows += 1;
            shared.rejects.push(Reject::whole(
                &split.name,
                e.to_string(),
                Some(split.scope.clone().unwrap_or(Scope::All)),
            ));
        }
        let spawned = std::mem::take(&mut w.spawned);
        shared.done(spawned, si);
    }
    if w.error.is_none() {
        if let Err(e) = w.close() {
            w.error = Some(e);
            shared.stop();
        }
    }
    // A part left open after a failure is dropped: its temporary is removed, its upload aborted.
    w.part = None;
    (w.counts, w.parts, w.error)
}

/// Check the local output directory: created if missing, no parts of an earlier run in it
/// (they would mix with this run's); temporaries a killed run left are removed.
fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e.with_context(|| format!("reading {}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("part-") && name.ends_with(".csv") {
            anyhow::bail!("{} already holds parts ({name}): remove them or choose another --out", dir.display());
        }
        if name.starts_with(".part-") && name.ends_with(".csv.tmp") {
            std::fs::remove_file(e.path()).with_context(|| format!("removing the leftover {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Without the `s3` feature there is no S3 output: `prepare_s3` refuses it before anything
/// is written, and no `Uploader` can exist.
#[cfg(not(feature = "s3"))]
#[allow(dead_code)]
mod no_s3 {
    pub enum Uploader {}
    pub struct ObjectUpload {
        pub parts: u32,
    }
    impl Uploader {
        pub fn object(&self, _: &str) -> ObjectUpload {
            match *self {}
        }
        pub fn url(&self, _: &str) -> String {
            match *self {}
        }
    }
    impl ObjectUpload {
        pub fn write(&mut self, _: &[u8]) -> Result<(), String> {
            Ok(())
        }
        pub fn finish(self) -> Result<Self, String> {
            Ok(self)
        }
    }
}

#[cfg(not(feature = "s3"))]
fn prepare_s3(_: &Args) -> anyhow::Result<Arc<Uploader>> {
    Err(crate::not_built("--out s3://", "s3"))
}

/// The S3 output, checked and reachable, with no parts under its prefix yet.
#[cfg(feature = "s3")]
fn prepare_s3(args: &Args) -> anyhow::Result<Arc<Uploader>> {
    let mut c = UploadConfig::for_url(&args.out).map_err(anyhow::Error::msg)?;
    c.endpoint_url = args.endpoint_url.clone();
    c.region = args.region.clone();
    c.force_path_style = args.force_path_style;
    c.access_key_id = args.access_key_id.clone();
    c.secret_access_key_env = args.secret_access_key_env.clone();
    c.secret_access_key_file = args.secret_access_key_file.clone();
    c.profile = args.profile.clone();
    c.multipart_threshold = args.multipart_threshold;
    c.part_bytes = args.part_bytes;
    let flag = |key: &str| if key == "bucket" { "--out".to_string() } else { format!("--{}", key.replace('_', "-")) };
    let up = Uploader::new(&c, |key, reason| icicle_core::ConfigError::InvalidValue {
        key: flag(key),
        origin: "the command line".into(),
        reason,
    })?;
    let existing = up.existing("part-")?;
    if let Some(k) = existing.first() {
        anyhow::bail!("{} already holds parts ({k}): remove them or choose another --out", args.out);
    }
    Ok(up)
}

/// Plan every source; a source that cannot be planned stops the run before anything is written.
fn plan(sources: &[(String, Arc<dyn Source>)]) -> anyhow::Result<(Vec<(usize, Split)>, u64)> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let mut planned = Vec::new();
    for (i, (name, src)) in sources.iter().enumerate() {
        let splits = rt
            .block_on(src.plan())
            .map_err(|e| anyhow::anyhow!("source `{name}` could not be planned (nothing was written): {e}"))?;
        planned.extend(splits.into_iter().map(|s| (i, s)));
    }
    let total = planned.iter().map(|(_, s)| s.weight).sum();
    Ok((planned, total))
}

/// Read every configured source into parts under `args.out`.
pub fn run(cfg: &LoadedConfig, args: &Args, progress: Arc<dyn Progress>) -> anyhow::Result<Summary> {
    let started = Instant::now();
    anyhow::ensure!(args.rows_per_file > 0, "--rows-per-file must be at least 1");
    let output = if args.out.starts_with("s3://") {
        Output::S3(prepare_s3(args)?)
    } else {
        let s3_only = [
            ("--endpoint-url", args.endpoint_url.is_some()),
            ("--access-key-id", args.access_key_id.is_some()),
            ("--profile", args.profile.is_some()),
            ("--force-path-style", args.force_path_style),
        ];
        if let Some((flag, _)) = s3_only.iter().find(|(_, set)| *set) {
            anyhow::bail!("{flag} is for s3:// outputs; --out {} is a local directory", args.out);
        }
        prepare_dir(Path::new(&args.out))?;
        Output::Local(PathBuf::from(&args.out))
    };
    // Only the sources: the sinks of a snapshot config are not needed (nor built).
    let mut sources_only = cfg.clone();
    sources_only.app.sinks.clear();
    let (sources, _) = icicle_runtime::compose::components_allow_no_sinks(&sources_only)?;
    let (planned, total) = plan(&sources)?;
    let settings = &cfg.app.snapshot;
    let workers = if settings.workers > 0 {
        settings.workers
    } else {
        std::thread::available_parallelism().map_or(2, |n| n.get()).min(8)
    };
    let shared = Shared {
        queue: Mutex::new((planned.into_iter().collect(), 0)),
        ready: Condvar::new(),
        cancel: AtomicBool::new(false),
        next_part: AtomicU64::new(0),
        output,
        rows_per_file: args.rows_per_file,
        rejects: RejectLog::default(),
        progress,
    };
    shared.progress.start(total);
    let srcs: Vec<Arc<dyn Source>> = sources.iter().map(|(_, s)| s.clone()).collect();
    let results: Vec<WorkerResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers).map(|_| scope.spawn(|| work(&shared, &srcs))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| (Counts::default(), Vec::new(), Some("a worker thread panicked".into())))
            })
            .collect()
    });
    shared.progress.finish();
    let mut s = Summary { out: args.out.clone(), workers, ..Default::default() };
    let mut errors = Vec::new();
    for (c, parts, err) in results {
        (s.rows, s.records, s.directories, s.splits) =
            (s.rows + c.rows, s.records + c.records, s.directories + c.directories, s.splits + c.splits);
        s.parts.extend(parts);
        errors.extend(err);
    }
    if let Some(e) = errors.into_iter().next() {
        anyhow::bail!(
            "writing the parts failed (the parts already written are complete; this run's output is not): {e}"
        );
    }
    if let Output::Local(dir) = &shared.output {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing {}", dir.display()))?;
    }
    s.parts.sort_by(|a, b| a.name.cmp(&b.name));
    (s.files, s.bytes) = (s.parts.len() as u64, s.parts.iter().map(|p| p.bytes).sum());
    s.multipart_uploads = s.parts.iter().filter(|p| p.upload_parts > 0).count() as u64;
    s.written = s.records + s.directories;
    s.rejects = shared.rejects.count();
    s.unreadable_inputs = shared.rejects.unreadable_inputs();
    let row_rejects = s.rejects.saturating_sub(s.unreadable_inputs);
    let ratio = if s.rows > 0 { row_rejects as f64 / s.rows as f64 } else { 0.0 };
    s.reject_threshold_exceeded =
        settings.max_rejects.is_some_and(|m| s.rejects > m) || settings.max_reject_ratio.is_some_and(|r| ratio > r);
    if s.rejects > 0 {
        let path = settings
            .rejects_file
            .clone()
            .unwrap_or_else(|| settings.state_dir.clone().unwrap_or_else(|| PathBuf::from(".")).join("rejects.jsonl"));
        shared.rejects.write(&path).with_context(|| format!("writing {}", path.display()))?;
        s.rejects_file = Some(path);
    }
    if s.unreadable_inputs == 0 && !s.reject_threshold_exceeded {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        for (name, src) in &sources {
            rt.block_on(src.acknowledge()).map_err(|e| anyhow::anyhow!("source `{name}`: acknowledging: {e}"))?;
        }
    }
    s.seconds = started.elapsed().as_secs_f64();
    s.rows_per_s = if s.seconds > 0.0 { s.rows as f64 / s.seconds } else { 0.0 };
    Ok(s)
}

impl Summary {
    /// The summary as JSON (`--json`).
    pub fn to_json(&self) -> serde_json::Value {
        let parts: Vec<_> = self
            .parts
            .iter()
            .map(|p| serde_json::json!({"name": p.name, "location": p.location, "rows": p.rows, "bytes": p.bytes, "upload_parts": p.upload_parts}))
            .collect();
        serde_json::json!({
            "out": self.out, "rows": self.rows, "records": self.records, "directories": self.directories, "written": self.written,
            "rejects": self.rejects, "unreadable_inputs": self.unreadable_inputs, "reject_threshold_exceeded": self.reject_threshold_exceeded,
            "rejects_file": self.rejects_file, "files": self.files, "bytes": self.bytes, "multipart_uploads": self.multipart_uploads,
            "splits": self.splits, "workers": self.workers, "seconds": self.seconds, "rows_per_s": self.rows_per_s, "parts": parts,
        })
    }
}

/// The summary for people.
fn describe(s: &Summary) -> String {
    let mut t = format!(
        "preprocess: {} rows read: {} records and {} directories written to {} files ({} bytes, {} multipart uploads) in {}\n",
        s.rows, s.records, s.directories, s.files, s.bytes, s.multipart_uploads, s.out
    );
    t.push_str(&format!(
        "  {} splits, {} workers, {:.1} s ({:.0} rows/s)\n",
        s.splits, s.workers, s.seconds, s.rows_per_s
    ));
    if s.rejects > 0 {
        let file = s.rejects_file.as_ref().map(|p| format!(" (in {})", p.display())).unwrap_or_default();
        t.push_str(&format!("  {} rejects{file}, of which {} unreadable inputs\n", s.rejects, s.unreadable_inputs));
    }
    if s.unreadable_inputs > 0 {
        t.push_str("  INCOMPLETE: inputs could not be read; their rows are missing from the parts (exit 3)\n");
    }
    if s.reject_threshold_exceeded {
        t.push_str("  reject threshold exceeded (snapshot.max_rejects / max_reject_ratio): exit 3\n");
    }
    t
}

/// `icicle preprocess`: load the configuration, run, report. Exit 3 when an input could not
/// be read (the parts lack its rows) or the reject threshold was exceeded.
pub fn main(config: &[PathBuf], set: &[String], args: &Args) -> anyhow::Result<ExitCode> {
    let cfg = icicle_core::config::load(config, set)?;
    crate::init_logging(&cfg.app.log.level, cfg.app.log.format);
    let progress = Arc::new(icicle_tui::TerminalProgress::new(!args.no_progress && !args.json));
    let s = run(&cfg, args, progress)?;
    if args.json {
        crate::print_stdout(&format!("{}\n", serde_json::to_string_pretty(&s.to_json())?))?;
    } else {
        eprint!("{}", describe(&s));
    }
    Ok(if s.unreadable_inputs > 0 || s.reject_threshold_exceeded { ExitCode::from(3) } else { ExitCode::SUCCESS })
}
