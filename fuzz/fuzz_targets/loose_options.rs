#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ratebound_fuzz::loose::loose_options(data));
