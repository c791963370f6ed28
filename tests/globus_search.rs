//! Querying what `icicle snapshot` published, through the Globus Search emulator's search API
//! (`icicle serve`'s answers behind the emulator's cloud front): range filters on `size` and on
//! `mtime` (ISO dates), `match_any`, terms facets and histograms with exact counts, sort orders
//! (two keys among them), paging that concatenates to the whole result and the 10,000-result
//! window, query strings (words of the path and type), `visible_to` (client identity, public,
//! anonymous, `bypass_visible_to`), `delete_by_query` and entry deletes; plus each of the
//! cloud's ingest limits (field length, nesting depth, entry size, fields per index) refused
//! with nothing applied. Expected values come from the file sink's copy of the same records.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::OnceLock;

use common::*;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use icicle_testkit::globus::{
    block_on, Client, ClientError, Emulator, Options, MAX_ENTRY_BYTES, MAX_FIELDS_PER_INDEX, MAX_FIELD_BYTES,
    MAX_REQUEST_BYTES,
};
use serde_json::{json, Value};

/// Read-only queries.
const RO: &str = "3b0c6f0e-1d2a-4c5b-8e7f-9a0b1c2d3e4f";
/// `delete_by_query` and entry deletes.
const RW: &str = "3b0c6f0e-1d2a-4c5b-8e7f-9a0b1c2d3e50";
/// Visibility (public entries are added to it).
const VIS: &str = "3b0c6f0e-1d2a-4c5b-8e7f-9a0b1c2d3e51";
const TOKEN: &str = "tok-search-Vb8wQ2";
const SECRET: &str = "csec-search-Lp4Zr7";

/// One published record: (visible_to, content).
type Record = (Vec<String>, Value);

struct Fixture {
    emu: Emulator,
    /// subject → record, from the file sink.
    records: BTreeMap<String, Record>,
    /// The client-credentials caller's identity URN (the most common owner's).
    viewer: String,
    viewer_client_id: String,
}

/// A generated file system snapshotted once into RO, RW and VIS (and a file sink).
fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        // The files are read back before this returns; the emulator keeps its indexes elsewhere.
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().to_path_buf();
        let fs = GenFs::generate(&GenSpec::new(600, 23));
        let data = tmp.join("tsv");
        gen::write(&fs, Format::Tsv, &data, 250, false).unwrap();
        // The owner with most files is the client-credentials caller.
        let mut per_uid: BTreeMap<u32, usize> = BTreeMap::new();
        for f in &fs.files {
            *per_uid.entry(f.attrs.uid).or_default() += 1;
        }
        let uid = per_uid.iter().max_by_key(|(u, n)| (**n, std::cmp::Reverse(**u))).map(|(u, _)| *u).unwrap();
        let viewer_client_id = gen::fake_uuid(uid as u64);
        let mut o = Options::new(RO, TOKEN);
        o.indexes = vec![RO.into(), RW.into(), VIS.into()];
        // A static is never dropped: its indexes go where the next run clears them.
        let ix = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("globus_search-indexes");
        let _ = std::fs::remove_dir_all(&ix);
        o.dir = Some(ix);
        o.client = Some((viewer_client_id.clone(), SECRET.into()));
        let emu = Emulator::start(o).unwrap();
        let out = tmp.join("out");
        let sink = |name: &str, index: &str| {
            format!(
                "[sinks.{name}]\ntype = \"globus\"\nindex_id = \"{index}\"\nbase_url = \"{}\"\ntoken_env = \"ICICLE_TEST_GLOBUS_TOKEN\"\nretry_initial_ms = 20\nretry_max_ms = 200\ntask_poll_ms = 10\n",
                emu.url()
            )
        };
        let cfg = config(
            &tmp,
            "s.toml",
            &format!(
                "[snapshot]\nversion = \"v1\"\nmax_batch_bytes = 100000\nrejects_file = \"{t}/rejects.jsonl\"\n[records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{d}/principals.tsv\"\n\
                 [sources.s]\ntype = \"tsv\"\npaths = [\"{d}/*.csv\"]\npreset = \"icicle9\"\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n{}{}{}",
                sink("ro", RO),
                sink("rw", RW),
                sink("vis", VIS),
                d = data.display(),
                o = out.display(),
                t = tmp.display(),
            ),
        );
        let (code, stdout, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], &[("ICICLE_TEST_GLOBUS_TOKEN", TOKEN)]);
        assert_eq!(code, 0, "{err}");
        let summary: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["records"].as_u64(), Some(fs.files.len() as u64), "{summary}");
        let mut records = BTreeMap::new();
        for (_, doc) in documents(&out, "ingest-") {
            for e in doc["ingest_data"]["gmeta"].as_array().unwrap() {
                let vis = e["visible_to"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()).collect();
                records.insert(e["subject"].as_str().unwrap().to_string(), (vis, e["content"].clone()));
            }
        }
        assert_eq!(records.len(), fs.files.len());
        let viewer = format!("urn:globus:auth:identity:{viewer_client_id}");
        Fixture { emu, records, viewer, viewer_client_id }
    })
}

