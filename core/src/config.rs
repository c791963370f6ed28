//! Layered configuration with figment: built-in defaults < `--config` TOML files (in order)
//! < environment `ICICLE__SECTION__KEY` < `--set key=value`. Unknown keys are errors that
//! name the key and where it was set.

use std::collections::BTreeMap;
use std::path::PathBuf;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// figment re-exported for plugins and tests that build configurations in code.
pub mod figment_types {
    pub use figment::providers;
    pub use figment::Figment;
}

/// Settings of snapshot runs (`[snapshot]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SnapshotSettings {
    /// Produce primary records (one per file and link).
    pub primary: bool,
    /// Worker threads reading splits; 0 = one per core.
    pub workers: usize,
    /// Largest ingest or delete document, in bytes (Globus Search accepts 10 MB).
    pub max_batch_bytes: usize,
    /// How those bytes are counted: `sdk` (as globus-sdk or the globus CLI send the document
    /// again) or `compact` (as icicle writes it).
    pub document_size: crate::batch::DocumentSize,
    /// A partial document is flushed after this many seconds without filling up.
    pub flush_interval_secs: f64,
    /// Text inputs larger than this are read as several splits in parallel.
    pub split_bytes: u64,
    /// Where rejected rows are written (JSON lines); default `<state_dir or .>/rejects.jsonl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejects_file: Option<PathBuf>,
    /// The run fails (non-zero exit) when more rows than this are rejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rejects: Option<u64>,
    /// The run fails when rejects exceed this fraction of rows read (default 0.01).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_reject_ratio: Option<f64>,
    /// A versioned run that would delete more than this fraction of the previous run's
    /// subjects deletes nothing and fails, unless `allow_mass_delete` (default 0.2).
    pub max_delete_ratio: f64,
    /// ...or more than this many subjects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_delete: Option<u64>,
    /// Lift the deletion guard for one run (`icicle snapshot --allow-mass-delete`).
    pub allow_mass_delete: bool,
    /// A versioned run that withholds deletes (an input it could not read, or not shown
    /// whole) for more than this many runs in a row fails with exit code 5 after delivering
    /// (0: no bound). Default 3.
    pub max_withheld_runs: u32,
    /// Directory holding the subject manifest of the last delivered run (enables versioning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// With versioning: `changed` emits only created/updated records, `all` emits every record.
    pub emit: EmitMode,
    /// The snapshot version written into records; default: the run's start time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl SnapshotSettings {
    /// The bound of every document.
    pub fn document_limit(&self) -> crate::batch::DocumentLimit {
        crate::batch::DocumentLimit { max_bytes: self.max_batch_bytes, size: self.document_size }
    }
}

impl Default for SnapshotSettings {
    fn default() -> Self {
        SnapshotSettings {
            primary: true,
            workers: 0,
            max_batch_bytes: 10_000_000,
            document_size: crate::batch::DocumentSize::Sdk,
            flush_interval_secs: 5.0,
            split_bytes: 64 << 20,
            rejects_file: None,
            max_rejects: None,
            max_reject_ratio: Some(0.01),
            max_delete_ratio: 0.2,
            max_delete: None,
            allow_mass_delete: false,
            max_withheld_runs: 3,
            state_dir: None,
            emit: EmitMode::Changed,
            version: None,
        }
    }
}

/// Which records a versioned run emits.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EmitMode {
    /// Only created and updated records (the index already holds the rest).
    Changed,
    /// Every record.
    All,
}

/// `records.visible_to`: a rule (`"posix-read"`, `"posix"`) or an explicit list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum VisibleToSetting {
    /// Visibility from POSIX permissions along the path.
    Rule(String),
    /// `owner`, `group`, `public` and/or literal `urn:` principals.
    List(Vec<String>),
}

