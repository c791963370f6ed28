//! The `s3` source against a real S3 server on 127.0.0.1 (moto): the same records as the `tsv`
//! source reading the same files locally, byte ranges that lose and duplicate nothing, bad
//! rows, versioned runs, and failures that name the source, the object and S3's error.
//!
//! The server is `ICICLE_TEST_S3` (an `http://host:port` URL), else the one
//! `bash scripts/services.sh start` runs (`.tools/run/s3.addr`).

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use common::*;
use icicle_plugins_s3::ObjectStore;
use icicle_testkit::gen::{self, Format, GenFs, GenSpec};
use serde_json::Value;

const FILES: u64 = 3_000;
const CREDS: [(&str, &str); 2] = [("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")];

/// The S3 server's URL.
fn s3() -> String {
    if let Ok(u) = std::env::var("ICICLE_TEST_S3") {
        return u;
    }
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/run/s3.addr");
    std::fs::read_to_string(&f)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| panic!("no S3 server: run the tests with scripts/test.sh, or `bash scripts/services.sh start` first (or set ICICLE_TEST_S3)"))
}

fn store() -> ObjectStore {
    ObjectStore::connect(&s3(), "test", "test").unwrap()
}

/// A bucket of its own for each test (the server is shared by every test and run).
fn fresh_bucket(store: &ObjectStore, name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let b = format!("{name}-{}-{nanos}", std::process::id());
    store.create_bucket(&b).unwrap();
    b
}

fn upload_dir(store: &ObjectStore, bucket: &str, dir: &Path, prefix: &str, ext: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    for f in files {
        let key = format!("{prefix}{}", f.file_name().unwrap().to_string_lossy());
        store.put(bucket, &key, std::fs::read(&f).unwrap()).unwrap();
        keys.push(key);
    }
    keys
}

/// `[sources.s]` reading `bucket`/`prefix` from the test server.
fn s3_source(bucket: &str, prefix: &str, extra: &str) -> String {
    format!("type = \"s3\"\nbucket = \"{bucket}\"\nprefix = \"{prefix}\"\nendpoint_url = \"{}\"\nforce_path_style = true\n{extra}", s3())
}

/// A snapshot config: `source` as `[sources.s]`, a file sink into `out`, rejects into
/// `tmp/<name>-rejects.jsonl`.
fn run_config(tmp: &Path, name: &str, source: &str, out: &Path, snapshot_extra: &str) -> PathBuf {
    config(
        tmp,
        &format!("{name}.toml"),
        &format!(
            "[snapshot]\nworkers = 3\nversion = \"gen-42\"\nrejects_file = \"{t}/{name}-rejects.jsonl\"\n{snapshot_extra}\n[records]\nvisible_to = [\"owner\", \"group\"]\nprincipals = \"{t}/principals.tsv\"\nfallback = [\"public\"]\n[sources.s]\n{source}\n[sinks.out]\ntype = \"file\"\ndir = \"{o}\"\n",
            t = tmp.display(),
            o = out.display()
        ),
    )
}

/// Run a snapshot with the test credentials in the environment (plus `envs`).
fn run(cfg: &Path, envs: &[(&str, &str)]) -> (i32, Value, String) {
    let mut all: Vec<(&str, &str)> = CREDS.to_vec();
    all.extend_from_slice(envs);
    let (code, out, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], &all);
    (code, serde_json::from_str(&out).unwrap_or(Value::Null), err)
}

