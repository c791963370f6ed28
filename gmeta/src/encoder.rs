//! GMetaEntry encoding of primary records: subject, visible_to, content.

use std::collections::HashMap;
use std::sync::Arc;

use icicle_core::access::{Acl, Perm};
use icicle_core::batch::EntryBatch;
use icicle_core::policy::RecordPolicy;
use icicle_core::record::{mode_octal_as_int, mode_string, FileRecord, Storage};

use crate::iso::DayCache;
use crate::json::{clean_prefix, push_i64, push_int, push_json_str, push_u64};
use crate::subject::{subject_for, MAX_SUBJECT_BYTES};
use crate::visible::{resolve_posix, resolve_visible_to};

/// Text that repeats from one record to the next (files of one owner with one mode come in
/// runs), kept by the values it was made from.
#[derive(Debug, Default)]
struct Repeats {
    /// `,"uid":U,"gid":G,"mode":"MODE","atime":"` and its (uid, gid, mode).
    owner: Option<(u32, u32, u32)>,
    owner_text: Vec<u8>,
    /// `","version":V,"raw":{"mode":N,"atime":` and its mode.
    raw_mode: Option<u32>,
    raw_text: Vec<u8>,
}

impl Repeats {
    fn push_owner(&mut self, out: &mut Vec<u8>, uid: u32, gid: u32, mode: u32) {
        if self.owner != Some((uid, gid, mode)) {
            let t = &mut self.owner_text;
            t.clear();
            t.extend_from_slice(br#","uid":"#);
            push_int(t, uid);
            t.extend_from_slice(br#","gid":"#);
            push_int(t, gid);
            t.extend_from_slice(br#","mode":""#);
            t.extend_from_slice(&mode_string(mode));
            t.extend_from_slice(br#"","atime":""#);
            self.owner = Some((uid, gid, mode));
        }
        out.extend_from_slice(&self.owner_text);
    }

    fn push_raw_mode(&mut self, out: &mut Vec<u8>, version_json: &[u8], mode: u32) {
        if self.raw_mode != Some(mode) {
            let t = &mut self.raw_text;
            t.clear();
            t.extend_from_slice(br#"","version":"#);
            t.extend_from_slice(version_json);
            t.extend_from_slice(br#","raw":{"mode":"#);
            push_int(t, mode_octal_as_int(mode));
            t.extend_from_slice(br#","atime":"#);
            self.raw_mode = Some(mode);
        }
        out.extend_from_slice(&self.raw_text);
    }
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
    /// The last (permission bits, uid, gid) looked up in `posix_cache`, and its answer.
    posix_last: Option<((u32, u32, u32), EncodedPrincipals)>,
    iso: DayCache,
    repeats: Repeats,
}

impl PrimaryEncoder {
    /// A new encoder for `policy`.
    pub fn new(policy: Arc<RecordPolicy>) -> PrimaryEncoder {
        let mut version_json = Vec::new();
        push_json_str(&mut version_json, &policy.version);
        PrimaryEncoder {
            policy,
            version_json,
            cache: HashMap::new(),
            last: None,
            posix_chain: None,
            posix_cache: HashMap::new(),
            posix_last: None,
            iso: DayCache::default(),
            repeats: Repeats::default(),
        }
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
        let entry = self
            .cache
            .entry((uid, gid))
            .or_insert_with(|| resolve_visible_to(policy, Some(uid), Some(gid)).map(Arc::from));
        entry.clone().ok_or_else(|| format!("no visible_to principal for uid {uid} / gid {gid} (map them in the principals file or set records.fallback)"))
    }

    /// The encoded `visible_to` array for `rec` whose directories from the top down are
    /// `dirs` (`None`: unknown): by POSIX permissions when the policy says so, otherwise by
    /// the owner/group lists.
    pub fn visible_to_in(
        &mut self,
        rec: &FileRecord<'_>,
        acl: Option<Arc<Acl>>,
        dirs: Option<&Arc<[Perm]>>,
    ) -> Result<Arc<[u8]>, String> {
        let Some(access) = self.policy.access else { return self.visible_to(rec.attrs.uid, rec.attrs.gid) };
        if acl.is_some() {
            let file = Perm { mode: rec.attrs.mode, uid: rec.attrs.uid, gid: rec.attrs.gid, acl };
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
            self.posix_last = None;
        }
        let key = (rec.attrs.mode & 0o777, rec.attrs.uid, rec.attrs.gid);
        // Siblings mostly share their owner and mode: the last answer first.
        if let Some((k, v)) = &self.posix_last {
            if *k == key {
                return Ok(v.clone());
            }
        }
        let v = match self.posix_cache.get(&key) {
            Some(v) => v.clone(),
            None => {
                let file = Perm::new(rec.attrs.mode, rec.attrs.uid, rec.attrs.gid);
                let v: EncodedPrincipals = resolve_posix(&self.policy, access, dirs.map(|d| &**d), &file)?.into();
                self.posix_cache.insert(key, v.clone());
                v
            }
        };
        self.posix_last = Some((key, v.clone()));
        Ok(v)
    }

    /// `visible_to` for an aggregate: `owner` applies only with a uid, `group` only with a gid.
    pub fn visible_to_parts(&mut self, uid: Option<u32>, gid: Option<u32>) -> Result<Vec<u8>, String> {
        resolve_visible_to(&self.policy, uid, gid).ok_or_else(|| "no visible_to principal".to_string())
    }

    /// Append the GMetaEntry for `rec` to `out`.
    pub fn encode(&mut self, rec: &FileRecord<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        let vis = self.visible_to(rec.attrs.uid, rec.attrs.gid)?;
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
        push_u64(out, rec.attrs.size);
        // `,"uid":…,"gid":…,"mode":"…","atime":"`
        self.repeats.push_owner(out, rec.attrs.uid, rec.attrs.gid, rec.attrs.mode);
        self.iso.push(out, rec.attrs.atime);
        out.extend_from_slice(br#"","ctime":""#);
        self.iso.push(out, rec.attrs.ctime);
        out.extend_from_slice(br#"","mtime":""#);
        self.iso.push(out, rec.attrs.mtime);
        // `","version":…,"raw":{"mode":…,"atime":`
        self.repeats.push_raw_mode(out, &self.version_json, rec.attrs.mode);
        push_i64(out, rec.attrs.atime);
        out.extend_from_slice(br#","ctime":"#);
        push_i64(out, rec.attrs.ctime);
        out.extend_from_slice(br#","mtime":"#);
        push_i64(out, rec.attrs.mtime);
        if rec.attrs.inode != 0 {
            out.extend_from_slice(br#","inode":"#);
            push_u64(out, rec.attrs.inode);
        }
        out.push(b'}');
        if let Some(st) = rec.storage.filter(|s| !s.is_empty()) {
            push_storage(out, st);
        }
        out.extend_from_slice(b"}}");
    }
    /// Encode `rec` as the next entry of `batch`; when it cannot be encoded nothing is kept
    /// and the reason is returned.
    pub fn encode_entry(&mut self, batch: &mut EntryBatch, rec: &FileRecord<'_>) -> Result<(), String> {
        match self.encode(rec, batch.buffer()) {
            Ok(()) => {
                batch.commit();
                Ok(())
            }
            Err(e) => {
                batch.rollback();
                Err(e)
            }
        }
    }

    /// [`PrimaryEncoder::encode_entry`] with visibility judged by the file's ACL and along
    /// `dirs` (the directories from the top down to the record's parent; `None`: unknown)
    /// when the policy follows permissions.
    pub fn encode_entry_in(
        &mut self,
        batch: &mut EntryBatch,
        rec: &FileRecord<'_>,
        acl: Option<Arc<Acl>>,
        dirs: Option<&Arc<[Perm]>>,
    ) -> Result<(), String> {
        let vis = self.visible_to_in(rec, acl, dirs)?;
        self.encode_with(rec, &vis, batch.buffer());
        batch.commit();
        Ok(())
    }
}

/// `,"storage":{...}`: the parts of `st` the source knew, under the names the index reads.
fn push_storage(out: &mut Vec<u8>, st: &Storage) {
    out.extend_from_slice(br#","storage":{"#);
    let mut sep = "";
    let mut key = |out: &mut Vec<u8>, k: &str| {
        out.extend_from_slice(sep.as_bytes());
        push_json_str(out, k);
        out.push(b':');
        sep = ",";
    };
    if let Some(f) = &st.fid {
        key(out, "fid");
        push_json_str(out, f);
    }
    if let Some(p) = st.project_id {
        key(out, "project_id");
        push_u64(out, u64::from(p));
    }
    if let Some(f) = &st.fileset {
        key(out, "fileset");
        push_json_str(out, f);
    }
    if let Some(p) = &st.pool {
        key(out, "pool");
        push_json_str(out, p);
    }
    if let Some(c) = st.stripe_count {
        key(out, "stripe_count");
        push_u64(out, u64::from(c));
    }
    if !st.osts.is_empty() {
        key(out, "osts");
        out.push(b'[');
        for (i, o) in st.osts.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_u64(out, u64::from(*o));
        }
        out.push(b']');
    }
    if !st.layout.is_empty() {
        key(out, "layout");
        push_layout(out, &st.layout);
    }
    out.push(b'}');
}

/// `[{"start":…,"end":…,"stripe_size":…,"osts":[…]},…]`: a component reaching the end of the
/// file has no `end` (JSON numbers past 2^53 are not exact in every reader).
fn push_layout(out: &mut Vec<u8>, layout: &[icicle_core::traits::LayoutComponent]) {
    out.push(b'[');
    for (i, c) in layout.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"start":"#);
        push_u64(out, c.start);
        if c.end != u64::MAX {
            out.extend_from_slice(br#","end":"#);
            push_u64(out, c.end);
        }
        out.extend_from_slice(br#","stripe_size":"#);
        push_u64(out, c.stripe_size);
        out.extend_from_slice(br#","osts":["#);
        for (k, o) in c.osts.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            push_u64(out, u64::from(*o));
        }
        out.extend_from_slice(b"]}");
    }
    out.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;
    use icicle_core::policy::{PrincipalMap, VisibleTo};
    use icicle_core::record::FileKind;

    use crate::subject::HASHED_SUBJECT_PREFIX;

    fn policy(vis: &[&str]) -> Arc<RecordPolicy> {
        let mut p = PrincipalMap::parse("uid 1000 urn:site:u1000\ngid 100 urn:site:g100\n", "t").unwrap();
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
        let mut rng = icicle_core::rng::Rng::new(0x2545_f491_4f6c_dd1d);
        for _ in 0..5_000 {
            let x = rng.next_u64();
            let len = (x % 70) as usize;
            // Mostly plain text, so that clean prefixes of every length occur.
            let s: String = (0..len)
                .map(|k| alphabet[if (x >> (k % 61)) & 7 == 0 { (x >> (k % 53)) as usize % alphabet.len() } else { 0 }])
                .collect();
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
            attrs: icicle_core::Attrs {
                mode: 0o100644,
                uid: 1000,
                gid: 100,
                size: 42,
                atime: 1_710_554_401,
                ctime: 0,
                mtime: -1,
                inode: 0,
            },
            storage: None,
        };
        let mut out = Vec::new();
        e.encode(&rec, &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s,
            r#"{"subject":"/a/\"q\"\tb.txt","visible_to":["urn:site:u1000","urn:site:g100"],"content":{"name":"\"q\"\tb.txt","path":"/a/\"q\"\tb.txt","type":"file","size":42,"uid":1000,"gid":100,"mode":"-rw-r--r--","atime":"2024-03-16T02:00:01+00:00","ctime":"1970-01-01T00:00:00+00:00","mtime":"1969-12-31T23:59:59+00:00","version":"v1","raw":{"mode":100644,"atime":1710554401,"ctime":0,"mtime":-1}}}"#
        );
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["content"]["name"], "\"q\"\tb.txt");
    }

    #[test]
    fn storage_attributes_are_an_object_of_the_content_holding_what_is_known() {
        let mut e = PrimaryEncoder::new(policy(&["public"]));
        let st = Storage {
            fid: Some("[0x200000401:0x1:0x0]".into()),
            pool: Some("flash".into()),
            stripe_count: Some(2),
            osts: vec![17, 3],
            ..Storage::default()
        };
        let rec = FileRecord {
            path: "/l/a",
            kind: FileKind::File,
            attrs: icicle_core::Attrs { mode: 0o100644, inode: 7, ..Default::default() },
            storage: Some(&st),
        };
        let mut out = Vec::new();
        e.encode(&rec, &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.ends_with(r#""inode":7},"storage":{"fid":"[0x200000401:0x1:0x0]","pool":"flash","stripe_count":2,"osts":[17,3]}}}"#),
            "{s}"
        );
        let gpfs = Storage { fileset: Some("0".into()), pool: Some("system".into()), ..Storage::default() };
        let mut out = Vec::new();
        e.encode(&FileRecord { storage: Some(&gpfs), ..rec }, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["content"]["storage"], serde_json::json!({"fileset": "0", "pool": "system"}));
        // A layout: its components, the last one without `end` when it reaches EOF.
        let comp = |start, end, osts: &[u32]| icicle_core::traits::LayoutComponent {
            start,
            end,
            stripe_size: 1 << 20,
            osts: osts.to_vec(),
        };
        let pfl = Storage { layout: vec![comp(0, 4 << 20, &[86]), comp(4 << 20, u64::MAX, &[105, 231])], ..st.clone() };
        let mut out = Vec::new();
        e.encode(&FileRecord { storage: Some(&pfl), ..rec }, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["content"]["storage"]["layout"],
            serde_json::json!([
                {"start": 0, "end": 4194304, "stripe_size": 1048576, "osts": [86]},
                {"start": 4194304, "stripe_size": 1048576, "osts": [105, 231]}
            ])
        );
        // Nothing known: no object at all.
        let mut out = Vec::new();
        e.encode(&FileRecord { storage: Some(&Storage::default()), ..rec }, &mut out).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("storage"));
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
}
