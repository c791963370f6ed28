//! Paths as shared strings (one allocation per path, whether the entries, an inode's names or a
//! batch's work list hold it), and the names the index holds for each inode.

use std::collections::HashMap;
use std::sync::Arc;

/// A path relative to the root, shared.
pub type Name = Arc<str>;

/// The names of one inode: almost always one, kept inline.
#[derive(Debug)]
enum Names {
    One(Name),
    Many(Vec<Name>),
}

/// The names the index holds for each inode (files only: a link or unlink changes the other
/// names' ctime).
#[derive(Debug, Default)]
pub struct InodeNames(HashMap<u64, Names>);

impl InodeNames {
    /// `name` is a name of inode `ino`.
    pub fn add(&mut self, ino: u64, name: Name) {
        match self.0.get_mut(&ino) {
            None => {
                self.0.insert(ino, Names::One(name));
            }
            Some(Names::One(first)) => {
                let first = first.clone();
                self.0.insert(ino, Names::Many(vec![first, name]));
            }
            Some(Names::Many(v)) => v.push(name),
        }
    }

    /// `name` is no longer a name of inode `ino`.
    pub fn remove(&mut self, ino: u64, name: &str) {
        let empty = match self.0.get_mut(&ino) {
            None => false,
            Some(Names::One(n)) => &**n == name,
            Some(Names::Many(v)) => {
                v.retain(|n| &**n != name);
                if let [last] = v.as_slice() {
                    let last = last.clone();
                    self.0.insert(ino, Names::One(last));
                    return;
                }
                v.is_empty()
            }
        };
        if empty {
            self.0.remove(&ino);
        }
    }

    /// The names of inode `ino`.
    pub fn get(&self, ino: u64) -> &[Name] {
        match self.0.get(&ino) {
            None => &[],
            Some(Names::One(n)) => std::slice::from_ref(n),
            Some(Names::Many(v)) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_and_go_one_or_many() {
        let mut n = InodeNames::default();
        let (a, b, c): (Name, Name, Name) = ("a".into(), "b".into(), "c".into());
        n.add(1, a.clone());
        assert_eq!(n.get(1), std::slice::from_ref(&a));
        n.add(1, b.clone());
        n.add(1, c.clone());
        assert_eq!(n.get(1), [a.clone(), b.clone(), c.clone()]);
        n.remove(1, "b");
        n.remove(1, "x");
        assert_eq!(n.get(1), [a.clone(), c.clone()]);
        n.remove(1, "a");
        assert_eq!(n.get(1), std::slice::from_ref(&c));
        n.remove(1, "a");
        assert_eq!(n.get(1), [c]);
        n.remove(1, "c");
        assert!(n.get(1).is_empty() && n.0.is_empty());
        n.remove(2, "a");
        assert!(n.get(2).is_empty());
    }
}
