//! The index's schema, and how a GMetaEntry (primary or aggregate, as the `globus` sink sends
//! it) becomes a document. The entry is stored whole (answers return it unchanged); the
//! fields a query filters, sorts or counts on are indexed beside it.

use std::borrow::Cow;

use serde::Deserialize;
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STORED, STRING,
};
use tantivy::TantivyDocument;

/// The fields of the index, by role.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    /// The entry's subject (one document per subject): exact lookups, upserts and deletes; a
    /// fast field, so answers page and scroll in subject order.
    pub subject: Field,
    /// The entry as delivered (stored, never indexed).
    pub entry: Field,
    /// Every principal of `visible_to` (`public` included).
    pub visible_to: Field,
    /// `file` for a primary record, `aggregate` for an aggregate one.
    pub record: Field,
    /// A primary record's `type` (`file`, `link`), an aggregate's `kind` (`user`, `group`, `dir`).
    pub kind: Field,
    /// A primary record's path; a directory aggregate's directory.
    pub path: Field,
    /// The last component of `path`.
    pub name: Field,
    /// `name` reversed: a pattern that ends in a literal (`*.out.1`) is a prefix of it.
    pub name_reversed: Field,
    /// What follows the last `.` of `name`: `*.py` is one term.
    pub extension: Field,
    /// The directory holding `path`.
    pub parent: Field,
    /// An aggregate's principal id (uid, gid or directory).
    pub id: Field,
    /// A primary record's owner uid.
    pub uid: Field,
    /// A primary record's group gid.
    pub gid: Field,
    /// Bytes: a file's size, an aggregate's total.
    pub size: Field,
    /// An aggregate's file count (1 for a primary record).
    pub files: Field,
    /// Seconds since the epoch (`raw` of a primary record).
    pub atime: Field,
    /// A primary record's ctime, seconds since the epoch (`raw.ctime`).
    pub ctime: Field,
    /// A primary record's mtime, seconds since the epoch (`raw.mtime`).
    pub mtime: Field,
    /// The file's mode bits (`raw.mode`, written as octal digits, read back as a number).
    pub mode: Field,
    /// The words (lower-cased letter and digit runs) of the path, the type or kind and an
    /// aggregate's id: what a simple query string (`q`) of `icicle serve` matches.
    pub words: Field,
    /// Lustre's FID of the file (`storage.fid`).
    pub fid: Field,
    /// The project ID (`storage.project_id`).
    pub project_id: Field,
    /// The GPFS fileset (`storage.fileset`).
    pub fileset: Field,
    /// The storage pool: GPFS's, or the Lustre layout's OST pool (`storage.pool`).
    pub pool: Field,
    /// The layout's stripe count (`storage.stripe_count`).
    pub stripe_count: Field,
    /// Every OST index holding the file's objects (`storage.osts`), one term each.
    pub ost: Field,
}

impl Fields {
    /// The schema every index of this release has, and its fields.
    pub fn schema() -> (Schema, Fields) {
        let mut b = Schema::builder();
        let fields = Fields {
            subject: b.add_text_field("subject", STRING | FAST),
            entry: b.add_bytes_field("entry", STORED),
            visible_to: b.add_text_field("visible_to", STRING),
            record: b.add_text_field("record", STRING),
            kind: b.add_text_field("kind", STRING | FAST),
            path: b.add_text_field("path", STRING | FAST),
            name: b.add_text_field("name", STRING),
            name_reversed: b.add_text_field("name_reversed", STRING),
            extension: b.add_text_field("extension", STRING),
            parent: b.add_text_field("parent", STRING),
            id: b.add_text_field("id", STRING | FAST),
            uid: b.add_u64_field("uid", INDEXED | FAST),
            gid: b.add_u64_field("gid", INDEXED | FAST),
            size: b.add_u64_field("size", FAST),
            files: b.add_u64_field("files", FAST),
            atime: b.add_i64_field("atime", FAST),
            ctime: b.add_i64_field("ctime", FAST),
            mtime: b.add_i64_field("mtime", FAST),
            mode: b.add_u64_field("mode", FAST),
            fid: b.add_text_field("fid", STRING),
            project_id: b.add_u64_field("project_id", INDEXED | FAST),
            fileset: b.add_text_field("fileset", STRING | FAST),
            pool: b.add_text_field("pool", STRING | FAST),
            stripe_count: b.add_u64_field("stripe_count", FAST),
            ost: b.add_u64_field("ost", INDEXED),
            // Terms only (no frequencies or positions): a word is there or not.
            words: b.add_text_field(
                "words",
                TextOptions::default().set_indexing_options(
                    TextFieldIndexing::default().set_tokenizer("default").set_index_option(IndexRecordOption::Basic),
                ),
            ),
        };
        (b.build(), fields)
    }

