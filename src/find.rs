//! `icicle find` and `icicle du`: questions answered from an embedded index directory, for the
//! user who asks (the principals their uid and groups map to, and `public`).

use std::ffi::CString;
use std::io::Write;
use std::ops::Bound;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use icicle_plugins_index::remote::{Endpoint, Remote, RemoteFilter};
use icicle_plugins_index::search::{Record, Span};
use icicle_plugins_index::{Filter, Reader, Visibility};

/// Where `find` and `du` look: an index directory, or a running `icicle serve`.
#[derive(clap::Args, Debug)]
pub struct Where {
    /// The index directory (default: the `dir` of the configuration's `index` sink).
    #[arg(long)]
    index: Option<PathBuf>,
    /// Ask a running `icicle serve` at this address (`http://host:port`) instead of reading an
    /// index directory; the token (`--token-file`, else `ICICLE_TOKEN`) says who asks.
    #[arg(long, value_name = "URL", conflicts_with_all = ["index", "socket", "as_user"])]
    server: Option<String>,
    /// Ask a running `icicle serve` over its Unix socket: it answers for your own uid and groups.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["index", "as_user"])]
    socket: Option<PathBuf>,
    /// A file holding the bearer token for `--server` (its first line).
    #[arg(long, value_name = "FILE", requires = "server")]
    token_file: Option<PathBuf>,
    /// Answer as this user (root only): the records their uid and groups may see.
    #[arg(long = "as", value_name = "USER")]
    as_user: Option<String>,
}

/// `icicle find [--index DIR] [PATH...] [PREDICATE...]`.
#[derive(clap::Args, Debug)]
pub struct FindArgs {
    #[command(flatten)]
    at: Where,
    /// Print each matching record's GMetaEntry as one JSON line.
    #[arg(long)]
    json: bool,
    /// Print only how many records match.
    #[arg(long)]
    count: bool,
    /// At most N records (the first in path order).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Starting directories, then `find`-style predicates, all of which must hold:
    /// -user U, -uid N, -group G, -gid N, -type f|l, -size [+-]N[ckMGT], -mtime/-atime/-ctime
    /// [+-]DAYS, -mmin/-amin/-cmin [+-]MINUTES, -name GLOB, -path GLOB; where the file system
    /// keeps it (as a monitor or listing recorded it): -ost N, -pool NAME, -fileset NAME,
    /// -projid N, -fid FID, -stripe-count [+-]N; output -print (default),
    /// -ls, -printf FORMAT (%p %f %s %u %g %U %G %m %M %y %T@ %A@ %C@).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "PATH|PREDICATE")]
    expression: Vec<String>,
}

/// `icicle du [--index DIR] [PATH]`: the aggregate records of a directory's children, of users
/// or of groups.
#[derive(clap::Args, Debug)]
pub struct DuArgs {
    #[command(flatten)]
    at: Where,
    /// `dir` (the directory and its children), `user` or `group`.
    #[arg(long, default_value = "dir")]
    by: String,
    /// Only the N holding the most bytes.
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// One JSON line per aggregate record (its GMetaEntry).
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV with a header line.
    #[arg(long)]
    csv: bool,
    /// The directory (with `--by dir`; default `/`).
    path: Option<String>,
}

/// The index directory: `--index`, else the first `index` sink of the configuration.
fn index_dir(given: Option<PathBuf>, cfg: &icicle_core::config::LoadedConfig) -> anyhow::Result<PathBuf> {
    if let Some(d) = given {
        return Ok(d);
    }
    for (id, v) in &cfg.app.sinks {
        if v.clone().find("type").and_then(|t| t.into_string()).as_deref() == Some("index") {
            if let Some(dir) = v.clone().find("dir").and_then(|d| d.into_string()) {
                return Ok(PathBuf::from(dir));
            }
            bail!("sinks.{id}: an `index` sink without `dir`");
        }
    }
    bail!("no index: pass --index DIR, or a configuration (-c) with an `index` sink")
}

/// Where the answers come from: an index directory read here (for the principals of
/// [`visibility`]), or a running `icicle serve` (which decides who the caller is).
pub(crate) enum Answers {
    Local(Box<Reader>, Visibility),
    Remote(Box<Remote>, tokio::runtime::Runtime),
}

