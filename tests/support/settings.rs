//! The settings every process of a test installation gets, as `WAFT_*`
//! variables: timings shortened so that failure cases recover within
//! seconds (the safety rule still holds), one compile cache shared by
//! every test, and a retention that keeps an earlier installation's
//! ended tasks.

/// Settings every process of a test cluster gets, as `WAFT_*` variables.
const FAST: &[(&str, &str)] = &[
    ("WAFT_HEARTBEAT_INTERVAL", "300ms"),
    ("WAFT_HEARTBEAT_RPC_TIMEOUT", "200ms"),
    ("WAFT_HEARTBEAT_TIMEOUT", "2s"),
    ("WAFT_CONSUMER_POLL_INTERVAL", "100ms"),
    ("WAFT_CONSUMER_ENQUEUE_TIMEOUT", "10s"),
    ("WAFT_QUEUE_VISIBILITY_TIMEOUT", "5s"),
    ("WAFT_CONTROLLER_RECEIVE_WAIT", "1s"),
    ("WAFT_CONTROLLER_REFRESH", "200ms"),
    ("WAFT_EXECUTOR_REFRESH", "200ms"),
    ("WAFT_EXECUTOR_NEXT_WORK_WAIT", "500ms"),
    ("WAFT_EXECUTOR_SHUTDOWN_GRACE", "1s"),
    ("WAFT_RETENTION_INTERVAL", "200ms"),
    ("WAFT_LOG", "info"),
    // One compile cache for every process of every test: a 15 MB Python or
    // JavaScript component takes minutes to compile in a debug build, and
    // each mode's executors, and the runtime's own tests, would compile
    // the same ones again.
    (
        "WAFT_RUNTIME_CACHE_DIR",
        concat!(env!("CARGO_TARGET_TMPDIR"), "/compiled-samples"),
    ),
];

/// Retention `forever` for every end.
pub(super) const KEEP_ENDED: [(&str, &str); 4] = [
    ("WAFT_RETENTION_SUCCESS", "forever"),
    ("WAFT_RETENTION_FATAL", "forever"),
    ("WAFT_RETENTION_DROPPED", "forever"),
    ("WAFT_RETENTION_CANCELLED", "forever"),
];

pub(super) fn fast_env() -> Vec<(String, String)> {
    FAST.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
