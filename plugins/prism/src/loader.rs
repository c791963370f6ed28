//! The Loader Configuration Module: from a profile of per-OST speed, the most I/O processes
//! any OST may have.
//!
//! The paper's rule is not public (see the README). The rule here is explicit:
//!
//! ```text
//! processes(ost) = clamp(round(ost_mb_s(ost) / per_process_mb_s), 1, max_processes_per_ost)
//! ```
//!
//! An OST that serves 400 MB/s to clients that each pull 100 MB/s is worth four readers; a
//! fifth only queues. Every OST gets at least one process (its data must be read) and never
//! more than the global cap. OSTs missing from the profile use `default_ost_mb_s`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A loader configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML did not parse or had unknown keys.
    #[error("{path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A value out of range.
    #[error("{path}: `{key}`: {reason}")]
    Invalid {
        /// The file (or `<config>` when built in code).
        path: PathBuf,
        /// The key.
        key: String,
        /// What was wrong.
        reason: String,
    },
}

/// The loader configuration: profiled OST speeds and the per-process rate and global cap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoaderConfig {
    /// What one reading process can pull from one OST, MB/s (the profile's single-reader figure).
    pub per_process_mb_s: f64,
    /// The most processes any OST may have, whatever its speed.
    #[serde(default = "default_cap")]
    pub max_processes_per_ost: u32,
    /// The speed of an OST absent from `ost_mb_s`, MB/s.
    #[serde(default)]
    pub default_ost_mb_s: Option<f64>,
    /// Profiled aggregate speed per OST index, MB/s (keys are OST indices as strings, as TOML
    /// keys are).
    #[serde(default)]
    pub ost_mb_s: BTreeMap<String, f64>,
}

fn default_cap() -> u32 {
    8
}

/// The file form: a `[loader]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoaderFile {
    loader: LoaderConfig,
}

/// A checked loader configuration, ready to answer [`Loader::max_processes`].
#[derive(Debug, Clone, PartialEq)]
pub struct Loader {
    per_process_mb_s: f64,
    cap: u32,
    default_ost_mb_s: f64,
    ost_mb_s: BTreeMap<u32, f64>,
}

impl LoaderConfig {
    /// Check values and parse OST keys; `origin` names the file in errors.
    pub fn check(&self, origin: &Path) -> Result<Loader, LoaderError> {
        let invalid = |key: &str, reason: String| LoaderError::Invalid {
            path: origin.to_path_buf(),
            key: key.to_string(),
            reason,
        };
        let positive = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(invalid(key, format!("{v} is not a positive speed")))
            }
        };
        let per_process_mb_s = positive("loader.per_process_mb_s", self.per_process_mb_s)?;
        if self.max_processes_per_ost == 0 {
            return Err(invalid("loader.max_processes_per_ost", "must be at least 1".into()));
        }
        let mut ost_mb_s = BTreeMap::new();
        for (k, &v) in &self.ost_mb_s {
            let key = format!("loader.ost_mb_s.{k}");
            let ost: u32 = k.trim().parse().map_err(|_| invalid(&key, format!("`{k}` is not an OST index")))?;
            ost_mb_s.insert(ost, positive(&key, v)?);
        }
        let default_ost_mb_s = match self.default_ost_mb_s {
            Some(v) => positive("loader.default_ost_mb_s", v)?,
            // Without a default, an unprofiled OST is as fast as the slowest profiled one,
            // or one process's worth when nothing was profiled.
            None => ost_mb_s
                .values()
                .copied()
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
                .unwrap_or(per_process_mb_s),
        };
        Ok(Loader { per_process_mb_s, cap: self.max_processes_per_ost, default_ost_mb_s, ost_mb_s })
    }

    /// Read a `[loader]` TOML file.
    pub fn from_file(path: &Path) -> Result<LoaderConfig, LoaderError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| LoaderError::Io { path: path.to_path_buf(), source })?;
        LoaderConfig::from_toml(path, &text)
    }

    /// Parse a `[loader]` TOML text (`path` names it in errors).
    pub fn from_toml(path: &Path, text: &str) -> Result<LoaderConfig, LoaderError> {
        let f: LoaderFile =
            toml::from_str(text).map_err(|e| LoaderError::Parse { path: path.to_path_buf(), reason: e.to_string() })?;
        Ok(f.loader)
    }

    /// The TOML text of this configuration (a `[loader]` table).
    pub fn to_toml(&self) -> String {
        let mut t = toml::Table::new();
        if let Ok(toml::Value::Table(v)) = toml::Value::try_from(self) {
            t.insert("loader".into(), toml::Value::Table(v));
        }
        toml::to_string(&t).unwrap_or_default()
    }
}

