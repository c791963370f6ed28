//! `icicle serve` through the real binaries: the project's `globus` sink publishes a generated
//! snapshot into it, and its Search API answers (totals, scrolls, filters, facets, sort) and,
//! once it stops, `icicle find` equal the records exactly; globus-sdk's `SearchClient` works
//! against it unchanged; every answer is what the asking identity may see (two tokens, no
//! token, a Unix-socket peer), totals and facets included, and writes without a writer token
//! are refused and change nothing.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use serde_json::{json, Value};

const INDEX: &str = "6d1f0b7e-2c4a-4e8f-9a3b-5c7d9e1f2a4b";
const WRITER: &str = "serve-writer-Kq3vN8pW";
const READER_A: &str = "serve-reader-a-Zt5xM2";
const READER_B: &str = "serve-reader-b-Hj9wQ4";

/// A running `icicle serve`; stopped (SIGTERM, then waited for) when dropped.
struct Serve {
    child: Child,
    url: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Serve {
    /// Start on `index` with the tokens file `tokens` (and a socket, answered through the
    /// configuration `cfg`'s `records.principals`, when given).
    fn start(index: &Path, tokens: &Path, socket: Option<(&Path, &Path)>) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_icicle"));
        cmd.args([
            "serve",
            "--index",
            index.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--tokens",
            tokens.to_str().unwrap(),
            "--index-id",
            INDEX,
        ]);
        if let Some((s, cfg)) = socket {
            cmd.args(["--socket", s.to_str().unwrap(), "-c", cfg.to_str().unwrap()]);
        }
        let mut child = cmd.env_remove("RUST_LOG").stderr(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut url = None;
        for line in lines.by_ref() {
            let line = line.unwrap();
            log.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(at) = line.find("at http://") {
                url = Some(line[at + 3..].trim().to_string());
            }
            if url.is_some() && (socket.is_none() || line.contains("at unix:")) {
                break;
            }
        }
        let url = url.unwrap_or_else(|| panic!("icicle serve did not start:\n{}", log.lock().unwrap()));
        let keep = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                keep.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Serve { child, url, log }
    }

    /// Stop it and return its log.
    fn stop(mut self) -> String {
        self.halt();
        let log = self.log.lock().unwrap().clone();
        log
    }

    fn halt(&mut self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success() || std::thread::panicking(), "icicle serve exited with {status}");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.halt();
        }
    }
}

/// A request to the server's HTTP address.
fn http(s: &Serve, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let addr = s.url.trim_start_matches("http://");
    exchange(std::net::TcpStream::connect(addr).unwrap(), method, path, token, body)
}

/// `POST .../search` as `token`; the answer (status 200 asserted).
fn search(s: &Serve, token: Option<&str>, body: Value) -> Value {
    let (code, v) = http(s, "POST", &format!("/v1/index/{INDEX}/search"), token, Some(&body));
    assert_eq!(code, 200, "{body}: {v}");
    v
}

/// Every subject a scroll with `filters` returns to `token`, page by page.
fn scroll_all(s: &Serve, token: Option<&str>, filters: Value) -> BTreeSet<String> {
    let (mut out, mut marker) = (BTreeSet::new(), Value::Null);
    loop {
        let body = json!({"q": "*", "limit": 700, "filters": filters, "marker": marker});
        let (code, page) = http(s, "POST", &format!("/v1/index/{INDEX}/scroll"), token, Some(&body));
        assert_eq!(code, 200, "{page}");
        for g in page["gmeta"].as_array().unwrap() {
            assert!(out.insert(g["subject"].as_str().unwrap().to_string()), "a subject twice in a scroll");
        }
        if page["has_next_page"] != true {
            return out;
        }
        marker = page["marker"].clone();
    }
}

