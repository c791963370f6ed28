//! The web search page of `icicle serve`, driven in headless Chromium through the real
//! binaries: a generated snapshot (primary and aggregate records) goes into an index, serve
//! answers it, and the page is loaded, searched (typed, Enter), narrowed by a facet (Space on
//! its checkbox), paged, and its user, group and directory pages opened. The DOM is checked
//! against the API's answers to the same requests and against the records themselves (rows,
//! totals, facet counts, the charts' points equal the aggregate record's quantiles); a pasted
//! token shows that token's records and never reaches the URL; the page runs under its
//! Content-Security-Policy with no violation or script error; nothing scrolls sideways at 390
//! px. Screenshots at 1280x800 and 390x844 are kept under `target/test-artefacts/web_page/`.
//!
//! Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: fds
//! 3 and 4), so no driver or library is needed beyond Debian's `chromium` package. As root,
//! Chromium runs with `--no-sandbox`: its sandbox refuses to start as root, and the test runs
//! as root in CI containers. Without Chromium the test is skipped, except under CI (env `CI`),
//! where it fails.

#[path = "web_page/browser.rs"]
mod browser;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use browser::{chromium, Alive, Browser};
use common::*;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec, NOW_REF};
use serde_json::{json, Value};

const INDEX: &str = "0b9e3c2a-5d41-4f6e-8a7b-1c2d3e4f5a6b";
const WRITER: &str = "web-writer-Pq7sLm2x";
const READER: &str = "web-reader-Vb4nHk8z";
const READER_ID: &str = "urn:globus:auth:identity:web-reader";

/// A running `icicle serve`; stopped (SIGTERM, then waited for) when dropped.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(index: &Path, tokens: &Path) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_icicle"))
            .args([
                "serve",
                "--index",
                index.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
                "--tokens",
                tokens.to_str().unwrap(),
                "--index-id",
                INDEX,
            ])
            .env_remove("RUST_LOG")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut log = String::new();
        let url = loop {
            let Some(Ok(line)) = lines.next() else { panic!("icicle serve did not start:\n{log}") };
            log.push_str(&line);
            log.push('\n');
            if let Some(at) = line.find("at http://") {
                break line[at + 3..].trim().to_string();
            }
        };
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("serve: {l}")));
        Serve { child, url }
    }
}

impl Alive for Serve {
    fn alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("icicle serve exited while the page was waiting: {status}");
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}

/// One HTTP/1.1 request to serve (`Connection: close`): (status, head, body).
fn http(s: &Serve, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> (u16, String, String) {
    let mut stream = std::net::TcpStream::connect(s.url.trim_start_matches("http://")).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_ascii_lowercase(), rest.to_string())
}

