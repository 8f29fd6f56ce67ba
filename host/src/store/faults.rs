//! Storage faults on purpose: an [`ObjectStore`] decorator, in the style of
//! object_store's `ThrottledStore`, that fails a share of the calls made
//! through it and slows every one down, to prove the host survives a flaky
//! store.
//!
//! Invariants: which calls fail is decided by a generator seeded from the
//! config, so a single-threaded sequence of calls fails the same way every
//! time; an injected failure is always `Error::Generic` and says it was
//! injected; a failed write may still have landed (its reply was "lost"),
//! as with a real remote store; every call and every injected failure is
//! counted.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, Result,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::shared_map::lock;

/// Which calls may fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultScope {
    /// Every call (the default).
    #[default]
    All,
    /// Gets and listings only.
    Reads,
    /// Puts, copies and deletes only.
    Writes,
}

/// How faulty the store is: `errors=0.1,latency=2ms,seed=7,on=writes,landed=0.5`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// The share of calls in scope that fail, from 0 to 1.
    pub error_rate: f64,
    /// Added to every call, failed or not.
    pub latency: Duration,
    /// Seeds the generator that picks the failing calls.
    pub seed: u64,
    /// Which calls may fail (all of them by default).
    pub scope: FaultScope,
    /// The share of failed writes that landed before failing (their reply
    /// was lost), from 0 to 1: 0 for a store that is down.
    pub landed: f64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            error_rate: 0.0,
            latency: Duration::ZERO,
            seed: 0,
            scope: FaultScope::All,
            landed: 0.5,
        }
    }
}

/// A fault config that could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "invalid storage fault setting `{setting}`: {reason} (expected e.g. `errors=0.1,latency=2ms,seed=7,on=writes,landed=0.5`)"
)]
pub struct FaultConfigError {
    setting: String,
    reason: String,
}

impl FromStr for FaultConfig {
    type Err = FaultConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut config = Self::default();
        for setting in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let refused = |reason: &str| FaultConfigError {
                setting: setting.to_owned(),
                reason: reason.to_owned(),
            };
            let (name, value) = setting.split_once('=').ok_or_else(|| refused("not NAME=VALUE"))?;
            match name.trim() {
                "errors" => {
                    config.error_rate =
                        share(value).ok_or_else(|| refused("the error rate must be a number from 0 to 1"))?
                }
                "landed" => {
                    config.landed =
                        share(value).ok_or_else(|| refused("the landed share must be a number from 0 to 1"))?
                }
                "latency" => {
                    config.latency = humantime::parse_duration(value)
                        .map_err(|e| refused(&format!("the latency must be a duration like 2ms: {e}")))?
                }
                "seed" => config.seed = value.parse().map_err(|_| refused("the seed must be a whole number"))?,
                "on" => {
                    config.scope = match value {
                        "all" => FaultScope::All,
                        "reads" => FaultScope::Reads,
                        "writes" => FaultScope::Writes,
                        _ => return Err(refused("`on` must be all, reads or writes")),
                    }
                }
                _ => return Err(refused("unknown setting; known: errors, latency, seed, on, landed")),
            }
        }
        Ok(config)
    }
}

/// A number from 0 to 1.
fn share(value: &str) -> Option<f64> {
    value.parse().ok().filter(|share| (0.0..=1.0).contains(share))
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scope = match self.scope {
            FaultScope::All => "all",
            FaultScope::Reads => "reads",
            FaultScope::Writes => "writes",
        };
        write!(
            f,
            "errors={},latency={},seed={},on={scope},landed={}",
            self.error_rate,
            humantime::format_duration(self.latency),
            self.seed,
            self.landed
        )
    }
}

/// The faults of a [`FaultyStore`]: its config, which can be changed while
/// it is in use (a store going down and recovering), and what it counted.
/// Shared: read and set from any thread.
#[derive(Debug)]
pub struct Faults {
    /// The config and the generator seeded from it, changed together.
    state: Mutex<(FaultConfig, StdRng)>,
    operations: AtomicU64,
    injected: AtomicU64,
}

