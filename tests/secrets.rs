//! Secrets never reach output: `config show` redacts values by key pattern (librdkafka
//! passthrough properties included) and shows where secrets come from; a secret put where
//! the name of an environment variable belongs, a TOML line that does not parse, a value of
//! the wrong type and a `--set` the parser rejects are reported without the value.

mod common;

use common::*;

const INDEX: &str = "0f5c3a52-7d6e-4a8b-9c1d-2e3f4a5b6c7d";
const OIDC_SECRET: &str = "Sup3rS3cr3t-OIDC";
const KEY_PASSWORD: &str = "k3y-Pa55w0rd";
const TOKEN: &str = "AgV8xPq7Lm2Qp9Ws4Xz6VbN3kR5tY1uI0oP";

/// A configuration with secrets in every place an operator might put one by mistake.
fn leaky(dir: &std::path::Path) -> std::path::PathBuf {
    config(
        dir,
        "leaky.toml",
        &format!(
            "[sources.w]\ntype = \"walk\"\nroot = \"{root}\"\n\
             [sinks.k]\ntype = \"kafka\"\ntopic = \"icicle\"\n\
             [sinks.k.connection]\nbootstrap = \"localhost:9092\"\nsecurity_protocol = \"SASL_SSL\"\nsasl_mechanism = \"OAUTHBEARER\"\n\
             sasl_password_env = \"ICICLE_MSK_PASSWORD\"\nssl_ca_location = \"/etc/ssl/ca.pem\"\n\
             properties = {{ \"sasl.oauthbearer.config\" = \"clientId=icicle clientSecret={OIDC_SECRET} scope=kafka\", \"sasl.oauthbearer.method\" = \"oidc\", \"client.id\" = \"icicle-1\", \"ssl.key.password\" = \"{KEY_PASSWORD}\", \"ssl.key.location\" = \"/etc/ssl/client.key\" }}\n\
             secret_properties = {{ \"sasl.oauthbearer.client.secret\" = \"env:ICICLE_OIDC_SECRET\", \"sasl.password\" = \"{KEY_PASSWORD}\" }}\n\
             [sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\ntoken_env = \"{TOKEN}\"\n\
             [sinks.g2]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\nclient_id = \"5b1e0c9a\"\nclient_secret_file = \"/etc/icicle/globus-secret\"\n",
            root = dir.display()
        ),
    )
}

fn assert_clean(text: &str) {
    for s in [OIDC_SECRET, KEY_PASSWORD, TOKEN, "AgV8xPq7"] {
        assert!(!text.contains(s), "`{s}` reached the output:\n{text}");
    }
}

#[test]
fn config_show_redacts_secrets_by_key_and_shows_where_they_come_from() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = leaky(tmp.path());
    let (code, out, err) = icicle(
        &["config", "show", "-c", cfg.to_str().unwrap()],
        &[("ICICLE__SINKS__G2__CLIENT_SECRET_ENV", "csec-Hj7Lm2Qp9Ws4Xz6V")],
    );
    assert_eq!(code, 0, "{err}");
    assert_clean(&out);
    assert!(!out.contains("csec-Hj7Lm2Qp9Ws4Xz6V"), "{out}");
    let sinks = &out[out.find("[sinks.").unwrap()..out.find("[snapshot]").unwrap()];
    assert_eq!(
        sinks,
        "[sinks.g2]\n\
         client_id = \"5b1e0c9a\"\n\
         client_secret_env = \"***\"\n\
         client_secret_file = \"/etc/icicle/globus-secret\"\n\
         index_id = \"0f5c3a52-7d6e-4a8b-9c1d-2e3f4a5b6c7d\"\n\
         type = \"globus\"\n\
         \n\
         [sinks.globus]\n\
         index_id = \"0f5c3a52-7d6e-4a8b-9c1d-2e3f4a5b6c7d\"\n\
         token_env = \"***\"\n\
         type = \"globus\"\n\
         \n\
         [sinks.k]\n\
         topic = \"icicle\"\n\
         type = \"kafka\"\n\
         \n\
         [sinks.k.connection]\n\
         bootstrap = \"localhost:9092\"\n\
         sasl_mechanism = \"OAUTHBEARER\"\n\
         sasl_password_env = \"ICICLE_MSK_PASSWORD\"\n\
         security_protocol = \"SASL_SSL\"\n\
         ssl_ca_location = \"/etc/ssl/ca.pem\"\n\
         \n\
         [sinks.k.connection.properties]\n\
         \"client.id\" = \"icicle-1\"\n\
         \"sasl.oauthbearer.config\" = \"***\"\n\
         \"sasl.oauthbearer.method\" = \"oidc\"\n\
         \"ssl.key.location\" = \"/etc/ssl/client.key\"\n\
         \"ssl.key.password\" = \"***\"\n\
         \n\
         [sinks.k.connection.secret_properties]\n\
         \"sasl.oauthbearer.client.secret\" = \"env:ICICLE_OIDC_SECRET\"\n\
         \"sasl.password\" = \"***\"\n\
         \n"
    );
}

