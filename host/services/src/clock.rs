//! Time as the services see it: Unix milliseconds, injectable in tests.
//!
//! Leases are times compared across roles: the HSC writes a heartbeat's
//! deadline, the Store Consumer decides later that it passed. Were each
//! role to read its own host's wall clock, a skew between hosts (or one
//! host's clock stepping) would make a running task look lapsed, and it
//! would run twice. So the roles follow one clock, the store's:
//! [`StoreClock`] reads it at start and every [`StoreClock::RESYNC`], and
//! counts the time between on the host's monotonic clock, which no step of
//! the wall clock moves. What remains is bounded by half a round trip to
//! the store plus the monotonic clock's drift over one resync interval
//! (parts per million), far inside the slack between a heartbeat interval
//! and its timeout.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;
use waft_store::{Millis, StoreError, TaskStore};

/// A source of "now".
pub trait Clock: Send + Sync {
    /// Now, in Unix milliseconds.
    fn now(&self) -> Millis;
}

/// The system's wall clock: for tests and single-process tools. The roles
/// use a [`StoreClock`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        waft_core::model::millis_of(SystemTime::now())
    }
}

/// The store's clock, read now and then and carried forward between reads
/// on the monotonic clock. Never goes backwards.
#[derive(Debug)]
pub struct StoreClock {
    /// A reading of the store's clock and the instant it stood for.
    anchor: Mutex<(Millis, Instant)>,
    /// The latest time handed out.
    last: AtomicI64,
}

impl StoreClock {
    /// How often the store's clock is read again, to follow its own
    /// adjustments (NTP slewing the database host).
    pub const RESYNC: Duration = Duration::from_secs(30);

    /// Reads the store's clock once.
    pub async fn read(store: &dyn TaskStore) -> Result<Self, StoreError> {
        let (time, at) = Self::measure(store).await?;
        Ok(Self::anchored(time, at))
    }

    /// A clock that read `time` at `at`.
    fn anchored(time: Millis, at: Instant) -> Self {
        Self {
            last: AtomicI64::new(time),
            anchor: Mutex::new((time, at)),
        }
    }

    /// Reads the store's clock, then again every [`Self::RESYNC`] until
    /// `stop`. A failed read keeps the last anchor (and is logged): the
    /// monotonic clock carries on.
    pub async fn start(
        store: Arc<dyn TaskStore>,
        stop: CancellationToken,
    ) -> Result<Arc<Self>, StoreError> {
        let clock = Arc::new(Self::read(store.as_ref()).await?);
        let resynced = clock.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Self::RESYNC) => {}
                }
                if let Err(error) = resynced.resync(store.as_ref()).await {
                    tracing::warn!(%error, "cannot read the store's clock; keeping the last reading");
                }
            }
        });
        Ok(clock)
    }

    /// Reads the store's clock again.
    pub async fn resync(&self, store: &dyn TaskStore) -> Result<(), StoreError> {
        let (time, at) = Self::measure(store).await?;
        self.reanchor(time, at);
        Ok(())
    }

    fn reanchor(&self, time: Millis, at: Instant) {
        *self.anchor.lock().unwrap_or_else(|e| e.into_inner()) = (time, at);
    }

    /// One reading, taken to stand for the middle of its round trip.
    async fn measure(store: &dyn TaskStore) -> Result<(Millis, Instant), StoreError> {
        let sent = Instant::now();
        let time = store.clock_now().await?;
        let round_trip = sent.elapsed();
        Ok((time, sent + round_trip / 2))
    }
}

impl Clock for StoreClock {
    fn now(&self) -> Millis {
        let (time, at) = *self.anchor.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX);
        let now = time.saturating_add(elapsed);
        // A new reading slightly behind the last answer does not turn time
        // back.
        self.last.fetch_max(now, Ordering::AcqRel).max(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MINUTES: Millis = 600_000;

    /// The store's clock, not the host's: a store ten minutes ahead of
    /// this host gives times ten minutes ahead, advancing with the
    /// monotonic clock.
    #[test]
    fn follows_the_store_not_the_host() {
        let host = SystemClock.now();
        let clock = StoreClock::anchored(host + TEN_MINUTES, Instant::now());
        let first = clock.now();
        assert!(
            (first - (host + TEN_MINUTES)).abs() < 100,
            "{first} vs {host}"
        );
        std::thread::sleep(Duration::from_millis(30));
        let later = clock.now();
        assert!((30..200).contains(&(later - first)), "{first} then {later}");
    }

    /// A reading behind the last answer (the store's host slewed back, or
    /// the round trip was lopsided) holds time still rather than turning it
    /// back; a reading ahead moves it on at once.
    #[test]
    fn never_goes_backwards() {
        let clock = StoreClock::anchored(1_000_000, Instant::now());
        let before = clock.now();
        clock.reanchor(before - 5_000, Instant::now());
        assert_eq!(clock.now(), before);
        clock.reanchor(before + 5_000, Instant::now());
        assert!(clock.now() >= before + 5_000);
    }
}
