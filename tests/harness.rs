//! The harness of the end-to-end tests: a `stepstone` binary with a data
//! directory of its own, and the example guests `make guests` built.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod seaweedfs;
pub use seaweedfs::{BUCKET, SeaweedFs, seaweedfs};

mod s3rver;
pub use s3rver::{S3rver, s3rver};

mod store_proxy;
pub use store_proxy::StoreProxy;

mod origin;
pub use origin::{Charge, FencedWrite, FullBacklog, Origin, PAYMENTS_API_KEY, Received};

mod collector;
pub use collector::{Collector, ReceivedSpan};

mod recipe;
pub use recipe::{Recipe, recipes};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// What a server started for the tests prints, line by line.
pub type ServerOutput = std::io::Lines<std::io::BufReader<std::process::ChildStdout>>;

/// Runs `start` on a thread of its own that never ends before the test
/// process does, and returns what it found (the server's address): a
/// server spawned there with [`dies_with_its_thread`] is killed when the
/// test process ends (PR_SET_PDEATHSIG follows the thread). What the
/// server prints after is read on that thread, so it never blocks on a
/// full pipe.
pub fn server_for_this_process<T: Send + 'static>(
    name: &str,
    start: impl FnOnce() -> (T, ServerOutput) + Send + 'static,
) -> T {
    let (started, found) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let (found, output) = start();
            started.send(found).expect("the test waits for the server");
            output.for_each(drop);
            loop {
                std::thread::park();
            }
        })
        .expect("a thread for the server");
    found.recv().expect("the server thread answers")
}

/// Makes the process `command` spawns die with the thread that spawned it.
pub fn dies_with_its_thread(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure only makes one async-signal-safe system call.
    unsafe {
        command.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
}

/// A tool `make test` installs under target/tools/ (`make TARGET` installs
/// it alone), at `path` there.
pub fn tool(path: &str, target: &str) -> PathBuf {
    let tool = root().join("target/tools").join(path);
    assert!(
        tool.exists(),
        "{} is missing: run `make test`, which installs it (or `make {target}`)",
        tool.display()
    );
    tool
}

/// A version mk/polyglot.mk pins a tool at (its line `NAME := VERSION`).
pub fn polyglot_pin(name: &str) -> String {
    let make = std::fs::read_to_string(root().join("mk/polyglot.mk")).expect("mk/polyglot.mk");
    let line = make
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("mk/polyglot.mk pins no {name}"));
    line.split(":=").nth(1).expect("NAME := VERSION").trim().to_owned()
}