fn rejects(tmp: &Path, name: &str) -> Vec<Value> {
    std::fs::read_to_string(tmp.join(format!("{name}-rejects.jsonl")))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Splits a source plans for objects of `sizes` with `split_bytes`.
fn splits_for(sizes: &[u64], split_bytes: u64) -> u64 {
    sizes.iter().map(|&s| if s <= split_bytes { 1 } else { s.div_ceil(split_bytes) }).sum()
}

fn generated(tmp: &Path) -> GenFs {
    let fs = GenFs::generate(&GenSpec::new(FILES, 42));
    std::fs::write(tmp.join("principals.tsv"), fs.principals()).unwrap();
    fs
}

#[test]
fn objects_give_the_records_of_the_tsv_source_and_the_ground_truth() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    let truth: Vec<String> = fs.records().into_iter().map(|r| r.path).collect();
    let store = store();
    let bucket = fresh_bucket(&store, "icicle-formats");
    for (format, dir) in [(Format::Tsv, "tsv"), (Format::Pwalk, "pwalk"), (Format::Ne2scan, "ne2scan")] {
        gen::write(&fs, format, &t.join(dir), 700, false).unwrap();
    }
    let csv = upload_dir(&store, &bucket, &t.join("tsv"), "snap/tsv/", "csv");
    assert_eq!(csv.len(), 5);
    // Not a listing: the `keys` filter leaves it out (it would be rejected row by row).
    store.put(&bucket, "snap/tsv/README.txt", b"these are icicle9 listings\n".to_vec()).unwrap();
    upload_dir(&store, &bucket, &t.join("pwalk"), "snap/pwalk/", "csv");
    upload_dir(&store, &bucket, &t.join("ne2scan"), "snap/ne2scan/", "ne2scan");
    let split_bytes = 65_536u64;
    for (name, prefix, keys, preset, local, ext) in [
        ("icicle9", "snap/tsv/", "*.csv", "icicle9", format!("{}/tsv/*.csv", t.display()), "csv"),
        ("pwalk", "snap/pwalk/", "*.csv", "pwalk", format!("{}/pwalk/pwalk.csv", t.display()), "csv"),
        (
            "ne2scan",
            "snap/ne2scan/",
            "fslist.*",
            "ne2scan",
            format!("{}/ne2scan/fslist.ne2scan", t.display()),
            "ne2scan",
        ),
    ] {
        let s3_out = t.join(format!("{name}-s3"));
        let cfg = run_config(
            t,
            &format!("{name}-s3"),
            &s3_source(&bucket, prefix, &format!("keys = \"{keys}\"\npreset = \"{preset}\"\n")),
            &s3_out,
            &format!("split_bytes = {split_bytes}"),
        );
        let (code, s, err) = run(&cfg, &[]);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(s["records"], FILES, "{name}: {s}");
        assert_eq!(s["rejects"], 0, "{name}: {s}");
        assert_eq!(s["rows"].as_u64().unwrap(), FILES + s["directories"].as_u64().unwrap(), "{name}: {s}");
        let dir = t.join(if name == "icicle9" { "tsv" } else { name });
        let sizes: Vec<u64> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect();
        assert_eq!(s["splits"].as_u64().unwrap(), splits_for(&sizes, split_bytes), "{name}: {s}");

        let local_out = t.join(format!("{name}-local"));
        let cfg = run_config(
            t,
            &format!("{name}-local"),
            &format!("type = \"tsv\"\npaths = [\"{local}\"]\npreset = \"{preset}\"\n"),
            &local_out,
            "",
        );
        let (code, s, err) = run(&cfg, &[]);
        assert_eq!((code, s["records"].as_u64()), (0, Some(FILES)), "{name}: {err}");
        let (got, want) = (ingested(&s3_out), ingested(&local_out));
        assert_eq!(got.keys().cloned().collect::<Vec<_>>(), truth, "{name}: the ground truth's paths");
        // Subjects, content and visible_to, entry for entry.
        assert!(got == want, "{name}: S3 and local records differ");
    }
}

#[test]
fn big_objects_are_read_in_byte_ranges_losing_and_duplicating_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Tsv, &t.join("tsv"), 0, false).unwrap();
    let mut big = Vec::new();
    let mut parts: Vec<PathBuf> = std::fs::read_dir(t.join("tsv"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    parts.sort();
    for p in parts {
        big.extend(std::fs::read(p).unwrap());
    }
    // The same listing with CRLF line ends.
    let mut crlf = Vec::new();
    for l in big.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        crlf.extend_from_slice(l);
        crlf.extend_from_slice(b"\r\n");
    }
    let longest = big.split(|&b| b == b'\n').map(|l| l.len()).max().unwrap() as u64;
    let store = store();
    let bucket = fresh_bucket(&store, "icicle-ranges");
    store.put(&bucket, "lf/all.csv", big.clone()).unwrap();
    store.put(&bucket, "crlf/all.csv", crlf.clone()).unwrap();

    let whole_out = t.join("whole");
    let cfg = run_config(t, "whole", &s3_source(&bucket, "lf/", "preset = \"icicle9\"\n"), &whole_out, "");
    let (code, s, err) = run(&cfg, &[]);
    assert_eq!((code, s["records"].as_u64(), s["splits"].as_u64()), (0, Some(FILES), Some(1)), "{err}");
    let whole = ingested(&whole_out);
    assert_eq!(whole.len() as u64, FILES);

    // Range sizes of the source's own, overriding [snapshot] split_bytes; 251-byte ranges are
    // shorter than the generator's >500-byte paths, so some lines span several ranges.
    assert!(longest > 2 * 251, "{longest}");
    for (name, prefix, split_bytes, size) in [
        ("lf-1021", "lf/", 1021u64, big.len()),
        ("crlf-997", "crlf/", 997, crlf.len()),
        ("lf-251", "lf/", 251, big.len()),
    ] {
        let out = t.join(name);
        let cfg = run_config(
            t,
            name,
            &s3_source(&bucket, prefix, &format!("preset = \"icicle9\"\nsplit_bytes = {split_bytes}\n")),
            &out,
            "split_bytes = 1000000000",
        );
        let (code, s, err) = run(&cfg, &[]);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(s["splits"].as_u64().unwrap(), (size as u64).div_ceil(split_bytes), "{name}: {s}");
        assert_eq!((s["records"].as_u64(), s["rejects"].as_u64()), (Some(FILES), Some(0)), "{name}: {s}");
        // `ingested` fails on a duplicate subject; equality finds a lost or altered line.
        assert!(ingested(&out) == whole, "{name}: ranged records differ from the whole object's");
    }
}

