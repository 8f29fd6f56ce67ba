//! Durations as clients write them to the host: a run's `delay` and
//! `timeout`, a schedule's `catch_up`, a wait's `timeout`. Parts
//! `<digits><unit>`, one after another or with a single space between,
//! e.g. `30s`, `1h 30m`, `1h30m` or `7days`, with humantime's unit names
//! (`humantime::format_duration` writes them so).
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
        .try_fold(0u128, |sum, group| Some(sum.saturating_add(group_nanos(group)?)))?;
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    let duration = u64::try_from(nanos / NANOS_PER_SEC).map_or(Duration::MAX, |secs| Duration::new(secs, subsec));
    Some(duration)
}

/// The length of parts written one after another (`1h30m`): each its
/// digits, then the letters up to the next digit, a unit's name.
fn group_nanos(mut group: &str) -> Option<u128> {
    let mut nanos = None::<u128>;
    while !group.is_empty() {
        let digits = group.bytes().take_while(u8::is_ascii_digit).count();
        let letters = group[digits..].bytes().take_while(|b| !b.is_ascii_digit()).count();
        let (part, rest) = group.split_at(digits + letters);
        nanos = Some(nanos.unwrap_or(0).saturating_add(part_nanos(part)?));
        group = rest;
    }
    nanos
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
    format!("^{part}( ?{part})*$")
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
        assert_eq!(parse("1h30m"), parse("1h 30m"), "parts one after another");
        assert_eq!(parse("1d2h 3m4s"), Some(Duration::from_secs(86_400 + 7_200 + 184)));
    }

    #[test]
    fn other_writings_are_refused() {
        for refused in [
            "", " ", "30", "s", "30 s", "30s ", " 30s", "1h  30m", "1h30", "1.5s", "+1s", "-1s", "1sek", "1S",
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

    proptest::proptest! {
        /// The document states exactly what is taken: the parser and the
        /// pattern agree on every text of digits, unit letters and spaces.
        #[test]
        fn the_parser_takes_what_the_pattern_matches(text in "[0-9 smhdwyMSnueiorckat]{0,14}") {
            let pattern = regex::Regex::new(&pattern()).expect("the pattern compiles");
            proptest::prop_assert_eq!(parse(&text).is_some(), pattern.is_match(&text), "{:?}", text);
        }
    }
}
