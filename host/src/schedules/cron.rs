//! Cron patterns, in UTC: parsed by croner (the five standard fields, or
//! six with seconds first, or seven with a year last), and the fire times
//! they give between moments.
//!
//! Invariant: a new schedule's pattern is taken only if it has the form
//! [`form_pattern`] states (fields of numbers, names and croner's signs,
//! joined by single spaces, or a nickname), so the API's document says
//! which texts are refused for their form; croner then refuses values out
//! of range. A stored pattern is read as croner reads it, so a schedule
//! added before the form was checked fires on.

use std::borrow::Cow;

use chrono::{DateTime, TimeZone, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::ScheduleError;

/// The longest pattern taken: standard ones are a few dozen characters.
pub const MAX_PATTERN_BYTES: usize = 256;
/// The nicknames taken for whole patterns, after an `@`.
const NICKNAMES: [&str; 6] = ["yearly", "annually", "monthly", "weekly", "daily", "hourly"];
/// What a field is made of besides ASCII letters and digits (numbers,
/// names such as `MON` and `JAN`, croner's `L` and `W`): croner's signs,
/// `-` last so that they make a regular expression's class as they are.
const SIGNS: &str = "*/,?#+-";
/// How many fields a pattern has.
const FIELDS: std::ops::RangeInclusive<usize> = 5..=7;

/// The regular expression of a pattern's form.
pub fn form_pattern() -> String {
    let field = format!("[0-9A-Za-z{SIGNS}]+");
    let (least, most) = (FIELDS.start() - 1, FIELDS.end() - 1);
    let nicknames = NICKNAMES.join("|");
    format!("^(@({nicknames})|{field}( {field}){{{least},{most}}})$")
}

/// Whether `pattern` has the form [`form_pattern`] states.
fn has_form(pattern: &str) -> bool {
    if let Some(nickname) = pattern.strip_prefix('@') {
        return NICKNAMES.contains(&nickname);
    }
    let fields: Vec<&str> = pattern.split(' ').collect();
    let in_field = |c: char| c.is_ascii_alphanumeric() || SIGNS.contains(c);
    FIELDS.contains(&fields.len())
        && fields
            .iter()
            .all(|field| !field.is_empty() && field.chars().all(in_field))
}

/// A cron pattern in the API's document: a text of 5 to 7 fields of
/// digits, letters and croner's signs, at most [`MAX_PATTERN_BYTES`] long.
pub struct CronText;

impl PartialSchema for CronText {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(MAX_PATTERN_BYTES))
            .pattern(Some(form_pattern()))
            .examples(["0 2 * * *", "*/10 * * * * *", "@hourly"])
            .into()
    }
}

impl ToSchema for CronText {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Cron")
    }
}

/// A cron pattern that fires at least once more.
#[derive(Clone, Debug)]
pub struct CronPattern(Cron);

impl CronPattern {
    /// Parses a new schedule's `pattern`: of the form [`CronText`]
    /// states, then as [`parse`](Self::parse) does.
    pub fn parse_new(pattern: &str, now_ms: u64) -> Result<Self, ScheduleError> {
        if pattern.len() <= MAX_PATTERN_BYTES && !has_form(pattern) {
            let reason = "fields are numbers, names and `* / , - ? # + L W`, joined by single spaces";
            return Err(invalid(pattern, reason.into()));
        }
        Self::parse(pattern, now_ms)
    }

    /// Parses `pattern`, refusing one that never fires after `now_ms` (such
    /// as `0 0 31 2 *`): a schedule of it would be a standing order for
    /// nothing.
    pub fn parse(pattern: &str, now_ms: u64) -> Result<Self, ScheduleError> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(invalid(pattern, format!("it is over {MAX_PATTERN_BYTES} bytes")));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(pattern)
            .map_err(|e| invalid(pattern, e.to_string()))?;
        let parsed = Self(cron);
        if parsed.next_after(now_ms).is_none() {
            return Err(invalid(pattern, "it matches no time to come".into()));
        }
        Ok(parsed)
    }

    /// The pattern in words, e.g. "At every minute.".
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// The first fire strictly after `ms`.
    pub fn next_after(&self, ms: u64) -> Option<u64> {
        let fire = self.0.find_next_occurrence(&at(ms)?, false).ok()?;
        millis(&fire)
    }

    /// The fires in `(after_ms, until_ms]`, oldest first: the last `cap`
    /// of them, when there are more.
    pub fn fires_between(&self, after_ms: u64, until_ms: u64, cap: usize) -> Vec<u64> {
        let mut fires = Vec::new();
        let Some(mut cursor) = at(until_ms) else { return fires };
        let mut inclusive = true;
        while fires.len() < cap {
            let Ok(fire) = self.0.find_previous_occurrence(&cursor, inclusive) else {
                break;
            };
            match millis(&fire) {
                Some(ms) if ms > after_ms => fires.push(ms),
                _ => break,
            }
            (cursor, inclusive) = (fire, false);
        }
        fires.reverse();
        fires
    }
}

