//! What the bytes of a run's claims say (`runs/{run}/owners/{epoch}`): a
//! host's process drives the run (`{host} {incarnation}`; a bare `{host}`
//! from before processes were named), or a sweeper deletes it (`deleting
//! {created_at_ms} {host} {incarnation}`; a bare `deleting` from before
//! sweepers were named). No two processes write the same bytes.

use bytes::Bytes;

use super::{HostId, Incarnation};

/// How a deletion claim's bytes begin.
pub(super) const DELETING: &str = "deleting";

/// What a claim holds: the host and the process of it that made it, so
/// that no two processes ever write the same bytes (a create retried
/// after a lost reply takes a claim it finds for its own only if it holds
/// these very bytes).
pub(super) fn claim_bytes(host: &HostId, incarnation: Incarnation) -> Bytes {
    Bytes::from(format!("{host} {incarnation}"))
}

/// What a claim's bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Claimed {
    /// A host's process drives the run.
    Host(HostId, Option<Incarnation>),
    /// Retention deletes it (see `super::deletions`): its sweeper, if it names one.
    Deleting(Option<Sweeper>),
    /// Bytes that name no host: anyone may claim the run again.
    Unreadable,
}

/// What the claim `bytes` says.
pub(super) fn claimed(bytes: &[u8]) -> Claimed {
    let text = String::from_utf8_lossy(bytes);
    if let Some(deleting) = text.strip_prefix(DELETING) {
        return Claimed::Deleting(sweeper(deleting));
    }
    host_and_incarnation(&text).map_or(Claimed::Unreadable, |(host, incarnation)| {
        Claimed::Host(host, incarnation)
    })
}

/// `{host}` or `{host} {incarnation}`, read.
pub(super) fn host_and_incarnation(text: &str) -> Option<(HostId, Option<Incarnation>)> {
    let (host, incarnation) = match text.split_once(' ') {
        Some((host, incarnation)) => (host, Some(incarnation.parse().ok()?)),
        None => (text, None),
    };
    Some((HostId::try_from(host.to_owned()).ok()?, incarnation))
}

/// What a deletion claim of the run created at `created_at_ms` by this
/// process holds.
pub(super) fn deletion_bytes(created_at_ms: u64, host: &HostId, incarnation: Incarnation) -> Bytes {
    Bytes::from(format!("{DELETING} {created_at_ms} {host} {incarnation}"))
}

/// Who deletes a run: the host and its process that made the deletion
/// claim, and which creation of the run it deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweeper {
    /// The host deleting the run.
    pub host: HostId,
    /// Its process.
    pub incarnation: Incarnation,
    /// When the run it deletes was created.
    pub created_at_ms: u64,
}

/// The sweeper a deletion claim names, from what follows [`DELETING`];
/// `None` for one that names none (written before sweepers named
/// themselves).
pub(super) fn sweeper(rest: &str) -> Option<Sweeper> {
    let (created_at_ms, by) = rest.trim_start().split_once(' ')?;
    match host_and_incarnation(by)? {
        (host, Some(incarnation)) => Some(Sweeper {
            host,
            incarnation,
            created_at_ms: created_at_ms.parse().ok()?,
        }),
        (_, None) => None,
    }
}

/// If the claim `bytes` is a deletion claim: its sweeper, if it names one.
pub fn deleted_by(bytes: &[u8]) -> Option<Option<Sweeper>> {
    match claimed(bytes) {
        Claimed::Deleting(sweeper) => Some(sweeper),
        _ => None,
    }
}

