//! The monitor benchmarks: in process over a changelog or event file, through a real broker,
//! and end to end through the fake `lfs`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use super::*;

/// `icicle-bench monitor`.
pub(super) fn monitor(args: MonitorArgs) -> anyhow::Result<ExitCode> {
    let MonitorArgs { format, input, fid_map, stat, emit, batch_size, filter, lru } = args;
    anyhow::ensure!(stat == "stub", "only --stat stub is implemented");
    let v = match format.as_str() {
        "lustre" => monitor_bench(&input, fid_map.as_deref(), emit.as_deref(), batch_size)?,
        "gpfs" => gpfs_bench(&input, emit.as_deref(), batch_size, &filter, lru)?,
        other => anyhow::bail!("--format {other}: give lustre or gpfs"),
    };
    println!("{v}");
    Ok(ExitCode::SUCCESS)
}

/// `icicle-bench monitor-kafka`.
pub(super) fn monitor_kafka(args: MonitorKafkaArgs) -> anyhow::Result<ExitCode> {
    let MonitorKafkaArgs { input, bootstrap, partitions, consumers, batch_size } = args;
    let work = tempfile_dir()?;
    let topic = format!("bench-gpfs-{}-{}", std::process::id(), icicle_core::time::now_epoch());
    let msgs = icicle_testkit::gpfs::messages(&input, 0)?;
    let events = msgs.len() as f64;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let t = Instant::now();
    rt.block_on(async {
        icicle_plugins_kafka::produce::create_topic(&bootstrap, &topic, partitions)
            .await
            .map_err(anyhow::Error::msg)?;
        icicle_plugins_kafka::produce::produce(&bootstrap, &topic, msgs).await.map_err(anyhow::Error::msg)
    })?;
    eprintln!("produced {events} events to {topic} ({partitions} partitions) in {:.2} s", t.elapsed().as_secs_f64());
    for n in consumers {
        let cfg = work.join(format!("gpfs-{n}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[records]\nvisible_to = [\"public\"]\n[sources.f]\ntype = \"gpfs\"\ntopic = \"{topic}\"\ngroup_id = \"bench-{topic}-{n}\"\nconsumers = {n}\nunseeded = true\nbatch_size = {batch_size}\nquiet_period_secs = 0.2\nstate_dir = \"{s}\"\nconnection = {{ bootstrap = \"{bootstrap}\" }}\n[sinks.k]\ntype = \"blackhole\"\n",
                s = work.join(format!("state-{n}")).display()
            ),
        )?;
        let t = Instant::now();
        let out = std::process::Command::new(icicle_binary()?)
            .args(["monitor", "--drain", "--json", "-c"])
            .arg(&cfg)
            .output()?;
        let secs = t.elapsed().as_secs_f64();
        anyhow::ensure!(out.status.success(), "monitor failed: {}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let got = report["f"]["messages"].as_f64().unwrap_or(0.0);
        anyhow::ensure!(got == events, "read {got} of {events} events");
        let reading = report["f"]["reading_seconds"].as_f64().unwrap_or(secs).max(1e-9);
        let line = serde_json::json!({"bench": "monitor-kafka", "partitions": partitions, "consumers": n, "events": events, "seconds": secs, "reading_seconds": reading,
            "events_per_s": events / reading, "events_per_s_with_startup": events / secs,
            "updates": report["f"]["updates"], "deletes": report["f"]["deletes"]});
        println!("{line}");
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(ExitCode::SUCCESS)
}

/// `icicle-bench monitor-e2e`.
pub(super) fn monitor_e2e(args: MonitorE2eArgs) -> anyhow::Result<ExitCode> {
    let MonitorE2eArgs { journal, root, delay_ms, batch_size, cache, modes } = args;
    let testkit = std::env::current_exe()?.with_file_name("icicle-testkit");
    anyhow::ensure!(testkit.exists(), "{} not found: build the workspace binaries", testkit.display());
    let work = tempfile_dir()?;
    let mut rates = Vec::new();
    for mode in &modes {
        let (resolution, reduction) = match mode.as_str() {
            "tree" | "fsmonitor" | "naive" => (mode.as_str(), true),
            "tree-unreduced" => ("tree", false),
            "fsmonitor-unreduced" => ("fsmonitor", false),
            other => anyhow::bail!(
                "--modes: unknown mode `{other}` (tree, fsmonitor, naive, tree-unreduced, fsmonitor-unreduced)"
            ),
        };
        let mut users = journal.as_os_str().to_owned();
        users.push(".users");
        std::fs::write(&users, "cl1 0\n")?;
        let state = work.join(format!("state-{mode}"));
        let _ = std::fs::remove_dir_all(&state);
        let cfg = work.join(format!("{mode}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[records]\nvisible_to = [\"public\"]\n[sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"{delay_ms}\"]\nmount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = {batch_size}\nquiet_period_secs = 0.0\npoll_interval_secs = 0.01\nstate_dir = \"{s}\"\nresolution = \"{resolution}\"\nreduction = {reduction}\nfsmonitor_cache = {cache}\n[sinks.k]\ntype = \"blackhole\"\n",
                k = testkit.display(),
                j = journal.display(),
                r = root.display(),
                s = state.display()
            ),
        )?;
        let t = Instant::now();
        let out = std::process::Command::new(icicle_binary()?)
            .args(["monitor", "--drain", "--json", "-c"])
            .arg(&cfg)
            .output()?;
        let secs = t.elapsed().as_secs_f64();
        anyhow::ensure!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let r = &report["mdt0"];
        let records = r["records"].as_f64().unwrap_or(0.0);
        let line = serde_json::json!({"bench": "monitor-e2e", "mode": mode, "records": records, "seconds": secs, "records_per_s": records / secs,
            "fid2path_calls": r["tree"]["fid2path_calls"], "updates": r["updates"], "deletes": r["deletes"],
            "coalesced": r["reduce"]["coalesced"], "cancelled": r["reduce"]["cancelled"]});
        println!("{line}");
        rates.push(records / secs);
    }
    for (mode, rate) in modes.iter().zip(&rates).skip(1) {
        eprintln!("{} / {mode} throughput: {:.1}x", modes[0], rates[0] / rate.max(1e-9));
    }
    Ok(ExitCode::SUCCESS)
}

/// The record the bench encodes for an updated path (the bench stats nothing).
fn stub_record(path: &str) -> icicle_core::record::FileRecord<'_> {
    icicle_core::record::FileRecord {
        path,
        kind: icicle_core::record::FileKind::File,
        attrs: icicle_core::Attrs { mode: 0o100644, size: path.len() as u64, ..Default::default() },
        storage: None,
    }
}

/// fid2path from a map, directory walks from the same map, renames from the stream.
struct MapResolver<'a> {
    paths: std::collections::HashMap<icicle_plugins_lustre::changelog::Fid, String>,
    all: std::collections::BTreeSet<String>,
    dirs: std::collections::HashSet<String>,
    /// The whole stream: its renames are read (once, on first need) as the lookahead.
    stream: &'a str,
    renames: Option<icicle_plugins_lustre::lookahead::Lookahead>,
}

