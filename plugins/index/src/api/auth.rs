//! Who asks: a bearer token from the tokens file (HTTP), or the peer's credentials (the Unix
//! socket), resolved to the principals a record's `visible_to` is compared with, and whether
//! the caller may write.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use icicle_core::policy::PrincipalMap;

use crate::search::Visibility;

/// Why a tokens file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file cannot be read.
    #[error("{file}: {reason}")]
    Read {
        /// The tokens file.
        file: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// Others than its owner may read it (tokens are secrets).
    #[error("{file}: readable by its group or by others (mode {mode:03o}); `chmod 600 {file}` first")]
    Exposed {
        /// The tokens file.
        file: PathBuf,
        /// Its permission bits (`mode & 0o777`).
        mode: u32,
    },
    /// A line is not `TOKEN<TAB>IDENTITY[<TAB>GROUPS[<TAB>writer]]` (the token itself is never shown).
    #[error("{file}:{line}: {reason}")]
    Line {
        /// The tokens file.
        file: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
}

/// What one token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The identity URN and the group URNs.
    pub principals: Vec<String>,
    /// Whether it may ingest and delete.
    pub writer: bool,
}

/// The tokens `icicle serve` accepts (`--tokens FILE`): one a line,
/// `TOKEN<TAB>identity-urn[<TAB>group-urn,group-urn...[<TAB>writer]]`; `#` starts a comment
/// line, empty lines are skipped. The fourth column is `writer` (may ingest and delete) or
/// `reader` (the default).
///
/// Tokens are held and looked up by their SHA-256 digest: how long a lookup takes depends on
/// the digest of what was sent, which tells nothing about any token's characters.
#[derive(Default)]
pub struct Tokens {
    by_token: HashMap<[u8; 32], Grant>,
}

/// The digest a token is held by.
fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        write!(f, "Tokens({} tokens)", self.by_token.len())
    }
}

impl Tokens {
    /// Load `file`, refusing it when its group or others may read it.
    pub fn load(file: &Path) -> Result<Tokens, TokensError> {
        let read = |e: std::io::Error| TokensError::Read { file: file.to_path_buf(), reason: e.to_string() };
        let meta = std::fs::metadata(file).map_err(read)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(TokensError::Exposed { file: file.to_path_buf(), mode });
        }
        let text = std::fs::read_to_string(file).map_err(read)?;
        Tokens::parse(&text, file)
    }

    /// Parse the text of a tokens file (`file` names it in errors).
    pub fn parse(text: &str, file: &Path) -> Result<Tokens, TokensError> {
        let mut by_token = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let bad =
                |reason: &str| TokensError::Line { file: file.to_path_buf(), line: i + 1, reason: reason.to_string() };
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let cols: Vec<&str> = line.split('\t').collect();
            if cols.len() < 2 || cols.len() > 4 {
                return Err(bad("expected TOKEN<TAB>IDENTITY[<TAB>GROUPS[<TAB>writer]]"));
            }
            let token = cols[0].trim();
            if token.len() < 8 || token.chars().any(char::is_whitespace) {
                return Err(bad("a token is at least 8 characters, without spaces"));
            }
            let identity = cols[1].trim();
            if !identity.starts_with("urn:") {
                return Err(bad("the identity is a URN (urn:globus:auth:identity:...)"));
            }
            let mut principals = vec![identity.to_string()];
            for g in cols.get(2).map(|g| g.split(',')).into_iter().flatten().map(str::trim).filter(|g| !g.is_empty()) {
                if !g.starts_with("urn:") {
                    return Err(bad("groups are URNs (urn:globus:groups:id:...), separated by commas"));
                }
                principals.push(g.to_string());
            }
            let writer = match cols.get(3).map(|w| w.trim()) {
                None | Some("" | "reader") => false,
                Some("writer") => true,
                Some(_) => return Err(bad("the fourth column is `writer` or `reader`")),
            };
            if by_token.insert(digest(token), Grant { principals, writer }).is_some() {
                return Err(bad("the same token twice"));
            }
        }
        Ok(Tokens { by_token })
    }

    /// The grant of `token`, if it is one of these.
    pub fn grant(&self, token: &str) -> Option<&Grant> {
        self.by_token.get(&digest(token))
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }
}

/// Who a request is answered for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The records it may see.
    pub visibility: Visibility,
    /// Whether it may ingest and delete.
    pub writer: bool,
    /// Whether it identified itself (a token or a peer), for the 401 of writes without one.
    pub authenticated: bool,
    /// Whether it may ask `bypass_visible_to`, and then sees every record (a caller who sees
    /// every record anyway; the testkit's emulator grants it to every authenticated caller, as
    /// Globus Search does an index's owner).
    pub bypass: bool,
}