const BAD: &[&[u8]] = &[
    b"f,33188,1000,100,42,1,2,3,/ok/a\n",
    b"f,33188,1000,100,forty,1,2,3,/bad/size\n",
    b"f,3e188,1000,100,42,1,2,3,/bad/mode\n",
    b"f,33188,1000\n",
    b"f,33188,1000,100,42,1,2,3,/ok/b\n",
    b"f,33188,1000,100,42,1,2,3,\"/bad/unterminated\n",
    b"l,41471,1000,100,5,1,2,3,/ok/link\n",
    b"f,33188,1000,100,42,1,2", // cut short: no newline, the object is not whole
];

#[test]
fn malformed_rows_are_rejected_with_object_line_offset_and_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("principals.tsv"), "").unwrap();
    let store = store();
    let bucket = fresh_bucket(&store, "icicle-bad-rows");
    store.put(&bucket, "in/bad.csv", BAD.concat()).unwrap();
    let offsets: Vec<u64> = BAD
        .iter()
        .scan(0u64, |o, l| {
            let at = *o;
            *o += l.len() as u64;
            Some(at)
        })
        .collect();
    let input = format!("s3://{bucket}/in/bad.csv");

    let out = t.join("whole");
    let cfg =
        run_config(t, "whole", &s3_source(&bucket, "in/", "preset = \"icicle9\"\n"), &out, "max_reject_ratio = 1.0");
    let (code, s, err) = run(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((s["rows"].as_u64(), s["records"].as_u64(), s["rejects"].as_u64()), (Some(8), Some(3), Some(5)), "{s}");
    assert_eq!(ingested(&out).keys().cloned().collect::<Vec<_>>(), vec!["/ok/a", "/ok/b", "/ok/link"]);
    let r = rejects(t, "whole");
    assert!(r.iter().all(|r| r["input"] == input.as_str()), "{r:?}");
    let at: Vec<(u64, u64)> = r.iter().map(|r| (r["line"].as_u64().unwrap(), r["offset"].as_u64().unwrap())).collect();
    assert_eq!(at, [2usize, 3, 4, 6, 8].iter().map(|&l| (l as u64, offsets[l - 1])).collect::<Vec<_>>());
    let reasons: Vec<&str> = r.iter().map(|r| r["reason"].as_str().unwrap()).collect();
    assert!(reasons[0].contains("size"), "{}", reasons[0]);
    assert!(reasons[1].contains("mode"), "{}", reasons[1]);
    assert!(reasons[2].contains("expected 9 fields"), "{}", reasons[2]);
    assert!(reasons[3].contains("unterminated"), "{}", reasons[3]);
    assert!(reasons[4].contains("the last line has no newline"), "{}", reasons[4]);
    assert_eq!(s["unknown_scopes"][0]["scope"], "everything", "{s}");

    // In 16-byte ranges: the same rows and rejects; a range that does not begin the object
    // knows the offset but not the line number.
    let out = t.join("ranged");
    let cfg = run_config(
        t,
        "ranged",
        &s3_source(&bucket, "in/", "preset = \"icicle9\"\nsplit_bytes = 16\n"),
        &out,
        "max_reject_ratio = 1.0",
    );
    let (code, s, err) = run(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((s["rows"].as_u64(), s["records"].as_u64(), s["rejects"].as_u64()), (Some(8), Some(3), Some(5)), "{s}");
    let ranged = rejects(t, "ranged");
    let key = |r: &Value| (r["input"].clone(), r["offset"].as_u64(), r["reason"].clone());
    let mut got: Vec<_> = ranged.iter().map(key).collect();
    got.sort_by_key(|k| k.1);
    assert_eq!(got, r.iter().map(key).collect::<Vec<_>>());
    assert!(ranged.iter().all(|r| r["line"].is_null()), "{ranged:?}");

    // A threshold turns them into a failed run, as for local files.
    let strict = run_config(
        t,
        "strict",
        &s3_source(&bucket, "in/", "preset = \"icicle9\"\n"),
        &t.join("strict"),
        "max_rejects = 4",
    );
    let (code, s, _) = run(&strict, &[]);
    assert_eq!((code, &s["reject_threshold_exceeded"]), (3, &Value::Bool(true)));
}

#[test]
fn versioned_runs_emit_changes_and_deletes_and_withhold_them_when_s3_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("principals.tsv"), "").unwrap();
    let store = store();
    let bucket = fresh_bucket(&store, "icicle-versions");
    let rows = |rows: &[(&str, u64)]| {
        rows.iter().map(|(p, size)| format!("f,33188,1000,100,{size},1,2,3,{p}\n")).collect::<String>().into_bytes()
    };
    store.put(&bucket, "fs/a.csv", rows(&[("/fs/a", 1), ("/fs/b", 2)])).unwrap();
    store.put(&bucket, "fs/c.csv", rows(&[("/fs/c", 3), ("/fs/d", 4)])).unwrap();
    let state = t.join("state");
    let snapshot_extra = format!("state_dir = \"{}\"\nmax_delete_ratio = 1.0", state.display());
    let go_code = |n: u32, bucket: &str| {
        let out = t.join(format!("out{n}"));
        let cfg = run_config(
            t,
            &format!("run{n}"),
            &s3_source(bucket, "fs/", "keys = \"*.csv\"\npreset = \"icicle9\"\n"),
            &out,
            &snapshot_extra,
        );
        let (code, s, err) = run(&cfg, &[]);
        (code, s, err, out)
    };
    let go = |n: u32, bucket: &str| {
        let (code, s, err, out) = go_code(n, bucket);
        assert_eq!(code, 0, "{err}");
        (s, out)
    };
    let counts =
        |s: &Value| ["created", "updated", "unchanged", "deleted", "deletes_withheld"].map(|k| s[k].as_u64().unwrap());
    let (s, out) = go(1, &bucket);
    assert_eq!(counts(&s), [4, 0, 0, 0, 0], "{s}");
    assert_eq!(ingested(&out).len(), 4);
    let (s, out) = go(2, &bucket);
    assert_eq!(counts(&s), [0, 0, 4, 0, 0], "{s}");
    assert!(ingested(&out).is_empty() && deleted(&out).is_empty());
    // b changes, the whole of c.csv goes, e arrives.
    store.put(&bucket, "fs/a.csv", rows(&[("/fs/a", 1), ("/fs/b", 20), ("/fs/e", 5)])).unwrap();
    store.delete(&bucket, "fs/c.csv").unwrap();
    let (s, out) = go(3, &bucket);
    assert_eq!(counts(&s), [1, 1, 1, 2, 0], "{s}");
    assert_eq!(ingested(&out).keys().cloned().collect::<Vec<_>>(), vec!["/fs/b", "/fs/e"]);
    assert_eq!(deleted(&out), vec!["/fs/c", "/fs/d"]);
    // The bucket cannot be listed: the run fails, nothing is delivered, the manifest is kept.
    let (code, _, err, out) = go_code(4, &format!("{bucket}-gone"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("NoSuchBucket") && err.contains("could not be planned"), "{err}");
    assert!(ingested(&out).is_empty() && deleted(&out).is_empty());
    let (s, _) = go(5, &bucket);
    assert_eq!(counts(&s), [0, 0, 3, 0, 0], "{s}");
}

