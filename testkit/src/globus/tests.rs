//! The emulator's answers, checked through raw HTTP/1.1 and through reqwest: the product's
//! (plugins/index) where it answers, the cloud's and the injected faults where the emulator does.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{json, Value};

use super::{block_on, Client, Emulator, Options, MAX_REQUEST_BYTES, SCOPE_ALL};

const IX: &str = "11111111-2222-4333-8444-555555555555";
const TOKEN: &str = "static-token";

/// One request on an open connection; returns (status, headers lower-cased, body).
fn raw(
    conn: &mut std::net::TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    conn.write_all(req.as_bytes()).unwrap();
    conn.write_all(body).unwrap();
    // Read the head, then exactly Content-Length bytes of body.
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(conn.read(&mut byte).unwrap(), 1, "connection closed mid-response");
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| l.split_once(':').unwrap())
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").map(|(_, v)| v.parse().unwrap()).unwrap();
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).unwrap();
    (status, headers, body)
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn auth() -> (&'static str, &'static str) {
    ("Authorization", "Bearer static-token")
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn entry(subject: &str, content: Value) -> Value {
    json!({"subject": subject, "visible_to": ["public"], "content": content})
}

fn list(entries: Vec<Value>) -> Vec<u8> {
    json!({"ingest_type": "GMetaList", "ingest_data": {"gmeta": entries}}).to_string().into_bytes()
}

fn v(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

/// Poll a task until it leaves PENDING/PROGRESS.
fn finished(conn: &mut std::net::TcpStream, task_id: &str) -> Value {
    loop {
        let (s, _, b) = raw(conn, "GET", &format!("/v1/task/{task_id}"), &[auth()], b"");
        assert_eq!(s, 200);
        let t = v(&b);
        if t["state"] != "PENDING" && t["state"] != "PROGRESS" {
            return t;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn keep_alive_ingest_task_and_subject_on_one_connection() {
    let emu = Emulator::start(Options::new(IX, TOKEN)).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let (s, h, b) = raw(
        &mut c,
        "POST",
        &format!("/v1/index/{IX}/ingest"),
        &[auth(), JSON],
        &list(vec![entry("/a", json!({"n": 1})), entry("/b", json!({"n": 2}))]),
    );
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    assert_eq!(header(&h, "content-type"), Some("application/json"));
    let r = v(&b);
    let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["acknowledged", "num_documents_ingested", "success", "task_id"]);
    assert_eq!(
        (r["acknowledged"].clone(), r["success"].clone(), r["num_documents_ingested"].clone()),
        (json!(true), json!(true), json!(2))
    );
    let task_id = r["task_id"].as_str().unwrap().to_string();
    assert_eq!(task_id.len(), 36);
    let t = finished(&mut c, &task_id);
    assert_eq!(t["state"], "SUCCESS");
    assert_eq!(t["state_description"], "Task succeeded");
    assert_eq!(t["index_id"], IX);
    let mut keys: Vec<&String> = t.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "additional_details",
            "completion_date",
            "creation_date",
            "index_id",
            "message",
            "state",
            "state_description",
            "task_id",
            "task_type"
        ]
    );
    assert_eq!(t["task_type"], "INGEST");
    assert_eq!(t["creation_date"].as_str().unwrap().len(), "2018-12-13T18:08:42.746911".len());
    // Same connection, still open.
    let (s, _, b) = raw(&mut c, "GET", &format!("/v1/index/{IX}/subject?subject=%2Fa"), &[auth()], b"");
    assert_eq!(s, 200);
    assert_eq!(
        v(&b),
        json!({"@datatype": "GMetaResult", "@version": "2019-08-27", "subject": "/a", "entries": [{"content": {"n": 1}, "entry_id": null, "matched_principal_sets": []}]})
    );
    let (s, _, b) = raw(&mut c, "GET", &format!("/v1/index/{IX}/subject?subject=%2Fnope"), &[auth()], b"");
    assert_eq!(s, 404);
    assert_eq!(v(&b)["status"], 404);
    // A single GMetaEntry document too.
    let one = json!({"@datatype": "GIngest", "ingest_type": "GMetaEntry", "ingest_data": entry("/c", json!({"n": 3}))})
        .to_string();
    let (s, _, b) = raw(&mut c, "POST", &format!("/v1/index/{IX}/ingest"), &[auth(), JSON], one.as_bytes());
    assert_eq!(s, 200);
    assert_eq!(finished(&mut c, v(&b)["task_id"].as_str().unwrap())["state"], "SUCCESS");
    let (s, _, b) = raw(&mut c, "GET", &format!("/v1/task_list/{IX}"), &[auth()], b"");
    assert_eq!(s, 200);
    let tasks = v(&b)["tasks"].as_array().unwrap().clone();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[1]["task_id"], task_id.as_str(), "newest first");
}

#[test]
fn authentication_static_tokens_and_client_credentials() {
    let mut o = Options::new(IX, TOKEN);
    o.client = Some(("cid-1".into(), "csecret".into()));
    let emu = Emulator::start(o).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let path = format!("/v1/task_list/{IX}");
    let (s, h, b) = raw(&mut c, "GET", &path, &[], b"");
    assert_eq!(s, 401);
    assert_eq!(header(&h, "www-authenticate"), Some("Bearer"));
    let e = v(&b);
    assert_eq!((e["code"].as_str(), e["status"].as_u64()), (Some("AuthenticationFailed"), Some(401)));
    assert!(e.get("message").is_some() && e.get("error_data").is_some(), "{e}");
    assert_eq!(raw(&mut c, "GET", &path, &[("Authorization", "Bearer wrong")], b"").0, 401);
    assert_eq!(raw(&mut c, "GET", &path, &[auth()], b"").0, 200);
    // Client credentials: Basic auth, form body.
    let form = ("Content-Type", "application/x-www-form-urlencoded");
    let body = b"grant_type=client_credentials&scope=urn%3Aglobus%3Aauth%3Ascope%3Asearch.api.globus.org%3Aall";
    let bad = format!("Basic {}", b64("cid-1:wrong"));
    let (s, _, b) = raw(&mut c, "POST", "/v2/oauth2/token", &[("Authorization", &bad), form], body);
    assert_eq!((s, v(&b)), (401, json!({"error": "invalid_client"})));
    let good = format!("Basic {}", b64("cid-1:csecret"));
    let (s, _, b) = raw(&mut c, "POST", "/v2/oauth2/token", &[("Authorization", &good), form], b"grant_type=password");
    assert_eq!((s, v(&b)), (400, json!({"error": "unsupported_grant_type"})));
    let (s, _, b) = raw(&mut c, "POST", "/v2/oauth2/token", &[("Authorization", &good), form], body);
    assert_eq!(s, 200);
    let t = v(&b);
    assert_eq!(t["token_type"], "Bearer");
    assert_eq!(t["scope"], SCOPE_ALL);
    assert_eq!(t["resource_server"], "search.api.globus.org");
    assert_eq!(t["expires_in"], 172_800);
    let bearer = format!("Bearer {}", t["access_token"].as_str().unwrap());
    assert_eq!(raw(&mut c, "GET", &path, &[("Authorization", &bearer)], b"").0, 200);
    // Expired tokens are refused; static ones are not affected.
    let (s, _, _) = raw(&mut c, "POST", "/_emulator/expire_tokens", &[], b"");
    assert_eq!(s, 200);
    assert_eq!(raw(&mut c, "GET", &path, &[("Authorization", &bearer)], b"").0, 401);
    assert_eq!(raw(&mut c, "GET", &path, &[auth()], b"").0, 200);
    let (_, _, b) = raw(&mut c, "GET", "/_emulator/stats", &[], b"");
    assert_eq!(v(&b)["tokens_issued"], 1);
    assert_eq!(v(&b)["unauthorized"], 3);
}

fn b64(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for ch in b.chunks(3) {
        let n =
            (u32::from(ch[0]) << 16) | (u32::from(*ch.get(1).unwrap_or(&0)) << 8) | u32::from(*ch.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= ch.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn ingest_enforces_the_documented_limits() {
    let emu = Emulator::start(Options::new(IX, TOKEN)).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let ingest = format!("/v1/index/{IX}/ingest");
    let mut post = |body: &[u8], headers: &[(&str, &str)]| {
        let (s, _, b) = raw(&mut c, "POST", &ingest, headers, body);
        (s, v(&b))
    };
    let ok = list(vec![entry("/x", json!({}))]);
    assert_eq!(post(&ok, &[auth()]).0, 415, "Content-Type is required");
    assert_eq!(post(&ok, &[auth(), ("Content-Type", "text/plain")]).0, 415);
    assert_eq!(post(&ok, &[auth(), ("Content-Type", "application/json; charset=utf-8")]).0, 200);
    let subject_500 = format!("/{}", "é".repeat(249)) + "x";
    assert_eq!(subject_500.len(), 500);
    assert_eq!(post(&list(vec![entry(&subject_500, json!({}))]), &[auth(), JSON]).0, 200);
    let (s, e) = post(&list(vec![entry(&format!("{subject_500}y"), json!({}))]), &[auth(), JSON]);
    assert_eq!(s, 400);
    assert_eq!(e["status"], 400);
    assert!(e["message"].as_str().unwrap().contains("501 bytes"), "{e}");
    let vis: Vec<String> = (0..101).map(|i| format!("urn:globus:groups:id:{i}")).collect();
    let (s, e) = post(&list(vec![json!({"subject": "/v", "visible_to": vis, "content": {}})]), &[auth(), JSON]);
    assert!(s == 400 && e["message"].as_str().unwrap().contains("101 principals"), "{e}");
    let (s, _) = post(&list(vec![json!({"subject": "/v", "visible_to": vis[..100], "content": {}})]), &[auth(), JSON]);
    assert_eq!(s, 200);
    // One entry a subject (icicle serve's rule, stricter than Search's 10): an entry id is refused.
    let (s, e) = post(
        &list(vec![json!({"subject": "/m", "id": "e0", "visible_to": ["public"], "content": {}})]),
        &[auth(), JSON],
    );
    assert!(s == 400 && e["message"].as_str().unwrap().contains("`id` must be null"), "{e}");
    let (s, _) = post(
        &list(vec![json!({"subject": "/m", "id": null, "visible_to": ["public"], "content": {}})]),
        &[auth(), JSON],
    );
    assert_eq!(s, 200);
    let (s, e) = post(&list(vec![json!({"subject": "/c", "visible_to": ["public"], "content": [1]})]), &[auth(), JSON]);
    assert!(s == 400 && e["message"].as_str().unwrap().contains("`content` must be an object"), "{e}");
    assert_eq!(post(b"{not json", &[auth(), JSON]).0, 400);
    assert_eq!(post(br#"{"ingest_type":"GMetaThing","ingest_data":{}}"#, &[auth(), JSON]).0, 400);
    // Over 10 MB: 413 (the length is refused before the body is read; send it on a new connection).
    let big = list(vec![entry("/big", json!({"p": "x".repeat(MAX_REQUEST_BYTES)}))]);
    let mut c2 = std::net::TcpStream::connect(emu.addr()).unwrap();
    let head = format!(
        "POST {ingest} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\r\n",
        big.len()
    );
    c2.write_all(head.as_bytes()).unwrap();
    let mut resp = Vec::new();
    let _ = c2.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    // Unknown index.
    let mut c3 = std::net::TcpStream::connect(emu.addr()).unwrap();
    let (s, _, b) = raw(&mut c3, "POST", "/v1/index/99999999-2222-4333-8444-555555555555/ingest", &[auth(), JSON], &ok);
    assert_eq!(s, 404);
    assert_eq!(v(&b)["code"], "NotFound.NoSuchIndex");
}

#[test]
fn a_trial_index_counts_replaced_and_queued_entries_once() {
    // Tasks wait (one is taken and never finishes), so every ingest is still queued.
    let mut o = Options::new(IX, TOKEN);
    o.task_delay = Duration::from_secs(3600);
    let emu = Emulator::start(o).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let (s, _, b) =
        raw(&mut c, "POST", "/v1/index", &[auth(), JSON], br#"{"display_name":"trial","description":"quota"}"#);
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let trial = v(&b)["id"].as_str().unwrap().to_string();
    let ingest = format!("/v1/index/{trial}/ingest");
    // 400 KB of content in 20 KB fields (a field may hold 32,000 bytes).
    let content: serde_json::Map<String, Value> =
        (0..20).map(|i| (format!("f{i}"), json!("x".repeat(20_000)))).collect();
    let body = |subject: &str| list(vec![entry(subject, Value::Object(content.clone()))]);
    // 400 KB, then the same entry again (replaces it: still 400 KB), then another (800 KB).
    for subject in ["/a", "/a", "/b"] {
        let (s, _, b) = raw(&mut c, "POST", &ingest, &[auth(), JSON], &body(subject));
        assert_eq!(s, 200, "{subject}: {}", String::from_utf8_lossy(&b));
    }
    // A third 400 KB entry would make 1.2 MB, over the trial's 1 MB, queued or not.
    let (s, _, b) = raw(&mut c, "POST", &ingest, &[auth(), JSON], &body("/c"));
    assert_eq!(s, 413, "{}", String::from_utf8_lossy(&b));
    assert_eq!(v(&b)["code"], "RequestTooLarge.IndexSizeLimit");
    // Replacing one that is there still fits.
    assert_eq!(raw(&mut c, "POST", &ingest, &[auth(), JSON], &body("/b")).0, 200);
}

#[test]
fn tasks_run_in_order_received() {
    // A worker that never finishes: the first task is taken (PROGRESS), the rest wait.
    let mut o = Options::new(IX, TOKEN);
    o.task_delay = Duration::from_secs(3600);
    let emu = Emulator::start(o).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let t1 = v(&raw(
        &mut c,
        "POST",
        &format!("/v1/index/{IX}/ingest"),
        &[auth(), JSON],
        &list(vec![entry("/a", json!({}))]),
    )
    .2)["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let t2 = v(&raw(
        &mut c,
        "POST",
        &format!("/v1/index/{IX}/batch_delete_by_subject"),
        &[auth(), JSON],
        br#"{"subjects":["/a"]}"#,
    )
    .2)["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let s1 = v(&raw(&mut c, "GET", &format!("/v1/task/{t1}"), &[auth()], b"").2);
    let s2 = v(&raw(&mut c, "GET", &format!("/v1/task/{t2}"), &[auth()], b"").2);
    assert!(s1["state"] == "PENDING" || s1["state"] == "PROGRESS", "{s1}");
    assert_eq!(s2["state"], "PENDING");
    assert!(s2["completion_date"].is_null());
    drop(emu);

    // Ingest, delete, ingest again, delete by subject: applied in that order.
    let emu = Emulator::start(Options::new(IX, TOKEN)).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let mut ids = Vec::new();
    let mut go = |method: &str, path: String, body: Vec<u8>| {
        let (s, _, b) = raw(&mut c, method, &path, &[auth(), JSON], &body);
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
        ids.push(v(&b)["task_id"].as_str().unwrap().to_string());
    };
    go(
        "POST",
        format!("/v1/index/{IX}/ingest"),
        list(vec![entry("/a", json!({"v": 1})), entry("/b", json!({"v": 1})), entry("/c", json!({"v": 1}))]),
    );
    go("POST", format!("/v1/index/{IX}/batch_delete_by_subject"), br#"{"subjects":["/a","/b"]}"#.to_vec());
    go("POST", format!("/v1/index/{IX}/ingest"), list(vec![entry("/a", json!({"v": 2}))]));
    go("DELETE", format!("/v1/index/{IX}/subject?subject=%2Fc"), Vec::new());
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    for id in &ids {
        assert_eq!(finished(&mut c, id)["state"], "SUCCESS");
    }
    let got = block_on(Client::new(&emu.url(), TOKEN).scroll_all(IX)).unwrap();
    assert_eq!(got, BTreeMap::from([("/a".to_string(), json!({"v": 2}))]));
}

#[test]
fn rate_limit_transient_failures_and_failed_tasks() {
    let mut o = Options::new(IX, TOKEN);
    o.rate_limit = Some(0.001); // one request per 1000 s, after a burst of 2
    o.burst = Some(2.0);
    let emu = Emulator::start(o).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let path = format!("/v1/task_list/{IX}");
    assert_eq!(raw(&mut c, "GET", &path, &[auth()], b"").0, 200);
    assert_eq!(raw(&mut c, "GET", &path, &[auth()], b"").0, 200);
    let (s, h, b) = raw(&mut c, "GET", &path, &[auth()], b"");
    assert_eq!(s, 429);
    assert_eq!(header(&h, "retry-after"), Some("1000"));
    assert_eq!(v(&b)["status"], 429);
    drop(emu);

    let mut o = Options::new(IX, TOKEN);
    o.fail_every = Some(2);
    o.fail_task_every = Some(3);
    let emu = Emulator::start(o).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let ingest = format!("/v1/index/{IX}/ingest");
    let mut statuses = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (s, _, b) = raw(&mut c, "POST", &ingest, &[auth(), JSON], &list(vec![entry(&format!("/f{i}"), json!({}))]));
        statuses.push(s);
        if s == 200 {
            tasks.push((format!("/f{i}"), v(&b)["task_id"].as_str().unwrap().to_string()));
        } else {
            assert_eq!(v(&b)["code"], "ServiceUnavailable");
        }
    }
    assert_eq!(statuses, [200, 503, 200, 503, 200, 503]);
    let states: Vec<String> =
        tasks.iter().map(|(_, t)| finished(&mut c, t)["state"].as_str().unwrap().to_string()).collect();
    assert_eq!(states, ["SUCCESS", "SUCCESS", "FAILED"]);
    let failed = finished(&mut c, &tasks[2].1);
    assert!(failed["message"].as_str().unwrap().contains("injected"), "{failed}");
    let got = block_on(Client::new(&emu.url(), TOKEN).scroll_all(IX)).unwrap();
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), ["/f0", "/f2"]);
    let stats = block_on(Client::new(&emu.url(), TOKEN).stats()).unwrap();
    assert_eq!(
        (stats["injected_failures"].as_u64(), stats["tasks_failed"].as_u64(), stats["writes"].as_u64()),
        (Some(3), Some(1), Some(6))
    );
}

#[test]
fn scroll_pages_with_markers_and_respects_visibility() {
    let emu = Emulator::start(Options::new(IX, TOKEN)).unwrap();
    let mut c = std::net::TcpStream::connect(emu.addr()).unwrap();
    let mut entries: Vec<Value> = (0..25).map(|i| entry(&format!("/s{i:02}"), json!({"i": i}))).collect();
    entries
        .push(json!({"subject": "/private", "visible_to": ["urn:globus:groups:id:abc"], "content": {"secret": true}}));
    let (_, _, b) = raw(&mut c, "POST", &format!("/v1/index/{IX}/ingest"), &[auth(), JSON], &list(entries));
    finished(&mut c, v(&b)["task_id"].as_str().unwrap());
    let scroll = format!("/v1/index/{IX}/scroll");
    let mut marker = Value::Null;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let (s, _, b) = raw(
            &mut c,
            "POST",
            &scroll,
            &[auth(), JSON],
            json!({"q": "*", "limit": 10, "marker": marker}).to_string().as_bytes(),
        );
        assert_eq!(s, 200);
        let p = v(&b);
        pages += 1;
        assert_eq!(p["@datatype"], "GSearchResult");
        assert_eq!(p["total"], 25, "the private subject is not visible");
        for g in p["gmeta"].as_array().unwrap() {
            seen.push(g["subject"].as_str().unwrap().to_string());
        }
        assert_eq!(p["count"].as_u64().unwrap() as usize, p["gmeta"].as_array().unwrap().len());
        if p["has_next_page"] != true {
            assert!(p["marker"].is_null());
            break;
        }
        marker = p["marker"].clone();
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, (0..25).map(|i| format!("/s{i:02}")).collect::<Vec<_>>());
    // The owner may bypass visible_to; the client does.
    let all = block_on(Client::new(&emu.url(), TOKEN).scroll_all(IX)).unwrap();
    assert_eq!(all.len(), 26);
    assert_eq!(all["/private"], json!({"secret": true}));
    // A scroll takes q, advanced, filters, limit, marker and bypass_visible_to only.
    assert_eq!(raw(&mut c, "POST", &scroll, &[auth(), JSON], br#"{"q":"*","sort":[]}"#).0, 400);
    assert_eq!(raw(&mut c, "POST", &scroll, &[auth(), JSON], br#"{"q":"*","limit":10001}"#).0, 400);
}
