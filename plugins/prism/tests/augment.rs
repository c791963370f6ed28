//! The CIFAR-10 augmentation against a plain reference written from the module's definitions:
//! each step an explicit pass over 2D arrays (flip, pad to 40x40, crop, rotate pixel by pixel),
//! its own SplitMix64 stream and its own sin/cos table (f64, rounded). A property test compares
//! both over random records and seeds (`ICICLE_PROPERTY_SEED=N` replays one seed,
//! `ICICLE_PROPERTY_CASES` sets how many run); other tests check each step on hand-made images.

use icicle_core::rng::Rng;
use icicle_plugins_prism::augment::{augment_batch, augment_record, file_key, AugmentError, Transform, RECORD_BYTES};

/// [channel][row][column].
type Image = [[[u8; 32]; 32]; 3];

// ---------------------------------------------------------------- the reference

/// The SplitMix64 stream: advance the state, return the mixed value.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One SplitMix64 output from a fresh state `z`.
fn mix(z: u64) -> u64 {
    let mut s = z;
    next(&mut s)
}

/// (flip, crop_x, crop_y, angle) as the module documentation defines them.
fn reference_choices(seed: u64, key: u64, index: u64) -> (bool, usize, usize, i64) {
    let mut state = mix(mix(mix(seed) ^ key) ^ index);
    let d0 = next(&mut state);
    let d1 = next(&mut state);
    let d2 = next(&mut state);
    let d3 = next(&mut state);
    (d0 >> 63 == 1, (d1 % 9) as usize, (d2 % 9) as usize, (d3 % 31) as i64 - 15)
}

fn decode(rec: &[u8]) -> (u8, Image) {
    let mut img = [[[0u8; 32]; 32]; 3];
    for (c, plane) in img.iter_mut().enumerate() {
        for (y, row) in plane.iter_mut().enumerate() {
            for (x, px) in row.iter_mut().enumerate() {
                *px = rec[1 + c * 1024 + y * 32 + x];
            }
        }
    }
    (rec[0], img)
}

fn encode(label: u8, img: &Image) -> Vec<u8> {
    let mut rec = vec![label];
    for plane in img {
        for row in plane {
            rec.extend_from_slice(row);
        }
    }
    rec
}

fn reference_flip(img: &Image) -> Image {
    let mut out = [[[0u8; 32]; 32]; 3];
    for c in 0..3 {
        for y in 0..32 {
            for x in 0..32 {
                out[c][y][x] = img[c][y][31 - x];
            }
        }
    }
    out
}

fn reference_pad_crop(img: &Image, crop_x: usize, crop_y: usize) -> Image {
    let mut padded = [[[0u8; 40]; 40]; 3];
    for c in 0..3 {
        for y in 0..32 {
            for x in 0..32 {
                padded[c][y + 4][x + 4] = img[c][y][x];
            }
        }
    }
    let mut out = [[[0u8; 32]; 32]; 3];
    for c in 0..3 {
        for y in 0..32 {
            for x in 0..32 {
                out[c][y][x] = padded[c][y + crop_y][x + crop_x];
            }
        }
    }
    out
}

/// round(65536 * sin(deg)), round(65536 * cos(deg)) in f64 (no value is near a half).
fn reference_sin_cos(deg: i64) -> (i64, i64) {
    let r = (deg as f64).to_radians();
    ((r.sin() * 65536.0).round() as i64, (r.cos() * 65536.0).round() as i64)
}

fn reference_rotate(img: &Image, deg: i64) -> Image {
    let (s, k) = reference_sin_cos(deg);
    let mut out = [[[0u8; 32]; 32]; 3];
    for y in 0..32i64 {
        for x in 0..32i64 {
            let (dx, dy) = (2 * x - 31, 2 * y - 31);
            // Source in doubled Q16 coordinates about the centre, then back to pixels:
            // floor(v / 65536 / 2 + 15.5 + 0.5).
            let sx = (k * dx + s * dy + 32 * 65536).div_euclid(2 * 65536);
            let sy = (k * dy - s * dx + 32 * 65536).div_euclid(2 * 65536);
            if (0..32).contains(&sx) && (0..32).contains(&sy) {
                for c in 0..3 {
                    out[c][y as usize][x as usize] = img[c][sy as usize][sx as usize];
                }
            }
        }
    }
    out
}

