//! The `s3` source: lists the objects under a prefix, plans one split per object (byte
//! ranges for big ones) and reads each split with ranged GETs, cutting lines exactly as the
//! `tsv` source cuts local files and parsing them with the same [`Layout`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use icicle_core::record::{FileKind, Reject};
use icicle_core::text::MAX_LINE_BYTES;
use icicle_core::traits::{RowSink, Split};
use icicle_core::{Source, SourceError};
use icicle_plugins_snapshot::tsv::{Layout, Scratch};

use crate::error::S3Error;
use crate::lines::RangeLines;

/// Everything a source needs, resolved from its configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The component id (named in errors).
    pub id: String,
    /// The bucket.
    pub bucket: String,
    /// The key prefix.
    pub prefix: String,
    /// The pattern the rest of each key must match.
    pub keys: Option<glob::Pattern>,
    /// A non-AWS endpoint.
    pub endpoint_url: Option<String>,
    /// The signing region.
    pub region: String,
    /// Path-style URLs.
    pub force_path_style: bool,
    pub(crate) creds: Creds,
    /// Objects larger than this are read in byte ranges.
    pub split_bytes: u64,
    /// Attempts of one request.
    pub max_attempts: u32,
    /// One attempt's timeout until the answer begins.
    pub timeout: Duration,
    /// How lines are parsed.
    pub layout: Layout,
}

/// What the listing said about one object; every GET of it must see the same version.
#[derive(Debug, Clone)]
struct Listed {
    size: u64,
    etag: Option<String>,
}

impl Listed {
    /// As a split carries it (`<size> <etag>`), so every rank reads the version listed once.
    fn version(&self) -> String {
        format!("{} {}", self.size, self.etag.as_deref().unwrap_or(""))
    }

    /// From a split's version.
    fn of_version(v: &str) -> Option<Listed> {
        let (size, etag) = v.split_once(' ')?;
        Some(Listed { size: size.parse().ok()?, etag: (!etag.is_empty()).then(|| etag.to_string()) })
    }
}

/// The `s3` source.
pub struct S3Source {
    s: Settings,
    client: Client,
    /// The SDK's own runtime: `read` runs on the snapshot's worker threads and blocks on it.
    rt: Option<tokio::runtime::Runtime>,
    listed: Mutex<HashMap<String, Listed>>,
}

impl std::fmt::Debug for S3Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Source").field("settings", &self.s).finish_non_exhaustive()
    }
}

/// A range is fetched with up to this much more (a sixteenth of the range, at most this), so
/// that its last line, which usually runs past the end, rarely needs a second request.
const LOOKAHEAD_BYTES: u64 = 64 << 10;
/// When a line runs past the look-ahead, more is fetched in requests doubling up to this.
const CONTINUATION_MAX: u64 = 16 << 20;
/// Progress is reported at least every this many bytes.
const PROGRESS_BYTES: u64 = 1 << 20;

/// Where the client's credentials come from.
#[derive(Debug, Clone)]
pub(crate) enum Creds {
    /// A key id with its secret (and session token) as configured.
    Static {
        access_key_id: String,
        secret: icicle_core::secret::Secret,
        session_token: Option<icicle_core::secret::Secret>,
    },
    /// With `profile`, that profile of the shared config and credentials files alone (keys,
    /// `role_arn`, `credential_process`, SSO); without, the AWS SDKs' default chain in its
    /// order: the environment (`AWS_ACCESS_KEY_ID`, ...), the files (`AWS_PROFILE`, else
    /// `default`), web identity, ECS and EC2 instance roles.
    DefaultChain { profile: Option<String> },
}