/// How primary records are built (`[records]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RecordSettings {
    /// `"posix-read"` (default), `"posix"`, or a list of `owner`, `group`, `public`, `urn:...`.
    pub visible_to: VisibleToSetting,
    /// uid/gid → principal URN file (`uid 1000 urn:globus:auth:identity:...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principals: Option<PathBuf>,
    /// Principals used when a `visible_to` list resolves to nothing for a record.
    pub fallback: Vec<String>,
    /// Principals (`urn:`) that see every record, with root's mapped principal.
    pub admins: Vec<String>,
    /// Under the POSIX rules, the principal that stands for every user (`public` or a `urn:`
    /// group of all users): given what the other class allows along the whole path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub everyone: Option<String>,
    /// Under the POSIX rules, a file whose directories' permissions the source cannot know:
    /// `owner-only` (default) or `reject`.
    pub unknown_directories: crate::access::UnknownDirectories,
}

impl Default for RecordSettings {
    fn default() -> Self {
        RecordSettings {
            visible_to: VisibleToSetting::Rule("posix-read".into()),
            principals: None,
            fallback: vec![],
            admins: vec![],
            everyone: None,
            unknown_directories: Default::default(),
        }
    }
}

/// Logging (`[log]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LogSettings {
    /// `error`, `warn`, `info`, `debug`, `trace` or an EnvFilter directive.
    pub level: String,
    /// `text` (for people) or `json` (one object a line, for log shippers).
    pub format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings { level: "info".into(), format: LogFormat::Text }
    }
}

/// The metrics endpoint (`[metrics]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default)]
pub struct MetricsSettings {
    /// Serve `/metrics` and `/status` on this address (`127.0.0.1:9464`; port 0 picks one) in
    /// `icicle snapshot` and `icicle monitor`; `--metrics-addr` wins. None: not served.
    pub addr: Option<String>,
}

/// How log lines are written (`[log] format`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of text an event, coloured on a terminal.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `fields` (with `message`), `target`.
    Json,
}

/// What `icicle monitor` does when a source fails (`[monitor] on_failure`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnSourceFailure {
    /// Stop the whole process, naming the source and the cause.
    #[default]
    Stop,
    /// Start the source again from its checkpoint after a growing delay.
    Restart,
}

/// `icicle monitor` settings (`[monitor]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MonitorSettings {
    /// What happens when a source fails: `stop` (default) or `restart`.
    pub on_failure: OnSourceFailure,
    /// The first delay before a restart, doubled after each failure...
    pub restart_initial_secs: f64,
    /// ...up to this.
    pub restart_max_secs: f64,
    /// Restarts allowed per source before the process stops (0 = no limit).
    pub max_restarts: u32,
}

impl Default for MonitorSettings {
    fn default() -> Self {
        MonitorSettings {
            on_failure: OnSourceFailure::Stop,
            restart_initial_secs: 1.0,
            restart_max_secs: 300.0,
            max_restarts: 0,
        }
    }
}

/// The whole configuration. Component sections are kept as raw values and built by plugins.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct AppConfig {
    /// `[snapshot]`.
    pub snapshot: SnapshotSettings,
    /// `[records]`.
    pub records: RecordSettings,
    /// `[counting]`.
    pub counting: CountingSettings,
    /// `[aggregate]`.
    pub aggregate: AggregateSettings,
    /// `[log]`.
    pub log: LogSettings,
    /// `[monitor]`.
    pub monitor: MonitorSettings,
    /// `[metrics]`.
    pub metrics: MetricsSettings,
    /// `[sources.<id>]` sections, each with a `type`.
    pub sources: BTreeMap<String, Value>,
    /// `[sinks.<id>]` sections, each with a `type`.
    pub sinks: BTreeMap<String, Value>,
}

/// A loaded configuration: the merged layers and the typed top level.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// Every layer merged, with where each value was set.
    pub figment: Figment,
    /// The top level extracted from it.
    pub app: AppConfig,
}

