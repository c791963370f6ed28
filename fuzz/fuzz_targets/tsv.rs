#![no_main]
//! Fuzz target `tsv`: see `icicle_fuzz_harness::tsv`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::tsv(data));
