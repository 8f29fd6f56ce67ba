//! Native code compiled from components, cached on local disk so a restart or
//! a second `stepstone run` does not compile again.
//!
//! Keys are the component's digest and the engine's fingerprint (wasmtime
//! version, target, and every setting that changes code), so a cached file is
//! only ever loaded by an engine that could have written it. The cache lives
//! on local disk only: native code is never loaded from shared storage.
//!
//! Compiling an upload runs on background-priority threads of its own, so a
//! huge upload takes only the CPU that runs leave idle, and never queues in
//! front of a compilation a run is waiting for.

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Who waits for a compilation, which decides the threads it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// A run needs the code now: tokio's blocking threads and rayon's pool.
    Run,
    /// A new upload: the background-priority compile threads.
    Upload,
}

/// The on-disk cache, or none (then every load compiles), and the threads
/// that compile uploads. Clones share both.
#[derive(Clone)]
pub struct CodeCache {
    dir: Option<Arc<Dir>>,
    uploads: Option<Arc<rayon::ThreadPool>>,
}

impl CodeCache {
    /// A cache in `dir`, created if absent. If it cannot be opened, the host
    /// still works, compiling every time, and says so.
    pub fn open(dir: &Path) -> Self {
        let opened = std::fs::create_dir_all(dir).and_then(|()| Dir::open_ambient_dir(dir, ambient_authority()));
        match opened {
            Ok(dir) => Self {
                dir: Some(Arc::new(dir)),
                ..Self::disabled()
            },
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "compiled-code cache disabled: {e}");
                Self::disabled()
            }
        }
    }

    /// No on-disk cache, so every load compiles; uploads still compile on
    /// their own background-priority threads.
    pub fn disabled() -> Self {
        Self {
            dir: None,
            uploads: upload_compile_threads(),
        }
    }

    /// The compiled component, from the cache or freshly compiled (and then
    /// cached). Reading, compiling and writing all run off the async
    /// threads; compilation where `urgency` says.
    pub(crate) async fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
        urgency: Urgency,
    ) -> wasmtime::Result<Component> {
        let file = format!("{digest}-{}.cwasm", fingerprint(engine));
        let started = std::time::Instant::now();
        let (dir, reader, cached_file) = (self.dir.clone(), engine.clone(), file.clone());
        let cached = tokio::task::spawn_blocking(move || cached(dir.as_deref()?, &reader, &cached_file));
        if let Ok(Some(component)) = cached.await {
            tracing::debug!(%digest, elapsed_ms = crate::clock::millis(started.elapsed()), "compiled code loaded from cache");
            return Ok(component);
        }
        // Said before, not after: a big guest's first compile (Python or
        // JavaScript: 15-35 s) would otherwise look like a hang.
        match &self.dir {
            Some(_) => tracing::info!(
                %digest,
                "compiling the component to native code, which takes a while the first time (up to a minute for a Python or JavaScript guest); the result is cached, so the next start is quick"
            ),
            None => {
                tracing::info!(%digest, "compiling the component to native code (no cache: each start compiles again)")
            }
        }
        let (dir, engine, owned) = (self.dir.clone(), engine.clone(), bytes.to_vec());
        let threads = self.uploads.clone().filter(|_| urgency == Urgency::Upload);
        let component = tokio::task::spawn_blocking(move || -> wasmtime::Result<Component> {
            // wasmtime compiles functions in parallel on the rayon pool it
            // is called from.
            let component = match threads {
                Some(threads) => threads.install(|| Component::new(&engine, owned)),
                None => Component::new(&engine, owned),
            }?;
            if let Some(dir) = &dir {
                store(dir, &file, &component);
            }
            Ok(component)
        })
        .await
        .map_err(wasmtime::Error::msg)??;
        tracing::info!(%digest, elapsed_ms = crate::clock::millis(started.elapsed()), "component compiled");
        Ok(component)
    }
}

/// `compiled`'s code, loaded into `engine`, which compiles alike (see
/// `Engines::share_code`): a copy of the code in milliseconds, where a
/// compile of a large guest takes seconds.
pub(crate) async fn carry_over(compiled: &Component, engine: &Engine) -> wasmtime::Result<Component> {
    let (compiled, engine) = (compiled.clone(), engine.clone());
    tokio::task::spawn_blocking(move || {
        let bytes = compiled.serialize()?;
        // SAFETY: the bytes were just serialized, in this process, from
        // code compiled by an engine whose compatibility hash is `engine`'s;
        // wasmtime still checks the header.
        unsafe { Component::deserialize(&engine, &bytes) }
    })
    .await
    .map_err(wasmtime::Error::msg)?
}

fn cached(dir: &Dir, engine: &Engine, file: &str) -> Option<Component> {
    let bytes = dir.read(file).ok()?;
    // SAFETY: the file was written by `store` below from
    // `Component::serialize` of an engine with this fingerprint, into a
    // directory only this host writes; wasmtime still checks the header
    // and refuses code built for another engine configuration.
    match unsafe { Component::deserialize(engine, &bytes) } {
        Ok(component) => Some(component),
        Err(e) => {
            tracing::warn!(file, "ignoring unusable cached code: {e:#}");
            None
        }
    }
}

fn store(dir: &Dir, file: &str, component: &Component) {
    let written = component.serialize().map_err(|e| e.to_string()).and_then(|bytes| {
        // Write aside, then rename: a reader never sees half a file.
        let partial = format!("{file}.{}.partial", std::process::id());
        dir.write(&partial, bytes)
            .and_then(|()| dir.rename(&partial, dir, file))
            .map_err(|e| e.to_string())
    });
    if let Err(e) = written {
        tracing::warn!(file, "cannot cache compiled code: {e}");
    }
}

/// One compile thread per core, each lowered to background priority (nice
/// 10). Without them (the pool cannot start) uploads compile like runs do.
fn upload_compile_threads() -> Option<Arc<rayon::ThreadPool>> {
    let pool = rayon::ThreadPoolBuilder::new()
        .thread_name(|n| format!("stepstone-upload-compile-{n}"))
        .start_handler(|_| {
            // On Linux a nice value is per thread: only these threads yield.
            if let Err(e) = rustix::process::nice(10) {
                tracing::debug!("upload compile thread keeps normal priority: {e}");
            }
        })
        .build();
    match pool {
        Ok(pool) => Some(Arc::new(pool)),
        Err(e) => {
            tracing::warn!("uploads compile on the shared threads: {e}");
            None
        }
    }
}

/// A stable name for everything about `engine` that compiled code depends on.
fn fingerprint(engine: &Engine) -> String {
    struct Sha(Sha256);
    impl Hasher for Sha {
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
        fn finish(&self) -> u64 {
            unreachable!("only the full digest is read")
        }
    }
    let mut hasher = Sha(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..8])
}
