#![no_main]
//! Fuzz target `gufi_db`: see `icicle_fuzz_harness::gufi_db`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::gufi_db(data));