fn client() -> Client {
    Client::new(&fixture().emu.url(), TOKEN)
}

/// POST a search; panics on an error answer.
fn search(index: &str, body: Value) -> Value {
    block_on(client().search(index, &body)).unwrap_or_else(|e| panic!("{body}: {e}"))
}

/// The (status, GError) of a refused request.
fn refused<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (u16, Value) {
    match r {
        Err(ClientError::Status { status, body }) => (status, serde_json::from_str(&body).unwrap()),
        other => panic!("expected an error status, got {other:?}"),
    }
}

fn subjects(res: &Value) -> Vec<String> {
    res["gmeta"].as_array().unwrap().iter().map(|g| g["subject"].as_str().unwrap().to_string()).collect()
}

/// Every record's subject (in subject order) for which `keep` holds.
fn expected(keep: impl Fn(&Value) -> bool) -> Vec<String> {
    fixture().records.iter().filter(|(_, (_, c))| keep(c)).map(|(s, _)| s.clone()).collect()
}

/// Everything visible to an owner (static token + `bypass_visible_to`), with `extra` fields.
fn all(extra: Value) -> Value {
    let mut body = json!({"q": "*", "limit": 10_000, "bypass_visible_to": true});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn int(c: &Value, path: &str) -> i64 {
    path.split('.').fold(c, |v, k| &v[k]).as_i64().unwrap_or_else(|| panic!("{path} in {c}"))
}

#[test]
fn range_filters_on_size_and_mtime_select_exactly_the_matching_subjects() {
    let f = fixture();
    let sizes: Vec<i64> =
        f.records.values().map(|(_, c)| int(c, "size")).collect::<BTreeSet<_>>().into_iter().collect();
    assert!(sizes.len() > 20, "{sizes:?}");
    // Bounds that are stored values: both ends are inclusive.
    let (lo, hi) = (sizes[sizes.len() / 4], sizes[sizes.len() * 3 / 4]);
    let want = expected(|c| (lo..=hi).contains(&int(c, "size")));
    let got = search(
        RO,
        all(json!({"filters": [{"type": "range", "field_name": "size", "values": [{"from": lo, "to": hi}]}]})),
    );
    assert_eq!(subjects(&got), want, "size in [{lo}, {hi}]");
    assert_eq!(got["total"].as_u64(), Some(want.len() as u64));
    assert!(want.len() > 10 && want.len() < f.records.len() / 2 + 20);
    // Two open-ended ranges: either one holds.
    let (small, big) = (sizes[3], sizes[sizes.len() - 4]);
    let want = expected(|c| int(c, "size") <= small || int(c, "size") >= big);
    let got = search(
        RO,
        all(
            json!({"filters": [{"type": "range", "field_name": "size", "values": [{"from": "*", "to": small}, {"from": big, "to": "*"}]}]}),
        ),
    );
    assert_eq!(subjects(&got), want);

    // mtime is an ISO date string; the ground truth is raw.mtime (epoch seconds).
    let mtimes: Vec<i64> =
        f.records.values().map(|(_, c)| int(c, "raw.mtime")).collect::<BTreeSet<_>>().into_iter().collect();
    let (t0, t1) = (mtimes[mtimes.len() / 5], mtimes[mtimes.len() * 3 / 5]);
    let day0 = t0.div_euclid(86_400) * 86_400;
    let iso1 = icicle_core::time::iso8601(t1); // e.g. 2023-07-22T02:51:47+00:00
    let want = expected(|c| (day0..=t1).contains(&int(c, "raw.mtime")));
    assert!(!want.is_empty() && want.len() < f.records.len());
    // The date formats Search detects: yyyy-MM-dd, yyyy-MM-dd HH:mm:ss, yyyy/MM/dd HH:mm:ss Z and
    // yyyy-MM-ddTHH:mm:ssZ (Z or an offset).
    let date0 = icicle_core::time::iso8601(day0)[..10].to_string();
    let slashed = format!("{} +0000", iso1[..19].replace('-', "/").replace('T', " "));
    for to in [iso1[..19].replace('T', " "), format!("{}Z", &iso1[..19]), slashed.clone(), iso1.clone()] {
        let got = search(
            RO,
            all(json!({"filters": [{"type": "range", "field_name": "mtime", "values": [{"from": date0, "to": to}]}]})),
        );
        assert_eq!(subjects(&got), want, "mtime in [{date0}, {to}]");
    }
    // Dates are instants: the same time written another way matches.
    let at_t1 = expected(|c| int(c, "raw.mtime") == t1);
    let east = icicle_core::time::iso8601(t1 + 5 * 3600)[..19].to_string() + "+05:00";
    for v in [format!("{}.000Z", &iso1[..19]), slashed, east] {
        let got = search(RO, all(json!({"filters": [{"type": "match_any", "field_name": "mtime", "values": [v]}]})));
        assert_eq!(subjects(&got), at_t1, "mtime = {v}");
    }
    // A nested field: raw.mtime, numerically.
    let got = search(
        RO,
        all(json!({"filters": [{"type": "range", "field_name": "raw.mtime", "values": [{"from": day0, "to": t1}]}]})),
    );
    assert_eq!(subjects(&got), want);

    // match_any (numbers given as strings match numbers) combined with a range: both hold.
    let uids: Vec<i64> =
        f.records.values().map(|(_, c)| int(c, "uid")).collect::<BTreeSet<_>>().into_iter().take(2).collect();
    let want = expected(|c| uids.contains(&int(c, "uid")) && int(c, "size") >= lo);
    let got = search(
        RO,
        all(json!({"filters": [
            {"type": "match_any", "field_name": "uid", "values": uids.iter().map(|u| u.to_string()).collect::<Vec<_>>()},
            {"type": "range", "field_name": "size", "values": [{"from": lo, "to": "*"}]},
        ]})),
    );
    assert_eq!(subjects(&got), want);
    assert!(!want.is_empty());
    // match_all with two different values of a single-valued field matches nothing.
    let got = search(RO, all(json!({"filters": [{"type": "match_all", "field_name": "uid", "values": uids}]})));
    assert_eq!(got["total"], 0);
}

/// Expected terms buckets: (value, count) by count desc, then value.
fn terms(values: impl Iterator<Item = Value>) -> Vec<(Value, u64)> {
    let mut m: BTreeMap<String, (Value, u64)> = BTreeMap::new();
    for v in values {
        m.entry(v.to_string()).or_insert_with(|| (v.clone(), 0)).1 += 1;
    }
    let mut l: Vec<(Value, u64)> = m.into_values().collect();
    l.sort_by(|(a, x), (b, y)| {
        y.cmp(x).then_with(|| match (a.as_i64(), b.as_i64()) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => a.as_str().cmp(&b.as_str()),
        })
    });
    l
}

