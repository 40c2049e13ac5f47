//! libFuzzer target: arbitrary bytes as what other nodes send, through `verify::wirefuzz`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verify::wirefuzz::run(data));
