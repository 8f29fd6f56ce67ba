//! Names that become parts of keys, checked at the edge, and the key layout
//! of a tenant's data:
//!
//! ```text
//! components/{sha256}.wasm                      component bytes, content-addressed
//! component-names/{name}                        the digest a name points at (overwritten)
//! runs/{run}/run                                run record (create-only)
//! runs/{run}/journal/{seq}                      one entry per durable call (create-only)
//! runs/{run}/snapshots/{n}                      entries 0..n in one object, derived from them (create-only)
//! runs/{run}/attempts/{seq}/{attempt}           failed attempts of a step in progress
//! runs/{run}/timers/{seq}                       deadline of a sleep or a signal wait
//! runs/{run}/signals/{name}/{sent-at}-{id}      signals sent to the run (id: the sender's, or fresh)
//! runs/{run}/signal-ids/{name}/{id}             the first send with the sender's id (create-only)
//! runs/{run}/cancel                             a request to cancel the run (create-only)
//! runs/{run}/outcome                            how the run ended (create-only)
//! runs/{run}/owners/{epoch}                     the host that took the run over, from epoch 1 (create-only)
//! runs/{run}/logs/{first-at}-{id}               a batch of the run's log lines (create-only, see `runtime::logs`)
//! ledger/…                                      runs created, open and ended, noted in batches (see `journal::ledger`)
//! unfinished/{run}                              marker of a run stored before the ledger: not finished (deleted once it has)
//! finished/{hour}/{finished-at}-{run}           marker of a run stored before the ledger: finished then (deleted with the run)
//! outbox/{run}                                  the run's completion notification, until delivered
//! groups/{group}                                a group of runs submitted together (create-only)
//! usage/{day}/{host}                            a host's count of the tenant's use that UTC day (overwritten)
//! secrets/{name}                                a secret, sealed with the host key (overwritten)
//! schedules/{name}/spec                         a cron schedule: what it starts and when (overwritten)
//! schedules/{name}/state                        how far it has fired, and its last run (overwritten)
//! ```
//!
//! and, outside every tenant, what the hosts sharing the store keep for
//! each other (see [`crate::cluster`]):
//!
//! ```text
//! cluster/hosts/{host}                          a host's heartbeat (overwritten while it lives)
//! cluster/wakeups/{host}/{tenant}/{run}         a run driven by {host} has a signal or a cancellation
//! ```

use std::fmt;

use object_store::path::Path as Key;

/// A name was refused because it cannot be part of a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid {what} `{name}`: use 1 to {max} characters among letters, digits, `-`, `_` and `.`, not starting with `.`"
)]
pub struct InvalidName {
    what: &'static str,
    name: String,
    max: usize,
}

impl InvalidName {
    /// The longest name of its kind.
    pub fn max(&self) -> usize {
        self.max
    }
}

fn check(what: &'static str, name: &str, max: usize) -> Result<String, InvalidName> {
    let valid = !name.is_empty()
        && name.len() <= max
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(name.to_owned())
    } else {
        Err(InvalidName {
            what,
            name: name.to_owned(),
            max,
        })
    }
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident, $what:literal, $max:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $ty(String);

        impl $ty {
            /// `name`, if it can be part of a key: letters, digits, `-`, `_` and `.`, not starting with `.`,
            /// and not too long for its kind ([`InvalidName`] says why not otherwise).
            pub fn new(name: &str) -> Result<Self, InvalidName> {
                check($what, name, $max).map(Self)
            }

            /// The name, as it goes into keys.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $ty {
            type Error = InvalidName;
            fn try_from(name: String) -> Result<Self, InvalidName> {
                Self::new(&name)
            }
        }

        impl From<$ty> for String {
            fn from(name: $ty) -> String {
                name.0
            }
        }

        impl std::str::FromStr for $ty {
            type Err = InvalidName;
            fn from_str(name: &str) -> Result<Self, InvalidName> {
                Self::new(name)
            }
        }
    };
}

