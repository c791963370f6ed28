//! What a versioned run deletes: the previous run's subjects it did not see, less those in a
//! scope it could not read (carried over into the new manifest), checked against the
//! deletion guard before anything is deleted.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use super::manifest::{ManifestWriter, PreviousManifest};
use icicle_core::config::SnapshotSettings;
use icicle_core::scope::UnknownScopes;
use icicle_gmeta::push_json_str;

/// The subjects in a pipeline file; none when it does not exist (a manifest from before
/// aggregates were remembered, or a pipeline that produced nothing).
fn read_subjects(path: &Path) -> std::io::Result<Vec<String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
        })
        .collect()
}

fn write_subjects<'a>(path: &Path, subjects: impl Iterator<Item = &'a str>) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut line = Vec::with_capacity(256);
    for s in subjects {
        line.clear();
        push_json_str(&mut line, s);
        line.push(b'\n');
        out.write_all(&line)?;
    }
    out.flush()?;
    out.get_ref().sync_all()
}

/// The subject of a GMetaEntry.
pub fn entry_subject(entry: &[u8]) -> Result<String, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Entry {
        subject: String,
    }
    serde_json::from_slice::<Entry>(entry).map(|e| e.subject)
}

/// The pipeline named by a subjects file: `pipeline-<name>.jsonl`, or
/// `pipeline-<name>.rank-<R>.jsonl` from a run across ranks.
fn pipeline_of(file: &str) -> Option<&str> {
    let stem = file.strip_prefix("pipeline-")?.strip_suffix(".jsonl")?;
    Some(match stem.rsplit_once(".rank-") {
        Some((name, rank)) if rank.parse::<usize>().is_ok() => name,
        _ => stem,
    })
}

/// The pipelines' subject files of `dir`, with their pipeline's name.
fn pipeline_files(dir: &Path) -> std::io::Result<Vec<(String, std::path::PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(pipeline_of) {
            out.push((name.to_string(), path.clone()));
        }
    }
    out.sort();
    Ok(out)
}

/// Whether this rank owns `subject` (always, in one process).
fn owns(share: Option<(usize, usize)>, subject: &str) -> bool {
    share.is_none_or(|(rank, n)| super::cluster::owner(subject, n) == rank)
}

/// The subjects of pipeline `name` in every loaded manifest directory (committed, then
/// pending), once, that this rank owns.
fn previous_subjects(
    previous: &PreviousManifest,
    name: &str,
    share: Option<(usize, usize)>,
) -> std::io::Result<Vec<String>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for d in previous.dirs() {
        for (_, f) in pipeline_files(d)?.into_iter().filter(|(n, _)| n == name) {
            for s in read_subjects(&f)? {
                if owns(share, &s) && seen.insert(s.clone()) {
                    out.push(s);
                }
            }
        }
    }
    Ok(out)
}

/// The deletes a versioned run owes, and what it carries over.
#[derive(Debug, Default)]
pub struct Deletes {
    /// Subjects to delete: primary records first, then pipeline subjects.
    pub subjects: Vec<String>,
    /// The primary records deleted, as the previous manifest had them (a delete a sink
    /// dead-letters is kept in the new manifest, owed to the next run).
    pub gone: Vec<super::manifest::Gone>,
    /// Of which primary records.
    pub primary: u64,
    /// Primary subjects carried over because their scope is unknown.
    pub withheld: u64,
    /// Pipeline subjects deleted and carried over.
    pub aggregates: u64,
    pub aggregates_withheld: u64,
    /// Pipeline subjects the previous run had.
    pub previous_aggregates: u64,
}

