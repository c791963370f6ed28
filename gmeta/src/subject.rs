//! Subjects: a record's id in the index.

use sha2::{Digest, Sha256};

/// Globus Search's subject length limit, in UTF-8 bytes.
pub const MAX_SUBJECT_BYTES: usize = 500;
/// Prefix of subjects replaced by a hash because the path is too long.
pub const HASHED_SUBJECT_PREFIX: &str = "icicle:sha256:";

/// The subject for `path`: the path itself, or a stable hash when it exceeds 500 bytes.
pub fn subject_for(path: &str) -> std::borrow::Cow<'_, str> {
    if path.len() <= MAX_SUBJECT_BYTES {
        std::borrow::Cow::Borrowed(path)
    } else {
        let digest = Sha256::digest(path.as_bytes());
        let mut s = String::with_capacity(HASHED_SUBJECT_PREFIX.len() + 64);
        s.push_str(HASHED_SUBJECT_PREFIX);
        for b in digest {
            s.push_str(&format!("{b:02x}"));
        }
        std::borrow::Cow::Owned(s)
    }
}
