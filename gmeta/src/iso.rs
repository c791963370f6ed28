//! ISO 8601 times on the encoder's hot path: the date text is kept per day (a file's three
//! times and its neighbours' fall on few days), the time of day is written each time.
//!
//! The text is [`icicle_core::time::push_iso8601`]'s, byte for byte: that function writes
//! the date of `secs.div_euclid(86_400)` and then `HH:MM:SS+00:00` of
//! `secs.rem_euclid(86_400)`, so the text of a day's first second, with its
//! `00:00:00+00:00` replaced, is the text of every second of that day.

use icicle_core::time::push_iso8601;

/// Days whose text is kept, direct-mapped by day number (about eleven years).
const SLOTS: usize = 4096;
/// `YYYY-MM-DDTHH:MM:SS+00:00`: a year within 0..=9999 (other years are written in full).
const LEN: usize = 25;
/// Where the time of day starts.
const TIME_AT: usize = 11;

/// The text of a day's first second, by day; a slot whose day is `i64::MIN` is empty (no
/// `i64` second falls on that day).
pub(crate) struct DayCache {
    slots: Box<[(i64, [u8; LEN])]>,
}

impl std::fmt::Debug for DayCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DayCache").field("days", &self.slots.iter().filter(|s| s.0 != i64::MIN).count()).finish()
    }
}

impl Default for DayCache {
    fn default() -> Self {
        DayCache { slots: vec![(i64::MIN, [0u8; LEN]); SLOTS].into_boxed_slice() }
    }
}

impl DayCache {
    /// Append what `push_iso8601(out, secs)` appends.
    #[inline]
    pub(crate) fn push(&mut self, out: &mut Vec<u8>, secs: i64) {
        let day = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400) as u32;
        let slot = &mut self.slots[day.rem_euclid(SLOTS as i64) as usize];
        if slot.0 != day && !Self::fill(slot, day) {
            push_iso8601(out, secs);
            return;
        }
        let mut text = slot.1;
        put2(&mut text, TIME_AT, sod / 3600);
        put2(&mut text, TIME_AT + 3, sod / 60 % 60);
        put2(&mut text, TIME_AT + 6, sod % 60);
        out.extend_from_slice(&text);
    }

    /// Keep `day`'s text in `slot`; `false` when it does not have the usual shape (a year
    /// outside 0..=9999, or a day whose first second is not an `i64`).
    #[cold]
    fn fill(slot: &mut (i64, [u8; LEN]), day: i64) -> bool {
        let Some(first) = day.checked_mul(86_400) else { return false };
        let mut text = Vec::with_capacity(32);
        push_iso8601(&mut text, first);
        if text.len() != LEN || &text[TIME_AT..] != b"00:00:00+00:00" {
            return false;
        }
        slot.0 = day;
        slot.1.copy_from_slice(&text);
        true
    }
}

fn put2(buf: &mut [u8], at: usize, v: u32) {
    buf[at] = b'0' + (v / 10) as u8;
    buf[at + 1] = b'0' + (v % 10) as u8;
}

/// `secs` since the epoch as the records write times (`2024-03-16T02:00:01+00:00`).
pub fn iso_utc(secs: i64) -> String {
    let mut out = Vec::with_capacity(25);
    DayCache::default().push(&mut out, secs);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_time_as_the_records_write_it() {
        assert_eq!(iso_utc(1_710_554_401), "2024-03-16T02:00:01+00:00");
        assert_eq!(iso_utc(-1), "1969-12-31T23:59:59+00:00");
    }

    fn check(cache: &mut DayCache, secs: i64) {
        let (mut want, mut got) = (Vec::new(), Vec::new());
        push_iso8601(&mut want, secs);
        cache.push(&mut got, secs);
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want), "{secs}");
    }

    #[test]
    fn the_text_is_push_iso8601s() {
        let mut cache = DayCache::default();
        let mut rng = icicle_core::rng::Rng::new(0x150_8601);
        let edges = [
            0,
            -1,
            1,
            86_399,
            86_400,
            -86_400,
            -86_401,
            951_782_400,
            4_107_542_399,
            253_402_300_799,
            253_402_300_800,
            -62_167_219_200,
            -62_167_219_201,
        ];
        for s in edges.into_iter().chain([i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 86_400]) {
            check(&mut cache, s);
        }
        for _ in 0..200_000 {
            let x = rng.next_u64();
            let secs = match x % 4 {
                // Around now, as most files are.
                0 => 1_700_000_000 + (x >> 8) as i64 % 300_000_000,
                // The whole range records may carry, and beyond.
                1 => {
                    icicle_core::record::MIN_TIME
                        + (x >> 8) as i64 % (icicle_core::record::MAX_TIME - icicle_core::record::MIN_TIME)
                }
                2 => (x >> 2) as i64 - (1 << 60),
                // Slots shared by days ~11 years apart.
                _ => 1_600_000_000 + ((x >> 8) % 8) as i64 * SLOTS as i64 * 86_400 + (x >> 20) as i64 % 86_400,
            };
            check(&mut cache, secs);
        }
    }
}