/// Work out the deletes of a run whose records went into `state_dir/manifest.new/`: the
/// previous run's subjects not seen, less those `unknown` covers, which are written into the
/// new manifest so a later run still knows them. Each pipeline's subjects are written too.
pub fn plan(
    state_dir: &Path,
    previous: &PreviousManifest,
    unknown: &UnknownScopes,
    pipelines: &[(&'static str, Vec<String>)],
    part: usize,
) -> std::io::Result<Deletes> {
    plan_share(state_dir, previous, unknown, pipelines, part, None)
}

/// [`plan`] for one rank of a run across ranks (`share`: rank, ranks): the previous manifest
/// holds this rank's share, `pipelines` the subjects this rank emitted, and only the
/// previous pipeline subjects it owns are considered; its files carry its rank.
pub fn plan_share(
    state_dir: &Path,
    previous: &PreviousManifest,
    unknown: &UnknownScopes,
    pipelines: &[(&'static str, Vec<String>)],
    part: usize,
    share: Option<(usize, usize)>,
) -> std::io::Result<Deletes> {
    let file_of = |name: &str| match share {
        Some((rank, _)) => format!("pipeline-{name}.rank-{rank}.jsonl"),
        None => format!("pipeline-{name}.jsonl"),
    };
    let mut out = Deletes::default();
    let gone = previous.deleted_subjects()?;
    let mut carry: Option<ManifestWriter> = None;
    for g in gone {
        // A hashed subject from a manifest without its path cannot be placed: unknown
        // whenever anything is (`covers` of a non-path).
        if unknown.covers(g.path.as_deref().unwrap_or(&g.subject)) {
            out.withheld += 1;
            if carry.is_none() {
                carry = Some(ManifestWriter::create(state_dir, part)?);
            }
            if let Some(c) = &mut carry {
                c.push(g.hash, g.fingerprint, &g.subject, g.path.as_deref())?;
            }
        } else {
            out.subjects.push(g.subject.clone());
            out.gone.push(g);
        }
    }
    if let Some(c) = carry {
        c.finish()?;
    }
    out.primary = out.subjects.len() as u64;
    let new_dir = state_dir.join("manifest.new");
    for (name, now) in pipelines {
        let present: HashSet<&str> = now.iter().map(String::as_str).collect();
        let mut keep: Vec<&str> = now.iter().map(String::as_str).collect();
        let before = previous_subjects(previous, name, share)?;
        out.previous_aggregates += before.len() as u64;
        for s in before.iter().filter(|s| !present.contains(s.as_str())) {
            if unknown.covers_aggregate(s) {
                out.aggregates_withheld += 1;
                keep.push(s);
            } else {
                out.aggregates += 1;
                out.subjects.push(s.clone());
            }
        }
        if !keep.is_empty() {
            // The subjects of a pipeline's entries, one JSON string a line, next to the parts.
            write_subjects(&new_dir.join(file_of(name)), keep.into_iter())?;
        }
    }
    // A pipeline that did not run this time keeps its previous subjects.
    let mut others = std::collections::BTreeSet::new();
    for d in previous.dirs() {
        for (name, _) in pipeline_files(d)? {
            if !pipelines.iter().any(|(n, _)| *n == name) {
                others.insert(name);
            }
        }
    }
    for name in others {
        let subjects = previous_subjects(previous, &name, share)?;
        out.previous_aggregates += subjects.len() as u64;
        if !subjects.is_empty() {
            write_subjects(&new_dir.join(file_of(&name)), subjects.iter().map(String::as_str))?;
        }
    }
    Ok(out)
}

/// The file, in a manifest directory, holding how many runs in a row withheld deletes.
const WITHHELD_RUNS: &str = "withheld-runs";

/// Count this run (`withheld`: whether it withheld any delete) after
/// the runs of the previous manifest, and write the count into the new one (`manifest.new/`,
/// sealed and committed with it; no file when it is 0). Returns the count (0 when this run withheld nothing).
pub fn count_withheld_run(state_dir: &Path, previous: &PreviousManifest, withheld: bool) -> std::io::Result<u32> {
    let before = previous
        .dirs()
        .next()
        .and_then(|d| std::fs::read_to_string(d.join(WITHHELD_RUNS)).ok())
        .and_then(|t| t.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let runs = if withheld { before.saturating_add(1) } else { 0 };
    // No file: no run withheld anything.
    if runs > 0 {
        icicle_core::durable::write_atomic(
            &state_dir.join("manifest.new").join(WITHHELD_RUNS),
            format!("{runs}\n").as_bytes(),
        )?;
    }
    Ok(runs)
}

/// Why a run that is the `runs`-th in a row to withhold deletes fails, if it does.
pub fn withheld_too_long(settings: &SnapshotSettings, runs: u32) -> Option<String> {
    let max = settings.max_withheld_runs;
    (max > 0 && runs > max).then(|| {
        format!(
            "{runs} runs in a row withheld deletes (more than snapshot.max_withheld_runs = {max}): an input keeps failing or is not whole, and the index keeps what it may no longer hold; fix the input (see unknown_scopes and the rejects file)"
        )
    })
}

/// Why the deletion guard stops a run that would delete `n` of `previous` subjects (primary
/// and aggregate records), if it does: more than `max_delete`, or more than
/// `max_delete_ratio` of the previous index.
pub fn guard(settings: &SnapshotSettings, n: u64, previous: u64) -> Option<String> {
    if settings.allow_mass_delete || n == 0 {
        return None;
    }
    if let Some(max) = settings.max_delete {
        if n > max {
            return Some(format!("the run would delete {n} subjects, more than snapshot.max_delete = {max}"));
        }
    }
    let ratio = n as f64 / previous.max(1) as f64;
    (ratio > settings.max_delete_ratio).then(|| {
        format!(
            "the run would delete {n} of the previous run's {previous} subjects ({:.1}%), more than snapshot.max_delete_ratio = {}",
            ratio * 100.0,
            settings.max_delete_ratio
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_by_count_and_ratio() {
        let s = SnapshotSettings::default();
        assert_eq!(guard(&s, 0, 0), None);
        assert_eq!(guard(&s, 20, 100), None, "20% is not more than 0.2");
        assert!(guard(&s, 21, 100).unwrap().contains("21 of the previous run's 100 subjects (21.0%)"));
        let s = SnapshotSettings { max_delete: Some(10), ..s };
        assert_eq!(guard(&s, 10, 1000), None);
        assert!(guard(&s, 11, 1000).unwrap().contains("more than snapshot.max_delete = 10"));
        assert_eq!(guard(&SnapshotSettings { allow_mass_delete: true, ..s }, 100, 100), None);
    }
}
