//! Values the API parses itself, each with the schema that describes
//! exactly what it accepts: a wait's timeout, a page's cursor and limit, a
//! log page's cursor, and the whole numbers of a run's options.
//!
//! Invariant: a value matches its schema if and only if it parses, so a
//! client that follows the document is never refused for its form, and one
//! that does not always is (400 in a query, 422 in a JSON body).

use std::time::Duration;

use serde::Deserialize;
use serde::de::{Deserializer, Error};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::runtime::{LogCursor, RunCursor};

/// The units of a [`Timeout`], as `humantime::format_duration` writes them
/// (the CLI's `--server` client sends its output).
const UNITS: [(&str, Duration); 14] = [
    ("ns", Duration::from_nanos(1)),
    ("us", Duration::from_micros(1)),
    ("ms", Duration::from_millis(1)),
    ("s", Duration::from_secs(1)),
    ("m", Duration::from_secs(60)),
    ("h", Duration::from_secs(3600)),
    ("day", Duration::from_secs(86_400)),
    ("days", Duration::from_secs(86_400)),
    ("week", Duration::from_secs(7 * 86_400)),
    ("weeks", Duration::from_secs(7 * 86_400)),
    ("month", Duration::from_secs(2_630_016)),
    ("months", Duration::from_secs(2_630_016)),
    ("year", Duration::from_secs(31_557_600)),
    ("years", Duration::from_secs(31_557_600)),
];
/// A timeout has at most this many parts (one per unit, like
/// `format_duration`'s), each of at most `MAX_DIGITS` digits: the sum never
/// overflows.
const MAX_PARTS: usize = 10;
const MAX_DIGITS: usize = 9;

/// How long a `wait` may wait: parts `<digits><unit>` joined by single
/// spaces, e.g. `30s` or `1m 30s`.
pub struct Timeout(pub Duration);

impl Timeout {
    fn parse(text: &str) -> Option<Duration> {
        let parts: Vec<&str> = text.split(' ').collect();
        if parts.len() > MAX_PARTS {
            return None;
        }
        parts
            .into_iter()
            .try_fold(Duration::ZERO, |sum, part| Some(sum + Self::part(part)?))
    }

    fn part(text: &str) -> Option<Duration> {
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = text.split_at(digits);
        if !(1..=MAX_DIGITS).contains(&number.len()) {
            return None;
        }
        let (_, length) = UNITS.iter().find(|(name, _)| *name == unit)?;
        Some(*length * number.parse::<u32>().ok()?)
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text)
            .map(Self)
            .ok_or_else(|| D::Error::custom(format!("`{text}` is not a duration such as `30s` or `1m 30s`")))
    }
}

impl PartialSchema for Timeout {
    fn schema() -> RefOr<Schema> {
        let units: Vec<&str> = UNITS.iter().map(|(name, _)| *name).collect();
        let part = format!("[0-9]{{1,{MAX_DIGITS}}}({})", units.join("|"));
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(format!("^{part}( {part}){{0,{}}}$", MAX_PARTS - 1)))
            .examples(["30s", "1m 30s"])
            .into()
    }
}

impl ToSchema for Timeout {}

/// The longest creation time a cursor holds: 19 digits always fit a `u64`.
const CURSOR_MS_DIGITS: usize = 19;

/// Where a page of runs starts: the `next_cursor` of the previous page,
/// `{created_at_ms}-{run_id}` or `{created_at_ms}.{micros}-{run_id}`.
pub struct Cursor(pub RunCursor);

impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        // `RunCursor` parses the creation time as a `u64`, which also takes
        // `+1` and 20 digits; the document promises only what is checked here.
        let digits_only = text.split_once('-').is_some_and(|(created, _)| {
            let ms = created.split_once('.').map_or(created, |(ms, _)| ms);
            (1..=CURSOR_MS_DIGITS).contains(&ms.len()) && ms.bytes().all(|b| b.is_ascii_digit())
        });
        let cursor = digits_only.then(|| text.parse::<RunCursor>());
        match cursor {
            Some(Ok(cursor)) => Ok(Self(cursor)),
            Some(Err(message)) => Err(D::Error::custom(message)),
            None => Err(D::Error::custom(format!(
                "`{text}` is not a cursor: pass the `next_cursor` of the previous page"
            ))),
        }
    }
}

