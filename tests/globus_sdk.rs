//! The file sink's documents as a stock tool sends them: globus-sdk (PyPI, without orjson, so
//! it re-serialises each document with Python's `json.dumps`) ingests every document into the
//! Search emulator (`icicle serve`'s Search API behind the cloud's front). With `snapshot.document_size = "sdk"` (the default) each stays within
//! 10,000,000 bytes once re-serialised and is accepted; with `"compact"` (the control) a full
//! document grows past it and the emulator answers 413.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use icicle_testkit::globus::{Emulator, Options};

const INDEX: &str = "3f1a0c1e-0000-4000-8000-000000000001";
const TOKEN: &str = "sdk-test-token";

/// Ingest every `ingest-*.json` under `out` with globus-sdk; prints one JSON line per document
/// (`file`, re-serialised `bytes`, `status`, `task_id`), then waits for the tasks.
const INGEST: &str = r#"
import glob, json, sys, time
sys.modules["orjson"] = None  # the stock path: requests' json.dumps
import globus_sdk
base, index, token, out = sys.argv[1:5]
sc = globus_sdk.SearchClient(base_url=base, authorizer=globus_sdk.AccessTokenAuthorizer(token))
tasks = []
for f in sorted(glob.glob(out + "/ingest-*.json")):
    doc = json.load(open(f))
    size = len(json.dumps(doc).encode())
    try:
        r = sc.ingest(index, doc)
        tasks.append(r["task_id"])
        print(json.dumps({"file": f, "bytes": size, "status": 200, "task_id": r["task_id"]}))
    except globus_sdk.SearchAPIError as e:
        print(json.dumps({"file": f, "bytes": size, "status": e.http_status}))
for t in tasks:
    for _ in range(600):
        state = sc.get_task(t)["state"]
        if state in ("SUCCESS", "FAILED"):
            break
        time.sleep(0.05)
    print(json.dumps({"task": t, "state": state}))
"#;

/// Run a globus-sdk script against a fresh emulator (base URL, index and token as its
/// arguments); what it printed, as JSON.
fn sdk_script(script: &str) -> serde_json::Value {
    assert!(
        python_has_globus_sdk(),
        "python3 cannot import globus_sdk: the test command installs it (pip install globus-sdk)"
    );
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let run = Command::new(common::python()).args(["-c", script, &emu.url(), INDEX, TOKEN]).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    serde_json::from_slice(&run.stdout).unwrap()
}

fn python_has_globus_sdk() -> bool {
    Command::new(common::python()).args(["-c", "import globus_sdk"]).status().map(|s| s.success()).unwrap_or(false)
}