name_type!(
    /// A tenant: the owner of components and runs, and a key prefix.
    TenantId, "tenant id", 64
);
name_type!(
    /// A run's id, chosen by the caller or generated.
    RunId, "run id", 128
);
name_type!(
    /// The name a component is uploaded under; it points at the newest upload.
    ComponentName, "component name", 128
);
name_type!(
    /// The name a signal is sent and awaited under.
    SignalName, "signal name", 128
);
name_type!(
    /// The name of a tenant's secret, as its steps ask `wasi:config/store` for it.
    SecretName, "secret name", 128
);
name_type!(
    /// The name of a run's stream, which its workflow appends values to
    /// and clients read.
    StreamName, "stream name", 128
);
name_type!(
    /// A sender's idempotency key for one signal: sending again with the same
    /// id (after a crash hid whether the first send was stored) stores it once.
    SignalId, "signal id", 64
);

name_type!(
    /// The name of a tenant's cron schedule; each run it fires is
    /// `{name}-{fire time}`, so it leaves room for the 17 characters of
    /// the time within a run id.
    ScheduleName, "schedule name", 100
);

name_type!(
    /// The name of a tenant's HTTP hook (`/hooks/{tenant}/{name}`); each
    /// run it starts is `{name}-{20 hex digits of the request's
    /// signature}`, so it leaves room for them within a run id.
    HookName, "hook name", 100
);

name_type!(
    /// A group of runs submitted at once; a run of it without an id of its
    /// own is `{group}-{index}`, so it leaves room for the index.
    GroupId, "group id", 100
);

impl RunId {
    /// A fresh id, sortable by creation time.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

name_type!(
    /// A workflow's name, as its component declares it: runs are searched
    /// by it, so it is held to a name's rules.
    WorkflowName, "workflow name", 128
);

name_type!(
    /// A tag given to a run at submission, to search runs by.
    RunTag, "run tag", 64
);

name_type!(
    /// What runs share to be limited together: at most so many runs of one
    /// key execute at once (a customer's id, a workflow's name).
    ConcurrencyKey, "concurrency key", 128
);

impl GroupId {
    /// A fresh id, sortable by creation time.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

impl TenantId {
    /// The tenant the CLI works as.
    pub fn default_tenant() -> Self {
        Self("default".into())
    }
}

/// The keys of one run id's records: what anyone addressing the id
/// writes. What the run's drivers write is in [`RunKeys::of`] its
/// incarnation.
pub struct RunKeys<'a>(&'a RunId);

/// The key layout of `run`.
pub fn keys_of(run: &RunId) -> RunKeys<'_> {
    RunKeys(run)
}

/// The keys of what the drivers of one incarnation of a run id write.
pub struct IncarnationKeys<'a> {
    run: &'a RunId,
    incarnation: u64,
}

/// The folder of the folders of a run id's incarnations after its first.
const INCARNATIONS: &str = "incarnations";

/// Sequence numbers are zero-padded so keys sort in call order.
fn seq_part(seq: u64) -> String {
    format!("{seq:010}")
}

impl<'a> RunKeys<'a> {
    fn key(&self, parts: &[&str]) -> Key {
        Key::from_iter(["runs", self.0.as_str()].iter().chain(parts).copied())
    }