    /// Resolve the fields of an existing index's schema (`None` when one is missing: an index
    /// of another release).
    pub fn of(schema: &Schema) -> Option<Fields> {
        let f = |name: &str| schema.get_field(name).ok();
        Some(Fields {
            subject: f("subject")?,
            entry: f("entry")?,
            visible_to: f("visible_to")?,
            record: f("record")?,
            kind: f("kind")?,
            path: f("path")?,
            name: f("name")?,
            name_reversed: f("name_reversed")?,
            extension: f("extension")?,
            parent: f("parent")?,
            id: f("id")?,
            uid: f("uid")?,
            gid: f("gid")?,
            size: f("size")?,
            files: f("files")?,
            atime: f("atime")?,
            ctime: f("ctime")?,
            mtime: f("mtime")?,
            mode: f("mode")?,
            words: f("words")?,
            fid: f("fid")?,
            project_id: f("project_id")?,
            fileset: f("fileset")?,
            pool: f("pool")?,
            stripe_count: f("stripe_count")?,
            ost: f("ost")?,
        })
    }
}

/// The parts of a GMetaEntry the index reads (anything else is kept in the stored entry only).
#[derive(Deserialize)]
struct Entry<'a> {
    #[serde(borrow)]
    subject: Cow<'a, str>,
    #[serde(default, borrow)]
    visible_to: Vec<Cow<'a, str>>,
    #[serde(borrow)]
    content: Content<'a>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(default, borrow)]
    path: Option<Cow<'a, str>>,
    #[serde(default, borrow, rename = "type")]
    file_type: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    uid: Option<u64>,
    #[serde(default)]
    gid: Option<u64>,
    #[serde(default)]
    size: Option<Size>,
    #[serde(default)]
    file_count: Option<u64>,
    #[serde(default)]
    raw: Option<Raw>,
    #[serde(default, borrow)]
    storage: Option<StorageIn<'a>>,
}

/// `storage`: where the file system keeps a primary record's file.
#[derive(Deserialize)]
struct StorageIn<'a> {
    #[serde(default, borrow)]
    fid: Option<Cow<'a, str>>,
    #[serde(default)]
    project_id: Option<Number>,
    #[serde(default, borrow)]
    fileset: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pool: Option<Cow<'a, str>>,
    #[serde(default)]
    stripe_count: Option<Number>,
    #[serde(default)]
    osts: Option<Vec<Number>>,
}

/// A primary record's size, or an aggregate's statistics of sizes.
#[derive(Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Summary { total: u64 },
}

/// `raw`: a primary record's numbers; an aggregate's statistics (not indexed).
#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    mode: Option<Number>,
    #[serde(default)]
    atime: Option<Number>,
    #[serde(default)]
    ctime: Option<Number>,
    #[serde(default)]
    mtime: Option<Number>,
}

/// A number, or anything else (ignored).
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Int(i64),
    Other(serde::de::IgnoredAny),
}

impl Number {
    fn get(&self) -> Option<i64> {
        match self {
            Number::Int(v) => Some(*v),
            Number::Other(_) => None,
        }
    }
}

/// An entry as a document of the index, and its subject.
#[derive(Debug)]
pub struct Parsed {
    /// The entry's subject.
    pub subject: String,
    /// The document to index: the entry stored whole and its indexed fields.
    pub doc: TantivyDocument,
}

/// `raw.mode` as written (`100644`: the octal digits as a decimal number) to the mode bits.
fn mode_bits(written: u64) -> Option<u64> {
    u64::from_str_radix(&written.to_string(), 8).ok()
}

/// What follows the last `.` of a name (`py` for `a.py` and for `.py`): a name matches `*.EXT`
/// exactly when this is EXT.
pub fn extension(name: &str) -> Option<&str> {
    name.rfind('.').map(|i| &name[i + 1..]).filter(|e| !e.is_empty())
}

