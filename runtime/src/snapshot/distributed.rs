//! A versioned run across ranks. Each rank holds the share of the previous manifest whose path
//! hashes it owns; a rank that read a record sends its (hash, fingerprint) to the owner, which
//! classifies it and answers whether to send it; a path asked about more than once (two rows,
//! on any ranks) is classified by none and its rows become rejects ([`super::repeated`]), as in
//! one process. Each rank plans the deletes of its share under the unknown scopes of every
//! rank; the reject ceiling and the deletion guard are decided on the sums of all ranks, so
//! every rank decides alike. Rank 0 seals the new manifest (every
//! rank's parts) before anything is delivered and commits it after every rank delivered.

use std::collections::HashSet;
use std::path::PathBuf;

use icicle_core::config::{EmitMode, SnapshotSettings};
use icicle_core::error::IcicleError;
use icicle_core::scope::{Scope, UnknownScopes};

use super::cluster::{hash_owner, put_bytes, Cluster, Fields};
use super::manifest::{self, Change, PreviousManifest, Sighting};
use super::rejects::RejectLog;
use super::repeated::{self, RankRows};
use super::spool::Outbox;
use super::worker::RecordKey;
use super::{io, SnapshotJob, SnapshotSummary};

fn internal(what: &str, e: String) -> IcicleError {
    IcicleError::Internal(format!("{what} across ranks: {e}"))
}

/// The part number of a rank's manifest file its worker writes.
pub(super) fn worker_part(rank: usize) -> usize {
    (rank + 1) * 1000
}

/// The part number of a rank's manifest file of carried-over lines.
pub(super) fn carry_part(rank: usize) -> usize {
    worker_part(rank) + 999
}

/// An owner's answer about one record: not to send it (unchanged), to send it, or that its
/// path was read more than once in this run (by any ranks).
const SKIP: u8 = 0;
const SEND: u8 = 1;
const REPEATED: u8 = 2;

/// Classify this rank's records on the ranks owning their paths; returns the send flag of
/// each encoded entry, in order, and adds the owners' counts to `summary`. A path read more
/// than once is classified by none of its rows, which become rejects ([`repeated::reject`]).
pub(super) fn classify(
    cluster: &dyn Cluster,
    previous: &PreviousManifest,
    keys: &[RecordKey],
    rows: &RankRows<'_>,
    emit: EmitMode,
    summary: &mut SnapshotSummary,
) -> Result<Vec<bool>, IcicleError> {
    let n = cluster.size();
    let mut out = vec![Vec::new(); n];
    for k in keys {
        let o = &mut out[hash_owner(k.hash, n)];
        o.extend_from_slice(&k.hash.to_le_bytes());
        o.extend_from_slice(&k.was.to_le_bytes());
        o.extend_from_slice(&k.now.to_le_bytes());
    }
    let asked = cluster.exchange(out).map_err(|e| internal("sending records to classify", e))?;
    let answers = answer(previous, &asked, emit, summary)?;
    let replies = cluster.exchange(answers).map_err(|e| internal("answering classifications", e))?;
    let mut cursor = vec![0usize; n];
    let mut send = Vec::with_capacity(keys.len());
    let mut again = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let o = hash_owner(k.hash, n);
        let flag = replies[o]
            .get(cursor[o])
            .copied()
            .ok_or_else(|| internal("classifying", format!("rank {o} answered too few")))?;
        cursor[o] += 1;
        if flag == REPEATED {
            again.push(i);
        }
        if k.encoded {
            send.push(flag == SEND);
        }
    }
    // As in one process: what is emitted is what is sent.
    summary.emitted = send.iter().filter(|s| **s).count() as u64;
    repeated::reject(cluster, keys, &again, rows, summary)?;
    Ok(send)
}

