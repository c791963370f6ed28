//! The data augmentation tool's pure part (`swiftload --app augment`): CIFAR-10 binary records
//! and a seeded, bit-reproducible augmentation of each one.
//!
//! # The format
//!
//! A CIFAR-10 batch file (`data_batch_1.bin` .. `data_batch_5.bin`, `test_batch.bin`) is a run of
//! [`RECORDS_PER_BATCH`] records of [`RECORD_BYTES`] bytes each: one label byte (0..=9), then
//! 3,072 pixel bytes: the red plane, the green plane and the blue plane, each 32x32 bytes in
//! row-major order (byte `1 + c*1024 + y*32 + x` is channel `c`, row `y` from the top, column
//! `x` from the left). Augmented batches are written in the same format, record for record.
//!
//! # The random choices
//!
//! Every choice for a record comes from `(seed, file_key, index)` alone, where `file_key` is
//! [`file_key`] of the batch file's base name and `index` the record's 0-based position in its
//! file. So a record's output is the same whichever process augments it, in whatever order, and
//! wherever the file lives. With `sm(z)` the SplitMix64 step `z += 0x9E3779B97F4A7C15;
//! z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB; z ^ z>>31`
//! (wrapping arithmetic on u64; [`icicle_core::rng::nth`]`(z, 0)`):
//!
//! ```text
//! key = sm(sm(sm(seed) ^ file_key) ^ index)
//! d_i = sm(key + i * 0x9E3779B97F4A7C15)        for i = 0, 1, 2, 3 (the SplitMix64 stream from key)
//! flip   = d_0 >> 63 == 1                       (p = 1/2)
//! crop_x = d_1 % 9,  crop_y = d_2 % 9           (0..=8 each)
//! angle  = (d_3 % 31) - 15                      (whole degrees, -15..=15)
//! ```
//!
//! # The transforms, in this order (the label byte is copied unchanged)
//!
//! Each is applied to the three channel planes alike; `I` is the input plane, `(x, y)` a column
//! and row in `0..32`, and a pixel outside `0..32` on either axis reads as 0.
//!
//! 1. **Horizontal flip**, when `flip`: `F(x, y) = I(31 - x, y)`; otherwise `F = I`.
//! 2. **Random crop with padding**: `F` zero-padded by [`PAD`] = 4 pixels on each side (40x40),
//!    of which the 32x32 window at column `crop_x`, row `crop_y` is kept:
//!    `C(x, y) = F(x + crop_x - 4, y + crop_y - 4)`. Offsets (4, 4) give `F` back.
//! 3. **Rotation** by `angle` degrees about the image centre (15.5, 15.5), nearest-neighbour,
//!    zero fill; a positive angle turns the picture clockwise as displayed (rows top to
//!    bottom). In fixed point, with `S = SIN_Q16[angle]`, `K = COS_Q16[angle]` (`round(65536 *
//!    sin(angle°))`, `round(65536 * cos(angle°))`, a table for the 31 whole angles: no
//!    floating point, so every machine computes the same bits), and the output pixel's doubled
//!    offset from the centre `X = 2x - 31`, `Y = 2y - 31`:
//!
//!    ```text
//!    sx = (K*X + S*Y + 32*65536) >> 17          (i64, arithmetic shift: floor)
//!    sy = (K*Y - S*X + 32*65536) >> 17
//!    R(x, y) = C(sx, sy)
//!    ```
//!
//!    that is, the source point `(K*X + S*Y) / 65536 / 2 + 15.5` rounded half up. Angle 0 gives
//!    `C` back exactly.
//!
//! The output plane is `R`. [`Transform`] holds one set of choices (built from the stream above
//! by [`Transform::draw`], or given by [`Transform::new`]); [`augment_record`] and
//! [`augment_batch`] draw and apply them.

use icicle_core::rng::nth;
use thiserror::Error;

/// Bytes in one CIFAR-10 record: 1 label byte and 3 x 32 x 32 pixel bytes.
pub const RECORD_BYTES: usize = 3073;
/// Records in one CIFAR-10 batch file (`data_batch_N.bin`, `test_batch.bin`).
pub const RECORDS_PER_BATCH: usize = 10_000;
/// Width and height of an image, pixels.
pub const SIDE: usize = 32;
/// Bytes in one channel plane (32 x 32).
pub const PLANE: usize = SIDE * SIDE;
/// Zero padding on each side before the random crop, pixels.
pub const PAD: usize = 4;
/// The largest rotation either way, whole degrees.
pub const MAX_ANGLE_DEG: i8 = 15;