    /// The keys of what the drivers of incarnation `incarnation` write
    /// (see the layout above).
    pub fn of(&self, incarnation: u64) -> IncarnationKeys<'a> {
        IncarnationKeys {
            run: self.0,
            incarnation,
        }
    }

    /// Everything the run has in the store, as the prefix of its keys.
    pub fn root(&self) -> Key {
        self.key(&[])
    }

    /// The prefix of the folders of the id's incarnations after its first
    /// (`{n}` under it, for [`of`](Self::of) `n`).
    pub fn incarnations(&self) -> Key {
        self.key(&[INCARNATIONS])
    }

    /// The run's record: what was submitted, written once.
    pub fn run(&self) -> Key {
        self.key(&["run"])
    }

    /// A request to cancel the run, written by whoever asks.
    pub fn cancel(&self) -> Key {
        self.key(&["cancel"])
    }

    /// A request to pause the run, written by whoever asks and deleted by
    /// whoever resumes it.
    pub fn pause(&self) -> Key {
        self.key(&["pause"])
    }

    /// A payload stored apart from the record that names it, by the
    /// SHA-256 of its bytes: the same bytes whichever incarnation stored
    /// them.
    pub fn payload(&self, sha256: &str) -> Key {
        self.key(&["payloads", sha256])
    }

    /// The prefix of the payloads stored apart.
    pub fn payloads(&self) -> Key {
        self.key(&["payloads"])
    }

    /// The prefix of the claims on the run, one per epoch.
    pub fn owners(&self) -> Key {
        self.key(&["owners"])
    }

    /// The claim of epoch `epoch`: zero-padded, so the newest sorts last.
    pub fn owner(&self, epoch: u64) -> Key {
        self.key(&["owners", &seq_part(epoch)])
    }

    /// The build an upgrade moved the run to: overwritten by each move.
    pub fn build(&self) -> Key {
        self.key(&["build"])
    }

    /// Which place of its concurrency key the run took (`{slot}/{generation}`),
    /// written once it may execute.
    pub fn place(&self) -> Key {
        self.key(&["place"])
    }

    /// A request to end the wait at `seq` now, written once by whoever
    /// advances the run's timer.
    pub fn advance(&self, seq: u64) -> Key {
        self.key(&["advances", &seq_part(seq)])
    }

    /// The prefix of every signal sent to the run.
    pub fn all_signals(&self) -> Key {
        self.key(&["signals"])
    }

    /// The prefix of the signals sent to the run as `name`.
    pub fn signals(&self, name: &SignalName) -> Key {
        self.key(&["signals", name.as_str()])
    }

    /// The claim of the signal sent as `name` with the sender's `id`: the
    /// first send creates it, so a second send of that id stores nothing.
    pub fn signal_claim(&self, name: &SignalName, id: &SignalId) -> Key {
        self.key(&["signal-ids", name.as_str(), id.as_str()])
    }

    /// A new signal's key, `{sent-at}-{id}`: sorts after every signal sent
    /// before it. Without the sender's `id`, a fresh one.
    pub fn new_signal(&self, name: &SignalName, sent_at_ms: u64, id: Option<&SignalId>) -> Key {
        let id = id.map_or_else(|| uuid::Uuid::now_v7().simple().to_string(), |id| id.to_string());
        self.key(&["signals", name.as_str(), &format!("{sent_at_ms:016}-{id}")])
    }
}

impl IncarnationKeys<'_> {
    /// The first incarnation's keys lie where every run's did before ids
    /// were used again, so runs stored then read as before.
    fn key(&self, parts: &[&str]) -> Key {
        let folder = (self.incarnation > 0).then(|| self.incarnation.to_string());
        let incarnation = folder.iter().flat_map(|n| [INCARNATIONS, n.as_str()]);
        Key::from_iter(
            ["runs", self.run.as_str()]
                .into_iter()
                .chain(incarnation)
                .chain(parts.iter().copied()),
        )
    }

    /// How the run ended, written once when it ends.
    pub fn outcome(&self) -> Key {
        self.key(&["outcome"])
    }

    /// The prefix of the run's journal entries.
    pub fn journal(&self) -> Key {
        self.key(&["journal"])
    }

    /// Journal entry `seq`: zero-padded, so entries list in call order.
    pub fn entry(&self, seq: u64) -> Key {
        self.key(&["journal", &seq_part(seq)])
    }

    /// The prefix of the journal's snapshots.
    pub fn snapshots(&self) -> Key {
        self.key(&["snapshots"])
    }

    /// The snapshot of entries `0..covers`: zero-padded like a seq, so the
    /// newest sorts last.
    pub fn snapshot(&self, covers: u64) -> Key {
        self.key(&["snapshots", &seq_part(covers)])
    }

    /// The prefix of the failed attempts of the step at `seq`.
    pub fn attempts(&self, seq: u64) -> Key {
        self.key(&["attempts", &seq_part(seq)])
    }

    /// Failed attempt `attempt` (from 1) of the step at `seq`.
    pub fn attempt(&self, seq: u64, attempt: u32) -> Key {
        self.key(&["attempts", &seq_part(seq), &format!("{attempt:05}")])
    }

    /// The prefix of every failed attempt of every step of the run.
    pub fn all_attempts(&self) -> Key {
        self.key(&["attempts"])
    }

    /// The prefix of the run's timers.
    pub fn timers(&self) -> Key {
        self.key(&["timers"])
    }

    /// The timer the durable call at `seq` set.
    pub fn timer(&self, seq: u64) -> Key {
        self.key(&["timers", &seq_part(seq)])
    }

    /// The prefix of the run's stored log batches.
    pub fn logs(&self) -> Key {
        self.key(&["logs"])
    }

    /// A batch of the run's log lines, named by the time of its first line
    /// and a fresh id: `{first-at:016}-{id}`, so batches sort by time.
    pub fn log_batch(&self, batch: &str) -> Key {
        self.key(&["logs", batch])
    }
}

