//! Uploading objects written row by row (`icicle preprocess`'s parts) to S3, connected and
//! credentialled exactly as the `s3` source is. An object no larger than the multipart
//! threshold is sent with one PutObject when it is finished; a larger one becomes a
//! multipart upload (CreateMultipartUpload, UploadPart as each part fills, with CRC32
//! checksums, then CompleteMultipartUpload), aborted when anything fails or the object is
//! dropped unfinished. Either way the object appears under its key whole or not at all.

use std::path::PathBuf;
use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use icicle_core::ConfigError;

use crate::config::{check_endpoint, credentials, valid_bucket};
use crate::error::S3Error;
use crate::source::{client, runtime};

/// S3's smallest part (every part but the last).
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// S3's largest part.
pub const MAX_PART_BYTES: u64 = 5 << 30;
/// S3's most parts in one upload.
pub const MAX_PARTS: usize = 10_000;

/// Where and how objects are uploaded: the `s3` source's connection keys, and when and in
/// what pieces an object goes as a multipart upload.
#[derive(Debug, Clone)]
pub struct UploadConfig {
    /// The bucket.
    pub bucket: String,
    /// Keys are `<prefix>/<name>` (or `<name>` when empty).
    pub prefix: String,
    /// A non-AWS endpoint (MinIO, Ceph RGW, moto): `http(s)://host:port`.
    pub endpoint_url: Option<String>,
    /// The region requests are signed for.
    pub region: String,
    /// `endpoint/bucket/key` URLs.
    pub force_path_style: bool,
    /// An access key id; its secret from `secret_access_key_env` or `secret_access_key_file`.
    /// Without it, the AWS default chain (environment, profiles, web identity, instance roles).
    pub access_key_id: Option<String>,
    /// The environment variable holding the secret access key.
    pub secret_access_key_env: Option<String>,
    /// The file holding the secret access key (first line).
    pub secret_access_key_file: Option<PathBuf>,
    /// The profile the default chain reads when there is no `access_key_id`.
    pub profile: Option<String>,
    /// Attempts of one request (throttling, 5xx answers, connection errors).
    pub max_attempts: u32,
    /// One attempt's timeout until its answer begins, in seconds.
    pub timeout_secs: f64,
    /// Objects larger than this are sent as multipart uploads.
    pub multipart_threshold: u64,
    /// The size of every part but the last ([`MIN_PART_BYTES`]..=[`MAX_PART_BYTES`]).
    pub part_bytes: u64,
}

impl UploadConfig {
    /// `s3://bucket/prefix` with the defaults of the `s3` source (AWS, `us-east-1`, five
    /// attempts of 60 s) and multipart uploads of 16 MiB parts above 64 MiB.
    pub fn for_url(url: &str) -> Result<UploadConfig, String> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| format!("`{url}` is not an s3://bucket/prefix URL"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        Ok(UploadConfig {
            bucket: bucket.to_string(),
            prefix: prefix.trim_end_matches('/').to_string(),
            endpoint_url: None,
            region: "us-east-1".into(),
            force_path_style: false,
            access_key_id: None,
            secret_access_key_env: None,
            secret_access_key_file: None,
            profile: None,
            max_attempts: 5,
            timeout_secs: 60.0,
            multipart_threshold: 64 << 20,
            part_bytes: 16 << 20,
        })
    }
}

/// Why an uploader could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// A setting is wrong (the key is named).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The client's runtime could not start.
    #[error("{0}")]
    Runtime(String),
}

/// Uploads objects under one bucket and prefix (shared by the threads that write them).
pub struct Uploader {
    client: Client,
    rt: Option<tokio::runtime::Runtime>,
    bucket: String,
    prefix: String,
    threshold: u64,
    part_bytes: u64,
}