/// `POST .../search` as `token` (200 asserted).
fn search(s: &Serve, token: Option<&str>, body: &Value) -> Value {
    let (code, _, text) = http(s, "POST", &format!("/v1/index/{INDEX}/search"), token, Some(body));
    assert_eq!(code, 200, "{body}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// The filter the page puts on every search: primary records (files and links).
fn primary() -> Value {
    json!({"type": "match_any", "field_name": "type", "values": ["file", "link"]})
}

const QUANTILES: [&str; 6] = ["p10", "p25", "p50", "p75", "p90", "p99"];
/// The page's size ranges, [low, high).
const SIZES: [(u64, u64); 5] =
    [(0, 1 << 10), (1 << 10, 1 << 20), (1 << 20, 1 << 30), (1 << 30, 1 << 40), (1 << 40, 1 << 53)];

/// A versioned snapshot (with aggregate records) of a generated listing into `t/index`, beside
/// a file sink whose documents are the ground truth: the records by subject.
fn index_of_a_snapshot(t: &Path, seed: u64) -> BTreeMap<String, Value> {
    let fs = GenFs::generate(&GenSpec::new(1_200, seed));
    gen::write(&fs, Format::Tsv, &t.join("listing"), 700, false).unwrap();
    let cfg = config(
        t,
        "snapshot.toml",
        &format!(
            "[snapshot]\nworkers = 2\n[records]\nvisible_to = [\"public\"]\n\
             [aggregate]\nenabled = true\ndirectory_min = 1\ndirectory_max = 3\nreference_time = {NOW_REF}\n\
             [sources.s]\ntype = \"tsv\"\npreset = \"icicle9\"\npaths = [\"{t}/listing/part-*.csv\"]\n\
             [sinks.out]\ntype = \"file\"\ndir = \"{t}/out\"\n[sinks.idx]\ntype = \"index\"\ndir = \"{t}/index\"\n",
            t = t.display(),
        ),
    );
    let (code, _, err) = icicle(&["snapshot", "--json", "--no-progress", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    let mut truth = BTreeMap::new();
    for (_, doc) in documents(&t.join("out"), "ingest-") {
        for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
            truth.insert(e["subject"].as_str().unwrap().to_string(), e.clone());
        }
    }
    truth
}

/// The tokens file (mode 0600): a writer and a reader.
fn tokens_file(t: &Path) -> PathBuf {
    let f = t.join("tokens.tsv");
    std::fs::write(&f, format!("{WRITER}\turn:globus:auth:identity:publisher\t\twriter\n{READER}\t{READER_ID}\n"))
        .unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

/// Records only the reader's token may see, ingested through serve; their subjects.
fn private_records(s: &Serve) -> Vec<String> {
    let gmeta: Vec<Value> = (0..4)
        .map(|i| {
            let path = format!("/private/secret-{i}");
            json!({"subject": path, "visible_to": [READER_ID], "content": {"path": path, "name": format!("secret-{i}"), "type": "file",
                   "size": 1000 * i, "uid": 4242, "gid": 4242, "mtime": "2025-06-01T00:00:00Z", "raw": {"mtime": 1_748_736_000}}})
        })
        .collect();
    let doc = json!({"ingest_type": "GMetaList", "ingest_data": {"gmeta": gmeta}});
    let (code, _, text) = http(s, "POST", &format!("/v1/index/{INDEX}/ingest"), Some(WRITER), Some(&doc));
    assert_eq!(code, 200, "{text}");
    (0..4).map(|i| format!("/private/secret-{i}")).collect()
}

/// The result rows on the page: subject, uid, gid, bytes, mtime seconds.
fn page_rows(b: &mut Browser) -> Value {
    b.eval(
        "[...document.querySelectorAll('#results tbody tr')].map(tr => [tr.dataset.subject, Number(tr.querySelector('[data-uid]').dataset.uid), \
         Number(tr.querySelector('[data-gid]').dataset.gid), Number(tr.querySelector('[data-bytes]').dataset.bytes), \
         Number(tr.querySelector('[data-seconds]').dataset.seconds)])",
    )
}

/// The same of an API answer.
fn api_rows(v: &Value) -> Value {
    let rows: Vec<Value> = v["gmeta"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let c = &g["entries"][0]["content"];
            json!([g["subject"], c["uid"], c["gid"], c["size"], c["raw"]["mtime"]])
        })
        .collect();
    Value::Array(rows)
}

/// The total the page shows.
fn page_total(b: &mut Browser) -> u64 {
    b.eval("Number(document.getElementById('summary').dataset.total)").as_u64().unwrap()
}

/// The page's facet choices: facet → value → count.
fn page_facets(b: &mut Browser) -> BTreeMap<String, BTreeMap<String, u64>> {
    let v = b.eval("[...document.querySelectorAll('#facets input[type=checkbox]')].map(i => [i.dataset.facet, i.dataset.value, Number(i.dataset.count)])");
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for x in v.as_array().unwrap() {
        out.entry(x[0].as_str().unwrap().into())
            .or_default()
            .insert(x[1].as_str().unwrap().into(), x[2].as_u64().unwrap());
    }
    out
}

/// A terms facet of an API answer: value → count.
fn api_terms(v: &Value, name: &str) -> BTreeMap<String, u64> {
    let f = v["facet_results"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap();
    f["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["value"].to_string().trim_matches('"').to_string(), b["count"].as_u64().unwrap()))
        .collect()
}

/// The search request the page makes for `q`, as the API documents it.
fn request(q: &str, offset: u64, post: Option<Value>) -> Value {
    let facets = json!([{"name": "type", "field_name": "type", "size": 10}, {"name": "uid", "field_name": "uid", "size": 10}, {"name": "gid", "field_name": "gid", "size": 10}]);
    let mut body =
        json!({"q": q, "advanced": true, "filters": [primary()], "limit": 20, "offset": offset, "facets": facets});
    if let Some(p) = post {
        body["post_facet_filters"] = p;
    }
    body
}

/// The charts' points: (series, quantile, value).
fn chart_points(b: &mut Browser) -> BTreeSet<(String, String, i64)> {
    let v = b.eval("[...document.querySelectorAll('svg.chart circle.pt')].map(c => [c.dataset.series, c.dataset.q, Number(c.dataset.value)])");
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| (x[0].as_str().unwrap().into(), x[1].as_str().unwrap().into(), x[2].as_i64().unwrap()))
        .collect()
}

/// The points an aggregate record's quantiles make.
fn record_points(c: &Value) -> BTreeSet<(String, String, i64)> {
    let mut out = BTreeSet::new();
    for q in QUANTILES {
        out.insert(("size".into(), q.into(), c["size"][q].as_i64().unwrap()));
        for t in ["atime", "ctime", "mtime"] {
            out.insert((t.into(), q.into(), c["raw"][t][q].as_i64().unwrap()));
        }
    }
    out
}

/// The aggregate record of `kind` and `id`.
fn aggregate<'a>(truth: &'a BTreeMap<String, Value>, kind: &str, id: &str) -> &'a Value {
    let e = truth.values().find(|e| e["content"]["kind"] == kind && e["content"]["id"] == id);
    &e.unwrap_or_else(|| panic!("no aggregate record of {kind} {id}"))["content"]
}

/// The aggregate page shown is `kind` `id`'s record: its file count and its charts' points.
fn check_aggregate_page(b: &mut Browser, truth: &BTreeMap<String, Value>, kind: &str, id: &str, seed: u64) {
    let c = aggregate(truth, kind, id);
    let title = b.eval("document.getElementById('agg-title').textContent");
    assert!(title.as_str().unwrap().ends_with(&format!(" {id}")), "seed {seed}: {title}");
    let files = b.eval("document.querySelector('#agg-stats [data-stat=files] dd').textContent");
    assert_eq!(files, json!(c["file_count"].to_string()), "seed {seed}: {kind} {id}'s file count");
    assert_eq!(chart_points(b), record_points(c), "seed {seed}: {kind} {id}'s chart");
    assert_eq!(b.eval("document.activeElement.id"), json!("agg-title"), "the page's heading takes the focus");
    assert_eq!(
        b.eval("document.getElementById('results').checkVisibility()"),
        json!(false),
        "the results are hidden on the {kind} page"
    );
}

/// The directories right below `dir` with aggregate records.
fn child_dirs(truth: &BTreeMap<String, Value>, dir: &str) -> BTreeSet<String> {
    let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
    truth
        .values()
        .filter(|e| e["content"]["kind"] == "dir")
        .filter_map(|e| e["content"]["id"].as_str())
        .filter(|id| id.len() > prefix.len() && id.starts_with(&prefix) && !id[prefix.len()..].contains('/'))
        .map(str::to_string)
        .collect()
}

/// The ids of the aggregate table's rows (directories, users or groups).
fn page_subdirs(b: &mut Browser) -> BTreeSet<String> {
    let v = b.eval("[...document.querySelectorAll('table.aggregates tbody tr')].map(tr => tr.dataset.id)");
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// Screenshots of the view at 1280x800 and 390x844 (nothing wider than the phone's window).
fn screenshots(b: &mut Browser, dir: &Path, name: &str) {
    b.eval("window.scrollTo(0, 0)");
    b.screenshot(&dir.join(format!("{name}-1280x800.png")), 1280, 800);
    b.viewport(390, 844, true);
    b.eval("window.scrollTo(0, 0)");
    let widths = b.eval("[document.documentElement.scrollWidth, window.innerWidth]");
    assert!(widths[0].as_u64() <= widths[1].as_u64(), "{name} scrolls sideways at 390 px: {widths}");
    b.screenshot(&dir.join(format!("{name}-390x844.png")), 390, 844);
    if name == "search" {
        // The result rows as cards, further down.
        b.eval("document.getElementById('results-title').scrollIntoView()");
        b.screenshot(&dir.join(format!("{name}-rows-390x844.png")), 390, 844);
    }
    b.viewport(1280, 800, false);
}

/// `/` and the assets: their types and the policy.
fn check_assets(s: &Serve) {
    let (code, head, html) = http(s, "GET", "/", None, None);
    assert_eq!(code, 200);
    assert!(
        head.contains("content-type: text/html")
            && head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{head}"
    );
    assert!(html.contains(&format!("content=\"{INDEX}\"")), "the page names its index");
    for (path, ty) in
        [("/assets/app.js", "text/javascript"), ("/assets/app.css", "text/css"), ("/assets/icon.svg", "image/svg+xml")]
    {
        let (code, head, _) = http(s, "GET", path, None, None);
        assert!(
            code == 200
                && head.contains(&format!("content-type: {ty}"))
                && head.contains("x-content-type-options: nosniff"),
            "{path}: {head}"
        );
    }
}

/// One run of the page: the browser, the server, the records.
struct Run<'a> {
    b: Browser,
    s: Serve,
    truth: &'a BTreeMap<String, Value>,
    /// The primary records (files and links), all public.
    files: Vec<&'a Value>,
    seed: u64,
    artefacts: PathBuf,
}

impl Run<'_> {
    /// Load `/`: every public file and link, the first page as the API answers it.
    fn load(&mut self) {
        let (b, seed) = (&mut self.b, self.seed);
        b.viewport(1280, 800, false);
        let url = format!("{}/", self.s.url);
        b.step(&mut self.s, "the first results", |b| {
            b.call("Page.navigate", json!({"url": url}));
        });
        let api = search(&self.s, None, &request("*", 0, None));
        assert_eq!(page_total(b), self.files.len() as u64, "seed {seed}: every public file and link");
        assert_eq!(page_rows(b), api_rows(&api), "seed {seed}");
    }

    /// A pasted token: its records too, and never in the URL; forgotten, the public ones again.
    fn token(&mut self, private: usize) {
        let (b, seed) = (&mut self.b, self.seed);
        b.press("#token-box summary", "Enter");
        b.type_into("#token", READER);
        b.step(&mut self.s, "the token's results", |b| b.press("#token", "Enter"));
        let with_token = search(&self.s, Some(READER), &request("*", 0, None));
        assert_eq!(page_total(b), with_token["total"].as_u64().unwrap(), "seed {seed}");
        assert_eq!(page_total(b), (self.files.len() + private) as u64, "seed {seed}");
        assert_eq!(b.eval("sessionStorage.getItem('icicle-token')"), json!(READER));
        assert!(!b.eval("location.href").as_str().unwrap().contains(READER), "the token reached the URL");
        assert_eq!(b.eval("document.getElementById('token').value"), json!(""), "the token stays in its field");
        assert_eq!(b.eval("document.getElementById('token-box').open"), json!(false), "the token form folds once used");
        assert_eq!(b.eval("document.getElementById('token-state').textContent"), json!("Searching with your token"));
        b.press("#token-box summary", "Enter");
        b.step(&mut self.s, "the public results again", |b| b.press("#token-forget", "Enter"));
        assert_eq!(page_total(b), self.files.len() as u64, "seed {seed}");
    }

    /// A typed query, submitted with Enter: rows, total and facets; then its second page.
    /// Returns the query and the facets shown.
    fn query(&mut self, rng: &mut Rng) -> (String, BTreeMap<String, BTreeMap<String, u64>>) {
        let (b, seed) = (&mut self.b, self.seed);
        let mut sizes: Vec<u64> =
            self.files.iter().filter(|c| c["type"] == "file").map(|c| c["size"].as_u64().unwrap()).collect();
        sizes.sort_unstable();
        let cut = sizes[(sizes.len() as u64 * (10 + rng.below(30)) / 100) as usize];
        let q = format!("type:file AND size:>={cut}");
        b.type_into("#q", &q);
        b.step(&mut self.s, "the query's results", |b| b.press("#q", "Enter"));
        let api = search(&self.s, None, &request(&q, 0, None));
        let matching: Vec<&&Value> =
            self.files.iter().filter(|c| c["type"] == "file" && c["size"].as_u64().unwrap() >= cut).collect();
        assert_eq!(page_total(b), matching.len() as u64, "seed {seed}: {q}");
        assert_eq!(page_rows(b), api_rows(&api), "seed {seed}: {q}");
        let facets = page_facets(b);
        for name in ["type", "uid", "gid"] {
            assert_eq!(facets[name], api_terms(&api, name), "seed {seed}: the {name} facet of {q}");
        }
        let count = |lo: i64, hi: i64, field: &dyn Fn(&Value) -> i64| {
            matching.iter().filter(|c| (lo..hi).contains(&field(c))).count() as u64
        };
        let by_size: BTreeMap<String, u64> = SIZES
            .iter()
            .enumerate()
            .map(|(i, (lo, hi))| (i.to_string(), count(*lo as i64, *hi as i64, &|c| c["size"].as_i64().unwrap())))
            .collect();
        assert_eq!(facets["size"], by_size, "seed {seed}: the size ranges of {q}");
        // The age ranges the page asked for (from the browser's clock), counted in the records.
        let sent = b.eval("window.icicleRequest.facets.filter(f => f.name.startsWith('age-')).map(f => [f.histogram_range.low, f.histogram_range.high])");
        let by_age: BTreeMap<String, u64> = sent
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    i.to_string(),
                    count(r[0].as_i64().unwrap(), r[1].as_i64().unwrap(), &|c| c["raw"]["mtime"].as_i64().unwrap()),
                )
            })
            .collect();
        assert_eq!(facets["age"], by_age, "seed {seed}: the age ranges of {q}");
        assert_eq!(
            facets["year"].values().sum::<u64>(),
            matching.len() as u64,
            "seed {seed}: the years of {q} (all within the 12 shown)"
        );

        assert!(matching.len() > 20, "seed {seed}: {q} fills more than a page");
        b.step(&mut self.s, "the second page", |b| b.press("#next", "Enter"));
        assert_eq!(
            page_rows(b),
            api_rows(&search(&self.s, None, &request(&q, 20, None))),
            "seed {seed}: page 2 of {q}"
        );
        assert!(b
            .eval("document.getElementById('summary').textContent")
            .as_str()
            .unwrap()
            .starts_with("Results 21 to"));
        (q, facets)
    }

    /// The largest owner's checkbox, with Space: the results narrow to its count, from the start.
    fn facet(&mut self, q: &str, facets: &BTreeMap<String, BTreeMap<String, u64>>) {
        let (b, seed) = (&mut self.b, self.seed);
        let (uid, count) = facets["uid"]
            .iter()
            .max_by_key(|(u, n)| (**n, std::cmp::Reverse((*u).clone())))
            .map(|(u, n)| (u.clone(), *n))
            .unwrap();
        b.step(&mut self.s, "the owner's results", |b| b.press(&format!("#f-uid-{uid}"), " "));
        assert_eq!(b.eval(&format!("document.getElementById('f-uid-{uid}').checked")), json!(true));
        assert_eq!(page_total(b), count, "seed {seed}: uid {uid}");
        let post = json!([{"type": "match_any", "field_name": "uid", "values": [uid.parse::<u64>().unwrap()]}]);
        let api = search(&self.s, None, &request(q, 0, Some(post)));
        assert_eq!(api["total"].as_u64(), Some(count));
        assert_eq!(page_rows(b), api_rows(&api), "seed {seed}: uid {uid} of {q}");
        screenshots(b, &self.artefacts, "search");
    }

    /// The first row's owner and group pages, then the users list.
    fn owners(&mut self) {
        let (b, seed, truth) = (&mut self.b, self.seed, self.truth);
        let owner = b
            .eval("document.querySelector('#results tbody tr td[data-uid]').dataset.uid")
            .as_str()
            .unwrap()
            .to_string();
        b.step(&mut self.s, "the user page", |b| b.press("#results tbody tr td[data-uid] a", "Enter"));
        assert_eq!(b.eval("location.hash"), json!(format!("#/user/{owner}")));
        check_aggregate_page(b, truth, "user", &owner, seed);
        screenshots(b, &self.artefacts, "user");
        b.step(&mut self.s, "the results again", |b| {
            b.eval("history.back()");
        });
        let group = b
            .eval("document.querySelector('#results tbody tr td[data-gid]').dataset.gid")
            .as_str()
            .unwrap()
            .to_string();
        b.step(&mut self.s, "the group page", |b| b.press("#results tbody tr td[data-gid] a", "Enter"));
        check_aggregate_page(b, truth, "group", &group, seed);
        b.step(&mut self.s, "the users", |b| b.press("nav a[href='#/list/user']", "Enter"));
        let users: BTreeSet<String> = truth
            .values()
            .filter(|e| e["content"]["kind"] == "user")
            .map(|e| e["content"]["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(page_subdirs(b), users, "seed {seed}: the users page, every user's record");
    }

    /// Directories: the top (no record above directory_min), its largest child, and the files
    /// below that from the page's button.
    fn directories(&mut self) {
        let (b, seed, truth) = (&mut self.b, self.seed, self.truth);
        b.step(&mut self.s, "the directory /", |b| b.press("nav a[href='#/dir/']", "Enter"));
        assert_eq!(b.eval("!!document.getElementById('no-record')"), json!(true), "/ is above directory_min");
        assert_eq!(page_subdirs(b), child_dirs(truth, "/"), "seed {seed}");
        let dir =
            b.eval("document.querySelector('table.aggregates tbody tr').dataset.id").as_str().unwrap().to_string();
        b.step(&mut self.s, "a directory page", |b| b.press("table.aggregates tbody tr a", "Enter"));
        check_aggregate_page(b, truth, "dir", &dir, seed);
        assert_eq!(page_subdirs(b), child_dirs(truth, &dir), "seed {seed}: below {dir}");
        screenshots(b, &self.artefacts, "directory");
        b.step(&mut self.s, "the files below the directory", |b| b.press("#search-these", "Enter"));
        let below = self.files.iter().filter(|c| c["path"].as_str().unwrap().starts_with(&format!("{dir}/"))).count();
        assert_eq!(page_total(b), below as u64, "seed {seed}: below {dir}");
        assert_eq!(b.eval("document.getElementById('q').value"), json!(format!("path:\"{dir}/*\"")));
    }
}

#[test]
fn the_web_page_searches_facets_pages_and_charts_what_the_api_answers() {
    let Some(bin) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set and Chromium is not installed (scripts/test.sh installs Debian's `chromium`)"
        );
        eprintln!("skipped: Chromium is not installed (apt-get install chromium); under CI this test fails instead");
        return;
    };
    let seed = test_seed();
    let mut rng = Rng::new(seed);
    let tmp = test_dir();
    let t = tmp.path();
    let artefacts = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("test-artefacts/web_page");
    std::fs::create_dir_all(&artefacts).unwrap();
    let truth = index_of_a_snapshot(t, seed);
    let files: Vec<&Value> =
        truth.values().map(|e| &e["content"]).filter(|c| c["type"] == "file" || c["type"] == "link").collect();
    let s = Serve::start(&t.join("index"), &tokens_file(t));
    let private = private_records(&s);
    check_assets(&s);

    let b = Browser::start(&bin, &t.join("profile"));
    let mut run = Run { b, s, truth: &truth, files, seed, artefacts };
    run.load();
    run.token(private.len());
    let (q, facets) = run.query(&mut rng);
    run.facet(&q, &facets);
    run.owners();
    run.directories();
    assert!(
        run.b.problems.is_empty(),
        "the page reported errors (a CSP violation, a script error): {:#?}",
        run.b.problems
    );
    eprintln!("seed {seed}: screenshots in {}", run.artefacts.display());
}
