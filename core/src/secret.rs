//! Secrets (tokens, passwords, client secrets): read only from the environment or a file,
//! never from configuration text, and never printed. [`shown`] and [`redact_text`] are the
//! one redaction every printer of configuration uses (`config show`, configuration and
//! `--set` errors): values are hidden by the pattern of their key.

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

/// The secret in environment variable `var` (trimmed; empty is an error). A `var` that is
/// not set and does not look like a variable's name (a secret put where its name belongs) is
/// an error that does not show it.
pub fn from_env(var: &str) -> Result<Secret, String> {
    let v = std::env::var(var).map_err(|_| {
        if looks_like_env_name(var) {
            format!("environment variable `{var}` is not set")
        } else {
            "not the name of an environment variable (the value is not shown: it looks like a secret); give the name of the variable that holds the secret"
                .to_string()
        }
    })?;
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

/// What a value that must not be printed is shown as.
pub const REDACTED: &str = "***";

/// Words of a key that make its value a secret.
const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "secrets",
    "token",
    "tokens",
    "credential",
    "credentials",
    "apikey",
    "jaas",
    "oauthbearer",
    "authorization",
];

/// Adjacent words of a key that make its value a secret (`api_key`, `private.key`,
/// librdkafka's `ssl.key.pem` and `ssl.key.password`).
const SECRET_PAIRS: &[(&str, &str)] = &[("api", "key"), ("private", "key"), ("ssl", "key")];

/// librdkafka properties that match the patterns but hold no secret. Every other `sasl.*`
/// property is taken for one.
const PLAIN_KEYS: &[&str] = &[
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.kerberos.service.name",
    "sasl.kerberos.principal",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.token.endpoint.url",
    "enable.sasl.oauthbearer.unsecure.jwt",
];

/// The lower-case words of a key: split at anything but letters and digits, and where a
/// lower-case letter meets an upper-case one (`clientSecret`).
fn words(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in key.chars() {
        if !c.is_ascii_alphanumeric() {
            out.extend((!cur.is_empty()).then(|| std::mem::take(&mut cur)));
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    out.extend((!cur.is_empty()).then_some(cur));
    out
}

/// Whether the value of `key` (one key, `token_env` or `sasl.oauthbearer.config`, or a
/// dotted path of keys) is a secret or says where one comes from: it holds one of the words
/// password, secret, token, credentials, oauthbearer... or is a librdkafka `sasl.*` or
/// `ssl.key*` property. Keys that only name where a secret is (`*_env`, `*_file`) match too:
/// [`shown`] decides whether their value may be printed.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.trim_matches('"');
    let lower = key.to_ascii_lowercase();
    if PLAIN_KEYS.contains(&lower.as_str()) {
        return false;
    }
    if lower.starts_with("sasl.") || lower.contains(".sasl.") {
        return true;
    }
    let w = words(key);
    w.iter().any(|x| SECRET_WORDS.contains(&x.as_str()))
        || w.windows(2).any(|p| SECRET_PAIRS.contains(&(p[0].as_str(), p[1].as_str())))
}

/// Whether the value of `key` is itself a secret: a secret's key ([`is_secret_key`]) other
/// than one naming where a secret is (`*_env`, `*_file`, a `*.location` path).
pub fn holds_secret_value(key: &str) -> bool {
    let lower = key.trim_matches('"').to_ascii_lowercase();
    is_secret_key(&lower) && !(lower.ends_with("_env") || lower.ends_with("_file") || lower.ends_with(".location"))
}

/// Whether `s` looks like the name of an environment variable rather than a secret: letters,
/// digits and `_`, not starting with a digit, and not the mix of both cases and digits (or
/// the long run of letters and digits) that tokens are made of.
pub fn looks_like_env_name(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty()
        || b.len() > 128
        || b[0].is_ascii_digit()
        || !b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
    {
        return false;
    }
    let (upper, lower, digit) =
        (b.iter().any(u8::is_ascii_uppercase), b.iter().any(u8::is_ascii_lowercase), b.iter().any(u8::is_ascii_digit));
    let mixed = b.len() >= 16 && upper && lower && digit;
    let long_run = b.len() >= 24 && digit && !s.contains('_');
    !mixed && !long_run
}

/// Whether `value` only says where a secret is: `env:NAME` or `file:/path`.
fn is_reference(value: &str) -> bool {
    value.strip_prefix("env:").is_some_and(looks_like_env_name) || value.starts_with("file:")
}

/// Whether the value at the key path `path` (outermost key first) may be printed: values of
/// keys that are no secret ([`is_secret_key`]), the names of environment variables
/// (`*_env`, when the value looks like one), paths (`*_file`, `*.location`) and `env:` /
/// `file:` references. Anything else under a secret key is [`REDACTED`].
pub fn shown(path: &[&str], value: &str) -> bool {
    let Some(leaf) = path.last().map(|k| k.trim_matches('"').to_ascii_lowercase()) else { return true };
    if leaf.ends_with("_env") {
        return looks_like_env_name(value);
    }
    if !path.iter().any(|k| is_secret_key(k)) {
        return true;
    }
    leaf.ends_with("_file") || leaf.ends_with(".location") || is_reference(value)
}

/// `text` with the value of every `key = value` (or `key=value`) whose key is a secret
/// replaced by [`REDACTED`]: for messages that quote configuration text (a TOML parse error
/// shows the line) or free text that may hold `clientSecret=...`.
pub fn redact_text(text: &str) -> String {
    text.split('\n').map(redact_line).collect::<Vec<_>>().join("\n")
}

fn redact_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    let mut i = 0;
    while let Some(at) = line[i..].find('=').map(|p| p + i) {
        let key = key_before(&line[..at]);
        let start = at + 1 + (line[at + 1..].len() - line[at + 1..].trim_start().len());
        let end = value_end(line, start);
        let raw = &line[start..end];
        let quoted = raw.len() >= 2 && (raw.starts_with('"') || raw.starts_with('\''));
        let value = if quoted { &raw[1..raw.len() - 1] } else { raw };
        if !key.is_empty() && !raw.is_empty() && !shown(&[key], value) {
            out.push_str(&line[copied..start]);
            if quoted {
                out.push_str(&format!("{q}{REDACTED}{q}", q = &raw[..1]));
            } else {
                out.push_str(REDACTED);
            }
            copied = end;
            i = end.max(at + 1);
        } else {
            i = at + 1;
        }
    }
    out.push_str(&line[copied..]);
    out
}

