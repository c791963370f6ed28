//! Globus Search GMetaEntry encoding of primary records: subject, visible_to, content.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::access::{can_see, AccessPolicy, Acl, Asker, DirectoryTable, Named, Perm, UnknownDirectories};
use crate::record::{mode_octal_as_int, mode_string, FileRecord};

/// Globus Search's subject length limit, in UTF-8 bytes.
pub const MAX_SUBJECT_BYTES: usize = 500;
/// Prefix of subjects replaced by a hash because the path is too long.
pub const HASHED_SUBJECT_PREFIX: &str = "icicle:sha256:";

/// The subject for `path`: the path itself, or a stable hash when it exceeds 500 bytes.
pub fn subject_for(path: &str) -> std::borrow::Cow<'_, str> {
    if path.len() <= MAX_SUBJECT_BYTES {
        std::borrow::Cow::Borrowed(path)
    } else {
        let digest = Sha256::digest(path.as_bytes());
        let mut s = String::with_capacity(HASHED_SUBJECT_PREFIX.len() + 64);
        s.push_str(HASHED_SUBJECT_PREFIX);
        for b in digest {
            s.push_str(&format!("{b:02x}"));
        }
        std::borrow::Cow::Owned(s)
    }
}

/// Append `s` as a JSON string literal.
pub fn push_json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Most strings need no escape: the clean prefix is found 16 bytes at a time and copied once.
    let clean = clean_prefix(bytes);
    out.extend_from_slice(&bytes[..clean]);
    if clean == bytes.len() {
        out.push(b'"');
        return;
    }
    let mut start = clean;
    for (i, &b) in bytes.iter().enumerate().skip(clean) {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// How many bytes at the start of `b` need no JSON escape (not `"`, `\\` or a control byte),
/// 16 bytes a compare (the last block overlaps the one before; a short string is padded).
#[inline]
fn clean_prefix(b: &[u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        let n = b.len();
        // SAFETY: SSE2 is part of the x86_64 baseline; every load reads 16 bytes inside `b`
        // or inside `pad`.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            // Unsigned "below 0x20": max(x, 0x1f) == 0x1f.
            let low = _mm_set1_epi8(0x1f);
            let bad = |p: *const u8| {
                let x = _mm_loadu_si128(p as *const __m128i);
                let m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)), _mm_cmpeq_epi8(_mm_max_epu8(x, low), low));
                _mm_movemask_epi8(m) as u32
            };
            if n < 16 {
                let mut pad = [b'a'; 16];
                pad[..n].copy_from_slice(b);
                let m = bad(pad.as_ptr());
                return if m != 0 { m.trailing_zeros() as usize } else { n };
            }
            let mut i = 0;
            while i + 16 <= n {
                let m = bad(b.as_ptr().add(i));
                if m != 0 {
                    return i + m.trailing_zeros() as usize;
                }
                i += 16;
            }
            if i < n {
                // The last 16 bytes; bits for bytes before `i` were already clean.
                let m = bad(b.as_ptr().add(n - 16)) >> (i - (n - 16));
                if m != 0 {
                    return i + m.trailing_zeros() as usize;
                }
            }
            n
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        b.iter().position(|&c| c < 0x20 || c == b'"' || c == b'\\').unwrap_or(b.len())
    }
}

/// The last timestamp written and its text: a file's three times are often equal, and
/// neighbouring files were often touched in the same second.
#[derive(Debug, Default)]
struct IsoCache {
    secs: Option<i64>,
    text: Vec<u8>,
}

impl IsoCache {
    fn push(&mut self, out: &mut Vec<u8>, secs: i64) {
        if self.secs != Some(secs) {
            self.text.clear();
            crate::time::push_iso8601(&mut self.text, secs);
            self.secs = Some(secs);
        }
        out.extend_from_slice(&self.text);
    }
}

fn push_int(out: &mut Vec<u8>, v: impl itoa::Integer) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(v).as_bytes());
}

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