/// The tokens file (mode 0600): a writer, and two readers with the given principals.
fn tokens_file(dir: &Path, a: &[String], b: &[String]) -> PathBuf {
    let f = dir.join("tokens.tsv");
    let line = |t: &str, p: &[String], role: &str| format!("{t}\t{}\t{}\t{role}\n", p[0], p[1..].join(","));
    let text = format!(
        "# icicle serve tokens\n{}{}{}",
        line(WRITER, &["urn:globus:auth:identity:publisher".into()], "writer"),
        line(READER_A, a, ""),
        line(READER_B, b, "")
    );
    std::fs::write(&f, text).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

/// A snapshot of `data` published through the `globus` sink to `s`, beside a file sink
/// (`tmp/out`, the ground truth); returns the records by subject.
fn publish(tmp: &Path, data: &Path, s: &Serve, records: &str) -> BTreeMap<String, Value> {
    let out = tmp.join("out");
    let cfg = config(
        tmp,
        "publish.toml",
        &format!(
            "[snapshot]\nmax_batch_bytes = 200000\n[records]\n{records}\n[sources.s]\ntype = \"tsv\"\npreset = \"icicle9\"\npaths = [\"{d}/*.csv\"]\n\
             [sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n\
             [sinks.serve]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\nbase_url = \"{u}\"\ntoken_env = \"ICICLE_TEST_SERVE_TOKEN\"\nretry_initial_ms = 20\nretry_max_ms = 200\ntask_poll_ms = 10\n",
            d = data.display(),
            o = out.display(),
            u = s.url
        ),
    );
    let (code, _, err) = icicle(
        &["snapshot", "--json", "--no-progress", "-c", cfg.to_str().unwrap()],
        &[("ICICLE_TEST_SERVE_TOKEN", WRITER)],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains(WRITER), "the token reached the log");
    let mut truth = BTreeMap::new();
    for (_, doc) in documents(&out, "ingest-") {
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            truth.insert(e["subject"].as_str().unwrap().to_string(), e.clone());
        }
    }
    truth
}

/// A generated listing of `files` files under `tmp/data` (with its principals file).
fn listing(tmp: &Path, files: u64, seed: u64) -> (GenFs, PathBuf) {
    let fs = GenFs::generate(&GenSpec::new(files, seed));
    let data = tmp.join("data");
    gen::write(&fs, Format::Tsv, &data, 500, false).unwrap();
    (fs, data)
}

