//! A monitor's publish of one update: the record encoded as the file is now, judged along its
//! directories when visibility follows POSIX permissions, or withdrawn (a delete of its
//! subject) when no mapped principal may see it.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use icicle_core::access::{parent_dir, Acl, ChainCache, Perm};
use icicle_core::batch::EntryBatch;
use icicle_core::record::FileRecord;

use crate::encoder::PrimaryEncoder;
use crate::subject::subject_for;

/// Records withdrawn because they could not be published (for the sampled warning).
static WITHDRAWN: AtomicU64 = AtomicU64::new(0);

/// What a record is judged with when visibility follows POSIX permissions.
pub struct Judge<'j> {
    /// The directory chains read so far in this emit (from the top the source covers).
    pub chains: &'j mut ChainCache,
    /// The record's path as the chains name directories: its parent directory is judged.
    pub path: &'j str,
    /// A directory's permissions as they are now, by the chains' name for it (`None`: unknown).
    pub lookup: &'j mut dyn FnMut(&str) -> Option<Perm>,
    /// Where the file's ACL is read (`None`: none is read).
    pub acl_at: Option<&'j Path>,
}

/// What became of one update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Its record is the next entry of the chunk.
    Sent,
    /// It cannot be published as the file is now: its subject is a delete.
    Withdrawn,
}

impl PrimaryEncoder {
    /// Encode `rec` as the next entry of `chunk`: with `posix`, visible to whom its ACL and its
    /// directories (as [`Judge`] reads them) let see it, otherwise by the policy's lists. A
    /// record no mapped principal may see is withdrawn: the delete of its subject goes to
    /// `deletes` (the index must not keep a record that shows the file to whoever could see
    /// it before), with a sampled warning.
    pub fn publish(
        &mut self,
        chunk: &mut EntryBatch,
        deletes: &mut Vec<String>,
        rec: &FileRecord<'_>,
        posix: Option<Judge<'_>>,
    ) -> Published {
        let encoded = match posix {
            Some(j) => {
                let dirs = j.chains.chain(parent_dir(j.path), j.lookup);
                let acl = j.acl_at.and_then(Acl::read).map(Arc::new);
                self.encode_entry_in(chunk, rec, acl, dirs.as_ref())
            }
            None => self.encode_entry(chunk, rec),
        };
        match encoded {
            Ok(()) => Published::Sent,
            Err(e) => {
                deletes.push(subject_for(rec.path).into_owned());
                if let Some(n) = icicle_core::log_sample::count_to_log(&WITHDRAWN) {
                    tracing::warn!(message = "record withdrawn: it cannot be published as the file is now (the first 20 are logged, then one in 10,000)", path = %rec.path, error = %e, seen = n);
                }
                Published::Withdrawn
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use icicle_core::access::AccessPolicy;
    use icicle_core::policy::{PrincipalMap, RecordPolicy};
    use icicle_core::record::FileKind;

    fn rec(path: &str, mode: u32, uid: u32) -> FileRecord<'_> {
        FileRecord {
            path,
            kind: FileKind::File,
            attrs: icicle_core::Attrs { mode, uid, gid: uid, size: 1, ..Default::default() },
            storage: None,
        }
    }

    #[test]
    fn a_record_nobody_may_see_is_withdrawn() {
        let principals = PrincipalMap::parse("uid 1000 urn:u1000\n", "t").unwrap();
        let policy =
            RecordPolicy { principals: Arc::new(principals), access: Some(AccessPolicy::Posix), ..Default::default() };
        let mut enc = PrimaryEncoder::new(Arc::new(policy));
        let (mut chunk, mut deletes) = (EntryBatch::default(), Vec::new());
        let mut chains = ChainCache::new("/");
        let mut lookup = |_: &str| Some(Perm::new(0o40755, 0, 0));
        for (path, uid, want) in [("/d/mine", 1000, Published::Sent), ("/d/theirs", 5, Published::Withdrawn)] {
            let judge = Judge { chains: &mut chains, path, lookup: &mut lookup, acl_at: None };
            assert_eq!(enc.publish(&mut chunk, &mut deletes, &rec(path, 0o100600, uid), Some(judge)), want);
        }
        assert_eq!(chunk.len(), 1);
        assert_eq!(deletes, vec!["/d/theirs".to_string()]);
    }
}