/// `--set key=value` overrides as a figment provider, so errors can name them.
struct SetOverrides {
    toml: String,
}

impl Provider for SetOverrides {
    fn metadata(&self) -> Metadata {
        Metadata::named("--set command-line option")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Toml::string(&self.toml).data()
    }
}

/// One `--set KEY=VALUE` as a TOML line. Errors name the key, never the value (it may be a
/// secret).
fn set_to_toml(set: &str) -> Result<String, ConfigError> {
    let (key, value) = set.split_once('=').ok_or_else(|| {
        ConfigError::Parse(
            "--set: an argument without `=` (expected KEY=VALUE; the argument is not shown, in case it is a secret)"
                .into(),
        )
    })?;
    let key = key.trim();
    if key.is_empty()
        || !key
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
    {
        let key = key.escape_debug();
        return Err(ConfigError::Parse(format!(
            "--set `{key}=…`: `{key}` is not a dotted key (the value is not shown)"
        )));
    }
    let value = value.trim();
    let literal = if toml::from_str::<toml::Table>(&format!("v = {value}")).is_ok() {
        value.to_string()
    } else {
        serde_json::to_string(value).unwrap_or_default()
    };
    Ok(format!("{key} = {literal}\n"))
}

/// Describe where `key` was set: a file path, the environment, `--set`, or the defaults.
pub fn origin_of(figment: &Figment, key: &str) -> String {
    match figment.find_metadata(key) {
        Some(md) => match &md.source {
            Some(figment::Source::File(p)) => format!("file {}", p.display()),
            _ => md.name.to_string(),
        },
        None => "the configuration".to_string(),
    }
}

fn figment_error(err: figment::Error, figment: &Figment, base: &str) -> ConfigError {
    // figment reports extract_inner paths with the focus key appended or prepended.
    let base_parts: Vec<&str> = if base.is_empty() { Vec::new() } else { base.split('.').collect() };
    let mut rel: Vec<&str> = err.path.iter().map(String::as_str).collect();
    if !base_parts.is_empty() {
        if rel.ends_with(&base_parts) {
            rel.truncate(rel.len() - base_parts.len());
        } else if rel.starts_with(&base_parts) {
            rel.drain(..base_parts.len());
        }
    }
    let key = match (base.is_empty(), rel.is_empty()) {
        (true, _) => rel.join("."),
        (false, true) => base.to_string(),
        (false, false) => format!("{base}.{}", rel.join(".")),
    };
    let origin = err
        .metadata
        .as_ref()
        .map(|md| match &md.source {
            Some(figment::Source::File(p)) => format!("file {}", p.display()),
            _ => md.name.to_string(),
        })
        .unwrap_or_else(|| origin_of(figment, &key));
    // The value of a secret's key is never quoted; anything else that quotes configuration
    // text (a TOML parse error shows the line) is redacted by key.
    let reason = if crate::secret::is_secret_key(&key) || key.ends_with("_env") {
        secret_reason(&err.kind)
    } else {
        err.kind.to_string()
    };
    if key.is_empty() {
        // Not a key's value: the file itself (a TOML syntax error names its line and column).
        return ConfigError::Parse(format!("{origin}: {}", crate::secret::redact_text(&reason)));
    }
    ConfigError::InvalidValue {
        key,
        origin,
        // figment quotes serde's list of expected values a second time.
        reason: crate::secret::redact_text(&reason).replace("``", "`").replace("expected `one of ", "expected one of "),
    }
}

