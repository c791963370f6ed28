use super::*;

fn err(key: &str, reason: String) -> ConfigError {
    ConfigError::InvalidValue { key: format!("sinks.g.{key}"), origin: "test".into(), reason }
}

const INDEX: &str = "4d7d1e0a-6b4e-4d1c-9f3a-2c1e5b7a9d00";

#[test]
fn exactly_one_auth_mode_and_errors_name_the_key() {
    std::env::set_var("ICICLE_TEST_GLOBUS_TOKEN_A", "tok-sekrit-a");
    std::env::set_var("ICICLE_TEST_GLOBUS_SECRET_A", "client-sekrit-a");
    let mut c = GlobusSinkConfig::new(INDEX);
    let e = c.clone().connect_with("g", err).unwrap_err().to_string();
    assert!(e.contains("sinks.g.token_env") && e.contains("client_id"), "{e}");
    c.token_env = Some("ICICLE_TEST_GLOBUS_TOKEN_A".into());
    assert!(c.clone().connect_with("g", err).is_ok());
    let mut both = c.clone();
    both.client_id = Some("abc".into());
    both.client_secret_env = Some("ICICLE_TEST_GLOBUS_SECRET_A".into());
    assert!(both.connect_with("g", err).unwrap_err().to_string().contains("sinks.g.client_id"));
    let mut two_tokens = c.clone();
    two_tokens.token_file = Some("/nonexistent".into());
    assert!(two_tokens.connect_with("g", err).unwrap_err().to_string().contains("sinks.g.token_env"));
    let mut stray = c.clone();
    stray.client_secret_env = Some("ICICLE_TEST_GLOBUS_SECRET_A".into());
    assert!(stray.connect_with("g", err).unwrap_err().to_string().contains("needs client_id"));
    let mut cc = GlobusSinkConfig::new(INDEX);
    cc.client_id = Some("abc".into());
    assert!(cc.clone().connect_with("g", err).unwrap_err().to_string().contains("sinks.g.client_secret_env"));
    cc.client_secret_env = Some("ICICLE_TEST_GLOBUS_NO_SUCH_VAR".into());
    let e = cc.clone().connect_with("g", err).unwrap_err().to_string();
    assert!(e.contains("sinks.g.client_secret_env") && e.contains("ICICLE_TEST_GLOBUS_NO_SUCH_VAR"), "{e}");
    cc.client_secret_env = Some("ICICLE_TEST_GLOBUS_SECRET_A".into());
    assert!(cc.clone().connect_with("g", err).is_ok());
    let mut bad = c.clone();
    bad.index_id = "my-index".into();
    assert!(bad.connect_with("g", err).unwrap_err().to_string().contains("sinks.g.index_id"));
    let mut bad = c.clone();
    bad.base_url = "https://user:pw@search.example".into();
    assert!(bad.connect_with("g", err).unwrap_err().to_string().contains("sinks.g.base_url"));
    let mut bad = c.clone();
    bad.retry_max_ms = 10;
    assert!(bad.connect_with("g", err).unwrap_err().to_string().contains("sinks.g.retry_max_ms"));
    let mut bad = c;
    bad.timeout_secs = 0.0;
    assert!(bad.connect_with("g", err).unwrap_err().to_string().contains("sinks.g.timeout_secs"));
}

#[test]
fn secrets_never_show_in_debug_or_errors() {
    std::env::set_var("ICICLE_TEST_GLOBUS_TOKEN_B", "tok-sekrit-b");
    std::env::set_var("ICICLE_TEST_GLOBUS_SECRET_B", "client-sekrit-b");
    let dir = std::env::temp_dir().join(format!("icicle-globus-secret-{}", std::process::id()));
    std::fs::write(&dir, "file-sekrit-b\n").unwrap();
    let mut a = GlobusSinkConfig::new(INDEX);
    a.token_env = Some("ICICLE_TEST_GLOBUS_TOKEN_B".into());
    let mut b = GlobusSinkConfig::new(INDEX);
    b.client_id = Some("cid".into());
    b.client_secret_env = Some("ICICLE_TEST_GLOBUS_SECRET_B".into());
    let mut c = GlobusSinkConfig::new(INDEX);
    c.token_file = Some(dir.clone());
    for cfg in [a, b, c] {
        let shown = format!("{cfg:?}");
        let sink = cfg.connect_with("g", err).unwrap();
        let shown = format!("{shown} {sink:?}");
        for s in ["tok-sekrit-b", "client-sekrit-b", "file-sekrit-b"] {
            assert!(!shown.contains(s), "{shown}");
        }
        // An error that echoes a secret is redacted.
        let e = sink
            .sink_error(GlobusError::Protocol {
                what: "x".into(),
                reason: "echo tok-sekrit-b client-sekrit-b file-sekrit-b".into(),
            })
            .to_string();
        let leaked = ["tok-sekrit-b", "client-sekrit-b", "file-sekrit-b"].iter().filter(|s| e.contains(**s)).count();
        assert_eq!(leaked, 2, "exactly the other two configs' secrets may remain: {e}");
    }
    assert_eq!(format!("{:?} {}", Secret::new("x-sekrit"), Secret::new("x-sekrit")), "Secret(***) ***");
    let _ = std::fs::remove_file(dir);
}

