//! Crons as clients make and preview them: a cron expression read in its
//! time zone (UTC when none is named), a new cron stored with its first
//! occurrence after now, and the occurrences a preview lists.
//!
//! Apart from the other client calls because only these read cron
//! expressions; the Store Consumer's periodic loop (`periodic.rs`) turns
//! what they store into tasks.

use waft_core::CronSchedule;
use waft_core::cron::DEFAULT_TIMEZONE;
use waft_core::limits::check_payload;
use waft_store::{Cron, Millis};

use super::Frontend;
use crate::{CronRequest, ServiceError, ServiceResult};

impl Frontend {
    /// Stores the cron `request` asks for, for a caller allowed to: its
    /// payload within the limit, its expression valid in its time zone.
    pub(super) async fn store_cron(&self, request: CronRequest) -> ServiceResult<Cron> {
        check_payload(&request.lambda, request.payload.len())
            .map_err(ServiceError::ResourceExhausted)?;
        let timezone = request
            .timezone
            .unwrap_or_else(|| DEFAULT_TIMEZONE.to_owned());
        let now = self.clock.now();
        let next_at = CronSchedule::parse(&request.cron, &timezone)
            .and_then(|cron| cron.first_after(now))
            .map_err(|error| ServiceError::InvalidArgument(error.to_string()))?;
        let schedule = Cron {
            id: waft_store::new_id(),
            lambda: request.lambda,
            cron: request.cron,
            timezone,
            payload: request.payload,
            collection: request.collection,
            key: request.key,
            priority: request.priority,
            catch_up: request.catch_up,
            next_at,
            created_at: now,
        };
        self.store.cron_create(schedule.clone()).await?;
        tracing::info!(schedule = %schedule.id, lambda = %schedule.lambda, cron = %schedule.cron, timezone = %schedule.timezone, "periodic schedule created");
        Ok(schedule)
    }

    /// The next `count` occurrences of `cron` in `timezone` after now (5
    /// when 0, at most 100).
    pub(super) fn cron_occurrences(
        &self,
        cron: &str,
        timezone: Option<&str>,
        count: u32,
    ) -> ServiceResult<Vec<Millis>> {
        let invalid =
            |error: waft_core::cron::CronError| ServiceError::InvalidArgument(error.to_string());
        let schedule =
            CronSchedule::parse(cron, timezone.unwrap_or(DEFAULT_TIMEZONE)).map_err(invalid)?;
        let count = match count {
            0 => 5,
            n => n.min(100) as usize,
        };
        let mut next = schedule.first_after(self.clock.now()).map_err(invalid)?;
        let mut occurrences = vec![next];
        while occurrences.len() < count {
            match schedule.next_after(next) {
                Some(at) => {
                    occurrences.push(at);
                    next = at;
                }
                None => break,
            }
        }
        Ok(occurrences)
    }
}
