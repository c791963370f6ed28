//! The counting pipeline's hand-off, as the seed runs it: its per-(principal, shard) counts go
//! to the sinks of `[counting] sinks` (the seed's counts topic) with an end marker; a later
//! step rebuilds the compact CSV from them ([`rebuild`]); the aggregate pipeline checks each
//! principal's file count against the counts ([`check`]).
//!
//! One entry per (principal, shard) with a count, in the GMetaEntry shape every sink carries:
//! `{"subject": "<version>/<principal>#<shard>", "visible_to": [], "content": {"version",
//! "principal", "shard", "count"}}`; then `{"subject": "<version>/#end", "visible_to": [],
//! "content": {"version", "end": true, "messages", "finished_at"}}`.

use std::collections::{BTreeMap, HashMap};

use super::counting::{rows_of, CountMaps, CountRow};
use super::{PrincipalStats, SHARDS};

/// The entries of one run's counts: every (principal, shard) with a count, users, groups and
/// directories in order, then the end marker.
pub(super) fn shard_entries(m: &CountMaps, version: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut push = |principal: &str, shards: &[u64; SHARDS]| {
        for (shard, count) in shards.iter().enumerate().filter(|(_, c)| **c > 0) {
            let entry = serde_json::json!({
                "subject": format!("{version}/{principal}#{shard}"),
                "visible_to": [],
                "content": {"version": version, "principal": principal, "shard": shard, "count": count},
            });
            out.push(entry.to_string().into_bytes());
        }
    };
    let mut users: Vec<_> = m.users.iter().collect();
    users.sort_by_key(|(k, _)| **k);
    for (u, c) in users {
        push(&format!("u{u}"), c);
    }
    let mut groups: Vec<_> = m.groups.iter().collect();
    groups.sort_by_key(|(k, _)| **k);
    for (g, c) in groups {
        push(&format!("g{g}"), c);
    }
    let mut dirs: Vec<_> = m.dirs.iter().collect();
    dirs.sort_by(|a, b| a.0.cmp(b.0));
    for (d, c) in dirs {
        push(d, c);
    }
    let end = serde_json::json!({
        "subject": format!("{version}/#end"),
        "visible_to": [],
        "content": {"version": version, "end": true, "messages": out.len(), "finished_at": icicle_core::time::now_epoch()},
    });
    out.push(end.to_string().into_bytes());
    out
}

/// A counts principal: `u<uid>`, `g<gid>`, or a directory path.
enum Principal<'a> {
    User(u32),
    Group(u32),
    Dir(&'a str),
}

impl<'a> Principal<'a> {
    /// `None` for anything else.
    fn parse(p: &'a str) -> Option<Principal<'a>> {
        let id = |s: &str| s.parse::<u32>().ok();
        if let Some(u) = p.strip_prefix('u').and_then(id) {
            Some(Principal::User(u))
        } else if let Some(g) = p.strip_prefix('g').and_then(id) {
            Some(Principal::Group(g))
        } else {
            p.starts_with('/').then_some(Principal::Dir(p))
        }
    }
}

/// The aggregate subject a counts principal is counted under (`u1000` → `user:1000`, `g100`
/// → `group:100`, `/a/b` → `dir:/a/b`).
fn subject_of(principal: &str) -> Option<String> {
    Some(match Principal::parse(principal)? {
        Principal::User(u) => format!("user:{u}"),
        Principal::Group(g) => format!("group:{g}"),
        Principal::Dir(d) => format!("dir:{d}"),
    })
}

/// Counts by aggregate subject: users' and groups' counts, directories' recursive counts.
pub fn by_subject(rows: &[CountRow]) -> HashMap<String, u64> {
    rows.iter().filter_map(|r| Some((subject_of(&r.principal)?, r.recursive_count))).collect()
}

/// One run's counts rebuilt from the entries its counting sinks received (any order, any
/// runs mixed, a message received twice counted once, entries that are not counts skipped): `version` or, without it, the run
/// whose end marker is the latest. Fails when that run's end marker is missing or names
/// more counts than were found.
pub fn rebuild(
    entries: impl IntoIterator<Item = serde_json::Value>,
    version: Option<&str>,
) -> Result<(String, Vec<CountRow>), String> {
    let mut counts: HashMap<String, BTreeMap<(String, usize), u64>> = HashMap::new();
    let mut ends: HashMap<String, (u64, i64)> = HashMap::new();
    for e in entries {
        let c = &e["content"];
        let Some(v) = c["version"].as_str() else { continue };
        if c["end"] == true {
            ends.insert(v.to_string(), (c["messages"].as_u64().unwrap_or(0), c["finished_at"].as_i64().unwrap_or(0)));
            continue;
        }
        // Anything else a sink holds (another writer's records) is not counts: skipped.
        let (Some(p), Some(shard), Some(n)) = (c["principal"].as_str(), c["shard"].as_u64(), c["count"].as_u64())
        else {
            continue;
        };
        let shard =
            usize::try_from(shard).ok().filter(|s| *s < SHARDS).ok_or_else(|| format!("shard {shard} in {e}"))?;
        counts.entry(v.to_string()).or_default().insert((p.to_string(), shard), n);
    }
    let version = match version {
        Some(v) => v.to_string(),
        None => ends
            .iter()
            .max_by_key(|(v, (_, at))| (*at, (*v).clone()))
            .map(|(v, _)| v.clone())
            .ok_or("no complete run of counts was found (no end marker)")?,
    };
    let (want, _) = *ends
        .get(&version)
        .ok_or_else(|| format!("the counts of version {version:?} have no end marker (the run did not finish)"))?;
    let got = counts.remove(&version).unwrap_or_default();
    if got.len() as u64 != want {
        return Err(format!("version {version:?}: {} of its {want} counts were found", got.len()));
    }
    let mut m = CountMaps::default();
    for ((p, shard), n) in got {
        let empty = || Box::new([0; SHARDS]);
        let slot = match Principal::parse(&p) {
            Some(Principal::User(u)) => m.users.entry(u).or_insert_with(empty),
            Some(Principal::Group(g)) => m.groups.entry(g).or_insert_with(empty),
            Some(Principal::Dir(_)) => m.dirs.entry(p.clone()).or_insert_with(empty),
            None => return Err(format!("version {version:?}: a principal {p:?} that is no user, group or directory")),
        };
        slot[shard] += n;
    }
    Ok((version, rows_of(&m)))
}

/// Counts by aggregate subject from a counts CSV (`principal,count,recursive_count`).
pub fn read_csv(path: &std::path::Path) -> Result<HashMap<String, u64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = HashMap::new();
    for (i, line) in text.lines().enumerate().skip(1).filter(|(_, l)| !l.is_empty()) {
        let bad = |why: &str| format!("{} line {}: {why}", path.display(), i + 1);
        let (principal, rest) = if let Some(q) = line.strip_prefix('"') {
            unquote(q).ok_or_else(|| bad("an unterminated quoted principal"))?
        } else {
            let (p, r) = line.split_once(',').ok_or_else(|| bad("want principal,count,recursive_count"))?;
            (p.to_string(), r)
        };
        let recursive = rest.rsplit(',').next().and_then(|n| n.parse::<u64>().ok());
        let recursive = recursive.ok_or_else(|| bad("the recursive count is not a number"))?;
        if let Some(s) = subject_of(&principal) {
            out.insert(s, recursive);
        }
    }
    Ok(out)
}

