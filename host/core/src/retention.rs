//! How long ended tasks are kept.
//!
//! A task that has ended for good — succeeded, failed fatally, dropped by a
//! gate or cancelled — is kept, with its attempts, logs and journal, for as
//! long as its lambda's retention says, then the pruner deletes it. Dead
//! letters are not pruned: they wait for an operator's redrive or purge.
//!
//! The installation sets a retention for every lambda (`[retention]` in the
//! configuration file, [`Retention::installation_default`] otherwise); a
//! lambda's deploy may set its own for some ends (`--retain success=1h`),
//! which take precedence. Each end is kept for a duration or `forever`.
//!
//! ```
//! use std::time::Duration;
//! use waft_core::retention::{End, Keep, Retention};
//! let lambda = Retention::parse_each(["success=1h", "fatal=forever"]).unwrap();
//! let kept = lambda.over(&Retention::installation_default());
//! assert_eq!(kept.get(End::Success), Some(Keep::For(Duration::from_secs(3600))));
//! assert_eq!(kept.get(End::Fatal), Some(Keep::Forever));
//! assert_eq!(kept.get(End::Cancelled), Some(Keep::For(Duration::from_secs(24 * 3600))));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::TaskStatus;

/// An end a task is pruned from: its final states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum End {
    Success,
    Fatal,
    Dropped,
    Cancelled,
}

impl End {
    /// Every end, in the order they are shown.
    pub const ALL: [End; 4] = [End::Success, End::Fatal, End::Dropped, End::Cancelled];

    /// Its name in flags, files and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            End::Success => "success",
            End::Fatal => "fatal",
            End::Dropped => "dropped",
            End::Cancelled => "cancelled",
        }
    }

    /// The end named `name` (`fatal_failure`, the state's name, too).
    pub fn parse(name: &str) -> Option<End> {
        match name {
            "fatal_failure" => Some(End::Fatal),
            _ => End::ALL.into_iter().find(|end| end.as_str() == name),
        }
    }

    /// The task state it is.
    pub fn status(self) -> TaskStatus {
        match self {
            End::Success => TaskStatus::Success,
            End::Fatal => TaskStatus::FatalFailure,
            End::Dropped => TaskStatus::Dropped,
            End::Cancelled => TaskStatus::Cancelled,
        }
    }
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long tasks that ended one way are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// For this long after they ended.
    For(Duration),
    /// Until deleted with their lambda.
    Forever,
}

impl Keep {
    /// Parses `24h`, `7d`, `90s` or `forever`.
    pub fn parse(text: &str) -> Result<Keep, String> {
        match text.trim() {
            "forever" => Ok(Keep::Forever),
            other => match crate::parse_duration(other) {
                Ok(duration) if duration.is_zero() => {
                    Err(format!("{other:?}: keep ended tasks for more than 0 s"))
                }
                Ok(duration) => Ok(Keep::For(duration)),
                Err(error) => Err(format!("{error}, or forever")),
            },
        }
    }

    /// In milliseconds, `None` for forever: how the store and the API
    /// carry it.
    pub fn as_millis(self) -> Option<u64> {
        match self {
            Keep::For(duration) => Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
            Keep::Forever => None,
        }
    }

    /// From milliseconds, `None` for forever.
    pub fn from_millis(millis: Option<u64>) -> Keep {
        match millis {
            Some(ms) => Keep::For(Duration::from_millis(ms)),
            None => Keep::Forever,
        }
    }
}

impl fmt::Display for Keep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Keep::For(duration) => write!(f, "{}", humantime::format_duration(*duration)),
            Keep::Forever => f.write_str("forever"),
        }
    }
}

/// How long each end is kept; an end it does not name is decided
/// elsewhere (a lambda's: by the installation's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention(BTreeMap<End, Keep>);

impl Retention {
    /// The installation's retention when its configuration sets none:
    /// successes, drops and cancellations for a day, fatal failures for a
    /// week (long enough to look into them).
    pub fn installation_default() -> Retention {
        let day = Duration::from_secs(24 * 3600);
        Retention(BTreeMap::from([
            (End::Success, Keep::For(day)),
            (End::Fatal, Keep::For(7 * day)),
            (End::Dropped, Keep::For(day)),
            (End::Cancelled, Keep::For(day)),
        ]))
    }

