//! The fileset and storage pool an event names, interned: an event carries a small id, and a
//! record is given the attributes behind it when it is encoded. A fileset has a few pools, so
//! a process sees a handful of pairs; each thread matches the ones it saw lately by their text
//! without a lock.

use std::sync::{Arc, OnceLock, RwLock};

use icicle_core::record::Storage;

/// The most distinct (fileset, pool) pairs a process keeps; events naming others carry none.
pub const MAX_INTERNED: usize = 1 << 16;

/// Pairs each thread matches without taking the table's lock.
const RECENT: usize = 32;

/// The longest fileset or pool name kept (GPFS names are far shorter); longer ones are none.
pub const MAX_NAME: usize = 255;

/// The process's pairs, by id (`id - 1`) and by their text.
#[derive(Default)]
struct Table {
    by_id: Vec<Arc<Storage>>,
    by_text: std::collections::HashMap<(Option<String>, Option<String>), u32>,
}

/// The fileset and pool of an event (`NONE`: it named neither, or too many pairs were seen).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StorageId(u32);

fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(|| RwLock::new(Table::default()))
}

/// The pairs a thread met lately, and where the next one goes when the list is full.
type Recent = (Vec<(StorageId, Arc<Storage>)>, usize);

thread_local! {
    static RECENT_PAIRS: std::cell::RefCell<Recent> = const { std::cell::RefCell::new((Vec::new(), 0)) };
}

fn same(st: &Storage, fileset: Option<&str>, pool: Option<&str>) -> bool {
    st.pool.as_deref() == pool && st.fileset.as_deref() == fileset
}

impl StorageId {
    /// No fileset or pool.
    pub const NONE: StorageId = StorageId(0);

    /// The id of `fileSetID` and `poolName` as an event gives them (an empty value, as CPFS
    /// writes for absent ones, is none).
    pub fn of(fileset: Option<&str>, pool: Option<&str>) -> StorageId {
        let fileset = fileset.map(str::trim).filter(|s| !s.is_empty() && s.len() <= MAX_NAME);
        let pool = pool.map(str::trim).filter(|s| !s.is_empty() && s.len() <= MAX_NAME);
        if fileset.is_none() && pool.is_none() {
            return StorageId::NONE;
        }
        RECENT_PAIRS.with_borrow_mut(|(recent, next)| {
            if let Some((id, _)) = recent.iter().find(|(_, st)| same(st, fileset, pool)) {
                return *id;
            }
            let Some((id, st)) = StorageId::intern(fileset, pool) else { return StorageId::NONE };
            if recent.len() < RECENT {
                recent.push((id, st));
            } else {
                recent[*next] = (id, st);
                *next = (*next + 1) % RECENT;
            }
            id
        })
    }

    /// The pair's id in the process's table (added when new, while there is room).
    fn intern(fileset: Option<&str>, pool: Option<&str>) -> Option<(StorageId, Arc<Storage>)> {
        let text = (fileset.map(str::to_string), pool.map(str::to_string));
        let found = |t: &Table| t.by_text.get(&text).map(|id| (StorageId(*id), t.by_id[*id as usize - 1].clone()));
        if let Some(hit) = found(&table().read().unwrap_or_else(std::sync::PoisonError::into_inner)) {
            return Some(hit);
        }
        let mut t = table().write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(hit) = found(&t) {
            return Some(hit);
        }
        if t.by_id.len() >= MAX_INTERNED {
            return None;
        }
        let st = Arc::new(Storage { fileset: text.0.clone(), pool: text.1.clone(), ..Storage::default() });
        t.by_id.push(st.clone());
        let id = u32::try_from(t.by_id.len()).ok()?;
        t.by_text.insert(text, id);
        Some((StorageId(id), st))
    }

    /// The fileset and pool behind the id.
    pub fn get(self) -> Option<Arc<Storage>> {
        let i = (self.0 as usize).checked_sub(1)?;
        table().read().unwrap_or_else(std::sync::PoisonError::into_inner).by_id.get(i).cloned()
    }

    /// Whether the event named neither.
    pub fn is_none(self) -> bool {
        self == StorageId::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_interned_once_and_read_back() {
        let a = StorageId::of(Some("0"), Some("system"));
        assert_eq!(a, StorageId::of(Some(" 0"), Some("system")));
        let b = StorageId::of(Some("0"), Some("data"));
        assert_ne!(a, b);
        assert_eq!(StorageId::of(Some(""), Some("")), StorageId::NONE);
        assert_eq!(StorageId::of(None, Some(&"p".repeat(MAX_NAME + 1))), StorageId::NONE);
        let st = b.get().unwrap();
        assert_eq!((st.fileset.as_deref(), st.pool.as_deref()), (Some("0"), Some("data")));
        assert!(StorageId::NONE.get().is_none());
        // Another thread finds the same id.
        let c = std::thread::spawn(|| StorageId::of(Some("0"), Some("data"))).join().unwrap();
        assert_eq!(b, c);
    }
}