impl Faults {
    fn new(config: FaultConfig) -> Self {
        Self {
            state: Mutex::new((config, StdRng::seed_from_u64(config.seed))),
            operations: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// The config in force: the one given at creation, or the last [`set_config`](Self::set_config).
    pub fn config(&self) -> FaultConfig {
        lock(&self.state).0
    }

    /// Fails calls from now on as `config` says (its seed restarts the generator).
    pub fn set_config(&self, config: FaultConfig) {
        *lock(&self.state) = (config, StdRng::seed_from_u64(config.seed));
    }

    /// Calls made through the store.
    pub fn operations(&self) -> u64 {
        self.operations.load(Ordering::Relaxed)
    }

    /// Calls the store failed on purpose.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Counts one call, waits the latency, and decides whether and when it fails.
    async fn call(&self, access: Access) -> Option<Strike> {
        let (strike, latency) = self.decide(access);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        strike
    }

    fn decide(&self, access: Access) -> (Option<Strike>, Duration) {
        self.operations.fetch_add(1, Ordering::Relaxed);
        let mut state = lock(&self.state);
        let (config, rng) = &mut *state;
        let in_scope = match config.scope {
            FaultScope::All => true,
            FaultScope::Reads => access == Access::Read,
            FaultScope::Writes => access == Access::Write,
        };
        if !in_scope || !rng.random_bool(config.error_rate) {
            return (None, config.latency);
        }
        // Some failed writes land first, like a remote store whose reply is lost.
        let strike = match access {
            Access::Write if rng.random_bool(config.landed) => Strike::After,
            _ => Strike::Before,
        };
        (Some(strike), config.latency)
    }

    /// The failure to report, counted as injected.
    fn error(&self, operation: &'static str, key: &Path, landed: bool) -> object_store::Error {
        self.injected.fetch_add(1, Ordering::Relaxed);
        object_store::Error::Generic {
            store: "FaultyStore",
            source: Box::new(InjectedFault {
                operation,
                key: key.to_string(),
                landed,
            }),
        }
    }
}

/// A failure the store made up.
#[derive(Debug, thiserror::Error)]
#[error("injected fault: {operation} {key} failed{}", if *.landed { " after the write landed (its reply was lost)" } else { "" })]
pub struct InjectedFault {
    operation: &'static str,
    key: String,
    /// The write was carried out before the failure was reported.
    landed: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// When an injected write failure strikes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strike {
    /// Before the call reaches the store: nothing happened.
    Before,
    /// After the write landed: only its reply is lost.
    After,
}

/// An [`ObjectStore`] that fails and slows down calls as its [`Faults`] say.
#[derive(Debug)]
pub struct FaultyStore<T> {
    inner: T,
    faults: Arc<Faults>,
}

impl<T: ObjectStore> FaultyStore<T> {
    /// Wraps `inner`, failing and slowing down its calls as `config` says.
    pub fn new(inner: T, config: FaultConfig) -> Self {
        Self {
            inner,
            faults: Arc::new(Faults::new(config)),
        }
    }

    /// Its faults, to count or change after it was moved behind an `Arc<dyn ObjectStore>`.
    pub fn faults(&self) -> Arc<Faults> {
        self.faults.clone()
    }

    /// Carries out a write unless it fails before; a write that fails after
    /// is carried out first, and a real error of the write wins over the
    /// injected one.
    async fn write<R>(&self, operation: &'static str, key: &Path, write: impl Future<Output = Result<R>>) -> Result<R> {
        match self.faults.call(Access::Write).await {
            None => write.await,
            Some(Strike::Before) => Err(self.faults.error(operation, key, false)),
            Some(Strike::After) => {
                write.await?;
                Err(self.faults.error(operation, key, true))
            }
        }
    }

    /// A listing of `prefix` that fails as one read call, or passes through.
    fn listing(
        &self,
        prefix: Option<&Path>,
        listing: BoxStream<'static, Result<ObjectMeta>>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let prefix = prefix.cloned().unwrap_or_default();
        let faults = self.faults.clone();
        futures::stream::once(async move {
            match faults.call(Access::Read).await {
                Some(_) => futures::stream::iter([Err(faults.error("list", &prefix, false))]).boxed(),
                None => listing,
            }
        })
        .flatten()
        .boxed()
    }

    /// Carries out a read unless it fails.
    async fn read<R>(&self, operation: &'static str, key: &Path, read: impl Future<Output = Result<R>>) -> Result<R> {
        match self.faults.call(Access::Read).await {
            None => read.await,
            Some(_) => Err(self.faults.error(operation, key, false)),
        }
    }
}

impl<T: ObjectStore> fmt::Display for FaultyStore<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({}, {})", self.inner, self.faults.config())
    }
}

