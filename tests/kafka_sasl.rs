//! The Kafka source and sink against a broker that requires SASL/SCRAM over TLS, as Amazon
//! MSK's SASL_SSL listener does: `scripts/services.sh start kafka-sasl` (run by
//! `scripts/test.sh`) starts tansu with `--authentication` (its SQLite engine keeps the SCRAM
//! credentials) behind a TLS terminator whose certificate for 127.0.0.1 is signed by a CA of
//! its own. Everything goes through the real `icicle` binary with the settings
//! docs/gpfs-monitor.md recommends: `security_protocol = "SASL_SSL"`, `sasl_mechanism =
//! "SCRAM-SHA-512"`, `sasl_password_file`, `ssl_ca_location`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::config;
use icicle_plugins_kafka::client::KafkaConnection;
use icicle_plugins_kafka::produce;
use serde_json::Value;

/// The SASL broker `scripts/services.sh start kafka-sasl` runs: its directory is
/// `ICICLE_TEST_KAFKA_SASL`, else `.tools/run/kafka-sasl`.
struct Broker {
    bootstrap: String,
    ca: PathBuf,
    user: String,
    password_file: PathBuf,
}

fn broker() -> Broker {
    let dir = std::env::var_os("ICICLE_TEST_KAFKA_SASL")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/run/kafka-sasl"));
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).map(|s| s.trim().to_string()).unwrap_or_else(|e| {
            panic!("no SASL broker ({}: {e}): run the tests with scripts/test.sh (or scripts/services.sh start kafka-sasl)", dir.join(name).display())
        })
    };
    Broker { bootstrap: read("addr"), ca: dir.join("ca.pem"), user: read("user"), password_file: dir.join("password") }
}

fn topic(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), icicle_core::time::now_epoch())
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// The connection settings, as in docs/gpfs-monitor.md, with SCRAM-SHA-512; `ca: None`
/// leaves the system's CAs.
fn connection(b: &Broker, password_file: &Path, ca: Option<&Path>) -> KafkaConnection {
    KafkaConnection {
        bootstrap: b.bootstrap.clone(),
        security_protocol: Some("SASL_SSL".into()),
        sasl_mechanism: Some("SCRAM-SHA-512".into()),
        sasl_username: Some(b.user.clone()),
        sasl_password_file: Some(password_file.to_path_buf()),
        ssl_ca_location: ca.map(Path::to_path_buf),
        ..Default::default()
    }
}

/// The same as an inline TOML table.
fn connection_toml(c: &KafkaConnection) -> String {
    let mut t = format!(
        "{{ bootstrap = \"{}\", security_protocol = \"SASL_SSL\", sasl_mechanism = \"{}\", sasl_username = \"{}\", sasl_password_file = \"{}\"",
        c.bootstrap,
        c.sasl_mechanism.as_deref().unwrap_or_default(),
        c.sasl_username.as_deref().unwrap_or_default(),
        c.sasl_password_file.as_deref().unwrap_or(Path::new("")).display()
    );
    if let Some(ca) = &c.ssl_ca_location {
        t.push_str(&format!(", ssl_ca_location = \"{}\"", ca.display()));
    }
    t + " }"
}

/// The right credentials, for the test's own topics and reads.
fn client(b: &Broker) -> KafkaConnection {
    connection(b, &b.password_file, Some(&b.ca))
}

/// One watch-folder event as mmwatch publishes it, keyed by inode.
fn event(inode: u64, path: &str, event: &str) -> (String, String) {
    let v = format!(
        r#"{{"inode": {inode}, "path": "/gpfs/fs1{path}", "event": "{event}", "fileSize": 10, "atime": 1700000000, "ctime": 1700000001, "mtime": 1700000002, "ownerUserId": 0, "ownerGroupId": 0, "permissions": "0644"}}"#
    );
    (inode.to_string(), v)
}

/// 30 files created and 10 others deleted; the paths each should produce.
fn events() -> (Vec<(String, String)>, BTreeSet<String>, BTreeSet<String>) {
    let mut msgs = Vec::new();
    let (mut created, mut deleted) = (BTreeSet::new(), BTreeSet::new());
    for i in 0..30u64 {
        let p = format!("/sasl/f{i:02}.dat");
        msgs.push(event(1000 + i, &p, "IN_CREATE"));
        created.insert(p);
    }
    for i in 0..10u64 {
        let p = format!("/sasl/gone{i:02}.dat");
        msgs.push(event(2000 + i, &p, "IN_DELETE"));
        deleted.insert(p);
    }
    (msgs, created, deleted)
}

