//! Waits that hold nothing: a lambda may sleep for a week.

use std::time::Duration;

/// Waits for `duration`, durably.
///
/// A short wait is waited out in the instance. A longer one — past the
/// executor's `suspend_after`, one second by default — **suspends** the
/// task: the wait's end is written to the task's journal, the instance is
/// dropped and its executor slot freed, and the task waits in the store
/// (status `suspended`, no attempt spent) until the time has come. Then a
/// fresh instance of the same version replays the journal up to this call,
/// which returns, and the lambda goes on as if it had slept in place: every
/// host call it made before is answered from the journal, not made again.
///
/// `std::thread::sleep` and any wait on `wasi:clocks` alone behave the
/// same way; this function says so where it is called. `waft invoke`, with
/// no store to resume from, waits in place.
pub fn sleep(duration: Duration) {
    std::thread::sleep(duration);
}