fn reference_apply(rec: &[u8], (flip, crop_x, crop_y, deg): (bool, usize, usize, i64)) -> Vec<u8> {
    let (label, img) = decode(rec);
    let flipped = if flip { reference_flip(&img) } else { img };
    let cropped = reference_pad_crop(&flipped, crop_x, crop_y);
    encode(label, &reference_rotate(&cropped, deg))
}

fn reference_augment(seed: u64, key: u64, index: u64, rec: &[u8]) -> Vec<u8> {
    reference_apply(rec, reference_choices(seed, key, index))
}

// ---------------------------------------------------------------- helpers

fn random_record(rng: &mut Rng) -> [u8; RECORD_BYTES] {
    let mut rec = [0u8; RECORD_BYTES];
    let structured = rng.below(2) == 0;
    let base = rng.below(256) as usize;
    for (i, b) in rec.iter_mut().enumerate() {
        *b = if structured && i > 0 {
            ((i - 1) % 1024 / 32 * 5 + (i - 1) % 32 * 3 + base) as u8
        } else {
            rng.next_u64() as u8
        };
    }
    rec
}

fn run(t: Transform, rec: &[u8; RECORD_BYTES]) -> [u8; RECORD_BYTES] {
    let mut out = [0u8; RECORD_BYTES];
    t.apply(rec, &mut out);
    out
}

/// A record whose channel `c` pixel (x, y) is `f(c, x, y)`; label 7.
fn image(f: impl Fn(usize, usize, usize) -> u8) -> [u8; RECORD_BYTES] {
    let mut rec = [0u8; RECORD_BYTES];
    rec[0] = 7;
    for c in 0..3 {
        for y in 0..32 {
            for x in 0..32 {
                rec[1 + c * 1024 + y * 32 + x] = f(c, x, y);
            }
        }
    }
    rec
}

fn px(rec: &[u8], c: usize, x: usize, y: usize) -> u8 {
    rec[1 + c * 1024 + y * 32 + x]
}

fn t(flip: bool, cx: u8, cy: u8, deg: i8) -> Transform {
    Transform::new(flip, cx, cy, deg).expect("a transform in range")
}

/// The seeds of one run: one given, or `cases` (at least 30 by default) from a random start.
fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("ICICLE_PROPERTY_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let cases: u64 = std::env::var("ICICLE_PROPERTY_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    let first = nanos % 1_000_000_000;
    (first..first + cases).collect()
}

// ---------------------------------------------------------------- properties

