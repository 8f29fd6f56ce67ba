//! The API's edges, pushed on as a hostile tenant (or a leaked token's
//! holder) would: a token taken out of the tenants file stops working
//! within seconds on every host, console sessions with it; each route reads
//! no more body than what it accepts; a client that never finishes its
//! request's head is cut off; a sign-in that cannot go on sets no cookie;
//! the console's inputs (token, workflow filter, cancel reason) are held at
//! their limits.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;
use stepstone_e2e::{Host, ReliabilityResult, Server, arg, record_reliability, token_hash};

const LEAKED: &str = "sst_leaked";
const KEPT: &str = "sst_kept";
const NEW: &str = "sst_new";
/// How soon every host must have read a changed tenants file.
const CONVERGED_WITHIN: Duration = Duration::from_secs(5);

fn record(fault: &str, outcome: &str) {
    record_reliability(&ReliabilityResult {
        suite: "api_edges",
        fault,
        trials: 1,
        outcome,
        lost: 0,
    });
}

/// A tenants file: `acme` with `tokens`, under `quotas` (TOML lines).
fn tenants_file(tokens: &[&str], quotas: &str) -> String {
    let hashes: Vec<String> = tokens.iter().map(|t| format!("\"{}\"", token_hash(t))).collect();
    format!(
        "[[tenants]]\nid = \"acme\"\ntoken_sha256 = [{}]\n[tenants.quotas]\n{quotas}\n",
        hashes.join(", ")
    )
}

/// Waits until `done` holds, for at most `within`; how long it took.
fn within(within: Duration, what: &str, done: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what} not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

fn no_redirects() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

/// The status of the console's runs page for `cookie`.
fn console_status(server: &Server, cookie: &str) -> u16 {
    let answer = no_redirects()
        .get(format!("{}/ui/runs", server.url))
        .header("cookie", cookie)
        .send()
        .expect("an answer");
    answer.status().as_u16()
}

#[test]
fn a_token_taken_out_of_the_tenants_file_ends_within_seconds_on_every_host() {
    let first = Host::new();
    let config = first.data_dir().join("stepstone.toml");
    std::fs::write(&config, tenants_file(&[LEAKED, KEPT], "")).expect("written");
    let hosts = [
        Server::start_with(first, &["--config", arg(&config)]),
        Server::start_with(Host::new(), &["--config", arg(&config)]),
    ];
    let session = hosts[0].console_session(LEAKED);
    assert_eq!(console_status(&hosts[0], &session), 200);
    for server in &hosts {
        assert_eq!(server.get("/v1/components", LEAKED).status, 200);
    }

    // Revoked, and acme's payloads held to 10 bytes, in one edit.
    std::fs::write(&config, tenants_file(&[KEPT], "max_payload_bytes = 10")).expect("written");
    let took = within(CONVERGED_WITHIN, "the revocation", || {
        hosts
            .iter()
            .all(|server| server.get("/v1/components", LEAKED).status == 401)
    });
    assert_eq!(
        console_status(&hosts[0], &session),
        303,
        "the session ended with its token"
    );
    for server in &hosts {
        assert_eq!(server.get("/v1/components", KEPT).status, 200);
        let signal = server.post_bytes("/v1/runs/r/signals/s", KEPT, b"12345678901".to_vec());
        assert_eq!(signal.status, 413, "the new quota holds: {}", signal.body);
    }

    // A file being written (empty, or half a line) is not taken: the
    // tenants read before stay.
    for broken in ["", "[[tenants]]\nid = "] {
        std::fs::write(&config, broken).expect("written");
        hosts[1].await_log("keeping the tenants read before", CONVERGED_WITHIN);
        assert_eq!(hosts[1].get("/v1/components", KEPT).status, 200, "{broken:?}");
    }

    // SIGHUP reads the file at once, and no longer ends the process.
    std::fs::write(&config, tenants_file(&[KEPT, NEW], "")).expect("written");
    hosts[0].send("HUP");
    hosts[0].await_log("SIGHUP: reading the tenants file again", CONVERGED_WITHIN);
    within(CONVERGED_WITHIN, "the new token", || {
        hosts[0].get("/v1/components", NEW).status == 200
    });
    record(
        "a leaked token taken out of the tenants file, with two hosts serving it",
        &format!(
            "refused (401) on both hosts {} ms after the edit, and its console session ended; a half-written file was not taken; SIGHUP reads the file at once",
            took.as_millis()
        ),
    );
}

