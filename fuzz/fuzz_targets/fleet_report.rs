#![no_main]
// Body in ../src/lib.rs (shared with policy/tests/fuzz_replay.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| huntlb_fuzz::fleet_report(data));