/// The principals that may see a file with permissions `file` whose directories from the top
/// down are `dirs` (`None`: unknown), under `access`; encoded as a `visible_to` array.
pub fn resolve_posix(policy: &RecordPolicy, access: AccessPolicy, dirs: Option<&[Perm]>, file: &Perm) -> Result<Vec<u8>, String> {
    let principals = posix_principals(policy, access, dirs, file)?;
    if principals.is_empty() {
        return Err(format!(
            "no mapped principal may see it (uid {} / gid {}, mode {:o}): map them in the principals file or set records.admins",
            file.uid,
            file.gid,
            file.mode & 0o7777
        ));
    }
    Ok(encode_principals(&principals))
}

/// [`resolve_posix`]'s principals, in order, without duplicates (possibly none).
pub fn posix_principals<'p>(policy: &'p RecordPolicy, access: AccessPolicy, dirs: Option<&[Perm]>, file: &Perm) -> Result<Vec<&'p str>, String> {
    let map = &policy.principals;
    let mut principals: Vec<&str> = Vec::new();
    fn add<'p>(p: &'p str, v: &mut Vec<&'p str>) {
        if !v.contains(&p) {
            v.push(p);
        }
    }
    match dirs {
        None if policy.unknown_directories == UnknownDirectories::Reject => {
            return Err(format!(
                "the permissions of its directories are unknown (uid {} / gid {}; records.unknown_directories = \"reject\")",
                file.uid, file.gid
            ));
        }
        None => {
            if let Some(u) = map.users.get(&file.uid) {
                add(u, &mut principals);
            }
        }
        Some(dirs) => {
            // Candidates: the owners and groups of the file and its directories (their owner
            // and group bits apply), and the users and groups their ACLs name.
            let (mut uids, mut gids): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
            for p in std::iter::once(file).chain(dirs) {
                uids.push(p.uid);
                gids.push(p.gid);
                for n in p.acl.iter().flat_map(|a| a.named()) {
                    match n {
                        Named::User(u) => uids.push(u),
                        Named::Group(g) => gids.push(g),
                    }
                }
            }
            for uid in uids {
                if let Some(u) = map.users.get(&uid) {
                    if !principals.contains(&u.as_str()) && can_see(access, dirs, file, &Asker::User { uid, groups: &[] }) {
                        add(u, &mut principals);
                    }
                }
            }
            for gid in gids {
                if let Some(g) = map.groups.get(&gid) {
                    if !principals.contains(&g.as_str()) && can_see(access, dirs, file, &Asker::Group(gid)) {
                        add(g, &mut principals);
                    }
                }
            }
            if let Some(e) = &policy.everyone {
                if can_see(access, dirs, file, &Asker::Everyone) {
                    add(e, &mut principals);
                }
            }
        }
    }
    if let Some(root) = map.users.get(&0) {
        add(root, &mut principals);
    }
    for a in &policy.admins {
        add(a, &mut principals);
    }
    Ok(principals)
}

/// `visible_to` of an aggregate under the POSIX rules: `principal` (the user's or group's
/// own, or those who may see the directory), root's and the admins'.
pub fn aggregate_principals(policy: &RecordPolicy, own: &[&str]) -> Option<Vec<u8>> {
    let mut v: Vec<&str> = Vec::new();
    for p in own.iter().copied().chain(policy.principals.users.get(&0).map(String::as_str)).chain(policy.admins.iter().map(String::as_str)) {
        if !v.contains(&p) {
            v.push(p);
        }
    }
    (!v.is_empty()).then(|| encode_principals(&v))
}

/// `["p1","p2",...]`.
fn encode_principals(principals: &[&str]) -> Vec<u8> {
    let mut out = vec![b'['];
    for (i, p) in principals.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_json_str(&mut out, p);
    }
    out.push(b']');
    out
}