impl icicle_plugins_lustre::tree::Resolver for MapResolver<'_> {
    fn fid2path(&mut self, fid: &icicle_plugins_lustre::changelog::Fid) -> Option<String> {
        self.paths.get(fid).cloned()
    }
    fn is_dir(&mut self, path: &str) -> bool {
        self.dirs.contains(path)
    }
    fn walk(&mut self, path: &str) -> Vec<String> {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        self.all
            .range(prefix.clone()..)
            .take_while(|p| p.starts_with(&prefix))
            .filter(|p| !self.dirs.contains(*p))
            .map(|p| p[prefix.len()..].to_string())
            .collect()
    }
    fn future_renames(&mut self, after: u64, name: &str) -> Vec<icicle_plugins_lustre::lookahead::FutureRename> {
        self.lookahead().named(name, after)
    }
    fn future_namings(&mut self, after: u64, name: &str) -> Vec<icicle_plugins_lustre::lookahead::FutureNaming> {
        self.lookahead().namings(name, after)
    }
}

impl MapResolver<'_> {
    /// A resolver over `fid_map` (`FID<TAB>path` lines, as the workload writes them); its
    /// stream is set once the changelog is mapped.
    fn load(fid_map: Option<&Path>) -> anyhow::Result<MapResolver<'static>> {
        let mut r = MapResolver {
            paths: Default::default(),
            all: Default::default(),
            dirs: Default::default(),
            stream: "",
            renames: None,
        };
        let Some(m) = fid_map else { return Ok(r) };
        for line in std::fs::read_to_string(m).with_context(|| format!("reading {}", m.display()))?.lines() {
            let Some((f, p)) = line.split_once('\t') else { continue };
            let Ok(fid) = icicle_plugins_lustre::changelog::Fid::parse(f) else { continue };
            let p = if p == "/" { "/".to_string() } else { format!("/{}", p.trim_start_matches('/')) };
            r.paths.insert(fid, p.clone());
            r.all.insert(p);
        }
        let parents: Vec<String> = r
            .all
            .iter()
            .filter_map(|p| p.rsplit_once('/').map(|(d, _)| if d.is_empty() { "/".to_string() } else { d.to_string() }))
            .collect();
        r.dirs.extend(parents);
        Ok(r)
    }

    /// The whole stream's renames and namings, indexed on first need.
    fn lookahead(&mut self) -> &mut icicle_plugins_lustre::lookahead::Lookahead {
        let stream = self.stream;
        self.renames.get_or_insert_with(|| {
            let mut la = icicle_plugins_lustre::lookahead::Lookahead::new(0);
            la.push_text(stream, None);
            la
        })
    }
}

