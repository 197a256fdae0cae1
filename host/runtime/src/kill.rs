//! Stopping one running instance from anywhere.

use std::sync::{Arc, OnceLock};

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
#[derive(Clone, Debug, Default)]
pub struct KillSwitch {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    reason: OnceLock<String>,
    token: CancellationToken,
}

impl KillSwitch {
    /// A switch not yet pulled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pulls the switch. Returns false if it had already been pulled; the
    /// first reason is the one reported.
    pub fn kill(&self, reason: impl Into<String>) -> bool {
        let first = self.inner.reason.set(reason.into()).is_ok();
        self.inner.token.cancel();
        first
    }

    /// Whether the switch has been pulled.
    pub fn is_killed(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Why the switch was pulled, once it has been.
    pub fn reason(&self) -> Option<&str> {
        self.inner.reason.get().map(String::as_str)
    }

    /// Resolves when the switch is pulled.
    pub async fn killed(&self) {
        self.inner.token.cancelled().await;
    }
}