/// Why the value of a secret's key was refused, without the value.
fn secret_reason(kind: &figment::error::Kind) -> String {
    use figment::error::{Actual, Kind};
    let what = |a: &Actual| match a {
        Actual::Bool(_) => "bool".to_string(),
        Actual::Unsigned(_) => "unsigned int".into(),
        Actual::Signed(_) => "signed int".into(),
        Actual::Float(_) => "float".into(),
        Actual::Char(_) => "char".into(),
        Actual::Str(_) => "string".into(),
        Actual::Bytes(_) => "bytes".into(),
        Actual::Other(_) => "a value".into(),
        other => other.to_string(),
    };
    match kind {
        Kind::InvalidType(a, expected) => format!("invalid type: found {}, expected {expected}", what(a)),
        Kind::InvalidValue(a, expected) => format!("invalid value: found {}, expected {expected}", what(a)),
        Kind::Unsupported(a) => format!("unsupported type {}", what(a)),
        Kind::UnknownVariant(_, expected) => {
            format!("unknown variant (not shown), expected one of {}", expected.join(", "))
        }
        Kind::Message(_) => "invalid value (not shown: the key holds a secret)".into(),
        other => other.to_string(),
    }
}

/// Replace every value at a key path that [`crate::secret::shown`] refuses with
/// [`crate::secret::REDACTED`].
fn redact_tree(path: &mut Vec<String>, v: &mut Value) {
    let scalar = match v {
        Value::Dict(_, d) => {
            for (k, x) in d.iter_mut() {
                path.push(k.clone());
                redact_tree(path, x);
                path.pop();
            }
            return;
        }
        Value::Array(_, a) => {
            a.iter_mut().for_each(|x| redact_tree(path, x));
            return;
        }
        Value::String(_, s) => s.clone(),
        Value::Char(_, c) => c.to_string(),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(..) | Value::Empty(..) => String::from("0"),
    };
    let keys: Vec<&str> = path.iter().map(String::as_str).collect();
    if !crate::secret::shown(&keys, &scalar) {
        *v = Value::from(crate::secret::REDACTED);
    }
}

/// Deserialize the section at `key` into `T`; keys `T` does not know are errors, except `allowed`.
pub fn extract_component<T: DeserializeOwned>(
    figment: &Figment,
    key: &str,
    allowed: &[&str],
) -> Result<T, ConfigError> {
    let value: T = figment.extract_inner(key).map_err(|e| figment_error(e, figment, key))?;
    let raw = figment.find_value(key).map_err(|e| figment_error(e, figment, key))?;
    let mut unknown = Vec::new();
    let _: Result<T, _> = serde_ignored::deserialize(&raw, |path| unknown.push(path.to_string()));
    if let Some(u) = unknown.into_iter().find(|u| !allowed.contains(&u.as_str())) {
        let full = format!("{key}.{u}");
        let suggestion = crate::suggest::nearest_field::<T>(&u).map(str::to_string);
        return Err(ConfigError::UnknownKey { origin: origin_of(figment, &full), key: full, suggestion });
    }
    Ok(value)
}

/// Load and merge the configuration layers.
pub fn load(files: &[PathBuf], sets: &[String]) -> Result<LoadedConfig, ConfigError> {
    let mut figment = Figment::from(Serialized::defaults(AppConfig::default()));
    for f in files {
        if !f.is_file() {
            return Err(ConfigError::Parse(format!("config file {} does not exist", f.display())));
        }
        figment = figment.merge(Toml::file_exact(f));
    }
    figment = figment.merge(Env::prefixed("ICICLE__").split("__"));
    for s in sets {
        figment = figment.merge(SetOverrides { toml: set_to_toml(s)? });
    }
    from_figment(figment)
}

/// Validate and type a merged figment.
pub fn from_figment(figment: Figment) -> Result<LoadedConfig, ConfigError> {
    let app: AppConfig = figment.extract().map_err(|e| figment_error(e, &figment, ""))?;
    let raw: Value = figment.extract().map_err(|e| figment_error(e, &figment, ""))?;
    let mut unknown = Vec::new();
    let _: Result<AppConfig, _> = serde_ignored::deserialize(&raw, |path| unknown.push(path.to_string()));
    if let Some(key) = unknown.into_iter().next() {
        let suggestion = crate::suggest::nearest_field::<AppConfig>(&key).map(str::to_string);
        return Err(ConfigError::UnknownKey { origin: origin_of(&figment, &key), key, suggestion });
    }
    for (section, map) in [("sources", &app.sources), ("sinks", &app.sinks)] {
        for (id, v) in map {
            if v.as_dict().is_none() {
                let key = format!("{section}.{id}");
                return Err(ConfigError::InvalidValue {
                    origin: origin_of(&figment, &key),
                    key,
                    reason: "expected a table".into(),
                });
            }
        }
    }
    Ok(LoadedConfig { figment, app })
}