/// `round(65536 * sin(a°))` for a = 0..=15 (the negative angles by symmetry).
const SIN_Q16: [i64; 16] =
    [0, 1144, 2287, 3430, 4572, 5712, 6850, 7987, 9121, 10252, 11380, 12505, 13626, 14742, 15855, 16962];
/// `round(65536 * cos(a°))` for a = 0..=15.
const COS_Q16: [i64; 16] =
    [65536, 65526, 65496, 65446, 65376, 65287, 65177, 65048, 64898, 64729, 64540, 64332, 64104, 63856, 63589, 63303];

/// A source pixel that is not in the image (reads as 0): any index past the plane.
const OUTSIDE: u16 = u16::MAX;
/// `32 * 65536`: the centre (31 in doubled coordinates) plus one half for rounding, in Q16.
const ROUND_BIAS: i64 = 32 << 16;

/// A batch that cannot be augmented.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum AugmentError {
    /// The input is not a whole number of records.
    #[error("{len} bytes is not a whole number of {RECORD_BYTES}-byte CIFAR-10 records ({} whole, {} bytes over)", .len / RECORD_BYTES, .len % RECORD_BYTES)]
    PartialRecord {
        /// The input's length, bytes.
        len: usize,
    },
    /// The output buffer is not the input's size.
    #[error("the output buffer has {output} bytes, the input {input}: they must be equal")]
    OutputLength {
        /// The input's length, bytes.
        input: usize,
        /// The output's length, bytes.
        output: usize,
    },
    /// A transform parameter out of its range.
    #[error("{what} {value} is out of range ({range})")]
    OutOfRange {
        /// Which parameter.
        what: &'static str,
        /// The value given.
        value: i64,
        /// The accepted range.
        range: &'static str,
    },
}

/// The stable key of a batch file: 64-bit FNV-1a of its base name's bytes (the part after the
/// last `/`, ignoring trailing slashes; the whole string when that part is empty), so the
/// output does not depend on the directory the file is read from.
pub fn file_key(name: &str) -> u64 {
    let trimmed = name.trim_end_matches('/');
    let base = match trimmed.rsplit('/').next() {
        Some(b) if !b.is_empty() => b,
        _ => name,
    };
    base.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3))
}

/// One record's augmentation choices (see the module documentation for their meaning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transform {
    flip: bool,
    crop_x: u8,
    crop_y: u8,
    angle_deg: i8,
}

impl Transform {
    /// The transform that changes nothing: no flip, crop offsets (4, 4), angle 0.
    pub const IDENTITY: Transform = Transform { flip: false, crop_x: PAD as u8, crop_y: PAD as u8, angle_deg: 0 };

    /// Given choices: crop offsets in `0..=8`, angle in `-15..=15` whole degrees.
    pub fn new(flip: bool, crop_x: u8, crop_y: u8, angle_deg: i8) -> Result<Transform, AugmentError> {
        let max_crop = (2 * PAD) as u8;
        for (what, v) in [("crop_x", crop_x), ("crop_y", crop_y)] {
            if v > max_crop {
                return Err(AugmentError::OutOfRange { what, value: i64::from(v), range: "0..=8" });
            }
        }
        if !(-MAX_ANGLE_DEG..=MAX_ANGLE_DEG).contains(&angle_deg) {
            return Err(AugmentError::OutOfRange { what: "angle_deg", value: i64::from(angle_deg), range: "-15..=15" });
        }
        Ok(Transform { flip, crop_x, crop_y, angle_deg })
    }

    /// The choices for record `index` of the file with key `file_key` under `seed`.
    pub fn draw(seed: u64, file_key: u64, index: u64) -> Transform {
        // `sm(z)` is `nth(z, 0)`; `d_i` is `nth(key, i)`.
        let sm = |z: u64| nth(z, 0);
        let key = sm(sm(sm(seed) ^ file_key) ^ index);
        let d = |i: u64| nth(key, i);
        let crops = (2 * PAD + 1) as u64;
        let angles = (2 * MAX_ANGLE_DEG as u64) + 1;
        Transform {
            flip: d(0) >> 63 == 1,
            crop_x: (d(1) % crops) as u8,
            crop_y: (d(2) % crops) as u8,
            angle_deg: (d(3) % angles) as i8 - MAX_ANGLE_DEG,
        }
    }

    /// Whether the image is flipped left to right.
    pub fn flip(&self) -> bool {
        self.flip
    }

    /// The crop window's (column, row) in the 40x40 padded image; (4, 4) keeps the image.
    pub fn crop(&self) -> (u8, u8) {
        (self.crop_x, self.crop_y)
    }

    /// The rotation, whole degrees; positive is clockwise as displayed.
    pub fn angle_deg(&self) -> i8 {
        self.angle_deg
    }