/// The encoded `visible_to` array for an owner and group under `policy` (`owner` applies only
/// with a uid, `group` only with a gid); `None` when nothing resolves and there is no fallback.
fn resolve_visible_to(policy: &RecordPolicy, uid: Option<u32>, gid: Option<u32>) -> Option<Vec<u8>> {
    let mut principals: Vec<&str> = Vec::new();
    for v in &policy.visible_to {
        let p = match v {
            VisibleTo::Owner => uid.and_then(|u| policy.principals.users.get(&u)).map(String::as_str),
            VisibleTo::Group => gid.and_then(|g| policy.principals.groups.get(&g)).map(String::as_str),
            VisibleTo::Public => Some("public"),
            VisibleTo::Principal(p) => Some(p.as_str()),
        };
        if let Some(p) = p {
            if !principals.contains(&p) {
                principals.push(p);
            }
        }
    }
    if principals.is_empty() {
        principals.extend(policy.fallback.iter().map(String::as_str));
    }
    if principals.is_empty() {
        return None;
    }
    Some(encode_principals(&principals))
}

/// A `visible_to` array, encoded.
type EncodedPrincipals = Arc<[u8]>;

/// Encodes primary records; one per worker (it caches visible_to per uid/gid).
#[derive(Debug)]
pub struct PrimaryEncoder {
    policy: Arc<RecordPolicy>,
    version_json: Vec<u8>,
    cache: HashMap<(u32, u32), Option<EncodedPrincipals>>,
    last: Option<((u32, u32), EncodedPrincipals)>,
    /// The directory chain `posix_cache` was computed for (held so its address stays unique).
    posix_chain: Option<Arc<[Perm]>>,
    posix_cache: HashMap<(u32, u32, u32), EncodedPrincipals>,
    iso: IsoCache,
}

impl PrimaryEncoder {
    /// A new encoder for `policy`.
    pub fn new(policy: Arc<RecordPolicy>) -> PrimaryEncoder {
        let mut version_json = Vec::new();
        push_json_str(&mut version_json, &policy.version);
        PrimaryEncoder { policy, version_json, cache: HashMap::new(), last: None, posix_chain: None, posix_cache: HashMap::new(), iso: IsoCache::default() }
    }

    /// The encoded `visible_to` array for (uid, gid), or an error naming what is unmapped.
    pub fn visible_to(&mut self, uid: u32, gid: u32) -> Result<Arc<[u8]>, String> {
        if let Some((k, v)) = &self.last {
            if *k == (uid, gid) {
                return Ok(v.clone());
            }
        }
        let r = self.visible_to_uncached(uid, gid);
        if let Ok(v) = &r {
            self.last = Some(((uid, gid), v.clone()));
        }
        r
    }

    fn visible_to_uncached(&mut self, uid: u32, gid: u32) -> Result<Arc<[u8]>, String> {
        let policy = &self.policy;
        let entry = self.cache.entry((uid, gid)).or_insert_with(|| resolve_visible_to(policy, Some(uid), Some(gid)).map(Arc::from));
        entry.clone().ok_or_else(|| format!("no visible_to principal for uid {uid} / gid {gid} (map them in the principals file or set records.fallback)"))
    }

