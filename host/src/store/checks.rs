//! What a host checks of its store before it uses it (`serve`, every CLI
//! command, `stepstone store check`): that it answers, and that it honours
//! create-only writes.
//!
//! The race probe ([`Probes::Thorough`]) runs where a host starts to stay
//! (`serve`) and on `stepstone store check`; one-shot commands run the
//! quick probes only. Atomicity is a property of the store, not of the
//! command, and some stores serialise racing creates of one key slowly
//! (SeaweedFS answers 8 of them in 1 to 4 s), which would put seconds on
//! every `stepstone status`.
//!
//! Every fence of the engine stands on create-only writes
//! (`PutMode::Create`, `If-None-Match: *` on S3): a journal entry, a claim
//! of a run, a run record, a batch of the ledger. A store that takes a
//! create over an object already there (some S3-compatible servers and
//! gateways ignore the header) would let two hosts both claim a run and
//! both write one seq, and nothing else would notice; so a host refuses
//! such a store before it reads or writes anything of a run.
//!
//! Invariants: the probes write only under `probes/`, each under a name of
//! its own, and delete what they wrote; a store that answers but fails a
//! probe is refused with what it did, naming the store and what to change.

use bytes::Bytes;
use object_store::path::Path as Key;

use super::{Storage, StoreError};

/// Creates of one key made at once by the race probe: exactly one may land.
pub const RACERS: usize = 8;

/// How much of the store a check probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probes {
    /// It answers, reads are consistent after writes, and a second create
    /// of one key is refused: a handful of calls.
    Quick,
    /// The quick probes, and [`RACERS`] creates of one key at once, of
    /// which exactly one must land.
    Thorough,
}

/// What to change, for a store found not to honour create-only writes.
const USE_ANOTHER: &str = "Stepstone's journal and its claims on runs stand on create-only writes (PutMode::Create; `If-None-Match: *` on S3), so it does not run on this store: use one that honours them (Amazon S3, Google Cloud Storage, Azure Blob Storage, SeaweedFS, MinIO, the local file system), or a gateway that passes the header on";

/// What to change, for a store whose reads may miss a key just written.
const READ_AFTER_WRITE: &str = "Stepstone's fences read a run's next claim right after another host may have written it, so it does not run on this store: use one whose reads are consistent after writes (Amazon S3, Google Cloud Storage, Azure Blob Storage, SeaweedFS, MinIO, the local file system), without a cache in front of it";

impl Storage {
    /// Checks the store before a host uses it: it answers; a key read
    /// absent, then written, is read back at once (a cache that remembers
    /// a key absent would let a fence miss a claim); and a key created once
    /// is refused a second create, and, with [`Probes::Thorough`], of
    /// [`RACERS`] made at once exactly one lands. Refused in one line
    /// naming what to check or change: [`StoreError::Location`] for a store
    /// that does not answer, [`StoreError::Unsuitable`] for one that does
    /// not do what the engine stands on.
    pub async fn check(&self, probes: Probes) -> Result<(), StoreError> {
        let name = uuid::Uuid::now_v7().to_string();
        self.check_consistent(&name).await?;
        if probes == Probes::Thorough {
            self.check_atomic(&name).await?;
        }
        Ok(())
    }

    /// A key read absent then written is read back; a second create of a
    /// key is refused.
    async fn check_consistent(&self, name: &str) -> Result<(), StoreError> {
        let probes = self.scope(&self.root, Key::from("probes"));
        let [read, once] = ["read", "once"].map(|probe| Key::from(format!("{name}-{probe}")));
        let unreachable = |e: StoreError| self.unreachable(&e);
        let read_before = probes.version(&read).await.map_err(unreachable)?;
        probes
            .create(&read, Bytes::from_static(b"probe"))
            .await
            .map_err(unreachable)?;
        let read_after = probes.version(&read).await.map_err(unreachable)?;
        probes
            .create(&once, Bytes::from_static(b"probe"))
            .await
            .map_err(unreachable)?;
        let again = probes.create(&once, Bytes::from_static(b"probe, again")).await;
        probes
            .delete_all(&[read.clone(), once.clone()])
            .await
            .map_err(unreachable)?;
        if read_before.is_some() || read_after.is_none() {
            return Err(self.unsuitable(&format!(
                "probes/{read}, read absent and then written, was read absent again: reads are not consistent after writes; {READ_AFTER_WRITE}"
            )));
        }
        match again {
            Err(StoreError::AlreadyExists { .. }) => Ok(()),
            Ok(()) => Err(self.unsuitable(&format!(
                "a second create-only write of probes/{once} replaced the first instead of failing: {USE_ANOTHER}"
            ))),
            Err(e) => Err(unreachable(e)),
        }
    }

