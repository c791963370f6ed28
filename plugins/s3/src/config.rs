//! `[sources.<id>] type = "s3"`: the bucket and prefix, the endpoint, credentials, and the
//! same layout keys as the `tsv` source.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::secret;
use icicle_core::traits::Source;
use icicle_core::ConfigError;
use icicle_plugins_snapshot::tsv::{Columns, Layout, ModeFormat, Preset, TsvConfig};
use serde::Deserialize;

use crate::source::{Creds, S3Source, Settings};

/// The configuration of an `s3` source. Holds only where secrets come from, never a secret.
#[derive(Debug, Clone, Deserialize)]
pub struct S3Config {
    /// The bucket.
    pub bucket: String,
    /// Only keys starting with this (default: the whole bucket).
    #[serde(default)]
    pub prefix: String,
    /// Only keys whose rest after `prefix` matches this pattern, as the `tsv` source's paths
    /// are matched: `*` and `?` within one `/`-separated part, `**` across parts, `[...]`
    /// classes; e.g. `*.csv`, `**/*.csv`.
    #[serde(default)]
    pub keys: Option<String>,
    /// A non-AWS endpoint (MinIO, Ceph RGW, moto): `http(s)://host:port`.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// The region requests are signed for.
    #[serde(default = "default_region")]
    pub region: String,
    /// `endpoint/bucket/key` URLs instead of `bucket.endpoint/key` (MinIO, moto).
    #[serde(default)]
    pub force_path_style: bool,
    /// An access key id; its secret from `secret_access_key_env` or `secret_access_key_file`.
    /// Without it, the AWS default chain: the environment, `~/.aws` profiles, web identity,
    /// ECS and instance roles.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// Take credentials from this profile of `~/.aws/config` and `~/.aws/credentials` alone
    /// (nothing else of the default chain is tried); not with `access_key_id`.
    #[serde(default)]
    pub profile: Option<String>,
    /// The environment variable holding the secret access key.
    #[serde(default)]
    pub secret_access_key_env: Option<String>,
    /// The file holding the secret access key (first line).
    #[serde(default)]
    pub secret_access_key_file: Option<PathBuf>,
    /// Objects larger than this are read in byte ranges of this size, in parallel (default
    /// `[snapshot] split_bytes`, 64 MiB).
    #[serde(default)]
    pub split_bytes: Option<u64>,
    /// Attempts of one request (the first and the retries) on throttling, 5xx answers and
    /// connection errors.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Timeout of one request attempt until its answer begins, in seconds.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: f64,
    /// A named layout (`icicle9`, `pwalk`, `ne2scan`); the keys below override it.
    pub preset: Option<Preset>,
    /// One-character delimiter.
    pub delimiter: Option<String>,
    /// Zero-based column positions.
    pub columns: Option<Columns>,
    /// How the mode column is written.
    pub mode_format: Option<ModeFormat>,
    /// The path is the last column and may contain the delimiter.
    pub path_last: Option<bool>,
    /// Fields may be `"`-quoted.
    pub quoted: Option<bool>,
    /// Skip the first line of each object.
    pub header: Option<bool>,
    /// Lines starting with this prefix are skipped.
    pub comment: Option<String>,
    /// Remove this prefix from every path...
    #[serde(default)]
    pub strip_prefix: String,
    /// ...and put this one in its place.
    #[serde(default)]
    pub path_prefix: String,
}

fn default_region() -> String {
    "us-east-1".into()
}
fn default_max_attempts() -> u32 {
    5
}
fn default_timeout_secs() -> f64 {
    60.0
}

