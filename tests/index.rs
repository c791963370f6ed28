//! The embedded index: versioned snapshots publish to an `index` sink (beside a file sink whose
//! documents are the ground truth), and `icicle find` / `icicle du` answer from it exactly
//! what the records say, on random seeds; deletes remove exactly what they name; a run killed
//! at any stage of its commit loses nothing the next run does not restore; a second direct
//! writer fails clearly; `--as` answers only what that user's principals may see.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;
use icicle_core::rng::Rng;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec, NOW_REF};
use serde_json::Value;

/// A versioned snapshot of the listing in `tmp/listing` into `tmp/index` and a file sink
/// `tmp/out-<n>`; `records` is the `[records]` body.
fn snapshot_into_index(tmp: &Path, n: u32, records: &str, envs: &[(&str, &str)]) -> (i32, String) {
    let cfg = config(
        tmp,
        &format!("run-{n}.toml"),
        &format!(
            "[snapshot]\nworkers = 2\nversion = \"v{n}\"\nstate_dir = \"{t}/state\"\nrejects_file = \"{t}/rejects.jsonl\"\nmax_delete_ratio = 1.0\n\
             [records]\n{records}\n\
             [aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 3\nreference_time = {NOW_REF}\n\
             [sources.s]\ntype = \"tsv\"\npreset = \"icicle9\"\npaths = [\"{t}/listing/part-*.csv\"]\n\
             [sinks.out]\ntype = \"file\"\ndir = \"{t}/out-{n}\"\n[sinks.idx]\ntype = \"index\"\ndir = \"{t}/index\"\n",
            t = tmp.display(),
        ),
    );
    let (code, _, err) = icicle(&["snapshot", "--json", "--no-progress", "-c", cfg.to_str().unwrap()], envs);
    (code, err)
}

/// Every record the file sinks of runs `0..=last` leave (upserts and deletes applied in order),
/// by subject.
fn truth(tmp: &Path, last: u32) -> BTreeMap<String, Value> {
    let mut index = BTreeMap::new();
    for n in 0..=last {
        let dir = tmp.join(format!("out-{n}"));
        let mut files: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&dir)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .map(|p| (p.file_name().unwrap().to_string_lossy().split('-').nth(1).unwrap_or("").to_string(), p))
            .collect();
        files.sort();
        for (_, f) in files {
            let doc: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
            if let Some(subjects) = doc["subjects"].as_array() {
                for s in subjects {
                    index.remove(s.as_str().unwrap());
                }
            } else {
                for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
                    index.insert(e["subject"].as_str().unwrap().to_string(), e.clone());
                }
            }
        }
    }
    index
}

/// `icicle find --index tmp/index ARGS` (exit 0), its output lines.
fn find(tmp: &Path, args: &[&str]) -> Vec<String> {
    let index = tmp.join("index");
    let mut all = vec!["find", "--index", index.to_str().unwrap()];
    all.extend_from_slice(args);
    let (code, out, err) = icicle(&all, &[]);
    assert_eq!(code, 0, "find {args:?}: {err}");
    out.lines().map(str::to_string).collect()
}

/// A predicate over a record's content, as the test computes it.
type Test = Box<dyn Fn(&Value) -> bool>;

