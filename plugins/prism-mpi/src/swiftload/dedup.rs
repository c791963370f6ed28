//! `swiftload --app dedup`: a deduplication profiler over the scheduled object chunks.
//!
//! Every rank reads its pieces (a piece is one stripe of one file: what a task's
//! [`tasks::chunks`] yields), cuts the data into chunks under each scheme, and fingerprints
//! each chunk (the first 16 bytes of its BLAKE3 hash). The fingerprints are shuffled by value
//! (`MPI_Alltoallv`, owner = fingerprint mod ranks), each owner counts the distinct ones, and
//! the sums give, per scheme, the chunks and bytes, the distinct chunks and bytes, and the
//! dedup ratio (bytes / distinct bytes).
//!
//! The chunks are those of each **whole file**, as a sequential pass would cut it, whatever
//! the stripes:
//! - `fixed:N`: chunks at file offsets `0, N, 2N, ...`; a chunk belongs to the piece it
//!   starts in, whose reader reads on past the piece's end to finish it.
//! - `cdc:AVG`: FastCDC (the `fastcdc` crate, v2020, min `AVG/4`, max `4*AVG`). A cut depends
//!   only on the bytes from the chunk's start, so a piece's reader starts cutting up to
//!   `max` bytes before the piece (a lead-in; files' first pieces need none) and keeps the
//!   chunks that start in the piece. Rank 0 checks each piece's first chunk against where
//!   the chunk before it ended (a piece whose lead-in did not reach a common cut); it cuts the
//!   chunks between such a boundary and the piece's first matching cut itself.
//!
//! Read-ahead and lead-in bytes are counted apart from the files' bytes.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;

use anyhow::{bail, Context};
use icicle_core::traits::ObjectTask;
use icicle_plugins_prism::contention::{self, Throttle};
use icicle_plugins_prism::tasks;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use icicle_mpi_comm as comm;

/// A chunk's fingerprint: the first 16 bytes of its BLAKE3 hash.
pub type Fingerprint = [u8; 16];

/// How files are cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Chunks of this many bytes at multiples of it.
    Fixed(u64),
    /// FastCDC v2020 with these minimum, average and maximum sizes.
    Cdc { min: u32, avg: u32, max: u32 },
}

impl Scheme {
    /// `fixed:4K`, `fixed:1M`, `cdc:8K` (sizes with K, M or G suffixes).
    pub fn parse(s: &str) -> anyhow::Result<Scheme> {
        let (kind, size) =
            s.split_once(':').with_context(|| format!("chunking `{s}`: expected fixed:SIZE or cdc:AVG"))?;
        let n = icicle_plugins_prism::layout::parse_size(size).map_err(|e| anyhow::anyhow!("chunking `{s}`: {e}"))?;
        match kind {
            "fixed" if n > 0 => Ok(Scheme::Fixed(n)),
            "cdc" => {
                use fastcdc::v2020::{AVERAGE_MAX, AVERAGE_MIN};
                if n < u64::from(AVERAGE_MIN) || n > u64::from(AVERAGE_MAX) {
                    bail!("chunking `{s}`: the average must be within {AVERAGE_MIN}..={AVERAGE_MAX} bytes");
                }
                let avg = n as u32;
                Ok(Scheme::Cdc { min: avg / 4, avg, max: avg * 4 })
            }
            _ => bail!("chunking `{s}`: unknown kind `{kind}` (known: fixed, cdc)"),
        }
    }

    /// The scheme as written on the command line, with sizes in bytes.
    pub fn name(&self) -> String {
        match self {
            Scheme::Fixed(n) => format!("fixed:{n}"),
            Scheme::Cdc { avg, .. } => format!("cdc:{avg}"),
        }
    }

    /// The longest chunk.
    pub fn max_len(&self) -> u64 {
        match self {
            Scheme::Fixed(n) => *n,
            Scheme::Cdc { max, .. } => u64::from(*max),
        }
    }

