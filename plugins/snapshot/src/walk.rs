//! `walk`: a parallel walk of a live directory tree with `lstat` (links are never
//! followed). Each directory is a split; subdirectories are spawned as new splits so all
//! workers share the walk. By default the walk stays on the root's file system (`xdev`, as
//! `find -xdev`): a directory where another file system is mounted is not entered, and what
//! the index holds below it is left unknown (kept), not deleted: an unmounted project file
//! system, or an empty one mounted over a directory, must not empty the index there. With
//! `layout = true` each directory's regular files are given to one `lfs getstripe -v` call (as
//! the Lustre monitor reads layouts) and their records carry the storage attributes.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use icicle_core::access::Acl;
use icicle_core::record::{FileRecord, Reject, Storage};
use icicle_core::registry::{BuildContext, ComponentConfig};
use icicle_core::scope::Scope;
use icicle_core::traits::{RowSink, Split};
use icicle_core::{ConfigError, Source, SourceError};
use serde::Deserialize;

/// `[sources.<id>] type = "walk"`.
#[derive(Debug, Deserialize)]
pub struct WalkConfig {
    /// The directory to walk.
    pub root: PathBuf,
    /// The path the root stands for in records (default: the root's absolute path).
    pub path_prefix: Option<String>,
    /// Stay on the root's file system (default true).
    #[serde(default = "stay_on_one_file_system")]
    pub xdev: bool,
    /// Read each regular file's Lustre layout with `lfs getstripe -v` (one call per directory
    /// and 256 files) and publish its FID, pool, stripe count, OSTs and components (`storage`
    /// in the record: what `icicle find -ost` and `icicle catalog` read). Off by default: no
    /// call is made.
    #[serde(default)]
    pub layout: bool,
    /// The `lfs` command and any leading arguments (with `layout`).
    #[serde(default = "default_lfs")]
    pub lfs: Vec<String>,
}

fn stay_on_one_file_system() -> bool {
    true
}

fn default_lfs() -> Vec<String> {
    vec!["lfs".into()]
}

/// The `walk` source.
pub struct WalkSource {
    root: PathBuf,
    prefix: String,
    /// The root's device, when the walk stays on it.
    device: Option<u64>,
    /// The `lfs` command reading layouts, when they are read.
    lfs: Option<Vec<String>>,
}

impl WalkSource {
    /// Walk `root`, naming records under `prefix`, staying on the file system of the root
    /// (its device is `device`) when that is given.
    pub fn new(root: PathBuf, prefix: String, device: Option<u64>) -> WalkSource {
        WalkSource { root, prefix, device, lfs: None }
    }

    /// Read regular files' layouts with `lfs getstripe -v` run as `cmd`.
    pub fn with_layouts(mut self, cmd: Vec<String>) -> WalkSource {
        self.lfs = Some(cmd);
        self
    }

    /// The storage attributes of the regular files of `entries` (by their path on disk), as
    /// `lfs getstripe` reads them; a file it could not read has none (and is logged).
    fn layouts(
        &self,
        dir: &std::path::Path,
        entries: &[(PathBuf, std::fs::Metadata)],
    ) -> Result<HashMap<PathBuf, Storage>, SourceError> {
        let Some(cmd) = &self.lfs else { return Ok(HashMap::new()) };
        let files: Vec<&std::path::Path> =
            entries.iter().filter(|(_, md)| md.file_type().is_file()).map(|(p, _)| p.as_path()).collect();
        if files.is_empty() {
            return Ok(HashMap::new());
        }
        let (got, failed) = icicle_core::layout::getstripe_files(cmd, &files).map_err(|reason| SourceError::Io {
            path: dir.to_path_buf(),
            reason: format!("lfs getstripe: {reason}"),
        })?;
        if failed > 0 {
            tracing::warn!(dir = %dir.display(), failed, "lfs getstripe read no layout of some files: published without one");
        }
        Ok(got.into_iter().collect())
    }

    fn record_path(&self, p: &std::path::Path) -> Result<String, String> {
        let rel = p.strip_prefix(&self.root).map_err(|_| "outside the walk root".to_string())?;
        // Names as bytes: what is not UTF-8 is escaped, as every source escapes it.
        let rel = icicle_core::name::from_os(rel);
        let mut s = self.prefix.trim_end_matches('/').to_string();
        if !rel.is_empty() || s.is_empty() {
            s.push('/');
        }
        s.push_str(&rel);
        Ok(s)
    }
}

fn record_of<'a>(path: &'a str, md: &std::fs::Metadata) -> FileRecord<'a> {
    FileRecord::from_metadata(path, md)
}

#[async_trait]
impl Source for WalkSource {
    async fn plan(&self) -> Result<Vec<Split>, SourceError> {
        let md = std::fs::symlink_metadata(&self.root)
            .map_err(|e| SourceError::Io { path: self.root.clone(), reason: e.to_string() })?;
        if !md.is_dir() {
            return Err(SourceError::Io { path: self.root.clone(), reason: "not a directory".into() });
        }
        let mut split = Split::whole(self.root.clone(), 0);
        split.scope = Some(Scope::subtree(&self.prefix));
        Ok(vec![split])
    }