/// The bearer token: `--token-file`'s first line, else `ICICLE_TOKEN` (never printed).
fn token(file: Option<&PathBuf>) -> anyhow::Result<Option<String>> {
    if let Some(f) = file {
        let text = std::fs::read_to_string(f).with_context(|| format!("--token-file {}", f.display()))?;
        let t = text.lines().next().unwrap_or_default().trim().to_string();
        if t.is_empty() {
            bail!("--token-file {}: the first line is empty", f.display());
        }
        return Ok(Some(t));
    }
    Ok(std::env::var("ICICLE_TOKEN").ok().filter(|t| !t.is_empty()))
}

impl Answers {
    pub(crate) fn open(cfg: &icicle_core::config::LoadedConfig, w: &Where) -> anyhow::Result<Answers> {
        let at = match (&w.server, &w.socket) {
            (Some(u), _) => Endpoint::Http(u.clone()),
            (None, Some(p)) => Endpoint::Socket(p.clone()),
            (None, None) => {
                let dir = index_dir(w.index.clone(), cfg)?;
                return Ok(Answers::Local(Box::new(Reader::open(&dir)?), visibility(cfg, w.as_user.as_deref())?));
            }
        };
        let token = if w.server.is_some() { token(w.token_file.as_ref())? } else { None };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let remote = rt.block_on(Remote::connect(at, token, None))?;
        Ok(Answers::Remote(Box::new(remote), rt))
    }

    fn count(&self, f: &Filter) -> anyhow::Result<u64> {
        Ok(match self {
            Answers::Local(r, who) => r.count(f, who)?,
            Answers::Remote(r, rt) => rt.block_on(r.count_matching(&RemoteFilter::of(f)?))?,
        })
    }

    pub(crate) fn entries(&self, f: &Filter, limit: Option<usize>, each: impl FnMut(&[u8])) -> anyhow::Result<u64> {
        Ok(match self {
            Answers::Local(r, who) => r.entries(f, who, limit, each)?,
            Answers::Remote(r, rt) => rt.block_on(r.entries(&RemoteFilter::of(f)?, limit, each))?,
        })
    }

    /// Where the answers come from, for messages.
    pub(crate) fn source(&self) -> String {
        match self {
            Answers::Local(r, _) => r.dir().display().to_string(),
            Answers::Remote(r, _) => r.endpoint().to_string(),
        }
    }
}

/// A user's uid and groups (their primary group and those `getgrouplist` names), by name or
/// number; a uid with no account has no groups.
fn user_ids(user: &str) -> anyhow::Result<(u32, Vec<u32>)> {
    let name = CString::new(user).context("a user name with a NUL byte")?;
    // SAFETY: NUL-terminated arguments; the record is copied out before any other call that
    // could overwrite getpw*'s static buffer.
    let account = unsafe {
        let mut pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            if let Ok(uid) = user.parse::<u32>() {
                pw = libc::getpwuid(uid);
                if pw.is_null() {
                    return Ok((uid, Vec::new()));
                }
            } else {
                bail!("--as {user:?}: no such user");
            }
        }
        ((*pw).pw_uid, (*pw).pw_gid, std::ffi::CStr::from_ptr((*pw).pw_name).to_owned())
    };
    let (uid, gid, name) = account;
    let mut n: libc::c_int = 1024;
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: `groups` holds `n` gids; getgrouplist writes at most `n` and sets `n`.
    let r = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
    if r < 0 {
        groups = vec![gid];
    } else {
        groups.truncate(n.max(0) as usize);
    }
    Ok((uid, groups))
}

/// The caller's groups (effective gid and supplementary groups).
fn own_groups() -> Vec<u32> {
    // SAFETY: a first call with size 0 returns the count; the second fills at most that many.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut buf = vec![0 as libc::gid_t; n.max(0) as usize];
    // SAFETY: `buf` holds `n` gids.
    let got = unsafe { libc::getgroups(n, buf.as_mut_ptr()) };
    buf.truncate(got.max(0) as usize);
    // SAFETY: getegid has no preconditions.
    buf.push(unsafe { libc::getegid() });
    buf
}