#[test]
fn a_missing_bucket_fails_naming_the_source_and_the_s3_error() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("principals.tsv"), "").unwrap();
    let bucket = format!("icicle-missing-{}", std::process::id());
    let cfg = run_config(
        t,
        "missing",
        &s3_source(&bucket, "fs/", "preset = \"icicle9\"\n"),
        &t.join("out"),
        "max_rejects = 0",
    );
    let (code, _, err) = run(&cfg, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("source `s` could not be planned (nothing was delivered): s3 source `s`: listing s3://{bucket}/fs/: NoSuchBucket (HTTP 404)")),
        "{err}"
    );
    assert!(!t.join("out").exists(), "nothing delivered");
    // An empty listing is an error too (a versioned run would otherwise delete everything).
    let store = store();
    let empty = fresh_bucket(&store, "icicle-empty");
    let cfg = run_config(
        t,
        "empty",
        &s3_source(&empty, "fs/", "keys = \"*.csv\"\npreset = \"icicle9\"\n"),
        &t.join("out2"),
        "max_rejects = 0",
    );
    let (code, _, err) = run(&cfg, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("s3 source `s`: no objects under s3://{empty}/fs/ matching `*.csv`")), "{err}");
}

/// A moto server of its own that checks signatures and permissions (after the first two
/// requests, which create an IAM user and its access key): stopped when dropped.
struct AuthServer {
    child: std::process::Child,
    url: String,
    key_id: String,
    secret: String,
}

