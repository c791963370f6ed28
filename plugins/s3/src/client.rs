//! [`ObjectStore`]: a small blocking S3 client for tests, demos and tools (make a bucket,
//! upload, read, delete and list objects and unfinished uploads), configured like the source.

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;

use icicle_core::secret::Secret;

use crate::error::S3Error;
use crate::source::{client, runtime, Creds};

/// A blocking S3 client with its own runtime.
pub struct ObjectStore {
    client: Client,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectStore")
    }
}

impl ObjectStore {
    /// A client of the S3-compatible server at `endpoint_url` (path-style URLs, region
    /// `us-east-1`, one attempt per request).
    pub fn connect(endpoint_url: &str, access_key_id: &str, secret_access_key: &str) -> Result<ObjectStore, String> {
        let creds = Creds::Static {
            access_key_id: access_key_id.to_string(),
            secret: Secret::new(secret_access_key),
            session_token: None,
        };
        let rt = runtime("icicle-s3-store")?;
        let client = client(Some(endpoint_url), "us-east-1", true, &creds, 1, Duration::from_secs(60), &rt);
        Ok(ObjectStore { client, rt })
    }

    /// Create `bucket`.
    pub fn create_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        let target = format!("s3://{bucket}");
        self.rt
            .block_on(self.client.create_bucket().bucket(bucket).send())
            .map_err(|e| S3Error::from_sdk("creating", &target, e))?;
        Ok(())
    }

    /// Upload `body` as `key`.
    pub fn put(&self, bucket: &str, key: &str, body: Vec<u8>) -> Result<(), S3Error> {
        let target = format!("s3://{bucket}/{key}");
        self.rt
            .block_on(self.client.put_object().bucket(bucket).key(key).body(ByteStream::from(body)).send())
            .map_err(|e| S3Error::from_sdk("uploading", &target, e))?;
        Ok(())
    }

    /// The object `key`: its bytes and its ETag (a multipart upload's ends in `-<parts>`).
    pub fn get(&self, bucket: &str, key: &str) -> Result<(Vec<u8>, Option<String>), S3Error> {
        let target = format!("s3://{bucket}/{key}");
        let o = self
            .rt
            .block_on(self.client.get_object().bucket(bucket).key(key).send())
            .map_err(|e| S3Error::from_sdk("reading", &target, e))?;
        let etag = o.e_tag().map(str::to_string);
        let body = self.rt.block_on(o.body.collect()).map_err(|e| S3Error::Transport {
            op: "reading",
            target,
            reason: e.to_string(),
        })?;
        Ok((body.into_bytes().to_vec(), etag))
    }

    /// The keys of the multipart uploads in `bucket` that were neither completed nor aborted.
    pub fn unfinished_uploads(&self, bucket: &str) -> Result<Vec<String>, S3Error> {
        let target = format!("s3://{bucket}");
        let out = self
            .rt
            .block_on(self.client.list_multipart_uploads().bucket(bucket).send())
            .map_err(|e| S3Error::from_sdk("listing uploads in", &target, e))?;
        Ok(out.uploads().iter().filter_map(|u| u.key().map(str::to_string)).collect())
    }

    /// Delete `key`.
    pub fn delete(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        let target = format!("s3://{bucket}/{key}");
        self.rt
            .block_on(self.client.delete_object().bucket(bucket).key(key).send())
            .map_err(|e| S3Error::from_sdk("deleting", &target, e))?;
        Ok(())
    }

    /// The keys under `prefix` (first page, up to 1,000).
    pub fn keys(&self, bucket: &str, prefix: &str) -> Result<Vec<String>, S3Error> {
        let target = format!("s3://{bucket}/{prefix}");
        let page = self
            .rt
            .block_on(self.client.list_objects_v2().bucket(bucket).prefix(prefix).send())
            .map_err(|e| S3Error::from_sdk("listing", &target, e))?;
        Ok(page.contents().iter().filter_map(|o| o.key().map(str::to_string)).collect())
    }
}
