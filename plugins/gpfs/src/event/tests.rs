//! Tests of parsing `WF_JSON` messages, on the structural, byte-scanner and full-parser paths.

use super::fields::find_special;
use super::*;

#[test]
fn icicles_synthetic_message_and_directory_flag() {
    let e = GpfsEvent::parse(br#"{"inode": 12345, "path": "/gpfs/fs1/file.txt", "event": "IN_CREATE", "fileSize": 1024, "atime": 1700000000, "ctime": 1700000001, "mtime": 1700000002, "ownerUserId": 1000, "ownerGroupId": 1000, "permissions": "0644"}"#).unwrap();
    assert_eq!(e.kind, EventKind::Created);
    assert_eq!(
        e.meta,
        Meta {
            inode: 12345,
            mode: 0o100644,
            uid: 1000,
            gid: 1000,
            size: 1024,
            atime: 1_700_000_000,
            ctime: 1_700_000_001,
            mtime: 1_700_000_002
        }
    );
    let d = GpfsEvent::parse(br#"{"inode": "7", "path": "/gpfs/fs1/d", "event": "IN_CREATE IN_ISDIR", "cookie": "0"}"#)
        .unwrap();
    assert!(d.meta.is_dir());
    let m =
        GpfsEvent::parse(br#"{"inode": 7, "path": "/gpfs/fs1/d", "event": "IN_MOVED_TO IN_ISDIR", "cookie": 99, "mtime": "2024-03-16T02:10:01Z"}"#).unwrap();
    assert_eq!((m.kind, m.cookie, m.meta.mtime), (EventKind::MovedTo, 99, 1_710_555_001));
    assert_eq!(GpfsEvent::parse(br#"{"inode": 7, "path": "/x", "event": "IN_OPEN"}"#), Ok(GpfsEvent::ignored()));
    // An ignored event's message is not read past its `event`, on every path.
    for msg in [
        &br#"{"event": "IN_CLOSE_NOWRITE", "inode": "x", "path": 1, "#[..],
        br#"{"event": "IN_OPEN IN_ISDIR", "inode": -1}"#,
        br#"{"event": "IN_ACCESS\u0020", "inode": 1}"#,
    ] {
        let want = if msg.windows(9).any(|w| w == b"IN_ACCESS") { Err(()) } else { Ok(GpfsEvent::ignored()) };
        assert_eq!(GpfsEvent::parse(msg).map_err(|_| ()), want, "{}", String::from_utf8_lossy(msg));
    }
}

#[test]
fn round_trip_through_the_testkit_rendering() {
    let e = GpfsEvent {
        kind: EventKind::MovedFrom,
        path: "/g/a b".into(),
        meta: Meta { inode: 9, mode: 0o120777, uid: 1, gid: 2, size: 3, atime: 4, ctime: 5, mtime: 6 },
        cookie: 77,
        storage: StorageId::of(Some("4"), Some("data")),
    };
    assert_eq!(GpfsEvent::parse(e.to_json().as_bytes()).unwrap(), e);
}

#[test]
fn the_in_place_scanner_and_the_full_parser_agree() {
    let flat = r#"{"inode": "12", "path": "/g/a \"b\"", "event": "IN_MOVED_TO IN_ISDIR", "cookie": 5, "fileSize": 7, "ownerUserId": "1", "ownerGroupId": 2, "permissions": 16877, "atime": 1.5, "ctime": "3", "mtime": "1970-01-01 00:00:04 UTC", "linkCount": true, "x": null}"#;
    assert!(Fields::scan(flat.as_bytes()).is_some());
    let nested = flat.replacen('{', r#"{"acls": {"a": [1, 2]}, "#, 1);
    assert!(Fields::scan(nested.as_bytes()).is_none());
    let (a, b) = (GpfsEvent::parse(flat.as_bytes()).unwrap(), GpfsEvent::parse(nested.as_bytes()).unwrap());
    assert_eq!(a, b);
    assert_eq!((&*a.path, a.cookie, a.meta.mode, a.meta.atime, a.meta.mtime), ("/g/a \"b\"", 5, 0o40755, 1, 4));
}

#[test]
fn the_structural_scanner_agrees_with_the_byte_scanner() {
    let base = GpfsEvent {
        kind: EventKind::MovedTo,
        path: "/g/d/a b.txt".into(),
        meta: Meta { inode: 9, mode: 0o100640, uid: 1, gid: 2, size: 3, atime: 4, ctime: 5, mtime: 6 },
        cookie: 77,
        storage: StorageId::of(Some("4"), Some("data")),
    };
    let compact = base.to_json();
    let spaced = compact.replace("\",\"", "\", \"").replace("\":", "\": ").replacen('{', "{ ", 1).replace('}', " }");
    let numbers = r#"{"wd": 1, "inode": 12, "path": "/g/x", "event": "IN_CREATE IN_ISDIR", "fileSize": 5, "w": -0.5e3, "x": null, "y": true, "z": false, "atime": 17}"#;
    for msg in [compact.as_str(), spaced.as_str(), numbers, "{}", " { } "] {
        let fast = Fields::scan_structural(msg).unwrap_or_else(|| panic!("structural path refused {msg}"));
        let slow = Fields::scan_bytes(msg.as_bytes()).expect("byte scanner");
        let all = |f: &Fields<'_>| (0..KEYS.len()).map(|k| f.get(k).to_string()).collect::<Vec<_>>();
        assert_eq!(all(&fast), all(&slow), "{msg}");
    }
    assert_eq!(GpfsEvent::parse(spaced.as_bytes()).unwrap(), base);
    // The compact walk takes the compact message, leaves the spaced ones to the general walk.
    let walk = |msg: &str| {
        scan_spans::<false, false>(msg.as_bytes(), QuoteIndex::<false>::new(msg.as_bytes()).expect("short"), 0)
    };
    let compact_walk = |msg: &str| {
        scan_compact::<false, false>(msg.as_bytes(), &mut QuoteIndex::<false>::new(msg.as_bytes()).expect("short"), 0)
    };
    assert_eq!(compact_walk(&compact), walk(&compact));
    assert!(compact_walk(&compact).is_some());
    for msg in [
        spaced.as_str(),
        numbers,
        " { } ",
        r#"{"a":"b"} "#,
        r#"{"a":"b",}"#,
        r#"{"a":"b""c":1}"#,
        r#"{"a":tru}"#,
        r#"{"a":null}"#,
        r#"{"a":{"b":1}}"#,
    ] {
        assert_eq!(compact_walk(msg), None, "{msg}");
    }
    // Refused by the structural path, taken by the others: trailing bytes, nesting, bad separators.
    for msg in [
        r#"{"a": "b"} x"#,
        r#"{"a": {"b": 1}}"#,
        r#"{"a" "b"}"#,
        r#"{"a": "b",}"#,
        r#"{"a": "b" "c": 1}"#,
        r#"{"a": tru}"#,
    ] {
        assert!(Fields::scan_structural(msg).is_none(), "{msg}");
    }
    assert!(GpfsEvent::parse(numbers.as_bytes()).unwrap().meta.is_dir());
}

#[test]
fn the_direct_conversion_agrees_with_the_general_one() {
    let events = [
        "IN_CREATE",
        "IN_CREATE IN_ISDIR",
        "IN_DELETE",
        "IN_MOVED_FROM",
        "IN_MOVED_TO IN_ISDIR",
        "IN_MODIFY",
        "IN_ATTRIB",
        "IN_CLOSE_WRITE",
        "IN_OPEN",
        "IN_ACCESS",
        "IN_CLOSE_NOWRITE",
        "IN_DELETE_SELF",
        "IN_ISDIR IN_CREATE",
        "IN_CREATE|IN_ISDIR",
        "IN_BOGUS",
    ];
    let numbers = [
        "\"0\"",
        "\"12\"",
        "7",
        "\" 7\"",
        "-1",
        "1.5",
        "\"99999999999999999999\"",
        "\"4294967296\"",
        "null",
        "true",
        "\"x\"",
    ];
    let times = [
        "\"2026-11-30T03:12:19+00:00\"",
        "\"2026-11-30T03:12:19Z\"",
        "\"2026-11-30 03:12:19 UTC\"",
        "\"2026-11-30T03:12:19+02:00\"",
        "\"2026-13-30T03:12:19+00:00\"",
        "1700000000",
        "\"1700000000\"",
        "1.5",
        "\"soon\"",
    ];
    let perms = ["\"100644\"", "\"644\"", "\"40755\"", "\"0o644\"", "\"9\"", "420", "\"\""];
    let mut rng = icicle_core::rng::Rng::new(0x2545_f491_4f6c_dd1d);
    let (mut fast, mut ignored) = (0, 0);
    for _ in 0..20_000 {
        let x = rng.next_u64();
        // Usually a usual value (the first two of each list), else any.
        let pick = |list: &[&'static str], shift: u32| {
            let r = x.rotate_right(shift);
            list[(r >> 2) as usize % if r & 3 != 0 { 2 } else { list.len() }]
        };
        let mut members = vec![
            format!("\"event\":\"{}\"", pick(&events, 0)),
            format!("\"path\":\"{}\"", if x >> 50 & 7 == 0 { "rel/a" } else { "/gpfs/fs1/d/f" }),
            format!("\"inode\":{}", pick(&numbers, 5)),
            format!("\"cookie\":{}", pick(&numbers, 9)),
            format!("\"fileSize\":{}", pick(&numbers, 13)),
            format!("\"ownerUserId\":{}", pick(&numbers, 17)),
            format!("\"permissions\":{}", pick(&perms, 21)),
            format!("\"atime\":{}", pick(&times, 25)),
            format!("\"ctime\":{}", pick(&times, 29)),
            format!("\"mtime\":{}", pick(&times, 33)),
            "\"wd\":1".to_string(),
        ];
        // Now and then an attribute is missing.
        let mut k = 0;
        members.retain(|_| {
            k += 1;
            !(x >> (k * 5)).is_multiple_of(11)
        });
        let msg = format!("{{{}}}", members.join(","));
        let Some(walk) =
            scan_spans::<false, false>(msg.as_bytes(), QuoteIndex::<false>::new(msg.as_bytes()).expect("short"), 0)
        else {
            continue;
        };
        // The compact walk (these messages are compact) finds the same, unless a value is
        // a literal, which it leaves to the general walk.
        let mut quotes = QuoteIndex::<false>::new(msg.as_bytes()).expect("short");
        let compact = scan_compact::<false, false>(msg.as_bytes(), &mut quotes, 0);
        if [":null", ":true", ":false"].iter().any(|l| msg.contains(l)) {
            assert!(compact.is_none() || compact.as_ref() == Some(&walk), "{msg}");
        } else {
            assert_eq!(compact.as_ref(), Some(&walk), "{msg}");
        }
        let spans = match walk {
            Walk::Whole(spans) => spans,
            Walk::Ignored => {
                // The general path agrees that there is nothing more to read.
                assert_eq!(
                    GpfsEvent::from_fields(&Fields::parse(msg.as_bytes()).expect("flat")),
                    Ok(GpfsEvent::ignored()),
                    "{msg}"
                );
                ignored += 1;
                continue;
            }
            Walk::Filtered => unreachable!("no filter in this test"),
        };
        let general = GpfsEvent::from_fields(&Fields::Spans(&msg, spans));
        if let Some(direct) = GpfsEvent::from_spans(&msg, &spans) {
            fast += 1;
            assert_eq!(Ok(direct), general, "{msg}");
        }
    }
    assert!(fast > 1_000, "the direct path took only {fast} messages");
    assert!(ignored > 100, "only {ignored} ignored events");
}

#[test]
fn the_word_scanner_finds_the_first_special_byte() {
    let slow =
        |b: &[u8], from: usize| b[from..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|k| from + k);
    let mut rng = icicle_core::rng::Rng::new(0x2545_f491_4f6c_dd1d);
    for _ in 0..20_000 {
        let x = rng.next_u64();
        let len = (x % 40) as usize;
        let b: Vec<u8> = (0..len)
            .map(|k| [b'a', b'"', b'\\', 0x1f, 0x20, 0x7f, 0x80, 0xff, b'#', b'!'][((x >> (k % 60)) % 10) as usize])
            .collect();
        let from = if len == 0 { 0 } else { (x >> 7) as usize % len };
        assert_eq!(find_special(&b, from), slow(&b, from), "{b:?} from {from}");
    }
}

#[test]
fn malformed_messages_give_reasons() {
    for (msg, why) in [
        (&b"not json"[..], "not a WF_JSON object"),
        (br#"{"path": "/a", "event": "IN_CREATE"}"#, "missing `inode`"),
        (br#"{"inode": 1, "event": "IN_CREATE"}"#, "missing `path`"),
        (br#"{"inode": 1, "path": "/a"}"#, "missing `event`"),
        (br#"{"inode": 1, "path": "/a", "event": "IN_BOGUS"}"#, "unknown event `IN_BOGUS`"),
        (br#"{"inode": -1, "path": "/a", "event": "IN_CREATE"}"#, "inode"),
        (
            br#"{"inode": 1, "path": "/a", "event": "IN_CREATE", "mtime": "yesterday"}"#,
            "mtime `yesterday` is not a time",
        ),
        (br#"{"inode": 1, "path": "a", "event": "IN_CREATE"}"#, "not absolute"),
    ] {
        let e = GpfsEvent::parse(msg).unwrap_err();
        assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(msg));
    }
}

#[test]
fn the_ingestion_filter_drops_its_events_on_every_path() {
    let mask = filter_mask(&["IN_ACCESS".to_string()]).unwrap();
    let compact = br#"{"inode":"7","event":"IN_ACCESS","path":"/g/a","fileSize":"3"}"#;
    let spaced = br#"{"inode": 7, "event": "IN_ACCESS", "path": "/g/a", "fileSize": 3}"#;
    let escaped = br#"{"inode": 7, "event": "IN_ACCESS", "path": "/g/\u00e9", "fileSize": 3}"#;
    let nested = br#"{"inode": 7, "event": "IN_ACCESS", "path": "/g/d", "x": {"y": 1}}"#;
    for msg in [&compact[..], spaced, escaped, nested] {
        let text = String::from_utf8_lossy(msg);
        assert!(GpfsEvent::parse_filtered(msg, mask).unwrap().is_filtered(), "{text}");
        let kept = GpfsEvent::parse(msg).unwrap();
        assert_eq!(kept.kind, EventKind::Modified, "{text}");
        assert!(!kept.is_filtered());
        // Other events pass the filter; ignored ones stay ignored, not filtered.
        let modify = text.replace("IN_ACCESS", "IN_MODIFY");
        assert_eq!(GpfsEvent::parse_filtered(modify.as_bytes(), mask).unwrap().kind, EventKind::Modified, "{modify}");
        let open = text.replace("IN_ACCESS", "IN_OPEN");
        let ev = GpfsEvent::parse_filtered(open.as_bytes(), mask).unwrap();
        assert!(ev.kind == EventKind::Ignored && !ev.is_filtered(), "{open}");
    }
    // A directory's IN_ATTRIB is never filtered (its permissions decide visibility); a
    // file's is, on every path.
    let attrib = filter_mask(&["IN_ATTRIB".to_string()]).unwrap();
    for (dir, file) in [
        (
            &br#"{"inode":"7","event":"IN_ATTRIB IN_ISDIR","path":"/g/d","permissions":"0700"}"#[..],
            &br#"{"inode":"8","event":"IN_ATTRIB","path":"/g/f","permissions":"0600"}"#[..],
        ),
        (
            br#"{"inode": 7, "event": "IN_ATTRIB IN_ISDIR", "path": "/g/\\u00e9", "permissions": "0700"}"#,
            br#"{"inode": 8, "event": "IN_ATTRIB", "path": "/g/\\u00e9", "permissions": "0600"}"#,
        ),
    ] {
        assert_eq!(
            GpfsEvent::parse_filtered(dir, attrib).unwrap().kind,
            EventKind::DirAttrib,
            "{}",
            String::from_utf8_lossy(dir)
        );
        assert!(GpfsEvent::parse_filtered(file, attrib).unwrap().is_filtered(), "{}", String::from_utf8_lossy(file));
    }
    // The slow path decides by the parsed `event` value, not a nested key.
    let nested_key = br#"{"x": {"event": "IN_ACCESS"}, "inode": 7, "event": "IN_MODIFY", "path": "/g/a"}"#;
    assert_eq!(GpfsEvent::parse_filtered(nested_key, mask).unwrap().kind, EventKind::Modified);
    let listed = br#"{"x": {}, "inode": 7, "event": "IN_ACCESS,IN_OPEN", "path": "/g/a"}"#;
    assert!(GpfsEvent::parse_filtered(listed, mask).unwrap().is_filtered());
    // A directory's own modify events carry nothing for the index, on every path; its
    // IN_ATTRIB carries its permissions (who may see what is below it).
    for msg in [
        &br#"{"inode":"8","event":"IN_MODIFY IN_ISDIR","path":"/g/d"}"#[..],
        br#"{"inode": 8, "event": "IN_ISDIR IN_CLOSE_WRITE", "path": "/g/d", "x": {}}"#,
    ] {
        assert_eq!(GpfsEvent::parse(msg).unwrap(), GpfsEvent::ignored(), "{}", String::from_utf8_lossy(msg));
    }
    let attrib_mask = filter_mask(&["IN_ATTRIB".to_string()]).unwrap();
    for msg in [
        &br#"{"inode":"8","event":"IN_ATTRIB IN_ISDIR","path":"/g/d","permissions":"40700"}"#[..],
        br#"{"inode": 8, "event": "IN_ISDIR IN_ATTRIB", "path": "/g/d", "permissions": "40700", "x": {}}"#,
    ] {
        let ev = GpfsEvent::parse(msg).unwrap();
        assert_eq!((ev.kind, ev.meta.mode), (EventKind::DirAttrib, 0o40700), "{}", String::from_utf8_lossy(msg));
        assert_eq!(
            GpfsEvent::parse_filtered(msg, attrib_mask).unwrap().kind,
            EventKind::DirAttrib,
            "{}",
            String::from_utf8_lossy(msg)
        );
    }
    assert!(filter_mask(&["IN_CREATE".to_string()])
        .unwrap_err()
        .contains("IN_ACCESS, IN_ATTRIB, IN_MODIFY, IN_CLOSE_WRITE"));
    assert_eq!(filter_mask(&["IN_MODIFY".into(), "IN_CLOSE_WRITE".into()]).unwrap(), 4 | 8);
}
