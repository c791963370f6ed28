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
            match f[0] {
                "uid" => map.users.insert(id, f[2].to_string()),
                "gid" => map.groups.insert(id, f[2].to_string()),
                _ => return Err(bad("first field must be `uid` or `gid`")),
            };
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
}
