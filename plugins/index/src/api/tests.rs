//! The service's entry points for a front end: writes checked, then applied; tasks moved
//! through their states; stored entries paged; deletes by query and by entry; sort lists.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::auth::{Caller, PeerPolicy, Tokens};
use super::request::Search;
use super::tasks::TaskState;
use super::write::WriteKind;
use super::{answer, ServeConfig, Service};
use crate::search::Visibility;

fn service(dir: &std::path::Path) -> Service {
    Service::open(ServeConfig {
        dir: dir.join("ix"),
        index_id: Some("ix-1".into()),
        tokens: Tokens::default(),
        peers: PeerPolicy::default(),
        memory_bytes: 15 << 20,
    })
    .unwrap()
}

fn file(path: &str, kind: &str, size: u64, mtime: i64) -> Value {
    json!({"subject": path, "visible_to": ["public"],
           "content": {"path": path, "type": kind, "size": size, "raw": {"mtime": mtime}}})
}

fn ingest(s: &Service, entries: Vec<Value>) {
    let doc = json!({"ingest_type": "GMetaList", "ingest_data": {"gmeta": entries}});
    let w = s.check_write(WriteKind::Ingest, &doc, &HashMap::new()).unwrap();
    assert_eq!(w.subjects().len(), w.len());
    s.apply(w).unwrap();
}

fn subjects(s: &Service) -> Vec<String> {
    s.stored_entries(None, 100).unwrap().iter().map(|e| e["subject"].as_str().unwrap().to_string()).collect()
}

#[test]
fn writes_are_checked_then_applied_and_tasks_move_through_their_states() {
    let tmp = tempfile::tempdir().unwrap();
    let s = service(tmp.path());
    ingest(&s, vec![file("/a", "file", 5, 30), file("/b", "link", 50, 20), file("/c", "file", 500, 10)]);
    assert_eq!(subjects(&s), ["/a", "/b", "/c"]);
    assert_eq!(s.stored_entries(Some("/a"), 1).unwrap()[0]["visible_to"], json!(["public"]));
    // Checked, not applied: nothing changes until `apply`.
    let by_query =
        json!({"q": "*", "filters": [{"type": "range", "field_name": "size", "values": [{"from": 100, "to": "*"}]}]});
    let w = s.check_write(WriteKind::DeleteByQuery, &by_query, &HashMap::new()).unwrap();
    assert_eq!(subjects(&s).len(), 3);
    s.apply(w).unwrap();
    assert_eq!(subjects(&s), ["/a", "/b"]);
    assert!(s.check_write(WriteKind::DeleteByQuery, &json!({"q": "*", "sort": []}), &HashMap::new()).is_err());
    // An entry id the index cannot hold deletes nothing; the null entry deletes the subject.
    let params = |id: Option<&str>| {
        let mut p = HashMap::from([("subject".to_string(), "/a".to_string())]);
        p.extend(id.map(|i| ("entry_id".to_string(), i.to_string())));
        p
    };
    s.apply(s.check_write(WriteKind::DeleteEntry, &Value::Null, &params(Some("x"))).unwrap()).unwrap();
    assert_eq!(subjects(&s), ["/a", "/b"]);
    s.apply(s.check_write(WriteKind::DeleteEntry, &Value::Null, &params(None)).unwrap()).unwrap();
    assert_eq!(subjects(&s), ["/b"]);
    // Refusals say why, with the numbers.
    let long = file(&format!("/{}", "x".repeat(500)), "file", 1, 1);
    let doc = json!({"ingest_type": "GMetaEntry", "ingest_data": long});
    let e = s.check_write(WriteKind::Ingest, &doc, &HashMap::new()).err().unwrap();
    assert!(e.message.contains("501 bytes"), "{e}");
    // Tasks: opened pending, moved on, finished with a message.
    let id = s.open_task("INGEST", TaskState::Pending).unwrap();
    assert!(s.has_task(&id) && !s.has_task("nope"));
    let doc = |s: &Service| s.tasks.lock().unwrap().get(&id).cloned().unwrap();
    assert_eq!((doc(&s)["state"].clone(), doc(&s)["completion_date"].clone()), (json!("PENDING"), Value::Null));
    s.update_task(&id, TaskState::Failed("injected".into())).unwrap();
    let d = doc(&s);
    assert_eq!((d["state"].as_str(), d["message"].as_str()), (Some("FAILED"), Some("injected")));
    assert!(d["completion_date"].is_string());
}