impl Loader {
    /// A loader with one speed for every OST.
    pub fn uniform(ost_mb_s: f64, per_process_mb_s: f64, cap: u32) -> Loader {
        Loader { per_process_mb_s, cap: cap.max(1), default_ost_mb_s: ost_mb_s, ost_mb_s: BTreeMap::new() }
    }

    /// The speed used for `ost`, MB/s.
    pub fn ost_mb_s(&self, ost: u32) -> f64 {
        self.ost_mb_s.get(&ost).copied().unwrap_or(self.default_ost_mb_s)
    }

    /// What one process pulls, MB/s.
    pub fn per_process_mb_s(&self) -> f64 {
        self.per_process_mb_s
    }

    /// The global cap.
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// The most processes `ost` may have: `clamp(round(ost / per_process), 1, cap)`.
    pub fn max_processes(&self, ost: u32) -> u32 {
        let r = (self.ost_mb_s(ost) / self.per_process_mb_s).round();
        // `as` saturates: a huge ratio becomes u32::MAX and is then capped.
        (r as u32).clamp(1, self.cap)
    }
}

/// Build a loader configuration from measurements: for each OST, the aggregate MB/s seen
/// with several concurrent readers; and the MB/s of one reader alone.
pub fn from_profile(per_process_mb_s: f64, ost_mb_s: &BTreeMap<u32, f64>, cap: u32) -> LoaderConfig {
    LoaderConfig {
        per_process_mb_s,
        max_processes_per_ost: cap.max(1),
        default_ost_mb_s: None,
        ost_mb_s: ost_mb_s.iter().map(|(k, v)| (k.to_string(), (v * 10.0).round() / 10.0)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_rounds_clamps_and_defaults() {
        let text = "[loader]\nper_process_mb_s = 100.0\nmax_processes_per_ost = 6\ndefault_ost_mb_s = 250.0\n[loader.ost_mb_s]\n113 = 400.0\n204 = 40.0\n10 = 5000.0\n";
        let l = LoaderConfig::from_toml(Path::new("l.toml"), text).unwrap().check(Path::new("l.toml")).unwrap();
        assert_eq!(l.max_processes(113), 4);
        assert_eq!(l.max_processes(204), 1); // 0.4 rounds to 0, at least one
        assert_eq!(l.max_processes(10), 6); // 50, capped
        assert_eq!(l.max_processes(7), 3); // default 2.5 rounds away from zero
        let again =
            LoaderConfig::from_toml(Path::new("x"), &LoaderConfig::from_toml(Path::new("l"), text).unwrap().to_toml())
                .unwrap();
        assert_eq!(again.check(Path::new("x")).unwrap(), l);
        // No default: the slowest profiled OST.
        let l = LoaderConfig::from_toml(
            Path::new("l"),
            "[loader]\nper_process_mb_s = 50.0\n[loader.ost_mb_s]\n1 = 100.0\n2 = 400.0\n",
        )
        .unwrap()
        .check(Path::new("l"))
        .unwrap();
        assert_eq!((l.max_processes(1), l.max_processes(2), l.max_processes(99), l.cap()), (2, 8, 2, 8));
    }

    #[test]
    fn the_example_configuration_gives_the_documented_caps() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/prism/loader.toml");
        let l = LoaderConfig::from_file(&p).unwrap().check(&p).unwrap();
        let caps: Vec<u32> = [10, 60, 86, 105, 113, 167, 204, 231, 999].map(|o| l.max_processes(o)).to_vec();
        assert_eq!(caps, vec![4, 3, 4, 2, 5, 4, 1, 8, 4]);
    }

    #[test]
    fn bad_configurations_name_file_key_and_reason() {
        let err = |t: &str| match LoaderConfig::from_toml(Path::new("/etc/l.toml"), t) {
            Err(e) => e.to_string(),
            Ok(c) => c.check(Path::new("/etc/l.toml")).unwrap_err().to_string(),
        };
        assert_eq!(
            err("[loader]\nper_process_mb_s = 0.0\n"),
            "/etc/l.toml: `loader.per_process_mb_s`: 0 is not a positive speed"
        );
        assert_eq!(
            err("[loader]\nper_process_mb_s = 1.0\n[loader.ost_mb_s]\nost7 = 1.0\n"),
            "/etc/l.toml: `loader.ost_mb_s.ost7`: `ost7` is not an OST index"
        );
        assert_eq!(
            err("[loader]\nper_process_mb_s = 1.0\nmax_processes_per_ost = 0\n"),
            "/etc/l.toml: `loader.max_processes_per_ost`: must be at least 1"
        );
        assert!(err("[loader]\nper_process_mb_s = 1.0\nper_proces = 2\n").contains("unknown field `per_proces`"));
    }
}
