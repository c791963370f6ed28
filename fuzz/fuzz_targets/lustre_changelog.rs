#![no_main]
//! Fuzz target `lustre_changelog`: see `icicle_fuzz_harness::lustre_changelog`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| icicle_fuzz_harness::lustre_changelog(data));