#[test]
fn backoff_doubles_is_capped_jittered_and_honours_retry_after() {
    let p = RetryPolicy { max_retries: 8, initial: Duration::from_millis(500), max: Duration::from_millis(30_000) };
    assert_eq!(p.delay(0, None, 0.0), Duration::from_millis(250));
    assert_eq!(p.delay(0, None, 1.0), Duration::from_millis(500));
    assert_eq!(p.delay(3, None, 1.0), Duration::from_millis(4000));
    assert_eq!(p.delay(3, None, 0.0), Duration::from_millis(2000));
    assert_eq!(p.delay(20, None, 1.0), Duration::from_millis(30_000));
    assert_eq!(p.delay(40, None, 0.0), Duration::from_millis(15_000));
    assert_eq!(p.delay(0, Some(Duration::from_secs(2)), 0.5), Duration::from_secs(2));
    assert_eq!(p.delay(10, Some(Duration::from_secs(1)), 1.0), Duration::from_millis(30_000));
    assert_eq!(refresh_after(172_800.0), Duration::from_secs(172_740));
    assert_eq!(refresh_after(100.0), Duration::from_secs(90));
    assert_eq!(refresh_after(0.0), Duration::ZERO);
    assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
    assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
}

#[test]
fn error_bodies_give_code_and_message() {
    let (c, m) = error_message(
        br#"{"code":"NotFound.NoSuchIndex","message":"There is no index x","status":404,"error_data":null}"#,
    );
    assert_eq!((c.as_deref(), m.as_str()), (Some("NotFound.NoSuchIndex"), "There is no index x"));
    assert_eq!(error_message(br#"{"error":"invalid_client"}"#).1, "invalid_client");
    assert_eq!(error_message(b"  ").1, "(no message)");
    let e = GlobusError::Status {
        what: "ingest".into(),
        status: 404,
        code: Some("NotFound.NoSuchIndex".into()),
        message: "no".into(),
        retry_after: None,
    };
    assert_eq!(e.to_string(), "ingest: HTTP 404 NotFound.NoSuchIndex: no");
    assert!(!e.is_transient());
    for s in [429, 500, 503] {
        assert!(GlobusError::Status {
            what: String::new(),
            status: s,
            code: None,
            message: String::new(),
            retry_after: None
        }
        .is_transient());
    }
    assert_eq!(form_encode("urn:globus:auth:scope:x y/z"), "urn%3Aglobus%3Aauth%3Ascope%3Ax+y%2Fz");
}

#[test]
fn large_batches_become_several_requests_within_the_limit() {
    let pad = "x".repeat(900_000);
    let entries: Vec<Vec<u8>> = (0..25)
        .map(|i| format!(r#"{{"subject":"/f{i}","visible_to":["public"],"content":{{"p":"{pad}"}}}}"#).into_bytes())
        .collect();
    let batch = DocumentBatch::Ingest(entry_batch(entries.iter().map(|e| e.as_slice())));
    let reqs = GlobusSink::requests(&batch).unwrap();
    assert_eq!(reqs.len(), 3);
    let mut n = 0;
    for r in &reqs {
        let Doc::Ingest(doc) = r else { panic!("not an ingest") };
        let mut body = Vec::new();
        doc.write_gingest(&mut body).unwrap();
        assert!(body.len() <= MAX_REQUEST_BYTES);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["ingest_data"]["gmeta"].as_array().unwrap().len(), doc.len());
        n += doc.len();
    }
    assert_eq!(n, 25);
    let subjects: Vec<String> = (0..600_000).map(|i| format!("/some/long/directory/name/file-{i:08}")).collect();
    let reqs = GlobusSink::requests(&DocumentBatch::Delete(subjects)).unwrap();
    assert!(reqs.len() >= 3);
    assert_eq!(
        reqs.iter()
            .map(|r| if let Doc::Delete(subjects) = r {
                assert!(delete_body(subjects).len() <= MAX_REQUEST_BYTES);
                subjects.len()
            } else {
                0
            })
            .sum::<usize>(),
        600_000
    );
}

#[tokio::test]
async fn an_answer_larger_than_the_bound_is_an_error_not_a_process_out_of_memory() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Answers every request with a 200 whose body is larger than the bound.
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 16];
                let _ = conn.read(&mut buf).await;
                let body = vec![b' '; crate::error::MAX_RESPONSE_BYTES + 1];
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
        }
    });
    std::env::set_var("ICICLE_TEST_GLOBUS_TOKEN_BIG", "tok-big");
    let mut c = GlobusSinkConfig::new(INDEX);
    c.token_env = Some("ICICLE_TEST_GLOBUS_TOKEN_BIG".into());
    c.base_url = format!("http://{addr}");
    let mut sink = c.connect_with("g", err).unwrap();
    let mut batch = EntryBatch::default();
    batch.push(br#"{"subject":"/a","visible_to":["public"],"content":{}}"#);
    let e = sink.deliver(&DocumentBatch::Ingest(batch)).await.unwrap_err().to_string();
    assert!(e.contains("more than 4 MiB"), "{e}");
}