    /// The chunks `(start, len)` of `data` (a whole file) under this scheme.
    pub fn cut_all(&self, data: &[u8]) -> Vec<(u64, u64)> {
        match *self {
            Scheme::Fixed(n) => {
                (0..data.len() as u64).step_by(n as usize).map(|s| (s, n.min(data.len() as u64 - s))).collect()
            }
            Scheme::Cdc { min, avg, max } => {
                fastcdc::v2020::FastCDC::new(data, min, avg, max).map(|c| (c.offset as u64, c.length as u64)).collect()
            }
        }
    }
}

/// The fingerprint of `bytes`.
pub fn fingerprint(bytes: &[u8]) -> Fingerprint {
    let h = blake3::hash(bytes);
    let mut f = [0u8; 16];
    f.copy_from_slice(&h.as_bytes()[..16]);
    f
}

/// The chunks `(start, len)` that start in `[a, b)`, cut from `buf`, which holds the file's
/// bytes from `buf_at` (at or before `a`; CDC cuts from there, so it is 0 or a lead-in
/// start) to the file's end or at least `b + max_len`.
pub fn piece_chunks(scheme: &Scheme, buf: &[u8], buf_at: u64, a: u64, b: u64) -> Vec<(u64, u64)> {
    let buf_end = buf_at + buf.len() as u64;
    match *scheme {
        Scheme::Fixed(n) => (a.div_ceil(n) * n..b).step_by(n as usize).map(|s| (s, n.min(buf_end - s))).collect(),
        Scheme::Cdc { min, avg, max } => fastcdc::v2020::FastCDC::new(buf, min, avg, max)
            .map(|c| (buf_at + c.offset as u64, c.length as u64))
            .skip_while(|&(s, _)| s < a)
            .take_while(|&(s, _)| s < b)
            .collect(),
    }
}

/// One piece's CDC chunks, as its reader cut them.
#[derive(Debug, Clone, Default)]
pub struct PieceCuts {
    /// The file's index in the plan.
    pub file: u64,
    /// The piece's first byte.
    pub a: u64,
    /// The byte after its last.
    pub b: u64,
    /// The chunks `(start, len, fingerprint)` that start in the piece.
    pub chunks: Vec<(u64, u64, Fingerprint)>,
}

/// Per piece `(file, a)`: where its kept chunks start; and the chunks `(file, start, len,
/// fingerprint)` rank 0 cuts itself.
pub type Stitched = (BTreeMap<(u64, u64), u64>, Vec<(u64, u64, u64, Fingerprint)>);

/// Where, per piece (by `(file, a)`), the whole-file chunking's chunks start among the
/// piece's own cuts (`u64::MAX`: none of them), and the chunks `(file, start, len)` that
/// rank 0 must cut itself; `pieces` are every rank's, in any order; `sizes` per file.
pub fn stitch(
    pieces: &[PieceCuts],
    sizes: &[u64],
    scheme: &Scheme,
    read: &mut dyn FnMut(u64, u64, u64) -> anyhow::Result<Vec<u8>>,
) -> anyhow::Result<Stitched> {
    let mut by_file: BTreeMap<u64, Vec<&PieceCuts>> = BTreeMap::new();
    for p in pieces {
        by_file.entry(p.file).or_default().push(p);
    }
    let mut valid_from = BTreeMap::new();
    let mut own = Vec::new();
    for (file, mut ps) in by_file {
        ps.sort_by_key(|p| p.a);
        let size = *sizes.get(file as usize).context("a piece of an unknown file")?;
        let mut pos = 0u64;
        for p in ps {
            if p.a > pos {
                bail!("file {file}: bytes {pos}..{} are in no piece", p.a);
            }
            while pos < p.b && !p.chunks.iter().any(|c| c.0 == pos) {
                let data = read(file, pos, scheme.max_len().min(size - pos))?;
                let len = scheme.cut_all(&data).first().map(|c| c.1).context("an empty cut")?;
                own.push((file, pos, len, fingerprint(data.get(..len as usize).context("a cut past the data")?)));
                pos += len;
            }
            if pos < p.b {
                valid_from.insert((file, p.a), pos);
                pos = p.chunks.last().map(|c| c.0 + c.1).unwrap_or(pos);
            } else {
                valid_from.insert((file, p.a), u64::MAX);
            }
        }
        if pos != size {
            bail!("file {file}: the chunks end at {pos} of {size} bytes");
        }
    }
    Ok((valid_from, own))
}