/// Whose question it is: root sees every record unless it asks `--as` someone; anyone else
/// the records visible to `public`, to `records.everyone` and to the principals their uid and
/// groups map to in `records.principals`.
fn visibility(cfg: &icicle_core::config::LoadedConfig, as_user: Option<&str>) -> anyhow::Result<Visibility> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let (uid, groups) = match as_user {
        Some(_) if !root => bail!("--as: only root may answer as another user"),
        Some(u) => user_ids(u)?,
        None if root => return Ok(Visibility::All),
        // SAFETY: geteuid has no preconditions.
        None => (unsafe { libc::geteuid() }, own_groups()),
    };
    let mut principals = vec!["public".to_string()];
    principals.extend(cfg.app.records.everyone.clone());
    if let Some(file) = &cfg.app.records.principals {
        let map =
            icicle_core::policy::PrincipalMap::load(file).map_err(|e| anyhow::anyhow!("records.principals: {e}"))?;
        principals.extend(map.user(uid).map(str::to_string));
        principals.extend(groups.iter().filter_map(|g| map.group(*g)).map(str::to_string));
    }
    principals.sort();
    principals.dedup();
    Ok(Visibility::Principals(principals))
}

/// A number with an optional `+` (more than) or `-` (less than) sign.
fn signed(arg: &str) -> anyhow::Result<(char, u64, &str)> {
    let (sign, rest) = match arg.chars().next() {
        Some(c @ ('+' | '-')) => (c, &arg[1..]),
        _ => ('=', arg),
    };
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let n = rest[..digits].parse().with_context(|| format!("{arg:?}: expected [+-]N"))?;
    Ok((sign, n, &rest[digits..]))
}

/// `find -size`: units of 512-byte blocks unless `c` (bytes), `k`, `M`, `G` or `T`; a size is
/// counted in whole units rounded up, as find does.
fn size_span(arg: &str) -> anyhow::Result<Span<u64>> {
    let (sign, n, unit) = signed(arg)?;
    let u: u64 = match unit {
        "" | "b" => 512,
        "c" => 1,
        "w" => 2,
        "k" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => bail!("-size {arg:?}: unknown unit {unit:?} (c, w, b, k, M, G, T)"),
    };
    let at = |k: u64| k.saturating_mul(u);
    Ok(match sign {
        '+' => Span { lo: Bound::Excluded(at(n)), hi: Bound::Unbounded },
        '-' => Span { lo: Bound::Unbounded, hi: Bound::Included(at(n.saturating_sub(1))) },
        _ if n == 0 => Span { lo: Bound::Included(0), hi: Bound::Included(0) },
        _ => Span { lo: Bound::Excluded(at(n - 1)), hi: Bound::Included(at(n)) },
    })
}

/// A whole number a predicate takes.
fn number(what: &str, v: &str) -> anyhow::Result<u64> {
    v.parse().with_context(|| format!("{what} {v:?}: expected a whole number"))
}

/// A FID as records hold it, `[0x200000401:0x1:0x0]`, also when given without brackets
/// (as lester and `lfs fid2path` write it).
fn bracketed_fid(v: &str) -> String {
    let bare = v.trim().trim_start_matches('[').trim_end_matches(']');
    format!("[{bare}]")
}

/// `-stripe-count`: more than (`+N`), fewer than (`-N`) or exactly N, as `lfs find` reads it.
fn count_span(arg: &str) -> anyhow::Result<Span<u64>> {
    let (sign, n, rest) = signed(arg)?;
    if !rest.is_empty() {
        bail!("-stripe-count {arg:?}: expected [+-]N");
    }
    Ok(match sign {
        '+' => Span { lo: Bound::Excluded(n), hi: Bound::Unbounded },
        '-' => Span { lo: Bound::Unbounded, hi: Bound::Excluded(n) },
        _ => Span { lo: Bound::Included(n), hi: Bound::Included(n) },
    })
}

/// `find -mtime` and kin: the age in whole `unit`s (rounded down) more than, less than or
/// equal to N, as a range of times before `now`.
fn age_span(arg: &str, unit: i64, now: i64) -> anyhow::Result<Span<i64>> {
    let (sign, n, rest) = signed(arg)?;
    if !rest.is_empty() {
        bail!("{arg:?}: expected [+-]N");
    }
    let n = i64::try_from(n).context("too large")?;
    let before = |k: i64| now.saturating_sub(k.saturating_mul(unit));
    Ok(match sign {
        '+' => Span { lo: Bound::Unbounded, hi: Bound::Included(before(n + 1)) },
        '-' => Span { lo: Bound::Excluded(before(n)), hi: Bound::Unbounded },
        _ => Span { lo: Bound::Excluded(before(n + 1)), hi: Bound::Included(before(n)) },
    })
}

