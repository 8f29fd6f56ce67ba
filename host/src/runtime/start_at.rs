//! When a submitted run starts: now, after a delay, or at a time, as a user
//! writes them (`--delay 4s`, `"start_at": "2026-12-24T18:00:00+01:00"`).
//!
//! Invariant: a scheduled run's start is an absolute time in its run
//! record, so it starts on time after a restart and on whichever host
//! drives it, and never more than [`MAX_AHEAD`] from its submission.

use std::time::Duration;

use super::RunError;

/// The furthest ahead a run may be scheduled: a year and a day.
pub const MAX_AHEAD: Duration = Duration::from_secs(366 * 24 * 3600);

/// When a run starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StartAt {
    #[default]
    Now,
    /// This long after its submission.
    After(Duration),
    /// At this time, in milliseconds since the Unix epoch (a time passed
    /// means now).
    At(i64),
}

impl StartAt {
    /// From `start_at` (RFC 3339, with its offset) or `delay` (a duration
    /// such as `4s` or `1h 30m`); naming both is refused.
    pub fn parse(start_at: Option<&str>, delay: Option<&str>) -> Result<Self, RunError> {
        let invalid = |message: String| Err(RunError::InvalidStart(message));
        match (start_at, delay) {
            (None, None) => Ok(Self::Now),
            (Some(_), Some(_)) => invalid("give the run a start_at or a delay, not both".into()),
            (Some(time), None) => match chrono::DateTime::parse_from_rfc3339(time) {
                Ok(time) => Ok(Self::At(time.timestamp_millis())),
                Err(e) => invalid(format!(
                    "start_at `{time}` is not an RFC 3339 time such as 2026-12-24T18:00:00Z: {e}"
                )),
            },
            (None, Some(delay)) => match humantime::parse_duration(delay) {
                Ok(delay) => Ok(Self::After(delay)),
                Err(e) => invalid(format!("delay `{delay}` is not a duration such as 4s or 1h 30m: {e}")),
            },
        }
    }

    /// The time to start at for a run submitted at `now_ms`: `None` for at
    /// once. Refused past [`MAX_AHEAD`].
    pub fn resolve(self, now_ms: u64) -> Result<Option<u64>, RunError> {
        let ahead = match self {
            Self::Now => return Ok(None),
            Self::After(delay) => delay,
            Self::At(at_ms) => match u64::try_from(at_ms) {
                Ok(at_ms) if at_ms > now_ms => Duration::from_millis(at_ms - now_ms),
                _ => return Ok(None),
            },
        };
        if ahead > MAX_AHEAD {
            return Err(RunError::InvalidStart(format!(
                "a run may start at most {} days ahead, not {}",
                MAX_AHEAD.as_secs() / 86_400,
                humantime::format_duration(Duration::from_secs(ahead.as_secs()))
            )));
        }
        let ahead_ms = u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX);
        Ok((ahead_ms > 0).then(|| now_ms.saturating_add(ahead_ms)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_796_000_000_000;

    fn resolved(start_at: Option<&str>, delay: Option<&str>) -> Result<Option<u64>, String> {
        StartAt::parse(start_at, delay)
            .and_then(|start| start.resolve(NOW))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_delay_or_a_time_becomes_an_absolute_start() {
        assert_eq!(resolved(None, None), Ok(None));
        assert_eq!(resolved(None, Some("4s")), Ok(Some(NOW + 4_000)));
        assert_eq!(resolved(None, Some("1h 30m")), Ok(Some(NOW + 5_400_000)));
        let at = chrono::DateTime::from_timestamp_millis(NOW as i64 + 60_000).unwrap();
        let written = at
            .with_timezone(&chrono::FixedOffset::east_opt(3600).unwrap())
            .to_rfc3339();
        assert_eq!(resolved(Some(&written), None), Ok(Some(NOW + 60_000)), "{written}");
    }

    #[test]
    fn a_time_passed_or_no_delay_starts_at_once() {
        assert_eq!(resolved(Some("2001-09-09T01:46:40Z"), None), Ok(None));
        assert_eq!(resolved(Some("1900-01-01T00:00:00Z"), None), Ok(None));
        assert_eq!(resolved(None, Some("0s")), Ok(None));
    }

    #[test]
    fn at_most_a_year_and_a_day_ahead() {
        assert_eq!(resolved(None, Some("366days")), Ok(Some(NOW + 366 * 86_400_000)));
        let refused = resolved(None, Some("367days")).unwrap_err();
        assert!(refused.contains("at most 366 days ahead, not 1year"), "{refused}");
        let far = resolved(Some("9999-12-31T23:59:59Z"), None).unwrap_err();
        assert!(far.contains("at most"), "{far}");
        assert!(resolved(None, Some("99999999999999999999y")).is_err());
    }

    #[test]
    fn nonsense_is_refused_naming_what_was_wrong() {
        let both = resolved(Some("2026-12-24T18:00:00Z"), Some("4s")).unwrap_err();
        assert!(both.contains("not both"), "{both}");
        let time = resolved(Some("tomorrow"), None).unwrap_err();
        assert!(time.contains("start_at `tomorrow` is not an RFC 3339 time"), "{time}");
        let delay = resolved(None, Some("soon")).unwrap_err();
        assert!(delay.contains("delay `soon` is not a duration"), "{delay}");
        assert!(resolved(None, Some("-4s")).is_err());
    }
}