/// An example guest component, built by `make guests`.
pub fn guest(name: &str) -> PathBuf {
    let path = root().join("target/guests").join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make guests` (or `make test`)",
        path.display()
    );
    path
}

/// The `stepstone` binary of this build (target/<profile>/stepstone, beside
/// the directory this test runs from).
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps");
    let binary = profile_dir.join("stepstone");
    assert!(binary.exists(), "{} is missing: run `make host`", binary.display());
    binary
}

/// A host: the `stepstone` binary over a fresh data directory.
pub struct Host {
    data: tempfile::TempDir,
    /// The compiled-code cache: by default one for every test, so each guest
    /// is compiled once per `make test`, not once per test (Python's takes
    /// about a minute).
    cache: PathBuf,
    /// The `--store` URL, when the store is not the data directory's.
    store: Option<String>,
    /// Variables every command of this host gets.
    env: Vec<(String, String)>,
}

impl Default for Host {
    fn default() -> Self {
        Self::new()
    }
}

impl Host {
    pub fn new() -> Self {
        Self {
            data: tempfile::tempdir().expect("a temporary data directory"),
            cache: root().join("target/test-code-cache"),
            store: None,
            env: Vec::new(),
        }
    }

    /// A host whose store is a fresh prefix of the test process's
    /// SeaweedFS, reached over S3.
    pub fn on_s3() -> Self {
        Self {
            store: Some(seaweedfs().fresh_store()),
            ..Self::new()
        }
    }

    /// Another host over the same store as `other`: a data directory (and
    /// process) of its own, as on another machine sharing the bucket.
    pub fn sharing_store_with(other: &Host) -> Self {
        Self {
            store: other.store.clone(),
            ..Self::new()
        }
    }

    /// A host with a code cache of its own, for tests that time compilation.
    pub fn with_own_cache() -> Self {
        let data = tempfile::tempdir().expect("a temporary data directory");
        let cache = data.path().join("cache");
        Self {
            data,
            cache,
            store: None,
            env: Vec::new(),
        }
    }

    /// The same host, its commands run with `name` set to `value`.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// `stepstone ARGS` against this host's data directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(binary());
        command.args(args);
        self.environ(command)
    }

    /// `bash -euo pipefail -c SCRIPT` with the tools `make guests` installs
    /// on the PATH, its `stepstone` (this build's) running against this host.
    pub fn shell(&self, script: &str) -> Command {
        let mut command = Command::new("bash");
        command
            .args(["-euo", "pipefail", "-c", script])
            .env("PATH", recipe::tools_path());
        self.environ(command)
    }

    /// `command` with this host's environment.
    fn environ(&self, mut command: Command) -> Command {
        command
            .env("STEPSTONE_DATA", self.data.path())
            .env("STEPSTONE_CACHE_DIR", &self.cache)
            .env("RUST_LOG", "stepstone=info")
            // Thousands of runs on a machine the suite shares: the synced
            // store has its own tests (tests/storage_faults.rs, and the
            // journal's conformance suite on every backend).
            .env("STEPSTONE_DURABILITY", "no-fsync");
        if let Some(store) = &self.store {
            command.env("STEPSTONE_STORE", store).envs(seaweedfs().env());
        }
        // The host's own variables last: they may say otherwise (another
        // way to the store, say).
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        command
    }

    /// Runs `stepstone ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> Run {
        let output = self.command(args).output().expect("stepstone starts");
        Run(output)
    }

    /// `stepstone run WASM WORKFLOW` as run `run` on `input`, left
    /// suspended in the store at its first wait longer than a second.
    pub fn run_detached(&self, wasm: &Path, workflow: &str, run: &str, input: &str) -> Run {
        let args = [
            "run",
            arg(wasm),
            workflow,
            "--run-id",
            run,
            "--input",
            input,
            "--detach-after",
            "1s",
        ];
        self.run(&args).success()
    }

    /// Starts `stepstone ARGS` in the background.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("stepstone starts")
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
            assert!(
                Instant::now() < deadline,
                "run {run} never became {what}: {:?}",
                self.status(run)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every file of the tenants' data under the data directory's object
    /// store (not the hosts' heartbeats and wake-ups, under `cluster/`).
    pub fn stored_objects(&self) -> Vec<PathBuf> {
        files_under(&self.data.path().join("objects/tenants"))
    }

    /// Whether the store is the data directory's (`DATA_DIR/objects`), not
    /// one a `--store` URL names.
    pub fn is_local(&self) -> bool {
        self.store.is_none()
    }

    /// Every object whose key starts with `prefix`, by key relative to the
    /// store's root, as a client of the store lists and reads them, whatever
    /// the store. `tenants/` holds all the tenants' data; the hosts'
    /// heartbeats (`cluster/`) and reachability probes (`probes/`) are
    /// outside it. A put killed half-way is not among them: its key holds
    /// what it held before (on the local file system the half is in a
    /// staging file `KEY#N`, which is not listed).
    pub fn stored(&self, prefix: &str) -> BTreeMap<String, Vec<u8>> {
        if let Some(store) = &self.store {
            return seaweedfs().stored(store, prefix);
        }
        let root = self.data.path().join("objects");
        // Only the folder the prefix is in need be looked through.
        let folder = prefix.rsplit_once('/').map_or("", |(folder, _)| folder);
        let mut stored = BTreeMap::new();
        for path in files_under(&root.join(folder)) {
            let key = path.strip_prefix(&root).ok().and_then(Path::to_str);
            let key = key.expect("a key is a UTF-8 path under the store").to_owned();
            let staging = path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.contains('#'));
            if key.starts_with(prefix) && !staging {
                stored.insert(key, std::fs::read(&path).expect("a stored file is readable"));
            }
        }
        stored
    }
}

