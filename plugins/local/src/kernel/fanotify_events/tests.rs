//! The fanotify record parser on events built byte for byte as the kernel lays them out
//! (`fanotify_event_metadata`, then `fanotify_event_info_fid` records), no privileges needed.

use std::collections::HashMap;
use std::path::PathBuf;

use super::*;

/// Handle bytes (`handle_bytes`, `handle_type`, `f_handle`) of object `id`.
fn fh(id: u8) -> Vec<u8> {
    let mut v = 8u32.to_ne_bytes().to_vec();
    v.extend(1i32.to_ne_bytes());
    v.extend([id; 8]);
    v
}

/// One info record of `kind` for object `id`, with `name` for DFID_NAME.
fn info(kind: u8, id: u8, name: Option<&[u8]>) -> Vec<u8> {
    let mut body = vec![7u8; 8]; // fsid
    body.extend(fh(id));
    if let Some(n) = name {
        body.extend(n);
        body.push(0);
    }
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    let mut rec = vec![kind, 0];
    rec.extend(((body.len() + 4) as u16).to_ne_bytes());
    rec.extend(body);
    rec
}

/// One event: metadata with `mask`, then `infos`.
fn event(mask: u64, infos: &[Vec<u8>]) -> Vec<u8> {
    let meta_len = std::mem::size_of::<libc::fanotify_event_metadata>();
    let body: Vec<u8> = infos.concat();
    let m = libc::fanotify_event_metadata {
        event_len: (meta_len + body.len()) as u32,
        vers: libc::FANOTIFY_METADATA_VERSION,
        reserved: 0,
        metadata_len: meta_len as u16,
        mask,
        fd: libc::FAN_NOFD,
        pid: 1,
    };
    let mut out = vec![0u8; meta_len];
    // SAFETY: out has exactly the struct's size; write_unaligned copes with alignment.
    unsafe { std::ptr::write_unaligned(out.as_mut_ptr().cast(), m) };
    out.extend(body);
    out
}

fn dfid_name(mask: u64, dir: u8, name: &[u8]) -> Vec<u8> {
    event(
        mask,
        &[info(libc::FAN_EVENT_INFO_TYPE_DFID_NAME, dir, Some(name)), info(libc::FAN_EVENT_INFO_TYPE_FID, 200, None)],
    )
}

/// Objects by id, where they are now, and how often each was looked up.
struct Fs {
    at: HashMap<u8, PathBuf>,
    lookups: HashMap<u8, u32>,
    /// Files with more than one link.
    linked: std::collections::HashSet<u8>,
}

impl Fs {
    fn new(at: &[(u8, &str)]) -> Fs {
        Fs {
            at: at.iter().map(|(i, p)| (*i, PathBuf::from(p))).collect(),
            lookups: HashMap::new(),
            linked: Default::default(),
        }
    }
}

fn parse(p: &mut EventParser, fs: &mut Fs, data: &[u8]) -> Vec<LocalEvent> {
    let (mut out, mut fds) = (Vec::new(), Vec::new());
    p.parse(data, &mut out, &mut fds, &mut |handle, path| {
        // The fsid, handle_bytes and handle_type, then f_handle.
        let id = handle.get(16).copied().unwrap_or(0);
        *fs.lookups.entry(id).or_default() += 1;
        let at = fs.at.get(&id)?;
        Some(Found {
            path: if path { at.clone() } else { PathBuf::new() },
            ino: id.into(),
            linked: fs.linked.contains(&id),
        })
    });
    out
}

fn changed(paths: &[&str]) -> Vec<LocalEvent> {
    paths.iter().map(|p| LocalEvent::Changed(p.to_string())).collect()
}

#[test]
fn names_below_the_root_and_handles_resolved_once() {
    let mut fs = Fs::new(&[(1, "/r"), (2, "/r/a/b"), (3, "/elsewhere"), (4, "/r/a/b/f")]);
    let mut p = EventParser::new(std::path::Path::new("/r"), DEFAULT_LRU_CAPACITY);
    let data = [
        dfid_name(libc::FAN_CREATE, 2, b"x"),
        dfid_name(libc::FAN_MODIFY, 2, b"y"),
        dfid_name(libc::FAN_CREATE, 1, b"top"),
        event(libc::FAN_ATTRIB | libc::FAN_ONDIR, &[info(libc::FAN_EVENT_INFO_TYPE_DFID, 2, None)]),
        dfid_name(libc::FAN_CREATE, 3, b"z"),
        dfid_name(libc::FAN_DELETE, 9, b"gone"),
        // A self event: only the object's own handle.
        event(libc::FAN_ATTRIB, &[info(libc::FAN_EVENT_INFO_TYPE_FID, 4, None)]),
        event(libc::FAN_Q_OVERFLOW, &[]),
    ]
    .concat();
    let out = parse(&mut p, &mut fs, &data);
    let mut want = changed(&["a/b/x", "a/b/y", "top", "a/b", "a/b/f"]);
    want.push(LocalEvent::Rescan(String::new(), RescanReason::Overflow));
    assert_eq!(out, want);
    assert_eq!(fs.lookups[&2], 1, "the directory's handle is cached");
    let c = &p.counts;
    assert_eq!((c.read, c.outside_root, c.unresolved, c.overflows, c.malformed), (8, 1, 1, 1, 0));
}