fn buckets(res: &Value, i: usize) -> Vec<(Value, u64)> {
    res["facet_results"][i]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["value"].clone(), b["count"].as_u64().unwrap()))
        .collect()
}

#[test]
fn facets_count_exactly() {
    let f = fixture();
    let res = search(
        RO,
        all(json!({"limit": 0, "facets": [
            {"name": "owners", "field_name": "uid", "size": 1000},
            {"field_name": "type"},
            {"name": "top2", "field_name": "uid", "type": "terms", "size": 2},
        ]})),
    );
    assert_eq!((res["count"].as_u64(), res["total"].as_u64()), (Some(0), Some(f.records.len() as u64)));
    let by_uid = terms(f.records.values().map(|(_, c)| c["uid"].clone()));
    assert!(by_uid.len() > 2, "{by_uid:?}");
    assert_eq!(res["facet_results"][0]["name"], "owners");
    assert_eq!(buckets(&res, 0), by_uid);
    assert_eq!(res["facet_results"][1]["name"], "type");
    assert_eq!(buckets(&res, 1), terms(f.records.values().map(|(_, c)| c["type"].clone())));
    assert_eq!(buckets(&res, 2), by_uid[..2].to_vec());

    // Facets count what the filters keep; post_facet_filters narrow the results, not the facets.
    let mut sizes: Vec<i64> = f.records.values().map(|(_, c)| int(c, "size")).collect();
    sizes.sort();
    let big = sizes[sizes.len() / 2];
    let keep = |c: &Value| int(c, "size") >= big;
    let some_uid = by_uid[0].0.clone();
    let res = search(
        RO,
        all(json!({
            "filters": [{"type": "range", "field_name": "size", "values": [{"from": big, "to": "*"}]}],
            "post_facet_filters": [{"type": "match_any", "field_name": "uid", "values": [some_uid]}],
            "facets": [{"field_name": "uid", "size": 1000}],
        })),
    );
    assert_eq!(buckets(&res, 0), terms(f.records.values().filter(|(_, c)| keep(c)).map(|(_, c)| c["uid"].clone())));
    let want = expected(|c| keep(c) && c["uid"] == some_uid);
    assert_eq!(subjects(&res), want);
    assert!(!want.is_empty() && want.len() < expected(keep).len());

    // date_histogram by year over mtime: every year from the first to the last, empty ones too.
    let years: Vec<i64> = f.records.values().map(|(_, c)| c["mtime"].as_str().unwrap()[..4].parse().unwrap()).collect();
    let (y0, y1) = (*years.iter().min().unwrap(), *years.iter().max().unwrap());
    assert!(y1 > y0, "the generator spreads mtimes over years");
    let want: Vec<(Value, u64)> = (y0..=y1)
        .map(|y| (json!(format!("{y:04}-01-01T00:00:00.000Z")), years.iter().filter(|x| **x == y).count() as u64))
        .collect();
    let res = search(
        RO,
        all(
            json!({"limit": 0, "facets": [{"name": "years", "field_name": "mtime", "type": "date_histogram", "date_interval": "year"}]}),
        ),
    );
    assert_eq!(buckets(&res, 0), want);
    // numeric_histogram over size: four equal buckets of [0, high), low ≤ x < high, where
    // high is a stored size near the first quartile (that file is left out).
    let q1 = sizes[sizes.len() / 4];
    let high = *sizes.iter().filter(|s| **s > 0 && **s % 4 == 0).min_by_key(|s| (**s - q1).abs()).unwrap();
    let w = high / 4;
    let want: Vec<(Value, u64)> = (0..4)
        .map(|i| (json!(i * w), sizes.iter().filter(|s| (i * w..(i + 1) * w).contains(*s)).count() as u64))
        .collect();
    let res = search(
        RO,
        all(
            json!({"limit": 0, "facets": [{"field_name": "size", "type": "numeric_histogram", "size": 4, "histogram_range": {"low": 0, "high": high}}]}),
        ),
    );
    assert_eq!(buckets(&res, 0), want);
    assert!(want.iter().filter(|(_, n)| *n > 0).count() >= 2, "{want:?}");
}

