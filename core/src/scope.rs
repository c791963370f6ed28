//! Scopes of what a snapshot run could not read. A versioned run never deletes a subject of
//! the previous run that lies in an unknown scope: it carries it over instead.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// The part of the namespace an unreadable input covered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Anything: an input without a path scope (a listing file, a byte range, an S3 object).
    All,
    /// A directory and everything below it (a walked directory).
    Subtree(String),
    /// A directory's direct entries (one GUFI `db.db`).
    Children(String),
    /// One path (a rejected row whose path is known).
    Exact(String),
}

impl Scope {
    /// The scope of a rejected row naming `path` (escaped, [`crate::name`]): the path when it
    /// is well formed; everything when no path is known or it is not well formed (a torn name
    /// may be a corrupt copy of another, whose delete must wait).
    pub fn of_rejected_row(path: Option<&str>) -> Scope {
        match path {
            Some(p) if crate::record::check_path(p).is_ok() => Scope::Exact(p.to_string()),
            _ => Scope::All,
        }
    }

    /// A subtree scope; `/` (or an empty prefix) is everything.
    pub fn subtree(prefix: &str) -> Scope {
        let p = prefix.trim_end_matches('/');
        if p.is_empty() {
            Scope::All
        } else {
            Scope::Subtree(p.to_string())
        }
    }
}

/// Whether only the last name of `path` (escaped, [`crate::name`]) can be bad: its directory
/// is well formed, and the name is not empty and at most 255 bytes.
pub fn placeable(path: &str) -> bool {
    let Some(i) = path.rfind('/') else { return false };
    let (dir, name) = (if i == 0 { "/" } else { &path[..i] }, &path[i + 1..]);
    path.starts_with('/')
        && !name.is_empty()
        && crate::name::byte_len(name) <= 255
        && crate::record::check_path(dir).is_ok()
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::All => write!(f, "everything"),
            Scope::Subtree(p) => write!(f, "{p}/**"),
            Scope::Children(d) => write!(f, "{}/*", d.trim_end_matches('/')),
            Scope::Exact(p) => write!(f, "{p}"),
        }
    }
}

impl serde::Serialize for Scope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The parent directory of an absolute path (`/` for `/a`).
fn parent(path: &str) -> Option<&str> {
    let i = path.rfind('/')?;
    Some(if i == 0 { "/" } else { &path[..i] })
}

/// The unknown scopes of a run, indexed for lookups of many subjects.
#[derive(Debug, Default)]
pub struct UnknownScopes {
    all: bool,
    subtrees: HashSet<String>,
    children: HashSet<String>,
    exact: HashSet<String>,
}

impl UnknownScopes {
    /// Index `scopes`.
    pub fn new<'a>(scopes: impl IntoIterator<Item = &'a Scope>) -> UnknownScopes {
        let mut u = UnknownScopes::default();
        for s in scopes {
            match s {
                Scope::All => u.all = true,
                Scope::Subtree(p) => {
                    u.subtrees.insert(p.clone());
                }
                Scope::Children(d) => {
                    u.children.insert(d.trim_end_matches('/').to_string());
                }
                Scope::Exact(p) => {
                    u.exact.insert(p.clone());
                }
            }
        }
        u
    }

    /// Whether nothing is unknown.
    pub fn is_empty(&self) -> bool {
        !self.all && self.subtrees.is_empty() && self.children.is_empty() && self.exact.is_empty()
    }

    /// Whether the primary record `subject` may lie in an unknown scope. A subject that is
    /// not a path (a hashed long path) hides where it is: unknown whenever anything is.
    pub fn covers(&self, subject: &str) -> bool {
        if self.is_empty() {
            return false;
        }
        if self.all || !subject.starts_with('/') || self.exact.contains(subject) {
            return true;
        }
        if let Some(p) = parent(subject) {
            if self.children.contains(if p == "/" { "" } else { p }) {
                return true;
            }
        }
        let mut cur = subject;
        loop {
            if self.subtrees.contains(cur) {
                return true;
            }
            match parent(cur) {
                Some("/") | None => return false,
                Some(p) => cur = p,
            }
        }
    }

    /// Whether an aggregate subject (`dir:/a/b`, `user:U`, `group:G`) may be affected by an
    /// unknown scope: `dir:` prefixes that contain or lie inside one; users and groups own
    /// files anywhere, so any unknown scope touches them.
    pub fn covers_aggregate(&self, subject: &str) -> bool {
        if self.is_empty() {
            return false;
        }
        let Some(dir) = subject.strip_prefix("dir:") else {
            return true;
        };
        let d = dir.trim_end_matches('/');
        if self.all || d.is_empty() || self.covers(d) {
            return true;
        }
        let inside = |p: &str| p == d || p.starts_with(d) && p.as_bytes().get(d.len()) == Some(&b'/');
        self.subtrees.iter().chain(&self.children).chain(&self.exact).any(|p| inside(p))
    }
}