/// An S3 client (rustls with aws-lc-rs, the one TLS provider of the build), the given retry
/// attempts (standard mode: throttling, 5xx and connection errors, with backoff) and timeouts.
/// Credentials from the default chain are resolved at the first request, on `rt`.
pub(crate) fn client(
    endpoint_url: Option<&str>,
    region: &str,
    force_path_style: bool,
    creds: &Creds,
    max_attempts: u32,
    timeout: Duration,
    rt: &tokio::runtime::Runtime,
) -> Client {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http = aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::AwsLc)).build_https();
    let mut b = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .http_client(http.clone())
        .retry_config(RetryConfig::standard().with_max_attempts(max_attempts))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(10).min(timeout))
                .operation_attempt_timeout(timeout)
                .build(),
        )
        .force_path_style(force_path_style);
    b = match creds {
        Creds::Static { access_key_id, secret, session_token } => b.credentials_provider(Credentials::new(
            access_key_id,
            secret.expose(),
            session_token.as_ref().map(|t| t.expose().to_string()),
            None,
            "icicle-s3-source",
        )),
        Creds::DefaultChain { profile } => b.credentials_provider(default_chain(profile.as_deref(), region, http, rt)),
    };
    if let Some(u) = endpoint_url {
        b = b.endpoint_url(u);
    }
    Client::from_conf(b.build())
}

/// Credentials when none are configured: with `profile`, that profile of the shared config and
/// credentials files alone (nothing else is tried: a misspelt profile fails rather than falling
/// through to an instance role); without, the default chain, built on `rt` from a thread of its
/// own (the caller may be inside another runtime). Their STS, SSO and instance-metadata
/// requests go over `http`.
fn default_chain(
    profile: Option<&str>,
    region: &str,
    http: aws_smithy_runtime_api::client::http::SharedHttpClient,
    rt: &tokio::runtime::Runtime,
) -> aws_credential_types::provider::SharedCredentialsProvider {
    use aws_config::default_provider::credentials::DefaultCredentialsChain;
    use aws_config::provider_config::ProviderConfig;
    use aws_credential_types::provider::SharedCredentialsProvider;
    let conf = ProviderConfig::default().with_http_client(http).with_region(Some(Region::new(region.to_string())));
    if let Some(p) = profile {
        return SharedCredentialsProvider::new(
            aws_config::profile::ProfileFileCredentialsProvider::builder().configure(&conf).profile_name(p).build(),
        );
    }
    let builder = DefaultCredentialsChain::builder().configure(conf);
    let handle = rt.handle().clone();
    let chain = std::thread::scope(|s| s.spawn(move || handle.block_on(builder.build())).join())
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    SharedCredentialsProvider::new(chain)
}

/// The name of the split reading bytes `a..b` of the object named `name`.
fn range_name(name: &str, a: u64, b: u64) -> String {
    format!("{name} (bytes {a}..{b})")
}

/// A runtime for the SDK's connections, independent of the caller's.
pub(crate) fn runtime(name: &str) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the S3 client's runtime: {e}"))
}

impl S3Source {
    /// A source with `settings` (the client connects lazily, at the first request).
    pub fn new(settings: Settings) -> Result<S3Source, String> {
        let rt = runtime("icicle-s3")?;
        let client = client(
            settings.endpoint_url.as_deref(),
            &settings.region,
            settings.force_path_style,
            &settings.creds,
            settings.max_attempts,
            settings.timeout,
            &rt,
        );
        Ok(S3Source { client, rt: Some(rt), listed: Mutex::new(HashMap::new()), s: settings })
    }

    /// One listing request of at most one key under the prefix (`icicle config check
    /// --connect`): the bucket answers and the credentials may list it.
    pub fn probe(&self) -> Result<String, S3Error> {
        let target = format!("s3://{}/{}", self.s.bucket, self.s.prefix);
        let page = self
            .rt()
            .block_on(self.client.list_objects_v2().bucket(&self.s.bucket).prefix(&self.s.prefix).max_keys(1).send())
            .map_err(|e| S3Error::from_sdk("listing", &target, e))?;
        Ok(format!(
            "{target}{}: listed ({})",
            self.s.endpoint_url.as_deref().map(|u| format!(" at {u}")).unwrap_or_default(),
            if page.contents().is_empty() { "no object under the prefix" } else { "objects under the prefix" }
        ))
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        // Only `Drop` takes it.
        self.rt.as_ref().expect("the runtime lives as long as the source")
    }

