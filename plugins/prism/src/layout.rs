//! Where a file's stripe layout comes from: `lfs getstripe` on Lustre, or the emulation
//! used everywhere else (no Lustre here) — PFL-like layouts over an OST pool with real-looking
//! sparse indices, assigned deterministically from the path, or given per file by a sidecar
//! (the emulation's `lfs setstripe`).

use std::path::{Path, PathBuf};
use std::process::Command;

pub use icicle_core::layout::parse_getstripe;
use icicle_core::traits::LayoutComponent;

/// A layout that could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// `lfs` could not be run or failed.
    #[error("{cmd} getstripe {path}: {reason}")]
    Lfs {
        /// The command.
        cmd: String,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Output or configuration that does not parse.
    #[error("{origin}: {reason}")]
    Parse {
        /// Where the text came from.
        origin: String,
        /// What was wrong.
        reason: String,
    },
}

/// Gives the stripe layout of a regular file.
pub trait LayoutProvider: Send + Sync {
    /// The instantiated components of `path` (a regular file of `size` bytes), in order.
    fn layout(&self, path: &Path, size: u64) -> Result<Vec<LayoutComponent>, ProviderError>;
}

/// The emulated layouts: a pool of OST indices, a stripe size and PFL components
/// (`end`, stripe count), the last reaching to EOF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmulatedLayouts {
    /// OST indices files are striped over (sparse, as on a real file system).
    pub pool: Vec<u32>,
    /// Stripe size of every component.
    pub stripe_size: u64,
    /// Components: (end, stripe count); `u64::MAX` ends at EOF.
    pub components: Vec<(u64, usize)>,
}

impl Default for EmulatedLayouts {
    /// Eight OSTs with indices seen on a production /scratch (10 ... 231), 1 MiB stripes,
    /// PFL `[0, 4M)` x1, `[4M, 64M)` x2, `[64M, EOF)` x4.
    fn default() -> EmulatedLayouts {
        const M: u64 = 1 << 20;
        EmulatedLayouts {
            pool: vec![10, 60, 86, 105, 113, 167, 204, 231],
            stripe_size: M,
            components: vec![(4 * M, 1), (64 * M, 2), (u64::MAX, 4)],
        }
    }
}

/// The environment variable the catalog agent reads the emulation's spec from.
pub const EMULATED_LAYOUT_ENV: &str = "ICICLE_EMULATED_LAYOUT";

/// Parse `4096`, `64K`, `1M`, `2G` (binary units), or `EOF`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("eof") {
        return Ok(u64::MAX);
    }
    let (num, mul) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mul = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("size `{s}`: unknown unit `{c}`")),
            };
            (&s[..i], mul)
        }
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|e| format!("size `{s}`: {e}"))?;
    n.checked_mul(mul).ok_or_else(|| format!("size `{s}` overflows"))
}

impl EmulatedLayouts {
    /// Parse a spec: `;`-separated `pool=113,167,204`, `stripe_size=64K`, and either
    /// `pfl=4M:1,64M:2,EOF:4` or `count=4` (a plain layout). Omitted keys keep the defaults.
    pub fn parse(spec: &str) -> Result<EmulatedLayouts, String> {
        let mut e = EmulatedLayouts::default();
        for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("`{part}` is not key=value"))?;
            match k.trim() {
                "pool" => {
                    e.pool = v
                        .split(',')
                        .map(|x| x.trim().parse::<u32>().map_err(|err| format!("pool entry `{x}`: {err}")))
                        .collect::<Result<_, _>>()?;
                    if e.pool.is_empty() {
                        return Err("empty pool".into());
                    }
                }
                "stripe_size" => {
                    e.stripe_size = parse_size(v)?;
                    if e.stripe_size == 0 || e.stripe_size == u64::MAX {
                        return Err(format!("stripe_size `{v}` must be a positive size"));
                    }
                }
                "count" => {
                    let c: usize = v.trim().parse().map_err(|err| format!("count `{v}`: {err}"))?;
                    e.components = vec![(u64::MAX, c.max(1))];
                }
                "pfl" => {
                    let mut comps = Vec::new();
                    for c in v.split(',') {
                        let (end, count) =
                            c.split_once(':').ok_or_else(|| format!("pfl component `{c}` is not END:COUNT"))?;
                        let count: usize = count.trim().parse().map_err(|err| format!("pfl count `{count}`: {err}"))?;
                        comps.push((parse_size(end)?, count.max(1)));
                    }
                    if comps.windows(2).any(|w| w[1].0 <= w[0].0) || comps.last().is_none_or(|c| c.0 != u64::MAX) {
                        return Err(format!("pfl `{v}`: ends must increase and the last be EOF"));
                    }
                    e.components = comps;
                }
                other => return Err(format!("unknown key `{other}` (pool, stripe_size, count, pfl)")),
            }
        }
        Ok(e)
    }

    /// The layout of `path` when `size` bytes have been written: the components up to the
    /// one holding the last byte (the first always), OSTs taken from the pool in turn from a
    /// start chosen by a hash of the path, later components continuing after earlier ones'.
    pub fn assign(&self, path: &Path, size: u64) -> Vec<LayoutComponent> {
        let n = self.pool.len().max(1);
        let mut next = (fnv1a(path.as_os_str().as_encoded_bytes()) % n as u64) as usize;
        let mut start = 0u64;
        let mut out = Vec::new();
        for &(end, count) in &self.components {
            if start > 0 && start >= size {
                break;
            }
            let count = count.min(self.pool.len()).max(1);
            let osts = (0..count).map(|i| self.pool.get((next + i) % n).copied().unwrap_or(0)).collect();
            next += count;
            out.push(LayoutComponent { start, end, stripe_size: self.stripe_size, osts });
            start = end;
        }
        out
    }
}

