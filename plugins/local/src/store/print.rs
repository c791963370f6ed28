//! What the index holds for one path (a fingerprint of its metadata), and its row on disk.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::store::entries_log::Fields;

/// What the index holds for one path: enough to tell whether it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Print {
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds.
    pub mtime: i64,
    /// Change time, nanoseconds (covers mode, owner and link-count changes).
    pub ctime: i64,
    /// A directory (tracked for walks and subtree deletes, never published).
    pub dir: bool,
    /// Mode, owner and group (a directory's decide who may see what is below it).
    #[serde(default)]
    pub mode: u32,
    /// Owner (user id).
    #[serde(default)]
    pub uid: u32,
    /// Group id.
    #[serde(default)]
    pub gid: u32,
    /// A directory's access ACL as a digest, under posix visibility (0: none, or not tracked).
    #[serde(default)]
    pub acl: u64,
}

impl Print {
    pub(crate) fn of(md: &std::fs::Metadata) -> Print {
        Print {
            ino: md.ino(),
            size: md.size(),
            mtime: md.mtime().saturating_mul(1_000_000_000).saturating_add(md.mtime_nsec()),
            ctime: md.ctime().saturating_mul(1_000_000_000).saturating_add(md.ctime_nsec()),
            dir: md.is_dir(),
            mode: md.mode(),
            uid: md.uid(),
            gid: md.gid(),
            acl: 0,
        }
    }

    /// The print of `rel` below `root`; a directory's with its ACL digest under `posix` (an
    /// ACL-only change is then a change of the entry, whatever its ctime shows).
    pub(crate) fn at(root: &Path, rel: &str, md: &std::fs::Metadata, posix: bool) -> Print {
        let mut p = Print::of(md);
        if posix && p.dir {
            p.acl = crate::store::dir_access::acl_digest(&icicle_core::name::on(root, rel));
        }
        p
    }

    pub(crate) fn same_access(&self, o: &Print) -> bool {
        self.access() == o.access()
    }

    /// Its mode, owner, group and ACL digest.
    pub(crate) fn access(&self) -> crate::store::dir_access::Access {
        (self.mode, self.uid, self.gid, self.acl)
    }
}

impl From<Print> for Fields {
    fn from(p: Print) -> Fields {
        (p.ino, p.size, p.mtime, p.ctime, p.dir, p.mode, p.uid, p.gid, p.acl)
    }
}

pub(crate) fn print_of((ino, size, mtime, ctime, dir, mode, uid, gid, acl): Fields) -> Print {
    Print { ino, size, mtime, ctime, dir, mode, uid, gid, acl }
}