#[test]
fn the_globus_sink_publishes_into_serve_and_find_and_the_api_answer_the_records() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let (_, data) = listing(t, 1_500, seed);
    let tokens = tokens_file(t, &["urn:globus:auth:identity:a".into()], &["urn:globus:auth:identity:b".into()]);
    let index = t.join("index");
    let s = Serve::start(&index, &tokens, None);
    let truth = publish(t, &data, &s, "visible_to = [\"public\"]");
    let contents: Vec<&Value> = truth.values().map(|e| &e["content"]).collect();

    let all = search(&s, None, json!({"q": "*", "limit": 0}));
    assert_eq!(all["total"].as_u64(), Some(truth.len() as u64), "seed {seed}");
    assert_eq!(scroll_all(&s, None, Value::Null), truth.keys().cloned().collect(), "seed {seed}");
    // A filter on a random owner: its total and its subjects, exactly.
    let mut rng = Rng::new(seed);
    let uid = contents[rng.below(contents.len() as u64) as usize]["uid"].as_u64().unwrap();
    let want: BTreeSet<String> =
        truth.iter().filter(|(_, e)| e["content"]["uid"] == uid).map(|(k, _)| k.clone()).collect();
    let by_uid = json!([{"type": "match_any", "field_name": "uid", "values": [uid]}]);
    assert_eq!(
        search(&s, None, json!({"q": "*", "limit": 0, "filters": by_uid}))["total"].as_u64(),
        Some(want.len() as u64),
        "seed {seed}"
    );
    assert_eq!(scroll_all(&s, None, by_uid), want, "seed {seed}: uid {uid}");
    // A size range and a type, with facets and a sort.
    let cut = contents[rng.below(contents.len() as u64) as usize]["size"].as_u64().unwrap();
    let body = json!({"q": "*", "limit": 5, "filters": [{"type": "range", "field_name": "size", "values": [{"from": cut, "to": "*"}]},
                      {"type": "match_all", "field_name": "type", "values": ["file"]}],
                      "sort": [{"field_name": "size", "order": "desc"}],
                      "facets": [{"name": "owners", "field_name": "uid", "size": 1000}, {"field_name": "size", "type": "numeric_histogram", "size": 4, "histogram_range": {"low": 0, "high": 1u64 << 40}}]});
    let got = search(&s, None, body);
    let mut sizes: Vec<u64> = contents
        .iter()
        .filter(|c| c["size"].as_u64().unwrap() >= cut && c["type"] == "file")
        .map(|c| c["size"].as_u64().unwrap())
        .collect();
    assert_eq!(got["total"].as_u64(), Some(sizes.len() as u64), "seed {seed}: size ≥ {cut}");
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let top: Vec<u64> =
        got["gmeta"].as_array().unwrap().iter().map(|g| g["entries"][0]["content"]["size"].as_u64().unwrap()).collect();
    assert_eq!(top, sizes[..sizes.len().min(5)], "seed {seed}");
    let owners: u64 =
        got["facet_results"][0]["buckets"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    let histogram: u64 =
        got["facet_results"][1]["buckets"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!((owners, histogram), (sizes.len() as u64, sizes.len() as u64), "seed {seed}: {}", got["facet_results"]);
    // A subject, and the index's description.
    let (subject, entry) = truth.iter().nth(rng.below(truth.len() as u64) as usize).unwrap();
    let (code, v) = http(&s, "GET", &format!("/v1/index/{INDEX}/subject?subject={}", url_encode(subject)), None, None);
    assert_eq!((code, &v["entries"][0]["content"]), (200, &entry["content"]), "seed {seed}: {subject}");
    let (code, v) = http(&s, "GET", &format!("/v1/index/{INDEX}"), None, None);
    assert_eq!((code, v["num_subjects"].as_u64()), (200, Some(truth.len() as u64)), "{v}");

    let log = s.stop();
    assert!(!log.contains(WRITER), "a token reached the server's log");
    // The index on disk, read directly now that serve has let it go.
    let (code, out, err) = icicle(&["find", "--index", index.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let found: BTreeSet<String> = out.lines().map(str::to_string).collect();
    let paths: BTreeSet<String> = contents.iter().map(|c| c["path"].as_str().unwrap().to_string()).collect();
    assert_eq!(found, paths, "seed {seed}");
}

/// The principals file of a listing: (uid → URN, gid → URN).
fn principals(data: &Path) -> (BTreeMap<u64, String>, BTreeMap<u64, String>) {
    let (mut users, mut groups) = (BTreeMap::new(), BTreeMap::new());
    for line in std::fs::read_to_string(data.join("principals.tsv")).unwrap().lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let into = if f[0] == "uid" { &mut users } else { &mut groups };
        into.insert(f[1].parse().unwrap(), f[2].to_string());
    }
    (users, groups)
}

/// The subjects of `truth` that `principals` (with `public`) may see.
fn visible(truth: &BTreeMap<String, Value>, principals: &[String]) -> BTreeSet<String> {
    truth
        .iter()
        .filter(|(_, e)| {
            e["visible_to"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p == "public" || principals.iter().any(|q| p == q.as_str()))
        })
        .map(|(k, _)| k.clone())
        .collect()
}

/// What `token` is answered: every subject (one search), the total, and the uid facet.
fn answered(s: &Serve, token: Option<&str>) -> (BTreeSet<String>, u64, BTreeMap<u64, u64>) {
    let v = search(s, token, json!({"q": "*", "limit": 10_000, "facets": [{"field_name": "uid", "size": 1000}]}));
    answer_parts(&v)
}

fn answer_parts(v: &Value) -> (BTreeSet<String>, u64, BTreeMap<u64, u64>) {
    let subjects = v["gmeta"].as_array().unwrap().iter().map(|g| g["subject"].as_str().unwrap().to_string()).collect();
    let facet = v["facet_results"][0]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["value"].as_u64().unwrap(), b["count"].as_u64().unwrap()))
        .collect();
    (subjects, v["total"].as_u64().unwrap(), facet)
}

/// Per uid, how many of `subjects` it owns.
fn uid_counts(truth: &BTreeMap<String, Value>, subjects: &BTreeSet<String>) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    for s in subjects {
        *out.entry(truth[s]["content"]["uid"].as_u64().unwrap()).or_default() += 1;
    }
    out
}

/// A uid of the records with no account on this machine (its groups are then its gid alone).
fn accountless(truth: &BTreeMap<String, Value>, rng: &mut Rng) -> u64 {
    let uids: Vec<u64> =
        truth.values().map(|e| e["content"]["uid"].as_u64().unwrap()).collect::<BTreeSet<_>>().into_iter().collect();
    for _ in 0..100 {
        let u = uids[rng.below(uids.len() as u64) as usize];
        // SAFETY: a lookup by number; the record is not read.
        if unsafe { libc::getpwuid(u as u32) }.is_null() {
            return u;
        }
    }
    panic!("every uid of the records has an account here");
}

