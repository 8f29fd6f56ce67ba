//! The console's page frame, and the formats every page shares: times,
//! durations, sizes, JSON payloads, a run's state.

use maud::{DOCTYPE, Markup, html};

use super::assets;
use crate::clock::rfc3339;
use crate::runtime::RunState;
use crate::store::RunId;

/// The pages the navigation names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Runs,
    Components,
    Tenant,
}

/// What a signed-in page shows around its body.
pub struct Frame<'a> {
    pub title: &'a str,
    pub tenant: &'a str,
    pub csrf: &'a str,
    pub nav: Nav,
}

/// A page of a signed-in tenant.
pub fn page(frame: &Frame<'_>, body: Markup) -> Markup {
    let link = |nav: Nav, href: &str, text: &str| {
        html! { a href=(href) aria-current=[(frame.nav == nav).then_some("page")] { (text) } }
    };
    document(
        frame.title,
        html! {
            header.top {
                a.brand href="/ui/runs" { "Stepstone" }
                nav {
                    (link(Nav::Runs, "/ui/runs", "Runs"))
                    (link(Nav::Components, "/ui/components", "Components"))
                    (link(Nav::Tenant, "/ui/tenant", "Tenant"))
                }
                form.signout method="post" action="/ui/logout" {
                    input type="hidden" name="csrf" value=(frame.csrf);
                    span.tenant { "tenant " strong #tenant { (frame.tenant) } }
                    button type="submit" { "Sign out" }
                }
            }
            main { (body) }
        },
    )
}

/// A page outside any session (signing in, an error before one).
pub fn document(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Stepstone" }
                link rel="stylesheet" href=(assets::CSS.url());
                script src=(assets::JS.url()) defer {}
            }
            body { (body) }
        }
    }
}

/// A time as people read it: `2026-05-01 12:00:03.123 UTC`.
pub fn time(ms: u64) -> String {
    let text = rfc3339(ms);
    format!("{} UTC", text.trim_end_matches('Z').replacen('T', " ", 1))
}

/// A duration as people read it: `340 ms`, `1.25 s`, `3 min 20 s`, `2 h 5 min`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.2} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// A size as people read it: `512 B`, `1.5 KiB`, `19.0 MiB`.
pub fn bytes(size: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if size < 1024 {
        return format!("{size} B");
    }
    let mut value = size as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A JSON payload indented for reading; text that is not JSON as it is.
pub fn pretty_json(payload: &str) -> String {
    serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| payload.to_owned())
}

/// A link to a payload `run` stored apart, `bytes` long: opened only when
/// followed.
pub fn stored_payload(run: &RunId, sha256: &str, size: u64) -> Markup {
    html! {
        a.stored-payload href={ "/ui/runs/" (run) "/payloads/" (sha256) } { "open payload (" (bytes(size)) ")" }
    }
}

/// A component digest, shortened for a table.
pub fn short_digest(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// A run's state as a badge, with what it waits for.
pub fn state_badge(state: &RunState) -> Markup {
    let detail = match state {
        RunState::Scheduled { start_at_ms } => Some(format!("starts {}", time(*start_at_ms))),
        RunState::Queued { concurrency_key } => Some(format!("key {concurrency_key}")),
        RunState::Retrying { seq, failed_attempts } => Some(format!("seq {seq}, {failed_attempts} failed")),
        RunState::Sleeping { seq, until_ms } => Some(format!("seq {seq}, until {}", time(*until_ms))),
        RunState::AwaitingSignal { seq, signal, until_ms } => {
            Some(format!("`{signal}` at seq {seq}, until {}", time(*until_ms)))
        }
        RunState::Failed { kind, .. } => Some(kind.clone()),
        _ => None,
    };
    html! {
        span.state data-state=(state.name()) { (state.name()) }
        @if let Some(detail) = detail { " " span.detail { (detail) } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_read_as_people_write_them() {
        assert_eq!(time(1_700_000_000_123), "2023-11-14 22:13:20.123 UTC");
        assert_eq!(duration(0), "0 ms");
        assert_eq!(duration(999), "999 ms");
        assert_eq!(duration(1_250), "1.25 s");
        assert_eq!(duration(200_000), "3 min 20 s");
        assert_eq!(duration(7_500_000), "2 h 5 min");
        assert!(duration(u64::MAX).ends_with(" min"), "the longest duration still reads");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(u64::MAX), "16777216.0 TiB");
        assert_eq!(pretty_json(r#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(pretty_json("not json"), "not json");
        assert_eq!(short_digest("abc"), "abc");
    }

    #[test]
    fn what_a_page_shows_is_escaped() {
        let badge = state_badge(&RunState::AwaitingSignal {
            seq: 1,
            signal: "<script>".into(),
            until_ms: 0,
        });
        assert!(badge.0.contains("&lt;script&gt;") && !badge.0.contains("<script>"));
    }
}
