//! What the index holds, by path: the entries (in memory or in SQLite) and their prints, the
//! entries files on disk, the sent-ahead journal of paths, and what a directory's access keeps.

pub(crate) mod dir_access;
pub(crate) mod entries_log;
pub(crate) mod entry_store;
pub(crate) mod fresh_journal;
pub(crate) mod names;
pub(crate) mod print;