/// Subjects ordered by `key` (then subject).
fn ordered<K: Ord>(key: impl Fn(&Value) -> K) -> Vec<String> {
    let mut v: Vec<(K, &String)> = fixture().records.iter().map(|(s, (_, c))| (key(c), s)).collect();
    v.sort();
    v.into_iter().map(|(_, s)| s.clone()).collect()
}

#[test]
fn sort_orders_are_exact() {
    let got = search(RO, all(json!({"sort": [{"field_name": "size", "order": "desc"}]})));
    assert_eq!(subjects(&got), ordered(|c| std::cmp::Reverse(int(c, "size"))));
    let got = search(RO, all(json!({"sort": [{"field_name": "size"}]})));
    assert_eq!(subjects(&got), ordered(|c| int(c, "size")));
    // Two keys: type ascending, then mtime (a date) newest first.
    let got = search(
        RO,
        all(json!({"sort": [{"field_name": "type", "order": "asc"}, {"field_name": "mtime", "order": "desc"}]})),
    );
    assert_eq!(
        subjects(&got),
        ordered(|c| (c["type"].as_str().unwrap().to_string(), std::cmp::Reverse(int(c, "raw.mtime"))))
    );
    // Without sort: subject order.
    let got = search(RO, all(json!({})));
    assert_eq!(subjects(&got), fixture().records.keys().cloned().collect::<Vec<_>>());
}