/// The key just before an `=` at the end of `before`: a quoted string or a run of letters,
/// digits, `_`, `-` and `.`, after any spaces.
fn key_before(before: &str) -> &str {
    let t = before.trim_end();
    if let Some(inner) = t.strip_suffix('"') {
        return inner.rfind('"').map_or("", |q| &inner[q + 1..]);
    }
    let start = t.rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))).map_or(0, |p| p + 1);
    &t[start..]
}

/// Where a value starting at `start` ends: after its closing quote, or at a space, `,`, `}`,
/// `]`, `)` or backtick.
fn value_end(line: &str, start: usize) -> usize {
    let rest = &line[start..];
    let mut chars = rest.char_indices();
    match chars.next() {
        Some((_, q @ ('"' | '\''))) => {
            let mut escaped = false;
            for (p, c) in chars {
                match c {
                    '\\' if q == '"' && !escaped => escaped = true,
                    c if c == q && !escaped => return start + p + 1,
                    _ => escaped = false,
                }
            }
            line.len()
        }
        _ => {
            start
                + rest
                    .find(|c: char| c.is_whitespace() || matches!(c, ',' | '}' | ']' | ')' | '`'))
                    .unwrap_or(rest.len())
        }
    }
}

/// `text` with every occurrence of the values of `secrets` replaced by [`REDACTED`] (for
/// messages a remote service may have echoed a secret in). Values shorter than 8 bytes are
/// left alone: they would match ordinary text, and real secrets are longer.
pub fn scrub(mut text: String, secrets: &[&Secret]) -> String {
    for s in secrets {
        let v = s.expose();
        if v.len() >= 8 && text.contains(v) {
            text = text.replace(v, REDACTED);
        }
    }
    text
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

    #[test]
    fn keys_are_secret_by_pattern() {
        for k in [
            "token_env",
            "client_secret_file",
            "sasl.oauthbearer.config",
            "sasl.password",
            "sasl.jaas.config",
            "ssl.key.password",
            "ssl.key.pem",
            "api_key",
            "credentials",
            "clientSecret",
            "sinks.k.connection.properties.sasl.oauthbearer.config",
            "secret_properties",
            "\"sasl.oauthbearer.client.secret\"",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in [
            "sasl_username",
            "sasl_mechanism",
            "sasl.mechanism",
            "sasl.oauthbearer.method",
            "client.id",
            "access_key_id",
            "keys",
            "index_id",
            "auth_url",
            "bootstrap",
        ] {
            assert!(!is_secret_key(k), "{k}");
        }
    }

    #[test]
    fn names_of_variables_are_told_from_tokens() {
        for n in [
            "GLOBUS_SEARCH_TOKEN",
            "ICICLE_TEST_GLOBUS_DIRECT_TOKEN",
            "my_token",
            "X",
            "AWS_SECRET_ACCESS_KEY",
            "Token2",
        ] {
            assert!(looks_like_env_name(n), "{n}");
        }
        for t in [
            "AgV8xPq7Lm2Qp9Ws4Xz6VbN3kR5tY1uI0oP",
            "tok-Zq8vN3pW6xK1yR4t",
            "a3f9b2c7d1e0f4a5b6c7d8e9f0a1b2c3",
            "",
            "1ABC",
            "has space",
            "eyJhbGciOi.J9.x",
        ] {
            assert!(!looks_like_env_name(t), "{t}");
        }
    }

    #[test]
    fn only_references_and_plain_values_are_shown() {
        assert!(shown(&["sinks", "g", "token_env"], "GLOBUS_SEARCH_TOKEN"));
        assert!(!shown(&["sinks", "g", "token_env"], "AgV8xPq7Lm2Qp9Ws4Xz6VbN3kR5tY1uI0oP"));
        assert!(shown(&["sinks", "g", "token_file"], "/etc/token"));
        assert!(shown(&["c", "secret_properties", "sasl.oauthbearer.client.secret"], "env:OIDC_SECRET"));
        assert!(shown(&["c", "secret_properties", "sasl.oauthbearer.client.secret"], "file:/etc/oidc"));
        assert!(!shown(&["c", "secret_properties", "sasl.password"], "hunter2"));
        assert!(!shown(&["c", "properties", "sasl.oauthbearer.config"], "clientSecret=x"));
        assert!(shown(&["c", "properties", "ssl.key.location"], "/etc/key.pem"));
        assert!(shown(&["c", "properties", "client.id"], "icicle"));
        assert!(shown(&[], "anything"));
    }

    #[test]
    fn text_is_redacted_by_key() {
        let cases = [
            ("4 | token_env = AgV8xPq7Lm2Qp9Ws4Xz6VbN3kR5tY1uI0oP", "4 | token_env = ***"),
            ("4 | token_env = \"GLOBUS_TOKEN\"", "4 | token_env = \"GLOBUS_TOKEN\""),
            (
                r#"p = { "sasl.oauthbearer.config" = "clientId=a clientSecret=b", "client.id" = "c" }"#,
                r#"p = { "sasl.oauthbearer.config" = "***", "client.id" = "c" }"#,
            ),
            (
                r#"cfg = "clientId=icicle clientSecret=Sup3r scope=k""#,
                r#"cfg = "clientId=icicle clientSecret=*** scope=k""#,
            ),
            ("--set `sinks.g.client_secret=abc def`", "--set `sinks.g.client_secret=*** def`"),
            (r#"x = "a\"b" password='p w' y=1"#, r#"x = "a\"b" password='***' y=1"#),
            ("no = sign here, a == b, =", "no = sign here, a == b, ="),
            ("line one\npassword=x\n", "line one\npassword=***\n"),
        ];
        for (text, want) in cases {
            assert_eq!(redact_text(text), want, "{text}");
        }
    }

    #[test]
    fn scrub_removes_known_values() {
        let (a, b) = (Secret::new("long-secret-1"), Secret::new("short"));
        assert_eq!(scrub("x long-secret-1 short y".into(), &[&a, &b]), "x *** short y");
    }
}
