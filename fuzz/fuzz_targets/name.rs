#![no_main]
//! Fuzz target `name`: see `icicle_fuzz_harness::name`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::name(data));