impl LoadedConfig {
    /// The merged configuration as TOML (`icicle config show`), secrets redacted by key
    /// ([`crate::secret::shown`]).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        let mut v: Value = self.figment.extract().map_err(|e| figment_error(e, &self.figment, ""))?;
        redact_tree(&mut Vec::new(), &mut v);
        toml::to_string_pretty(&v).map_err(|e| ConfigError::Parse(e.to_string()))
    }

    /// The `type` of component `section.id`.
    pub fn component_type(&self, section: &str, id: &str) -> Result<String, ConfigError> {
        let key = format!("{section}.{id}");
        self.figment.find_value(&format!("{key}.type")).ok().and_then(|v| v.into_string()).ok_or_else(|| {
            ConfigError::MissingKey { key: format!("{key}.type"), hint: format!("every [{key}] needs a `type`") }
        })
    }
}

/// Settings of the counting pipeline (`[counting]`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct CountingSettings {
    /// Run the counting pipeline in `icicle snapshot` (default false).
    pub enabled: bool,
    /// Directories deeper than this are counted at their ancestor of this depth.
    pub directory_max: usize,
    /// Where the `principal,count,recursive_count` CSV goes.
    pub output: PathBuf,
    /// `[sinks.<id>]` that receive the per-(principal, shard) counts (the seed's counts topic:
    /// a `kafka` sink; a `file` sink) and nothing else; `icicle counts rebuild` reads them back.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sinks: Vec<String>,
}

impl Default for CountingSettings {
    fn default() -> Self {
        CountingSettings { enabled: false, directory_max: 3, output: PathBuf::from("counts.csv"), sinks: Vec::new() }
    }
}

/// Settings of the aggregate pipeline (`[aggregate]`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default)]
pub struct AggregateSettings {
    /// Run the aggregate pipeline in `icicle snapshot` (default false).
    pub enabled: bool,
    /// Directory prefixes from this depth...
    pub directory_min: usize,
    /// ...to this depth (inclusive) get aggregate records.
    pub directory_max: usize,
    /// Epoch seconds ages are measured from; default the run's start time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_time: Option<i64>,
    /// Principals that may see directory aggregates (directories have no single owner).
    pub dir_visible_to: Vec<String>,
    /// The sketch, e.g. `{ type = "ddsketch", alpha = 0.01 }`.
    pub sketch: figment::value::Value,
    /// A counts CSV of the same snapshot (`[counting] output`, or `icicle counts rebuild`'s):
    /// every aggregate's file count is checked against it. Without it the counting pipeline of
    /// the same run is used, when enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<PathBuf>,
}

