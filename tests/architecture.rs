//! The crate layers, read from `cargo metadata`: core depends on no other icicle crate, gmeta
//! on core alone, the runtime on core and gmeta; no plugin crate depends on the runtime or on
//! the binary's crates, and a plugin depends on another plugin only where that one is its
//! transport or its base (listed here, so a new edge is a decision, not an accident).

use std::collections::{BTreeMap, BTreeSet};

/// Each workspace package's icicle dependencies (normal ones, not dev- or build-).
fn layers() -> BTreeMap<String, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut layers = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().unwrap_or_default().to_string();
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .filter(|n| n.starts_with("icicle"))
            .map(str::to_string)
            .collect();
        layers.insert(name, deps);
    }
    layers
}

/// Plugin-to-plugin dependencies that are allowed: a transport or a base the plugin extends.
const ALLOWED_PLUGIN_EDGES: &[(&str, &str)] = &[
    // The GPFS monitor reads mmwatch's Kafka topic through the kafka plugin's consumer.
    ("icicle-plugins-gpfs", "icicle-plugins-kafka"),
    // S3 objects are read by the snapshot plugin's listing readers.
    ("icicle-plugins-s3", "icicle-plugins-snapshot"),
    // The catalog agent and the MPI scheduler are PRISM's two halves.
    ("icicle-prism-agent", "icicle-plugins-prism"),
    ("icicle-prism-mpi", "icicle-plugins-prism"),
    // MPI through the one wrapper the snapshot's ranks also use.
    ("icicle-prism-mpi", "icicle-mpi-comm"),
];

fn is_plugin(name: &str) -> bool {
    name.starts_with("icicle-plugins-") || name.starts_with("icicle-prism-")
}

#[test]
fn the_crates_keep_their_layers() {
    let layers = layers();
    let deps = |n: &str| layers.get(n).unwrap_or_else(|| panic!("no package {n}")).clone();
    assert_eq!(deps("icicle-core"), BTreeSet::new(), "core depends on no other icicle crate");
    assert_eq!(deps("icicle-gmeta"), BTreeSet::from(["icicle-core".to_string()]), "gmeta depends on core alone");
    assert_eq!(
        deps("icicle-runtime"),
        BTreeSet::from(["icicle-core".to_string(), "icicle-gmeta".to_string()]),
        "the runtime on core and gmeta"
    );
    let mut plugins = 0;
    for (name, ds) in layers.iter().filter(|(n, _)| is_plugin(n)) {
        plugins += 1;
        for d in ds {
            let allowed = d == "icicle-core"
                || d == "icicle-gmeta"
                || ALLOWED_PLUGIN_EDGES.contains(&(name.as_str(), d.as_str()));
            assert!(
                allowed,
                "{name} depends on {d}: a plugin depends on core and gmeta (and only the listed plugin edges)"
            );
        }
    }
    assert!(plugins >= 12, "only {plugins} plugin crates found: is the naming rule still right?");
    for (a, b) in ALLOWED_PLUGIN_EDGES {
        assert!(deps(a).contains(*b), "{a} no longer depends on {b}: drop the edge from the list");
    }
}
