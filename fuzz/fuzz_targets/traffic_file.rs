#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ratebound_fuzz::traffic::traffic_file(data));