/// The directory holding `path` (`/` for a top-level entry).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The document of one GMetaEntry (`entry`, JSON); the error says what is missing.
pub fn document(fields: &Fields, entry: &[u8]) -> Result<Parsed, String> {
    let e: Entry<'_> = serde_json::from_slice(entry).map_err(|err| format!("not a GMetaEntry: {err}"))?;
    let f = fields;
    let c = &e.content;
    let mut doc = TantivyDocument::default();
    doc.add_text(f.subject, &e.subject);
    doc.add_bytes(f.entry, entry);
    for p in &e.visible_to {
        doc.add_text(f.visible_to, p);
    }
    let aggregate = c.kind.is_some() && c.file_type.is_none();
    doc.add_text(f.record, if aggregate { "aggregate" } else { "file" });
    if let Some(k) = c.file_type.as_deref().or(c.kind.as_deref()) {
        doc.add_text(f.kind, k);
        doc.add_text(f.words, k);
    }
    // A directory aggregate's place in the tree is its id.
    let path = match (&c.path, aggregate, c.kind.as_deref()) {
        (Some(p), _, _) => Some(p.as_ref()),
        (None, true, Some("dir")) => c.id.as_deref(),
        _ => None,
    };
    if let Some(p) = path {
        doc.add_text(f.path, p);
        doc.add_text(f.words, p);
        let name = p.rsplit('/').next().unwrap_or(p);
        doc.add_text(f.name, name);
        doc.add_text(f.name_reversed, name.chars().rev().collect::<String>());
        if let Some(ext) = extension(name) {
            doc.add_text(f.extension, ext);
        }
        doc.add_text(f.parent, parent(p));
    }
    if let Some(id) = &c.id {
        doc.add_text(f.id, id);
        if path.is_none() {
            doc.add_text(f.words, id);
        }
    }
    for (field, v) in [(f.uid, c.uid), (f.gid, c.gid)] {
        if let Some(v) = v {
            doc.add_u64(field, v);
        }
    }
    match &c.size {
        Some(Size::Bytes(n)) | Some(Size::Summary { total: n }) => doc.add_u64(f.size, *n),
        None => {}
    }
    doc.add_u64(f.files, c.file_count.unwrap_or(1));
    if let Some(raw) = &c.raw {
        for (field, v) in [(f.atime, &raw.atime), (f.ctime, &raw.ctime), (f.mtime, &raw.mtime)] {
            if let Some(v) = v.as_ref().and_then(Number::get) {
                doc.add_i64(field, v);
            }
        }
        if let Some(m) = raw.mode.as_ref().and_then(Number::get).and_then(|m| u64::try_from(m).ok()).and_then(mode_bits)
        {
            doc.add_u64(f.mode, m);
        }
    }
    if let Some(st) = &c.storage {
        for (field, v) in [(f.fid, &st.fid), (f.fileset, &st.fileset), (f.pool, &st.pool)] {
            if let Some(v) = v {
                doc.add_text(field, v);
            }
        }
        // What is not a whole number (an entry from elsewhere) is kept in the entry only.
        let whole = |n: &Number| n.get().and_then(|v| u64::try_from(v).ok());
        for (field, v) in [(f.project_id, &st.project_id), (f.stripe_count, &st.stripe_count)] {
            if let Some(v) = v.as_ref().and_then(whole) {
                doc.add_u64(field, v);
            }
        }
        for o in st.osts.iter().flatten().filter_map(whole) {
            doc.add_u64(f.ost, o);
        }
    }
    Ok(Parsed { subject: e.subject.into_owned(), doc })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_and_modes() {
        assert_eq!((parent("/a/b"), parent("/a")), ("/a", "/"));
        assert_eq!(mode_bits(100644), Some(0o100644));
        assert_eq!(mode_bits(9), None);
        assert_eq!(
            [extension("a.py"), extension(".py"), extension("a.tar.gz"), extension("a."), extension("a")],
            [Some("py"), Some("py"), Some("gz"), None, None]
        );
    }

    #[test]
    fn storage_attributes_of_any_shape_never_refuse_an_entry() {
        let (_, f) = Fields::schema();
        for storage in [r#"{"osts":null}"#, r#"{"project_id":"7","osts":["x",3]}"#, r#"{"stripe_count":-1}"#, "null"] {
            let e = format!(
                r#"{{"subject":"/a","visible_to":["public"],"content":{{"path":"/a","type":"file","storage":{storage}}}}}"#
            );
            assert!(document(&f, e.as_bytes()).is_ok(), "{storage}");
        }
    }

    #[test]
    fn entries_that_are_not_gmeta_entries_are_refused_with_the_reason() {
        let (_, f) = Fields::schema();
        assert!(document(&f, b"{}").unwrap_err().contains("subject"));
        assert!(document(&f, b"[1]").is_err());
        let p = document(
            &f,
            br#"{"subject":"/a/b","visible_to":["public"],"content":{"path":"/a/b","type":"file","size":3,"uid":1,"gid":2,"raw":{"mode":100644,"mtime":5}}}"#,
        )
        .unwrap();
        assert_eq!(p.subject, "/a/b");
    }
}