/// A random predicate over primary records: its `find` arguments and the same test in Rust.
fn random_predicate(rng: &mut Rng, files: &[&Value]) -> (Vec<String>, Test) {
    let pick = files[rng.below(files.len() as u64) as usize]["content"].clone();
    match rng.below(6) {
        0 => {
            let uid = pick["uid"].as_u64().unwrap();
            (vec!["-user".into(), uid.to_string()], Box::new(move |c: &Value| c["uid"] == uid))
        }
        1 => {
            // Sizes counted in whole KiB rounded up, as find does.
            let k = pick["size"].as_u64().unwrap().div_ceil(1024);
            (vec!["-size".into(), format!("+{k}k")], Box::new(move |c: &Value| c["size"].as_u64().unwrap() > k * 1024))
        }
        2 => {
            let dir = pick["path"].as_str().unwrap().rsplit_once('/').unwrap().0.to_string();
            let under = format!("{dir}/");
            (vec![dir], Box::new(move |c: &Value| c["path"].as_str().unwrap().starts_with(&under)))
        }
        3 => {
            let ext = pick["name"].as_str().unwrap().rsplit_once('.').map_or("x".to_string(), |(_, e)| e.to_string());
            let suffix = format!(".{ext}");
            (
                vec!["-name".into(), format!("*.{ext}")],
                Box::new(move |c: &Value| c["name"].as_str().unwrap().ends_with(&suffix)),
            )
        }
        4 => {
            let gid = pick["gid"].as_u64().unwrap();
            let t = if rng.below(2) == 0 { "f" } else { "l" };
            let want = if t == "f" { "file" } else { "link" };
            (
                vec!["-group".into(), gid.to_string(), "-type".into(), t.into()],
                Box::new(move |c: &Value| c["gid"] == gid && c["type"] == want),
            )
        }
        _ => {
            // Older than `days` whole days before now (the reference time is 2026-01-01).
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
            let days = (now - pick["raw"]["mtime"].as_i64().unwrap()) / 86_400;
            (
                vec!["-mtime".into(), format!("+{days}")],
                Box::new(move |c: &Value| c["raw"]["mtime"].as_i64().unwrap() <= now - (days + 1) * 86_400),
            )
        }
    }
}

/// Every predicate's answer equals the records' (exact path lists), and counts agree.
fn check_find(tmp: &Path, seed: u64, index: &BTreeMap<String, Value>, rounds: usize) {
    let files: Vec<&Value> =
        index.values().filter(|e| e["content"]["path"].is_string() && e["content"]["principal"].is_null()).collect();
    let mut rng = Rng::new(seed);
    for _ in 0..rounds {
        let (args, test) = random_predicate(&mut rng, &files);
        let want: BTreeSet<String> = files
            .iter()
            .map(|e| &e["content"])
            .filter(|c| test(c))
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got: BTreeSet<String> = find(tmp, &args).into_iter().collect();
        assert_eq!(got, want, "seed {seed}: find {args:?}");
        let mut counted = args.clone();
        counted.insert(0, "--count");
        assert_eq!(find(tmp, &counted), [want.len().to_string()], "seed {seed}: find --count {args:?}");
    }
}

/// Write `fs` as the listing, keeping only the files `keep` accepts.
fn write_listing(tmp: &Path, fs: &GenFs) {
    let dir = tmp.join("listing");
    let _ = std::fs::remove_dir_all(&dir);
    gen::write(fs, Format::Tsv, &dir, 700, false).unwrap();
}

#[test]
fn find_answers_what_the_records_say_across_versioned_runs() {
    let base = test_seed();
    for seed in base..base + 2 {
        let tmp = test_dir();
        let t = tmp.path();
        let mut fs = GenFs::generate(&GenSpec::new(2_000, seed));
        write_listing(t, &fs);
        let (code, err) = snapshot_into_index(t, 0, "visible_to = [\"public\"]", &[]);
        assert_eq!(code, 0, "seed {seed}: {err}");
        check_find(t, seed, &truth(t, 0), 12);
        // A tenth of the files gone, a tenth grown: the deletes and updates land.
        let mut rng = Rng::new(seed ^ 0x5eed);
        fs.files.retain(|_| rng.below(10) != 0);
        for f in fs.files.iter_mut().filter(|_| rng.below(10) == 0) {
            f.attrs.size += 4096;
        }
        write_listing(t, &fs);
        let (code, err) = snapshot_into_index(t, 1, "visible_to = [\"public\"]", &[]);
        assert_eq!(code, 0, "seed {seed}: {err}");
        let index = truth(t, 1);
        let all: BTreeSet<String> = index
            .values()
            .filter_map(|e| e["content"]["path"].as_str().filter(|_| e["content"]["principal"].is_null()))
            .map(str::to_string)
            .collect();
        assert_eq!(
            find(t, &[]).into_iter().collect::<BTreeSet<_>>(),
            all,
            "seed {seed}: every record, none deleted left"
        );
        check_find(t, seed + 1000, &index, 12);
        eprintln!("seed {seed}: {} records, 24 predicates equal", all.len());
    }
}