/// The sidecar holding an explicit layout for `path`: `.<name>.lov` beside it.
pub fn sidecar_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.lov"))
}

/// Write an explicit layout for `path` (the emulation's `lfs setstripe`): one line per
/// component, `start end stripe_size ost,ost,...` (`end` may be `EOF`).
pub fn write_sidecar(path: &Path, comps: &[LayoutComponent]) -> std::io::Result<()> {
    let mut s = String::new();
    for c in comps {
        let end = if c.end == u64::MAX { "EOF".to_string() } else { c.end.to_string() };
        let osts: Vec<String> = c.osts.iter().map(u32::to_string).collect();
        s.push_str(&format!("{} {} {} {}\n", c.start, end, c.stripe_size, osts.join(",")));
    }
    std::fs::write(sidecar_path(path), s)
}

/// Parse a sidecar's text.
pub fn parse_sidecar(origin: &str, text: &str) -> Result<Vec<LayoutComponent>, ProviderError> {
    let bad = |n: usize, r: String| ProviderError::Parse { origin: format!("{origin}:{n}"), reason: r };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 4 {
            return Err(bad(i + 1, format!("expected `start end stripe_size osts`, found `{line}`")));
        }
        let start = parse_size(f[0]).map_err(|e| bad(i + 1, e))?;
        let end = parse_size(f[1]).map_err(|e| bad(i + 1, e))?;
        let stripe_size = parse_size(f[2]).map_err(|e| bad(i + 1, e))?;
        let osts = f[3]
            .split(',')
            .map(|x| x.parse::<u32>().map_err(|e| bad(i + 1, format!("OST `{x}`: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(LayoutComponent { start, end, stripe_size, osts });
    }
    Ok(out)
}

impl LayoutProvider for EmulatedLayouts {
    fn layout(&self, path: &Path, size: u64) -> Result<Vec<LayoutComponent>, ProviderError> {
        let side = sidecar_path(path);
        match std::fs::read_to_string(&side) {
            Ok(text) => {
                // Only the instantiated part, as `lfs getstripe` shows it.
                let all = parse_sidecar(&side.to_string_lossy(), &text)?;
                Ok(all.into_iter().filter(|c| c.start == 0 || c.start < size).collect())
            }
            Err(_) => Ok(self.assign(path, size)),
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The real provider: runs `lfs getstripe PATH` and parses it.
#[derive(Debug, Clone)]
pub struct LfsLayouts {
    /// The `lfs` command.
    pub cmd: PathBuf,
}

impl LfsLayouts {
    /// `lfs` from the PATH, if there is one.
    pub fn from_path() -> Option<LfsLayouts> {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|d| d.join("lfs")).find(|p| p.is_file()).map(|cmd| LfsLayouts { cmd })
    }
}

impl LayoutProvider for LfsLayouts {
    fn layout(&self, path: &Path, _size: u64) -> Result<Vec<LayoutComponent>, ProviderError> {
        let fail = |reason: String| ProviderError::Lfs {
            cmd: self.cmd.display().to_string(),
            path: path.to_path_buf(),
            reason,
        };
        // The child must not load the catalog agent again.
        let out = Command::new(&self.cmd)
            .arg("getstripe")
            .arg(path)
            .env_remove("LD_PRELOAD")
            .output()
            .map_err(|e| fail(e.to_string()))?;
        if !out.status.success() {
            return Err(fail(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim())));
        }
        parse_getstripe(&String::from_utf8_lossy(&out.stdout)).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    #[test]
    fn emulated_layouts_are_deterministic_pfl_and_sidecars_win() {
        let e = EmulatedLayouts::default();
        let small = e.assign(Path::new("/d/a"), 100);
        assert_eq!(small.len(), 1);
        assert_eq!((small[0].start, small[0].end, small[0].osts.len()), (0, 4 * M, 1));
        let big = e.assign(Path::new("/d/a"), 65 * M);
        assert_eq!(big.len(), 3);
        assert_eq!(big[0], small[0]);
        // OSTs continue around the pool: 1 + 2 + 4 distinct ones.
        let mut all: Vec<u32> = big.iter().flat_map(|c| c.osts.clone()).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 7);
        assert_eq!(e.assign(Path::new("/d/a"), 65 * M), big);
        assert_eq!(e.assign(Path::new("/d/a"), 5 * M).len(), 2);
        let p = EmulatedLayouts::parse("pool=113, 204 ,7;stripe_size=64K;count=2").unwrap();
        assert_eq!(
            p.assign(Path::new("/x"), 1 << 30),
            vec![LayoutComponent {
                start: 0,
                end: u64::MAX,
                stripe_size: 65536,
                osts: p.assign(Path::new("/x"), 1)[0].osts.clone()
            }]
        );
        assert!(EmulatedLayouts::parse("pfl=4M:1,2M:2,EOF:1").unwrap_err().contains("increase"));
        assert!(EmulatedLayouts::parse("pool=").is_err());
        assert!(EmulatedLayouts::parse("stripes=3").unwrap_err().contains("unknown key"));

        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("explicit");
        let comps = vec![
            LayoutComponent { start: 0, end: 2 * M, stripe_size: M, osts: vec![300] },
            LayoutComponent { start: 2 * M, end: u64::MAX, stripe_size: M, osts: vec![301, 302] },
        ];
        write_sidecar(&f, &comps).unwrap();
        assert_eq!(e.layout(&f, 3 * M).unwrap(), comps);
        assert_eq!(e.layout(&f, M).unwrap(), comps[..1].to_vec());
        std::fs::write(sidecar_path(&f), "0 EOF 1M 1,x\n").unwrap();
        assert!(e.layout(&f, 1).unwrap_err().to_string().contains(".explicit.lov:1"));
    }
}