/// A monitor bench's encoder (public records) and its `--emit` file, if any.
fn bench_output(
    emit: Option<&Path>,
) -> anyhow::Result<(icicle_gmeta::PrimaryEncoder, Option<std::io::BufWriter<std::fs::File>>)> {
    let policy = std::sync::Arc::new(icicle_core::policy::RecordPolicy {
        visible_to: vec![icicle_core::policy::VisibleTo::Public],
        fallback: vec![],
        principals: std::sync::Arc::new(icicle_core::policy::PrincipalMap::default()),
        version: "bench".into(),
        ..Default::default()
    });
    let out =
        emit.map(|p| std::fs::File::create(p).map(|f| std::io::BufWriter::with_capacity(1 << 20, f))).transpose()?;
    Ok((icicle_gmeta::PrimaryEncoder::new(policy), out))
}

/// One emitted operation of a monitor bench: an update is encoded (counted in `n` and
/// `bytes`), a delete counted in `n`; with `--emit`, both are written as a JSON line.
fn emit_op(
    enc: &mut icicle_gmeta::PrimaryEncoder,
    buf: &mut Vec<u8>,
    out: Option<&mut std::io::BufWriter<std::fs::File>>,
    path: &str,
    update: Option<&icicle_core::record::FileRecord<'_>>,
    n: &mut u64,
    bytes: &mut u64,
) -> anyhow::Result<()> {
    use std::io::Write;
    match update {
        Some(rec) => {
            buf.clear();
            if enc.encode(rec, buf).is_ok() {
                *n += 1;
                *bytes += buf.len() as u64;
            }
            if let Some(w) = out {
                writeln!(
                    w,
                    "{{\"op\":\"update\",\"path\":{},\"record\":{}}}",
                    serde_json::to_string(path)?,
                    String::from_utf8_lossy(buf)
                )?;
            }
        }
        None => {
            *n += 1;
            if let Some(w) = out {
                writeln!(w, "{{\"op\":\"delete\",\"path\":{}}}", serde_json::to_string(path)?)?;
            }
        }
    }
    Ok(())
}

