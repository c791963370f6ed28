//! How primary records are built: the `visible_to` policy, the principals map and the
//! snapshot version. Encoding by these rules is `icicle-gmeta`'s.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::access::{AccessPolicy, DirectoryTable, UnknownDirectories};

/// uid/gid → Globus principal URN, loaded from a principals file.
#[derive(Debug, Default, Clone)]
pub struct PrincipalMap {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl PrincipalMap {
    /// Parse a principals file: one mapping a line, `uid<TAB>ID<TAB>URN` or `gid<TAB>ID<TAB>URN`
    /// (any whitespace separates); `#` starts a comment.
    pub fn parse(text: &str, origin: &str) -> Result<PrincipalMap, String> {
        let mut map = PrincipalMap::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = |why: &str| format!("{origin}:{}: {why}: `{line}`", i + 1);
            if f.len() != 3 {
                return Err(bad("expected `uid|gid ID URN`"));
            }
            let id: u32 = f[1].parse().map_err(|_| bad("ID is not a number"))?;
            let (into, globus) = match f[0] {
                "uid" => (&mut map.users, "urn:globus:auth:identity:"),
                "gid" => (&mut map.groups, "urn:globus:groups:id:"),
                _ => return Err(bad("first field must be `uid` or `gid`")),
            };
            check_urn(f[2], globus).map_err(|why| bad(&why))?;
            if let Some(was) = into.insert(id, f[2].to_string()).filter(|was| was != f[2]) {
                return Err(bad(&format!("{} {id} is mapped already, to {was}", f[0])));
            }
        }
        Ok(map)
    }

    /// Load from a file.
    pub fn load(path: &Path) -> Result<PrincipalMap, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        PrincipalMap::parse(&text, &path.display().to_string())
    }

    /// The principal of `uid`.
    pub fn user(&self, uid: u32) -> Option<&str> {
        self.users.get(&uid).map(String::as_str)
    }

    /// The principal of `gid`.
    pub fn group(&self, gid: u32) -> Option<&str> {
        self.groups.get(&gid).map(String::as_str)
    }

    /// Add a user mapping.
    pub fn insert_user(&mut self, uid: u32, urn: String) {
        self.users.insert(uid, urn);
    }

    /// Add a group mapping.
    pub fn insert_group(&mut self, gid: u32, urn: String) {
        self.groups.insert(gid, urn);
    }
}

/// A principal of the principals file: a `urn:`, and a Globus one an identity or a group
/// (`urn:globus:auth:identity:` or `urn:globus:groups:id:`, a uid's usually the first) with a
/// lower-case UUID. `public` or a bare UUID there would show a user's records to everyone or be
/// refused at ingest.
fn check_urn(urn: &str, usual: &str) -> Result<(), String> {
    if !urn.starts_with("urn:") {
        return Err(format!("the principal must be a `urn:` (`{usual}UUID` for Globus)"));
    }
    if urn.starts_with("urn:globus:") {
        let uuid = ["urn:globus:auth:identity:", "urn:globus:groups:id:"]
            .iter()
            .find_map(|k| urn.strip_prefix(k))
            .ok_or_else(|| format!("a Globus principal is `urn:globus:auth:identity:UUID` or `urn:globus:groups:id:UUID` (here usually `{usual}UUID`)"))?;
        let groups: Vec<&str> = uuid.split('-').collect();
        let shape = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
            && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        if !shape {
            return Err(format!("`{uuid}` is not a UUID (8-4-4-4-12 lower-case hex digits, as Globus writes them)"));
        }
    }
    Ok(())
}

/// One element of the `visible_to` policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleTo {
    /// The owner's principal from the principals map.
    Owner,
    /// The group's principal from the principals map.
    Group,
    /// Everyone (`public`); only when the configuration says so.
    Public,
    /// A fixed principal URN.
    Principal(String),
}

