#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ratebound_fuzz::client_ip::forwarded(data));