/// A uid or gid by name or number.
fn id_of(kind: &str, v: &str) -> anyhow::Result<u64> {
    if let Ok(n) = v.parse() {
        return Ok(n);
    }
    let name = CString::new(v).context("a name with a NUL byte")?;
    // SAFETY: NUL-terminated names; each record is read at once.
    unsafe {
        if kind == "user" {
            let pw = libc::getpwnam(name.as_ptr());
            if !pw.is_null() {
                return Ok(u64::from((*pw).pw_uid));
            }
        } else {
            let gr = libc::getgrnam(name.as_ptr());
            if !gr.is_null() {
                return Ok(u64::from((*gr).gr_gid));
            }
        }
    }
    bail!("-{kind} {v:?}: no such {kind}")
}

/// How matches are printed.
enum Output {
    Path,
    Ls,
    Printf(String),
    Json,
}

/// Starting paths, the filter and the output of a find expression.
fn parse_expression(expr: &[String], now: i64) -> anyhow::Result<(Vec<String>, Filter, Output)> {
    let mut starts = Vec::new();
    let mut filter = Filter { record: Some(Record::File), ..Filter::default() };
    let mut output = Output::Path;
    let mut it = expr.iter().peekable();
    while let Some(a) = it.next_if(|a| !a.starts_with('-')) {
        starts.push(icicle_core::name::normalise(a).into_owned());
    }
    while let Some(p) = it.next() {
        let mut value = || it.next().with_context(|| format!("{p}: a value is missing"));
        match p.as_str() {
            "-user" | "-uid" => filter.uid = Some(id_of("user", value()?)?),
            "-group" | "-gid" => filter.gid = Some(id_of("group", value()?)?),
            "-type" => {
                filter.kind = Some(match value()?.as_str() {
                    "f" => "file".to_string(),
                    "l" => "link".to_string(),
                    t => bail!("-type {t}: the index holds files (f) and links (l)"),
                })
            }
            "-size" => filter.size = size_span(value()?)?,
            "-mtime" => filter.mtime = age_span(value()?, 86_400, now)?,
            "-atime" => filter.atime = age_span(value()?, 86_400, now)?,
            "-ctime" => filter.ctime = age_span(value()?, 86_400, now)?,
            "-mmin" => filter.mtime = age_span(value()?, 60, now)?,
            "-amin" => filter.atime = age_span(value()?, 60, now)?,
            "-cmin" => filter.ctime = age_span(value()?, 60, now)?,
            "-name" => filter.name_glob = Some(value()?.clone()),
            "-path" | "-wholename" => filter.path_glob = Some(value()?.clone()),
            "-ost" => filter.ost = Some(number("-ost", value()?)?),
            "-pool" => filter.pool = Some(value()?.clone()),
            "-fileset" => filter.fileset = Some(value()?.clone()),
            "-projid" => filter.project_id = Some(number("-projid", value()?)?),
            "-fid" => filter.fid = Some(bracketed_fid(value()?)),
            "-stripe-count" => filter.stripe_count = count_span(value()?)?,
            "-print" => output = Output::Path,
            "-ls" => output = Output::Ls,
            "-printf" => output = Output::Printf(value()?.clone()),
            other => bail!(
                "{other}: not a predicate this find knows (predicates combine with AND; see `icicle find --help`)"
            ),
        }
    }
    Ok((starts, filter, output))
}

/// Fields of a primary record's entry, for printing.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Shown {
    path: String,
    name: String,
    #[serde(rename = "type")]
    file_type: String,
    size: u64,
    uid: u64,
    gid: u64,
    mode: String,
    mtime: String,
    raw: ShownRaw,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct ShownRaw {
    mode: u64,
    atime: i64,
    ctime: i64,
    mtime: i64,
}

fn content(entry: &[u8]) -> Shown {
    #[derive(serde::Deserialize)]
    struct E {
        content: Shown,
    }
    serde_json::from_slice::<E>(entry).map(|e| e.content).unwrap_or_default()
}

