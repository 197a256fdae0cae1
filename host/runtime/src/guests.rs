//! The threads lambdas run on, apart from the platform's own.
//!
//! An executor's own work — asking for tasks, heartbeating, reporting
//! results, serving gRPC — must never wait behind its guests. On the
//! caller's tokio runtime a lambda that computes until its deadline takes a
//! worker thread for every epoch tick it runs, and a few of them keep
//! every worker busy: the heartbeats of well-behaved tasks come late, and
//! their deliveries crawl. So an executor runs guests on a tokio runtime of
//! their own, whose threads run at a lower OS priority (`nice`): whenever
//! the platform's threads have work the kernel gives them the CPU first,
//! and the guests share what is left, each yielding at every epoch tick.

use std::future::Future;
use std::sync::OnceLock;

use tokio::task::JoinHandle;

/// How many guest threads, and how much lower their priority.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuestThreadsConfig {
    pub(crate) threads: usize,
    pub(crate) nice: u8,
}

/// A tokio runtime for guests, started on first use (a Frontend that only
/// checks deployments, or `waft invoke`, never starts it).
pub(crate) struct GuestThreads {
    config: GuestThreadsConfig,
    runtime: OnceLock<Result<tokio::runtime::Runtime, String>>,
}

impl GuestThreads {
    pub(crate) fn new(config: GuestThreadsConfig) -> Self {
        Self {
            config,
            runtime: OnceLock::new(),
        }
    }

    /// Runs `future` on a guest thread. `Err` when the guest runtime cannot
    /// start (the OS refused its threads).
    pub(crate) fn spawn<F>(&self, future: F) -> Result<AbortOnDrop<F::Output>, String>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = self
            .runtime
            .get_or_init(|| {
                let nice = self.config.nice;
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(self.config.threads)
                    .thread_name("waft-guest")
                    .on_thread_start(move || lower_priority(nice))
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the guest threads: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)?;
        Ok(AbortOnDrop(runtime.spawn(future)))
    }
}

impl Drop for GuestThreads {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which tokio forbids inside another
        // runtime; the last clone of a `Runtime` may well be dropped there.
        if let Some(Ok(runtime)) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A spawned guest task that is aborted when its handle is dropped, so a
/// caller that gives up on an execution also stops its instance (at its
/// next yield, within an epoch tick).
pub(crate) struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    pub(crate) async fn join(mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Lowers the calling thread's scheduling priority by `nice` (on Linux the
/// nice value is per thread). Raising it back would need privileges, so a
/// guest thread stays low for its life. Elsewhere a no-op.
fn lower_priority(nice: u8) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        let thread = rustix::thread::gettid();
        if let Err(error) = rustix::process::setpriority_process(Some(thread), i32::from(nice)) {
            tracing::warn!(
                %error,
                "cannot lower a guest thread's priority; guests compete with the platform as equals"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}
