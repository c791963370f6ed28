#![no_main]
//! Fuzz target `gufi_row`: see `icicle_fuzz_harness::gufi_row`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::gufi_row(data));