/// `du` of a directory: its aggregate record and its children's, as the records say.
#[test]
fn du_answers_the_aggregate_records() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    write_listing(t, &GenFs::generate(&GenSpec::new(1_500, seed)));
    let (code, err) = snapshot_into_index(t, 0, "visible_to = [\"public\"]", &[]);
    assert_eq!(code, 0, "{err}");
    let index = truth(t, 0);
    let dirs: BTreeMap<&str, &Value> = index
        .values()
        .filter(|e| e["content"]["kind"] == "dir")
        .map(|e| (e["content"]["id"].as_str().unwrap(), &e["content"]))
        .collect();
    let idx = t.join("index");
    for at in ["/", "/fs", "/fs/home"] {
        let (code, out, err) = icicle(&["du", "--index", idx.to_str().unwrap(), "--csv", at], &[]);
        assert_eq!(code, 0, "du {at}: {err}");
        let got: BTreeMap<String, (u64, u64)> = out
            .lines()
            .skip(1)
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[1].to_string(), (f[2].parse().unwrap(), f[3].parse().unwrap()))
            })
            .collect();
        let parent =
            |p: &str| p.rsplit_once('/').map(|(d, _)| if d.is_empty() { "/" } else { d }).unwrap_or("/").to_string();
        let want: BTreeMap<String, (u64, u64)> = dirs
            .iter()
            .filter(|(id, _)| **id == at || parent(id) == at)
            .map(|(id, c)| (id.to_string(), (c["file_count"].as_u64().unwrap(), c["size"]["total"].as_u64().unwrap())))
            .collect();
        assert!(!want.is_empty(), "seed {seed}: no aggregate under {at}");
        assert_eq!(got, want, "seed {seed}: du {at}");
    }
    let (code, out, _) = icicle(&["du", "--index", idx.to_str().unwrap(), "--by", "user", "--top", "3", "--json"], &[]);
    assert_eq!(code, 0);
    let mut totals: Vec<u64> = index
        .values()
        .filter(|e| e["content"]["kind"] == "user")
        .map(|e| e["content"]["size"]["total"].as_u64().unwrap())
        .collect();
    totals.sort_unstable_by(|a, b| b.cmp(a));
    let got: Vec<u64> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["content"]["size"]["total"].as_u64().unwrap())
        .collect();
    assert_eq!(got, totals[..3], "seed {seed}: du --by user --top 3");
}

/// Killed at every stage of a versioned run's commit, then run again: the index equals the
/// records, as if nothing had happened.
#[test]
fn a_run_killed_at_any_stage_converges_on_the_next() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let mut fs = GenFs::generate(&GenSpec::new(1_200, seed));
    write_listing(t, &fs);
    assert_eq!(snapshot_into_index(t, 0, "visible_to = [\"public\"]", &[]).0, 0);
    let mut rng = Rng::new(seed);
    let mut n = 1;
    for point in ["sealed", "deletes-planned", "deletes-delivered", "commit-start", "commit-done"] {
        fs.files.retain(|_| rng.below(8) != 0);
        for f in fs.files.iter_mut().filter(|_| rng.below(8) == 0) {
            f.attrs.mtime += 77;
        }
        write_listing(t, &fs);
        let (code, err) = snapshot_into_index(t, n, "visible_to = [\"public\"]", &[("ICICLE_FAULT", point)]);
        assert_ne!(code, 0, "{point}: the fault did not fire: {err}");
        n += 1;
        let (code, err) = snapshot_into_index(t, n, "visible_to = [\"public\"]", &[]);
        assert_eq!(code, 0, "{point}: {err}");
        let want: BTreeSet<String> = fs_paths(t);
        let got: BTreeSet<String> = find(t, &[]).into_iter().collect();
        assert_eq!(got, want, "seed {seed}: after a kill at {point} and a rerun");
        n += 1;
    }
}