impl VisibleTo {
    /// Parse one policy word: `owner`, `group`, `public`, or a `urn:` principal.
    pub fn parse(s: &str) -> Result<VisibleTo, String> {
        match s {
            "owner" => Ok(VisibleTo::Owner),
            "group" => Ok(VisibleTo::Group),
            "public" => Ok(VisibleTo::Public),
            s if s.starts_with("urn:") => Ok(VisibleTo::Principal(s.to_string())),
            s => Err(format!("`{s}` is not `owner`, `group`, `public` or a `urn:` principal")),
        }
    }
}

/// How primary records are built.
#[derive(Debug, Clone, Default)]
pub struct RecordPolicy {
    /// The explicit lists (`owner`, `group`, principals): used when `access` is `None`.
    pub visible_to: Vec<VisibleTo>,
    /// Visibility from POSIX permissions along the path (`posix` / `posix-read`).
    pub access: Option<AccessPolicy>,
    /// Principals that see every record (with root's mapped principal).
    pub admins: Vec<String>,
    /// The principal that stands for every user (the other class), if any.
    pub everyone: Option<String>,
    /// What is done when the directories' permissions are unknown.
    pub unknown_directories: UnknownDirectories,
    /// Directory permissions read in this run.
    pub dirs: Arc<DirectoryTable>,
    /// Principals used when the policy resolves to nothing for a record.
    pub fallback: Vec<String>,
    /// uid/gid → principal URN (`records.principals`; empty without one).
    pub principals: Arc<PrincipalMap>,
    /// The snapshot version written into every record.
    pub version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_file_errors_name_the_line() {
        let err = PrincipalMap::parse("uid 1 urn:a\nuser 2 urn:b\n", "p.tsv").unwrap_err();
        assert!(err.starts_with("p.tsv:2:"), "{err}");
    }

    #[test]
    fn principals_must_be_urns_globus_ones_well_formed_and_each_id_mapped_once() {
        // A uid may stand for a group (a functional account).
        let ok = "uid 1 urn:globus:auth:identity:d07a9d82-d4f4-4baf-8c5f-6a1c2fc9b651\n\
                  gid 1 urn:globus:groups:id:9e4e067b-3274-4f65-844d-e097791768e2\nuid 2 urn:site:u2\nuid 2 urn:site:u2\n\
                  uid 4 urn:globus:groups:id:9e4e067b-3274-4f65-844d-e097791768e2\n";
        let map = PrincipalMap::parse(ok, "p.tsv").unwrap();
        assert_eq!(map.user(2), Some("urn:site:u2"));
        for (line, why) in [
            ("uid 3 public", "must be a `urn:`"),
            ("gid 3 d07a9d82-d4f4-4baf-8c5f-6a1c2fc9b651", "must be a `urn:`"),
            (
                "uid 3 urn:globus:auth:identities:d07a9d82-d4f4-4baf-8c5f-6a1c2fc9b651",
                "usually `urn:globus:auth:identity:UUID`",
            ),
            ("gid 3 urn:globus:group:d07a9d82-d4f4-4baf-8c5f-6a1c2fc9b651", "usually `urn:globus:groups:id:UUID`"),
            ("uid 3 urn:globus:auth:identity:D07A9D82-d4f4-4baf-8c5f-6a1c2fc9b651", "lower-case"),
            ("uid 3 urn:globus:auth:identity:d07a9d82-d4f4-4baf-8c5f-6a1c2fc9b65", "not a UUID"),
            ("uid 3 urn:globus:auth:identity:d07a9d82d4f44baf8c5f6a1c2fc9b651", "not a UUID"),
            ("uid 3 urn:globus:auth:identity:g07a9d82-d4f4-4baf-8c5f-6a1c2fc9b651", "not a UUID"),
            ("uid 2 urn:site:other", "uid 2 is mapped already, to urn:site:u2"),
        ] {
            let err = PrincipalMap::parse(&format!("{ok}{line}\n"), "p.tsv").unwrap_err();
            assert!(err.starts_with("p.tsv:6:") && err.contains(why), "{line}: {err}");
        }
    }
}