/// Where the component with `digest` is stored.
pub fn component_key(digest: &str) -> Key {
    Key::from_iter(["components", &format!("{digest}.wasm")])
}

/// Where the digest a component name points at is stored.
pub fn component_name_key(name: &ComponentName) -> Key {
    Key::from_iter(["component-names", name.as_str()])
}

/// Where the versions of component name `name` are kept.
pub fn component_versions_key(name: &ComponentName) -> Key {
    Key::from_iter(["component-versions", name.as_str()])
}

/// Version `number` of `name`: zero-padded, so versions sort in order.
pub fn component_version_key(name: &ComponentName, number: u32) -> Key {
    Key::from_iter(["component-versions", name.as_str(), &format!("{number:010}")])
}

/// Where every component name is listed.
pub fn component_names_key() -> Key {
    Key::from("component-names")
}

/// Where every component is stored.
pub fn components_key() -> Key {
    Key::from("components")
}

/// Where every run is listed.
pub fn runs_key() -> Key {
    Key::from("runs")
}

/// Where every schedule is stored.
pub fn schedules_key() -> Key {
    Key::from("schedules")
}

/// Where the tenant's HTTP hooks are stored, one object each.
pub fn hooks_key() -> Key {
    Key::from("hooks")
}

/// Where hook `name` is stored.
pub fn hook_key(name: &HookName) -> Key {
    Key::from_iter(["hooks", name.as_str()])
}

/// Where `name`'s `part` (`spec` or `state`) is stored.
pub fn schedule_key(name: &ScheduleName, part: &str) -> Key {
    Key::from_iter(["schedules", name.as_str(), part])
}

/// Where the runs that have not finished are listed, one empty marker
/// each, so recovery reads this and not every run ever stored.
pub fn unfinished_key() -> Key {
    Key::from("unfinished")
}

/// The marker listing `run` as unfinished.
pub fn unfinished_marker(run: &RunId) -> Key {
    Key::from_iter(["unfinished", run.as_str()])
}

/// Where group `id` is stored.
pub fn group_key(id: &GroupId) -> Key {
    Key::from_iter(["groups", id.as_str()])
}

/// Where the completion notifications yet to deliver are kept.
pub fn outbox_key() -> Key {
    Key::from("outbox")
}

/// The notification of `run`'s end, until it is delivered.
pub fn outbox_entry(run: &RunId) -> Key {
    Key::from_iter(["outbox", run.as_str()])
}

/// The pointer to the latest generation of the chain that began with run
/// `root`: outside the root's folder, so it outlives the root's records
/// when retention deletes them while the chain goes on.
pub fn chain_key(root: &RunId) -> Key {
    Key::from_iter(["chains", root.as_str()])
}

/// Where the runs that have finished are listed, one empty marker each in
/// a folder per hour, so the retention sweeper reads only the oldest.
pub fn finished_key() -> Key {
    Key::from("finished")
}

/// The marker listing `run` as finished at `finished_at_ms`: under the hour
/// it finished in, zero-padded so that hours and markers sort by time.
pub fn finished_marker(finished_at_ms: u64, run: &RunId) -> Key {
    let hour = finished_at_ms / 3_600_000;
    Key::from_iter([
        "finished",
        &format!("{hour:08}"),
        &format!("{finished_at_ms:016}-{run}"),
    ])
}