impl Caller {
    /// A request without credentials: `public` records only, no writes.
    pub fn anonymous() -> Caller {
        Caller {
            visibility: Visibility::Principals(vec!["public".into()]),
            writer: false,
            authenticated: false,
            bypass: false,
        }
    }

    /// A token holder: its principals and `public`.
    pub fn token(grant: &Grant) -> Caller {
        let mut p = grant.principals.clone();
        p.push("public".into());
        p.sort();
        p.dedup();
        Caller { visibility: Visibility::Principals(p), writer: grant.writer, authenticated: true, bypass: false }
    }
}

/// How a Unix-socket peer becomes principals: the `records.principals` map the records were
/// built with, and `records.everyone`.
#[derive(Debug, Default, Clone)]
pub struct PeerPolicy {
    /// uid and gid to URN.
    pub map: Option<PrincipalMap>,
    /// Principals every local user has.
    pub everyone: Vec<String>,
}

impl PeerPolicy {
    /// The caller behind a socket peer's `uid` (primary group `gid`): root sees every record
    /// and may write; anyone else sees `public`, `records.everyone` and what its uid and groups
    /// (`getgrouplist`) map to, and may write only when it is the server's own user.
    pub fn caller(&self, uid: u32, gid: u32) -> Caller {
        // SAFETY: geteuid has no preconditions.
        let own = uid == unsafe { libc::geteuid() };
        if uid == 0 {
            return Caller { visibility: Visibility::All, writer: true, authenticated: true, bypass: true };
        }
        let mut p = vec!["public".to_string()];
        p.extend(self.everyone.iter().cloned());
        if let Some(map) = &self.map {
            p.extend(map.user(uid).map(str::to_string));
            p.extend(groups_of(uid, gid).into_iter().filter_map(|g| map.group(g)).map(str::to_string));
        }
        p.sort();
        p.dedup();
        Caller { visibility: Visibility::Principals(p), writer: own, authenticated: true, bypass: false }
    }
}

/// `uid`'s groups: `gid` and those `getgrouplist` names for its account (only `gid` when the
/// uid has no account).
pub fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: `passwd` is a C struct of integers and pointers, for which all zeros is valid.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: `pw`, `buf` and `found` outlive the call; the buffer length is its size.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if r != 0 || found.is_null() {
        return vec![gid];
    }
    // SAFETY: on success pw_name points into `buf`, NUL-terminated.
    let name = unsafe { CStr::from_ptr(pw.pw_name) }.to_owned();
    let mut n: libc::c_int = 256;
    let mut groups = vec![0 as libc::gid_t; n as usize];
    // SAFETY: `groups` holds `n` gids; getgrouplist writes at most `n` and sets `n`.
    let got = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
    if got < 0 {
        groups.resize(n.max(0) as usize, 0);
        // SAFETY: as above, with the size the first call asked for.
        if unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) } < 0 {
            return vec![gid];
        }
    }
    groups.truncate(n.max(0) as usize);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lines_name_their_line_never_the_token() {
        let f = Path::new("tokens.tsv");
        let t = Tokens::parse("# comment\n\nsecret-aaaa\turn:globus:auth:identity:a\turn:globus:groups:id:g1,urn:globus:groups:id:g2\twriter\nsecret-bbbb\turn:globus:auth:identity:b\n", f).unwrap();
        assert_eq!(t.len(), 2);
        let a = t.grant("secret-aaaa").unwrap();
        assert!(a.writer);
        assert_eq!(a.principals.len(), 3);
        assert!(!t.grant("secret-bbbb").unwrap().writer);
        let c = Caller::token(t.grant("secret-bbbb").unwrap());
        assert_eq!(c.visibility, Visibility::Principals(vec!["public".into(), "urn:globus:auth:identity:b".into()]));
        for bad in ["secret-cccc\tnot-a-urn", "short\turn:x", "secret-dddd\turn:x\t\towner", "secret-eeee"] {
            let e = Tokens::parse(bad, f).unwrap_err().to_string();
            assert!(e.starts_with("tokens.tsv:1:"), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
        assert!(format!("{t:?}").contains("2 tokens"));
    }

    #[test]
    fn root_peers_see_everything_and_others_their_principals() {
        let mut map = PrincipalMap::default();
        map.insert_user(4242, "urn:globus:auth:identity:u".into());
        let p = PeerPolicy { map: Some(map), everyone: vec!["urn:globus:groups:id:all".into()] };
        assert_eq!(p.caller(0, 0).visibility, Visibility::All);
        let c = p.caller(4242, 4242);
        assert_eq!(
            c.visibility,
            Visibility::Principals(vec![
                "public".into(),
                "urn:globus:auth:identity:u".into(),
                "urn:globus:groups:id:all".into()
            ])
        );
    }
}
