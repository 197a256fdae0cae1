//! The deploy path with arbitrary bytes: refused, or run under tight
//! limits; never a crash. Seeded with the sample lambdas (`scripts/fuzz`),
//! so mutations start from real components.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|wasm: &[u8]| {
    waft_fuzz::deploy_and_run(wasm);
});