impl std::fmt::Debug for Uploader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploader").field("bucket", &self.bucket).field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Uploader {
    /// Check `cfg` and connect (lazily: the first request opens the connection). Errors name
    /// the setting through `invalid` and never carry a secret.
    pub fn new(
        cfg: &UploadConfig,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<Arc<Uploader>, UploadError> {
        if !valid_bucket(&cfg.bucket) {
            return Err(invalid(
                "bucket",
                format!("`{}` is not an S3 bucket name (3-63 lowercase letters, digits, dots and hyphens)", cfg.bucket),
            )
            .into());
        }
        if let Some(u) = &cfg.endpoint_url {
            check_endpoint(u).map_err(|e| invalid("endpoint_url", e))?;
        }
        if cfg.region.trim().is_empty() {
            return Err(invalid("region", "must not be empty".into()).into());
        }
        if cfg.max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1".into()).into());
        }
        if !(cfg.timeout_secs.is_finite() && cfg.timeout_secs > 0.0) {
            return Err(invalid("timeout_secs", "must be positive".into()).into());
        }
        if !(MIN_PART_BYTES..=MAX_PART_BYTES).contains(&cfg.part_bytes) {
            return Err(invalid(
                "part_bytes",
                format!("{} is outside S3's part sizes ({MIN_PART_BYTES}..={MAX_PART_BYTES} bytes)", cfg.part_bytes),
            )
            .into());
        }
        let creds = credentials(
            cfg.access_key_id.as_deref(),
            cfg.secret_access_key_env.as_deref(),
            cfg.secret_access_key_file.as_deref(),
            cfg.profile.as_deref(),
            &invalid,
        )?;
        let endpoint = cfg.endpoint_url.as_deref().map(|u| u.trim_end_matches('/'));
        let timeout = icicle_core::time::secs(cfg.timeout_secs);
        let rt = runtime("icicle-s3-upload").map_err(UploadError::Runtime)?;
        let client = client(endpoint, &cfg.region, cfg.force_path_style, &creds, cfg.max_attempts, timeout, &rt);
        Ok(Arc::new(Uploader {
            client,
            rt: Some(rt),
            bucket: cfg.bucket.clone(),
            prefix: cfg.prefix.trim_end_matches('/').to_string(),
            threshold: cfg.multipart_threshold,
            part_bytes: cfg.part_bytes,
        }))
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        // Only `Drop` takes it.
        self.rt.as_ref().expect("the runtime lives as long as the uploader")
    }

    /// The key of the object called `name`.
    pub fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.prefix)
        }
    }

    /// `s3://bucket/key` of the object called `name`.
    pub fn url(&self, name: &str) -> String {
        format!("s3://{}/{}", self.bucket, self.key(name))
    }

    /// Up to 1,000 keys of objects whose names start with `name_prefix` (one ListObjectsV2:
    /// it also shows early that the bucket is there and the credentials work).
    pub fn existing(&self, name_prefix: &str) -> Result<Vec<String>, S3Error> {
        let prefix = self.key(name_prefix);
        let target = format!("s3://{}/{prefix}", self.bucket);
        let page = self
            .rt()
            .block_on(self.client.list_objects_v2().bucket(&self.bucket).prefix(&prefix).send())
            .map_err(|e| S3Error::from_sdk("listing", &target, e))?;
        Ok(page.contents().iter().filter_map(|o| o.key().map(str::to_string)).collect())
    }

    /// Start writing the object called `name`; nothing is visible until
    /// [`ObjectUpload::finish`].
    pub fn object(self: &Arc<Self>, name: &str) -> ObjectUpload {
        ObjectUpload {
            up: self.clone(),
            key: self.key(name),
            buf: Vec::new(),
            upload_id: None,
            parts: Vec::new(),
            bytes: 0,
        }
    }
}

/// An uploaded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// Its key.
    pub key: String,
    /// Its size.
    pub bytes: u64,
    /// The parts of its multipart upload (0: one PutObject).
    pub parts: u32,
}

/// One object being written: bytes are buffered and, once the object is larger than the
/// threshold, sent part by part. Dropped unfinished, its multipart upload is aborted.
#[derive(Debug)]
pub struct ObjectUpload {
    up: Arc<Uploader>,
    key: String,
    buf: Vec<u8>,
    upload_id: Option<String>,
    parts: Vec<CompletedPart>,
    bytes: u64,
}

impl ObjectUpload {
    fn target(&self) -> String {
        format!("s3://{}/{}", self.up.bucket, self.key)
    }

