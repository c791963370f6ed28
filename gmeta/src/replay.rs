//! Reading back what the `file` sink wrote: a directory of `ingest-NNNNNN.json` (GIngest
//! GMetaList) and `delete-NNNNNN.json` (`batch_delete_by_subject`) documents, applied in
//! sequence order, gives the index they describe. A monitor seeds its state from it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The index the documents in `dir` describe: each path's entry content, after every ingest
/// and delete in sequence order.
pub fn read_index(dir: &Path) -> Result<BTreeMap<String, serde_json::Value>, String> {
    let mut docs: Vec<(u64, std::path::PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let seq = name
            .strip_prefix("ingest-")
            .or_else(|| name.strip_prefix("delete-"))
            .and_then(|r| r.strip_suffix(".json"))
            .and_then(|n| n.parse().ok());
        if let Some(seq) = seq {
            docs.push((seq, e.path()));
        }
    }
    docs.sort();
    let mut index = BTreeMap::new();
    let mut subject_path: HashMap<String, String> = HashMap::new();
    for (_, f) in docs {
        let bytes = std::fs::read(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        let doc: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", f.display()))?;
        if let Some(subjects) = doc["subjects"].as_array() {
            for s in subjects.iter().filter_map(|s| s.as_str()) {
                if let Some(p) = subject_path.remove(s) {
                    index.remove(&p);
                }
            }
        } else if let Some(entries) = doc["ingest_data"]["gmeta"].as_array() {
            for e in entries {
                let (Some(subject), Some(path)) = (e["subject"].as_str(), e["content"]["path"].as_str()) else {
                    return Err(format!("{}: an entry without subject or path", f.display()));
                };
                subject_path.insert(subject.to_string(), path.to_string());
                index.insert(path.to_string(), e["content"].clone());
            }
        } else {
            return Err(format!("{}: neither a GIngest nor a delete document", f.display()));
        }
    }
    Ok(index)
}

/// A primary record's metadata as its content holds it (`uid`, `gid`, `size` and `raw`'s
/// `mode`, `inode` and epoch times); a field the record lacks is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordedMeta {
    /// `st_mode`, decoded from `raw.mode` (its octal digits written as a decimal integer).
    pub mode: Option<u32>,
    /// `raw.inode`, from sources that have one.
    pub inode: Option<u64>,
    /// Owner uid.
    pub uid: Option<u32>,
    /// Group gid.
    pub gid: Option<u32>,
    /// Bytes.
    pub size: Option<u64>,
    /// `raw.atime`, seconds since the epoch.
    pub atime: Option<i64>,
    /// `raw.ctime`, seconds since the epoch.
    pub ctime: Option<i64>,
    /// `raw.mtime`, seconds since the epoch.
    pub mtime: Option<i64>,
}

impl RecordedMeta {
    /// Read the metadata fields of a primary record's `content`.
    pub fn of(content: &serde_json::Value) -> RecordedMeta {
        let raw = &content["raw"];
        RecordedMeta {
            mode: raw["mode"].as_u64().and_then(mode_from_octal_digits),
            inode: raw["inode"].as_u64(),
            uid: content["uid"].as_u64().and_then(|v| u32::try_from(v).ok()),
            gid: content["gid"].as_u64().and_then(|v| u32::try_from(v).ok()),
            size: content["size"].as_u64(),
            atime: raw["atime"].as_i64(),
            ctime: raw["ctime"].as_i64(),
            mtime: raw["mtime"].as_i64(),
        }
    }
}

/// The inverse of [`icicle_core::record::mode_octal_as_int`]: `100644` → `0o100644`; `None`
/// when a digit is 8 or 9 or the mode does not fit.
pub fn mode_from_octal_digits(digits: u64) -> Option<u32> {
    let (mut d, mut mode, mut shift) = (digits, 0u32, 0u32);
    while d > 0 {
        let digit = (d % 10) as u32;
        if digit > 7 || shift > 29 {
            return None;
        }
        mode |= digit << shift;
        shift += 3;
        d /= 10;
    }
    Some(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_digits_round_trip() {
        for mode in [0, 0o644, 0o100644, 0o40755, 0o120777, 0o170000 | 0o7777] {
            assert_eq!(mode_from_octal_digits(icicle_core::record::mode_octal_as_int(mode)), Some(mode), "{mode:o}");
        }
        assert_eq!(mode_from_octal_digits(100648), None);
    }

    #[test]
    fn recorded_meta_reads_a_primary_record() {
        let c = serde_json::json!({"uid": 7, "gid": 8, "size": 9, "raw": {"mode": 100640, "inode": 11, "atime": 1, "ctime": 2, "mtime": 3}});
        let m = RecordedMeta::of(&c);
        assert_eq!(
            m,
            RecordedMeta {
                mode: Some(0o100640),
                inode: Some(11),
                uid: Some(7),
                gid: Some(8),
                size: Some(9),
                atime: Some(1),
                ctime: Some(2),
                mtime: Some(3)
            }
        );
        assert_eq!(RecordedMeta::of(&serde_json::json!({})), RecordedMeta::default());
    }
}