#[test]
fn every_answer_is_what_the_asking_identity_may_see_and_writes_need_a_writer() {
    let seed = test_seed();
    let tmp = test_dir();
    let t = tmp.path();
    let (_, data) = listing(t, 1_200, seed);
    let (users, groups) = principals(&data);
    let mut rng = Rng::new(seed);
    // Reader A: one user and one group; reader B: another user alone.
    let some = |rng: &mut Rng, m: &BTreeMap<u64, String>| *m.keys().nth(rng.below(m.len() as u64) as usize).unwrap();
    let (gid_a, uid_b) = (some(&mut rng, &groups), some(&mut rng, &users));
    let probe_tokens = tokens_file(t, &["urn:x:none".into()], &["urn:x:none".into()]);
    let index = t.join("index");
    let mut s = Serve::start(&index, &probe_tokens, None);
    let mut truth = publish(
        t,
        &data,
        &s,
        &format!("visible_to = [\"owner\", \"group\"]\nprincipals = \"{}/principals.tsv\"", data.display()),
    );
    // A few public records beside them, through the API; the task is SUCCESS at once.
    let public: Vec<Value> = (0..3)
        .map(|i| json!({"subject": format!("/public/{i}"), "visible_to": ["public"], "content": {"path": format!("/public/{i}"), "name": i.to_string(), "type": "file", "size": i, "uid": 7, "gid": 7}}))
        .collect();
    let (code, v) = http(
        &s,
        "POST",
        &format!("/v1/index/{INDEX}/ingest"),
        Some(WRITER),
        Some(&json!({"ingest_type": "GMetaList", "ingest_data": {"gmeta": public}})),
    );
    assert_eq!(code, 200, "{v}");
    let (code, task) = http(&s, "GET", &format!("/v1/task/{}", v["task_id"].as_str().unwrap()), None, None);
    assert_eq!((code, &task["state"], &task["task_type"]), (200, &json!("SUCCESS"), &json!("INGEST")), "{task}");
    for e in public {
        truth.insert(e["subject"].as_str().unwrap().to_string(), e);
    }
    let uid_a = accountless(&truth, &mut rng);
    let a = vec![users[&uid_a].clone(), groups[&gid_a].clone()];
    let b = vec![users[&uid_b].clone()];
    drop(s.stop());
    let tokens = tokens_file(t, &a, &b);
    // Serve again with these tokens (and a socket): the records persist.
    std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = t.join("serve.sock");
    let cfg = config(t, "serve.toml", &format!("[records]\nprincipals = \"{}/principals.tsv\"\n", data.display()));
    s = Serve::start(&index, &tokens, Some((&socket, &cfg)));

    for (who, token, principals) in [
        ("reader A", Some(READER_A), a.clone()),
        ("reader B", Some(READER_B), b.clone()),
        ("no token", None, Vec::new()),
    ] {
        let want = visible(&truth, &principals);
        let (subjects, total, facet) = answered(&s, token);
        assert_eq!(total, want.len() as u64, "seed {seed}: {who}");
        assert!(subjects == want, "seed {seed}: {who} sees other subjects than its records'");
        assert_eq!(facet, uid_counts(&truth, &want), "seed {seed}: {who}'s uid facet");
        assert_eq!(scroll_all(&s, token, Value::Null), want, "seed {seed}: {who}'s scroll");
        // A subject it may not see is not found.
        if let Some(hidden) = truth.keys().find(|k| !want.contains(*k)) {
            let (code, _) =
                http(&s, "GET", &format!("/v1/index/{INDEX}/subject?subject={}", url_encode(hidden)), token, None);
            assert_eq!(code, 404, "seed {seed}: {who} got {hidden}");
        }
    }
    assert!(
        visible(&truth, &a).len() > 3 && visible(&truth, &b).len() > 3,
        "seed {seed}: the readers see records of their own"
    );

    // Writes without a writer token are refused and change nothing.
    let before = answered(&s, Some(READER_A));
    let victim = before.0.iter().next().unwrap().clone();
    let entry = json!({"ingest_type": "GMetaEntry", "ingest_data": {"subject": "/evil", "visible_to": ["public"], "content": {"path": "/evil"}}});
    let delete = json!({"subjects": [victim]});
    for (token, want) in [(None, 401), (Some(READER_A), 403), (Some(READER_B), 403), (Some("not-a-token-at-all"), 401)]
    {
        assert_eq!(http(&s, "POST", &format!("/v1/index/{INDEX}/ingest"), token, Some(&entry)).0, want, "{token:?}");
        assert_eq!(
            http(&s, "POST", &format!("/v1/index/{INDEX}/batch_delete_by_subject"), token, Some(&delete)).0,
            want,
            "{token:?}"
        );
    }
    assert_eq!(answered(&s, Some(READER_A)), before, "seed {seed}: a refused write changed the index");
    assert_eq!(answered(&s, None).1, 3, "seed {seed}");
    let (code, _) = http(
        &s,
        "POST",
        &format!("/v1/index/{INDEX}/search"),
        Some(READER_A),
        Some(&json!({"q": "*", "bypass_visible_to": true})),
    );
    assert_eq!(code, 403);

    // Over the socket: root sees every record; a peer as (uid A, gid A) what reader A sees.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let peer = |ids: Option<(u64, u64)>| {
            let body = json!({"q": "*", "limit": 10_000, "facets": [{"field_name": "uid", "size": 1000}]}).to_string();
            let mut cmd = Command::new("setpriv");
            match ids {
                Some((u, g)) => cmd.args(["--reuid", &u.to_string(), "--regid", &g.to_string(), "--clear-groups"]),
                None => cmd.args(["--reuid", "0"]),
            };
            let url = format!("http://serve/v1/index/{INDEX}/search");
            let out = cmd
                .args([
                    "curl",
                    "-s",
                    "--unix-socket",
                    socket.to_str().unwrap(),
                    "-H",
                    "Content-Type: application/json",
                    "-d",
                    &body,
                    &url,
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            answer_parts(&serde_json::from_slice(&out.stdout).unwrap())
        };
        assert_eq!(peer(None).1, truth.len() as u64, "seed {seed}: root over the socket");
        let want = visible(&truth, &a);
        let (subjects, total, facet) = peer(Some((uid_a, gid_a)));
        assert_eq!(total, want.len() as u64, "seed {seed}: uid {uid_a} gid {gid_a} over the socket");
        assert!(subjects == want, "seed {seed}: uid {uid_a} gid {gid_a} sees other subjects over the socket");
        assert_eq!(facet, uid_counts(&truth, &want), "seed {seed}");
    } else {
        eprintln!("not root: the socket's peers are not checked");
    }
}