/// Sends a request's head announcing `length` bytes of body, and none of
/// it: the status and body the server answers with before reading any.
fn announced(server: &Server, method: &str, path: &str, length: u64) -> (u16, String) {
    answer(head_sent(server, method, path, length))
}

/// A connection to `server` that has sent a request's head announcing
/// `length` bytes of body, and none of it yet.
fn head_sent(server: &Server, method: &str, path: &str, length: u64) -> TcpStream {
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).expect("the server accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {KEPT}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("the head is sent");
    stream
}

/// The status and the answer `stream` reads, head and body. The answer
/// only: the server keeps the connection a while, reading what a client
/// may still send of a refused body.
fn answer(stream: TcpStream) -> (u16, String) {
    let mut reader = std::io::BufReader::new(stream);
    let mut answer = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).expect("an answer");
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().expect("a length");
        }
        answer.push_str(&line);
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("the answer's body");
    answer.push_str(&String::from_utf8_lossy(&body));
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer)
}

#[test]
fn each_route_reads_no_more_body_than_what_it_accepts() {
    let quotas = "max_payload_bytes = 1000\nmax_component_bytes = 100000";
    let server = Server::start(&tenants_file(&[KEPT], quotas));
    for (method, path, over, limit) in [
        ("PUT", "/v1/secrets/key", 64 << 20, 65536),
        ("POST", "/v1/runs/r/signals/s", 1001, 1000),
        ("POST", "/v1/runs", 64 << 20, 1000 + 16384),
        // A payload of 10 GiB, refused from its head: nothing of it is read.
        ("POST", "/v1/runs", 10 << 30, 1000 + 16384),
        ("POST", "/v1/runs/r/signals/s", 10 << 30, 1000),
        ("POST", "/v1/schedules", 64 << 20, 1000 + 16384),
        ("POST", "/v1/runs/r/cancel", 1 << 20, 65536),
        ("POST", "/v1/runs/r/pause", 1 << 20, 65536),
        ("POST", "/v1/runs/r/resume", 1 << 20, 65536),
        ("POST", "/v1/runs/r/advance", 1 << 20, 65536),
        ("POST", "/v1/batch/pause", 1 << 20, 65536),
        ("POST", "/v1/batch/resume", 1 << 20, 65536),
        ("PUT", "/v1/hooks/h", 1 << 20, 65536),
        ("POST", "/v1/components", 100_001, 100_000),
    ] {
        let (status, answer) = announced(&server, method, path, over);
        assert_eq!(status, 413, "{method} {path}: {answer}");
        assert!(
            answer.contains(&format!("this endpoint's limit of {limit} bytes")),
            "{method} {path}: {answer}"
        );
    }
    // At the limit, the body is read and the request goes on.
    let signal = server.post_bytes("/v1/runs/r/signals/s", KEPT, vec![b'1'; 1000]);
    assert_eq!(signal.status, 404, "read, then no such run: {}", signal.body);
    // A body with no length that grows past the limit is refused as it does.
    let endless = std::iter::repeat_with(|| Ok::<_, std::io::Error>(vec![b'1'; 4096])).take(1 << 14);
    let streamed = server
        .request(reqwest::Method::POST, "/v1/runs/r/signals/s", KEPT)
        .body(reqwest::blocking::Body::new(ChunkedReader::new(endless)))
        .send();
    match streamed {
        Ok(reply) => assert_eq!(reply.status(), 413),
        // The server answers and closes while the client still sends.
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    record(
        "bodies announced past each route's limit (secrets, runs, schedules, signals, run controls, batches, hooks) and an endless chunked signal",
        "each 413 before the body was read (or as soon as it passed its limit), naming the route's own limit: a secret's 64 KiB (16384 characters of 4 bytes), the tenant's payload quota (a signal), 64 KiB for options (a cancel, pause, resume, advance, batch, a hook's definition)",
    );
}

/// At the default quota (64 MiB a payload), a 10 GiB input or signal is
/// refused from its head too, naming the limit.
#[test]
fn a_10_gib_payload_is_refused_from_its_head_at_the_default_quota() {
    let server = Server::start(&tenants_file(&[KEPT], ""));
    for (path, limit) in [("/v1/runs", (64 << 20) + 16384), ("/v1/runs/r/signals/s", 64 << 20)] {
        let (status, answer) = announced(&server, "POST", path, 10 << 30);
        assert_eq!(status, 413, "{path}: {answer}");
        assert!(
            answer.contains(&format!("this endpoint's limit of {limit} bytes")),
            "{path}: {answer}"
        );
    }
}

/// An endless body from an iterator of chunks, as a reader.
struct ChunkedReader<I> {
    chunks: I,
    current: std::io::Cursor<Vec<u8>>,
}

impl<I> ChunkedReader<I> {
    fn new(chunks: I) -> Self {
        Self {
            chunks,
            current: std::io::Cursor::new(Vec::new()),
        }
    }
}

impl<I: Iterator<Item = std::io::Result<Vec<u8>>>> Read for ChunkedReader<I> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let read = self.current.read(buf)?;
            if read > 0 {
                return Ok(read);
            }
            match self.chunks.next() {
                Some(chunk) => self.current = std::io::Cursor::new(chunk?),
                None => return Ok(0),
            }
        }
    }
}