/// Distinct-chunk counts of one scheme: `[chunks, bytes, distinct chunks, distinct bytes]`.
pub fn count_distinct(records: impl IntoIterator<Item = (Fingerprint, u64)>) -> [u64; 4] {
    let mut seen: HashMap<Fingerprint, u64> = HashMap::new();
    let mut out = [0u64; 4];
    for (f, len) in records {
        out[0] += 1;
        out[1] += len;
        if seen.insert(f, len).is_none() {
            out[2] += 1;
            out[3] += len;
        }
    }
    out
}

/// The parsed `--chunking` list (default: fixed 4K and 64K, CDC 8K).
pub fn schemes(list: &[String]) -> anyhow::Result<Vec<Scheme>> {
    if list.is_empty() {
        return Ok(vec![Scheme::Fixed(4096), Scheme::Fixed(65536), Scheme::Cdc { min: 2048, avg: 8192, max: 32768 }]);
    }
    list.iter().map(|s| Scheme::parse(s)).collect()
}

/// What one rank read and cut.
#[derive(Default)]
struct Cut {
    /// Per scheme: the chunks `(fingerprint, len)` (a CDC scheme's once its pieces are settled).
    records: Vec<Vec<(Fingerprint, u64)>>,
    /// Per scheme: CDC pieces.
    pieces: Vec<Vec<PieceCuts>>,
    bytes: u64,
    extra: u64,
    errors: u64,
}

/// Read `mine` and cut every piece under every scheme.
fn read_and_cut(
    paths: &[String],
    sizes: &[u64],
    mine: &[ObjectTask],
    schemes: &[Scheme],
    throttle: Option<&Throttle>,
) -> Cut {
    let mut cut =
        Cut { records: vec![Vec::new(); schemes.len()], pieces: vec![Vec::new(); schemes.len()], ..Cut::default() };
    let reach = schemes.iter().map(Scheme::max_len).max().unwrap_or(0);
    let lead = schemes.iter().filter(|s| matches!(s, Scheme::Cdc { .. })).map(Scheme::max_len).max().unwrap_or(0);
    let mut files: HashMap<usize, std::fs::File> = HashMap::new();
    let mut buf = Vec::new();
    for t in mine {
        let size = sizes[t.object];
        for (a, len) in tasks::chunks(t) {
            let f = match files.entry(t.object) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => match std::fs::File::open(&paths[t.object]) {
                    Ok(f) => v.insert(f),
                    Err(e) => {
                        tracing::error!("{}: {e}", paths[t.object]);
                        cut.errors += 1;
                        continue;
                    }
                },
            };
            let b = a + len;
            let (from, to) = (a.saturating_sub(lead), (b + reach).min(size));
            let deadline = throttle.map(|th| th.reserve(t.ost, to - from));
            buf.resize((to - from) as usize, 0);
            if let Err(e) = f.read_exact_at(&mut buf, from) {
                tracing::error!("{} at {from}+{}: {e}", paths[t.object], to - from);
                cut.errors += 1;
                continue;
            }
            cut.bytes += len;
            cut.extra += (to - from) - len;
            for (i, s) in schemes.iter().enumerate() {
                let chunks = piece_chunks(s, &buf, from, a, b);
                let fp = |&(st, l): &(u64, u64)| fingerprint(&buf[(st - from) as usize..(st - from + l) as usize]);
                match s {
                    Scheme::Fixed(_) => cut.records[i].extend(chunks.iter().map(|c| (fp(c), c.1))),
                    Scheme::Cdc { .. } => cut.pieces[i].push(PieceCuts {
                        file: t.object as u64,
                        a,
                        b,
                        chunks: chunks.iter().map(|c| (c.0, c.1, fp(c))).collect(),
                    }),
                }
            }
            if let Some(d) = deadline {
                contention::sleep_until(d);
            }
        }
    }
    cut
}