    fn object_name(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.s.bucket)
    }

    fn fail(&self, e: impl std::fmt::Display) -> SourceError {
        SourceError::External(format!("s3 source `{}`: {e}", self.s.id))
    }

    /// Every object under the prefix whose key matches, in key order, with size and ETag.
    async fn list(
        client: Client,
        bucket: String,
        prefix: String,
        keys: Option<glob::Pattern>,
    ) -> Result<Vec<(String, Listed)>, S3Error> {
        let target = format!("s3://{bucket}/{prefix}");
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        // Keys the pattern leaves out only because its `*` does not cross `/`.
        let (mut left_below, mut first_below) = (0u64, String::new());
        loop {
            let page = client
                .list_objects_v2()
                .bucket(&bucket)
                .prefix(&prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| S3Error::from_sdk("listing", &target, e))?;
            for o in page.contents() {
                let Some(key) = o.key() else { continue };
                // Directory markers are not listings.
                if key.ends_with('/') {
                    continue;
                }
                // The rest after the prefix, as a relative path (a prefix without its trailing `/`
                // leaves one at the front).
                let rest = key.get(prefix.len()..).unwrap_or("").trim_start_matches('/');
                if let Some(g) = keys.as_ref().filter(|g| !key_matches(g, rest)) {
                    if matches_across_parts(g, rest) {
                        left_below += 1;
                        if left_below == 1 {
                            first_below = rest.to_string();
                        }
                    }
                    continue;
                }
                let size = u64::try_from(o.size().unwrap_or(0)).map_err(|_| S3Error::Unexpected {
                    op: "listing",
                    target: target.clone(),
                    reason: format!("negative size for `{key}`"),
                })?;
                out.push((key.to_string(), Listed { size, etag: o.e_tag().map(str::to_string) }));
            }
            match (page.is_truncated(), page.next_continuation_token()) {
                (Some(true), Some(t)) => token = Some(t.to_string()),
                (Some(true), None) => {
                    return Err(S3Error::Unexpected {
                        op: "listing",
                        target,
                        reason: "a truncated page without a continuation token".into(),
                    });
                }
                _ => break,
            }
        }
        if left_below > 0 {
            // Patterns match as paths do: `*` stays within one part. A pattern that would have
            // taken these keys were `*` to cross `/` most likely meant to (`**/`).
            tracing::warn!(
                target_prefix = %target,
                pattern = keys.as_ref().map_or("", |k| k.as_str()),
                keys = left_below,
                first = %first_below,
                "keys below a `/` under the prefix are not read: `*` does not cross `/` (write `**/` to read them)"
            );
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Start a GET of `[from, to)` of `key` (the whole object when that is all of it), pinned
    /// to the listed version with `If-Match`.
    fn get(&self, key: &str, from: u64, to: u64, listed: &Listed) -> Result<ByteStream, S3Error> {
        let mut req = self.client.get_object().bucket(&self.s.bucket).key(key);
        if from > 0 || to < listed.size {
            req = req.range(format!("bytes={from}-{}", to - 1));
        }
        if let Some(etag) = &listed.etag {
            req = req.if_match(etag);
        }
        let target = self.object_name(key);
        let ranged = from > 0 || to < listed.size;
        let o = self.rt().block_on(req.send()).map_err(|e| S3Error::from_sdk("reading", &target, e))?;
        // A server that ignored the Range header would hand out the wrong bytes.
        if ranged && !o.content_range().is_some_and(|r| r.starts_with(&format!("bytes {from}-"))) {
            return Err(S3Error::Unexpected {
                op: "reading",
                target,
                reason: format!("asked for bytes {from}-{}, got Content-Range {:?}", to - 1, o.content_range()),
            });
        }
        Ok(o.body)
    }
}

impl Drop for S3Source {
    fn drop(&mut self) {
        // The source may be dropped inside the caller's async context, where a runtime
        // cannot block on its shutdown.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

#[async_trait]
impl Source for S3Source {
    async fn plan(&self) -> Result<Vec<Split>, SourceError> {
        let (client, bucket, prefix, keys) =
            (self.client.clone(), self.s.bucket.clone(), self.s.prefix.clone(), self.s.keys.clone());
        let listed = self
            .rt()
            .spawn(S3Source::list(client, bucket, prefix, keys))
            .await
            .map_err(|e| self.fail(format!("the listing task failed: {e}")))?
            .map_err(|e| self.fail(e))?;
        if listed.is_empty() {
            let filter = self.s.keys.as_ref().map(|k| format!(" matching `{}`", k.as_str())).unwrap_or_default();
            return Err(self.fail(format!("no objects under s3://{}/{}{filter}", self.s.bucket, self.s.prefix)));
        }
        let mut splits = Vec::new();
        let total: u64 = listed.iter().map(|(_, l)| l.size).sum();
        for (key, l) in &listed {
            let name = self.object_name(key);
            if l.size <= self.s.split_bytes {
                splits.push(Split {
                    name,
                    path: PathBuf::from(key),
                    range: None,
                    weight: l.size,
                    scope: None,
                    version: Some(l.version()),
                });
                continue;
            }
            let mut start = 0;
            while start < l.size {
                let end = (start + self.s.split_bytes).min(l.size);
                splits.push(Split {
                    name: range_name(&name, start, end),
                    path: PathBuf::from(key),
                    range: Some((start, end)),
                    weight: end - start,
                    scope: None,
                    version: Some(l.version()),
                });
                start = end;
            }
        }
        tracing::info!(message = "listed S3 objects", source = %self.s.id, bucket = %self.s.bucket, prefix = %self.s.prefix, objects = listed.len(), bytes = total, splits = splits.len());
        if let Ok(mut m) = self.listed.lock() {
            m.extend(listed);
        }
        Ok(splits)
    }

    /// Byte ranges of an object, named as planning names them.
    fn divide(&self, split: &Split, bytes: u64) -> Option<Vec<Split>> {
        let name = self.object_name(split.path.to_str()?);
        let mut parts = icicle_core::text::divide_byte_split(split, bytes);
        for s in parts.iter_mut() {
            if let Some((a, b)) = s.range {
                s.name = range_name(&name, a, b);
            }
        }
        Some(parts)
    }

    fn read(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        let key = split.path.to_str().ok_or_else(|| self.fail(format!("{}: the key is not UTF-8", split.name)))?;
        // The version the plan listed (rank 0's, across ranks), else this source's own listing.
        let listed = match split.version.as_deref().and_then(Listed::of_version) {
            Some(l) => l,
            None => self
                .listed
                .lock()
                .ok()
                .and_then(|m| m.get(key).cloned())
                .ok_or_else(|| self.fail(format!("{}: not listed by this source", split.name)))?,
        };
        let (start, end) = split.range.unwrap_or((0, listed.size));
        let end = end.min(listed.size);
        let input = self.object_name(key);
        if listed.size == 0 {
            out.reject(Reject::not_whole(&input, 0, "the object is empty: a listing part whose producer failed? (its rows are unknown; deletes are withheld)"));
            return Ok(());
        }
        if start >= end {
            return Ok(());
        }
        let layout = &self.s.layout;
        let mut scratch = Scratch::default();
        let mut reported = start;
        let mut row = |line: &[u8], offset: u64, number: Option<u64>| {
            if offset >= reported + PROGRESS_BYTES {
                out.progress(offset - reported);
                reported = offset;
            }
            if line.is_empty() || layout.skips(line, offset) {
                return;
            }
            match layout.parse(line, &mut scratch) {
                Ok(rec) if rec.kind == FileKind::Dir => out.directory(&rec),
                Ok(rec) => out.record_at(&rec, offset),
                Err(reason) => {
                    let at = Reject { line: number, ..Reject::at_offset(&input, offset, reason) };
                    out.reject(at.naming(layout.path_of(line)))
                }
            }
        };
        let mut lines = RangeLines::new(start, end);
        // The next byte to fetch, and where the current request ends.
        let mut next = RangeLines::fetch_from(start);
        let lookahead = (end - start).div_ceil(16).min(LOOKAHEAD_BYTES);
        let mut fetch_end = (end + lookahead).min(listed.size);
        let mut continuation = lookahead.max(1);
        let mut interrupted = 0u32;
        'requests: while !lines.done() {
            let mut body = self.get(key, next, fetch_end, &listed).map_err(|e| self.fail(e))?;
            loop {
                let why = match self.rt().block_on(body.try_next()) {
                    Ok(Some(bytes)) => {
                        let take = (bytes.len() as u64).min(fetch_end - next) as usize;
                        next += take as u64;
                        lines.push(&bytes[..take], &mut row);
                        if let Some(at) = lines.overlong() {
                            return Err(self.fail(format!(
                                "reading {input}: a line of more than {} MiB at byte {at}: not a text listing?",
                                MAX_LINE_BYTES >> 20
                            )));
                        }
                        if lines.done() {
                            // Read the short rest of the answer, so that its connection is reused.
                            while next < fetch_end {
                                match self.rt().block_on(body.try_next()) {
                                    Ok(Some(b)) => next += b.len() as u64,
                                    _ => break,
                                }
                            }
                            break;
                        }
                        if next >= fetch_end {
                            break;
                        }
                        continue;
                    }
                    Ok(None) if next >= fetch_end => break,
                    Ok(None) => format!("the body ended {} bytes early", fetch_end - next),
                    Err(e) => DisplayErrorContext(&e).to_string(),
                };
                // The body broke off: ask again from the next byte (the SDK retries
                // requests, not bodies already streaming).
                interrupted += 1;
                if interrupted >= self.s.max_attempts {
                    return Err(self.fail(format!(
                        "reading {input}: gave up after {interrupted} interrupted downloads, at byte {next}: {why}"
                    )));
                }
                tracing::warn!(message = "S3 download interrupted; resuming", object = %input, byte = next, error = %why);
                continue 'requests;
            }
            if lines.done() {
                break;
            }
            if next >= listed.size {
                // A last line without its newline may be a row cut short (`.../f1024-217.`
                // for `.../f1024-217.txt`): not read, and everything left unknown.
                if let Some((at, line)) = lines.unterminated() {
                    let why = "the last line has no newline: the object was cut short (its rows are unknown; deletes are withheld)";
                    out.reject(Reject { line, ..Reject::not_whole(&input, at, why) });
                }
                break;
            }
            // The range's last line runs past its end: fetch on until it ends.
            fetch_end = (next + continuation).min(listed.size);
            continuation = (continuation * 2).min(CONTINUATION_MAX);
        }
        out.progress(end - reported);
        Ok(())
    }
}

/// Whether the rest of `key` after the listed prefix matches `pattern`, in the dialect of the
/// `tsv` source's paths ([`icicle_core::text::GLOB_OPTIONS`]).
pub fn key_matches(pattern: &glob::Pattern, rest: &str) -> bool {
    pattern.matches_with(rest, icicle_core::text::GLOB_OPTIONS)
}

/// Whether `pattern` would take `rest` if `*` and `?` crossed `/` (what a pattern left out only
/// for that is told, not silently dropped).
pub fn matches_across_parts(pattern: &glob::Pattern, rest: &str) -> bool {
    rest.contains('/')
        && pattern.matches_with(
            rest,
            glob::MatchOptions { require_literal_separator: false, ..icicle_core::text::GLOB_OPTIONS },
        )
}

#[cfg(test)]
mod tests {
    use super::{key_matches, matches_across_parts};

    #[test]
    fn keys_left_out_only_for_a_slash_are_told_apart() {
        let p = |g: &str| glob::Pattern::new(g).unwrap();
        assert!(matches_across_parts(&p("*.csv"), "2026/01/part-0001.csv"));
        assert!(!key_matches(&p("*.csv"), "2026/01/part-0001.csv"));
        assert!(!matches_across_parts(&p("*.csv"), "2026/01/part-0001.tsv"));
        assert!(!matches_across_parts(&p("*.csv"), "part-0001.tsv"));
        assert!(!matches_across_parts(&p("2026/*.csv"), "2027/a.csv"));
    }

    #[test]
    fn keys_match_as_paths_do() {
        for (g, n, m) in [
            ("*.csv", "part-0001.csv", true),
            ("*.csv", "2026/01/part-0001.csv", false),
            ("**/*.csv", "2026/01/part-0001.csv", true),
            ("*/*/*.csv", "2026/01/part-0001.csv", true),
            ("*.csv", "part-0001.csv.gz", false),
            ("*.csv", ".part-0001.csv", false),
            ("part-????.csv", "part-0001.csv", true),
            ("part-????.csv", "part-001.csv", false),
            ("part-[0-4]*.csv", "part-3.csv", true),
            ("part-[0-4]*.csv", "part-5.csv", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("fslist.ne2scan", "fslist.ne2scan", true),
        ] {
            assert_eq!(key_matches(&glob::Pattern::new(g).unwrap(), n), m, "{g} {n}");
        }
    }
}
