//! `wasi:random`, journaled: every random value a lambda draws, secure or
//! not, is drawn again from the journal on replay.

use ring::rand::{SecureRandom, SystemRandom};
use waft_core::limits::MAX_JOURNAL_ANSWER;
use wasmtime_wasi::p2::bindings::random::{insecure, insecure_seed, random};

use crate::run::HostState;

const BYTES: &str = "wasi:random/random.get-random-bytes";
const U64: &str = "wasi:random/random.get-random-u64";
const INSECURE_BYTES: &str = "wasi:random/insecure.get-insecure-random-bytes";
const INSECURE_U64: &str = "wasi:random/insecure.get-insecure-random-u64";
const SEED: &str = "wasi:random/insecure-seed.insecure-seed";

fn fill(bytes: &mut [u8]) {
    // The system's generator fails only where it does not exist.
    let _ = SystemRandom::new().fill(bytes);
}

fn number() -> u64 {
    let mut bytes = [0; 8];
    fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

impl HostState {
    /// `len` random bytes; a request over what one journal entry keeps
    /// traps.
    fn random_bytes(&mut self, call: &'static str, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.ensure_running()?;
        let Some(size) = usize::try_from(len)
            .ok()
            .filter(|&n| n <= MAX_JOURNAL_ANSWER)
        else {
            wasmtime::bail!("asked for {len} random bytes; at most {MAX_JOURNAL_ANSWER} at once");
        };
        let draw = || {
            let mut bytes = vec![0; size];
            fill(&mut bytes);
            bytes
        };
        self.journaled(call, &len, draw, |_| format!("{len} bytes"))
    }

    fn random_number(&mut self, call: &'static str) -> wasmtime::Result<u64> {
        self.ensure_running()?;
        self.journaled(call, &(), number, |_| "a number".to_owned())
    }
}

impl random::Host for HostState {
    fn get_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.random_bytes(BYTES, len)
    }

    fn get_random_u64(&mut self) -> wasmtime::Result<u64> {
        self.random_number(U64)
    }
}

impl insecure::Host for HostState {
    fn get_insecure_random_bytes(&mut self, len: u64) -> wasmtime::Result<Vec<u8>> {
        self.random_bytes(INSECURE_BYTES, len)
    }

    fn get_insecure_random_u64(&mut self) -> wasmtime::Result<u64> {
        self.random_number(INSECURE_U64)
    }
}

impl insecure_seed::Host for HostState {
    fn insecure_seed(&mut self) -> wasmtime::Result<(u64, u64)> {
        self.ensure_running()?;
        self.journaled(SEED, &(), || (number(), number()), |_| "a seed".to_owned())
    }
}