#[test]
fn names_that_are_not_utf8_are_escaped() {
    let mut fs = Fs::new(&[(1, "/r"), (5, "/r/caf\u{e9}")]);
    let mut p = EventParser::new(std::path::Path::new("/r"), DEFAULT_LRU_CAPACITY);
    let bad_dir = {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(b"/r/caf\xe9"))
    };
    fs.at.insert(6, bad_dir);
    let data = [
        dfid_name(libc::FAN_CREATE, 1, b"caf\xe9"),
        dfid_name(libc::FAN_CREATE, 6, b"x"),
        dfid_name(libc::FAN_CREATE, 5, b"ok"),
    ]
    .concat();
    // Escaped as every source escapes them (icicle_core::name): the name and the directory.
    assert_eq!(parse(&mut p, &mut fs, &data), changed(&["caf\\xe9", "caf\\xe9/x", "caf\u{e9}/ok"]));
}

#[test]
fn a_directory_move_forgets_only_what_was_below_its_old_name() {
    let mut fs = Fs::new(&[(1, "/r"), (2, "/r/a"), (3, "/r/a/b"), (4, "/r/d"), (5, "/outside")]);
    let mut p = EventParser::new(std::path::Path::new("/r"), DEFAULT_LRU_CAPACITY);
    parse(
        &mut p,
        &mut fs,
        &[
            dfid_name(libc::FAN_CREATE, 2, b"f"),
            dfid_name(libc::FAN_CREATE, 3, b"f"),
            dfid_name(libc::FAN_CREATE, 4, b"f"),
        ]
        .concat(),
    );
    // /r/a moves to /r/z: the event names the old place.
    fs.at.insert(2, "/r/z".into());
    fs.at.insert(3, "/r/z/b".into());
    let out = parse(
        &mut p,
        &mut fs,
        &[
            dfid_name(libc::FAN_MOVED_FROM | libc::FAN_ONDIR, 1, b"a"),
            dfid_name(libc::FAN_MODIFY, 3, b"f"),
            dfid_name(libc::FAN_MODIFY, 4, b"f"),
        ]
        .concat(),
    );
    let mut want = vec![LocalEvent::Directory("a".into())];
    want.extend(changed(&["z/b/f", "d/f"]));
    assert_eq!(out, want);
    assert_eq!((fs.lookups[&3], fs.lookups[&4]), (2, 1), "below the old name looked up again, the rest kept");
    // A directory leaving a place outside the root may arrive inside: what was cached as
    // outside goes, what is inside stays.
    parse(&mut p, &mut fs, &dfid_name(libc::FAN_MODIFY, 5, b"x"));
    parse(&mut p, &mut fs, &dfid_name(libc::FAN_MOVED_FROM | libc::FAN_ONDIR, 5, b"m"));
    parse(&mut p, &mut fs, &[dfid_name(libc::FAN_MODIFY, 4, b"f"), dfid_name(libc::FAN_MODIFY, 5, b"x")].concat());
    assert_eq!((fs.lookups[&4], fs.lookups[&5]), (1, 2));
    // Lost events may have moved anything.
    parse(&mut p, &mut fs, &[event(libc::FAN_Q_OVERFLOW, &[]), dfid_name(libc::FAN_MODIFY, 4, b"f")].concat());
    assert_eq!(fs.lookups[&4], 2);
}