    /// Of [`RACERS`] creates of one key at once, exactly one lands.
    async fn check_atomic(&self, name: &str) -> Result<(), StoreError> {
        let probes = self.scope(&self.root, Key::from("probes"));
        let raced = Key::from(format!("{name}-raced"));
        let racing = (0..RACERS).map(|n| probes.create(&raced, Bytes::from(format!("racer {n}"))));
        let landed = futures::future::join_all(racing).await;
        probes
            .delete_all(std::slice::from_ref(&raced))
            .await
            .map_err(|e| self.unreachable(&e))?;
        let won = landed.iter().filter(|created| created.is_ok()).count();
        if let Some(Err(e)) = landed
            .into_iter()
            .find(|created| !matches!(created, Ok(()) | Err(StoreError::AlreadyExists { .. })))
        {
            return Err(self.unreachable(&e));
        }
        if won != 1 {
            return Err(self.unsuitable(&format!(
                "of {RACERS} create-only writes of one key made at once, {won} succeeded, not one: the store's create-only writes are not atomic; {USE_ANOTHER}"
            )));
        }
        Ok(())
    }

    fn unreachable(&self, e: &StoreError) -> StoreError {
        StoreError::Location {
            location: self.location.clone(),
            // One line: a server's answer may hold an XML document.
            reason: format!(
                "{e}; check the bucket exists, the endpoint (AWS_ENDPOINT, AWS_ALLOW_HTTP for plain HTTP) and the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or the backend's own)"
            )
            .replace(['\n', '\r'], " "),
        }
    }

    fn unsuitable(&self, reason: &str) -> StoreError {
        StoreError::Unsuitable {
            location: self.location.clone(),
            reason: reason.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::seams::Seams;

    /// A store that honours create-only writes passes, and leaves nothing
    /// behind; one that takes them as overwrites, or that remembers a key
    /// it read absent, is refused, naming the store and what to use
    /// instead.
    #[tokio::test]
    async fn a_store_ignoring_create_only_writes_is_refused() {
        let storage = Storage::in_memory();
        storage
            .check(Probes::Thorough)
            .await
            .expect("InMemory honours create-only writes");
        let probes = storage.scope(&storage.root, Key::from("probes"));
        assert_eq!(probes.list(&Key::from("")).await.expect("listed"), Vec::<Key>::new());

        let ignoring = Storage::new(Arc::new(Seams::ignoring_create_only())).at("s3://ignoring");
        let refused = ignoring.check(Probes::Quick).await.expect_err("refused");
        assert!(matches!(refused, StoreError::Unsuitable { .. }), "{refused:?}");
        let refused = refused.to_string();
        assert!(refused.contains("s3://ignoring"), "{refused}");
        assert!(refused.contains("replaced the first instead of failing"), "{refused}");
        assert!(refused.contains("use one that honours them"), "{refused}");

        let caching = Storage::new(Arc::new(Seams::caching_absent())).at("s3://cached");
        let refused = caching.check(Probes::Quick).await.expect_err("refused").to_string();
        assert!(refused.contains("was read absent again"), "{refused}");
        assert!(refused.contains("consistent after writes"), "{refused}");
    }

    /// A store whose creates are refused one at a time but not atomic
    /// passes the quick probes, and the thorough probe refuses it; what
    /// the probes wrote is deleted either way.
    #[tokio::test]
    async fn a_store_whose_creates_race_is_refused_by_the_thorough_probe() {
        let racy = Storage::new(Arc::new(Seams::checking_then_writing())).at("s3://racy");
        racy.check(Probes::Quick)
            .await
            .expect("one create at a time is refused");
        let refused = racy.check(Probes::Thorough).await.expect_err("refused").to_string();
        assert!(refused.contains("s3://racy"), "{refused}");
        assert!(
            refused.contains(&format!("of {RACERS} create-only writes")),
            "{refused}"
        );
        assert!(refused.contains("not atomic"), "{refused}");
        let probes = racy.scope(&racy.root, Key::from("probes"));
        assert_eq!(probes.list(&Key::from("")).await.expect("listed"), Vec::<Key>::new());
    }
}
