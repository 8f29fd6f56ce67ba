//! Durations as clients write them to the host: a run's `delay` and
//! `timeout`, a schedule's `catch_up`, a wait's `timeout`. Parts
//! `<digits><unit>` joined by single spaces, e.g. `30s`, `1h 30m` or
//! `7days`, with humantime's unit names (`humantime::format_duration`
//! writes them so).
//!
//! Invariant: [`parse`] takes a text if and only if [`pattern`] matches it,
//! so the API's document ([`DurationText`]) states exactly what is taken. A number too large
//! for any clock is taken as the longest duration, which every use of one
//! refuses as over its limit, naming the limit.

use std::borrow::Cow;
use std::time::Duration;

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

/// Each unit's names, and its length in nanoseconds.
const UNITS: [(&[&str], u128); 10] = [
    (&["nanos", "nsec", "ns"], 1),
    (&["usec", "us"], 1_000),
    (&["millis", "msec", "ms"], 1_000_000),
    (&["seconds", "second", "secs", "sec", "s"], NANOS_PER_SEC),
    (&["minutes", "minute", "mins", "min", "m"], 60 * NANOS_PER_SEC),
    (&["hours", "hour", "hrs", "hr", "h"], 3_600 * NANOS_PER_SEC),
    (&["days", "day", "d"], 86_400 * NANOS_PER_SEC),
    (&["weeks", "week", "wks", "wk", "w"], 7 * 86_400 * NANOS_PER_SEC),
    (&["months", "month", "M"], 2_630_016 * NANOS_PER_SEC),
    (&["years", "year", "yrs", "yr", "y"], 31_557_600 * NANOS_PER_SEC),
];
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// `text` as a duration, if it is one (see the module's docs).
pub fn parse(text: &str) -> Option<Duration> {
    let nanos = text
        .split(' ')
        .try_fold(0u128, |sum, part| Some(sum.saturating_add(part_nanos(part)?)))?;
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    let duration = u64::try_from(nanos / NANOS_PER_SEC).map_or(Duration::MAX, |secs| Duration::new(secs, subsec));
    Some(duration)
}

fn part_nanos(part: &str) -> Option<u128> {
    let digits = part.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = part.split_at(digits);
    if number.is_empty() {
        return None;
    }
    let (_, length) = UNITS.iter().find(|(names, _)| names.contains(&unit))?;
    let number = number.parse::<u128>().unwrap_or(u128::MAX);
    Some(number.saturating_mul(*length))
}

/// The regular expression of what [`parse`] takes.
pub fn pattern() -> String {
    let units: Vec<&str> = UNITS.iter().flat_map(|(names, _)| names.iter().copied()).collect();
    let part = format!("[0-9]+({})", units.join("|"));
    format!("^{part}( {part})*$")
}

/// A duration in the API's document: a string that [`parse`] takes.
pub struct DurationText;

impl PartialSchema for DurationText {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "Numbers and units, parts joined by single spaces, e.g. `30s` or `1h 30m`.",
            ))
            .pattern(Some(pattern()))
            .examples(["30s", "1h 30m"])
            .into()
    }
}

impl ToSchema for DurationText {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Duration")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_format_duration_writes_is_taken() {
        for millis in [0, 1, 1_500, 90_000, 3_600_000, 100_000_000_000] {
            let duration = Duration::from_millis(millis);
            let text = humantime::format_duration(duration).to_string();
            assert_eq!(parse(&text), Some(duration), "{text}");
        }
        assert_eq!(parse("7days"), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("1hour 30min"), Some(Duration::from_secs(5_400)));
        assert_eq!(parse("2M"), Some(Duration::from_secs(2 * 2_630_016)));
    }

    #[test]
    fn other_writings_are_refused() {
        for refused in [
            "", " ", "30", "s", "30 s", "30s ", " 30s", "1h  30m", "1h30m", "1.5s", "+1s", "-1s", "1sek", "1S",
        ] {
            assert_eq!(parse(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn a_number_past_every_clock_is_the_longest_duration() {
        let longest = Duration::MAX;
        assert_eq!(parse("18446744073709551616s"), Some(longest));
        assert_eq!(parse(&format!("{}y", "9".repeat(400))), Some(longest));
        assert_eq!(parse(&["99999999999y"; 30].join(" ")), Some(longest));
    }
}
