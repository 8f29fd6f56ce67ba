//! The times a user gives a run, as written: when it starts (`start_at`, or
//! a `delay` such as `4s`) and by when it must end (`deadline`, or a
//! `timeout` such as `1h 30m`, counted from its start).
//!
//! Invariant: each becomes an absolute time in the run record, so it holds
//! after a restart and on whichever host drives the run, and none is more
//! than [`MAX_AHEAD`] past the moment it counts from.

use std::time::Duration;

use super::RunError;
use crate::clock::parse_time;

/// The furthest ahead a run may be scheduled, or given a deadline: a year
/// and a day.
pub const MAX_AHEAD: Duration = Duration::from_secs(366 * 24 * 3600);

/// A moment given as a time or as a duration from another moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Moment {
    /// Not given.
    #[default]
    Unset,
    /// This long after the moment it counts from.
    After(Duration),
    /// At this time, in milliseconds since the Unix epoch.
    At(i64),
}

/// The names of a moment's two fields, for the messages that refuse them.
#[derive(Debug, Clone, Copy)]
pub struct MomentFields {
    /// The field giving the moment as a time, e.g. `start_at`.
    pub time: &'static str,
    /// The field giving it as a duration from now, e.g. `delay`.
    pub duration: &'static str,
}

/// The fields a run's start is given in: `start_at`, or a `delay`.
pub const START: MomentFields = MomentFields {
    time: "start_at",
    duration: "delay",
};

/// The fields a run's deadline is given in: `deadline`, or a `timeout`.
pub const DEADLINE: MomentFields = MomentFields {
    time: "deadline",
    duration: "timeout",
};

impl Moment {
    /// From `time` (RFC 3339, with its offset) or `duration` (such as `4s`
    /// or `1h 30m`); naming both is refused.
    pub fn parse(fields: MomentFields, time: Option<&str>, duration: Option<&str>) -> Result<Self, RunError> {
        let invalid = |message: String| Err(RunError::InvalidTime(message));
        match (time, duration) {
            (None, None) => Ok(Self::Unset),
            (Some(_), Some(_)) => invalid(format!(
                "give the run a {} or a {}, not both",
                fields.time, fields.duration
            )),
            (Some(time), None) => match parse_time(time) {
                Ok(at_ms) => Ok(Self::At(at_ms)),
                Err(e) => invalid(format!(
                    "{} `{time}` is not an RFC 3339 time such as 2026-12-24T18:00:00Z: {e}",
                    fields.time
                )),
            },
            (None, Some(duration)) => match crate::durations::parse(duration) {
                Some(duration) => Ok(Self::After(duration)),
                None => invalid(format!(
                    "{} `{duration}` is not a duration such as 4s or 1h 30m (numbers and units, parts joined by single spaces)",
                    fields.duration
                )),
            },
        }
    }

    /// The moment as milliseconds since the Unix epoch, counted from
    /// `from_ms`: `None` if unset. Refused past a year and a day after `from_ms`;
    /// a time before it is returned as given (negative times as 0).
    pub fn resolve(self, fields: MomentFields, from_ms: u64) -> Result<Option<u64>, RunError> {
        let (at_ms, ahead) = match self {
            Self::Unset => return Ok(None),
            Self::After(duration) => {
                let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
                (from_ms.saturating_add(ms), duration)
            }
            Self::At(at_ms) => {
                let at_ms = u64::try_from(at_ms).unwrap_or(0);
                (at_ms, Duration::from_millis(at_ms.saturating_sub(from_ms)))
            }
        };
        if ahead > MAX_AHEAD {
            return Err(RunError::InvalidTime(format!(
                "a run's {} may be at most {} days ahead, not {}",
                fields.time,
                MAX_AHEAD.as_secs() / 86_400,
                humantime::format_duration(Duration::from_secs(ahead.as_secs()))
            )));
        }
        Ok(Some(at_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_796_000_000_000;

    fn resolved(time: Option<&str>, duration: Option<&str>) -> Result<Option<u64>, String> {
        Moment::parse(START, time, duration)
            .and_then(|moment| moment.resolve(START, NOW))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_duration_or_a_time_becomes_an_absolute_time() {
        assert_eq!(resolved(None, None), Ok(None));
        assert_eq!(resolved(None, Some("4s")), Ok(Some(NOW + 4_000)));
        assert_eq!(resolved(None, Some("1h 30m")), Ok(Some(NOW + 5_400_000)));
        assert_eq!(resolved(None, Some("0s")), Ok(Some(NOW)));
        let at = chrono::DateTime::from_timestamp_millis(NOW as i64 + 60_000).unwrap();
        let written = at
            .with_timezone(&chrono::FixedOffset::east_opt(3600).unwrap())
            .to_rfc3339();
        assert_eq!(resolved(Some(&written), None), Ok(Some(NOW + 60_000)), "{written}");
    }

    #[test]
    fn a_time_passed_is_kept_as_given() {
        assert_eq!(
            resolved(Some("2001-09-09T01:46:40Z"), None),
            Ok(Some(1_000_000_000_000))
        );
        assert_eq!(resolved(Some("1900-01-01T00:00:00Z"), None), Ok(Some(0)));
    }

    #[test]
    fn at_most_a_year_and_a_day_ahead() {
        assert_eq!(resolved(None, Some("366days")), Ok(Some(NOW + 366 * 86_400_000)));
        let refused = resolved(None, Some("367days")).unwrap_err();
        assert!(
            refused.contains("start_at may be at most 366 days ahead, not 1year"),
            "{refused}"
        );
        let far = resolved(Some("9999-12-31T23:59:59Z"), None).unwrap_err();
        assert!(far.contains("at most 366 days"), "{far}");
        assert!(resolved(None, Some("99999999999999999999y")).is_err());
        let huge = resolved(None, Some("18446744073709551615s")).unwrap_err();
        assert!(huge.contains("at most 366 days"), "{huge}");
    }

    #[test]
    fn nonsense_is_refused_naming_the_field() {
        let both = resolved(Some("2026-12-24T18:00:00Z"), Some("4s")).unwrap_err();
        assert!(both.contains("a start_at or a delay, not both"), "{both}");
        let spaced = resolved(Some("2026-12-24 18:00:00Z"), None).unwrap_err();
        assert!(spaced.contains("joined by `T`"), "{spaced}");
        let time = resolved(Some("tomorrow"), None).unwrap_err();
        assert!(time.contains("start_at `tomorrow` is not an RFC 3339 time"), "{time}");
        let delay = resolved(None, Some("soon")).unwrap_err();
        assert!(delay.contains("delay `soon` is not a duration"), "{delay}");
        assert!(resolved(None, Some("-4s")).is_err());
        let timeout = Moment::parse(DEADLINE, None, Some("soon")).unwrap_err().to_string();
        assert!(timeout.contains("timeout `soon`"), "{timeout}");
    }
}