/// On the owner: classify every rank's records (`asked`, in rank order) and answer each,
/// counting them in `summary`; a path asked about more than once is left unclassified (its
/// previous line is then carried over, as in one process) and answered [`REPEATED`].
fn answer(
    previous: &PreviousManifest,
    asked: &[Vec<u8>],
    emit: EmitMode,
    summary: &mut SnapshotSummary,
) -> Result<Vec<Vec<u8>>, IcicleError> {
    let mut changes: Vec<Vec<Option<Change>>> = Vec::with_capacity(asked.len());
    let mut repeated = HashSet::new();
    let mut firsts = Vec::new();
    for (sender, buf) in asked.iter().enumerate() {
        let mut mine = Vec::with_capacity(buf.len() / 32);
        for (pos, key) in buf.chunks_exact(32).enumerate() {
            let short = || internal("classifying", "short key".into());
            let hash = u128::from_le_bytes(key[..16].try_into().map_err(|_| short())?);
            let was = u64::from_le_bytes(key[16..24].try_into().map_err(|_| short())?);
            let now = u64::from_le_bytes(key[24..].try_into().map_err(|_| short())?);
            // Here a sighting names the asking rank and the record's place in its request.
            let at = Sighting::new(u32::try_from(sender).unwrap_or(u32::MAX), pos as u64, false);
            match previous.classify_at(hash, was, now, at) {
                Ok(change) => mine.push(Some(change)),
                Err((first, _)) => {
                    mine.push(None);
                    if repeated.insert(hash) {
                        firsts.push(first);
                    }
                }
            }
        }
        changes.push(mine);
    }
    for first in firsts {
        if let (Some(sender), Some(pos), _) = first.place() {
            if let Some(c) = changes.get_mut(sender as usize).and_then(|m| m.get_mut(pos as usize)) {
                *c = None;
            }
        }
    }
    for hash in &repeated {
        previous.forget(*hash);
    }
    let mut answers = Vec::with_capacity(changes.len());
    for mine in changes {
        let mut reply = Vec::with_capacity(mine.len());
        for change in mine {
            reply.push(match change {
                None => REPEATED,
                Some(c) => {
                    match c {
                        Change::Created => summary.created += 1,
                        Change::Updated => summary.updated += 1,
                        Change::Unchanged => summary.unchanged += 1,
                    }
                    if c != Change::Unchanged || emit == EmitMode::All {
                        SEND
                    } else {
                        SKIP
                    }
                }
            });
        }
        answers.push(reply);
    }
    Ok(answers)
}

fn scope_bytes(out: &mut Vec<u8>, scope: &Scope, input: &str, reason: &str) {
    let (tag, text) = match scope {
        Scope::All => (0u8, ""),
        Scope::Subtree(p) => (1, p.as_str()),
        Scope::Children(p) => (2, p.as_str()),
        Scope::Exact(p) => (3, p.as_str()),
    };
    out.push(tag);
    for s in [text, input, reason] {
        put_bytes(out, s.as_bytes());
    }
}

/// Every rank's unknown scopes (what it could not read), on every rank.
fn all_scopes(cluster: &dyn Cluster, rejects: &RejectLog) -> Result<Vec<(Scope, String, String)>, IcicleError> {
    let mut mine = Vec::new();
    for (s, input, reason) in rejects.scopes() {
        scope_bytes(&mut mine, &s, &input, &reason);
    }
    let all = cluster.exchange(vec![mine; cluster.size()]).map_err(|e| internal("sharing unknown scopes", e))?;
    let mut out = Vec::new();
    for buf in &all {
        let mut f = Fields::new(buf);
        while !f.is_empty() {
            let tag = f.take(1).map_err(|e| internal("reading unknown scopes", e))?[0];
            let text = f.str().map_err(|e| internal("reading unknown scopes", e))?.to_string();
            let input = f.str().map_err(|e| internal("reading unknown scopes", e))?.to_string();
            let reason = f.str().map_err(|e| internal("reading unknown scopes", e))?.to_string();
            let scope = match tag {
                0 => Scope::All,
                1 => Scope::Subtree(text),
                2 => Scope::Children(text),
                _ => Scope::Exact(text),
            };
            out.push((scope, input, reason));
        }
    }
    Ok(out)
}

/// The reject ceiling on the rows and rejects of every rank.
pub(super) fn check_rejects(
    cluster: &dyn Cluster,
    settings: &SnapshotSettings,
    rejects: &RejectLog,
    summary: &mut SnapshotSummary,
) -> Result<(), IcicleError> {
    summary.unreadable_inputs = rejects.unreadable_inputs();
    let t = cluster
        .all_sum(&[summary.rows, summary.rejects, summary.unreadable_inputs])
        .map_err(|e| internal("counting rejects", e))?;
    let row_rejects = t[1].saturating_sub(t[2]);
    let ratio = if t[0] > 0 { row_rejects as f64 / t[0] as f64 } else { 0.0 };
    summary.reject_threshold_exceeded =
        settings.max_rejects.is_some_and(|m| t[1] > m) || settings.max_reject_ratio.is_some_and(|r| ratio > r);
    Ok(())
}

