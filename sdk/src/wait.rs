//! Waits that hold nothing: a lambda may sleep for a week, or wait that
//! long for a person to approve.

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

/// Waits for the signal `name` sent to this task, for at most `timeout`,
/// and returns its payload; `None` when the time passed first.
///
/// A client sends it with `SignalTask`, `waft task signal ID NAME
/// [--payload JSON]` or the form on the task's page in the dashboard. A
/// signal sent before the wait is kept with the task and taken here; two
/// waits for the same name take two signals, in the order they were sent.
/// A wait longer than the executor's `suspend_after` suspends the task, as
/// [`sleep`] does, until the signal comes or the time is up; what it
/// returned is journaled, so a retry that replays it gets the same.
///
/// ```no_run
/// use std::time::Duration;
/// let approval = waft_sdk::wait_signal("approved", Duration::from_secs(3 * 24 * 3600));
/// match approval {
///     Some(payload) => println!("approved: {}", String::from_utf8_lossy(&payload)),
///     None => println!("nobody approved within three days"),
/// }
/// ```
pub fn wait_signal(name: &str, timeout: Duration) -> Option<Vec<u8>> {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    crate::bindings::waft::lambda::signals::wait(name, timeout_ms)
}
