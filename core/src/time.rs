//! Fast, allocation-free ISO 8601 formatting of epoch seconds (UTC, `+00:00`), and seconds
//! from settings as durations.

/// A setting's seconds as a duration, never a panic: NaN and negative values are 0, infinite
/// and larger values a day (the longest wait or timeout any setting means).
pub fn secs(value: f64) -> std::time::Duration {
    const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);
    std::time::Duration::try_from_secs_f64(value.max(0.0)).map_or(DAY, |d| d.min(DAY))
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) → days since 1970-01-01.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn put2(buf: &mut [u8], at: usize, v: u32) {
    buf[at] = b'0' + (v / 10) as u8;
    buf[at + 1] = b'0' + (v % 10) as u8;
}

/// Append `YYYY-MM-DDTHH:MM:SS+00:00` for `secs` to `out`. Years outside 0..=9999 are
/// written with a sign and at least four digits, as ISO 8601 expanded years.
pub fn push_iso8601(out: &mut Vec<u8>, secs: i64) {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400) as u32;
    let (y, m, d) = civil_from_days(days);
    let mut buf = *b"0000-00-00T00:00:00+00:00";
    if (0..=9999).contains(&y) {
        let y = y as u32;
        put2(&mut buf, 0, y / 100);
        put2(&mut buf, 2, y % 100);
    } else {
        out.extend_from_slice(format!("{:+05}", y).as_bytes());
    }
    put2(&mut buf, 5, m);
    put2(&mut buf, 8, d);
    put2(&mut buf, 11, sod / 3600);
    put2(&mut buf, 14, sod / 60 % 60);
    put2(&mut buf, 17, sod % 60);
    let from = if (0..=9999).contains(&y) { 0 } else { 4 };
    out.extend_from_slice(&buf[from..]);
}

/// `push_iso8601` into a new `String`.
pub fn iso8601(secs: i64) -> String {
    let mut v = Vec::with_capacity(25);
    push_iso8601(&mut v, secs);
    String::from_utf8(v).unwrap_or_default()
}

/// Parse a calendar time into epoch seconds: `YYYY-MM-DD`, then `T`, a space or `_` (IBM
/// Storage Scale's event and audit records write `2024-03-13_16:44:58.423+0800`), then
/// `HH:MM:SS`, an optional fraction (`.` and digits, dropped), and an optional offset: none or
/// `Z` (UTC), `±HH:MM`, `±HHMM` or `±HH`. Anything else, including a second past 60 or an
/// offset past 23:59, is `None`; the input is read as bytes, so no text makes it panic.
pub fn parse_iso8601(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b' ' | b'_')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    // Fixed-width decimal fields: digits only.
    let digit = |i: usize| b[i].wrapping_sub(b'0');
    if [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18].iter().fold(0u8, |bad, &i| bad | (digit(i) > 9) as u8) != 0 {
        return None;
    }
    let two = |i: usize| digit(i) as i64 * 10 + digit(i + 1) as i64;
    let (y, mo, d, h, mi, se) = (two(0) * 100 + two(2), two(5), two(8), two(11), two(14), two(17));
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let t = days_from_civil(y, mo as u32, d as u32) * 86_400 + h * 3600 + mi * 60 + se;
    let mut rest = &b[19..];
    if let [b'.', tail @ ..] = rest {
        let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        rest = &tail[n..];
    }
    let num = |d: &[u8]| -> Option<i64> {
        match d {
            [a, b] if a.is_ascii_digit() && b.is_ascii_digit() => Some(((a - b'0') * 10 + (b - b'0')) as i64),
            _ => None,
        }
    };
    let (sign, hh, mm) = match rest {
        b"" | b"Z" => return Some(t),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => (*sign, num(&[*h1, *h2])?, num(&[*m1, *m2])?),
        [sign @ (b'+' | b'-'), h1, h2, m1, m2] => (*sign, num(&[*h1, *h2])?, num(&[*m1, *m2])?),
        [sign @ (b'+' | b'-'), h1, h2] => (*sign, num(&[*h1, *h2])?, 0),
        _ => return None,
    };
    if hh > 23 || mm > 59 {
        return None;
    }
    let off = hh * 3600 + mm * 60;
    Some(if sign == b'+' { t - off } else { t + off })
}

/// Current time in epoch seconds.
pub fn now_epoch() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_from_settings_never_panic() {
        use std::time::Duration;
        assert_eq!(secs(1.5), Duration::from_millis(1500));
        assert_eq!(secs(-3.0), Duration::ZERO);
        assert_eq!(secs(f64::NAN), Duration::ZERO);
        assert_eq!(secs(f64::INFINITY), Duration::from_secs(86_400));
        assert_eq!(secs(1e30), Duration::from_secs(86_400));
    }

    #[test]
    fn storage_scale_times() {
        // IBM Storage Scale writes event times with `_` and an offset without a colon.
        assert_eq!(parse_iso8601("2024-03-13_16:44:58.423+0800"), parse_iso8601("2024-03-13T08:44:58Z"));
        assert_eq!(parse_iso8601("2024-03-13_16:44:58+08"), parse_iso8601("2024-03-13T08:44:58Z"));
        assert_eq!(parse_iso8601("2024-03-13_16:44:58.423-0400"), parse_iso8601("2024-03-13T20:44:58Z"));
        for bad in [
            "2024-03-13_16:44:58.+0800",
            "2024-03-13_16:44:58.423+08000",
            "2024-03-13_16:44:58.423+2400",
            "2024-03-13_16:44:58.423+0860",
            "2024-03-13_16:44:58.4a",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }

    #[test]
    fn offsets_and_hostile_tails() {
        assert_eq!(parse_iso8601("2024-03-16T02:00:01+01:30"), Some(1_710_554_401 - 5_400));
        assert_eq!(parse_iso8601("2024-03-16T02:00:01.123-05:00"), Some(1_710_554_401 + 18_000));
        assert_eq!(parse_iso8601("2024-03-16T02:00:01Z"), Some(1_710_554_401));
        for bad in [
            "2024-03-16T02:00:01+0\u{e9}00",
            "2024-03-16T02:00:01+\u{e9}:00",
            "2024-03-16T02:00:01\u{e9}",
            "2024-03-16T02:00:01+01:3x",
            "2024-03-16T02:00:0\u{e9}",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }

    #[test]
    fn known_instants() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00+00:00");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00+00:00");
        assert_eq!(iso8601(1_710_554_401), "2024-03-16T02:00:01+00:00");
        assert_eq!(iso8601(-1), "1969-12-31T23:59:59+00:00");
        assert_eq!(iso8601(253_402_300_800), "+10000-01-01T00:00:00+00:00");
    }

    #[test]
    fn round_trip_many() {
        let mut t = -5_000_000_000i64;
        while t < 5_000_000_000 {
            assert_eq!(parse_iso8601(&iso8601(t)), Some(t), "{t}");
            t += 7_919_317;
        }
        assert_eq!(parse_iso8601("2024-03-16T04:00:01+02:00"), Some(1_710_554_401));
        assert_eq!(parse_iso8601("2024-03-16T02:00:01Z"), Some(1_710_554_401));
        assert_eq!(parse_iso8601("2024-13-16T02:00:01Z"), None);
    }
}