/// A GPFS monitor reading `src` and publishing to `index`, each with its own password file.
fn monitor_config(tmp: &Path, src: &str, index: &str, source: &KafkaConnection, sink: &KafkaConnection) -> PathBuf {
    config(
        tmp,
        "sasl.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.fset1]\ntype = \"gpfs\"\ntopic = \"{src}\"\ngroup_id = \"icicle-{src}\"\nfs_root = \"/gpfs/fs1\"\nunseeded = true\n\
             batch_size = 16\nquiet_period_secs = 0.05\nstate_dir = \"{t}/state\"\nconnection = {}\n\
             [sinks.msk]\ntype = \"kafka\"\ntopic = \"{index}\"\ntimeout_secs = 60\ndead_letter_file = \"{t}/msk.dead-letters.jsonl\"\nconnection = {}\n",
            connection_toml(source),
            connection_toml(sink),
            t = tmp.display(),
        ),
    )
}

/// Run `icicle ARGS` with output in files, killed after `limit`; (exit code, stdout, stderr,
/// how long it ran).
fn run(tmp: &Path, args: &[&str], limit: Duration) -> (i32, String, String, Duration) {
    let (out, err) = (tmp.join("stdout"), tmp.join("stderr"));
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .spawn()
        .expect("run icicle");
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code().unwrap_or(-1);
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("icicle {args:?} still ran after {limit:?}: {}", std::fs::read_to_string(&err).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        code,
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default(),
        started.elapsed(),
    )
}

/// Topics `src` (2 partitions, the events produced) and `index` (empty) on the SASL broker.
fn setup(b: &Broker, src: &str, index: &str, msgs: Vec<(String, String)>) {
    let cc = client(b);
    rt().block_on(async {
        produce::create_topic_with(&cc, src, 2).await.unwrap();
        produce::create_topic_with(&cc, index, 1).await.unwrap();
        assert_eq!(produce::produce_with(&cc, src, msgs).await.unwrap(), 40);
    });
}

