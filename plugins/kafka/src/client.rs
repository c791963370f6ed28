//! Connection settings shared by the Kafka sink and the GPFS source: the brokers, security
//! settings passed through to librdkafka (SASL_SSL with SCRAM or OAUTHBEARER, a CA file, as
//! Amazon MSK needs), and secrets read from the environment or files, never from the config
//! text and never logged.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use icicle_core::registry::BuildContext;
use icicle_core::ConfigError;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use serde::Deserialize;
use tokio::sync::watch;

/// The connection part of a Kafka component's configuration.
#[derive(Deserialize, Clone, Default)]
pub struct KafkaConnection {
    /// `host:port[,host:port...]`.
    pub bootstrap: String,
    /// `PLAINTEXT` (default), `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    #[serde(default)]
    pub security_protocol: Option<String>,
    /// `SCRAM-SHA-512`, `SCRAM-SHA-256`, `PLAIN` or `OAUTHBEARER`.
    #[serde(default)]
    pub sasl_mechanism: Option<String>,
    /// The SASL user name (`sasl.username`).
    #[serde(default)]
    pub sasl_username: Option<String>,
    /// The environment variable holding the SASL password.
    #[serde(default)]
    pub sasl_password_env: Option<String>,
    /// A file holding the SASL password (first line).
    #[serde(default)]
    pub sasl_password_file: Option<PathBuf>,
    /// CA certificate bundle for SSL.
    #[serde(default)]
    pub ssl_ca_location: Option<PathBuf>,
    /// Further librdkafka properties (not secrets: use `secret_properties`).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// librdkafka properties whose values are secrets: `"env:VAR"` or `"file:/path"`
    /// (e.g. `"sasl.oauthbearer.client.secret" = "env:ICICLE_OIDC_SECRET"`).
    #[serde(default)]
    pub secret_properties: BTreeMap<String, String>,
    /// Amazon MSK's IAM access control: `{ region = "us-east-1", profile = "..." }` (SASL_SSL
    /// with OAUTHBEARER, tokens signed with the AWS default credential chain; see [`crate::msk`]).
    #[serde(default)]
    pub aws_msk_iam: Option<crate::msk::MskIam>,
}

impl std::fmt::Debug for KafkaConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets are only named by where they come from.
        f.debug_struct("KafkaConnection")
            .field("bootstrap", &self.bootstrap)
            .field("security_protocol", &self.security_protocol)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field("secret_properties", &self.secret_properties.keys().collect::<Vec<_>>())
            .field("aws_msk_iam", &self.aws_msk_iam)
            .finish()
    }
}

/// Read a secret from `env:VAR` or `file:/path`.
fn secret(spec: &str) -> Result<String, String> {
    icicle_core::secret::from_spec(spec).map(|s| s.expose().to_string())
}

impl KafkaConnection {
    /// The librdkafka client configuration; errors name the offending key.
    pub fn client_config(&self, ctx: &BuildContext<'_>) -> Result<ClientConfig, ConfigError> {
        self.client_config_with(|key, reason| ctx.invalid(key, reason))
    }