/// The paths of the current listing (its last column), as a snapshot reads them.
fn fs_paths(tmp: &Path) -> BTreeSet<String> {
    let cfg = config(
        tmp,
        "truth.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n[sources.s]\ntype = \"tsv\"\npreset = \"icicle9\"\npaths = [\"{t}/listing/part-*.csv\"]\n[sinks.o]\ntype = \"file\"\ndir = \"{t}/truth-out\"\n",
            t = tmp.display()
        ),
    );
    let _ = std::fs::remove_dir_all(tmp.join("truth-out"));
    let (code, _, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    ingested(&tmp.join("truth-out")).into_keys().collect()
}

#[test]
fn a_second_direct_writer_fails_naming_the_index() {
    let tmp = test_dir();
    let t = tmp.path();
    write_listing(t, &GenFs::generate(&GenSpec::new(50, 1)));
    assert_eq!(snapshot_into_index(t, 0, "visible_to = [\"public\"]", &[]).0, 0);
    // A writer holding the index (a monitor idling on an empty changelog would; here a
    // process holding tantivy's writer lock).
    let held = icicle_plugins_index::IndexSink::open("held", t.join("index"), 1, 20 << 20).unwrap();
    let (code, err) = snapshot_into_index(t, 1, "visible_to = [\"public\"]", &[]);
    assert_ne!(code, 0);
    assert!(err.contains("sinks.idx.dir") && err.contains("another process writes to this index"), "{err}");
    drop(held);
    assert_eq!(snapshot_into_index(t, 2, "visible_to = [\"public\"]", &[]).0, 0);
}

/// Records visible to their owner and group: `--as` a uid answers only that uid's records.
#[test]
fn find_as_a_user_sees_only_what_their_principals_may() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let fs = GenFs::generate(&GenSpec::new(800, seed));
    write_listing(t, &fs);
    let records = format!("visible_to = [\"owner\"]\nprincipals = \"{}/listing/principals.tsv\"", t.display());
    let (code, err) = snapshot_into_index(t, 0, &records, &[]);
    assert_eq!(code, 0, "{err}");
    let index = truth(t, 0);
    let cfg = config(
        t,
        "find.toml",
        &format!("[records]\n{records}\n[sinks.idx]\ntype = \"index\"\ndir = \"{}/index\"\n", t.display()),
    );
    // Visible to the owner only: a uid answers exactly its own records, whatever its groups;
    // a uid the principals file does not map answers nothing.
    for uid in fs.users.iter().take(4) {
        let want: BTreeSet<String> = index
            .values()
            .filter(|e| e["content"]["uid"] == *uid && e["content"]["principal"].is_null())
            .map(|e| e["content"]["path"].as_str().unwrap().to_string())
            .collect();
        let (code, out, err) = icicle(&["find", "-c", cfg.to_str().unwrap(), "--as", &uid.to_string()], &[]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.lines().map(str::to_string).collect::<BTreeSet<_>>(), want, "seed {seed}: --as {uid}");
        assert!(!want.is_empty());
    }
    let (code, out, err) = icicle(&["find", "-c", cfg.to_str().unwrap(), "--as", "987654"], &[]);
    assert_eq!((code, out.as_str()), (0, ""), "an unmapped uid sees nothing: {err}");
}

/// A local monitor (real kernel events, as root) publishing to the index while a random
/// workload runs: afterwards the index holds exactly what a fresh walk finds, field by field.
#[test]
fn a_monitor_publishing_to_the_index_agrees_with_a_fresh_walk() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs the monitor tests as root");
        eprintln!("skipped: needs root");
        return;
    }
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let root = t.join("fs");
    let mut w = icicle_testkit::lustre::Workload::open(&root, &t.join("lfs/changelog"), seed).unwrap();
    w.preexisting(60).unwrap();
    let cfg = config(
        t,
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n[sources.local]\ntype = \"fanotify\"\nroot = \"{r}\"\npath_prefix = \"/\"\nstate_dir = \"{t}/state\"\n\
             batch_size = 50\nquiet_period_secs = 0.05\nfallback = false\n[sinks.idx]\ntype = \"index\"\ndir = \"{t}/index\"\n",
            r = root.display(),
            t = t.display(),
        ),
    );
    let child = start_monitor(t, &cfg, 2.0);
    w.run(icicle_testkit::lustre::Kind::Mixed, 400, "/work").unwrap();
    drop(w);
    let report = finish(t, child);
    assert!(report["local"]["updates"].as_u64().unwrap_or(0) > 0, "{report}");
    let mut index = BTreeMap::new();
    for line in find(t, &["--json"]) {
        let e: Value = serde_json::from_str(&line).unwrap();
        index.insert(e["content"]["path"].as_str().unwrap().to_string(), e);
    }
    let fresh = walk_snapshot(t, &root, "fresh");
    let (missing, extra, differ) = compare(&index, &fresh);
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "seed {seed}: missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
    assert!(index.len() > 60, "seed {seed}: {} records", index.len());
}