#[async_trait]
impl<T: ObjectStore> ObjectStore for FaultyStore<T> {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let put = self.inner.put_opts(location, payload, opts);
        self.write("put", location, put).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        let start = self.inner.put_multipart_opts(location, opts);
        self.write("multipart put", location, start).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.read("get", location, self.inner.get_opts(location, options)).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        let faults = self.faults.clone();
        // Each location is one call; a failed one reaches the store as an error, so it is not deleted.
        let checked = locations.then(move |location| {
            let faults = faults.clone();
            async move {
                match (location, faults.call(Access::Write).await) {
                    (Ok(location), Some(_)) => Err(faults.error("delete", &location, false)),
                    (location, _) => location,
                }
            }
        });
        self.inner.delete_stream(checked.boxed())
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listing(prefix, self.inner.list(prefix))
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        self.listing(prefix, self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let key = prefix.cloned().unwrap_or_default();
        self.read("list", &key, self.inner.list_with_delimiter(prefix)).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.write("copy to", to, self.inner.copy_opts(from, to, options)).await
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::TryStreamExt;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn faulty(config: &str) -> FaultyStore<InMemory> {
        FaultyStore::new(InMemory::new(), config.parse().expect("a valid config"))
    }

    #[test]
    fn a_config_reads_every_setting_and_prints_back_the_same() {
        let config: FaultConfig = "errors=0.25, latency=2ms,seed=7,on=writes,landed=0"
            .parse()
            .expect("valid in this test");
        assert_eq!(
            config,
            FaultConfig {
                error_rate: 0.25,
                latency: Duration::from_millis(2),
                seed: 7,
                scope: FaultScope::Writes,
                landed: 0.0,
            }
        );
        assert_eq!(
            config.to_string().parse::<FaultConfig>().expect("valid in this test"),
            config
        );
        assert_eq!(
            "".parse::<FaultConfig>().expect("valid in this test"),
            FaultConfig::default()
        );
    }

    #[test]
    fn a_bad_config_names_the_setting_and_what_is_expected() {
        for (text, says) in [
            ("errors=1.5", "from 0 to 1"),
            ("errors=often", "from 0 to 1"),
            ("landed=2", "from 0 to 1"),
            ("latency=fast", "duration like 2ms"),
            ("seed=-1", "whole number"),
            ("on=deletes", "all, reads or writes"),
            ("errors", "NAME=VALUE"),
            ("jitter=1", "unknown setting"),
        ] {
            let error = text.parse::<FaultConfig>().unwrap_err().to_string();
            assert!(
                error.contains(&format!("`{text}`")) && error.contains(says),
                "{text}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn about_the_configured_share_of_calls_fail_and_each_says_it_was_injected() -> TestResult {
        let store = faulty("errors=0.1,seed=7");
        let counts = store.faults();
        let mut failed = 0;
        for i in 0..2000 {
            match store
                .put(&Path::from(format!("k/{i}")), PutPayload::from_static(b"x"))
                .await
            {
                Ok(_) => {}
                Err(e) => {
                    assert!(
                        e.to_string().contains(&format!("injected fault: put k/{i} failed")),
                        "{e}"
                    );
                    failed += 1;
                }
            }
        }
        assert_eq!((counts.operations(), counts.injected()), (2000, failed));
        assert!(
            (150..=250).contains(&failed),
            "{failed} of 2000 failed at a rate of 0.1"
        );
        Ok(())
    }

    #[tokio::test]
    async fn the_same_seed_fails_the_same_calls() {
        let mut runs = Vec::new();
        for _ in 0..2 {
            let store = faulty("errors=0.3,seed=42");
            let mut pattern = Vec::new();
            for i in 0..100 {
                pattern.push(matches!(
                    store.get(&Path::from(format!("k/{i}"))).await,
                    Err(object_store::Error::Generic { .. })
                ));
            }
            runs.push(pattern);
        }
        assert_eq!(runs[0], runs[1]);
        assert!(runs[0].contains(&true) && runs[0].contains(&false));
    }

    #[tokio::test]
    async fn a_failed_write_may_have_landed_and_reads_are_left_alone_when_only_writes_fail() -> TestResult {
        let store = faulty("errors=1,on=writes,seed=3");
        let mut landed = 0;
        for i in 0..40 {
            let key = Path::from(format!("k/{i}"));
            let options = PutOptions::from(PutMode::Create);
            let error = store
                .put_opts(&key, PutPayload::from_static(b"v"), options)
                .await
                .unwrap_err();
            match store.get(&key).await {
                Ok(read) => {
                    assert!(error.to_string().contains("reply was lost"), "{error}");
                    assert_eq!(read.bytes().await?, Bytes::from_static(b"v"));
                    landed += 1;
                }
                Err(object_store::Error::NotFound { .. }) => assert!(!error.to_string().contains("landed")),
                Err(other) => panic!("a read failed while only writes may: {other}"),
            }
        }
        assert!((5..=35).contains(&landed), "{landed} of 40 failed writes landed");
        let listed: Vec<_> = store.list(None).try_collect().await?;
        assert_eq!(listed.len(), landed);
        Ok(())
    }

    #[tokio::test]
    async fn a_write_that_fails_for_real_reports_its_own_error_not_an_injected_one() {
        let store = faulty("errors=1,on=writes,landed=1");
        let key = Path::from("k");
        let create = || store.put_opts(&key, PutPayload::from_static(b"v"), PutOptions::from(PutMode::Create));
        assert!(create().await.unwrap_err().to_string().contains("reply was lost"));
        assert!(matches!(create().await, Err(object_store::Error::AlreadyExists { .. })));
        assert_eq!((store.faults().operations(), store.faults().injected()), (2, 1));
    }

    #[tokio::test]
    async fn listings_fail_too() {
        let store = faulty("errors=1,on=reads");
        let listed: Result<Vec<_>> = store.list(Some(&Path::from("runs"))).try_collect().await;
        assert!(listed.unwrap_err().to_string().contains("injected fault: list runs"));
        assert!(store.list_with_delimiter(None).await.is_err());
        assert_eq!(store.faults().injected(), 2);
    }

    #[tokio::test]
    async fn every_call_waits_the_latency() -> TestResult {
        let store = faulty("latency=40ms");
        let started = std::time::Instant::now();
        store.put(&Path::from("k"), PutPayload::from_static(b"v")).await?;
        store.get(&Path::from("k")).await?;
        assert!(
            started.elapsed() >= Duration::from_millis(80),
            "{:?}",
            started.elapsed()
        );
        Ok(())
    }
}