    /// Parses `END=KEEP` items (`success=24h`, `fatal=forever`); an end
    /// named twice is refused.
    pub fn parse_each<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Retention, String> {
        let mut retention = Retention::default();
        for item in items {
            let (end, keep) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: write END=DURATION, e.g. success=24h"))?;
            let end = End::parse(end.trim()).ok_or_else(|| {
                format!(
                    "{:?} is not an end; one of success, fatal, dropped, cancelled",
                    end.trim()
                )
            })?;
            let keep = Keep::parse(keep).map_err(|why| format!("{end}: {why}"))?;
            if retention.0.insert(end, keep).is_some() {
                return Err(format!("{end} is given twice"));
            }
        }
        Ok(retention)
    }

    /// Sets how long `end` is kept.
    pub fn set(&mut self, end: End, keep: Keep) {
        self.0.insert(end, keep);
    }

    /// How long `end` is kept, if this retention says.
    pub fn get(&self, end: End) -> Option<Keep> {
        self.0.get(&end).copied()
    }

    /// The ends it names, with how long each is kept.
    pub fn iter(&self) -> impl Iterator<Item = (End, Keep)> + '_ {
        self.0.iter().map(|(end, keep)| (*end, *keep))
    }

    /// Whether it names no end.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This retention where it speaks, `under` where it does not.
    pub fn over(&self, under: &Retention) -> Retention {
        let mut merged = under.clone();
        merged.0.extend(self.iter());
        merged
    }

    /// As the store keeps it: a JSON object of end names to milliseconds
    /// (`null` for forever).
    pub fn to_json(&self) -> String {
        let object: serde_json::Map<String, serde_json::Value> = self
            .iter()
            .map(|(end, keep)| (end.as_str().to_owned(), keep.as_millis().into()))
            .collect();
        serde_json::Value::Object(object).to_string()
    }

    /// Reads what [`Self::to_json`] wrote. An end this release does not
    /// know is skipped, so a row a newer release wrote still reads.
    pub fn from_json(text: &str) -> Result<Retention, String> {
        let object: BTreeMap<String, Option<u64>> =
            serde_json::from_str(text).map_err(|e| format!("retention {text:?}: {e}"))?;
        Ok(Retention(
            object
                .into_iter()
                .filter_map(|(end, millis)| Some((End::parse(&end)?, Keep::from_millis(millis))))
                .collect(),
        ))
    }
}

impl fmt::Display for Retention {
    /// `success=1day fatal=forever`, or `installation's` when it names no end.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("the installation's");
        }
        let items: Vec<String> = self
            .iter()
            .map(|(end, keep)| format!("{end}={keep}"))
            .collect();
        f.write_str(&items.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_parse_and_bad_ones_say_why() {
        let retention = Retention::parse_each(["success=90s", "cancelled=forever"]).unwrap();
        assert_eq!(
            retention.get(End::Success),
            Some(Keep::For(Duration::from_secs(90)))
        );
        assert_eq!(retention.get(End::Cancelled), Some(Keep::Forever));
        assert_eq!(retention.get(End::Fatal), None);
        for (bad, says) in [
            ("success", "END=DURATION"),
            ("dead=1h", "not an end"),
            ("success=soon", "forever"),
            ("success=0s", "more than 0"),
        ] {
            let error = Retention::parse_each([bad]).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
        let twice = Retention::parse_each(["fatal=1h", "fatal_failure=2h"]).unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
    }

    #[test]
    fn json_round_trips_and_unknown_ends_are_skipped() {
        let retention = Retention::parse_each(["success=1h", "fatal=forever"]).unwrap();
        assert_eq!(
            Retention::from_json(&retention.to_json()).unwrap(),
            retention
        );
        let newer = r#"{"success": 1000, "archived": 5}"#;
        let read = Retention::from_json(newer).unwrap();
        assert_eq!(read.iter().count(), 1);
        assert!(Retention::from_json("[1]").is_err());
    }

    #[test]
    fn a_lambda_speaks_over_the_installation() {
        let lambda = Retention::parse_each(["dropped=forever"]).unwrap();
        let merged = lambda.over(&Retention::installation_default());
        assert_eq!(merged.get(End::Dropped), Some(Keep::Forever));
        assert_eq!(
            merged.get(End::Success),
            Retention::installation_default().get(End::Success)
        );
        assert_eq!(merged.iter().count(), End::ALL.len());
    }

    #[test]
    fn every_end_is_a_final_state() {
        for end in End::ALL {
            assert!(crate::machine::FINAL.contains(end.status()), "{end}");
        }
        let finals = TaskStatus::ALL
            .into_iter()
            .filter(|s| crate::machine::FINAL.contains(*s));
        assert_eq!(
            finals.count(),
            End::ALL.len(),
            "a final state without its end"
        );
    }
}
