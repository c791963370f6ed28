#![no_main]
//! Fuzz target `time`: see `icicle_fuzz_harness::time`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::time(data));