/// Snapshot `data` to a file sink with `document_size`; returns the sink's directory.
fn file_sink_documents(tmp: &Path, data: &Path, document_size: &str) -> std::path::PathBuf {
    let out = tmp.join(format!("out-{document_size}"));
    let cfg = config(
        tmp,
        &format!("{document_size}.toml"),
        &format!(
            "[snapshot]\ndocument_size = \"{document_size}\"\n[records]\nvisible_to = [\"public\"]\n\
             [sources.s]\ntype = \"tsv\"\npreset = \"icicle9\"\npaths = [\"{d}/*.csv\"]\n[sinks.f]\ntype = \"file\"\ndir = \"{o}\"\n",
            d = data.display(),
            o = out.display()
        ),
    );
    let (code, summary, err) = snapshot(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(summary["rejects"], 0, "{summary}");
    out
}

/// What globus-sdk reported per document, and the tasks' final states.
fn ingest_with_sdk(emu: &Emulator, out: &Path) -> (Vec<serde_json::Value>, Vec<String>) {
    let run = Command::new(common::python())
        .args(["-c", INGEST, &emu.url(), INDEX, TOKEN, out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&run.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let docs = lines.iter().filter(|l| l.get("file").is_some()).cloned().collect();
    let states = lines.iter().filter_map(|l| l["state"].as_str().map(String::from)).collect();
    (docs, states)
}

#[test]
fn stock_globus_sdk_ingests_every_file_sink_document() {
    if !python_has_globus_sdk() {
        panic!("python3 cannot import globus_sdk: the test command installs it (pip install globus-sdk)");
    }
    let tmp = test_dir();
    let seed = test_seed();
    // About three full documents, with the generator's non-ASCII and quoted names.
    let fs = GenFs::generate(&GenSpec::new(60_000, seed));
    let data = tmp.path().join("data");
    gen::write(&fs, Format::Tsv, &data, 20_000, false).unwrap();
    let records = fs.records().len();

    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let (docs, states) = ingest_with_sdk(&emu, &file_sink_documents(tmp.path(), &data, "sdk"));
    assert!(docs.len() >= 2, "{docs:?}");
    for d in &docs {
        let bytes = d["bytes"].as_u64().unwrap();
        assert!(bytes <= 10_000_000, "re-serialised to {bytes} bytes: {d}");
        assert_eq!(d["status"], 200, "{d}");
    }
    // Close to the bound, not merely small: the estimate counts every `,` and `:` (those in
    // strings too) and 2 bytes of slack an entry, so a full document is ~97 % of it.
    assert!(docs[0]["bytes"].as_u64().unwrap() > 9_500_000, "{docs:?}");
    assert!(states.iter().all(|s| s == "SUCCESS"), "{states:?}");
    let c = icicle_testkit::globus::Client::new(&emu.url(), TOKEN);
    let total = icicle_testkit::globus::block_on(c.search(INDEX, &serde_json::json!({"q": "*", "limit": 1}))).unwrap()
        ["total"]
        .as_u64();
    assert_eq!(total, Some(records as u64));

    // The control: compact sizing fills documents that stock tools cannot send.
    let emu = Emulator::start(Options::new(INDEX, TOKEN)).unwrap();
    let (docs, _) = ingest_with_sdk(&emu, &file_sink_documents(tmp.path(), &data, "compact"));
    assert!(docs.iter().any(|d| d["bytes"].as_u64().unwrap() > 10_000_000 && d["status"] == 413), "{docs:?}");
}

/// The emulator's fidelity through globus-sdk's own SearchClient: every call the project
/// relies on, answered in the shapes the SDK and Search's reference give. The records have
/// icicle's shape (`path`, `type`, `size`): the emulator's searches are `icicle serve`'s, which
/// index those fields.
const FIDELITY: &str = r#"
import json, sys, time
sys.modules["orjson"] = None
import globus_sdk
base, index, token = sys.argv[1:4]
sc = globus_sdk.SearchClient(base_url=base, authorizer=globus_sdk.AccessTokenAuthorizer(token))
out = {}
def wait(t):
    for _ in range(600):
        d = sc.get_task(t)
        if d["state"] in ("SUCCESS", "FAILED"):
            return d
        time.sleep(0.02)
docs = [{"subject": f"/p/{n}", "visible_to": ["public"] if n != "gamma" else ["urn:globus:auth:identity:x"],
         "content": {"path": f"/p/{n}", "name": n, "type": t, "size": s}} for n, s, t in
        [("alpha", 10, "file"), ("beta", 20, "file"), ("gamma", 30, "link"), ("alphabet", 40, "file")]]
t = sc.ingest(index, {"ingest_type": "GMetaList", "ingest_data": {"gmeta": docs}})["task_id"]
d = wait(t)
out["ingest_task"] = {"state": d["state"], "task_type": d["task_type"]}
out["task_list"] = len(sc.get_task_list(index)["tasks"])
r = sc.post_search(index, {"q": "*", "filters": [{"type": "range", "field_name": "size", "values": [{"from": 15, "to": "*"}]}]})
out["filtered"] = sorted(g["subject"] for g in r["gmeta"])
out["get_search"] = sorted(g["subject"] for g in sc.search(index, "alpha*")["gmeta"])
seen, marker = [], None
while True:
    kw = {"marker": marker} if marker else {}
    page = sc.scroll(index, {"q": "*", "limit": 1, "filters": [{"type": "match_any", "field_name": "type", "values": ["file"]}]}, **kw)
    seen += [g["subject"] for g in page["gmeta"]]
    if not page["has_next_page"]:
        break
    marker = page["marker"]
out["scrolled"] = seen
out["scroll_q"] = [g["subject"] for g in sc.scroll(index, {"q": "beta"})["gmeta"]]
out["bypass_subject"] = sc.get_subject(index, "/p/gamma", query_params={"bypass_visible_to": True})["subject"]
e = sc.get_entry(index, "/p/alpha")
out["entry"] = e["entries"][0]["content"]["name"]
legacy = sc.post_search(index, {"q": "beta", "result_format_version": "2017-09-01"})
out["legacy"] = legacy["gmeta"][0]["content"][0]["name"]
adv = sc.post_search(index, {"q": "size:>=20 AND NOT type:link", "advanced": True, "bypass_visible_to": True})
out["advanced_post"] = sorted(g["subject"] for g in adv["gmeta"])
out["advanced_get"] = sorted(g["subject"] for g in sc.search(index, "name:alpha OR name:beta", advanced=True)["gmeta"])
grouped = sc.post_search(index, {"q": "(type:file AND size:[10 TO 15]) OR name:alphabet", "advanced": True})
out["advanced_grouped"] = sorted(g["subject"] for g in grouped["gmeta"])
strict = sc.post_search(index, {"q": "size:>20", "advanced": True})
out["advanced_strict"] = sorted(g["subject"] for g in strict["gmeta"])
negated = sc.post_search(index, {"q": "type:file -(name:alpha OR name:beta)", "advanced": True})
out["advanced_negated_group"] = sorted(g["subject"] for g in negated["gmeta"])
t = sc.batch_delete_by_subject(index, ["/p/beta"])["task_id"]
out["delete_task"] = wait(t)["task_type"]
t = sc.delete_by_query(index, {"q": "alphabet"})["task_id"]
out["delete_by_query_task"] = wait(t)["task_type"]
out["left"] = sorted(g["subject"] for g in sc.post_search(index, {"q": "*", "bypass_visible_to": True})["gmeta"])
print(json.dumps(out))
"#;

#[test]
fn the_search_emulator_answers_globus_sdk_as_search_does() {
    let out = sdk_script(FIDELITY);
    let want = serde_json::json!({
        "ingest_task": {"state": "SUCCESS", "task_type": "INGEST"},
        "task_list": 1,
        "filtered": ["/p/alphabet", "/p/beta"],
        "get_search": ["/p/alpha", "/p/alphabet"],
        "scrolled": ["/p/alpha", "/p/alphabet", "/p/beta"],
        "scroll_q": ["/p/beta"],
        "bypass_subject": "/p/gamma",
        "entry": "alpha",
        "legacy": "beta",
        "advanced_post": ["/p/alphabet", "/p/beta"],
        "advanced_get": ["/p/alpha", "/p/beta"],
        "advanced_grouped": ["/p/alpha", "/p/alphabet"],
        "advanced_strict": ["/p/alphabet"],
        "advanced_negated_group": ["/p/alphabet"],
        "delete_task": "DELETE_BY_SUBJECT",
        "delete_by_query_task": "DELETE_BY_QUERY",
        "left": ["/p/alpha", "/p/gamma"],
    });
    assert_eq!(out, want);
}

/// Index administration and a trial index's quota, through globus-sdk.
const INDEXES: &str = r#"
import json, sys
sys.modules["orjson"] = None
import globus_sdk
base, configured, token = sys.argv[1:4]
sc = globus_sdk.SearchClient(base_url=base, authorizer=globus_sdk.AccessTokenAuthorizer(token))
out = {}
new = sc.create_index("icicle trial", "a trial index")
ix = new["id"]
out["created"] = {k: new[k] for k in ("is_trial", "max_size_in_mb", "status", "num_entries")}
out["listed"] = sorted(i["id"] == ix for i in sc.index_list()["index_list"])
out["configured_trial"] = sc.get_index(configured)["is_trial"]
role = sc.create_role(ix, {"role_name": "writer", "principal": "urn:globus:auth:identity:46bd0f56-e24f-11e5-a510-131bef46955c"})
out["roles"] = sorted(r["role_name"] for r in sc.get_role_list(ix)["role_list"])
out["role_deleted"] = sc.delete_role(ix, role["id"])["success"]
def doc(n, pad):
    return {"ingest_type": "GMetaList", "ingest_data": {"gmeta": [
        {"subject": f"/q/{i}", "visible_to": ["public"], "content": {"pad": "x" * pad}} for i in range(n)]}}
try:
    sc.ingest(ix, doc(60, 20000))
    out["quota"] = 200
except globus_sdk.SearchAPIError as e:
    out["quota"] = e.http_status
out["small"] = sc.ingest(ix, doc(10, 100))["acknowledged"]
out["deleted"] = sc.delete_index(ix)["acknowledged"]
out["status"] = sc.get_index(ix)["status"]
try:
    sc.ingest(ix, doc(1, 10))
    out["write_when_pending"] = 200
except globus_sdk.SearchAPIError as e:
    out["write_when_pending"] = e.http_status
out["reopened"] = sc.reopen_index(ix)["acknowledged"]
print(json.dumps(out))
"#;

#[test]
fn index_endpoints_and_the_trial_quota_answer_globus_sdk() {
    let out = sdk_script(INDEXES);
    let want = serde_json::json!({
        "created": {"is_trial": true, "max_size_in_mb": 1, "status": "open", "num_entries": 0},
        "listed": [false, true],
        "configured_trial": false,
        "roles": ["owner", "writer"],
        "role_deleted": true,
        "quota": 413,
        "small": true,
        "deleted": true,
        "status": "delete_pending",
        "write_when_pending": 409,
        "reopened": true,
    });
    assert_eq!(out, want);
}
