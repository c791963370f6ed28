//! Connection settings shared by the Kafka sink and the GPFS source: the brokers, security
//! settings passed through to librdkafka (SASL_SSL with SCRAM or OAUTHBEARER, a CA file, as
//! Amazon MSK needs), and secrets read from the environment or files, never from the config
//! text and never logged.

use std::collections::BTreeMap;
use std::path::PathBuf;

use icicle_core::registry::BuildContext;
use icicle_core::ConfigError;
use rdkafka::ClientConfig;
use serde::Deserialize;

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
            .finish()
    }
}

fn looks_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password") || k.contains("secret") || k.ends_with(".key.pem") || k.contains("token")
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
    pub fn client_config_with(&self, invalid: impl Fn(&str, String) -> ConfigError) -> Result<ClientConfig, ConfigError> {
        if self.bootstrap.trim().is_empty() {
            return Err(invalid("bootstrap", "give the brokers as host:port[,host:port]".into()));
        }
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in &self.properties {
            if looks_secret(k) {
                return Err(invalid(&format!("properties.\"{k}\""), "looks like a secret: put it in `secret_properties` as env:VAR or file:/path".into()));
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
            (Some(_), Some(_)) => return Err(invalid("sasl_password_env", "give either sasl_password_env or sasl_password_file".into())),
            (Some(v), None) => {
                c.set("sasl.password", secret(&format!("env:{v}")).map_err(|e| invalid("sasl_password_env", e))?);
            }
            (None, Some(f)) => {
                c.set("sasl.password", secret(&format!("file:{}", f.display())).map_err(|e| invalid("sasl_password_file", e))?);
            }
            (None, None) => {}
        }
        if let Some(ca) = &self.ssl_ca_location {
            c.set("ssl.ca.location", ca.display().to_string());
        }
        for (k, spec) in &self.secret_properties {
            c.set(k, secret(spec).map_err(|e| invalid(&format!("secret_properties.\"{k}\""), e))?);
        }
        Ok(c)
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
        let mut missing = c.clone();
        missing.sasl_password_env = Some("ICICLE_TEST_NO_SUCH_VAR".into());
        let e = missing.client_config_with(err).unwrap_err().to_string();
        assert!(e.contains("sasl_password_env") && e.contains("ICICLE_TEST_NO_SUCH_VAR"), "{e}");
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