impl PartialSchema for Cursor {
    fn schema() -> RefOr<Schema> {
        let run_id = super::doc::name_pattern(super::doc::NAME_MAX);
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(format!(
                "^[0-9]{{1,{CURSOR_MS_DIGITS}}}(\\.[0-9]{{3}})?-{run_id}$"
            )))
            .into()
    }
}

impl ToSchema for Cursor {}

/// Where a page of a run's log goes on: a line's `cursor`, or the
/// previous page's `next_cursor`.
pub struct LogCursorParam(pub LogCursor);

impl<'de> Deserialize<'de> for LogCursorParam {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map(Self).map_err(D::Error::custom)
    }
}

impl PartialSchema for LogCursorParam {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(LogCursor::pattern()))
            .into()
    }
}

impl ToSchema for LogCursorParam {}

/// The largest [`WholeNumber`]: every integer up to it is exact as a JSON
/// number in every client (2^53 - 1).
const MAX_WHOLE: u64 = (1 << 53) - 1;

/// A non-negative integer in a JSON body. JSON Schema counts `5.0` as an
/// integer, so it is taken as 5.
#[derive(Clone, Copy)]
pub struct WholeNumber(pub u64);

impl WholeNumber {
    /// As a `usize`, saturating: the number is a limit, lowered to what the
    /// host allows anyway.
    pub fn saturating_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl<'de> Deserialize<'de> for WholeNumber {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let number = serde_json::Number::deserialize(deserializer)?;
        let whole = number.as_u64().or_else(|| {
            number
                .as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..=MAX_WHOLE as f64).contains(f))
                .map(|f| f as u64)
        });
        whole
            .filter(|n| *n <= MAX_WHOLE)
            .map(Self)
            .ok_or_else(|| D::Error::custom(format!("{number} is not a whole number from 0 to {MAX_WHOLE}")))
    }
}

impl PartialSchema for WholeNumber {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0))
            .maximum(Some(MAX_WHOLE))
            .into()
    }
}

impl ToSchema for WholeNumber {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_what_format_duration_writes() {
        for duration in [0, 1, 1_500, 90_000, 3_600_000, 100_000_000_000] {
            let duration = Duration::from_millis(duration);
            let text = humantime::format_duration(duration).to_string();
            assert_eq!(Timeout::parse(&text), Some(duration), "{text}");
        }
        for refused in ["", "30", "s", "30 s", "30s ", "1.5s", "+1s", "1000000000s", "1sec"] {
            assert_eq!(Timeout::parse(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn a_cursor_is_digits_a_dash_and_a_run_id() {
        let parse = |text: &str| serde_json::from_value::<Cursor>(text.into()).map(|Cursor(c)| c.to_string());
        assert_eq!(parse("12-run-1").expect("valid in this test"), "12-run-1");
        assert_eq!(parse("12.007-run-1").expect("valid in this test"), "12.007-run-1");
        for refused in [
            "12",
            "-run",
            "+12-run",
            "12345678901234567890-run",
            "12-.run",
            "12.7-run",
            "12.1000-run",
            "12.+07-run",
            ".007-run",
            "12.-run",
        ] {
            assert!(parse(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn a_whole_number_may_be_written_as_a_float() {
        let parse = |json: &str| serde_json::from_str::<WholeNumber>(json).map(|n| n.0).ok();
        assert_eq!(parse("5"), Some(5));
        assert_eq!(parse("5.0"), Some(5));
        assert_eq!(parse("9007199254740991"), Some(MAX_WHOLE));
        for refused in ["5.5", "-1", "9007199254740992", "1e300", "\"5\""] {
            assert_eq!(parse(refused), None, "{refused}");
        }
    }
}
