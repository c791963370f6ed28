//! Where a versioned run read a row, packed in 64 bits: a path's first sighting is kept beside
//! the previous manifest's lookups, so a second row naming it can name both.

use super::manifest::Change;

/// Where a run read a row, packed: whether `at` is a byte offset or a row number (1 bit), the
/// input's number in the run (21 bits) and `at` (40 bits); a part too large for its bits is
/// all ones (unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting(u64);

impl Sighting {
    const INPUT_BITS: u32 = 21;
    const AT_BITS: u32 = 40;
    /// A row whose place is not known.
    pub const ELSEWHERE: Sighting = Sighting((1 << 62) - 1);

    /// The row at byte `offset` (`by_offset`) or numbered `at` of input number `input`.
    pub fn new(input: u32, at: u64, by_offset: bool) -> Sighting {
        let input = u64::from(input).min((1 << Self::INPUT_BITS) - 1);
        let at = at.min((1 << Self::AT_BITS) - 1);
        Sighting((u64::from(by_offset) << 61) | (input << Self::AT_BITS) | at)
    }

    /// The input's number, the offset or row number, and whether it is an offset; `None` for
    /// a part that did not fit.
    pub fn place(self) -> (Option<u32>, Option<u64>, bool) {
        let input = (self.0 >> Self::AT_BITS) & ((1 << Self::INPUT_BITS) - 1);
        let at = self.0 & ((1 << Self::AT_BITS) - 1);
        let input = (input != (1 << Self::INPUT_BITS) - 1).then_some(input as u32);
        (input, (at != (1 << Self::AT_BITS) - 1).then_some(at), self.0 >> 61 & 1 == 1)
    }

    /// As kept in [`PreviousManifest`]: never 0 (the classification in the low two bits).
    pub(crate) fn stored(self, change: Change) -> u64 {
        (self.0 << 2)
            | match change {
                Change::Created => 1,
                Change::Updated => 2,
                Change::Unchanged => 3,
            }
    }

    pub(crate) fn from_stored(v: u64) -> (Sighting, Change) {
        let change = match v & 3 {
            1 => Change::Created,
            2 => Change::Updated,
            _ => Change::Unchanged,
        };
        (Sighting(v >> 2), change)
    }
}
