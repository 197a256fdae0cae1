//! Stopping one running instance from anywhere.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Stops one execution at once, from any thread or task.
///
/// The executor's heartbeat watchdog holds a clone and pulls it when the
/// lease is lost. The instance stops within one epoch tick if it is running
/// WebAssembly, at once if it is waiting in a host call; from then on every
/// host call it makes fails, so a stopped execution can cause no further
/// side effect.
///
/// ```
/// let kill = waft_runtime::KillSwitch::new();
/// let watchdog = kill.clone();
/// assert!(watchdog.kill("lease lost"));
/// assert!(!kill.kill("second reason is ignored"));
/// assert_eq!(kill.reason(), Some("lease lost"));
/// ```
///
/// A switch can also carry a **fence**: an instant after which it counts as
/// pulled, unless the fence is moved later first. The executor keeps it
/// just short of when its lease could lapse, moving it with every
/// acknowledged heartbeat, so the instance stops itself, on its own thread,
/// even when the watchdog that would pull the switch is not getting to run.
///
/// ```
/// use std::time::{Duration, Instant};
/// let kill = waft_runtime::KillSwitch::new();
/// kill.fence_at(Instant::now() + Duration::from_secs(60));
/// assert!(!kill.is_killed());
/// kill.fence_at(Instant::now());
/// assert!(kill.is_killed());
/// assert!(kill.reason().unwrap().starts_with("no acknowledged heartbeat"));
/// ```
#[derive(Clone, Debug)]
pub struct KillSwitch {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    reason: OnceLock<String>,
    token: CancellationToken,
    /// What the fence's nanoseconds count from.
    origin: Instant,
    /// The fence, in nanoseconds after `origin`; `NO_FENCE` when unset.
    fence: AtomicU64,
}

const NO_FENCE: u64 = u64::MAX;

impl Default for KillSwitch {
    fn default() -> Self {
        Self {
            inner: Arc::new(Inner {
                reason: OnceLock::new(),
                token: CancellationToken::new(),
                origin: Instant::now(),
                fence: AtomicU64::new(NO_FENCE),
            }),
        }
    }
}

impl KillSwitch {
    /// A switch not yet pulled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the fence: from `at` on, the switch counts as pulled. Set the
    /// first fence before the execution starts; later calls move it.
    pub fn fence_at(&self, at: Instant) {
        let nanos = at.saturating_duration_since(self.inner.origin).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(NO_FENCE - 1);
        self.inner.fence.store(nanos, Ordering::Release);
    }

    /// The fence, if one is set.
    fn fence(&self) -> Option<Instant> {
        match self.inner.fence.load(Ordering::Acquire) {
            NO_FENCE => None,
            nanos => Some(self.inner.origin + Duration::from_nanos(nanos)),
        }
    }

    /// Pulls the switch if its fence has passed.
    fn check_fence(&self) {
        if let Some(fence) = self.fence()
            && Instant::now() >= fence
            && !self.inner.token.is_cancelled()
        {
            self.kill("no acknowledged heartbeat for too long: the lease may have lapsed");
        }
    }

    /// Pulls the switch. Returns false if it had already been pulled; the
    /// first reason is the one reported.
    pub fn kill(&self, reason: impl Into<String>) -> bool {
        let first = self.inner.reason.set(reason.into()).is_ok();
        self.inner.token.cancel();
        first
    }

    /// Whether the switch has been pulled (or its fence has passed).
    pub fn is_killed(&self) -> bool {
        self.check_fence();
        self.inner.token.is_cancelled()
    }

    /// Why the switch was pulled, once it has been.
    pub fn reason(&self) -> Option<&str> {
        self.check_fence();
        self.inner.reason.get().map(String::as_str)
    }

    /// [`killed`](Self::killed), owning its switch: a future that may
    /// outlive the borrow (a response body's).
    pub(crate) async fn killed_owned(self) {
        self.killed().await;
    }

    /// Resolves when the switch is pulled, or its fence passes.
    pub async fn killed(&self) {
        loop {
            let Some(fence) = self.fence() else {
                return self.inner.token.cancelled().await;
            };
            tokio::select! {
                () = self.inner.token.cancelled() => return,
                () = tokio::time::sleep_until(fence.into()) => {
                    // The fence may have moved meanwhile.
                    if self.is_killed() {
                        return;
                    }
                }
            }
        }
    }
}