#[test]
fn sorts_take_up_to_three_keys_then_the_subject() {
    let tmp = tempfile::tempdir().unwrap();
    let s = service(tmp.path());
    ingest(
        &s,
        vec![
            file("/a", "file", 5, 30),
            file("/b", "link", 5, 20),
            file("/c", "file", 7, 10),
            file("/d", "file", 5, 40),
        ],
    );
    let order = |sort: Value| {
        let q = Search::from_json(&s.fields, &json!({"q": "*", "sort": sort})).unwrap();
        let r = answer::search(&s.searcher(), &s.fields, &q, &Visibility::All).unwrap();
        r["gmeta"].as_array().unwrap().iter().map(|g| g["subject"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(
        order(json!([{"field_name": "type"}, {"field_name": "mtime", "order": "desc"}])),
        ["/d", "/a", "/c", "/b"]
    );
    assert_eq!(
        order(json!([{"field_name": "size"}, {"field_name": "type", "order": "desc"}])),
        ["/b", "/a", "/d", "/c"]
    );
    assert_eq!(
        order(json!([{"field_name": "size", "order": "desc"}, {"field_name": "type"}, {"field_name": "mtime"}])),
        ["/c", "/a", "/d", "/b"]
    );
    // A caller allowed `bypass_visible_to` sees every record with it; others are refused.
    let mut c = Caller::anonymous();
    assert!(s.visibility(&c, true).is_err());
    c.bypass = true;
    assert_eq!(s.visibility(&c, true).unwrap(), Visibility::All);
}

#[test]
fn storage_attributes_filter_sort_and_facet_through_the_api() {
    let tmp = tempfile::tempdir().unwrap();
    let s = service(tmp.path());
    let on = |path: &str, pool: &str, osts: Value| {
        let mut e = file(path, "file", 5, 30);
        e["content"]["storage"] = json!({"fid": format!("[0x200000401:0x{}:0x0]", path.len()), "pool": pool,
                                         "stripe_count": osts.as_array().unwrap().len(), "osts": osts});
        e
    };
    ingest(&s, vec![on("/a", "flash", json!([17, 3])), on("/bb", "disk", json!([3])), file("/c", "file", 5, 30)]);
    let ask = |body: Value| {
        let q = Search::from_json(&s.fields, &body).unwrap();
        answer::search(&s.searcher(), &s.fields, &q, &Visibility::All).unwrap()
    };
    let found = |r: &Value| {
        r["gmeta"].as_array().unwrap().iter().map(|g| g["subject"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    let ost = |n: u64| {
        ask(json!({"q": "*", "filters": [{"type": "match_any", "field_name": "storage.osts", "values": [n]}]}))
    };
    assert_eq!(found(&ost(17)), ["/a"]);
    assert_eq!(found(&ost(3)), ["/a", "/bb"]);
    assert!(found(&ost(4)).is_empty());
    let r = ask(
        json!({"q": "*", "filters": [{"type": "range", "field_name": "storage.stripe_count", "values": [{"from": 2, "to": "*"}]}]}),
    );
    assert_eq!(found(&r), ["/a"]);
    let r = ask(
        json!({"q": "*", "filters": [{"type": "match_any", "field_name": "storage.fid", "values": ["[0x200000401:0x3:0x0]"]}]}),
    );
    assert_eq!(found(&r), ["/bb"]);
    // Pools are facets: how many files each holds.
    let r = ask(json!({"q": "*", "facets": [{"name": "pools", "field_name": "storage.pool"}]}));
    let buckets = &r["facet_results"][0]["buckets"];
    assert_eq!(buckets.as_array().map(Vec::len), Some(2), "{r}");
    assert!(buckets.as_array().unwrap().iter().all(|b| b["count"] == 1), "{r}");
}
