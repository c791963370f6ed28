//! The little-endian byte images of our `kll` and `req` sketches: helpers that append fields,
//! and a reader that turns truncated or malformed input into [`SketchError::Decode`].

use icicle_core::traits::SketchError;

/// A decode error with `what` went wrong.
pub fn bad(what: impl Into<String>) -> SketchError {
    SketchError::Decode(what.into())
}

/// Append `values` as a `u32` count and the values.
pub fn put_values(out: &mut Vec<u8>, values: &[f64]) {
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Reads fields from an image front to back.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `bytes` that first checks the 4-byte `magic` and the `version` byte.
    pub fn open(bytes: &'a [u8], magic: &[u8; 4], version: u8) -> Result<Reader<'a>, SketchError> {
        let mut r = Reader { rest: bytes };
        if r.take(4)? != magic {
            return Err(bad(format!("not a {} image", String::from_utf8_lossy(&magic[1..]))));
        }
        match r.u8()? {
            v if v == version => Ok(r),
            v => Err(bad(format!("unknown version {v} (this build reads {version})"))),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], SketchError> {
        if self.rest.len() < n {
            return Err(bad("truncated"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SketchError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, SketchError> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, SketchError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, SketchError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, SketchError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A little-endian `f64` (any bit pattern).
    pub fn f64(&mut self) -> Result<f64, SketchError> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    /// Values written by [`put_values`]; none may be NaN. The count is checked against the
    /// bytes left before anything is allocated.
    pub fn values(&mut self) -> Result<Vec<f64>, SketchError> {
        let n = self.u32()? as usize;
        if n > self.rest.len() / 8 {
            return Err(bad("truncated"));
        }
        let raw = self.take(n * 8)?;
        let values: Vec<f64> =
            raw.chunks_exact(8).map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect();
        if values.iter().any(|v| v.is_nan()) {
            return Err(bad("a retained value is NaN"));
        }
        Ok(values)
    }

    /// Succeeds when every byte was read.
    pub fn finish(self) -> Result<(), SketchError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(bad(format!("{} trailing bytes", self.rest.len())))
        }
    }
}