fn invalid(pattern: &str, reason: String) -> ScheduleError {
    ScheduleError::InvalidCron {
        pattern: pattern.chars().take(MAX_PATTERN_BYTES).collect(),
        reason,
    }
}

fn at(ms: u64) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(i64::try_from(ms).ok()?).single()
}

fn millis(time: &DateTime<Utc>) -> Option<u64> {
    u64::try_from(time.timestamp_millis()).ok()
}

/// `ms` as the fire-time part of a run id: `20261224T180000Z`, which sorts
/// in time order.
pub fn fire_stamp(ms: u64) -> String {
    at(ms).map_or_else(|| ms.to_string(), |time| time.format("%Y%m%dT%H%M%SZ").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2027-01-15T08:00:00Z.
    const NOW: u64 = 1_800_000_000_000;

    fn pattern(text: &str) -> CronPattern {
        CronPattern::parse(text, NOW).expect("a valid pattern in this test")
    }

    #[test]
    fn five_fields_fire_on_minutes_and_six_on_seconds() {
        assert_eq!(pattern("*/5 * * * *").next_after(NOW), Some(NOW + 300_000));
        assert_eq!(pattern("*/10 * * * * *").next_after(NOW + 1), Some(NOW + 10_000));
        assert_eq!(pattern("@hourly").next_after(NOW), Some(NOW + 3_600_000));
    }

    #[test]
    fn invalid_and_never_firing_patterns_are_refused_with_the_reason() {
        for (bad, reason) in [
            ("61 * * * *", "out of bounds"),
            ("", "joined by single spaces"),
            ("0  2 * * *", "joined by single spaces"),
            (" 0 2 * * *", "joined by single spaces"),
            ("0 2 * * * * * *", "joined by single spaces"),
            ("@DAILY", "joined by single spaces"),
            ("0 0 31 2 *", "matches no time"),
            (&"* ".repeat(200), "over 256 bytes"),
        ] {
            let error = CronPattern::parse_new(bad, NOW).unwrap_err().to_string();
            assert!(error.contains(reason), "{bad:?}: {error}");
        }
    }

    #[test]
    fn a_pattern_of_the_longest_length_is_taken_and_one_byte_more_refused() {
        let longest = format!("10{} * * * *", ",0".repeat(123));
        assert_eq!(longest.len(), MAX_PATTERN_BYTES);
        assert!(CronPattern::parse_new(&longest, NOW).is_ok());
        let over = format!("1{longest}");
        let error = CronPattern::parse_new(&over, NOW).unwrap_err().to_string();
        assert!(error.contains("over 256 bytes"), "{error}");
    }

    /// A host down for longer than its catch-up makes up the latest
    /// `MAX_CATCH_UP_FIRES` fires it missed: all of ten, ten of eleven.
    #[test]
    fn at_most_the_latest_catch_up_fires_are_made_up() {
        use super::super::MAX_CATCH_UP_FIRES;
        let every_minute = pattern("* * * * *");
        let ten = every_minute.fires_between(NOW - 600_000, NOW, MAX_CATCH_UP_FIRES);
        assert_eq!(ten.len(), 10);
        assert_eq!(ten.first(), Some(&(NOW - 540_000)));
        let eleven = every_minute.fires_between(NOW - 660_000, NOW, MAX_CATCH_UP_FIRES);
        assert_eq!(eleven, ten, "the oldest of eleven dropped");
    }

    #[test]
    fn a_stored_pattern_of_another_form_is_read_as_croner_reads_it() {
        let spaced = CronPattern::parse("0  2 * * *", NOW).expect("croner takes it");
        assert_eq!(spaced.next_after(NOW), pattern("0 2 * * *").next_after(NOW));
    }

    #[test]
    fn fires_between_is_half_open_oldest_first_and_capped_at_the_latest() {
        let every_minute = pattern("* * * * *");
        assert_eq!(
            every_minute.fires_between(NOW - 180_000, NOW, 10),
            vec![NOW - 120_000, NOW - 60_000, NOW]
        );
        assert_eq!(every_minute.fires_between(NOW, NOW + 59_999, 10), Vec::<u64>::new());
        assert_eq!(
            every_minute.fires_between(0, NOW, 2),
            vec![NOW - 60_000, NOW],
            "a cap keeps the most recent fires"
        );
        assert_eq!(every_minute.fires_between(NOW, NOW, 10), Vec::<u64>::new());
    }

    #[test]
    fn the_catch_up_window_is_taken_up_to_seven_days_and_not_a_second_more() {
        use super::super::{MAX_CATCH_UP, catch_up_window};
        assert_eq!(catch_up_window(Some("7days")).ok(), Some(MAX_CATCH_UP));
        assert_eq!(catch_up_window(Some("0s")).ok(), Some(std::time::Duration::ZERO));
        assert!(catch_up_window(Some("7days 1s")).is_err());
        assert!(
            catch_up_window(Some(&"9".repeat(400))).is_err(),
            "a duration past u64 is refused, not wrapped"
        );
    }

    #[test]
    fn a_fire_stamp_is_utc_to_the_second() {
        assert_eq!(fire_stamp(NOW + 999), "20270115T080000Z");
    }
}
