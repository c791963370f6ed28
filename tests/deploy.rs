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

/// The Spack package, loaded by Python with stand-ins for Spack's directives (Spack itself
/// cannot be fetched here): it declares the variants and dependencies it should, and what it
/// runs on install names packages, profiles and files that exist in this repository.
#[test]
fn the_spack_package_builds_what_the_repository_holds() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pkg = deploy().join("spack/spack_repo/icicle/packages/icicle/package.py");
    let yaml = std::fs::read_to_string(deploy().join("spack/spack_repo/icicle/repo.yaml")).unwrap();
    assert!(yaml.contains("namespace: icicle") && yaml.contains("api: v2"), "{yaml}");
    let script = r#"
import json, sys, types, os
calls, directives = [], []
def directive(name):
    def f(*a, **k):
        directives.append([name, [str(x) for x in a], {k2: str(v) for k2, v in k.items()}])
        return (lambda fn: fn) if name == "run_after" else None
    return f
pkgmod = types.ModuleType("spack.package")
for d in ["version", "variant", "depends_on", "license", "maintainers", "run_after"]:
    setattr(pkgmod, d, directive(d))
class When:
    def __init__(self, spec): directives.append(["when", [spec], {}])
    def __enter__(self): return self
    def __exit__(self, *a): return False
pkgmod.when = When
class WorkingDir:
    def __init__(self, d): calls.append(["working_dir", str(d)])
    def __enter__(self): return self
    def __exit__(self, *a): return False
pkgmod.working_dir = WorkingDir
pkgmod.make_jobs = 2
pkgmod.join_path = os.path.join
def mkdirp(*a):
    calls.append(["mkdirp"] + [str(x) for x in a])
    for x in a: os.makedirs(str(x), exist_ok=True)
pkgmod.mkdirp = mkdirp
pkgmod.install = lambda *a: calls.append(["install"] + [str(x) for x in a])
pkgmod.symlink = lambda *a: calls.append(["symlink"] + [str(x) for x in a])
for f in ["bash_completion_path", "zsh_completion_path", "fish_completion_path"]:
    setattr(pkgmod, f, lambda prefix, f=f: os.path.join(str(prefix), f))
class Exe:
    def __init__(self, name): self.name = str(name)
    def __call__(self, *a, **k): calls.append([self.name] + [str(x) for x in a])
pkgmod.Executable = Exe
pkgmod.__all__ = [n for n in dir(pkgmod) if not n.startswith("_")]
spack = types.ModuleType("spack"); spack.package = pkgmod
cargo_mod = types.ModuleType("spack_repo.builtin.build_systems.cargo")
class CargoPackage: pass
cargo_mod.CargoPackage = CargoPackage
for name, mod in [("spack", spack), ("spack.package", pkgmod), ("spack_repo", types.ModuleType("spack_repo")),
                  ("spack_repo.builtin", types.ModuleType("spack_repo.builtin")),
                  ("spack_repo.builtin.build_systems", types.ModuleType("spack_repo.builtin.build_systems")),
                  ("spack_repo.builtin.build_systems.cargo", cargo_mod)]:
    sys.modules[name] = mod
ns = {}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), ns)
Icicle = ns["Icicle"]
assert issubclass(Icicle, CargoPackage)
class Prefix(str):
    def __getattr__(self, a): return Prefix(os.path.join(self, a))
class Spec:
    def __init__(self, s): self.s = s
    def satisfies(self, v): return v in self.s
out = {"directives": directives}
for variants in ["+mpi+prism", "~mpi~prism"]:
    calls.clear()
    p = Icicle.__new__(Icicle)
    p.spec, p.prefix = Spec(variants), Prefix(sys.argv[2])
    p.module = types.SimpleNamespace(cargo=Exe("cargo"))
    p.stage = types.SimpleNamespace(source_path="/checkout")
    out["build_args"] = p.build_args
    p.install_extras()
    out[variants] = list(calls)
