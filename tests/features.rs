//! The Cargo features (plugin families and front ends): `icicle plugins` lists exactly what
//! the build has, and a command, flag or configured plugin the build left out fails naming
//! the feature to build with. Runs in every build (the default one checks the listing only).

mod common;

use common::*;

/// Every plugin (`kind:type`) and the feature it comes with; `None`: always built in.
const PLUGINS: [(&str, Option<&str>); 23] = [
    ("source:gufi", Some("snapshot")),
    ("source:mmapplypolicy", Some("snapshot")),
    ("source:tsv", Some("snapshot")),
    ("source:walk", Some("snapshot")),
    ("source:lustre", Some("lustre")),
    ("source:gpfs", Some("gpfs")),
    ("source:fanotify", Some("local")),
    ("source:inotify", Some("local")),
    ("source:s3", Some("s3")),
    ("sink:kafka", Some("kafka")),
    ("sink:globus", Some("globus")),
    ("sink:index", Some("index")),
    ("sink:file", None),
    ("sink:stdout", None),
    ("sink:blackhole", None),
    ("sketch:ddsketch", Some("sketches")),
    ("sketch:exact", Some("sketches")),
    ("sketch:hybrid", Some("sketches")),
    ("sketch:kll", Some("sketches")),
    ("sketch:req", Some("sketches")),
    ("sketch:tdigest", Some("sketches")),
    ("placement:file", Some("prism")),
    ("placement:object", Some("prism")),
];

fn built(feature: &str) -> bool {
    match feature {
        "snapshot" => cfg!(feature = "snapshot"),
        "lustre" => cfg!(feature = "lustre"),
        "gpfs" => cfg!(feature = "gpfs"),
        "local" => cfg!(feature = "local"),
        "kafka" => cfg!(feature = "kafka"),
        "globus" => cfg!(feature = "globus"),
        "index" => cfg!(feature = "index"),
        "s3" => cfg!(feature = "s3"),
        "prism" => cfg!(feature = "prism"),
        "sketches" => cfg!(feature = "sketches"),
        "tui" => cfg!(feature = "tui"),
        "charts" => cfg!(feature = "charts"),
        f => panic!("unknown feature {f}"),
    }
}

const FEATURES: [&str; 12] =
    ["snapshot", "lustre", "gpfs", "local", "kafka", "globus", "index", "s3", "prism", "sketches", "tui", "charts"];

#[test]
fn plugins_lists_what_the_build_has() {
    let (code, out, err) = icicle(&["plugins", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let v: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let got: Vec<String> =
        v.iter().map(|p| format!("{}:{}", p["kind"].as_str().unwrap(), p["type"].as_str().unwrap())).collect();
    for (plugin, feature) in PLUGINS {
        assert_eq!(got.contains(&plugin.to_string()), feature.is_none_or(built), "{plugin} ({feature:?}) in {got:?}");
    }
    assert_eq!(got.len(), PLUGINS.iter().filter(|(_, f)| f.is_none_or(built)).count(), "{got:?}");
    let (code, text, _) = icicle(&["plugins"], &[]);
    assert_eq!(code, 0);
    let missing: Vec<&str> = FEATURES.into_iter().filter(|f| !built(f)).collect();
    if missing.is_empty() {
        assert!(!text.contains("built without"), "{text}");
    } else {
        assert!(text.contains(&format!("built without the features: {}\n", missing.join(", "))), "{text}");
    }
}

/// The command fails (exit 1) naming `feature`.
fn refused(args: &[&str], feature: &str) {
    let (code, _, err) = icicle(args, &[]);
    assert_eq!(code, 1, "{args:?}: {err}");
    assert!(
        err.contains(&format!("needs the `{feature}` feature")) && err.contains(&format!("--features {feature}")),
        "{args:?}: {err}"
    );
}

#[test]
fn commands_and_flags_left_out_name_their_feature() {
    let tmp = test_dir();
    let out = tmp.path().join("out");
    let out = out.to_str().unwrap();
    let commands: [(&[&str], &str); 9] = [
        (&["find", "/", "--name", "x"], "index"),
        (&["du", "/"], "index"),
        (&["serve", "--listen", "127.0.0.1:0"], "index"),
        (&["top", "--connect", "127.0.0.1:9", "--once"], "tui"),
        (&["snapshot", "--tui"], "tui"),
        (&["monitor", "--drain", "--tui"], "tui"),
        (&["sketch-compare", "--out", out], "sketches"),
        (&["preprocess", "--out", out], "snapshot"),
        (&["preprocess", "--out", "s3://bucket/prefix"], "s3"),
    ];
    for (args, feature) in commands {
        if !built(feature) && (args[0] != "preprocess" || feature == "snapshot" || built("snapshot")) {
            refused(args, feature);
        }
    }
    // Both families: the catalog is read from an index and written in PRISM's form.
    if !built("index") || !built("prism") {
        refused(&["catalog", "--out", out, "/"], "index,prism");
    }
}

#[test]
fn configured_plugins_left_out_name_their_feature() {
    let tmp = test_dir();
    for (plugin, feature) in PLUGINS {
        let (Some(feature), Some((kind, ty))) = (feature, plugin.split_once(':')) else { continue };
        if built(feature) || !matches!(kind, "source" | "sink") {
            continue;
        }
        // A source is looked up with a sink that is always there; a sink needs no source.
        let sink = if kind == "source" { "[sinks.y]\ntype = \"stdout\"\n" } else { "" };
        let cfg = config(tmp.path(), "c.toml", &format!("[{kind}s.x]\ntype = \"{ty}\"\n{sink}"));
        let (code, _, err) = icicle(&["snapshot", "-c", cfg.to_str().unwrap()], &[]);
        assert_eq!(code, 1, "{plugin}: {err}");
        assert!(
            err.contains(&format!("unknown {kind} type `{ty}`"))
                && err.contains(&format!("comes with the `{feature}` feature")),
            "{plugin}: {err}"
        );
    }
}
