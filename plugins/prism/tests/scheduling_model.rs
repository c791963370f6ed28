//! Object-level against file-level scheduling on the contention model, over random shapes
//! (OST counts and speeds, stripe counts and sizes, PFL or plain layouts, file-size
//! distributions from uniform to one huge file, more files than loaders and fewer, loader
//! counts 4–192, caps as a profile sets them): the object scheduler's plan never has more
//! readers on an OST at once than the loader's limit and is not slower than the file-level
//! plan by more than 5 % in the model. Seeds are random per run and printed;
//! `ICICLE_TEST_SEED=N` replays one, `ICICLE_SCHEDULING_CASES=K` runs K (default 40).

use std::path::Path;

use icicle_core::rng::Rng;
use icicle_core::traits::{ObjectLayout, Placement};
use icicle_plugins_prism::contention::{over_limits, simulate};
use icicle_plugins_prism::layout::EmulatedLayouts;
use icicle_plugins_prism::{FileScheduler, Loader, ObjectScheduler};

/// One random shape: the files' layouts, the loader count and the model.
struct Shape {
    objects: Vec<ObjectLayout>,
    loaders: usize,
    model: Loader,
    what: String,
}

fn shape(seed: u64) -> Shape {
    let mut r = Rng::new(seed);
    let osts = 1 + r.below(48) as u32;
    let pool: Vec<String> = (0..osts).map(|o| (o * 7 + 3).to_string()).collect();
    let stripe = [65_536u64, 1 << 20, 4 << 20][r.below(3) as usize];
    let layout = match r.below(3) {
        0 => format!("count={}", 1 + r.below(8)),
        1 => "pfl=4M:1,64M:2,EOF:4".to_string(),
        _ => "count=1".to_string(),
    };
    let spec = format!("pool={};stripe_size={stripe};{layout}", pool.join(","));
    let emulated = EmulatedLayouts::parse(&spec).unwrap();
    let files = [1usize, 3, 8, 30, 200, 1000][r.below(6) as usize];
    let dist = r.below(4);
    let objects: Vec<ObjectLayout> = (0..files)
        .map(|i| {
            let size = match dist {
                0 => 1 + r.below(64 << 20),
                1 => (1e5 * 10_000f64.powf(r.f64())) as u64,
                2 if i == 0 => 4 << 30,
                2 => 1 + r.below(1 << 20),
                _ => 32 << 20,
            };
            let name = format!("d/f{i:05}.dat");
            ObjectLayout { components: emulated.assign(Path::new(&name), size), path: name, size }
        })
        .collect();
    let loaders = [4usize, 6, 8, 12, 16, 24, 48, 96, 192][r.below(9) as usize];
    let ost_mb_s: f64 = [100.0, 500.0, 2000.0][r.below(3) as usize];
    let proc_mb_s = [50.0, 200.0, 1000.0][r.below(3) as usize];
    // A profiled loader's cap: where the OST saturates, or a little past it (the per-OST
    // limit is `round(ost / process)` within the cap).
    let cap = ((ost_mb_s / proc_mb_s).round() as u32).max(1) + r.below(3) as u32;
    let what = format!(
        "{osts} OSTs at {ost_mb_s} MB/s, {spec}, {files} files (distribution {dist}), {loaders} loaders at {proc_mb_s} MB/s, cap {cap}"
    );
    Shape { objects, loaders, model: Loader::uniform(ost_mb_s, proc_mb_s, cap), what }
}

fn cases() -> (u64, u64) {
    let first = icicle_core::rng::test_seed();
    let n = std::env::var("ICICLE_SCHEDULING_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    (first, n)
}

/// Per case: the object plan never has more ranks reading an OST at once than the loader's
/// limit, and is never more than 5 % slower than the file-level plan in the model, whether
/// or not the file-level plan keeps those limits.
#[test]
fn object_scheduling_never_loses_to_file_scheduling_in_the_model() {
    let (first, n) = cases();
    let mut worst = (0.0f64, String::new());
    let mut beyond_limits = 0usize;
    for seed in first..first + n {
        let s = shape(seed);
        let object_plan = ObjectScheduler::new(Some(s.model.clone())).place(&s.objects, s.loaders);
        let over = over_limits(&object_plan, &s.model);
        assert!(over.is_empty(), "seed {seed}: over the limits {over:?}: {}", s.what);
        let file_plan = FileScheduler.place(&s.objects, s.loaders);
        beyond_limits += usize::from(!over_limits(&file_plan, &s.model).is_empty());
        let (object, file) = (simulate(&object_plan, &s.model), simulate(&file_plan, &s.model));
        assert_eq!(object.bytes, file.bytes, "seed {seed}: {}", s.what);
        let ratio = object.seconds / file.seconds.max(1e-12);
        if ratio > worst.0 {
            worst = (ratio, format!("seed {seed}: {}", s.what));
        }
        assert!(
            ratio <= 1.05,
            "seed {seed}: object {:.3} s, file {:.3} s ({ratio:.2}×): {}",
            object.seconds,
            file.seconds,
            s.what
        );
    }
    eprintln!(
        "worst object/file ratio {:.3} ({}); {beyond_limits} of {n} file-level plans beyond the loader's limits",
        worst.0, worst.1
    );
}

/// The seed's shapes, as `swiftload-sweep` models them: CIFAR-10 (6 batches of 30,730,000
/// bytes, 4 stripes of 1 MiB over 24 OSTs at 500 MB/s) and 2,000 application outputs of 1 to
/// 256 MB (PFL 1–4 stripes), loaders at 151 MB/s, 24 to 192 of them: object-level is never
/// slower, and for CIFAR-10 it is at least twice as fast from 48 loaders (file-level cannot
/// use more loaders than files).
#[test]
fn the_seeds_shapes_are_won_by_object_scheduling() {
    let model = Loader::uniform(500.0, 151.0, 8);
    for (app, objects) in icicle_plugins_prism::dataset::seed_shapes(24) {
        let objects = &objects;
        for loaders in [24, 48, 96, 192] {
            let object = simulate(&ObjectScheduler::new(Some(model.clone())).place(objects, loaders), &model).seconds;
            let file = simulate(&FileScheduler.place(objects, loaders), &model).seconds;
            assert!(object <= file * 1.0001, "{app} at {loaders}: object {object:.3} s, file {file:.3} s");
            if app.starts_with("augment") && loaders >= 48 {
                assert!(object * 2.0 <= file, "{app} at {loaders}: object {object:.3} s, file {file:.3} s");
            }
        }
    }
}