#[test]
fn a_client_that_never_finishes_its_head_is_cut_off() {
    let server = Server::start(&tenants_file(&[KEPT], ""));
    for url in [&server.url, &server.metrics_url] {
        let address = url.trim_start_matches("http://").split('/').next().expect("an address");
        let mut stream = TcpStream::connect(address).expect("the server accepts");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("a timeout");
        let started = Instant::now();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .expect("half a head");
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        let held = started.elapsed();
        assert!(held < Duration::from_secs(20), "{url}: held {held:?}");
        assert!(
            !String::from_utf8_lossy(&rest).contains("200 OK"),
            "{url}: answered a head never finished"
        );
    }
    record(
        "a client that sends half a request head and waits (slowloris), on the API and the metrics listener",
        "the connection closed after the 10 s header-read timeout",
    );
}

/// Lets this process hold `wanted` files open (the soft limit raised up to
/// the hard one), or fails saying what to change.
fn raise_open_files_to(wanted: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `limit`.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0, "cannot read this process's limit of open files");
    let wanted = wanted as libc::rlim_t;
    assert!(
        limit.rlim_max >= wanted,
        "this test holds {wanted} connections open, and the hard limit of open files is {}: raise it (`ulimit -Hn {wanted}` as root)",
        limit.rlim_max
    );
    if limit.rlim_cur < wanted {
        limit.rlim_cur = wanted;
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) },
            0,
            "cannot raise the limit of open files"
        );
    }
}