#[test]
fn a_token_where_a_variable_name_belongs_is_not_echoed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("tree");
    std::fs::create_dir_all(&root).unwrap();
    let base =
        format!("[records]\nvisible_to = [\"public\"]\n[sources.w]\ntype = \"walk\"\nroot = \"{}\"\n", root.display());
    let cfg = config(
        tmp.path(),
        "t.toml",
        &format!("{base}[sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\ntoken_env = \"{TOKEN}\"\n"),
    );
    let (code, out, err) = icicle(&["snapshot", "--json", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{err}");
    assert_clean(&format!("{out}{err}"));
    assert_eq!(
        err,
        format!(
            "error: invalid value for `sinks.globus.token_env` in file {}: not the name of an environment variable (the value is not shown: it looks like a secret); give the name of the variable that holds the secret\n",
            cfg.display()
        )
    );
    // An ordinary name that is not set is still named.
    let cfg =
        config(tmp.path(), "u.toml", &format!("{base}[sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\ntoken_env = \"ICICLE_TEST_UNSET_TOKEN\"\n"));
    let (code, _, err) = icicle(&["snapshot", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!("error: invalid value for `sinks.globus.token_env` in file {}: environment variable `ICICLE_TEST_UNSET_TOKEN` is not set\n", cfg.display())
    );
    // The same token unquoted: the TOML error quotes the line, without the value.
    let cfg = config(
        tmp.path(),
        "p.toml",
        &format!("[sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\ntoken_env = {TOKEN}\n"),
    );
    let (code, out, err) = icicle(&["config", "show", "-c", cfg.to_str().unwrap()], &[]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        format!(
            "error: file {}: TOML parse error at line 4, column 13\n  |\n4 | token_env = ***\n  |             ^\ninvalid string\nexpected `\"`, `'`\n\n",
            cfg.display()
        )
    );
    // A secret of the wrong type: the key and the type, not the value.
    let cfg = config(
        tmp.path(),
        "n.toml",
        &format!("{base}[sinks.globus]\ntype = \"globus\"\nindex_id = \"{INDEX}\"\ntoken_env = \"X\"\n"),
    );
    let (code, _, err) =
        icicle(&["snapshot", "-c", cfg.to_str().unwrap(), "--set", "sinks.globus.token_env=918273645546372819"], &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err, "error: invalid value for `sinks.globus.token_env` in --set command-line option: invalid type: found signed int, expected a string\n");
}

#[test]
fn a_set_the_parser_rejects_does_not_echo_its_value() {
    for (set, want) in [
        ("sinks.k.topic x=hunter2-Zq8v", "error: --set `sinks.k.topic x=…`: `sinks.k.topic x` is not a dotted key (the value is not shown)\n"),
        ("hunter2-Zq8vN3pW6xK1", "error: --set: an argument without `=` (expected KEY=VALUE; the argument is not shown, in case it is a secret)\n"),
        ("=hunter2-Zq8v", "error: --set `=…`: `` is not a dotted key (the value is not shown)\n"),
    ] {
        let (code, out, err) = icicle(&["config", "show", "--set", set], &[]);
        assert_eq!((code, out.as_str(), err.as_str()), (1, "", want), "--set {set}");
    }
    // What the parser takes is shown redacted, like any other layer.
    let (code, out, err) =
        icicle(&["config", "show", "--set", "sinks.k.connection.sasl_password_env=hunter2-Zq8v"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("[sinks.k.connection]\nsasl_password_env = \"***\"\n"), "{out}");
    assert!(!out.contains("hunter2"), "{out}");
}