#[test]
fn paging_concatenates_to_the_whole_result_within_the_10000_window() {
    let f = fixture();
    let filters = json!([{"type": "match_any", "field_name": "type", "values": ["file"]}]);
    let sort = json!([{"field_name": "size", "order": "desc"}]);
    let whole = subjects(&search(RO, all(json!({"filters": filters, "sort": sort}))));
    assert!(whole.len() > 50);
    let mut pages = Vec::new();
    let mut offset = 0;
    loop {
        let p = search(RO, all(json!({"filters": filters, "sort": sort, "offset": offset, "limit": 7})));
        assert_eq!((p["offset"].as_u64(), p["total"].as_u64()), (Some(offset as u64), Some(whole.len() as u64)));
        let s = subjects(&p);
        assert_eq!(p["count"].as_u64(), Some(s.len() as u64));
        assert_eq!(p["has_next_page"], offset + s.len() < whole.len());
        offset += s.len();
        pages.extend(s);
        if p["has_next_page"] != true {
            break;
        }
    }
    assert_eq!(pages, whole);
    // GET: q=* in pages of 100; the static token with bypass_visible_to sees everything.
    let c = client();
    let mut got = Vec::new();
    for offset in (0..f.records.len()).step_by(100) {
        let p = block_on(c.search_get(
            RO,
            &[("q", "*"), ("offset", &offset.to_string()), ("limit", "100"), ("bypass_visible_to", "true")],
        ))
        .unwrap();
        got.extend(subjects(&p));
    }
    assert_eq!(got, f.records.keys().cloned().collect::<Vec<_>>());
    // The window: offset + limit ≤ 10,000.
    let ok = search(RO, all(json!({"offset": 9_990, "limit": 10})));
    assert_eq!((ok["count"].as_u64(), ok["has_next_page"].as_bool()), (Some(0), Some(false)));
    for (offset, limit) in [(9_995, 10), (0, 10_001), (10_001, 0)] {
        let (status, e) = refused(block_on(c.search(RO, &all(json!({"offset": offset, "limit": limit})))));
        assert_eq!(
            (status, e["code"].as_str(), e["status"].as_u64()),
            (400, Some("BadRequest.ValidationError"), Some(400)),
            "{offset}+{limit}: {e}"
        );
        assert!(e["message"].as_str().unwrap().contains("10000"), "{e}");
    }
    let (status, e) = refused(block_on(c.search_get(RO, &[("q", "*"), ("offset", "10000"), ("limit", "1")])));
    assert_eq!((status, e["code"].as_str()), (400, Some("BadRequest.ValidationError")));
    let (status, _) = refused(block_on(c.search_get(RO, &[("offset", "0")])));
    assert_eq!(status, 400, "GET needs q");
}

/// The words a query string matches in a record (docs/search.md, `q`): the lower-cased
/// letter/digit runs of its path and its type, as the index keeps them (runs of 40 bytes or
/// more are not kept).
fn record_words(c: &Value, out: &mut HashSet<String>) {
    for s in [&c["path"], &c["type"]].into_iter().filter_map(Value::as_str) {
        out.extend(
            s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty() && w.len() < 40).map(str::to_lowercase),
        );
    }
}