/// Issue 56, item 1: connections that never speak (no byte at all, or
/// HTTP/2's preface and then nothing) from one source, far more than its
/// share: all but its share are closed unread as they are accepted (the
/// host counts them), the host answers another source meanwhile, and
/// those it kept are closed once they have asked for nothing for the first
/// request's time.
#[test]
fn five_thousand_silent_sockets_leave_the_host_answering_others() {
    const SILENT: usize = 5_000;
    /// The host's `MAX_CONNECTIONS_PER_SOURCE`, and its `FIRST_REQUEST_WITHIN`.
    const SHARE: usize = 256;
    const FIRST_REQUEST_WITHIN: Duration = Duration::from_secs(10);
    const REFUSED: &str = "stepstone_http_connections_refused_total";
    raise_open_files_to(SILENT + 1_024);
    let mut server = Server::start(&tenants_file(&[KEPT], ""));
    let address = server
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("an address")
        .to_owned();
    let began = Instant::now();
    let silent: Vec<TcpStream> = (0..SILENT)
        .map(|n| {
            let mut stream = TcpStream::connect(&address).expect("the kernel accepts");
            if n % 2 == 0 {
                // Kept or closed: either way the write goes to the kernel.
                let _ = stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
            }
            stream
        })
        .collect();
    let connected = Instant::now();
    // The share frees as kept connections reach their first-request time:
    // one share a window of it while the test connects, however slowly.
    let windows = 1 + connected.duration_since(began).as_secs() / FIRST_REQUEST_WITHIN.as_secs();
    let refused_at_least = SILENT - SHARE * windows as usize;
    server.await_metric(REFUSED, refused_at_least as f64, Duration::from_secs(30));
    let open = server.metric("stepstone_http_connections_open");
    assert!(
        open <= (SHARE + 1) as f64,
        "{open} connections held: one source's share, and this scrape"
    );
    let refused = server.metric(REFUSED);

    server.ask_from("127.0.0.2".parse().expect("an address"));
    let started = Instant::now();
    assert_eq!(server.get("/healthz", "").status, 200);
    server.upload(KEPT, "hello");
    let run = json!({"component": "hello", "workflow": "greet", "input": {"name": "Ada"}, "run_id": "spoken"});
    server.post_json("/v1/runs", KEPT, &run).expect(202);
    server.await_state(KEPT, "spoken", "completed");
    let answered_in = started.elapsed();

    let closed_by = connected + FIRST_REQUEST_WITHIN + Duration::from_secs(10);
    let open = silent
        .into_iter()
        .filter(|stream| open_until(stream, closed_by))
        .count();
    assert_eq!(
        open, 0,
        "every silent connection closed within the first request's time"
    );
    assert_eq!(server.metric(REFUSED), refused, "another source was never refused");
    record(
        "5,000 connections from one source that send nothing, or HTTP/2's preface and nothing",
        &format!(
            "{refused} closed unread at accept (the source's share is 256), those kept closed after the 10 s first-request time; another source's /healthz, upload and run answered meanwhile (in {} ms)",
            answered_in.as_millis()
        ),
    );
}

/// The share an operator sets (`--max-connections-per-source`, for a host
/// behind a balancer) is taken from 1 to the total, 8,192; 0 and 8,193
/// are refused naming the range.
#[test]
fn a_share_of_connections_out_of_range_is_refused_naming_it() {
    let host = Host::new();
    for refused in ["0", "8193"] {
        let message = host.run(&["serve", "--max-connections-per-source", refused]).failure();
        assert!(message.contains(&format!("{refused} is not in 1..=8192")), "{message}");
    }
}

/// Whether the host still holds `stream` open at `deadline`: what it sent
/// first (HTTP/2's settings) is read past, and its end (or a reset) is
/// what closed means.
fn open_until(mut stream: &TcpStream, deadline: Instant) -> bool {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left)).expect("a socket");
    match stream.read_to_end(&mut Vec::new()) {
        Ok(_) => false,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

#[test]
fn a_sign_in_that_cannot_go_on_sets_no_cookie() {
    let server = Server::start(&tenants_file(&[KEPT], ""));
    for next in [
        "/ui/runs\r\nSet-Cookie: planted=1",
        "/ui/runs/\u{e9}",
        "https://evil.example/",
    ] {
        let answer = no_redirects()
            .post(format!("{}/ui/login", server.url))
            .form(&[("token", KEPT), ("next", next)])
            .send()
            .expect("an answer");
        assert_eq!(answer.status().as_u16(), 303, "{next:?}");
        assert_eq!(answer.headers()["location"], "/ui/runs", "{next:?}");
        let cookies: Vec<&str> = answer
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect();
        assert!(
            cookies.len() == 1 && cookies[0].starts_with("stepstone_session="),
            "{next:?}: {cookies:?}"
        );
    }
    record(
        "a sign-in whose `next` holds a header break, non-ASCII or another site",
        "sent on to the runs page with its session cookie and nothing else: no 500, no planted header",
    );
}

/// The value of the hidden `csrf` field of a console page.
fn csrf_of(page: &str) -> String {
    let field = page.split(r#"name="csrf" value=""#).nth(1).expect("a csrf field");
    field.split('"').next().expect("its value").to_owned()
}

/// The console's own limits, each at its edge: a token of 256 bytes signs
/// in and one of 257 does not (its hash listed all the same); a workflow
/// filter of 256 bytes is read and one of 257 refused naming the limit; a
/// cancellation's reason is kept to its first 1000 characters.
#[test]
fn the_consoles_inputs_are_held_at_their_edges() {
    let (longest, over) = ("a".repeat(256), "b".repeat(257));
    let server = Server::start(&tenants_file(&[KEPT, &longest, &over], ""));
    let cookie = server.console_session(&longest);
    let refused = no_redirects()
        .post(format!("{}/ui/login", server.url))
        .form(&[("token", over.as_str())])
        .send()
        .expect("an answer");
    assert_eq!(refused.status().as_u16(), 401);
    assert!(
        refused.headers().get("set-cookie").is_none(),
        "no session for 257 bytes"
    );

    let runs_page = |workflow: &str| {
        let answer = no_redirects()
            .get(format!("{}/ui/runs", server.url))
            .query(&[("workflow", workflow)])
            .header("cookie", &cookie)
            .send()
            .expect("an answer");
        (answer.status().as_u16(), answer.text().expect("a page"))
    };
    assert_eq!(runs_page(&"w".repeat(256)).0, 200);
    let (status, page) = runs_page(&"w".repeat(257));
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("no workflow name is longer than 256"), "{page}");

    server.upload(KEPT, "hello");
    let waiting = json!({"component": "hello", "workflow": "await-go", "input": {}, "run_id": "reasoned"});
    server.post_json("/v1/runs", KEPT, &waiting).expect(202);
    let page = no_redirects()
        .get(format!("{}/ui/runs/reasoned", server.url))
        .header("cookie", &cookie)
        .send()
        .and_then(reqwest::blocking::Response::text)
        .expect("the run's page");
    let reason = "\u{e9}".repeat(1001);
    let cancelled = no_redirects()
        .post(format!("{}/ui/runs/reasoned/cancel", server.url))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf_of(&page).as_str()), ("reason", reason.as_str())])
        .send()
        .expect("an answer");
    assert_eq!(cancelled.status().as_u16(), 303);
    let ended = server.get("/v1/runs/reasoned/wait?timeout=30s", KEPT).expect(200);
    assert_eq!(ended["state"], "cancelled", "{ended}");
    assert_eq!(
        ended["reason"],
        "\u{e9}".repeat(512),
        "cut at 1,024 bytes (a pause's limit), at a character's edge"
    );
}

