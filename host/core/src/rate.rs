//! A rate per key: at most `count` starts of one key's tasks a `period`,
//! as a token bucket that holds `count` tokens and gains one every
//! `period / count`. An idle key may start `count` tasks at once, then one
//! each interval; over any window of a period it starts at most twice
//! `count` (a full bucket, then a period's refill).

use std::fmt;
use std::time::Duration;

/// A lambda's rate per key, written `10/1m`: ten a minute.
///
/// ```
/// let rate: waft_core::KeyRate = "10/1m".parse().unwrap();
/// assert_eq!(rate.count, 10);
/// assert_eq!(rate.interval_ms(), 6_000.0);
/// assert_eq!(rate.to_string(), "10/1m");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRate {
    /// Tasks a period: the bucket's size.
    pub count: u32,
    /// The period the count refills in.
    pub period: Duration,
}

impl KeyRate {
    /// The most tasks a period.
    pub const MAX_COUNT: u32 = 1_000_000;
    /// The shortest period.
    pub const MIN_PERIOD: Duration = Duration::from_millis(1);
    /// The longest period: a day. A longer one would pace a key's backlog
    /// months ahead.
    pub const MAX_PERIOD: Duration = Duration::from_secs(86_400);

    /// Milliseconds between two tokens.
    pub fn interval_ms(&self) -> f64 {
        self.period.as_secs_f64() * 1000.0 / f64::from(self.count)
    }

    /// The period in milliseconds, as the store and the API carry it.
    pub fn period_ms(&self) -> u64 {
        u64::try_from(self.period.as_millis()).unwrap_or(u64::MAX)
    }

    /// Why the rate is out of bounds, if it is.
    pub fn check(&self) -> Result<(), &'static str> {
        if !(1..=Self::MAX_COUNT).contains(&self.count) {
            return Err("the count must be within 1..=1000000");
        }
        if !(Self::MIN_PERIOD..=Self::MAX_PERIOD).contains(&self.period) {
            return Err("the period must be within 1ms and 1d");
        }
        Ok(())
    }
}

impl std::str::FromStr for KeyRate {
    type Err = String;

    /// Parses `COUNT/PERIOD`: `10/1m`, `2/1s`, `100/1h`.
    fn from_str(text: &str) -> Result<KeyRate, String> {
        let usage = "write COUNT/PERIOD, e.g. 10/1m (ten a minute) or 2/1s";
        let (count, period) = text
            .trim()
            .split_once('/')
            .ok_or_else(|| format!("{text:?}: {usage}"))?;
        let count = count
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: the count {count:?} is not a whole number; {usage}"))?;
        let period = crate::parse_duration(period).map_err(|e| format!("{e}; {usage}"))?;
        let rate = KeyRate { count, period };
        rate.check().map_err(|why| format!("{text:?}: {why}"))?;
        Ok(rate)
    }
}

impl fmt::Display for KeyRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            self.count,
            humantime::format_duration(self.period)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print_back() {
        for (text, count, ms, printed) in [
            ("10/1m", 10, 60_000, "10/1m"),
            (" 2 / 1s ", 2, 1_000, "2/1s"),
            ("100/1h", 100, 3_600_000, "100/1h"),
            ("1/1d", 1, 86_400_000, "1/1day"),
            ("5/250ms", 5, 250, "5/250ms"),
        ] {
            let rate: KeyRate = text.parse().unwrap();
            assert_eq!((rate.count, rate.period_ms()), (count, ms), "{text}");
            assert_eq!(rate.to_string(), printed);
            assert_eq!(rate.to_string().parse::<KeyRate>(), Ok(rate));
        }
    }

    #[test]
    fn bad_rates_say_why() {
        for (text, why) in [
            ("10", "write COUNT/PERIOD"),
            ("ten/1m", "not a whole number"),
            ("-1/1m", "not a whole number"),
            ("0/1m", "the count must be within"),
            ("2000000/1s", "the count must be within"),
            ("1/2d", "the period must be within"),
            ("1/0s", "the period must be within"),
            ("1/soon", "a duration"),
        ] {
            let error = text.parse::<KeyRate>().unwrap_err();
            assert!(error.contains(why), "{text}: {error}");
        }
    }
}