impl AuthServer {
    fn start() -> AuthServer {
        let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/moto_server");
        let moto = if tools.exists() { tools } else { PathBuf::from("moto_server") };
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "2")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (run `bash scripts/services.sh install`)", moto.display()));
        let mut server =
            AuthServer { child, url: format!("http://127.0.0.1:{port}"), key_id: String::new(), secret: String::new() };
        // Ready once it accepts connections (no request: the first two are counted).
        let mut tries = 0;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            tries += 1;
            assert!(tries < 600, "moto_server did not start");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        iam(port, "Action=CreateUser&UserName=reader&Version=2010-05-08");
        let answer = iam(port, "Action=CreateAccessKey&UserName=reader&Version=2010-05-08");
        let field = |tag: &str| {
            answer
                .split(&format!("<{tag}>"))
                .nth(1)
                .and_then(|r| r.split(&format!("</{tag}>")).next())
                .unwrap_or_else(|| panic!("{answer}"))
                .to_string()
        };
        server.key_id = field("AccessKeyId");
        server.secret = field("SecretAccessKey");
        server
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One IAM Query API call, before the server checks signatures.
fn iam(port: u16, body: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer
}

#[test]
fn refused_credentials_fail_naming_the_source_and_the_s3_error_and_never_print_secrets() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("principals.tsv"), "").unwrap();
    let server = AuthServer::start();
    let wrong = "wrongSecretKeyThatMustNotPrint0123456789/+";
    let cases = [
        ("unknown-key", "AKIAIOSFODNN7EXAMPLE", wrong, "InvalidAccessKeyId (HTTP 403)"),
        ("wrong-secret", server.key_id.as_str(), wrong, "SignatureDoesNotMatch (HTTP 403)"),
        ("no-permission", server.key_id.as_str(), server.secret.as_str(), "AccessDenied (HTTP 403)"),
    ];
    std::fs::write(t.join("secret"), format!("{wrong}\n")).unwrap();
    for (name, key_id, secret, error) in cases {
        // The key id in the file, the secret in the environment (or, once, in a file).
        let secret_from = if name == "unknown-key" {
            format!("secret_access_key_file = \"{}/secret\"", t.display())
        } else {
            "secret_access_key_env = \"ICICLE_TEST_S3_SECRET\"".to_string()
        };
        let source = format!(
            "type = \"s3\"\nbucket = \"icicle-private\"\nendpoint_url = \"{}\"\nforce_path_style = true\naccess_key_id = \"{key_id}\"\n{secret_from}\nmax_attempts = 1\npreset = \"icicle9\"\n",
            server.url
        );
        let cfg = run_config(t, name, &source, &t.join(name), "max_rejects = 0");
        let (code, out, err) = icicle(
            &["snapshot", "--json", "-c", cfg.to_str().unwrap()],
            &[("ICICLE_TEST_S3_SECRET", secret), ("RUST_LOG", "debug")],
        );
        assert_eq!(code, 1, "{name}: {err}");
        assert!(err.contains(&format!("s3 source `s`: listing s3://icicle-private/: {error}")), "{name}: {err}");
        for text in [&out, &err] {
            assert!(!text.contains(secret), "{name}: the secret was printed");
        }
    }
}

/// What a source hands a worker, kept.
#[derive(Default)]
struct Rows {
    records: Vec<String>,
    rejects: Vec<String>,
    progress: u64,
}

impl icicle_core::traits::RowSink for Rows {
    fn record(&mut self, rec: &icicle_core::record::FileRecord<'_>) {
        self.records.push(rec.path.to_string());
    }
    fn directory(&mut self, _: &icicle_core::record::FileRecord<'_>) {}
    fn reject(&mut self, r: icicle_core::record::Reject) {
        self.rejects.push(r.to_string());
    }
    fn progress(&mut self, units: u64) {
        self.progress += units;
    }
    fn spawn(&mut self, _: icicle_core::traits::Split) {}
}

fn build_source(toml: &str) -> std::sync::Arc<dyn icicle_core::Source> {
    use figment::providers::{Format as _, Toml};
    let figment = figment::Figment::from(Toml::string(toml));
    let ctx = icicle_core::registry::BuildContext::for_test(&figment, "sources.s");
    let desc =
        icicle_core::registry::find(icicle_core::registry::PluginKind::Source, "s3", "sources.s.type", "test").unwrap();
    match (desc.build)(&ctx) {
        Ok(icicle_core::registry::Built::Source(s)) => s,
        Ok(_) => panic!("not a source"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn an_object_that_goes_or_changes_after_listing_fails_only_its_split() {
    // The source itself, planned and read split by split as the runtime's workers do.
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "test\n").unwrap();
    let store = store();
    let bucket = fresh_bucket(&store, "icicle-splits");
    for (key, path) in [("a.csv", "/a"), ("b.csv", "/b"), ("c.csv", "/c")] {
        store.put(&bucket, key, format!("f,33188,1,1,1,1,1,1,{path}\n").into_bytes()).unwrap();
    }
    let source = build_source(&format!(
        "[sources.s]\ntype = \"s3\"\nbucket = \"{bucket}\"\nendpoint_url = \"{}\"\nforce_path_style = true\naccess_key_id = \"test\"\nsecret_access_key_file = \"{}\"\npreset = \"icicle9\"\nmax_attempts = 2\n",
        s3(),
        secret.display()
    ));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let splits = rt.block_on(source.plan()).unwrap();
    let names: Vec<&str> = splits.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a.csv", "b.csv", "c.csv"].map(|k| format!("s3://{bucket}/{k}")));
    store.delete(&bucket, "a.csv").unwrap();
    store.put(&bucket, "b.csv", b"f,33188,1,1,1,1,1,1,/b-changed\n".to_vec()).unwrap();
    let mut rows = Rows::default();
    let e = source.read(&splits[0], &mut rows).unwrap_err().to_string();
    assert!(e.starts_with(&format!("s3 source `s`: reading s3://{bucket}/a.csv: NoSuchKey (HTTP 404)")), "{e}");
    let e = source.read(&splits[1], &mut rows).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("s3 source `s`: reading s3://{bucket}/b.csv: PreconditionFailed (HTTP 412)"))
            && e.contains("changed after it was listed"),
        "{e}"
    );
    source.read(&splits[2], &mut rows).unwrap();
    assert_eq!((rows.records, rows.rejects, rows.progress), (vec!["/c".to_string()], vec![], splits[2].weight));

    // Nothing listens: the connection error names the listing, after the configured attempts.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let closed = build_source(&format!(
        "[sources.s]\ntype = \"s3\"\nbucket = \"{bucket}\"\nendpoint_url = \"http://127.0.0.1:{port}\"\nforce_path_style = true\naccess_key_id = \"test\"\nsecret_access_key_file = \"{}\"\npreset = \"icicle9\"\nmax_attempts = 2\n",
        secret.display()
    ));
    let e = rt.block_on(closed.plan()).unwrap_err().to_string();
    assert!(e.starts_with(&format!("s3 source `s`: listing s3://{bucket}/: dispatch failure")), "{e}");
    assert!(e.contains("onnection refused"), "{e}");
}