/// A connection to `server` that has sent the head of a POST to the hook
/// at `path` announcing `length` bytes, signed in the scheme's form (now,
/// but forged: nothing of the body is known yet), and none of the body.
fn hook_head_sent(server: &Server, path: &str, length: u64) -> TcpStream {
    let address = server.url.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).expect("the server accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nStepstone-Signature: t={now},sha256={}\r\n\
         Content-Length: {length}\r\nConnection: close\r\n\r\n",
        "0".repeat(64)
    );
    stream.write_all(head.as_bytes()).expect("the head is sent");
    stream
}

/// Strangers' bodies to a tenant's hook (issue 56): a request to a hook
/// there is not, of a tenant that is not, or unsigned, is refused from its
/// head, its body unread; one over the tenant's payload quota 413s from
/// its head; and what is read before a signature can be checked is held
/// in a pool of its own, a source address's share first: a stalled 64 MiB
/// body fills its address's share (a 3-byte one from there is refused
/// 429), and the tenant's own 64 MiB bodies are read all the same. (The
/// stranger's bytes were charged to the tenant, whose next body got 429.)
#[test]
fn strangers_bodies_to_a_hook_are_held_apart_from_the_tenants() {
    const MIB: usize = 1 << 20;
    let host = Host::new().with_env("STEPSTONE_SECRET_KEY", &"5a".repeat(32));
    let server = Server::start_on(host, &tenants_file(&[KEPT], ""));
    server.upload(KEPT, "hello");
    let hook = json!({"component": "hello", "workflow": "echo"});
    let stored = (server.request(reqwest::Method::PUT, "/v1/hooks/orders", KEPT))
        .json(&hook)
        .send()
        .expect("sent");
    assert_eq!(stored.status(), 200);
    let no_key = answer(hook_head_sent(&server, "/hooks/acme/orders", 64 << 20));
    assert_eq!(no_key.0, 404, "no signing key yet, body unread: {}", no_key.1);
    let key = (server.request(reqwest::Method::PUT, "/v1/secrets/hook-signing-key", KEPT))
        .body("whsec_acme")
        .send()
        .expect("sent");
    assert_eq!(key.status(), 204);
    for (path, status, says) in [
        ("/hooks/acme/nothing", 404, "no hook"),
        ("/hooks/initech/orders", 404, "no hook"),
        ("/hooks/acme/orders", 413, "limit of 67108864 bytes"),
    ] {
        let (answered, reply) = answer(hook_head_sent(&server, path, (64 << 20) + 1));
        assert_eq!(answered, status, "{path}: {reply}");
        assert!(reply.contains(says), "{path}: {reply}");
    }
    let (unsigned, reply) = announced(&server, "POST", "/hooks/acme/orders", 64 << 20);
    assert_eq!(unsigned, 401, "unsigned, body unread: {reply}");

    let mut stalled = hook_head_sent(&server, "/hooks/acme/orders", 64 << 20);
    stalled
        .write_all(&vec![b'1'; 64 * MIB - 1])
        .expect("all but its last byte sent");
    within(Duration::from_secs(60), "the stranger's body read whole", || {
        let mut probe = hook_head_sent(&server, "/hooks/acme/orders", 3);
        probe.write_all(b"123").expect("sent");
        let (status, reply) = answer(probe);
        status == 429 && reply.contains("from your address")
    });
    let own = server.post_bytes("/v1/runs/r/signals/s", KEPT, vec![b'1'; 64 * MIB]);
    assert_eq!(own.status, 404, "the tenant's body read whole: {}", own.body);
    stalled.write_all(b"1").expect("its last byte sent");
    let (status, reply) = answer(stalled);
    assert_eq!(status, 401, "read whole, then its signature checked: {reply}");
    record(
        "a stranger's 64 MiB body to a tenant's hook stalled unfinished, requests to unknown hooks and tenants, unsigned or over the quota",
        "the unknown, unsigned and oversized refused from their heads (404, 401, 413), bodies unread; the stalled body held in the anonymous pool within its address's 64 MiB share (a 3-byte body from there 429), and the tenant's own 64 MiB body read whole meanwhile",
    );
}