/// What a dedup run measured on every rank, summed.
struct Totals {
    per_scheme: Vec<[u64; 4]>,
    bytes: u64,
    extra: u64,
    errors: u64,
    fixups: u64,
}

/// Run the profiler over `mine` (this rank's tasks of the plan): returns the summary's
/// `dedup` part on rank 0 (`None` elsewhere).
pub fn run(
    world: &SimpleCommunicator,
    paths: &[String],
    sizes: &[u64],
    mine: &[ObjectTask],
    schemes: &[Scheme],
    throttle: Option<&Throttle>,
) -> anyhow::Result<Option<serde_json::Value>> {
    world.barrier();
    let t0 = mpi::time();
    let mut cut = read_and_cut(paths, sizes, mine, schemes, throttle);
    world.barrier();
    let t_io = mpi::time();
    // Every rank stops together on a read error, before any stitching waits on the others.
    let errors = comm::all_sum(world, &[cut.errors])[0];
    if errors > 0 {
        bail!("{errors} read errors (each rank's log names the file and offset)");
    }
    let mut fixups = 0u64;
    for (i, s) in schemes.iter().enumerate() {
        if matches!(s, Scheme::Cdc { .. }) {
            fixups += settle_cdc(world, paths, sizes, s, &mut cut, i)?;
        }
    }
    let t_stitch = mpi::time();
    let size = world.size() as usize;
    let mut per_scheme = Vec::with_capacity(schemes.len());
    for i in 0..schemes.len() {
        let records = std::mem::take(&mut cut.records[i]);
        let mut parts = vec![Vec::new(); size];
        for (f, len) in records {
            let owner = (u64::from_le_bytes(f[..8].try_into().unwrap_or([0; 8])) % size as u64) as usize;
            parts[owner].extend_from_slice(&f);
            parts[owner].extend_from_slice(&len.to_le_bytes());
        }
        let got = comm::exchange(world, parts)?;
        let mine = got.iter().flat_map(|p| p.chunks_exact(24)).map(|r| {
            let mut f = [0u8; 16];
            f.copy_from_slice(&r[..16]);
            (f, u64::from_le_bytes(r[16..24].try_into().unwrap_or([0; 8])))
        });
        per_scheme.push(comm::all_sum(world, &count_distinct(mine)));
    }
    let t_end = mpi::time();
    let sums = comm::all_sum(world, &[cut.bytes, cut.extra, cut.errors, fixups]);
    let t = Totals {
        per_scheme: per_scheme.into_iter().map(|v| [v[0], v[1], v[2], v[3]]).collect(),
        bytes: sums[0],
        extra: sums[1],
        errors: sums[2],
        fixups: sums[3],
    };
    if world.rank() != 0 {
        return Ok(None);
    }
    if t.errors > 0 {
        bail!("{} read errors", t.errors);
    }
    let total: u64 = sizes.iter().sum();
    for (s, c) in schemes.iter().zip(&t.per_scheme) {
        if c[1] != total {
            bail!("{}: the chunks cover {} of {total} bytes", s.name(), c[1]);
        }
    }
    let per_scheme: Vec<serde_json::Value> = schemes
        .iter()
        .zip(&t.per_scheme)
        .map(|(s, c)| {
            serde_json::json!({
                "chunking": s.name(), "chunks": c[0], "bytes": c[1], "distinct_chunks": c[2], "distinct_bytes": c[3],
                "duplicate_chunks": c[0] - c[2], "duplicate_bytes": c[1] - c[3],
                "ratio": if c[3] > 0 { c[1] as f64 / c[3] as f64 } else { 1.0 },
            })
        })
        .collect();
    Ok(Some(serde_json::json!({
        "bytes": t.bytes,
        "read_ahead_bytes": t.extra,
        "boundary_fixups": t.fixups,
        "io_seconds": t_io - t0,
        "stitch_seconds": t_stitch - t_io,
        "shuffle_seconds": t_end - t_stitch,
        "seconds": t_end - t0,
        "mb_s": if t_end > t0 { t.bytes as f64 / 1e6 / (t_end - t0) } else { 0.0 },
        "schemes": per_scheme,
    })))
}