/// `icicle serve` on `index` (HTTP on a free port, a socket, one reader token of `public`):
/// the child, its URL, and the token file for `--token-file`.
fn serve_index(tmp: &Path, index: &Path) -> (std::process::Child, String, std::path::PathBuf) {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let tokens = tmp.join("tokens.tsv");
    std::fs::write(&tokens, "index-test-reader-7Yq2\turn:globus:auth:identity:reader\n").unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token_file = tmp.join("token");
    std::fs::write(&token_file, "index-test-reader-7Yq2\n").unwrap();
    let socket = tmp.join("serve.sock");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["serve", "--index", index.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--index-id", "0b9e4a52-7c1d-4f3e-8a6b-2d5c9e1f7a30"])
        .args(["--socket", socket.to_str().unwrap(), "--tokens", tokens.to_str().unwrap()])
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut url, mut log) = (None, String::new());
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    for line in lines.by_ref() {
        log.push_str(&line);
        if let Some(at) = line.find("at http://") {
            url = Some(line[at + 3..].trim().to_string());
        }
        if line.contains("at unix:") {
            break;
        }
    }
    // Read on, so the server's last words do not meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, url.unwrap_or_else(|| panic!("icicle serve did not start: {log}")), token_file)
}

#[test]
fn find_and_du_through_a_running_serve_answer_as_the_index_directory_does() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    write_listing(t, &GenFs::generate(&GenSpec::new(1_200, seed)));
    let (code, err) = snapshot_into_index(t, 0, "visible_to = [\"public\"]", &[]);
    assert_eq!(code, 0, "{err}");
    let index = truth(t, 0);
    let files: Vec<&Value> =
        index.values().filter(|e| e["content"]["path"].is_string() && e["content"]["principal"].is_null()).collect();
    let mut rng = Rng::new(seed);
    let mut questions: Vec<Vec<String>> = Vec::new();
    for round in 0..14 {
        let (mut args, _) = random_predicate(&mut rng, &files);
        match round % 4 {
            1 => args.insert(0, "--count".into()),
            2 => args.push("-ls".into()),
            3 => args.extend(["-name".into(), "*[0-9]*".into(), "-printf".into(), "%p %s %U %m\\n".into()]),
            _ => {}
        }
        questions.push(args);
    }
    questions.push(vec!["/fs".into(), "-path".into(), "/fs/*/*1*".into(), "--limit".into(), "7".into()]);
    let idx = t.join("index");
    let dus: [&[&str]; 4] =
        [&["--csv", "/"], &["--csv", "/fs/home"], &["--by", "user", "--top", "3"], &["--by", "group"]];
    let (mut child, url, token_file) = serve_index(t, &idx);
    let socket = t.join("serve.sock");
    let ask = |cmd: &str, how: &[&str], args: &[String]| -> String {
        let mut all = vec![cmd];
        all.extend_from_slice(how);
        all.extend(args.iter().map(String::as_str));
        let (code, out, err) = icicle(&all, &[]);
        assert_eq!(code, 0, "seed {seed}: {all:?}: {err}");
        out
    };
    let remote = |how: &[&str]| -> Vec<String> {
        let mut out: Vec<String> = questions.iter().map(|q| ask("find", how, q)).collect();
        out.extend(dus.iter().map(|d| ask("du", how, &d.iter().map(|s| s.to_string()).collect::<Vec<_>>())));
        out
    };
    let over_http = remote(&["--server", &url, "--token-file", token_file.to_str().unwrap()]);
    let over_socket = remote(&["--socket", socket.to_str().unwrap()]);
    // A wrong token is refused, naming the server and never the token.
    let bad = t.join("bad-token");
    std::fs::write(&bad, "not-a-token-Pz8\n").unwrap();
    let (code, _, err) = icicle(&["find", "--server", &url, "--token-file", bad.to_str().unwrap()], &[]);
    assert!(code != 0 && err.contains(&url) && !err.contains("not-a-token-Pz8"), "{err}");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    let local = remote(&["--index", idx.to_str().unwrap()]);
    assert!(local.iter().any(|o| o.lines().count() > 3), "seed {seed}: every answer is nearly empty");
    for (i, q) in questions.iter().map(|q| q.join(" ")).chain(dus.iter().map(|d| format!("du {d:?}"))).enumerate() {
        assert_eq!(over_http[i], local[i], "seed {seed}: {q} over HTTP");
        assert_eq!(over_socket[i], local[i], "seed {seed}: {q} over the socket");
    }
}

