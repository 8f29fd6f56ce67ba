//! The harness of the end-to-end tests: a `stepstone` binary with a data
//! directory of its own, and the example guests `make guests` built.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_owned()
}

/// An example guest component, built by `make guests`.
pub fn guest(name: &str) -> PathBuf {
    let path = root().join("target/guests").join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is missing: run `make guests` (or `make test`)", path.display());
    path
}

/// The `stepstone` binary of this build (target/<profile>/stepstone, beside
/// the directory this test runs from).
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("tests run from target/<profile>/deps");
    let binary = profile_dir.join("stepstone");
    assert!(binary.exists(), "{} is missing: run `make host`", binary.display());
    binary
}

/// A host: the `stepstone` binary over a fresh data directory.
pub struct Host {
    data: tempfile::TempDir,
}

impl Default for Host {
    fn default() -> Self {
        Self::new()
    }
}

impl Host {
    pub fn new() -> Self {
        Self { data: tempfile::tempdir().expect("a temporary data directory") }
    }

    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// `stepstone ARGS` against this host's data directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(binary());
        command.args(args).env("STEPSTONE_DATA", self.data.path()).env("RUST_LOG", "stepstone=info");
        command
    }

    /// Runs `stepstone ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> Run {
        let output = self.command(args).output().expect("stepstone starts");
        Run(output)
    }

    /// Starts `stepstone ARGS` in the background.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("stepstone starts")
    }

    /// `stepstone status RUN --json`, or `None` while the run does not exist.
    pub fn status(&self, run: &str) -> Option<Value> {
        let status = self.run(&["status", run, "--json"]);
        status.0.status.success().then(|| status.json())
    }

    /// `stepstone history RUN --json`.
    pub fn history(&self, run: &str) -> Vec<Value> {
        match self.run(&["history", run, "--json"]).success().json() {
            Value::Array(entries) => entries,
            other => panic!("history is not a list: {other}"),
        }
    }

    /// Waits until `ready(status)` holds for `run`, for at most 60 s.
    pub fn wait_for(&self, run: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.status(run).filter(|status| ready(status)) {
                return status;
            }
            assert!(Instant::now() < deadline, "run {run} never became {what}: {:?}", self.status(run));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every file under the data directory's object store.
    pub fn stored_objects(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() { walk(&path, found) } else { found.push(path) }
            }
        }
        let mut found = Vec::new();
        walk(&self.data.path().join("objects"), &mut found);
        found
    }
}

/// A finished `stepstone` process.
pub struct Run(pub Output);

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }

    /// Asserts the process succeeded.
    pub fn success(self) -> Self {
        assert!(self.0.status.success(), "stepstone failed:\nstdout: {}\nstderr: {}", self.stdout(), self.stderr());
        self
    }

    /// Asserts the process failed, and returns its stderr.
    pub fn failure(self) -> String {
        assert!(!self.0.status.success(), "stepstone succeeded unexpectedly:\nstdout: {}", self.stdout());
        self.stderr()
    }

    /// The last line of stdout, as JSON.
    pub fn json_line(&self) -> Value {
        let stdout = self.stdout();
        let last = stdout.lines().last().unwrap_or_else(|| panic!("no output; stderr: {}", self.stderr()));
        serde_json::from_str(last).unwrap_or_else(|e| panic!("last line {last:?} is not JSON: {e}"))
    }

    /// All of stdout, as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout()))
    }
}

/// The path of a guest as the `&str` the command line takes.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("paths here are UTF-8")
}