/// Everyone has reached this point.
fn barrier(cluster: &dyn Cluster) -> Result<(), IcicleError> {
    cluster.all_sum(&[]).map(|_| ()).map_err(|e| internal("waiting for every rank", e))
}

/// Deletes, the held documents, the collective manifest commit and the acknowledgement.
#[allow(clippy::too_many_arguments)]
pub(super) async fn finish(
    job: &mut SnapshotJob,
    cluster: &dyn Cluster,
    dir: &std::path::Path,
    prev: &PreviousManifest,
    rejects: &RejectLog,
    outbox: Outbox,
    pipeline_subjects: &[(&'static str, Vec<String>)],
    send: &[bool],
    summary: &mut SnapshotSummary,
) -> Result<(), IcicleError> {
    let settings = job.settings.clone();
    let (rank, n) = (cluster.rank(), cluster.size());
    let scopes = all_scopes(cluster, rejects)?;
    let unknown = UnknownScopes::new(scopes.iter().map(|(s, _, _)| s));
    (summary.unknown_scopes, summary.unknown_scope_count) =
        icicle_core::scope::summarize(scopes.iter().map(|(s, i, r)| (s, i.as_str(), r.as_str())), 50);
    let mut commit = !summary.reject_threshold_exceeded;
    let mut deletes = Vec::new();
    if commit {
        let d = super::deletes::plan_share(dir, prev, &unknown, pipeline_subjects, carry_part(rank), Some((rank, n)))
            .map_err(|e| io("planning the deletes", e))?;
        let totals = cluster
            .all_sum(&[d.primary + d.aggregates, prev.len() as u64 + d.previous_aggregates])
            .map_err(|e| internal("counting deletes", e))?;
        summary.deletes_withheld = d.withheld;
        summary.aggregate_deletes_withheld = d.aggregates_withheld;
        summary.delete_guard = super::deletes::guard(&settings, totals[0], totals[1]);
        if summary.delete_guard.is_some() {
            commit = false;
        } else {
            summary.deleted = d.primary;
            summary.aggregates_deleted = d.aggregates;
            deletes = d.subjects;
        }
    } else {
        tracing::warn!(
            message = "reject threshold exceeded: nothing held is delivered, no deletes, the manifest is not committed"
        );
    }
    // Every rank's parts and pipeline files are in `manifest.new/` before it is sealed.
    barrier(cluster)?;
    let mut sealed = None;
    if commit {
        let path = if rank == 0 {
            manifest::seal(dir).map_err(|e| io("sealing the manifest", e))?.display().to_string()
        } else {
            String::new()
        };
        let path = cluster.broadcast(path.into_bytes()).map_err(|e| internal("sharing the sealed manifest", e))?;
        sealed = Some(PathBuf::from(
            String::from_utf8(path).map_err(|e| internal("sharing the sealed manifest", e.to_string()))?,
        ));
        outbox.release_filtered(&mut job.sinks, settings.document_limit(), send).await?;
    } else {
        summary.batches_withheld = outbox.discard();
    }
    crate::fault::fault_point("deletes-planned");
    for b in icicle_gmeta::delete_batches(deletes, settings.document_limit()) {
        summary.delete_batches += 1;
        crate::deliver::deliver_all(&mut job.sinks, &icicle_core::batch::DocumentBatch::Delete(b)).await?;
    }
    crate::fault::fault_point("deletes-delivered");
    for (_, sink) in job.sinks.iter_mut() {
        sink.close().await?;
    }
    if let Some(sealed) = sealed {
        let resend: Vec<&str> = job.sinks.iter().flat_map(|(_, k)| k.dead_lettered()).map(String::as_str).collect();
        manifest::mark_resend_as(&sealed, &format!("resend.rank-{rank}.jsonl"), &resend)
            .map_err(|e| io("listing the dead-lettered subjects", e))?;
        // Every rank delivered; only then is the new manifest made current.
        barrier(cluster)?;
        if rank == 0 {
            manifest::commit(dir, &sealed).map_err(|e| io("committing the manifest", e))?;
        }
        barrier(cluster)?;
    }
    for (name, src) in &job.sources {
        if let Err(e) = src.acknowledge().await {
            tracing::warn!(message = "source acknowledgement failed", source = %name, error = %e);
        }
    }
    Ok(())
}