/// Every file under `dir`, none if it does not exist.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, found)
            } else {
                found.push(path)
            }
        }
    }
    let mut found = Vec::new();
    walk(dir, &mut found);
    found
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
        assert!(
            self.0.status.success(),
            "stepstone failed:\nstdout: {}\nstderr: {}",
            self.stdout(),
            self.stderr()
        );
        self
    }

    /// Asserts the process failed, and returns its stderr.
    pub fn failure(self) -> String {
        assert!(
            !self.0.status.success(),
            "stepstone succeeded unexpectedly:\nstdout: {}",
            self.stdout()
        );
        self.stderr()
    }

    /// The last line of stdout, as JSON.
    pub fn json_line(&self) -> Value {
        let stdout = self.stdout();
        let last = stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("no output; stderr: {}", self.stderr()));
        serde_json::from_str(last).unwrap_or_else(|e| panic!("last line {last:?} is not JSON: {e}"))
    }

    /// All of stdout, as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout()))
    }
}

/// Input for the `order` example: order `id` for a book at 12.00, with the
/// given `sleep_ms` and any other fields of `extra` (`{}` for none).
pub fn order_input(id: &str, sleep_ms: u64, extra: Value) -> Value {
    let mut order = serde_json::json!({"order_id": id, "item": "book", "amount_cents": 1200, "sleep_ms": sleep_ms});
    let fields = order.as_object_mut().expect("an object");
    fields.extend(extra.as_object().cloned().unwrap_or_default());
    order
}

/// The path of a guest as the `&str` the command line takes.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("paths here are UTF-8")
}

/// SHA-256 of a token, as the tenants file stores it.
/// A tenants file of `tenants`, each an id and its token, with no quotas.
pub fn tenants_file(tenants: &[(&str, &str)]) -> String {
    tenants
        .iter()
        .map(|(id, token)| {
            format!(
                "[[tenants]]\nid = \"{id}\"\ntoken_sha256 = [\"{}\"]\n",
                token_hash(token)
            )
        })
        .collect()
}

pub fn token_hash(token: &str) -> String {
    let output = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), token.as_bytes())?;
            child.wait_with_output()
        })
        .expect("sha256sum runs");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_owned()
}

/// `stepstone secret set NAME`, the value on stdin, with the host key.
pub fn set_secret(host: &Host, name: &str, value: &str, key: Option<&str>) -> Output {
    let mut command = host.command(&["secret", "set", name]);
    if let Some(key) = key {
        command.env("STEPSTONE_SECRET_KEY", key);
    }
    output_given(command, value)
}