    /// [`KafkaConnection::client_config`] with a custom error constructor (tests, tools).
    pub fn client_config_with(
        &self,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<ClientConfig, ConfigError> {
        if self.bootstrap.trim().is_empty() {
            return Err(invalid("bootstrap", "give the brokers as host:port[,host:port]".into()));
        }
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in &self.properties {
            if icicle_core::secret::holds_secret_value(k) {
                return Err(invalid(
                    &format!("properties.\"{k}\""),
                    "looks like a secret: put it in `secret_properties` as env:VAR or file:/path".into(),
                ));
            }
            c.set(k, v);
        }
        if let Some(p) = &self.security_protocol {
            c.set("security.protocol", p);
        }
        if let Some(m) = &self.sasl_mechanism {
            c.set("sasl.mechanism", m);
        }
        if let Some(u) = &self.sasl_username {
            c.set("sasl.username", u);
        }
        match (&self.sasl_password_env, &self.sasl_password_file) {
            (Some(_), Some(_)) => {
                return Err(invalid("sasl_password_env", "give either sasl_password_env or sasl_password_file".into()))
            }
            (Some(v), None) => {
                c.set("sasl.password", secret(&format!("env:{v}")).map_err(|e| invalid("sasl_password_env", e))?);
            }
            (None, Some(f)) => {
                c.set(
                    "sasl.password",
                    secret(&format!("file:{}", f.display())).map_err(|e| invalid("sasl_password_file", e))?,
                );
            }
            (None, None) => {}
        }
        if let Some(ca) = &self.ssl_ca_location {
            c.set("ssl.ca.location", ca.display().to_string());
        }
        for (k, spec) in &self.secret_properties {
            c.set(k, secret(spec).map_err(|e| invalid(&format!("secret_properties.\"{k}\""), e))?);
        }
        if let Some(iam) = &self.aws_msk_iam {
            self.msk_iam_config(iam, &mut c, &invalid)?;
        }
        Ok(c)
    }

    /// MSK IAM: OAUTHBEARER over SASL_SSL (unless `security_protocol` says otherwise), with
    /// nothing that would make another mechanism or token source.
    fn msk_iam_config(
        &self,
        iam: &crate::msk::MskIam,
        c: &mut ClientConfig,
        invalid: &impl Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if iam.region.trim().is_empty() {
            return Err(invalid("aws_msk_iam.region", "give the cluster's AWS region".into()));
        }
        if self.sasl_mechanism.as_deref().is_some_and(|m| m != "OAUTHBEARER") {
            return Err(invalid(
                "sasl_mechanism",
                "aws_msk_iam signs in with OAUTHBEARER: leave sasl_mechanism out".into(),
            ));
        }
        if self.sasl_username.is_some() || self.sasl_password_env.is_some() || self.sasl_password_file.is_some() {
            return Err(invalid("aws_msk_iam", "IAM takes no SASL user name or password".into()));
        }
        if c.get("sasl.oauthbearer.method").is_some_and(|m| m.eq_ignore_ascii_case("oidc")) {
            return Err(invalid(
                "aws_msk_iam",
                "IAM tokens are not OIDC tokens: leave sasl.oauthbearer.method out".into(),
            ));
        }
        if self.security_protocol.is_none() {
            c.set("security.protocol", "SASL_SSL");
        }
        c.set("sasl.mechanism", "OAUTHBEARER");
        Ok(())
    }

    /// Ask the brokers for `topic`'s metadata as a consumer outside any group would (nothing
    /// read, written, joined or created): its partitions and the brokers, for `icicle config
    /// check --connect`. Errors name `connection.<key>` or `topic` through `invalid`.
    pub fn probe_topic(
        &self,
        topic: &str,
        invalid: impl Fn(&str, String) -> ConfigError,
    ) -> Result<String, ConfigError> {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let mut cc = self.client_config_with(|k, r| invalid(&format!("connection.{k}"), r))?;
        cc.set("group.id", "icicle-config-check");
        cc.set("allow.auto.create.topics", "false");
        let failure = ConnectionFailure::for_config(&cc);
        let msk = self.msk_token_provider().map_err(|e| invalid("connection.aws_msk_iam", e))?;
        // A token that cannot be made is the answer (librdkafka would only retry and time out).
        if let Some(p) = &msk {
            p.token().map_err(|e| invalid("connection.aws_msk_iam", e.to_string()))?;
        }
        let consumer: BaseConsumer<FailureWatch> = cc
            .create_with_context(FailureWatch { failure: failure.clone(), component: "config check".into(), msk })
            .map_err(|e| invalid("connection", format!("cannot create a Kafka client: {}", creation_error(&e))))?;
        // An OAUTHBEARER token is handed over when the client is polled.
        let _ = consumer.poll(std::time::Duration::from_millis(100));
        let md = consumer.fetch_metadata(Some(topic), std::time::Duration::from_secs(10)).map_err(|e| {
            let why = failure.get().unwrap_or_else(|| e.to_string());
            invalid("connection.bootstrap", format!("no answer about topic `{topic}` from {}: {why}", self.bootstrap))
        })?;
        let t = md.topics().iter().find(|t| t.name() == topic);
        match t {
            Some(t) if t.error().is_none() && !t.partitions().is_empty() => Ok(format!(
                "topic `{topic}` on {}: {} partitions, {} brokers",
                self.bootstrap,
                t.partitions().len(),
                md.brokers().len()
            )),
            Some(t) => Err(invalid(
                "topic",
                format!(
                    "the brokers at {} answer about `{topic}`: {}",
                    self.bootstrap,
                    t.error().map_or("no partitions".to_string(), |e| RDKafkaErrorCode::from(e).to_string())
                ),
            )),
            None => Err(invalid("topic", format!("the brokers at {} do not know `{topic}`", self.bootstrap))),
        }
    }

    /// The MSK IAM token provider when `aws_msk_iam` is set.
    pub fn msk_token_provider(&self) -> Result<Option<Arc<crate::msk::MskTokenProvider>>, String> {
        self.aws_msk_iam.as_ref().map(|iam| crate::msk::MskTokenProvider::new(iam).map(Arc::new)).transpose()
    }
}

/// The OAUTHBEARER token a client context hands librdkafka when it asks: an MSK IAM token,
/// or an error when the client has no token provider of icicle's (librdkafka's own OIDC and
/// unsecured-JWT handlers answer those configurations without asking).
pub fn oauth_token(
    msk: Option<&crate::msk::MskTokenProvider>,
    component: &str,
) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
    let Some(p) = msk else {
        return Err("OAUTHBEARER needs aws_msk_iam or sasl.oauthbearer.method = \"oidc\"".into());
    };
    match p.token() {
        Ok((token, lifetime_ms)) => {
            tracing::debug!(component, expires_ms = lifetime_ms, "MSK IAM token signed");
            Ok(rdkafka::client::OAuthToken { token, principal_name: "icicle".into(), lifetime_ms })
        }
        Err(e) => {
            tracing::warn!(component, error = %e, "no MSK IAM token");
            Err(e.into())
        }
    }
}

