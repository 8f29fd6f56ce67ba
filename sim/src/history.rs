//! What the store's history says of the runs: for each run id, each record
//! created (an incarnation of the id, or a record a recovery stored as
//! abandoned) and, while it was the id's record, the outcome and the
//! journal entries stored, and each claim made; and when each incarnation
//! was marked retired (`journal::incarnations`). Read from what landed in
//! the store (`network`), as it landed, never from the store as it is at
//! the end: a run retention deleted, or whose id was used again, is still
//! here.
//!
//! Invariant: what is absorbed is appended in the order it landed, and an
//! entry or an outcome belongs to the newest record, when it landed, of
//! the incarnation its key names (`runs/{run}/incarnations/{n}/...`, or
//! the first's `runs/{run}/...`): where a host writes it is what a host
//! reads back as that run's.

use std::collections::BTreeMap;
use std::time::Duration;

use stepstone::journal::{Outcome, RunRecord, decode};
use stepstone::store::RunId;

use crate::network::{Change, Landed};

/// One record of a run id, and what landed under the id while it was the
/// newest.
#[derive(Debug, Clone)]
pub struct Incarnation {
    /// When the record was created.
    pub at: Duration,
    pub record: RunRecord,
    /// The first outcome stored, and when.
    pub outcome: Option<(Duration, Outcome)>,
    /// The seqs of the entries stored, and when each first was.
    pub entries: BTreeMap<u64, Duration>,
}

/// A record deleted: whose, when, by which host, and what it held.
#[derive(Debug, Clone)]
pub struct RecordDeleted {
    pub run: String,
    pub at: Duration,
    pub host: usize,
    pub record: RunRecord,
    /// Whether its incarnation (or a higher one) was marked retired before
    /// the delete landed: so the record was either swept, or a
    /// submission's that found its incarnation retired once its record
    /// landed, taken back.
    pub retired: bool,
}

/// How a run ended: its last generation's outcome, and the seqs its
/// journal held.
#[derive(Debug, Clone)]
pub struct Ended {
    pub outcome: Outcome,
    pub seqs: Vec<u64>,
}

/// The history, indexed by run id.
#[derive(Debug, Default)]
pub struct Runs {
    absorbed: usize,
    incarnations: BTreeMap<String, Vec<Incarnation>>,
    /// The claims made of each run id: their epochs, and when.
    claims: BTreeMap<String, Vec<(u64, Duration)>>,
    deleted: Vec<RecordDeleted>,
    /// The highest incarnation marked retired so far.
    retired: Option<u64>,
}

/// The run, the incarnation and the object under it that `key`
/// (`tenants/{t}/runs/{run}/...`) names: an object of an incarnation's
/// folder names its incarnation, any other the first's (0).
fn run_object(key: &str) -> Option<(&str, u64, &str)> {
    let (_, after) = key.split_once("/runs/")?;
    let (run, rest) = after.split_once('/')?;
    let incarnation = rest
        .strip_prefix("incarnations/")
        .and_then(|folder| folder.split_once('/'))
        .and_then(|(n, rest)| Some((n.parse().ok()?, rest)));
    let (incarnation, rest) = incarnation.unwrap_or((0, rest));
    Some((run, incarnation, rest))
}

/// The incarnation a `tenants/{t}/retired/{n}` key marks retired.
fn retired_mark(key: &str) -> Option<u64> {
    let (_, mark) = key.split_once("/retired/")?;
    mark.parse().ok()
}

impl Runs {
    /// Indexes what of `history` it has not yet: `history` is what landed
    /// so far, the part absorbed before unchanged.
    pub fn absorb(&mut self, history: &[Landed]) {
        for landed in history.iter().skip(self.absorbed) {
            self.note(landed);
        }
        self.absorbed = history.len().max(self.absorbed);
    }