impl S3Config {
    /// Validate and resolve: the layout, the credentials (read now, from the environment or
    /// a file), the endpoint. Errors name the key through `invalid` and never a secret.
    pub(crate) fn settings(
        &self,
        id: &str,
        split_bytes: u64,
        invalid: impl Fn(&str, String) -> ConfigError,
        layout: Layout,
    ) -> Result<Settings, ConfigError> {
        if !valid_bucket(&self.bucket) {
            return Err(invalid(
                "bucket",
                format!(
                    "`{}` is not an S3 bucket name (3-63 lowercase letters, digits, dots and hyphens)",
                    self.bucket
                ),
            ));
        }
        if let Some(u) = &self.endpoint_url {
            check_endpoint(u).map_err(|e| invalid("endpoint_url", e))?;
        }
        if self.region.trim().is_empty() {
            return Err(invalid("region", "must not be empty".into()));
        }
        let split_bytes = self.split_bytes.unwrap_or(split_bytes);
        if split_bytes == 0 {
            return Err(invalid("split_bytes", "must be positive".into()));
        }
        if self.max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1".into()));
        }
        if !(self.timeout_secs.is_finite() && self.timeout_secs > 0.0) {
            return Err(invalid("timeout_secs", "must be positive".into()));
        }
        if self.keys.as_deref().is_some_and(str::is_empty) {
            return Err(invalid("keys", "must not be empty (leave it out to read every key under prefix)".into()));
        }
        let keys = match self.keys.as_deref() {
            Some(k) => {
                Some(glob::Pattern::new(k).map_err(|e| invalid("keys", format!("`{k}` is not a pattern: {e}")))?)
            }
            None => None,
        };
        let creds = self.credentials(&invalid)?;
        Ok(Settings {
            id: id.to_string(),
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            keys,
            endpoint_url: self.endpoint_url.as_ref().map(|u| u.trim_end_matches('/').to_string()),
            region: self.region.clone(),
            force_path_style: self.force_path_style,
            creds,
            split_bytes,
            max_attempts: self.max_attempts,
            timeout: icicle_core::time::secs(self.timeout_secs),
            layout,
        })
    }

    fn credentials(&self, invalid: &impl Fn(&str, String) -> ConfigError) -> Result<Creds, ConfigError> {
        credentials(
            self.access_key_id.as_deref(),
            self.secret_access_key_env.as_deref(),
            self.secret_access_key_file.as_deref(),
            self.profile.as_deref(),
            invalid,
        )
    }

    /// The `tsv` source's view of the layout keys, for [`Layout::from_config`].
    fn layout_keys(&self) -> TsvConfig {
        TsvConfig {
            paths: Vec::new(),
            preset: self.preset,
            delimiter: self.delimiter.clone(),
            columns: self.columns.clone(),
            mode_format: self.mode_format,
            path_last: self.path_last,
            quoted: self.quoted,
            header: self.header,
            comment: self.comment.clone(),
            strip_prefix: self.strip_prefix.clone(),
            path_prefix: self.path_prefix.clone(),
        }
    }
}

impl ComponentConfig for S3Config {
    type Component = Arc<dyn Source>;

    /// The layout, the bucket, endpoint and limits, and the credentials' keys (a secret named
    /// is read; nothing is asked of S3 or the default chain).
    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        let layout = Layout::from_config(&self.layout_keys(), ctx)?;
        self.settings(&ctx.id, self.split_bytes.unwrap_or(1), |key, reason| ctx.invalid(key, reason), layout)?;
        Ok(())
    }

    /// One listing request of the prefix, with the credentials the run would use.
    fn probe(&self, ctx: &BuildContext<'_>) -> Result<Option<String>, ConfigError> {
        let layout = Layout::from_config(&self.layout_keys(), ctx)?;
        let settings = self.settings(&ctx.id, 64 << 20, |key, reason| ctx.invalid(key, reason), layout)?;
        let source = S3Source::new(settings).map_err(|e| ctx.invalid("bucket", e))?;
        source.probe().map(Some).map_err(|e| ctx.invalid("bucket", e.to_string()))
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn Source>, ConfigError> {
        self.validate(ctx)?;
        let layout = Layout::from_config(&self.layout_keys(), ctx)?;
        let split_bytes = ctx.figment.extract_inner::<u64>("snapshot.split_bytes").unwrap_or(64 << 20);
        let settings = self.settings(&ctx.id, split_bytes, |key, reason| ctx.invalid(key, reason), layout)?;
        let source = S3Source::new(settings).map_err(|e| ConfigError::Parse(format!("{}: {e}", ctx.key)))?;
        Ok(Arc::new(source))
    }
}

/// Credentials as the `s3` source takes them: `access_key_id` with its secret from the
/// environment variable `secret_env` or the file `secret_file`, else the AWS default chain
/// (with `profile` when given). Errors name the key through `invalid` and never a secret.
pub(crate) fn credentials(
    access_key_id: Option<&str>,
    secret_env: Option<&str>,
    secret_file: Option<&Path>,
    profile: Option<&str>,
    invalid: &impl Fn(&str, String) -> ConfigError,
) -> Result<Creds, ConfigError> {
    match access_key_id {
        Some(akid) => {
            if akid.trim().is_empty() {
                return Err(invalid("access_key_id", "must not be empty".into()));
            }
            if profile.is_some() {
                return Err(invalid("profile", "give either access_key_id or profile, not both".into()));
            }
            let secret = match (secret_env, secret_file) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        "secret_access_key_env",
                        "give either secret_access_key_env or secret_access_key_file, not both".into(),
                    ))
                }
                (Some(var), None) => secret::from_env(var).map_err(|e| invalid("secret_access_key_env", e))?,
                (None, Some(f)) => secret::from_file(f).map_err(|e| invalid("secret_access_key_file", e))?,
                (None, None) => {
                    return Err(invalid(
                        "secret_access_key_env",
                        "access_key_id needs secret_access_key_env or secret_access_key_file".into(),
                    ))
                }
            };
            Ok(Creds::Static { access_key_id: akid.trim().to_string(), secret, session_token: None })
        }
        None => {
            if secret_env.is_some() || secret_file.is_some() {
                return Err(invalid("access_key_id", "a secret access key needs access_key_id".into()));
            }
            if profile.is_some_and(|p| p.trim().is_empty()) {
                return Err(invalid("profile", "must not be empty".into()));
            }
            Ok(Creds::DefaultChain { profile: profile.map(|p| p.trim().to_string()) })
        }
    }
}

