//! Amazon MSK's IAM access control for librdkafka clients: SASL/OAUTHBEARER with a token that
//! is a SigV4-presigned `kafka-cluster:Connect` URL, as AWS's own signer libraries make it
//! (aws-msk-iam-sasl-signer-python `MSKAuthTokenProvider.py`, -go
//! `signer/msk_auth_token_provider.go`, -js `src/getMSKAuthToken.ts`, -net
//! `AWSMSKAuthTokenGenerator.cs`): `GET https://kafka.<region>.amazonaws.com/?Action=kafka-cluster:Connect`
//! signed for service `kafka-cluster` with only the `host` header, the credentials' session
//! token in `X-Amz-Security-Token`, `X-Amz-Expires=900`, then a `User-Agent` parameter added
//! after signing, the whole URL base64url-encoded without padding. The token's expiry handed to
//! librdkafka is the signing time plus the expiry, in milliseconds since the epoch (rust-rdkafka's
//! `OAuthToken::lifetime_ms`); librdkafka refreshes it at 80 % of its life.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use serde::Deserialize;

/// The signing name of MSK's IAM access control.
pub const SIGNING_NAME: &str = "kafka-cluster";
/// How long a token is valid (the signers' `DEFAULT_TOKEN_EXPIRY_SECONDS`).
pub const TOKEN_EXPIRY: Duration = Duration::from_secs(900);

/// `[connection] aws_msk_iam = { region = "...", profile = "..." }`: sign in to MSK with IAM.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MskIam {
    /// The cluster's AWS region.
    pub region: String,
    /// Take credentials from this `~/.aws` profile alone; without it, the AWS default chain
    /// (the environment, `AWS_PROFILE` or `default`, web identity, ECS and instance roles).
    #[serde(default)]
    pub profile: Option<String>,
}

/// Why no token could be made.
#[derive(Debug, thiserror::Error)]
pub enum MskTokenError {
    /// The default chain found no credentials, or a provider failed.
    #[error("no AWS credentials for MSK IAM: {0}")]
    Credentials(String),
    /// Signing failed (a malformed region, a clock before 1970).
    #[error("signing the MSK IAM token: {0}")]
    Signing(String),
}

/// Makes MSK IAM tokens from the AWS default credential chain (or only the named profile).
pub struct MskTokenProvider {
    region: String,
    credentials: Arc<dyn ProvideCredentials>,
    /// Taken by `Drop` only (shut down in the background: the provider may be dropped
    /// inside another runtime, where a blocking shutdown panics).
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for MskTokenProvider {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for MskTokenProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MskTokenProvider").field("region", &self.region).finish_non_exhaustive()
    }
}

impl MskTokenProvider {
    /// A provider for `cfg`: with `profile`, that profile of the shared config and credentials
    /// files alone (keys, `role_arn`, `credential_process`, SSO: nothing else is tried, so a
    /// misspelt profile fails rather than falling through to an instance role); without, the
    /// default chain. Credentials are asked for at each token.
    pub fn new(cfg: &MskIam) -> Result<MskTokenProvider, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the MSK token provider's runtime: {e}"))?;
        let region = aws_config::Region::new(cfg.region.clone());
        let credentials: Arc<dyn ProvideCredentials> = match &cfg.profile {
            Some(p) => {
                let conf = aws_config::provider_config::ProviderConfig::default().with_region(Some(region));
                Arc::new(
                    aws_config::profile::ProfileFileCredentialsProvider::builder()
                        .configure(&conf)
                        .profile_name(p)
                        .build(),
                )
            }
            None => {
                let chain =
                    aws_config::default_provider::credentials::DefaultCredentialsChain::builder().region(region);
                Arc::new(on_own_thread(|| rt.block_on(chain.build())))
            }
        };
        Ok(MskTokenProvider { region: cfg.region.clone(), credentials, rt: Some(rt) })
    }

    /// A token signed now, and when it expires (milliseconds since the epoch). Runs on a thread
    /// of its own: librdkafka's refresh may come on a thread that drives another runtime.
    pub fn token(&self) -> Result<(String, i64), MskTokenError> {
        let rt = self.rt.as_ref().ok_or_else(|| MskTokenError::Credentials("the provider is shut down".into()))?;
        let creds = on_own_thread(|| rt.block_on(self.credentials.provide_credentials()))
            .map_err(|e| MskTokenError::Credentials(icicle_core::error::chain(&e)))?;
        let (token, expires_ms) = sign_token(&self.region, &creds, SystemTime::now())?;
        // Not past the credentials' own expiry (temporary role credentials).
        let creds_ms = creds
            .expiry()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(i64::MAX, |d| d.as_millis() as i64);
        Ok((token, expires_ms.min(creds_ms)))
    }
}

