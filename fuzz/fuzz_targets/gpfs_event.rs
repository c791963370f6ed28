#![no_main]
//! Fuzz target `gpfs_event`: see `icicle_fuzz_harness::gpfs_event`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::gpfs_event(data));
