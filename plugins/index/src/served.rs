//! An `index` sink whose directory a running `icicle serve` owns: the writer is serve's, so
//! the sink publishes through serve's Unix socket (the socket's path is in the directory's
//! `serve-socket` file while serve runs) with the same ingests and subject deletes the
//! `globus` sink sends. Serve commits each request before it answers, so a delivery that
//! returns `Ok` is durable; a refusal or a broken connection is an error the runtime retries,
//! and nothing is acknowledged before.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;

use icicle_core::batch::DocumentBatch;
use icicle_core::error::{Retry, SinkError};
use icicle_core::traits::Sink;

/// The file in an index directory naming the socket of the `icicle serve` that owns it.
pub const SERVE_SOCKET_FILE: &str = "serve-socket";

/// The socket named in `dir`'s `serve-socket` file, when there is one and something listens
/// on it.
pub fn serve_socket(dir: &Path) -> Option<PathBuf> {
    let named = std::fs::read_to_string(dir.join(SERVE_SOCKET_FILE)).ok()?;
    let path = PathBuf::from(named.trim_end_matches('\n'));
    std::os::unix::net::UnixStream::connect(&path).ok().map(|_| path)
}

/// The sink publishing through a running `icicle serve`.
pub struct ServedIndexSink {
    id: String,
    socket: PathBuf,
    client: reqwest::Client,
    index_id: String,
}

impl ServedIndexSink {
    /// A sink for the serve listening on `socket` (the index id is asked of it at the first
    /// delivery).
    pub fn new(id: &str, socket: PathBuf) -> Result<ServedIndexSink, String> {
        let client = reqwest::Client::builder()
            .unix_socket(socket.clone())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(ServedIndexSink { id: id.to_string(), socket, client, index_id: String::new() })
    }

    fn remote(&self, reason: String, retry: Retry) -> SinkError {
        SinkError::Remote {
            sink: self.id.clone(),
            reason: format!("icicle serve at unix:{}: {reason}", self.socket.display()),
            retry,
        }
    }

    /// The id of serve's index, from `GET /v1/index_list` (once).
    async fn index_id(&mut self) -> Result<String, SinkError> {
        if self.index_id.is_empty() {
            let resp = self
                .client
                .get("http://localhost/v1/index_list")
                .send()
                .await
                .map_err(|e| self.remote(e.to_string(), Retry::WithBackoff))?;
            let bytes = resp.bytes().await.map_err(|e| self.remote(e.to_string(), Retry::WithBackoff))?;
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            self.index_id = v["index_list"][0]["id"]
                .as_str()
                .ok_or_else(|| self.remote(format!("`index_list` names no index: {v}"), Retry::NoRetry))?
                .to_string();
        }
        Ok(self.index_id.clone())
    }

    async fn post(&mut self, what: &str, body: Vec<u8>) -> Result<(), SinkError> {
        let url = format!("http://localhost/v1/index/{}/{what}", self.index_id().await?);
        let remote = |reason: String, retry| self.remote(reason, retry);
        let resp = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| remote(e.to_string(), Retry::WithBackoff))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let text = resp.text().await.unwrap_or_default();
        // A refusal of what was sent (4xx) will be refused again; the rest may pass later.
        let retry =
            if status.is_client_error() && status.as_u16() != 429 { Retry::NoRetry } else { Retry::WithBackoff };
        Err(remote(format!("{status}: {}", text.chars().take(300).collect::<String>()), retry))
    }
}

/// A GIngest document (`GMetaList`) of `entries` (GMetaEntry JSON each).
fn ingest_body<'a>(entries: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut body = br#"{"ingest_type":"GMetaList","ingest_data":{"gmeta":["#.to_vec();
    for (i, e) in entries.enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(e);
    }
    body.extend_from_slice(b"]}}");
    body
}

#[async_trait]
impl Sink for ServedIndexSink {
    async fn deliver(&mut self, batch: &DocumentBatch) -> Result<(), SinkError> {
        match batch {
            DocumentBatch::Ingest(entries) => self.post("ingest", ingest_body(entries.entries())).await,
            DocumentBatch::Delete(subjects) => {
                let body = serde_json::to_vec(&serde_json::json!({ "subjects": subjects }))
                    .map_err(|e| SinkError::Io { sink: self.id.clone(), reason: e.to_string() })?;
                self.post("batch_delete_by_subject", body).await
            }
        }
    }

    async fn sync(&mut self) -> Result<(), SinkError> {
        // Serve answered each delivery only once it was committed.
        Ok(())
    }

    fn receipt(&self) -> Option<serde_json::Value> {
        None
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ingest_body_is_a_gmeta_list_of_the_entries() {
        let body = ingest_body([br#"{"subject":"/a"}"#.as_slice(), br#"{"subject":"/b"}"#.as_slice()].into_iter());
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["ingest_data"]["gmeta"][1]["subject"], "/b");
        assert_eq!(v["ingest_type"], "GMetaList");
    }
}
