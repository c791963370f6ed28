//! `icicle completions SHELL` and `icicle man`: shell completions and manual pages generated
//! from the command-line definition itself (clap_complete, clap_mangen), so they never drift
//! from what the binary accepts.

use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

/// Write the completion script for `shell` to stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut cmd = crate::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "icicle", &mut out);
    crate::print_stdout(&String::from_utf8_lossy(&out))?;
    Ok(())
}

/// The manual: `icicle.1` on stdout, or `icicle.1` and one page per subcommand
/// (`icicle-snapshot.1`, `icicle-config-check.1`, ...) written into `dir`.
pub fn man(dir: Option<&Path>) -> anyhow::Result<()> {
    let cmd = crate::Cli::command();
    match dir {
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            crate::print_stdout(&String::from_utf8_lossy(&out))?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing manual pages into {}", dir.display()))?;
        }
    }
    Ok(())
}