/// When the marker `name` (a [`finished_marker`]'s file name) says its run
/// finished, and which run it is.
pub fn parse_finished_marker(name: &str) -> Option<(u64, RunId)> {
    let (at, run) = name.split_once('-')?;
    Some((at.parse().ok()?, RunId::new(run).ok()?))
}

/// Where the places of concurrency key `key` are: one folder per place,
/// holding the generations of who took it and who freed it.
pub fn places_key(key: &ConcurrencyKey) -> Key {
    Key::from_iter(["queues", key.as_str(), "places"])
}

/// Generation `generation` of place `slot` of `key` (an odd one holds the
/// run that took the place, an even one frees it). Zero-padded, so the
/// newest generation of a place sorts last.
pub fn place_generation(key: &ConcurrencyKey, slot: u32, generation: u64) -> Key {
    Key::from_iter([
        "queues",
        key.as_str(),
        "places",
        &format!("{slot:05}"),
        &seq_part(generation),
    ])
}

/// The slot and generation a [`place_generation`] key names.
pub fn parse_place_generation(key: &Key) -> Option<(u32, u64)> {
    let mut parts = key.as_ref().rsplit('/');
    let generation = parts.next()?.parse().ok()?;
    Some((parts.next()?.parse().ok()?, generation))
}

/// Where the runs waiting for a place of `key` are, in the order they take one.
pub fn tickets_key(key: &ConcurrencyKey) -> Key {
    Key::from_iter(["queues", key.as_str(), "waiting"])
}

/// `run`'s ticket in `key`'s queue: its name sorts by priority (lowest
/// first), then by when the run was created, in microseconds.
pub fn ticket(key: &ConcurrencyKey, priority: u8, created_us: u64, run: &RunId) -> Key {
    Key::from_iter([
        "queues",
        key.as_str(),
        "waiting",
        &format!("{priority}-{created_us:016}-{run}"),
    ])
}

/// The run a ticket's file name is for.
pub fn parse_ticket(name: &str) -> Option<RunId> {
    let mut parts = name.splitn(3, '-');
    let (_priority, _created) = (parts.next()?, parts.next()?);
    RunId::new(parts.next()?).ok()
}

/// Written once every unfinished run of the tenant has its marker (runs
/// stored before the index was kept were given theirs by a full scan).
pub fn unfinished_index_complete() -> Key {
    Key::from_iter(["unfinished", ".complete"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_escape_a_prefix_are_refused() {
        for bad in ["", "../x", "a/b", ".hidden", "sp ace", &"x".repeat(129)] {
            assert!(RunId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(RunId::new("order-1.v2_a").is_ok());
        let err = TenantId::new("a/b").unwrap_err().to_string();
        assert!(err.contains("tenant id") && err.contains("a/b"), "{err}");
    }

    #[test]
    fn journal_keys_sort_in_call_order() {
        let run = RunId::new("r").expect("valid in this test");
        let keys = keys_of(&run);
        assert!(keys.of(0).entry(9).as_ref() < keys.of(0).entry(10).as_ref());
        assert_eq!(keys.of(0).entry(3).as_ref(), "runs/r/journal/0000000003");
        assert!(keys.of(0).snapshot(999).as_ref() < keys.of(0).snapshot(1000).as_ref());
        assert_eq!(keys.of(0).snapshot(256).as_ref(), "runs/r/snapshots/0000000256");
    }

    #[test]
    fn the_first_incarnation_keeps_the_layout_of_before_and_each_later_one_has_a_folder() {
        let run = RunId::new("r").expect("valid in this test");
        let keys = keys_of(&run);
        assert_eq!(keys.of(0).outcome().as_ref(), "runs/r/outcome");
        assert_eq!(keys.of(2).entry(3).as_ref(), "runs/r/incarnations/2/journal/0000000003");
        assert!(keys.of(u64::MAX).timer(1).prefix_matches(&keys.incarnations()));
        assert!(!keys.of(0).journal().prefix_matches(&keys.incarnations()));
    }
}