/// Gather scheme `i`'s CDC pieces on rank 0, stitch them into whole-file chunkings, keep on
/// every rank only the chunks of those (in `cut.records[i]`, with the chunks rank 0 cut itself
/// on rank 0). Returns how many chunks rank 0 cut.
fn settle_cdc(
    world: &SimpleCommunicator,
    paths: &[String],
    sizes: &[u64],
    scheme: &Scheme,
    cut: &mut Cut,
    i: usize,
) -> anyhow::Result<u64> {
    let pieces = std::mem::take(&mut cut.pieces[i]);
    let mut words = Vec::new();
    for p in &pieces {
        words.extend([p.file, p.a, p.b, p.chunks.len() as u64]);
        words.extend(p.chunks.iter().flat_map(|c| [c.0, c.1]));
    }
    let gathered = comm::gather_words(world, &words)?;
    let mut reply = Vec::new();
    let mut own = Vec::new();
    if world.rank() == 0 {
        let mut all = Vec::new();
        for w in &gathered {
            let mut it = w.iter().copied();
            while let (Some(file), Some(a), Some(b), Some(n)) = (it.next(), it.next(), it.next(), it.next()) {
                let chunks = (0..n).map(|_| (it.next().unwrap_or(0), it.next().unwrap_or(0), [0u8; 16])).collect();
                all.push(PieceCuts { file, a, b, chunks });
            }
        }
        let mut files: HashMap<u64, std::fs::File> = HashMap::new();
        let mut read = |file: u64, at: u64, len: u64| -> anyhow::Result<Vec<u8>> {
            let path = paths.get(file as usize).context("a piece of an unknown file")?;
            let f = match files.entry(file) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(std::fs::File::open(path).with_context(|| path.clone())?)
                }
            };
            let mut b = vec![0u8; len as usize];
            f.read_exact_at(&mut b, at).with_context(|| format!("{path} at {at}+{len}"))?;
            Ok(b)
        };
        match stitch(&all, sizes, scheme, &mut read) {
            Ok((valid, mine)) => {
                for ((file, a), v) in valid {
                    reply.extend([file, a, v]);
                }
                own.extend(mine.into_iter().map(|(_, _, len, f)| (f, len)));
            }
            Err(e) => {
                tracing::error!("{}: {e:#}", scheme.name());
                reply.push(u64::MAX);
            }
        }
    }
    let bytes = comm::broadcast_bytes(world, reply.iter().flat_map(|w| w.to_le_bytes()).collect())?;
    let reply = comm::words(&bytes);
    if reply.first() == Some(&u64::MAX) {
        bail!(
            "{}: the pieces do not tile the files, or rank 0 could not read a boundary (its log says which)",
            scheme.name()
        );
    }
    let valid: HashMap<(u64, u64), u64> = reply.chunks_exact(3).map(|w| ((w[0], w[1]), w[2])).collect();
    let fixups = own.len() as u64;
    cut.records[i] = own;
    for p in pieces {
        let from = valid.get(&(p.file, p.a)).copied().unwrap_or(u64::MAX);
        cut.records[i].extend(p.chunks.iter().filter(|c| c.0 >= from).map(|c| (c.2, c.1)));
    }
    Ok(fixups)
}