/// One line of the summary's list of unknown scopes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UnknownScope {
    /// The scope (`everything`, `/a/b/**`, `/a/b/*` or a path).
    pub scope: Scope,
    /// The first input that made it unknown.
    pub input: String,
    /// Why.
    pub reason: String,
    /// How many rejects named this scope.
    pub count: u64,
}

/// The summary list: one line per scope (first reason kept), at most `limit` lines, the
/// broadest scopes first.
pub fn summarize<'a>(
    rejects: impl IntoIterator<Item = (&'a Scope, &'a str, &'a str)>,
    limit: usize,
) -> (Vec<UnknownScope>, u64) {
    let mut by: BTreeMap<Scope, UnknownScope> = BTreeMap::new();
    for (scope, input, reason) in rejects {
        by.entry(scope.clone()).and_modify(|u| u.count += 1).or_insert_with(|| UnknownScope {
            scope: scope.clone(),
            input: input.to_string(),
            reason: reason.to_string(),
            count: 1,
        });
    }
    let total = by.len() as u64;
    (by.into_values().take(limit).collect(), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_by_kind() {
        let scopes = [
            Scope::Subtree("/a/b".into()),
            Scope::Children("/c".into()),
            Scope::Exact("/d/e".into()),
            Scope::Children("/".into()),
        ];
        let u = UnknownScopes::new(&scopes);
        for s in ["/a/b", "/a/b/c", "/a/b/c/d", "/c/x", "/d/e", "/top"] {
            assert!(u.covers(s), "{s}");
        }
        for s in ["/a/bc", "/a/x", "/c/x/y", "/d/e/f", "/d/f", "/x/y"] {
            assert!(!u.covers(s), "{s}");
        }
        assert!(u.covers("sha256:abc"), "a hashed subject is unknown whenever anything is");
        assert!(!UnknownScopes::default().covers("sha256:abc"));
        assert!(UnknownScopes::new(&[Scope::All]).covers("/x"));
        assert_eq!(Scope::subtree("/"), Scope::All);
    }

    #[test]
    fn aggregates() {
        let u = UnknownScopes::new(&[Scope::Children("/a/b".into())]);
        assert!(u.covers_aggregate("dir:/a"), "a prefix above the scope");
        assert!(u.covers_aggregate("dir:/a/b"));
        assert!(u.covers_aggregate("user:1"));
        assert!(!u.covers_aggregate("dir:/x"));
        assert!(!u.covers_aggregate("dir:/a/bc"));
        assert!(!UnknownScopes::default().covers_aggregate("user:1"));
    }

    #[test]
    fn summary_lines() {
        let (a, b) = (Scope::All, Scope::Exact("/p".into()));
        let (lines, total) = summarize([(&b, "in", "bad size"), (&a, "f.csv", "truncated"), (&b, "in", "again")], 10);
        assert_eq!(total, 2);
        assert_eq!(lines[0].scope, Scope::All);
        assert_eq!((lines[1].count, lines[1].reason.as_str()), (2, "bad size"));
        assert_eq!(serde_json::to_value(&lines[1].scope).unwrap(), "/p");
    }
}