/// Run `f` on a scoped thread of its own and return what it returned.
fn on_own_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The MSK IAM token for `region` signed with `creds` at `now`, and its expiry in
/// milliseconds since the epoch.
pub fn sign_token(region: &str, creds: &Credentials, now: SystemTime) -> Result<(String, i64), MskTokenError> {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings};
    use base64::Engine;
    let signing = |e: &dyn std::fmt::Display| MskTokenError::Signing(e.to_string());
    let host = format!("kafka.{region}.amazonaws.com");
    let url = format!("https://{host}/?Action=kafka-cluster%3AConnect");
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(TOKEN_EXPIRY);
    let identity = creds.clone().into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SIGNING_NAME)
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| signing(&e))?
        .into();
    let request = SignableRequest::new("GET", &url, std::iter::once(("host", host.as_str())), SignableBody::Bytes(&[]))
        .map_err(|e| signing(&e))?;
    let (instructions, _) = sign(request, &params).map_err(|e| signing(&e))?.into_parts();
    let mut req = http::Request::builder().method("GET").uri(&url).body(()).map_err(|e| signing(&e))?;
    instructions.apply_to_request_http1x(&mut req);
    let signed = format!("{}&User-Agent=icicle%2F{}", req.uri(), env!("CARGO_PKG_VERSION"));
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signed.as_bytes());
    let signed_at = now.duration_since(SystemTime::UNIX_EPOCH).map_err(|e| signing(&e))?;
    // X-Amz-Date has whole seconds: the expiry counts from there, as the signers' do.
    let expires_ms = (signed_at.as_secs() + TOKEN_EXPIRY.as_secs()) as i64 * 1000;
    Ok((token, expires_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(token: &str) -> String {
        use base64::Engine;
        String::from_utf8(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).unwrap()).unwrap()
    }

    #[test]
    fn the_token_is_the_presigned_connect_url() {
        let creds = Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            Some("SESSION/TOKEN+x".into()),
            None,
            "t",
        );
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
        let (token, expires) = sign_token("us-west-2", &creds, at).unwrap();
        assert!(!token.contains('=') && !token.contains('+') && !token.contains('/'), "{token}");
        let url = decoded(&token);
        assert!(url.starts_with("https://kafka.us-west-2.amazonaws.com/?Action=kafka-cluster%3AConnect&"), "{url}");
        for part in [
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Credential=AKIDEXAMPLE%2F20260101%2Fus-west-2%2Fkafka-cluster%2Faws4_request",
            "X-Amz-Date=20260101T000000Z",
            "X-Amz-Expires=900",
            "X-Amz-SignedHeaders=host",
            "X-Amz-Security-Token=SESSION%2FTOKEN%2Bx",
            "X-Amz-Signature=",
        ] {
            assert!(url.contains(part), "{part} in {url}");
        }
        assert!(url.ends_with(&format!("&User-Agent=icicle%2F{}", env!("CARGO_PKG_VERSION"))), "{url}");
        assert_eq!(expires, (1_767_225_600 + 900) * 1000);
        // The same inputs, the same token; another second, another signature.
        assert_eq!(sign_token("us-west-2", &creds, at).unwrap().0, token);
        assert_ne!(sign_token("us-west-2", &creds, at + Duration::from_secs(1)).unwrap().0, token);
    }

    /// Built and dropped inside another runtime (as a Kafka component is, at the end of a run):
    /// no panic, with or without a profile.
    #[test]
    fn a_provider_can_be_made_and_dropped_inside_a_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        for profile in [None, Some("icicle-absent".to_string())] {
            rt.block_on(async {
                let p =
                    MskTokenProvider::new(&MskIam { region: "us-east-1".into(), profile: profile.clone() }).unwrap();
                if profile.is_some() {
                    // A profile that is not there fails, naming why; nothing else is tried.
                    std::env::set_var("AWS_CONFIG_FILE", "/nonexistent/icicle-test-aws-config");
                    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/icicle-test-aws-credentials");
                    let e = p.token().unwrap_err().to_string();
                    assert!(e.starts_with("no AWS credentials for MSK IAM"), "{e}");
                }
                drop(p);
            });
        }
    }
}
