//! What deploy/ ships, checked with the tools a site runs: the systemd units with
//! `systemd-analyze verify` (and every command they start), the Prometheus alert rules with
//! `promtool check rules` and `promtool test rules`, the Grafana dashboard's queries with
//! promtool, and every metric either names against the ones icicle exports.

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// `promtool ARGS` in `dir`; its output on failure.
fn promtool(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("promtool (Debian's prometheus package): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

/// Every `icicle_*` name in `text` is a metric icicle exports (a histogram's with its
/// `_bucket`, `_sum` or `_count`).
fn assert_known_metrics(text: &str, what: &str) -> usize {
    let known: Vec<&str> = icicle_core::metrics::names::ALL.iter().map(|m| m.name).collect();
    let mut n = 0;
    for (i, _) in text.match_indices("icicle_") {
        if text[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '/' || c == ':') {
            continue;
        }
        let name: String = text[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
        assert!(
            known.contains(&name.as_str()) || known.contains(&base),
            "{what}: `{name}` is no metric icicle exports"
        );
        n += 1;
    }
    n
}

#[test]
fn the_alert_rules_check_and_fire_when_they_should() {
    let dir = deploy().join("prometheus");
    promtool(&dir, &["check", "rules", "icicle-alerts.yml"]).unwrap();
    promtool(&dir, &["test", "rules", "icicle-alerts.test.yml"]).unwrap();
    let rules = std::fs::read_to_string(dir.join("icicle-alerts.yml")).unwrap();
    assert!(assert_known_metrics(&rules, "icicle-alerts.yml") >= 8);
}

/// Each panel's queries are PromQL promtool accepts (checked as recording rules) over
/// metrics icicle exports.
#[test]
fn the_grafana_dashboard_asks_valid_queries_of_real_metrics() {
    let path = deploy().join("grafana/icicle-dashboard.json");
    let dash: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let exprs: Vec<String> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_string()))
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    let tmp = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        assert_known_metrics(e, "icicle-dashboard.json");
        rules.push_str(&format!(
            "      - record: icicle:dashboard:{i}\n        expr: {}\n",
            serde_json::to_string(e).unwrap()
        ));
    }
    std::fs::write(tmp.path().join("dashboard-rules.yml"), rules).unwrap();
    promtool(tmp.path(), &["check", "rules", "dashboard-rules.yml"]).unwrap();
}

/// The systemd units in deploy/ pass `systemd-analyze verify` (with the built binaries where
/// the units expect the installed ones), and every command they run takes its arguments.
#[test]
fn the_systemd_units_verify_and_run_real_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_icicle")).parent().unwrap().to_path_buf();
    for exe in ["icicle", "icicle-catalogd"] {
        let b = built.join(exe);
        assert!(b.exists(), "{} not built: cargo build --workspace --bins", b.display());
        std::os::unix::fs::symlink(&b, bin.join(exe)).unwrap();
    }
    let units = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd");
    let mut checked = 0;
    for entry in std::fs::read_dir(&units).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap().replace("/usr/local/bin/", &format!("{}/", bin.display()));
        let copy = tmp.path().join(&name);
        std::fs::write(&copy, &text).unwrap();
        let out = std::process::Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&copy)
            .output()
            .expect("systemd-analyze (Debian's systemd package)");
        let said = String::from_utf8_lossy(&out.stderr);
        // An unknown key or a bad value is only a warning (exit 0): nothing may be said.
        assert!(out.status.success() && said.trim().is_empty(), "{name}: {said}");
        for line in text.lines().filter(|l| l.starts_with("ExecStart")) {
            let command = line.split_once('=').unwrap().1.replace("%i", "x").replace("${CATALOG_DIR}", "/nowhere");
            let words: Vec<&str> = command.split_whitespace().collect();
            let out = std::process::Command::new(words[0]).args(&words[1..]).arg("--help").output().unwrap();
            assert!(out.status.success(), "{name}: {command} --help: {}", String::from_utf8_lossy(&out.stderr));
        }
        checked += 1;
    }
    assert_eq!(checked, 5);
}

/// The scripts lint clean with shellcheck (following what they source), and the package
/// helper's dnf path (RHEL, Rocky) asks dnf for the RHEL names of what the scripts need: run
/// with a stand-in `dnf` and `rpm` and no `apt-get` on PATH.
#[test]
fn the_scripts_lint_clean_and_the_dnf_path_names_rhel_packages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scripts: Vec<PathBuf> = std::fs::read_dir(root.join("scripts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sh"))
        .collect();
    let out = Command::new("shellcheck")
        .arg("-x")
        .args(&scripts)
        .current_dir(root)
        .output()
        .expect("shellcheck (Debian's shellcheck package)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = tmp.path().join("dnf.log");
    let shim = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755))
            .unwrap();
    };
    shim("dnf", &format!("echo \"$@\" >> {}", log.display()));
    // Only openssl-devel is installed.
    shim("rpm", "[ \"$2\" = openssl-devel ]");
    let run = Command::new("/bin/bash")
        .args([
            "-c",
            "set -euo pipefail; . scripts/pkg.sh; echo \"$(pkg_manager)\"; need=(); \
             for p in sqlite3 libssl-dev build-essential libcurl4-openssl-dev; do if pkg_missing \"$p\"; then need+=(\"$p\"); fi; done; \
             pkg_install \"${need[@]}\"",
        ])
        .current_dir(root)
        .env("PATH", &bin)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stdout).starts_with("dnf\n"));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "install -y -q sqlite gcc gcc-c++ make libcurl-devel\n",
        "openssl-devel is there already"
    );
}
