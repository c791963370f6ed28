//! What decides who may see what is below a directory beyond its mode and owners, under `posix`
//! visibility: a directory's access ACL (kept in its entry as a digest, so an ACL-only change is
//! a change of the entry), and the root's own mode, owners and ACL (the root is no entry).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use icicle_core::access::Acl;
use serde::{Deserialize, Serialize};

/// A directory's mode, owner, group and ACL digest.
pub(crate) type Access = (u32, u32, u32, u64);

/// A digest of the access ACL of `path` (FNV-1a over its entries; 0: none).
pub fn acl_digest(path: &Path) -> u64 {
    Acl::read(path).map_or(0, |acl| digest(&acl))
}

/// The digest of `acl` (0: none), as [`acl_digest`] reads it.
pub fn digest_of(acl: Option<&Acl>) -> u64 {
    acl.map_or(0, digest)
}

fn digest(acl: &Acl) -> u64 {
    let mut words = vec![acl.user_obj, acl.group_obj, acl.mask.unwrap_or(8), acl.other, acl.users.len() as u32];
    if acl.unreadable {
        words.push(u32::MAX);
    }
    words.extend(acl.users.iter().flat_map(|&(id, bits)| [id, bits]));
    words.extend(acl.groups.iter().flat_map(|&(id, bits)| [id, bits]));
    let h = words
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    h.max(1)
}

/// The root's mode, owner, group and ACL digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootAccess {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub acl: u64,
}

impl RootAccess {
    /// Its mode, owner, group and ACL digest.
    pub(crate) fn access(&self) -> Access {
        (self.mode, self.uid, self.gid, self.acl)
    }

    /// The root's access now (`None` if it cannot be read).
    pub fn of(root: &Path) -> Option<RootAccess> {
        let md = std::fs::symlink_metadata(root).ok()?;
        Some(RootAccess { mode: md.mode(), uid: md.uid(), gid: md.gid(), acl: acl_digest(root) })
    }
}

/// Read the root's access into `known`; whether it differs from what was known (false the first
/// time: the seed publishes everything anyway).
pub fn root_changed(known: &mut Option<RootAccess>, root: &Path) -> bool {
    let Some(now) = RootAccess::of(root) else { return false };
    known.replace(now.clone()).is_some_and(|before| before != now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_changes_with_any_entry_and_is_never_zero() {
        let a = Acl {
            user_obj: 7,
            users: vec![(1000, 5)],
            group_obj: 5,
            groups: vec![],
            mask: Some(5),
            other: 0,
            unreadable: false,
        };
        let mut b = a.clone();
        b.users[0].1 = 4;
        let mut c = a.clone();
        c.groups.push((1000, 5));
        c.users.clear();
        assert_ne!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&c));
        assert_eq!(digest(&a), digest(&a.clone()));
        assert_ne!(digest(&Acl::default()), 0);
        assert_eq!(acl_digest(Path::new("/no/such/path")), 0);
    }
}
