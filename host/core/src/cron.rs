//! Periodic schedules: when a cron expression fires, in a time zone.
//!
//! Expressions are standard five-field cron (minute, hour, day of month,
//! month, day of week, with names, ranges, steps and lists), or six fields
//! with seconds first. They are evaluated in an IANA time zone (UTC unless
//! given), so `0 9 * * MON-FRI` in `Europe/Paris` follows daylight saving:
//! a local time skipped by the change fires at the corresponding time after
//! it, and a local time that occurs twice fires once.
//!
//! Times are Unix milliseconds, as everywhere in the store.

use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// The time zone of a schedule that names none.
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// A parsed cron expression in a time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    cron: Cron,
    timezone: Tz,
}

/// Why an expression or time zone was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("invalid cron expression {expression:?}: {reason}")]
    Expression { expression: String, reason: String },
    #[error("unknown time zone {0:?}: use an IANA name such as UTC or Europe/Paris")]
    TimeZone(String),
    #[error("cron expression {0:?} never fires")]
    Never(String),
}

impl CronSchedule {
    /// Parses `expression` to be evaluated in `timezone` (an IANA name).
    pub fn parse(expression: &str, timezone: &str) -> Result<Self, CronError> {
        let timezone = Tz::from_str(timezone).map_err(|_| CronError::TimeZone(timezone.into()))?;
        // An empty item in a list (`,`, `1,,2`, `5,`) leaves a field
        // matching nothing, and the parser takes it: the search for an
        // occurrence would then try every second until the parser's last
        // year, for seconds of CPU per evaluation.
        if let Some(field) = expression
            .split_whitespace()
            .find(|field| field.split(',').any(str::is_empty))
        {
            return Err(CronError::Expression {
                expression: expression.into(),
                reason: format!("the field {field:?} has an empty item in its list"),
            });
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|error| CronError::Expression {
                expression: expression.into(),
                reason: error.to_string(),
            })?;
        Ok(Self {
            expression: expression.into(),
            cron,
            timezone,
        })
    }

    /// The first occurrence strictly after `after`; `None` when there is none
    /// (an expression limited to past years, or beyond the representable).
    pub fn next_after(&self, after: i64) -> Option<i64> {
        let start = self.local(after)?;
        let next = self.cron.find_next_occurrence(&start, false).ok()?;
        Some(next.timestamp_millis())
    }

    /// The last occurrence at or before `at`, if any.
    pub fn latest_until(&self, at: i64) -> Option<i64> {
        let start = self.local(at)?;
        let previous = self.cron.find_previous_occurrence(&start, true).ok()?;
        Some(previous.timestamp_millis())
    }

    /// The first occurrence after `now`, or an error saying it never fires.
    pub fn first_after(&self, now: i64) -> Result<i64, CronError> {
        self.next_after(now)
            .ok_or_else(|| CronError::Never(self.expression.clone()))
    }

    fn local(&self, millis: i64) -> Option<DateTime<Tz>> {
        let utc: DateTime<Utc> = DateTime::from_timestamp_millis(millis)?;
        Some(self.timezone.from_utc_datetime(&utc.naive_utc()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-03-09T08:30:00Z, a Monday.
    const MONDAY_0830_UTC: i64 = 1_773_045_000_000;
    const MINUTE: i64 = 60_000;
    const HOUR: i64 = 60 * MINUTE;

    #[test]
    fn five_fields_fire_on_the_minute() {
        let cron = CronSchedule::parse("*/15 * * * *", "UTC").unwrap();
        assert_eq!(
            cron.next_after(MONDAY_0830_UTC),
            Some(MONDAY_0830_UTC + 15 * MINUTE)
        );
        assert_eq!(cron.next_after(MONDAY_0830_UTC - 1), Some(MONDAY_0830_UTC));
        assert_eq!(cron.latest_until(MONDAY_0830_UTC), Some(MONDAY_0830_UTC));
        assert_eq!(
            cron.latest_until(MONDAY_0830_UTC - 1),
            Some(MONDAY_0830_UTC - 15 * MINUTE)
        );
    }

    #[test]
    fn six_fields_have_seconds_first() {
        let cron = CronSchedule::parse("*/5 * * * * *", "UTC").unwrap();
        assert_eq!(
            cron.next_after(MONDAY_0830_UTC),
            Some(MONDAY_0830_UTC + 5_000)
        );
    }

    #[test]
    fn a_time_zone_moves_the_occurrence() {
        // 09:00 in Paris is 08:00 UTC in March before daylight saving.
        let cron = CronSchedule::parse("0 9 * * MON-FRI", "Europe/Paris").unwrap();
        assert_eq!(
            cron.next_after(MONDAY_0830_UTC),
            Some(MONDAY_0830_UTC + 23 * HOUR + 30 * MINUTE)
        );
        let utc = CronSchedule::parse("0 9 * * MON-FRI", "UTC").unwrap();
        assert_eq!(
            utc.next_after(MONDAY_0830_UTC),
            Some(MONDAY_0830_UTC + 30 * MINUTE)
        );
    }

    #[test]
    fn bad_expressions_and_zones_say_what_is_wrong() {
        for expression in [
            "",
            "* * *",
            "61 * * * *",
            "* * * * * * * *",
            "every day",
            // Empty list items: once taken, and seconds to evaluate.
            "0 , * * *",
            ", 8 * * * 6 *",
            "0 1,,2 * * *",
            "0 5, * * *",
        ] {
            let error = CronSchedule::parse(expression, "UTC").unwrap_err();
            assert!(
                matches!(error, CronError::Expression { .. }),
                "{expression:?}: {error}"
            );
        }
        let error = CronSchedule::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(error, CronError::TimeZone("Mars/Olympus".into()));
        assert!(error.to_string().contains("IANA"));
    }
}
