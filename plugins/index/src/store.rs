//! Opening an index directory: created with this release's schema when empty, checked when
//! it exists, and one writer at a time (tantivy's lock file in the directory).

use std::path::{Path, PathBuf};

use tantivy::directory::MmapDirectory;
use tantivy::{Index, IndexWriter, TantivyDocument};

use crate::schema::Fields;

/// Why an index could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Another process holds the writer lock.
    #[error("{dir}: another process writes to this index (an `icicle serve` that owns it, or another run): publish through that `icicle serve`, or wait until the other run ends")]
    Busy {
        /// The index directory.
        dir: PathBuf,
    },
    /// The directory holds no index.
    #[error("{dir}: no index here (a run with an `index` sink creates it)")]
    Missing {
        /// The index directory.
        dir: PathBuf,
    },
    /// The directory holds an index this release cannot read (another layout).
    #[error("{dir}: an index of another layout (field `{field}` missing): build a new one in an empty directory")]
    Layout {
        /// The index directory.
        dir: PathBuf,
        /// The first field of this release's schema the index lacks.
        field: String,
    },
    /// A query that cannot be answered as written.
    #[error("{0}")]
    Query(String),
    /// The engine or the disk failed.
    #[error("{dir}: {reason}")]
    Engine {
        /// The index directory.
        dir: PathBuf,
        /// The engine's or the disk's error.
        reason: String,
    },
}

impl IndexError {
    /// An engine failure on `dir`.
    pub fn engine(dir: &Path, e: impl std::fmt::Display) -> IndexError {
        IndexError::Engine { dir: dir.to_path_buf(), reason: e.to_string() }
    }
}

/// An open index and its fields.
pub struct Store {
    /// The index directory.
    pub dir: PathBuf,
    /// The tantivy index.
    pub index: Index,
    /// Its fields, by role.
    pub fields: Fields,
}

impl Store {
    /// Open the index in `dir`, creating the directory (mode 0700: answers go through
    /// `icicle serve`, which judges who asks) and the index when there is none.
    pub fn open_or_create(dir: &Path) -> Result<Store, IndexError> {
        if !dir.join("meta.json").exists() {
            create_private_dir(dir).map_err(|e| IndexError::engine(dir, format!("creating the directory: {e}")))?;
            let (schema, fields) = Fields::schema();
            let mmap = MmapDirectory::open(dir).map_err(|e| IndexError::engine(dir, e))?;
            let index = Index::open_or_create(mmap, schema).map_err(|e| IndexError::engine(dir, e))?;
            return Ok(Store { dir: dir.to_path_buf(), index, fields });
        }
        Store::open(dir)
    }

    /// Open the existing index in `dir`.
    pub fn open(dir: &Path) -> Result<Store, IndexError> {
        if !dir.join("meta.json").exists() {
            return Err(IndexError::Missing { dir: dir.to_path_buf() });
        }
        let index = Index::open_in_dir(dir).map_err(|e| IndexError::engine(dir, e))?;
        let fields = Fields::of(&index.schema()).ok_or_else(|| {
            let (want, _) = Fields::schema();
            let missing = want
                .fields()
                .map(|(_, e)| e.name().to_string())
                .find(|n| index.schema().get_field(n).is_err())
                .unwrap_or_default();
            IndexError::Layout { dir: dir.to_path_buf(), field: missing }
        })?;
        Ok(Store { dir: dir.to_path_buf(), index, fields })
    }

    /// The index's one writer, with `memory_bytes` of indexing buffer on `threads` threads;
    /// [`IndexError::Busy`] when another process (or object) holds it.
    pub fn writer(&self, threads: usize, memory_bytes: usize) -> Result<IndexWriter<TantivyDocument>, IndexError> {
        match self.index.writer_with_num_threads(threads, memory_bytes) {
            Ok(w) => Ok(w),
            Err(tantivy::TantivyError::LockFailure(..)) => Err(IndexError::Busy { dir: self.dir.clone() }),
            Err(e) => Err(IndexError::engine(&self.dir, e)),
        }
    }
}

/// Create `dir` (and its parents) with mode 0700 when it does not exist.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}