    fn note(&mut self, landed: &Landed) {
        if let (Change::Created(_), Some(mark)) = (&landed.change, retired_mark(&landed.key)) {
            self.retired = self.retired.max(Some(mark));
        }
        let Some((run, incarnation, rest)) = run_object(&landed.key) else {
            return;
        };
        match (&landed.change, rest) {
            (Change::Created(bytes), "run") => {
                // The same record landing again (a write delivered twice,
                // or late) is the same run, not another incarnation of it.
                let again = |record: &RunRecord| {
                    (self.incarnations(run).iter()).any(|known| {
                        (known.record.created_at_ms, known.record.incarnation)
                            == (record.created_at_ms, record.incarnation)
                    })
                };
                if let Some(record) = decode::<RunRecord>(bytes).ok().filter(|record| !again(record)) {
                    self.incarnations.entry(run.to_owned()).or_default().push(Incarnation {
                        at: landed.at,
                        record,
                        outcome: None,
                        entries: BTreeMap::new(),
                    });
                }
            }
            (Change::Created(bytes), "outcome") => {
                if let (Some(newest), Ok(outcome)) = (self.newest(run, incarnation), decode::<Outcome>(bytes)) {
                    newest.outcome.get_or_insert((landed.at, outcome));
                }
            }
            (Change::Created(_), _) if rest.starts_with("journal/") => {
                let seq = rest.trim_start_matches("journal/").parse::<u64>();
                if let (Some(newest), Ok(seq)) = (self.newest(run, incarnation), seq) {
                    newest.entries.entry(seq).or_insert(landed.at);
                }
            }
            (Change::Created(_), _) if rest.starts_with("owners/") => {
                if let Ok(epoch) = rest.trim_start_matches("owners/").parse::<u64>() {
                    self.claims.entry(run.to_owned()).or_default().push((epoch, landed.at));
                }
            }
            (Change::Deleted(Some(bytes)), "run") => {
                if let Ok(record) = decode::<RunRecord>(bytes) {
                    self.deleted.push(RecordDeleted {
                        run: run.to_owned(),
                        at: landed.at,
                        host: landed.host,
                        retired: self.retired.is_some_and(|mark| mark >= record.incarnation),
                        record,
                    });
                }
            }
            _ => {}
        }
    }

    /// The newest record of `run` as incarnation `incarnation`.
    fn newest(&mut self, run: &str, incarnation: u64) -> Option<&mut Incarnation> {
        (self.incarnations.get_mut(run)?.iter_mut())
            .rev()
            .find(|known| known.record.incarnation == incarnation)
    }

    /// The records of run `run`, oldest first.
    pub fn incarnations(&self, run: &str) -> &[Incarnation] {
        self.incarnations.get(run).map_or(&[], Vec::as_slice)
    }

    /// The record of `run` created at `created_at_ms`.
    pub fn incarnation(&self, run: &str, created_at_ms: u64) -> Option<&Incarnation> {
        (self.incarnations(run).iter()).find(|incarnation| incarnation.record.created_at_ms == created_at_ms)
    }

    /// The claims made of `run`: their epochs, and when.
    pub fn claims(&self, run: &str) -> &[(u64, Duration)] {
        self.claims.get(run).map_or(&[], Vec::as_slice)
    }

    /// Every record deleted, in order.
    pub fn deleted(&self) -> &[RecordDeleted] {
        &self.deleted
    }

    /// The latest generation of the chain the run `run` created at
    /// `created_at_ms` begins (the run itself, unless it continued as new).
    pub fn latest_generation(&self, run: &RunId, created_at_ms: u64) -> Option<RunId> {
        let mut id = run.clone();
        let mut generation = self.incarnation(run.as_str(), created_at_ms)?;
        while let Some((_, Outcome::Continued { next })) = &generation.outcome {
            let Some(next_generation) = self.incarnations(next.as_str()).first() else {
                break;
            };
            (id, generation) = (next.clone(), next_generation);
        }
        Some(id)
    }

    /// How the run `run` created at `created_at_ms` ended, following a
    /// chain to its last generation; `None` while it has not.
    pub fn ended(&self, run: &RunId, created_at_ms: u64) -> Option<Ended> {
        let mut generation = self.incarnation(run.as_str(), created_at_ms)?;
        loop {
            let (_, outcome) = generation.outcome.as_ref()?;
            let Outcome::Continued { next } = outcome else {
                return Some(Ended {
                    outcome: outcome.clone(),
                    seqs: generation.entries.keys().copied().collect(),
                });
            };
            // Generations' ids are never used again: the next is its id's
            // only record (stored before this one's outcome).
            generation = self.incarnations(next.as_str()).first()?;
        }
    }
}