/// globus-sdk's `SearchClient` against `icicle serve`: the calls tests/globus_sdk.rs makes of
/// the emulator, with a writer, a reader and no token.
const SDK: &str = r#"
import json, sys
sys.modules["orjson"] = None
import globus_sdk
base, index, writer, reader = sys.argv[1:5]
def client(token):
    auth = globus_sdk.AccessTokenAuthorizer(token) if token else globus_sdk.NullAuthorizer()
    return globus_sdk.SearchClient(base_url=base, authorizer=auth)
sc, ra, anon = client(writer), client(reader), client(None)
out = {}
docs = [{"subject": f"/p/{n}", "visible_to": ["public"] if n != "gamma" else ["urn:globus:auth:identity:a"],
         "content": {"path": f"/p/{n}", "name": n, "size": s, "type": t, "uid": u}} for n, s, t, u in
        [("alpha", 10, "file", 1), ("beta", 20, "file", 2), ("gamma", 30, "link", 1), ("alphabet", 40, "file", 2)]]
r = sc.ingest(index, {"ingest_type": "GMetaList", "ingest_data": {"gmeta": docs}})
d = sc.get_task(r["task_id"])
out["ingest_task"] = {"state": d["state"], "task_type": d["task_type"]}
out["task_list"] = len(sc.get_task_list(index)["tasks"])
out["get_search"] = sorted(g["subject"] for g in anon.search(index, "alpha*")["gmeta"])
f = anon.post_search(index, {"q": "*", "filters": [{"type": "range", "field_name": "size", "values": [{"from": 15, "to": "*"}]}]})
out["filtered"] = sorted(g["subject"] for g in f["gmeta"])
q = {"q": "*", "sort": [{"field_name": "size", "order": "desc"}], "facets": [{"field_name": "type"}], "limit": 2}
for who, c in (("reader", ra), ("anonymous", anon)):
    r = c.post_search(index, q)
    out[who] = {"total": r["total"], "first": [g["subject"] for g in r["gmeta"]],
                "types": {b["value"]: b["count"] for b in r["facet_results"][0]["buckets"]}}