impl Default for AggregateSettings {
    fn default() -> Self {
        let mut d = figment::value::Dict::new();
        d.insert("type".into(), figment::value::Value::from("ddsketch"));
        AggregateSettings {
            enabled: false,
            directory_min: 1,
            directory_max: 3,
            reference_time: None,
            dir_visible_to: Vec::new(),
            sketch: figment::value::Value::from(d),
            counts: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn layers_merge_in_order_and_unknown_keys_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let a = write(d.path(), "a.toml", "[snapshot]\nworkers = 3\nmax_batch_bytes = 1000\n");
        let b = write(d.path(), "b.toml", "[snapshot]\nworkers = 5\n");
        let c = load(&[a.clone(), b.clone()], &["snapshot.max_batch_bytes=2000".into()]).unwrap();
        assert_eq!(c.app.snapshot.workers, 5);
        assert_eq!(c.app.snapshot.max_batch_bytes, 2000);
        let bad = write(d.path(), "bad.toml", "[snapshot]\nworkerz = 3\n");
        let err = load(&[a, bad.clone()], &[]).unwrap_err().to_string();
        assert!(err.contains("snapshot.workerz") && err.contains(&bad.display().to_string()), "{err}");
        let err = load(&[], &["snapshot.nope=1".into()]).unwrap_err().to_string();
        assert!(err.contains("snapshot.nope") && err.contains("--set"), "{err}");
    }

    #[test]
    fn wrong_types_name_the_key_and_file() {
        let d = tempfile::tempdir().unwrap();
        let a = write(d.path(), "a.toml", "[snapshot]\nworkers = \"many\"\n");
        let err = load(std::slice::from_ref(&a), &[]).unwrap_err().to_string();
        assert!(err.contains("snapshot.workers") && err.contains(&a.display().to_string()), "{err}");
    }

    #[test]
    fn set_values_parse_as_toml_or_strings() {
        assert_eq!(set_to_toml("a.b=3").unwrap(), "a.b = 3\n");
        assert_eq!(set_to_toml("a.b=hello world").unwrap(), "a.b = \"hello world\"\n");
        assert_eq!(set_to_toml("a.b=[\"x\"]").unwrap(), "a.b = [\"x\"]\n");
        assert!(set_to_toml("novalue").is_err());
        assert!(set_to_toml("a b=1").is_err());
    }

    #[test]
    fn set_errors_never_show_the_value() {
        let e = set_to_toml("tok-Zq8vN3pW6xK1yR4t").unwrap_err().to_string();
        assert!(!e.contains("Zq8v") && e.contains("KEY=VALUE"), "{e}");
        let e = set_to_toml("a b=tok-Zq8vN3pW6xK1yR4t").unwrap_err().to_string();
        assert_eq!(e, "--set `a b=…`: `a b` is not a dotted key (the value is not shown)");
    }

    #[test]
    fn show_and_errors_redact_secrets_by_key() {
        let d = tempfile::tempdir().unwrap();
        let a = write(
            d.path(),
            "a.toml",
            "[sinks.k]\ntype = \"kafka\"\nconnection = { bootstrap = \"b:9092\", properties = { \"sasl.oauthbearer.config\" = \"clientSecret=s3kr1t-oidc\", \"client.id\" = \"c\" } }\n\
             [sinks.g]\ntype = \"globus\"\ntoken_env = \"AgV8xPq7Lm2Qp9Ws4Xz6VbN3kR5tY1uI0oP\"\nclient_secret_file = \"/etc/s\"\n",
        );
        let shown = load(&[a], &[]).unwrap().to_toml().unwrap();
        assert!(!shown.contains("s3kr1t") && !shown.contains("AgV8"), "{shown}");
        for line in [
            "\"sasl.oauthbearer.config\" = \"***\"",
            "\"client.id\" = \"c\"",
            "token_env = \"***\"",
            "client_secret_file = \"/etc/s\"",
            "bootstrap = \"b:9092\"",
        ] {
            assert!(shown.contains(line), "{line} in\n{shown}");
        }
        let c = load(&[], &["sinks.g.token_env=123456789".into()]).unwrap();
        let e = extract_component::<BTreeMap<String, String>>(&c.figment, "sinks.g", &[]).unwrap_err().to_string();
        assert_eq!(e, "invalid value for `sinks.g.token_env` in --set command-line option: invalid type: found signed int, expected a string");
    }

    #[test]
    fn missing_config_file_is_an_error() {
        assert!(load(&[PathBuf::from("/nonexistent/icicle.toml")], &[]).is_err());
    }
}