/// A quoted field (`q` after its opening quote, `""` standing for `"`, as [`super::write_csv`]
/// writes it) and what follows its closing quote and comma.
fn unquote(q: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = q.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            out.push(c);
        } else if chars.peek().is_some_and(|(_, n)| *n == '"') {
            chars.next();
            out.push('"');
        } else {
            return q[i + 1..].strip_prefix(',').map(|rest| (out, rest));
        }
    }
    None
}

/// The aggregate pipeline's check: each principal's file count against the counts, and the
/// counted principals the aggregate lacks (users and groups, and directories between
/// `directory_min` and `directory_max`; across ranks only those `owns` says are this rank's).
/// Directories deeper than counting's `directory_max` are not in the counts, so not checked.
pub(super) fn check(
    expected: &HashMap<String, u64>,
    map: &HashMap<String, PrincipalStats>,
    from: &str,
    (directory_min, directory_max): (usize, usize),
    owns: impl Fn(&str) -> bool,
) -> serde_json::Value {
    let (mut checked, mut wrong) = (0u64, Vec::new());
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in keys {
        if let Some(&want) = expected.get(k.as_str()) {
            checked += 1;
            if map[k].count != want {
                wrong.push(serde_json::json!({"principal": k, "file_count": map[k].count, "counted": want}));
            }
        }
    }
    let depth = |d: &str| if d == "/" { 0 } else { d.matches('/').count() };
    let mut missing: Vec<(&String, u64)> = expected
        .iter()
        .filter(|(k, _)| !map.contains_key(k.as_str()) && owns(k))
        .filter(|(k, _)| match k.strip_prefix("dir:") {
            Some(d) => (directory_min..=directory_max).contains(&depth(d)),
            None => true,
        })
        .map(|(k, n)| (k, *n))
        .collect();
    missing.sort();
    let n_missing = missing.len();
    wrong.extend(
        missing.into_iter().map(|(k, n)| serde_json::json!({"principal": k, "file_count": null, "counted": n})),
    );
    let n = wrong.len();
    wrong.truncate(20);
    serde_json::json!({"counts_from": from, "counts_checked": checked + n_missing as u64, "counts_mismatched": n,
        "counts_missing": n_missing, "counts_mismatches": wrong})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Principals with quotes and commas (directory names may hold them) come back as written.
    #[test]
    fn the_csv_reads_back_what_it_writes() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("counts.csv");
        let rows = vec![
            CountRow { principal: "u1000".into(), count: 3, recursive_count: 3 },
            CountRow { principal: "g100".into(), count: 3, recursive_count: 3 },
            CountRow { principal: "/a\",b".into(), count: 1, recursive_count: 2 },
            CountRow { principal: "/a,\"\"c".into(), count: 0, recursive_count: 5 },
        ];
        super::super::write_csv(&path, &rows).unwrap();
        let got = read_csv(&path).unwrap();
        let want: HashMap<String, u64> = [("user:1000", 3), ("group:100", 3), ("dir:/a\",b", 2), ("dir:/a,\"\"c", 5)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(got, want);
        std::fs::write(&path, "principal,count,recursive_count\n\"/x,1,1\n").unwrap();
        assert!(read_csv(&path).unwrap_err().contains("line 2"));
    }
}
