//! What decides who may see what is below a directory, beyond the mode and owners the entries
//! hold: the directories' POSIX access ACLs, and the root's own mode, owners and ACL (the root is
//! never an entry). Kept only under `posix` visibility, so that a change of either republishes
//! what is below.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use icicle_core::access::Acl;
use serde::{Deserialize, Serialize};

/// An ACL as plain numbers (owner, group, mask or 8 when absent, other, then named users and
/// named groups as id and bits): comparable, and stable on disk.
pub type AclKey = Vec<u32>;

fn key(acl: &Acl) -> AclKey {
    let mut k = vec![acl.user_obj, acl.group_obj, acl.mask.unwrap_or(8), acl.other, acl.users.len() as u32];
    k.extend(acl.users.iter().flat_map(|&(id, bits)| [id, bits]));
    k.extend(acl.groups.iter().flat_map(|&(id, bits)| [id, bits]));
    k
}

/// The root's mode, owner, group and ACL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootAccess {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub acl: Option<AclKey>,
}

/// The directories' ACLs and the root's access, as last seen.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DirAccess {
    /// Directories (relative paths) that have an access ACL.
    #[serde(default)]
    acls: HashMap<String, AclKey>,
    /// The root's access, once seen.
    #[serde(default)]
    root: Option<RootAccess>,
}

fn acl_at(path: &Path) -> Option<AclKey> {
    Acl::read(path).as_ref().map(key)
}

impl DirAccess {
    /// Read the ACL of directory `rel` below `root`; whether it differs from the one last seen
    /// (a directory met for the first time had none).
    pub fn note(&mut self, root: &Path, rel: &str) -> bool {
        let now = acl_at(&root.join(rel));
        let before = match &now {
            Some(k) => self.acls.insert(rel.to_string(), k.clone()),
            None => self.acls.remove(rel),
        };
        before != now
    }

    /// Directory `rel` left the entries.
    pub fn forget(&mut self, rel: &str) {
        if !self.acls.is_empty() {
            self.acls.remove(rel);
        }
    }

    /// Read the root's access; whether it differs from what was last seen (false the first
    /// time, when the seed publishes everything anyway).
    pub fn note_root(&mut self, root: &Path) -> bool {
        let Ok(md) = std::fs::symlink_metadata(root) else { return false };
        let now = RootAccess { mode: md.mode(), uid: md.uid(), gid: md.gid(), acl: acl_at(root) };
        self.root.replace(now.clone()).is_some_and(|before| before != now)
    }

    /// Whether nothing is held (a checkpoint leaves it out).
    pub fn is_empty(&self) -> bool {
        self.acls.is_empty() && self.root.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acl_is_a_key_that_changes_with_any_entry() {
        let a = Acl { user_obj: 7, users: vec![(1000, 5)], group_obj: 5, groups: vec![], mask: Some(5), other: 0 };
        let mut b = a.clone();
        b.users[0].1 = 4;
        let mut c = a.clone();
        c.groups.push((1000, 5));
        c.users.clear();
        assert_ne!(key(&a), key(&b));
        assert_ne!(key(&a), key(&c));
        assert_eq!(key(&a), key(&a.clone()));
    }
}
