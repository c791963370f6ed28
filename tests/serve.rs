//! `icicle serve` through the real binaries: the project's `globus` sink publishes a generated
//! snapshot into it, and its Search API answers (totals, scrolls, filters, facets, sort) and,
//! once it stops, `icicle find` equal the records exactly; globus-sdk's `SearchClient` works
//! against it unchanged; every answer is what the asking identity may see (two tokens, no
//! token, a Unix-socket peer), totals and facets included, and writes without a writer token
//! are refused and change nothing.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
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
    /// Start on `index` with the tokens file `tokens` (and a socket when given).
    fn start(index: &Path, tokens: &Path, socket: Option<&Path>) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_icicle"));
        cmd.args(["serve", "--index", index.to_str().unwrap(), "--listen", "127.0.0.1:0", "--tokens", tokens.to_str().unwrap(), "--index-id", INDEX]);
        if let Some(s) = socket {
            cmd.args(["--socket", s.to_str().unwrap()]);
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

/// One HTTP/1.1 request over `stream` (`Connection: close`); (status, JSON body).
fn exchange(mut stream: impl Read + Write, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let rest = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(rest) } else { rest.to_string() };
    (status, serde_json::from_str(&rest).unwrap_or(Value::Null))
}

fn dechunk(s: &str) -> String {
    let (mut out, mut rest) = (String::new(), s);
    while let Some((len, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
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
    let (code, _, err) = icicle(&["snapshot", "--json", "--no-progress", "-c", cfg.to_str().unwrap()], &[("ICICLE_TEST_SERVE_TOKEN", WRITER)]);
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
    let want: BTreeSet<String> = truth.iter().filter(|(_, e)| e["content"]["uid"] == uid).map(|(k, _)| k.clone()).collect();
    let by_uid = json!([{"type": "match_any", "field_name": "uid", "values": [uid]}]);
    assert_eq!(search(&s, None, json!({"q": "*", "limit": 0, "filters": by_uid}))["total"].as_u64(), Some(want.len() as u64), "seed {seed}");
    assert_eq!(scroll_all(&s, None, by_uid), want, "seed {seed}: uid {uid}");
    // A size range and a type, with facets and a sort.
    let cut = contents[rng.below(contents.len() as u64) as usize]["size"].as_u64().unwrap();
    let body = json!({"q": "*", "limit": 5, "filters": [{"type": "range", "field_name": "size", "values": [{"from": cut, "to": "*"}]},
                      {"type": "match_all", "field_name": "type", "values": ["file"]}],
                      "sort": [{"field_name": "size", "order": "desc"}],
                      "facets": [{"name": "owners", "field_name": "uid", "size": 1000}, {"field_name": "size", "type": "numeric_histogram", "size": 4, "histogram_range": {"low": 0, "high": 1u64 << 40}}]});
    let got = search(&s, None, body);
    let mut sizes: Vec<u64> =
        contents.iter().filter(|c| c["size"].as_u64().unwrap() >= cut && c["type"] == "file").map(|c| c["size"].as_u64().unwrap()).collect();
    assert_eq!(got["total"].as_u64(), Some(sizes.len() as u64), "seed {seed}: size ≥ {cut}");
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let top: Vec<u64> = got["gmeta"].as_array().unwrap().iter().map(|g| g["entries"][0]["content"]["size"].as_u64().unwrap()).collect();
    assert_eq!(top, sizes[..sizes.len().min(5)], "seed {seed}");
    let owners: u64 = got["facet_results"][0]["buckets"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    let histogram: u64 = got["facet_results"][1]["buckets"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
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

/// Percent-encoding for a query parameter.
fn url_encode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_./".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}