#[test]
fn listings_of_more_than_one_page_are_read_whole() {
    // ListObjectsV2 answers at most 1,000 keys a page.
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("principals.tsv"), "").unwrap();
    let store = store();
    let bucket = fresh_bucket(&store, "icicle-pages");
    const OBJECTS: usize = 1_234;
    std::thread::scope(|s| {
        for w in 0..4 {
            let (store, bucket) = (&store, &bucket);
            s.spawn(move || {
                for i in (w..OBJECTS).step_by(4) {
                    store
                        .put(
                            bucket,
                            &format!("many/part-{i:05}.csv"),
                            format!("f,33188,1,1,{i},1,2,3,/many/f{i:05}\n").into_bytes(),
                        )
                        .unwrap();
                }
            });
        }
    });
    let out = t.join("out");
    let cfg =
        run_config(t, "pages", &s3_source(&bucket, "many/", "keys = \"part-*.csv\"\npreset = \"icicle9\"\n"), &out, "");
    let (code, s, err) = run(&cfg, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (s["splits"].as_u64(), s["records"].as_u64(), s["rejects"].as_u64()),
        (Some(OBJECTS as u64), Some(OBJECTS as u64), Some(0)),
        "{s}"
    );
    let got = ingested(&out);
    assert_eq!(
        got.keys().cloned().collect::<Vec<_>>(),
        (0..OBJECTS).map(|i| format!("/many/f{i:05}")).collect::<Vec<_>>()
    );
    assert!((0..OBJECTS).all(|i| got[&format!("/many/f{i:05}")]["content"]["size"] == i as u64));
}

/// An S3 stand-in that misbehaves as S3 does under load, serving one object: the first
/// `busy` requests are answered `503 SlowDown`, then the first `cut` GETs send only `cut_at`
/// bytes of their body and close the connection. It keeps every request's `Range` header.
struct FlakyS3 {
    addr: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FlakyS3 {
    fn start(object: Vec<u8>, busy: usize, cut: usize, cut_at: usize) -> FlakyS3 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let (mut busy, mut cut) = (busy, cut);
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).map(|n| n == 1).unwrap_or(false) {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let range =
                    head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("range: bytes=").map(str::to_string));
                log.lock().unwrap().push(format!(
                    "{} {}",
                    if target.contains("list-type=2") { "LIST" } else { "GET" },
                    range.clone().unwrap_or_default()
                ));
                let answer = |status: &str, headers: &str, body: &[u8]| {
                    let mut a = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n",
                        body.len()
                    )
                    .into_bytes();
                    a.extend_from_slice(body);
                    a
                };
                if busy > 0 {
                    busy -= 1;
                    let body =
                        b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                    let _ = conn.write_all(&answer("503 Slow Down", "Content-Type: application/xml\r\n", body));
                } else if target.contains("list-type=2") {
                    let body = format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>flaky</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Contents><Key>all.csv</Key><LastModified>2026-11-30T00:00:00.000Z</LastModified><ETag>&quot;v1&quot;</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>",
                        object.len()
                    );
                    let _ = conn.write_all(&answer("200 OK", "Content-Type: application/xml\r\n", body.as_bytes()));
                } else {
                    let (from, to) = match &range {
                        Some(r) => {
                            let (a, b) = r.trim().split_once('-').unwrap();
                            (
                                a.parse::<usize>().unwrap(),
                                b.parse::<usize>().map(|b| b + 1).unwrap_or(object.len()).min(object.len()),
                            )
                        }
                        None => (0, object.len()),
                    };
                    let headers = if range.is_some() {
                        format!("ETag: \"v1\"\r\nContent-Range: bytes {from}-{}/{}\r\n", to - 1, object.len())
                    } else {
                        "ETag: \"v1\"\r\n".to_string()
                    };
                    let full = answer(
                        if range.is_some() { "206 Partial Content" } else { "200 OK" },
                        &headers,
                        &object[from..to],
                    );
                    if cut > 0 {
                        cut -= 1;
                        let header_len = full.len() - (to - from);
                        let _ = conn.write_all(&full[..header_len + cut_at.min(to - from - 1)]);
                    } else {
                        let _ = conn.write_all(&full);
                    }
                }
            }
        });
        FlakyS3 { addr, seen }
    }
}