/// `-printf`: `%p %f %s %u %g %U %G %m %M %y %T@ %A@ %C@ %%`, and `\n \t \\`.
fn printf(format: &str, s: &Shown, out: &mut String) {
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('p') => out.push_str(&s.path),
                Some('f') => out.push_str(&s.name),
                Some('s') => out.push_str(&s.size.to_string()),
                Some('u' | 'U') => out.push_str(&s.uid.to_string()),
                Some('g' | 'G') => out.push_str(&s.gid.to_string()),
                Some('m') => out.push_str(&format!("{:o}", mode_bits(s.raw.mode) & 0o7777)),
                Some('M') => out.push_str(&s.mode),
                Some('y') => out.push(if s.file_type == "link" { 'l' } else { 'f' }),
                Some('T') if chars.next() == Some('@') => out.push_str(&s.raw.mtime.to_string()),
                Some('A') if chars.next() == Some('@') => out.push_str(&s.raw.atime.to_string()),
                Some('C') if chars.next() == Some('@') => out.push_str(&s.raw.ctime.to_string()),
                Some('%') => out.push('%'),
                Some(o) => {
                    out.push('%');
                    out.push(o);
                }
                None => out.push('%'),
            },
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            },
            c => out.push(c),
        }
    }
}

/// `raw.mode` (octal digits written as a decimal number) as mode bits.
pub(crate) fn mode_bits(written: u64) -> u64 {
    u64::from_str_radix(&written.to_string(), 8).unwrap_or(0)
}

fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// `icicle find`.
pub fn find(cfg: &icicle_core::config::LoadedConfig, args: &FindArgs) -> anyhow::Result<ExitCode> {
    let answers = Answers::open(cfg, &args.at)?;
    // `--count`, `--json` and `--limit N` are taken after the paths and predicates too.
    let (mut count, mut json, mut limit) = (args.count, args.json, args.limit);
    let mut expression = Vec::with_capacity(args.expression.len());
    let mut it = args.expression.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--count" => count = true,
            "--json" => json = true,
            "--limit" => {
                limit =
                    Some(it.next().context("--limit: a number is missing")?.parse().context("--limit: not a number")?)
            }
            _ => expression.push(a.clone()),
        }
    }
    let (starts, filter, output) = parse_expression(&expression, now_secs())?;
    let output = if json { Output::Json } else { output };
    let starts = if starts.is_empty() { vec!["/".to_string()] } else { starts };
    let stdout = std::io::stdout();
    let mut out = Printer { w: std::io::BufWriter::new(stdout.lock()), line: String::new(), failed: None, output };
    let mut total = 0u64;
    for start in starts {
        let f = Filter { under: (start != "/").then_some(start), ..filter.clone() };
        if count {
            total += answers.count(&f)?;
            continue;
        }
        total += match &answers {
            // Read from the columns: memory of a few bytes a match, however many match.
            Answers::Local(r, who) if !matches!(out.output, Output::Json) => {
                r.rows(&f, who, limit, |row| out.shown(&shown(row)))?
            }
            _ => answers.entries(&f, limit, |entry| out.entry(entry))?,
        };
        if let Some(e) = out.failed.take() {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(e.into());
        }
    }
    let mut w = out.w;
    if count {
        writeln!(w, "{total}")?;
    }
    w.flush().or_else(|e| if e.kind() == std::io::ErrorKind::BrokenPipe { Ok(()) } else { Err(e) })?;
    Ok(ExitCode::SUCCESS)
}

/// Where matches are printed, and the first write error.
struct Printer<W: Write> {
    w: W,
    line: String,
    failed: Option<std::io::Error>,
    output: Output,
}

impl<W: Write> Printer<W> {
    fn entry(&mut self, entry: &[u8]) {
        if matches!(self.output, Output::Json) {
            self.line.clear();
            self.line.push_str(&String::from_utf8_lossy(entry));
            self.line.push('\n');
            self.write();
        } else {
            self.shown(&content(entry));
        }
    }

    fn shown(&mut self, s: &Shown) {
        self.line.clear();
        match &self.output {
            Output::Json | Output::Path => self.line.push_str(&s.path),
            Output::Ls => self
                .line
                .push_str(&format!("{} {:>6} {:>6} {:>12} {} {}", s.mode, s.uid, s.gid, s.size, s.mtime, s.path)),
            Output::Printf(fmt) => printf(fmt, s, &mut self.line),
        }
        if !matches!(self.output, Output::Printf(_)) {
            self.line.push('\n');
        }
        self.write();
    }