#[test]
fn scram_over_tls_delivers_exactly_the_produced_events() {
    let b = broker();
    let tmp = tempfile::tempdir().unwrap();
    let (src, index) = (topic("sasl-src"), topic("sasl-index"));
    let (msgs, created, deleted) = events();
    setup(&b, &src, &index, msgs);
    // The source logs in with SCRAM-SHA-512, the sink with SCRAM-SHA-256.
    let right = connection(&b, &b.password_file, Some(&b.ca));
    let sha256 = KafkaConnection { sasl_mechanism: Some("SCRAM-SHA-256".into()), ..right.clone() };
    let cfg = monitor_config(tmp.path(), &src, &index, &right, &sha256);
    let (code, out, err, _) =
        run(tmp.path(), &["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], Duration::from_secs(180));
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(report["fset1"]["messages"], 40, "{report}");
    assert_eq!(report["fset1"]["rejects"], 0, "{report}");

    // The index topic, read back over SASL_SSL: one message per event, no more, no fewer.
    let got = rt().block_on(produce::consume_all_with(&client(&b), &index)).unwrap();
    // The subject is the path (`path_prefix = ""`), and the message's key.
    let (mut upserts, mut deletes) = (Vec::new(), Vec::new());
    for m in &got {
        let v: Value = serde_json::from_str(m.value.as_deref().unwrap()).unwrap();
        let subject = match v["op"].as_str() {
            Some("upsert") => {
                upserts.push(v["entry"]["subject"].as_str().unwrap().to_string());
                v["entry"]["subject"].as_str()
            }
            Some("delete") => {
                deletes.push(v["subject"].as_str().unwrap().to_string());
                v["subject"].as_str()
            }
            other => panic!("unexpected op {other:?}: {v}"),
        };
        assert_eq!(m.key.as_deref(), subject, "{v}");
    }
    assert_eq!(got.len(), 40, "{got:?}");
    assert_eq!((upserts.len(), upserts.into_iter().collect::<BTreeSet<_>>()), (created.len(), created));
    assert_eq!((deletes.len(), deletes.into_iter().collect::<BTreeSet<_>>()), (deleted.len(), deleted));
    // ... and every event was acknowledged to the broker.
    let committed = produce::committed_with(&client(&b), &src, &format!("icicle-{src}"), &[0, 1]).unwrap();
    assert_eq!(committed.values().sum::<i64>(), 40, "{committed:?}");
}

/// Stderr shows neither the password given nor the right one.
fn assert_no_password(err: &str, wrong: &str, b: &Broker) {
    let right = std::fs::read_to_string(&b.password_file).unwrap();
    assert!(!err.contains(wrong), "the wrong password is shown: {err}");
    assert!(!err.contains(right.trim()), "the password is shown: {err}");
}

#[test]
fn a_wrong_password_fails_at_once_with_a_clear_error_that_does_not_show_it() {
    let b = broker();
    let tmp = tempfile::tempdir().unwrap();
    let (src, index) = (topic("sasl-bad-src"), topic("sasl-bad-index"));
    let (msgs, _, _) = events();
    setup(&b, &src, &index, msgs);
    let wrong = format!("wrong-{}", icicle_core::time::now_epoch());
    let wrong_file = tmp.path().join("wrong-password");
    std::fs::write(&wrong_file, format!("{wrong}\n")).unwrap();
    let right = connection(&b, &b.password_file, Some(&b.ca));
    let bad = connection(&b, &wrong_file, Some(&b.ca));

    // The source cannot log in: the monitor stops at once (librdkafka alone would retry
    // forever), saying why.
    let cfg = monitor_config(tmp.path(), &src, &index, &bad, &right);
    let (code, _, err, took) =
        run(tmp.path(), &["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], Duration::from_secs(120));
    assert_ne!(code, 0, "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {err}");
    assert!(
        err.contains("refused the credentials")
            && err.contains("SASL authentication error")
            && err.contains(&format!("`{src}`")),
        "{err}"
    );
    assert_no_password(&err, &wrong, &b);

    // The source logs in, the sink cannot: the delivery fails, nothing is acknowledged.
    let cfg = monitor_config(tmp.path(), &src, &index, &right, &bad);
    let (code, _, err, took) =
        run(tmp.path(), &["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], Duration::from_secs(120));
    assert_ne!(code, 0, "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {err}");
    assert!(
        err.contains("msk") && err.contains("refused the credentials") && err.contains("SASL authentication error"),
        "{err}"
    );
    assert_no_password(&err, &wrong, &b);
    let committed = produce::committed_with(&client(&b), &src, &format!("icicle-{src}"), &[0, 1]).unwrap();
    assert!(committed.is_empty(), "committed without delivering: {committed:?}");
    assert!(rt().block_on(produce::consume_all_with(&client(&b), &index)).unwrap().is_empty());
}

#[test]
fn a_broker_certificate_the_ca_did_not_sign_is_refused() {
    let b = broker();
    let tmp = tempfile::tempdir().unwrap();
    let (src, index) = (topic("sasl-tls-src"), topic("sasl-tls-index"));
    let (msgs, _, _) = events();
    setup(&b, &src, &index, msgs);
    // Without `ssl_ca_location` only the system's CAs are trusted, and none signed it.
    let untrusted = connection(&b, &b.password_file, None);
    let cfg = monitor_config(tmp.path(), &src, &index, &untrusted, &untrusted);
    let (code, _, err, took) =
        run(tmp.path(), &["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()], Duration::from_secs(120));
    assert_ne!(code, 0, "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {err}");
    assert!(err.contains("TLS handshake failed") && err.contains("certificate verify failed"), "{err}");
}

/// MSK IAM tokens are signed exactly as botocore's `SigV4QueryAuth` (what AWS's Python signer,
/// aws-msk-iam-sasl-signer-python, uses) signs the same request at the same time.
#[test]
fn msk_iam_tokens_are_signed_as_botocore_signs_them() {
    use base64::Engine;
    use icicle_plugins_kafka::msk::sign_token;
    let at = std::time::UNIX_EPOCH + Duration::from_secs(1_780_000_123);
    for (region, session) in [("us-east-1", None), ("eu-west-2", Some("FwoGZXIvYXdzEJr//+session=token"))] {
        let creds = aws_credential_types::Credentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            session.map(str::to_string),
            None,
            "test",
        );
        let (token, _) = sign_token(region, &creds, at).unwrap();
        let ours = String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&token).unwrap()).unwrap();
        let script = format!(
            r#"
import datetime, botocore.auth
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
botocore.auth.get_current_datetime = lambda *a, **k: datetime.datetime.fromtimestamp(1780000123, datetime.timezone.utc).replace(tzinfo=None)
req = AWSRequest(method="GET", url="https://kafka.{region}.amazonaws.com/", params={{"Action": "kafka-cluster:Connect"}})
SigV4QueryAuth(Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", {session}), "kafka-cluster", "{region}", expires=900).add_auth(req)
print(req.prepare().url)
"#,
            session = session.map_or("None".to_string(), |s| format!("{s:?}")),
        );
        let out = Command::new(common::python()).args(["-c", &script]).output().expect("python with botocore");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let theirs = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let param = |url: &str, name: &str| {
            url.split(['?', '&']).find_map(|p| p.strip_prefix(&format!("{name}="))).map(str::to_string)
        };
        for name in ["X-Amz-Date", "X-Amz-Expires", "X-Amz-Credential", "X-Amz-SignedHeaders", "X-Amz-Signature"] {
            assert_eq!(param(&ours, name), param(&theirs, name), "{name}:\nours   {ours}\ntheirs {theirs}");
        }
        assert!(param(&theirs, "X-Amz-Signature").is_some(), "{theirs}");
        assert_eq!(param(&ours, "X-Amz-Security-Token").is_some(), session.is_some(), "{ours}");
    }
}

/// A Kafka sink with `aws_msk_iam` signs in with OAUTHBEARER over TLS, its token signed with
/// credentials the AWS default chain found (here a profile's `credential_process`, which
/// leaves a mark): this broker knows SCRAM only and refuses it, and the run stops saying so,
/// without showing the token or the secret key.
#[test]
fn msk_iam_asks_the_default_chain_and_signs_in_with_oauthbearer() {
    let b = broker();
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (src, index) = (topic("sasl-iam-src"), topic("sasl-iam-index"));
    let (msgs, _, _) = events();
    setup(&b, &src, &index, msgs);
    let secret = "iamSecretKeyThatMustNotPrint0123456789/+";
    let process = t.join("creds.sh");
    std::fs::write(
        &process,
        format!(
            "#!/bin/sh\ntouch {}/asked\nprintf '{{\"Version\": 1, \"AccessKeyId\": \"AKIAIOSFODNN7EXAMPLE\", \"SecretAccessKey\": \"{secret}\"}}'\n",
            t.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&process, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(t.join("aws-config"), format!("[profile msk]\ncredential_process = {}\n", process.display()))
        .unwrap();
    let right = connection(&b, &b.password_file, Some(&b.ca));
    let cfg = config(
        t,
        "iam.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n\
             [sources.fset1]\ntype = \"gpfs\"\ntopic = \"{src}\"\ngroup_id = \"icicle-{src}\"\nfs_root = \"/gpfs/fs1\"\nunseeded = true\n\
             batch_size = 16\nquiet_period_secs = 0.05\nstate_dir = \"{t}/state\"\nconnection = {}\n\
             [sinks.msk]\ntype = \"kafka\"\ntopic = \"{index}\"\ntimeout_secs = 60\n\
             connection = {{ bootstrap = \"{}\", ssl_ca_location = \"{}\", aws_msk_iam = {{ region = \"us-east-1\", profile = \"msk\" }} }}\n",
            connection_toml(&right),
            b.bootstrap,
            b.ca.display(),
            t = t.display(),
        ),
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_icicle"));
    cmd.args(["monitor", "--drain", "--json", "-c", cfg.to_str().unwrap()])
        .env("RUST_LOG", "info")
        .env("AWS_CONFIG_FILE", t.join("aws-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", t.join("none"))
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_") && k != "AWS_EC2_METADATA_DISABLED") {
        if !["AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"].contains(&k.as_str()) {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(t.join("asked").exists(), "the credential process was never run: {err}");
    assert!(err.contains("msk") && err.contains("refused the credentials"), "{err}");
    assert!(!err.contains(secret), "the secret key was printed: {err}");
    assert!(!err.contains("X-Amz-Signature") && !err.contains("aHR0cHM6Ly9rYWZrYS"), "a token was printed: {err}");
    let committed = produce::committed_with(&client(&b), &src, &format!("icicle-{src}"), &[0, 1]).unwrap();
    assert!(committed.is_empty(), "committed without delivering: {committed:?}");
}