#[tokio::test]
async fn a_request_that_cannot_be_built_fails_at_once_without_the_token() {
    std::env::set_var("ICICLE_TEST_GLOBUS_TOKEN_NL", "tok-line-one\ntok-line-two");
    let mut c = GlobusSinkConfig::new(INDEX);
    c.token_env = Some("ICICLE_TEST_GLOBUS_TOKEN_NL".into());
    // Refused where it is configured, naming the key and the variable, not the token.
    let e = c.clone().connect_with("g", err).unwrap_err().to_string();
    assert_eq!(
        e,
        "invalid value for `sinks.g.token_env` in test: the token in environment variable `ICICLE_TEST_GLOBUS_TOKEN_NL` holds a newline or another control \
         character: not a bearer token an HTTP request can carry (the token is not shown)"
    );
    // An access token that cannot be sent (as one from a token endpoint could be): no
    // request, no retry, no backoff, and an error that retrying cannot help.
    std::env::set_var("ICICLE_TEST_GLOBUS_TOKEN_OK", "tok-fine-for-now");
    c.token_env = Some("ICICLE_TEST_GLOBUS_TOKEN_OK".into());
    c.base_url = "http://127.0.0.1:9".into();
    c.retry_initial_ms = 60_000;
    c.retry_max_ms = 60_000;
    let mut sink = c.connect_with("g", err).unwrap();
    sink.auth = Auth::Static(Secret::new("tok-line-one\ntok-line-two"));
    let mut batch = EntryBatch::default();
    batch.push(br#"{"subject":"/a","visible_to":["public"],"content":{}}"#);
    let t0 = Instant::now();
    let e = sink.deliver(&DocumentBatch::Ingest(batch)).await.unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(
        e.to_string(),
        format!("g: ingest of 1 entries in index {INDEX}: cannot build the request: the access token holds a newline or another control character (not shown)")
    );
    assert!(matches!(e, SinkError::Remote { retry: icicle_core::Retry::NoRetry, .. }), "{e:?}");
    assert_eq!(sink.counts(), (0, 0, 0, 0));
    // What reqwest refuses to build is classed the same way, whatever the cause.
    let built = reqwest::Client::new().get("http://127.0.0.1:9/").header("x", "a\nb").send().await.unwrap_err();
    let e = request_error("probe", &built);
    assert!(
        matches!(e, GlobusError::Request { .. }) && e.retry_hint() == icicle_core::Retry::NoRetry && !e.is_transient(),
        "{e:?}"
    );
}

#[test]
fn failed_tasks_are_worth_a_restart_and_refusals_are_not() {
    use icicle_core::Retry;
    let failed = GlobusError::TaskFailed { task_id: "t".into(), index_id: INDEX.into(), message: "m".into() };
    assert_eq!(failed.retry_hint(), Retry::WithBackoff);
    assert_eq!(GlobusError::TasksFailing("every entry ...".into()).retry_hint(), Retry::WithBackoff);
    assert_eq!(GlobusError::Batch("refused".into()).retry_hint(), Retry::NoRetry);
    let refused =
        GlobusError::Status { what: "ingest".into(), status: 400, code: None, message: "no".into(), retry_after: None };
    assert_eq!(refused.retry_hint(), Retry::NoRetry);
}