#[test]
fn cut_short_or_random_bytes_never_panic() {
    let mut fs = Fs::new(&[(1, "/r"), (2, "/r/a")]);
    let whole = [dfid_name(libc::FAN_CREATE, 2, b"x"), dfid_name(libc::FAN_CREATE, 2, b"y")].concat();
    for cut in 0..whole.len() {
        let mut p = EventParser::new(std::path::Path::new("/r"), DEFAULT_LRU_CAPACITY);
        let out = parse(&mut p, &mut fs, &whole[..cut]);
        let first = whole.len() / 2;
        assert_eq!(out.len(), usize::from(cut >= first), "cut at {cut}");
        assert_eq!(p.counts.malformed, u64::from(cut != 0 && cut != first), "cut at {cut}");
    }
    let seed = std::env::var("ICICLE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| icicle_core::rng::Rng::new(std::process::id() as u64).next_u64());
    eprintln!("seed {seed} (ICICLE_TEST_SEED replays)");
    let mut rng = icicle_core::rng::Rng::new(seed);
    for _ in 0..2000 {
        let mut data = whole.clone();
        for _ in 0..1 + rng.below(8) {
            let i = rng.below(data.len() as u64) as usize;
            data[i] = rng.next_u64() as u8;
        }
        data.truncate(rng.below(data.len() as u64 + 1) as usize);
        let mut p = EventParser::new(std::path::Path::new("/r"), DEFAULT_LRU_CAPACITY);
        parse(&mut p, &mut fs, &data);
    }
}

#[test]
fn a_directory_arriving_or_leaving_is_a_directory_event() {
    let mut fs = Fs::new(&[(1, "/r"), (2, "/r/a")]);
    let mut p = EventParser::new(std::path::Path::new("/r"), DEFAULT_LRU_CAPACITY);
    let data = [
        dfid_name(libc::FAN_CREATE | libc::FAN_ONDIR, 1, b"n"),
        dfid_name(libc::FAN_MOVED_TO | libc::FAN_ONDIR, 2, b"m"),
        dfid_name(libc::FAN_DELETE | libc::FAN_ONDIR, 2, b"k"),
        // Merged by the kernel (the same directory handle, name and object).
        dfid_name(libc::FAN_ATTRIB | libc::FAN_MOVED_FROM | libc::FAN_ONDIR, 1, b"a"),
        // A directory's own attributes, and a file's creation: plain changes.
        dfid_name(libc::FAN_ATTRIB | libc::FAN_ONDIR, 1, b"n"),
        dfid_name(libc::FAN_CREATE, 1, b"f"),
    ]
    .concat();
    let dir = |s: &str| LocalEvent::Directory(s.into());
    let want = vec![
        dir("n"),
        dir("a/m"),
        dir("a/k"),
        dir("a"),
        LocalEvent::Changed("n".into()),
        LocalEvent::Changed("f".into()),
    ];
    assert_eq!(parse(&mut p, &mut fs, &data), want);
}

#[test]
fn the_handle_cache_evicts_the_least_recently_used() {
    let mut fs = Fs::new(&[(1, "/r"), (2, "/r/a"), (3, "/r/b")]);
    let mut p = EventParser::new(std::path::Path::new("/r"), 2);
    let ev = |dir: u8| dfid_name(libc::FAN_MODIFY, dir, b"f");
    parse(&mut p, &mut fs, &[ev(1), ev(2), ev(1), ev(3)].concat());
    // 2 was used least recently: evicted by 3, looked up again; 1 and 3 stay cached.
    assert_eq!(p.counts.evicted, 1);
    let out = parse(&mut p, &mut fs, &[ev(1), ev(3), ev(2)].concat());
    assert_eq!(out, changed(&["f", "b/f", "a/f"]));
    assert_eq!((fs.lookups[&1], fs.lookups[&2], fs.lookups[&3]), (1, 2, 1));
}

/// A file with a second name outside the root, changed through that name: reported as its
/// inode (its link count looked up once, then remembered until an event naming only the
/// object, such as a link count change, forgets it); a file of one link outside is dropped.
#[test]
fn a_file_changed_through_a_link_outside_the_root_is_reported_by_inode() {
    let mut fs = Fs::new(&[(1, "/r"), (2, "/elsewhere"), (200, "/elsewhere/f"), (201, "/elsewhere/g")]);
    fs.linked.insert(200);
    let mut p = EventParser::new(Path::new("/r"), 10);
    let on = |obj: u8| {
        event(
            libc::FAN_MODIFY,
            &[info(libc::FAN_EVENT_INFO_TYPE_DFID_NAME, 2, Some(b"f")), info(libc::FAN_EVENT_INFO_TYPE_FID, obj, None)],
        )
    };
    let out = parse(&mut p, &mut fs, &[on(200), on(201), on(200), on(201)].concat());
    assert_eq!(out, [LocalEvent::Object(200), LocalEvent::Object(200)]);
    assert_eq!((fs.lookups[&200], fs.lookups[&201], p.counts.outside_links, p.counts.outside_root), (1, 1, 2, 4));
    // 201 gets a second name: the link count change names the object alone.
    fs.linked.insert(201);
    let attrib = event(libc::FAN_ATTRIB, &[info(libc::FAN_EVENT_INFO_TYPE_FID, 201, None)]);
    assert_eq!(parse(&mut p, &mut fs, &attrib), [LocalEvent::Object(201)]);
    assert_eq!(parse(&mut p, &mut fs, &on(201)), [LocalEvent::Object(201)]);
    // A directory is never looked up as an object.
    parse(
        &mut p,
        &mut fs,
        &event(
            libc::FAN_MODIFY | libc::FAN_ONDIR,
            &[info(libc::FAN_EVENT_INFO_TYPE_DFID_NAME, 2, Some(b"d")), info(libc::FAN_EVENT_INFO_TYPE_FID, 202, None)],
        ),
    );
    assert!(!fs.lookups.contains_key(&202));
}
