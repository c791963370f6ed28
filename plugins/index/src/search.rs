//! Questions the index answers: which records match a [`Filter`], for whom ([`Visibility`]),
//! how many, and the stored entries themselves (in path order).

use std::ops::Bound;
use std::path::Path;

use tantivy::collector::{Count, DocSetCollector, TopDocs};
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, RangeQuery, RegexQuery, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Value};
use tantivy::{DocAddress, IndexReader, Order, ReloadPolicy, Searcher, TantivyDocument, Term};

use crate::schema::Fields;
use crate::store::{IndexError, Store};

/// Whose question it is: every record (an administrator reading the index directly), or only
/// the records whose `visible_to` names one of these principals (`public` among them when it
/// applies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visibility {
    /// Every record.
    All,
    /// The records visible to one of these principals.
    Principals(Vec<String>),
}

/// Primary records (files and links) or aggregate records (users, groups, directories).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Record {
    /// A primary record: a file or a link.
    #[default]
    File,
    /// An aggregate record: a user, group or directory.
    Aggregate,
}

/// A range of values: both ends unbounded unless set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span<T> {
    /// The lower end.
    pub lo: Bound<T>,
    /// The upper end.
    pub hi: Bound<T>,
}

impl<T> Default for Span<T> {
    fn default() -> Self {
        Span { lo: Bound::Unbounded, hi: Bound::Unbounded }
    }
}

impl<T> Span<T> {
    fn is_all(&self) -> bool {
        matches!((&self.lo, &self.hi), (Bound::Unbounded, Bound::Unbounded))
    }
}

/// What a record must be to match; every set part must hold.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Primary or aggregate records only.
    pub record: Option<Record>,
    /// Below this directory (at any depth).
    pub under: Option<String>,
    /// Directly in this directory.
    pub parent: Option<String>,
    /// Exactly this path.
    pub path: Option<String>,
    /// A primary record's type (`file`, `link`) or an aggregate's kind (`user`, `group`, `dir`).
    pub kind: Option<String>,
    /// An aggregate's principal id.
    pub id: Option<String>,
    /// A primary record's owner uid.
    pub uid: Option<u64>,
    /// A primary record's group gid.
    pub gid: Option<u64>,
    /// Bytes: a file's size, an aggregate's total.
    pub size: Span<u64>,
    /// A primary record's atime, seconds since the epoch.
    pub atime: Span<i64>,
    /// A primary record's ctime, seconds since the epoch.
    pub ctime: Span<i64>,
    /// A primary record's mtime, seconds since the epoch.
    pub mtime: Span<i64>,
    /// A shell pattern (`*`, `?`, `[...]`) the last component matches whole.
    pub name_glob: Option<String>,
    /// A shell pattern the whole path matches (`*` crosses `/`, as `find -path`).
    pub path_glob: Option<String>,
    /// Files with an object on this OST index (as `lfs find --ost`).
    pub ost: Option<u64>,
    /// Files in this storage pool (GPFS's, or the Lustre layout's OST pool).
    pub pool: Option<String>,
    /// Files of this GPFS fileset.
    pub fileset: Option<String>,
    /// Files of this project ID.
    pub project_id: Option<u64>,
    /// The file of this Lustre FID.
    pub fid: Option<String>,
    /// Files whose layout has this many stripes.
    pub stripe_count: Span<u64>,
}

/// A regular expression (tantivy's, matched against a whole term) for a shell pattern.
pub fn glob_to_regex(glob: &str) -> Result<String, IndexError> {
    let mut out = String::with_capacity(glob.len() * 2);
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '[' => {
                out.push('[');
                if chars.peek() == Some(&'!') {
                    chars.next();
                    out.push('^');
                }
                let mut closed = false;
                for d in chars.by_ref() {
                    if d == ']' {
                        closed = true;
                        break;
                    }
                    if d == '\\' || d == '[' || d == '&' || d == '~' {
                        out.push('\\');
                    }
                    out.push(d);
                }
                if !closed {
                    return Err(IndexError::Query(format!("pattern {glob:?}: a `[` without its `]`")));
                }
                out.push(']');
            }
            '\\' => match chars.next() {
                Some(d) => push_literal(&mut out, d),
                None => push_literal(&mut out, '\\'),
            },
            c => push_literal(&mut out, c),
        }
    }
    Ok(out)
}