/// The GPFS monitor's processing path in one process: parse → state → encode, in batches.
pub fn gpfs_bench(
    input: &Path,
    emit: Option<&Path>,
    batch_size: usize,
    filter: &[String],
    lru: usize,
) -> anyhow::Result<serde_json::Value> {
    use icicle_core::traits::{Reducer, StateStore};
    use icicle_plugins_gpfs::state::{NoWalk, Position};
    use icicle_plugins_gpfs::{GpfsEvent, GpfsState, IgnoredEvents, Op, Ops};
    let mask = icicle_plugins_gpfs::event::filter_mask(filter).map_err(|e| anyhow::anyhow!("--filter: {e}"))?;
    let (mut enc, mut out) = bench_output(emit)?;
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    let map = icicle_core::text::map_file(input)?;
    let data: &[u8] = map.as_deref().unwrap_or(&[]);
    let mut state = GpfsState::new(2);
    state.set_lru_capacity(lru);
    let (mut events, mut rejects, mut updates, mut deletes, mut bytes, mut filtered) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut ops = Ops::default();
    let mut buf = Vec::with_capacity(1024);
    let mut batch: Vec<(GpfsEvent, Position)> = Vec::with_capacity(batch_size);
    // Parse → reduce → state → emit, a batch at a time, as the monitor does.
    let mut flush =
        |batch: &mut Vec<(GpfsEvent, Position)>, ops: &mut Ops, state: &mut GpfsState| -> anyhow::Result<()> {
            IgnoredEvents.reduce(batch);
            state.begin_batch();
            for ev in batch.iter() {
                state.apply(ev, &mut NoWalk, ops);
            }
            batch.clear();
            state.end_batch(&mut NoWalk, ops);
            for (path, op) in ops.drain(..) {
                match op {
                    Op::Update(m) => {
                        let rec = icicle_plugins_gpfs::source::record_for(&path, &m);
                        emit_op(&mut enc, &mut buf, out.as_mut(), &path, Some(&rec), &mut updates, &mut bytes)?;
                    }
                    Op::Delete => emit_op(&mut enc, &mut buf, out.as_mut(), &path, None, &mut deletes, &mut bytes)?,
                }
            }
            Ok(())
        };
    let mut rest = data;
    let mut i = 0usize;
    while !rest.is_empty() {
        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        let line = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or(&[]);
        i += 1;
        if line.is_empty() {
            continue;
        }
        events += 1;
        match GpfsEvent::parse_filtered(line, mask) {
            Ok(ev) if ev.is_filtered() => filtered += 1,
            Ok(ev) => batch.push((ev, (0, i as i64))),
            Err(_) => rejects += 1,
        }
        if batch.len() >= batch_size {
            flush(&mut batch, &mut ops, &mut state)?;
        }
    }
    flush(&mut batch, &mut ops, &mut state)?;
    state.finish(&mut NoWalk, &mut ops);
    flush(&mut batch, &mut ops, &mut state)?;
    if let Some(mut w) = out.take() {
        use std::io::Write;
        w.flush()?;
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = (cpu_seconds() - cpu0).max(1e-9);
    Ok(serde_json::json!({
        "records": events, "seconds": secs, "records_per_s": events as f64 / secs, "records_per_cpu_s": events as f64 / cpu,
        "updates": updates, "deletes": deletes, "rejects": rejects, "filtered": filtered, "bytes": bytes, "objects": state.len(), "peak_rss_bytes": peak_rss_bytes(),
        "state_bytes": state.approx_bytes(), "evicted": state.counts.evicted, "evicted_files": state.evicted_files(),
    }))
}

/// Run the monitor bench; returns the JSON line.
pub fn monitor_bench(
    input: &Path,
    fid_map: Option<&Path>,
    emit: Option<&Path>,
    batch_size: usize,
) -> anyhow::Result<serde_json::Value> {
    use icicle_plugins_lustre::changelog::{ChangelogRecord, RecordType};
    use icicle_plugins_lustre::reducer::RuleTable;
    use icicle_plugins_lustre::tree::{DirectoryTree, Ops, PathOp};
    // The fid2path stand-in is loaded before the clock starts; reading the stream is timed.
    let mut resolver = MapResolver::load(fid_map)?;
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    let map = icicle_core::text::map_file(input)?;
    let text = map
        .as_deref()
        .map(std::str::from_utf8)
        .transpose()
        .with_context(|| format!("{} is not UTF-8", input.display()))?
        .unwrap_or("");
    resolver.stream = text;
    let (mut enc, mut out) = bench_output(emit)?;
    let filter_bits: u32 = ["OPEN", "NOPEN", "GXATR", "MARK"]
        .iter()
        .filter_map(|t| RecordType::from_name(t))
        .map(|t| t.bit())
        .fold(0, |a, b| a | b);
    let mut tree = DirectoryTree::new(0);
    let (mut records, mut rejects, mut filtered, mut updates, mut deletes, mut bytes) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut batch: Vec<ChangelogRecord> = Vec::with_capacity(batch_size);
    let mut buf = Vec::with_capacity(1024);
    // One operations map for the whole run: cleared, not freed, between batches.
    let mut ops = Ops::default();
    let mut flush = |batch: &mut Vec<ChangelogRecord>,
                     tree: &mut DirectoryTree,
                     resolver: &mut MapResolver|
     -> anyhow::Result<()> {
        if let (Some(la), Some(first)) = (resolver.renames.as_mut(), batch.first()) {
            la.next_batch(first.index);
        }
        icicle_core::monitor::reduce_apply(Some(&mut RuleTable), tree, batch, resolver, &mut ops);
        batch.clear();
        for (path, op) in ops.drain(..) {
            let rec = matches!(op, PathOp::Update).then(|| stub_record(&path));
            let counter = if rec.is_some() { &mut updates } else { &mut deletes };
            emit_op(&mut enc, &mut buf, out.as_mut(), &path, rec.as_ref(), counter, &mut bytes)?;
        }
        Ok(())
    };
    for line in icicle_plugins_lustre::changelog::lines(text) {
        if line.is_empty() {
            continue;
        }
        records += 1;
        if icicle_plugins_lustre::changelog::line_type_bit(line.as_bytes()) & filter_bits != 0 {
            filtered += 1;
            continue;
        }
        // Parsed in place, as the monitor does.
        batch.push(ChangelogRecord::empty());
        let last = batch.len() - 1;
        match ChangelogRecord::parse_into(line, &mut batch[last]) {
            Ok(()) if batch[last].kind.bit() & filter_bits != 0 => {
                batch.pop();
                filtered += 1;
            }
            Ok(()) => {
                if batch.len() >= batch_size {
                    flush(&mut batch, &mut tree, &mut resolver)?;
                }
            }
            Err(_) => {
                batch.pop();
                rejects += 1;
            }
        }
    }
    flush(&mut batch, &mut tree, &mut resolver)?;
    if let Some(mut w) = out.take() {
        use std::io::Write;
        w.flush()?;
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = (cpu_seconds() - cpu0).max(1e-9);
    Ok(serde_json::json!({
        "records": records, "seconds": secs, "records_per_s": records as f64 / secs, "records_per_cpu_s": records as f64 / cpu,
        "updates": updates, "deletes": deletes, "filtered": filtered, "rejects": rejects, "bytes": bytes,
        "fid2path_calls": tree.counts.fid2path_calls, "peak_rss_bytes": peak_rss_bytes(),
    }))
}
