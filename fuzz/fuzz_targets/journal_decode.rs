#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stepstone_fuzz::journal_decode(data);
});
