#![no_main]
//! Fuzz target `prism_catalog`: see `icicle_fuzz_harness::prism_catalog`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::prism_catalog(data));