#[test]
fn throttling_is_retried_and_broken_downloads_resume_at_the_next_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "test\n").unwrap();
    let object: Vec<u8> =
        (0..500).map(|i| format!("f,33188,1,1,{i},1,2,3,/flaky/f{i:04}\n")).collect::<String>().into_bytes();
    let source = |addr: &str, attempts: u32| {
        build_source(&format!(
            "[sources.s]\ntype = \"s3\"\nbucket = \"flaky\"\nendpoint_url = \"http://{addr}\"\nforce_path_style = true\naccess_key_id = \"test\"\nsecret_access_key_file = \"{}\"\npreset = \"icicle9\"\nmax_attempts = {attempts}\n",
            secret.display()
        ))
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();

    // Two 503s, then the listing; two GETs broken off after 1,000 bytes, then the rest.
    let server = FlakyS3::start(object.clone(), 2, 2, 1_000);
    let src = source(&server.addr, 5);
    let splits = rt.block_on(src.plan()).unwrap();
    assert_eq!(splits.len(), 1);
    let mut rows = Rows::default();
    src.read(&splits[0], &mut rows).unwrap();
    assert_eq!(rows.records, (0..500).map(|i| format!("/flaky/f{i:04}")).collect::<Vec<_>>());
    assert!(rows.rejects.is_empty(), "{:?}", rows.rejects);
    assert_eq!(rows.progress, object.len() as u64);
    let n = object.len() - 1;
    assert_eq!(
        *server.seen.lock().unwrap(),
        ["LIST ", "LIST ", "LIST ", "GET ", &format!("GET 1000-{n}"), &format!("GET 2000-{n}")]
    );

    // Throttled for good: the listing gives up after max_attempts, naming S3's code.
    let server = FlakyS3::start(object.clone(), usize::MAX, 0, 0);
    let e = rt.block_on(source(&server.addr, 3).plan()).unwrap_err().to_string();
    assert!(
        e.starts_with("s3 source `s`: listing s3://flaky/: SlowDown (HTTP 503): Please reduce your request rate."),
        "{e}"
    );
    assert_eq!(server.seen.lock().unwrap().len(), 3);

    // Every download breaks off: the split fails after max_attempts interruptions.
    let server = FlakyS3::start(object.clone(), 0, usize::MAX, 100);
    let src = source(&server.addr, 3);
    let splits = rt.block_on(src.plan()).unwrap();
    let e = src.read(&splits[0], &mut Rows::default()).unwrap_err().to_string();
    assert!(
        e.starts_with("s3 source `s`: reading s3://flaky/all.csv: gave up after 3 interrupted downloads, at byte 300:"),
        "{e}"
    );
}

/// Under `visible_to = "posix-read"` a pwalk listing in S3 (directory rows included, the
/// directory pre-pass reading each object once more) publishes exactly what the same listing
/// on disk does, and the rule is in force: some records are narrower than owner + group.
#[test]
fn the_posix_rule_reads_directory_rows_from_objects_as_from_files() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let fs = generated(t);
    gen::write(&fs, Format::Pwalk, &t.join("pwalk"), 700, false).unwrap();
    let store = store();
    let bucket = fresh_bucket(&store, "icicle-posix");
    upload_dir(&store, &bucket, &t.join("pwalk"), "snap/", "csv");
    let cfg = |name: &str, rule: &str, source: String| {
        config(
            t,
            &format!("{name}.toml"),
            &format!(
                "[snapshot]\nversion = \"v\"\nsplit_bytes = 65536\nmax_reject_ratio = 1.0\nrejects_file = \"{d}/{name}-rejects.jsonl\"\n[records]\nvisible_to = {rule}\nprincipals = \"{d}/principals.tsv\"\n[sources.s]\n{source}\n[sinks.out]\ntype = \"file\"\ndir = \"{d}/{name}\"\n",
                d = t.display()
            ),
        )
    };
    let local = format!("type = \"tsv\"\npaths = [\"{}/pwalk/*.csv\"]\npreset = \"pwalk\"\n", t.display());
    let remote = s3_source(&bucket, "snap/", "keys = \"*.csv\"\npreset = \"pwalk\"\nsplit_bytes = 65536\n");
    let mut got = Vec::new();
    for (name, rule, source) in [
        ("s3-rule", "\"posix-read\"", remote),
        ("disk-rule", "\"posix-read\"", local.clone()),
        ("disk-lists", "[\"owner\", \"group\"]", local),
    ] {
        let (code, s, err) = run(&cfg(name, rule, source), &[]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(s["directories"].as_u64().unwrap() > 0, "{name}: {s}");
        let vis: std::collections::BTreeMap<String, Value> =
            ingested(&t.join(name)).into_iter().map(|(p, e)| (p, e["visible_to"].clone())).collect();
        got.push((s["rejects"].clone(), vis));
    }
    assert_eq!(got[0], got[1], "S3 and disk under the rule");
    let narrower = got[1].1.iter().filter(|(p, v)| got[2].1.get(*p).is_some_and(|l| l != *v)).count();
    assert!(narrower > 0, "the rule changed nothing: it is not in force");
}