out["advanced"] = sorted(g["subject"] for g in ra.post_search(index, {"q": "size:>=20 AND NOT type:link", "advanced": True})["gmeta"])
out["subject"] = ra.get_subject(index, "/p/gamma")["entries"][0]["content"]["name"]
try:
    anon.get_subject(index, "/p/gamma")
    out["hidden_subject"] = 200
except globus_sdk.SearchAPIError as e:
    out["hidden_subject"] = e.http_status
seen, marker = [], None
while True:
    kw = {"marker": marker} if marker else {}
    page = ra.scroll(index, {"q": "*", "limit": 1, "filters": [{"type": "match_any", "field_name": "uid", "values": [1]}]}, **kw)
    seen += [g["subject"] for g in page["gmeta"]]
    if not page["has_next_page"]:
        break
    marker = page["marker"]
out["scrolled"] = seen
for who, c in (("reader_write", ra), ("anonymous_write", anon)):
    try:
        c.ingest(index, {"ingest_type": "GMetaEntry", "ingest_data": docs[0]})
        out[who] = 200
    except globus_sdk.SearchAPIError as e:
        out[who] = e.http_status
t = sc.batch_delete_by_subject(index, ["/p/beta"])["task_id"]
out["delete_task"] = sc.get_task(t)["state"]
out["left"] = sorted(g["subject"] for g in ra.post_search(index, {"q": "*"})["gmeta"])
out["index_entries"] = ra.get_index(index)["num_entries"]
print(json.dumps(out))
"#;

#[test]
fn globus_sdk_search_client_works_against_serve_unchanged() {
    assert!(
        Command::new(common::python()).args(["-c", "import globus_sdk"]).status().map(|s| s.success()).unwrap_or(false),
        "python3 cannot import globus_sdk: the test command installs it (pip install globus-sdk)"
    );
    let tmp = test_dir();
    let t = tmp.path();
    let tokens = tokens_file(t, &["urn:globus:auth:identity:a".into()], &["urn:globus:auth:identity:b".into()]);
    let s = Serve::start(&t.join("index"), &tokens, None);
    let run = Command::new(common::python()).args(["-c", SDK, &s.url, INDEX, WRITER, READER_A]).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let out: Value = serde_json::from_slice(&run.stdout).unwrap();
    let want = json!({
        "ingest_task": {"state": "SUCCESS", "task_type": "INGEST"},
        "task_list": 1,
        "get_search": ["/p/alpha", "/p/alphabet"],
        "filtered": ["/p/alphabet", "/p/beta"],
        "reader": {"total": 4, "first": ["/p/alphabet", "/p/gamma"], "types": {"file": 3, "link": 1}},
        "anonymous": {"total": 3, "first": ["/p/alphabet", "/p/beta"], "types": {"file": 3}},
        "advanced": ["/p/alphabet", "/p/beta"],
        "subject": "gamma",
        "hidden_subject": 404,
        "scrolled": ["/p/alpha", "/p/gamma"],
        "reader_write": 403,
        "anonymous_write": 401,
        "delete_task": "SUCCESS",
        "left": ["/p/alpha", "/p/alphabet", "/p/gamma"],
        "index_entries": 3,
    });
    assert_eq!(out, want);
}

#[test]
fn serve_refuses_an_exposed_tokens_file_and_a_second_writer() {
    let tmp = test_dir();
    let t = tmp.path();
    let tokens = tokens_file(t, &["urn:globus:auth:identity:a".into()], &["urn:globus:auth:identity:b".into()]);
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o644)).unwrap();
    let index = t.join("index");
    let args =
        ["serve", "--index", index.to_str().unwrap(), "--listen", "127.0.0.1:0", "--tokens", tokens.to_str().unwrap()];
    let (code, _, err) = icicle(&args, &[]);
    assert_ne!(code, 0);
    assert!(err.contains(tokens.to_str().unwrap()) && err.contains("chmod 600"), "{err}");
    assert!(!err.contains(WRITER) && !err.contains(READER_A), "a token reached stderr: {err}");
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = Serve::start(&index, &tokens, None);
    let (code, _, err) = icicle(&args, &[]);
    assert_ne!(code, 0);
    assert!(err.contains("another process writes to this index"), "{err}");
    drop(s);
}