print(json.dumps(out))
"#;
    let prefix = tempfile::tempdir().unwrap();
    let python = std::env::var("ICICLE_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python).args(["-c", script]).arg(&pkg).arg(prefix.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let has = |name: &str, first: &str| {
        v["directives"].as_array().unwrap().iter().any(|d| d[0] == name && d[1][0].as_str() == Some(first))
    };
    for (name, first) in [("variant", "mpi"), ("variant", "prism"), ("depends_on", "mpi"), ("when", "+mpi")] {
        assert!(has(name, first), "{name}({first}): {v}");
    }
    // The profile named is Cargo.toml's; every path cargo is pointed at is a package here.
    let manifest = std::fs::read_to_string(repo.join("Cargo.toml")).unwrap();
    assert_eq!(v["build_args"], serde_json::json!(["--locked", "--profile", "dist"]));
    assert!(manifest.contains("[profile.dist]"));
    let all = v["+mpi+prism"].as_array().unwrap();
    let mut paths = Vec::new();
    for call in all {
        let c: Vec<&str> = call.as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        if c[0] == "cargo" {
            if let Some(i) = c.iter().position(|a| *a == "--path") {
                paths.push(c[i + 1].to_string());
            }
            if let Some(i) = c.iter().position(|a| *a == "-p") {
                let name = c[i + 1];
                assert!(repo.join("plugins/prism-agent/Cargo.toml").exists());
                let agent = std::fs::read_to_string(repo.join("plugins/prism-agent/Cargo.toml")).unwrap();
                assert!(agent.contains(&format!("name = \"{name}\"")), "{name}");
                assert!(agent.contains("name = \"catalog_agent\"") && agent.contains("cdylib"));
            }
        }
        if c[0] == "install" {
            assert_eq!(c[1], "target/dist/libcatalog_agent.so");
        }
    }
    assert_eq!(paths, ["plugins/prism-agent", "icicle-mpi", "plugins/prism-mpi"]);
    // Those relative paths are taken in the checkout.
    assert_eq!(all[0], serde_json::json!(["working_dir", "/checkout"]), "{all:?}");
    for p in &paths {
        assert!(repo.join(p).join("Cargo.toml").exists(), "{p}");
    }
    // The commands it runs after installing are ones `icicle` has.
    for sub in [["completions", "bash"], ["man", "--dir"]] {
        assert!(
            all.iter().any(|c| c[0] == format!("{}/bin/icicle", prefix.path().display()).as_str()
                && c[1] == sub[0]
                && c[2] == sub[1]),
            "{sub:?}: {all:?}"
        );
    }
    let minimal = v["~mpi~prism"].as_array().unwrap();
    assert!(!minimal.iter().any(|c| c[0] == "cargo"), "{minimal:?}");
}

/// The container build file: every file it copies from the context exists and is not left
/// out of the context, it installs the packages and profile that exist, and the binaries it
/// copies out of the build stage are ones those packages build. (No container engine runs
/// here: the image itself is not built in the suite.)
#[test]
fn the_container_build_file_names_what_the_repository_holds() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(deploy().join("container/Containerfile")).unwrap();
    let ignore = std::fs::read_to_string(repo.join(".containerignore")).unwrap();
    assert_eq!(std::fs::read_link(repo.join(".dockerignore")).unwrap(), Path::new(".containerignore"));
    let ignored: Vec<&str> = ignore.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    let lines: Vec<String> = text.replace("\\\n", " ").lines().map(str::to_string).collect();
    let mut stages = 0;
    for l in &lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.first() {
            Some(&"FROM") => stages += 1,
            Some(&"COPY") if !l.contains("--from=") && words[1] != "." => {
                let src = words[1];
                assert!(repo.join(src).exists(), "{l}");
                assert!(!ignored.iter().any(|i| src.starts_with(i.trim_end_matches('/'))), "{l} is ignored");
            }
            Some(&"RUN") if l.contains("cargo install") => {
                for part in l.split("&&").filter(|p| p.contains("cargo install")) {
                    let path = part.split("--path").nth(1).unwrap().split_whitespace().next().unwrap();
                    assert!(repo.join(path).join("Cargo.toml").exists(), "{part}");
                    assert!(part.contains("--profile dist") && part.contains("--locked"), "{part}");
                }
            }
            _ => {}
        }
    }
    assert_eq!(stages, 2);
    for bin in ["icicle", "icicle-catalogd"] {
        assert!(text.contains(&format!("/out/bin/{bin}")), "{bin}");
    }
    assert!(std::fs::read_to_string(repo.join("plugins/prism-agent/Cargo.toml"))
        .unwrap()
        .contains("name = \"icicle-catalogd\""));
    assert!(text.contains("USER icicle") && text.contains("ENTRYPOINT [\"icicle\"]"));
}
