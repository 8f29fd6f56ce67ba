//! Values the API parses itself, each with the schema that describes
//! exactly what it accepts: a wait's timeout (and any duration), a page's
//! cursor and limit, a log page's cursor, and the whole numbers of a run's
//! options.
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

/// How long a `wait` may wait, written as [`crate::durations`] reads it,
/// e.g. `30s` or `1m 30s`.
pub struct Timeout(pub Duration);

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        crate::durations::parse(&text)
            .map(Self)
            .ok_or_else(|| D::Error::custom(format!("`{text}` is not a duration such as `30s` or `1m 30s`")))
    }
}

impl PartialSchema for Timeout {
    fn schema() -> RefOr<Schema> {
        crate::durations::DurationText::schema()
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
        let run_id = super::responses::name_pattern(super::responses::NAME_MAX);
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
pub const MAX_WHOLE: u64 = (1 << 53) - 1;

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
