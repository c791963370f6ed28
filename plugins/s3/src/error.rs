//! What went wrong talking to S3. Messages name the operation, the object (or bucket and
//! prefix) and S3's error code and HTTP status; they never carry a credential.

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// An S3 request that failed.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    /// S3 answered with an error (`NoSuchBucket`, `NoSuchKey`, `AccessDenied`,
    /// `InvalidAccessKeyId`, `SignatureDoesNotMatch`, `SlowDown`...).
    #[error("{op} {target}: {code} (HTTP {status}): {message}{hint}")]
    Service {
        /// The operation (`listing`, `reading`, ...).
        op: &'static str,
        /// `s3://bucket/key` or `s3://bucket/prefix`.
        target: String,
        /// S3's error code.
        code: String,
        /// The HTTP status.
        status: u16,
        /// S3's message.
        message: String,
        /// What the code usually means here, or empty.
        hint: &'static str,
    },
    /// No answer: connection refused or reset, DNS, TLS, a timeout.
    #[error("{op} {target}: {reason}")]
    Transport {
        /// The operation.
        op: &'static str,
        /// `s3://bucket/key` or `s3://bucket/prefix`.
        target: String,
        /// The error chain.
        reason: String,
    },
    /// No credentials: nothing configured, and nothing found by the default chain.
    #[error("{op} {target}: no credentials: {reason} (configure access_key_id with a secret, a profile, or the environment's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")]
    Credentials {
        /// The operation.
        op: &'static str,
        /// `s3://bucket/key` or `s3://bucket/prefix`.
        target: String,
        /// What each provider of the chain said.
        reason: String,
    },
    /// S3 answered with something the source cannot use.
    #[error("{op} {target}: {reason}")]
    Unexpected {
        /// The operation.
        op: &'static str,
        /// `s3://bucket/key` or `s3://bucket/prefix`.
        target: String,
        /// What was wrong.
        reason: String,
    },
}

impl S3Error {
    /// Describe a failed SDK call of operation `op` on `target`.
    pub fn from_sdk<E, R>(op: &'static str, target: &str, err: SdkError<E, R>) -> S3Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + HasStatus + 'static,
    {
        let status = err.raw_response().map(|r| r.status_code());
        match (&err, err.code()) {
            (SdkError::ServiceError(_), Some(code)) => {
                let code = code.to_string();
                let hint = hint(&code);
                S3Error::Service {
                    op,
                    target: target.to_string(),
                    status: status.unwrap_or(0),
                    message: err.message().unwrap_or("").to_string(),
                    code,
                    hint,
                }
            }
            (SdkError::ServiceError(_), None) => {
                // HEAD-like answers carry no body; name the status the way S3 would.
                let code = match status {
                    Some(403) => "AccessDenied",
                    Some(404) => "NotFound",
                    Some(412) => "PreconditionFailed",
                    Some(s) if s >= 500 => "ServerError",
                    _ => "UnknownError",
                }
                .to_string();
                let hint = hint(&code);
                S3Error::Service {
                    op,
                    target: target.to_string(),
                    status: status.unwrap_or(0),
                    message: String::new(),
                    code,
                    hint,
                }
            }
            _ => match credentials_error(&err) {
                Some(reason) => S3Error::Credentials { op, target: target.to_string(), reason },
                None => {
                    S3Error::Transport { op, target: target.to_string(), reason: DisplayErrorContext(&err).to_string() }
                }
            },
        }
    }

    /// S3's error code, when S3 answered.
    pub fn code(&self) -> Option<&str> {
        match self {
            S3Error::Service { code, .. } => Some(code),
            _ => None,
        }
    }
}

fn hint(code: &str) -> &'static str {
    match code {
        "PreconditionFailed" => " (the object changed after it was listed; run the snapshot again)",
        "InvalidAccessKeyId" | "SignatureDoesNotMatch" => " (check the access key id and the secret access key)",
        "AccessDenied" => " (the credentials may not read this bucket)",
        _ => "",
    }
}

/// The HTTP status of a raw response (implemented for the SDK's response type).
pub trait HasStatus {
    /// The status code.
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

/// What the credentials chain said, when `err` failed for want of credentials.
fn credentials_error(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut e = err.source();
    while let Some(cause) = e {
        if let Some(c) = cause.downcast_ref::<aws_credential_types::provider::error::CredentialsError>() {
            return Some(icicle_core::error::chain(c));
        }
        e = cause.source();
    }
    None
}
