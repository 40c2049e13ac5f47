//! libFuzzer target: arbitrary bytes drive the engine through `verify::fuzzprog`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verify::fuzzprog::run(data));