    /// Q16 (sin, cos) of the angle, from the table.
    fn sin_cos_q16(&self) -> (i64, i64) {
        let a = usize::from(self.angle_deg.unsigned_abs()).min(SIN_Q16.len() - 1);
        let s = if self.angle_deg < 0 { -SIN_Q16[a] } else { SIN_Q16[a] };
        (s, COS_Q16[a])
    }

    /// For every output pixel (row-major), the input pixel it copies (`y*32 + x` of the
    /// untransformed plane), or a value >= [`PLANE`] for a zero. All three steps folded into
    /// one map; the rotation's fixed-point sums are stepped along each row (exact integers, so
    /// the same as evaluating them pixel by pixel).
    pub fn source_map(&self) -> [u16; PLANE] {
        let (s, k) = self.sin_cos_q16();
        let side = SIDE as i64;
        let (off_x, off_y) = (i64::from(self.crop_x) - PAD as i64, i64::from(self.crop_y) - PAD as i64);
        let mut map = [OUTSIDE; PLANE];
        for (y, row) in map.chunks_exact_mut(SIDE).enumerate() {
            let yy = 2 * y as i64 - (side - 1);
            // Doubled coordinate X = -31 at x = 0, stepping by 2.
            let mut xq = -(side - 1) * k + s * yy + ROUND_BIAS;
            let mut yq = k * yy + (side - 1) * s + ROUND_BIAS;
            for slot in row.iter_mut() {
                *slot = self.source_index(xq >> 17, yq >> 17, off_x, off_y);
                xq += 2 * k;
                yq -= 2 * s;
            }
        }
        map
    }

    /// The input index that rotation source (rx, ry) (a pixel of the crop) reads, given the
    /// crop offsets less the padding, or [`OUTSIDE`].
    fn source_index(&self, rx: i64, ry: i64, off_x: i64, off_y: i64) -> u16 {
        let side = SIDE as i64;
        let (cx, cy) = (rx + off_x, ry + off_y);
        if !(0..side).contains(&rx) || !(0..side).contains(&ry) || !(0..side).contains(&cx) || !(0..side).contains(&cy)
        {
            return OUTSIDE;
        }
        let fx = if self.flip { side - 1 - cx } else { cx };
        (cy * side + fx) as u16
    }

    /// Apply to one record: the label byte copied, each channel plane transformed.
    pub fn apply(&self, input: &[u8; RECORD_BYTES], out: &mut [u8; RECORD_BYTES]) {
        apply_map(&self.source_map(), input, out);
    }
}

/// Apply a map from [`Transform::source_map`] to one record.
fn apply_map(map: &[u16; PLANE], input: &[u8; RECORD_BYTES], out: &mut [u8; RECORD_BYTES]) {
    out[0] = input[0];
    for (src, dst) in input[1..].chunks_exact(PLANE).zip(out[1..].chunks_exact_mut(PLANE)) {
        for (d, &m) in dst.iter_mut().zip(map.iter()) {
            *d = src.get(usize::from(m)).copied().unwrap_or(0);
        }
    }
}

/// Augment one record: [`Transform::draw`]`(seed, file_key, index)` applied to `input`, into
/// `out`. `index` is the record's 0-based position in its batch file.
pub fn augment_record(seed: u64, file_key: u64, index: u64, input: &[u8; RECORD_BYTES], out: &mut [u8; RECORD_BYTES]) {
    Transform::draw(seed, file_key, index).apply(input, out);
}

/// Augment a run of whole records (`input`, a multiple of [`RECORD_BYTES`]) into `out` (the
/// same length): record `i` of the run is record `first_index + i` of its file. Returns the
/// number of records. A process given records `k..` of a file passes `first_index = k` and
/// writes exactly the bytes a single process would.
pub fn augment_batch(
    seed: u64,
    file_key: u64,
    first_index: u64,
    input: &[u8],
    out: &mut [u8],
) -> Result<usize, AugmentError> {
    if !input.len().is_multiple_of(RECORD_BYTES) {
        return Err(AugmentError::PartialRecord { len: input.len() });
    }
    if out.len() != input.len() {
        return Err(AugmentError::OutputLength { input: input.len(), output: out.len() });
    }
    let (records, _) = input.as_chunks::<RECORD_BYTES>();
    let (outs, _) = out.as_chunks_mut::<RECORD_BYTES>();
    for (i, (rec, dst)) in records.iter().zip(outs.iter_mut()).enumerate() {
        augment_record(seed, file_key, first_index.wrapping_add(i as u64), rec, dst);
    }
    Ok(records.len())
}