fn push_literal(out: &mut String, c: char) {
    if matches!(
        c,
        '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$' | '#' | '&' | '-' | '~'
    ) {
        out.push('\\');
    }
    out.push(c);
}

fn term_query(term: Term) -> Box<dyn Query> {
    Box::new(TermQuery::new(term, IndexRecordOption::Basic))
}

/// A range query over `field` (`None` for the whole range), terms made by `term`.
fn range<T: Copy>(field: Field, span: &Span<T>, term: fn(Field, T) -> Term) -> Option<Box<dyn Query>> {
    if span.is_all() {
        return None;
    }
    let t = |b: &Bound<T>| match b {
        Bound::Included(v) => Bound::Included(term(field, *v)),
        Bound::Excluded(v) => Bound::Excluded(term(field, *v)),
        Bound::Unbounded => Bound::Unbounded,
    };
    Some(Box::new(RangeQuery::new(t(&span.lo), t(&span.hi))))
}

/// The records below directory `dir` (at any depth): the paths from `dir/` up to, not
/// including, `dir0` (`0` follows `/`), answered from the path column.
pub fn below(path: Field, dir: &str) -> Box<dyn Query> {
    let dir = dir.trim_end_matches('/');
    Box::new(RangeQuery::new(
        Bound::Included(Term::from_field_text(path, &format!("{dir}/"))),
        Bound::Excluded(Term::from_field_text(path, &format!("{dir}0"))),
    ))
}

/// The engine's query for `filter` as seen by `who`.
pub fn query(fields: &Fields, filter: &Filter, who: &Visibility) -> Result<Box<dyn Query>, IndexError> {
    let f = fields;
    let mut must: Vec<Box<dyn Query>> = Vec::new();
    if let Some(r) = filter.record {
        must.push(term_query(Term::from_field_text(
            f.record,
            if r == Record::Aggregate { "aggregate" } else { "file" },
        )));
    }
    if let Some(dir) = &filter.under {
        must.push(below(f.path, dir));
    }
    let texts = [
        (f.parent, &filter.parent),
        (f.path, &filter.path),
        (f.kind, &filter.kind),
        (f.id, &filter.id),
        (f.pool, &filter.pool),
        (f.fileset, &filter.fileset),
        (f.fid, &filter.fid),
    ];
    for (field, value) in texts {
        if let Some(v) = value {
            must.push(term_query(Term::from_field_text(field, v)));
        }
    }
    let numbers = [(f.uid, filter.uid), (f.gid, filter.gid), (f.ost, filter.ost), (f.project_id, filter.project_id)];
    for (field, value) in numbers {
        if let Some(v) = value {
            must.push(term_query(Term::from_field_u64(field, v)));
        }
    }
    must.extend(range(f.size, &filter.size, Term::from_field_u64));
    must.extend(range(f.stripe_count, &filter.stripe_count, Term::from_field_u64));
    for (field, span) in [(f.atime, &filter.atime), (f.ctime, &filter.ctime), (f.mtime, &filter.mtime)] {
        must.extend(range(field, span, Term::from_field_i64));
    }
    for (field, glob) in [(f.name, &filter.name_glob), (f.path, &filter.path_glob)] {
        if let Some(g) = glob {
            // `*.EXT`: one term of the extension.
            let ext = g
                .strip_prefix("*.")
                .filter(|e| field == f.name && !e.is_empty() && !e.contains(['*', '?', '[', '\\', '.']));
            if let Some(e) = ext {
                must.push(term_query(Term::from_field_text(f.extension, e)));
                continue;
            }
            // `*LITERAL`: a prefix of the reversed name, not a scan of every name.
            let suffix =
                g.strip_prefix('*').filter(|l| field == f.name && !l.is_empty() && !l.contains(['*', '?', '[', '\\']));
            let (re, field) = match suffix {
                Some(l) => (format!("{}.*", glob_to_regex(&l.chars().rev().collect::<String>())?), f.name_reversed),
                None => (glob_to_regex(g)?, field),
            };
            let q =
                RegexQuery::from_pattern(&re, field).map_err(|e| IndexError::Query(format!("pattern {g:?}: {e}")))?;
            must.push(Box::new(q));
        }
    }
    if let Visibility::Principals(who) = who {
        let any: Vec<(Occur, Box<dyn Query>)> =
            who.iter().map(|p| (Occur::Should, term_query(Term::from_field_text(f.visible_to, p)))).collect();
        // Nobody named: nothing is visible.
        must.push(Box::new(BooleanQuery::new(any)));
    }
    if must.is_empty() {
        return Ok(Box::new(AllQuery));
    }
    Ok(Box::new(BooleanQuery::new(must.into_iter().map(|q| (Occur::Must, q)).collect())))
}

