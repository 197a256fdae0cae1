//! The integration tests of Waft's runtime, in one test binary: each module
//! below was a binary of its own, and linking wasmtime into each took
//! longer than running them. Run them with
//! `cargo test -p waft-runtime --test runtime`, one module with
//! `cargo test -p waft-runtime --test runtime MODULE::`.
//!
//! - [`artifacts`]: compiled artifacts: what one engine compiled, another
//!   with the same fingerprint loads and runs, but only under a seal that
//!   verifies.
//! - [`compiles`]: compiles side by side: a small lambda's does not wait
//!   for a large one's.
//! - [`contract`]: the contract's versions: a lambda built against
//!   `waft:lambda@0.1.0` runs unchanged beside current ones, and a current
//!   lambda imports only the capabilities it uses.
//! - [`durable`]: durable executions: a later attempt is answered from its
//!   task's journal and takes the same path; a changed lambda diverges.
//! - [`fan_in`]: fan-in: a lambda waiting for children that have not all
//!   ended is suspended and, resumed once they have, gets each one's end in
//!   the order it asked.
//! - [`host_memory`]: the host memory a lambda makes the platform spend
//!   outside its own linear memory stays bounded.
//! - [`languages`]: lambdas written in Python and in JavaScript run like
//!   any other.
//! - [`load_errors`]: files that are not lambdas are refused with a message
//!   naming the problem.
//! - [`log_budget`]: a lambda that logs as fast as it can keeps to
//!   `max_log`, and splitting its stdout into lines keeps up with it.
//! - [`outbound`]: outbound HTTP against a real server on loopback: what a
//!   grant lets through, everything it does not, every limit, and the
//!   fence.
//! - [`samples`]: every sample lambda in the real runtime, and every limit
//!   once within and once over.
//! - [`signals`]: waits for signals: suspended until the signal comes,
//!   signals taken in the order they came, what a wait returned replayed.
//! - [`waits`]: durable waits: a lambda blocked on a long enough timer is
//!   suspended, and the next execution goes on from the wait.
//!
//! Three files are test binaries of their own, since each reads state of
//! the whole process that any test beside it would change: `deploy_memory.rs`
//! (the peak resident memory), `guest_threads.rs` (the threads' nice
//! values) and `outbound_sockets.rs` (the open file descriptors). They
//! share [`support`] with this binary.

mod artifacts;
mod compiles;
mod contract;
mod durable;
mod fan_in;
mod host_memory;
mod languages;
mod load_errors;
mod log_budget;
mod outbound;
mod samples;
mod signals;
mod support;
mod waits;
