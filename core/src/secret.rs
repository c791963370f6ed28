//! Secrets (tokens, passwords, client secrets): read only from the environment or a file,
//! never from configuration text, and never printed.

use std::path::Path;

/// A secret value that never prints: `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// The secret in environment variable `var` (trimmed; empty is an error).
pub fn from_env(var: &str) -> Result<Secret, String> {
    let v = std::env::var(var).map_err(|_| format!("environment variable `{var}` is not set"))?;
    let v = v.trim();
    if v.is_empty() {
        return Err(format!("environment variable `{var}` is empty"));
    }
    Ok(Secret::new(v))
}

/// The secret on the first line of `path` (trimmed; empty is an error).
pub fn from_file(path: &Path) -> Result<Secret, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let v = s.lines().next().unwrap_or("").trim();
    if v.is_empty() {
        return Err(format!("`{}` is empty", path.display()));
    }
    Ok(Secret::new(v))
}

/// A secret named by `env:VARIABLE` or `file:/path`.
pub fn from_spec(spec: &str) -> Result<Secret, String> {
    if let Some(var) = spec.strip_prefix("env:") {
        from_env(var)
    } else if let Some(path) = spec.strip_prefix("file:") {
        from_file(Path::new(path))
    } else {
        Err("give `env:VARIABLE` or `file:/path` (secrets are never written in configuration files)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_come_from_env_or_files_and_never_print() {
        std::env::set_var("ICICLE_TEST_SECRET_X", " s3kr1t \n");
        let s = from_spec("env:ICICLE_TEST_SECRET_X").unwrap();
        assert_eq!(s.expose(), "s3kr1t");
        assert_eq!(format!("{s:?} {s}"), "Secret(***) ***");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "tok3n\nignored\n").unwrap();
        assert_eq!(from_spec(&format!("file:{}", f.display())).unwrap().expose(), "tok3n");
        std::fs::write(&f, "\n").unwrap();
        assert!(from_file(&f).unwrap_err().contains("is empty"));
        assert!(from_env("ICICLE_TEST_SECRET_UNSET").unwrap_err().contains("not set"));
        assert!(from_spec("hunter2").unwrap_err().contains("env:VARIABLE"));
    }
}
