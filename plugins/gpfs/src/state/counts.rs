//! What the GPFS state counts of the events it applies.

/// Counters of the reduction and the state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GpfsCounts {
    /// Events applied to the state (ignored ones are dropped before).
    pub events: u64,
    /// Operations replaced by a later one for the same path.
    pub coalesced: u64,
    /// Creates whose object was removed before the emit (both dropped).
    pub cancelled: u64,
    /// IN_MOVED_TO events applied (paired or not).
    pub renames: u64,
    /// Directories moved from one name to another.
    pub directory_renames: u64,
    /// Descendants moved by directory renames.
    pub moved_descendants: u64,
    /// IN_MOVED_TO without an IN_MOVED_FROM (treated as a create).
    pub unpaired_moves: u64,
    /// IN_MOVED_FROM whose pair never came (moved out of the watched fileset: a removal).
    pub moved_out: u64,
    /// IN_MOVED_FROM read again after a restart while the checkpoint still held it waiting.
    pub replayed_halves: u64,
    /// Names a rename or a move out left alone: a newer object (another inode) holds them.
    pub newer_kept: u64,
    /// Modifications carrying exactly the metadata already indexed (nothing sent).
    pub unchanged: u64,
    /// Files published again because a directory above them changed permissions.
    pub reevaluated: u64,
    /// Files let go of to stay within `lru_capacity` (still indexed).
    pub evicted: u64,
    /// Evicted files known again (an event named them, or a directory rename found them):
    /// each may cost one operation a state that kept them would not send.
    pub evicted_found: u64,
    /// Hard links made to a file one of whose names was evicted (see `Created`).
    pub evicted_links: u64,
    /// Directories moved out of the fileset with evicted files below: their records cannot
    /// be named for deletion.
    pub evicted_unreachable: u64,
    /// Directories moved into the fileset from outside with no `mount` to walk: what they
    /// hold is not indexed until events name it.
    pub moved_in_unwalked: u64,
    /// Operations the mount corrected when events came from several partitions (see
    /// `verify`): an update of a name that was gone or held another object, a delete of a
    /// name that holds a file.
    pub corrected: u64,
    /// Older names removed because a directory rename read late (from another partition)
    /// showed them, after the removal of the newer name was read.
    pub late_deletes: u64,
    /// Directory IN_MOVED_FROM paired with an IN_MOVED_TO read before it.
    pub late_pairs: u64,
}