#[path = "s3_source/ranks.rs"]
mod ranks;

/// The environment of a run that has no credentials but what `files` say: the shared config
/// and credentials files in `dir`, no keys in the environment, no instance metadata.
fn profile_env(dir: &Path) -> Vec<(String, String)> {
    vec![
        ("AWS_CONFIG_FILE".into(), dir.join("aws-config").display().to_string()),
        ("AWS_SHARED_CREDENTIALS_FILE".into(), dir.join("aws-credentials").display().to_string()),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ("HOME".into(), dir.display().to_string()),
    ]
}

/// `icicle snapshot` with only `envs` for AWS (every `AWS_*` variable of the test's own
/// environment removed).
fn run_without_aws_env(cfg: &Path, envs: &[(String, String)]) -> (i32, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_icicle"));
    cmd.args(["snapshot", "--json", "-c", cfg.to_str().unwrap()]).env_remove("RUST_LOG");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_")) {
        cmd.env_remove(k);
    }
    cmd.envs(envs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let out = cmd.output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn credentials_come_from_the_default_chain_profiles_and_credential_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("principals.tsv"), "").unwrap();
    let server = AuthServer::start();
    let wrong = "wrongSecretKeyThatMustNotPrint0123456789/+";
    // A process credential that leaves a mark, so that the chain is seen to have run it.
    let process = t.join("creds.sh");
    std::fs::write(
        &process,
        format!(
            "#!/bin/sh\ntouch {}/process-ran\nprintf '{{\"Version\": 1, \"AccessKeyId\": \"%s\", \"SecretAccessKey\": \"%s\"}}' {} {}\n",
            t.display(),
            server.key_id,
            server.secret
        ),
    )
    .unwrap();
    std::fs::set_permissions(&process, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        t.join("aws-credentials"),
        format!(
            "[reader]\naws_access_key_id = {k}\naws_secret_access_key = {s}\n\n[wrong]\naws_access_key_id = {k}\naws_secret_access_key = {wrong}\n",
            k = server.key_id,
            s = server.secret
        ),
    )
    .unwrap();
    std::fs::write(t.join("aws-config"), format!("[profile by-process]\ncredential_process = {}\n", process.display()))
        .unwrap();
    let env = profile_env(t);
    // The server knows the reader's key and grants it nothing: AccessDenied proves the request
    // was signed with the profile's key and secret; a wrong secret is SignatureDoesNotMatch.
    let cases = [
        // Keys in the environment too: the profile named wins (the chain would take them first).
        (
            "reader",
            "profile = \"reader\"",
            vec![
                ("AWS_ACCESS_KEY_ID".to_string(), "AKIAIOSFODNN7EXAMPLE".to_string()),
                ("AWS_SECRET_ACCESS_KEY".to_string(), wrong.to_string()),
            ],
            "AccessDenied (HTTP 403)",
        ),
        ("wrong", "profile = \"wrong\"", vec![], "SignatureDoesNotMatch (HTTP 403)"),
        ("by-process", "", vec![("AWS_PROFILE".to_string(), "by-process".to_string())], "AccessDenied (HTTP 403)"),
    ];
    for (name, key, extra_env, error) in cases {
        let source = format!(
            "type = \"s3\"\nbucket = \"icicle-private\"\nendpoint_url = \"{}\"\nforce_path_style = true\n{key}\nmax_attempts = 1\npreset = \"icicle9\"\n",
            server.url
        );
        let cfg = run_config(t, name, &source, &t.join(name), "max_rejects = 0");
        let mut envs = env.clone();
        envs.extend(extra_env);
        let (code, err) = run_without_aws_env(&cfg, &envs);
        assert_eq!(code, 1, "{name}: {err}");
        assert!(err.contains(&format!("s3 source `s`: listing s3://icicle-private/: {error}")), "{name}: {err}");
        assert!(!err.contains(wrong) && !err.contains(&server.secret), "{name}: a secret was printed");
    }
    assert!(t.join("process-ran").exists(), "the credential process was not run");

    // No credentials anywhere: the run fails before reading anything, saying so.
    let source = format!(
        "type = \"s3\"\nbucket = \"icicle-private\"\nendpoint_url = \"{}\"\nforce_path_style = true\nprofile = \"absent\"\nmax_attempts = 1\npreset = \"icicle9\"\n",
        server.url
    );
    let cfg = run_config(t, "absent", &source, &t.join("absent"), "max_rejects = 0");
    let (code, err) = run_without_aws_env(&cfg, &env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("s3 source `s`: listing s3://icicle-private/: no credentials: "), "{err}");
}