/// S3's bucket naming rules (3-63 characters of `a-z 0-9 . -`, starting and ending with a
/// letter or digit).
pub(crate) fn valid_bucket(b: &str) -> bool {
    (3..=63).contains(&b.len())
        && b.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
        && b.as_bytes()[0].is_ascii_alphanumeric()
        && b.as_bytes()[b.len() - 1].is_ascii_alphanumeric()
}

/// An `http(s)://host[:port]` URL without credentials in it.
pub(crate) fn check_endpoint(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("`{url}` is not an http:// or https:// URL"))?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() {
        return Err(format!("`{url}` has no host"));
    }
    if authority.contains('@') {
        return Err("credentials do not belong in the URL (use access_key_id with secret_access_key_env or secret_access_key_file)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> Result<S3Config, String> {
        toml::from_str(&format!("bucket = \"snapshots\"\npreset = \"icicle9\"\n{extra}")).map_err(|e| e.to_string())
    }

    fn settings(c: &S3Config) -> Result<Settings, String> {
        c.settings(
            "s",
            1 << 20,
            |k, r| ConfigError::InvalidValue { key: format!("sources.s.{k}"), origin: "test".into(), reason: r },
            Layout::preset(Preset::Icicle9),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn configuration_rules_name_the_key() {
        let c =
            cfg("access_key_id = \"AKIDEXAMPLE\"\nsecret_access_key_env = \"ICICLE_TEST_S3_SECRET_UNSET\"").unwrap();
        let e = settings(&c).unwrap_err();
        assert!(e.contains("sources.s.secret_access_key_env") && e.contains("ICICLE_TEST_S3_SECRET_UNSET"), "{e}");
        let e = settings(&cfg("access_key_id = \"AKIDEXAMPLE\"").unwrap()).unwrap_err();
        assert!(e.contains("sources.s.secret_access_key_env"), "{e}");
        let e = settings(&cfg("secret_access_key_env = \"X\"").unwrap()).unwrap_err();
        assert!(e.contains("sources.s.access_key_id"), "{e}");
        let e = settings(
            &cfg("access_key_id = \"A\"\nsecret_access_key_env = \"X\"\nsecret_access_key_file = \"/f\"").unwrap(),
        )
        .unwrap_err();
        assert!(e.contains("not both"), "{e}");
        let e = settings(&cfg("endpoint_url = \"http://user:pw@127.0.0.1:9000\"\naccess_key_id = \"A\"\nsecret_access_key_file = \"/nonexistent\"").unwrap())
            .unwrap_err();
        assert!(e.contains("sources.s.endpoint_url") && !e.contains("pw"), "{e}");
        let e = settings(&cfg("endpoint_url = \"127.0.0.1:9000\"").unwrap()).unwrap_err();
        assert!(e.contains("sources.s.endpoint_url"), "{e}");
        let e = settings(&cfg("split_bytes = 0").unwrap()).unwrap_err();
        assert!(e.contains("sources.s.split_bytes"), "{e}");
        let e = settings(&cfg("access_key_id = \"A\"\nsecret_access_key_env = \"X\"\nprofile = \"p\"").unwrap())
            .unwrap_err();
        assert!(e.contains("sources.s.profile") && e.contains("not both"), "{e}");
        let e = settings(&cfg("profile = \" \"").unwrap()).unwrap_err();
        assert!(e.contains("sources.s.profile"), "{e}");
        let e = settings(&cfg("keys = \"[a-\"").unwrap()).unwrap_err();
        assert!(e.contains("sources.s.keys") && e.contains("not a pattern"), "{e}");
        let e = settings(&cfg("max_attempts = 0").unwrap()).unwrap_err();
        assert!(e.contains("sources.s.max_attempts"), "{e}");
        let mut c = cfg("").unwrap();
        c.bucket = "Bad_Bucket".into();
        assert!(settings(&c).unwrap_err().contains("sources.s.bucket"));
    }

    #[test]
    fn secrets_come_from_files_and_never_print() {
        let dir = std::env::temp_dir().join(format!("icicle-s3-secret-{}", std::process::id()));
        std::fs::write(&dir, "s3cr3t-value-from-file\nignored\n").unwrap();
        let c =
            cfg(&format!("access_key_id = \"AKIDEXAMPLE\"\nsecret_access_key_file = \"{}\"", dir.display())).unwrap();
        let s = settings(&c).unwrap();
        std::fs::remove_file(&dir).unwrap();
        let crate::source::Creds::Static { secret, .. } = &s.creds else { panic!("static keys expected") };
        assert_eq!(secret.expose(), "s3cr3t-value-from-file");
        assert_eq!(s.split_bytes, 1 << 20);
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cr3t") && shown.contains("AKIDEXAMPLE"), "{shown}");
    }

    #[test]
    fn bucket_names() {
        for ok in ["abc", "icicle-snapshots", "a.b-c.1"] {
            assert!(valid_bucket(ok), "{ok}");
        }
        for bad in ["ab", "Upper", "under_score", "-lead", "trail-", &"x".repeat(64)] {
            assert!(!valid_bucket(bad), "{bad}");
        }
    }
}
