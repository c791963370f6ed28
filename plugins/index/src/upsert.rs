//! Upserts without needless deletes: an entry replaces its subject's document, but a delete of
//! a subject the index has never held is not free (every pending delete is applied to every
//! segment at the commit, and kept in memory until then). So a delete goes with an upsert only
//! when the committed index holds the subject or an uncommitted upsert added it.

use std::collections::HashSet;

use tantivy::schema::Field;
use tantivy::{IndexWriter, Searcher, TantivyDocument, Term};
use xxhash_rust::xxh3::xxh3_128;

use crate::schema::Parsed;

/// The subjects upserted since the last commit (by hash), for one writer.
#[derive(Default)]
pub struct Upserts {
    pending: HashSet<u128, foldhash::fast::RandomState>,
}

impl Upserts {
    /// Add `parsed`, deleting first the documents its subject may already have (`committed`:
    /// a searcher of the last commit).
    pub fn upsert(
        &mut self,
        writer: &IndexWriter<TantivyDocument>,
        committed: &Searcher,
        subject: Field,
        parsed: Parsed,
    ) -> tantivy::Result<()> {
        let term = Term::from_field_text(subject, &parsed.subject);
        let again = !self.pending.insert(xxh3_128(parsed.subject.as_bytes()));
        // A document freq counts deleted documents too: at worst a needless delete.
        if again || committed.doc_freq(&term)? > 0 {
            writer.delete_term(term);
        }
        writer.add_document(parsed.doc)?;
        Ok(())
    }

    /// Delete `subject`'s document.
    pub fn delete(&mut self, writer: &IndexWriter<TantivyDocument>, field: Field, subject: &str) {
        writer.delete_term(Term::from_field_text(field, subject));
    }

    /// What was pending is committed (or rolled back): the next searcher shows it.
    pub fn committed(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{document, Fields};

    fn entry(subject: &str, size: u64) -> Vec<u8> {
        format!(r#"{{"subject":"{subject}","visible_to":["public"],"content":{{"path":"{subject}","type":"file","size":{size}}}}}"#).into_bytes()
    }

    /// One document a subject, whether it was upserted twice before a commit, again after
    /// one, or deleted.
    #[test]
    fn one_document_a_subject_across_commits() {
        let (schema, f) = Fields::schema();
        let index = tantivy::Index::create_in_ram(schema);
        let mut w: IndexWriter<TantivyDocument> = index.writer_with_num_threads(1, 15 << 20).unwrap();
        let reader = index.reader_builder().reload_policy(tantivy::ReloadPolicy::Manual).try_into().unwrap();
        let mut u = Upserts::default();
        let count = |reader: &tantivy::IndexReader, s: &str| {
            reader
                .searcher()
                .search(
                    &tantivy::query::TermQuery::new(
                        Term::from_field_text(f.subject, s),
                        tantivy::schema::IndexRecordOption::Basic,
                    ),
                    &tantivy::collector::Count,
                )
                .unwrap()
        };
        for (round, sizes) in [[1u64, 2], [3, 4]].iter().enumerate() {
            for size in sizes {
                u.upsert(&w, &reader.searcher(), f.subject, document(&f, &entry("/a", *size)).unwrap()).unwrap();
            }
            u.upsert(&w, &reader.searcher(), f.subject, document(&f, &entry(&format!("/b{round}"), 1)).unwrap())
                .unwrap();
            w.commit().unwrap();
            u.committed();
            reader.reload().unwrap();
            assert_eq!(count(&reader, "/a"), 1, "round {round}");
        }
        u.delete(&w, f.subject, "/a");
        w.commit().unwrap();
        reader.reload().unwrap();
        assert_eq!((count(&reader, "/a"), count(&reader, "/b0"), count(&reader, "/b1")), (0, 1, 1));
    }
}
