//! An S3 server that ignores `If-None-Match: *`, for the tests that show a
//! host refuses such a store: s3rver (npm, pinned by mk/s3rver), one per
//! test process, on loopback, dying with it. `make test` installs it under
//! `target/tools/s3rver`.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::root;

/// The bucket the server makes at its start.
const BUCKET: &str = "stepstone";

/// The shared s3rver of this test process.
pub struct S3rver {
    endpoint: String,
}

static SERVER: OnceLock<S3rver> = OnceLock::new();

/// The s3rver of this test process, started on first use.
pub fn s3rver() -> &'static S3rver {
    SERVER.get_or_init(|| S3rver {
        endpoint: super::server_for_this_process("s3rver", start),
    })
}

impl S3rver {
    /// A store URL in the server's bucket.
    pub fn store(&self) -> String {
        format!("s3://{BUCKET}/test-{}", std::process::id())
    }

    /// What a client needs in its environment to reach the server (which
    /// takes any well-formed signature).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "S3RVER".into()),
            ("AWS_SECRET_ACCESS_KEY", "S3RVER".into()),
        ]
    }
}

/// Starts s3rver on a port the system picks; returns its endpoint, read
/// from the line it prints once it listens.
fn start() -> (String, super::ServerOutput) {
    let dir = root().join("target/s3rver").join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).expect("an s3rver directory");
    let mut command = Command::new(super::tool("s3rver/node_modules/.bin/s3rver", "s3rver"));
    command
        .arg("--directory")
        .arg(&dir)
        .args([
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--silent",
            "--configure-bucket",
            BUCKET,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    super::dies_with_its_thread(&mut command);
    let mut server = command.spawn().expect("s3rver starts (it needs node)");
    let mut output = std::io::BufReader::new(server.stdout.take().expect("stdout is piped")).lines();
    let listening = output
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("S3rver listening on ").map(str::to_owned))
        .expect("s3rver says where it listens");
    // The server is not waited for: it lives as long as this process.
    std::mem::forget(server);
    (format!("http://{listening}"), output)
}