    fn parents_first(&self) -> bool {
        true
    }

    fn read(&self, split: &Split, out: &mut dyn RowSink) -> Result<(), SourceError> {
        let dir = &split.path;
        let io = |e: std::io::Error| SourceError::Io { path: dir.clone(), reason: e.to_string() };
        if dir == &self.root {
            let md = std::fs::symlink_metadata(dir).map_err(io)?;
            let p = self.record_path(dir).map_err(|r| SourceError::Io { path: dir.clone(), reason: r })?;
            let acl = if out.wants_acls() { Acl::read(dir) } else { None };
            out.directory_with_acl(&record_of(&p, &md), acl);
        }
        let acls = out.wants_acls();
        let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(io)?.collect();
        entries.sort_by_key(|e| e.as_ref().map(|e| e.file_name()).ok());
        let input = dir.display().to_string();
        let scope = split.scope.clone().unwrap_or(Scope::All);
        let mut listed = Vec::with_capacity(entries.len());
        for e in entries {
            let e = match e {
                Ok(e) => e,
                Err(err) => {
                    // The rest of the listing is unknown: so is everything below the directory.
                    out.reject(Reject::whole(&input, format!("reading the directory: {err}"), Some(scope.clone())));
                    continue;
                }
            };
            let p = e.path();
            let md = match std::fs::symlink_metadata(&p) {
                Ok(m) => m,
                Err(err) => {
                    // Vanished between readdir and lstat (a live tree changes under us) is
                    // gone; anything else (a directory readable but not searchable) leaves
                    // the entry, and what may lie below it, unknown.
                    let scope = match (err.kind(), self.record_path(&p)) {
                        (std::io::ErrorKind::NotFound, _) => None,
                        (_, Ok(rp)) => Some(Scope::subtree(&rp)),
                        (_, Err(_)) => Some(scope.clone()),
                    };
                    out.reject(Reject::whole(&p.display().to_string(), format!("lstat: {err}"), scope));
                    continue;
                }
            };
            listed.push((p, md));
        }
        let storage = self.layouts(dir, &listed)?;
        for (p, md) in listed {
            let rp = match self.record_path(&p) {
                Ok(s) => s,
                Err(reason) => {
                    out.reject(Reject::whole(&p.display().to_string(), reason, None));
                    continue;
                }
            };
            if md.is_dir() && self.device.is_some_and(|d| d != md.dev()) {
                let why = "another file system is mounted here: not entered (walk `xdev`); what the index holds below it is kept";
                out.reject(Reject::whole(&p.display().to_string(), why, Some(Scope::subtree(&rp))));
                continue;
            }
            let rec = FileRecord { storage: storage.get(&p), ..record_of(&rp, &md) };
            let acl = if acls { Acl::read(&p) } else { None };
            if md.is_dir() {
                out.directory_with_acl(&rec, acl);
                let mut sub = Split::whole(p, 0);
                sub.scope = Some(Scope::subtree(&rp));
                out.spawn(sub);
            } else {
                out.record_with_acl(&rec, acl);
            }
        }
        Ok(())
    }
}

impl ComponentConfig for WalkConfig {
    type Component = Arc<dyn Source>;

    /// The root's existence is checked at build: a configuration is checked where the tree
    /// may not be mounted.
    fn validate(&self, ctx: &BuildContext<'_>) -> Result<(), ConfigError> {
        if self.path_prefix.as_ref().is_some_and(|p| !p.starts_with('/')) {
            return Err(ctx.invalid("path_prefix", "must be an absolute path"));
        }
        if self.layout && self.lfs.first().is_none_or(String::is_empty) {
            return Err(ctx.invalid("lfs", "an empty command: `layout = true` runs `lfs getstripe -v`"));
        }
        Ok(())
    }

    fn build(self, ctx: &BuildContext<'_>) -> Result<Arc<dyn Source>, ConfigError> {
        self.validate(ctx)?;
        let root = std::fs::canonicalize(&self.root)
            .map_err(|e| ctx.invalid("root", format!("{}: {e}", self.root.display())))?;
        let prefix = match self.path_prefix {
            Some(p) if p.starts_with('/') => p,
            Some(_) => return Err(ctx.invalid("path_prefix", "must be an absolute path")),
            None => icicle_core::name::from_os(&root).into_owned(),
        };
        let device = match self.xdev {
            true => Some(
                std::fs::metadata(&root).map_err(|e| ctx.invalid("root", format!("{}: {e}", root.display())))?.dev(),
            ),
            false => None,
        };
        let walk = WalkSource::new(root, prefix, device);
        Ok(Arc::new(if self.layout { walk.with_layouts(self.lfs) } else { walk }))
    }
}