/// Optimized and reference outputs are identical for random records, keys, indices and seeds.
#[test]
fn matches_the_reference_over_random_records_and_seeds() {
    let mut failures = Vec::new();
    let all = seeds();
    for &seed in &all {
        let mut rng = Rng::new(seed);
        let key = if seed % 2 == 0 { rng.next_u64() } else { file_key(&format!("data_batch_{}.bin", seed % 5 + 1)) };
        let mut bad = None;
        for n in 0..120 {
            let index = if n < 60 { n } else { rng.below(1 << 40) };
            let rec = random_record(&mut rng);
            let mut out = [0u8; RECORD_BYTES];
            augment_record(seed, key, index, &rec, &mut out);
            let want = reference_augment(seed, key, index, &rec);
            let drawn = Transform::draw(seed, key, index);
            let (f, cx, cy, deg) = reference_choices(seed, key, index);
            let ours =
                (drawn.flip(), usize::from(drawn.crop().0), usize::from(drawn.crop().1), i64::from(drawn.angle_deg()));
            if ours != (f, cx, cy, deg) {
                bad = Some(format!("index {index}: choices {ours:?}, reference {:?}", (f, cx, cy, deg)));
                break;
            }
            if out[..] != want[..] {
                let first = out.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                bad = Some(format!(
                    "index {index} {drawn:?}: first difference at byte {first}: {} vs reference {}",
                    out[first], want[first]
                ));
                break;
            }
            if out[0] != rec[0] {
                bad = Some(format!("index {index}: label {} became {}", rec[0], out[0]));
                break;
            }
        }
        if let Some(b) = bad {
            failures.push(format!("seed {seed} (ICICLE_PROPERTY_SEED={seed} replays): {b}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} seeds failed:\n{}", failures.len(), all.len(), failures.join("\n"));
    eprintln!("{} seeds x 120 records match the reference (first seed {})", all.len(), all[0]);
}

/// Every one of the 2 x 9 x 9 x 31 transforms matches the reference on a random image.
#[test]
fn every_transform_matches_the_reference() {
    let mut rng = Rng::new(0x0c1f_a410);
    let rec = random_record(&mut rng);
    let mut count = 0;
    for flip in [false, true] {
        for cx in 0..=8u8 {
            for cy in 0..=8u8 {
                for deg in -15..=15i8 {
                    let want = reference_apply(&rec, (flip, usize::from(cx), usize::from(cy), i64::from(deg)));
                    assert_eq!(
                        run(t(flip, cx, cy, deg), &rec)[..],
                        want[..],
                        "flip {flip} crop ({cx}, {cy}) angle {deg}"
                    );
                    count += 1;
                }
            }
        }
    }
    assert_eq!(count, 5022);
}

/// The draws cover every choice, and flips come about half the time.
#[test]
fn draws_cover_every_choice() {
    let (mut angles, mut xs, mut ys, mut flips) = ([0u32; 31], [0u32; 9], [0u32; 9], 0u32);
    let n = 31_000u32;
    for i in 0..u64::from(n) {
        let d = Transform::draw(42, file_key("data_batch_1.bin"), i);
        angles[(i64::from(d.angle_deg()) + 15) as usize] += 1;
        xs[usize::from(d.crop().0)] += 1;
        ys[usize::from(d.crop().1)] += 1;
        flips += u32::from(d.flip());
    }
    assert!(angles.iter().all(|&a| a > 700), "{angles:?}");
    assert!(xs.iter().chain(&ys).all(|&a| a > 3000), "{xs:?} {ys:?}");
    assert!((14_800..16_200).contains(&flips), "{flips} flips of {n}");
}

// ---------------------------------------------------------------- each step alone

#[test]
fn the_identity_changes_nothing() {
    let rec = random_record(&mut Rng::new(3));
    assert_eq!(run(Transform::IDENTITY, &rec), rec);
    assert_eq!(run(t(false, 4, 4, 0), &rec), rec, "crop at (4, 4) and angle 0 are the identity");
}

#[test]
fn flip_mirrors_a_gradient() {
    let rec = image(|c, x, y| (x * 8 + c + y % 2) as u8);
    let out = run(t(true, 4, 4, 0), &rec);
    for c in 0..3 {
        for y in 0..32 {
            for x in 0..32 {
                assert_eq!(px(&out, c, x, y), ((31 - x) * 8 + c + y % 2) as u8, "channel {c} ({x}, {y})");
            }
        }
    }
    assert_eq!(run(t(true, 4, 4, 0), &out), rec, "two flips are none");
    let vertical = image(|_, _, y| y as u8 * 7);
    assert_eq!(run(t(true, 4, 4, 0), &vertical), vertical, "a vertical gradient does not change");
}

#[test]
fn crop_shifts_with_zero_padding() {
    let rec = image(|c, x, y| (1 + x + 32 * y + c) as u8 | 1);
    for (cx, cy) in [(0u8, 0u8), (8, 8), (0, 8), (3, 6), (8, 1)] {
        let out = run(t(false, cx, cy, 0), &rec);
        for c in 0..3 {
            for y in 0..32i64 {
                for x in 0..32i64 {
                    let (sx, sy) = (x + i64::from(cx) - 4, y + i64::from(cy) - 4);
                    let want = if (0..32).contains(&sx) && (0..32).contains(&sy) {
                        px(&rec, c, sx as usize, sy as usize)
                    } else {
                        0
                    };
                    assert_eq!(px(&out, c, x as usize, y as usize), want, "crop ({cx}, {cy}) channel {c} ({x}, {y})");
                }
            }
        }
    }
    // Offsets (0, 0): the top 4 rows and left 4 columns are padding, the rest the image moved.
    let out = run(t(false, 0, 0, 0), &rec);
    assert_eq!(px(&out, 0, 3, 10), 0);
    assert_eq!(px(&out, 0, 4, 4), px(&rec, 0, 0, 0));
}

#[test]
fn rotation_turns_about_the_centre_clockwise() {
    let flat = image(|_, _, _| 200);
    for deg in [-15i8, -7, 1, 15] {
        let out = run(t(false, 4, 4, deg), &flat);
        for (x, y) in [(15, 15), (16, 16), (15, 16), (16, 15)] {
            assert_eq!(px(&out, 1, x, y), 200, "angle {deg}: the centre stays");
        }
        if deg.abs() == 15 {
            for (x, y) in [(0, 0), (31, 0), (0, 31), (31, 31)] {
                assert_eq!(px(&out, 2, x, y), 0, "angle {deg}: corner ({x}, {y}) is zero fill");
            }
        }
    }
    // A dot above the centre moves right for a positive angle (clockwise as displayed).
    let dot = image(|_, x, y| if (15..=16).contains(&x) && (2..=3).contains(&y) { 255 } else { 0 });
    let lit = |rec: &[u8; RECORD_BYTES]| (0..1024).filter(|&i| rec[1 + i] == 255).map(|i| i % 32).collect::<Vec<_>>();
    let right = lit(&run(t(false, 4, 4, 15), &dot));
    let left = lit(&run(t(false, 4, 4, -15), &dot));
    assert!(!right.is_empty() && right.iter().all(|&x| x > 17), "{right:?}");
    assert!(!left.is_empty() && left.iter().all(|&x| x < 14), "{left:?}");
}

/// Rotating by -a is the mirror image of rotating the mirrored image by a.
#[test]
fn rotation_is_symmetric_under_the_flip() {
    let rec = random_record(&mut Rng::new(11));
    let mirror = |r: &[u8; RECORD_BYTES]| run(t(true, 4, 4, 0), r);
    for deg in -15..=15i8 {
        assert_eq!(mirror(&run(t(false, 4, 4, -deg), &rec)), run(t(true, 4, 4, deg), &rec), "angle {deg}");
    }
}

#[test]
fn labels_are_kept() {
    for label in [0u8, 1, 5, 9, 255] {
        let mut rec = random_record(&mut Rng::new(u64::from(label)));
        rec[0] = label;
        for index in 0..40 {
            let mut out = [0u8; RECORD_BYTES];
            augment_record(5, 6, index, &rec, &mut out);
            assert_eq!(out[0], label);
        }
    }
}

// ---------------------------------------------------------------- batches and keys

#[test]
fn output_does_not_depend_on_call_order_or_split() {
    let mut rng = Rng::new(99);
    let records: Vec<[u8; RECORD_BYTES]> = (0..50).map(|_| random_record(&mut rng)).collect();
    let input: Vec<u8> = records.concat();
    let key = file_key("data_batch_3.bin");
    let mut whole = vec![0u8; input.len()];
    assert_eq!(augment_batch(17, key, 1000, &input, &mut whole), Ok(50));
    // Record by record, last first.
    for i in (0..50).rev() {
        let mut out = [0u8; RECORD_BYTES];
        augment_record(17, key, 1000 + i as u64, &records[i], &mut out);
        assert_eq!(out[..], whole[i * RECORD_BYTES..(i + 1) * RECORD_BYTES], "record {i}");
    }
    // Split in three runs, done out of order.
    let mut parts = vec![0u8; input.len()];
    for (lo, hi) in [(31usize, 50usize), (0, 13), (13, 31)] {
        let range = lo * RECORD_BYTES..hi * RECORD_BYTES;
        assert_eq!(augment_batch(17, key, 1000 + lo as u64, &input[range.clone()], &mut parts[range]), Ok(hi - lo));
    }
    assert_eq!(parts, whole);
    let mut again = vec![0u8; input.len()];
    augment_batch(17, key, 1000, &input, &mut again).expect("whole records");
    assert_eq!(again, whole, "the same call twice");
    // Another seed, file or starting index changes the output.
    for (seed, k, first) in [(18, key, 1000), (17, file_key("data_batch_4.bin"), 1000), (17, key, 1001)] {
        let mut other = vec![0u8; input.len()];
        augment_batch(seed, k, first, &input, &mut other).expect("whole records");
        assert_ne!(other, whole, "seed {seed} key {k} first {first}");
    }
}

#[test]
fn batches_must_be_whole_records() {
    let input = vec![3u8; 2 * RECORD_BYTES + 5];
    let mut out = vec![0u8; input.len()];
    let err = augment_batch(1, 2, 0, &input, &mut out);
    assert_eq!(err, Err(AugmentError::PartialRecord { len: 2 * RECORD_BYTES + 5 }));
    let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("2 whole, 5 bytes over"), "{msg}");
    let mut short = vec![0u8; RECORD_BYTES];
    assert_eq!(
        augment_batch(1, 2, 0, &input[..2 * RECORD_BYTES], &mut short),
        Err(AugmentError::OutputLength { input: 2 * RECORD_BYTES, output: RECORD_BYTES })
    );
    assert_eq!(augment_batch(1, 2, 0, &[], &mut []), Ok(0));
}

#[test]
fn transforms_out_of_range_are_refused() {
    assert!(matches!(Transform::new(false, 9, 0, 0), Err(AugmentError::OutOfRange { what: "crop_x", value: 9, .. })));
    assert!(matches!(Transform::new(false, 0, 200, 0), Err(AugmentError::OutOfRange { what: "crop_y", .. })));
    assert!(matches!(
        Transform::new(true, 8, 8, 16),
        Err(AugmentError::OutOfRange { what: "angle_deg", value: 16, .. })
    ));
    assert!(matches!(Transform::new(true, 8, 8, -128), Err(AugmentError::OutOfRange { what: "angle_deg", .. })));
    assert!(Transform::new(true, 8, 0, -15).is_ok());
}

#[test]
fn file_keys_hash_the_base_name() {
    // FNV-1a 64 test vectors.
    assert_eq!(file_key(""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(file_key("a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(file_key("foobar"), 0x8594_4171_f739_67e8);
    let k = file_key("data_batch_1.bin");
    assert_eq!(file_key("/scratch/run42/cifar-10-batches-bin/data_batch_1.bin"), k);
    assert_eq!(file_key("cifar/data_batch_1.bin"), k);
    assert_eq!(file_key("cifar/data_batch_1.bin/"), k);
    assert_ne!(file_key("data_batch_2.bin"), k);
    assert_ne!(file_key("test_batch.bin"), k);
}

/// Pinned values (also computed by a Python transcription of the module documentation): a
/// change here changes every augmented dataset, so change them only deliberately.
#[test]
fn draws_and_outputs_are_pinned() {
    let key = file_key("data_batch_1.bin");
    let drawn: Vec<(bool, (u8, u8), i8)> =
        (0..4).map(|i| Transform::draw(2025, key, i)).map(|d| (d.flip(), d.crop(), d.angle_deg())).collect();
    let rec = image(|c, x, y| (x * 7 + y * 3 + c * 50) as u8);
    let mut out = vec![0u8; 4 * RECORD_BYTES];
    let input = [rec, rec, rec, rec].concat();
    augment_batch(2025, key, 0, &input, &mut out).expect("whole records");
    let digest = out.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    assert_eq!(
        format!("{drawn:?} {digest:#018x}"),
        "[(true, (3, 7), -15), (false, (5, 7), 13), (false, (1, 2), -11), (true, (7, 0), 3)] 0x6629f2ec2ad53e0a"
    );
}