/// Large bodies read at once are held to the tenant's share of the host's
/// body budget (128 MiB): two signals of 64 MiB being sent hold it, a body
/// of 3 bytes is refused once they are read whole, a third large one with 429 and `Retry-After` as its bytes pass it, and once the
/// two are answered the share is free again.
#[test]
fn large_bodies_being_read_at_once_are_held_to_a_tenants_share() {
    const MIB: usize = 1 << 20;
    let server = Server::start(&tenants_file(&[KEPT], ""));
    let path = "/v1/runs/r/signals/s";
    let held: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut stream = head_sent(&server, "POST", path, 64 << 20);
            stream
                .write_all(&vec![b'1'; 64 * MIB - 1])
                .expect("all but its last byte sent");
            stream
        })
        .collect();
    // The two are read whole once the server has drained what the
    // sockets buffer (tens of MiB on loopback): from then on, any body's
    // third byte passes the share.
    within(Duration::from_secs(60), "the two bodies read whole", || {
        server.post_bytes(path, KEPT, b"123".to_vec()).status == 429
    });
    // The third body is written beside the reading of its answer, which
    // comes as soon as its bytes pass the share.
    let third = head_sent(&server, "POST", path, 64 << 20);
    let mut writer = third.try_clone().expect("a second handle");
    std::thread::spawn(move || {
        for _ in 0..64 {
            if writer.write_all(&vec![b'1'; MIB]).is_err() {
                break;
            }
        }
    });
    let (status, refusal) = answer(third);
    assert_eq!(status, 429, "{refusal}");
    assert!(refusal.to_ascii_lowercase().contains("retry-after: 1"), "{refusal}");
    assert!(
        refusal.contains("134217728 bytes, the most one tenant's may"),
        "{refusal}"
    );
    for mut stream in held {
        stream.write_all(b"1").expect("its last byte sent");
        let (status, answer) = answer(stream);
        assert_eq!(status, 404, "read whole, then no such run: {answer}");
    }
    let again = server.post_bytes(path, KEPT, vec![b'1'; 64 * MIB]);
    assert_eq!(again.status, 404, "the share free again: {}", again.body);
    record(
        "two 64 MiB signals being sent at once by one tenant, then a third",
        "the third refused 429 with Retry-After as its bytes passed the tenant's 128 MiB share of the host's body budget; the two read whole; a 64 MiB body read again once they were answered",
    );
}