    fn write(&mut self) {
        if self.failed.is_none() {
            self.failed = self.w.write_all(self.line.as_bytes()).err();
        }
    }
}

/// A record read from the index's columns, as `content` reads an entry.
fn shown(row: &icicle_plugins_index::rows::Row) -> Shown {
    let mode = u32::try_from(row.mode).unwrap_or(0);
    Shown {
        path: row.path.clone(),
        name: row.path.rsplit('/').next().unwrap_or_default().to_string(),
        file_type: row.kind.clone(),
        size: row.size,
        uid: row.uid,
        gid: row.gid,
        mode: String::from_utf8_lossy(&icicle_core::record::mode_string(mode)).into_owned(),
        mtime: icicle_gmeta::iso_utc(row.mtime),
        raw: ShownRaw {
            mode: format!("{:o}", row.mode).parse().unwrap_or(0),
            atime: row.atime,
            ctime: row.ctime,
            mtime: row.mtime,
        },
    }
}

/// What `du` shows of an aggregate record.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Aggregate {
    id: String,
    kind: String,
    file_count: u64,
    size: Stats,
    mtime: TimeStats,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Stats {
    total: u64,
    min: u64,
    max: u64,
    average: u64,
    p50: u64,
    p90: u64,
    p99: u64,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct TimeStats {
    p50: String,
}

/// `icicle du`.
pub fn du(cfg: &icicle_core::config::LoadedConfig, args: &DuArgs) -> anyhow::Result<ExitCode> {
    let answers = Answers::open(cfg, &args.at)?;
    let kind = match args.by.as_str() {
        "dir" | "user" | "group" => args.by.clone(),
        o => bail!("--by {o}: dir, user or group"),
    };
    let mut filters = Vec::new();
    let base = Filter { record: Some(Record::Aggregate), kind: Some(kind.clone()), ..Filter::default() };
    if kind == "dir" {
        let path = icicle_core::name::normalise(args.path.as_deref().unwrap_or("/")).into_owned();
        if path != "/" {
            filters.push(Filter { path: Some(path.clone()), ..base.clone() });
        }
        filters.push(Filter { parent: Some(path), ..base.clone() });
    } else {
        filters.push(base);
    }
    let mut rows: Vec<(Aggregate, Vec<u8>)> = Vec::new();
    for f in &filters {
        answers.entries(f, None, |e| {
            #[derive(serde::Deserialize)]
            struct E {
                content: Aggregate,
            }
            if let Ok(a) = serde_json::from_slice::<E>(e) {
                rows.push((a.content, e.to_vec()));
            }
        })?;
    }
    if rows.is_empty() {
        eprintln!("icicle du: no {kind} aggregate records in {} visible to you (a snapshot with [aggregate] enabled writes them)", answers.source());
        return Ok(ExitCode::from(1));
    }
    if let Some(n) = args.top {
        rows.sort_by(|a, b| b.0.size.total.cmp(&a.0.size.total).then_with(|| a.0.id.cmp(&b.0.id)));
        rows.truncate(n);
    }
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    if args.json {
        for (_, e) in &rows {
            w.write_all(e)?;
            w.write_all(b"\n")?;
        }
    } else if args.csv {
        writeln!(w, "kind,id,files,bytes,min,max,average,p50,p90,p99,mtime_p50")?;
        for (a, _) in &rows {
            let s = &a.size;
            let id =
                if a.id.contains([',', '"']) { format!("\"{}\"", a.id.replace('"', "\"\"")) } else { a.id.clone() };
            writeln!(
                w,
                "{},{id},{},{},{},{},{},{},{},{},{}",
                a.kind, a.file_count, s.total, s.min, s.max, s.average, s.p50, s.p90, s.p99, a.mtime.p50
            )?;
        }
    } else {
        writeln!(
            w,
            "{:>12} {:>16} {:>12} {:>12} {:>12}  {:<25} id",
            "files", "bytes", "average", "p50", "p99", "mtime p50"
        )?;
        for (a, _) in &rows {
            let s = &a.size;
            writeln!(
                w,
                "{:>12} {:>16} {:>12} {:>12} {:>12}  {:<25} {}",
                a.file_count, s.total, s.average, s.p50, s.p99, a.mtime.p50, a.id
            )?;
        }
    }
    w.flush()?;
    Ok(ExitCode::SUCCESS)
}
