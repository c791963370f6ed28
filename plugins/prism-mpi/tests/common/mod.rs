//! What the swiftload tests share: running it under `mpirun` and reading rank 0's summary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `swiftload ARGS` on `np` ranks (oversubscribed, allowed as root as CI runs it).
pub fn mpirun(np: usize, args: &[&str]) -> Output {
    Command::new("mpirun")
        .args(["--oversubscribe", "--bind-to", "none", "-np", &np.to_string()])
        .arg(env!("CARGO_BIN_EXE_swiftload"))
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .output()
        .expect("mpirun (openmpi-bin) is needed: scripts/test.sh installs it")
}

/// Rank 0's one JSON line, after checking the run succeeded (`what` names the run).
pub fn summary_of(out: &Output, what: &str) -> serde_json::Value {
    assert!(out.status.success(), "{what}: swiftload failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(lines.len(), 1, "{what}: one JSON line from rank 0: {stdout}");
    serde_json::from_str(lines[0]).unwrap()
}

/// A path as a command-line argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The catalog agent, built for this test (cargo does not build a cdylib for another
/// package's tests).
#[allow(dead_code)]
pub fn agent() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let target = profile_dir.parent().unwrap();
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["build", "--quiet", "-p", "icicle-prism-agent", "--lib", "--target-dir"])
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().unwrap().success());
    profile_dir.join("libcatalog_agent.so")
}

/// A binary of another package of the workspace, beside swiftload (`cargo test --workspace`
/// builds every package's binaries before it runs a test).
#[allow(dead_code)]
pub fn workspace_bin(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_swiftload")).with_file_name(name);
    assert!(
        p.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (scripts/test.sh does)",
        p.display()
    );
    p
}
