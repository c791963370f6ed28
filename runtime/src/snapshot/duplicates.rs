//! A path a versioned run reads more than once (two rows of a listing, or of two listings,
//! name it): which row is the file is unknown, so neither is indexed. Every row naming it is a
//! reject that names all of them; the path keeps what the index held (its previous line is
//! carried over under the rejects' exact scope, its deletion withheld), and the next run with
//! the same input decides the same.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use icicle_core::config::EmitMode;
use icicle_core::record::Reject;
use icicle_core::scope::Scope;

use super::manifest::{Change, PreviousManifest, Sighting};
use super::rejects::RejectLog;
use super::SnapshotSummary;

/// The rows of one path read more than once: the first (and how it was classified), then
/// the others.
struct Repeated {
    path: String,
    first: (Sighting, Change),
    again: Vec<Sighting>,
}

/// The inputs of a run by number, and the paths found more than once; shared by the workers.
#[derive(Default)]
pub(super) struct Duplicates {
    inputs: Mutex<Vec<String>>,
    found: Mutex<HashMap<u128, Repeated>>,
}

/// What the run leaves out because of repeated paths: their subjects (the first row's entry
/// may already be held for delivery) and path hashes (its manifest line).
#[derive(Default)]
pub(super) struct LeftOut {
    pub(super) subjects: HashSet<String>,
    pub(super) hashes: HashSet<u128>,
}

impl Duplicates {
    /// The number of input `name` (a split), for [`Sighting::new`].
    pub(super) fn input(&self, name: &str) -> u32 {
        let mut inputs = self.inputs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        inputs.push(name.to_string());
        u32::try_from(inputs.len() - 1).unwrap_or(u32::MAX)
    }

    /// The input (its name), place and whether the place is a byte offset of the row read at
    /// `s`, as this process numbered its inputs.
    pub(super) fn place(&self, s: Sighting) -> (Option<String>, Option<u64>, bool) {
        let (input, at, by_offset) = s.place();
        let inputs = self.inputs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (input.and_then(|i| inputs.get(i as usize)).cloned(), at, by_offset)
    }

    /// `path` (hash `hash`) read again `at`, first read at `first`.
    pub(super) fn found(&self, hash: u128, path: &str, first: (Sighting, Change), at: Sighting) {
        let mut found = self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        found
            .entry(hash)
            .or_insert_with(|| Repeated { path: path.to_string(), first, again: Vec::new() })
            .again
            .push(at);
    }

    /// Reject every row of each repeated path (naming all of them), undo the first row's
    /// counts, and let the previous run's line of the path be carried over. The later rows
    /// were counted as rejects when read.
    pub(super) fn resolve(
        self,
        previous: &PreviousManifest,
        emit: EmitMode,
        rejects: &RejectLog,
        summary: &mut SnapshotSummary,
    ) -> LeftOut {
        let inputs = self.inputs.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = self.found.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = LeftOut::default();
        let mut sorted: Vec<(u128, Repeated)> = found.into_iter().collect();
        sorted.sort_by(|a, b| a.1.path.cmp(&b.1.path));
        for (hash, r) in sorted {
            previous.forget(hash);
            match r.first.1 {
                Change::Created => summary.created -= 1,
                Change::Updated => summary.updated -= 1,
                Change::Unchanged => summary.unchanged -= 1,
            }
            if r.first.1 != Change::Unchanged || emit == EmitMode::All {
                summary.emitted = summary.emitted.saturating_sub(1);
            }
            summary.records -= 1;
            summary.rejects += 1;
            let mut rows: Vec<Reject> =
                std::iter::once(r.first.0).chain(r.again.iter().copied()).map(|s| row_of(&inputs, s)).collect();
            let reason = reason(&r.path, &mut rows);
            for mut row in rows {
                row.reason.clone_from(&reason);
                rejects.push(row.scoped(Scope::Exact(r.path.clone())));
            }
            out.subjects.insert(icicle_gmeta::subject_for(&r.path).into_owned());
            out.hashes.insert(hash);
        }
        if !out.hashes.is_empty() {
            tracing::warn!(
                message = "paths read more than once: none of their rows is indexed (see the rejects file)",
                paths = out.hashes.len()
            );
        }
        out
    }
}

/// The reject of the row read at `s`.
fn row_of(inputs: &[String], s: Sighting) -> Reject {
    let (input, at, by_offset) = s.place();
    row(input.and_then(|i| inputs.get(i as usize)).map(String::as_str), at, by_offset)
}

/// The reject of a row of `input` (unknown: `None`) at byte offset `at` (`by_offset`) or
/// numbered `at`, without its reason yet.
pub(super) fn row(input: Option<&str>, at: Option<u64>, by_offset: bool) -> Reject {
    let input = input.unwrap_or("(an input of this run)");
    match at {
        Some(o) if by_offset => Reject::at_offset(input, o, ""),
        Some(r) => Reject::at_row(input, r, ""),
        None => Reject::row(input, "", None),
    }
}

/// The reason of every row of `path` read more than once (`rows`, which get their lines and
/// are sorted by input and place, so that the reason is the same however the rows were
/// read): it names all of them.
pub(super) fn reason(path: &str, rows: &mut [Reject]) -> String {
    super::rejects::resolve_lines(rows);
    rows.sort_by(|a, b| (&a.input, a.line, a.offset).cmp(&(&b.input, b.line, b.offset)));
    let places: Vec<String> = rows.iter().map(place_of).collect();
    format!("{path:?}: read {} times ({}): which is the file is unknown, so none is indexed and the index keeps what it held", rows.len(), places.join(", "))
}

/// `input line N` (or byte offset, or row) of a reject.
fn place_of(r: &Reject) -> String {
    match (r.line, r.offset) {
        (Some(l), _) => format!("{} line {l}", r.input),
        (None, Some(o)) => format!("{} byte {o}", r.input),
        (None, None) => r.input.clone(),
    }
}
