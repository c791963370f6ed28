#![no_main]
//! Fuzz target `mmapplypolicy`: see `icicle_fuzz_harness::mmapplypolicy`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::mmapplypolicy(data));