/// A failure no retry cures, reported by a client's callbacks: the brokers refused its
/// credentials (SASL: a wrong password, user or mechanism) or the TLS handshake failed (a
/// certificate `ssl_ca_location` does not trust, a host name the certificate does not name).
/// librdkafka itself retries such connections forever, so without this a component would
/// wait out its timeouts and then fail with "timed out"; with it, it fails at once with
/// librdkafka's reason and a hint. Clones share the failure.
#[derive(Clone)]
pub struct ConnectionFailure {
    first: Arc<watch::Sender<Option<String>>>,
    /// Values (passwords, client secrets) removed from any text kept, should one appear.
    secrets: Arc<Vec<String>>,
}

impl ConnectionFailure {
    /// A failure holder for a client configured by `config` (its secret values are never shown).
    pub fn for_config(config: &ClientConfig) -> ConnectionFailure {
        // `config_map` shows sensitive values as a placeholder: the keys, then the values.
        let secrets = config
            .config_map()
            .keys()
            .filter(|k| icicle_core::secret::holds_secret_value(k))
            .filter_map(|k| config.get(k))
            .filter(|v| v.len() >= 4)
            .map(str::to_string)
            .collect();
        ConnectionFailure { first: Arc::new(watch::channel(None).0), secrets: Arc::new(secrets) }
    }

    /// Keep `error` if it is such a failure (the first one only). Called from librdkafka's
    /// error callback (`ClientContext::error`). A token the OAUTHBEARER/OIDC method could not
    /// fetch is not one: librdkafka fetches it again.
    pub fn record(&self, error: &KafkaError, reason: &str) -> Recorded {
        let hint = match error.rdkafka_error_code() {
            // librdkafka reports an OAUTHBEARER token it could not fetch (an OIDC token endpoint
            // out of reach) as an authentication error too, and tries again; the token in hand
            // may still be good for a while: logged, not kept.
            Some(RDKafkaErrorCode::Authentication) if !reason.contains("OAUTHBEARER token") => {
                "the brokers refused the credentials: check sasl_mechanism, sasl_username and the password (sasl_password_env or sasl_password_file)"
            }
            Some(RDKafkaErrorCode::SSL) => {
                "the TLS handshake failed: check ssl_ca_location (the CA that signed the brokers' certificates) and that `bootstrap` names hosts the certificates are for"
            }
            _ if self.get().is_some() => return Recorded::Again,
            _ => return Recorded::Other,
        };
        let mut text = format!("{hint} ({})", reason.trim());
        for s in self.secrets.iter() {
            text = text.replace(s.as_str(), "***");
        }
        let first = self.first.send_if_modified(|first| {
            if first.is_some() {
                return false;
            }
            *first = Some(text);
            true
        });
        if first {
            Recorded::First
        } else {
            Recorded::Again
        }
    }