#[test]
fn a_run_on_an_index_serve_owns_publishes_through_serve() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let mut fs = GenFs::generate(&GenSpec::new(800, seed));
    write_listing(t, &fs);
    assert_eq!(snapshot_into_index(t, 0, "visible_to = [\"public\"]", &[]).0, 0);
    let idx = t.join("index");
    let (mut child, _, _) = serve_index(t, &idx);
    // Files gone and grown while serve holds the writer: the versioned run goes through it.
    let mut rng = Rng::new(seed ^ 0x5e7e);
    fs.files.retain(|_| rng.below(8) != 0);
    for f in fs.files.iter_mut().filter(|_| rng.below(8) == 0) {
        f.attrs.size += 512;
    }
    write_listing(t, &fs);
    let (code, err) = snapshot_into_index(t, 1, "visible_to = [\"public\"]", &[]);
    assert_eq!(code, 0, "seed {seed}: {err}");
    let socket = t.join("serve.sock");
    let (code, out, err) = icicle(&["find", "--socket", socket.to_str().unwrap(), "-printf", "%p %s\\n"], &[]);
    assert_eq!(code, 0, "{err}");
    let want: BTreeSet<String> = truth(t, 1)
        .values()
        .filter(|e| e["content"]["type"].is_string())
        .map(|e| format!("{} {}", e["content"]["path"].as_str().unwrap(), e["content"]["size"]))
        .collect();
    assert_eq!(out.lines().map(str::to_string).collect::<BTreeSet<_>>(), want, "seed {seed}");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    assert!(!idx.join("serve-socket").exists(), "serve left its socket's name behind");
    // Serve gone: the next run writes directly again.
    assert_eq!(snapshot_into_index(t, 2, "visible_to = [\"public\"]", &[]).0, 0);
}

