//! Paths read more than once in a versioned run across ranks. The rank owning a path's hash
//! sees every rank's record of it when it classifies ([`super::distributed::classify`]); a
//! path asked about more than once is classified by none of them and answered as repeated.
//! Then, as in one process ([`super::duplicates`]): every rank leaves its rows' lines out of
//! its own manifest part (reading their paths back from them), sends the owner where it read
//! each row, and the owner answers every row with the one reason that names all of them; each
//! rank rejects its own rows (in its rejects file, under the path's exact scope, so the
//! previous run's line is carried over) and sends none of them.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use icicle_core::error::IcicleError;
use icicle_core::record::Reject;
use icicle_core::scope::Scope;

use super::cluster::{hash_owner, put_bytes, Cluster, Fields};
use super::duplicates::{reason, row, Duplicates};
use super::manifest;
use super::rejects::RejectLog;
use super::worker::RecordKey;
use super::SnapshotSummary;

fn internal(what: &str, e: String) -> IcicleError {
    IcicleError::Internal(format!("{what} across ranks: {e}"))
}

/// A row of this rank whose path its owner found read more than once: the owner, and the
/// row's reject (its reason comes from the owner).
struct Row {
    owner: usize,
    reject: Reject,
}

/// This rank's part of a versioned run's state: where its manifest part is, how it numbered
/// its inputs, and where its rejects go.
pub(super) struct RankRows<'a> {
    pub(super) dir: &'a Path,
    pub(super) part: usize,
    pub(super) inputs: &'a Duplicates,
    pub(super) rejects: &'a RejectLog,
}

/// Collective (every rank, after the classification): reject the rows of `keys` numbered in
/// `again` (their owners answered that their paths were read more than once), each naming
/// every row of every rank that read its path; their lines leave this rank's manifest part.
pub(super) fn reject(
    cluster: &dyn Cluster,
    keys: &[RecordKey],
    again: &[usize],
    rank: &RankRows<'_>,
    summary: &mut SnapshotSummary,
) -> Result<(), IcicleError> {
    let n = cluster.size();
    let hashes: HashSet<u128> = again.iter().filter_map(|&i| keys.get(i)).map(|k| k.hash).collect();
    let paths = manifest::drop_new_lines(rank.dir, &hashes, Some(rank.part))
        .map_err(|e| IcicleError::Internal(format!("leaving paths read twice out of the manifest: {e}")))?;
    let mut out = vec![Vec::new(); n];
    let mut rows = Vec::with_capacity(again.len());
    for k in again.iter().filter_map(|&i| keys.get(i)) {
        let (input, at, by_offset) = rank.inputs.place(k.at);
        let owner = hash_owner(k.hash, n);
        let o = &mut out[owner];
        o.extend_from_slice(&k.hash.to_le_bytes());
        put_bytes(o, paths.get(&k.hash).map_or("", String::as_str).as_bytes());
        put_bytes(o, input.as_deref().unwrap_or("").as_bytes());
        o.extend_from_slice(&at.unwrap_or(u64::MAX).to_le_bytes());
        o.push(u8::from(by_offset));
        rows.push(Row { owner, reject: row(input.as_deref(), at, by_offset) });
    }
    let asked = cluster.exchange(out).map_err(|e| internal("sending the rows of paths read twice", e))?;
    let answers = reasons(&asked).map_err(|e| internal("naming the rows of paths read twice", e))?;
    let replies = cluster.exchange(answers).map_err(|e| internal("answering the rows of paths read twice", e))?;
    let mut from: Vec<Fields<'_>> = replies.iter().map(|r| Fields::new(r)).collect();
    for Row { owner, mut reject } in rows {
        let f = from
            .get_mut(owner)
            .ok_or_else(|| internal("naming the rows of paths read twice", format!("no answer from rank {owner}")))?;
        let read = |f: &mut Fields<'_>| {
            f.str().map(str::to_string).map_err(|e| internal("reading the rows of paths read twice", e))
        };
        let path = read(f)?;
        reject.reason = read(f)?;
        rank.rejects.push(reject.scoped(Scope::Exact(path)));
        // Counted as a record when read: a reject, as in one process.
        summary.records = summary.records.saturating_sub(1);
        summary.rejects += 1;
    }
    if !again.is_empty() {
        tracing::warn!(
            message = "paths read more than once: none of their rows is indexed (see the rejects file)",
            rows = again.len()
        );
    }
    Ok(())
}

/// On the owner: every rank's rows of each path read more than once (hash, path, input,
/// place, whether the place is a byte offset); answers each rank, row for row, with the path
/// and the reason naming every row.
fn reasons(asked: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, String> {
    let mut by_hash: HashMap<u128, (String, Vec<Reject>)> = HashMap::new();
    let mut order: Vec<Vec<u128>> = Vec::with_capacity(asked.len());
    for buf in asked {
        let mut f = Fields::new(buf);
        let mut mine = Vec::new();
        while !f.is_empty() {
            let hash = u128::from_le_bytes(f.take(16)?.try_into().map_err(|_| "short hash".to_string())?);
            let path = f.str()?;
            let input = f.str()?;
            let at = f.u64()?;
            let by_offset = f.take(1)?[0] == 1;
            let e = by_hash.entry(hash).or_default();
            if e.0.is_empty() {
                e.0 = path.to_string();
            }
            e.1.push(row((!input.is_empty()).then_some(input), (at != u64::MAX).then_some(at), by_offset));
            mine.push(hash);
        }
        order.push(mine);
    }
    let named: HashMap<u128, (String, String)> = by_hash
        .into_iter()
        .map(|(h, (path, mut rows))| {
            let why = reason(&path, &mut rows);
            (h, (path, why))
        })
        .collect();
    let mut answers = Vec::with_capacity(order.len());
    for hashes in order {
        let mut out = Vec::new();
        for h in hashes {
            let (path, why) = named.get(&h).ok_or_else(|| format!("no reason for {h:032x}"))?;
            put_bytes(&mut out, path.as_bytes());
            put_bytes(&mut out, why.as_bytes());
        }
        answers.push(out);
    }
    Ok(answers)
}