    /// [`ConnectionFailure::record`], logging the first failure as an error and, with
    /// `warn_others`, an error that is no such failure as a warning; errors after a failure are
    /// its consequences (brokers down, ...) and not logged.
    pub fn record_and_log(&self, component: &str, error: &KafkaError, reason: &str, warn_others: bool) {
        match self.record(error, reason) {
            Recorded::First => {
                tracing::error!(component, error = %self.get().unwrap_or_default(), "Kafka connection refused")
            }
            Recorded::Other if warn_others => tracing::warn!(component, error = %error, reason, "librdkafka"),
            Recorded::Other | Recorded::Again => {}
        }
    }

    /// The failure, if one was reported.
    pub fn get(&self) -> Option<String> {
        self.first.borrow().clone()
    }

    /// Wait until a failure is reported; returns it.
    pub async fn wait(&self) -> String {
        let mut rx = self.first.subscribe();
        loop {
            if let Some(f) = rx.borrow_and_update().clone() {
                return f;
            }
            // The sender lives as long as `self`: this only ends by a failure.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// What [`ConnectionFailure::record`] made of an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The first refused login or failed TLS handshake: kept.
    First,
    /// Such a failure, or any error, after the first: its consequence, not news.
    Again,
    /// No such failure, and none before it.
    Other,
}

/// The client callbacks of the Kafka sink's producer: refused credentials and failed TLS
/// handshakes are kept (see [`ConnectionFailure`]); other errors are logged.
pub struct FailureWatch {
    /// Where this client's unrecoverable connection failure is kept.
    pub failure: ConnectionFailure,
    /// The component, in log lines.
    pub component: String,
    /// MSK IAM tokens, when `aws_msk_iam` is set.
    pub msk: Option<Arc<crate::msk::MskTokenProvider>>,
}

impl rdkafka::consumer::ConsumerContext for FailureWatch {}

impl rdkafka::ClientContext for FailureWatch {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn error(&self, error: KafkaError, reason: &str) {
        self.failure.record_and_log(&self.component, &error, reason, true);
    }

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        oauth_token(self.msk.as_deref(), &self.component)
    }
}

/// A client-creation error as it may be shown: librdkafka's configuration errors print the
/// offending value, which may be a secret (a misspelled `secret_properties` key); only the key
/// and the reason are kept.
pub fn creation_error(e: &rdkafka::error::KafkaError) -> String {
    match e {
        rdkafka::error::KafkaError::ClientConfig(_, desc, key, _) => format!("property `{key}`: {desc}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(key: &str, reason: String) -> ConfigError {
        ConfigError::InvalidValue { key: key.into(), origin: "test".into(), reason }
    }

    #[test]
    fn secrets_come_from_env_or_files_and_never_show() {
        std::env::set_var("ICICLE_TEST_KAFKA_PW", "hunter2");
        let c = KafkaConnection {
            bootstrap: "b:9096".into(),
            security_protocol: Some("SASL_SSL".into()),
            sasl_mechanism: Some("SCRAM-SHA-512".into()),
            sasl_username: Some("icicle".into()),
            sasl_password_env: Some("ICICLE_TEST_KAFKA_PW".into()),
            ..Default::default()
        };
        let cc = c.client_config_with(err).unwrap();
        assert_eq!(cc.get("sasl.password"), Some("hunter2"));
        assert_eq!(cc.get("security.protocol"), Some("SASL_SSL"));
        assert!(!format!("{c:?}").contains("hunter2"));
        let mut bad = c.clone();
        bad.properties.insert("sasl.password".into(), "plain".into());
        assert!(bad.client_config_with(err).unwrap_err().to_string().contains("secret_properties"));
        // The shared key rule: an OAUTHBEARER client secret is one; a key's path and the token
        // endpoint's address are not.
        let mut oidc = c.clone();
        oidc.properties.insert("sasl.oauthbearer.config".into(), "clientSecret=s3kr1t".into());
        assert!(oidc.client_config_with(err).unwrap_err().to_string().contains("secret_properties"));
        let mut paths = c.clone();
        paths.properties.insert("ssl.key.location".into(), "/etc/icicle/client.key".into());
        paths.properties.insert("sasl.oauthbearer.token.endpoint.url".into(), "https://idp/token".into());
        assert!(paths.client_config_with(err).is_ok());
        let mut missing = c.clone();
        missing.sasl_password_env = Some("ICICLE_TEST_NO_SUCH_VAR".into());
        let e = missing.client_config_with(err).unwrap_err().to_string();
        assert!(e.contains("sasl_password_env") && e.contains("ICICLE_TEST_NO_SUCH_VAR"), "{e}");
    }

    /// The issue: `SASL_SSL` failed with "OpenSSL not available at build time" and
    /// `SCRAM-SHA-512` with "No provider". librdkafka lists what it was built with in
    /// `builtin.features` (CONFIGURATION.md).
    #[test]
    fn tls_scram_and_oauthbearer_are_built_in() {
        let native = rdkafka::ClientConfig::new().create_native_config().expect("a configuration");
        let features = native.get("builtin.features").expect("builtin.features");
        for want in ["ssl", "sasl_scram", "sasl_oauthbearer", "oidc", "sasl_plain"] {
            assert!(features.split(',').any(|f| f == want), "`{want}` is not built in: {features}");
        }
        std::env::set_var("ICICLE_TEST_KAFKA_BUILTIN_PW", "not-used-here");
        let scram = |mechanism: &str| KafkaConnection {
            bootstrap: "127.0.0.1:9".into(),
            security_protocol: Some("SASL_SSL".into()),
            sasl_mechanism: Some(mechanism.into()),
            sasl_username: Some("icicle".into()),
            sasl_password_env: Some("ICICLE_TEST_KAFKA_BUILTIN_PW".into()),
            ssl_ca_location: Some("/etc/ssl/certs/ca-certificates.crt".into()),
            ..Default::default()
        };
        let mut oidc = KafkaConnection {
            bootstrap: "127.0.0.1:9".into(),
            security_protocol: Some("SASL_SSL".into()),
            ..Default::default()
        };
        oidc.sasl_mechanism = Some("OAUTHBEARER".into());
        for (k, v) in [
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.client.id", "icicle"),
            ("sasl.oauthbearer.token.endpoint.url", "https://127.0.0.1:9/token"),
        ] {
            oidc.properties.insert(k.into(), v.into());
        }
        oidc.secret_properties
            .insert("sasl.oauthbearer.client.secret".into(), "env:ICICLE_TEST_KAFKA_BUILTIN_PW".into());
        for c in [scram("SCRAM-SHA-512"), scram("SCRAM-SHA-256"), oidc] {
            let cc = c.client_config_with(err).expect("valid settings");
            if let Err(e) = cc.create::<rdkafka::producer::BaseProducer>() {
                panic!("{c:?}: {}", creation_error(&e));
            }
        }
    }

    #[test]
    fn refused_credentials_are_kept_with_a_hint_and_without_secrets() {
        let mut cc = rdkafka::ClientConfig::new();
        cc.set("sasl.password", "hunter2-secret");
        let f = ConnectionFailure::for_config(&cc);
        let token = "Failed to acquire SASL OAUTHBEARER token: OIDC token endpoint unreachable";
        assert_eq!(f.record(&KafkaError::Global(RDKafkaErrorCode::Authentication), token), Recorded::Other);
        let transport = KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure);
        assert_eq!(f.record(&transport, "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed"), Recorded::Other);
        assert_eq!(f.get(), None);
        let auth = KafkaError::Global(RDKafkaErrorCode::Authentication);
        assert_eq!(
            f.record(&auth, "sasl_ssl://b:9096/bootstrap: SASL authentication error: bad password hunter2-secret"),
            Recorded::First
        );
        let shown = f.get().expect("kept");
        assert!(shown.contains("refused the credentials") && shown.contains("SASL authentication error"), "{shown}");
        assert!(!shown.contains("hunter2-secret"), "{shown}");
        // The first failure is kept; a TLS failure is one too; what follows is its consequence.
        assert_eq!(f.record(&KafkaError::Global(RDKafkaErrorCode::SSL), "SSL handshake failed"), Recorded::Again);
        assert_eq!(
            f.record(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down"),
            Recorded::Again
        );
        assert_eq!(f.get(), Some(shown.clone()));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        assert_eq!(rt.block_on(f.wait()), shown);
    }

    #[test]
    fn a_configuration_error_never_shows_the_value() {
        let mut cc = rdkafka::ClientConfig::new();
        cc.set("sasl.oauthbearer.client.secet", "s3cr3t-Value");
        let e = cc.create::<rdkafka::producer::FutureProducer>().err().expect("an unknown property is refused");
        let shown = super::creation_error(&e);
        assert!(shown.contains("sasl.oauthbearer.client.secet") && !shown.contains("s3cr3t-Value"), "{shown}");
    }
}