/// Runs `command` with `input` on its standard input; what it printed.
pub fn output_given(mut command: Command, input: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("stepstone starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input.as_bytes())
        .expect("the input is written");
    child.wait_with_output().expect("stepstone exits")
}

/// A `stepstone serve` process on a loopback port, with its own data and
/// tenants file. Killed when dropped.
pub struct Server {
    pub host: Host,
    pub url: String,
    /// The operator's `/metrics`, on an address of its own.
    pub metrics_url: String,
    /// The arguments it was started with, to start it again.
    args: Vec<String>,
    process: Child,
    client: reqwest::blocking::Client,
}

impl Server {
    /// Starts a server whose tenants file holds `tenants` (TOML text).
    pub fn start(tenants: &str) -> Self {
        Self::start_on(Host::new(), tenants)
    }

    /// Starts a server on `host` whose tenants file holds `tenants`.
    pub fn start_on(host: Host, tenants: &str) -> Self {
        let config = host.data_dir().join("stepstone.toml");
        std::fs::write(&config, tenants).expect("the tenants file is written");
        Self::start_with(host, &["--config", arg(&config)])
    }

    /// Starts `stepstone serve ARGS` on a loopback port of its choosing,
    /// with its metrics on another.
    pub fn start_with(host: Host, args: &[&str]) -> Self {
        let mut full = vec!["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"];
        full.extend_from_slice(args);
        // The server logs a lot: into a file, so a full pipe never blocks it;
        // appended to, so the log of a restarted server holds every run of it.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(host.data_dir().join("serve.log"))
            .expect("a log file");
        let mut process = host
            .command(&full)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("stepstone starts");
        let mut stdout = std::io::BufReader::new(process.stdout.take().expect("stdout is piped"));
        let mut printed = |prefix: &str| {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut stdout, &mut line).expect("the server prints its addresses");
            line.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected {prefix:?}, got {line:?}"))
                .to_owned()
        };
        let url = printed("listening on ");
        let metrics_url = printed("metrics on ");
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(90))
            .build()
            .expect("a client");
        let args = args.iter().map(|a| (*a).to_owned()).collect();
        Self {
            host,
            url,
            metrics_url,
            args,
            process,
            client,
        }
    }

    /// Sends the server `signal` (`KILL`, `TERM`), waits for it to exit,
    /// and starts a new one on the same data.
    pub fn restart_after(mut self, signal: &str) -> Self {
        self.send(signal);
        let exited = self.process.wait().expect("reaped");
        if signal == "TERM" {
            assert!(exited.success(), "a SIGTERM'd server exits cleanly: {exited}");
        }
        self.restart()
    }

    /// Starts a new server on the same data, the old one having exited.
    pub fn restart(mut self) -> Self {
        let host = std::mem::take(&mut self.host);
        let args: Vec<String> = std::mem::take(&mut self.args);
        Self::start_with(host, &args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Sends the server `signal` (`STOP`, `CONT`, `KILL`, ...) and goes on.
    pub fn send(&self, signal: &str) {
        let pid = self.process.id().to_string();
        let sent = Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -s {signal} {pid} failed");
    }

    /// Kills the server with SIGKILL and waits for it to exit.
    pub fn kill(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }

    /// How the server exited, if it has.
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.process.try_wait().expect("the server's status")
    }

    /// Waits until the server has logged `text`, for at most `timeout`.
    pub fn await_log(&self, text: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(text) {
            assert!(
                Instant::now() < deadline,
                "the server did not log {text:?} within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.host.data_dir().join("serve.log")).unwrap_or_default()
    }

    /// The token a server started without `--config` printed for its one
    /// tenant.
    pub fn printed_token(&self) -> String {
        self.log()
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("sst_"))
            .expect("the token is printed")
            .to_owned()
    }

    /// The server's resident memory, in bytes (from /proc).
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.id())).expect("/proc is readable");
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .expect("VmRSS is listed");
        kib.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .expect("a number of kB")
            * 1024
    }

    /// What the operator's `/metrics` shows now.
    pub fn metrics_text(&self) -> String {
        let reply = self.client.get(&self.metrics_url).send().expect("the metrics answer");
        assert_eq!(reply.status(), 200);
        reply.text().expect("metrics are text")
    }

    /// The value of one metric line (`name{labels}`), 0 if absent.
    pub fn metric(&self, series: &str) -> f64 {
        let text = self.metrics_text();
        text.lines()
            .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .map_or(0.0, |value| value.parse().expect("a number"))
    }

    /// Waits until metric `series` reaches `at_least`, for at most `timeout`.
    pub fn await_metric(&self, series: &str, at_least: f64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.metric(series);
            if value >= at_least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{series} stayed at {value}, below {at_least}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends this test's requests from `address` (a loopback one, say
    /// 127.0.0.2) from now on: another source than the rest of the test's
    /// connections, as the host's connection caps count them.
    pub fn ask_from(&mut self, address: std::net::IpAddr) {
        self.client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(90))
            .local_address(address)
            .build()
            .expect("a client");
    }

    /// A request to `path` as `token`.
    pub fn request(&self, method: reqwest::Method, path: &str, token: &str) -> reqwest::blocking::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token)
    }

    /// Waits, a minute at most, until the run `run` of the tenant of `token`
    /// is in `state`; its status then.
    pub fn await_state(&self, token: &str, run: &str, state: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = self.get(&format!("/v1/runs/{run}"), token).body;
            if status["state"] == state {
                return status;
            }
            assert!(Instant::now() < deadline, "{run} never became {state}: {status}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn get(&self, path: &str, token: &str) -> Reply {
        Reply::of(self.request(reqwest::Method::GET, path, token).send())
    }

    pub fn post_json(&self, path: &str, token: &str, body: &Value) -> Reply {
        Reply::of(self.request(reqwest::Method::POST, path, token).json(body).send())
    }

    pub fn post_bytes(&self, path: &str, token: &str, body: Vec<u8>) -> Reply {
        Reply::of(self.request(reqwest::Method::POST, path, token).body(body).send())
    }

    /// Starts run `run` of `workflow` in the guest `component` (uploaded
    /// under its name, if it is not yet) on `input` as `token`, waits for it
    /// to end, and returns its output.
    pub fn run_to_end(&self, token: &str, component: &str, workflow: &str, input: &Value, run: &str) -> Value {
        self.upload(token, component);
        let body = serde_json::json!({"component": component, "workflow": workflow, "input": input, "run_id": run});
        self.post_json("/v1/runs", token, &body).expect(202);
        let done = self.get(&format!("/v1/runs/{run}/wait?timeout=60s"), token).expect(200);
        done["output"].clone()
    }

    /// Reads the server-sent events `request` answers with, handing each
    /// to `each` as it comes (`false` stops reading), until the server
    /// ends the response; returns those read. No timeout: the events end
    /// when the server says.
    pub fn events(
        &self,
        request: reqwest::blocking::RequestBuilder,
        mut each: impl FnMut(&ServerEvent) -> bool,
    ) -> Vec<ServerEvent> {
        let response = request
            .timeout(Duration::from_secs(600))
            .send()
            .expect("the server answers");
        assert_eq!(response.status().as_u16(), 200, "the events are served");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(response));
        let (mut read, mut event) = (Vec::new(), ServerEvent::default());
        while let Some(Ok(line)) = lines.next() {
            if !line.is_empty() {
                let (field, value) = line.split_once(':').unwrap_or((&line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                match field {
                    "event" => event.event = value,
                    "id" => event.id = Some(value),
                    "data" if event.data.is_empty() => event.data = value,
                    "data" => event.data = format!("{}\n{value}", event.data),
                    _ => {}
                }
                continue;
            }
            let done = std::mem::take(&mut event);
            if done.event.is_empty() && done.data.is_empty() {
                continue;
            }
            let go_on = each(&done);
            read.push(done);
            if !go_on {
                break;
            }
        }
        read
    }

    /// The console's session cookie a sign-in with `token` sets.
    pub fn console_session(&self, token: &str) -> String {
        let client = reqwest::blocking::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a client");
        let answer = client
            .post(format!("{}/ui/login", self.url))
            .form(&[("token", token)])
            .send()
            .expect("an answer");
        assert_eq!(answer.status().as_u16(), 303);
        let cookie = answer.headers()["set-cookie"].to_str().expect("text");
        cookie.split(';').next().expect("a cookie").to_owned()
    }

    /// Uploads an example guest under its name.
    /// Polls `path` until it answers 404 (retention deleted what it
    /// names), for at most 30 s.
    pub fn await_gone(&self, path: &str, token: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.get(path, token).status != 404 {
            assert!(Instant::now() < deadline, "{path} was never deleted");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn upload(&self, token: &str, name: &str) -> Value {
        let bytes = std::fs::read(guest(name)).expect("the guest is built");
        self.post_bytes(&format!("/v1/components?name={name}"), token, bytes)
            .expect(201)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// One server-sent event: its `event` field, its `id`, and its `data`
/// (its data lines joined).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

/// An HTTP answer.
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    fn of(response: reqwest::Result<reqwest::blocking::Response>) -> Self {
        let response = response.expect("the server answers");
        let (status, headers) = (response.status().as_u16(), response.headers().clone());
        let text = response.text().expect("a body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Self { status, headers, body }
    }

    /// Asserts the status and returns the body.
    pub fn expect(self, status: u16) -> Value {
        assert_eq!(self.status, status, "body: {}", self.body);
        self.body
    }
}

/// One line of `docs/RELIABILITY.md`: a fault a suite tried, how many times,
/// what happened, and how many recorded results were lost (should be 0).
///
/// Suites call [`record_reliability`] after their assertions pass, so a
/// result on file is a result the suite checked; `make reliability` turns the
/// files into the report.
#[derive(serde::Serialize)]
pub struct ReliabilityResult<'a> {
    /// The suite (test file), e.g. "crash".
    pub suite: &'a str,
    /// The fault tried, e.g. "SIGKILL after journal write 12".
    pub fault: &'a str,
    /// How many times it was tried.
    pub trials: u64,
    /// What the host did, e.g. "run completed with the uninterrupted output".
    pub outcome: &'a str,
    /// Recorded results lost (journal entries, step outputs, signals).
    pub lost: u64,
}

/// Files `result` under `target/reliability/` for the report.
pub fn record_reliability(result: &ReliabilityResult<'_>) {
    let dir = root().join("target/reliability");
    std::fs::create_dir_all(&dir).expect("target/reliability can be created");
    let slug: String = format!("{}-{}", result.suite, result.fault)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let json = serde_json::to_string_pretty(result).expect("a result serialises");
    std::fs::write(dir.join(format!("{slug}.json")), json).expect("the result is written");
}