#[test]
fn a_lustre_monitor_reading_layouts_answers_which_files_have_objects_on_an_ost() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let (root, journal) = (t.join("fs"), t.join("lfs/changelog"));
    let mut w = icicle_testkit::lustre::Workload::open(&root, &journal, seed).unwrap();
    w.run(icicle_testkit::lustre::Kind::Mixed, 600, "/work").unwrap();
    let fids = w.ns.by_path.clone();
    drop(w);
    let cfg = config(
        t,
        "monitor.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nuser = \"cl1\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 40\nquiet_period_secs = 0.0\npoll_interval_secs = 0.02\nstate_dir = \"{t}/state\"\nlayout = true\nproject = true\n\
             [sinks.idx]\ntype = \"index\"\ndir = \"{t}/index\"\n",
            k = testkit_bin().display(),
            j = journal.display(),
            r = root.display(),
            t = t.display(),
        ),
    );
    let (code, stdout, err) = icicle(&["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "seed {seed}: {err}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["mdt0"]["layouts_failed"], 0, "seed {seed}: {report}");
    // Every regular file's record carries the FID and the layout the stand-in's lfs gives it.
    let mut by_ost: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    let (mut flash, mut files, mut catalogued) = (BTreeSet::new(), 0, 0);
    for line in find(t, &["--json", "-type", "f"]) {
        let e: Value = serde_json::from_str(&line).unwrap();
        let path = e["content"]["path"].as_str().unwrap().to_string();
        let fid = fids.get(&path).unwrap_or_else(|| panic!("seed {seed}: {path} is not in the file system"));
        let (pool, stripe_size, osts) = icicle_testkit::lustre::layout_of(fid);
        let st = &e["content"]["storage"];
        // The plain layout as PRISM reads it: one component to the end of the file.
        let layout = serde_json::json!([{"start": 0, "stripe_size": stripe_size, "osts": osts}]);
        assert_eq!(st["layout"], layout, "seed {seed}: {path}");
        assert_eq!(st["fid"], fid.to_string(), "seed {seed}: {path}");
        assert_eq!(st["osts"], serde_json::json!(osts), "seed {seed}: {path}");
        assert_eq!(st["stripe_count"], osts.len(), "seed {seed}: {path}");
        assert_eq!(st["pool"].as_str(), pool, "seed {seed}: {path}");
        assert_eq!(st["project_id"], icicle_testkit::lustre::project_of(fid), "seed {seed}: {path}");
        for o in osts {
            by_ost.entry(o).or_default().insert(path.clone());
        }
        // Names the catalog's text paths can hold (UTF-8, no newline).
        let name = icicle_core::name::unescape(&path).into_owned();
        if std::str::from_utf8(&name).is_ok_and(|p| !p.contains('\n')) {
            catalogued += 1;
        }
        if pool.is_some() {
            flash.insert(path);
        }
        files += 1;
    }
    assert!(files > 15, "seed {seed}: {files} files");
    // `find -ost N` (an OST evacuation's question) and `-pool` answer exactly those files.
    for o in icicle_testkit::lustre::OSTS {
        let got: BTreeSet<String> = find(t, &["-ost", &o.to_string()]).into_iter().collect();
        assert_eq!(got, by_ost.get(&o).cloned().unwrap_or_default(), "seed {seed}: -ost {o}");
    }
    let projects: BTreeSet<String> = fids
        .iter()
        .filter(|(p, f)| by_ost.values().any(|s| s.contains(*p)) && icicle_testkit::lustre::project_of(f) == 1002)
        .map(|(p, _)| p.clone())
        .collect();
    let got: BTreeSet<String> = find(t, &["-projid", "1002"]).into_iter().collect();
    assert_eq!(got, projects, "seed {seed}: -projid 1002");
    let got: BTreeSet<String> = find(t, &["-pool", "flash"]).into_iter().collect();
    assert_eq!(got, flash, "seed {seed}: -pool flash");
    let wide = by_ost.values().flatten().filter(|p| {
        let (_, _, osts) = icicle_testkit::lustre::layout_of(&fids[*p]);
        osts.len() > 2
    });
    let wide: BTreeSet<String> = wide.cloned().collect();
    let got: BTreeSet<String> = find(t, &["-stripe-count", "+2"]).into_iter().collect();
    assert_eq!(got, wide, "seed {seed}: -stripe-count +2");

    // The same records as a SwiftLoad catalog (`icicle catalog`), from the index directory and
    // through a running serve: every regular file with its layout (but names that are not
    // UTF-8 or hold a newline, counted), the same catalog both ways.
    let idx = t.join("index");
    let catalog = |how: &[&str], out: &Path| -> Vec<u8> {
        let mut args = vec!["catalog", "--out", out.to_str().unwrap()];
        args.extend_from_slice(how);
        let (code, said, err) = icicle(&args, &[]);
        assert_eq!(code, 0, "seed {seed}: {args:?}: {err}");
        assert!(said.contains(&format!("({catalogued} files with layouts")), "seed {seed}: {said}");
        let others = files - catalogued;
        assert!(others == 0 || err.contains(&format!("{others} paths the catalog cannot hold")), "seed {seed}: {err}");
        std::fs::read(out.join("catalog.index.icat")).unwrap()
    };
    let local = catalog(&["--index", idx.to_str().unwrap()], &t.join("catalog-local"));
    let (mut child, url, token_file) = serve_index(t, &idx);
    let served = catalog(&["--server", &url, "--token-file", token_file.to_str().unwrap()], &t.join("catalog-served"));
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    assert!(local == served, "seed {seed}: the catalogs differ");
}