/// A reader of an index directory: answers reflect what was committed when it was opened
/// (or last [`Reader::refresh`]ed).
pub struct Reader {
    store: Store,
    reader: IndexReader,
}

impl Reader {
    /// Open the index in `dir` for reading (any number of readers, beside one writer).
    pub fn open(dir: &Path) -> Result<Reader, IndexError> {
        let store = Store::open(dir)?;
        let reader = store
            .index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| IndexError::engine(dir, e))?;
        Ok(Reader { store, reader })
    }

    /// See what was committed since.
    pub fn refresh(&self) -> Result<(), IndexError> {
        self.reader.reload().map_err(|e| IndexError::engine(&self.store.dir, e))
    }

    /// The index directory.
    pub fn dir(&self) -> &Path {
        &self.store.dir
    }

    /// The index's fields.
    pub fn fields(&self) -> &Fields {
        &self.store.fields
    }

    pub(crate) fn searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    /// How many records match `filter` for `who`.
    pub fn count(&self, filter: &Filter, who: &Visibility) -> Result<u64, IndexError> {
        let q = query(&self.store.fields, filter, who)?;
        let n = self.searcher().search(&q, &Count).map_err(|e| IndexError::engine(&self.store.dir, e))?;
        Ok(n as u64)
    }

    /// The stored entries (GMetaEntry JSON) matching `filter` for `who`, in path order (the
    /// first `limit` when given), each handed to `each`; returns how many.
    pub fn entries(
        &self,
        filter: &Filter,
        who: &Visibility,
        limit: Option<usize>,
        mut each: impl FnMut(&[u8]),
    ) -> Result<u64, IndexError> {
        let q = query(&self.store.fields, filter, who)?;
        let searcher = self.searcher();
        let engine = |e: tantivy::TantivyError| IndexError::engine(&self.store.dir, e);
        let mut found: Vec<(String, DocAddress)> = match limit {
            Some(n) => {
                let top = TopDocs::with_limit(n.max(1)).order_by_string_fast_field("path", Order::Asc);
                searcher
                    .search(&q, &top)
                    .map_err(engine)?
                    .into_iter()
                    .map(|(p, a)| (p.unwrap_or_default(), a))
                    .collect()
            }
            None => {
                searcher.search(&q, &DocSetCollector).map_err(engine)?.into_iter().map(|a| (String::new(), a)).collect()
            }
        };
        if limit == Some(0) {
            return Ok(0);
        }
        // Stored documents read in address order (one block decompressed once), then sorted.
        found.sort_by_key(|(_, a)| *a);
        let mut out: Vec<(String, Vec<u8>)> = Vec::with_capacity(found.len());
        for (_, addr) in found {
            let doc: TantivyDocument = searcher.doc(addr).map_err(engine)?;
            let entry = doc.get_first(self.store.fields.entry).and_then(|v| v.as_bytes()).unwrap_or_default().to_vec();
            let path = doc_path(&entry);
            out.push((path, entry));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, e) in &out {
            each(e);
        }
        Ok(out.len() as u64)
    }
}

/// The path (or, for a user or group aggregate, the subject) of a stored entry, to order by.
fn doc_path(entry: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct E {
        subject: String,
        #[serde(default)]
        content: C,
    }
    #[derive(serde::Deserialize, Default)]
    struct C {
        #[serde(default)]
        path: Option<String>,
    }
    serde_json::from_slice::<E>(entry).map(|e| e.content.path.unwrap_or(e.subject)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_patterns_become_whole_term_expressions() {
        assert_eq!(glob_to_regex("*.c").unwrap(), ".*\\.c");
        assert_eq!(glob_to_regex("f?[!a-c]").unwrap(), "f.[^a\\-c]".replace("\\-", "-"));
        assert_eq!(glob_to_regex("a\\*b").unwrap(), "a\\*b");
        assert!(glob_to_regex("[ab").is_err());
    }
}
