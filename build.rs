//! Records the commit `icicle --version` prints: `ICICLE_COMMIT` when set (a package built
//! from a tarball), else `git rev-parse` of the checkout, else "unknown commit".

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string()).filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=ICICLE_COMMIT");
    let commit = std::env::var("ICICLE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    // Built again when HEAD moves (a commit, a checkout), not on every build.
    // Only files that exist: a missing one would run this again on every build.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = Path::new(&dir);
        let branch = git(&["symbolic-ref", "-q", "HEAD"]).map(|r| dir.join(r));
        for f in [Some(dir.join("HEAD")), branch, Some(dir.join("packed-refs"))].into_iter().flatten() {
            if f.is_file() {
                println!("cargo:rerun-if-changed={}", f.display());
            }
        }
    }
    println!("cargo:rustc-env=ICICLE_COMMIT={}", commit.unwrap_or_else(|| "unknown commit".into()));
}