#[test]
fn query_strings_match_words_of_the_path_and_type() {
    let f = fixture();
    let words_of = |c: &Value| {
        let mut w = HashSet::new();
        record_words(c, &mut w);
        w
    };
    // A file's name: every one of its words must occur (case does not matter).
    let (_, (_, c)) = f.records.iter().nth(f.records.len() / 2).unwrap();
    let name = c["name"].as_str().unwrap().to_uppercase();
    let name_words: Vec<String> =
        name.split(|ch: char| !ch.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
    let want = expected(|c| {
        let w = words_of(c);
        name_words.iter().all(|x| w.contains(x))
    });
    assert!(!want.is_empty() && want.len() < f.records.len(), "{name}: {want:?}");
    let q: String = name.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(subjects(&search(RO, all(json!({"q": q})))), want, "q = {q}");
    // A prefix: the first directory's first three characters and `*`.
    let dir = c["path"].as_str().unwrap().split('/').nth(2).unwrap().to_string();
    let prefix: String = dir.chars().take(3).collect::<String>().to_lowercase();
    assert!(prefix.chars().all(char::is_alphanumeric), "{prefix}");
    let want = expected(|c| words_of(c).iter().any(|w| w.starts_with(&prefix)));
    assert_eq!(subjects(&search(RO, all(json!({"q": format!("{prefix}*")})))), want);
    // A word nothing contains.
    assert_eq!(search(RO, all(json!({"q": "zzqqxxnotthere"})))["total"], 0);
    // Refused: a query over 256 characters, a malformed advanced query, unknown filter types.
    let c = client();
    let (status, e) = refused(block_on(c.search(RO, &json!({"q": "a".repeat(257)}))));
    assert_eq!((status, e["code"].as_str()), (400, Some("BadRequest.ValidationError")), "{e}");
    assert!(search(RO, json!({"q": "a".repeat(256)}))["total"].is_u64());
    assert_eq!(refused(block_on(c.search(RO, &json!({"q": "size:[1 TO", "advanced": true})))).0, 400);
    assert_eq!(refused(block_on(c.search(RO, &json!({"q": "(size:1", "advanced": true})))).0, 400);
    assert_eq!(
        refused(block_on(
            c.search(RO, &json!({"q": "*", "filters": [{"type": "geo_shape", "field_name": "x", "values": [1]}]}))
        ))
        .0,
        400
    );
    assert_eq!(refused(block_on(c.search(RO, &json!({"limit": 5})))).0, 400, "q or filters is required");
}

#[test]
fn results_show_entries_visible_to_the_caller() {
    let f = fixture();
    let admin = client();
    // Public entries next to the snapshot's owner/group-visible records.
    let public: Vec<Value> =
        (0..3).map(|i| json!({"subject": format!("/public/p{i}"), "visible_to": ["public"], "content": {"name": format!("p{i}"), "size": i}})).collect();
    let task =
        block_on(admin.ingest(VIS, &json!({"ingest_type": "GMetaList", "ingest_data": {"gmeta": public}}))).unwrap();
    assert_eq!(block_on(admin.wait_task(&task)).unwrap()["state"], "SUCCESS");
    let public: Vec<String> = (0..3).map(|i| format!("/public/p{i}")).collect();

    let mut want: Vec<String> =
        f.records.iter().filter(|(_, (v, _))| v.contains(&f.viewer)).map(|(s, _)| s.clone()).collect();
    assert!(!want.is_empty() && want.len() < f.records.len() / 2, "{}", want.len());
    let viewer_uids: BTreeSet<i64> =
        f.records.values().filter(|(v, _)| v.contains(&f.viewer)).map(|(_, c)| int(c, "uid")).collect();
    assert_eq!(viewer_uids.len(), 1, "the viewer sees what it owns");
    want.extend(public.iter().cloned());
    want.sort();
    let body = json!({"q": "*", "limit": 10_000, "facets": [{"field_name": "uid", "size": 100}]});
    // The client-credentials caller: its identity's entries and the public ones; facets too.
    let viewer = block_on(Client::with_client_credentials(&f.emu.url(), &f.viewer_client_id, SECRET)).unwrap();
    let res = block_on(viewer.search(VIS, &body)).unwrap();
    assert_eq!(subjects(&res), want);
    assert_eq!(buckets(&res, 0), vec![(json!(viewer_uids.first().unwrap()), (want.len() - public.len()) as u64)]);
    // Anonymous callers and static tokens (no identity) see the public entries only.
    let anonymous = Client::anonymous(&f.emu.url());
    assert_eq!(subjects(&block_on(anonymous.search(VIS, &body)).unwrap()), public);
    assert_eq!(subjects(&block_on(anonymous.search_get(VIS, &[("q", "*")])).unwrap()), public);
    assert_eq!(subjects(&block_on(admin.search(VIS, &body)).unwrap()), public);
    // bypass_visible_to: everything for an authenticated caller, 403 for an anonymous one.
    let mut bypass = body.clone();
    bypass["bypass_visible_to"] = json!(true);
    assert_eq!(
        block_on(admin.search(VIS, &bypass)).unwrap()["total"].as_u64(),
        Some((f.records.len() + public.len()) as u64)
    );
    let (status, e) = refused(block_on(anonymous.search(VIS, &bypass)));
    assert_eq!((status, e["code"].as_str()), (403, Some("Forbidden.Generic")));
    // Client::subject asks for bypass_visible_to, which an anonymous caller may not.
    let private = f.records.keys().next().unwrap();
    assert_eq!(refused(block_on(anonymous.subject(VIS, private))).0, 403);
    assert!(block_on(admin.subject(VIS, private)).unwrap().is_some());
}

#[test]
fn delete_by_query_and_entry_deletes_apply_to_matching_entries() {
    let f = fixture();
    let c = client();
    let cut = {
        let mut s: Vec<i64> = f.records.values().map(|(_, c)| int(c, "size")).collect();
        s.sort();
        s[s.len() / 3]
    };
    // Only q, advanced and filters: anything else is refused and nothing is deleted.
    let (status, _) = refused(block_on(c.delete_by_query(RW, &json!({"q": "*", "sort": [{"field_name": "size"}]}))));
    assert_eq!(status, 400);
    let before = block_on(c.stats()).unwrap()["tasks_created"].as_u64().unwrap();
    let task = block_on(c.delete_by_query(
        RW,
        &json!({"q": "*", "filters": [{"type": "range", "field_name": "size", "values": [{"from": "*", "to": cut}]}]}),
    ))
    .unwrap();
    assert_eq!(block_on(c.stats()).unwrap()["tasks_created"].as_u64(), Some(before + 1));
    assert_eq!(block_on(c.wait_task(&task)).unwrap()["state"], "SUCCESS");
    let mut want = expected(|c| int(c, "size") > cut);
    assert!(!want.is_empty() && want.len() < f.records.len());
    assert_eq!(subjects(&search(RW, all(json!({})))), want);
    // Deleting one entry (the null entry_id) removes its subject; an unknown entry_id changes nothing.
    let gone = want.remove(0);
    let t1 = block_on(c.delete_entry(RW, &gone, None)).unwrap();
    let t2 = block_on(c.delete_entry(RW, &want[0], Some("no-such-entry"))).unwrap();
    for t in [t1, t2] {
        assert_eq!(block_on(c.wait_task(&t)).unwrap()["state"], "SUCCESS");
    }
    assert_eq!(subjects(&search(RW, all(json!({})))), want);
    assert!(block_on(c.subject(RW, &gone)).unwrap().is_none());
}

/// A fresh emulator with one entry of three fields (a, b, b.c) in index RO.
fn small_index() -> (Emulator, Client) {
    let emu = Emulator::start(Options::new(RO, TOKEN)).unwrap();
    let c = Client::new(&emu.url(), TOKEN);
    let t = block_on(c.ingest(RO, &list(vec![entry("/base", json!({"a": 1, "b": {"c": "x"}}))]))).unwrap();
    assert_eq!(block_on(c.wait_task(&t)).unwrap()["state"], "SUCCESS");
    (emu, c)
}

fn entry(subject: &str, content: Value) -> Value {
    json!({"subject": subject, "visible_to": ["public"], "content": content})
}

fn list(entries: Vec<Value>) -> Value {
    json!({"ingest_type": "GMetaList", "ingest_data": {"gmeta": entries}})
}

/// The request is refused with 400 BadRequest.ValidationError naming `what`, and the index and
/// the task count are as they were.
fn refused_unapplied(c: &Client, doc: &Value, what: &str) {
    refused_text_unapplied(c, &doc.to_string(), what)
}

fn refused_text_unapplied(c: &Client, text: &str, what: &str) {
    let dump = block_on(c.dump(RO)).unwrap();
    let tasks = block_on(c.stats()).unwrap()["tasks_created"].clone();
    let (status, e) = refused(block_on(c.ingest_text(RO, text)));
    assert_eq!(
        (status, e["code"].as_str(), e["status"].as_u64()),
        (400, Some("BadRequest.ValidationError"), Some(400)),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains(what), "{what}: {e}");
    assert_eq!(block_on(c.dump(RO)).unwrap(), dump);
    assert_eq!(block_on(c.stats()).unwrap()["tasks_created"], tasks);
}

fn accepted(c: &Client, doc: &Value) -> Value {
    let t = block_on(c.ingest(RO, doc)).unwrap();
    block_on(c.wait_task(&t)).unwrap()
}

fn nested(depth: usize) -> Value {
    (1..depth).fold(json!({format!("k{depth}"): 1}), |v, d| json!({format!("k{d}"): v}))
}

#[test]
fn each_limit_is_refused_with_nothing_applied() {
    let (_emu, c) = small_index();
    let ok = entry("/ok", json!({"a": 2}));
    // Field length: a 32,000-byte string is fine, one byte more is not.
    refused_unapplied(
        &c,
        &list(vec![ok.clone(), entry("/long", json!({"a": 3, "text": "x".repeat(MAX_FIELD_BYTES + 1)}))]),
        "32000-byte limit",
    );
    refused_unapplied(
        &c,
        &list(vec![entry("/long", json!({"text": ["short", "é".repeat(MAX_FIELD_BYTES / 2 + 1)]}))]),
        "32000-byte limit",
    );
    assert_eq!(
        accepted(&c, &list(vec![entry("/long", json!({"text": "é".repeat(MAX_FIELD_BYTES / 2)}))]))["state"],
        "SUCCESS"
    );
    // Nesting: 20 levels are fine, 21 are not.
    refused_unapplied(&c, &list(vec![ok.clone(), entry("/deep", nested(21))]), "limit of 20");
    assert_eq!(accepted(&c, &list(vec![entry("/deep", nested(20))]))["state"], "SUCCESS");
    // Entry size: numbers written short (1e9) take more room as stored JSON (1000000000.0), so
    // a request under 10 MB can hold an entry over 10 MB.
    let big = entry("/big", json!({"n": vec![1e9; 1_000_000]}));
    let doc = list(vec![ok.clone(), big.clone()]);
    let text = doc.to_string().replace("1000000000.0", "1e9");
    assert!(
        text.len() <= MAX_REQUEST_BYTES && serde_json::to_vec(&big).unwrap().len() > MAX_ENTRY_BYTES,
        "{}",
        text.len()
    );
    refused_text_unapplied(&c, &text, "10000000-byte limit");
    let text = list(vec![entry("/big", json!({"n": vec![1e9; 700_000]}))]).to_string().replace("1000000000.0", "1e9");
    assert_eq!(block_on(c.wait_task(&block_on(c.ingest_text(RO, &text)).unwrap())).unwrap()["state"], "SUCCESS");

    // Fields per index: one request with 1001 distinct fields is refused outright.
    let wide = |from: usize, n: usize| Value::Object((from..from + n).map(|i| (format!("f{i}"), json!(i))).collect());
    refused_unapplied(&c, &list(vec![ok.clone(), entry("/wide", wide(0, MAX_FIELDS_PER_INDEX + 1))]), "limit of 1000");
    // The index holds a, b, b.c, text, n and the 20 key paths of the nested entry.
    let held = 3 + 1 + 1 + 20;
    // A request that fits alone but takes the index past 1000 fields: accepted, its task FAILS
    // and nothing of it is applied (not even its update of /base).
    let dump = block_on(c.dump(RO)).unwrap();
    let over = list(vec![entry("/base", json!({"a": 99})), entry("/wide", wide(0, MAX_FIELDS_PER_INDEX - held + 1))]);
    let t = accepted(&c, &over);
    assert_eq!(t["state"], "FAILED", "{t}");
    assert!(t["message"].as_str().unwrap().contains("Limit of total fields [1000]"), "{t}");
    assert_eq!(block_on(c.dump(RO)).unwrap(), dump);
    // Exactly 1000: fine. Deleting entries does not give fields back.
    let t = accepted(&c, &list(vec![entry("/wide", wide(0, MAX_FIELDS_PER_INDEX - held))]));
    assert_eq!(t["state"], "SUCCESS", "{t}");
    let t = block_on(c.delete_entry(RO, "/wide", None)).unwrap();
    assert_eq!(block_on(c.wait_task(&t)).unwrap()["state"], "SUCCESS");
    assert_eq!(accepted(&c, &list(vec![entry("/new", json!({"brand_new": 1}))]))["state"], "FAILED");
    assert_eq!(accepted(&c, &list(vec![entry("/old", json!({"f7": 1, "a": 5}))]))["state"], "SUCCESS");
}