    /// Append `data`; full parts of a multipart upload are sent now.
    pub fn write(&mut self, data: &[u8]) -> Result<(), S3Error> {
        self.buf.extend_from_slice(data);
        self.bytes += data.len() as u64;
        let part = self.up.part_bytes as usize;
        while self.buf.len() >= part && (self.upload_id.is_some() || self.bytes > self.up.threshold) {
            self.send_part(part)?;
        }
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Send the first `n` buffered bytes as the next part (starting the upload if needed).
    fn send_part(&mut self, n: usize) -> Result<(), S3Error> {
        let target = self.target();
        let up = self.up.clone();
        if self.upload_id.is_none() {
            let req = up
                .client
                .create_multipart_upload()
                .bucket(&up.bucket)
                .key(&self.key)
                .checksum_algorithm(ChecksumAlgorithm::Crc32);
            let out =
                up.rt().block_on(req.send()).map_err(|e| S3Error::from_sdk("starting the upload of", &target, e))?;
            let id = out.upload_id().ok_or_else(|| S3Error::Unexpected {
                op: "starting the upload of",
                target: target.clone(),
                reason: "no upload id".into(),
            })?;
            self.upload_id = Some(id.to_string());
        }
        if self.parts.len() >= MAX_PARTS {
            return Err(S3Error::Unexpected {
                op: "uploading",
                target,
                reason: format!("more than {MAX_PARTS} parts: raise the part size"),
            });
        }
        let rest = self.buf.split_off(n.min(self.buf.len()));
        let body = std::mem::replace(&mut self.buf, rest);
        let number = self.parts.len() as i32 + 1;
        let req = up
            .client
            .upload_part()
            .bucket(&up.bucket)
            .key(&self.key)
            .upload_id(self.upload_id.as_deref().unwrap_or_default())
            .part_number(number)
            .checksum_algorithm(ChecksumAlgorithm::Crc32)
            .body(ByteStream::from(body));
        let out = up.rt().block_on(req.send()).map_err(|e| S3Error::from_sdk("uploading a part of", &target, e))?;
        let mut part = CompletedPart::builder().part_number(number).set_e_tag(out.e_tag().map(str::to_string));
        if let Some(c) = out.checksum_crc32() {
            part = part.checksum_crc32(c);
        }
        self.parts.push(part.build());
        Ok(())
    }

    /// Send what is left and make the object visible under its key.
    pub fn finish(mut self) -> Result<Uploaded, S3Error> {
        let target = self.target();
        let up = self.up.clone();
        if self.upload_id.is_none() && self.bytes <= up.threshold {
            let body = std::mem::take(&mut self.buf);
            let req = up.client.put_object().bucket(&up.bucket).key(&self.key).body(ByteStream::from(body));
            up.rt().block_on(req.send()).map_err(|e| S3Error::from_sdk("uploading", &target, e))?;
            return Ok(Uploaded { key: self.key.clone(), bytes: self.bytes, parts: 0 });
        }
        let part = up.part_bytes as usize;
        while self.buf.len() > part {
            self.send_part(part)?;
        }
        if !self.buf.is_empty() || self.parts.is_empty() {
            self.send_part(self.buf.len())?;
        }
        let parts = std::mem::take(&mut self.parts);
        let n = parts.len() as u32;
        let id = self.upload_id.clone().unwrap_or_default();
        let req = up
            .client
            .complete_multipart_upload()
            .bucket(&up.bucket)
            .key(&self.key)
            .upload_id(&id)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build());
        match up.rt().block_on(req.send()) {
            Ok(_) => {}
            // A 200 answer the SDK cannot read (moto 5.2 names its root element
            // `CompleteMultipartUploadResponse`, getmoto/moto#10055): the upload is complete
            // if the object is there with this upload's size and ETag.
            Err(aws_sdk_s3::error::SdkError::ServiceError(e))
                if e.raw().status().as_u16() == 200 && self.completed(n)? =>
            {
                tracing::debug!(message = "unreadable answer to CompleteMultipartUpload; the object is complete", object = %target, error = ?e.err());
            }
            Err(e) => return Err(S3Error::from_sdk("completing the upload of", &target, e)),
        }
        self.upload_id = None;
        Ok(Uploaded { key: self.key.clone(), bytes: self.bytes, parts: n })
    }

    /// Whether the object is there with the size written and a multipart ETag of `parts`.
    fn completed(&self, parts: u32) -> Result<bool, S3Error> {
        let target = self.target();
        let head = self.up.client.head_object().bucket(&self.up.bucket).key(&self.key);
        let o = self.up.rt().block_on(head.send()).map_err(|e| S3Error::from_sdk("checking", &target, e))?;
        let etag = o.e_tag().unwrap_or_default().trim_matches('"');
        Ok(o.content_length() == i64::try_from(self.bytes).ok() && etag.ends_with(&format!("-{parts}")))
    }
}

impl Drop for ObjectUpload {
    fn drop(&mut self) {
        // Unfinished (an error, a failed run): parts already sent would otherwise be kept,
        // and billed, by the bucket until a lifecycle rule removes them.
        if let Some(id) = self.upload_id.take() {
            let req = self.up.client.abort_multipart_upload().bucket(&self.up.bucket).key(&self.key).upload_id(id);
            if let Err(e) = self.up.rt().block_on(req.send()) {
                let e = S3Error::from_sdk("aborting the upload of", &self.target(), e);
                tracing::warn!(message = "could not abort a multipart upload", error = %e);
            }
        }
    }
}