    /// The encoded `visible_to` array for `rec` whose directories from the top down are
    /// `dirs` (`None`: unknown): by POSIX permissions when the policy says so, otherwise by
    /// the owner/group lists.
    pub fn visible_to_in(&mut self, rec: &FileRecord<'_>, acl: Option<Arc<Acl>>, dirs: Option<&Arc<[Perm]>>) -> Result<Arc<[u8]>, String> {
        let Some(access) = self.policy.access else { return self.visible_to(rec.uid, rec.gid) };
        if acl.is_some() {
            let file = Perm { mode: rec.mode, uid: rec.uid, gid: rec.gid, acl };
            return resolve_posix(&self.policy, access, dirs.map(|d| &**d), &file).map(Arc::from);
        }
        let same = match (&self.posix_chain, dirs) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.posix_chain = dirs.cloned();
            self.posix_cache.clear();
        }
        let key = (rec.mode & 0o777, rec.uid, rec.gid);
        if let Some(v) = self.posix_cache.get(&key) {
            return Ok(v.clone());
        }
        let file = Perm::new(rec.mode, rec.uid, rec.gid);
        let v: EncodedPrincipals = resolve_posix(&self.policy, access, dirs.map(|d| &**d), &file)?.into();
        self.posix_cache.insert(key, v.clone());
        Ok(v)
    }

    /// `visible_to` for an aggregate: `owner` applies only with a uid, `group` only with a gid.
    pub fn visible_to_parts(&mut self, uid: Option<u32>, gid: Option<u32>) -> Result<Vec<u8>, String> {
        resolve_visible_to(&self.policy, uid, gid).ok_or_else(|| "no visible_to principal".to_string())
    }

    /// Append the GMetaEntry for `rec` to `out`.
    pub fn encode(&mut self, rec: &FileRecord<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        let vis = self.visible_to(rec.uid, rec.gid)?;
        self.encode_with(rec, &vis, out);
        Ok(())
    }

    /// Append the GMetaEntry for `rec`, visible to `vis` (an encoded array), to `out`.
    pub fn encode_with(&mut self, rec: &FileRecord<'_>, vis: &[u8], out: &mut Vec<u8>) {
        out.reserve(400 + 2 * rec.path.len());
        // A path without bytes to escape (the usual case) is copied as it is, three times
        // (its name is a part of it), after one scan.
        let plain = clean_prefix(rec.path.as_bytes()) == rec.path.len();
        let quoted = |out: &mut Vec<u8>, s: &str| {
            if plain {
                out.push(b'"');
                out.extend_from_slice(s.as_bytes());
                out.push(b'"');
            } else {
                push_json_str(out, s);
            }
        };
        out.extend_from_slice(br#"{"subject":"#);
        if rec.path.len() <= MAX_SUBJECT_BYTES {
            quoted(out, rec.path);
        } else {
            push_json_str(out, &subject_for(rec.path));
        }
        out.extend_from_slice(br#","visible_to":"#);
        out.extend_from_slice(vis);
        out.extend_from_slice(br#","content":{"name":"#);
        quoted(out, rec.name());
        out.extend_from_slice(br#","path":"#);
        quoted(out, rec.path);
        out.extend_from_slice(br#","type":""#);
        out.extend_from_slice(rec.kind.as_str().as_bytes());
        out.extend_from_slice(br#"","size":"#);
        push_int(out, rec.size);
        out.extend_from_slice(br#","uid":"#);
        push_int(out, rec.uid);
        out.extend_from_slice(br#","gid":"#);
        push_int(out, rec.gid);
        out.extend_from_slice(br#","mode":""#);
        out.extend_from_slice(&mode_string(rec.mode));
        out.extend_from_slice(br#"","atime":""#);
        self.iso.push(out, rec.atime);
        out.extend_from_slice(br#"","ctime":""#);
        self.iso.push(out, rec.ctime);
        out.extend_from_slice(br#"","mtime":""#);
        self.iso.push(out, rec.mtime);
        out.extend_from_slice(br#"","version":"#);
        out.extend_from_slice(&self.version_json);
        out.extend_from_slice(br#","raw":{"mode":"#);
        push_int(out, mode_octal_as_int(rec.mode));
        out.extend_from_slice(br#","atime":"#);
        push_int(out, rec.atime);
        out.extend_from_slice(br#","ctime":"#);
        push_int(out, rec.ctime);
        out.extend_from_slice(br#","mtime":"#);
        push_int(out, rec.mtime);
        if rec.inode != 0 {
            out.extend_from_slice(br#","inode":"#);
            push_int(out, rec.inode);
        }
        out.extend_from_slice(b"}}}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::FileKind;

    fn policy(vis: &[&str]) -> Arc<RecordPolicy> {
        let mut p = PrincipalMap::parse("uid 1000 urn:globus:auth:identity:u1000\ngid 100 urn:globus:groups:id:g100\n", "t").unwrap();
        p.insert_user(7, "urn:x:7".into());
        Arc::new(RecordPolicy {
            visible_to: vis.iter().map(|s| VisibleTo::parse(s).unwrap()).collect(),
            fallback: vec![],
            principals: Arc::new(p),
            version: "v1".into(),
            ..Default::default()
        })
    }

    #[test]
    fn json_strings_read_back_as_written() {
        let alphabet = ["a", "\"", "\\", "\n", "\u{1}", "\u{1f}", " ", "é", "\u{7f}", "/", "日"];
        let mut rng = crate::rng::Rng::new(0x2545_f491_4f6c_dd1d);
        for _ in 0..5_000 {
            let x = rng.next_u64();
            let len = (x % 70) as usize;
            // Mostly plain text, so that clean prefixes of every length occur.
            let s: String = (0..len).map(|k| alphabet[if (x >> (k % 61)) & 7 == 0 { (x >> (k % 53)) as usize % alphabet.len() } else { 0 }]).collect();
            let mut out = b"x".to_vec();
            push_json_str(&mut out, &s);
            assert_eq!(serde_json::from_slice::<String>(&out[1..]).ok().as_deref(), Some(s.as_str()), "{s:?}");
            let clean = s.bytes().position(|c| c < 0x20 || c == b'"' || c == b'\\').unwrap_or(s.len());
            assert_eq!(clean_prefix(s.as_bytes()), clean, "{s:?}");
        }
    }

    #[test]
    fn golden_entry() {
        let mut e = PrimaryEncoder::new(policy(&["owner", "group"]));
        let rec = FileRecord {
            path: "/a/\"q\"\tb.txt",
            kind: FileKind::File,
            mode: 0o100644,
            uid: 1000,
            gid: 100,
            size: 42,
            atime: 1_710_554_401,
            ctime: 0,
            mtime: -1,
            inode: 0,
        };
        let mut out = Vec::new();
        e.encode(&rec, &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s,
            r#"{"subject":"/a/\"q\"\tb.txt","visible_to":["urn:globus:auth:identity:u1000","urn:globus:groups:id:g100"],"content":{"name":"\"q\"\tb.txt","path":"/a/\"q\"\tb.txt","type":"file","size":42,"uid":1000,"gid":100,"mode":"-rw-r--r--","atime":"2024-03-16T02:00:01+00:00","ctime":"1970-01-01T00:00:00+00:00","mtime":"1969-12-31T23:59:59+00:00","version":"v1","raw":{"mode":100644,"atime":1710554401,"ctime":0,"mtime":-1}}}"#
        );
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["content"]["name"], "\"q\"\tb.txt");
    }

    #[test]
    fn unmapped_principals_are_an_error_unless_public_or_fallback() {
        let mut e = PrimaryEncoder::new(policy(&["owner"]));
        assert!(e.visible_to(5, 5).is_err());
        let mut e = PrimaryEncoder::new(policy(&["owner", "public"]));
        assert_eq!(&*e.visible_to(5, 5).unwrap(), br#"["public"]"#);
        assert_eq!(&*e.visible_to(7, 5).unwrap(), br#"["urn:x:7","public"]"#);
    }

    #[test]
    fn long_paths_get_stable_hashed_subjects() {
        let long = format!("/{}", "d/".repeat(300));
        let s1 = subject_for(&long).into_owned();
        assert!(s1.starts_with(HASHED_SUBJECT_PREFIX));
        assert_eq!(s1.len(), HASHED_SUBJECT_PREFIX.len() + 64);
        assert_eq!(s1, subject_for(&long));
        assert_eq!(subject_for("/short"), "/short");
        // 500 bytes exactly stays; 501 is hashed (bytes, not characters).
        let p500 = format!("/{}", "é".repeat(249)) + "x";
        assert_eq!(p500.len(), 500);
        assert_eq!(subject_for(&p500), p500.as_str());
        assert!(subject_for(&(p500.clone() + "y")).starts_with(HASHED_SUBJECT_PREFIX));
    }

    #[test]
    fn control_characters_are_escaped() {
        let mut out = Vec::new();
        push_json_str(&mut out, "a\u{1}\n\\");
        assert_eq!(out, br#""a\u0001\n\\""#);
    }

    #[test]
    fn principals_file_errors_name_the_line() {
        let err = PrincipalMap::parse("uid 1 urn:a\nuser 2 urn:b\n", "p.tsv").unwrap_err();
        assert!(err.starts_with("p.tsv:2:"), "{err}");
    }
}
